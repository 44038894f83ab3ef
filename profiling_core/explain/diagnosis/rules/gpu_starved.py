"""``gpu_starved``: the GPU waits on the CPU. Found by the GPU's idle share of a steady-state step (the one bound rule,
``analyses.steps.steady_state``), whatever the number of launches: one 1 µs kernel in a 375 µs compiled step is as
starved as a hundred tiny eager ones. The finding names where the CPU time goes (the step's top CPU ops by own time:
Dynamo's guards, the compiled region's Python, the dispatcher, a blocking copy, the profiler) and the change that
fits it (a run whose config asked for CUDA graphs, ``cudagraphs_skipped.graph_mode_asked``, and replayed none is sent
to why they were skipped, not told to turn them on); the cost is the CPU time per step less the GPU work per step,
the most any change on the CPU side can save."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ....analyses import DATA_WAIT_AT, GRAPH_LAUNCHES, annotation_ranges, data_wait, is_data_loader_next
from ....analyses._shared import union_ns
from ....units import format_share
from ...questions import blocked_in
from ..base import Diagnosis, _Ctx, _fmt_n, _fmt_us, _gpus_idle, _other_steps_empty
from .cudagraphs_skipped import TITLE as SKIPPED_TITLE, graph_mode_asked, graphs_skipped
from .input_bound import loader_ranges

TOKEN_RANGE = "decode::token"
"""The range that marks one decode token (the causal_lm workload's ``record_function``; ``decode_launch_bound``)."""

GPU_IDLE_AT = 0.5
"""The share of a steady-state step the GPU idles at or above which the steps are GPU-starved."""
LAUNCHES_DOMINATE = 0.25
"""Share of the step the launch calls must take (their count times their median duration, so that one call that
blocked does not count as launch cost) for the rule to recommend fewer launches first."""
TOP_CPU_OPS = 5
_LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "hipLaunchKernel",
                 "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", *GRAPH_LAUNCHES, "cudaMemcpyAsync",
                 "hipMemcpyAsync", "hipMemcpyWithStream", "cudaMemsetAsync", "hipMemsetAsync")
"""The calls that launch GPU work, of both runtimes: kernels, graphs, copies (ROCm's ``hipMemcpyWithStream`` is the
copy call torch makes where CUDA's is ``cudaMemcpyAsync``) and memsets."""
_BLOCKING = ("cudaMemcpyAsync", "cudaMemcpy", "cudaStreamSynchronize", "cudaDeviceSynchronize",
             "cudaEventSynchronize", "hipMemcpyWithStream", "hipMemcpy", "hipStreamSynchronize", "hipDeviceSynchronize",
             "aten::item", "aten::_local_scalar_dense")
_COMPILED = ("TorchDynamo Cache Lookup", "Torch-Compiled Region")
_OP_CATEGORIES = ("cpu_op", "operator", "cuda_runtime", "cuda_driver", "runtime", "driver")
"""The CPU slices that are ops or calls (ATen ops, runtime and driver calls; lower case, the 2021 format's
``Operator`` and ``Runtime`` too), as against Python frames and ``record_function`` ranges."""
PYTHON_DOMINATES = 0.5
"""Share of the step its thread must spend in no op (:func:`_outside_ops_us`: Python that runs no op) for the rule to
send the user to that code first: fewer launches do not shorten it."""
PYTHON_FLOOR_US = 1000.0
"""...and at least this much of it per step: below, the Python is the loop's own fixed cost per iteration (the call
of the step, the profiler's step, a few µs of each record_function), which more work per step amortises."""


BESIDE_NOTED_AT = 0.05
"""Share of the step's CPU time the threads beside it (no step slice, no launch call) must spend for the finding to
name them: below, their time is the profiler's and the runtime's background."""


def launch_calls(report):
    """The launch calls of the trace (``_LAUNCH_CALLS``: kernel, graph, copy and memset launches), each once, from
    ``report.launch_latency``."""
    lat = report.launch_latency
    return lat[lat["launch_name"].isin(_LAUNCH_CALLS)].drop_duplicates("launch_id") if not lat.empty else lat


def graph_call(calls) -> str:
    """The graph launch call these launch calls use most (``cudaGraphLaunch``, ROCm's ``hipGraphLaunch``, the driver
    API's ``cuGraphLaunch``): how a text names the replays it counts."""
    names = calls.loc[calls["launch_name"].isin(GRAPH_LAUNCHES), "launch_name"].astype(str) if len(calls) else ()
    return names.value_counts().index[0] if len(names) else GRAPH_LAUNCHES[0]


def launch_call_stats(calls, units: int) -> tuple[float, Optional[float], float, int]:
    """(calls per unit, median µs per call or None, µs of calls per unit, graph launches) of these launch
    calls spread over ``units`` steps (or decode tokens)."""
    n = max(1, units)
    if not len(calls):
        return 0.0, None, 0.0, 0
    return (len(calls) / n, float(calls["launch_dur_us"].median()), float(calls["launch_dur_us"].sum()) / n,
            int(calls["launch_name"].isin(GRAPH_LAUNCHES).sum()))


def _cpu_time_by_op(report, steps: list[int], beside: bool = False) -> list[tuple[str, float, float]]:
    """(name, median own time per step, median autograd wait per step) of the CPU slices of ``steps`` on the threads
    that run the steps (``report.cpu_own_times`` less its ``beside_us``: the step slice's thread, and those that make
    its launch calls, such as the autograd engine's, as the launch figures count its launches; a thread's wait for
    that engine is not its own time), largest own time first (the step slices themselves excluded: their own time is
    what no op of the step accounts for). With ``beside``, the own time of the threads beside the steps instead
    (waits 0)."""
    own = report.cpu_own_times
    own = own[own["step"].isin(steps)] if len(own) else own
    n = max(1, own["step"].nunique()) if len(own) else 1
    per: dict[str, tuple[list[float], list[float]]] = {}
    aside = own["beside_us"].tolist() if "beside_us" in own else [0.0] * len(own)
    waits = own["wait_us"].tolist() if "wait_us" in own and not beside else [0.0] * len(own)
    for name, us, b, w in zip(own["name"].astype(str).tolist(), own["own_us"].tolist(), aside, waits):
        a, c = per.setdefault(name, ([], []))
        a.append(float(b) if beside else float(us) - float(b))
        c.append(float(w))
    pad = lambda v: v + [0.0] * (n - len(v))  # noqa: E731 (a step without the op: 0 for it)
    out = [(name, float(np.median(pad(a))), float(np.median(pad(c)))) for name, (a, c) in per.items()]
    return sorted(out, key=lambda kv: -kv[1])


def _beside_us(report, steps: list[int]) -> float:
    """The median, over ``steps``, of the own time of the threads beside each step (``cpu_own_times``' ``beside_us``:
    no step slice and no launch call of the step on them)."""
    own = report.cpu_own_times
    if not len(own) or "beside_us" not in own:
        return 0.0
    per = own[own["step"].isin(steps)].groupby("step")["beside_us"].sum()
    return float(np.median(per.to_numpy().tolist() + [0.0] * (len(set(steps)) - len(per)))) if len(steps) else 0.0


def _uncovered_us(g, b: int, e: int, cover) -> float:
    """The µs of the window [b, e) (ns) that the rows ``cover`` of a dispatch chain (``start_ns``, ``dur_us``) leave
    uncovered."""
    lo = np.clip(cover["start_ns"].to_numpy(dtype=np.int64), b, e)
    hi = np.clip(lo + np.round(cover["dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64), b, e)
    return (e - b - (union_ns(lo, hi) if len(lo) else 0)) / 1000.0


def _step_windows(report, steps: list[int]):
    """(step, its chain's CPU rows, the step slice's row, window start ns, window end ns) for each of ``steps`` that
    has a dispatch chain (the step slice is its chain's root, depth 0)."""
    ch = report.dispatch_chains
    if ch.empty:
        return
    ch = ch[(ch["lane"] == "cpu") & ch["step"].isin(steps)]
    for step, g in ch.groupby("step", sort=False):
        top = g[g["depth"] == 0]
        if top.empty:
            continue
        b = int(top["start_ns"].iloc[0])
        yield step, g, top.iloc[0], b, b + int(round(float(top["dur_us"].iloc[0]) * 1000))


def _step_thread_launches(report, steps: list[int], calls) -> bool:
    """Whether each of ``steps``' own thread (the step slice's) made at least half of that step's launch calls
    (``calls``): the loop runs there. Where it does not (the step slice recorded on a thread, or under a process id,
    of its own, as in HTA's Triton example), the step thread's time outside its ops is not the loop's Python."""
    launched = calls.groupby("step")["launch_id"].nunique() if len(calls) else None
    for step, g, _top, _b, _e in _step_windows(report, steps):
        mine = int(g["name"].astype(str).isin(_LAUNCH_CALLS).sum())
        if launched is not None and mine * 2 < int(launched.get(step, 0)):
            return False
    return True


def _outside_ops_us(report, steps: list[int]) -> Optional[float]:
    """The median, over ``steps``, of the time of a step's window that its own thread (the step slice's) spent in no
    op: covered by no ATen op, no runtime or driver call and no DataLoader batch (Python frames and ``record_function``
    ranges do not cover it: that is Python that runs no op, the loop's own code or the model's Python between its
    ops, and with with_stack the profiler's own recording of it), less the thread's wait for the autograd engine's
    thread (the chains' ``wait_us`` of the slices that are no op). For steps whose thread is where the loop runs
    (:func:`_step_thread_launches`); None without chains."""
    out = []
    for step, g, _top, b, e in _step_windows(report, steps):
        names = g["name"].astype(str)
        ops = (g["category"].astype(str).str.lower().isin(_OP_CATEGORIES).to_numpy()
               | names.map(is_data_loader_next).to_numpy())
        # the thread's wait for the autograd engine's (the backward's ops run there) lies in a range's or the step's
        # own time: a wait, not Python
        waited = float(g.loc[~ops, "wait_us"].astype(float).sum()) if "wait_us" in g else 0.0
        out.append(max(0.0, _uncovered_us(g, b, e, g[ops]) - waited))
    return float(np.median(out)) if out else None


def _step_own_us(report, steps: list[int]) -> float:
    """The median own time of the step slices of ``steps``: the chains' ``own_us`` of the step slice (the profiler
    table's rule: its duration less its children's, or, where Python frames recorded with with_stack hold it rather
    than lie under it, less the frames and ops below the frames around it), less its wait for the autograd engine's
    thread; 0 without chains."""
    own = [max(0.0, float(top["own_us"])) for _step, _g, top, _b, _e in _step_windows(report, steps)]
    return float(np.median(own)) if own else 0.0


def _has_python_frames(session) -> bool:
    """Whether the trace holds Python frames (``python_function`` slices: recorded with ``with_stack=True``)."""
    return any(isinstance(u, str) and u.lower() == "python_function" for u in session.tables.category.uniq)


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
    where = ", ".join(f"{name if len(name) <= 60 else name[:59] + '…'} {_fmt_us(us)}"
                      + (f" (and {_fmt_us(w)} waiting for the autograd engine's thread, counted there)"
                         if w > 0 else "") for name, us, w in top if us > 0)
    wait = float(ss.get("sync_wait_us_per_step") or 0.0)
    blocked = (f", {_fmt_us(wait)} of it blocked in {blocked_in(r.steps, ss)} while the GPU worked," if wait > 0
               else "")
    # one step with work beside empty ones (analyses.working_steps) is no steady state: say which step it is
    scope = (f"in the only step with work in it (step {basis[0]}; {_other_steps_empty(r)}) the step takes"
             if ss.get("empty_steps") and len(basis) == 1 else "in steady state a step takes")
    text = (f"The GPU waits on the CPU: {scope} {_fmt_us(cpu)} of CPU time{blocked} and "
            f"launches {_fmt_us(gpu)} of GPU work ({_fmt_n(per_step_ops)} GPU op{'s' if per_step_ops != 1 else ''} per "
            f"step), so {_gpus_idle(r)} {format_share(idle)} of " + ("the CPU's own time." if wait > 0 else "it."))
    on_loop = _step_thread_launches(r, basis, calls)  # (else the step thread's idle time is not the loop's)
    step_own = _step_own_us(r, basis) if on_loop else None
    if where:
        listed = sum(us for _name, us, _w in top) + (step_own or 0.0)
        text += (f" Where the CPU time goes (own time per step on the threads that run the step, largest first): "
                 f"{where}"
                 + (f"; not listed, the step slice's own time outside every op of its thread: {_fmt_us(step_own)}"
                    if step_own else "") + "."
                 + (f" These threads (the step's own and those that launch its work) run side by side: together "
                    f"{_fmt_us(listed)}, more than the step's {_fmt_us(cpu)}." if listed > 1.01 * cpu else ""))
    aside = _beside_us(r, basis)
    if aside >= BESIDE_NOTED_AT * cpu and aside > 0:
        name, us, _w = _cpu_time_by_op(r, basis, beside=True)[0]
        text += (f" Other threads, which hold no step and launch nothing (a DataLoader's pin-memory or queue threads, "
                 f"idle threads), spent {_fmt_us(aside)} per step beside it, most in "
                 f"{name if len(name) <= 60 else name[:59] + '…'} ({_fmt_us(us)}): time that overlaps the step's, not "
                 "a cost of it.")
    if call_us is not None:
        text += (f" The {_fmt_n(n_calls)} launch call{'s take' if n_calls != 1 else ' takes'} {_fmt_us(calls_us)} per "
                 f"step in all (median {_fmt_us(call_us)} each).")
    # "already replays" only where every steady-state step does: steps that fall back to launching kernel by kernel
    # (a recompile for a new shape, graphs skipped) are no replays, and their launches are what a fix would cut
    replaying = int(calls.loc[calls["launch_name"].isin(GRAPH_LAUNCHES), "step"].nunique()) if graphs else 0
    partial = 0 < replaying < len(basis)
    if partial:
        graphs = 0  # (the launch figures and fixes below then read as for steps without graphs)
        text += (f" {replaying} of the {len(basis)} steps replay a CUDA graph ({graph_call(calls)}); the others "
                 "launch their kernels one by one.")
    elif graphs:
        text += (f" The step already replays a CUDA graph ({_fmt_n(graphs / max(1, len(basis)))} {graph_call(calls)} "
                 "per step).")
    names = [n for n, _us, _w in top]
    compiled = any(n.startswith(_COMPILED) for n, _us, _w in _cpu_time_by_op(r, basis))
    gain = max(0.0, (n_calls - 1) * call_us) if call_us is not None and not graphs else None
    outside = _outside_ops_us(r, basis) if on_loop else None
    asked = graph_mode_asked(c.config)  # a mode that replays CUDA graphs, from the run's config (None without)
    dw = data_wait(r.steps)  # the input rule's own test: the pointer only where that rule speaks
    # ...and where the batch wait is the largest of the loop's costs that a fix below would name first: its Python in
    # no op, its launch calls, a blocking call (by own time). Not by the top op's own time alone: with with_stack the
    # wait's own time is the Python frames' under the DataLoader's range (a lock's acquire), and other threads' own
    # time (a queue's feeder waiting) runs beside the step
    rivals = [outside or 0.0, calls_us] + [us for n, us, _w in top[:1] if n in _BLOCKING]
    if dw["share"] is not None and dw["share"] >= DATA_WAIT_AT and dw["data_us_per_step"] >= max(rivals):
        which = (loader_ranges(r, dw["steps"]) or ["enumerate(DataLoader)#...__next__"])[0]
        fix = (f"The step's largest CPU cost is waiting for its batch: {_fmt_us(dw['data_us_per_step'])} per step "
               f"inside the DataLoader's {which} on average ({format_share(dw['share'])} of the CPU time): see *The "
               "step waits for its batch* for what makes the batches while the step runs. Fewer launches or a CUDA "
               "graph come after that.")
    elif outside is not None and outside >= max(PYTHON_DOMINATES * cpu, PYTHON_FLOOR_US):
        find = ("this trace recorded its Python frames (with_stack=True): the profiler table's Python rows say "
                "where it goes (a frame's self time is the interpreter's own, outside any op; their recording adds "
                "to it)" if _has_python_frames(c.session) else
                "wrap parts of the loop in torch.profiler.record_function (or profile once with with_stack=True, "
                "whose own recording then adds to it)")
        fix = (f"Most of the step is Python that runs no op: its thread spent {_fmt_us(outside)} of the step's "
               f"{_fmt_us(cpu)} in no ATen op, launch or other runtime call; fewer launches do not shorten that. Find "
               f"out what it is first: {find}. Building a batch sample by sample, "
               "tokenizing, logging or Python arithmetic on values belong out of the step (in a DataLoader's worker "
               "processes, or once before the loop) or in tensor ops on whole batches; the model's own Python "
               "between its ops is what torch.compile removes.")
    elif names and names[0] in _BLOCKING:
        fix = (f"The largest CPU cost is {names[0]}, a call that waits for the GPU or for a copy: see the "
               "synchronisation and copies finding; pinned inputs copied with non_blocking=True ahead of the step, and "
               "no .item() in the hot loop, let the CPU queue the next work instead.")
    elif partial:
        fix = (f"{replaying} of the {len(basis)} steady-state steps replay a CUDA graph and the others launch their "
               "kernels one by one: find what changed between them (TORCH_LOGS='recompiles,perf_hints': a recompile "
               "for a new shape or value, a graph skipped for it) and keep every step on the replayed graph"
               + (f" (the launch calls cost about {_fmt_us(gain)} per step)" if gain else "") + ".")
    elif asked and not graphs:  # the run's own config: graphs asked for, none replayed
        fix = (f"This run already asked torch.compile for mode='{asked}', which replays the compiled step as a CUDA "
               "graph (one launch, no Python per kernel), and its steady-state steps replay none (no "
               "cudaGraphLaunch): Inductor skipped the graphs, so each kernel is launched from the CPU. "
               + (f"See *{SKIPPED_TITLE}* for why it skips them and how to find out (TORCH_LOGS='perf_hints'); "
                  if graphs_skipped(c) else
                  "Run with TORCH_LOGS='perf_hints' to see why ('skipping cudagraphs due to ...': an input mutated "
                  "in place such as a KV cache written by the step, dynamic shapes, CPU tensors); ")
               + "once they replay, give each step more work (a larger batch) and keep guards cheap (no Python "
               "scalars or changing shapes passed in).")
    elif call_us is not None and n_calls * call_us >= LAUNCHES_DOMINATE * cpu and not graphs:
        fix = ("Cut the launches: torch.compile fuses kernels (mode='default'), and mode='reduce-overhead' replays "
               f"the step as one CUDA graph (about {_fmt_us(gain)} per step less in launch calls, from "
               f"{_fmt_n(n_calls)} calls of {_fmt_us(call_us)}); or give each launch more work (a larger batch). "
               "Measure it: graph replay has its own per-call cost (input copies, checks).")
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
    if ("reduce-overhead" in fix and not asked
            and not annotation_ranges(c.session, TOKEN_RANGE, shared=c.shared).empty):
        fix = ("This loop decodes token by token (decode::token ranges): a CUDA graph replays fixed shapes, so its KV "
               "cache must be a static one (see *Decode tokens are launch-bound*). " + fix)
    return Diagnosis("gpu_starved", "The GPU waits on the CPU (GPU-starved steps)", text, fix, max(0.0, cpu - gpu),
                     "CPU time less GPU work per steady-state step: the most that any change on the CPU side can save",
                     {"gpu_idle_share": idle, "cpu_step_us": cpu, "gpu_busy_us": gpu, "basis_steps": basis,
                      "gpu_ops_per_step": per_step_ops, "launch_calls_per_step": n_calls, "launch_call_us": call_us,
                      "launch_calls_us_per_step": calls_us, "graph_launch_gain_us": gain,
                      "top_cpu_ops": [{"name": n, "us_per_step": us, "autograd_wait_us_per_step": w}
                                      for n, us, w in top],
                      "step_slice_own_us": step_own, "beside_us_per_step": aside,
                      "slice_ids": st["slice_id"].astype(int).tolist()[:50]})
