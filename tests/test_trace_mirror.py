"""The SQLite mirror against plain scans of the JSON done here (json.load), never against itself."""
from __future__ import annotations

import collections
import gzip
import json
import re
import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
import tp_recorded

from profiling_core.errors import QueryError
from profiling_core.trace._extract import SqlArgs
from profiling_core.trace import open_trace

DATA = Path(__file__).parent / "data" / "traces"
H200 = sorted(p.name for p in DATA.glob("*_bf16_*.json"))
THIRD_PARTY = ["inference_rank_1.json.gz", "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
               "gpu_metrics_input.json", "gaunernst_bert-small-uncased__1016001.json.gz",
               "event_sync_trace.json.gz", "triton_example.json.gz", "trace.json.gz",
               "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"]
ALL = H200 + THIRD_PARTY


def events(name: str) -> list[dict]:
    path = DATA / name
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def ns(v) -> int:
    return int(Decimal(v) * 1000)


@pytest.fixture(scope="module")
def session():
    """session(name) opens a test trace on the mirror; session(name, "perfetto") on the perfetto engine driving a
    replay of trace_processor's recorded tables of that trace (tests/tp_recorded.py)."""
    opened = {}

    def open_(name, engine="sqlite"):
        if (name, engine) not in opened:
            opened[name, engine] = open_trace(DATA / name, engine="sqlite") if engine == "sqlite" else \
                tp_recorded.perfetto_session(DATA / name, tp_recorded.LOCAL / name.removesuffix(".json"))
        return opened[name, engine]
    yield open_
    for s in opened.values():
        s.close()


def q1(s, sql):
    return s.query(sql).iloc[0, 0]


@pytest.mark.parametrize("name", ALL)
def test_x_events_by_category(session, name):
    want = collections.Counter()
    want_dur = collections.Counter()
    for e in events(name):
        if e.get("ph") == "X":
            want[e.get("cat") or None] += 1
            want_dur[e.get("cat") or None] += ns(e["dur"])
    df = session(name).query("select category, count(*) n, sum(dur) d from slice "
                             "where dur > 0 or category is not null group by category")
    got = {r.category: (r.n, r.d) for r in df.itertuples()}
    for cat, n in want.items():
        # instants (0-duration, ph i) share categories with X events in some traces; add them back
        n_inst = sum(1 for e in events(name) if e.get("ph") in ("i", "I") and (e.get("cat") or None) == cat
                     and e.get("s") != "g")
        assert got[cat] == (n + n_inst, want_dur[cat]), cat


@pytest.mark.parametrize("name", ALL)
def test_no_event_is_lost(session, name):
    evs = events(name)
    n_x = sum(1 for e in evs if e.get("ph") == "X")
    n_i = sum(1 for e in evs if e.get("ph") in ("i", "I"))
    s = session(name)
    assert q1(s, "select count(*) from slice") == n_x + n_i
    assert s.load_stats.slices == n_x + n_i
    assert s.load_stats.events == len(evs)


@pytest.mark.parametrize("name", ALL)
def test_kernels(session, name):
    want = collections.Counter(e["name"] for e in events(name)
                               if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel"))
    df = session(name).query("select name, count(*) n from slice where category in ('kernel', 'Kernel') "
                             "group by name")
    assert dict(zip(df["name"], df["n"])) == dict(want)


@pytest.mark.parametrize("name", H200)
def test_flow_pairs_by_id(session, name):
    """Each ac2g id with an s and an f gives one flow: launch (s's enclosing slice) -> kernel (f's)."""
    evs = events(name)
    xs = [e for e in evs if e.get("ph") == "X"]

    def enclosing(e):  # the innermost X on the same pid/tid that contains ts
        cands = [x for x in xs if x["pid"] == e["pid"] and x["tid"] == e["tid"]
                 and ns(x["ts"]) <= ns(e["ts"]) <= ns(x["ts"]) + ns(x["dur"])]
        return min(cands, key=lambda x: ns(x["dur"]))["name"]

    starts = {e["id"]: e for e in evs if e.get("ph") == "s"}
    want = collections.Counter((enclosing(starts[e["id"]]), enclosing(e))
                               for e in evs if e.get("ph") == "f" and e["id"] in starts)
    df = session(name).query("select so.name a, si.name b, count(*) n from flow f "
                             "join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in group by 1, 2")
    assert {(r.a, r.b): r.n for r in df.itertuples()} == dict(want)


@pytest.mark.parametrize("name", H200)
def test_extract_arg_correlation(session, name):
    want = sorted(e["args"]["correlation"] for e in events(name)
                  if e.get("ph") == "X" and e.get("cat") == "kernel")
    df = session(name).query("select extract_arg(arg_set_id, 'args.correlation') c from slice "
                             "where category = 'kernel' order by c")
    assert [int(c) for c in df["c"]] == want


def test_args_view_flattens_like_trace_processor(session):
    s = session("4096_bf16_warm_compile.json")
    df = s.query("select key, flat_key, int_value, real_value, value_type, display_value from args "
                 "where arg_set_id = (select arg_set_id from slice where category = 'kernel' limit 1)")
    rows = {r.key: r for r in df.itertuples()}
    assert rows["args.grid[1]"].flat_key == "args.grid"
    assert rows["args.grid[1]"].int_value == 66
    assert rows["args.External id"].value_type == "int"
    assert rows["args.blocks per SM"].value_type == "real"
    assert rows["args.blocks per SM"].display_value == "1.0"
    assert q1(s, "select extract_arg(arg_set_id, 'args.grid[0]') from slice where category = 'kernel' limit 1") == 2
    assert q1(s, "select extract_arg(arg_set_id, 'args.nope') from slice where category = 'kernel' limit 1") is None


def test_string_pids_get_numbers_and_names(session):
    s = session("4096_bf16_warm_compile.json")
    df = s.query("select p.pid, p.name pname, t.tid, t.name tname from slice sl "
                 "join thread_track tt on sl.track_id = tt.id join thread t using(utid) "
                 "join process p using(upid) where sl.name = 'PyTorch Profiler (0)'")
    assert df["pname"].tolist() == ["Spans"]
    assert df["tname"].tolist() == ["PyTorch Profiler"]
    assert int(df["pid"][0]) > 0 and int(df["tid"][0]) > 0


def test_global_instants_on_global_track(session):
    s = session("4096_bf16_warm_compile.json")
    df = s.query("select s.name, s.category, s.dur, t.type from slice s join track t on s.track_id = t.id "
                 "where s.name in ('Iteration Start: PyTorch Profiler', 'Record Window End') order by s.ts")
    assert df["name"].tolist() == ["Iteration Start: PyTorch Profiler", "Record Window End"]
    assert df["category"].isna().all()
    assert (df["dur"] == 0).all()
    assert set(df["type"]) == {"legacy_chrome_global_instants"}


def test_thread_instants_are_zero_duration_slices(session):
    name = "gaunernst_bert-small-uncased__1016001.json.gz"
    want = sum(1 for e in events(name) if e.get("ph") == "i" and e.get("s") != "g")
    s = session(name)
    assert q1(s, "select count(*) from slice s join thread_track tt on s.track_id = tt.id "
                 "where s.category = 'cpu_instant_event' and s.dur = 0") == want


def test_gpu_lanes_are_named_threads(session):
    s = session("4096_bf16_warm_compile.json")
    df = s.query("select distinct p.pid, t.tid, t.name from slice s join thread_track tt on s.track_id = tt.id "
                 "join thread t using(utid) join process p using(upid) where s.category = 'kernel'")
    assert df.values.tolist() == [[0, 7, "stream 7 "]]


def test_ts_keeps_nanoseconds_of_absolute_timestamps(session):
    name = "4096_bf16_warm_compile.json"
    want = sorted(ns(e["ts"]) for e in events(name) if e.get("ph") == "X")
    got = session(name).query("select ts from slice where track_id in (select id from thread_track) order by ts")
    assert got["ts"].tolist() == want


def test_gz_and_json_give_identical_answers(tmp_path):
    src = DATA / "64_bf16_cold_eager.json"
    gz = tmp_path / "trace.bin"  # gzip detected by content, not by name
    gz.write_bytes(gzip.compress(src.read_bytes()))
    sql = ["select * from slice order by id", "select * from flow order by id", "select * from thread order by utid",
           "select * from process order by upid", "select * from args order by id", "select * from track order by id"]
    with open_trace(src, engine="sqlite") as a, open_trace(gz, engine="sqlite") as b:
        for q in sql:
            assert a.query(q).equals(b.query(q)), q


def _write(tmp_path, evs, name="t.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": evs}))
    return p


def test_overlapping_events_are_kept_on_a_spill_track(tmp_path):
    """Two kernels on one stream that overlap without nesting: both stay, the second on another track."""
    evs = [
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 10.0, "dur": 5.0},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 14.3, "dur": 5.0},  # starts before k1 ends
        {"ph": "X", "cat": "kernel", "name": "k3", "pid": 0, "tid": 7, "ts": 20.0, "dur": 1.0},
        {"ph": "X", "cat": "kernel", "name": "k4", "pid": 0, "tid": 7, "ts": 20.5, "dur": 0.2},  # nested in k3
    ]
    with open_trace(_write(tmp_path, evs), engine="sqlite") as s:
        df = s.query("select s.name, s.depth, s.track_id, tt.utid from slice s join thread_track tt "
                     "on s.track_id = tt.id order by s.ts")
        assert df["name"].tolist() == ["k1", "k2", "k3", "k4"]
        assert df["depth"].tolist() == [0, 0, 0, 1]
        assert df["track_id"][0] != df["track_id"][1]       # k2 spilled
        assert df["track_id"][2] == df["track_id"][0]       # k3 back on the first track
        assert df["utid"].nunique() == 1                    # same thread
        assert s.load_stats.spill_tracks == 1
        assert q1(s, "select sum(dur) from slice") == 11_200


def test_bare_list_duplicates_and_unknown_phases(tmp_path):
    e = {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}
    p = tmp_path / "list.json"
    p.write_text(json.dumps([e, e, {"ph": "O", "name": "c", "pid": 1, "ts": 1, "args": {"v": 1}},
                             {"ph": "X", "name": "bad", "pid": 1, "tid": 1, "ts": 1, "dur": -1}]))
    with open_trace(p, engine="sqlite") as s:
        assert q1(s, "select count(*) from slice") == 2   # duplicates are kept, like trace_processor
        assert s.load_stats.skipped == {"unsupported_phase:O": 1, "X_negative_dur": 1}


def test_flow_finish_without_bp_binds_to_next_slice(tmp_path):
    evs = [
        {"ph": "X", "name": "launch", "pid": 1, "tid": 1, "ts": 1, "dur": 5},
        {"ph": "s", "id": 5, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 2},
        {"ph": "f", "id": 5, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 8},
        {"ph": "X", "name": "kernel", "pid": 0, "tid": 7, "ts": 9, "dur": 1},
    ]
    with open_trace(_write(tmp_path, evs), engine="sqlite") as s:
        df = s.query("select so.name a, si.name b from flow f join slice so on so.id = f.slice_out "
                     "join slice si on si.id = f.slice_in")
        assert df.values.tolist() == [["launch", "kernel"]]


@pytest.mark.parametrize("sql,needle", [
    ("insert into flow values (100, 1, 2, 3, 4)", "read-only: INSERT is not allowed"),
    ("attach database ':memory:' as x", "read-only: ATTACH"),
    ("select load_extension('/tmp/x.so')", "load_extension() is not allowed"),
    ("pragma query_only = 0", "read-only: PRAGMA query_only"),
    ("pragma journal_mode = wal", "read-only: PRAGMA journal_mode"),
    ("create table t(x)", "read-only"),
    ("drop table flow", "read-only"),
    ("update flow set slice_in = 0", "read-only: UPDATE is not allowed"),
    ("delete from flow", "read-only: DELETE is not allowed"),
    ("with x as (select 1) delete from flow", "read-only: DELETE is not allowed"),
    ("begin", "read-only: BEGIN is not allowed"),
    ("select * from no_such_table", "SQL error: no such table: no_such_table"),
    ("select 1; select 2", "one statement"),
    # The allow-list: fts3_tokenizer() hands out a library pointer, and given one makes fts3tokenize crash the process
    ("select fts3_tokenizer('simple')", "fts3_tokenizer() is not allowed"),
    ("select fts3_tokenizer('simple', x'4141414141414141')", "fts3_tokenizer() is not allowed"),
    ("select * from fts3tokenize('simple', 'a b')", "reading 'fts3tokenize' is not allowed"),
    ("select count(*) from fts3tokenize('simple', 'a b')", "reading 'fts3tokenize' is not allowed"),
    ("select * from dbstat", "reading 'dbstat' is not allowed"),
    ("select * from sqlite_stmt", "reading 'sqlite_stmt' is not allowed"),
    ("select * from pragma_compile_options", "reading 'pragma_compile_options' is not allowed"),
    ("select sqlite_compileoption_used('ENABLE_FTS3')", "sqlite_compileoption_used() is not allowed"),
])
@pytest.mark.parametrize("door", ["query", "console", "perfetto console"])
def test_read_only_refusals(session, sql, needle, door):
    """The same refusals, with the same messages, through the mirror's query() and console() and the perfetto
    engine's console() (which must refuse before anything reaches trace_processor)."""
    s = session("64_bf16_cold_eager.json", "perfetto" if door.startswith("perfetto") else "sqlite")
    with pytest.raises(QueryError) as ei:
        getattr(s, door.split()[-1])(sql)
    assert needle in str(ei.value)
    assert q1(s, "select count(*) from flow") == 6  # still intact and usable
    if s.engine == "perfetto":  # nothing of the refused statement reached trace_processor
        assert not [q for tp in s.started for q in tp.sent if sql in q]


def test_the_allow_list_keeps_what_queries_use(session):
    s = session("64_bf16_cold_eager.json")
    row = s.query("""
        with recursive n(x) as (select 1 union all select x + 1 from n where x < 4)
        select (select sum(x) from n), round(sqrt(16.0)), upper('a') || printf('%03d', 7),
               json_extract('{"k": [1, 2]}', '$.k[1]'), '{"k": 3}' ->> 'k',
               (select count(*) from json_each('[1, 2, 3]')),
               (select max(r) from (select rank() over (order by ts) as r from slice)) > 0,
               (select count(*) from args) > 0, typeof(extract_arg(0, 'args.none'))""").values.tolist()
    assert row == [[10, 4.0, "A007", 2, 3, 3, 1, 1, "null"]]


def _endless(_s):
    return "with recursive n(x) as (select 1 union all select x + 1 from n) select count(*) from n"


@pytest.mark.parametrize("engine", ["sqlite", "perfetto"])
def test_a_console_query_stops_at_its_deadline_and_frees_the_session(session, engine):
    import threading
    import time

    from profiling_core.trace import QueryLimits
    s = session("64_bf16_cold_eager.json", engine)
    started = len(getattr(s, "started", []))
    t0 = time.monotonic()
    with pytest.raises(QueryError, match="stopped after its time limit of 0.5 s"):
        s.console(_endless(s), QueryLimits(deadline_s=0.5))
    took = time.monotonic() - t0
    assert 0.5 <= took < 5
    # Another caller waiting on the same session gets its answer as soon as the stopped query lets go.
    answers = []
    other = threading.Thread(target=lambda: answers.append(q1(s, "select count(*) from flow")))
    t0 = time.monotonic()
    blocker = threading.Thread(target=lambda: pytest.raises(QueryError, s.console, _endless(s),
                                                            QueryLimits(deadline_s=0.5)))
    blocker.start()
    time.sleep(0.1)
    other.start()
    blocker.join(10)
    other.join(10)
    assert answers == [6] and time.monotonic() - t0 < 5
    if engine == "perfetto":  # stopping a statement ends trace_processor; the next query started another
        assert len(s.started) == started + 2


@pytest.mark.parametrize("engine", ["sqlite", "perfetto"])
def test_a_console_result_stops_at_the_row_and_size_caps(session, engine):
    from profiling_core.trace import QueryLimits
    s = session("64_bf16_cold_eager.json", engine)
    many = "with recursive n(x) as (select 1 union all select x + 1 from n where x < 5000000) select x from n"
    r = s.console(many, QueryLimits(max_rows=2500))
    assert r.cut and r.frame["x"].tolist() == list(range(1, 2501))
    r = s.console("select x, hex(zeroblob(1000)) from (" + many + ")", QueryLimits(max_result_bytes=100_000))
    # A row costs its 2,000 characters and 16 bytes for each of its 2 values: 2,032; the 50th passes 100,000.
    assert r.cut and len(r.frame) == 49
    r = s.console("select count(*) from slice", QueryLimits(max_rows=1))
    assert not r.cut and r.frame.iloc[0, 0] == q1(s, "select count(*) from slice")
    with pytest.raises(QueryError, match="at most 1,000,000 bytes"):
        s.console("select randomblob(2000000)", QueryLimits(max_value_bytes=1_000_000))
    # The caps are the console's: the same session's own queries run without them afterwards.
    assert len(s.query("select randomblob(2000000) as b").iloc[0, 0]) == 2_000_000


def test_read_only_pragmas_allowed(session):
    s = session("64_bf16_cold_eager.json")
    cols = s.query("select name from pragma_table_info('slice')")["name"].tolist()
    assert cols[:9] == ["id", "ts", "dur", "track_id", "category", "name", "depth", "parent_id", "arg_set_id"]
    assert {"cat", "slice_id"} <= set(cols)


def test_close_deletes_the_database_and_refuses_queries(tmp_path):
    p = shutil.copy(DATA / "64_bf16_cold_eager.json", tmp_path / "a.json")
    s = open_trace(p, engine="sqlite")
    backend = s._backend._b
    assert Path(backend.args_file).stat().st_size > 0  # the args, written by the load
    assert s.query("select count(*) as n from args").iloc[0, 0] > 0  # the SQL tables, args among them
    files = [backend.db_path, backend.args_path, backend.args_file]
    assert all(Path(f).exists() for f in files)
    s.close()
    s.close()  # idempotent
    assert not any(Path(f).exists() for f in files)
    with pytest.raises(QueryError, match="closed"):
        s.query("select 1")


def test_sql_tables_are_written_in_the_background_and_errors_reach_the_first_query(tmp_path, monkeypatch):
    """open_trace returns once the columns are read; the SQLite file is written by a background thread. If that
    fails (e.g. the disk is full), the first query says so (QueryError), and close() still removes the files."""
    from profiling_core.trace import _mirror

    def disk_full(conn, model, cancelled=None):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(_mirror, "_write_tables", disk_full)
    p = shutil.copy(DATA / "64_bf16_cold_eager.json", tmp_path / "a.json")
    s = open_trace(p, engine="sqlite", sql_tables="background")
    assert s.tables is not None and s.tables.slice_count == s.load_stats.slices > 0
    with pytest.raises(QueryError, match="could not be written.*disk is full"):
        s.query("select count(*) from slice")
    with pytest.raises(QueryError, match="disk is full"):  # every later query too, never a half-built table
        s.query("select 1")
    backend = s._backend._b
    files = [backend.db_path, backend.args_path, backend.args_file]
    s.close()
    assert not any(Path(f).exists() for f in files)


def test_columns_and_sql_tables_hold_the_same_slices(session):
    s = session("64_bf16_cold_eager.json")
    t = s.tables
    df = s.query("select id, ts, dur, track_id, depth, parent_id, arg_set_id, name, category from slice order by id")
    assert df["id"].tolist() == list(range(t.slice_count))
    assert df["ts"].tolist() == t.ts.tolist() and df["dur"].tolist() == t.dur.tolist()
    assert df["track_id"].tolist() == t.track_id.tolist() and df["depth"].tolist() == t.depth.tolist()
    assert [None if v != v or v is None else int(v) for v in df["parent_id"]] == \
        [None if v < 0 else v for v in t.parent_id.tolist()]
    assert df["name"].tolist() == t.name.tolist()


def test_close_stops_a_background_build_that_is_still_running(tmp_path, monkeypatch):
    """Closing a session whose SQL tables are not needed does not wait for them: the writing statement is
    interrupted (here a statement that would run for minutes), and the files are deleted."""
    import threading
    import time

    from profiling_core.trace import _mirror
    started = threading.Event()

    def endless(conn, model, cancelled=lambda: False):
        started.set()
        conn.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000) "
                     "SELECT count(*) FROM c").fetchone()

    monkeypatch.setattr(_mirror, "_write_tables", endless)
    p = shutil.copy(DATA / "64_bf16_cold_eager.json", tmp_path / "a.json")
    s = open_trace(p, engine="sqlite", sql_tables="background")
    assert started.wait(10)
    backend = s._backend._b
    files = [backend.db_path, backend.args_path, backend.args_file]
    t0 = time.perf_counter()
    s.close()
    assert time.perf_counter() - t0 < 5
    assert not backend._builder and not any(Path(f).exists() for f in files)


def test_args_reader_gives_each_events_args(session):
    """tables.args gives each event's top-level args as written in the JSON (checked by a plain scan): every key of
    every X event with args, on the study trace."""
    s = session("64_bf16_cold_eager.json")
    doc = json.loads((DATA / "64_bf16_cold_eager.json").read_text())
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("args")]
    tb = s.tables
    by_key = {(e["name"], round(e["ts"] * 1000)): e["args"] for e in xs}
    rows = [i for i in range(tb.slice_count) if tb.arg_set_id[i] >= 0]
    assert len(rows) == len(xs)
    names = tb.name.tolist()
    keys = {k for e in xs for k in e["args"]}
    for key in keys:
        got = tb.args.get(key, tb.arg_set_id[rows].tolist())
        for i in rows:
            want = by_key[(names[i], int(tb.ts[i]))].get(key)
            assert got.get(int(tb.arg_set_id[i])) == want, (key, names[i])
    assert tb.args.get("correlation", []) == {} and tb.args.get("correlation", [10**9]) == {}


@pytest.mark.parametrize("engine", ["sqlite", "perfetto"])
def test_args_reader_reads_several_names_at_once(session, engine):
    """get_many(names, ids) gives, for every name at once, what the JSON says (a plain scan) and what get gives one
    name at a time; a name asked twice counts once, one no event has gives nothing; on both engines (perfetto:
    trace_processor's recorded args table)."""
    s = session("64_bf16_cold_eager.json", engine)
    doc = json.loads((DATA / "64_bf16_cold_eager.json").read_text())
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("args")]
    by_key = {(e["name"], round(e["ts"] * 1000)): e["args"] for e in xs}
    tb = s.tables
    rows = [i for i in range(tb.slice_count) if tb.arg_set_id[i] >= 0]
    names = tb.name.tolist()
    # (the names an analysis can ask: trace_processor's args table flattens a key's dots into paths)
    keys = sorted({k for e in xs for k in e["args"] if re.fullmatch(r"[A-Za-z0-9_ ]+", k)})
    assert len(keys) >= 3 and "External id" in keys
    ids = tb.arg_set_id[rows].tolist()
    got = tb.args.get_many(keys + [keys[0], "no such arg"], [-1] + ids)
    assert sorted(got) == sorted(keys + ["no such arg"]) and got["no such arg"] == {}
    for key in keys:
        assert got[key] == tb.args.get(key, ids)
        for i in rows:
            assert got[key].get(int(tb.arg_set_id[i])) == by_key[(names[i], int(tb.ts[i]))].get(key), (key, names[i])
    assert tb.args.get_many(keys, []) == {k: {} for k in keys}


def test_args_reader_reads_odd_arg_sets_as_trace_processor_shows_them(tmp_path):
    """Each name read from the same arg set in one pass keeps the rules of one name at a time: of a key written
    twice the last counts, null and objects show nothing, booleans stay booleans (trace_processor's ``bool`` value
    type: a reader asking for a number tells ``true`` from 1), an arg set that is not an object has no arguments, and
    keys that are not asked are skipped whatever they hold. trace_processor's args table, read as the perfetto engine
    reads it, gives the same."""
    events = ['{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
              '"args": {"k": 1, "k": 2, "n": null, "o": {"x": 1}, "b": true, "deep": [[[[1]]]], "s": "t"}}',
              '{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": [1, 2]}',
              '{"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"k": "v", "n": 0}}']
    p = tmp_path / "odd.json"
    p.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    with open_trace(p, engine="sqlite") as s:
        tb = s.tables
        asid = {n: int(tb.arg_set_id[i]) for i, n in enumerate(tb.name.tolist())}
        ids = [asid[n] for n in "abc" if asid[n] >= 0]
        got = tb.args.get_many(["k", "n", "o", "b", "s", "missing"], ids)
        from_sql = SqlArgs(lambda sql: {c: v.tolist() for c, v in s.query(sql).items()}).get_many(["k", "n", "o", "b", "s", "missing"], ids)
    assert got == {"k": {asid["a"]: 2, asid["c"]: "v"}, "n": {asid["c"]: 0}, "o": {}, "b": {asid["a"]: True},
                   "s": {asid["a"]: "t"}, "missing": {}}
    assert type(got["b"][asid["a"]]) is bool and type(got["n"][asid["c"]]) is int
    assert from_sql == got and type(from_sql["b"][asid["a"]]) is bool


def _args_rows(rows):
    """A columns function answering every args query with ``rows`` (arg set, key after the name, value, value type)
    in the order given, as trace_processor's ``args`` table could hand them over (the query orders by arg set
    only: an arg set's rows in any order)."""
    cols = ["arg_set_id", "rest", "value", "value_type"]
    return lambda sql: {c: [r[j] for r in rows] for j, c in enumerate(cols)}


def test_sql_args_put_arrays_back_together_from_rows_in_any_order():
    """The perfetto engine's args are rows of trace_processor's ``args`` table, one per array element, keyed
    ``[i][j]``; each arg set's value is the array its elements' keys make, whatever the order the rows come in, an
    empty array (which has no row) where a position has none, the last row of a key given twice counting."""
    rows = [(1, "", 7, "int"),                                                   # a number
            (2, "[2]", "c", "string"), (2, "[0]", "a", "string"), (2, "[1]", "b", "string"),  # out of order
            (3, "[1][0]", 5, "int"), (3, "[0][1]", 2, "int"), (3, "[0][0]", 1, "int"),       # [[1, 2], [5]]
            (4, "[0][0]", 8, "int"), (4, "[2][0]", 9, "int"), (4, "[2][1]", 10, "int"),      # [[8], [], [9, 10]]
            (5, "[1]", 1, "int"), (5, "[1]", 2, "int"), (5, "[0]", 0, "int"),               # [1] twice: the last
            (6, "[0]", 1, "bool"), (6, "[1]", float("nan"), "real"),                        # a bool, a NaN
            (7, "[0]", 3, "int"), (7, "[1][0]", 4, "int"),                                  # two depths: [3, [4]]
            (8, ".x", 1, "int"),                                                            # another key: no value
            (9, "[0][0][0]", 6, "int"),                                                     # three deep
            (10, "[1]", 4, "int")]                                                          # [[], 4]
    got = SqlArgs(_args_rows(rows)).get("k", range(1, 12))
    assert got == {1: 7, 2: ["a", "b", "c"], 3: [[1, 2], [5]], 4: [[8], [], [9, 10]], 5: [0, 2], 6: [True, None],
                   7: [3, [4]], 9: [[[6]]], 10: [[], 4]}
    assert type(got[6][0]) is bool
    import random
    for seed in range(5):  # any order of an arg set's rows (the query keeps arg sets apart), the same values
        shuffled = [r for a in range(1, 11) for r in random.Random(seed).sample([r for r in rows if r[0] == a],
                                                                                 sum(r[0] == a for r in rows))]
        again = SqlArgs(_args_rows(shuffled)).get("k", range(1, 12))
        assert {a: v for a, v in again.items() if a != 5} == {a: v for a, v in got.items() if a != 5}


def test_files_of_a_killed_process_are_removed_by_the_next_open(tmp_path):
    """A process killed while it holds a trace open (SIGKILL: no close, no finalizer) leaves its SQLite files; the
    next open_trace in the same temporary directory removes them, and keeps those of live processes."""
    import os
    import signal
    import subprocess
    import sys

    from profiling_core.trace._mirror import MirrorBackend
    p = shutil.copy(DATA / "64_bf16_cold_eager.json", tmp_path / "a.json")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = ("import os, signal; from profiling_core.trace._mirror import MirrorBackend\n"
            f"b = MirrorBackend({str(p)!r}, 1 << 30, tmp_dir={str(tmp)!r})\n"
            "b.wait_sql(); print(b.db_path, b.args_path, b.args_file, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == -signal.SIGKILL
    orphans = r.stdout.split()
    assert len(orphans) == 3 and all(Path(f).exists() for f in orphans)
    live = tmp / f"trace-mirror-{os.getppid()}-keep.sqlite"  # a live process's file (our parent's pid)
    live.write_bytes(b"")
    b = MirrorBackend(str(p), 1 << 30, tmp_dir=str(tmp))
    try:
        assert not any(Path(f).exists() for f in orphans)
        assert live.exists() and Path(b.db_path).exists()
    finally:
        b.close()


def test_sql_tables_on_first_query_are_written_only_when_sql_is_asked(tmp_path):
    """The default: the SQLite tables are written when SQL is first asked for, never before."""
    p = shutil.copy(DATA / "64_bf16_cold_eager.json", tmp_path / "a.json")
    with open_trace(p, engine="sqlite") as s:  # the default: on_first_query
        backend = s._backend._b
        assert backend._builder.ident is None  # nothing started
        assert Path(backend.db_path).stat().st_size == 0
        n = sum(1 for e in json.loads((DATA / "64_bf16_cold_eager.json").read_text())["traceEvents"]
                if e.get("ph") in ("X", "i", "I", "R"))  # complete events and instants (no B/E in this trace)
        assert s.query("select count(*) n from slice")["n"][0] == n == s.tables.slice_count
    with pytest.raises(ValueError, match="sql_tables must be one of on_first_query, background"):
        open_trace(p, engine="sqlite", sql_tables="never")


def test_console_fuzz_every_statement_ends_in_time_and_the_process_lives():
    """scripts/fuzz_console.py (seeded): 300 generated statements of every kind, each through both engines' console;
    each ends within its deadline with a result or a QueryError, the trace is unchanged, and both engines judge alike
    every statement both can judge (the same answer-or-refusal, the same message). Run in a child process, so an
    SQLite crash shows as its exit status."""
    import re
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(root / "scripts" / "fuzz_console.py"), "-n", "300", "--deadline", "0.3"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    m = re.search(r"statements 600: results (\d+), refused (\d+) \(stopped at the deadline (\d+)\), cut (\d+), "
                  r"judged alike (\d+), differently 0, failures 0", p.stdout)
    assert m, p.stdout
    results, refused, stopped, cut, alike = map(int, m.groups())
    assert results + refused == 600 and min(results, refused, stopped, cut) > 0
    assert alike >= 150  # of 300 statements, those naming what only one engine has and those a cap stopped aside


def test_args_read_back_as_written_wherever_they_lie_in_the_file(tmp_path):
    """Arg sets of very different sizes (a 200 KB one every 7th of the first 300 events: 8.6 MB of args in all,
    then 20,000 small ones), asked for in any order, some twice, some not at all, with ids that name no arg set:
    each read gives each event its own args (a plain scan of the JSON written here), on the command line's path (the
    load in a forked process) and the app's, and the SQL ``args`` table gives the same values."""
    import random

    n = 20_300
    evs = [{"ph": "X", "name": f"e{k}", "pid": 1, "tid": 1, "ts": 10 * k, "dur": 5,
            "args": {"k": k, "pad": ("x" * 200_000 if k % 7 == 0 and k < 300 else "y" * (k % 50)),
                     "shape": [[k % 3, 4]]}}
           for k in range(n)]
    evs.append({"ph": "X", "name": "no_args", "pid": 1, "tid": 1, "ts": 10 * n, "dur": 1})
    p = _write(tmp_path, evs)
    rng = random.Random(7)
    for while_loading in (None, lambda: None):
        with open_trace(p, engine="sqlite", while_loading=while_loading) as s:
            t = s.tables
            asid = dict(zip(t.name.tolist(), t.arg_set_id.tolist()))
            assert asid["no_args"] < 0
            for size in (120, 300, 15_000):
                wanted = rng.sample(range(300), 120) + rng.sample(range(300, n), size)
                ids = [asid[f"e{k}"] for k in wanted] + [asid[f"e{k}"] for k in wanted[:10]] + [-1, 10**6]
                rng.shuffle(ids)
                got = t.args.get_many(("k", "shape", "pad"), ids)
                assert got["k"] == {asid[f"e{k}"]: k for k in wanted}
                assert got["pad"] == {asid[f"e{k}"]: evs[k]["args"]["pad"] for k in wanted}
                assert got["shape"] == {asid[f"e{k}"]: [[k % 3, 4]] for k in wanted}
            sql = s.query("select arg_set_id, int_value from args where key = 'args.k'")
            assert dict(zip(sql["arg_set_id"], sql["int_value"])) == {asid[f"e{k}"]: k for k in range(n)}
            pads = s.query("select count(*) as n, sum(length(string_value)) as chars from args where key = 'args.pad'")
            assert pads.iloc[0].tolist() == [n, sum(len(e["args"]["pad"]) for e in evs[:n])]


def test_an_argument_nested_too_deeply_to_show_leaves_the_others_of_its_read(tmp_path):
    """One event's argument nests arrays as deeply as a trace may (the deepest that loads here: such a value is too
    deep to decode or show on its own, depending on the interpreter's stack): every other event in the same read
    has its own value (a plain scan of the JSON), and the deep one has none or the whole nest."""
    from profiling_core.errors import TraceFormatError

    def trace(depth: int) -> Path:
        deep = "[" * depth + "7" + "]" * depth
        p = tmp_path / f"deep{depth}.json"
        p.write_text('{"traceEvents": ['
                     + ",".join(f'{{"ph": "X", "name": "e{k}", "pid": 1, "tid": 1, "ts": {10 * k}, "dur": 5, '
                                f'"args": {{"v": {deep if k == 3 else json.dumps([k, "x"])}, "k": {k}}}}}'
                                for k in range(6)) + "]}")
        return p

    def loads(depth: int) -> bool:
        try:
            open_trace(trace(depth), engine="sqlite").close()
            return True
        except TraceFormatError:
            return False

    lo, hi = 10, 100_000  # the deepest nest that loads, by bisection
    assert loads(lo) and not loads(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if loads(mid) else (lo, mid)
    with open_trace(trace(lo), engine="sqlite") as s:
        t = s.tables
        asid = dict(zip(t.name.tolist(), t.arg_set_id.tolist()))
        got = t.args.get_many(("v", "k"), list(asid.values()))
        deep = got["v"].pop(asid["e3"], None)
        assert got["v"] == {asid[f"e{k}"]: [k, "x"] for k in range(6) if k != 3}
        assert got["k"] == {asid[f"e{k}"]: k for k in range(6)}
        depth = 0
        while type(deep) is list and len(deep) == 1:
            deep, depth = deep[0], depth + 1
        assert deep is None or (deep, depth) == (7, lo)
