"""``open_trace(..., while_loading=fn)``: the mirror loads in a forked child while ``fn`` runs here.

The same columns, stats and errors as a plain ``open_trace``, read through the public tables; ``fn`` has run once
when it returns; an error ``fn`` raises stops the load; a loader that dies says so."""
from __future__ import annotations

import gzip
import json
import os
import signal
import threading

import pytest

from profiling_core.errors import TraceError, TraceFormatError
from profiling_core.trace import open_trace

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is Linux/Unix only")


def _trace(tmp_path, n=500):
    events = [{"ph": "X", "name": f"op{i % 7}", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5,
               "args": {"Input Dims": [[i, 2]]}} for i in range(n)]
    events += [{"ph": "X", "name": "bad", "pid": 1, "tid": 1, "ts": "x", "dur": 1}]
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return p


def test_same_tables_and_stats_as_a_plain_open(tmp_path):
    p = _trace(tmp_path)
    calls, pids = [], []

    def meanwhile():
        calls.append(threading.get_ident())
        pids.append(os.getpid())

    with open_trace(p, engine="sqlite") as plain, open_trace(p, engine="sqlite", while_loading=meanwhile) as fork:
        assert calls == [threading.get_ident()] and pids == [os.getpid()]
        assert vars(fork.load_stats) == vars(plain.load_stats)
        assert fork.load_stats.slices == 500 and sum(fork.load_stats.skipped.values()) == 1
        a, b = plain.query("SELECT id, ts, dur, name FROM slice ORDER BY id"), \
            fork.query("SELECT id, ts, dur, name FROM slice ORDER BY id")
        assert a.equals(b) and len(b) == 500
        assert list(b["name"][:8]) == [f"op{i % 7}" for i in range(8)]
        # args were written by the child into the file this process reads
        ids = fork.query("SELECT arg_set_id FROM slice ORDER BY id")["arg_set_id"].tolist()
        got = fork.tables.args.get("Input Dims", ids)
        assert got == plain.tables.args.get("Input Dims", ids) and len(got) == 500
        assert [got[a] for a in ids[:3]] == [[[0, 2]], [[1, 2]], [[2, 2]]]


def test_the_loaders_error_is_raised_here(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    ran = []
    with pytest.raises(TraceFormatError) as plain:
        open_trace(bad, engine="sqlite")
    with pytest.raises(TraceFormatError) as fork:
        open_trace(bad, engine="sqlite", while_loading=lambda: ran.append(1))
    assert str(fork.value) == str(plain.value) and ran == [1]
    with pytest.raises(Exception) as missing:
        open_trace(tmp_path / "none.json", engine="sqlite", while_loading=lambda: None)
    assert "none.json" in str(missing.value)


def test_an_error_while_loading_stops_the_load(tmp_path):
    p = _trace(tmp_path)

    def boom():
        raise ValueError("--peaks x: not a calibration")

    with pytest.raises(ValueError, match="not a calibration"):
        open_trace(p, engine="sqlite", while_loading=boom)
    with pytest.raises(ChildProcessError):  # the child was waited for: none left behind
        os.waitpid(-1, os.WNOHANG)


def test_a_loader_that_dies_says_so(tmp_path, monkeypatch):
    from profiling_core.trace import _mirror
    p = _trace(tmp_path)

    def die(*a):
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(_mirror, "_load_model", die)
    with pytest.raises(TraceError, match="ended by signal 9 before it answered"):
        open_trace(p, engine="sqlite", while_loading=lambda: None)


def test_with_another_thread_running_it_loads_here(tmp_path, monkeypatch):
    from profiling_core.trace import _mirror
    p = _trace(tmp_path)
    where = []
    real = _mirror._load_model

    def spy(*a):
        where.append(os.getpid())
        return real(*a)

    monkeypatch.setattr(_mirror, "_load_model", spy)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        with open_trace(p, engine="sqlite", while_loading=lambda: None) as s:
            assert s.load_stats.slices == 500
    finally:
        stop.set()
        t.join()
    assert where == [os.getpid()]
