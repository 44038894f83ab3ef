"""A run's memory analyses for the pages, cached as :mod:`.cache` caches the rest (its report, the store's
``memory_categories.json`` per file version)."""
from __future__ import annotations

from typing import Optional

import pandas as pd
import streamlit as st

import profiling_core.present as present
from profiling_core import RunStore
from profiling_core.errors import ProfilingError

from .cache import load_run, memo, report, store


def memory(run_id: str):
    """The run's memory analyses (``Report.memory``, ``profiling_core.analyses.MemoryReport``: timeline, peaks, what
    was live at them, what the window never freed, per-step churn), computed once with the rest of its report."""
    return report(run_id).memory


@st.cache_data(show_spinner=False, max_entries=64)
def _memory_categories(root: str, run_id: str, mtime_ns: int) -> tuple[pd.DataFrame, Optional[str]]:
    from profiling_core.store import MEMORY_CATEGORIES_COLUMNS, memory_categories as read, memory_categories_note
    run = RunStore(root).load(run_id)
    try:
        frame = read(run)
    except ProfilingError as exc:  # a damaged memory_categories.json: said, not raised
        return pd.DataFrame(columns=MEMORY_CATEGORIES_COLUMNS), str(exc)
    return frame, (memory_categories_note(run) if frame.empty else None)


def memory_categories(run_id: str) -> tuple[pd.DataFrame, Optional[str]]:
    """(torch's memory categories of the run, ``store.memory_categories``; why there are none, or None), kept until
    the run's ``memory_categories.json`` changes."""
    from profiling_core.store import MEMORY_CATEGORIES_FILE
    run = load_run(run_id)
    try:
        mtime = (run.run_dir / MEMORY_CATEGORIES_FILE).stat().st_mtime_ns
    except OSError:
        mtime = 0
    return memo(("memory_categories", run_id), lambda: _memory_categories(str(store().root), run_id, mtime))


def memory_section(run_id: str):
    """The Profile page's memory section of a run (``present.memory_section``)."""
    cats, note = memory_categories(run_id)
    return present.memory_section(memory(run_id), report(run_id).steps, cats, note)
