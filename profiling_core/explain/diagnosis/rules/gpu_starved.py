"""``gpu_starved``: the GPU waits on the CPU. Found by the GPU's idle share of a steady-state step (the one bound rule,
``analyses.steps.steady_state``), whatever the number of launches: one 1 µs kernel in a 375 µs compiled step is as
starved as a hundred tiny eager ones. The finding names where the CPU time goes (the step's top CPU ops by own time:
Dynamo's guards, the compiled region's Python, the dispatcher, a blocking copy, the profiler) and the change that
fits it; the cost is the CPU time per step less the GPU work per step, the most any change on the CPU side can save."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...questions.base import _self_times_by_step
from ..base import Diagnosis, _Ctx, _fmt_us

GPU_IDLE_AT = 0.5
"""The share of a steady-state step the GPU idles at or above which the steps are GPU-starved."""
LAUNCHES_DOMINATE = 0.25
"""Share of the step the launch calls must take (their count times their median duration, so that one call that
blocked does not count as launch cost) for the rule to recommend fewer launches first."""
TOP_CPU_OPS = 5
_LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "hipLaunchKernel",
                 "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync",
                 "cudaMemsetAsync")
_BLOCKING = ("cudaMemcpyAsync", "cudaMemcpy", "cudaStreamSynchronize", "cudaDeviceSynchronize",
             "cudaEventSynchronize", "hipMemcpyWithStream", "hipMemcpy", "hipStreamSynchronize", "hipDeviceSynchronize",
             "aten::item", "aten::_local_scalar_dense")
_COMPILED = ("TorchDynamo Cache Lookup", "Torch-Compiled Region")


def launch_calls(report):
    """The launch calls of the trace (``_LAUNCH_CALLS``: kernel, graph, copy and memset launches), each once, from
    ``report.launch_latency``."""
    lat = report.launch_latency
    return lat[lat["launch_name"].isin(_LAUNCH_CALLS)].drop_duplicates("launch_id") if not lat.empty else lat


def launch_call_stats(calls, units: int) -> tuple[float, Optional[float], float, int]:
    """(calls per unit, median µs per call or None, µs of calls per unit, cudaGraphLaunch calls) of these launch
    calls spread over ``units`` steps (or decode tokens)."""
    n = max(1, units)
    if not len(calls):
        return 0.0, None, 0.0, 0
    return (len(calls) / n, float(calls["launch_dur_us"].median()), float(calls["launch_dur_us"].sum()) / n,
            int((calls["launch_name"] == "cudaGraphLaunch").sum()))


def _cpu_time_by_op(report, steps: list[int]) -> list[tuple[str, float, float]]:
    """(name, median own time per step, median autograd wait per step) of the CPU slices of ``steps`` on every thread
    (``report.cpu_own_times``: the autograd engine's thread too, as the launch figures count its launches; a
    thread's wait for that engine is not its own time), largest own time first (the step slices themselves
    excluded: their own time is what no op of the step accounts for)."""
    own = report.cpu_own_times
    own = own[own["step"].isin(steps)] if len(own) else own
    n = max(1, own["step"].nunique()) if len(own) else 1
    per: dict[str, tuple[list[float], list[float]]] = {}
    waits = own["wait_us"].tolist() if "wait_us" in own else [0.0] * len(own)
    for name, us, w in zip(own["name"].astype(str).tolist(), own["own_us"].tolist(), waits):
        a, b = per.setdefault(name, ([], []))
        a.append(float(us))
        b.append(float(w))
    pad = lambda v: v + [0.0] * (n - len(v))  # noqa: E731 (a step without the op: 0 for it)
    out = [(name, float(np.median(pad(a))), float(np.median(pad(b)))) for name, (a, b) in per.items()]
    return sorted(out, key=lambda kv: -kv[1])


def _step_own_us(report, steps: list[int]) -> float:
    """The median own time of the step slices of ``steps`` (their duration less their children's and less their
    wait for the autograd engine's thread: the dispatch chains' self times), 0 without chains."""
    ch = report.dispatch_chains
    if ch.empty:
        return 0.0
    by_step = _self_times_by_step(ch, steps)
    own = [float(g.loc[g["name"] == "ProfilerStep*", "self_us"].sum()) for g in by_step.values()]
    return float(np.median(own)) if own else 0.0


def _rule_gpu_starved(c: _Ctx) -> Optional[Diagnosis]:
    r = c.report
    ss = r.summary.get("steady_state") or {}
    if not r.has_gpu or ss.get("bound") != "overhead-bound" or (ss.get("gpu_idle_share") or 0) < GPU_IDLE_AT:
        return None
    cpu, gpu, idle = float(ss["cpu_us_per_step"]), float(ss["gpu_us_per_step"]), float(ss["gpu_idle_share"])
    basis = ss["basis_steps"]
    st = r.steps[r.steps["step"].isin(basis)]
    per_step_ops = float(st["gpu_ops"].median()) if len(st) else 0.0
    calls = launch_calls(r)
    calls = calls[calls["step"].isin(basis)] if len(calls) else calls
    n_calls, call_us, calls_us, graphs = launch_call_stats(calls, len(basis))
    top = _cpu_time_by_op(r, basis)[:TOP_CPU_OPS]
    where = ", ".join(f"{name[:60]} {_fmt_us(us)}" + (f" (and {_fmt_us(w)} waiting for the autograd engine's "
                                                       "thread, counted there)" if w > 0 else "")
                      for name, us, w in top if us > 0)
    wait = float(ss.get("sync_wait_us_per_step") or 0.0)
    blocked = (f", {_fmt_us(wait)} of it blocked in synchronize calls while the GPU worked," if wait > 0 else "")
    # one step with work beside empty ones (analyses.working_steps) is no steady state: say which step it is
    scope = (f"in the only step with work in it (step {basis[0]}; the other steps are empty) the step takes"
             if ss.get("empty_steps") and len(basis) == 1 else "in steady state a step takes")
    text = (f"The GPU waits on the CPU: {scope} {_fmt_us(cpu)} of CPU time{blocked} and "
            f"launches {_fmt_us(gpu)} of GPU work ({per_step_ops:g} GPU op{'s' if per_step_ops != 1 else ''} per "
            f"step), so the GPU idles {idle:.0%} of " + ("the CPU's own time." if wait > 0 else "it."))
    if where:
        step_own = _step_own_us(r, basis)
        text += (f" Where the CPU time goes (own time per step, largest first): {where}"
                 + (f"; not listed, the step slice's own time outside every op of its thread: {_fmt_us(step_own)}"
                    if step_own > 0 else "") + ".")
    if call_us is not None:
        text += (f" The {n_calls:g} launch call{'s take' if n_calls != 1 else ' takes'} {_fmt_us(calls_us)} per "
                 f"step in all (median {_fmt_us(call_us)} each).")
    if graphs:
        text += f" The step already replays a CUDA graph ({graphs / max(1, len(basis)):g} cudaGraphLaunch per step)."
    names = [n for n, _us, _w in top]
    compiled = any(n.startswith(_COMPILED) for n, _us, _w in _cpu_time_by_op(r, basis))
    gain = max(0.0, (n_calls - 1) * call_us) if call_us is not None and not graphs else None
    if names and names[0] in _BLOCKING:
        fix = (f"The largest CPU cost is {names[0]}, a call that waits for the GPU or for a copy: see the "
               "synchronisation and copies finding; pinned inputs copied with non_blocking=True ahead of the step, and "
               "no .item() in the hot loop, let the CPU queue the next work instead.")
    elif call_us is not None and n_calls * call_us >= LAUNCHES_DOMINATE * cpu and not graphs:
        fix = ("Cut the launches: torch.compile fuses kernels (mode='default'), and mode='reduce-overhead' replays "
               f"the step as one CUDA graph (about {_fmt_us(gain)} per step less in launch calls, from "
               f"{n_calls:g} calls of {_fmt_us(call_us)}); or give each launch more work (a larger batch). Measure "
               "it: graph replay has its own per-call cost (input copies, checks).")
    elif compiled and not graphs:
        fix = ("The compiled step's own Python and guards cost more than its GPU work: "
               "torch.compile(mode='reduce-overhead') replays it as a CUDA graph (one launch, no Python per kernel); "
               "give each step more work (a larger batch, several micro-steps per call); keep guards cheap (no "
               "Python scalars or changing shapes passed in, torch._dynamo.config.cache_size_limit for recompiles).")
    elif graphs:  # capturing a graph is done: what is left is the CPU work around the replays
        fix = ("The step already replays CUDA graphs; what keeps the GPU waiting is the CPU work around the replays "
               "(the Python of the loop, the ops outside the graph, the copies into its static inputs, host syncs): "
               "move that work into the captured region or out of the loop, and give each replay more work (a larger "
               "batch); the profiler table's CPU self time, sorted, names it.")
    else:
        fix = ("Give each step more GPU work (a larger batch or size per call) and fewer Python-level ops; capture the "
               "step as a CUDA graph (torch.compile(mode='reduce-overhead'), or torch.cuda.graphs) so it launches once; "
               "the profiler table's CPU self time, sorted, names the rest"
               + (f" (fewer launches alone save about {_fmt_us(gain)} per step)" if gain else "") + ".")
    return Diagnosis("gpu_starved", "The GPU waits on the CPU (GPU-starved steps)", text, fix, max(0.0, cpu - gpu),
                     "CPU time less GPU work per steady-state step: the most that any change on the CPU side can save",
                     {"gpu_idle_share": idle, "cpu_step_us": cpu, "gpu_busy_us": gpu, "basis_steps": basis,
                      "gpu_ops_per_step": per_step_ops, "launch_calls_per_step": n_calls, "launch_call_us": call_us,
                      "launch_calls_us_per_step": calls_us, "graph_launch_gain_us": gain,
                      "top_cpu_ops": [{"name": n, "us_per_step": us, "autograd_wait_us_per_step": w}
                                      for n, us, w in top],
                      "slice_ids": st["slice_id"].astype(int).tolist()[:50]})
