"""AppTest: the home page (thin frame + shared sidebar)."""
from __future__ import annotations

from conftest_app import app, errors_of


def test_home_renders_on_an_empty_store(runs_dir):
    at = app()
    assert not errors_of(at)
    text = " ".join(m.value for m in at.markdown)
    assert "SQL engine" in text and "Run store" in text and str(runs_dir) in text
    assert "No runs yet" in " ".join(c.value for c in at.caption)
    assert at.metric[1].label == "torch"


def test_home_lists_recent_runs_and_the_engine(seed_run):
    at = app()
    assert not errors_of(at)
    assert seed_run in list(at.dataframe[0].value["run_id"])
    engine_line = next(m.value for m in at.markdown if "SQL engine" in m.value)
    assert "sqlite" in engine_line or "perfetto" in engine_line
    assert "curl" not in engine_line and "\n" not in engine_line.split("—", 1)[1]  # one plain line
    import os
    cpu_line = next(m.value for m in at.markdown if "**CPU**" in m.value)
    assert f"{os.cpu_count()} cores" in cpu_line and "threads" in cpu_line  # the CPU model and thread count
    sidebar = " ".join(m.value for m in at.sidebar.markdown)
    assert seed_run in sidebar
