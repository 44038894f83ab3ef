"""``open_trace(..., while_loading=fn)``: the mirror loads in a forked child while ``fn`` runs here.

The same columns, stats and errors as a plain ``open_trace``, read through the public tables; ``fn`` has run once
when it returns; an error ``fn`` raises stops the load; a loader that dies says so.

The loader forks only while its process runs no other thread, and a test session runs many (servers, pools and
watchers that earlier tests leave), so each fork case runs in a fresh interpreter, as the command line does; the
script says which process loaded the trace, so a case that did not fork fails instead of passing by the other path."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from profiling_core.trace import open_trace

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the loader forks on Linux only")

_PRELUDE = """
import json, os, signal, sys, threading
from profiling_core.trace import open_trace, _mirror
from profiling_core.errors import TraceError, TraceFormatError
path = sys.argv[1]
loaded_in = sys.argv[2]           # the spy writes the pid of the process that ran the load here
real = _mirror._load_model

def spy(*a):
    with open(loaded_in, "a") as f:
        f.write(f"{os.getpid()}\\n")
    return real(*a)

_mirror._load_model = spy
out = {"pid": os.getpid(), "threads": threading.active_count()}
"""


def _in_a_fresh_process(tmp_path, body: str, trace) -> dict:
    """Run ``body`` after the prelude in a new interpreter; its ``out`` dict, plus the pids that ran the load."""
    loaded_in = tmp_path / "loaded_in.txt"
    script = _PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", script, str(trace), str(loaded_in)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["loaded_in"] = [int(x) for x in loaded_in.read_text().split()] if loaded_in.exists() else []
    return out


def _trace(tmp_path, n=500):
    events = [{"ph": "X", "name": f"op{i % 7}", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5,
               "args": {"Input Dims": [[i, 2]]}} for i in range(n)]
    events += [{"ph": "X", "name": "bad", "pid": 1, "tid": 1, "ts": "x", "dur": 1}]
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return p


def test_same_tables_and_stats_as_a_plain_open(tmp_path):
    out = _in_a_fresh_process(tmp_path, """
        calls = []
        with open_trace(path, engine="sqlite") as plain, \\
                open_trace(path, engine="sqlite", while_loading=lambda: calls.append(os.getpid())) as fork:
            out["calls"] = calls
            out["same_stats"] = vars(fork.load_stats) == vars(plain.load_stats)
            out["slices"] = fork.load_stats.slices
            out["skipped"] = sum(fork.load_stats.skipped.values())
            a = plain.query("SELECT id, ts, dur, name FROM slice ORDER BY id")
            b = fork.query("SELECT id, ts, dur, name FROM slice ORDER BY id")
            out["same_slices"] = bool(a.equals(b))
            out["names"] = list(b["name"][:8])
            # args were written by the child into the file this process reads
            ids = fork.query("SELECT arg_set_id FROM slice ORDER BY id")["arg_set_id"].tolist()
            got = fork.tables.args.get("Input Dims", ids)
            out["same_args"] = got == plain.tables.args.get("Input Dims", ids)
            out["first_args"] = [got[a] for a in ids[:3]]
    """, _trace(tmp_path))
    assert out["threads"] == 1
    # the plain open loaded here; the other in a child, while the function ran once, here
    assert len(out["loaded_in"]) == 2 and out["loaded_in"][0] == out["pid"] != out["loaded_in"][1]
    assert out["calls"] == [out["pid"]]
    assert out["same_stats"] and out["slices"] == 500 and out["skipped"] == 1
    assert out["same_slices"] and out["names"] == [f"op{i % 7}" for i in range(8)]
    assert out["same_args"] and out["first_args"] == [[[0, 2]], [[1, 2]], [[2, 2]]]


def test_the_loaders_error_is_raised_here(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    out = _in_a_fresh_process(tmp_path, """
        ran = []
        def message(**kw):
            try:
                open_trace(path, engine="sqlite", **kw)
            except TraceFormatError as e:
                return str(e)
        out["plain"] = message()
        out["fork"] = message(while_loading=lambda: ran.append(1))
        out["ran"] = ran
        try:
            open_trace(path + ".none", engine="sqlite", while_loading=lambda: None)
        except Exception as e:
            out["missing"] = str(e)
    """, bad)
    assert out["plain"] and out["fork"] == out["plain"] and out["ran"] == [1]
    assert "bad.json.none" in out["missing"]
    plain, *forked = out["loaded_in"]
    assert plain == out["pid"] and len(forked) == 2 and out["pid"] not in forked


def test_an_error_while_loading_stops_the_load(tmp_path):
    out = _in_a_fresh_process(tmp_path, """
        def boom():
            raise ValueError("--peaks x: not a calibration")
        try:
            open_trace(path, engine="sqlite", while_loading=boom)
        except ValueError as e:
            out["error"] = str(e)
        try:
            os.waitpid(-1, os.WNOHANG)
            out["children_left"] = True
        except ChildProcessError:  # the child was waited for: none left behind
            out["children_left"] = False
    """, _trace(tmp_path))
    assert out["error"] == "--peaks x: not a calibration" and out["children_left"] is False


def test_a_loader_that_dies_says_so(tmp_path):
    out = _in_a_fresh_process(tmp_path, """
        parent = os.getpid()
        def die(*a):
            with open(loaded_in, "a") as f:
                f.write(f"{os.getpid()}\\n")
            if os.getpid() != parent:   # never this process: the case is the child's death
                os.kill(os.getpid(), signal.SIGKILL)
            raise AssertionError("loaded in the parent: no fork")
        _mirror._load_model = die
        try:
            open_trace(path, engine="sqlite", while_loading=lambda: None)
        except TraceError as e:
            out["error"] = str(e)
    """, _trace(tmp_path))
    assert "ended by signal 9 before it answered" in out["error"]
    assert len(out["loaded_in"]) == 1 and out["loaded_in"][0] != out["pid"]


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
