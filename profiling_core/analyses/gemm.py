"""Achieved GEMM throughput where the FLOPs are known (from the experiment config or recorded shapes)."""
from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from typing import Optional

import numpy as np
import pandas as pd

from ._common import ints, nullable_int, run_query
from ._shared import Shared, frame, shared_for

__all__ = ["gemm_throughput", "gemm_flops_from_dims"]

_KEY = re.compile(r"\[(\d+)\]\[(\d+)\]$")


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


def _dims_by_op(session) -> dict[int, list[list[int]]]:
    from ..queries import load_query
    cols, data = session.query_columns(load_query("gemm_shapes"))
    d = dict(zip(cols, data))
    out: dict[int, dict[int, dict[int, int]]] = {}
    search = _KEY.search
    for sid, key, val in zip(d["id"], d["key"], d["int_value"]):
        if val is None or val != val:
            continue
        m = search(str(key))
        if m is None:
            continue
        out.setdefault(int(sid), {}).setdefault(int(m.group(1)), {})[int(m.group(2))] = int(val)
    # inputs without dims (scalars, empty lists) have no rows: keep every input at its own position
    return {sid: [[inp[i][j] for j in sorted(inp[i])] if i in inp else [] for i in range(max(inp) + 1)]
            for sid, inp in out.items()}


def _gemm_ops_raw(sh: Shared) -> pd.DataFrame:
    """What ``gemm_ops.sql`` returns: each GEMM op, the GEMM ops nested in it on its thread, and the kernel time
    (and distinct kernel names) of the launches inside it on its thread."""
    cols = ["id", "name", "start_ns", "cpu_dur_ns", "arg_set_id", "inner_gemms", "kernel_ns", "kernel_names"]
    gm = run_query(sh.session, "gemm_slices")
    if gm.empty:
        return frame([], cols)
    ids, utids, names = gm["id"].tolist(), gm["utid"].tolist(), gm["name"].tolist()
    ts, dur, asid = gm["start_ns"].tolist(), gm["cpu_dur_ns"].tolist(), gm["arg_set_id"].tolist()
    by_utid: dict = {}
    for j, u in enumerate(utids):
        by_utid.setdefault(u, []).append(j)
    inner = [0] * len(ids)
    for js in by_utid.values():
        js.sort(key=lambda j: ts[j])
        starts = [ts[j] for j in js]
        for j in js:
            end = ts[j] + dur[j]
            inner[j] = sum(1 for jj in js[bisect_left(starts, ts[j]):bisect_right(starts, end)]
                           if jj != j and ts[jj] + dur[jj] <= end)
    # kernel pairs (launch side) by thread, in the order SQLite visits them: launch track, launch ts, launch, kernel
    p = sh.p
    k = np.flatnonzero(p["gpu_category"] == "kernel")
    k = k[np.array([u is not None for u in p["launch_utid"][k].tolist()], dtype=bool)]
    k = k[np.lexsort((p["gpu_id"][k], p["launch_id"][k], p["launch_ts"][k], p["launch_track_id"][k]))]
    kb: dict = {}
    for u, i in zip(p["launch_utid"][k].tolist(), k.tolist()):
        kb.setdefault(u, []).append(i)
    lanes = {}
    for u, v in kb.items():
        idx = np.array(v, dtype=np.int64)
        by_ts = np.argsort(p["launch_ts"][idx], kind="stable")
        lanes[u] = (idx, by_ts, p["launch_ts"][idx][by_ts])
    gpu_dur, gpu_name = p["gpu_dur"], p["gpu_name"]
    rows = []
    for j in range(len(ids)):
        u, b, e = utids[j], ts[j], ts[j] + dur[j]
        kns, kn = None, None
        lane = lanes.get(u)
        if lane is not None:
            idx, by_ts, lts = lane
            lo, hi = np.searchsorted(lts, (b, e), side="left")
            if hi > lo:
                sel = idx[np.sort(by_ts[lo:hi])]
                kns = int(gpu_dur[sel].sum())
                kn = ",".join(dict.fromkeys(gpu_name[sel].tolist()))
        rows.append((ids[j], names[j], b, dur[j], asid[j], inner[j], kns, kn))
    return frame(rows, cols)


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
        ``kernel_names``. Ops whose FLOPs are unknown are left out; empty when none is known.
    """
    ops = _gemm_ops_raw(shared_for(session, shared))
    ops = ints(ops, "id", "inner_gemms")
    ops = nullable_int(ops, "start_ns")
    ops = ops[ops["inner_gemms"] == 0]
    dims = _dims_by_op(session) if config is None else {}
    rows = []
    for r in ops.itertuples(index=False):
        if config is not None:
            flops, src = int(config.gemm_flops()), "config"
        else:
            flops, src = (gemm_flops_from_dims(r.name, dims[r.id]) if r.id in dims else None), "shapes"
        if flops is None:
            continue
        kernel_ns = pd.to_numeric(r.kernel_ns, errors="coerce")
        on_gpu = not pd.isna(kernel_ns) and kernel_ns > 0
        time_ns = float(kernel_ns) if on_gpu else float(r.cpu_dur_ns)
        tflops = flops / time_ns / 1e3 if time_ns > 0 else float("nan")
        rows.append({
            "id": r.id, "op": r.name, "start_ns": r.start_ns, "device": "gpu" if on_gpu else "cpu",
            "time_us": time_ns / 1000.0, "flops": flops, "tflops": tflops,
            "peak_tflops": float(peak_tflops) if peak_tflops else float("nan"),
            "fraction_of_peak": tflops / float(peak_tflops) if peak_tflops else float("nan"),
            "flops_from": src, "kernel_names": r.kernel_names if on_gpu else None,
        })
    cols = ["id", "op", "start_ns", "device", "time_us", "flops", "tflops", "peak_tflops", "fraction_of_peak",
            "flops_from", "kernel_names"]
    return pd.DataFrame(rows, columns=cols)
