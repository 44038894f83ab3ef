"""Where CPU time goes before and after the GPU work: cold start and synchronisation (study questions 3 and 7)."""
from __future__ import annotations

import pandas as pd

import numpy as np

from ._common import ints, nullable_int, run_query, us
from ._shared import Shared, frame, shared_for, union_ns

__all__ = ["cold_start_gap", "sync_wait"]


def cold_start_gap(session) -> pd.DataFrame:
    """Per ``matmul_add`` region (the study's ``record_function``): the time from its start to its first aten:: op.

    A long gap in the first profiled step is the cold-start cost (workspace allocation, cuBLAS heuristics, lazy
    module loading); with torch.compile the first aten:: op sits below the Dynamo/AOT wrappers.

    Args:
        session: a trace session.

    Returns:
        DataFrame in time order: ``step`` (NA outside steps), ``region_id``, ``region_start_ns``,
        ``region_dur_us``, ``first_child``, ``first_child_gap_us`` (region start → its first child),
        ``first_aten``, ``gap_us`` (region start → first aten:: op inside it; NaN when there is none).
        Empty when the trace has no ``matmul_add`` region.
    """
    df = run_query(session, "cold_start_gap")
    df = ints(df, "region_id")
    df = nullable_int(df, "step", "region_start_ns", "first_child_start_ns", "first_aten_start_ns")
    df["first_child_gap_us"] = (df["first_child_start_ns"] - df["region_start_ns"]).astype("Float64").astype(
        "float64") / 1000.0
    df["gap_us"] = (df["first_aten_start_ns"] - df["region_start_ns"]).astype("Float64").astype("float64") / 1000.0
    df = us(df, {"region_dur_ns": "region_dur_us"})
    for c in ("first_child", "first_aten"):
        df[c] = df[c].astype("object")
    return df[["step", "region_id", "region_start_ns", "region_dur_us", "first_child", "first_child_gap_us",
               "first_aten", "gap_us"]]


def _sync_wait_raw(sh: Shared) -> pd.DataFrame:
    """What ``sync_wait.sql`` returns, from the sync calls and the shared GPU op intervals."""
    cols = ["id", "name", "start_ns", "dur_ns", "gpu_busy_ns", "gpu_ops", "last_gpu_end_ns"]
    calls = run_query(sh.session, "sync_calls")
    rows = []
    for sid, name, ts, dur in zip(calls["id"].tolist(), calls["name"].tolist(), calls["ts"].tolist(),
                                  calls["dur"].tolist()):
        end = ts + dur
        b, e = sh.ops_overlapping(ts, end)
        n = len(b)
        busy = union_ns(np.maximum(b, ts), np.minimum(e, end)) if n else 0
        rows.append((sid, name, ts, dur, busy, n, int(e.max()) if n else None))
    return frame(rows, cols)


def sync_wait(session, shared: Shared | None = None) -> pd.DataFrame:
    """Each synchronize call (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cu*/hip* kin).

    Args:
        session: a trace session.

    Returns:
        DataFrame in time order: ``id``, ``name``, ``start_ns``, ``dur_us``, ``gpu_busy_us`` (union of GPU op
        intervals inside the call), ``gpu_ops`` (ops overlapping it), ``idle_pct`` (100 × (1 − busy / dur)),
        ``gpu_tail_us`` (call start → end of the last GPU op it waited for; NaN when none).
    """
    df = _sync_wait_raw(shared_for(session, shared))
    df = ints(df, "id", "gpu_ops")
    df = nullable_int(df, "start_ns", "last_gpu_end_ns")
    df["gpu_tail_us"] = (df["last_gpu_end_ns"] - df["start_ns"]).astype("Float64").astype("float64") / 1000.0
    df = us(df, {"dur_ns": "dur_us", "gpu_busy_ns": "gpu_busy_us"})
    den = df["dur_us"].where(df["dur_us"] > 0)
    df["idle_pct"] = (100.0 * (1.0 - df["gpu_busy_us"] / den)).fillna(100.0)
    df["name"] = df["name"].astype("object")
    return df[["id", "name", "start_ns", "dur_us", "gpu_busy_us", "gpu_ops", "idle_pct", "gpu_tail_us"]]
