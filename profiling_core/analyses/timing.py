"""Where CPU time goes before and after the GPU work: cold start and synchronisation (study questions 3 and 7)."""
from __future__ import annotations

import pandas as pd

import numpy as np

from ._common import ints, nullable_int, us
from ._shared import Shared, frame, shared_for
from .compile import COMPILED_GRAPH_CALL

__all__ = ["cold_start_gap", "sync_wait"]


_COLD_COLS = ["step", "region_id", "region_start_ns", "region_dur_ns", "first_child", "first_child_start_ns",
              "first_aten", "first_aten_start_ns"]


def _first(rows: np.ndarray, t: dict, names: np.ndarray):
    """(name, ts) of the first of ``rows`` by (ts, depth, id); (None, None) for no rows."""
    if len(rows) == 0:
        return None, None
    k = int(np.lexsort((t["id"][rows], t["depth"][rows], t["ts"][rows]))[0])
    return names[k], int(t["ts"][rows[k]])


def _cold_start_rows(sh: Shared) -> list[tuple]:
    """One row per ``matmul_add`` region on a thread (not a gpu_user_annotation copy), in (ts, id) order: the step
    holding its start (the first such step in (ts, id) order, None outside steps), its window, and the first slice and
    the first aten:: op inside it on its thread (deeper than it, within its window; first by (ts, depth, id))."""
    t = sh.slices
    reg = sh.name_mask(lambda x: x == "matmul_add") & (t["utid"] >= 0)
    if not reg.any():
        return []
    reg &= sh.cat_mask(lambda c: c != "gpu_user_annotation")
    regions = np.flatnonzero(reg)  # in id order: a stable sort by ts gives (ts, id)
    if len(regions) == 0:
        return []
    regions = regions[np.argsort(t["ts"][regions], kind="stable")]
    steps = [r for r in sh.steps_list if r[6] is not None]
    st_num = [r[1] for r in steps]
    st_ts = np.array([r[3] for r in steps], dtype=np.int64)
    st_end = st_ts + np.array([r[4] for r in steps], dtype=np.int64)
    st_utid = np.array([r[6] for r in steps], dtype=np.int64)
    lanes = {}
    for u in set(t["utid"][regions].tolist()):
        idx = np.flatnonzero(t["utid"] == u)
        idx = idx[np.argsort(t["ts"][idx], kind="stable")]
        lanes[u] = (idx, t["ts"][idx])
    aten = sh.name_mask(lambda x: isinstance(x, str) and x.startswith("aten::"))
    rows = []
    for r in regions.tolist():
        rid, ts, dur, depth, u = int(t["id"][r]), int(t["ts"][r]), int(t["dur"][r]), int(t["depth"][r]), \
            int(t["utid"][r])
        holding = np.flatnonzero((st_utid == u) & (st_ts <= ts) & (ts < st_end))
        idx, lts = lanes[u]
        lo = int(np.searchsorted(lts, ts, side="left"))
        hi = int(np.searchsorted(lts, ts + dur, side="right"))
        inner = idx[lo:hi]  # starts within [ts, ts + dur]
        inner = inner[(t["id"][inner] != rid) & (t["ts"][inner] + t["dur"][inner] <= ts + dur)
                      & (t["depth"][inner] > depth)]
        names = sh.names_at(inner)
        m = aten[inner]
        rows.append((st_num[int(holding[0])] if len(holding) else None, rid, ts, dur, *_first(inner, t, names),
                     *_first(inner[m], t, names[m])))
    return rows


def cold_start_gap(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per ``matmul_add`` region (the study's ``record_function``): the time from its start to its first aten:: op.

    A long gap in the first profiled step is the cold-start cost (workspace allocation, cuBLAS heuristics, lazy
    module loading); with torch.compile the first aten:: op sits below the Dynamo/AOT wrappers.

    Args:
        session: a trace session.
        shared: the shared pieces of ``analyze`` (computed here when not given).

    Returns:
        DataFrame in time order: ``step`` (NA outside steps), ``region_id``, ``region_start_ns``,
        ``region_dur_us``, ``first_child``, ``first_child_gap_us`` (region start → its first child),
        ``first_aten``, ``gap_us`` (region start → first aten:: op inside it; NaN when there is none).
        Empty when the trace has no ``matmul_add`` region.
    """
    df = frame(_cold_start_rows(shared_for(session, shared)), _COLD_COLS)
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


def sync_wait(session, shared: Shared | None = None) -> pd.DataFrame:
    """Each synchronize call (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cu*/hip* kin).

    Args:
        session: a trace session.

    Returns:
        DataFrame in time order: ``id``, ``name``, ``start_ns``, ``dur_us``, ``gpu_busy_us`` (union of GPU op
        intervals inside the call), ``unrecorded_us`` (the time inside the call a GPU spent on work the trace does
        not hold, where no recorded op ran: ``Shared.unrecorded_waits``), ``gpu_ops`` (ops overlapping it),
        ``idle_pct`` (100 × (1 − (busy + unrecorded) / dur)), ``gpu_tail_us`` (call start → end of the last GPU op
        it waited for; NaN when none), ``compiler`` (the call is torch.compile's compiler's own,
        ``Shared.compiler_work``: its benchmarks' synchronisations under max-autotune), ``compiled_call`` (the call
        lies inside a call of a torch.compile'd graph, ``## Call CompiledFxGraph …``, in its parent chain: made by
        the compiled code or by the CUDA-graph runtime around it, which synchronises while it records a graph).
    """
    sh = shared_for(session, shared)
    df = ints(sh.sync_waits.copy(), "id", "gpu_ops")
    start, dur = df["start_ns"].to_numpy(dtype=np.int64), df["dur_ns"].to_numpy(dtype=np.int64)
    df["unrecorded_us"] = sh.unrecorded_in(start, start + dur) / 1000.0
    df = nullable_int(df, "start_ns", "last_gpu_end_ns")
    df["gpu_tail_us"] = (df["last_gpu_end_ns"] - df["start_ns"]).astype("Float64").astype("float64") / 1000.0
    df = us(df, {"dur_ns": "dur_us", "gpu_busy_ns": "gpu_busy_us"})
    den = df["dur_us"].where(df["dur_us"] > 0)
    df["idle_pct"] = (100.0 * (1.0 - (df["gpu_busy_us"] + df["unrecorded_us"]) / den)).fillna(100.0)
    df["name"] = df["name"].astype("object")
    rows = sh.pos(df["id"].to_numpy(dtype=np.int64)) if len(df) else np.zeros(0, dtype=np.int64)
    df["compiler"] = sh.compiler_work[rows] if len(df) else np.zeros(0, bool)
    df["compiled_call"] = (sh.under(rows, sh.name_mask(lambda u: isinstance(u, str)
                                                      and u.startswith(COMPILED_GRAPH_CALL)))
                           if len(df) else np.zeros(0, bool))
    return df[["id", "name", "start_ns", "dur_us", "gpu_busy_us", "unrecorded_us", "gpu_ops", "idle_pct",
               "gpu_tail_us", "compiler", "compiled_call"]]
