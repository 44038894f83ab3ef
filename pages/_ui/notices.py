"""What the app tells the user: one readable error box, and what a finished action left to say on the next run."""
from __future__ import annotations

import streamlit as st

from profiling_core.errors import ProfilingError, WorkerError
from profiling_core.present import md_text


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


def leave_notices(key: str, notices: list[tuple]) -> None:
    """Keep what to tell about the action under ``key`` for the next run of the page (:func:`show_notices`)."""
    st.session_state[f"_notices_{key}"] = notices


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
