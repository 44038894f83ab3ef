"""Profiler steps: CPU time per step against GPU busy time (study questions 1 and 2)."""
from __future__ import annotations

import pandas as pd

import numpy as np

from ._common import ints, nullable_int, ratio, us
from ._shared import Shared, frame, shared_for, union_ns, unions_ns

__all__ = ["steps", "cpu_vs_gpu", "gpu_busy", "bound", "OVERHEAD_BOUND_BELOW"]

_STEP_COUNTS = ("step", "slice_id", "gpu_ops", "kernels", "memcpys", "memsets", "launches", "kernel_launches")


def _steps_raw(sh: Shared) -> pd.DataFrame:
    """What ``steps.sql`` returns, computed from the shared pairs and step windows."""
    cols = ["step", "name", "slice_id", "start_ns", "cpu_dur_ns", "gpu_busy_ns", "gpu_busy_in_step_ns", "gpu_ops",
            "kernels", "memcpys", "memsets", "launches", "kernel_launches", "first_gpu_start_ns", "last_gpu_end_ns"]
    rows, launched, clipped = [], [], []
    p, ops = sh.p, sh.ops if sh.steps_list else None
    c = sh.step_counts if sh.steps_list else None
    for j, (step_id, step, name, ts, dur, _depth, utid) in enumerate(sh.steps_list):
        if utid is None:
            continue  # steps.sql joins thread_track
        end = ts + dur
        i = sh.pairs_in(ts, end)
        b, e = p["gpu_ts"][i], p["gpu_end"][i]
        m = (ops["ts"] < end) & (ops["end"] > ts)
        launched.append((b, e))
        clipped.append((np.maximum(ops["ts"][m], ts), np.minimum(ops["end"][m], end)))
        n = len(i)
        rows.append([step, name, step_id, ts, dur, 0, 0,
                     *(int(c[x][j]) for x in ("gpu_ops", "kernels", "memcpys", "memsets", "launches",
                                              "kernel_launches")),
                     int(b.min()) if n else None, int(e.max()) if n else None])
    for r, busy, in_step in zip(rows, unions_ns(launched).tolist(), unions_ns(clipped).tolist()):
        r[5], r[6] = busy, in_step  # the unions of all steps in one sweep each
    return frame([tuple(r) for r in rows], cols)


def steps(session, shared: Shared | None = None) -> pd.DataFrame:
    """One row per ``ProfilerStep#N`` in time order.

    Only the CPU slice of a step counts (newer traces repeat it as a ``gpu_user_annotation``). GPU ops (kernel,
    memcpy, memset) belong to the step whose window holds their *launch call*, paired by flow events or, where a
    trace has none, by ``args.correlation``; they may run after the step ends.

    Args:
        session: a trace session from ``profiling_core.open_trace``.

    Returns:
        DataFrame with columns ``step`` (N), ``name``, ``slice_id``, ``start_ns``, ``cpu_dur_us`` (the step slice),
        ``gpu_busy_us`` (union of the intervals of the GPU ops launched in the step), ``gpu_busy_in_step_us`` (union
        of all GPU op intervals clipped to the step window), ``gpu_busy_fraction`` (``gpu_busy_in_step_us /
        cpu_dur_us``: the share of the step's wall time the GPU was busy, 0..1), ``gpu_ops``, ``kernels`` (ops of
        category kernel launched in the step), ``memcpys``, ``memsets``, ``launches`` (calls that launched GPU
        work), ``kernel_launches`` (calls that launched at least one kernel), ``first_gpu_start_ns``,
        ``last_gpu_end_ns``. Empty (same columns) when the trace has no steps.
    """
    df = _steps_raw(shared_for(session, shared))
    df = ints(df, *_STEP_COUNTS)
    df = nullable_int(df, "start_ns", "first_gpu_start_ns", "last_gpu_end_ns")
    df = us(df, {"cpu_dur_ns": "cpu_dur_us", "gpu_busy_ns": "gpu_busy_us",
                 "gpu_busy_in_step_ns": "gpu_busy_in_step_us"})
    df["gpu_busy_fraction"] = ratio(df["gpu_busy_in_step_us"], df["cpu_dur_us"]).fillna(0.0)
    cols = ["step", "name", "slice_id", "start_ns", "cpu_dur_us", "gpu_busy_us", "gpu_busy_in_step_us",
            "gpu_busy_fraction", "gpu_ops", "kernels", "memcpys", "memsets", "launches", "kernel_launches",
            "first_gpu_start_ns", "last_gpu_end_ns"]
    return df[cols].reset_index(drop=True)


OVERHEAD_BOUND_BELOW = 0.5
"""A step whose GPU was busy for less than this share of its wall time is overhead-bound (the study's question 2)."""


def bound(gpu_busy_fraction: float, gpu_ops: int = 1, overhead_below: float = OVERHEAD_BOUND_BELOW) -> str:
    """The verdict for a GPU busy share: ``overhead-bound`` below ``overhead_below``, else ``compute-bound``;
    ``no-gpu`` when no GPU work was launched (``gpu_ops`` 0). The one rule :func:`cpu_vs_gpu` and the findings
    apply."""
    if gpu_ops == 0:
        return "no-gpu"
    return "overhead-bound" if gpu_busy_fraction < overhead_below else "compute-bound"


def cpu_vs_gpu(session, overhead_below: float = OVERHEAD_BOUND_BELOW,
               steps_df: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per step: CPU time against GPU busy time, and whether the step is overhead-bound or compute-bound.

    Args:
        session: a trace session.
        overhead_below: a step whose GPU was busy for less than this share of its wall time
            (``gpu_busy_fraction``) is ``overhead-bound``; otherwise ``compute-bound``. Default 0.5.
        steps_df: the result of :func:`steps` when already computed (saves a query).

    Returns:
        DataFrame with ``step``, ``cpu_dur_us``, ``gpu_busy_us``, ``gpu_busy_fraction``, ``gpu_to_cpu``
        (``gpu_busy_us / cpu_dur_us``: GPU work launched per unit of CPU time; above 1 the GPU is the bottleneck)
        and ``bound`` (``overhead-bound``, ``compute-bound``, or ``no-gpu`` when the step launched no GPU work).
    """
    df = steps(session) if steps_df is None else steps_df
    out = df[["step", "cpu_dur_us", "gpu_busy_us", "gpu_busy_fraction", "gpu_ops"]].copy()
    out["gpu_to_cpu"] = ratio(out["gpu_busy_us"], out["cpu_dur_us"])
    out["bound"] = pd.Series([bound(f, int(n), overhead_below) for f, n in zip(out["gpu_busy_fraction"].tolist(),
                                                                             out["gpu_ops"].tolist())],
                             index=out.index, dtype=object)
    return out.drop(columns=["gpu_ops"]).reset_index(drop=True)


def _gpu_busy_raw(sh: Shared) -> pd.DataFrame:
    """What ``gpu_busy.sql`` returns, computed from the shared pairs, step windows and GPU op intervals."""
    cols = ["scope", "gpu_ops", "busy_ns", "window_start_ns", "window_end_ns", "first_gpu_start_ns",
            "last_gpu_end_ns", "window_ns"]

    def row(scope, wb, we, b, e, window=None):
        n = len(b)
        last = int(e.max()) if n else None
        wend = None if we is None else max(we, we if last is None else last)
        if window is None:
            window = None if wb is None or wend is None else wend - wb
        return (scope, n, union_ns(b, e), wb, wend, int(b.min()) if n else None, last, window)

    ops = sh.ops
    rows = [row("trace", *sh.trace_window, ops["ts"], ops["end"])]
    st = sh.steps_list
    if st:
        p = sh.p
        w = sh.step_windows
        idx = [sh.pairs_in(ts, ts + dur) for _sid, _n, _nm, ts, dur, _d, _u in st]
        # each step's window runs from its start to the later of its end and the end of the GPU work it launched;
        # the steps' window is their union, so time between steps (and between repeat cycles, whose steps the
        # profiler did not record) is not counted as GPU idle
        starts, ends = w["start"], w["end"]
        i = np.concatenate(idx) if idx else np.zeros(0, dtype=np.int64)
        _, first = np.unique(p["gpu_id"][i], return_index=True)
        i = i[first]
        rows.append(row("steps", int(starts.min()), int((starts + np.array([r[4] for r in st])).max()),
                        p["gpu_ts"][i], p["gpu_end"][i], union_ns(starts, ends)))
    return frame(rows, cols)


def gpu_busy(session, shared: Shared | None = None) -> pd.DataFrame:
    """GPU busy time (union of kernel, memcpy and memset intervals) over the trace and over the profiled steps.

    Args:
        session: a trace session.

    Returns:
        DataFrame with one row per ``scope``: ``trace`` (all GPU ops; window from the first to the last event of
        the trace) and, when the trace has ProfilerSteps, ``steps`` (ops launched inside a step; window: the union
        of the steps' windows, each from the step's start to the later of its end and the end of the GPU work it
        launched, so time between steps and between repeat cycles is not counted as idle). Columns ``scope``,
        ``gpu_ops``, ``busy_us``, ``window_us``, ``busy_fraction`` (busy / window, NaN without a window),
        ``window_start_ns``, ``first_gpu_start_ns``, ``last_gpu_end_ns``.
    """
    df = _gpu_busy_raw(shared_for(session, shared))
    df = ints(df, "gpu_ops")
    df = nullable_int(df, "window_start_ns", "window_end_ns", "first_gpu_start_ns", "last_gpu_end_ns", "window_ns")
    df["window_us"] = df["window_ns"].astype("Float64").astype("float64") / 1000.0
    df = us(df, {"busy_ns": "busy_us"})
    df["busy_fraction"] = ratio(df["busy_us"], df["window_us"])
    return df[["scope", "gpu_ops", "busy_us", "window_us", "busy_fraction", "window_start_ns",
               "first_gpu_start_ns", "last_gpu_end_ns"]].reset_index(drop=True)
