#!/usr/bin/env python3
"""Fuzz the SQL console: generated statements (functions allowed and refused, CTEs bounded and endless, pragmas,
virtual tables, writes, several statements, broken syntax) through ``TraceSession.console`` on the mirror and on the
perfetto engine (driving a replay of trace_processor's recorded tables, tests/tp_recorded.py, which runs them in a
plain SQLite with no authorizer: whatever the engine's gate lets through really runs).

Every statement must end within its deadline (plus a margin) with a result or a QueryError; any other exception, an
overrun, or the process dying (a crash of SQLite) fails. Seeded, so a failure can be replayed with --seed.
Ends with one line: ``statements N: results R, refused Q (stopped at the deadline S), cut C``.

Usage: python scripts/fuzz_console.py [-n 2000] [--seed 1] [--deadline 0.3]
"""
from __future__ import annotations

import argparse
import os
import random
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

TABLES = ["slice", "flow", "thread", "process", "thread_track", "track", "args", "process_track", "sqlite_master",
          "_slice", "_track", "argsdb._args_raw", "no_such_table"]
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
WRITES = ["insert into flow values (100, 1, 2, 3, 4)", "delete from flow", "update slice set dur = 0",
          "drop table flow", "create table t(x)", "create temp table t(x)", "create view v as select 1",
          "attach database ':memory:' as x", "attach database '/tmp/fuzz-console.db' as x", "detach argsdb",
          "begin", "commit", "savepoint a", "vacuum", "analyze", "reindex", "alter table flow add column y",
          "create virtual table v using fts3(x)", "create trigger t after insert on flow begin select 1; end",
          "replace into flow values (1, 1, 1, 1, 1)", "vacuum into '/tmp/fuzz-console.db'"]


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
    if r < 0.45:
        sql = select(rng)
    elif r < 0.6:
        sql = cte(rng)
    elif r < 0.72:
        sql = "PRAGMA " + rng.choice(PRAGMAS)
    elif r < 0.84:
        sql = rng.choice(WRITES)
    elif r < 0.9:
        sql = f"{select(rng)}; {rng.choice(WRITES + [select(rng)])}"
    else:  # broken text: a statement cut, spliced, or with stray tokens
        words = (select(rng) + " " + rng.choice(WRITES)).split()
        rng.shuffle(words) if rng.random() < 0.5 else None
        sql = " ".join(words[:rng.randint(1, len(words))]) + rng.choice(["", ";", " --", " /*", "'", ")", "\x00"])
    return sql + rng.choice(["", "", ";", " ; ", "\n-- end"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="statements per engine")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=0.3, help="each statement's deadline, seconds")
    args = ap.parse_args(argv)
    limits = QueryLimits(deadline_s=args.deadline, max_rows=2000, max_result_bytes=1 << 20, max_value_bytes=1 << 16)
    margin = args.deadline + 5.0  # generous: the machine is shared; a statement that ignored its deadline runs on
    sessions = {"sqlite": open_trace(TRACE, engine="sqlite"),
                "perfetto": tp_recorded.perfetto_session(TRACE, RECORDING)}
    counts = {"results": 0, "refused": 0, "stopped": 0, "cut": 0}
    failures = 0
    for engine, session in sessions.items():
        rng = random.Random(f"{args.seed}-{engine}")
        intact = "select (select count(*) from flow), (select count(*) from slice), (select count(*) from thread)"
        before = session.query(intact).values.tolist()
        for i in range(args.n):
            sql = statement(rng)
            t0 = time.monotonic()
            try:
                r = session.console(sql, limits)
                counts["results"] += 1
                counts["cut"] += r.cut
            except QueryError as e:
                counts["refused"] += 1
                counts["stopped"] += "time limit" in str(e)
            except Exception:  # noqa: BLE001 - a fuzz failure: reported, the run goes on
                failures += 1
                print(f"FAIL {engine} #{i}: {sql!r}\n{traceback.format_exc()}", file=sys.stderr)
            took = time.monotonic() - t0
            if took > margin:
                failures += 1
                print(f"FAIL {engine} #{i}: took {took:.1f} s (deadline {args.deadline:g} s): {sql!r}",
                      file=sys.stderr)
            if session.query(intact).values.tolist() != before:
                failures += 1
                print(f"FAIL {engine} #{i}: the trace's tables changed after {sql!r}", file=sys.stderr)
                before = session.query(intact).values.tolist()
        session.close()
    print(f"statements {2 * args.n}: results {counts['results']}, refused {counts['refused']} "
          f"(stopped at the deadline {counts['stopped']}), cut {counts['cut']}, failures {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
