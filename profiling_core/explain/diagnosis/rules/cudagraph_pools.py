"""``cudagraph_pools``: a run that replays CUDA graphs (``torch.compile(mode='reduce-overhead')``, or
``torch.cuda.graphs``), with memory events: each captured graph keeps a private memory pool for its tensors, reserved
between replays, and a replay allocates nothing the profiler records, so the trace's ``[memory]`` events show only
the work outside the graphs.

Graphs are in use where the trace launches GPU work with ``cudaGraphLaunch`` (``base._graph_replays``; whatever the config says: ``cudagraphs_skipped``
covers a run that asked and got none); the rule speaks where the trace has memory events on a GPU (to say what the
pools hold against what the tensors use) or where the trace was recorded with memory (``analyses.recorded_with``) and got no event at all (every
allocation then happened in the pools, or before the window: the run's ``max_memory_allocated`` is the only
figure)."""
from __future__ import annotations

from ....analyses import compile_in_measured_steps, recorded_with
from ....analyses.memory import device_of
from ....config import config_field as _cfg
from ....units import human_bytes
from ..base import Diagnosis, _Ctx, _fmt_n, _graph_replays
from .cudagraphs_skipped import graph_mode_asked


def _rule_cudagraph_pools(c: _Ctx) -> Diagnosis | None:
    r, m = c.report, c.report.memory
    graphs = _graph_replays(r)
    if not graphs:
        return None
    gpu = m.peaks[m.peaks["device"].map(device_of) != "cpu"]
    recorded_nothing = not m.has_events and recorded_with("profile_memory", r.summary.get("recorded_with"), c.config)
    if gpu.empty and not recorded_nothing:
        return None
    # per step as question 9 counts them: the median over the steady state's steps (replays outside the steps,
    # a warm-up or an evaluation loop recorded without step slices, count in the trace's total only)
    cb = compile_in_measured_steps(r)
    per_step = float(cb["graph_launches"].median()) if len(cb) else float("nan")
    mode = _cfg(c.config, "compile")
    asked = graph_mode_asked(c.config)  # a torch.compile mode that replays CUDA graphs (reduce-overhead, max-autotune)
    why = f" (mode='{asked}')" if asked else ""
    text = (f"This run replays CUDA graphs{why}: {graphs} cudaGraphLaunch call{'s' if graphs != 1 else ''} in the "
            "trace" + (f" (a median {_fmt_n(per_step)} per step)" if per_step == per_step else "")
            + ". Each captured graph keeps a private pool for its tensors, reserved "
            "between replays, and a replay allocates nothing the profiler records")
    if gpu.empty:
        text += (": this trace was recorded with profile_memory=True and its steps made no [memory] event at all, so "
                 "the trace cannot say what the pools hold"
                 + (f"; the process's own peak was {human_bytes(c.process_peak_bytes)} (max_memory_allocated)."
                    if c.process_peak_bytes is not None else "."))
        ev = {"graph_launches": graphs, "graph_launches_per_step": per_step, "memory_events": 0,
              "process_peak_bytes": c.process_peak_bytes, "compile_mode": mode}
        return Diagnosis("cudagraph_pools", "CUDA graphs keep private memory pools", text, _FIX, None,
                         "memory, not time: the pools are reserved while the graphs live", ev)
    pk = gpu.sort_values("peak_allocated_bytes", ascending=False).iloc[0]
    text += f": the [memory] events of {pk['device']} ({int(pk['events'])} of them) are the work outside the graphs."
    if pk["reserved_at_peak_bytes"] == pk["reserved_at_peak_bytes"]:
        text += (f" At the peak the allocator holds {human_bytes(pk['reserved_at_peak_bytes'])} against "
                 f"{human_bytes(pk['peak_allocated_bytes'])} allocated: the {human_bytes(pk['gap_at_peak_bytes'])} "
                 "between them includes the pools.")
    fix = _FIX
    ev = {"graph_launches": graphs, "graph_launches_per_step": per_step, "device": pk["device"],
          "memory_events": int(pk["events"]), "peak_allocated_bytes": int(pk["peak_allocated_bytes"]),
          "reserved_at_peak_bytes": None if pk["reserved_at_peak_bytes"] != pk["reserved_at_peak_bytes"]
          else float(pk["reserved_at_peak_bytes"]), "compile_mode": mode}
    return Diagnosis("cudagraph_pools", "CUDA graphs keep private memory pools", text, fix, None,
                     "memory, not time: the pools are reserved while the graphs live", ev)


_FIX = ("Count the pools before cutting them: torch.cuda.memory_stats() and torch.cuda.memory._snapshot() list "
        "the segments of each pool. Every input shape captures its own graph: keep shapes static (pad to a few "
        "sizes) or mark the dynamic ones, so few graphs are captured; cudagraph trees (torch._inductor.config."
        "triton.cudagraph_trees, the default) share one pool across a tree's graphs. Where memory is the limit, "
        "mode='max-autotune-no-cudagraphs' or mode='default' gives the pools back, at the cost of the launches "
        "the graphs saved.")
