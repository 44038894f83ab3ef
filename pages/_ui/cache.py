"""Cached access to the run store and to every run's analyses: with :mod:`.memory` (a run's memory analyses, built
on these), the one place the app caches.

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

import profiling_core.present as present
from profiling_core import ExperimentConfig, RunStore
from profiling_core.errors import ProfilingError
from profiling_core.present import charts

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
    """(readable runs, corrupt runs) of the store at ``root`` (``present.runs_table``)."""
    return present.runs_table(RunStore(root).list())


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


@st.cache_data(show_spinner=False, max_entries=16)
def _machines(root: str, mtime_ns: int) -> tuple[pd.DataFrame, list]:
    """(the store's machines, ``present.machines_table``; its configs run on two machines or more,
    ``store.match_configs``, as [(config name, [(machine label, [run ids, newest first])])])."""
    from profiling_core.store import match_configs
    runs = RunStore(root).list()
    matches = [(m.name, [(machine.label, [r.run_id for r in rs]) for machine, rs in m.machines])
               for m in match_configs(runs)]
    return present.machines_table(runs), matches


def machines() -> pd.DataFrame:
    """The store's machines, one row each (``present.machines_table``). Do not modify it."""
    return memo(("machines",), lambda: _machines(*_store_stamp()))[0]


def config_matches() -> list:
    """The configs run on two machines or more (``store.match_configs``): [(config name, [(machine label,
    [its run ids of that config, newest first])])]."""
    return memo(("machines",), lambda: _machines(*_store_stamp()))[1]


def load_run(run_id: str):
    return memo(("run", run_id), lambda: store().load(run_id))


def forget_runs() -> None:
    """After a run was added or deleted in this script run."""
    kept = st.session_state.setdefault(_MEMO, {})
    for k in [k for k in kept if k[0] in ("runs", "run", "labels", "machines")]:
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


_HANDED: dict[tuple[str, int], Any] = {}
"""Sessions an import's check loaded, by (trace path, mtime ns), until the page opens that trace
(:func:`hand_over_session`); shared by every browser tab, as the opened sessions are."""
_HANDED_MAX = 4
_HANDED_LOCK = threading.Lock()


def hand_over_session(run, session) -> None:
    """``RunStore.import_trace``'s ``checked``: keep the session its check loaded, so that opening the imported run
    takes its tables over instead of loading the file a second time (``open_trace``'s ``loaded``). A few at most;
    the oldest is closed beyond that."""
    try:
        key = (str(run.trace_path), run.trace_path.stat().st_mtime_ns)
    except OSError:
        session.close()
        return
    with _HANDED_LOCK:
        _HANDED[key] = session
        while len(_HANDED) > _HANDED_MAX:
            _HANDED.pop(next(iter(_HANDED))).close()


@st.cache_resource(show_spinner="Opening the trace ...", max_entries=8)
def _open_session(path: str, mtime_ns: int) -> _LockedSession:
    from profiling_core import open_trace
    with _HANDED_LOCK:
        loaded = _HANDED.pop((path, mtime_ns), None)
    # SQLite tables written in the background: the analyses do not need them, the Trace lab then finds them ready
    return _LockedSession(open_trace(path, sql_tables="background", loaded=loaded))


def _unreadable(run_id: str, exc: ProfilingError) -> None:
    show_error(exc, f"Cannot read the trace of run {run_id}")
    st.caption("The run is kept in the store; open another one, or delete it on the Runs page.")


def _readable(run_id: str, make: Callable[[], Any]) -> Any:
    """``make()``, or — when the run's trace cannot be read (corrupt, truncated, not a trace) — one clear error
    box naming the run and a stop of this page's script: the app stays up and the store is untouched."""
    try:
        return make()
    except ProfilingError as exc:
        _unreadable(run_id, exc)
        st.stop()


def readable(run_id: str) -> bool:
    """Whether the run's trace can be read (its :func:`report` is made, and kept); when it cannot, the same error box
    as :func:`report`'s, and False instead of a stop, so that the page can go on to what does not need the run."""
    try:
        _report_of(run_id)
    except ProfilingError as exc:
        _unreadable(run_id, exc)
        return False
    return True


def open_session(run_id: str) -> _LockedSession:
    """The open trace session of a run (kept per trace path + mtime), or the error that its trace cannot be read
    (``ProfilingError``): for a part of a page that says so itself and lets the rest be drawn."""
    return _open_session(*_trace_stamp(run_id))


def session(run_id: str) -> _LockedSession:
    """The open trace session of a run (:func:`open_session`); when its trace cannot be read, an error box and a stop
    of the page (:func:`_readable`)."""
    return _readable(run_id, lambda: open_session(run_id))


@st.cache_data(show_spinner="Analysing the trace ...", max_entries=64)
def _report(path: str, mtime_ns: int, config_json: str):
    from profiling_core.analyses import analyze
    config = ExperimentConfig.from_json(config_json) if config_json else None
    return analyze(_open_session(path, mtime_ns), config=config)


def _report_of(run_id: str):
    def make():
        cfg = load_run(run_id).config
        return _report(*_trace_stamp(run_id), cfg.to_json() if cfg else "")
    return memo(("report", run_id), make)


def report(run_id: str):
    """Every analysis of a run (``profiling_core.analyses.Report``), computed once per trace version.
    Treat its DataFrames as read-only."""
    return _readable(run_id, lambda: _report_of(run_id))


@st.cache_data(show_spinner=False, max_entries=16)
def _overview(path: str, mtime_ns: int, config_json: str) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    return charts.overview_from_chains(_report(path, mtime_ns, config_json).dispatch_chains)


def overview(run_id: str) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """The run's whole-run timeline: (slices, step starts, slices left out) (``charts.overview_from_chains`` of its
    report's dispatch chains), shaped once per trace version, not at every rerun (tens of ms on a big trace)."""
    def make():
        cfg = load_run(run_id).config
        return _overview(*_trace_stamp(run_id), cfg.to_json() if cfg else "")
    return _readable(run_id, lambda: memo(("overview", run_id), make))


@st.cache_data(show_spinner=False, max_entries=64)
def _step_timeline(path: str, mtime_ns: int, config_json: str, step: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    chains = _report(path, mtime_ns, config_json).dispatch_chains
    return charts.timeline_from_chain(chains[chains["step"] == step])


def step_timeline(run_id: str, step: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One step of the run on the timeline: (slices, launch → GPU op links) (``charts.timeline_from_chain`` of that
    step's dispatch chain), shaped once per trace version and step."""
    def make():
        cfg = load_run(run_id).config
        return _step_timeline(*_trace_stamp(run_id), cfg.to_json() if cfg else "", int(step))
    return _readable(run_id, lambda: memo(("step_timeline", run_id, int(step)), make))


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
    """The run's configuration on one line of Markdown (``present.config_summary``)."""
    return present.config_summary(load_run(run_id))


@st.cache_resource(show_spinner="Asking torch about this machine ...")
def environment() -> dict:
    """torch / CUDA versions and the device (asked once of a subprocess, then kept)."""
    from profiling_core.run import environment_info
    return dict(environment_info())


@st.cache_data(show_spinner=False, ttl=30)
def _store_size(root: str, mtime_ns: int) -> int:
    return RunStore(root).size_bytes()


def store_summary() -> tuple[str, str]:
    """The run store's folder and its size on disk."""
    root, mtime = _store_stamp()
    n = len(runs_frame()) + len(corrupt_runs())
    return root, present.store_size_text(n, _store_size(root, mtime))


@st.cache_data(show_spinner=False, max_entries=256)
def _chart_spec(name: str, frames: tuple, kwargs_json: str) -> dict:
    return present.chart_spec(getattr(charts, name)(*frames, **json.loads(kwargs_json)))


def chart(name: str, *frames: Optional[pd.DataFrame], **kwargs) -> dict:
    """The Vega-Lite spec of ``profiling_core.charts.<name>(*frames, **kwargs)``, cached by the frames' content,
    so a rerun on the same data costs a hash instead of building and validating an Altair chart."""
    return _chart_spec(name, tuple(frames), json.dumps(kwargs, sort_keys=True, default=str))


def mode_label(run_id: str) -> str:
    """eager, or the torch.compile mode (``present.mode_label``); an imported trace's is read from its report."""
    run = load_run(run_id)
    return present.mode_label(run, report(run_id) if run.config is None else None)


def summaries(run_ids: list[str]) -> pd.DataFrame:
    """The median step of each run, one row per run (``present.step_summaries``)."""
    return present.step_summaries((load_run(r), report(r)) for r in run_ids)


def calibrations() -> tuple[list, list]:
    """(the store's calibrations newest first, [(file, why unreadable)]) (``profiling_core.PeakBook``)."""
    from profiling_core.store import PeakBook
    return PeakBook(store().root).all()


def run_peaks(run_id: str):
    """The newest calibration of the run's device (``PeakBook.for_run``), or None."""
    from profiling_core.store import PeakBook
    return PeakBook(store().root).for_run(load_run(run_id))


@st.cache_data(show_spinner="Judging the trace against the device's peaks ...", max_entries=64)
def _diagnosis(path: str, mtime_ns: int, config_json: str, peaks_json: str, cc: Optional[float],
               process_peak: Optional[int]):
    from profiling_core.store import DevicePeaks
    from profiling_core import diagnose
    config = ExperimentConfig.from_json(config_json) if config_json else None
    peaks = DevicePeaks.from_dict(json.loads(peaks_json)) if peaks_json else None
    return diagnose(_open_session(path, mtime_ns), _report(path, mtime_ns, config_json), config, peaks,
                    compute_capability=cc, process_peak_bytes=process_peak)


def diagnosis(run_id: str):
    """The run's roofline rows and rule findings (``profiling_core.diagnosis``) against its device's calibration,
    with the process's own peak device memory from its meta.json (``Run.process_peak_bytes``; None for an imported
    trace), as ``analyze`` gives them."""
    def make():
        run = load_run(run_id)
        cfg = run.config
        peaks = run_peaks(run_id)
        return _diagnosis(*_trace_stamp(run_id), cfg.to_json() if cfg else "",
                          json.dumps(peaks.to_dict()) if peaks else "", run.compute_capability,
                          run.process_peak_bytes)
    return _readable(run_id, lambda: memo(("diagnosis", run_id), make))


def gemm_vs_peak(run_ids: list[str]) -> pd.DataFrame:
    """Per run: its GEMM against its device's measured peak (``present.gemm_vs_peak``); runs without a GEMM of known
    FLOPs are left out."""
    items = []
    for r in run_ids:
        run = load_run(r)
        items.append((run, report(r) if run.config is None else None, diagnosis(r)))
    return present.gemm_vs_peak(items)


def machine_comparison(run_ids: list[str]):
    """The runs of one config side by side by machine (``present.machine_comparison``: each machine's runs its
    median and spread), each judged against its own device's peaks (:func:`diagnosis`), with its findings."""
    return present.machine_comparison((load_run(r), report(r), diagnosis(r), findings(r)) for r in run_ids)


def fusions(run_id: str, known_ops: tuple = ()) -> pd.DataFrame:
    """The Triton kernels of a run and the aten ops each replaced (``analyses.triton_fusions``); ``known_ops``, e.g.
    an eager run's aten ops, help join the kernel names' words back into op names."""
    from profiling_core.analyses import triton_fusions
    return _readable(run_id, lambda: memo(("fusions", run_id, known_ops),
                                           lambda: triton_fusions(session(run_id), known_ops)))
