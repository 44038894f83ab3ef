"""Achieved GEMM throughput where the FLOPs are known (from the experiment config or recorded shapes)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from ..config import TFLOPS_LIMITS, as_config
from ..units import format_count
from ._common import SIZE_LIMIT, is_size
from ._shared import Shared, expand_ranges, factorize, frame, frame_cols, nullable, shared_for

__all__ = ["GEMM_OPS", "gemm_throughput", "gemm_kernel_shapes", "gemm_flops_from_dims", "gemm_dims",
           "gemm_leading_dims", "gemm_shape_text"]


def gemm_shape_text(batch, m, k, n) -> str:
    """A GEMM's shape as the tables write it: ``M×K×N``, or ``B × M×K×N`` for a batch of more than one."""
    dims = f"{int(m)}×{int(k)}×{int(n)}"
    return dims if batch is None or batch != batch or int(batch) == 1 else f"{int(batch)} × {dims}"


def _prod(xs) -> int:
    return math.prod(int(x) for x in xs) if xs else 1


def _inputs(op: str, per_input: list) -> tuple:
    """The entries of the first and second operand in one of a GEMM op's per-input records (``Input Dims``, ``Input
    Strides``): addmm and baddbmm take the bias first; ``aten::linear``'s second is its weight, stored N×K."""
    return (per_input[1], per_input[2]) if op in ("aten::addmm", "aten::baddbmm") else (per_input[0], per_input[1])


def gemm_dims(op: str, dims: list[list[int]]) -> Optional[tuple[int, int, int, int]]:
    """(batch, M, K, N) of one GEMM op from its recorded ``Input Dims``, or None when the shapes do not fit the op.

    Args:
        op: ``aten::mm``, ``aten::bmm``, ``aten::addmm``, ``aten::baddbmm``, ``aten::matmul``, ``aten::linear``,
            ``aten::_scaled_mm`` or ``aten::_int_mm`` (:data:`GEMM_OPS`).
        dims: the op's input shapes, e.g. ``[[64, 64], [64, 64]]`` for mm (a matrix @ vector has N = 1).
    """
    try:
        a, b = _inputs(op, dims)
        if op == "aten::linear":  # (b: the weight, N×K)
            if len(b) != 2 or not a or a[-1] != b[1]:
                return None
            return _prod(a[:-2]), (a[-2] if len(a) > 1 else 1), a[-1], b[0]
        if len(a) < 2 or len(b) < 1:
            return None
        if len(b) == 1:  # matrix @ vector
            return (_prod(a[:-2]), a[-2], a[-1], 1) if a[-1] == b[0] else None
        if a[-1] != b[-2]:
            return None
        return max(_prod(a[:-2]), _prod(b[:-2])), a[-2], a[-1], b[-1]
    except (IndexError, TypeError):
        return None


def _operands(op: str, dims, strides):
    """(A, B, C) of one GEMM op as (sizes, strides) pairs of 2-D matrices (a batch's last two dimensions): C only
    where the op was given its output (an ``out=`` call records it as a third input, as Inductor's GEMMs do), else
    None; None for the whole when the records do not fit the op or a matrix operand is a vector (1-D)."""
    (a, b), (sa, sb) = _inputs(op, dims), _inputs(op, strides)
    if op == "aten::linear":
        if len(b) != 2 or len(sb) != 2 or len(a) < 2 or len(sa) != len(a):
            return None
        # y = x @ w.T: B is the weight seen transposed (K×N), its strides swapped
        return (a[-2:], sa[-2:]), ([b[1], b[0]], [sb[1], sb[0]]), None
    mats = [(a, sa), (b, sb)]
    if op in ("aten::mm", "aten::bmm") and len(dims) >= 3 and len(strides) >= 3 and dims[2]:
        mats.append((dims[2], strides[2]))
    out = []
    for d, s in mats:
        if len(d) < 2 or len(s) != len(d):
            return None
        out.append((list(d[-2:]), list(s[-2:])))
    return out[0], out[1], (out[2] if len(out) > 2 else None)


def gemm_leading_dims(op: str, dims, strides) -> Optional[list[dict]]:
    """How cuBLAS reads each matrix of one GEMM op, from its recorded ``Input Dims`` and ``Input Strides``: for the
    first operand A (M×K), the second B (K×N) and the result C (M×N), a dict of ``operand`` (``"A"``, ``"B"``,
    ``"C"``), ``layout``, ``dim`` and ``ld``; None where the trace recorded no strides or they do not fit the op.

    The rule (torch's ``prepare_matrix_for_cublas``): a matrix whose columns are contiguous (stride 1 along its
    second dimension) is read ``row-major``, its rows ``ld`` = its first stride apart, ``dim`` naming the extent its
    rows span (K for A, N for B and C); one whose rows are contiguous (stride 1 along its first dimension: the
    transposed view of a row-major tensor, e.g. ``x.t()``) is read ``transposed``, ``ld`` = its second stride,
    ``dim`` the other extent (M for A, K for B: ``nn.Linear``'s weight, stored N×K); any other is first copied to a
    contiguous tensor by torch (``copied``, ``ld`` = its row length). A matrix of one column is a ``vector`` (``ld``
    None): no row of it is longer than one element, so no leading dimension applies (on an H200, (4096×4096) @
    (4096×1) ran a Hopper GEMM kernel at 81% of its memory roof); one of one row is ``row-major`` with ``ld`` its
    row length, what torch passes for it (on the H200, (1×4095) @ (4095×4096) ran cuBLAS's gemv kernel at 63% of its
    memory roof where K = 4096 ran a Hopper kernel at 84%). The result, when the op was not given one, is the new
    contiguous tensor torch makes: row-major, ``ld`` = N. An ``ld`` larger than the extent it spans is a view of a
    wider tensor.
    """
    try:
        ops = _operands(op, dims, strides)
    except (IndexError, TypeError, ValueError):
        return None
    if ops is None:
        return None
    a, b, c = ops
    names = {"A": ("M", "K"), "B": ("K", "N"), "C": ("M", "N")}  # (rows, columns) of each matrix
    out = []
    for operand, mat in (("A", a), ("B", b), ("C", c)):
        rows_dim, cols_dim = names[operand]
        if mat is None:  # the result torch allocates: contiguous
            n = b[0][1]
            out.append({"operand": "C", "layout": "vector" if n == 1 else "row-major", "dim": "N",
                        "ld": None if n == 1 else int(n)})
            continue
        (r, cl), (s0, s1) = mat
        if not all(type(v) is int for v in (r, cl, s0, s1)):
            return None
        if cl == 1:
            layout, dim, ld = "vector", cols_dim, None
        elif r == 1:
            layout, dim, ld = "row-major", cols_dim, cl
        elif s1 == 1 and s0 >= max(1, cl):
            layout, dim, ld = "row-major", cols_dim, s0
        elif s0 == 1 and s1 >= max(1, r):
            layout, dim, ld = "transposed", rows_dim, s1
        else:
            layout, dim, ld = "copied", cols_dim, cl
        out.append({"operand": operand, "layout": layout, "dim": dim, "ld": None if ld is None else int(ld)})
    return out


def gemm_flops_from_dims(op: str, dims: list[list[int]]) -> Optional[int]:
    """FLOPs (2·M·K·N per product, times the batch) of one GEMM op from its recorded ``Input Dims``
    (:func:`gemm_dims`); None when the shapes do not fit the op."""
    d = gemm_dims(op, dims)
    return None if d is None else 2 * math.prod(int(x) for x in d)


def is_shapes(v) -> bool:
    """Whether an ``Input Dims`` value is a list of input shapes that tensors can have: each a list of sizes
    (:func:`~profiling_core.analyses._common.is_size`: whole numbers from 0 to below 2^63) whose product, the
    tensor's element count, is a size too (an input without a shape, such as a scalar, has an empty one)."""
    return type(v) is list and all(type(x) is list and all(is_size(y) for y in x) and math.prod(x) < SIZE_LIMIT
                                   for x in v)


def _dims_by_op(tables, ops: dict) -> dict[int, list[list[int]]]:
    """{GEMM op id: its recorded ``Input Dims``} of these {slice id: arg set id (-1: none)}, for the ops whose
    ``Input Dims`` are shapes (:func:`is_shapes`; as the args table shows them, without trailing empty shapes)."""
    want = {sid: a for sid, a in ops.items() if a >= 0}
    values = tables.args.get("Input Dims", set(want.values()))
    return {sid: values[a] for sid, a in want.items() if is_shapes(values.get(a))}


GEMM_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear",
               "aten::_scaled_mm", "aten::_int_mm")
"""The GEMM ops: torch's matmuls, and its low-precision ones, ``_scaled_mm`` (fp8: ``_scaled_mm(self [M, K], mat2
[K, N], scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)``) and ``_int_mm`` (int8 [M, K] @ [K, N],
an int32 result), sized as ``mm`` from their first two inputs."""


def _gemm_slices(sh: Shared) -> dict:
    """The GEMM ops on a thread (not gpu_user_annotation copies), in (ts, id) order, as arrays: id, name, start_ns,
    cpu_dur_ns, arg_set_id (an object array, None for NULL), utid."""
    tb = sh.tables
    t = sh.slices
    m = sh.name_mask(lambda x: x in GEMM_OPS) & (t["utid"] >= 0)
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
    in [ts, end): the sum of their durations (None for none) and their distinct names joined by "," in (launch track,
    launch ts, launch id, kernel id) order; then each (op, kernel pair) as two arrays: the op's position and the
    pair's row of ``sh.p``."""
    n = len(ts)
    kns = np.full(n, None, dtype=object)
    names = np.full(n, None, dtype=object)
    item_ops: list[np.ndarray] = []
    item_pairs: list[np.ndarray] = []
    p = sh.p
    k = np.flatnonzero(p["gpu_category"] == "kernel")
    lu = p["launch_utid"][k]
    k = k[~pd.isna(lu)] if len(k) else k
    if len(k) == 0 or n == 0:
        return kns, names, (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
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
        item_ops.append(ops[which])
        item_pairs.append(lane[item])
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
    items = ((np.concatenate(item_ops), np.concatenate(item_pairs)) if item_ops
             else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
    return kns, names, items


def _gemm_ops_raw(sh: Shared) -> pd.DataFrame:
    """What ``gemm_ops.sql`` returns: each GEMM op, the GEMM ops nested in it on its thread, and the kernel time
    (and distinct kernel names) of the launches inside it on its thread."""
    cols = ["id", "name", "start_ns", "cpu_dur_ns", "arg_set_id", "inner_gemms", "kernel_ns", "kernel_names"]
    gm = _gemm_slices(sh)
    if len(gm["id"]) == 0:
        return frame([], cols)
    ts, dur, utid = gm["start_ns"], gm["cpu_dur_ns"], gm["utid"]
    kns, kn, _items = _kernels_of(sh, ts, ts + dur, utid)
    return frame_cols({"id": gm["id"], "name": gm["name"], "start_ns": ts, "cpu_dur_ns": dur,
                       "arg_set_id": gm["arg_set_id"], "inner_gemms": _inner_gemms(ts, dur, utid),
                       "kernel_ns": kns, "kernel_names": kn})


def check_peak_tflops(peak_tflops) -> Optional[float]:
    """``peak_tflops`` as a float, or None for None; ConfigError, saying what is allowed, for anything that is not a
    positive finite number of TFLOP/s (0, a negative, NaN, infinity, text): a fraction of such a peak means
    nothing."""
    from ..errors import ConfigError
    if peak_tflops is None:
        return None
    try:
        value = float(peak_tflops)
    except (TypeError, ValueError):
        value = float("nan")
    low, high = TFLOPS_LIMITS
    if isinstance(peak_tflops, bool) or not math.isfinite(value) or not low < value <= high:
        raise ConfigError("peak_tflops", peak_tflops, f"a number of TFLOP/s above {format_count(low)} and at most "
                          f"{high:,.0f} "
                          "(the GPU's dense peak for the GEMMs' dtype, e.g. 989 for bf16 on an H100 or H200)")
    return value


def _innermost(sh: Shared):
    """The innermost GEMM ops (positions in ``_gemm_slices``) and :func:`_kernels_of` for them, once per trace. An op
    inside torch.compile's compiler ranges (``Shared.compiler_work``) is the compiler's, not the workload's: it
    traced the graph on fake tensors (no kernel; 6 such ops in the CPU-timed rows of an H100's cold max-autotune
    run) or benchmarked a candidate (its 106 cuBLAS runs), and is left out."""
    def build(sh):
        gm = _gemm_slices(sh)
        ts, dur, utid = gm["start_ns"], gm["cpu_dur_ns"], gm["utid"]
        keep = np.flatnonzero(_inner_gemms(ts, dur, utid) == 0)
        if len(keep) and sh.compiler_work.any():
            keep = keep[~sh.compiler_work[sh.pos(gm["id"][keep])]]
        return (keep, *_kernels_of(sh, ts[keep], ts[keep] + dur[keep], utid[keep]))
    return sh.cached("gemm.innermost", build)


def gemm_kernel_shapes(session, gemm: pd.DataFrame | None = None, shared: Shared | None = None) -> pd.DataFrame:
    """Duration statistics per kernel name *and GEMM shape*: each kernel launch whose call lies inside an innermost
    GEMM op on its thread (as :func:`gemm_throughput` times the op) takes that op's shape from its recorded ``Input
    Dims``. One kernel name can run several shapes (cuBLAS picks one kernel for a range of sizes), so its spread over
    all its launches is partly shape; each shape's own spread is the noise (study question 8). Per launch: an op that
    launched the kernel three times counts three launches, each with its own duration.

    Args:
        session: a trace session.
        gemm: ``gemm_throughput(session)`` when already computed (its ``shape`` and ``flops`` per op id).

    Returns:
        DataFrame, one row per (kernel name, shape, FLOPs): ``name``, ``shape`` (``M×K×N``, ``B × M×K×N``),
        ``flops``, ``count``, ``total_us``, ``mean_us``, ``median_us``, ``min_us``, ``max_us``, ``cv`` (population
        std / mean, as :func:`~profiling_core.analyses.kernels.kernel_stats`); by name, then the largest FLOPs, then
        shape. Launches outside a GEMM op with recorded shapes are left out; empty (same columns) where there are
        none.
    """
    from .kernels import _duration_stats
    sh = shared_for(session, shared)
    cols = ["name", "shape", "flops", "count", "total_us", "mean_us", "median_us", "min_us", "max_us", "cv"]
    g = gemm_throughput(session, shared=sh) if gemm is None else gemm
    g = g[(g["flops_from"].astype(object) == "shapes") & g["shape"].notna()] if len(g) else g
    keep, _kns, _kn, (item_ops, item_pairs) = _innermost(sh)
    if g.empty or not len(item_ops):
        return frame([], cols)
    op_ids = _gemm_slices(sh)["id"][keep][item_ops]
    shaped = pd.Index(g["id"].to_numpy(dtype=np.int64)).get_indexer(op_ids)
    on = shaped >= 0
    if not on.any():
        return frame([], cols)
    shape_codes, shapes = factorize(pd.Series(list(zip(g["shape"].astype(object), g["flops"].astype(object))),
                                              dtype=object).to_numpy()[shaped[on]])
    coded = sh.pair_codes("gpu_name")
    pairs = item_pairs[on]
    name_codes = coded.codes[pairs].astype(np.int64)
    name_codes[name_codes < 0] = len(coded.uniq)  # (a kernel without a name: the None appended below)
    k, st = _duration_stats(name_codes * len(shapes) + shape_codes,
                            sh.p["gpu_dur"][pairs].astype(np.float64) / 1000.0)
    which = (k % len(shapes)).tolist()
    name_uniq = np.append(coded.uniq, None)
    out = pd.DataFrame({"name": pd.Series([name_uniq[c] for c in (k // len(shapes)).tolist()], dtype=object),
                        "shape": pd.Series([shapes[c][0] for c in which], dtype=object),
                        "flops": [shapes[c][1] for c in which], **{c: st[c] for c in cols[3:]}})
    out = out.sort_values(["name", "flops", "shape"], ascending=[True, False, True], kind="stable")
    return out[cols].reset_index(drop=True)


def gemm_throughput(session, peak_tflops: Optional[float] = None, config=None,
                    shared: Shared | None = None) -> pd.DataFrame:
    """Achieved TFLOP/s of each GEMM op whose FLOPs are known.

    GEMM ops are the innermost of aten::mm/bmm/addmm/baddbmm/matmul/linear/_scaled_mm/_int_mm (:data:`GEMM_OPS`;
    an aten::matmul that calls aten::mm counts once, as the mm). FLOPs come from the op's recorded ``Input Dims``
    (record_shapes=True): what ran (torch.compile may pad a shape); where an op recorded none, from
    ``config.gemm_flops()`` when an ``ExperimentConfig`` of the study's matmul_add is given (one GEMM per call).
    The diagnosis's roofline reads them in the same order.
    Time is the summed duration of the GPU kernels the op launched (0 where they were recorded as 0 µs: the
    TFLOP/s is then NaN); where it launched none (a CPU-only trace) it is the op's CPU duration (``device`` says
    which).

    Args:
        session: a trace session.
        peak_tflops: the peak the user sets (e.g. ~989 for a dense bf16 H100/H200); None leaves the fraction NaN;
            ConfigError for one that is not a positive number (:func:`check_peak_tflops`).
        config: an ``ExperimentConfig`` (or its dict) whose ``gemm_flops()`` gives the FLOPs of every GEMM op, or None.

    Returns:
        DataFrame in time order: ``id``, ``op``, ``start_ns``, ``device`` (``gpu`` or ``cpu``), ``time_us``,
        ``flops``, ``tflops``, ``peak_tflops``, ``fraction_of_peak``, ``flops_from`` (``config`` or ``shapes``),
        ``kernel_names``, ``shape`` (``M×K×N`` from the recorded shapes, ``B × M×K×N`` for a batch; None where the
        FLOPs come from the config). Ops whose FLOPs are unknown are left out; empty when none is known. Text columns
        are object columns (see :func:`~profiling_core.analyses.gpu_ops`).
    """
    sh = shared_for(session, shared)
    peak_tflops = check_peak_tflops(peak_tflops)
    cols = ["id", "op", "start_ns", "device", "time_us", "flops", "tflops", "peak_tflops", "fraction_of_peak",
            "flops_from", "kernel_names", "shape"]
    gm = _gemm_slices(sh)
    ts, dur = gm["start_ns"], gm["cpu_dur_ns"]
    keep, kns, kn, _items = _innermost(sh)
    ids, names = gm["id"][keep].tolist(), gm["name"][keep].tolist()
    asid = gm["arg_set_id"][keep].tolist()
    # the study's matmul_add: one GEMM of the config's FLOPs per call; any other workload (gemm_flops() None): shapes
    config = as_config(config)
    cfg_flops = config.gemm_flops() if config is not None else None
    dims = _dims_by_op(sh.tables, {i: -1 if a is None else a for i, a in zip(ids, asid)})
    peak = float(peak_tflops) if peak_tflops else float("nan")
    flops_of: dict = {}  # (op name, its dims object) -> (FLOPs, shape): ops of equal shapes share one dims list
    rows = []
    for op_id, name, start, cpu_ns, kernel_ns, kernel_names in zip(ids, names, ts[keep].tolist(), dur[keep].tolist(),
                                                                   kns.tolist(), kn.tolist()):
        d = dims.get(op_id)
        if d is None:
            flops = shape = None
        else:
            key = (name, id(d))
            if key not in flops_of:
                bmkn = gemm_dims(name, d)
                flops_of[key] = (gemm_flops_from_dims(name, d), None if bmkn is None else gemm_shape_text(*bmkn))
            flops, shape = flops_of[key]
        src = "shapes"
        if flops is None and cfg_flops is not None:
            flops, src, shape = int(cfg_flops), "config", None
        if flops is None:
            continue
        # timed by its kernels wherever it launched any: a kernel recorded as 0 µs (traces with whole-µs times write
        # a short one so) leaves the rate unknown (NaN), not the op's CPU time
        on_gpu = kernel_ns is not None
        time_ns = float(kernel_ns) if on_gpu else float(cpu_ns)
        tflops = flops / time_ns / 1e3 if time_ns > 0 else float("nan")
        rows.append((op_id, name, start, "gpu" if on_gpu else "cpu", time_ns / 1000.0, flops, tflops, peak,
                     tflops / float(peak_tflops) if peak_tflops else float("nan"), src,
                     kernel_names if on_gpu else None, shape))
    if not rows:
        return frame([], cols)
    # numbers as numpy columns; text as object columns holding the same str objects (one per distinct kernel list:
    # inferring a string column would copy each long joined name into every row)
    data = dict(zip(cols, map(list, zip(*rows))))
    for c, dtype in (("id", np.int64), ("start_ns", np.int64), ("time_us", np.float64), ("tflops", np.float64),
                     ("peak_tflops", np.float64), ("fraction_of_peak", np.float64)):
        data[c] = np.array(data[c], dtype=dtype)
    if max(data["flops"]) < (1 << 63):
        data["flops"] = np.array(data["flops"], dtype=np.int64)
    return frame_cols(data)
