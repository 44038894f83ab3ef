#!/usr/bin/env python3
"""Fuzz the SQL console: generated statements of every kind (queries, VALUES, EXPLAIN, functions allowed and
refused, single calls that run long, CTEs bounded and endless, wide results of NULLs, pragmas, virtual tables, writes,
VACUUM / REINDEX / DROP … IF EXISTS, INCLUDE PERFETTO MODULE, trace_processor's own tables, several statements,
trailing comments, broken syntax) through ``TraceSession.console`` on the mirror and on the perfetto engine (driving a
replay of trace_processor's recorded tables, tests/tp_recorded.py, which runs them in a plain SQLite with no
authorizer and every table of the real binary's schema: whatever the engine's gate lets through really runs).

Each statement goes to both engines. Every statement must end within its deadline (plus a margin) with a result or a
QueryError; any other exception, an overrun, a change to the trace's tables, or the process dying (a crash of SQLite)
fails. Both engines must also judge it alike: both answer, or both refuse with the same message — for every
statement both can judge, that is all but those naming a table or function only one engine has, INCLUDE (only the
perfetto engine has trace_processor's standard library), and those stopped by a cap (the deadline, or a value over
the size cap, which the perfetto engine checks on what arrives). Seeded, so a failure can be replayed with --seed.
Ends with one line: ``statements N: results R, refused Q (stopped at the deadline S), cut C, judged alike A,
differently D, failures F``.

Usage: python scripts/fuzz_console.py [-n 2000] [--seed 1] [--deadline 0.3]
"""
from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import tp_recorded  # noqa: E402

from profiling_core.trace import QueryLimits  # noqa: E402
from profiling_core.errors import QueryError  # noqa: E402
from profiling_core.trace import open_trace  # noqa: E402

TRACE = os.path.join(ROOT, "tests", "data", "traces", "64_bf16_cold_eager.json")
RECORDING = tp_recorded.LOCAL / "64_bf16_cold_eager"
VACUUM_COPY = "/tmp/fuzz-console-vacuum.db"  # where the VACUUM INTO statements below would write

TABLES = ["slice", "flow", "thread", "process", "thread_track", "track", "args", "process_track", "sqlite_master",
          "_slice", "_track", "argsdb._args_raw", "no_such_table", "counter", "stats", "counter_track",
          "experimental_slice_layout", "thread_slice", "__intrinsic_slice"]
# Names only one engine has: the mirror's hidden tables and functions, trace_processor's tables (its recorded schema)
# and the standard library's; a statement naming one is judged by each engine on its own.
ONE_ENGINE = ["_slice", "_track", "argsdb", "_args_raw", "_tp_key", "_tp_flat_key", "thread_slice", "include"] + \
    sorted(tp_recorded.tp_schema().keys() - {"slice", "flow", "thread", "process", "thread_track", "track", "args",
                                              "process_track"})
VTABLES = ["json_each('[1,2,3]')", "json_tree('{\"a\":[1,{\"b\":2}]}')", "pragma_table_info('slice')",
           "pragma_function_list", "pragma_module_list", "pragma_compile_options", "pragma_database_list",
           "dbstat", "fts3tokenize('simple', 'a b c')", "fts4aux", "fts5vocab", "sqlite_stmt", "sqlite_dbpage",
           "generate_series(1, 10)", "carray", "rtree", "zipfile('x.zip')", "fsdir('/')", "completion"]
SCALARS = ["1", "-1", "0", "NULL", "3.5", "'x'", "x'00ff'", "9223372036854775807", "'%s'", "'$.a'", "ts", "dur",
           "name", "id", "arg_set_id", "randomblob(64)", "zeroblob(100)", "char(0)", "'\u00e9\U0001f600'"]
FUNCS = ["abs", "length", "upper", "hex", "quote", "typeof", "round", "printf", "substr", "instr", "coalesce",
         "json_extract", "json_array", "json_object", "extract_arg", "sqrt", "ln", "unixepoch", "max", "min",
         "sum", "count", "group_concat", "avg", "total", "iif", "replace", "trim", "unicode",
         # refused: each is a door the allow-list must keep shut
         "fts3_tokenizer", "load_extension", "readfile", "writefile", "edit", "sqlite_compileoption_get",
         "sqlite_compileoption_used", "sqlite_offset", "fts5", "matchinfo", "snippet", "offsets",
         "sqlite_source_id", "changes", "last_insert_rowid", "total_changes", "sqlite_log", "zipfile",
         "rtreecheck", "unknown_fn", "_tp_key", "_tp_flat_key"]
PRAGMAS = ["table_info(slice)", "table_xinfo(flow)", "index_list(_slice)", "function_list", "table_list",
           "query_only = 0", "query_only", "journal_mode = wal", "writable_schema = 1", "cache_size = 1",
           "compile_options", "database_list", "integrity_check", "user_version = 7", "mmap_size = 1000000",
           "temp_store_directory = '/tmp'", "trusted_schema = 1", "foreign_keys = 1", "data_version"]
# Single calls that run long (SQLite checks its deadline only between calls), and wide results of NULLs.
LONG_CALLS = ["select printf('%.*c', 2e8, 'x')", "select length(printf('%.*c', 2147483647, 'x'))",
              "select instr(printf('%.*c', 60000, 'a'), printf('%.*c', 30000, 'a') || 'b') from slice, slice",
              "select count(*) from slice a, slice b, slice c, slice d, slice e where a.name like '%a%a%a%a%b'"]
WIDE = "with recursive n(x) as (select 1 union all select x + 1 from n where x < 20000) select {cols} from n"
KINDS = ["vacuum", "vacuum into '/tmp/fuzz-console-vacuum.db'", "vacuum main into '/tmp/fuzz-console-vacuum.db'",
         "reindex", "reindex _flow_out", "reindex no_such_index", "drop table if exists no_such_table",
         "drop view if exists v", "drop index if exists i", "drop trigger if exists t", "analyze", "analyze slice",
         "values (1, 'a'), (2, NULL)", "explain select 1", "explain query plan select * from slice where id = 1",
         "explain vacuum", "explain delete from flow", "explain query plan drop table if exists x",
         "include perfetto module slices.with_context", "INCLUDE PERFETTO MODULE no.such_module",
         "include perfetto module 'x'", "include perfetto", "create perfetto table t as select 1",
         "create perfetto view v as select 1",
         "select * from counter join counter_track on track_id = counter_track.id",
         "with x as (select 1) delete from flow", "with x as (select 1) insert into counter select * from counter",
         "release a", "rollback", "end", "pragma query_only", "select * from pragma_index_list('_slice')"]
WRITES = ["insert into flow values (100, 1, 2, 3, 4)", "delete from flow", "update slice set dur = 0",
          "drop table flow", "create table t(x)", "create temp table t(x)", "create view v as select 1",
          "attach database ':memory:' as x", "attach database '/tmp/fuzz-console.db' as x", "detach argsdb",
          "begin", "commit", "savepoint a", "vacuum", "analyze", "reindex", "alter table flow add column y",
          "create virtual table v using fts3(x)", "create trigger t after insert on flow begin select 1; end",
          "replace into flow values (1, 1, 1, 1, 1)", "vacuum into '/tmp/fuzz-console-vacuum.db'"]


def expr(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth > 3 or r < 0.35:
        return rng.choice(SCALARS)
    if r < 0.8:
        f = rng.choice(FUNCS)
        if f == "fts3_tokenizer":
            args = rng.choice([["'simple'"], ["'simple'", "x'4141414141414141'"], ["'porter'"]])
        else:
            args = [expr(rng, depth + 1) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        return f"{f}({', '.join(args)})"
    if r < 0.9:
        return f"({select(rng, depth + 1)})"
    return f"{expr(rng, depth + 1)} {rng.choice(['+', '||', '*', '/', '%', '<', '=', 'AND', 'LIKE', '->>'])} " \
           f"{expr(rng, depth + 1)}"


def source(rng: random.Random, depth: int) -> str:
    r = rng.random()
    if r < 0.55:
        return rng.choice(TABLES)
    if r < 0.85 or depth > 2:
        return rng.choice(VTABLES)
    return f"({select(rng, depth + 1)})"


def select(rng: random.Random, depth: int = 0) -> str:
    cols = ", ".join(expr(rng, depth + 1) for _ in range(rng.randint(1, 3)))
    sql = f"SELECT {cols}"
    if rng.random() < 0.8:
        sql += f" FROM {source(rng, depth)}"
        if rng.random() < 0.2:
            sql += f" JOIN {source(rng, depth)}"
    if rng.random() < 0.3:
        sql += f" WHERE {expr(rng, depth + 1)}"
    if rng.random() < 0.2:
        sql += " ORDER BY 1" + rng.choice(["", " DESC"])
    if rng.random() < 0.2:
        sql += f" LIMIT {rng.choice([0, 1, 10, 100000, -1])}"
    return sql


def cte(rng: random.Random) -> str:
    bound = rng.choice(["", " WHERE x < 10", " WHERE x < 3000", " WHERE x < 10000000"])  # "": endless
    name = rng.choice(["n", "c", "fts3tokenize", "dbstat", "json_each", "slice", "pragma_x"])
    body = rng.choice([f"SELECT x FROM {name}", f"SELECT count(*) FROM {name}", f"SELECT max(x), min(x) FROM {name}",
                       f"SELECT x, hex(zeroblob(1000)) FROM {name}", f"SELECT group_concat(x) FROM {name}"])
    return (f"WITH RECURSIVE {name}(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM {name}{bound}) {body}")


def statement(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.36:
        sql = select(rng)
    elif r < 0.48:
        sql = cte(rng)
    elif r < 0.56:
        sql = "PRAGMA " + rng.choice(PRAGMAS)
    elif r < 0.65:
        sql = rng.choice(WRITES)
    elif r < 0.78:
        sql = rng.choice(KINDS)
    elif r < 0.8:
        sql = rng.choice(LONG_CALLS)
    elif r < 0.82:
        sql = WIDE.format(cols=", ".join([rng.choice(["NULL", "x", "1.5"])] * rng.choice([1, 50, 300])))
    elif r < 0.86:
        sql = f"EXPLAIN {rng.choice(['', 'QUERY PLAN '])}{rng.choice([select(rng), rng.choice(WRITES), cte(rng)])}"
    elif r < 0.91:
        sql = f"{select(rng)}; {rng.choice(WRITES + KINDS + [select(rng)])}"
    else:  # broken text: a statement cut, spliced, or with stray tokens
        words = (select(rng) + " " + rng.choice(WRITES + KINDS)).split()
        rng.shuffle(words) if rng.random() < 0.5 else None
        sql = " ".join(words[:rng.randint(1, len(words))]) + rng.choice(["", ";", " --", " /*", "'", ")", "\x00"])
    return sql + rng.choice(["", "", ";", " ; ", "\n-- end", " /* note", "; /* */", " -- c", ";\n;"])


def one_engine(sql: str) -> bool:
    """Whether ``sql`` names something only one engine has (so each judges it on its own)."""
    words = set(re.findall(r"[a-z_][a-z0-9_]*", sql.lower()))
    return any(name in words for name in ONE_ENGINE)


def capped(outcome: str) -> bool:
    """Whether an outcome is a cap's (the deadline, or a value over the size cap), not the rules' judgement."""
    return "time limit" in outcome or "too big" in outcome


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="statements (each goes to both engines)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=0.3, help="each statement's deadline, seconds")
    args = ap.parse_args(argv)
    limits = QueryLimits(deadline_s=args.deadline, max_rows=2000, max_result_bytes=1 << 20, max_value_bytes=1 << 16)
    margin = args.deadline + 5.0  # generous: the machine is shared; a statement that ignored its deadline runs on
    sessions = {"sqlite": open_trace(TRACE, engine="sqlite"),
                "perfetto": tp_recorded.perfetto_session(TRACE, RECORDING)}
    counts = {"results": 0, "refused": 0, "stopped": 0, "cut": 0, "alike": 0, "differently": 0}
    failures = 0
    intact = "select (select count(*) from flow), (select count(*) from slice), (select count(*) from thread)"
    before = {e: s.query(intact).values.tolist() for e, s in sessions.items()}
    rng = random.Random(args.seed)
    if os.path.exists(VACUUM_COPY):
        os.unlink(VACUUM_COPY)
    for i in range(args.n):
        sql = statement(rng)
        outcomes = {}
        for engine, session in sessions.items():
            t0 = time.monotonic()
            try:
                r = session.console(sql, limits)
                counts["results"] += 1
                counts["cut"] += r.cut
                outcomes[engine] = "a result"
            except QueryError as e:
                counts["refused"] += 1
                counts["stopped"] += "time limit" in str(e)
                outcomes[engine] = str(e)
            except Exception:  # noqa: BLE001 - a fuzz failure: reported, the run goes on
                failures += 1
                outcomes[engine] = "crashed"
                print(f"FAIL {engine} #{i}: {sql!r}\n{traceback.format_exc()}", file=sys.stderr)
            took = time.monotonic() - t0
            if took > margin:
                failures += 1
                print(f"FAIL {engine} #{i}: took {took:.1f} s (deadline {args.deadline:g} s): {sql!r}",
                      file=sys.stderr)
            if session.query(intact).values.tolist() != before[engine]:
                failures += 1
                print(f"FAIL {engine} #{i}: the trace's tables changed after {sql!r}", file=sys.stderr)
                before[engine] = session.query(intact).values.tolist()
        if os.path.exists(VACUUM_COPY):
            failures += 1
            print(f"FAIL #{i}: {sql!r} wrote {VACUUM_COPY}", file=sys.stderr)
            os.unlink(VACUUM_COPY)
        if one_engine(sql) or any(capped(o) for o in outcomes.values()):
            continue
        if outcomes["sqlite"] == outcomes["perfetto"]:
            counts["alike"] += 1
        else:
            counts["differently"] += 1
            failures += 1
            print(f"FAIL #{i}: the engines judged {sql!r} differently:\n  mirror:   {outcomes['sqlite']}\n"
                  f"  perfetto: {outcomes['perfetto']}", file=sys.stderr)
    for session in sessions.values():
        session.close()
    print(f"statements {2 * args.n}: results {counts['results']}, refused {counts['refused']} "
          f"(stopped at the deadline {counts['stopped']}), cut {counts['cut']}, judged alike {counts['alike']}, "
          f"differently {counts['differently']}, failures {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
