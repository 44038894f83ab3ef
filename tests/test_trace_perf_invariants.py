"""The fast paths of the trace loader change nothing: streaming split, bulk extract_arg, load counts on big traces."""
from __future__ import annotations

import gzip
import json
import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiling_core.errors import TraceError
from profiling_core.trace import open_trace
from profiling_core.trace._decode import NotStreamable, split_events, stream_events

SHARED = "/work/shared/traces/third_party"
CONTROL = os.path.join(SHARED, "hta/trace_diff_control_a100/control.json.gz")
REAL = [CONTROL,
        os.path.join(SHARED, "kineto/resnet50_v100_2021jun/worker0.1623143089861.pt.trace.json.gz"),
        os.path.join(SHARED, "hta/ns_resolution_v100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")]


def _chunks(data: bytes, size: int):
    for i in range(0, len(data), size):
        yield data[i:i + size]


def _streamed(data: bytes, size: int):
    return [bytes(r) for raws in stream_events(_chunks(data, size)) for r in raws]


def _whole(data: bytes):
    return [bytes(r) for r in split_events(data, "x")]


def _same_as_whole(data: bytes, size: int) -> None:
    try:
        whole = _whole(data)
    except TraceError:
        whole = None
    try:
        got = _streamed(data, size)
    except NotStreamable:
        return  # the loader falls back to the whole-document path, which reports the error
    assert whole is not None, "streaming accepted a document the whole-document path refuses"
    assert got == whole


_EVIL = ["},", "}, {", '"},', "\\\"},", "]", "}]", '"traceEvents"', "traceEvents", "{", "[", "\\\\", "é", "\u2028",
         # text that is not Unicode (lone surrogates: escaped in a bare list, invalid UTF-8 bytes otherwise)
         "\ud800", "a\udc00", "\ud83d\ude00", "\\ud800",
         # pathological runs (tests/pathological_traces.py has them at scale)
         "}," * 40, " " * 300, '\\"},' * 10]
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(_EVIL) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "x}", "Input Dims"]),
                                                                inner, max_size=3),
    max_leaves=8)
_event = st.fixed_dictionaries({"ph": st.sampled_from(["X", "i", "s", "f"]), "name": st.sampled_from(_EVIL + ["k"]),
                                "ts": st.integers(0, 10**6), "pid": st.integers(0, 3), "tid": st.integers(0, 3)},
                               optional={"args": st.dictionaries(st.sampled_from(["a", "b}", "c"]), _values, max_size=3),
                                         "dur": st.integers(0, 100)})


@settings(max_examples=300, deadline=None)
@given(events=st.lists(_event | _values, max_size=12), before=st.dictionaries(st.sampled_from(["schemaVersion", "x"]),
       _values, max_size=2), after=st.dictionaries(st.sampled_from(["traceName", "y", "traceEvents"]), _values,
       max_size=2), bare=st.booleans(), sep=st.sampled_from([(", ", ": "), (",", ":"), (",\n  ", ": ")]),
       size=st.integers(1, 64), cut=st.integers(0, 40))
def test_streamed_split_equals_whole_split(events, before, after, bare, sep, size, cut):
    if bare:
        data = json.dumps(events, separators=sep).encode()
    else:
        doc = dict(before)
        doc["traceEvents"] = events
        doc.update({k: v for k, v in after.items() if k not in doc})
        data = json.dumps(doc, separators=sep, ensure_ascii=False).encode("utf-8", "surrogatepass")
    _same_as_whole(data, size)
    _same_as_whole(data[:max(0, len(data) - cut)], size)  # truncated documents, too
    _same_as_whole(data + b"  ", size)
    _same_as_whole(data + b" x", size)


@pytest.mark.parametrize("text", [
    b'{"traceEvents": [{"a": "},"}, {"b": {"c": 1}, "d": 2}], "t": "}, {"}',
    b'{"x": {"traceEvents": [1]}, "traceEvents": [{"a": 1}]}',
    b'{"traceEvents": [{"a": 1}], "traceEvents": [{"b": 2}]}',
    b'{"traceEvents" : [ {"a": 1} , {"b": 2} ] }',
    b'{"traceEvents": []}', b'[]', b'[{"a":1},{"b":2}]  ', b'{"traceEvents": null}', b'{"traceEvents": [}',
    b'{"traceEvents": [{"a": 1},]}', b'{"traceEvents": [{"a": 1}]', b'{"traceEvents": [{"a": 1}]}}',
    b'{"a": "\\"traceEvents\\": [", "traceEvents": [{"z": 0}]}',
])
@pytest.mark.parametrize("size", [1, 3, 7, 4096])
def test_streamed_split_tricky_documents(text, size):
    _same_as_whole(text, size)


@pytest.mark.parametrize("path", [p for p in REAL if os.path.exists(p)])
@pytest.mark.parametrize("size", [4093, 1 << 16])
def test_streamed_split_real_traces(path, size):
    with gzip.open(path, "rb") as f:
        data = f.read()
    assert _streamed(data, size) == _whole(data)


def _independent_counts(path: str) -> dict:
    """Events, complete slices and flow events of a Kineto trace, counted with the json module."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        events = json.load(f)["traceEvents"]
    x = sum(1 for e in events if e.get("ph") == "X")
    inst = sum(1 for e in events if e.get("ph") in ("i", "I"))
    return {"events": len(events), "slices": x + inst,
            "flow_starts": sum(1 for e in events if e.get("ph") == "s")}


@pytest.mark.skipif(not os.path.exists(CONTROL), reason="HTA's control trace is not in shared/")
def test_load_counts_on_big_traces(tmp_path):
    """control.json (35 MB) and three copies of it as three ranks (the benchmark's ~100 MB file)."""
    with gzip.open(CONTROL, "rb") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    big = []
    for k in range(3):
        for e in events:
            e = dict(e)
            if k and isinstance(e.get("pid"), int):
                e["pid"] += 1000000 * k
            if k and isinstance(e.get("id"), int):
                e["id"] += 10000000 * k
            big.append(e)
    path3 = tmp_path / "big.json"
    path3.write_text(json.dumps({**doc, "traceEvents": big}))
    del doc, events, big
    for path, copies in ((CONTROL, 1), (str(path3), 3)):
        want = _independent_counts(path)
        with open_trace(path, engine="sqlite") as s:
            st_ = s.load_stats
            assert st_.events == want["events"]
            assert st_.slices == want["slices"] == int(s.query("select count(*) n from slice")["n"][0])
            # every flow start binds; half of Kineto's ac2g arrows end on an event TP drops (counted as skipped)
            assert st_.flows == int(s.query("select count(*) n from flow")["n"][0]) == 9450 * copies
            assert st_.skipped == {"flow_end_without_start": 15242 * copies}
            # Kineto's negative-tid events (tid -1029147072) sit on their process's main thread, as in
            # trace_processor, and 26 of them overlap the main thread's own slices without nesting: one overlap track,
            # as in trace_processor's recorded tables. In the copies the pid moved but the main thread's events keep
            # tid 3113936, so there those events have the main thread (tid = the new pid) to themselves.
            assert st_.spill_tracks == 1


@pytest.mark.skipif(not os.path.exists(REAL[1]), reason="the 2021 resnet50 trace is not in shared/")
def test_bulk_extract_arg_equals_one_call_at_a_time():
    keys = ("args.correlation", "args.grid", "args.External id", "args.Input Dims", "args.Input Dims[0]", "args.nope")
    sql = "select id, " + ", ".join(f"extract_arg(arg_set_id, '{k}')" for k in keys) + " from slice order by id"
    with open_trace(REAL[1], engine="sqlite") as s:
        backend = s._backend._b  # noqa: SLF001 - compare raw rows (DataFrames infer dtypes per result)
        _, one, _ = backend.query_rows(sql + " limit 200")    # under the bulk threshold: one call at a time
        assert not backend._query.arg_tables
        _, many, _ = backend.query_rows(sql)                  # the same keys, now answered from the bulk tables
        assert set(backend._query.arg_tables) == set(keys)
        assert many[:200] == one
        assert any(r[1] is not None for r in many) and any(r[3] is not None for r in many)
        for row in random.Random(0).sample(many, 300):
            backend._query.arg_tables.clear()
            backend._query.arg_calls.clear()
            _, again, _ = backend.query_rows(sql.replace("order by id", f"where id = {row[0]}"))
            assert again == [row]
