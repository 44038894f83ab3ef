"""An import's check loads the trace once, and opening the run takes those tables over (``RunStore.import_trace``'s
``checked``, ``open_trace``'s ``loaded``): the same answers as a fresh load, the file not read again."""
from __future__ import annotations

import json

import pytest

from conftest import scan_trace
from conftest_app import CPU_TRACE, H200, app, errors_of
from profiling_core import analyze, open_trace
from profiling_core.errors import EngineUnavailableError, TraceError
from profiling_core.store import RunStore

TRACE = H200 / "4096_bf16_warm_eager.json"
QUERIES = ("SELECT count(*) AS n, sum(dur) AS d FROM slice",
           "SELECT name, count(*) AS n FROM slice WHERE category = 'kernel' GROUP BY name ORDER BY name")


def _imported(tmp_path, src=TRACE):
    handed = []
    run = RunStore(tmp_path / "runs").import_trace(src, checked=lambda r, s: handed.append((r, s)))
    return run, handed


def test_the_check_hands_its_session_over_and_opening_the_run_takes_it(tmp_path):
    run, handed = _imported(tmp_path)
    [(got_run, checked)] = handed
    assert got_run.run_id == run.run_id and checked.path == str(run.trace_path) and not checked.closed
    events = [e for e in scan_trace(TRACE) if e.get("ph") in ("X", "i")]
    stats = checked.load_stats
    with open_trace(run.trace_path, engine="sqlite", loaded=checked) as s, \
            open_trace(run.trace_path, engine="sqlite") as fresh:
        assert checked.closed  # the tables are the new session's now
        assert s.load_stats is stats and s.path == str(run.trace_path)  # the check's load, not a second one
        assert "taken over" in s.engine_reason
        assert int(s.query(QUERIES[0])["n"][0]) == len(events)  # (its X events and its 2 instants are the slices)
        for q in QUERIES:
            assert s.query(q).equals(fresh.query(q))
        assert analyze(s).steps.equals(analyze(fresh).steps)


def test_auto_takes_the_session_over_where_perfetto_cannot_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFETTO_BIN", str(tmp_path / "no_such_trace_processor"))
    run, [(_, checked)] = _imported(tmp_path)
    with pytest.raises(EngineUnavailableError):  # perfetto asked for by name: the error, and the session closed
        open_trace(run.trace_path, engine="perfetto", loaded=checked)
    assert checked.closed
    run, [(_, checked)] = _imported(tmp_path)
    with open_trace(run.trace_path, loaded=checked, sql_tables="background") as s:
        assert s.engine == "sqlite" and "does not exist" in s.engine_reason and "taken over" in s.engine_reason
        assert int(s.query(QUERIES[0])["n"][0]) > 0


def test_a_closed_session_or_one_of_perfetto_is_refused(tmp_path):
    run, [(_, checked)] = _imported(tmp_path)
    checked.close()
    with pytest.raises(ValueError, match="closed session"):
        open_trace(run.trace_path, loaded=checked)


def test_a_refused_import_hands_nothing_over(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]})[:-5])
    handed = []
    with pytest.raises(TraceError):
        RunStore(tmp_path / "runs").import_trace(bad, checked=lambda r, s: handed.append(s))
    assert handed == []


def test_the_trace_lab_opens_an_upload_with_the_tables_its_import_loaded(runs_dir):
    at = app("trace_lab")
    at.get("file_uploader")[0].set_value(("cpu.json", CPU_TRACE.read_bytes(), "application/json"))
    at.run()
    assert not errors_of(at), errors_of(at)
    [engine] = [m for m in at.metric if m.label == "SQL engine"]
    assert engine.value == "sqlite" and "taken over" in engine.help
