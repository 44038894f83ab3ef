"""What a console query may do, on either engine: the read-only rules and the caps of ``QueryLimits``.

A statement passes the rules in three steps, the same on both engines (:func:`check_statement`):

1. **Its text** is split into SQLite's tokens (:func:`tokens`, SQLite's tokenizer rules: strings, quoted names,
   ``--`` and ``/* */`` comments, an unterminated ``/*`` running to the end): it must be one statement (only
   comments and semicolons after its first ``;``), hold no NUL character, and not be empty. Its ``body`` is its
   text from its first token to its last, so a trailing comment or semicolon can never swallow what is wrapped
   around it (the perfetto engine's row cap).
2. **Its kind** is its first keyword (for ``EXPLAIN [QUERY PLAN] …``, that of the statement explained; for
   ``WITH …``, the first keyword after its common table expressions): it must be ``SELECT``, ``VALUES`` or
   ``PRAGMA``; any other (``INSERT``, ``VACUUM``, ``REINDEX``, ``DROP TABLE``, ``CREATE PERFETTO``...) is refused by
   name before anything is compiled, so every engine refuses it with the same message whatever its schema holds.
3. **What it does** is what SQLite's own parser reports while compiling it: the statement is compiled as
   ``EXPLAIN <body>`` (an EXPLAIN statement only lists the compiled program: nothing of the statement runs, not even
   its constant expressions) under :class:`ReadOnlyRules`, an SQLite authorizer, which sees every table read, every
   function called, every PRAGMA and every write, attach or transaction the statement would do (``PRAGMA
   query_only = 0`` is a PRAGMA). It must have reported a SELECT or a read-only PRAGMA and nothing the authorizer
   refuses.

Neither check is enough alone. The kinds: a PRAGMA can write, and a SELECT can call any function. The authorizer:
SQLite reports nothing to it for ``VACUUM`` (``VACUUM INTO 'file'`` writes a file), for ``REINDEX`` of a database
without indexes, or for ``DROP … IF EXISTS`` of a name that does not exist there (it may exist on the other engine),
and what it reports for a write depends on the schema (``UPDATE slice``: a view on the mirror, a table on
trace_processor). The kind is read from the tokens above, not by a parser of its own: one word, or for ``WITH`` the
first word outside its parentheses that begins a statement.

The authorizer is an allow-list: a statement may select (recursively too), read the engine's tables,
``json_each``/``json_tree`` and the read-only ``pragma_*`` tables, call SQLite's core scalar, aggregate, window,
date/time, math and JSON functions and ``extract_arg``, and run read-only PRAGMAs. Everything else is refused with a
message that says what was refused and what is allowed.

The mirror compiles on its own connection, then runs the statement there under the same authorizer. trace_processor
runs its own SQLite in its own process, where no authorizer can be installed, so its console compiles the statement
here (:class:`StatementGate`) in an empty database holding trace_processor's own schema, read from the running
trace_processor (every table and view it has, those of the standard-library modules a query has included too), and
sends only a statement that passed. ``INCLUDE PERFETTO MODULE <name>`` (trace_processor's standard library) is
allowed on the perfetto engine; the mirror refuses it, and refuses a table trace_processor has and it lacks with a
message saying it needs trace_processor (:func:`tp_tables`: the names of a real v58.2 binary's tables and views).
"""
from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..errors import QueryError

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
""".split())  # noqa: SIM905 - a list to read, a line a family
# Virtual tables a query may read besides the trace's own tables: JSON walkers and the read-only PRAGMAs' tables.
# (dbstat, fts3tokenize, fts4aux, fts5vocab, sqlite_stmt and the rest are refused.)
_VIRTUAL_TABLES = frozenset({"json_each", "json_tree"} | {"pragma_" + p for p in _READ_PRAGMAS})
_READ_OK = _VIRTUAL_TABLES | set(SCHEMA_TABLES)

# The kinds of statement the console runs (first keyword), and the other statements of SQLite's grammar.
_READS = ("SELECT", "VALUES", "WITH", "PRAGMA")  # the kinds that may run (statement_kind), EXPLAIN'ed or not
_WRAPPABLE = ("SELECT", "VALUES", "WITH")  # the kinds that can stand as a subquery (the perfetto row cap)
ALLOWED_KINDS = "one SELECT, WITH, VALUES or EXPLAIN query, or a read-only PRAGMA such as table_info"
# Each value of a result costs this many bytes toward QueryLimits.max_result_bytes, besides its text or blob: what a
# row slot and a DataFrame cell take (8 bytes each), so a result of NULLs or numbers is capped as well as one of text.
CELL_BYTES = 16


@functools.lru_cache(maxsize=1)
def tp_tables() -> frozenset[str]:
    """The (lower-case) names of trace_processor v58.2's tables and views after loading a Kineto JSON trace, as a
    real binary listed them (``tp_tables_v58.2.txt``; tests/data/tp_tables/schema_v58.2.csv.gz has their columns)."""
    text = resources.files(__package__).joinpath("tp_tables_v58.2.txt").read_text(encoding="utf-8")
    return frozenset(n.strip().lower() for n in text.splitlines() if n.strip() and not n.startswith("#"))


# --- the statement's text --------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<space>[ \t\n\f\r]+)
  | (?P<comment>--[^\n]*(?:\n|\Z) | /\*(?:.|\n)*?(?:\*/|\Z))
  | (?P<string>'(?:[^']|'')*(?:'|\Z))
  | (?P<name>"(?:[^"]|"")*(?:"|\Z) | `(?:[^`]|``)*(?:`|\Z) | \[[^\]]*(?:\]|\Z))
  | (?P<blob>[xX]'[^']*(?:'|\Z))
  | (?P<word>[A-Za-z0-9_$\u0080-\U0010ffff]+)
  | (?P<semi>;)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)


def tokens(sql: str) -> list[tuple[str, str, int, int]]:
    """SQLite's tokens of ``sql`` as (kind, text, start, end), whitespace and comments left out. Kinds: ``string``,
    ``name`` (a quoted identifier), ``blob``, ``word`` (a keyword, bare identifier or number), ``semi`` and ``other``
    (one character of an operator). Follows SQLite's tokenizer where it matters here: ``--`` runs to the end of the
    line, ``/*`` to ``*/`` or the end of the text; an unterminated string or name runs to the end of the text (SQLite
    then reports it as an unrecognized token)."""
    out = []
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup
        if kind not in ("space", "comment"):
            out.append((kind, m.group(), m.start(), m.end()))
    return out


@dataclass(frozen=True)
class Statement:
    """One console statement that passed the rules: ``kind`` (its first keyword, upper-case), ``body`` (its text from
    its first token to its last: no trailing comment or semicolon) and ``columns`` (how many columns it returns, for
    the kinds that return rows, else 0)."""
    kind: str
    body: str
    columns: int = 0

    @property
    def wrappable(self) -> bool:
        """Whether the statement can stand as a subquery (``SELECT * FROM (body) LIMIT n``)."""
        return self.kind in _WRAPPABLE


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def split_statement(sql: Any) -> tuple[str, str, list]:
    """(kind, body, tokens) of the one statement ``sql`` holds; QueryError for text that is not one statement."""
    if not isinstance(sql, str):
        raise QueryError(f"query must be a string, got {type(sql).__name__}")
    if "\x00" in sql:
        raise QueryError("the statement holds a NUL character (\\x00), which SQL text may not contain")
    toks = tokens(sql)
    semi = next((i for i, t in enumerate(toks) if t[0] == "semi"), len(toks))
    rest = [t for t in toks[semi:] if t[0] != "semi"]
    if rest:
        raise QueryError(f"the console runs one statement at a time, and after the first ';' comes more: "
                         f"{sql[rest[0][2]:rest[0][2] + 40]!r} (run one statement at a time)")
    toks = toks[:semi]
    if not toks:
        raise QueryError(f"the statement is empty: the console runs {ALLOWED_KINDS}")
    return toks[0][1].upper(), sql[toks[0][2]:toks[-1][3]], toks


def include_module(kind: str, toks: list) -> str | None:
    """The module an ``INCLUDE PERFETTO MODULE <name>`` statement names (None for any other statement); QueryError
    for an INCLUDE statement that names none."""
    if kind != "INCLUDE":
        return None
    words = [t[1].upper() for t in toks[1:3]]
    name = "".join(t[1] for t in toks[3:])
    if words != ["PERFETTO", "MODULE"] or not _MODULE.match(name):
        raise QueryError(f"INCLUDE takes the form INCLUDE PERFETTO MODULE <name> with a module name such as "
                         f"slices.with_context, got {''.join(t[1] + ' ' for t in toks)[:80].strip()!r}")
    return name


_VERBS = ("SELECT", "VALUES", "INSERT", "REPLACE", "UPDATE", "DELETE")  # what can follow WITH's tables


def statement_kind(toks: list) -> str:
    """What a statement is, by its first keyword: ``SELECT``, ``VACUUM``, ``DROP TABLE``, ``CREATE PERFETTO``...
    (for CREATE and DROP with the next word); an ``EXPLAIN [QUERY PLAN]`` statement is the kind it explains, and a
    ``WITH`` statement the kind of the statement after its common table expressions (``WITH x AS (…) DELETE …``)."""
    words = [t[1].upper() if t[0] == "word" else t[1] for t in toks]
    if words[:1] == ["EXPLAIN"]:
        words = words[3:] if words[1:3] == ["QUERY", "PLAN"] else words[1:]
    if not words:
        return "EXPLAIN"
    if words[0] == "WITH":
        depth = 0
        for w in words[1:]:
            depth += (w == "(") - (w == ")")
            if depth == 0 and w in _VERBS:
                return w
        return "WITH"
    return " ".join(words[:2]) if words[0] in ("CREATE", "DROP") and len(words) > 1 else words[0]


# --- what it does ------------------------------------------------------------------------------------------------

class ReadOnlyRules:
    """The console's rules as an SQLite authorizer for ``conn`` (install it with ``conn.set_authorizer(rules)``).

    After a statement fails, ``denied`` says why the authorizer refused it (None if it did not); ``read`` says whether
    compiling it reported a SELECT or a read-only PRAGMA. ``reset()`` before each statement."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.own_tables = frozenset(r[0].lower() for schema in ("main", "temp") + tuple(
            r[1] for r in conn.execute("PRAGMA database_list") if r[1] not in ("main", "temp"))
            for r in conn.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type IN ('table', 'view')"))
        self.modules = frozenset(r[0].lower() for r in conn.execute("SELECT name FROM pragma_module_list"))
        self.denied: str | None = None
        self.read = False

    def reset(self) -> None:
        self.denied = None
        self.read = False

    def __call__(self, action: int, arg1: Any, arg2: Any, db: Any, source: Any) -> int:
        if action == sqlite3.SQLITE_READ:
            # The schema is fixed and writes are refused, so the only other things a query can name are CTEs,
            # subqueries and eponymous virtual tables: every module of this SQLite build, and a pragma_* table per
            # PRAGMA. Those are refused unless allowed (a CTE cannot be told from a table here, so none may take a
            # module's name).
            name = (arg1 or "").lower()
            if name in _READ_OK or not (name in self.modules or name.startswith("pragma_")):
                return sqlite3.SQLITE_OK
            self.denied = (f"reading {arg1!r} is not allowed: queries read the trace's tables, "
                           "json_each/json_tree and the read-only pragma_* tables")
            return sqlite3.SQLITE_DENY
        if action in _ALLOWED:
            self.read = True
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in _FUNCTIONS:
                return sqlite3.SQLITE_OK
            self.denied = (f"the SQL function {arg2}() is not allowed: queries may call SQLite's scalar, aggregate, "
                           "window, date/time, math and JSON functions and extract_arg()")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_PRAGMAS:
            self.read = True
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 in SCHEMA_TABLES:
            return sqlite3.SQLITE_OK  # SQLite's own schema reload; user writes still meet query_only
        what = _ACTION_NAMES.get(action, f"action {action}").replace("_", " ")
        # (REINDEX and ANALYZE report each index or table they would touch, which depends on the engine's schema)
        detail = f" {arg1}" if arg1 and action not in (sqlite3.SQLITE_REINDEX, sqlite3.SQLITE_ANALYZE) else ""
        self.denied = f"the trace is read-only: {what}{detail} is not allowed (the console runs {ALLOWED_KINDS})"
        return sqlite3.SQLITE_DENY


_NO_SUCH_TABLE = re.compile(r"no such table: (?:\w+\.)?(\S+)")


def query_error(e: sqlite3.Error | sqlite3.Warning, rules: ReadOnlyRules, limits: Any = None) -> QueryError:
    """The QueryError a user sees for an SQLite error of a statement run (or compiled) under ``rules``."""
    if isinstance(e, (sqlite3.Warning, sqlite3.ProgrammingError)) and "one statement" in str(e):
        return QueryError(f"{e} (run one statement at a time)")
    if rules.denied:
        return QueryError(rules.denied)
    if limits is not None and getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_TOOBIG:
        return QueryError(f"SQL error: {e} (a value may be at most {limits.max_value_bytes:,} bytes)")
    m = _NO_SUCH_TABLE.search(str(e))
    if m and m.group(1).lower() in tp_tables() and m.group(1).lower() not in rules.own_tables:
        return QueryError(f"SQL error: {e} ({m.group(1)} is a table of trace_processor's that the offline mirror "
                          "does not have: it needs the perfetto engine, a trace_processor binary)")
    return QueryError(f"SQL error: {e}")


def check_statement(conn: sqlite3.Connection, rules: ReadOnlyRules, sql: Any, *, include: bool = False
                    ) -> Statement:
    """The :class:`Statement` ``sql`` holds if it passes the console's rules (module docstring) compiled on ``conn``
    (whose authorizer is ``rules``); else QueryError with the reason and what is allowed. ``include``: the engine has
    trace_processor's standard library, so ``INCLUDE PERFETTO MODULE <name>`` passes (its body is the statement).

    ``conn`` must not cache statements (``cached_statements=0``): SQLite asks the authorizer only while compiling, and
    a statement taken from the cache is not compiled again."""
    kind, body, toks = split_statement(sql)
    module = include_module(kind, toks)
    if module is not None:
        if include:
            return Statement("INCLUDE", body)
        raise QueryError(f"INCLUDE PERFETTO MODULE {module} needs trace_processor (the perfetto engine): the offline "
                         "mirror has no PerfettoSQL standard library")
    does = statement_kind(toks)
    if does == "EXPLAIN":  # (an EXPLAIN with nothing after it: no statement to explain)
        raise QueryError("EXPLAIN needs the statement it explains: EXPLAIN SELECT … or EXPLAIN QUERY PLAN SELECT …")
    if does.split()[0] not in _READS:
        raise QueryError(f"the trace is read-only: {does} is not allowed (the console runs {ALLOWED_KINDS})")
    rules.reset()
    # (the program's operands hold the statement's constants: a text that is no UTF-8, CAST(X'FF' AS TEXT), is read
    # here with a stand-in for its bad bytes, the statement itself as SQLite runs it)
    factory, conn.text_factory = conn.text_factory, lambda b: b.decode("utf-8", "replace")
    try:
        program = conn.execute(body if kind == "EXPLAIN" else "EXPLAIN " + body).fetchall()
    except (sqlite3.Error, sqlite3.Warning) as e:
        raise query_error(e, rules) from None
    finally:
        conn.text_factory = factory
    if not rules.read:  # (a statement of a read kind that reported no read: none is known; refused all the same)
        raise QueryError(f"the trace is read-only: {does} is not allowed (the console runs {ALLOWED_KINDS})")
    columns = max((r[3] for r in program if r[1] == "ResultRow"), default=0) if kind in _WRAPPABLE else 0
    return Statement(kind, body, columns)


def stopped_error(limits: Any) -> QueryError:
    return QueryError(f"the query was stopped after its time limit of {limits.deadline_s:g} s")


def capped_rows(rows: Iterable[tuple], limits: Any) -> tuple[list[tuple], bool]:
    """(rows, cut): ``rows`` taken one at a time until ``limits.max_rows`` rows or ``limits.max_result_bytes`` bytes,
    each value counting :data:`CELL_BYTES` plus the length of its text or blob (``cut`` is then True; nothing past
    the cap is taken from the iterator). A value longer than ``limits.max_value_bytes`` raises QueryError (the mirror
    also sets SQLite's length limit, so there it is never built)."""
    out: list[tuple] = []
    size = 0
    text = (str, bytes)
    for row in rows:
        longest = 0
        size += CELL_BYTES * len(row)
        for v in row:  # (a plain loop: twice as fast as a comprehension per row, on a 75k-row result)
            if v.__class__ in text:
                n = len(v)
                size += n
                longest = max(longest, n)
        if longest > limits.max_value_bytes:
            raise QueryError(f"SQL error: string or blob too big (a value may be at most "
                             f"{limits.max_value_bytes:,} bytes)")
        if len(out) >= limits.max_rows or size > limits.max_result_bytes:
            return out, True
        out.append(row)
    return out, False


def unique_columns(columns: list[str]) -> list[str]:
    """Column names made unique as trace_processor makes them: a name seen before gets the first of ``:1``,
    ``:2``... that no column has (``a``, ``a:1``): a join of two tables' ``name`` columns, ``SELECT *`` of a join (a
    table shows one column per name)."""
    taken, seen, out = set(columns), set(), []
    for c in columns:
        name = c
        if name in seen:
            k = 1
            while f"{c}:{k}" in seen or f"{c}:{k}" in taken:
                k += 1
            name = f"{c}:{k}"
        seen.add(name)
        out.append(name)
    return out


def console_frame(columns: list[str], rows: list[tuple]):
    """A console query's rows as the DataFrame the console shows, its column names unique (:func:`unique_columns`):
    each column as pandas reads it from the rows, except a column of whole numbers with NULLs among them, which keeps
    its numbers exact (pandas' nullable ``Int64``): pandas would make it float64, which holds integers exactly only
    up to 2**53, and rounds epoch nanoseconds such as 1,695,835,572,943,625,000 by up to 128 ns; and a column that
    mixes blobs with other values, whose blobs show as SQL writes them (``X'00FF'``: no table holds bytes beside
    numbers). The same on both engines."""
    import pandas as pd
    columns = unique_columns(list(columns))
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    frame = pd.DataFrame.from_records(rows, columns=columns)
    for j in range(len(columns)):
        values = [r[j] for r in rows]
        if None in values and all(v is None or v.__class__ is int for v in values) and any(
                v is not None for v in values):
            frame.isetitem(j, pd.array(values, dtype="Int64"))
        elif any(isinstance(v, (bytes, bytearray, memoryview)) for v in values) and not all(
                isinstance(v, (bytes, bytearray, memoryview)) or v is None for v in values):
            frame.isetitem(j, pd.Series([f"X'{bytes(v).hex().upper()}'" if isinstance(
                v, (bytes, bytearray, memoryview)) else v for v in values], dtype=object))
    return frame


def row_cap(statement: Statement, limits: Any) -> int:
    """How many rows of ``statement`` can fit under ``limits`` (its row cap, and its size cap at
    :data:`CELL_BYTES` a value, text not counted): what an engine that cannot cap while fetching asks for."""
    return min(limits.max_rows, limits.max_result_bytes // (CELL_BYTES * max(1, statement.columns)))


# --- an engine that takes no authorizer --------------------------------------------------------------------------

SCHEMA_QUERY = ("SELECT m.name AS table_name, p.name AS column_name FROM sqlite_master m "
                "JOIN pragma_table_info(m.name) p "
                "WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite_%' ORDER BY m.name, p.cid")


def _ident(name: str) -> str:
    return '"' + str(name).replace('"', '""') + '"'


class StatementGate:
    """Judges console statements for an engine whose SQLite cannot take an authorizer (trace_processor's): each is
    compiled under :class:`ReadOnlyRules` (:func:`check_statement`), without running it, in an empty in-memory
    database holding that engine's schema. ``schema()`` gives the engine's (table, column) pairs
    (:data:`SCHEMA_QUERY`, asked of the engine itself); it is read on first use and again when a statement names a
    table the gate does not know (the engine may have gained it since: a standard-library module included), so the
    gate knows every table the engine has, and no other."""

    def __init__(self, schema: Callable[[], Iterable[tuple[str, str]]]) -> None:
        self._schema = schema
        self._conn: sqlite3.Connection | None = None
        self._rules: ReadOnlyRules | None = None

    def _load(self) -> None:
        columns: dict[str, list[str]] = {}
        for table, column in self._schema():
            columns.setdefault(str(table), []).append(str(column))
        conn = sqlite3.connect(":memory:", check_same_thread=False, cached_statements=0)  # (see check_statement)
        for table, cols in columns.items():
            conn.execute(f"CREATE TABLE {_ident(table)} ({', '.join(map(_ident, cols))})")
        conn.create_function("extract_arg", 2, lambda *a: None, deterministic=True)
        rules = ReadOnlyRules(conn)
        conn.execute("PRAGMA query_only = ON")
        conn.set_authorizer(rules)
        if self._conn is not None:
            self._conn.close()
        self._conn, self._rules = conn, rules

    def check(self, sql: Any) -> Statement:
        """The Statement ``sql`` holds if it passes the rules; QueryError (the mirror's message) otherwise."""
        fresh = self._conn is None
        if fresh:
            self._load()
        try:
            return check_statement(self._conn, self._rules, sql, include=True)
        except QueryError as e:
            if fresh or not _NO_SUCH_TABLE.search(str(e)):
                raise
        self._load()
        return check_statement(self._conn, self._rules, sql, include=True)
