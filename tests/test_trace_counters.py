"""Counter events (``"ph": "C"``) fill trace_processor's ``counter`` and counter track tables in the mirror.

No shared trace has a counter event, so no recording of trace_processor's counter tables exists; the rules are
trace_processor's JSON importer's (docs/SQL.md, "Counters"), and the expected rows here are counted by hand. What is
compared with recorded output: the tables' columns and declared types (``schema_v58.2.csv.gz``, printed by a real
trace_processor v58.2), and how a string value reads (C's own strtod, called through ctypes, as trace_processor's
``base::StringToDouble`` calls it).
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
import time
from pathlib import Path

import loader_oracle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiling_core.errors import QueryError, TraceFormatError
from profiling_core.trace import open_trace

SCHEMA = Path(__file__).parent / "data" / "tp_tables" / "schema_v58.2.csv.gz"
COUNTER_TABLES = ("counter", "counter_track", "process_counter_track", "counters", "track", "thread_track",
                  "process_track")


def _write(tmp_path: Path, events: list, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def _rows(s, sql: str) -> list[tuple]:
    return [tuple(r) for r in s.query(sql).itertuples(index=False)]


# A hand-made trace: file order is not time order; two processes; one counter name on two threads of one process.
HAND = [
    {"ph": "M", "name": "process_name", "pid": 1, "tid": 1, "args": {"name": "app"}},
    {"ph": "X", "name": "step", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "C", "name": "GPU Memory", "pid": 1, "tid": 1, "ts": 30, "args": {"allocated": 100, "reserved": "150.5"}},
    {"ph": "C", "name": "GPU Memory", "pid": 1, "tid": 2, "ts": 10, "args": {"allocated": 40, "reserved": 64}},
    {"ph": "C", "name": "GPU Memory", "pid": 2, "tid": 2, "ts": 10, "args": {"allocated": 1}},
    # one number among six values that are not: a text, a bool, null, an array, an object, trailing space
    {"ph": "C", "name": "load", "pid": 1, "tid": 1, "ts": 20,
     "args": {"cpu": "n/a", "gpu": True, "mem": None, "x": [1], "y": {"z": 1}, "io": " 0x10", "net": "1e3 "}},
    {"ph": "C", "name": "load", "pid": 1, "tid": 1, "ts": 20},                                   # no args
    {"ph": "C", "name": "q", "id": "0x2", "pid": 1, "tid": 1, "ts": 20, "args": {"depth": 3}},  # a string id
    {"ph": "C", "name": "q", "id": 7, "pid": 1, "tid": 1, "ts": 40, "args": {"depth": 5}},      # a number id: none
    {"ph": "C", "pid": 1, "tid": 1, "ts": 10, "args": {"v": -1.5}},                              # no name
    {"ph": "C", "name": "mem", "pid": 1, "tid": 1, "ts": "x", "args": {"a": 1}},                  # no usable ts
    {"ph": "C", "name": "mem", "pid": 3, "tid": 3, "ts": 50, "args": {"a": "abc"}},              # nothing numeric
]
# By hand, in (ts, file order): ts 10: the 4th event (allocated 40, reserved 64), the 5th (pid 2: allocated 1), the
# nameless one (" v"); ts 20: "load io" (" 0x10" is 16: strtod reads leading space and hex), "q id: 0x2 depth";
# ts 30: the 3rd event's two; ts 40: "q depth". One track per (process, name), numbered after the only slice track
# (id 0) in the order of their first rows.
HAND_COUNTERS = [  # (id, ts ns, track_id, value, track name, pid)
    (0, 10_000, 1, 40.0, "GPU Memory allocated", 1),
    (1, 10_000, 2, 64.0, "GPU Memory reserved", 1),
    (2, 10_000, 3, 1.0, "GPU Memory allocated", 2),
    (3, 10_000, 4, -1.5, " v", 1),
    (4, 20_000, 5, 16.0, "load io", 1),
    (5, 20_000, 6, 3.0, "q id: 0x2 depth", 1),
    (6, 30_000, 1, 100.0, "GPU Memory allocated", 1),
    (7, 30_000, 2, 150.5, "GPU Memory reserved", 1),
    (8, 40_000, 7, 5.0, "q depth", 1),
]


def test_counter_events_fill_counter_and_counter_track(tmp_path):
    with open_trace(_write(tmp_path, HAND), engine="sqlite") as s:
        got = _rows(s, "select c.id, c.ts, c.track_id, c.value, t.name, p.pid from counter c "
                       "join process_counter_track t on t.id = c.track_id join process p using(upid) order by c.id")
        assert got == HAND_COUNTERS
        assert _rows(s, "select count(*) from counter where arg_set_id is not null") == [(0,)]
        tracks = sorted({(t, name) for _i, _ts, t, _v, name, _pid in HAND_COUNTERS})
        assert _rows(s, "select id, name, type, unit, description, parent_id from counter_track order by id") == \
            [(t, name, "json_counter", None, None, None) for t, name in tracks]
        assert _rows(s, "select id, type from track order by id") == \
            [(0, "thread_execution")] + [(t, "json_counter") for t, _ in tracks]
        assert _rows(s, "select id from thread_track") == [(0,)]           # counter tracks are not slice tracks
        assert _rows(s, "select count(*) from process_track") == [(0,)]
        assert _rows(s, "select id, ts, track_id, value, name, unit from counters order by id") == \
            [(i, ts, t, v, name, None) for i, ts, t, v, name, _pid in HAND_COUNTERS]
        # the C event whose only value is not a number still made its thread and process, as trace_processor does
        assert (3, 3) in _rows(s, "select p.pid, t.tid from thread t join process p using(upid)")
        st_ = s.load_stats
        assert st_.counters == 9 and st_.slices == 1
        assert st_.skipped == {"C_arg_not_a_number": 7, "C_without_args": 1, "C_missing_or_bad_ts": 1}


def test_duplicate_keys_give_a_row_each(tmp_path):
    """trace_processor walks the args object field by field: a key written twice gives two rows (a dict would
    keep one)."""
    p = tmp_path / "dup.json"
    p.write_text('{"traceEvents": [{"ph": "C", "name": "q", "pid": 1, "tid": 1, "ts": 1, '
                 '"args": {"depth": 3, "depth": 4, "other": 1}}]}')
    with open_trace(p, engine="sqlite") as s:
        assert _rows(s, "select c.id, t.name, c.value from counter c join counter_track t on t.id = c.track_id "
                        "order by c.id") == [(0, "q depth", 3.0), (1, "q depth", 4.0), (2, "q other", 1.0)]


def test_values_that_are_not_finite(tmp_path):
    """strtod reads "nan" and "inf"; SQLite (trace_processor's too) has no NaN and stores it as NULL; "1e999" is too
    large: inf. A JSON integer of any length is a double."""
    ev = {"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 1,
          "args": {"a": "nan", "b": "-INFINITY", "c": "1e999", "d": 2**70, "e": "0x1p-2"}}
    with open_trace(_write(tmp_path, [ev]), engine="sqlite") as s:
        values = [v for (v,) in _rows(s, "select value from counter order by id")]
    assert values[0] is None or math.isnan(values[0])  # (a NULL in SQL; pandas may show NaN)
    assert values[1:] == [-math.inf, math.inf, float(2**70), 0.25]


def test_args_that_are_not_an_object(tmp_path):
    evs = [{"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 1, "args": a} for a in ([1, 2], "5", 5, None, {})]
    evs.append({"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 1})
    with open_trace(_write(tmp_path, evs), engine="sqlite") as s:
        assert _rows(s, "select count(*) from counter") == [(0,)]
        # an array, a string, a number and null are not an object; {} is one, with no fields (nothing to skip)
        assert s.load_stats.skipped == {"C_without_args": 4}


def test_a_trace_of_counters_only_opens(tmp_path):
    evs = [{"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": i, "args": {"v": i}} for i in range(5)]
    with open_trace(_write(tmp_path, evs), engine="sqlite") as s:
        assert _rows(s, "select count(*), sum(value) from counter") == [(5, 10.0)]
        assert s.tables.slice_count == 0


def test_a_trace_of_unusable_counters_is_refused(tmp_path):
    evs = [{"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 1, "args": {"v": "x"}},
           {"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": None, "args": {"v": 1}}]
    with pytest.raises(TraceFormatError, match="none of its 2 events could be used.*C_arg_not_a_number: 1"):
        open_trace(_write(tmp_path, evs), engine="sqlite")


def test_names_that_are_not_unicode(tmp_path):
    """A key with a lone surrogate escape or bytes that are not UTF-8 reads with U+FFFD, counted in repaired."""
    p = tmp_path / "odd.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 1, '
                  b'"args": {"a\\ud800": 1, "b\xff": 2}}]}')
    with open_trace(p, engine="sqlite") as s:
        assert _rows(s, "select name from counter_track order by id") == [("c a\ufffd",), ("c b\ufffd",)]
        assert s.load_stats.repaired == {"invalid_utf8": 1, "lone_surrogate": 1}


def test_console_reads_the_counter_tables(tmp_path):
    """A query copied from perfetto's docs (counters of a process, by track name) runs in the console."""
    sql = ("select t.name, count(*) n, max(c.value) peak from counter c join process_counter_track t "
           "on c.track_id = t.id join process p using(upid) where p.name = 'app' group by t.name order by t.name")
    with open_trace(_write(tmp_path, HAND), engine="sqlite") as s:
        df = s.console(sql).frame
    assert [tuple(r) for r in df.itertuples(index=False)] == [
        (" v", 1, -1.5), ("GPU Memory allocated", 2, 100.0), ("GPU Memory reserved", 2, 150.5),
        ("load io", 1, 16.0), ("q depth", 1, 5.0), ("q id: 0x2 depth", 1, 3.0)]


def test_counter_tables_are_read_only(tmp_path):
    with open_trace(_write(tmp_path, HAND), engine="sqlite") as s:
        for sql in ("delete from counter", "update counter set value = 0", "insert into counter values (99,1,1,1,1)"):
            with pytest.raises(QueryError, match="read-only"):
                s.query(sql)


def _recorded_schema() -> dict[str, list[tuple[str, str]]]:
    out: dict = {}
    with gzip.open(SCHEMA, "rt", encoding="utf-8", newline="") as f:
        for r in csv.DictReader(io.StringIO(f.read())):
            out.setdefault(r["table_name"], []).append((r["column_name"], r["column_type"]))
    return out


@pytest.mark.parametrize("table", COUNTER_TABLES)
def test_columns_and_types_are_trace_processors(tmp_path, table):
    """The columns and declared types of each table as a real trace_processor v58.2 lists them (pragma_table_info:
    a column that is an expression of trace_processor's view has no declared type, '')."""
    with open_trace(_write(tmp_path, HAND), engine="sqlite") as s:
        got = _rows(s, f"select name, type from pragma_table_info('{table}')")
    assert got == _recorded_schema()[table]


# ------------------------------------------------------------------------------------------- string values, fuzzed

_TEXT = st.lists(st.sampled_from(list("0123456789.eE+-xXpPaAfFnNiItTyY() _\t\n\v\f\r\x00١") + ["inf", "nan"]),
                max_size=8).map("".join)


@settings(max_examples=400, deadline=None)
@given(values=st.lists(_TEXT, min_size=1, max_size=8))
def test_string_values_read_as_strtod_reads_them(tmp_path_factory, values):
    """Each string argument's value is what C's strtod reads of it when it reads all of it (a NaN is NULL), and an
    argument strtod does not read whole makes no row."""
    want = [loader_oracle.c_strtod(v) for v in values]
    ev = {"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 1, "args": {f"k{i}": v for i, v in enumerate(values)}}
    x = {"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 1}  # (a trace with no number still opens)
    with open_trace(_write(tmp_path_factory.mktemp("c"), [ev, x]), engine="sqlite") as s:
        got = dict(_rows(s, "select t.name, c.value from counter c join counter_track t on t.id = c.track_id"))
        assert s.load_stats.skipped.get("C_arg_not_a_number", 0) == want.count(None)
    for i, w in enumerate(want):
        name = f"c k{i}"
        if w is None:
            assert name not in got
        else:
            assert _same_value(got[name], w, null_is_nan=True), (values[i], got[name], w)


def _same_value(a, b, null_is_nan: bool = False) -> bool:
    if null_is_nan and a is None:
        return b is not None and math.isnan(b)
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


# ------------------------------------------------------------------------------------------------------ loading cost


def test_many_counters_load_linearly(tmp_path):
    """100,000 counter events of 4 fields each (a process's memory sampled at 10 kHz for 10 s; one a text): one
    pass, in about the same time per event as a tenth of them (a quadratic step would take 10x longer per event)."""
    def trace(n: int) -> Path:
        evs = [{"ph": "C", "name": "GPU Memory", "pid": 1, "tid": 1 + i % 4, "ts": i * 100,
                "args": {"allocated": i, "reserved": i * 2, "active": str(i), "inactive": 0.5}} for i in range(n)]
        return _write(tmp_path, evs, f"c{n}.json")

    per_event = {}
    for n in (10_000, 100_000):
        path = trace(n)
        t0 = time.perf_counter()
        with open_trace(path, engine="sqlite") as s:
            assert s.load_stats.counters == 4 * n
            assert _rows(s, "select count(*) from counter_track") == [(4,)]
        per_event[n] = (time.perf_counter() - t0) / n
    assert per_event[100_000] < 4 * per_event[10_000]
    assert per_event[100_000] * 100_000 < 60  # seconds (it takes ~4 on a loaded two-core machine)
