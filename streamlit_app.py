"""Learn to read PyTorch profiles by experiment: ``streamlit run streamlit_app.py``.

A thin frame: the page list and the sidebar every page shares. Each page in ``pages/`` answers one
question of the study; ``pages/_ui/`` holds the caching and the shared UI helpers.
"""
import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # so pages can `from pages import _ui` however the app is started
    sys.path.insert(0, str(ROOT))

from pages import _ui as ui  # noqa: E402

st.set_page_config(page_title="Reading PyTorch profiles", page_icon=":material/timeline:", layout="wide")

PAGES = {
    "": [st.Page("pages/home.py", title="Home", icon=":material/home:", default=True)],
    "Experiments": [
        st.Page("pages/profile.py", title="Profile", icon=":material/play_circle:"),
        st.Page("pages/overhead.py", title="Overhead vs compute", icon=":material/stacked_line_chart:"),
        st.Page("pages/variance.py", title="Kernel variance", icon=":material/candlestick_chart:"),
        st.Page("pages/compile_vs_eager.py", title="Compile vs eager", icon=":material/bolt:"),
        st.Page("pages/dispatch.py", title="Dispatch and launch", icon=":material/account_tree:"),
    ],
    "Traces": [
        st.Page("pages/runs.py", title="Runs", icon=":material/history:"),
        st.Page("pages/trace_lab.py", title="Trace lab", icon=":material/science:"),
    ],
}

ui.new_script_run()
page = st.navigation(PAGES)
ui.follow_deep_link()
ui.sidebar()
page.run()
