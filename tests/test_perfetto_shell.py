"""The perfetto engine end to end through perfetto's own client: a real ``TraceProcessor`` talking HTTP to a
trace_processor server, here the stand-in ``fake_tp_shell.py`` (it answers from trace_processor's recorded tables;
no real trace_processor can run here). What is tested is our side: how the server is started, waited for and ended,
that the whole file reaches it, that the caller's work overlaps the load, and what a failed start says."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import tp_recorded
from fake_tp_shell import shell_command
from test_engines_agree import report_differences

from profiling_core.analyses import analyze
from profiling_core.errors import EngineUnavailableError, QueryError
from profiling_core.trace import QueryLimits, open_trace

LOCAL = tp_recorded.local_recordings()


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """A function (recording name, **more environment) -> (the fake shell's path, the trace, its log's path)."""
    def make(name: str, **env: str) -> tuple[str, Path, Path]:
        trace, folder = LOCAL[name]
        log = tmp_path / "log.jsonl"
        exe, variables = shell_command(tmp_path, FAKE_TP_TABLES=folder, FAKE_TP_LOG=log, **env)
        for k, v in variables.items():
            monkeypatch.setenv(k, v)
        return exe, trace, log
    return make


def _loads(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.parametrize("name", ["64_bf16_cold_eager", "Qwen_Qwen1.5-0.5B-Chat__1016005"])
def test_the_whole_file_reaches_trace_processor_and_the_analyses_match_the_mirror(shell, name):
    """perfetto's client streams the file as it is (a gzip too); the server got every byte, and the analyses over its
    answers, and the devices, are the mirror's (the H200 trace names its GPU)."""
    exe, trace, log = shell(name)
    with open_trace(trace, engine="perfetto", perfetto_bin=exe) as p, open_trace(trace, engine="sqlite") as m:
        assert p.engine == "perfetto" and p.engine_reason == f"perfetto: trace_processor at {exe}"
        assert report_differences(analyze(p), analyze(m)) == []
        assert p.devices == m.devices  # (read from the file while trace_processor loaded it)
    [load] = _loads(log)
    data = trace.read_bytes()
    assert (load["bytes"], load["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())


def test_perfettos_own_start_is_not_waited_on(shell, monkeypatch):
    """perfetto's ``load_shell`` asks whether trace_processor listens once a second, and its first question comes
    before any process can listen: a second lost on every trace. The engine starts and asks itself."""
    import perfetto.trace_processor.shell as tp_shell

    def refuse(*a, **k):
        raise AssertionError("perfetto's load_shell was used")
    monkeypatch.setattr(tp_shell, "load_shell", refuse)
    exe, trace, _log = shell("64_bf16_cold_eager")
    with open_trace(trace, engine="perfetto", perfetto_bin=exe) as s:
        assert s.query("select count(*) AS n from slice")["n"][0] == 34


def test_the_callers_work_runs_while_trace_processor_loads(shell, tmp_path):
    """``while_loading`` (the command line's imports) runs while the trace loads: the server holds the load open
    until the caller's function has seen that it is still open."""
    hold = tmp_path / "release"
    exe, trace, log = shell("64_bf16_cold_eager", FAKE_TP_HOLD=hold)
    seen: list = []

    def meanwhile() -> None:
        seen.append(len(_loads(log)))  # loads that had ended when it ran: none
        hold.touch()
    with open_trace(trace, engine="perfetto", perfetto_bin=exe, while_loading=meanwhile) as s:
        assert seen == [0]
        assert len(_loads(log)) == 1
        assert s.query("select count(*) AS n from slice")["n"][0] == 34


def test_an_error_of_the_callers_work_ends_trace_processor(shell):
    exe, trace, log = shell("64_bf16_cold_eager")

    def fail() -> None:
        raise KeyError("the caller's own error")
    with pytest.raises(KeyError, match="the caller's own error"):
        open_trace(trace, engine="perfetto", perfetto_bin=exe, while_loading=fail)
    [load] = _loads(log)
    assert not _alive(load["pid"])


def _exits(tmp_path: Path) -> str:
    exe = tmp_path / "broken_shell"
    exe.write_text("#!/bin/sh\necho 'unknown option --http-port' >&2\nexit 3\n")
    exe.chmod(0o755)
    return str(exe)


def test_a_trace_processor_that_exits_at_start_says_so(tmp_path):
    trace, _ = LOCAL["64_bf16_cold_eager"]
    with pytest.raises(EngineUnavailableError, match=r"exited as it started \(status 3\): unknown option --http-port"):
        open_trace(trace, engine="perfetto", perfetto_bin=_exits(tmp_path))


def test_auto_falls_back_to_the_mirror_and_runs_the_callers_work_once(tmp_path):
    trace, _ = LOCAL["64_bf16_cold_eager"]
    ran: list = []
    with open_trace(trace, perfetto_bin=_exits(tmp_path), while_loading=lambda: ran.append(1)) as s:
        assert s.engine == "sqlite"
        assert "exited as it started (status 3)" in s.engine_reason
        assert s.query("select count(*) AS n from slice")["n"][0] == 34
    assert ran == [1]


def test_trace_processors_load_error_is_said_and_auto_falls_back(shell):
    exe, trace, _log = shell("64_bf16_cold_eager", FAKE_TP_PARSE_ERROR="Unexpected character at offset 7")
    with pytest.raises(EngineUnavailableError,
                       match="trace_processor could not load the trace: Unexpected character at offset 7"):
        open_trace(trace, engine="perfetto", perfetto_bin=exe)
    with open_trace(trace, perfetto_bin=exe) as s:
        assert s.engine == "sqlite" and "Unexpected character at offset 7" in s.engine_reason


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_stopped_console_query_ends_trace_processor_and_the_next_starts_another(shell):
    """At the deadline the statement's trace_processor is ended (the only way to stop it); the next query starts
    another, which loads the trace again; closing the session ends that one too."""
    exe, trace, log = shell("64_bf16_cold_eager", FAKE_TP_SLOW="'slow marker'")
    with open_trace(trace, engine="perfetto", perfetto_bin=exe) as s:
        with pytest.raises(QueryError, match="stopped after its time limit of 0.5 s"):
            s.console("select 'slow marker' AS x", QueryLimits(deadline_s=0.5))
        [first] = _loads(log)
        assert not _alive(first["pid"])
        assert s.console("select count(*) AS n from slice").frame["n"][0] == 34
        _first, second = _loads(log)
        assert second["pid"] != first["pid"] and _alive(second["pid"])
    assert not _alive(second["pid"])
