"""Achieved GEMM throughput where the FLOPs are known (from the experiment config or recorded shapes)."""
from __future__ import annotations

import math
import re
from typing import Optional

import numpy as np
import pandas as pd

from ..errors import QueryError
from ._common import run_query
from ._shared import Shared, expand_ranges, frame, frame_cols, nullable, shared_for

__all__ = ["gemm_throughput", "gemm_flops_from_dims"]

_KEY = re.compile(r"\[(\d+)\]\[(\d+)\]$")
_INDEX = re.compile(r"\[\d+\]")  # what trace_processor's flat_key drops from a key


def _prod(xs) -> int:
    return math.prod(int(x) for x in xs) if xs else 1


def gemm_flops_from_dims(op: str, dims: list[list[int]]) -> Optional[int]:
    """FLOPs (2·M·K·N per product, times the batch) of one GEMM op from its recorded ``Input Dims``.

    Args:
        op: ``aten::mm``, ``aten::bmm``, ``aten::addmm``, ``aten::baddbmm``, ``aten::matmul`` or ``aten::linear``.
        dims: the op's input shapes, e.g. ``[[64, 64], [64, 64]]`` for mm.

    Returns:
        The FLOP count, or None when the shapes do not fit the op.
    """
    try:
        if op == "aten::addmm" or op == "aten::baddbmm":
            a, b = dims[1], dims[2]
        elif op == "aten::linear":
            x, w = dims[0], dims[1]
            if len(w) != 2 or not x or x[-1] != w[1]:
                return None
            return 2 * _prod(x[:-1]) * w[1] * w[0]
        else:
            a, b = dims[0], dims[1]
        if len(a) < 2 or len(b) < 1:
            return None
        if len(b) == 1:  # matrix @ vector
            return 2 * _prod(a[:-1]) * a[-1] if a[-1] == b[0] else None
        m, k, k2, n = a[-2], a[-1], b[-2], b[-1]
        if k != k2:
            return None
        batch = max(_prod(a[:-2]), _prod(b[:-2]))
        return 2 * batch * m * k * n
    except (IndexError, TypeError):
        return None


def _dims_from_rows(ids, keys, values) -> dict[int, list[list[int]]]:
    """{slice id: its inputs' dims} from ``gemm_shapes.sql``'s rows (id, key, int_value), in its (id, key) order."""
    out: dict[int, dict[int, dict[int, int]]] = {}
    search = _KEY.search
    for sid, key, val in zip(ids, keys, values):
        if val is None or val != val:
            continue
        m = search(str(key))
        if m is None:
            continue
        out.setdefault(int(sid), {}).setdefault(int(m.group(1)), {})[int(m.group(2))] = int(val)
    # inputs without dims (scalars, empty lists) have no rows: keep every input at its own position
    return {sid: [[inp[i][j] for j in sorted(inp[i])] if i in inp else [] for i in range(max(inp) + 1)]
            for sid, inp in out.items()}


def _dims_by_op(session, ops: dict | None = None) -> dict[int, list[list[int]]]:
    """{GEMM op id: its recorded ``Input Dims``} (the ops that have some).

    ``ops``: {slice id: arg set id} of the GEMM ops asked about, when known: on the mirror their args are then read
    from its args database, which is complete once the trace is loaded, instead of through ``gemm_shapes.sql``
    (whose ``args`` view waits for the SQLite tables); see :func:`_dims_from_args`."""
    if ops is not None:
        got = _dims_from_args(session, ops)
        if got is not None:
            return got
    from ..queries import load_query
    cols, data = session.query_columns(load_query("gemm_shapes"))
    d = dict(zip(cols, data))
    return _dims_from_rows(d["id"], d["key"], d["int_value"])


_DIMS_KEY = "Input Dims"
_DIMS_KEY_BYTES = b'"Input Dims"'
_INT64 = (-(1 << 63), (1 << 63) - 1)


class _Unusual(Exception):
    """An arg set whose ``args`` rows this module does not rebuild itself (the query answers for it)."""


def _leaves(v, key: str, out: list) -> None:
    """The ``args`` rows (key, int_value) that json_tree gives below a value reached through arrays only: arrays
    add ``[i]`` to the key; an object's leaves get a ``.name`` in their key (never the flat key asked for), so they
    are left out; integers and booleans (1/0) have an int_value, other scalars none (None, as the view)."""
    tv = type(v)
    if tv is list:
        for i, x in enumerate(v):
            _leaves(x, f"{key}[{i}]", out)
    elif tv is dict:
        return
    elif tv is bool:
        out.append((key, int(v)))
    elif tv is int:
        if not _INT64[0] <= v <= _INT64[1]:
            raise _Unusual  # SQLite gives such an integer as a REAL atom
        out.append((key, v))
    else:
        out.append((key, None))


def _dims_rows(v) -> list[tuple[str, object]]:
    """The (key, int_value) rows with flat_key ``args.Input Dims`` below this ``Input Dims`` value, sorted by key (as
    ``gemm_shapes.sql`` orders them)."""
    out: list = []
    _leaves(v, "args." + _DIMS_KEY, out)
    out.sort(key=lambda kv: kv[0])
    return out


def _input_dims_rows(raw: bytes, decode) -> list[tuple[str, object]]:
    """``_dims_rows`` of one arg set's raw JSON; raises _Unusual where this could differ from SQLite's json_tree."""
    v = _raw_input_dims(raw, decode)
    return [] if v is _ABSENT else _dims_rows(v)


_ABSENT = object()


def _raw_input_dims(raw: bytes, decode):
    """The value of the top-level ``Input Dims`` of one arg set's raw JSON (_ABSENT without one); raises _Unusual
    where SQLite's json_tree could give other rows than this value's leaves."""
    if b"\\" in raw or raw.count(_DIMS_KEY_BYTES) > 1 or raw.count(b"[") + raw.count(b"{") >= 500:
        raise _Unusual  # escapes (json_tree's fullkey keeps them), a possible duplicate key, deep nesting
    try:
        d = decode(raw)
    except Exception:  # noqa: BLE001 - JSON5 or worse: SQLite decides (or raises its error)
        raise _Unusual from None
    if type(d) is not dict:
        raise _Unusual
    if "[" in "".join(d) and any(k != _DIMS_KEY and _INDEX.sub("", k) == _DIMS_KEY for k in d):
        raise _Unusual  # another top-level key whose flat key is also args.Input Dims
    return d.get(_DIMS_KEY, _ABSENT)


def _plain_dims(v):
    """``Input Dims`` of the usual shape, a list of lists of int64 integers, as ``_dims_from_rows`` makes it from
    the query's rows (one per integer; inputs past the last one with an integer have no rows, so they are not
    there; None when no input has one); _ABSENT for any other shape."""
    if type(v) is not list:
        return _ABSENT
    lo, hi = _INT64
    last = 0
    for i, x in enumerate(v):
        if type(x) is not list:
            return _ABSENT
        for y in x:
            if type(y) is not int:  # bool, float, text, null, nested: the general path
                return _ABSENT
        if x:
            if min(x) < lo or max(x) > hi:
                return _ABSENT
            last = i + 1
    return [list(x) for x in v[:last]] if last else None


def _dims_of_value(v):
    """``Input Dims`` (its decoded value) as ``_dims_by_op`` gives them (None when there are none)."""
    plain = _plain_dims(v)
    if plain is not _ABSENT:
        return plain
    rows = _dims_rows(v)
    return _dims_from_rows([0] * len(rows), [k for k, _ in rows], [x for _, x in rows]).get(0)


def _dims_of_raw(raw: bytes, decode_top, decode, cache: dict):
    """One arg set's ``Input Dims`` as ``_dims_by_op`` gives them (None when there are none). ``decode_top`` leaves
    the top-level values undecoded (``msgspec.Raw``): each distinct ``Input Dims`` text is decoded once (``cache``;
    the ops of a training loop repeat a few shapes)."""
    v = _raw_input_dims(raw, decode_top)
    if v is _ABSENT:
        return None
    text = bytes(v)
    got = cache.get(text, _ABSENT)
    if got is _ABSENT:
        try:
            value = decode(text)
        except Exception:  # noqa: BLE001
            raise _Unusual from None
        got = cache[text] = _dims_of_value(value)
    return got


def _dims_from_args(session, ops: dict) -> dict[int, list[list[int]]] | None:
    """``_dims_by_op`` for these {slice id: arg set id} read from the mirror's args database (``_args_raw``: the raw
    JSON of each event's args, what its ``args`` view expands with json_tree); None where that cannot be read, or
    some arg set is unusual (escapes, duplicate keys, JSON5...): the caller then runs the query.

    Exact by construction for the usual arg sets: ``_tp_flat_key`` (json_tree's fullkey with the quotes and array
    indices dropped) equals ``args.Input Dims`` only for the leaves reached through arrays from a top-level key
    whose name, without ``[digits]``, is ``Input Dims`` (a nested object adds a ``.``); other such keys are
    unusual, so these are the leaves of ``Input Dims``, with keys ``args.Input Dims[i][j]...``."""
    if getattr(session, "tables", None) is None:
        return None  # not the mirror: the query reads the args table
    want = {sid: a for sid, a in ops.items() if a is not None and a >= 0}
    if not want:
        return {}
    import msgspec
    try:
        raws = session.raw_args(want.values())
    except QueryError:
        return None
    if raws is None:
        return None
    decode_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
    decode = msgspec.json.Decoder().decode
    cache: dict = {}
    try:
        dims = {a: _dims_of_raw(bytes(raw), decode_top, decode, cache) for a, raw in raws.items()}
    except _Unusual:
        return None
    return {sid: dims[a] for sid, a in want.items() if dims.get(a) is not None}


_GEMM_NAMES = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear")


def _gemm_slices(sh: Shared) -> dict:
    """``gemm_slices.sql``'s columns (id, name, start_ns, cpu_dur_ns, arg_set_id, utid: GEMM ops on a thread, not
    gpu_user_annotation, in (ts, id) order) as arrays: from the shared columns on the mirror, else the query.
    ``arg_set_id`` is an object array (None for NULL)."""
    tb = sh.tables
    if tb is None:
        gm = run_query(sh.session, "gemm_slices")
        out = {c: gm[c].to_numpy(dtype=np.int64) if len(gm) else np.zeros(0, np.int64)
               for c in ("id", "start_ns", "cpu_dur_ns", "utid")}
        out["name"] = np.array(gm["name"].tolist(), dtype=object)
        a = np.empty(len(gm), dtype=object)
        a[:] = [None if (v is None or v != v) else int(v) for v in gm["arg_set_id"].tolist()]
        out["arg_set_id"] = a
        return out
    t = sh.slices
    m = sh.name_mask(lambda x: x in _GEMM_NAMES) & (t["utid"] >= 0)
    if m.any():
        m &= sh.cat_mask(lambda c: c != "gpu_user_annotation")  # coalesce(s.category, '') <> ...
    i = np.flatnonzero(m)
    i = i[np.lexsort((t["id"][i], t["ts"][i]))]
    asid = tb.arg_set_id[t["id"][i]]
    return {"id": t["id"][i], "name": sh.names_at(i), "start_ns": t["ts"][i], "cpu_dur_ns": t["dur"][i],
            "arg_set_id": nullable(asid, asid < 0), "utid": t["utid"][i]}


def _inner_gemms(ts: np.ndarray, dur: np.ndarray, utid: np.ndarray) -> np.ndarray:
    """For each GEMM op: how many other GEMM ops on its thread lie inside it (start within [its start, its end],
    end by its end).

    Vectorised per thread: the thread's ops sorted by start; each op's candidates are the run of ops starting in
    [its start, its end] (two searchsorted), expanded into (op, candidate) pairs and counted with bincount."""
    out = np.zeros(len(ts), dtype=np.int64)
    end = ts + dur
    for u in np.unique(utid).tolist():
        js = np.flatnonzero(utid == u)
        js = js[np.argsort(ts[js], kind="stable")]
        s, e = ts[js], end[js]
        lo = np.searchsorted(s, s, side="left")
        cnt = np.searchsorted(s, e, side="right") - lo
        which, cand = expand_ranges(lo, cnt)
        ok = (cand != which) & (e[cand] <= e[which])
        out[js] = np.bincount(which[ok], minlength=len(js))
    return out


def _kernels_of(sh: Shared, ts: np.ndarray, end: np.ndarray, utid: np.ndarray):
    """For each GEMM op: (kernel_ns, kernel_names) of the kernel pairs whose launch call is on its thread and starts
    in [ts, end): the sum of their durations (None for none) and their distinct names joined by "," in the order
    SQLite visits them (launch track, launch ts, launch id, kernel id)."""
    n = len(ts)
    kns = np.full(n, None, dtype=object)
    names = np.full(n, None, dtype=object)
    p = sh.p
    k = np.flatnonzero(p["gpu_category"] == "kernel")
    lu = p["launch_utid"][k]
    k = k[~pd.isna(lu)] if len(k) else k
    if len(k) == 0 or n == 0:
        return kns, names
    k = k[np.lexsort((p["gpu_id"][k], p["launch_id"][k], p["launch_ts"][k], p["launch_track_id"][k]))]
    ku = p["launch_utid"][k].astype(np.int64)
    coded = sh.pair_codes("gpu_name")
    name_codes, name_uniq = coded.codes[k], np.append(coded.uniq, None)  # code -1 (NULL) indexes the None
    for u in np.unique(ku).tolist():
        ops = np.flatnonzero(utid == u)
        if len(ops) == 0:
            continue
        lane = k[ku == u]  # this thread's kernel pairs in visiting order
        pos = np.flatnonzero(ku == u)
        by_ts = np.argsort(p["launch_ts"][lane], kind="stable")
        lts = p["launch_ts"][lane][by_ts]
        csum = np.concatenate([[0], np.cumsum(p["gpu_dur"][lane][by_ts])])
        lo = np.searchsorted(lts, ts[ops], side="left")
        hi = np.searchsorted(lts, end[ops], side="left")
        cnt = hi - lo
        has = cnt > 0
        kns[ops[has]] = (csum[hi] - csum[lo])[has].tolist()
        # the (op, pair) items, pairs in visiting order within each op; first of each (op, name) kept
        which, at = expand_ranges(lo, cnt)
        item = by_ts[at]
        order = np.lexsort((item, which))
        which, item = which[order], item[order]
        code = name_codes[pos[item]]
        first = np.lexsort((item, code, which))
        keep = np.ones(len(first), dtype=bool)
        keep[1:] = (which[first][1:] != which[first][:-1]) | (code[first][1:] != code[first][:-1])
        kept = np.sort(first[keep])  # back in (op, visiting) order
        w, c = which[kept], code[kept]
        cut = np.flatnonzero(np.diff(w)) + 1
        starts = np.concatenate([[0], cut]).tolist()
        stops = np.concatenate([cut, [len(w)]]).tolist()
        labels = name_uniq.tolist()
        cl = c.tolist()
        joined: dict = {}  # one str per distinct list of names (GEMM ops of one shape launch the same kernels)
        for a, b, op in zip(starts, stops, w[starts].tolist() if len(w) else []):
            key = tuple(cl[a:b])
            got = joined.get(key)
            if got is None:
                got = joined[key] = ",".join(labels[j] for j in key)
            names[ops[op]] = got
    return kns, names


def _gemm_ops_raw(sh: Shared) -> pd.DataFrame:
    """What ``gemm_ops.sql`` returns: each GEMM op, the GEMM ops nested in it on its thread, and the kernel time
    (and distinct kernel names) of the launches inside it on its thread."""
    cols = ["id", "name", "start_ns", "cpu_dur_ns", "arg_set_id", "inner_gemms", "kernel_ns", "kernel_names"]
    gm = _gemm_slices(sh)
    if len(gm["id"]) == 0:
        return frame([], cols)
    ts, dur, utid = gm["start_ns"], gm["cpu_dur_ns"], gm["utid"]
    kns, kn = _kernels_of(sh, ts, ts + dur, utid)
    return frame_cols({"id": gm["id"], "name": gm["name"], "start_ns": ts, "cpu_dur_ns": dur,
                       "arg_set_id": gm["arg_set_id"], "inner_gemms": _inner_gemms(ts, dur, utid),
                       "kernel_ns": kns, "kernel_names": kn})


def gemm_throughput(session, peak_tflops: Optional[float] = None, config=None,
                    shared: Shared | None = None) -> pd.DataFrame:
    """Achieved TFLOP/s of each GEMM op whose FLOPs are known.

    GEMM ops are the innermost of aten::mm/bmm/addmm/baddbmm/matmul/linear (an aten::matmul that calls aten::mm
    counts once, as the mm). FLOPs come from ``config.gemm_flops()`` when an ``ExperimentConfig`` is given
    (the study's workload: one GEMM per call), else from the op's recorded ``Input Dims`` (record_shapes=True).
    Time is the summed duration of the GPU kernels the op launched; on a CPU-only trace it is the op's CPU
    duration (``device`` says which).

    Args:
        session: a trace session.
        peak_tflops: the peak the user sets (e.g. ~989 for a dense bf16 H100/H200); None leaves the fraction NaN.
        config: an ``ExperimentConfig`` whose ``gemm_flops()`` gives the FLOPs of every GEMM op, or None.

    Returns:
        DataFrame in time order: ``id``, ``op``, ``start_ns``, ``device`` (``gpu`` or ``cpu``), ``time_us``,
        ``flops``, ``tflops``, ``peak_tflops``, ``fraction_of_peak``, ``flops_from`` (``config`` or ``shapes``),
        ``kernel_names``. Ops whose FLOPs are unknown are left out; empty when none is known. Text columns are
        object columns (see :func:`~profiling_core.analyses.gpu_ops`).
    """
    sh = shared_for(session, shared)
    cols = ["id", "op", "start_ns", "device", "time_us", "flops", "tflops", "peak_tflops", "fraction_of_peak",
            "flops_from", "kernel_names"]
    gm = _gemm_slices(sh)
    ts, dur, utid = gm["start_ns"], gm["cpu_dur_ns"], gm["utid"]
    keep = np.flatnonzero(_inner_gemms(ts, dur, utid) == 0)  # the innermost GEMM ops
    kns, kn = _kernels_of(sh, ts[keep], ts[keep] + dur[keep], utid[keep])
    ids, names = gm["id"][keep].tolist(), gm["name"][keep].tolist()
    dims = _dims_by_op(session, dict(zip(ids, gm["arg_set_id"][keep].tolist()))) if config is None else {}
    peak = float(peak_tflops) if peak_tflops else float("nan")
    flops_of: dict = {}  # (op name, its dims object) -> FLOPs: ops of equal shapes share one dims list
    rows = []
    for op_id, name, start, cpu_ns, kernel_ns, kernel_names in zip(ids, names, ts[keep].tolist(), dur[keep].tolist(),
                                                                   kns.tolist(), kn.tolist()):
        if config is not None:
            flops, src = int(config.gemm_flops()), "config"
        else:
            d = dims.get(op_id)
            if d is None:
                flops = None
            else:
                key = (name, id(d))
                flops = flops_of[key] if key in flops_of else flops_of.setdefault(key, gemm_flops_from_dims(name, d))
            src = "shapes"
        if flops is None:
            continue
        on_gpu = kernel_ns is not None and kernel_ns > 0
        time_ns = float(kernel_ns) if on_gpu else float(cpu_ns)
        tflops = flops / time_ns / 1e3 if time_ns > 0 else float("nan")
        rows.append((op_id, name, start, "gpu" if on_gpu else "cpu", time_ns / 1000.0, flops, tflops, peak,
                     tflops / float(peak_tflops) if peak_tflops else float("nan"), src,
                     kernel_names if on_gpu else None))
    # the dtypes pd.DataFrame(list of row dicts) infers (the same inference as from_records), except the text columns:
    # object, one shared str per distinct value, as in the other one-row-per-op frames (gpu_ops, launch_latency)
    return frame_cols(dict(zip(cols, map(list, zip(*rows)))), objects=("op", "device", "flops_from", "kernel_names")) \
        if rows else frame([], cols)
