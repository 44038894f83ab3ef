"""Fault matrix, through the app: a corrupted trace in the store and a failing run leave the app up, show a clear
error, and keep every complete run.  (Worker faults — SIGKILL, timeout, OOM guard, compile failure — are in
test_worker.py; the write error while saving is in test_store.py; serialised concurrent runs in test_worker.py.)"""
from __future__ import annotations

import pytest

from conftest_app import app, errors_of, import_trace, CPU_TRACE, H200, runs_dir  # noqa: F401
from profiling_core import RunStore, TraceFormatError, md_text, open_trace


@pytest.fixture
def corrupt_run(runs_dir):
    rid = import_trace(runs_dir, H200 / "64_bf16_cold_eager.json", "will_be_corrupted")
    path = runs_dir / rid / "trace.json"
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])  # truncated mid-file
    return rid


def test_corrupt_trace_is_a_clear_error_in_the_library(corrupt_run, runs_dir):
    with pytest.raises(TraceFormatError):
        with open_trace(RunStore(runs_dir).load(corrupt_run).trace_path, engine="sqlite"):
            pass


@pytest.mark.parametrize("page", ["profile", "variance", "compile_vs_eager", "dispatch", "runs", "trace_lab"])
def test_pages_stay_up_with_a_corrupt_current_run(corrupt_run, runs_dir, page):
    good = import_trace(runs_dir, CPU_TRACE, "good")
    from streamlit.testing.v1 import AppTest
    from conftest_app import APP, TIMEOUT
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["current_run_id"] = corrupt_run
    at.run()
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = " ".join(str(e.value) for e in at.error)
    if page in ("profile", "dispatch"):
        assert "will_be_corrupted" in shown or "trace" in shown.lower(), shown
    assert {r.run_id for r in RunStore(runs_dir).list()} == {corrupt_run, good}


@pytest.mark.skipif(__import__("os").path.exists("/dev/nvidiactl"), reason="this machine has a GPU: cuda would work")
def test_failed_profile_shows_error_and_keeps_runs(runs_dir):
    from test_app_profile import fill_profile_form, submit
    good = import_trace(runs_dir, CPU_TRACE, "good")
    at = app("profile")
    # ask for the GPU on a machine without one: the worker fails and the page says why
    fill_profile_form(at, device="cuda")
    submit(at, "Run profile")
    assert not at.exception, [e.value for e in at.exception]
    shown = [str(e.value) for e in at.error]
    assert any(md_text("device 'cuda' was asked for") in m for m in shown), shown  # the message, as plain text
    assert [r.run_id for r in RunStore(runs_dir).list()] == [good]
    assert not list((runs_dir / ".staging").iterdir())
