"""One facade that runs every analysis once: ``analyze(session) -> Report``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from ..config import as_config
from .breakdown import category_totals, step_breakdown, top_kernels
from .compile import compile_breakdown, compiler_launches
from .gemm import gemm_kernel_shapes, gemm_throughput
from .kernels import gpu_ops, kernel_configs, kernel_durations_by_step, kernel_stats
from .launches import dispatch_chains, launch_latency, launch_paths
from .memory import MemoryReport, memory_report
from .phases import empty_phases, phases
from ._shared import Shared, frame, shared_for
from .ranks import ranks, step_processes
from .steps import (cpu_vs_gpu, device_busy, first_ops, gpu_busy, measured_steps, queue_growth,
                    steady_state, steps)
from .table import cpu_op_count, cpu_own_times, idle_frames, profiler_table, work_count
from .timing import cold_start_gap, sync_wait

__all__ = ["Report", "analyze"]


@dataclass(frozen=True)
class Report:
    """Every analysis of one trace, computed once. DataFrames are as the functions of the same name return them."""

    engine: str
    """The SQL engine that answered (``perfetto`` or ``sqlite``)."""
    steps: pd.DataFrame
    cpu_vs_gpu: pd.DataFrame
    gpu_busy: pd.DataFrame
    gpu_ops: pd.DataFrame
    kernel_stats: pd.DataFrame
    kernel_durations_by_step: pd.DataFrame
    launch_latency: pd.DataFrame
    launch_paths: pd.DataFrame
    dispatch_chains: pd.DataFrame
    """The dispatch tree of every step (``step`` column); ``dispatch_chain(session, step)`` gives one."""
    cold_start_gap: pd.DataFrame
    sync_wait: pd.DataFrame
    compile_breakdown: pd.DataFrame
    gemm_throughput: pd.DataFrame
    profiler_table: pd.DataFrame
    step_breakdown: pd.DataFrame
    """Per step and category of GPU op, the GPU's time and idle time (:func:`step_breakdown`)."""
    top_kernels: pd.DataFrame
    """Every GPU op name ranked by total time, with the CPU ops that launched it (:func:`top_kernels` with n=None)."""
    phases: pd.DataFrame = field(default_factory=empty_phases)
    """Per step and phase of a training step (data, forward, backward, optimizer, zero_grad, other): CPU time, GPU work
    and kernels (:func:`~profiling_core.analyses.phases.phases`); empty when the trace has no phases."""
    memory: MemoryReport = field(default_factory=MemoryReport)
    """Where the memory goes, from the trace's ``[memory]`` events (:mod:`profiling_core.analyses.memory`): empty
    frames, and a ``summary`` whose ``note`` says how to record them, when the trace has none."""
    kernel_configs: pd.DataFrame = field(default_factory=lambda: frame([], ["name", "grid", "block", "count",
                                                                         "total_us", "mean_us", "median_us",
                                                                         "min_us", "max_us", "cv"]))
    """Per kernel name and launch configuration (grid, block), its durations' statistics
    (:func:`~profiling_core.analyses.kernels.kernel_configs`)."""
    gemm_kernel_shapes: pd.DataFrame = field(default_factory=lambda: frame([], ["name", "shape", "flops", "count",
                                                                             "total_us", "mean_us", "median_us",
                                                                             "min_us", "max_us", "cv"]))
    """Per kernel name and shape of the GEMM op that launched it, its launches' statistics
    (:func:`~profiling_core.analyses.gemm.gemm_kernel_shapes`)."""
    cpu_own_times: pd.DataFrame = field(default_factory=lambda: frame([], ["step", "name", "category", "calls",
                                                                        "own_us", "wait_us", "beside_us",
                                                                        "beside_calls", "compile_us",
                                                                        "compile_calls"]))
    """Per step, the CPU's own time by op name on every thread (:func:`~profiling_core.analyses.table.cpu_own_times`):
    where a step's CPU time goes, the autograd engine's thread included; ``beside_us`` and ``beside_calls`` the part
    on threads that run beside the step (no step slice, no launch call in it); ``compile_us`` and ``compile_calls``
    the part inside torch.compile's compiler ranges."""
    compiler_launches: pd.DataFrame = field(default_factory=lambda: frame([], ["step", "name", "category", "op",
                                                                            "count", "total_us"]))
    """Per GPU op name, the ops torch.compile's compiler launched while it worked (max-autotune's benchmarks, a CUDA
    graph's recording: :func:`~profiling_core.analyses.compile.compiler_launches`)."""
    device_busy: pd.DataFrame = field(default_factory=lambda: frame([], ["step", "slice_id", "device", "gpu_busy_us",
                                                                      "gpu_busy_in_step_us", "gpu_busy_fraction",
                                                                      "gpu_ops"]))
    """Per step and GPU, the time that GPU alone was busy in the step's window
    (:func:`~profiling_core.analyses.steps.device_busy`): where one process drove several GPUs, every other GPU
    figure is the time at least one of them was busy."""
    summary: dict[str, Any] = field(default_factory=dict)
    """Headline numbers; see :func:`analyze`."""
    _shared: Optional[Shared] = field(default=None, repr=False, compare=False)
    """What the analyses computed once for all of them (the launch pairs, steps, phase ranges), kept for
    ``diagnose`` on the same session to reuse; not kept in a copy of the report (pickle: a cached report)."""

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_shared": None}

    @property
    def has_phases(self) -> bool:
        """True when the trace's steps have training phases (:attr:`phases` is not empty)."""
        return not self.phases.empty

    @property
    def has_gpu(self) -> bool:
        """True when the trace holds any GPU op (kernel, memcpy, memset)."""
        return not self.gpu_ops.empty


def _median(s: pd.Series) -> Optional[float]:
    s = pd.to_numeric(s, errors="coerce").dropna()
    return float(s.median()) if len(s) else None


def _distinct(s: pd.Series) -> pd.Series:
    """The distinct values of a text column ``s`` (object: str or None), what an elementwise cast then ``set()``
    needs, once per value; ``s`` itself for any other column (1 and 1.0 would merge)."""
    if s.dtype != object:
        return s
    u = pd.unique(s.to_numpy(dtype=object))
    return pd.Series(u, dtype=object) if all(type(x) is str or x is None for x in u.tolist()) else s


def _summary(r: Report, session, sh: Shared) -> dict[str, Any]:
    busy = r.gpu_busy.set_index("scope") if not r.gpu_busy.empty else r.gpu_busy
    scope = "steps" if "steps" in busy.index else "trace"
    has_gpu = r.has_gpu
    n_steps = len(r.steps)
    work = measured_steps(r.steps)  # (the steady state's steps, which every per-step figure reads)
    apis = sorted(set(_distinct(r.launch_latency["launch_name"]).astype(str))) if not r.launch_latency.empty else []
    cb = r.compile_breakdown
    regions = int(cb.loc[cb["step"].isin(work["step"]), "compiled_regions"].sum()) if n_steps else 0
    dtod = int((r.gpu_ops["name"].str.startswith("Memcpy DtoD", na=False)).sum()) if has_gpu else 0
    ss = steady_state(r.steps)
    return {
        "engine": r.engine,
        "steps": n_steps,
        "has_gpu": has_gpu,
        "gpu_ops": int(len(r.gpu_ops)),
        "kernels": int((r.gpu_ops["category"] == "kernel").sum()) if has_gpu else 0,
        "gpu_busy_scope": scope,
        "gpu_busy_us": float(busy.loc[scope, "busy_us"]) if has_gpu and scope in busy.index else 0.0,
        "gpu_busy_fraction": (float(busy.loc[scope, "busy_fraction"])
                              if has_gpu and scope in busy.index and pd.notna(busy.loc[scope, "busy_fraction"])
                              else None),
        "cpu_step_median_us": _median(work["cpu_dur_us"]),
        "measured_steps": [int(k) for k in work["step"]] if n_steps else [],
        "steady_state": ss,
        "queue_growth": queue_growth(r.launch_latency, r.steps),
        "devices": list(getattr(session, "devices", None) or []),
        "recorded_with": list(getattr(session, "recorded_with", None) or []),
        "gpu_step_median_us": _median(work["gpu_busy_us"]) if has_gpu else None,
        "launch_latency_median_us": _median(first_ops(r.launch_latency)["latency_us"]),
        "launch_apis": apis,
        "compiled_regions_per_step": regions / len(work) if n_steps else None,
        "memcpy_dtod": dtod,
        "train_phases": _phase_medians(r.phases, r.steps),
        "time_by_category": {c.category: float(c.share)
                             for c in category_totals(r.step_breakdown, r.steps).itertuples() if pd.notna(c.share)},
        "memory": r.memory.summary,
        "step_processes": step_processes(session, sh),
        "ranks": ranks(session, sh),
        "step_devices": _step_devices(r.device_busy, ss["basis_steps"], r.steps),
        "idle_thread_frames": _idle_thread_frames(sh),
        "cpu_ops": cpu_op_count(sh),
        "work": work_count(sh),
    }


def _idle_thread_frames(sh: Shared) -> dict[str, float]:
    """{row name: self µs} of the profiler table's Python frames of idle threads (:func:`~.table.idle_frames`: threads
    that ran no Python code while the profile recorded), largest first; empty without any."""
    rows, own = idle_frames(sh)
    per: dict[str, float] = {}
    for name, ns in zip(sh.names_at(rows).tolist(), own.tolist()):
        per[str(name)] = per.get(str(name), 0.0) + ns / 1000.0
    return dict(sorted(per.items(), key=lambda kv: (-kv[1], kv[0])))


def _step_devices(db: pd.DataFrame, basis: list, steps: pd.DataFrame) -> list[dict]:
    """Per GPU that ran the steps' work (``db``, :func:`device_busy`), in device order: ``device``, ``busy_us``
    (the work the step launched on it: the per-device twin of ``steps.gpu_busy_us``), ``busy_in_step_us`` and
    ``busy_fraction`` (its busy time inside the step's window and that time's share of the window), each the median
    over the steady state's ``basis`` steps, or over every step when it has none; where the steps are several
    processes' (ranks' traces merged into one file), over the steps of the processes that launched work on it (a
    rank's step launches nothing on another rank's GPU). One entry for a process of one GPU; several where it drove
    several GPUs, whose other per-step figures then count the time at least one of them was busy."""
    if db.empty:
        return []
    b = db[db["step"].isin(basis)] if basis else db
    b = b if len(b) else db
    pid_of = dict(zip(steps["slice_id"].tolist(), steps["pid"].tolist())) if "pid" in steps else {}
    out = []
    for d, g in b.groupby("device", sort=True):
        pids = g["slice_id"].map(pid_of)
        own = set(pids[g["gpu_ops"].to_numpy() > 0].dropna().tolist())
        if own and pids.nunique() > 1:
            g = g[pids.isin(own).to_numpy()]
        out.append({"device": d.item() if isinstance(d, np.generic) else d,
                    "busy_us": float(g["gpu_busy_us"].median()),
                    "busy_in_step_us": float(g["gpu_busy_in_step_us"].median()),
                    "busy_fraction": float(g["gpu_busy_fraction"].median())})
    return out


def _phase_medians(df: pd.DataFrame, steps_df: pd.DataFrame) -> dict[str, dict[str, float]]:
    """{phase: {cpu_us, gpu_us, kernels}} medians over the steady state's steps (``measured_steps`` of ``steps_df``);
    {} without phases. A phase no step has any time or GPU op in is left out: the trace marks no such phase (a loop
    without a DataLoader has no ``data``), and a 0 would say the step had none."""
    if df.empty:
        return {}
    seen = df.groupby("phase", sort=False)[["cpu_us", "gpu_ops"]].sum()
    seen = set(seen.index[(seen["cpu_us"] > 0) | (seen["gpu_ops"] > 0)]) | {"other"}
    basis = df[df["step"].isin(measured_steps(steps_df.drop_duplicates("step"))["step"])]
    g = basis.groupby("phase", sort=False)
    return {ph: {"cpu_us": float(x["cpu_us"].median()), "gpu_us": float(x["gpu_us"].median()),
                 "kernels": float(x["kernels"].median())} for ph, x in g if ph in seen}


def analyze(session, config=None, peak_tflops: Optional[float] = None, shared: Optional[Shared] = None) -> Report:
    """Run every analysis on ``session`` once.

    Args:
        session: a trace session from ``profiling_core.open_trace``.
        config: the ``ExperimentConfig`` the trace came from, or its dict (meta.json's ``config``), if known (gives
            GEMM FLOPs); ConfigError for anything else.
        peak_tflops: the peak TFLOP/s the user sets for ``gemm_throughput``'s fraction of peak.
        shared: the session's :class:`Shared` where the caller already made one (what it computed is not computed
            again); by default a new one.

    Returns:
        A :class:`Report`. ``summary`` holds: ``engine``, ``steps``, ``has_gpu``, ``gpu_ops``, ``kernels``,
        ``gpu_busy_scope``/``gpu_busy_us``/``gpu_busy_fraction`` (from :func:`gpu_busy`, the ``steps`` scope when the
        trace has steps; fraction None without GPU ops), ``cpu_step_median_us``, ``gpu_step_median_us``,
        ``compiled_regions_per_step`` (over the steady state's steps, which every per-step figure reads:
        ``measured_steps``, their numbers, :func:`~profiling_core.analyses.steps.measured_steps`),
        ``steady_state`` (:func:`~profiling_core.analyses.steps.steady_state`: the one bound rule's verdict on the
        steps after the first, with its evidence), ``queue_growth``
        (:func:`~profiling_core.analyses.steps.queue_growth`: whether the launch queue grew, and its figures),
        ``devices`` (the GPUs the trace names, ``session.devices``), ``recorded_with`` (the torch.profiler options the
        trace says it was recorded with, ``session.recorded_with``), ``launch_latency_median_us`` (each launch call's
        first GPU op's wait, :func:`~profiling_core.analyses.steps.first_ops`; None without pairs),
        ``launch_apis`` (distinct calls that launched GPU work),
        ``compiled_regions_per_step`` (Torch-Compiled Region slices ÷ steps, None without steps), ``memcpy_dtod``,
        ``time_by_category`` ({category: share of the steady state's steps' windows}, :func:`category_totals`
        of the step breakdown; empty without steps), ``train_phases`` ({phase: medians of ``cpu_us``, ``gpu_us``,
        ``kernels``} over the steady state's steps, :func:`~profiling_core.analyses.steps.measured_steps`; empty without
        phases), ``memory`` (:attr:`MemoryReport.summary <profiling_core.analyses.memory.MemoryReport>`: per device
        the peak allocated and reserved bytes; ``note`` says how to record memory events when the trace has none),
        ``step_processes`` (the pids whose threads hold the step slices: more than one where ranks' traces were
        merged into one file), ``ranks`` (:func:`~profiling_core.analyses.ranks.ranks`: each of those processes with
        its steps, launch calls and GPU lanes),
        ``step_devices`` (per GPU that ran the steps' work: ``device``, and the medians of its own ``busy_us`` (the
        work the step launched on it), ``busy_in_step_us`` and ``busy_fraction`` of the step's window; several where
        one process drove several GPUs), ``idle_thread_frames`` ({row name: self µs} of the table's Python frames of
        threads that ran no Python code while recording: :func:`~profiling_core.analyses.table.idle_frames`),
        ``cpu_ops`` (the CPU slices that are not runtime or driver calls: ATen ops, ranges, Python frames, steps;
        :func:`~profiling_core.analyses.table.cpu_op_count`: none where the profiler recorded no CPU activity),
        ``work`` (the ops, ranges, runtime calls and GPU ops: :func:`~profiling_core.analyses.table.work_count`; 0
        in a trace of the profiler's own slices alone, :data:`~profiling_core.analyses.table.NO_WORK_TEXT`).
    """
    config = as_config(config)
    sh = shared_for(session, shared)  # the launch pairs, step windows and GPU op intervals, computed once for all
    # Largest temporaries first, while few results are held yet, smallest last, when all are: the peak memory of the
    # whole run is then lower (93 MB trace: 6 MiB less than in the Report's field order); each result is the same in
    # any order.
    out = {"profiler_table": profiler_table(session, shared=sh),
           "steps": steps(session, shared=sh),  # (its per-step pair counts are the temporaries of compile_breakdown)
           # their sweep over every GPU op at once, while little is held
           "step_breakdown": step_breakdown(session, shared=sh),
           "top_kernels": None,  # (below: its per-step figure is over the working steps)
           "dispatch_chains": dispatch_chains(session, shared=sh),
           "kernel_durations_by_step": kernel_durations_by_step(session, shared=sh),
           "launch_latency": launch_latency(session, shared=sh),
           "gemm_throughput": gemm_throughput(session, peak_tflops=peak_tflops, config=config, shared=sh),
           "launch_paths": launch_paths(session, shared=sh),
           "gpu_busy": gpu_busy(session, shared=sh),
           "compile_breakdown": compile_breakdown(session, shared=sh),
           "gpu_ops": gpu_ops(session, shared=sh)}
    out["top_kernels"] = top_kernels(session, n=None, shared=sh, steps_df=out["steps"])
    out["kernel_stats"] = kernel_stats(session, ops=out["gpu_ops"])
    out["kernel_configs"] = kernel_configs(session, shared=sh)
    out["gemm_kernel_shapes"] = gemm_kernel_shapes(session, gemm=out["gemm_throughput"], shared=sh)
    out["sync_wait"] = sync_wait(session, shared=sh)
    out["cold_start_gap"] = cold_start_gap(session, shared=sh)
    out["cpu_vs_gpu"] = cpu_vs_gpu(session, steps_df=out["steps"])
    out["phases"] = phases(session, shared=sh)
    out["memory"] = memory_report(session, shared=sh, config=config)
    out["cpu_own_times"] = cpu_own_times(session, shared=sh)
    out["device_busy"] = device_busy(session, shared=sh)
    out["compiler_launches"] = compiler_launches(session, shared=sh)
    r = Report(engine=str(getattr(session, "engine", "unknown")), _shared=sh, **out)
    r.summary.update(_summary(r, session, sh))
    return r
