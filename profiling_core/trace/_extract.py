"""The typed tables the analyses read, extracted from trace_processor's tables with a few plain queries.

The analyses never send SQL: they read a :class:`~profiling_core.trace._tables.TraceTables` (numpy columns of
``slice``, ``flow``, ``thread``, ``process``, ``thread_track``, and an :class:`ArgsReader` for the few arguments they
need). The mirror builds those columns itself while it loads a trace; every other engine gets them from the
queries in :data:`EXTRACTION_QUERIES` and :func:`args_query`, which use only trace_processor's own tables and
columns. So the perfetto engine (a real ``trace_processor_shell``) and any SQLite copy of trace_processor's tables
(the tests replay the tables a real trace_processor printed, ``tests/data/tp_tables``) feed the analyses through this
one function, :func:`tables_from_sql`. docs/SQL.md lists the queries.

The results are handed over as columns (``columns(sql)`` gives ``{column: list of values}``, None for NULL), not as
DataFrames: perfetto's ``QueryResultIterator`` already holds one Python object per cell, and a DataFrame of them
(``as_pandas_dataframe``) costs as much again (pandas infers a string dtype for every text column, which the tables
then take apart into codes), so the perfetto engine reads the iterator's cells directly
(``PerfettoBackend.query_columns``).
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from ._tables import TextColumn, TraceTables

__all__ = ["EXTRACTION_QUERIES", "args_query", "tables_from_sql", "SqlArgs", "ColumnsFn"]

EXTRACTION_QUERIES = {
    "slice": "SELECT id, ts, dur, track_id, category, name, depth, parent_id, arg_set_id FROM slice ORDER BY id",
    "flow": "SELECT slice_out, slice_in FROM flow ORDER BY id",
    "thread": "SELECT utid, tid, name, upid, is_main_thread FROM thread ORDER BY utid",
    "process": "SELECT upid, pid, name FROM process ORDER BY upid",
    "thread_track": "SELECT id, utid FROM thread_track ORDER BY id",
}
"""One query per table the analyses read; the columns are those of :class:`TraceTables`."""

_ARG_NAME = re.compile(r"^[A-Za-z0-9_ ]+$")
_INDEXES = re.compile(r"\[(\d+)\]")


def args_query(name: str) -> str:
    """The rows of trace_processor's ``args`` table that hold the top-level argument ``name`` of any arg set (the
    value itself, or the elements of an array, keyed ``args.<name>[i][j]...``)."""
    if not _ARG_NAME.match(name):
        raise ValueError(f"argument names are letters, digits, '_' and spaces, got {name!r}")
    return ("SELECT arg_set_id, key, int_value, string_value, real_value, value_type FROM args "
            f"WHERE flat_key = 'args.{name}' ORDER BY arg_set_id")


ColumnsFn = Callable[[str], dict]  # SQL -> {column: list of its values, None for NULL}, in the query's column order


def _ints(col: list, null: int = -1) -> np.ndarray:
    """A column of integers (None/NaN for NULL) as int64, ``null`` where NULL."""
    if len(col) == 0:
        return np.zeros(0, np.int64)
    try:
        return np.array(col, dtype=np.int64)
    except (TypeError, ValueError):  # NULLs (None, or NaN where a float crept in)
        return np.array([null if v is None or v != v else v for v in col], dtype=np.int64)  # noqa: PLR0124 - NaN


def _texts(col: list) -> list:
    """A text column as str or None (NULL, NaN)."""
    return [v if isinstance(v, str) else None for v in col]


def _opt_int(v):
    return None if v is None or v != v else int(v)


class SqlArgs:
    """:class:`ArgsReader` over trace_processor's ``args`` table: one query per argument name (cached), whose rows are
    put back together into each arg set's value (an array from its elements' ``[i][j]`` keys)."""

    def __init__(self, columns: ColumnsFn) -> None:
        self._columns = columns
        self._cache: dict[str, dict] = {}

    def get(self, name: str, arg_set_ids) -> dict:
        values = self._cache.get(name)
        if values is None:
            values = self._cache[name] = self._read(name)
        return {a: values[a] for a in map(int, arg_set_ids) if a in values}

    def _read(self, name: str) -> dict:
        c = self._columns(args_query(name))
        out: dict = {}
        cut = len(f"args.{name}")
        paths: dict = {}  # a key's part after the name ("[0][1]") -> its index path, None if not an array element
        for a, key, iv, sv, rv, vt in zip(c["arg_set_id"], c["key"], c["int_value"], c["string_value"],
                                          c["real_value"], c["value_type"]):
            a = int(a)
            value = _scalar(vt, iv, sv, rv)
            rest = key[cut:]
            if not rest:
                out[a] = value
                continue
            path = paths.get(rest, ())
            if path == ():
                found = [int(i) for i in _INDEXES.findall(rest)]
                path = paths[rest] = found if "".join(f"[{i}]" for i in found) == rest else None
            if path is None:
                continue  # not an element of an array (flat_key matched through something else)
            root = out.get(a)
            if not isinstance(root, list):
                root = out[a] = []
            _put(root, path, value)
        return out


def _scalar(value_type, iv, sv, rv):
    if value_type in ("int", "bool", "uint", "pointer"):
        return _opt_int(iv)
    if value_type == "real":
        return None if rv is None or (isinstance(rv, float) and rv != rv) else float(rv)
    if value_type == "string":
        return sv if isinstance(sv, str) else None
    return None


def _put(root: list, path: list[int], value) -> None:
    """Set ``root[i][j]... = value``, growing the lists (positions not given are empty lists: trace_processor has no
    row for an empty array)."""
    node = root
    for depth, i in enumerate(path):
        while len(node) <= i:
            node.append([])
        if depth == len(path) - 1:
            node[i] = value
        else:
            if not isinstance(node[i], list):
                node[i] = []
            node = node[i]


def tables_from_sql(columns: ColumnsFn) -> TraceTables:
    """The :class:`TraceTables` of a trace held by an engine that speaks trace_processor's SQL (``columns(sql)`` returns
    ``{column: list of values}``), from :data:`EXTRACTION_QUERIES`."""
    q = {name: columns(sql) for name, sql in EXTRACTION_QUERIES.items()}
    s = q["slice"]
    ids = _ints(s["id"])
    n = len(ids)
    if n and not np.array_equal(ids, np.arange(n)):
        raise ValueError("slice ids are not 0..n-1 in id order; the analyses index slices by id")
    rows = np.arange(n)
    tt = q["thread_track"]
    track_ids = _ints(s["track_id"])
    tt_ids, tt_utid = _ints(tt["id"]), _ints(tt["utid"])
    size = int(max(track_ids.max() if n else -1, tt_ids.max() if len(tt_ids) else -1)) + 1
    track_utid = np.full(size, -1, np.int64)
    track_utid[tt_ids] = tt_utid
    th, pr = q["thread"], q["process"]
    threads = [(int(u), _opt_int(tid), nm, _opt_int(upid), _opt_int(main) or 0)
               for u, tid, nm, upid, main in zip(th["utid"], th["tid"], _texts(th["name"]), th["upid"],
                                                 th["is_main_thread"])]
    processes = [(int(u), _opt_int(pid), nm) for u, pid, nm in zip(pr["upid"], pr["pid"], _texts(pr["name"]))]
    f = q["flow"]
    tables = TraceTables(
        ts=_ints(s["ts"]), dur=_ints(s["dur"]), track_id=track_ids, depth=_ints(s["depth"]),
        parent_id=_ints(s["parent_id"]), arg_set_id=_ints(s["arg_set_id"]),
        name=TextColumn.of(_texts(s["name"]), rows), category=TextColumn.of(_texts(s["category"]), rows),
        track_utid=track_utid, flow_out=_ints(f["slice_out"]), flow_in=_ints(f["slice_in"]),
        threads=threads, processes=processes, args=SqlArgs(columns))
    tables.freeze()
    return tables

