"""Sweeps: a list of configs, one fresh worker each, with progress and cancellation.

``on_progress`` receives a ``SweepProgress`` before each run and after the last; a Streamlit progress bar
(``bar.progress(p.fraction, text=p.message)``) and the CLI's terminal bar both use it. :func:`sweep_values` reads the
axis's values typed as text.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional

from ..config import SPREAD_WARN_PCT, ExperimentConfig
from ..errors import ConfigError, ProfilingError, WorkerError
from .runner import run_experiment
from .worker import check_compile_cache, check_process
from ..store.runs import Run, RunStore
from ..workloads import WORKLOADS, get_workload


@dataclass(frozen=True)
class SweepProgress:
    done: int
    total: int
    current: Optional[str]
    message: str
    failed: int = 0

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


@dataclass
class SweepResult:
    runs: list[Run] = field(default_factory=list)
    errors: list[tuple[ExperimentConfig, ProfilingError]] = field(default_factory=list)
    cancelled: bool = False
    wall_s: float = 0.0
    skipped: list[ExperimentConfig] = field(default_factory=list)
    """The configs a cancel left without an outcome: runs + errors + skipped are all the sweep's jobs."""


EXECUTORS = ("local", "ray")
"""Where a sweep's runs happen: ``local`` (this machine, one after the other) or ``ray`` (tasks on a Ray cluster)."""


def check_executor(executor: str, *, ray_address: Optional[str] = None, placement: str = "spread",
                   max_retries: int = 1, max_artifact_bytes: Optional[int] = None) -> None:
    """Refuse, before anything runs, what ``run_sweep`` could not run with: an executor other than ``EXECUTORS``;
    for ``ray``, a placement, retry count, artifact cap or address it does not take (``cluster.check_options``:
    empty, ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``), or a Python without Ray. Raises ConfigError (or, Ray
    missing, ProfilingError saying what to install)."""
    if executor not in EXECUTORS:
        raise ConfigError("executor", executor, " or ".join(EXECUTORS))
    if executor == "ray":
        from . import cluster
        cluster.check_options(ray_address, placement, max_retries,
                              cluster.MAX_ARTIFACT_BYTES if max_artifact_bytes is None else max_artifact_bytes)
        missing = cluster.ray_missing()
        if missing:
            raise ProfilingError(f"executor='ray' needs Ray: {cluster.INSTALL_HINT}")


def sweep_values(text: str, workload: str = "matmul_add", knobs: Optional[Mapping] = None, *,
                 field: Optional[str] = None) -> list[int]:
    """The values of a sweep's axis typed as text (the CLI's ``--sizes``, the Overhead page's box): comma-separated
    integers in the axis knob's range, written in ASCII digits (spaces around them and empty items are ignored),
    in the order given. Anything else raises ConfigError naming ``field`` (default ``each value of <axis>``), the
    bad item and what is allowed, e.g. ``each value of seq_len must be an integer from 1 to 1048576, in the digits
    0-9, got '2²'`` (``2²``, ``٣``, ``1e3``, ``0x10`` and ``1_000`` are refused: :meth:`Knob.parse
    <profiling_core.workloads.Knob.parse>`)."""
    wl = get_workload(workload)
    axis = _axis(wl, workload, knobs)
    knob = wl.knob(axis)
    field = field or f"each value of {axis}"
    return [knob.parse(item.strip(), field) for item in str(text).split(",") if item.strip()]


def _axis(wl, workload: str, knobs: Optional[Mapping]) -> str:
    axis = wl.size_knob_for(dict(knobs or {}))
    if axis is None:
        raise ConfigError("workload", workload, "a workload with a size knob to sweep (" + ", ".join(
            n for n, w in WORKLOADS.items() if w.size_knobs) + ")")
    return axis


def sweep_configs(sizes: Iterable[int], compile_modes: Iterable[str] = ("off",), *, workload: str = "matmul_add",
                  knobs: Optional[Mapping] = None, **common) -> list[ExperimentConfig]:
    """The cross product sizes × compile modes of ``workload``: each size is a value of its size knob (matmul_add's
    ``size``; ``ExperimentConfig.size_knob`` says which for the others, e.g. the transformer block's seq_len in
    prefill, kv_len in decode), the other knobs from ``knobs``, the other fields from ``common``."""
    wl = get_workload(workload)
    knobs = dict(knobs or {})
    axis = _axis(wl, workload, knobs)
    return [ExperimentConfig.for_workload(workload, {**knobs, axis: s}, compile=m, **common)
            for s in sizes for m in compile_modes]


def run_sweep(configs: Iterable[ExperimentConfig], *, store: Optional[RunStore] = None,
              on_progress: Optional[Callable[[SweepProgress], None]] = None,
              cancel_event: Optional[threading.Event] = None, prestart: int = 0,
              on_status: Optional[Callable[[str], None]] = None, process: str = "fresh",
              compile_cache: str = "fresh", executor: str = "local", ray_address: Optional[str] = None, placement: str = "spread",
              max_retries: int = 1, max_artifact_bytes: Optional[int] = None) -> SweepResult:
    """Run each config in its own fresh worker, in order (``process="persistent"``: the warm eager ones in the
    device's persistent worker, as ``run_experiment`` says; ``compile_cache="shared"``: the warm compiled ones
    share the store's compile cache, as it says too).  A failed run is recorded and the sweep goes on;
    a set ``cancel_event`` kills the current worker and stops the sweep (the configs it did not run are
    ``result.skipped``).

    ``executor="ray"`` runs them as Ray tasks on a cluster instead (``profiling_core.run.cluster``): at
    ``ray_address`` (None: the Ray this process is connected to, else a local Ray started and shut down here),
    placed by ``placement`` (``"spread"``, or ``"per_device_type"``: each config once per device type the nodes
    declare), a task whose process dies retried ``max_retries`` times, artifacts over ``max_artifact_bytes``
    (default ``cluster.MAX_ARTIFACT_BYTES``) refused. Every job ends as a run, an error or a skipped config."""
    check_process(process)
    check_compile_cache(compile_cache)
    check_executor(executor, ray_address=ray_address, placement=placement, max_retries=max_retries,
                   max_artifact_bytes=max_artifact_bytes)
    configs = list(configs)
    store = store or RunStore()
    result = SweepResult()
    report = on_progress or (lambda _p: None)
    t0 = time.perf_counter()
    if executor == "ray":
        from . import cluster
        cluster.run_sweep_ray(configs, store=store, report=lambda *p: report(SweepProgress(*p)), result=result, cancel_event=cancel_event,
                              prestart=prestart, status=on_status or (lambda _m: None), process=process,
                              compile_cache=compile_cache,
                              ray_address=ray_address, placement=placement, max_retries=max_retries,
                              max_artifact_bytes=cluster.MAX_ARTIFACT_BYTES if max_artifact_bytes is None
                              else max_artifact_bytes)
    else:
        _run_local(configs, store, report, result, cancel_event, prestart, on_status, process, compile_cache)
    result.wall_s = time.perf_counter() - t0
    done = len(result.runs) + len(result.errors)
    total = done + len(result.skipped)  # every job (per device type: each config once per type)
    msg = "cancelled" if result.cancelled else "done"
    report(SweepProgress(done, total, None,
                         f"{msg}: {len(result.runs)} ok, {len(result.errors)} failed in {result.wall_s:.1f} s",
                         len(result.errors)))
    return result


def _run_local(configs, store, report, result, cancel_event, prestart, on_status, process, compile_cache) -> None:
    for i, cfg in enumerate(configs):
        if cancel_event is not None and cancel_event.is_set():
            result.cancelled = True
            result.skipped.extend(configs[i:])
            break
        report(SweepProgress(i, len(configs), cfg.name, f"[{i + 1}/{len(configs)}] {cfg.name}", len(result.errors)))
        try:
            result.runs.append(run_experiment(cfg, store=store, cancel_event=cancel_event, prestart=prestart,
                                              on_status=on_status, process=process,
                                              compile_cache=compile_cache))
        except WorkerError as exc:
            if exc.kind == "cancelled":
                result.cancelled = True
                result.skipped.extend(configs[i:])
                break
            result.errors.append((cfg, exc))
        except ProfilingError as exc:
            result.errors.append((cfg, exc))


def sweep_points(runs, keys=("size", "mode"), values=("cpu_us_per_step", "gpu_busy_us_per_step",
                                                      "gpu_busy_fraction")):
    """The points of a sweep whose configs ran several times: per ``keys`` (a pandas DataFrame of one row per run,
    e.g. each run's median per-step numbers), the number of runs ``n``, and for each of ``values`` its median
    (the column's own name), ``<value>_min``, ``<value>_max`` and ``<value>_spread_pct`` ((max − min) / median ×
    100; NaN for one run or a zero median). Rows in key order."""
    import numpy as np
    import pandas as pd
    if runs is None or len(runs) == 0:
        return pd.DataFrame(columns=[*keys, "n", *[f"{v}{s}" for v in values for s in ("", "_min", "_max",
                                                                                      "_spread_pct")]])
    g = runs.groupby(list(keys), sort=True, dropna=False)
    out = g.size().rename("n").to_frame()
    for v in values:
        col = pd.to_numeric(runs[v], errors="coerce")
        gv = col.groupby([runs[k] for k in keys], sort=True, dropna=False)
        med, lo, hi = gv.median(), gv.min(), gv.max()
        out[v], out[f"{v}_min"], out[f"{v}_max"] = med, lo, hi
        spread = (hi - lo) / med.where(med > 0) * 100
        out[f"{v}_spread_pct"] = spread.where(out["n"] > 1, np.nan)
    return out.reset_index()
