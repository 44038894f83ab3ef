"""What the roofline and every rule share: the :class:`Diagnosis` a rule returns, the context a rule reads
(``_Ctx``: the report, the session, the run's config, the peaks, the roofline rows, the compute capability) and the
per-step helpers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from ...analyses import GPU_PACED, GRAPH_LAUNCHES, STARVED_AT, Report, measured_steps, steady_state, working_steps
from ...store.peaks import DevicePeaks
from ...units import format_count as _fmt_n  # (a count per step: 1e+06 never, see format_count)
from ..questions.base import _app_run


@dataclass(frozen=True)
class Diagnosis:
    """One thing to change, found in the trace."""

    rule: str
    """The rule's id, e.g. ``fp32_without_tf32``."""
    title: str
    text: str
    """What is wrong, with the numbers it rests on."""
    fix: str
    """The PyTorch change that addresses it."""
    cost_us_per_step: Optional[float] = None
    """What it costs per step, measured or bounded as ``cost_basis`` says; None where it cannot be measured."""
    cost_basis: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    """Slice ids (``slice_ids``) and the numbers used."""

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "title": self.title, "text": self.text, "fix": self.fix,
                "cost_us_per_step": self.cost_us_per_step, "cost_basis": self.cost_basis, "evidence": self.evidence}


@dataclass(frozen=True)
class _Ctx:
    report: Report
    session: Any
    config: Any
    peaks: Optional[DevicePeaks]
    roof: pd.DataFrame
    compute_capability: Optional[float]
    process_peak_bytes: Optional[int] = None
    """The process's own peak of allocated device memory (a run's meta.json ``peak_device_memory_bytes``,
    ``torch.cuda.max_memory_allocated()``), None where unknown (an imported trace, a CPU run)."""
    shared: Any = None
    """The session's ``analyses.Shared`` for the whole diagnosis: every rule that calls an analysis passes it, so
    the launch pairs, step windows and phase ranges are computed once, not once per call."""


def _in_this_app(c: "_Ctx", setting: str, knob: Optional[str] = None) -> str:
    """`` In this app: <setting>.``: the app's setting that makes a fix, on a run of this app
    (``questions.base._app_run``); "" on a trace another program wrote, which has no such setting, and where the
    setting is a workload's ``knob`` that the run's workload lacks or does not apply to its values (a ``script``
    run's own optimizer, its ``train`` off: the app refuses its ``impl`` knob then)."""
    if not _app_run(c.report, c.config):
        return ""
    if knob is not None:
        from ...config import as_config
        from ...workloads import get_workload
        cfg = as_config(c.config)
        if cfg is None or knob not in get_workload(cfg.workload).applicable(cfg.workload_knobs):
            return ""
    return f" In this app: {setting}."


def _ampere_or_later(c: "_Ctx", kernel_names) -> bool:
    """Whether the GPU has Ampere's tensor cores or later ones (TF32, bf16): compute capability 8.0 or more, or, where
    the trace gives none, a kernel among ``kernel_names`` built for sm80 or later (``kernel_family``'s arch)."""
    from ...analyses.categories import kernel_family
    cc = c.compute_capability
    if cc is not None:
        return cc >= 8.0
    return any((a := kernel_family(str(n))["arch"]) is not None and a >= 80 for n in kernel_names)


def _steps(report: Report) -> int:
    """How many steps a per-step figure of the rules divides by: the steps the loop worked in
    (``analyses.working_steps``; an empty step the profiler closed right after it began launched nothing and is no
    step of the loop), at least 1."""
    return max(1, len(working_steps(report.steps)))


def _in_steps(report: Report, ops: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``ops`` (``report.gpu_ops``) that the profiled steps launched: those whose launch call (paired by
    ``launch_latency``) lies inside a ProfilerStep. Work queued before the first step (a warm-up call's GEMM, whose
    launch the trace does not hold, running while the first step runs) is left out, so a sum over them divided by
    :func:`_steps` is per step. A trace without steps or without any pairing keeps every op."""
    lat = report.launch_latency
    if report.steps.empty or lat.empty or ops.empty:
        return ops
    launched = lat.loc[lat["step"].notna(), "gpu_id"].astype(int)
    return ops[ops["id"].astype(int).isin(set(launched))]


def _in_measured_steps(report: Report, ops: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``ops`` (``report.gpu_ops``) that the steady state's steps launched (``analyses.measured_steps``):
    those whose launch call, paired by ``launch_latency``, lies in one of those steps."""
    lat = report.launch_latency
    steps = measured_steps(report.steps)["step"]
    ids = lat.loc[lat["step"].isin(steps) & lat["gpu_id"].notna(), "gpu_id"].astype(int)
    return ops[ops["id"].astype(int).isin(set(ids.tolist()))]


def _gemm_rows_in_steps(c: "_Ctx", rows: pd.DataFrame) -> pd.DataFrame:
    """These GEMM rows of the roofline (``c.roof``) as the profiled steps ran them: ``count`` their calls inside a
    ProfilerStep (a GEMM op whose call began inside one; a kernel of no op of its own, e.g. a graph replay's, that a
    step launched, :func:`_in_steps`) and ``time_us`` those calls' mean; rows that no step ran are left out.

    The roofline counts every call in the trace, warm-up calls before the first step among them, so a sum over its
    rows divided by :func:`_steps` is a per-step figure only over these. A trace without steps keeps its rows."""
    r = c.report
    if r.steps.empty or rows.empty:
        return rows
    st = r.steps.sort_values("start_ns", kind="stable")
    starts = st["start_ns"].to_numpy(dtype=np.int64)
    ends = np.maximum.accumulate(starts + np.round(st["cpu_dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64))
    per_call: dict[int, float] = {}  # slice id of a call the steps made -> its time (µs)
    g = r.gemm_throughput
    if not g.empty:
        ts = g["start_ns"].to_numpy(dtype=np.int64)
        k = np.searchsorted(starts, ts, side="right") - 1
        inside = (k >= 0) & (ts < ends[np.maximum(k, 0)])
        per_call.update(zip(g["id"].to_numpy()[inside].astype(int).tolist(),
                            g["time_us"].to_numpy(dtype=float)[inside].tolist()))
    launched = _in_steps(r, r.gpu_ops)
    per_call.update(zip(launched["id"].astype(int).tolist(), launched["dur_us"].astype(float).tolist()))
    counts, means = [], []
    for ids in rows["slice_ids"]:
        times = [per_call[int(i)] for i in (ids if isinstance(ids, (list, tuple)) else ()) if int(i) in per_call]
        counts.append(len(times))
        means.append(float(np.mean(times)) if times else 0.0)
    out = rows.assign(count=counts, time_us=means)
    return out[out["count"] > 0]


def _per(report: Report) -> str:
    """How a per-step figure reads: "per step", or "in the trace" for a trace without ProfilerStep slices (the
    figures are then whole-trace totals)."""
    return "per step" if len(report.steps) else "in the trace"


def _other_steps_empty(report: Report) -> str:
    """Beside the only step with work in it: "the other step is the profiler's closing stub" (or "other steps are
    the profiler's closing stubs", of a file that merges several processes' steps), or, where some lie between steps
    of the loop, that they are empty (``analyses.working_steps``, ``analyses.steady_state``'s ``closing_stubs``)."""
    ss = report.summary.get("steady_state") or steady_state(report.steps)
    many = len(ss.get("empty_steps") or []) > 1
    if not ss.get("closing_stubs", True):
        return (f"the other step{'s are' if many else ' is'} empty: profile.step() was called again with no "
                "iteration in between")
    return ("the other steps are the profiler's closing stubs" if many else
            "the other step is the profiler's closing stub")


def _gpus_idle(report: Report) -> str:
    """The subject of "... X%": "the GPU idles" for a process of one GPU; "none of its N GPUs runs work the step
    launched for" where the steps' work ran on several (``summary["step_devices"]``), whose busy figures count the
    time any one of them ran the steps' work: a GPU may run other work meanwhile (launched before the recording, or
    by another process), so "all idle at once" would say more than the figures do."""
    n = len(report.summary.get("step_devices") or [])
    return "the GPU idles" if n < 2 else f"none of its {n} GPUs runs work the step launched for"


def _cpu_time_cost(report: Report, saved_us: float, basis: str, what: str, relief_us: float = 0.0,
                   relief: str = "") -> tuple[float, str]:
    """The cost bound of a change that takes ``saved_us`` of CPU time off a step (``basis`` says what that time is;
    ``what`` names it in the capped text): a step gets no shorter than the GPU work it launches, so it shortens at
    most by its CPU time less that work (the steady state's medians), more by ``relief_us`` of that work that the
    change itself shortens (``relief`` says which: a copy from pageable memory, pinned), and less the GPU work queued
    before the recording that the step waited for (``unlaunched_wait_us_per_step``: question 2 counts it among the
    GPU's work, which the step cannot outrun; the H100 Qwen trace's sync waited 13.38 ms of its 14.11 ms for it).
    Without a steady state (no steps), ``saved_us`` as it is."""
    ss = report.summary.get("steady_state") or {}
    if ss.get("cpu_us_per_step") is None or ss.get("gpu_us_per_step") is None:
        return saved_us, basis
    earlier = float(ss.get("unlaunched_wait_us_per_step") or 0.0)
    room = max(0.0, float(ss["cpu_us_per_step"]) - float(ss["gpu_us_per_step"]) - earlier + relief_us)
    if saved_us <= room:
        return saved_us, basis
    return room, (f"the step's CPU time less the GPU work it launches{relief}"
                  + (f" and the {_fmt_us(earlier)} it waited for work queued before the recording" if earlier > 0
                     else "")
                  + f", per steady-state step (measured): a step gets no shorter than its GPU work, so of {what} "
                  "removing it can win back at most this")


def _gpu_time_cost(report: Report, saved_us: float, basis: str) -> tuple[float, str]:
    """The cost bound of a change that takes ``saved_us`` of GPU time off a step and nothing off its CPU time
    (``basis`` says what that GPU time is), by the one bound rule (``analyses.steps.bound``). A step gets no shorter
    than its CPU's own time (its CPU time less the time it spent blocked on the GPU, ``sync_wait_us_per_step``):
    where the GPU waits on the CPU (an overhead-bound steady state) the step is as long as the CPU's time and shortens
    at most by the time it spent blocked while the GPU worked (as measured: ``sync_wait_measured_us_per_step``, which
    the bound rule's threshold may count as none; where that is the figure, the basis names it first, then the time at
    stake that ``basis`` describes); where the GPU sets the pace (compute- or copy-bound) the step is as long as the
    longer of its CPU time and its GPU work, and shortens at most to the CPU's own time; where a full launch queue
    made it GPU-paced (``analyses.steps.bound``'s second test: the launch calls wait for the GPU), to the CPU's time
    outside its launch calls. Where no verdict says who sets the pace (no steps), the step shortens by that GPU time
    at most."""
    ss = report.summary.get("steady_state") or {}
    label = ss.get("bound")
    wait = float(ss.get("sync_wait_us_per_step") or 0.0)
    if label == "overhead-bound":
        from ..questions.q2_bound import blocked_in  # (what question 2 says the steps were blocked in)
        blocked = float(ss.get("sync_wait_measured_us_per_step") or wait)
        where = blocked_in(report.steps, ss) if ss.get("basis_steps") is not None else "synchronize calls"
        if saved_us <= blocked:
            return saved_us, (
                f"{basis} ({_fmt_us(saved_us)} per step); it is not on the critical path: the GPU waits on the CPU (an "
                f"overhead-bound step), so the step shortens at most by the time its CPU spent blocked in {where} "
                f"while the GPU worked, {_fmt_us(blocked)} per step, until the CPU side is cut")
        # the figure is the blocked time, not what the basis describes: say so first
        return blocked, (
            f"the time the step's CPU spent blocked in {where} while the GPU worked, {_fmt_us(blocked)} "
            "per step (measured): the GPU waits on the CPU (an overhead-bound step), so the step shortens at most by "
            f"that until the CPU side is cut; the time at stake, {_fmt_us(saved_us)} per step, is not on the critical "
            f"path: {basis}")
    if label not in GPU_PACED or ss.get("cpu_us_per_step") is None or ss.get("gpu_us_per_step") is None:
        return saved_us, basis
    cpu, gpu = float(ss["cpu_us_per_step"]), float(ss["gpu_us_per_step"])
    own = cpu - wait
    # a full launch queue (the bound rule's second test): the launch calls wait for the GPU, so the CPU's own time
    # holds that wait, and with less GPU work the calls return sooner; the floor is then the CPU's time outside them
    launch, starved = ss.get("launch_us_per_step"), ss.get("starved_share")
    queued = (gpu < own and starved is not None and starved <= STARVED_AT and launch is not None
              and float(launch) >= own - gpu)
    floor = max(0.0, own - float(launch)) if queued else own
    room = max(cpu, gpu) - floor
    if saved_us <= room:
        return saved_us, basis
    # the figure is the room, not what the basis describes: say so first (the basis may hold clauses of its own)
    down_to = (f"the CPU's time outside its launch calls (which wait for the GPU's full queue), {_fmt_us(floor)}"
               if queued else f"the CPU's own time, {_fmt_us(own)}")
    return room, (f"the most the step can lose: the GPU sets the pace (a {label} step) only down to {down_to} per "
                  f"step, so the step shortens at most from {_fmt_us(max(cpu, gpu))} (the longer of its CPU time and "
                  f"its GPU work) to that; the time at stake, {_fmt_us(saved_us)} per step, is more than the step can "
                  f"lose: {basis}")


def _fmt_us(x: float) -> str:
    return f"{x:,.1f} µs" if x >= 10 else f"{x:,.2f} µs"


MULTI_TENSOR_KERNEL = "multi_tensor_apply"
"""In a kernel's name: one launch that updates many tensors (the kernel template of torch's foreach and fused
optimizers, and of apex's and DeepSpeed's multi-tensor ones, which run no ``aten::_foreach_`` op)."""


def _multi_tensor_kernels(c: _Ctx) -> tuple[pd.DataFrame, list]:
    """The GPU ops named like ``MULTI_TENSOR_KERNEL`` (``gpu_ops`` rows), and the phase of the training step each was
    launched in (``analyses.phases_at`` at its launch call's start; None without phases or a launch call)."""
    from ...analyses import phases_at
    ops, lat = c.report.gpu_ops, c.report.launch_latency
    if ops.empty:
        return ops, []
    k = ops[ops["name"].astype(str).str.contains(MULTI_TENSOR_KERNEL, regex=False, na=False)]
    if not len(k) or not c.report.has_phases or lat.empty:
        return k, [None] * len(k)
    launched = dict(zip(lat["gpu_id"].astype(int), lat["launch_start_ns"].astype("int64")))
    ids = [int(i) for i in k["id"] if int(i) in launched]
    at = dict(zip(ids, phases_at(c.session, [launched[i] for i in ids], shared=c.shared)))
    return k, [at.get(int(i)) for i in k["id"]]


def _args_of(session, name: str, ids) -> dict[int, Any]:
    """{slice id: its arg ``name``} of these slices, for those that have it."""
    return _args_each(session, (name,), ids)[0]


def _args_each(session, names: tuple[str, ...], ids) -> tuple[dict[int, Any], ...]:
    """For each of ``names``, {slice id: that arg} of these slices that have it (each slice's args read once)."""
    tb = session.tables
    asids = {int(i): int(tb.arg_set_id[int(i)]) for i in ids}
    got = tb.args.get_many(names, {a for a in asids.values() if a >= 0})
    return tuple({i: got[n][a] for i, a in asids.items() if a >= 0 and a in got[n]} for n in names)


def _graph_replays(report) -> int:
    """``cudaGraphLaunch`` calls that launched GPU work (``launch_latency``'s pairs, every thread: a training step's
    backward graph is launched from the autograd thread): the run replays captured graphs, whose private memory
    pools the allocator reserves between replays."""
    lat = report.launch_latency
    return int(lat.loc[lat["launch_name"].isin(GRAPH_LAUNCHES), "launch_id"].nunique()) if len(lat) else 0
