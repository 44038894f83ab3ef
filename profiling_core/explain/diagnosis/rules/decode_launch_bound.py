"""``decode_launch_bound``: the GPU waits on the CPU within each decode token. Read per ``decode::token`` range (the
``record_function`` the causal_lm workload opens around each generated token's forward; a trace of another decode
loop gets this rule when it names its tokens so): the bound rule (``analyses.steps.bound``) applied to the medians of
the tokens of the steady-state steps, with the launch calls per token counted as ``gpu_starved`` counts them per
step. A one-token forward launches a few hundred small kernels, so it is launch-bound long before the step is; the
fix is the one that removes launches per token: a static KV cache and CUDA graphs (torch.compile with
mode='reduce-overhead'). The cost is the CPU time per token less its GPU work, times the tokens of a step, and no more
than the step's CPU time less its GPU work (a step gets no shorter than the GPU work it launches). A step whose steady
state is compute- or copy-bound gets no such verdict: the GPU sets its pace, and work queued before a token keeps the
GPU busy through that token's CPU time."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ....analyses import GPU_PACED, GRAPH_LAUNCHES, annotation_ranges, bound
from ....units import format_share
from ..base import Diagnosis, _Ctx, _cpu_time_cost, _fmt_n, _fmt_us, _gpus_idle, _in_this_app
from .gpu_starved import GPU_IDLE_AT, TOKEN_RANGE, graph_call, launch_call_stats, launch_calls


def _rule_decode_launch_bound(c: _Ctx) -> Optional[Diagnosis]:
    r = c.report
    if not r.has_gpu:
        return None
    tokens = annotation_ranges(c.session, TOKEN_RANGE, shared=c.shared)
    if tokens.empty:
        return None
    ss = r.summary.get("steady_state") or {}
    if ss.get("bound") in GPU_PACED:
        return None  # the GPU sets the step's pace: queued work keeps it busy through the tokens' CPU time
    basis = ss.get("basis_steps") or []
    steady = tokens[tokens["step"].isin(basis)]
    tokens = steady if len(steady) else tokens
    with_gpu = tokens[tokens["gpu_ops"] > 0]
    if with_gpu.empty:
        return None
    cpu, gpu = float(with_gpu["cpu_dur_us"].median()), float(with_gpu["gpu_busy_us"].median())
    if bound(gpu, cpu, len(with_gpu)) != "overhead-bound" or cpu <= 0:
        return None
    idle = max(0.0, 1.0 - gpu / cpu)
    if idle < GPU_IDLE_AT:
        return None
    n_tokens = len(tokens)
    per_step = float(tokens.groupby("step", dropna=False)["slice_id"].count().median())  # (those outside steps: one)
    ops = float(with_gpu["gpu_ops"].median())
    calls = launch_calls(r)
    replaying = 0  # tokens with a graph launch in them
    if len(calls):
        starts = calls["launch_start_ns"].astype("float64").to_numpy()
        graph = calls["launch_name"].isin(GRAPH_LAUNCHES).to_numpy()
        b = tokens["start_ns"].astype("float64").to_numpy()
        e = b + tokens["cpu_dur_us"].to_numpy() * 1000.0
        inside = np.zeros(len(starts), dtype=bool)
        for lo, hi in zip(b, e):
            here = (starts >= lo) & (starts < hi)
            inside |= here
            replaying += bool((here & graph).any())
        calls = calls[inside]
    n_calls, call_us, calls_us, graphs = launch_call_stats(calls, n_tokens)
    # "already replays" only where every token does: tokens that launch kernel by kernel are what a fix would cut
    partial = 0 < replaying < n_tokens
    text = (f"Each decode token waits on the CPU: in steady state a token ({TOKEN_RANGE}, {_fmt_n(per_step)} per step) "
            f"takes {_fmt_us(cpu)} of CPU time and launches {_fmt_us(gpu)} of GPU work ({_fmt_n(ops)} GPU op"
            f"{'s' if ops != 1 else ''}), so {_gpus_idle(r)} {format_share(idle)} of each token.")
    if call_us is not None:
        text += (f" Its {_fmt_n(n_calls)} launch call{'s take' if n_calls != 1 else ' takes'} {_fmt_us(calls_us)} "
                 f"per token in all (median {_fmt_us(call_us)} each).")
    gain = max(0.0, (n_calls - 1) * call_us) if call_us is not None and (not graphs or partial) else None
    if partial:
        text += (f" {replaying} of the {n_tokens} tokens replay a CUDA graph ({graph_call(calls)}); the others launch "
                 "their kernels one by one.")
        fix = (f"{replaying} of the {n_tokens} tokens replay a CUDA graph and the others launch their kernels one by "
               "one: find what changed between them (TORCH_LOGS='recompiles,perf_hints': a recompile for a new "
               "length, a graph skipped for it; a static KV cache keeps every token's shapes the same) and keep every "
               "token on the replayed graph"
               + (f" (the launch calls cost about {_fmt_us(gain)} per token)" if gain else "") + ".")
    elif graphs:
        text += (f" Each token already replays a CUDA graph ({_fmt_n(graphs / n_tokens)} {graph_call(calls)} per "
                 "token).")
        fix = ("The graph replays already; what is left per token is Python around it (the decode loop, sampling, "
               "cache bookkeeping, input copies into the graph's buffers): keep the loop free of .item() and host "
               "syncs, and decode more sequences per batch so each replay does more work.")
    else:
        fix = ("Replay each token's forward as a CUDA graph: a static KV cache (transformers' StaticCache, "
               "generate(..., cache_implementation='static')) keeps every token's "
               "shapes the same, and torch.compile(model.forward, mode='reduce-overhead') then launches each token "
               "as one cudaGraphLaunch"
               + (f" (about {_fmt_us(gain)} per token less in launch calls, from {_fmt_n(n_calls)} calls of "
                  f"{_fmt_us(call_us)})" if gain else "")
               + ". With a dynamic cache the shapes change every token, so no CUDA graph can be reused (a graph "
               "replays fixed shapes; compiled code made for dynamic shapes still launches each kernel). A larger "
               "batch gives each launch more work too." + _in_this_app(c, "the causal_lm workload's cache=static"))
    cost, basis = _cpu_time_cost(
        r, max(0.0, cpu - gpu) * per_step, "CPU time less GPU work per steady-state decode token, times the tokens of "
        "a step: the most that removing the per-token CPU cost can save",
        f"the {_fmt_us(max(0.0, cpu - gpu))} per token ({_fmt_n(per_step)} tokens a step) that the CPU spends beyond "
        "the token's GPU work,")
    return Diagnosis("decode_launch_bound", "Decode tokens are launch-bound (the GPU waits within each token)",
                     text, fix, cost, basis,
                     {"tokens_per_step": per_step, "cpu_us_per_token": cpu, "gpu_us_per_token": gpu,
                      "gpu_idle_share": idle, "gpu_ops_per_token": ops, "launch_calls_per_token": n_calls,
                      "launch_call_us": call_us, "launch_calls_us_per_token": calls_us,
                      "graph_launches_per_token": graphs / n_tokens, "tokens_replaying_graphs": replaying,
                      "graph_launch_gain_us_per_token": gain,
                      "slice_ids": tokens["slice_id"].astype(int).tolist()[:50]})
