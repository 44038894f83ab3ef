"""The session's state: the current run, the run pickers that follow it, and what a page's action announces.

A page's action that made runs (a profile, a sweep, an import) announces them (:func:`announce_runs`): the last becomes
the current run, and every run picker, on this page and the others, shows the new runs the next time it is drawn.
"""
from __future__ import annotations

from typing import Callable, Optional

import streamlit as st

import profiling_core.present as present

from .cache import forget_runs, load_run, memo, open_session, runs_frame
from .notices import leave_notices

CURRENT_RUN = "current_run_id"
"""session_state key of the run the analysis pages show."""

_RUNS_VERSION = "_runs_version"


def current_run_id() -> Optional[str]:
    """The run the pages show: the one chosen last, else the newest in the store."""
    rid = st.session_state.get(CURRENT_RUN)
    runs = runs_frame()
    if rid and rid in set(runs["run_id"]):
        return rid
    return runs["run_id"].iloc[0] if len(runs) else None


def set_current_run(run_id: Optional[str]) -> None:
    st.session_state[CURRENT_RUN] = run_id


def announce_runs(run_ids: list[str]) -> None:
    """A page's own action made these runs (a profile, a sweep, an import): the last becomes the current run, and every
    run picker shows the new runs the next time it is drawn (:func:`_sync_picker`), on this page and the others."""
    forget_runs()
    if run_ids:
        set_current_run(run_ids[-1])
    st.session_state[_RUNS_VERSION] = st.session_state.get(_RUNS_VERSION, 0) + 1


def end_action(key: str, run_ids: list[str], notices: list[tuple]) -> None:
    """A job under ``key`` ended: announce its runs, keep what to tell the user (``notices.show_notices``), and run the
    page again, so that everything on it (the sidebar, drawn first, and every picker) shows the new runs and the
    job's progress box and Cancel button are gone."""
    announce_runs(run_ids)
    leave_notices(key, notices)
    st.rerun()


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
    return memo(("labels",), lambda: present.run_labels(runs))


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
    """The newest run profiled warm (warm-up calls > 0) or cold, of ``like``'s setting but for its warm-up and
    schedule when there is one (``present.newest_run``); else the current run."""
    runs = runs_frame()
    settings = None
    if like is not None:
        settings = {r: present.setting_parts(load_run(r), besides=("warm-up", "schedule")) for r in runs["run_id"]}
    return present.newest_run(runs, warm=warm, like=like, settings=settings) or current_run_id()


def sql_engine() -> tuple[str, str]:
    """Which SQL engine opens traces here, and why (from the newest run's session when there is one)."""
    rid = current_run_id()
    if rid is None:
        return "not chosen yet", "the engine is picked when the first trace is opened"
    try:  # (not session(): its error box and stop, a BaseException, are for a page that shows the run)
        s = open_session(rid)
        return str(getattr(s, "engine", "?")), str(getattr(s, "engine_reason", ""))
    except Exception as exc:  # an unreadable trace must not break the home page
        return "unavailable", f"{type(exc).__name__}: {exc}"
