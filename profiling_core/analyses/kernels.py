"""GPU kernel durations: statistics per kernel name and per step (study question 8)."""
from __future__ import annotations

import pandas as pd

import numpy as np

from ._common import ints, nullable_int, us
from ._shared import Shared, frame, frame_cols, shared_for

__all__ = ["kernel_stats", "kernel_durations_by_step", "gpu_ops"]


def gpu_ops(session, shared: Shared | None = None) -> pd.DataFrame:
    """Every GPU op of the trace (kernels, memcpys, memsets) in time order.

    Args:
        session: a trace session.

    Returns:
        DataFrame with ``id``, ``name``, ``category`` (lower case), ``start_ns``, ``dur_us``, ``device`` (the GPU
        lane's pid), ``stream`` (its tid). Empty on CPU-only traces. ``name`` and ``category`` are object columns,
        as in the other one-row-per-event frames (``launch_latency``, ``dispatch_chains``): each distinct kernel
        name is held once, not copied into every row (a string column would copy it per row: 10 MiB for the 28k
        GPU ops of a 93 MB trace).
    """
    df = shared_for(session, shared).gpu_ops_raw.copy()
    df = nullable_int(df, "start_ns", "device", "stream")
    for c in ("name", "category"):
        df[c] = df[c].astype("object")
    return us(df, {"dur_ns": "dur_us"})


def kernel_stats(session, ops: pd.DataFrame | None = None) -> pd.DataFrame:
    """Duration statistics per GPU kernel name over the whole trace (category kernel only).

    Args:
        session: a trace session.
        ops: the result of :func:`gpu_ops` when already computed.

    Returns:
        DataFrame, one row per kernel name sorted by total time (largest first): ``name``, ``count``,
        ``total_us``, ``mean_us``, ``median_us``, ``min_us``, ``max_us``, ``std_us`` (population standard
        deviation, 0 for a single launch), ``cv`` (std / mean). Empty on traces without kernels.
    """
    df = gpu_ops(session) if ops is None else ops
    k = df.loc[df["category"] == "kernel", ["name", "dur_us"]]  # only the columns used
    cols = ["name", "count", "total_us", "mean_us", "median_us", "min_us", "max_us", "std_us", "cv"]
    if k.empty:
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "name" else "float64") for c in cols})
    g = k.groupby(k["name"].astype("object"), sort=False)["dur_us"]
    out = pd.DataFrame({
        "count": g.count(), "total_us": g.sum(), "mean_us": g.mean(), "median_us": g.median(),
        "min_us": g.min(), "max_us": g.max(), "std_us": g.std(ddof=0).fillna(0.0),
    })
    out["cv"] = out["std_us"] / out["mean_us"].where(out["mean_us"] > 0)
    out = out.reset_index().sort_values(["total_us", "name"], ascending=[False, True], kind="stable")
    out["count"] = out["count"].astype("int64")
    return out[cols].reset_index(drop=True)


def _per_step_kernels_raw(sh: Shared, kernels_only: bool = False) -> pd.DataFrame:
    """What ``per_step_kernels.sql`` returns: one row per (GPU op, step whose window holds its launch call).

    ``kernels_only``: only its rows of category kernel (when there is one; else all rows, so that an empty result
    keeps the column types the full result has)."""
    cols = ["step", "gpu_id", "name", "category", "start_ns", "dur_ns", "launch_name", "launch_ns"]
    i, k = sh.pair_steps
    if len(i) == 0:
        return frame([], cols)
    p = sh.p
    if kernels_only:
        m = p["gpu_category"][i] == "kernel"
        if m.any():
            i, k = i[m], k[m]
    order = np.lexsort((p["gpu_id"][i], p["gpu_ts"][i]))  # ORDER BY g.ts, g.id (stable: step order, then pair)
    i, k = i[order], k[order]
    step_n = np.array([r[1] for r in sh.steps_list], dtype=object)[k]
    return frame_cols({"step": step_n, "gpu_id": p["gpu_id"][i], "name": sh.pair_codes("gpu_name").take(i),
                       "category": sh.pair_codes("gpu_category").take(i), "start_ns": p["gpu_ts"][i],
                       "dur_ns": p["gpu_dur"][i], "launch_name": sh.pair_codes("launch_name").take(i),
                       "launch_ns": p["launch_ts"][i]})


def _kernel_durations_by_step_fast(sh: Shared) -> pd.DataFrame | None:
    """``kernel_durations_by_step`` from the arrays, when there are kernel rows with names and integer step
    numbers (None otherwise: the frame path decides the dtypes of the rest). ``occurrence`` (``groupby(["step",
    "name"]).cumcount()``): each row's position among the rows of its (step, name), from one stable sort."""
    i, k = sh.pair_steps
    p = sh.p
    if len(i) == 0:
        return None
    m = p["gpu_category"][i] == "kernel"
    if not m.any():
        return None
    i, k = i[m], k[m]
    order = np.lexsort((p["gpu_id"][i], p["gpu_ts"][i]))  # ORDER BY g.ts, g.id (stable: step order, then pair)
    i, k = i[order], k[order]
    numbers = [r[1] for r in sh.steps_list]
    name = sh.pair_codes("gpu_name").take(i)
    if not all(type(x) is int for x in numbers) or (name.codes < 0).any():
        return None
    step = np.array(numbers, dtype=np.int64)[k]
    _, step_code = np.unique(step, return_inverse=True)
    key = step_code * (len(name.uniq) + 1) + name.codes
    by_key = np.argsort(key, kind="stable")
    sk = key[by_key]
    start = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])  # each (step, name) run in the sorted order
    occurrence = np.empty(len(key), dtype=np.int64)
    occurrence[by_key] = np.arange(len(key)) - np.repeat(start, np.diff(np.r_[start, len(key)]))
    df = frame_cols({"step": step, "name": name, "occurrence": occurrence, "gpu_id": p["gpu_id"][i],
                     "start_ns": p["gpu_ts"][i], "dur_us": p["gpu_dur"][i].astype("float64") / 1000.0,
                     "launch_name": sh.pair_codes("launch_name").take(i)})
    df["start_ns"] = pd.array(df["start_ns"].to_numpy(), dtype="Int64")
    return df


def kernel_durations_by_step(session, shared: Shared | None = None) -> pd.DataFrame:
    """Long table of kernel durations per step, for charting the spread of one kernel over steps.

    A kernel belongs to the step whose window holds its launch call.

    Args:
        session: a trace session.

    Returns:
        DataFrame with ``step``, ``name``, ``occurrence`` (0 for the first launch of that name in the step),
        ``gpu_id``, ``start_ns``, ``dur_us``, ``launch_name``, in time order. Empty without steps or kernels.
        ``name`` and ``launch_name`` are object columns (see :func:`gpu_ops`: one row per kernel launch, so a
        string column would copy each long kernel name into every row).
    """
    sh = shared_for(session, shared)
    fast = _kernel_durations_by_step_fast(sh)
    if fast is not None:
        return fast
    df = _per_step_kernels_raw(sh, kernels_only=True)
    keep = df["category"].astype("object") == "kernel"
    df = df if keep.all() and len(df) else df[keep].copy()
    df = ints(df, "step", "gpu_id")
    df = nullable_int(df, "start_ns")
    df = us(df, {"dur_ns": "dur_us"})
    df["occurrence"] = df.groupby(["step", "name"]).cumcount().astype("int64")
    for c in ("name", "launch_name"):
        df[c] = df[c].astype("object")
    return df[["step", "name", "occurrence", "gpu_id", "start_ns", "dur_us", "launch_name"]].reset_index(drop=True)
