"""The mirror's query connection: its SQLite database and args database opened for SQL, its functions
(``extract_arg``, and the two the ``args`` view uses), the console's rules installed, and one statement run on it.

The session's own queries run on one such connection in the session's process; console queries run on another in a
child process (``_console``), so that a statement can be stopped even inside one SQL function call. Both are opened
and run by this module.
"""
from __future__ import annotations

import functools
import re
import sqlite3
import time
from typing import Any

from ..errors import QueryError
from ..units import human_bytes
from . import _schema
from ._rules import (
    ReadOnlyRules,
    capped_rows,
    check_statement,
    query_error,
    stopped_error,
)

_QUOTED = re.compile(r'\."((?:[^"\\]|\\.)*)"')
_INDEX = re.compile(r"\[\d+\]")
_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY_PART = re.compile(r"^(.*?)((?:\[\d+\])*)$")
_BULK_AFTER = 256  # extract_arg calls for one key before all its values are read at once
_BULK_KEYS = 16    # at most this many keys kept that way per connection
_CACHED_CHARS = 1024
"""Keys up to this long are remembered (their conversions, extract_arg's count of them): a trace's arg keys are
short, and a user's query may pass any text, up to the value cap, whose copies must not pile up in the process."""
_COUNTED_KEYS = 4096  # extract_arg's counts kept for at most this many keys (then they start again)


def _short_cached(f):
    """``f`` cached (4,096 results) for arguments up to :data:`_CACHED_CHARS` long, computed afresh for longer ones."""
    cached = functools.lru_cache(maxsize=4096)(f)
    return functools.wraps(f)(lambda x: cached(x) if x is None or len(x) <= _CACHED_CHARS else f(x))


@_short_cached
def _tp_key(fullkey: str | None) -> str | None:
    """json_tree's '$."a b"[0].c' -> trace_processor's 'args.a b[0].c'."""
    if fullkey is None:
        return None
    return "args" + _QUOTED.sub(lambda m: "." + m.group(1), fullkey[1:])


@_short_cached
def _tp_flat_key(fullkey: str | None) -> str | None:
    key = _tp_key(fullkey)
    return None if key is None else _INDEX.sub("", key)


@_short_cached
def _json_path(key: str) -> str | None:
    """trace_processor's arg key ('args.External id', 'args.grid[0]') -> a JSON path."""
    if not key.startswith("args."):
        return None
    path = "$"
    for part in key[5:].split("."):
        name, idx = _KEY_PART.match(part).groups()
        if not name:
            return None
        path += "." + (name if _SIMPLE.match(name) else '"' + name.replace('"', '\\"') + '"') + idx
    return path


def require_utf8(sql: Any) -> None:
    """QueryError where a query's text cannot be written as UTF-8 (a lone surrogate, ``'\\ud800'``): neither SQLite
    nor the console's pipe takes it."""
    if isinstance(sql, str):
        try:
            sql.encode("utf-8")
        except UnicodeEncodeError as e:
            raise QueryError(f"the query's text cannot be encoded as UTF-8 ({e.reason} at position {e.start}): "
                             "write the character another way, e.g. char(0xD800)") from None


class QueryConnection:
    """The trace's SQLite database (``db_path``) with its args database (``args_path``) attached as ``argsdb``,
    the ``args`` view, ``extract_arg``, ``PRAGMA query_only`` and the console's authorizer (``rules``). Raises
    sqlite3.Error if the files cannot be opened.

    ``work_bytes`` (the console's own process only: the limit is the whole process's, and SQLite lets it be
    lowered, never raised): a statement's sorting, grouping and temporary tables stay in memory (``PRAGMA
    temp_store = MEMORY``: in temporary files nothing caps them but the disk), and all of SQLite's memory in the
    process is capped at that many bytes (``PRAGMA hard_heap_limit``, QueryLimits' ``max_work_bytes``): a statement
    past it fails, and :meth:`rows` says why."""

    def __init__(self, db_path: str, args_path: str, work_bytes: int | None = None) -> None:
        self.arg_calls: dict[str, int] = {}
        self.arg_tables: dict[str, dict] = {}
        self.work_bytes: int | None = None
        # No statement cache: the rules see a statement only while SQLite compiles it (_rules.check_statement).
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, check_same_thread=False, cached_statements=0)
        try:
            if work_bytes is not None:  # (first: setting temp_store drops the temporary views made below)
                conn.execute("PRAGMA temp_store = MEMORY")
                conn.execute(f"PRAGMA hard_heap_limit = {int(work_bytes)}")
                self.work_bytes = int(work_bytes)
            conn.execute("ATTACH DATABASE ? AS argsdb", (f"file:{args_path}?mode=ro",))
            conn.create_function("_tp_key", 1, _tp_key, deterministic=True)
            conn.create_function("_tp_flat_key", 1, _tp_flat_key, deterministic=True)
            conn.create_function("extract_arg", 2, self._extract_arg, deterministic=True)
            conn.executescript(_schema.ARGS_VIEW)
            # A second, read-only connection serves extract_arg (a UDF cannot query its own connection).
            self._aux = sqlite3.connect(f"file:{args_path}?mode=ro", uri=True, check_same_thread=False)
            self.rules = ReadOnlyRules(conn)
            conn.execute("PRAGMA query_only = ON")
            conn.set_authorizer(self.rules)
        except BaseException:
            conn.close()
            raise
        self.conn = conn

    def _extract_arg(self, arg_set_id: Any, key: Any) -> Any:
        if arg_set_id is None or type(key) is not str:
            return None
        table = self.arg_tables.get(key)
        if table is not None and type(arg_set_id) is int:
            return table.get(arg_set_id)
        path = _json_path(key)
        if path is None:
            return None
        if len(key) > _CACHED_CHARS:
            n = 0  # (no trace's key: not counted, never read in bulk)
        else:
            if len(self.arg_calls) >= _COUNTED_KEYS and key not in self.arg_calls:
                self.arg_calls.clear()
            n = self.arg_calls[key] = self.arg_calls.get(key, 0) + 1
        if n >= _BULK_AFTER and type(arg_set_id) is int and key not in self.arg_tables \
                and len(self.arg_tables) < _BULK_KEYS:
            # A query asks this key of many rows (e.g. args.correlation of every launch): read it for all
            # arg sets in one pass in SQLite, then answer from a dict (~0.1 µs instead of ~5 µs a call).
            self.arg_tables[key] = table = self._bulk_arg(key, path)
            return table.get(arg_set_id)
        row = self._aux.execute(
            "SELECT json_extract(CAST(raw AS TEXT), ?), json_type(CAST(raw AS TEXT), ?) "
            "FROM _args_raw WHERE arg_set_id = ?", (path, path, arg_set_id)).fetchone()
        if row is None or row[1] in ("object", "array"):
            return None
        return row[0]

    def _bulk_arg(self, key: str, path: str) -> dict:
        """{arg_set_id: value} of ``key`` for every arg set that has it as a scalar (same rules as one call)."""
        sql = ("SELECT arg_set_id, json_extract(CAST(raw AS TEXT), ?1) FROM _args_raw "
               "WHERE json_type(CAST(raw AS TEXT), ?1) NOT IN ('object', 'array')")
        first = key[5:].split(".")[0].split("[")[0]
        params: tuple = (path,)
        if _SIMPLE.match(first):
            # Only arg sets whose text holds the key's name can hold it (one written with \u escapes has a backslash).
            sql += " AND (instr(raw, ?2) OR instr(raw, X'5C'))"
            params = (path, ('"' + first + '"').encode())
        return {a: v for a, v in self._aux.execute(sql, params) if v is not None}

    def rows(self, sql: Any, limits: Any = None) -> tuple[list[str], list[tuple], bool]:
        """(columns, rows, cut): the rows of one statement that passes the console's rules (``_rules``). With
        ``limits`` (a QueryLimits) the statement is interrupted at its deadline (between two of SQLite's steps), no
        value may exceed ``max_value_bytes`` (SQLite's length limit, so none is built), and fetching stops at
        ``max_rows`` rows or ``max_result_bytes`` (``cut`` is then True; ``_rules.capped_rows``)."""
        conn = self.conn
        require_utf8(sql)
        statement = check_statement(conn, self.rules, sql)
        self.rules.reset()
        timed_out = [False]
        old_length = None
        if limits is not None:
            deadline = time.monotonic() + limits.deadline_s

            def _progress() -> int:
                if time.monotonic() > deadline:
                    timed_out[0] = True
                    return 1  # SQLite interrupts the statement
                return 0
            conn.set_progress_handler(_progress, 20_000)
            old_length = conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
        try:
            cur = conn.execute(statement.body)
            cols = [d[0] for d in cur.description] if cur.description else []
            if limits is None:
                rows, cut = cur.fetchall(), False
            else:
                rows, cut = capped_rows(cur, limits)  # SQLite steps one row at a time: nothing past the cap
                cur.close()
        except (sqlite3.Error, sqlite3.Warning) as e:
            if timed_out[0]:
                raise stopped_error(limits) from None
            raise query_error(e, self.rules, limits) from None
        except OverflowError as e:
            raise QueryError(f"SQL error: {e}") from None
        except MemoryError:  # (SQLite's SQLITE_NOMEM: past the cap of ``work_bytes``)
            cap = self.work_bytes
            raise QueryError("the query needed more memory than the console gives a statement"
                             + (f" ({human_bytes(cap)} for SQLite's sorting, grouping and temporary tables)"
                                if cap else "")
                             + ": narrow it (a WHERE, fewer rows joined, a LIMIT inside a subquery)") from None
        finally:
            if limits is not None:
                conn.set_progress_handler(None, 0)
                conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, old_length)
        return cols, rows, cut

    def close(self) -> None:
        for conn in (self.conn, self._aux):
            try:
                conn.close()
            except sqlite3.Error:
                pass

