"""Bad input gives a clear TraceError (exact class, message), never a crash, a hang or unbounded memory."""
from __future__ import annotations

import gzip
import json
import os
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import profiling_core
from profiling_core.errors import TraceError, TraceFormatError, TraceTooLargeError
from profiling_core.trace import open_trace

import pathological_traces

GOOD = {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}


def _doc(*events) -> bytes:
    return json.dumps({"traceEvents": list(events)}).encode()


CASES = {
    "empty file": (b"", TraceFormatError, "is not valid JSON"),
    "truncated json": (_doc(GOOD)[:-7], TraceFormatError, "is not valid JSON"),
    "not json": (b"hello, world", TraceFormatError, "is not valid JSON"),
    "json number": (b"42", TraceFormatError, "top level must be a JSON object with 'traceEvents'"),
    "no traceEvents": (b'{"schemaVersion": 1}', TraceFormatError, "without a 'traceEvents' list"),
    "traceEvents not a list": (b'{"traceEvents": {"a": 1}}', TraceFormatError, "'traceEvents' must be a list"),
    "gzip garbage": (b"\x1f\x8b\x08\x00" + b"garbage" * 10, TraceFormatError, "not a valid gzip file"),
    "truncated gzip": (gzip.compress(_doc(GOOD) * 3)[:-12], TraceFormatError, "truncated gzip"),
    "events without ts or dur": (_doc({"ph": "X", "name": "a", "pid": 1, "tid": 1},
                                      {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 1}),
                                 TraceFormatError, "X_missing_or_bad_dur: 1, X_missing_or_bad_ts: 1"),
    "only negative durations": (_doc(dict(GOOD, dur=-5)), TraceFormatError, "X_negative_dur: 1"),
    "only unknown phases": (_doc({"ph": "Z", "ts": 1}, {"ph": 7}), TraceFormatError,
                            "missing_or_bad_ph: 1, unsupported_phase:Z: 1"),
    "deeply nested args": (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": ' + b"[" * 100_000
                           + b"]" * 100_000 + b"}]}", TraceFormatError, "nests JSON arrays/objects too deeply"),
    "deeply nested top": (b"[" * 100_000 + b"]" * 100_000, TraceFormatError, "too deeply"),
    "event not an object": (b'{"traceEvents": [1, "x", null]}', TraceFormatError, "missing_or_bad_ph: 3"),
    "huge timestamp": (_doc(dict(GOOD, ts=10 ** 30)), TraceFormatError, "ts_out_of_range: 1"),
    "nan timestamp as text": (_doc(dict(GOOD, ts="nan")), TraceFormatError, "X_missing_or_bad_ts: 1"),
    "list pid": (_doc(dict(GOOD, pid=[1])), TraceFormatError, "bad_pid_or_tid: 1"),
    "a byte that is not UTF-8 outside a string": (b'{"traceEvents": [\xff]}', TraceFormatError,
                                                  "is not valid JSON: JSON is malformed: invalid character (byte 17)"),
}


@pytest.mark.parametrize("data,error,needle", list(CASES.values()), ids=list(CASES))
def test_bad_input(tmp_path, data, error, needle):
    p = tmp_path / "bad.json"
    p.write_bytes(data)
    with pytest.raises(error) as ei:
        open_trace(p, engine="sqlite")
    assert type(ei.value) is error
    assert needle in str(ei.value)


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="no such trace file"):
        open_trace(tmp_path / "nope.json", engine="sqlite")


def test_directory(tmp_path):
    with pytest.raises(TraceFormatError, match="is a directory"):
        open_trace(tmp_path, engine="sqlite")


def test_too_large_plain(tmp_path):
    p = tmp_path / "big.json"
    p.write_bytes(_doc(*[GOOD] * 1000))
    with pytest.raises(TraceTooLargeError, match=r"over the cap of .*\(10000 bytes\)"):
        open_trace(p, engine="sqlite", max_bytes=10_000)


def test_gzip_bomb_stops_at_the_cap(tmp_path):
    """~1 GiB of zeros in ~1 MB of gzip: refused after reading only past the cap, not all of it."""
    p = tmp_path / "bomb.json.gz"
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b" " * (1 << 20)
    with open(p, "wb") as f:
        for _ in range(1024):
            f.write(comp.compress(chunk))
        f.write(comp.flush())
    with pytest.raises(TraceTooLargeError, match="decompresses to more than 8.0 MiB"):
        open_trace(p, engine="sqlite", max_bytes=8 << 20)


def test_some_bad_events_are_skipped_and_counted(tmp_path):
    p = tmp_path / "mixed.json"
    p.write_bytes(_doc(GOOD, dict(GOOD, dur=-1), {"ph": "Q"}, {"ph": "X", "ts": "x", "dur": 1}, 5))
    with open_trace(p, engine="sqlite") as s:
        assert s.query("select count(*) n from slice")["n"][0] == 1
        assert s.load_stats.skipped == {"X_negative_dur": 1, "unsupported_phase:Q": 1,
                                        "X_missing_or_bad_ts": 1, "missing_or_bad_ph": 1}


def test_empty_trace_is_valid(tmp_path):
    p = tmp_path / "empty.json"
    p.write_bytes(b'{"traceEvents": []}')
    with open_trace(p, engine="sqlite") as s:
        assert s.query("select count(*) n from slice")["n"][0] == 0


def test_bad_engine_and_cap_arguments(tmp_path):
    with pytest.raises(ValueError, match="engine must be one of auto, perfetto, sqlite, got 'duckdb'"):
        open_trace(tmp_path / "x.json", engine="duckdb")
    with pytest.raises(ValueError, match="max_bytes must be a positive int, got 0"):
        open_trace(tmp_path / "x.json", engine="sqlite", max_bytes=0)


# -- a small fuzz: random events and random byte damage never escape as anything but TraceError --

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
_value = st.recursive(_scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                      max_leaves=8)
_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "i", "I", "s", "f", "t", "M", "B", "E", "C", "b", "?", ""])},
    optional={"name": _value, "cat": _value, "pid": _value, "tid": _value, "ts": _value, "dur": _value,
              "id": _value, "bp": st.sampled_from(["e", "x"]), "s": st.sampled_from(["g", "p", "t", "z"]),
              "args": _value})


def _try(tmp_path, data: bytes) -> None:
    p = tmp_path / "fuzz.json"
    p.write_bytes(data)
    try:
        with open_trace(p, engine="sqlite") as s:
            s.query("select count(*), sum(dur), max(depth) from slice")
            s.query("select count(*) from flow f join slice a on a.id = f.slice_out")
            s.query("select count(*), max(extract_arg(arg_set_id, 'args.a')) from slice")
            s.query("select count(*) from args")
    except TraceError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(evs=st.lists(_event, max_size=12))
def test_fuzz_events(tmp_path, evs):
    _try(tmp_path, json.dumps({"traceEvents": evs}).encode())


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 400), junk=st.binary(max_size=8), gz=st.booleans())
def test_fuzz_damaged_bytes(tmp_path, cut, junk, gz):
    base = _doc(GOOD, {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 2},
                {"ph": "f", "id": 1, "bp": "e", "pid": 1, "tid": 1, "ts": 2}, dict(GOOD, args={"a": [1, {"b": 2}]}))
    data = gzip.compress(base) if gz else base
    cut = min(cut, len(data))
    _try(tmp_path, data[:cut] + junk + data[cut + len(junk):])


# -- pathological inputs: linear time and bounded memory; the size cap for streams; text that is not Unicode --

def _load_in_child(path, extra: str = "", limit: int = 4 << 30, timeout: float = 120) -> dict:
    """``pathological_traces.load_in_child`` of the package this test process runs."""
    root = str(Path(profiling_core.__file__).resolve().parent.parent)
    return pathological_traces.load_in_child(path, root, extra, limit, timeout)


@pytest.mark.parametrize("shape", sorted(pathological_traces.SHAPES))
def test_pathological_shapes_load(tmp_path, shape):
    """Every shape loads, each of its events a slice (the shapes: tests/pathological_traces.py)."""
    data, n = pathological_traces.SHAPES[shape](4 << 20)
    p = tmp_path / "t.json"
    p.write_bytes(data)
    with open_trace(p, engine="sqlite") as s:
        assert (s.load_stats.events, s.load_stats.slices, s.load_stats.skipped) == (n, n, {})
        assert s.query("select count(*) n from slice where ts >= 0")["n"][0] == n


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(pathological_traces.SHAPES))
def test_pathological_shapes_load_in_linear_time(tmp_path, shape):
    """128 MB of each shape loads in well under 30 s and 1 GiB. The splitter before retried its guesses on a growing
    buffer (quadratic: minutes at this size) and one_string's closing bracket was found by a regex whose memory grew
    with the string (docs/BENCHMARKS.md, "Pathological inputs")."""
    data, n = pathological_traces.SHAPES[shape](128 << 20)
    p = tmp_path / "t.json"
    p.write_bytes(data)
    del data
    try:
        got = _load_in_child(p)
    finally:
        p.unlink()
    assert (got.get("events"), got.get("slices")) == (n, n), got
    assert got["wall_s"] < 30, got
    assert got["rss_mib"] < 1024, got


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(pathological_traces.BOMBS))
def test_gzip_bombs_are_refused_quickly(tmp_path, kind):
    """Under 1 MB of gzip that inflates to 640 MiB of an element that never ends: refused at the default cap (512 MiB)
    in well under 30 s (the splitter before spent minutes on the "}," one)."""
    p = tmp_path / "bomb.json.gz"
    assert pathological_traces.write_bomb(p, kind, 640 << 20) < 1 << 20
    got = _load_in_child(p)
    assert got.get("error") == "TraceTooLargeError", got
    assert "decompresses to more than 512.0 MiB (the cap, 536870912 bytes); stopped reading it" in got["message"]
    assert got["wall_s"] < 30, got


def test_dev_zero_is_refused_at_the_cap():
    """A device never ends: it is read up to the cap and refused (it used to end in a MemoryError)."""
    got = _load_in_child("/dev/zero", extra=", max_bytes=8 << 20", limit=2 << 30)
    assert got.get("error") == "TraceTooLargeError", got
    assert got["message"] == ("/dev/zero (a character device) gave more than 8.0 MiB (the cap, 8388608 bytes); "
                              "stopped reading it; set PROFILING_MAX_TRACE_MIB (MiB) or pass open_trace(path, "
                              "max_bytes=N) to open a larger one")


def _fifo_writer(path, data: bytes, forever: bool = False):
    """A thread writing ``data`` (again and again if ``forever``) into the FIFO ``path`` until the reader leaves."""
    def run():
        try:
            with open(path, "wb") as f:
                f.write(data)
                while forever:
                    f.write(data)
        except (BrokenPipeError, OSError):
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_fifo_is_refused_at_the_cap(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    _fifo_writer(fifo, b'{"traceEvents": [' + b" " * (1 << 20), forever=True)
    with pytest.raises(TraceTooLargeError) as ei:
        open_trace(fifo, engine="sqlite", max_bytes=8 << 20)
    assert str(ei.value) == (f"{fifo} (a pipe (FIFO)) gave more than 8.0 MiB (the cap, 8388608 bytes); stopped "
                             "reading it; set PROFILING_MAX_TRACE_MIB (MiB) or pass open_trace(path, max_bytes=N) "
                             "to open a larger one")


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
@pytest.mark.parametrize("data", [_doc(GOOD, dict(GOOD, ts=5)), b'{"traceEvents":' + b" " * 300 + _doc(GOOD)[16:]],
                         ids=["streamed", "read whole"])
def test_fifo_trace_loads(tmp_path, data, gz):
    """A pipe is read once (no seek, no second read for the whole-document path) and loads like the file."""
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    _fifo_writer(fifo, gzip.compress(data) if gz else data)
    with open_trace(fifo, engine="sqlite") as s:
        assert s.query("select count(*) n from slice")["n"][0] == data.count(b'"ph": "X"')


def _x(name: bytes, ts: int, more: bytes = b"") -> bytes:
    return b'{"ph": "X", "name": "%s", "pid": 1, "tid": 1, "ts": %d, "dur": 1%s}' % (name, ts, more)


def _both_paths(tmp_path, events: list) -> list:
    """The same events as a document the loader streams, and as one it reads whole (more than 256 bytes between
    "traceEvents" and its list): one session of each."""
    body = b",".join(events) + b"]}"
    out = []
    for i, head in enumerate((b'{"traceEvents": [', b'{"traceEvents":' + b" " * 300 + b"[")):
        p = tmp_path / f"t{i}.json"
        p.write_bytes(head + body)
        out.append(open_trace(p, engine="sqlite"))
    return out


def test_lone_surrogates_read_as_replacement_characters(tmp_path):
    """A \\uD800-\\uDFFF escape that is not half of a pair reads as U+FFFD, each counted in load_stats.repaired, and
    the trace loads (it used to refuse the whole trace); a pair, and an escaped backslash before "ud800", stay as
    written."""
    evs = [_x(b"a\\ud800b", 1, b', "args": {"k": "\\udc00x"}'), _x(b"\\ud83d\\ude00", 2), _x(b"\\\\ud800", 3),
           _x(b"\\ud800\\uD800", 4, b', "cat": "\\uDBFF"')]
    for s in _both_paths(tmp_path, evs):
        with s:
            got = s.query("select name, category, extract_arg(arg_set_id, 'args.k') k from slice order by ts").fillna("NULL")
            assert got.to_dict("list") == {"name": ["a\ufffdb", "\U0001f600", "\\ud800", "\ufffd\ufffd"],
                                           "category": ["NULL", "NULL", "NULL", "\ufffd"], "k": ["\ufffdx", "NULL", "NULL", "NULL"]}
            assert (s.load_stats.repaired, s.load_stats.skipped) == ({"lone_surrogate": 5}, {})


def test_invalid_utf8_reads_as_replacement_characters(tmp_path):
    """Bytes that are not UTF-8, in a name, a category, args or a process name, read as U+FFFD, each counted in
    load_stats.repaired (they used to drop the event as missing_or_bad_ph, or the process name as M_without_name)."""
    evs = [_x(b"a\xffb", 1, b', "cat": "\xc3", "args": {"k": "\xfe"}'), _x(b"ok", 2),
           b'{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p\xff"}}']
    for s in _both_paths(tmp_path, evs):
        with s:
            got = s.query("select name, category, extract_arg(arg_set_id, 'args.k') k from slice order by ts").fillna("NULL")
            assert got.to_dict("list") == {"name": ["a\ufffdb", "ok"], "category": ["\ufffd", "NULL"],
                                           "k": ["\ufffd", "NULL"]}
            assert s.query("select name from process where pid = 1")["name"].tolist() == ["p\ufffd"]
            assert (s.load_stats.repaired, s.load_stats.skipped) == ({"invalid_utf8": 4}, {})


def test_invalid_utf8_args_alone_are_counted(tmp_path):
    """Args are not checked when an event is decoded: their repair (by the args writer) is counted too."""
    for s in _both_paths(tmp_path, [_x(b"a", 1, b', "args": {"k": "\xfe\xfe"}'), _x(b"b", 2)]):
        with s:
            assert s.query("select extract_arg(arg_set_id, 'args.k') k from slice order by ts").fillna("NULL")["k"].tolist() == [
                "\ufffd\ufffd", "NULL"]
            assert s.load_stats.repaired == {"invalid_utf8": 2}


_ODD = [b"\\ud800", b"\\udc00x", b"\\ud83d\\ude00", b"\\\\ud800", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\\", b'\\"',
        b"},", b" " * 3000]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from(sorted(pathological_traces.SHAPES)), size=st.sampled_from([1 << 8, 1 << 12, 1 << 16]),
       inner=st.sampled_from([16, 300, 5000]), odd=st.lists(st.tuples(st.floats(0, 1), st.sampled_from(_ODD)),
                                                           max_size=4), cut=st.floats(0, 1), gz=st.booleans())
def test_fuzz_pathological(tmp_path, shape, size, inner, odd, cut, gz):
    """The pathological shapes (small), with odd text put in anywhere and cut anywhere: a load or a TraceError."""
    arg = {"brace_names": "name_bytes", "whitespace": "run", "nested_args": "event_bytes", "escapes": "name_bytes"}
    data = bytearray(pathological_traces.SHAPES[shape](size, **({arg[shape]: inner} if shape in arg else {}))[0])
    for where, text in odd:
        at = int(where * len(data))
        data[at:at] = text
    data = bytes(data[:len(data) if cut > 0.8 else int(cut / 0.8 * len(data))])
    _try(tmp_path, gzip.compress(data, 1) if gz else data)


def _padded_trace(path: Path, mib: float) -> Path:
    """A valid one-event trace padded with spaces to ``mib`` MiB."""
    data = _doc(GOOD)
    path.write_bytes(data[:-1] + b" " * (int(mib * (1 << 20)) - len(data)) + data[-1:])
    return path


def test_the_trace_cap_is_raised_or_lowered_by_one_variable_everywhere(tmp_path, monkeypatch):
    """``$PROFILING_MAX_TRACE_MIB`` sets the cap every reader of a trace applies (the library's open_trace, the run
    store's import, the rank writer, the command line), read when a trace is opened; ``max_bytes`` given still wins;
    the refusal names the variable."""
    import subprocess
    import sys
    from profiling_core import RunStore
    from profiling_core.trace import write_without_processes
    p = _padded_trace(tmp_path / "t.json", 1.5)
    root = str(Path(profiling_core.__file__).resolve().parent.parent)

    def cli(mib: str):
        return subprocess.run([sys.executable, "-m", "profiling_core", "analyze", str(p), "--engine", "sqlite"],
                              capture_output=True, text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": root, "PROFILING_MAX_TRACE_MIB": mib})
    monkeypatch.setenv("PROFILING_MAX_TRACE_MIB", "1")
    refusal = (f"{p} is 1.5 MiB (1572864 bytes), over the cap of 1.0 MiB (1048576 bytes); set PROFILING_MAX_TRACE_MIB "
               "(MiB) or pass open_trace(path, max_bytes=N) to open a larger one")
    with pytest.raises(TraceTooLargeError) as ei:
        open_trace(p, engine="sqlite")
    assert str(ei.value) == refusal
    with pytest.raises(TraceTooLargeError, match="over the cap of 1.0 MiB"):
        RunStore(tmp_path / "runs").import_trace(p)
    with pytest.raises(TraceTooLargeError, match="over the cap of 1.0 MiB"):
        write_without_processes(p, tmp_path / "out.json", [])
    got = cli("1")
    assert got.returncode == 2 and got.stderr == f"error: {refusal}\n"
    with open_trace(p, engine="sqlite", max_bytes=2 << 20) as s:  # (given: it wins)
        assert s.load_stats.slices == 1
    monkeypatch.setenv("PROFILING_MAX_TRACE_MIB", "2")
    with open_trace(p, engine="sqlite") as s:
        assert s.load_stats.slices == 1
    assert RunStore(tmp_path / "runs").import_trace(p).run_id
    assert cli("2").returncode == 0
    for bad in ("0", "1.5", "-1", "lots", "1048577", "２"):
        monkeypatch.setenv("PROFILING_MAX_TRACE_MIB", bad)
        with pytest.raises(ValueError) as ei:
            open_trace(p, engine="sqlite")
        assert str(ei.value) == ("PROFILING_MAX_TRACE_MIB must be a whole number of MiB from 1 to 1048576 (unset: "
                                 f"512), got {bad!r}")
        got = cli(bad)
        assert got.returncode == 2 and got.stderr == f"error: {ei.value}\n", bad
