"""What every page shares: the run store, cached analyses, background jobs, chart + download blocks.

Pages are UI only; everything they need from ``profiling_core`` goes through here, so caching lives in one
place and is keyed by run id (or trace path + mtime), never by mutable objects:

- ``st.cache_resource`` holds open trace sessions (one per trace file version, shared, behind a lock);
- ``st.cache_data`` holds DataFrames and findings per run id (each caller gets a copy);
- long work (a profile, a sweep) runs in a background ``Job`` kept in ``st.session_state``, so switching
  pages or moving a display-only slider never starts it again, and the Cancel button can reach it.
"""
from __future__ import annotations

import os

import functools
import json
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pandas as pd
import streamlit as st

from profiling_core import ExperimentConfig, RunStore
from profiling_core.workloads import get_workload, workload_names
from profiling_core.present import md_code, md_text
import profiling_core.config as _config
from profiling_core.present import charts
from profiling_core.present import export
from profiling_core.errors import ConfigError, ProfilingError, WorkerError

CURRENT_RUN = "current_run_id"
"""session_state key of the run the analysis pages show."""

SIZES = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
WARMUP_CALLS_LABEL = "Warm-up calls before profiling (0 = cold)"
WARMUP_CALLS_HELP = ("calls of the workload before the profiler starts: a cold run (0) profiles the first calls, "
                     "with their one-time costs; not the schedule's warm-up steps, which the profiler traces and "
                     "throws away")
SCHEDULE_WARMUP_LABEL = "schedule warm-up steps"
SCHEDULE_WARMUP_HELP = ("steps the profiler traces but discards before the active ones (torch.profiler's schedule); "
                        "not the warm-up calls before profiling")

# the config's own choices (profiling_core.config), as lists for the widgets
DTYPES, COMPILE_MODES, DEVICES, BIASES, MATMUL_PRECISIONS = (list(c) for c in (
    _config.DTYPES, _config.COMPILE_MODES, _config.DEVICES, _config.BIASES, _config.MATMUL_PRECISIONS))
PERFETTO_HOWTO = ("Open https://ui.perfetto.dev, click **Open trace file** in the left bar and pick the "
                  "downloaded `trace.json` (the file stays in your browser; nothing is uploaded).")


# --- one script run's memo ------------------------------------------------------------------------

_MEMO = "_rerun_memo"


def new_script_run() -> None:
    """Called by the frame at the top of every script run: forget the previous run's memo."""
    st.session_state[_MEMO] = {}
    st.session_state[_IN_FRAME] = True


_IN_FRAME = "_in_app_frame"
_DEEP_LINK = "_deep_link"


def in_frame(page_file: str) -> None:
    """Called first by every page: a page must run inside the app's frame (streamlit_app.py: st.navigation, the
    sidebar). Until some session has run the frame, Streamlit routes a fresh session's deep link (a bookmark, a
    reload on /profile) through the legacy ``pages/`` directory, running the page alone with Streamlit's file-list
    navigation. Then the page sends the session through the frame, which opens this page again
    (:func:`follow_deep_link`)."""
    if st.session_state.get(_IN_FRAME):
        return
    st.session_state[_DEEP_LINK] = f"pages/{os.path.basename(page_file)}"
    st.switch_page("streamlit_app.py")


def follow_deep_link() -> None:
    """Called by the frame after st.navigation: open the page a deep link asked for (see :func:`in_frame`)."""
    target = st.session_state.pop(_DEEP_LINK, None)
    if target:
        st.switch_page(target)


def _memo(key: tuple, make: Callable[[], Any]) -> Any:
    """``make()`` once per script run (cache_data copies are not free when a page asks ten times)."""
    memo = st.session_state.setdefault(_MEMO, {})
    if key not in memo:
        memo[key] = make()
    return memo[key]


# --- the run store ----------------------------------------------------------------------------------

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
    return _memo(("runs",), lambda: _runs_frames(*_store_stamp()))


def runs_frame() -> pd.DataFrame:
    """The store's readable runs, newest first (cached until the store's folder changes); runs whose meta.json
    cannot be used are left out (:func:`corrupt_runs`). Do not modify it."""
    return _frames()[0]


def corrupt_runs() -> pd.DataFrame:
    """The store's runs whose meta.json cannot be used: ``run_id`` and ``problem`` (why). Only the Runs page lists
    them, so that they can be deleted. Do not modify it."""
    return _frames()[1]


def load_run(run_id: str):
    return _memo(("run", run_id), lambda: store().load(run_id))


def forget_runs() -> None:
    """After a run was added or deleted in this script run."""
    memo = st.session_state.setdefault(_MEMO, {})
    for k in [k for k in memo if k[0] in ("runs", "run", "labels")]:
        del memo[k]


def current_run_id() -> Optional[str]:
    """The run the pages show: the one chosen last, else the newest in the store."""
    rid = st.session_state.get(CURRENT_RUN)
    runs = runs_frame()
    if rid and rid in set(runs["run_id"]):
        return rid
    return runs["run_id"].iloc[0] if len(runs) else None


def dtype_select(container, key: str) -> str:
    """The dtype control every form shares: bf16 on a GPU, fp32 on a CPU by default, with the reason."""
    cuda = bool(environment().get("cuda_available"))
    return container.selectbox(
        "dtype", DTYPES, index=DTYPES.index("bf16" if cuda else "fp32"), key=key,
        help="default bf16 on a GPU (its tensor cores' fast path, as the study) and fp32 on a CPU (CPUs have no fast "
             "bf16 GEMM: a bf16 run there measures a slow conversion path)")


def set_current_run(run_id: Optional[str]) -> None:
    st.session_state[CURRENT_RUN] = run_id


_RUNS_VERSION = "_runs_version"


def announce_runs(run_ids: list[str]) -> None:
    """A page's own action made these runs (a profile, a sweep, an import): the last becomes the current run, and every
    run picker shows the new runs the next time it is drawn (:func:`_sync_picker`), on this page and the others."""
    forget_runs()
    if run_ids:
        set_current_run(run_ids[-1])
    st.session_state[_RUNS_VERSION] = st.session_state.get(_RUNS_VERSION, 0) + 1


def end_action(key: str, run_ids: list[str], notices: list[tuple]) -> None:
    """A job under ``key`` ended: announce its runs, keep what to tell the user (:func:`_show_notices`), and run the
    page again, so that everything on it (the sidebar, drawn first, and every picker) shows the new runs and the
    job's progress box and Cancel button are gone."""
    announce_runs(run_ids)
    st.session_state[f"_notices_{key}"] = notices
    st.rerun()


def show_notices(key: str) -> None:
    """What the job under ``key`` left to tell, once: ("toast" | "success" | "warning", text) or ("error", exception,
    title); a user's own cancel reads as cancelled, not as a failure."""
    for kind, *what in st.session_state.pop(f"_notices_{key}", []):
        if kind == "error":
            exc, title = what
            if isinstance(exc, WorkerError) and exc.kind == "cancelled":
                st.warning(f"Cancelled: {md_text(exc.message)}", icon=":material/stop_circle:")
            else:
                show_error(exc, title)
        elif kind == "toast":
            st.toast(what[0], icon=":material/check_circle:")
        else:
            getattr(st, kind)(what[0])


def _sync_picker(key: str, value, valid: Callable[[object], bool]) -> None:
    """Give the run picker ``key`` the value ``value`` before it is drawn, when it has none, holds a run that is gone
    (``valid`` says), or runs were announced since it last got one; otherwise it keeps the user's choice. (The widget
    is then drawn without a default, so Streamlit never sees both a default and a Session State value.)"""
    version = st.session_state.get(_RUNS_VERSION, 0)
    mark = f"_{key}_runs_version"
    if key not in st.session_state or st.session_state.get(mark) != version or not valid(st.session_state[key]):
        st.session_state[key] = value
        st.session_state[mark] = version


def _labels() -> dict:
    runs = runs_frame()
    return _memo(("labels",), lambda: {r.run_id: f"{r.name}  ·  {r.started_at}  ·  {r.run_id[-4:]}"
                                       for r in runs.itertuples()})


def run_label(run_id: str) -> str:
    return _labels().get(run_id, run_id)


def label_of() -> Callable[[str], str]:
    """A format_func for run ids that needs no script run (AppTest calls format_funcs from outside one)."""
    labels = dict(_labels())
    return lambda run_id: labels.get(run_id, run_id)


def run_picker(label: str, key: str, *, default: Optional[str] = None, help: Optional[str] = None
               ) -> Optional[str]:
    """A selectbox of the store's runs (by label), returning the chosen run id: ``default`` (else the current run)
    until the user picks another, and again after a page's action made new runs (:func:`announce_runs`)."""
    runs = runs_frame()
    if not len(runs):
        return None
    ids = list(runs["run_id"])
    want = default if default in ids else current_run_id()
    _sync_picker(key, want if want in ids else ids[0], lambda v: v in ids)
    return st.selectbox(label, ids, format_func=label_of(), key=key, help=help)


def runs_multiselect(label: str, key: str, default: list[str], *, help: Optional[str] = None) -> list[str]:
    """A multiselect of the store's runs, with the same rule as :func:`run_picker`: ``default`` until the user
    changes the choice, and again after a page's action made new runs."""
    ids = list(runs_frame()["run_id"])
    known = set(ids)
    _sync_picker(key, [r for r in default if r in known], lambda v: all(r in known for r in v))
    return st.multiselect(label, ids, format_func=label_of(), key=key, help=help)


def newest_run(*, warm: bool, like: Optional[str] = None) -> Optional[str]:
    """The newest run profiled warm (warm-up calls > 0) or cold; imported traces count by their name. ``like``: only
    runs of that run's size and dtype (a cold/warm comparison compares like with like), when there is one."""
    runs = runs_frame()
    if like is not None:
        ref = runs[runs["run_id"] == like]
        if len(ref) and pd.notna(ref["size"].iloc[0]):
            same = runs[(runs["size"] == ref["size"].iloc[0]) & (runs["dtype"] == ref["dtype"].iloc[0])]
            if len(same) and newest_of(same, warm) is not None:
                runs = same
    return newest_of(runs, warm) or current_run_id()


def newest_of(runs: pd.DataFrame, warm: bool) -> Optional[str]:
    """The newest of ``runs`` (newest first) profiled warm or cold (see :func:`newest_run`); None without one."""
    for _, r in runs.iterrows():
        if pd.notna(r["warmup"]):
            if (r["warmup"] > 0) == warm:
                return r["run_id"]
        elif ("_warm_" in str(r["name"])) == warm:
            return r["run_id"]
    return None


def _trace_stamp(run_id: str) -> tuple[str, int]:
    path = load_run(run_id).trace_path
    try:
        return str(path), path.stat().st_mtime_ns
    except OSError:
        return str(path), 0


# --- trace sessions and analyses -------------------------------------------------------------------

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
    return _readable(run_id, lambda: _memo(("report", run_id), make))


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
    return _readable(run_id, lambda: _memo(("findings", run_id), make))


def show_findings(items: list, *, questions: Optional[set] = None) -> None:
    """Findings as callouts; ``questions`` keeps only those answering these study question numbers. A finding's
    title and text are plain text that quotes the trace's names, so they are shown escaped (:func:`md_text`)."""
    shown = [f for f in items if questions is None or getattr(f, "question", None) in questions]
    if not shown:
        st.caption("No findings for this question in this trace.")
        return
    for f in shown:
        with st.container(border=True):
            q = getattr(f, "question", None)
            st.markdown(f"**{md_text(getattr(f, 'title', ''))}**" + (f"  ·  study question {q}" if q else ""))
            st.markdown(md_text(getattr(f, "text", str(f))))
            ev = getattr(f, "evidence", None)
            if isinstance(ev, pd.DataFrame):
                if not ev.empty:
                    with st.expander("evidence"):
                        st.dataframe(ev, hide_index=True)
            elif ev:
                with st.expander("evidence"):
                    st.json(ev if isinstance(ev, (dict, list)) else {"evidence": str(ev)}, expanded=True)


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


# --- environment --------------------------------------------------------------------------------

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


def sql_engine() -> tuple[str, str]:
    """Which SQL engine opens traces here, and why (from the newest run's session when there is one)."""
    rid = current_run_id()
    if rid is None:
        return "not chosen yet", "the engine is picked when the first trace is opened"
    try:
        s = session(rid)
        return str(getattr(s, "engine", "?")), str(getattr(s, "engine_reason", ""))
    except Exception as exc:  # an unreadable trace must not break the home page
        return "unavailable", f"{type(exc).__name__}: {exc}"


# --- chart blocks with downloads ----------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _png(spec_json: str) -> bytes:
    return export.chart_png(json.loads(spec_json))


@functools.lru_cache(maxsize=64)
def _svg(spec_json: str) -> str:
    return export.chart_svg(json.loads(spec_json))


@st.cache_data(show_spinner=False, max_entries=256)
def _chart_spec(name: str, frames: tuple, kwargs_json: str) -> dict:
    chart = getattr(charts, name)(*frames, **json.loads(kwargs_json))
    return chart.to_dict()


def chart(name: str, *frames: Optional[pd.DataFrame], **kwargs) -> dict:
    """The Vega-Lite spec of ``profiling_core.charts.<name>(*frames, **kwargs)``, cached by the frames' content,
    so a rerun on the same data costs a hash instead of building and validating an Altair chart."""
    return _chart_spec(name, tuple(frames), json.dumps(kwargs, sort_keys=True, default=str))


def chart_block(spec: dict, data: Optional[pd.DataFrame], name: str, key: str) -> None:
    """Draw a chart spec (from :func:`chart`) and PNG / SVG / CSV download buttons (images made only on click)."""
    shown = dict(spec)
    if "facet" not in spec:
        # Streamlit's default autosize ("fit") squeezes charts with a discrete y axis into a sliver;
        # fit the width only and keep the height the chart asks for.
        shown["autosize"] = {"type": "fit-x", "contains": "padding"}
    st.vega_lite_chart(shown, width="stretch", key=f"chart_{key}")
    spec_json = json.dumps(spec, sort_keys=True, default=str)
    base = export.safe_filename(name)
    cols = st.columns([1, 1, 1, 5])
    cols[0].download_button("PNG", data=lambda: _png(spec_json), file_name=f"{base}.png", mime="image/png",
                            key=f"png_{key}", on_click="ignore", icon=":material/image:")
    cols[1].download_button("SVG", data=lambda: _svg(spec_json), file_name=f"{base}.svg",
                            mime="image/svg+xml", key=f"svg_{key}", on_click="ignore", icon=":material/draw:")
    if data is not None:
        cols[2].download_button("CSV", data=lambda: export.dataframe_csv(data), file_name=f"{base}.csv",
                                mime="text/csv", key=f"csv_{key}", on_click="ignore", icon=":material/table:")


TABLE_ROWS_SHOWN = 25
"""Rows a table shows without scrolling; longer ones scroll inside their box (the CSV holds every row)."""


def table_block(df: pd.DataFrame, name: str, key: str, **kwargs) -> None:
    """A DataFrame with a CSV download button, tall enough for all its rows up to ``TABLE_ROWS_SHOWN`` (Streamlit's
    default box shows ten and cuts the rest off behind a scroll)."""
    kwargs.setdefault("height", fit_height(df))
    st.dataframe(df, hide_index=True, **kwargs)
    st.download_button("CSV", data=lambda: export.dataframe_csv(df), file_name=f"{export.safe_filename(name)}.csv",
                       mime="text/csv", key=f"csv_{key}", on_click="ignore", icon=":material/table:")


def fit_height(df: pd.DataFrame) -> int:
    """The height (px) of a table box that holds all of ``df``'s rows, up to ``TABLE_ROWS_SHOWN``."""
    return 38 + 35 * max(1, min(len(df), TABLE_ROWS_SHOWN))


def report_button(title: str, sections: list, *, configs: Optional[dict] = None, key: str) -> None:
    """Download one self-contained HTML report of the page (charts inlined as SVG; built on click)."""
    env = {k: v for k, v in environment().items() if v is not None}

    def build() -> str:
        return export.html_report(title, sections, configs=configs, environment=env)

    st.download_button("Download HTML report", data=build, file_name=f"{export.safe_filename(title)}.html",
                       mime="text/html", key=f"report_{key}", on_click="ignore", icon=":material/description:")


# --- background jobs ----------------------------------------------------------------------------

@dataclass
class Job:
    """Work running in a background thread, kept in session_state across reruns and page switches."""

    label: str
    cancel_event: threading.Event = field(default_factory=threading.Event)
    message: str = "starting ..."
    fraction: float = 0.0
    result: Any = None
    error: Optional[BaseException] = None
    error_text: str = ""
    started: float = field(default_factory=time.monotonic)
    finished: Optional[float] = None
    thread: Optional[threading.Thread] = None

    @property
    def running(self) -> bool:
        return self.finished is None

    def cancel(self) -> None:
        self.cancel_event.set()
        self.message = "cancelling ..."

    def status(self, message: str) -> None:
        self.message = str(message)

    def progress(self, p: Any) -> None:
        self.fraction = float(getattr(p, "fraction", 0.0))
        self.message = str(getattr(p, "message", p))


def _jobs() -> dict:
    return st.session_state.setdefault("_jobs", {})


def start_job(key: str, label: str, fn: Callable[[Job], Any]) -> Job:
    """Run ``fn(job)`` in a background thread; ``fn`` reports through ``job.status`` / ``job.progress``."""
    job = Job(label)

    def target():
        try:
            job.result = fn(job)
        except BaseException as exc:  # shown on the page, never raised into the server
            job.error = exc
            job.error_text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        finally:
            job.fraction = 1.0
            job.finished = time.monotonic()

    job.thread = threading.Thread(target=target, name=f"job-{key}", daemon=True)
    _jobs()[key] = job
    job.thread.start()
    return job


def get_job(key: str) -> Optional[Job]:
    return _jobs().get(key)


def pop_job(key: str) -> Optional[Job]:
    return _jobs().pop(key, None)


def follow_job(key: str, *, poll_s: float = 0.2) -> Optional[Job]:
    """If a job runs under ``key``: show its progress and a Cancel button until it ends; return it.

    Clicking anything reruns the page; the job keeps running in its thread and this picks it up again.
    """
    job = get_job(key)
    if job is None:
        return None
    if job.running:
        with st.container(border=True):
            st.button("Cancel", key=f"cancel_{key}", on_click=job.cancel, icon=":material/stop_circle:")
            bar = st.progress(0.0, text=md_text(f"{job.label}: {job.message}"))
            while job.running:
                elapsed = time.monotonic() - job.started
                bar.progress(min(max(job.fraction, 0.0), 1.0),
                             text=md_text(f"{job.label}: {job.message} ({elapsed:.0f} s)"))
                time.sleep(poll_s)
            bar.progress(1.0, text=md_text(f"{job.label}: {job.message}"))
    return job


def show_error(exc: BaseException, what: str = "The run failed") -> None:
    """One readable error box; the worker's stderr tail folded away. ``what`` is plain text (it may name a run or a
    file); it and the error's message, which may quote a file name or a trace, are shown escaped."""
    what = md_text(what)
    if isinstance(exc, WorkerError):
        st.error(f"**{what}** ({md_text(exc.kind)}): {md_text(exc.message)}", icon=":material/error:")
        if exc.stderr_tail:
            with st.expander("worker stderr (last lines)"):
                st.code(exc.stderr_tail, language="text")
    elif isinstance(exc, (ProfilingError, ValueError)):
        st.error(f"**{what}**: {md_text(exc)}", icon=":material/error:")
    else:
        st.error(f"**{what}**: {type(exc).__name__}: {md_text(exc)}", icon=":material/error:")


# --- the profile form -------------------------------------------------------------------------------

SCRIPT_CONTRACT = ("Your file defines `make_step(device, dtype)` (or the function you name) returning "
                   "`(step_fn, inputs)`: build the model and inputs on `device` (\"cpu\" or \"cuda\") in `dtype` "
                   "(a torch dtype); each profiler step calls `step_fn(*inputs)`. It runs in the worker process, "
                   "with your rights, as `python file.py` would.")


def knob_widget(col, key: str, knob, value):
    """One workload knob as the widget its kind asks for (``profiling_core.workloads.Knob``)."""
    label = knob.name + (f" ({knob.when[0]} {knob.when[1]} only)" if knob.when else "")
    if knob.kind == "bool":
        return col.checkbox(label, value=bool(value), key=key, help=knob.help)
    if knob.kind == "choice":
        return col.selectbox(label, list(knob.choices), index=list(knob.choices).index(value), key=key,
                             help=knob.help)
    if knob.kind == "int":
        return int(col.number_input(label, min_value=knob.range[0], max_value=knob.range[1], value=int(value),
                                    step=1, key=key, help=knob.help))
    if knob.kind == "float":
        return float(col.number_input(label, min_value=float(knob.range[0]), max_value=float(knob.range[1]),
                                      value=float(value), step=0.25, key=key, help=knob.help))
    return col.text_input(label, value=str(value), key=key, help=knob.help)


def config_form(key: str, *, defaults: Optional[dict] = None, submit_label: str = "Run profile",
                show_size: bool = True, show_compile: bool = True,
                workloads: bool = True) -> Optional[ExperimentConfig]:
    """The experiment knobs in one st.form; returns a validated config on submit (errors shown inline).

    workloads: a workload selector above the form (it reruns the page, so the form shows that workload's knobs,
    drawn from the registry's ``Knob``s); matmul_add's form is the study's (size, batch, bias). False: matmul_add
    only."""
    d = {**ExperimentConfig().to_dict(), "size": 64, "active": 3, **(defaults or {})}
    names = workload_names()
    wl_name = d.get("workload", "matmul_add")
    if workloads:
        wl_name = st.selectbox("Workload", names, index=names.index(wl_name), key=f"{key}_workload",
                               help="what each profiled step runs; the study's is matmul_add")
    wl = get_workload(wl_name)
    if workloads:
        st.caption(md_text(wl.description[:1].upper() + wl.description[1:] + "."))
    if wl_name == "script":
        st.caption(SCRIPT_CONTRACT)
    with st.form(key):
        c1, c2, c3 = st.columns(3)
        size, batch, bias, knob_values = d["size"], d["batch"] or 0, d["bias"], {}
        if wl_name == "matmul_add":
            if show_size:
                preset = c1.select_slider("Matrix size n (n×n)", options=SIZES,
                                          value=d["size"] if d["size"] in SIZES else 64, key=f"{key}_size")
                free = c1.number_input("… or any size (0 = use the slider)", min_value=0, max_value=65536,
                                       value=0 if d["size"] in SIZES else d["size"], step=1, key=f"{key}_free")
                size = int(free) if free else int(preset)
        else:
            given = {**wl.defaults(), **(d.get("knobs") or {})}
            cols = (c1, c2, c3)
            for i, knob in enumerate(wl.knobs):
                knob_values[knob.name] = knob_widget(cols[i % 3], f"{key}_{wl_name}_{knob.name}", knob,
                                                      given[knob.name])
        dtype = dtype_select(c2, f"{key}_dtype")
        device = c3.selectbox("Device", DEVICES, index=DEVICES.index(d["device"]), key=f"{key}_device",
                              help="auto: CUDA when available, else CPU")
        if wl_name == "matmul_add":
            batch = c2.number_input("Batch (0 = none; 8 turns aten::mm into aten::bmm)", min_value=0,
                                    max_value=4096, value=int(d["batch"] or 0), key=f"{key}_batch")
            bias = c1.selectbox("Bias shape", BIASES, index=BIASES.index(d["bias"]), key=f"{key}_bias",
                                help="matrix: b is shaped like x, as in the study; vector: b is (n,). Under "
                                     "torch.compile a matrix bias is copied into the output (a Memcpy DtoD) before "
                                     "the GEMM; a vector bias rides in the GEMM's epilogue")
        warmup = c3.number_input(WARMUP_CALLS_LABEL, min_value=0, max_value=10000, value=int(d["warmup"]),
                                 key=f"{key}_warmup", help=WARMUP_CALLS_HELP)
        threads = c2.number_input("CPU threads (0 = torch's default, the machine's cores)", min_value=0,
                                  max_value=1024, value=int(d.get("threads") or 0), key=f"{key}_threads",
                                  help="torch.set_num_threads for the run: on a CPU the step time depends on it "
                                       "as much as on the size; recorded in meta.json")
        precision = c3.selectbox("fp32 matmul precision", MATMUL_PRECISIONS,
                                 index=MATMUL_PRECISIONS.index(d["matmul_precision"]), key=f"{key}_precision",
                                 help="torch.set_float32_matmul_precision: highest = full fp32 (torch's default); "
                                      "high = fp32 GEMMs may use TF32 tensor cores (much faster on a GPU that has "
                                      "them, ~10 mantissa bits); changes only fp32 runs")
        compile_mode = d["compile"]
        if show_compile:
            compile_mode = c1.selectbox("torch.compile", COMPILE_MODES, index=COMPILE_MODES.index(d["compile"]),
                                        key=f"{key}_compile", help="off = eager")
        st.caption("Profiler schedule: wait → warm-up → active steps, repeated")
        s1, s2, s3, s4 = st.columns(4)
        wait = s1.slider("wait", 0, 10, int(d["wait"]), key=f"{key}_wait")
        warm_steps = s2.slider(SCHEDULE_WARMUP_LABEL, 0, 10, int(d["warmup_steps"]), key=f"{key}_wsteps",
                               help=SCHEDULE_WARMUP_HELP)
        active = s3.slider("active", 1, 50, int(d["active"]), key=f"{key}_active")
        repeat = s4.slider("repeat", 1, 5, int(d["repeat"]), key=f"{key}_repeat")
        submitted = st.form_submit_button(submit_label, type="primary", icon=":material/play_arrow:")
    if not submitted:
        return None
    common = dict(dtype=dtype, matmul_precision=precision, warmup=int(warmup), compile=compile_mode, wait=wait,
                  warmup_steps=warm_steps, active=active, repeat=repeat, device=device, threads=int(threads) or None)
    try:
        if wl_name == "matmul_add":
            return ExperimentConfig(size=size, batch=int(batch) or None, bias=bias, **common)
        # the form shows every knob; those that do not apply (a decode block's seq_len) are left out
        return ExperimentConfig.for_workload(wl_name, wl.applicable(knob_values), **common)
    except ConfigError as exc:
        st.error(md_text(str(exc)), icon=":material/error:")  # it quotes what was typed (a script's path)
        return None


def start_profile(key: str, config: ExperimentConfig) -> Job:
    """Start one profile in the background (a fresh worker process behind the device lock)."""
    from profiling_core import run_experiment

    def work(job: Job):
        return run_experiment(config, store=store(), on_status=job.status, cancel_event=job.cancel_event,
                              prestart=prestart())

    return start_job(key, f"Profiling {config.name}", work)


def finish_profile(key: str) -> None:
    """Follow the profile job under ``key``; when it ends, make its run current everywhere and say so (a toast that
    names it), or show why it failed; on the run after that, the outcome is shown once."""
    show_notices(key)
    job = follow_job(key)
    if job is None or job.running:
        return
    pop_job(key)
    if job.error is not None:
        end_action(key, [], [("error", job.error, "The run failed")])
    end_action(key, [job.result.run_id], [("toast", f"Run {md_code(job.result.run_id, 200)} saved")])


def prestart() -> int:
    """1: fork runs from the prestarted worker (torch imported once, CUDA untouched); PROFILING_PRESTART=0
    starts a fresh interpreter per run instead."""
    return 0 if os.environ.get("PROFILING_PRESTART") == "0" else 1


def sidebar() -> None:
    """The sidebar every page shares: the current run and the store."""
    if prestart():
        from profiling_core.run import prestart_worker
        prestart_worker()  # a no-op once running: the first click then pays no torch import
    with st.sidebar:
        rid = current_run_id()
        if rid:
            st.caption("Current run")
            st.markdown(f"**{md_text(run_label(rid).split('  ·  ')[0])}**  \n{md_code(rid, 200)}")
        else:
            st.caption("No runs yet: start with **Profile**.")
        st.caption(f"Run store: {md_code(store().root, 500)}")


# --- sweeps and per-run summaries ---------------------------------------------------------------------

def start_sweep(key: str, configs: list[ExperimentConfig], label: str) -> Job:
    """Run ``configs`` one fresh worker each in the background; progress and cancel through the job."""
    from profiling_core import run_sweep

    def work(job: Job):
        return run_sweep(configs, store=store(), on_progress=job.progress, cancel_event=job.cancel_event,
                         prestart=prestart(),
                         on_status=lambda m: setattr(job, "message", f"{job.message.split(' · ')[0]} · {m}"))

    return start_job(key, label, work)


def finish_sweep(key: str, state_key: str) -> None:
    """Follow the sweep job under ``key``; when it ends, keep its run ids in ``st.session_state[state_key]``, announce
    them (every run picker then shows them) and say how it went, once, on the run after that."""
    show_notices(key)
    job = follow_job(key)
    if job is None or job.running:
        return
    pop_job(key)
    if job.error is not None:
        end_action(key, [], [("error", job.error, "The sweep failed")])
    res = job.result
    st.session_state[state_key] = [r.run_id for r in res.runs]
    msg = f"{len(res.runs)} run(s) in {res.wall_s:.1f} s"
    notices = [("error", exc, f"{cfg.name} failed") for cfg, exc in res.errors]
    notices.append(("warning", "Cancelled after " + msg) if res.cancelled else ("success", "Done: " + msg))
    end_action(key, [r.run_id for r in res.runs], notices)


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


# --- the device's peaks and the diagnosis -------------------------------------------------------------

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
    return _readable(run_id, lambda: _memo(("diagnosis", run_id), make))


ROOFLINE_COLUMNS = ["kind", "op", "kernel", "dtype", "m", "k", "n", "count", "time_us", "tflops", "gbs", "peak",
                    "fraction_of_peak", "intensity", "flops_from"]


def show_diagnosis(run_id: str, *, key: str) -> None:
    """What to change: each rule's finding (text, fix, cost), then the roofline of the run's GEMMs and copies."""
    d = diagnosis(run_id)
    p = d.peaks
    if p is None:
        st.caption("No calibration of this run's device in the store: achieved throughput is shown without a "
                   "fraction of peak. Measure the peaks on **Home** (*Calibrate this device*).")
    else:
        st.caption(f"Judged against {md_text(p.device)}'s peaks measured {md_text(p.measured_at[:10])} "
                   f"(torch {md_text(p.torch_version)}; see Home).")
    if not d.diagnoses:
        st.success("None of the rules applies to this trace (fp32 without TF32, unaligned GEMM sizes, launch-bound "
                   "steps, syncs in the step, recompiles, the profiler's own options).", icon=":material/check:")
    for x in d.diagnoses:
        with st.container(border=True):
            st.markdown(f"**{md_text(x.title)}**")
            st.markdown(md_text(x.text))
            st.markdown("**Change:** " + md_text(x.fix))
            if x.cost_us_per_step is not None:
                st.caption(md_text(f"Cost: {x.cost_us_per_step:,.1f} µs per step ({x.cost_basis})"))
            with st.expander("evidence"):
                st.json(json.loads(json.dumps(x.evidence, default=str)), expanded=False)
    roof = d.roofline
    if len(roof):
        st.subheader("Against the hardware's limits")
        shown = roof[[c for c in ROOFLINE_COLUMNS if c in roof.columns]]
        table_block(shown, f"{load_run(run_id).name}_roofline", key=f"{key}_roof_table",
                    column_config={"fraction_of_peak": st.column_config.ProgressColumn(
                        "of peak", format="percent", min_value=0.0, max_value=1.0),
                        "time_us": st.column_config.NumberColumn("µs per call", format="%.2f"),
                        "tflops": st.column_config.NumberColumn("TFLOP/s", format="%.3f"),
                        "gbs": st.column_config.NumberColumn("GB/s", format="%.1f")})
        spec = chart("roofline", roof.drop(columns=["slice_ids"]), peaks=p.gemm_tflops if p else None,
                     bandwidth_gbs=p.bandwidth_gbs if p else None)
        chart_block(spec, shown, f"{load_run(run_id).name}_roofline", key=f"{key}_roofline")


def start_calibration(key: str, device: str) -> Job:
    """Measure the device's peaks in the background (a worker behind the device lock, like a run)."""
    from profiling_core.run import CalibrationJob
    from profiling_core import calibrate

    def work(job: Job):
        return calibrate(CalibrationJob(device=device), store=store(), on_status=job.status,
                         cancel_event=job.cancel_event, prestart=prestart())

    return start_job(key, f"Calibrating ({device})", work)


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
    return _readable(run_id, lambda: _memo(("fusions", run_id, known_ops),
                                           lambda: triton_fusions(session(run_id), known_ops)))
