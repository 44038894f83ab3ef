"""The phases of a training step: data, forward, backward, optimizer, zero_grad, per profiler step.

The rule, stated once (:func:`phase_masks`): a slice (any thread, not a ``gpu_user_annotation`` copy) marks a phase by
its name, the profiler's backward by where its node lies too:

- ``data``: the range torch.utils.data's DataLoader puts around each batch its iterator hands out
  (``enumerate(DataLoader)#<iterator class>.__next__``, :func:`is_data_loader_next`), on a thread that holds the
  steps (the loop's): the time the loop waited for its batch, made in its own thread (``num_workers=0``: the
  samples' loading and collation) or by worker processes (the wait for the next ready batch, and its pinning). A
  thread of the loop's own that prefetches batches while the step runs keeps nobody waiting.
- ``forward``: the ``train::forward`` range the app's training workloads add (``workloads._train.TRAIN_RANGES``). A
  trace without any (an imported one) has no forward annotation, so its forward is read from where it sits: the
  step's own sub-slices that end before the step's last backward range begins, overlap no backward range and mark no
  other phase (descending into one that does overlap, so a range the loop wraps around its whole step is looked
  inside); that is the forward pass and the loss, and whatever the loop did before them (moving the batch to the
  device, say), before each backward of a loop that accumulates gradients over several micro-batches.
- ``backward``: ``train::backward``, or the backward's work as the profiler records it (``Shared.backward_work``,
  the one rule ``autograd_wait`` reads too): its ``autograd::engine::evaluate_function: ...`` slices, or in the 2021
  format, which has none, the backward nodes' own slices (``MmBackward``, ``torch::autograd::AccumulateGrad``) that
  lie inside no other. On a GPU the autograd engine runs them on its own thread, inside the time of
  ``loss.backward()``; on a CPU, on the thread that called it.
- ``optimizer``: ``train::optimizer``, or the profiler's ``Optimizer.step#<Class>.step``.
- ``zero_grad``: ``train::zero_grad``, or ``Optimizer.zero_grad#<Class>.zero_grad``.

A trace has phases when a slice marks one of the training phases (forward to zero_grad) and it has steps; a
DataLoader alone (an inference loop) makes no training step. Inside a step's window each instant counts once, for the
first phase (in that order) whose ranges cover it; the time no phase covers is ``other`` (the loop's own Python,
``.item()`` after the step, the profiler's step call). So the phases of a step add up to its CPU time exactly
(integer ns; :data:`SUM_TOLERANCE_US`). A GPU op belongs to the phase whose ranges hold the start of the call that
launched it (by the same order), to ``other`` when none does; its time is the union of those ops' intervals, wherever
they ran. A trace with no phase range at all has no phases.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..workloads import TRAIN_RANGES
from ._shared import Shared, coverage_ns, frame, frame_cols, merged, shared_for

__all__ = ["phases", "phase_ops", "phases_at", "after_phase", "phase_masks", "empty_phases", "is_data_loader_next",
           "PHASE_COLUMNS", "PHASES", "SUM_TOLERANCE_US", "PROFILER_PHASE_PREFIXES", "DATA_LOADER_NEXT"]

PHASES = ("data", "forward", "backward", "optimizer", "zero_grad", "other")
"""The phases in the order an instant covered by several is given to the first; ``other`` is what none covers."""

PROFILER_PHASE_PREFIXES = {"optimizer": "Optimizer.step#", "zero_grad": "Optimizer.zero_grad#"}
"""The profiler's own annotations of the optimizer's phases (name prefixes), read beside the ``train::`` ranges. The
backward's are not a prefix: ``Shared.backward_work`` states them."""

DATA_LOADER_NEXT = ("enumerate(DataLoader)#", ".__next__")
"""How torch.utils.data names the range around each batch a DataLoader's iterator hands out (``_BaseDataLoaderIter``'s
``_profile_name``): this prefix, the iterator's class, this suffix."""


def is_data_loader_next(name) -> bool:
    """Whether a slice of this name is a DataLoader handing out a batch (:data:`DATA_LOADER_NEXT`)."""
    return isinstance(name, str) and name.startswith(DATA_LOADER_NEXT[0]) and name.endswith(DATA_LOADER_NEXT[1])


SUM_TOLERANCE_US = 0.001
"""How far a step's phases (``other`` included) may sum from its ``cpu_dur_us``: one nanosecond (they are integer ns
of one window, each instant counted once)."""

_NAMED = PHASES[:-1]
_DATA, _FORWARD, _BACKWARD = (PHASES.index(p) for p in ("data", "forward", "backward"))

PHASE_COLUMNS = ["step", "phase", "cpu_us", "share", "gpu_us", "gpu_ops", "kernels", "aten_ops", "source"]


def empty_phases() -> pd.DataFrame:
    """The :func:`phases` frame of a trace without phases."""
    return frame([], PHASE_COLUMNS)


def _phase_of_name(name) -> int:
    """The index into PHASES of the phase a slice of this name marks; -1 for none (the profiler's backward slices
    are read by :func:`phase_masks`, from ``Shared.backward_work``)."""
    if not isinstance(name, str):
        return -1
    if is_data_loader_next(name):
        return _DATA
    for k, ph in enumerate(_NAMED):
        if name == TRAIN_RANGES.get(ph) or (ph in PROFILER_PHASE_PREFIXES and name.startswith(PROFILER_PHASE_PREFIXES[ph])):
            return k
    return -1


def phase_masks(sh: Shared) -> np.ndarray:
    """For every row of ``sh.slices``: the index into :data:`PHASES` of the phase it marks, by its name or, for the
    profiler's backward, as ``sh.backward_work`` (-1: none; a ``gpu_user_annotation`` copy marks none, nor a
    DataLoader's range on a thread that holds no step)."""
    t = sh.slices
    by_name = np.array([_phase_of_name(u) for u in t["name_uniq"]] or [-1], dtype=np.int64)
    out = by_name[t["name_codes"]] if len(t["name_codes"]) else np.zeros(0, dtype=np.int64)
    bw = sh.backward_work
    if (out >= 0).any() or bw.any():
        out = out.copy()
        out[bw] = _BACKWARD
        out[sh.cat_mask(lambda c: c == "gpu_user_annotation")] = -1
        data = out == _DATA
        if data.any():  # a batch handed out on a thread that runs no step keeps no step waiting
            loop = np.array(sorted({int(s[6]) for s in sh.steps_list if s[6] is not None}), dtype=np.int64)
            out[data & ~np.isin(t["utid"], loop)] = -1
    return out


def data_ranges(sh: Shared) -> tuple[np.ndarray, np.ndarray]:
    """The ``data`` phase's ranges (the DataLoader's batches, :func:`is_data_loader_next`) as disjoint sorted
    intervals (ns), whether or not the trace has training phases: ``steps``' ``data_us`` reads them too."""
    t = sh.slices
    r = np.flatnonzero(phase_masks(sh) == _DATA)
    return merged(t["ts"][r], t["ts"][r] + t["dur"][r])


def _forward_before(sh: Shared, lanes: dict, step_row: int, until: int, marks: np.ndarray,
                    backward: tuple[np.ndarray, np.ndarray]) -> list[tuple[int, int]]:
    """The forward of a step without ``train::forward``: the outermost slices on the step's thread that start in
    the step, end by ``until`` (the start of its last backward), overlap none of the ``backward`` ranges (merged,
    sorted: a loop that accumulates gradients runs a forward before each micro-batch's backward), are no Python
    frame (``with_stack``'s frames, opened before the step, hold its ops: the step slice is then no parent of them)
    and mark no phase nor lie in a slice that does (the DataLoader's batch, ``zero_grad``). ``lanes``: per thread
    its slice rows sorted by start, and their starts."""
    t = sh.slices
    got = lanes.get(int(t["utid"][step_row]))
    if got is None:
        return []
    rows, starts = got
    lo, hi = np.searchsorted(starts, [t["ts"][step_row], until], side="left")
    r = rows[lo:hi]
    r = r[(r != step_row) & (t["ts"][r] + t["dur"][r] <= until)]
    bb, be = backward
    k = np.searchsorted(bb, t["ts"][r] + t["dur"][r], side="left") - 1  # the last backward range starting before
    r = r[(k < 0) | (be[np.maximum(k, 0)] <= t["ts"][r])]  # each slice's end: it must end before the slice begins
    r = r[sh.cats_at(r) != "python_function"]
    marked = r[marks[r] >= 0]
    r = r[~_inside(t["ts"][r], *merged(t["ts"][marked], t["ts"][marked] + t["dur"][marked]))] if len(marked) else r
    out: list[tuple[int, int]] = []
    end = -1
    for b, e in zip(t["ts"][r].tolist(), (t["ts"][r] + t["dur"][r]).tolist()):  # (start order: outermost first)
        if b >= end:
            out.append((b, e))
            end = e
    return out


def _inside(x: np.ndarray, mb: np.ndarray, me: np.ndarray) -> np.ndarray:
    """Whether each x lies in one of the disjoint sorted intervals [mb, me)."""
    if len(mb) == 0:
        return np.zeros(len(x), dtype=bool)
    i = np.searchsorted(mb, x, side="right") - 1
    return (i >= 0) & (x < me[np.maximum(i, 0)])


class _Phased:
    """The phase ranges of a trace: per phase the disjoint intervals (forward's per step where read by position)."""

    def __init__(self, sh: Shared) -> None:
        t = sh.slices
        self.marks = phase_masks(sh)
        self.steps = [s for s in sh.steps_list if s[6] is not None]
        # (a training phase: a DataLoader alone is none)
        self.any = bool((self.marks > _DATA).any()) and bool(self.steps)
        if not self.any:
            return
        b, e = t["ts"], t["ts"] + t["dur"]
        self.ranges = []
        for k in range(len(_NAMED)):
            r = np.flatnonzero(self.marks == k)
            self.ranges.append(merged(b[r], e[r]))
        if len(self.ranges[_FORWARD][0]) == 0:  # no train::forward: read each step's forward by position
            bw_b, bw_e = self.ranges[_BACKWARD]
            fb, fe = [], []
            lanes = {}  # the steps' threads: their rows by start (ties: the longer, the outer, first)
            for u in {int(s[6]) for s in self.steps}:
                rows = np.flatnonzero(t["utid"] == u)
                rows = rows[np.lexsort((-t["dur"][rows], t["ts"][rows]))]
                lanes[u] = (rows, t["ts"][rows])
            for sid, _n, _nm, ts, dur, _d, _u in self.steps:
                i, j = np.searchsorted(bw_b, [ts, ts + dur], side="left")  # the backward ranges starting in it
                if i < j:
                    for x, y in _forward_before(sh, lanes, int(sid), int(bw_b[j - 1]), self.marks, (bw_b, bw_e)):
                        fb.append(x)
                        fe.append(y)
            self.ranges[_FORWARD] = merged(np.array(fb, dtype=np.int64), np.array(fe, dtype=np.int64))
        self.forward_by = "record_function" if (self.marks == _FORWARD).any() else "position"

    def phase_at(self, x: np.ndarray) -> np.ndarray:
        """The index into PHASES of the first phase whose ranges hold each instant (``other`` where none does)."""
        out = np.full(len(x), len(_NAMED), dtype=np.int64)
        for k in range(len(_NAMED) - 1, -1, -1):
            out[_inside(x, *self.ranges[k])] = k
        return out


def phases(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per profiler step and phase of a training step: its CPU time, the GPU work launched in it, its kernels.

    The phases and how they are read: this module's docstring (the rule is stated there once).

    Returns:
        DataFrame with one row per (step, phase) in step order and :data:`PHASES` order, ``other`` included:
        ``step``, ``phase``, ``cpu_us`` (the step's window time given to the phase; the phases of a step sum to its
        ``cpu_dur_us`` within :data:`SUM_TOLERANCE_US`), ``share`` (of the step), ``gpu_us`` (union of the GPU ops
        launched from calls inside the phase's ranges), ``gpu_ops``, ``kernels`` (of them, category kernel),
        ``aten_ops`` (ATen ops, at any depth, starting inside the phase's ranges), ``source`` (``record_function``
        for the app's ``train::`` ranges, ``profiler`` for the profiler's and torch.utils.data's own annotations,
        ``position`` for a forward read by position, empty for ``other`` and for a phase no slice marks). Empty
        (same columns) when the trace has no phase range or no steps.
    """
    sh = shared_for(session, shared)
    cols = PHASE_COLUMNS
    ph = sh.cached("phases", _Phased)
    if not ph.any:
        return frame([], cols)
    t, steps = sh.slices, ph.steps
    n, K = len(steps), len(PHASES)
    starts = np.array([s[3] for s in steps], dtype=np.int64)
    ends = starts + np.array([s[4] for s in steps], dtype=np.int64)
    # CPU time: each phase's ranges clipped to each step's window, one sweep (groups: steps, classes: phases)
    bb, ee, gg, cc = [], [], [], []
    for k, (rb, re_) in enumerate(ph.ranges):
        for j in range(n):
            lo = np.searchsorted(re_, starts[j], side="right")
            hi = np.searchsorted(rb, ends[j], side="left")
            if hi > lo:
                bb.append(np.maximum(rb[lo:hi], starts[j]))
                ee.append(np.minimum(re_[lo:hi], ends[j]))
                gg.append(np.full(hi - lo, j, dtype=np.int64))
                cc.append(np.full(hi - lo, k, dtype=np.int64))
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64)
    first, _own = coverage_ns(cat(bb), cat(ee), cat(gg), n, cat(cc), K - 1)
    cpu = np.zeros((n, K), dtype=np.int64)
    cpu[:, :-1] = first
    cpu[:, -1] = (ends - starts) - first.sum(axis=1)
    # GPU work: the pairs launched in each step, by the phase holding the launch call's start
    gpu = np.zeros((n, K), dtype=np.int64)
    nops, nk = np.zeros((n, K), dtype=np.int64), np.zeros((n, K), dtype=np.int64)
    step_of = {int(s[0]): j for j, s in enumerate(steps)}
    i, which = sh.pair_steps
    if len(i):
        all_steps = sh.steps_list
        j = np.array([step_of.get(int(all_steps[w][0]), -1) for w in which.tolist()], dtype=np.int64)
        keep = j >= 0
        i, j = i[keep], j[keep]
        p = sh.p
        k = ph.phase_at(p["launch_ts"][i])
        key = j * K + k
        gid = p["gpu_id"][i]
        o = np.lexsort((gid, key))
        key, gid, i = key[o], gid[o], i[o]
        new = np.r_[True, (key[1:] != key[:-1]) | (gid[1:] != gid[:-1])]
        key, i = key[new], i[new]  # each GPU op once per (step, phase)
        f, _ = coverage_ns(p["gpu_ts"][i], p["gpu_end"][i], key, n * K)
        gpu = f[:, 0].reshape(n, K)
        nops = np.bincount(key, minlength=n * K).reshape(n, K)
        nk = np.bincount(key[p["gpu_category"][i] == "kernel"], minlength=n * K).reshape(n, K)
    # ATen ops starting inside each phase's ranges, per step
    aten = np.zeros((n, K), dtype=np.int64)
    rows = np.flatnonzero(sh._is_aten)
    if len(rows):
        ts = t["ts"][rows]
        js = np.searchsorted(starts, ts, side="right") - 1
        ok = (js >= 0) & (ts < ends[np.maximum(js, 0)])
        ks = ph.phase_at(ts[ok])
        np.add.at(aten, (js[ok], ks), 1)
    src = {k: ("" if not (ph.marks == k).any() else "record_function" if _has_range(sh, ph.marks, k) else "profiler")
           for k in range(len(_NAMED))}
    if ph.forward_by == "position":
        src[_FORWARD] = "position"
    src[K - 1] = ""
    dur = (ends - starts).astype(np.float64)
    step_no = [s[1] for s in steps]
    data = {"step": np.repeat(np.array(step_no, dtype=object), K), "phase": np.tile(np.array(PHASES, dtype=object), n),
            "cpu_us": cpu.reshape(-1) / 1000.0,
            "share": (cpu / np.where(dur > 0, dur, np.nan)[:, None]).reshape(-1),
            "gpu_us": gpu.reshape(-1) / 1000.0, "gpu_ops": nops.reshape(-1), "kernels": nk.reshape(-1),
            "aten_ops": aten.reshape(-1), "source": np.tile(np.array([src[k] for k in range(K)], dtype=object), n)}
    df = frame_cols(data)
    df["step"] = pd.to_numeric(df["step"], errors="coerce").astype("Int64")
    return df[cols]


def _has_range(sh: Shared, marks: np.ndarray, k: int) -> bool:
    """Whether phase k is marked by the app's ``train::`` range (else by the profiler's annotation)."""
    name = TRAIN_RANGES.get(_NAMED[k])
    rows = np.flatnonzero(marks == k)
    return bool(len(rows)) and bool((sh.names_at(rows) == name).any())


def phases_at(session, ts, shared: Shared | None = None) -> list:
    """The phase (a name of :data:`PHASES`) of the training step at each of these instants (ns): the first phase
    whose ranges hold it, ``other`` where none does; None for every instant when the trace has no phases."""
    ph = shared_for(session, shared).cached("phases", _Phased)
    ts = np.asarray(ts, dtype=np.int64)
    if not ph.any:
        return [None] * len(ts)
    return [PHASES[k] for k in ph.phase_at(ts).tolist()]


def after_phase(session, ts, phase: str, shared: Shared | None = None) -> list:
    """Whether each instant (ns) comes after a range of ``phase`` that ended in the same step (the step slice whose
    window holds the instant, on the step's thread): a synchronising call "after the optimizer" is one after that
    step's optimizer ran, not any call outside every phase. All False without phases or outside every step."""
    if phase not in PHASES[:-1]:
        raise ValueError(f"phase must be one of {', '.join(PHASES[:-1])}, got {phase!r}")
    ph = shared_for(session, shared).cached("phases", _Phased)
    ts = np.asarray(ts, dtype=np.int64)
    out = np.zeros(len(ts), dtype=bool)
    if not ph.any or not len(ts):
        return out.tolist()
    b, e = ph.ranges[PHASES.index(phase)]
    for _sid, _n, _nm, start, dur, _d, _u in ph.steps:
        inside = np.flatnonzero((ts >= start) & (ts < start + dur))
        if not len(inside):
            continue
        ended = e[(b >= start) & (e <= start + dur)]  # this step's ranges of the phase
        if len(ended):
            out[inside] |= ts[inside] >= ended.min()
    return out.tolist()


def phase_ops(session, phase: str, shared: Shared | None = None) -> pd.DataFrame:
    """The ATen ops (any depth) that start inside ``phase``'s ranges (the rule of :func:`phases`) within a step:
    ``step``, ``slice_id``, ``name``, ``dur_us``, in start order; empty without phases."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    sh = shared_for(session, shared)
    cols = ["step", "slice_id", "name", "dur_us"]
    ph = sh.cached("phases", _Phased)
    if not ph.any:
        return frame([], cols)
    t = sh.slices
    starts = np.array([s[3] for s in ph.steps], dtype=np.int64)
    ends = starts + np.array([s[4] for s in ph.steps], dtype=np.int64)
    rows = np.flatnonzero(sh._is_aten)
    ts = t["ts"][rows]
    js = np.searchsorted(starts, ts, side="right") - 1
    ok = (js >= 0) & (ts < ends[np.maximum(js, 0)])
    rows, js = rows[ok], js[ok]
    m = ph.phase_at(t["ts"][rows]) == PHASES.index(phase)
    rows, js = rows[m], js[m]
    o = np.lexsort((rows, t["ts"][rows]))
    rows, js = rows[o], js[o]
    step_no = np.array([s[1] for s in ph.steps], dtype=object)
    df = frame_cols({"step": step_no[js] if len(js) else np.zeros(0, dtype=object), "slice_id": t["id"][rows],
                     "name": sh.name_codes_at(rows), "dur_us": t["dur"][rows] / 1000.0})
    if len(df):
        df["step"] = pd.to_numeric(df["step"], errors="coerce").astype("Int64")
    return df[cols] if len(df) else frame([], cols)
