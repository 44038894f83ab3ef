"""The typed tables the analyses read, extracted from trace_processor's tables with a few plain queries.

The analyses never send SQL: they read a :class:`~profiling_core.trace._tables.TraceTables` (numpy columns of
``slice``, ``flow``, ``thread``, ``process``, ``thread_track``, and an :class:`ArgsReader` for the few arguments they
need). The mirror builds those columns itself while it loads a trace; every other engine gets them from the
queries in :data:`EXTRACTION_QUERIES` and :func:`args_query` (for the arg sets an analysis asks for), which use only
trace_processor's own tables and columns. So the perfetto engine (a real ``trace_processor_shell``) and any SQLite copy of trace_processor's tables
(the tests replay the tables a real trace_processor printed, ``tests/data/tp_tables``) feed the analyses through this
one function, :func:`tables_from_sql`. docs/SQL.md lists the queries.

The results are handed over as columns (``columns(sql)`` gives ``{column: its values}``, a list or an object array,
None for NULL), not as DataFrames: perfetto's ``QueryResultIterator`` already holds one Python object per cell, and a
DataFrame of them (``as_pandas_dataframe``) costs as much again (pandas infers a string dtype for every text column,
which the tables then take apart into codes), so the perfetto engine hands over views of the iterator's own object
array (``PerfettoBackend.query_columns``), which numpy converts to int64 in one call per column.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from ._tables import TextColumn, TraceTables, first_seen_codes

__all__ = ["EXTRACTION_QUERIES", "args_query", "tables_from_sql", "SqlArgs", "ColumnsFn"]

EXTRACTION_QUERIES = {
    "slice_ids": "SELECT count(*) AS n, min(id) AS lo, max(id) AS hi FROM slice",
    "slice": "SELECT ts, dur, track_id, category, name, depth, parent_id, arg_set_id FROM slice ORDER BY id",
    "flow": "SELECT slice_out, slice_in FROM flow ORDER BY id",
    "thread": "SELECT utid, tid, name, upid, is_main_thread FROM thread ORDER BY utid",
    "process": "SELECT upid, pid, name FROM process ORDER BY upid",
    "thread_track": "SELECT id, utid FROM thread_track ORDER BY id",
}
"""One query per table the analyses read; the columns are those of :class:`TraceTables`. The slice ids are not
fetched, only checked to be 0..n-1 (``slice_ids``: ids are unique, so n of them from 0 to n - 1 are those), as the
analyses index slices by id."""

_ARG_NAME = re.compile(r"^[A-Za-z0-9_ ]+$")
_INDEXES = re.compile(r"\[(\d+)\]")
ARGS_PER_QUERY = 10_000
"""At most this many arg set ids in one args query's ``IN`` list (a statement of ~70 kB at most)."""


def args_query(name: str, arg_set_ids) -> str:
    """The rows of trace_processor's ``args`` table that hold the top-level argument ``name`` of the arg sets
    ``arg_set_ids`` (the value itself, or the elements of an array, keyed ``args.<name>[i][j]...``): each row's arg set,
    its key after ``args.<name>`` (``""``, or ``[i][j]...``), its value, the column its ``value_type`` names
    (NULL for a type that holds none), and that ``value_type`` (a boolean's value is its 0/1 ``int_value``)."""
    if not _ARG_NAME.match(name):
        raise ValueError(f"argument names are letters, digits, '_' and spaces, got {name!r}")
    ids = ",".join(map(str, map(int, arg_set_ids)))
    return (f"SELECT arg_set_id, substr(key, {len('args.' + name) + 1}) AS rest, "
            "CASE WHEN value_type IN ('int', 'bool', 'uint', 'pointer') THEN int_value "
            "WHEN value_type = 'real' THEN real_value WHEN value_type = 'string' THEN string_value END AS value, "
            f"value_type FROM args WHERE flat_key = 'args.{name}' AND arg_set_id IN ({ids}) ORDER BY arg_set_id")


ColumnsFn = Callable[[str], dict]  # SQL -> {column: its values (a list or an object array), None for NULL}, in order


def _ints(col, null: int = -1) -> np.ndarray:
    """A column of integers (a list or an object array; None/NaN for NULL) as int64, ``null`` where NULL."""
    if len(col) == 0:
        return np.zeros(0, np.int64)
    cells = col if isinstance(col, np.ndarray) else np.array(col, dtype=object)
    try:
        return cells.astype(np.int64)
    except (TypeError, ValueError):  # NULLs
        pass
    try:
        known = cells != None  # noqa: E711 - elementwise, on an object array
        out = np.full(len(cells), null, np.int64)
        out[known] = cells[known].astype(np.int64)
        return out
    except (TypeError, ValueError):  # NaN where a float crept in
        return np.array([null if v is None or v != v else v for v in col], dtype=np.int64)  # noqa: PLR0124 - NaN


def _text(v):
    """A text cell as str or None (NULL, NaN)."""
    return v if isinstance(v, str) else None


def _opt_int(v):
    return None if v is None or v != v else int(v)


class SqlArgs:
    """:class:`ArgsReader` over trace_processor's ``args`` table: the rows of the arg sets asked for (each arg set's
    rows fetched once per argument name, by :func:`args_query`), put back together into each arg set's value (an array
    from its elements' ``[i][j]`` keys)."""

    def __init__(self, columns: ColumnsFn) -> None:
        self._columns = columns
        self._values: dict[str, dict] = {}  # name -> {arg_set_id: value} of the arg sets fetched that have it
        self._fetched: dict[str, set] = {}  # name -> the arg set ids fetched

    def get(self, name: str, arg_set_ids) -> dict:
        ids = _id_list(arg_set_ids)
        values = self._values.setdefault(name, {})
        fetched = self._fetched.setdefault(name, set())
        wanted = np.unique(np.array(ids, dtype=np.int64))
        wanted = wanted[wanted >= 0]
        if fetched:
            wanted = wanted[~np.isin(wanted, np.fromiter(fetched, np.int64, len(fetched)))]
        missing = wanted.tolist()
        for k in range(0, len(missing), ARGS_PER_QUERY):
            self._read(name, missing[k:k + ARGS_PER_QUERY], values)
        fetched.update(missing)
        return {a: values[a] for a in ids if a in values}

    def get_many(self, names, arg_set_ids) -> dict[str, dict]:
        ids = _id_list(arg_set_ids)  # (trace_processor's args table has a row per key: a query per name)
        return {n: self.get(n, ids) for n in dict.fromkeys(names)}

    def _read(self, name: str, arg_set_ids: list, out: dict) -> None:
        c = self._columns(args_query(name, arg_set_ids))
        if not len(c["arg_set_id"]):
            return
        ids = _ints(c["arg_set_id"])
        value = np.array(c["value"], dtype=object)  # (a copy: the NaN and bool fixes below write into it)
        vt = np.asarray(c["value_type"], dtype=object)
        real = np.flatnonzero(vt == "real")
        if len(real):  # (NaN: no value)
            nan = np.array([v is not None and v != v for v in value[real].tolist()], dtype=bool)
            value[real[nan]] = None
        flag = np.flatnonzero((vt == "bool") & (value != None))  # noqa: E711 - elementwise, on an object array
        if len(flag):
            value[flag] = [bool(v) for v in value[flag].tolist()]
        # Each row's path in its arg set: () for the value itself, (i, j, ...) for an array's element, None for a key
        # flat_key matched through something else; one parse per distinct key.
        at, keys = first_seen_codes(c["rest"])
        _assemble(ids, value, at, [_path(k) if isinstance(k, str) else None for k in keys], out)


def _assemble(ids: np.ndarray, value: np.ndarray, at: np.ndarray, paths: list, out: dict) -> None:
    """Put each arg set's rows (``ids``, ``value``, ``paths[at]``, in the query's order) back together into
    ``out[arg set]``: its value, or the array its elements' paths make (:func:`_put`, row by row in the query's
    order, is the rule). An arg set whose rows are all of one depth up to two and hold each position once, with no
    gap (the elements of each array 0, 1, 2, ...), is put together instead by sorting its rows by their paths and
    splitting them at its arrays' bounds, which gives the same lists; any other (an empty array inside another,
    which has no row, a position given twice, paths of several depths) goes row by row."""
    n = len(ids)
    if not n:
        return
    depth = np.array([-1 if x is None else len(x) for x in paths], dtype=np.int64)[at]
    i0, i1 = (np.array([x[d] if x is not None and len(x) > d else -1 for x in paths], dtype=np.int64)[at]
              for d in range(2))
    order = np.lexsort((i1, i0, ids))
    ids_s, depth_s, i0_s, i1_s = ids[order], depth[order], i0[order], i1[order]
    new_set = np.r_[True, ids_s[1:] != ids_s[:-1]]
    starts = np.flatnonzero(new_set)
    run = np.cumsum(new_set) - 1  # (each sorted row's arg set)
    new_inner = new_set | np.r_[True, i0_s[1:] != i0_s[:-1]]
    inner_start = np.flatnonzero(new_inner)
    inner = np.cumsum(new_inner) - 1
    pos = np.arange(n) - inner_start[inner]  # (position along its innermost array)
    nth = inner - (np.cumsum(new_inner) - 1)[starts][run]  # (which of its arg set's arrays)
    sizes = np.diff(np.r_[starts, n])
    good = (depth_s == depth_s[starts][run]) & (depth_s >= 0) & (depth_s <= 2)
    along = np.arange(n) - starts[run]  # (position along its arg set's rows)
    good &= np.where(depth_s == 0, sizes[run] == 1, np.where(depth_s == 1, i0_s == along, i1_s == pos))
    gaps = np.zeros(len(starts), dtype=bool)  # (arrays of arrays with an empty one before the last: no row)
    gaps[run[(depth_s == 2) & (i0_s != nth)]] = True
    bad = np.zeros(len(starts), dtype=bool)
    bad[run[~good]] = True
    vals = value[order].tolist()
    ends = np.r_[starts[1:], n]
    whole = np.flatnonzero(~bad)
    for d in (0, 1, 2):
        g = whole[depth_s[starts][whole] == d]
        if not len(g):
            continue
        keys = ids_s[starts[g]].tolist()
        if d == 0:
            out.update(zip(keys, [vals[i] for i in starts[g].tolist()]))
        elif d == 1:
            out.update(zip(keys, [vals[i:j] for i, j in zip(starts[g].tolist(), ends[g].tolist())]))
        else:  # (the innermost arrays, then each arg set's run of them, an empty one where a position has none)
            bounds = np.r_[inner_start, n].tolist()
            arrays = [vals[i:j] for i, j in zip(bounds[:-1], bounds[1:])]
            first = np.r_[inner[starts], len(inner_start)]
            out.update(zip(keys, [arrays[i:j] for i, j in zip(first[g].tolist(), first[g + 1].tolist())]))
            at_pos = i0_s[inner_start].tolist()
            for k in g[gaps[g]].tolist():
                filled = [[] for _ in range(at_pos[first[k + 1] - 1] + 1)]
                for m in range(first[k], first[k + 1]):
                    filled[at_pos[m]] = arrays[m]
                out[int(ids_s[starts[k]])] = filled
    if not bad.any():
        return
    left = np.flatnonzero(np.isin(ids, ids_s[starts][bad]))  # (in the query's order)
    for a, k, v in zip(ids[left].tolist(), at[left].tolist(), value[left].tolist()):
        if paths[k] is None:
            continue  # not an element of an array (flat_key matched through something else)
        if not paths[k]:
            out[a] = v
            continue
        root = out.get(a)
        if not isinstance(root, list):
            root = out[a] = []
        _put(root, paths[k], v)


def _id_list(arg_set_ids) -> list:
    """Arg set ids as a list of Python ints (an integer array's ``tolist``, else ``int`` of each)."""
    if isinstance(arg_set_ids, np.ndarray) and arg_set_ids.dtype.kind in "iu":
        return arg_set_ids.tolist()
    return [int(a) for a in arg_set_ids]


def _path(rest: str):
    """The index path of a key's part after the argument's name: () for ``""`` (the value itself), (i, j, ...) for
    ``[i][j]...``, None for anything else (flat_key matched through another key)."""
    if not rest:
        return ()
    found = tuple(int(i) for i in _INDEXES.findall(rest))
    return found if "".join(f"[{i}]" for i in found) == rest else None


def _put(root: list, path, value) -> None:
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
    n = len(s["ts"])
    count, lo, hi = (q["slice_ids"][c][0] for c in ("n", "lo", "hi"))
    if count != n or (n and (lo, hi) != (0, n - 1)):
        raise ValueError("slice ids are not 0..n-1 in id order; the analyses index slices by id")
    rows = np.arange(n)
    tt = q["thread_track"]
    track_ids = _ints(s["track_id"])
    tt_ids, tt_utid = _ints(tt["id"]), _ints(tt["utid"])
    size = int(max(track_ids.max() if n else -1, tt_ids.max() if len(tt_ids) else -1)) + 1
    track_utid = np.full(size, -1, np.int64)
    track_utid[tt_ids] = tt_utid
    th, pr = q["thread"], q["process"]
    threads = [(int(u), _opt_int(tid), _text(nm), _opt_int(upid), _opt_int(main) or 0)
               for u, tid, nm, upid, main in zip(th["utid"], th["tid"], th["name"], th["upid"], th["is_main_thread"])]
    processes = [(int(u), _opt_int(pid), _text(nm)) for u, pid, nm in zip(pr["upid"], pr["pid"], pr["name"])]
    f = q["flow"]
    tables = TraceTables(
        ts=_ints(s["ts"]), dur=_ints(s["dur"]), track_id=track_ids, depth=_ints(s["depth"]),
        parent_id=_ints(s["parent_id"]), arg_set_id=_ints(s["arg_set_id"]),
        name=TextColumn.of(s["name"], rows), category=TextColumn.of(s["category"], rows),
        track_utid=track_utid, flow_out=_ints(f["slice_out"]), flow_in=_ints(f["slice_in"]),
        threads=threads, processes=processes, args=SqlArgs(columns))
    tables.freeze()
    return tables

