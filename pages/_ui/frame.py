"""The app's frame around every page: the start of each script run, deep links sent through the frame, and the
sidebar every page shares.
"""
from __future__ import annotations

import os

import streamlit as st

from profiling_core.present import md_code, md_text

from .cache import reset_memo, store
from .jobs import prestart
from .state import current_run_id, run_label

_IN_FRAME = "_in_app_frame"
_DEEP_LINK = "_deep_link"


def new_script_run() -> None:
    """Called by the frame at the top of every script run: forget the previous run's memo."""
    reset_memo()
    st.session_state[_IN_FRAME] = True


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
