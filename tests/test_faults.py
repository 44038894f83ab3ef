"""Fault matrix, through the app: a corrupted trace in the store and a failing run leave the app up, show a clear
error, and keep every complete run.  (Worker faults — SIGKILL, timeout, OOM guard, compile failure — are in
test_worker.py; the write error while saving is in test_store.py; serialised concurrent runs in test_worker.py.)"""
from __future__ import annotations

import pytest

from conftest_app import app, errors_of, import_trace, CPU_TRACE, H200
from profiling_core import RunStore, TraceFormatError, open_trace
from profiling_core.present import md_text


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


BAD_METAS = {"device_str": '{"name": "n", "status": "ok", "device": "str"}', "status_list": '{"status": ["x"]}',
             "deep": "[" * 100_000 + "]" * 100_000, "config_str": '{"config": {"warmup": "cold"}}', "empty": ""}


@pytest.fixture
def corrupt_metas(runs_dir):
    """A good run, and one run per kind of damaged meta.json (their traces are fine)."""
    good = import_trace(runs_dir, CPU_TRACE, "good")
    bad = {}
    for kind, text in BAD_METAS.items():
        bad[kind] = import_trace(runs_dir, CPU_TRACE, kind)
        (runs_dir / bad[kind] / "meta.json").write_text(text)
    return good, bad


@pytest.mark.parametrize("page", [None, "profile", "variance", "compile_vs_eager", "dispatch", "overhead", "runs",
                                  "trace_lab"])
def test_pages_that_list_runs_stay_up_with_corrupt_runs_in_the_store(corrupt_metas, page):
    good, bad = corrupt_metas
    at = app(page)
    assert not errors_of(at), errors_of(at)
    def offers(rid: str) -> bool:  # a run picker's option is the run's label, which ends with its id's last 4
        return any(o == rid or o.endswith(f"  ·  {rid[-4:]}") for b in options for o in b.options)

    options = [b for b in [*at.selectbox, *at.multiselect] if b.key != "runs_delete"]
    assert not any(offers(rid) for rid in bad.values())  # run pickers offer only the readable run
    if page in ("variance", "compile_vs_eager", "dispatch", "overhead", "runs", "trace_lab"):
        assert offers(good)
    if page is None:  # the home page's recent runs
        assert list(at.dataframe[0].value["run_id"]) == [good]


def test_the_runs_page_lists_corrupt_runs_with_the_reason_and_deletes_them(corrupt_metas, runs_dir):
    good, bad = corrupt_metas
    at = app("runs")
    assert not errors_of(at)
    assert any("5 run folder(s) cannot be read" in w.value for w in at.warning)
    listed = dict(zip(at.dataframe[0].value["run_id"], at.dataframe[0].value["problem"]))
    assert listed[bad["device_str"]] == "meta.json: Expected `object | null`, got `str` - at `$.device`"
    assert listed[bad["deep"]] == "meta.json nests too deeply to be read"
    assert listed[bad["empty"]] == "meta.json is empty"
    assert set(listed) == set(bad.values())
    for kind in ("device_str", "deep"):
        at.selectbox(key="runs_delete").set_value(bad[kind])
        at.checkbox(key="runs_delete_sure").check()
        [go] = [b for b in at.button if b.label == "Delete"]
        go.click().run()
        assert not errors_of(at)
    assert {r.run_id for r in RunStore(runs_dir).list()} == {good, bad["status_list"], bad["config_str"],
                                                            bad["empty"]}


def test_the_runs_page_deletes_corrupt_runs_when_no_run_is_readable(runs_dir):
    rid = import_trace(runs_dir, CPU_TRACE, "only")
    (runs_dir / rid / "meta.json").write_text('{"device": "str"}')
    at = app("runs")
    assert not errors_of(at)
    at.selectbox(key="runs_delete").set_value(rid)
    at.checkbox(key="runs_delete_sure").check()
    [go] = [b for b in at.button if b.label == "Delete"]
    go.click().run()
    assert not errors_of(at) and RunStore(runs_dir).list() == []
