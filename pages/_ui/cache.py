"""Cached access to the run store and to every run's analyses: the one place the app caches.

Keyed by run id (or trace path + mtime), never by mutable objects:

- ``st.cache_resource`` holds open trace sessions (one per trace file version, shared, behind a lock) and this
  machine's facts (:func:`environment`);
- ``st.cache_data`` holds the runs list, DataFrames, findings and diagnoses per run id (each caller gets a copy), and
  chart specs by their frames' content (:func:`chart`);
- :func:`memo` keeps what one script run asked for, so a page asking for a run's report ten times unpickles it once.

A run whose trace cannot be read shows one error box naming it and stops the page's script: the app stays up and the
store is untouched.
"""
from __future__ import annotations

import json
import threading
from typing import Any, Callable, Optional

import pandas as pd
import streamlit as st

from profiling_core import ExperimentConfig, RunStore
from profiling_core.errors import ProfilingError
from profiling_core.present import charts, md_code, md_text

from .notices import show_error

_MEMO = "_rerun_memo"


def reset_memo() -> None:
    """Forget the previous script run's memo (the frame calls it at the top of every script run)."""
    st.session_state[_MEMO] = {}


def memo(key: tuple, make: Callable[[], Any]) -> Any:
    """``make()`` once per script run (cache_data copies are not free when a page asks ten times)."""
    kept = st.session_state.setdefault(_MEMO, {})
    if key not in kept:
        kept[key] = make()
    return kept[key]


def store() -> RunStore:
    """The run store (``./runs`` or ``$PROFILING_RUNS_DIR``), looked up on every call (cheap)."""
    return RunStore()


def _store_stamp() -> tuple[str, int]:
    root = store().root
    try:
        return str(root.resolve()), root.stat().st_mtime_ns
    except OSError:
        return str(root), 0


@st.cache_data(show_spinner=False, max_entries=16)
def _runs_frames(root: str, mtime_ns: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(readable runs, corrupt runs) of the store at ``root``."""
    rows, corrupt = [], []
    for run in RunStore(root).list():
        if run.problem is not None:
            corrupt.append({"run_id": run.run_id, "problem": run.problem})
            continue
        cfg = run.meta.get("config") or {}
        device = run.meta.get("device") or {}
        rows.append({
            "run_id": run.run_id, "name": run.name, "source": run.meta.get("source", ""),
            "status": run.status, "started_at": str(run.meta.get("started_at", ""))[:19].replace("T", " "),
            "workload": cfg.get("workload") or ("matmul_add" if cfg else ""),
            "size": cfg.get("size") if not cfg.get("workload") or cfg.get("workload") == "matmul_add" else None,
            "dtype": cfg.get("dtype"), "compile": cfg.get("compile"),
            "warmup": cfg.get("warmup"), "active": cfg.get("active"),
            "device": device.get("name") or device.get("type") or cfg.get("device") or "",
            "wall_s": (run.meta.get("timings") or {}).get("wall_s"),
        })
    return (pd.DataFrame(rows, columns=["run_id", "name", "source", "status", "started_at", "workload", "size", "dtype",
                                        "compile", "warmup", "active", "device", "wall_s"]),
            pd.DataFrame(corrupt, columns=["run_id", "problem"]))


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    return memo(("runs",), lambda: _runs_frames(*_store_stamp()))


def runs_frame() -> pd.DataFrame:
    """The store's readable runs, newest first (cached until the store's folder changes); runs whose meta.json
    cannot be used are left out (:func:`corrupt_runs`). Do not modify it."""
    return _frames()[0]


def corrupt_runs() -> pd.DataFrame:
    """The store's runs whose meta.json cannot be used: ``run_id`` and ``problem`` (why). Only the Runs page lists
    them, so that they can be deleted. Do not modify it."""
    return _frames()[1]


def load_run(run_id: str):
    return memo(("run", run_id), lambda: store().load(run_id))


def forget_runs() -> None:
    """After a run was added or deleted in this script run."""
    kept = st.session_state.setdefault(_MEMO, {})
    for k in [k for k in kept if k[0] in ("runs", "run", "labels")]:
        del kept[k]


def _trace_stamp(run_id: str) -> tuple[str, int]:
    path = load_run(run_id).trace_path
    try:
        return str(path), path.stat().st_mtime_ns
    except OSError:
        return str(path), 0


class _LockedSession:
    """A trace session shared by every browser tab (st.cache_resource): one query at a time."""

    def __init__(self, inner):
        self._inner = inner
        self._lock = threading.RLock()

    def query(self, sql: str, *args, **kwargs):
        with self._lock:
            return self._inner.query(sql, *args, **kwargs)

    def console(self, sql: str, *args, **kwargs):
        with self._lock:  # released at the console's deadline at the latest
            return self._inner.console(sql, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


@st.cache_resource(show_spinner="Opening the trace ...", max_entries=8)
def _open_session(path: str, mtime_ns: int) -> _LockedSession:
    from profiling_core import open_trace
    # SQLite tables written in the background: the analyses do not need them, the Trace lab then finds them ready
    return _LockedSession(open_trace(path, sql_tables="background"))


def _readable(run_id: str, make: Callable[[], Any]) -> Any:
    """``make()``, or — when the run's trace cannot be read (corrupt, truncated, not a trace) — one clear error
    box naming the run and a stop of this page's script: the app stays up and the store is untouched."""
    try:
        return make()
    except ProfilingError as exc:
        show_error(exc, f"Cannot read the trace of run {run_id}")
        st.caption("The run is kept in the store; open another one, or delete it on the Runs page.")
        st.stop()


def session(run_id: str) -> _LockedSession:
    """The open trace session of a run (kept per trace path + mtime)."""
    return _readable(run_id, lambda: _open_session(*_trace_stamp(run_id)))


@st.cache_data(show_spinner="Analysing the trace ...", max_entries=64)
def _report(path: str, mtime_ns: int, config_json: str):
    from profiling_core.analyses import analyze
    config = ExperimentConfig.from_json(config_json) if config_json else None
    return analyze(_open_session(path, mtime_ns), config=config)


def report(run_id: str):
    """Every analysis of a run (``profiling_core.analyses.Report``), computed once per trace version.
    Treat its DataFrames as read-only."""
    def make():
        cfg = load_run(run_id).config
        return _report(*_trace_stamp(run_id), cfg.to_json() if cfg else "")
    return _readable(run_id, lambda: memo(("report", run_id), make))


@st.cache_data(show_spinner=False, max_entries=64)
def _findings(path: str, mtime_ns: int, config_json: str) -> list:
    try:
        from profiling_core.explain import findings as find
    except ImportError:
        return []
    config = ExperimentConfig.from_json(config_json) if config_json else None
    rep = _report(path, mtime_ns, config_json)
    try:
        return list(find(rep, config=config))
    except TypeError:
        return list(find(rep))


def findings(run_id: str) -> list:
    """Findings (id, question, title, text, evidence) derived from the run's trace; [] when unavailable."""
    def make():
        cfg = load_run(run_id).config
        return _findings(*_trace_stamp(run_id), cfg.to_json() if cfg else "")
    return _readable(run_id, lambda: memo(("findings", run_id), make))


def config_summary(run_id: str) -> str:
    run = load_run(run_id)
    cfg = run.config
    dev = (run.meta.get("device") or {})
    where = dev.get("name") or dev.get("type") or ""
    if cfg is None:
        return f"imported trace {md_code(run.meta.get('original_filename', run.name), 120)}"
    sched = f"schedule {cfg.wait}/{cfg.warmup_steps}/{cfg.active}×{cfg.repeat}"
    threads = f" · {dev['cpu_threads']} CPU threads" if dev.get("type") == "cpu" and dev.get("cpu_threads") else ""
    if cfg.is_matmul_add:
        what = (f"{cfg.size}² {cfg.dtype}{' · batch ' + str(cfg.batch) if cfg.batch else ''} · {cfg.bias} bias")
    else:
        what = (f"{md_text(cfg.workload)} · {cfg.dtype} · "
                + ", ".join(f"{md_text(k)} {md_text(str(v))}" for k, v in cfg.workload_knobs.items()))
    return (f"{md_code(cfg.name)} · {what} · "
            f"{'warm (' + str(cfg.warmup) + ' calls)' if cfg.warmup else 'cold'} · "
            f"{'eager' if cfg.compile == 'off' else 'compile ' + cfg.compile} · {sched} · {md_code(where)}{threads}")


@st.cache_resource(show_spinner="Asking torch about this machine ...")
def environment() -> dict:
    """torch / CUDA versions and the device (asked once of a subprocess, then kept)."""
    from profiling_core.run import environment_info
    return dict(environment_info())


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"


@st.cache_data(show_spinner=False, ttl=30)
def _store_size(root: str, mtime_ns: int) -> int:
    return RunStore(root).size_bytes()


def store_summary() -> tuple[str, str]:
    """The run store's folder and its size on disk."""
    root, mtime = _store_stamp()
    n = len(runs_frame()) + len(corrupt_runs())
    return root, f"{n} run{'s' if n != 1 else ''}, {human_bytes(_store_size(root, mtime))}"


@st.cache_data(show_spinner=False, max_entries=256)
def _chart_spec(name: str, frames: tuple, kwargs_json: str) -> dict:
    chart = getattr(charts, name)(*frames, **json.loads(kwargs_json))
    return chart.to_dict()


def chart(name: str, *frames: Optional[pd.DataFrame], **kwargs) -> dict:
    """The Vega-Lite spec of ``profiling_core.charts.<name>(*frames, **kwargs)``, cached by the frames' content,
    so a rerun on the same data costs a hash instead of building and validating an Altair chart."""
    return _chart_spec(name, tuple(frames), json.dumps(kwargs, sort_keys=True, default=str))


def mode_label(run_id: str) -> str:
    """eager, or the torch.compile mode; for imported traces guessed from the trace's compiled regions."""
    cfg = load_run(run_id).config
    if cfg is not None:
        return "eager" if cfg.compile == "off" else cfg.compile
    cb = report(run_id).compile_breakdown
    if len(cb) and cb["graph_launches"].sum() > 0:
        return "compile (CUDA graphs)"
    return "compile" if len(cb) and cb["compiled_regions"].sum() > 0 else "eager"


def run_size(run_id: str) -> Optional[int]:
    """The run's size along its workload's sweep axis (``size`` for matmul_add, e.g. ``seq_len`` for attention;
    None for a script); for an imported trace, the leading number of its name."""
    cfg = load_run(run_id).config
    if cfg is not None:
        knob = cfg.size_knob
        value = cfg.workload_knobs.get(knob) if knob else None
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    name = load_run(run_id).name
    head = name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def step_summary(run_id: str) -> dict:
    """Median per-step numbers of one run (CPU µs, GPU busy µs, busy fraction, launches, GPU ops)."""
    rep = report(run_id)
    st_ = rep.steps
    med = (lambda c: float(st_[c].median())) if len(st_) else (lambda c: float("nan"))
    return {"run_id": run_id, "name": load_run(run_id).name, "size": run_size(run_id), "mode": mode_label(run_id),
            "steps": len(st_), "cpu_us_per_step": med("cpu_dur_us"), "gpu_busy_us_per_step": med("gpu_busy_us"),
            "gpu_busy_fraction": med("gpu_busy_fraction"), "launches_per_step": med("launches"),
            "gpu_ops_per_step": med("gpu_ops"), "has_gpu": rep.has_gpu}


def summaries(run_ids: list[str]) -> pd.DataFrame:
    return pd.DataFrame([step_summary(r) for r in run_ids])


def calibrations() -> tuple[list, list]:
    """(the store's calibrations newest first, [(file, why unreadable)]) (``profiling_core.PeakBook``)."""
    from profiling_core.store import PeakBook
    return PeakBook(store().root).all()


def run_peaks(run_id: str):
    """The newest calibration of the run's device (name and torch version from meta.json), or None."""
    from profiling_core.store import PeakBook
    dev = load_run(run_id).meta.get("device")
    if not isinstance(dev, dict) or not isinstance(dev.get("name"), str):
        return None
    torch_version = dev.get("torch") if isinstance(dev.get("torch"), str) else None
    return PeakBook(store().root).find(dev["name"], torch_version=torch_version)


@st.cache_data(show_spinner="Judging the trace against the device's peaks ...", max_entries=64)
def _diagnosis(path: str, mtime_ns: int, config_json: str, peaks_json: str, cc: Optional[float]):
    from profiling_core.store import DevicePeaks
    from profiling_core import diagnose
    config = ExperimentConfig.from_json(config_json) if config_json else None
    peaks = DevicePeaks.from_dict(json.loads(peaks_json)) if peaks_json else None
    return diagnose(_open_session(path, mtime_ns), _report(path, mtime_ns, config_json), config, peaks,
                    compute_capability=cc)


def diagnosis(run_id: str):
    """The run's roofline rows and rule findings (``profiling_core.diagnosis``) against its device's calibration."""
    def make():
        run = load_run(run_id)
        cfg = run.config
        peaks = run_peaks(run_id)
        dev = run.meta.get("device") if isinstance(run.meta.get("device"), dict) else {}
        try:
            cc = float(dev.get("compute_capability"))
        except (TypeError, ValueError):
            cc = None
        return _diagnosis(*_trace_stamp(run_id), cfg.to_json() if cfg else "",
                          json.dumps(peaks.to_dict()) if peaks else "", cc)
    return _readable(run_id, lambda: memo(("diagnosis", run_id), make))


def peaks_frame(items: list) -> pd.DataFrame:
    """One row per (calibration, dtype or memory): measured best and median, the datasheet figure beside."""
    rows = []
    for p in items:
        sheet = p.datasheet() or {}
        for d, t in p.gemm_tflops.items():
            rows.append({"device": p.device, "torch": p.torch_version, "measured": p.measured_at[:16],
                         "what": f"GEMM {d} ({p.gemm_sizes.get(d)}³)", "measured best": t,
                         "median": p.gemm_tflops_median.get(d), "unit": "TFLOP/s",
                         "datasheet": (sheet.get("tflops") or {}).get(d)})
        rows.append({"device": p.device, "torch": p.torch_version, "measured": p.measured_at[:16],
                     "what": f"memory (copy of {p.copy_bytes / 2**20:,.0f} MiB)", "measured best": p.bandwidth_gbs,
                     "median": p.bandwidth_gbs_median, "unit": "GB/s", "datasheet": sheet.get("bandwidth_gbs")})
    return pd.DataFrame(rows)


def gemm_vs_peak(run_ids: list[str]) -> pd.DataFrame:
    """Per run: its GEMM (the GEMM rows of the diagnosis with the most total time) against its device's measured
    peak: run, size, mode, dtype, kernel, µs per call, achieved TFLOP/s, the peak, the fraction. Runs without a
    GEMM of known FLOPs are left out."""
    rows = []
    for r in run_ids:
        roof = diagnosis(r).roofline
        g = roof[roof["kind"] == "gemm"] if len(roof) else roof
        if g.empty:
            continue
        top = g.assign(total=g["time_us"] * g["count"]).sort_values("total", ascending=False).iloc[0]
        rows.append({"run": load_run(r).name, "run_id": r, "size": run_size(r), "mode": mode_label(r),
                     "dtype": top["dtype"], "kernel": top["kernel"], "µs per call": float(top["time_us"]),
                     "tflops": float(top["tflops"]), "peak": top["peak"], "fraction_of_peak": top["fraction_of_peak"]})
    return pd.DataFrame(rows)


def fusions(run_id: str, known_ops: tuple = ()) -> pd.DataFrame:
    """The Triton kernels of a run and the aten ops each replaced (``analyses.triton_fusions``); ``known_ops``, e.g.
    an eager run's aten ops, help join the kernel names' words back into op names."""
    from profiling_core.analyses import triton_fusions
    return _readable(run_id, lambda: memo(("fusions", run_id, known_ops),
                                           lambda: triton_fusions(session(run_id), known_ops)))
