"""The SQL console's rules and caps (``TraceSession.console``, ``QueryLimits``), the same on both engines: what a
statement does decides whether it runs, a trailing comment cannot lift the row cap, a single SQL function call
cannot outlast the deadline, and every value counts toward the result's size cap.

The perfetto engine drives a replay of a real trace_processor v58.2's recorded tables (tests/tp_recorded.py), in a
plain SQLite with no authorizer and with every table and view of the binary's recorded schema: whatever the
engine's gate lets through really runs there, and ``sent`` / ``answered`` show what reached it and what came back.
"""
from __future__ import annotations

import csv
import gzip
import io
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import tp_recorded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiling_core.errors import QueryError
from profiling_core.trace import QueryLimits, open_trace

TRACE = tp_recorded.DATA / "traces" / "64_bf16_cold_eager.json"
RECORDING = tp_recorded.LOCAL / "64_bf16_cold_eager"
SLICES, FLOWS = 34, 6  # a plain count of the trace's X events and flow pairs (tests/test_trace_mirror.py)
READ_ONLY = "the console runs one SELECT, WITH, VALUES or EXPLAIN query, or a read-only PRAGMA such as table_info"


def _recorded_schema() -> dict[str, list[str]]:
    """{table or view: columns} as the real binary listed them: a plain read of the recorded CSV."""
    with gzip.open(tp_recorded.TP_SCHEMA, "rt", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(io.StringIO(f.read())))
    assert rows[0] == ["table_name", "kind", "column_name", "column_type"]
    out: dict[str, list[str]] = {}
    for table, _kind, column, _type in rows[1:]:
        out.setdefault(table, []).append(column)
    return out


TP = _recorded_schema()


@pytest.fixture(scope="module")
def engines():
    """{"sqlite": the mirror, "perfetto": the perfetto engine on the replay} of one test trace."""
    sessions = {"sqlite": open_trace(TRACE, engine="sqlite"),
                "perfetto": tp_recorded.perfetto_session(TRACE, RECORDING)}
    yield sessions
    for s in sessions.values():
        s.close()


def _sent(s) -> list[str]:
    return [q for tp in s.started for q in tp.sent]


def _intact(s) -> None:
    assert s.query("select count(*) from slice").iloc[0, 0] == SLICES
    assert s.query("select count(*) from flow").iloc[0, 0] == FLOWS


# --- 1. what a statement does, not whether it compiles --------------------------------------------------------------

@pytest.mark.parametrize("sql,what", [
    ("vacuum", "VACUUM"),
    ("VACUUM INTO '{out}'", "VACUUM"),
    ("vacuum main into '{out}'", "VACUUM"),
    ("reindex", "REINDEX"),
    ("reindex no_such_index", "REINDEX"),
    ("drop table if exists no_such_table", "DROP TABLE"),
    ("drop view if exists no_such_view", "DROP VIEW"),
    ("drop index if exists no_such_index", "DROP INDEX"),
    ("drop trigger if exists no_such_trigger", "DROP TRIGGER"),
    ("/* a note */ vacuum -- and another", "VACUUM"),
])
@pytest.mark.parametrize("engine", ["sqlite", "perfetto"])
def test_statements_that_write_are_refused_on_both_engines_by_what_they_do(engines, tmp_path, engine, sql, what):
    """VACUUM, REINDEX and DROP … IF EXISTS of a name this engine's schema lacks report nothing to SQLite's
    authorizer; they are refused by their kind, with one message on both engines, and nothing of them reaches
    trace_processor (a real v58.2 binary ran VACUUM INTO)."""
    s = engines[engine]
    out = tmp_path / "copy.db"
    sql = sql.format(out=out)
    with pytest.raises(QueryError) as ei:
        s.console(sql)
    assert str(ei.value) == f"the trace is read-only: {what} is not allowed ({READ_ONLY})"
    assert not out.exists()  # VACUUM INTO wrote no file (the mirror's query_only still created an empty one)
    if engine == "perfetto":
        assert not [q for q in _sent(s) if sql in q or "vacuum" in q.lower() or "drop" in q.lower()]
    _intact(s)


@pytest.mark.parametrize("ending", [" /* note", "; /* */", " -- note", ";\n-- a last line\n;", "\n/* one */ /* two"])
def test_the_row_cap_holds_when_the_statement_ends_in_a_comment(engines, ending):
    """The cap's wrapper takes the statement without its trailing comment: no more rows than the cap cross over from
    trace_processor, whatever the statement ends with (before, the wrapper did not compile and the statement went
    uncapped: every row of it came over)."""
    s = engines["perfetto"]
    many = "with recursive n(x) as (select 1 union all select x + 1 from n where x < 200000) select x from n"
    before = sum(len(tp.answered) for tp in s.started)
    r = s.console(many + ending, QueryLimits(max_rows=100))
    assert r.cut and r.frame["x"].tolist() == list(range(1, 101))
    answers = [n for tp in s.started for n in tp.answered][before:]
    assert answers and max(answers) <= 101


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.tuples(st.lists(st.sampled_from([" ", "\n", ";", "-- c\n", "--", "/* c */", "/* ; */", "-- ;\n", "/**/",
                                                "/***/", "/* -- */"]), max_size=6).map("".join),
                      st.sampled_from(["", "/*/", "/*", "/* ;", "--"])).map("".join))
def test_any_trailing_comments_and_semicolons_give_the_same_capped_answer(engines, tail):
    """A property: the statement followed by any run of comments, semicolons and whitespace gives the same rows, cut at
    the same cap, on both engines. (An unterminated ``/*`` runs to the end of the text, as in SQLite, where ``/*/``
    opens a comment and does not close it.)"""
    many = "with recursive n(x) as (select 1 union all select x + 1 from n where x < 5000) select x from n"
    for s in engines.values():
        r = s.console(many + tail, QueryLimits(max_rows=50))
        assert r.cut and r.frame["x"].tolist() == list(range(1, 51)), (s.engine, tail)


# --- 2. a deadline that holds for one call, a size cap that counts every value --------------------------------------

BIG = 16_000_000  # under the default 16 MiB value cap
ONE_CALL = {
    "printf width 1e9": "select printf('%.*c', 1e9, 'x')",
    "printf width 2^31-1": "select printf('%.*c', 2147483647, 'x')",
    "instr over 16 MB": f"select instr(printf('%.*c', {BIG}, 'a'), printf('%.*c', {BIG // 2}, 'a') || 'b')",
}


@pytest.mark.parametrize("sql", ONE_CALL.values(), ids=ONE_CALL.keys())
@pytest.mark.parametrize("engine", ["sqlite", "perfetto"])
def test_one_function_call_stops_at_the_deadline_and_frees_the_session(engines, engine, sql):
    """SQLite checks its deadline between the steps of a program, and one function call is one step: printf at width
    1e9 ran 7.7 s past a 0.3 s deadline, at 2^31 17 s, and instr over 16 MB strings would run for tens of minutes,
    holding the session. Now the statement's process is ended: the answer comes within 3 s, and another caller of
    the same session is answered meanwhile."""
    s = engines[engine]
    answers: list = []
    other = threading.Thread(target=lambda: (time.sleep(0.1), answers.append(s.query("select count(*) from flow")
                                                                            .iloc[0, 0])))
    t0 = time.monotonic()
    other.start()
    with pytest.raises(QueryError, match="stopped after its time limit of 0.3 s"):
        s.console(sql, QueryLimits(deadline_s=0.3))
    took = time.monotonic() - t0
    other.join(10)
    assert took < 3, took
    assert answers == [FLOWS]
    assert s.console("select count(*) from slice").frame.iloc[0, 0] == SLICES  # the next query runs as usual


def _console_processes() -> set[int]:
    """The pids of this process's children that run the mirror's console (read from /proc, not from the session)."""
    import os
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"profiling_core.trace._console" in cmd:
            out.add(int(pid))
    return out


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="reads /proc")
def test_a_session_closed_with_a_statement_running_leaves_no_process():
    """The mirror's console process ends with the session, even in the middle of one long call."""
    before = _console_processes()
    s = open_trace(TRACE, engine="sqlite")
    s.console("select 1")
    mine = _console_processes() - before
    assert len(mine) == 1
    t = threading.Thread(target=lambda: pytest.raises(QueryError, s.console, ONE_CALL["printf width 1e9"],
                                                      QueryLimits(deadline_s=30)))
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    s.close()
    t.join(10)
    while mine & _console_processes() and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    assert not mine & _console_processes(), "the console process outlived its session"
    assert not t.is_alive() and time.monotonic() - t0 < 5


@pytest.mark.parametrize("engine", ["sqlite", "perfetto"])
def test_the_result_cap_counts_nulls_and_numbers(engines, engine):
    """100,000 rows of 300 NULLs came back uncut (806 MB peak RSS): they hold no text, and only text counted. Each
    value now counts 16 bytes: a row of 300 costs 4,800, so 64 MiB holds 13,981 rows (13,981 × 4,800 = 67,108,800;
    one more passes 67,108,864), and no more than one row past that crosses over from trace_processor."""
    s = engines[engine]
    nulls = ", ".join(["null"] * 300)
    sql = (f"with recursive n(x) as (select 1 union all select x + 1 from n where x < 100000) "
           f"select {nulls} from n")
    before = sum(len(tp.answered) for tp in s.started) if engine == "perfetto" else 0
    r = s.console(sql)
    assert r.cut and r.frame.shape == (13_981, 300)
    r = s.console("with recursive n(x) as (select 1 union all select x + 1 from n where x < 100000) "
                  "select x, x * 2, x * 0.5 from n", QueryLimits(max_result_bytes=48_000))
    assert r.cut and len(r.frame) == 1_000  # 3 numbers a row: 48 bytes
    if engine == "perfetto":
        answers = [n for tp in s.started for n in tp.answered][before:]
        assert answers[-2:] == [13_982, 1_001]


# --- 3. the perfetto console is trace_processor's ------------------------------------------------------------------

def test_the_perfetto_console_reads_every_table_and_view_trace_processor_has(engines):
    """Each of the 227 tables and views a real v58.2 binary lists (its recorded schema: counter, stats, counter_track,
    experimental_*, __intrinsic_*...) passes the gate and is answered, with the columns the binary lists; before, the
    gate knew only the mirror's tables and refused them all ("no such table")."""
    s = engines["perfetto"]
    for table, columns in TP.items():
        r = s.console(f'select * from "{table}" limit 1')
        if table not in tp_recorded.SCHEMA:  # (the recorded tables hold the columns that were recorded)
            assert list(r.frame.columns) == columns, table
    assert s.console("select count(*) from stats").frame.iloc[0, 0] == 0  # (the replay's unrecorded tables are empty)
    _intact(s)


def test_the_perfetto_console_includes_standard_library_modules(engines):
    """INCLUDE PERFETTO MODULE reaches trace_processor, and what the module adds can be read next (before: "near
    INCLUDE: syntax error", and its tables were unknown to the gate)."""
    s = engines["perfetto"]
    with pytest.raises(QueryError, match="no such table: thread_slice"):
        s.console("select count(*) from thread_slice")
    r = s.console("INCLUDE PERFETTO MODULE slices.with_context;  -- its thread_slice view")
    assert not r.cut and "INCLUDE PERFETTO MODULE slices.with_context" in _sent(s)
    n = s.console("select count(*) n from thread_slice").frame["n"][0]
    assert n == s.query("select count(*) from slice s join thread_track t on s.track_id = t.id").iloc[0, 0] > 0
    with pytest.raises(QueryError, match="Unknown module name provided - no.such_module"):
        s.console("include perfetto module no.such_module")
    for bad in ("INCLUDE PERFETTO MODULE 'slices.with_context'", "INCLUDE PERFETTO slices", "include perfetto module"):
        with pytest.raises(QueryError, match="INCLUDE takes the form INCLUDE PERFETTO MODULE <name>"):
            s.console(bad)


def test_the_mirror_says_which_tables_need_trace_processor(engines):
    """A table a real trace_processor has and the mirror lacks is refused with a message that says it needs the
    perfetto engine (derived from the binary's recorded schema, so a table the mirror gains stops being named); so is
    INCLUDE PERFETTO MODULE. A name neither has gets SQLite's plain message."""
    s = engines["sqlite"]
    own = set(s.query("select name from sqlite_master union select name from sqlite_temp_master")["name"])
    lacking = sorted(set(TP) - own)
    assert {"experimental_slice_layout", "__intrinsic_slice", "thread_state"} <= set(lacking) and len(lacking) > 200
    for table in lacking:
        with pytest.raises(QueryError) as ei:
            s.console(f'select * from "{table}"')
        assert str(ei.value) == (f"SQL error: no such table: {table} ({table} is a table of trace_processor's that "
                                 "the offline mirror does not have: it needs the perfetto engine, a trace_processor "
                                 "binary)")
    with pytest.raises(QueryError) as ei:
        s.console("select * from thread_slice")
    assert str(ei.value) == "SQL error: no such table: thread_slice"
    with pytest.raises(QueryError, match=r"^INCLUDE PERFETTO MODULE slices.with_context needs trace_processor \(the "
                                         r"perfetto engine\): the offline mirror has no PerfettoSQL standard library$"):
        s.console("INCLUDE PERFETTO MODULE slices.with_context")


def test_the_packaged_table_names_are_the_recorded_schemas():
    from profiling_core.trace._rules import tp_tables
    assert tp_tables() == {t.lower() for t in TP} and len(TP) == 227


@pytest.mark.parametrize("sql,needle", [
    ("create perfetto table t as select 1", "the trace is read-only: CREATE PERFETTO is not allowed"),
    ("insert into counter values (1, 2, 3, 4.0, 5)", "the trace is read-only: INSERT is not allowed"),
    ("delete from stats", "the trace is read-only: DELETE is not allowed"),
    ("with x as (select 1) update counter_track set name = 'x'", "the trace is read-only: UPDATE is not allowed"),
    ("explain query plan with x as (select 1) delete from counter", "the trace is read-only: DELETE is not allowed"),
    ("pragma writable_schema = 1", "the trace is read-only: PRAGMA writable_schema is not allowed"),
    ("select * from counter where value = (select load_extension('x'))", "load_extension() is not allowed"),
    ("select * from counter; drop table counter", "one statement at a time"),
    ("explain vacuum", "the trace is read-only: VACUUM is not allowed"),
    ("drop table no_such_table", "the trace is read-only: DROP TABLE is not allowed"),
])
def test_trace_processors_own_tables_are_read_only_too(engines, sql, needle):
    s = engines["perfetto"]
    with pytest.raises(QueryError) as ei:
        s.console(sql)
    assert needle in str(ei.value)
    assert not [q for q in _sent(s) if sql in q]
    assert s.console("select count(*) from counter").frame.iloc[0, 0] == 0


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (an exited child no one reaped yet is a zombie, 'Z')."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="reads /proc")
def test_a_killed_session_process_leaves_no_console_process():
    """A process killed (SIGKILL) while its console statement runs one long call leaves no console process behind."""
    import os
    import signal
    import subprocess
    import sys
    code = f"""
import sys, threading, time
sys.path[:0] = {[str(tp_recorded.DATA.parent.parent)]!r}
from profiling_core.trace import QueryLimits, open_trace
s = open_trace({str(TRACE)!r}, engine="sqlite")
s.console("select 1")
threading.Thread(target=lambda: s.console({ONE_CALL["printf width 2^31-1"]!r}, QueryLimits(deadline_s=60))).start()
print("running", flush=True)
time.sleep(60)
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "running"
        time.sleep(0.3)
        children = [int(c) for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        assert children
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        t0 = time.monotonic()
        while any(map(_running, children)) and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        assert not any(map(_running, children)), "a console process outlived its caller"
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("engine", ["sqlite", "perfetto"])
def test_whole_numbers_beside_nulls_are_shown_exactly(engines, engine):
    """Epoch nanoseconds in a column with NULLs (the sync_wait example's last_gpu_end_ns on HTA's AlexNet trace):
    pandas would make the column float64, which rounds 1,695,835,572,943,625,000 to ...624,960. The console keeps
    every number as SQLite returned it, on both engines."""
    base = 1_695_835_572_943_625_000
    r = engines[engine].console(f"select id, case when id % 2 = 0 then null else {base} + id end as t, "
                                "case when id % 2 = 0 then null else 0.5 end as f from slice order by id limit 6")
    got = r.frame["t"].tolist()
    assert [None if v is pd.NA else int(v) for v in got] == [None, base + 1, None, base + 3, None, base + 5]
    assert r.frame["f"].dropna().tolist() == [0.5, 0.5, 0.5]  # a column of fractions stays a float column


def test_a_console_query_interrupted_in_the_caller_leaves_no_answer_for_the_next():
    """A KeyboardInterrupt (a user's Ctrl-C) while the console's child still runs a query: its answer stayed in the
    pipe, and the next query read it as its own (asked for 'second', it got the first query's row)."""
    import signal
    import threading
    # Ctrl-C as Python delivers it: to the main thread, with Python's own handler (a process-wide kill() may be
    # delivered to any of the process's threads, and the whole suite leaves several running); the query would run
    # past the console's deadline, so that a late timer on a loaded machine still finds it running
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    main = threading.main_thread().ident
    try:
        with open_trace(str(TRACE), engine="sqlite") as s:
            assert s.console("SELECT 1 AS warm").frame["warm"].tolist() == [1]
            timer = threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGINT))
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                s.console("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 300000000) "
                          "SELECT 'first query' AS q, count(*) AS n FROM c")
            timer.join()
            assert s.console("SELECT 'second' AS q").frame["q"].tolist() == ["second"]
            assert s.console("SELECT 'third' AS q").frame["q"].tolist() == ["third"]
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("how", ["query", "console"])
def test_a_query_text_that_is_no_utf8_is_refused_as_such(how):
    """A lone surrogate in the query's text: the console reported "stopped after its time limit of 10 s" (and ended
    its process), the plain query raised UnicodeEncodeError."""
    with open_trace(str(TRACE), engine="sqlite") as s:
        with pytest.raises(QueryError, match="cannot be encoded as UTF-8"):
            getattr(s, how)("SELECT '\ud800' AS x")
        assert s.console("SELECT 'ok' AS x").frame["x"].tolist() == ["ok"]


@pytest.mark.parametrize("kw", [dict(deadline_s=float("inf")), dict(deadline_s=float("nan")), dict(deadline_s=-1),
                                dict(max_rows=0), dict(max_result_bytes=1.5)])
def test_limits_that_are_no_limits_are_refused(kw):
    with pytest.raises(ValueError, match="QueryLimits"):
        QueryLimits(**kw)


def test_the_mirror_s_files_are_readable_by_their_user_alone():
    """The SQLite file was made private (mkstemp), the args file and the args database beside it were not (0644 under
    the usual umask): copies of the trace's arguments any user of the temporary directory could read."""
    import glob
    import os
    import stat
    import tempfile
    with open_trace(str(TRACE), engine="sqlite") as s:
        s.query("SELECT count(*) FROM args")
        files = glob.glob(os.path.join(tempfile.gettempdir(), f"trace-mirror-{os.getpid()}-*"))
        assert {f.rsplit("-", 1)[-1].split(".", 1)[-1] for f in files} >= {"sqlite", "bin"}
        assert len(files) >= 3 and all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in files)


def _children_rss_mib() -> int:
    """The resident memory of this process's child processes (Linux /proc), MiB."""
    import os
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdecimal():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == os.getpid():
                with open(f"/proc/{d}/status") as f:
                    total += next(int(x.split()[1]) for x in f if x.startswith("VmRSS")) // 1024
        except (OSError, StopIteration, ValueError, IndexError):
            continue
    return total


def test_long_keys_passed_to_the_arg_functions_are_not_kept():
    """_tp_key, which the console allows, kept its last 4,096 results whatever their size: three queries passing it
    200 distinct 1 MB texts each grew the console's process by ~380 MiB a query, never given back."""
    with open_trace(str(TRACE), engine="sqlite") as s:
        s.console("SELECT 1")
        before = _children_rss_mib()
        for i in range(3):
            s.console(f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 200) "
                      f"SELECT count(_tp_key('$q{i}_' || x || hex(zeroblob(500000)))) FROM c")
        assert _children_rss_mib() - before < 100


@pytest.mark.parametrize("sql", ["EXPLAIN", "explain query plan", "EXPLAIN -- nothing"])
def test_an_explain_of_nothing_says_what_it_needs(sql):
    """A bare EXPLAIN was refused with "EXPLAIN is not allowed (the console runs one SELECT, WITH, VALUES or EXPLAIN
    query ...)", a reason that contradicts itself."""
    with open_trace(str(TRACE), engine="sqlite") as s:
        with pytest.raises(QueryError, match="EXPLAIN needs the statement it explains"):
            s.console(sql)


@pytest.mark.parametrize("sql,want", [("SELECT hex(CAST(X'FF' AS TEXT)) AS h", ["FF"]),
                                      ("SELECT x'ff' AS b UNION ALL SELECT NULL", [b"\xff", None])])
def test_a_constant_that_is_no_utf8_text_passes_the_check(sql, want):
    """The console's check reads the statement's compiled program, whose operands hold its constants: a text that is
    no UTF-8 (CAST(X'FF' AS TEXT)) made it fail with "Could not decode to UTF-8 column 'p4'", a column no query
    has; plain SQLite answers the query."""
    import sqlite3
    assert [r[0] for r in sqlite3.connect(":memory:").execute(sql).fetchall()] == want
    with open_trace(str(TRACE), engine="sqlite") as s:
        assert s.console(sql).frame.iloc[:, 0].tolist() == want



def test_a_statement_past_the_memory_cap_fails_saying_so_and_the_console_goes_on():
    """A DISTINCT over 400,000 rows of 200-character text: with its sort in temporary files nothing but the disk
    capped it (0.4 GiB of them in 6 s over control.json). Kept in memory under ``max_work_bytes`` (32 MiB here) it
    fails with what was wrong; the next statement runs."""
    sql = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 400000) "
           "SELECT count(DISTINCT hex(randomblob(100)) || x) FROM c")
    with open_trace(TRACE, engine="sqlite") as s:
        with pytest.raises(QueryError, match=r"needed more memory than the console gives a statement \(32\.0 MiB"):
            s.console(sql, QueryLimits(deadline_s=120, max_work_bytes=32 * 2**20))
        assert s.console("SELECT count(*) AS n FROM slice").frame["n"].tolist() == [SLICES]
        # the console's views are there (setting temp_store after making them dropped them: "no such table: args")
        want = s.query("SELECT count(*) AS n FROM args")["n"].tolist()
        assert s.console("SELECT count(*) AS n FROM args").frame["n"].tolist() == want and want[0] > 0
        # the same statement under the default cap (1 GiB) answers: the cap, not the statement, stopped it
        assert s.console(sql, QueryLimits(deadline_s=120)).frame.iloc[0, 0] == 400000


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_the_memory_cap_must_be_a_whole_number_of_bytes(bad):
    with pytest.raises(ValueError, match="max_work_bytes"):
        QueryLimits(max_work_bytes=bad)
