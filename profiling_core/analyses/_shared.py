"""Pieces that several analyses need, computed once per trace and shared (``analyze`` builds one :class:`Shared`).

A few queries run once per trace: ``slice_tree`` (every slice: window, tree, name, category, thread; fetched column
by column with ``TraceSession.query_columns``), ``launch_pairs`` (every launch call ↔ GPU op pair, flow table with
the ``args.correlation`` fallback, with both ends' columns), ``step_slices`` (the ProfilerStep#N windows) and
``thread_lanes``. The per-step, per-window and per-tree work that the shipped ``steps``, ``gpu_busy``,
``per_step_kernels``, ``launch_latency``, ``launch_path``, ``dispatch_chain``, ``sync_wait``, ``compile_breakdown``,
``gemm_ops``, ``profiler_table`` and ``kernels`` queries each redo (the GPU-op set, the pairing, window functions,
range joins, a recursive ancestor walk) is done here once with numpy on those arrays: the same rows, values and order
(tests/test_analyses_perf_invariants.py compares each with its query on every test trace). The ``.sql`` files stay
the reference of each analysis and run on both engines.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

from ._common import run_query

__all__ = ["Shared", "shared_for", "frame", "union_ns"]

_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}


def frame(rows: list[tuple], cols: list[str]) -> pd.DataFrame:
    """Rows as the mirror's ``query()`` returns them (same dtype inference; object columns when empty)."""
    if rows:
        return pd.DataFrame.from_records(rows, columns=cols)
    return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})


def union_ns(b: np.ndarray, e: np.ndarray) -> int:
    """Total length of the union of intervals [b, e) (integer ns); 0 for none."""
    if len(b) == 0:
        return 0
    order = np.lexsort((e, b))
    b, e = b[order], e[order]
    run = np.maximum.accumulate(e)
    new = np.ones(len(b), dtype=bool)
    new[1:] = b[1:] > run[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(b) - 1)
    return int((run[last] - b[first]).sum())


def _i64(s: pd.Series) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype="int64", na_value=0) if len(s) else np.zeros(0, "int64")


class Shared:
    """Shared inputs of one trace's analyses; every attribute is computed on first use."""

    def __init__(self, session) -> None:
        self.session = session

    # --- raw queries ----------------------------------------------------------------------------------------------
    @cached_property
    def gpu_ops_raw(self) -> pd.DataFrame:
        """What the ``kernels`` query returns (GPU ops on thread tracks with device and stream, in (ts, id) order),
        from the shared slice tree and thread lanes."""
        cols = ["id", "name", "category", "start_ns", "dur_ns", "device", "stream"]
        t, i = self.slices, self.gpu_rows
        lanes = self.lanes
        i = i[np.array([u in lanes for u in t["utid"][i].tolist()], dtype=bool)] if len(i) else i
        i = i[np.lexsort((t["id"][i], t["ts"][i]))]
        names = t["name"]
        lane = [lanes[u] for u in t["utid"][i].tolist()]
        rows = list(zip(t["id"][i].tolist(), [names[k] for k in i.tolist()], t["cat"][i].tolist(),
                        t["ts"][i].tolist(), t["dur"][i].tolist(), [x[1] for x in lane], [x[0] for x in lane]))
        return frame(rows, cols)

    @cached_property
    def stream_of(self) -> dict:
        """{gpu op id: stream tid} for the GPU ops on thread tracks."""
        df = self.gpu_ops_raw
        return dict(zip(df["id"].tolist(), df["stream"].tolist())) if len(df) else {}

    @cached_property
    def pair_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """(pair index, step list index) for every pair whose launch lies in a step window (any step slice)."""
        idx, which = [], []
        for k, (_sid, _n, _nm, ts, dur, _d, _u) in enumerate(self.steps_list):
            i = self.pairs_in(ts, ts + dur)
            idx.append(i)
            which.append(np.full(len(i), k, dtype=np.int64))
        if not idx:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(idx).astype(np.int64), np.concatenate(which)

    @cached_property
    def by_launch(self) -> dict[int, np.ndarray]:
        """{launch id: indices of its pairs (in gpu_id order)}."""
        lid = self.p["launch_id"]
        if len(lid) == 0:
            return {}
        cut = np.flatnonzero(np.diff(lid)) + 1  # pairs are in (launch_id, gpu_id) order
        return {int(g[0]): np.arange(a, a + len(g)) for a, g in zip(np.r_[0, cut], np.split(lid, cut))}

    @cached_property
    def tables(self):
        """The session's in-memory columns (the mirror's ``TraceTables``), or None (perfetto): then every shared
        piece comes from its query."""
        return getattr(self.session, "tables", None)

    @cached_property
    def step_slices(self) -> pd.DataFrame:
        tb = self.tables
        if tb is None:
            return run_query(self.session, "step_slices")
        # step_slices.sql on the columns: name GLOB 'ProfilerStep#*', category not gpu_user_annotation, ORDER BY ts, id
        t = self.slices
        m = self.name_mask(lambda u: isinstance(u, str) and u.startswith("ProfilerStep#"))
        if m.any():
            m &= np.array([c != "gpu_user_annotation" for c in t["cat_uniq"]], dtype=bool)[t["cat_codes"]]
        rows_i = np.flatnonzero(m)
        rows_i = rows_i[np.lexsort((rows_i, t["ts"][rows_i]))]
        names = t["name"]
        steps = _sqlite_int_suffixes({names[i] for i in rows_i.tolist()}, 14)
        rows = [(i, steps[names[i]], names[i], ts, dur, depth, None if u < 0 else u)
                for i, ts, dur, depth, u in zip(rows_i.tolist(), t["ts"][rows_i].tolist(), t["dur"][rows_i].tolist(),
                                                t["depth"][rows_i].tolist(), t["utid"][rows_i].tolist())]
        return frame(rows, ["step_id", "step", "name", "ts", "dur", "depth", "utid"])

    @cached_property
    def slices(self) -> dict:
        """``slice_tree`` as columns: int64 arrays ``id``, ``ts``, ``dur``, ``track_id``, ``depth``, ``parent``
        (-1 for none), ``utid`` (-1 off-thread), ``ppos`` (the parent's row, -1 for none); lists ``name``,
        ``category``; ``cat`` (lower-cased category, None for none) as an object array."""
        tb = self.tables
        if tb is not None:  # the mirror's columns: slice_tree.sql's rows without the round trip through SQLite
            n = tb.slice_count
            d = {"name": tb.name, "category": tb.category}
            out: dict = {"id": np.arange(n, dtype=np.int64), "ts": tb.ts, "dur": tb.dur, "track_id": tb.track_id,
                         "depth": tb.depth, "parent": tb.parent_id,
                         "utid": tb.track_utid[tb.track_id] if n else np.zeros(0, np.int64)}
        else:
            from ..queries import load_query
            cols, data = self.session.query_columns(load_query("slice_tree"))
            d = dict(zip(cols, data))
            n = len(d["id"])
            out = {c: np.array(d[c], dtype=np.int64) if n else np.zeros(0, np.int64)
                   for c in ("id", "ts", "dur", "track_id", "depth")}
            for c, name in (("parent_id", "parent"), ("utid", "utid")):
                out[name] = np.fromiter((-1 if v is None else v for v in d[c]), dtype=np.int64, count=n)
        out["name"], out["category"] = d["name"], d["category"]
        codes, uniq = pd.factorize(np.array(d["category"], dtype=object), use_na_sentinel=True)
        low = np.array([u.lower() if isinstance(u, str) else None for u in uniq] + [None], dtype=object)
        out["cat"] = low[codes] if n else np.zeros(0, dtype=object)
        out["cat_codes"], out["cat_uniq"] = codes, list(uniq) + [None]  # code -1 (NULL) indexes the None
        ncodes, nuniq = pd.factorize(np.array(d["name"], dtype=object), use_na_sentinel=True)
        out["name_codes"], out["name_uniq"] = ncodes, list(nuniq) + [None]
        ids = out["id"]
        dense = n == 0 or (ids[0] == 0 and ids[-1] == n - 1)
        has = out["parent"] >= 0
        ppos = np.full(n, -1, dtype=np.int64)
        ppos[has] = out["parent"][has] if dense else np.searchsorted(ids, out["parent"][has])
        out["ppos"] = ppos
        out["dense"] = dense
        return out

    def name_mask(self, pred) -> np.ndarray:
        """Boolean array over ``slices``: ``pred(name)`` (evaluated once per distinct name; None for NULL)."""
        t = self.slices
        return np.array([bool(pred(u)) for u in t["name_uniq"]] or [False], dtype=bool)[t["name_codes"]]

    def pos(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``slices`` holding these slice ids."""
        return ids if self.slices["dense"] else np.searchsorted(self.slices["id"], ids)

    # --- arrays ---------------------------------------------------------------------------------------------------
    def _pairs_from_flows(self) -> dict | None:
        """The ``launch_pairs`` columns from the flow table and the shared slice tree, when every GPU op has a flow
        (then the query's args.correlation half is empty); None otherwise (the caller runs the query)."""
        tb = self.tables
        if tb is not None:
            out_ids, in_ids = tb.flow_out, tb.flow_in
        else:
            from ..queries import load_query
            _cols, (out_ids, in_ids) = self.session.query_columns(load_query("flow_links"))
        if not (isinstance(out_ids, np.ndarray) and isinstance(in_ids, np.ndarray)):
            return None
        t, gr = self.slices, self.gpu_rows
        gpu_ids = t["id"][gr]
        m = np.isin(in_ids, gpu_ids)
        pairs = np.unique(np.stack([out_ids[m], in_ids[m]], axis=1), axis=0) if m.any() \
            else np.zeros((0, 2), dtype=np.int64)
        if not np.isin(gpu_ids, pairs[:, 1]).all():
            return None  # some GPU op has no flow: the correlation fallback applies
        n = len(t["id"])
        lo, gi = pairs[:, 0], pairs[:, 1]
        if t["dense"]:
            if len(lo) and (lo.min() < 0 or lo.max() >= n):
                return None
            lpos, gpos = lo, gi
        else:
            lpos, gpos = np.searchsorted(t["id"], lo), np.searchsorted(t["id"], gi)
            if len(lo) and ((lpos >= n).any() or (t["id"][np.minimum(lpos, n - 1)] != lo).any()):
                return None
        names, cats = t["name"], t["category"]
        par, utid = t["parent"][lpos], t["utid"][lpos]
        return {
            "launch_id": lo, "gpu_id": gi, "paired_by": ["flow"] * len(lo),
            "launch_name": [names[i] for i in lpos.tolist()], "launch_ts": t["ts"][lpos], "launch_dur": t["dur"][lpos],
            "launch_parent_id": [None if v < 0 else v for v in par.tolist()], "launch_track_id": t["track_id"][lpos],
            "launch_utid": [None if v < 0 else v for v in utid.tolist()],
            "gpu_name": [names[i] for i in gpos.tolist()], "gpu_category": t["cat"][gpos].tolist(),
            "gpu_category_raw": [cats[i] for i in gpos.tolist()], "gpu_ts": t["ts"][gpos], "gpu_dur": t["dur"][gpos],
        }

    @cached_property
    def p(self) -> dict[str, np.ndarray]:
        """``launch_pairs`` (one row per launch call ↔ GPU op pair, in launch_id, gpu_id order) as arrays: ints
        as int64, text and nullable ids (``launch_parent_id``, ``launch_utid``: None for none) as object."""
        d = self._pairs_from_flows()
        if d is None:
            from ..queries import load_query
            cols, data = self.session.query_columns(load_query("launch_pairs"))
            d = dict(zip(cols, data))
        out = {c: np.array(d[c], dtype=np.int64) if len(d[c]) else np.zeros(0, dtype=np.int64)
               for c in ("launch_id", "gpu_id", "launch_ts", "launch_dur", "gpu_ts", "gpu_dur", "launch_track_id")}
        out["gpu_end"] = out["gpu_ts"] + out["gpu_dur"]
        for c in ("paired_by", "launch_name", "gpu_name", "gpu_category", "gpu_category_raw", "launch_parent_id",
                  "launch_utid"):
            a = np.empty(len(d[c]), dtype=object)
            a[:] = d[c].tolist() if isinstance(d[c], np.ndarray) else d[c]
            out[c] = a
        kinds: dict = {}
        out["memcpy_kind"] = np.array([kinds.setdefault(x, x[7:11] if isinstance(x, str) and x.startswith(
            ("Memcpy DtoD", "Memcpy HtoD", "Memcpy DtoH")) else "") for x in out["gpu_name"].tolist()], dtype=object)
        out["by_launch_ts"] = np.argsort(out["launch_ts"], kind="stable")
        out["launch_ts_sorted"] = out["launch_ts"][out["by_launch_ts"]]
        return out

    @cached_property
    def steps_list(self) -> list[tuple]:
        """(step_id, step, name, ts, dur, depth, utid) of every step slice in (ts, id) order; utid None off-thread."""
        df = self.step_slices
        if df.empty:
            return []
        return [tuple(None if (v is None or (isinstance(v, float) and np.isnan(v))) else v for v in r)
                for r in df[["step_id", "step", "name", "ts", "dur", "depth", "utid"]].itertuples(index=False)]

    def pairs_in(self, ts: int, end: int) -> np.ndarray:
        """Indices (into the pairs, in launch_id, gpu_id order) of pairs whose launch call starts in [ts, end)."""
        p = self.p
        lo, hi = np.searchsorted(p["launch_ts_sorted"], [ts, end], side="left")
        return np.sort(p["by_launch_ts"][lo:hi])

    @cached_property
    def gpu_rows(self) -> np.ndarray:
        """Rows of ``slices`` that are GPU ops (kernel, memcpy, memset; any track)."""
        t = self.slices
        cats = [c for c in set(t["cat"].tolist()) if c in _GPU_CATS]
        return np.flatnonzero(np.isin(t["cat"], cats)) if cats else np.zeros(0, dtype=np.int64)

    @cached_property
    def ops(self) -> dict[str, np.ndarray]:
        """Every GPU op interval (any track): id, ts, end, category (lower case)."""
        t, i = self.slices, self.gpu_rows
        return {"id": t["id"][i], "ts": t["ts"][i], "end": t["ts"][i] + t["dur"][i], "category": t["cat"][i]}

    @cached_property
    def ops_by_ts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The GPU op intervals sorted by start: (ts, end, running max of end) for overlap look-ups."""
        o = self.ops
        order = np.argsort(o["ts"], kind="stable")
        ts, end = o["ts"][order], o["end"][order]
        return ts, end, np.maximum.accumulate(end) if len(end) else end

    def ops_overlapping(self, b: int, e: int) -> tuple[np.ndarray, np.ndarray]:
        """(ts, end) of the GPU ops with ts < e and end > b."""
        ts, end, _run = self.ops_by_ts
        hi = int(np.searchsorted(ts, e, side="left"))
        m = end[:hi] > b
        return ts[:hi][m], end[:hi][m]

    @cached_property
    def trace_window(self) -> tuple:
        """(first ts, last end) over slices with a category other than Trace; (None, None) when there are none."""
        t = self.slices
        m = np.array([c is not None and c != "Trace" for c in t["cat_uniq"]], dtype=bool)[t["cat_codes"]]
        if not m.any():
            return None, None
        return int(t["ts"][m].min()), int((t["ts"][m] + t["dur"][m]).max())

    @cached_property
    def lanes(self) -> dict:
        """{utid: (tid, pid)} of every thread (pid None without a process row)."""
        tb = self.tables
        if tb is not None:  # thread_lanes.sql: thread LEFT JOIN process USING (upid), by utid
            pid_of = {upid: pid for upid, pid, _name, _syn in tb.processes}
            return {utid: (tid, pid_of.get(upid)) for utid, tid, _name, upid, _main in sorted(tb.threads)}
        from ..queries import load_query
        cols, data = self.session.query_columns(load_query("thread_lanes"))
        d = dict(zip(cols, data))
        return {u: (tid, pid) for u, tid, pid in zip(_list(d["utid"]), _list(d["tid"]), _list(d["pid"]))}


def _sqlite_int_suffixes(names: set, start: int) -> dict:
    """{name: CAST(substr(name, start) AS INT)} exactly as SQLite computes it (asked of SQLite, once per name)."""
    import sqlite3
    conn = sqlite3.connect(":memory:")
    try:
        return {nm: conn.execute("SELECT CAST(substr(?, ?) AS INT)", (nm, start)).fetchone()[0] for nm in names}
    finally:
        conn.close()


def _list(x) -> list:
    return x.tolist() if isinstance(x, np.ndarray) else list(x)


def shared_for(session, shared: Shared | None) -> Shared:
    """``shared`` when given (and for this session), else a new one."""
    return shared if shared is not None and shared.session is session else Shared(session)
