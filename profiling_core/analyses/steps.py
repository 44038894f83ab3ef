"""Profiler steps: CPU time per step against GPU busy time (study questions 1 and 2)."""
from __future__ import annotations

from collections import Counter

import pandas as pd

import numpy as np

from ._common import ints, nullable_int, ratio, us
from ._shared import (COMPILED_GRAPH_CALL, Shared, covered_ns, frame, is_host_copy, merged, shared_for, union_ns,
                      unions_ns)
from .phases import data_ranges
from .table import _beside_step

__all__ = ["steps", "device_busy", "cpu_vs_gpu", "gpu_busy", "bound", "steady_state", "basis_steps", "first_steps",
           "working_steps",
           "annotation_ranges", "data_wait", "queue_growth",
           "GROWS_AT", "RISES_AT", "HELD_WITHIN", "QUEUED_AT", "QUEUE_GREW",
           "GPU_BOUND_AT", "CPU_MATH_BOUND_AT", "CPU_GEMM_FLOOR_GFLOPS", "CPU_GEMM_FLOOR_MIN_US", "DATA_WAIT_AT"]

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
        i = sh.step_pairs(j)
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

    Only the CPU slice of a step counts (newer traces repeat it as a ``gpu_user_annotation``), and only up to the
    end of the recording (the profiler's own ``Trace`` slice: a step slice written with a later end is cut there,
    ``cut_us`` says by how much; the queries' ``_recording.sql`` fragment states the same rule). GPU ops (kernel,
    memcpy, memset) belong to the step whose window holds their *launch call*, paired by flow events or, where a
    trace has none, by ``args.correlation``; they may run after the step ends. Where several processes have step
    slices (ranks' traces merged into one file, whose steps overlap in time), a call counts in the steps of its own
    process (``Shared.pair_steps``).

    Args:
        session: a trace session from ``profiling_core.open_trace``.

    Returns:
        DataFrame with columns ``step`` (N), ``name``, ``slice_id``, ``start_ns``, ``cpu_dur_us`` (the step slice),
        ``gpu_busy_us`` (union of the intervals of the GPU ops launched in the step), ``gpu_busy_in_step_us`` (union
        of all GPU op intervals clipped to the step window), ``gpu_busy_fraction`` (``gpu_busy_in_step_us /
        cpu_dur_us``: the share of the step's wall time the GPU was busy, 0..1), ``gpu_ops``, ``kernels`` (ops of
        category kernel launched in the step), ``memcpys``, ``memsets``, ``launches`` (calls that launched GPU
        work), ``kernel_launches`` (calls that launched at least one kernel), ``first_gpu_start_ns``,
        ``last_gpu_end_ns``, ``sync_wait_us`` (the time the GPU was busy inside the calls that start in the step's
        window on a thread that runs the step (its slice's, or one that launched its work: :func:`_waits_in`)
        and block until it is done: the synchronize calls, and the calls that launched a copy to or from
        pageable memory, :attr:`Shared.copy_waits`; CPU time spent blocked on GPU work, :func:`bound`; each instant
        once, however many calls on however many threads waited in it; at most the step's duration),
        ``copy_wait_us`` (the part of it in those copies), ``unlaunched_wait_us`` (the part of ``sync_wait_us``
        in which the GPU ran work the trace holds no launch call for, :func:`_unlaunched_ops`: work launched
        before the profiler began recording, which no step counts as its own), ``copy_busy_us`` and
        ``other_busy_us`` (the union of the intervals of the host↔device copies launched in the step, and of its
        other GPU ops: the two parts of ``gpu_busy_us``, which may overlap), ``launch_call_us`` (the time of the
        step's calls that launched GPU work, each once, less ``copy_wait_us``, which ``sync_wait_us`` holds: where
        a full launch queue holds the CPU),
        ``gpu_starved_us`` (the time in the step's window the GPU sat idle with nothing launched for it:
        :func:`_starved_in`), ``unlaunched_in_step_us`` (the part of ``gpu_busy_in_step_us`` in which the GPU
        ran work the trace holds no launch call for), ``unrecorded_in_step_us`` (the time in the step's window a GPU
        spent on work the trace does not hold, where no recorded op ran: ``Shared.unrecorded_waits``; not part of
        ``gpu_busy_in_step_us``), ``cut_us`` (how much of the step's slice lay past the
        recording's end and is not counted: 0 but in a malformed trace), ``slices`` (the slices of any thread or
        GPU lane that began in the step's window, its own slice not counted), ``stub`` (whether the step is the
        profiler's closing stub, :func:`working_steps`), ``data_us`` (the time of the step's window inside a
        DataLoader's ``enumerate(DataLoader)#...__next__`` range: the loop waiting for its batch, the ``data`` phase's
        rule in ``analyses.phases``; 0 where no DataLoader is profiled), ``compile_us`` (the time of the step's
        window inside torch.compile's compiler ranges on its process's threads, ``Shared.compiler_work``: the step
        compiled, recompiled or recorded a CUDA graph; 0 in a step that ran code compiled before it), ``pid`` (the
        process whose thread holds the step's slice: several where ranks' traces were merged into one file, each
        with its own first step). Empty (same columns) when the trace has no steps.
    """
    sh = shared_for(session, shared)
    df = _steps_raw(sh)
    df = ints(df, *_STEP_COUNTS)
    df = nullable_int(df, "start_ns", "first_gpu_start_ns", "last_gpu_end_ns")
    starts = df["start_ns"].to_numpy(dtype=np.int64, na_value=0)
    durs = df["cpu_dur_ns"].to_numpy(dtype=np.int64)
    # (at most the step's own duration: a call that starts in the step and runs past its end, on another thread or in
    # an edited trace, blocked the step no longer than the step lasted)
    busy = merged(sh.ops["ts"].astype(np.int64), sh.ops["end"].astype(np.int64))
    blocking = (sh.sync_waits, sh.copy_waits)
    df["copy_wait_ns"] = np.minimum(_waits_in(sh, (sh.copy_waits,), starts, durs, *busy), durs)
    df["sync_wait_ns"] = np.minimum(_waits_in(sh, blocking, starts, durs, *busy), durs)
    early = _unlaunched_ops(sh)
    df["unlaunched_wait_ns"] = (np.minimum(_waits_in(sh, blocking, starts, durs, *early),
                                           df["sync_wait_ns"].to_numpy())
                                if len(early[0]) else np.zeros(len(starts), dtype=np.int64))
    df["unlaunched_in_step_ns"] = (covered_ns(starts, starts + durs, *early) if len(early[0]) and len(starts)
                                   else np.zeros(len(starts), dtype=np.int64))
    df["unrecorded_in_step_ns"] = sh.unrecorded_in(starts, starts + durs)
    counted = [sh.step_pairs(j) for j, r in enumerate(sh.steps_list) if r[6] is not None]  # (_steps_raw's rows)
    df["copy_busy_ns"], df["other_busy_ns"], calls = _launched_in(sh, counted)
    # (less the copies' waits: sync_wait_us holds those, and the bound rule takes them out of the CPU's own time)
    df["launch_call_ns"] = (calls - df["copy_wait_ns"].to_numpy()).clip(min=0)
    df["gpu_starved_ns"] = _starved_in(sh, starts, starts + durs)
    rows = df["slice_id"].to_numpy(dtype=np.int64)  # the slices' ids are their rows
    df["cut_ns"] = sh.tables.dur[rows] - durs if len(rows) else np.zeros(0, dtype=np.int64)
    began = np.sort(sh.tables.ts)  # (every slice's start: the engines need not keep slices in time order)
    df["slices"] = (np.searchsorted(began, starts + durs, side="left") - np.searchsorted(began, starts, side="left")
                    - 1).clip(min=0) if len(rows) else np.zeros(0, dtype=np.int64)
    df["stub"] = _stubs(sh, rows, starts, durs)
    db, de = data_ranges(sh)
    df["data_ns"] = (covered_ns(starts, starts + durs, db, de) if len(db) and len(rows)
                     else np.zeros(len(rows), dtype=np.int64))
    df["compile_ns"] = sh.compiler_ns(starts, starts + durs, sh.slices["utid"][rows].tolist() if len(rows) else [])
    lanes = sh.lanes
    df["pid"] = [(lanes.get(u) or (None, None))[1] for u in (sh.slices["utid"][rows].tolist() if len(rows) else [])]
    df = us(df, {"cpu_dur_ns": "cpu_dur_us", "gpu_busy_ns": "gpu_busy_us",
                 "gpu_busy_in_step_ns": "gpu_busy_in_step_us", "sync_wait_ns": "sync_wait_us",
                 "copy_busy_ns": "copy_busy_us", "other_busy_ns": "other_busy_us", "copy_wait_ns": "copy_wait_us",
                 "gpu_starved_ns": "gpu_starved_us", "cut_ns": "cut_us", "data_ns": "data_us",
                 "unlaunched_wait_ns": "unlaunched_wait_us", "unlaunched_in_step_ns": "unlaunched_in_step_us",
                 "unrecorded_in_step_ns": "unrecorded_in_step_us", "launch_call_ns": "launch_call_us",
                 "compile_ns": "compile_us"})
    df["gpu_busy_fraction"] = ratio(df["gpu_busy_in_step_us"], df["cpu_dur_us"]).fillna(0.0)
    cols = ["step", "name", "slice_id", "start_ns", "cpu_dur_us", "gpu_busy_us", "gpu_busy_in_step_us",
            "gpu_busy_fraction", "gpu_ops", "kernels", "memcpys", "memsets", "launches", "kernel_launches",
            "first_gpu_start_ns", "last_gpu_end_ns", "sync_wait_us", "copy_wait_us", "unlaunched_wait_us",
            "copy_busy_us", "other_busy_us", "launch_call_us", "gpu_starved_us", "unlaunched_in_step_us",
            "unrecorded_in_step_us", "cut_us", "slices", "stub", "data_us", "compile_us", "pid"]
    return df[cols].reset_index(drop=True)


def _stubs(sh: Shared, rows: np.ndarray, starts: np.ndarray, durs: np.ndarray) -> np.ndarray:
    """Per step (its slice's row, start and length, ns): whether it is an empty step (:func:`working_steps`): one in
    whose window no ATen op, no launch call and no torch.compile'd code (a ``Torch-Compiled Region``, a compiled
    graph's call: on a CPU Inductor's code runs no ATen op) began on any thread, shorter than each step of its thread
    in which one began (a trace of steps alone, with no op in any, has none to tell apart)."""
    out = np.zeros(len(rows), dtype=bool)
    if len(rows) < 2:
        return out
    t = sh.slices
    work = sh.name_mask(lambda x: isinstance(x, str) and x.startswith(("aten::", "Torch-Compiled Region",
                                                                        COMPILED_GRAPH_CALL)))
    work[sh.pos(sh.p["launch_id"])] = True
    began = np.sort(t["ts"][work].astype(np.int64))
    ops = np.searchsorted(began, starts + durs, side="left") - np.searchsorted(began, starts, side="left")
    utid = t["utid"][sh.pos(rows)]
    for u in np.unique(utid).tolist():
        mine = np.flatnonzero(utid == u)
        if len(mine) < 2:
            continue
        worked = mine[ops[mine] > 0]
        if len(worked):
            out[mine] = (ops[mine] == 0) & (durs[mine] < durs[worked].min())
    return out


def device_busy(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per step and GPU: that GPU's own busy time, measured as :func:`steps` measures the union over all GPUs.

    A process can drive several GPUs (``nn.DataParallel``, a model split across devices as ``device_map="auto"``
    does); every other GPU figure of a step counts the time *at least one* of them was busy (the union over all
    devices and streams), which says nothing of how long each one idled: two GPUs that take turns are each idle
    half the step while the union is busy all of it. A GPU op's device is its lane's process id (Kineto writes a
    GPU's ops under its device index).

    Returns:
        DataFrame with one row per step (as :func:`steps` has them) and per device that ran an op the steps
        launched or one inside a step's window: ``step``, ``slice_id``, ``device``, ``gpu_busy_us`` (union of the
        intervals of the ops the step launched on that device, as ``steps.gpu_busy_us``), ``gpu_busy_in_step_us``
        (union of that device's op intervals clipped to the step's window, as ``steps.gpu_busy_in_step_us``),
        ``gpu_busy_fraction`` (of the step's window, 0..1), ``gpu_ops`` (the ops the step launched on it). Each
        device's figure is at most the union's and their sum at least the union's. Empty without steps or GPU ops.
    """
    sh = shared_for(session, shared)
    cols = ["step", "slice_id", "device", "gpu_busy_ns", "gpu_busy_in_step_ns", "dur_ns", "gpu_ops"]
    windows = [(step, sid, ts, dur, j) for j, (sid, step, _n, ts, dur, _d, utid) in enumerate(sh.steps_list)
               if utid is not None]
    code, devices = sh.op_devices if windows else (None, [])
    rows, launched, clipped = [], [], []
    if devices:
        ops, p = sh.ops, sh.p
        by_row = np.full(len(sh.slices["ts"]), -1, dtype=np.int64)
        by_row[sh.gpu_rows] = code
        pair_dev = by_row[p["gpu_id"]]
        parts = []
        for step, sid, ts, dur, j in windows:
            i = sh.step_pairs(j)
            m = (ops["ts"] < ts + dur) & (ops["end"] > ts)
            parts.append((i, m, ts, ts + dur))
        seen = sorted((set(code[np.logical_or.reduce([m for _i, m, _b, _e in parts])].tolist())
                       | set(pair_dev[np.concatenate([i for i, *_ in parts])].tolist())) - {-1})
        for (step, sid, ts, dur, _j), (i, m, b, e) in zip(windows, parts):
            for d in seen:
                k, j = m & (code == d), i[pair_dev[i] == d]
                rows.append([step, sid, devices[d], 0, 0, dur, len(np.unique(p["gpu_id"][j]))])
                launched.append((p["gpu_ts"][j], p["gpu_end"][j]))
                clipped.append((np.maximum(ops["ts"][k], b), np.minimum(ops["end"][k], e)))
        for r, busy, in_step in zip(rows, unions_ns(launched).tolist(), unions_ns(clipped).tolist()):
            r[3], r[4] = busy, in_step
    df = us(frame([tuple(r) for r in rows], cols), {"gpu_busy_ns": "gpu_busy_us",
                                                    "gpu_busy_in_step_ns": "gpu_busy_in_step_us"})
    df["gpu_busy_fraction"] = ratio(df["gpu_busy_in_step_us"], df["dur_ns"] / 1000.0).fillna(0.0)
    return df[["step", "slice_id", "device", "gpu_busy_us", "gpu_busy_in_step_us", "gpu_busy_fraction", "gpu_ops"]
              ].reset_index(drop=True)


def _starved_in(sh: Shared, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per window [start, end) (ns): the time the GPU sat idle with nothing launched for it to run, waiting for the
    CPU. That is the gaps in the GPU's recorded work (any device or stream; after its last op too) that follow a
    recorded op and whose next op's launch call had not begun when the gap began (an op whose launch call is not in
    the trace counts as not launched). A gap while launched work waited in the queue is the GPU's own (a dependency,
    a stream wait, the time between two kernels), not a wait for the CPU. The time before the trace's first GPU op
    is never counted: the trace cannot show whether the GPU was idle then (the profiler does not record an op that
    began before its window, such as work queued in the loop's warm-up, so the GPU may have been busy with it), and
    once a launch call had begun the GPU had work queued. (A trace with no GPU op at all counts every window.)"""
    out = np.zeros(len(starts), dtype=np.int64)
    if not len(starts):
        return out
    t, rows, p = sh.slices, sh.gpu_rows, sh.p
    big = np.iinfo(np.int64).max
    launch = np.full(len(t["ts"]), big, dtype=np.int64)
    if len(p["gpu_id"]):
        np.minimum.at(launch, p["gpu_id"], p["launch_ts"])
    ts, end, launched = t["ts"][rows], t["ts"][rows] + t["dur"][rows], launch[rows]
    order = np.argsort(ts, kind="stable")
    ts, end, launched = ts[order], end[order], launched[order]
    gap_lo = np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(end)]  # gap k: the GPU idle before op k...
    gap_hi = np.r_[ts, big]  # ... until it starts (the last gap: after every op)
    starved = np.r_[launched >= gap_lo[:-1], True] & (gap_hi > gap_lo)
    starved[0] &= not len(rows)  # (the open gap before the first recorded op: unknown, not starved)
    # the starved gaps are disjoint and sorted (starts ascending, running maximum of ends); cut to the windows'
    # span, so the open first and last gaps have finite ends
    lo = np.maximum(gap_lo[starved], starts.min())
    hi = np.minimum(gap_hi[starved], ends.max())
    keep = hi > lo
    return covered_ns(starts, ends, lo[keep], hi[keep]) if keep.any() else out


def _unlaunched_ops(sh: Shared) -> tuple[np.ndarray, np.ndarray]:
    """The union, as disjoint sorted intervals (:func:`merged`), of the GPU ops the trace holds no launch call for
    (no flow and no correlation pairs them with one: launched before the profiler began recording, in its warm-up
    or earlier, so no step counts them as its work; a one-step trace taken from a running loop holds the tail of the
    work queued before it)."""
    rows, p = sh.gpu_rows, sh.p
    if not len(rows):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    paired = np.zeros(len(sh.slices["ts"]), dtype=bool)
    paired[p["gpu_id"]] = True
    r = rows[~paired[rows]]
    ts = sh.slices["ts"][r].astype(np.int64)
    return merged(ts, ts + sh.slices["dur"][r].astype(np.int64))


def _waits_in(sh: Shared, calls: tuple[pd.DataFrame, ...], starts: np.ndarray, durs: np.ndarray, s: np.ndarray,
              t: np.ndarray) -> np.ndarray:
    """Per window [start, start + dur) (ns; the rows of ``steps``, the step slices on a thread): how much of the
    disjoint sorted intervals [s, t) (the GPU's busy time, or a part of it) lies inside the blocking calls of
    ``calls`` (:attr:`Shared.sync_waits`, :attr:`Shared.copy_waits`) that start in the window on a thread that runs
    its step (``table._beside_step``'s rule: a call on a thread beside the step, one with no step slice and nothing
    launched in its window, blocks that thread, not the step): time the step spent blocked on work the GPU was
    still doing. Each instant counts once, however many calls held it: two threads of the step waiting on the same
    kernel at once, or a sync beside a copy's call, block the step for that time once."""
    out = np.zeros(len(starts), dtype=np.int64)
    frames = [c for c in calls if not c.empty]
    if not frames or not len(starts) or not len(s):
        return out
    b = np.concatenate([c["start_ns"].to_numpy(dtype=np.int64) for c in frames])
    e = b + np.concatenate([c["dur_ns"].to_numpy(dtype=np.int64) for c in frames])
    rows = sh.pos(np.concatenate([c["id"].to_numpy(dtype=np.int64) for c in frames]))
    order = np.argsort(b, kind="stable")
    b, e, rows = b[order], e[order], rows[order]
    lo = np.searchsorted(b, starts, side="left")
    hi = np.searchsorted(b, starts + durs, side="left")
    windows = np.flatnonzero(hi > lo)
    if not len(windows):
        return out
    # each (window, call in it) once, the window as its index in steps_list, so that one pass tells which are beside
    on_thread = [j for j, st in enumerate(sh.steps_list) if st[6] is not None]  # (steps' rows: the steps on a thread)
    k = np.repeat(windows, (hi - lo)[windows])
    at = np.concatenate([np.arange(lo[w], hi[w]) for w in windows.tolist()])
    beside = _beside_step(sh, sh.steps_list, rows[at], np.array(on_thread, dtype=np.int64)[k])
    cut = np.r_[0, np.cumsum((hi - lo)[windows])]
    for n, w in enumerate(windows.tolist()):
        mine = at[cut[n]:cut[n + 1]][~beside[cut[n]:cut[n + 1]]]
        if len(mine):
            mb, me = merged(b[mine], e[mine])
            out[w] = int(covered_ns(mb, me, s, t).sum())
    return out


def _launched_in(sh: Shared, counted: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step, of the launch pairs that count in it (``counted``: :meth:`Shared.step_pairs`, as ``gpu_busy_us``
    counts them), in one pass: the union of the intervals of the host↔device copies
    (:func:`~profiling_core.analyses._shared.is_host_copy`), the union of the other GPU ops' (kernels, memsets,
    device copies), and the summed durations of the distinct calls that launched them (as ``launches`` counts
    them)."""
    p = sh.p
    zeros = np.zeros(len(counted), dtype=np.int64)
    if not len(counted) or not len(p["gpu_id"]):
        return zeros, zeros.copy(), zeros.copy()
    copy = sh.name_mask(is_host_copy)[p["gpu_id"]]
    copies, rest, calls = [], [], zeros.copy()
    for j, i in enumerate(counted):
        c, o = i[copy[i]], i[~copy[i]]
        copies.append((p["gpu_ts"][c], p["gpu_end"][c]))
        rest.append((p["gpu_ts"][o], p["gpu_end"][o]))
        _ids, first = np.unique(p["launch_id"][i], return_index=True)
        calls[j] = int(p["launch_dur"][i][first].sum())
    return unions_ns(copies), unions_ns(rest), calls


def annotation_ranges(session, name: str, shared: Shared | None = None) -> pd.DataFrame:
    """One row per CPU slice called ``name`` (a ``record_function`` range such as ``decode::token``; its
    ``gpu_user_annotation`` copies left out), in time order, measured as :func:`steps` measures a step: the GPU ops
    whose launch call starts inside the range belong to it, wherever they ran.

    Returns:
        DataFrame with ``slice_id``, ``step`` (N of the ``ProfilerStep#N`` whose window holds the range's start, NA
        outside any), ``index_in_step`` (0, 1, ... in time order within that step), ``start_ns``, ``cpu_dur_us``
        (the range's own duration), ``gpu_busy_us`` (union of the intervals of the GPU ops launched in it),
        ``gpu_ops`` (distinct GPU ops), ``kernels``, ``launches`` (distinct calls that launched GPU work),
        ``first_gpu_start_ns``. Empty (same columns) when the trace has no such slice.
    """
    cols = ["slice_id", "step", "index_in_step", "start_ns", "cpu_dur_us", "gpu_busy_us", "gpu_ops", "kernels",
            "launches", "first_gpu_start_ns"]
    sh = shared_for(session, shared)
    t = sh.slices
    m = sh.name_mask(lambda u: u == name)
    if m.any():
        m &= np.array([c != "gpu_user_annotation" for c in t["cat_uniq"]], dtype=bool)[t["cat_codes"]]
    rows_i = np.flatnonzero(m)
    if not len(rows_i):
        return pd.DataFrame({c: pd.Series(dtype="float64" if c.endswith("_us") else "int64") for c in cols})
    rows_i = rows_i[np.lexsort((rows_i, t["ts"][rows_i]))]
    windows = [(r[1], r[3], r[3] + r[4]) for r in sh.steps_list]
    p = sh.p if len(sh.gpu_rows) else None
    out, busy_parts, seen = [], [], {}
    for row, ts, dur in zip(rows_i.tolist(), t["ts"][rows_i].tolist(), t["dur"][rows_i].tolist()):
        step = next((n for n, b, e in windows if b <= ts < e), None)
        k = seen[step] = seen.get(step, -1) + 1
        i = sh.pairs_in(ts, ts + dur) if p is not None else np.zeros(0, dtype=np.int64)
        b, e = (p["gpu_ts"][i], p["gpu_end"][i]) if p is not None else (i, i)
        busy_parts.append((b, e))
        kernel = (p["gpu_category"][i] == "kernel") if p is not None else np.zeros(0, dtype=bool)
        out.append([int(t["id"][row]), step, k, ts, dur, 0, len(np.unique(p["gpu_id"][i])) if p is not None else 0,
                    len(np.unique(p["gpu_id"][i][kernel])) if p is not None else 0,
                    len(np.unique(p["launch_id"][i])) if p is not None else 0, int(b.min()) if len(b) else None])
    for r, busy in zip(out, unions_ns(busy_parts).tolist()):
        r[5] = busy
    df = frame([tuple(r) for r in out], ["slice_id", "step", "index_in_step", "start_ns", "dur_ns", "busy_ns",
                                         "gpu_ops", "kernels", "launches", "first_gpu_start_ns"])
    df = ints(df, "slice_id", "index_in_step", "gpu_ops", "kernels", "launches")
    df = nullable_int(df, "step", "start_ns", "first_gpu_start_ns")
    df = us(df, {"dur_ns": "cpu_dur_us", "busy_ns": "gpu_busy_us"})
    return df[cols].reset_index(drop=True)


GPU_BOUND_AT = 1.0
"""The bound rule's threshold: a step that launched at least this many µs of GPU work per µs of its CPU time is
compute-bound (the GPU limits the steady state), below it overhead-bound (the GPU waits on the CPU)."""

STARVED_AT = 0.01
"""The bound rule's other test: a step whose GPU sat idle with nothing launched for it (``gpu_starved_us``) for at
most this share of its CPU window never waited for the CPU, so it is compute-bound whatever its CPU time (a full
launch queue makes the launch calls wait for the GPU, and the CPU's time then follows the GPU's). A share, not zero:
the first op of a window and the clocks of the CPU and the GPU leave a few µs either way."""

SYNC_WAIT_AT = 0.005
"""Time blocked in synchronize calls counts as the GPU's (``bound``'s ``sync_wait_us``) from this share of the
step's CPU time: less moves the ratio by less than half a percent, and is left in the CPU's time (and unsaid)."""


GPU_PACED = ("compute-bound", "copy-bound")
"""The verdicts of a step whose pace the GPU sets: by its kernels, or by its copies over the host↔device link."""


def counted_wait(sync_wait_us: float, cpu_us: float) -> float:
    """The part of ``sync_wait_us`` the bound rule takes out of ``cpu_us``: all of it from :data:`SYNC_WAIT_AT` of
    ``cpu_us``, else none."""
    return sync_wait_us if sync_wait_us > 0 and sync_wait_us >= SYNC_WAIT_AT * cpu_us else 0.0


def gpu_paced_up_to(gpu_us: float, sync_wait_us: float = 0.0, at: float = GPU_BOUND_AT) -> float:
    """The most CPU time per step at which :func:`bound` calls a step with ``gpu_us`` of GPU work and ``sync_wait_us``
    blocked GPU-paced by its ratio test (GPU work at least ``at`` times the CPU's own time): up to ``gpu_us / at``,
    and, where the wait counts (:func:`counted_wait`: from :data:`SYNC_WAIT_AT` of the CPU time), up to that plus the
    wait."""
    line = gpu_us / at
    return max(line, min(line + sync_wait_us, sync_wait_us / SYNC_WAIT_AT)) if sync_wait_us > 0 else line


CPU_MATH_BOUND_AT = 0.5
"""On a CPU, where no GPU lane exists: a step whose math (the work ops' own time, outside the DataLoader's batches)
takes at least this share of its wall time is compute-bound. Below it, the step is bound by the larger of the rest:
the DataLoader handing out its batch (``steps.data_us``: input-bound) or everything else, the framework's overhead
around the ops (overhead-bound)."""

CPU_GEMM_FLOOR_GFLOPS = 1.0
"""GFLOP/s below which no CPU core runs a GEMM of a measurable size (one core of a 2-core cloud VM runs an fp32 64³
product at ~25 GFLOP/s): a CPU GEMM call of at least :data:`CPU_GEMM_FLOOR_MIN_US` slower than this spent its time
stalled, not computing."""

CPU_GEMM_FLOOR_MIN_US = 100.0
"""A CPU GEMM call's time from which its rate is judged against :data:`CPU_GEMM_FLOOR_GFLOPS`. A shorter call's time is
mostly its dispatch and set-up, not its math: on a 2-core VM an 8×8 fp32 product (1,024 FLOPs: 1 µs at 1 GFLOP/s)
took 2.6 to 15.4 µs a call through ``aten::mm`` in the steady steps of a one-thread run (``tests/data/cpu/sweep``),
0.07 to 0.39 GFLOP/s."""


def bound(gpu_us: float, cpu_us: float, gpu_ops: int = 1, at: float = GPU_BOUND_AT, sync_wait_us: float = 0.0,
          starved_share: float | None = None, copy_us: float = 0.0, other_us: float = 0.0,
          launch_us: float | None = None) -> str:
    """The one bound rule: what limits a step's throughput in steady state.

    A training or inference loop runs its steps back to back: the CPU issues a step's work in ``cpu_us`` and the GPU
    runs it in ``gpu_us`` (the union of the GPU ops the step launched, wherever they ran). Part of ``cpu_us`` may be
    ``sync_wait_us``: time blocked in synchronising calls while the GPU worked (the step's ``sync_wait_us``: in
    synchronize calls, and in the calls that copy to or from pageable memory, which wait for the GPU too), which
    the GPU's pace sets, not the CPU's; the CPU's own time is the rest (:func:`counted_wait`: from
    :data:`SYNC_WAIT_AT` of the CPU time). When ``gpu_us`` is at least ``at`` × that own time the CPU runs ahead
    (its queue grows, or it waits on the GPU at a sync), and the step rate is the GPU's:
    ``compute-bound``. Below it the GPU drains its queue and waits for the next launch: ``overhead-bound``.
    ``no-gpu`` when the step launched no GPU work (``gpu_ops`` 0). (Without the sync's wait taken out, a loop that
    synchronizes every step could never be compute-bound: its CPU time holds all of its GPU work.) A step whose GPU
    never waited for a launch (``starved_share``, the share of its window the GPU sat idle with nothing launched, at
    most :data:`STARVED_AT`) is compute-bound too: when the launch queue is full, each launch call waits for the GPU
    to free a slot, so the CPU time follows the GPU's and the ratio alone sits just under 1. That holds where the
    step's launch calls (``launch_us``, when known) took at least the CPU's own time beyond its GPU work: that is
    where a full queue puts it. A GPU kept busy by work queued before the step (a one-step trace taken from a
    running loop) never waits for a launch either, while the step's quick launches and its own small work leave the
    ratio anywhere below 1: the queue was not the step's, and the ratio decides. The share of the CPU
    window in which the GPU was busy is evidence, not the verdict: with a growing queue the GPU work of a step runs
    long after its window. A step the GPU paces whose copies between host and device keep it busy at least as long
    as all its other work (``copy_us`` against ``other_us``: the unions of each, which run side by side where the
    copies overlap compute) is ``copy-bound``: the link sets the pace (a copy from pageable memory runs at a fraction
    of a pinned one's rate, and holds the CPU while it runs), not the GPU's compute.
    """
    if gpu_ops == 0:
        return "no-gpu"
    own = cpu_us - counted_wait(sync_wait_us, cpu_us)
    full_queue = (starved_share is not None and starved_share <= STARVED_AT
                  and (launch_us is None or launch_us >= own - gpu_us))
    if gpu_us >= at * own or full_queue:
        return "copy-bound" if copy_us > 0 and copy_us >= other_us else "compute-bound"
    return "overhead-bound"


def cpu_vs_gpu(session, at: float = GPU_BOUND_AT, steps_df: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per step: CPU time against the GPU work it launched, and the bound rule's verdict (:func:`bound`).

    Args:
        session: a trace session.
        at: the rule's threshold on ``gpu_to_cpu`` (default 1: GPU work equal to the CPU time).
        steps_df: the result of :func:`steps` when already computed (saves a query).

    Returns:
        DataFrame with ``step``, ``cpu_dur_us``, ``sync_wait_us``, ``gpu_busy_us``, ``gpu_busy_fraction`` (in the
        step's own window), ``gpu_to_cpu`` (``gpu_busy_us / (cpu_dur_us - sync_wait_us)``: GPU work launched per
        unit of the CPU's own time, the wait as :func:`counted_wait` counts it; at or above ``at`` the GPU is the
        bottleneck), ``gpu_starved_share`` (the share of the step's window the GPU sat idle with nothing launched)
        and ``bound`` (``overhead-bound``, ``compute-bound``, ``copy-bound``, or ``no-gpu`` when the step launched
        no GPU work).
    """
    df = steps(session) if steps_df is None else steps_df
    out = df[["step", "cpu_dur_us", "sync_wait_us", "gpu_busy_us", "gpu_busy_fraction", "gpu_ops",
              "gpu_starved_us"]].copy()
    waits = [counted_wait(w, c) for w, c in zip(out["sync_wait_us"].tolist(), out["cpu_dur_us"].tolist())]
    out["gpu_to_cpu"] = ratio(out["gpu_busy_us"], out["cpu_dur_us"] - pd.Series(waits, index=out.index))
    out["gpu_starved_share"] = ratio(out["gpu_starved_us"], out["cpu_dur_us"])
    out["bound"] = pd.Series(_step_bounds(df, at), index=out.index, dtype=object)
    return out.drop(columns=["gpu_ops", "gpu_starved_us"]).reset_index(drop=True)


def _step_bounds(df: pd.DataFrame, at: float = GPU_BOUND_AT) -> list[str]:
    """:func:`bound` of each row of a :func:`steps` frame, on that step's own figures."""
    starved = ratio(df["gpu_starved_us"], df["cpu_dur_us"]).tolist()
    copies = df["copy_busy_us"].tolist() if "copy_busy_us" in df else [0.0] * len(df)
    others = df["other_busy_us"].tolist() if "other_busy_us" in df else [0.0] * len(df)
    calls = df["launch_call_us"].tolist() if "launch_call_us" in df else [None] * len(df)
    return [bound(g, c, int(n), at, w, None if x != x else x, k, o, lc) for g, c, n, w, x, k, o, lc in zip(
        df["gpu_busy_us"].tolist(), df["cpu_dur_us"].tolist(), df["gpu_ops"].tolist(), df["sync_wait_us"].tolist(),
        starved, copies, others, calls)]


def working_steps(df: pd.DataFrame) -> pd.DataFrame:
    """The steps the loop worked in: all but the empty ones (``stub``): those in which no ATen op and no launch call
    began, shorter than each step of their thread in which one began. ``profile.step()`` closes a step and opens the
    next, so a profiler that stops while it records (no schedule, or a loop that ends mid-cycle) closes one last step
    that holds no iteration, only what ran between the last ``step()`` and the stop: the profiler's closing stub
    (HTA's MI250 trace: ProfilerStep#2, 49 µs with nothing in it, beside 9.29 ms steps; a DataLoader loop's stub
    holds the ``__next__`` that ended it, a GPU-bound loop's the kernels queued before it). A loop that calls
    ``step()`` twice per iteration makes one such step per iteration (7.8–13.2 µs beside 139–204 ms steps on a
    CPU): with them, half the steps held nothing and the median step stood for none. A per-step median over such
    steps would stand for no step, and a first step compared with one would look 189× slower. Any other step is one
    of the loop, however little it recorded: a step that only sleeps in Python, longer than those that work, is a
    step of the loop, and its time is the loop's.
    The summary's per-step medians, :func:`basis_steps` (and so the steady state) and the questions' and rules'
    per-step figures rest on these steps."""
    if "stub" not in df or df.empty:
        return df
    stub = df["stub"].to_numpy(dtype=bool)
    return df[~stub] if stub.any() else df


def basis_steps(df: pd.DataFrame) -> pd.DataFrame:
    """The steps a steady-state verdict rests on, of the :func:`working_steps`: with 3 or more, those after the
    first (the first carries start-up effects that differ with the schedule and warm-up); otherwise all of them.
    Where ranks' traces were merged into one file, each process's steps are its own loop: each one's first is left
    out where it has 3 or more (:func:`first_steps`). Of those, a step in which torch.compile's compiler ran is
    left out too (:func:`without_compile_steps`): a cold reduce-overhead run's second step records its graph in
    16.7 ms where the steps that replay it take 0.38 ms (an H100, max-autotune at 64²)."""
    df = working_steps(df)
    return without_compile_steps(df[~df.index.isin(first_steps(df).index)])[0]


def first_steps(df: pd.DataFrame) -> pd.DataFrame:
    """Of these steps (in time order, as :func:`steps` gives them), the first of each process (``pid``) that has 3
    or more: the steps :func:`basis_steps` leaves out as first steps. One row for a trace of one loop; one per rank
    where ranks' traces were merged into one file (two copies of the H200's cold 64² run: its first step's 187.5 µs
    against 63–69 µs for the others stayed among the second rank's steady steps, and in their median)."""
    if not len(df):
        return df
    pids = df["pid"].tolist() if "pid" in df else [0] * len(df)
    keys = [x if x is not None and x == x else None for x in pids]  # (a lane without a pid: one loop of its own)
    count, seen, first = Counter(keys), set(), []
    for k in keys:
        first.append(k not in seen and count[k] >= 3)
        seen.add(k)
    return df[np.asarray(first, dtype=bool)]


def without_compile_steps(df: pd.DataFrame) -> tuple[pd.DataFrame, list[int]]:
    """Of these steps, those in which torch.compile's compiler did not run (``compile_us``: it compiled, recompiled
    or recorded a CUDA graph, one-time work like a first step's), and the numbers of those in which it did, where a
    step without it remains; else all of them, and none."""
    if "compile_us" not in df or not len(df):
        return df, []
    comp = df["compile_us"] > 0
    if comp.any() and not comp.all():
        return df[~comp], [int(k) for k in df.loc[comp, "step"]]
    return df, []


def measured_steps(df: pd.DataFrame) -> pd.DataFrame:
    """The steps every per-step figure of a run reads: the steady state's (:func:`steady_state`'s ``basis_steps``):
    the :func:`basis_steps` (the working steps after the first, from 3 on, less those in which torch.compile's
    compiler ran where a step without it remains), and of them, in a trace with GPU work, those that launched some
    (where any did). The summary's per-step medians, the pages', questions 2, 9 and 10 and the rules read these, so
    that no two of them give a run's step two medians (a warm 64² run of three steps: 187.9 µs in question 2's
    steady state, 246.4 µs in the summary and question 10, which held the first step and the profiler's start-up)."""
    b = basis_steps(df)
    if "gpu_ops" in b and (b["gpu_ops"] > 0).any():
        b = b[b["gpu_ops"] > 0]
    return b


def compile_steps(df: pd.DataFrame) -> list[int]:
    """The working steps left out of :func:`basis_steps` in which torch.compile's compiler ran (the first step too,
    where it compiled), where a step of the basis ran without it; none where it ran in every one of them (it
    compiled again each step: then no step is left out for it)."""
    work = working_steps(df)
    if "compile_us" not in work or not len(work):
        return []
    b = basis_steps(df)
    if not len(b) or (b["compile_us"] > 0).all():
        return []
    kept = set(b["step"].tolist())
    return [int(k) for k, c in zip(work["step"], work["compile_us"]) if int(k) not in kept and c > 0]


DATA_WAIT_AT = 0.2
"""The share of the steady state's CPU time spent inside the DataLoader's batches (:func:`data_wait`) from which the
loop waits on its input: question 2 and the ``input_bound`` rule say so."""


def data_wait(steps_df: pd.DataFrame) -> dict:
    """How long the steady state's steps (:func:`measured_steps`) waited for their batches (``data_us``): ``steps``
    (their numbers), ``data_us_per_step`` and ``cpu_us_per_step`` (means), ``share`` (the sum of ``data_us`` over
    the sum of ``cpu_dur_us``; None without CPU time), ``by_step`` ({step: data_us}). Sums and means, not medians: a
    DataLoader's workers hand out prefetched batches for a while and then the loop waits for the next ones at once,
    so most steps wait for nothing and a median would hide the waits."""
    b = measured_steps(steps_df) if len(steps_df) else steps_df
    n = len(b)
    data = b["data_us"].astype(float) if "data_us" in b else pd.Series(0.0, index=b.index)
    cpu = float(b["cpu_dur_us"].sum()) if n else 0.0
    return {"steps": [int(x) for x in b["step"]], "data_us_per_step": float(data.sum()) / n if n else 0.0,
            "cpu_us_per_step": cpu / n if n else 0.0, "share": float(data.sum()) / cpu if cpu > 0 else None,
            "by_step": {int(k): float(v) for k, v in zip(b["step"], data)}}


def steady_state(steps_df: pd.DataFrame, at: float = GPU_BOUND_AT) -> dict:
    """The bound of the run's steady state, with its evidence: :func:`bound` applied to the medians of the basis
    steps (:func:`basis_steps`, of the :func:`working_steps`) that launched GPU work (the median GPU work against the
    median CPU time less the median time blocked in synchronize calls while the GPU worked), unless every one of
    those steps gets the other verdict on its own figures: the medians of the rule's two tests (GPU work against CPU
    time, the starved share) can fail both where each step passes one (``bound_of_every_step`` then True).

    Returns a dict: ``bound`` (``compute-bound``, ``copy-bound``, ``overhead-bound``, ``no-gpu``; ``None`` without
    steps),
    ``basis`` (``after_first`` or ``all``), ``first_steps`` (the steps left out as first steps, :func:`first_steps`:
    one per process where ranks' traces were merged), ``basis_steps`` (those of the basis that launched GPU work,
    when some did; ``steps_without_gpu`` then lists the others), ``empty_steps`` (those left out as empty,
    :func:`working_steps`), ``closing_stubs`` (whether each of them is the last step of its process, the profiler's
    closing stub; else some lie between steps of the loop),
    ``compile_steps``
    (those left out because torch.compile's compiler ran in them, :func:`compile_steps`),
    ``cpu_us_per_step``, ``sync_wait_us_per_step`` (as
    :func:`counted_wait` counts it: 0 under :data:`SYNC_WAIT_AT` of the CPU time; ``sync_wait_measured_us_per_step``
    the median as measured) and ``gpu_us_per_step``
    (medians), ``cpu_own_us_per_step`` (the first less the second), ``copy_us_per_step`` and ``other_us_per_step``
    (medians of the GPU's time in host↔device copies and in its other work, the two parts of ``gpu_us_per_step``),
    ``launch_us_per_step`` (median time in the calls that launched GPU work),
    ``gpu_to_cpu`` (GPU work per unit of the CPU's
    own time), ``starved_share`` (the median share of a step's window the GPU sat idle with
    nothing launched for it), ``threshold`` (``at``), and the evidence: ``gpu_idle_share`` (the share of a
    steady-state step the GPU waits, ``1 − gpu/cpu_own`` when overhead-bound, else 0), ``busy_in_window`` (median
    share of each step's own CPU window in which the GPU was busy: running recorded work, or a GPU's first recorded
    op waiting behind work the trace does not hold), ``unlaunched_in_window`` (median share of each
    step's window in which the GPU ran work the trace holds no launch call for, part of ``busy_in_window``),
    ``unrecorded_in_window`` (the same for work the trace does not hold, ``steps.unrecorded_in_step_us``, part of
    ``busy_in_window``),
    ``unlaunched_wait_us_per_step`` (median of the part of the blocked time in which it did, part of
    ``sync_wait_us_per_step``; 0 when that is). Whether the launch queue grew is :func:`queue_growth`'s to say.
    """
    out = {"bound": None, "basis": None, "basis_steps": [], "cpu_us_per_step": None, "gpu_us_per_step": None,
           "sync_wait_us_per_step": None, "sync_wait_measured_us_per_step": None, "cpu_own_us_per_step": None, "copy_us_per_step": None,
           "other_us_per_step": None, "launch_us_per_step": None, "gpu_to_cpu": None, "starved_share": None,
           "threshold": at, "gpu_idle_share": None, "busy_in_window": None, "unlaunched_in_window": None,
           "unrecorded_in_window": None,
           "unlaunched_wait_us_per_step": None,
           "steps_without_gpu": [], "empty_steps": [], "closing_stubs": True, "compile_steps": [], "first_steps": [],
           "bound_of_every_step": False}
    if steps_df is None or steps_df.empty:
        return out
    work = working_steps(steps_df)
    empty = steps_df[~steps_df.index.isin(work.index)]
    out["empty_steps"] = [int(x) for x in empty["step"]]
    if len(empty):  # (each the last of its process: the profiler's closing stub)
        by = steps_df["pid"].fillna(-1) if "pid" in steps_df else pd.Series(0, index=steps_df.index)
        last = steps_df.groupby(by, sort=False)["start_ns"].transform("max")
        out["closing_stubs"] = bool((empty["start_ns"] == last[empty.index]).all())
    basis = basis_steps(steps_df)
    out["compile_steps"] = comp = compile_steps(steps_df)
    # the first step left out as the first (its compile, where it compiled, is said as the compiler's)
    firsts = [int(x) for x in first_steps(work)["step"]]
    out["first_steps"] = firsts  # (one per process that has 3 or more: where ranks' traces were merged, several)
    out["basis"] = ("after_first" if firsts and not set(firsts) & set(comp) else "all")
    out["basis_steps"] = [int(x) for x in basis["step"]]
    cpu = float(basis["cpu_dur_us"].median())
    out["cpu_us_per_step"] = cpu
    with_gpu = measured_steps(steps_df)  # (the basis, or those of it that launched GPU work where any did)
    if not (with_gpu["gpu_ops"] > 0).any():
        out["bound"] = "no-gpu"
        return out
    if len(with_gpu) < len(basis):  # the medians and every per-step figure rest on the steps that launched work
        out["steps_without_gpu"] = [int(x) for x in basis.loc[basis["gpu_ops"] <= 0, "step"]]
        out["basis_steps"] = [int(x) for x in with_gpu["step"]]
    gpu = float(with_gpu["gpu_busy_us"].median())
    cpu_g = float(with_gpu["cpu_dur_us"].median())
    measured = float(with_gpu["sync_wait_us"].median())
    wait = counted_wait(measured, cpu_g)
    own = cpu_g - wait
    starved = float(ratio(with_gpu["gpu_starved_us"], with_gpu["cpu_dur_us"]).median())
    starved = None if starved != starved else starved  # (NaN: no window with a duration)
    copy = float(with_gpu["copy_busy_us"].median()) if "copy_busy_us" in with_gpu else 0.0
    other = float(with_gpu["other_busy_us"].median()) if "other_busy_us" in with_gpu else 0.0
    calls = float(with_gpu["launch_call_us"].median()) if "launch_call_us" in with_gpu else None
    label = bound(gpu, cpu_g, len(with_gpu), at, wait, starved, copy, other, calls)
    unrecorded = with_gpu.get("unrecorded_in_step_us", pd.Series(0.0, index=with_gpu.index))
    # each step by the same rule: where every one of them gets the other verdict (each meeting the rule its own way,
    # one by its GPU work, another by never starving), the medians of the two tests must not overrule them all
    each = set(_step_bounds(with_gpu, at))
    out["bound_of_every_step"] = len(each) == 1 and label not in each
    out.update(cpu_us_per_step=cpu_g, gpu_us_per_step=gpu, sync_wait_us_per_step=wait,
               sync_wait_measured_us_per_step=measured, cpu_own_us_per_step=own,
               copy_us_per_step=copy, other_us_per_step=other, launch_us_per_step=calls,
               gpu_to_cpu=gpu / own if own > 0 else None, starved_share=starved,
               bound=next(iter(each)) if out["bound_of_every_step"] else label,
               busy_in_window=float(ratio(with_gpu["gpu_busy_in_step_us"] + unrecorded, with_gpu["cpu_dur_us"])
                                    .fillna(0.0).median()),
               unrecorded_in_window=float(ratio(unrecorded, with_gpu["cpu_dur_us"]).fillna(0.0).median()))
    if "unlaunched_in_step_us" in with_gpu:
        out["unlaunched_in_window"] = float(ratio(with_gpu["unlaunched_in_step_us"], with_gpu["cpu_dur_us"])
                                            .fillna(0.0).median())
        out["unlaunched_wait_us_per_step"] = (float(with_gpu["unlaunched_wait_us"].median()) if wait > 0 else 0.0)
    out["gpu_idle_share"] = max(0.0, 1.0 - gpu / own) if out["bound"] == "overhead-bound" and own > 0 else 0.0
    return out


GROWS_AT = 3.0
"""A step's first GPU op waiting this many times as long after its launch call as the first step's: a queue that
grew."""

RISES_AT = 0.10
"""A first-op wait that rose at every one of three steps or more, by this share of a step's CPU time per step on
average (the median step's), is a queue that grew too, however long the first one was (a first step that already
waited behind a warm-up step's kernel: 3.50, 6.55, 9.62 ms on an H100)."""

HELD_WITHIN = 0.10
"""Steps whose first GPU op waited within this share of the last step's wait: the queue held its length, where at
least half the steps after the first (and two) did (a slow steady drift has only its last steps that close) and
their waits did not still rise at every step by :data:`RISES_AT` of a step's CPU time (a long queue still growing
has its last steps within a few percent of each other too)."""

QUEUED_AT = 0.9
"""With fewer than two steps, a last GPU op's long wait is a queue of work only where the GPU ran earlier work for at
least this share of it (an op launched onto an idle GPU that starts late waited for something else)."""

QUEUE_GREW = ("grows", "grew_held")
"""The states of :func:`queue_growth` in which the queue grew from step to step (and did not empty each step)."""


def first_ops(launches: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``launches`` (``analyses.launch_latency``: one per GPU op) of each launch call's first GPU op (the
    least wait): what the call waited for. A call that runs several ops (a CUDA graph's replay, ``cudaGraphLaunch``)
    runs them one after another, so its later ops' waits are their place in the graph, not a queue
    (:func:`queue_growth`); a call of one op is its own row."""
    if launches.empty or not launches["launch_id"].duplicated().any():
        return launches
    return launches.sort_values(["launch_id", "latency_us"], kind="stable").drop_duplicates("launch_id")


def queue_growth(launches: pd.DataFrame, steps_df: pd.DataFrame) -> dict:
    """Whether the launch queue grew: the one rule that question 4 states and question 2 cites.

    Read from each GPU op's wait after its launch call began (``launches``: ``analyses.launch_latency``), where it
    can be read:

    * across the steps (two or more steps with launch pairs): each step's first GPU op (its first launch) against the
      first step's. The queue **grows** where the last one waited more than :data:`GROWS_AT` times the first's and
      so did at least half the steps after the first (one late step is no trend), or where, over three steps or
      more, it waited longer at every step, by at least :data:`RISES_AT` of the median step's CPU time per step
      (:func:`_rises`): the CPU launches faster than the GPU runs, and the GPU lane drifts right. It grew and then
      **held** (``grew_held``) where the last steps after the first waited alike (within :data:`HELD_WITHIN` of the
      last one's), at least half the steps after the first and two, and did not still wait longer at every one of
      them by that much a step (a queue still growing at that pace has not held, however long it already is); it
      grew but **drained** where the GPU sat idle
      with nothing launched for it in every step after the first (more than :data:`STARVED_AT` of the step): the
      queue empties each step and no backlog carries over. Where it did not grow across the steps but each step's
      later half of ops waited more than :data:`GROWS_AT` times its first op (median over steps), it grows
      **within** each step and drains before the next;
    * with fewer than two steps, ``queued_at_end``: the trace's last op waited more than :data:`GROWS_AT` times its
      first (three ops or more) with the GPU running earlier work through at least :data:`QUEUED_AT` of that wait.

    No state where any op started before its launch call (the trace's clocks disagree, so the waits measure no
    queue: ``started_before_launch`` counts them).

    A launch call's wait is its first GPU op's: a call that runs several (a CUDA graph's replay, ``cudaGraphLaunch``)
    runs them one after another, and its later ops wait for its own earlier ones, not for a queue (the H200's Llama
    decode under reduce-overhead: each replay's 81 kernels start up to ~300 µs after the call, on a GPU that had idled
    a median 120 µs before the replay's first).

    Returns:
        dict: ``state`` (``grows``, ``grew_held``, ``drained``, ``within``, ``queued_at_end`` or None; the queue grew
        from step to step in the states of :data:`QUEUE_GREW`), ``started_before_launch``, and the figures the state
        rests on: ``step_first_us`` / ``step_last_us`` (step → the wait of its first and last GPU op), ``held_steps``
        (the steps that held), ``dry_us`` (the median idle time with nothing launched, ``drained``),
        ``late_half_us`` (the median of the steps' later halves' median waits, ``within``), ``first_us`` /
        ``last_us`` (the trace's first and last op's waits) and ``last_wait_busy_share`` (``queued_at_end``).
    """
    out = {"state": None, "started_before_launch": 0}
    if launches is None or launches.empty:
        return out
    early = int((launches["latency_us"] < 0).sum())
    if early:
        out["started_before_launch"] = early
        return out
    o = first_ops(launches).sort_values("launch_start_ns", kind="stable")
    stepped = o[o["step"].notna()] if "step" in o else o.iloc[:0]
    if stepped["step"].nunique() >= 2:
        g = stepped.groupby("step", sort=False)["latency_us"]
        first, last = g.first(), g.last()
        out.update(step_first_us={int(k): float(v) for k, v in first.items()},
                   step_last_us={int(k): float(v) for k, v in last.items()})
        cpu = (float(steps_df["cpu_dur_us"].median()) if steps_df is not None and "cpu_dur_us" in steps_df
               and len(steps_df) else float("nan"))
        after = first.iloc[1:]
        jumped = GROWS_AT * max(float(first.iloc[0]), 1e-9)
        if (first.iloc[-1] > jumped and (after > jumped).sum() >= len(after) / 2) or (len(first) >= 3
                                                                                         and _rises(first, cpu)):
            held = _held_tail(first)
            if len(held) >= max(2, (len(first) - 1) / 2) and not _rises(held, cpu):
                out.update(state="grew_held", held_steps=[int(k) for k in held.index])
                return out
            dry = _drained(steps_df, [int(k) for k in first.index])
            if dry is not None:
                out.update(state="drained", dry_us=dry)
                return out
            out["state"] = "grows"
            return out
        late = g.agg(lambda x: x.iloc[len(x) // 2:].median())
        if (late / first.where(first > 0)).median() > GROWS_AT:
            out.update(state="within", late_half_us=float(late.median()))
        return out
    lat = o["latency_us"]
    if len(o) >= 3 and lat.iloc[-1] > GROWS_AT * max(lat.iloc[0], 1e-9):
        busy = _busy_share(o, o.iloc[-1])
        out.update(first_us=float(lat.iloc[0]), last_us=float(lat.iloc[-1]), last_wait_busy_share=busy)
        if busy >= QUEUED_AT:
            out["state"] = "queued_at_end"
    return out


def _rises(waits: pd.Series, cpu: float) -> bool:
    """Whether these first-op waits (two or more, by step) rose at every step, by at least :data:`RISES_AT` of
    ``cpu`` (a step's CPU time, µs) per step on average. False where ``cpu`` is unknown (NaN)."""
    return (len(waits) >= 2 and bool((waits.diff().iloc[1:] > 0).all())
            and float(waits.iloc[-1] - waits.iloc[0]) / (len(waits) - 1) >= RISES_AT * cpu)


def _held_tail(first: pd.Series) -> pd.Series:
    """The last steps after the first (a Series by step) whose first op's wait is within :data:`HELD_WITHIN` of the
    last step's."""
    last = float(first.iloc[-1])
    k = len(first)
    while k > 1 and abs(float(first.iloc[k - 1]) - last) <= HELD_WITHIN * max(last, 1e-9):
        k -= 1
    return first.iloc[k:]


def _drained(steps_df, numbers) -> float | None:
    """The median time the GPU sat idle with nothing launched for it (``gpu_starved_us``) in these steps after the
    first, when it did so in every one of them (more than :data:`STARVED_AT` of the step). None otherwise."""
    if steps_df is None or "gpu_starved_us" not in steps_df:
        return None
    s = steps_df[steps_df["step"].isin(numbers)].iloc[1:]
    if s.empty or not (s["gpu_starved_us"] > STARVED_AT * s["cpu_dur_us"]).all():
        return None
    return float(s["gpu_starved_us"].median())


def _busy_share(ops: pd.DataFrame, op) -> float:
    """The share of ``op``'s wait (from its launch call's start to its own start) in which the GPU ran other ops of
    ``ops`` (``launch_latency`` rows): where it is low, the op waited for something else than a queue of work."""
    a, b = int(op["launch_start_ns"]), int(op["gpu_start_ns"])
    if b <= a:
        return 0.0
    start = ops["gpu_start_ns"].to_numpy(dtype=np.int64)
    end = start + np.round(ops["gpu_dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64)
    return union_ns(np.clip(start, a, b), np.clip(end, a, b)) / (b - a)


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
