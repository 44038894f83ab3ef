"""What a console query may do, on either engine: the read-only rules and the caps of ``QueryLimits``.

The rules are an SQLite authorizer (:class:`ReadOnlyRules`), an allow-list: a statement may select (recursively too),
read the trace's tables, ``json_each``/``json_tree`` and the read-only ``pragma_*`` tables, call SQLite's core
scalar, aggregate, window, date/time, math and JSON functions and ``extract_arg``, and run read-only PRAGMAs.
Everything else is refused with a message that says what was refused and what is allowed.

The mirror installs the authorizer on its own connection. trace_processor runs its own SQLite in its own process,
where no authorizer can be installed, so the perfetto engine's console first compiles the statement here
(:class:`StatementGate`), under the same authorizer, against an empty database with the mirror's schema (the tables
both engines offer, docs/SQL.md), and sends trace_processor only a statement that compiled.
"""
from __future__ import annotations

import sqlite3
from typing import Any, Iterable

from ..errors import QueryError
from . import _schema

_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE}
_READ_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
                 "foreign_key_list", "function_list", "table_list", "collation_list"}
_ACTION_NAMES = {getattr(sqlite3, "SQLITE_" + n): n for n in (
    "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE", "CREATE_TEMP_TRIGGER",
    "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE", "DROP_INDEX", "DROP_TABLE",
    "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER", "DROP_TEMP_VIEW", "DROP_TRIGGER",
    "DROP_VIEW", "INSERT", "PRAGMA", "READ", "SELECT", "TRANSACTION", "UPDATE", "ATTACH", "DETACH",
    "ALTER_TABLE", "REINDEX", "ANALYZE", "CREATE_VTABLE", "DROP_VTABLE", "FUNCTION", "SAVEPOINT",
    "RECURSIVE") if hasattr(sqlite3, "SQLITE_" + n)}
SCHEMA_TABLES = ("sqlite_master", "sqlite_temp_master", "sqlite_schema", "sqlite_temp_schema")
# SQL functions a query may call, by allow-list: SQLite's core scalar, aggregate, window, date/time, math and JSON
# functions, and the mirror's own. Everything else is refused (fts3_tokenizer() hands out a library pointer and, given
# one, makes fts3tokenize crash the process; load_extension() loads code).
_FUNCTIONS = frozenset("""
abs char coalesce concat concat_ws format printf glob hex ifnull iif instr length octet_length like likelihood
likely lower ltrim max min nullif quote random randomblob replace round rtrim sign soundex substr substring trim
typeof unhex unicode unlikely upper zeroblob sqlite_version
avg count group_concat string_agg sum total
row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value
date time datetime julianday unixepoch strftime timediff
acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10 log2 mod pi pow power
radians sin sinh sqrt tan tanh trunc
json json_array json_array_length json_error_position json_extract json_insert json_object json_patch json_pretty
json_remove json_replace json_set json_type json_valid json_quote json_group_array json_group_object -> ->>
jsonb jsonb_array jsonb_extract jsonb_insert jsonb_object jsonb_patch jsonb_remove jsonb_replace jsonb_set
jsonb_group_array jsonb_group_object
extract_arg _tp_key _tp_flat_key
""".split())
# Virtual tables a query may read besides the trace's own tables: JSON walkers and the read-only PRAGMAs' tables.
# (dbstat, fts3tokenize, fts4aux, fts5vocab, sqlite_stmt and the rest are refused.)
_VIRTUAL_TABLES = frozenset({"json_each", "json_tree"} | {"pragma_" + p for p in _READ_PRAGMAS})
_READ_OK = _VIRTUAL_TABLES | set(SCHEMA_TABLES)


class ReadOnlyRules:
    """The console's rules as an SQLite authorizer for ``conn`` (install it with ``conn.set_authorizer(rules)``).

    After a statement fails, ``denied`` says why the authorizer refused it (None if it did not); ``reset()`` before
    each statement."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.own_tables = frozenset(r[0].lower() for schema in ("main", "temp") + tuple(
            r[1] for r in conn.execute("PRAGMA database_list") if r[1] not in ("main", "temp"))
            for r in conn.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type IN ('table', 'view')"))
        self.modules = frozenset(r[0].lower() for r in conn.execute("SELECT name FROM pragma_module_list"))
        self.denied: str | None = None

    def reset(self) -> None:
        self.denied = None

    def __call__(self, action: int, arg1: Any, arg2: Any, db: Any, source: Any) -> int:
        if action == sqlite3.SQLITE_READ:
            # The schema is fixed and writes are refused, so the only other things a query can name are CTEs,
            # subqueries and eponymous virtual tables: every module of this SQLite build, and a pragma_* table per
            # PRAGMA. Those are refused unless allowed (a CTE cannot be told from a table here, so none may take a
            # module's name).
            name = (arg1 or "").lower()
            if name in _READ_OK or not (name in self.modules or name.startswith("pragma_")):
                return sqlite3.SQLITE_OK
            self.denied = (f"reading {arg1!r} is not allowed: queries read the trace's tables "
                           f"({', '.join(sorted(t for t in self.own_tables if not t.startswith('_')))}), "
                           "json_each/json_tree and the read-only pragma_* tables")
            return sqlite3.SQLITE_DENY
        if action in _ALLOWED:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in _FUNCTIONS:
                return sqlite3.SQLITE_OK
            self.denied = (f"the SQL function {arg2}() is not allowed: queries may call SQLite's scalar, aggregate, "
                           "window, date/time, math and JSON functions and extract_arg()")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 in SCHEMA_TABLES:
            return sqlite3.SQLITE_OK  # SQLite's own schema reload; user writes still meet query_only
        what = _ACTION_NAMES.get(action, f"action {action}").replace("_", " ")
        detail = f" {arg1}" if arg1 else ""
        self.denied = (f"the trace is read-only: {what}{detail} is not allowed "
                       "(only SELECT/WITH queries and read-only PRAGMAs such as table_info)")
        return sqlite3.SQLITE_DENY


def query_error(e: sqlite3.Error | sqlite3.Warning, rules: ReadOnlyRules, limits: Any = None) -> QueryError:
    """The QueryError a user sees for an SQLite error of a statement run (or compiled) under ``rules``."""
    if isinstance(e, (sqlite3.Warning, sqlite3.ProgrammingError)) and "one statement" in str(e):
        return QueryError(f"{e} (run one statement at a time)")
    if rules.denied:
        return QueryError(rules.denied)
    if limits is not None and getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_TOOBIG:
        return QueryError(f"SQL error: {e} (a value may be at most {limits.max_value_bytes:,} bytes)")
    return QueryError(f"SQL error: {e}")


def stopped_error(limits: Any) -> QueryError:
    return QueryError(f"the query was stopped after its time limit of {limits.deadline_s:g} s")


def capped_rows(rows: Iterable[tuple], limits: Any) -> tuple[list[tuple], bool]:
    """(rows, cut): ``rows`` taken one at a time until ``limits.max_rows`` rows or ``limits.max_result_bytes`` of text
    and blobs (``cut`` is then True; nothing past the cap is taken from the iterator). A value longer than
    ``limits.max_value_bytes`` raises QueryError (the mirror also sets SQLite's length limit, so there it is never
    built)."""
    out: list[tuple] = []
    size = 0
    for row in rows:
        lengths = [len(v) for v in row if isinstance(v, (str, bytes))]
        if lengths and max(lengths) > limits.max_value_bytes:
            raise QueryError(f"SQL error: string or blob too big (a value may be at most "
                             f"{limits.max_value_bytes:,} bytes)")
        size += sum(lengths)
        if len(out) >= limits.max_rows or size > limits.max_result_bytes:
            return out, True
        out.append(row)
    return out, False


class StatementGate:
    """Compiles a console statement under :class:`ReadOnlyRules` against an empty database with the mirror's schema,
    without running it: for an engine whose SQLite cannot take an authorizer (trace_processor's)."""

    def __init__(self) -> None:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.executescript(_schema.TABLES + _schema.VIEWS)
        conn.execute("ATTACH DATABASE ':memory:' AS argsdb")
        conn.execute("CREATE TABLE argsdb." + _schema.ARGS_TABLE.split("CREATE TABLE ", 1)[1])
        for name, n in (("_tp_key", 1), ("_tp_flat_key", 1), ("extract_arg", 2)):
            conn.create_function(name, n, lambda *a: None, deterministic=True)
        conn.executescript(_schema.ARGS_VIEW)
        self._rules = ReadOnlyRules(conn)
        conn.execute("PRAGMA query_only = ON")
        conn.set_authorizer(self._rules)
        self._conn = conn

    def check(self, sql: str) -> None:
        """Raise QueryError (the mirror's message) unless ``sql`` is one statement the rules allow."""
        if not isinstance(sql, str):
            raise QueryError(f"query must be a string, got {type(sql).__name__}")
        conn, compiled = self._conn, [False]

        def _stop() -> int:  # called at the first instruction the compiled statement runs: stop it there
            compiled[0] = True
            return 1
        self._rules.reset()
        conn.set_progress_handler(_stop, 1)
        try:
            conn.execute(sql).close()
        except (sqlite3.Error, sqlite3.Warning) as e:
            if not (compiled[0] and getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_INTERRUPT):
                raise query_error(e, self._rules) from None
        finally:
            conn.set_progress_handler(None, 0)
