"""GPU kernel durations: statistics per kernel name and per step (study question 8)."""
from __future__ import annotations

import pandas as pd

import numpy as np

from ._common import is_size, nullable_int, us
from ._shared import Shared, factorize, shared_for

__all__ = ["kernel_stats", "kernel_configs", "kernel_durations_by_step", "gpu_ops"]


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
    codes, names = factorize(k["name"], use_na_sentinel=False)
    first, st = _duration_stats(codes.astype(np.int64), k["dur_us"].to_numpy(dtype=np.float64))
    out = pd.DataFrame({"name": pd.Series(np.asarray(names, dtype=object)[first], dtype=object), **st})
    out = out.sort_values(["total_us", "name"], ascending=[False, True], kind="stable")
    return out[cols].reset_index(drop=True)


def _duration_stats(key: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per distinct ``key`` (int64, in ascending order): (that key, and the columns ``count``, ``total_us``,
    ``mean_us``, ``median_us``, ``min_us``, ``max_us``, ``std_us`` (population: 0 for a single launch, and for
    launches of one duration), ``cv`` (std / mean, NaN for a zero mean)) of the durations ``dur`` (µs). One sort by
    (key, duration): each group's min, max and median are positions in its run."""
    order = np.lexsort((dur, key))
    key, dur = key[order], dur[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    n = np.diff(np.r_[starts, len(key)])
    total = np.add.reduceat(dur, starts)
    mean = total / n
    lo, hi = dur[starts], dur[starts + n - 1]
    d = dur - np.repeat(lo, n)  # (shifted to each group's minimum: the moments of small numbers, no cancellation
    m1 = np.add.reduceat(d, starts) / n  # of large ones)
    std = np.where(lo == hi, 0.0, np.sqrt(np.maximum(np.add.reduceat(d * d, starts) / n - m1 * m1, 0.0)))
    median = (dur[starts + (n - 1) // 2] + dur[starts + n // 2]) / 2
    return key[starts], {"count": n.astype(np.int64), "total_us": total, "mean_us": mean, "median_us": median,
                         "min_us": lo, "max_us": hi, "std_us": std,
                         "cv": np.where(mean > 0, std / np.where(mean > 0, mean, 1.0), np.nan)}


def _key(v):
    """A ``grid`` or ``block`` arg as a hashable key: a size (:func:`~profiling_core.analyses._common.is_size`: a
    whole number from 0 to below 2^63), or a non-empty list of them (a list in it too, as another tool may write) as
    a tuple. Anything else (a string, a fraction, true or false, a negative number, an empty list) is no launch
    configuration: None, as where the kernel has none."""
    if type(v) is list and v and all(map(is_size, v)):  # (what Kineto writes)
        return tuple(v)
    if isinstance(v, list):
        parts = tuple(_key(x) for x in v)
        return parts if parts and None not in parts else None
    return v if is_size(v) else None


def _config_text(v):
    """A ``grid`` or ``block`` key (:func:`_key`) as text (``(64, 1, 1)`` as ``64×1×1``); None where the kernel has
    none."""
    if v is None:
        return None
    if not isinstance(v, tuple):
        return str(v)
    return "×".join(f"({_config_text(x)})" if isinstance(x, tuple) else str(x) for x in v)


def kernel_configs(session, shared: Shared | None = None) -> pd.DataFrame:
    """Duration statistics per kernel name *and launch configuration*: its ``grid`` and ``block``, as Kineto records
    them in each kernel's args. Launches of one name in another configuration do another amount of work (an
    elementwise kernel over a larger tensor, a fused optimizer's chunks, a split-K reduction), so a name's spread
    over all its launches (:func:`kernel_stats`) mixes work with noise; each configuration's own spread is the noise
    (study question 8).

    Returns:
        DataFrame, one row per (name, grid, block) of the kernels (category kernel) of :func:`gpu_ops`: ``name``,
        ``grid``, ``block`` (text such as ``"64×1×1"``, None where the trace records none or no whole numbers),
        ``count``, ``total_us``, ``mean_us``, ``median_us``, ``min_us``, ``max_us``, ``cv`` (population std / mean,
        as :func:`kernel_stats`); the largest total first (ties by name, grid, block). Empty (same columns) on traces
        without kernels.
    """
    sh = shared_for(session, shared)
    cols = ["name", "grid", "block", "count", "total_us", "mean_us", "median_us", "min_us", "max_us", "cv"]
    i = sh.gpu_lane_rows()
    i = i[sh.cats_at(i) == "kernel"]
    if not len(i):
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("name", "grid", "block") else "float64")
                             for c in cols})
    tb, t = sh.tables, sh.slices
    ids = tb.arg_set_id[i]
    got = tb.args.get_many(["grid", "block"], np.unique(ids[ids >= 0]).tolist())
    grid, block = got["grid"], got["block"]
    configs: dict = {}  # (grid, block) -> its code, in order of first appearance
    # Keyed once per pair of value objects: the args reader hands out one list per distinct text (thousands of
    # kernels, tens of configurations); the values are held by ``got`` meanwhile, so an id names one object.
    made: dict = {}
    per_set = {}
    for a in grid.keys() | block.keys():
        g, b = grid.get(a), block.get(a)
        code = made.get((id(g), id(b)))
        if code is None:
            code = made[(id(g), id(b))] = configs.setdefault((_key(g), _key(b)), len(configs))
        per_set[a] = code
    none = configs.setdefault((None, None), len(configs))
    cfg = np.array([per_set.get(a, none) for a in ids.tolist()], dtype=np.int64)
    k, st = _duration_stats(t["name_codes"][i].astype(np.int64) * len(configs) + cfg,
                            t["dur"][i].astype(np.float64) / 1000.0)
    texts = [(_config_text(g), _config_text(b)) for g, b in configs]
    names = t["name_uniq"]
    which = (k % len(configs)).tolist()
    out = pd.DataFrame({"name": pd.Series([names[c] for c in (k // len(configs)).tolist()], dtype=object),
                        "grid": pd.Series([texts[c][0] for c in which], dtype=object),
                        "block": pd.Series([texts[c][1] for c in which], dtype=object), **st})
    out = out.sort_values(["total_us", "name", "grid", "block"], ascending=[False, True, True, True], kind="stable",
                          na_position="last")
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
    numbers = np.array([r[1] for r in sh.steps_list], dtype=np.int64)
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
