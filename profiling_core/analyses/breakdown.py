"""Where a step's time goes on the GPU, by category of GPU op, and the kernels that take it (issue 14, item 3).

Categories come from each GPU op's name and trace category by the rules of :mod:`.categories` (the same rules the
diagnosis uses for GEMMs), so two runs' breakdowns have the same rows in the same order and compare directly.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from ._common import ratio
from ._shared import Shared, frame, frame_cols, shared_for
from .categories import BREAKDOWN_CATEGORIES, GPU_OP_CATEGORIES
from .steps import measured_steps, steps

__all__ = ["step_breakdown", "category_totals", "top_kernels"]

_BREAKDOWN_COLS = ["step", "category", "time_us", "share", "busy_us", "overlapped_us", "window_us"]


def step_breakdown(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per step, the GPU's time by category of GPU op, the time it spent on work the trace does not hold, and its
    idle time.

    A step's window is :func:`gpu_busy`'s: from the start of its ``ProfilerStep#N`` slice (the CPU one) to the later
    of the slice's end and the end of the GPU work launched inside it, so that the GPU work of an asynchronous step
    (the CPU running ahead of the GPU) is counted with its step; and where a window starts inside an earlier
    step's, it starts at that window's end instead, so the windows do not overlap and together make the
    ``steps`` scope's window of :func:`gpu_busy`. Every GPU op interval (kernel, memcpy, memset; on any stream,
    whatever launched it) is clipped to the window; their union is the step's GPU busy time. Of the rest of the
    window, ``unrecorded`` is where a GPU's first recorded op waited behind work the trace does not hold (queued
    before the recording began: :attr:`Shared.unrecorded_waits` states the rule), and ``idle`` what remains. Where
    ops of several categories overlap (several streams), an instant counts once, for the first category running in
    the order of ``GPU_OP_CATEGORIES``: gemm, convolution, attention, elementwise, other, memcpy, memset,
    communication. So compute hides copies and copies hide communication, and ``communication`` is the
    communication nothing else overlapped (exposed); ``busy_us`` gives each category's own time, overlaps included.

    Args:
        session: a trace session.

    Returns:
        DataFrame, one row per (step, category) for every step in time order and every category in
        ``BREAKDOWN_CATEGORIES`` order (the ``GPU_OP_CATEGORIES``, then ``unrecorded`` and ``idle``; zero rows
        included, so that runs line up): ``step`` (N), ``category``, ``time_us`` (the time attributed to it; a step's
        ``time_us`` add up to its window), ``share`` (``time_us / window_us``), ``busy_us`` (the union of the
        category's own ops in the window; ``unrecorded`` and ``idle``: their time), ``overlapped_us`` (``busy_us −
        time_us``: the time it ran under an earlier category), ``window_us`` (the length of the step's window).
        Empty (same columns) without steps, and on a trace without a GPU op (no GPU lane: there is no GPU time to
        break down, and no GPU that sat idle).
    """
    sh = shared_for(session, shared)
    st = sh.steps_list
    if not st or not len(sh.gpu_rows):  # (no GPU lane: no GPU time to break down, not an idle GPU)
        return frame([], _BREAKDOWN_COLS)
    g, w = sh.step_gpu_time, sh.step_windows
    kk = len(BREAKDOWN_CATEGORIES)
    window = w["hi"] - w["lo"]
    idle = window - g["busy"] - g["unrecorded"]
    time = np.column_stack([g["time"], g["unrecorded"], idle])
    own = np.column_stack([g["own"], g["unrecorded"], idle])
    cats = np.array(BREAKDOWN_CATEGORIES, dtype=object)
    df = frame_cols({"step": np.repeat(np.array([r[1] for r in st], dtype=object), kk),
                     "category": np.tile(cats, len(st)),
                     "time_us": time.reshape(-1).astype("float64") / 1000.0,
                     "busy_us": own.reshape(-1).astype("float64") / 1000.0,
                     "window_us": np.repeat(window, kk).astype("float64") / 1000.0})
    if all(type(x) is int for x in df["step"].tolist()):
        df["step"] = df["step"].astype("int64")
    df["share"] = ratio(df["time_us"], df["window_us"])
    df["overlapped_us"] = df["busy_us"] - df["time_us"]
    return df[_BREAKDOWN_COLS]


def category_totals(breakdown: pd.DataFrame, steps_df: pd.DataFrame) -> pd.DataFrame:
    """A run's breakdown over the steps every per-step figure reads: one row per category in
    ``BREAKDOWN_CATEGORIES`` order.

    The steps are the steady state's (:func:`~profiling_core.analyses.steps.measured_steps` of ``steps_df``), as
    for the summary's GPU work per step: a cold first step or a step in which torch.compile's compiler ran would
    otherwise put its compile time in every category's mean (an H100's cold max-autotune run: 184.3 ms of GEMM "per
    step" where each steady step launched 0.19 ms), and the profiler's closing stub would halve it.

    Args:
        breakdown: the result of :func:`step_breakdown`.
        steps_df: the same trace's :func:`~profiling_core.analyses.steps.steps`.

    Returns:
        DataFrame with ``category``, ``time_us`` (sum over those steps), ``per_step_us`` (mean per step), ``share``
        (``time_us`` over the sum of the steps' windows: longer steps weigh more), ``busy_us``, ``overlapped_us``
        (sums). Empty (same columns) for a breakdown without steps, or without a steady-state step.
    """
    cols = ["category", "time_us", "per_step_us", "share", "busy_us", "overlapped_us"]
    if breakdown.empty or steps_df.empty:
        return frame([], cols)
    breakdown = breakdown[breakdown["step"].isin(measured_steps(steps_df)["step"])]
    if breakdown.empty:
        return frame([], cols)
    g = breakdown.groupby("category", sort=False)
    out = pd.DataFrame({"time_us": g["time_us"].sum(), "per_step_us": g["time_us"].mean(),
                        "busy_us": g["busy_us"].sum(), "overlapped_us": g["overlapped_us"].sum(),
                        "window_us": g["window_us"].sum()})
    out = out.reindex([c for c in BREAKDOWN_CATEGORIES if c in out.index]).rename_axis("category").reset_index()
    out["share"] = ratio(out["time_us"], out["window_us"])
    return out[cols]


def top_kernels(session, n: Optional[int] = 10, shared: Shared | None = None,
                steps_df: pd.DataFrame | None = None) -> pd.DataFrame:
    """The GPU ops that take the most time, per name, with the CPU ops that launched them.

    Over every GPU op of the trace (kernels, memcpys, memsets: the rows of :func:`gpu_ops`), grouped by name and
    category (``GPU_OP_CATEGORIES``: see ``categories``).

    Args:
        session: a trace session.
        n: how many names to keep (the largest total time first); None keeps all.

    Returns:
        DataFrame sorted by ``total_us`` (largest first, then by name): ``name``, ``category``, ``count``,
        ``per_step`` (those launched inside the steps every per-step figure reads ÷ their number: the steady
        state's, :func:`~profiling_core.analyses.steps.measured_steps`, so that a kernel torch.compile's autotuning
        launched in the first step only is not "per step"; NaN without such steps), ``total_us``,
        ``mean_us``, ``share`` (of the summed duration of all GPU ops), ``cpu_ops``: a tuple of (CPU op name,
        launches) pairs, most launches first, for the op's launch calls: the innermost ``aten::`` op enclosing each
        (:func:`launch_ops`), else the launch call's parent slice (e.g. Inductor's ``triton_poi_fused_…`` launcher or
        ``## Call CompiledFxGraph … ##`` for a CUDA graph replay), else the launch call itself; GPU ops with no launch
        call paired are left out of it, so the launches add up to at most ``count``.

    Raises:
        ValueError: ``n`` is not a whole number ≥ 1 or None.
    """
    if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1):
        raise ValueError(f"top_kernels: n must be a whole number of kernels (1 or more) or None for all; got {n!r}")
    cols = ["name", "category", "count", "per_step", "total_us", "mean_us", "share", "cpu_ops"]
    sh = shared_for(session, shared)
    t, rows = sh.slices, sh.gpu_lane_rows()
    if len(rows) == 0:
        return frame([], cols)
    k = len(GPU_OP_CATEGORIES)
    cat = sh.op_categories[np.searchsorted(sh.gpu_rows, rows)]  # gpu_rows is sorted; rows are among them
    key = t["name_codes"][rows].astype(np.int64) * k + cat  # name code -1 (NULL): keys below 0, still distinct
    uk, grp = np.unique(key, return_inverse=True)
    grp = grp.reshape(-1)
    ng = len(uk)
    dur = t["dur"][rows]
    count = np.bincount(grp, minlength=ng)
    total = np.zeros(ng, dtype=np.int64)
    np.add.at(total, grp, dur)
    # launched inside a step (its ProfilerStep slice)
    p = sh.p
    n_steps = 0
    in_step = np.zeros(ng, dtype=np.int64)
    if sh.steps_list:  # (the steady state's steps, as every per-step figure; ``steps_df``: ``steps(session)``)
        kept = measured_steps(steps(session, shared=sh) if steps_df is None else steps_df)["slice_id"].to_numpy()
        n_steps = len(kept)
        pair, at_step = sh.pair_steps
        pair = pair[np.isin(np.array([r[0] for r in sh.steps_list], dtype=np.int64), kept)[at_step]]
        launched = np.zeros(len(t["ts"]), dtype=bool)  # over the slices' rows (the pairs' gpu_id are rows)
        launched[p["gpu_id"][pair]] = True
        in_step = np.bincount(grp[launched[rows]], minlength=ng)
    # the CPU op of each launch pair whose GPU op is one of these rows
    by_row = np.argsort(rows)
    at = np.searchsorted(rows[by_row], p["gpu_id"])
    ok = at < len(rows)
    ok[ok] = rows[by_row][at[ok]] == p["gpu_id"][ok]
    pg = grp[by_row][at[ok]]
    launch = p["launch_id"][ok]
    op = sh.aten_op_of(launch)
    parent = t["ppos"][launch]
    label = np.where(op >= 0, op, np.where(parent >= 0, parent, launch))
    lcode = t["name_codes"][label].astype(np.int64)  # -1: a NULL name
    nl = len(t["name_uniq"])
    pairs, pair_n = np.unique(pg * (nl + 1) + (lcode + 1), return_counts=True)
    launched_by: list[list] = [[] for _ in range(ng)]
    names = t["name_uniq"]
    for key2, c in zip(pairs.tolist(), pair_n.tolist()):
        launched_by[key2 // (nl + 1)].append((names[key2 % (nl + 1) - 1], int(c)))
    for lst in launched_by:
        lst.sort(key=lambda x: (-x[1], str(x[0])))
    all_ns = int(total.sum())
    cats = np.array(GPU_OP_CATEGORIES, dtype=object)
    name_of = [None if x < 0 else names[x // k] for x in uk.tolist()]  # a NULL name (code -1): keys -k..-1
    df = pd.DataFrame({
        "name": pd.Series(name_of, dtype=object),
        "category": pd.Series(cats[uk % k], dtype=object),
        "count": count.astype(np.int64),
        "per_step": in_step / n_steps if n_steps else np.full(ng, np.nan),
        "total_us": total.astype("float64") / 1000.0,
        "mean_us": total.astype("float64") / 1000.0 / count,
        "share": total.astype("float64") / all_ns if all_ns else np.full(ng, np.nan),
        "cpu_ops": pd.Series([tuple(x) for x in launched_by], dtype=object),
    })
    df = df.sort_values(["total_us", "name"], ascending=[False, True], kind="stable", na_position="last")
    return (df if n is None else df.head(int(n))).reset_index(drop=True)[cols]
