"""GPU kernel durations: statistics per kernel name and per step (study question 8)."""
from __future__ import annotations

import pandas as pd

import numpy as np

from ._common import nullable_int, us
from ._shared import Shared, shared_for

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
    i, k = sh.pair_steps
    p = sh.p
    if len(i):
        m = p["gpu_category"][i] == "kernel"
        i, k = i[m], k[m]
    if len(i):
        order = np.lexsort((p["gpu_id"][i], p["gpu_ts"][i]))  # ORDER BY g.ts, g.id (stable: step order, then pair)
        i, k = i[order], k[order]
        gpu_id, start, dur = p["gpu_id"][i], p["gpu_ts"][i], p["gpu_dur"][i]
    else:
        gpu_id = start = dur = np.zeros(0, dtype=np.int64)
    # a step named "ProfilerStep#" without digits has no number: 0, as a NULL count is elsewhere
    numbers = np.array([0 if r[1] is None else r[1] for r in sh.steps_list], dtype=np.int64)
    step = numbers[k]
    name = sh.pair_codes("gpu_name").take(i)
    # occurrence (the how-manieth launch of its name in its step, in time order): each (step, name) run of one
    # stable sort, a NULL name (code -1) a name of its own
    _, step_code = np.unique(step, return_inverse=True)
    key = step_code.reshape(-1) * (len(name.uniq) + 1) + (name.codes + 1)
    by_key = np.argsort(key, kind="stable")
    sk = key[by_key]
    first = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if len(sk) else np.zeros(0, dtype=np.int64)
    occurrence = np.empty(len(key), dtype=np.int64)
    occurrence[by_key] = np.arange(len(key)) - np.repeat(first, np.diff(np.r_[first, len(key)]))
    return pd.DataFrame({"step": step, "name": pd.Series(name.values(), dtype=object),
                         "occurrence": occurrence, "gpu_id": gpu_id.astype(np.int64),
                         "start_ns": pd.array(start, dtype="Int64"), "dur_us": dur.astype(np.float64) / 1000.0,
                         "launch_name": pd.Series(sh.pair_codes("launch_name").take(i).values(), dtype=object)})
