"""Pieces that several analyses need, computed once per trace and shared (``analyze`` builds one :class:`Shared`).

Everything here reads the session's typed tables (``session.tables``: numpy columns of ``slice``, ``flow``,
``thread``, ``process``, ``thread_track`` and an args reader), which both engines provide: the mirror from its loader,
perfetto through the extraction queries of ``profiling_core.trace._extract``. No SQL runs here. The pieces: the slice
columns with names and categories as codes (:attr:`Shared.slices`), the GPU ops, the launch call ↔ GPU op pairs
(:meth:`Shared._launch_pairs`: flows, else ``args.correlation``), the ProfilerStep windows, the thread lanes, and
per-step counts. Where an order matters the rule is stated where it is applied (slices by (ts, id), pairs by (launch
id, GPU op id)).

Frames with one row per event are built from column arrays (:func:`frame_cols`): numbers keep their numpy dtype,
text travels as codes into its distinct values (:class:`Coded`) and lands in object columns holding one shared
``str`` per distinct value (a 93 MB trace has 77k kernel rows of ~250-character names); small tables are built from
row tuples (:func:`frame`).
"""
from __future__ import annotations

import re
from functools import cached_property
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..trace._tables import first_seen_codes
from .categories import GPU_OP_CATEGORIES, gpu_op_category

__all__ = ["Shared", "Coded", "IntsOrNull", "take_rows", "shared_for", "frame", "frame_cols", "nullable", "union_ns",
           "unions_ns", "coverage_ns", "expand_ranges", "factorize"]

_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "runtime")
"""The categories (lower case) of the runtime and driver calls that launch GPU work."""
SYNC_CALLS = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cuCtxSynchronize",
              "cuStreamSynchronize", "cuEventSynchronize", "hipDeviceSynchronize", "hipStreamSynchronize",
              "hipEventSynchronize"}
"""The calls that block the CPU until the GPU has done what they wait for (:attr:`Shared.sync_waits`)."""
COMPILER_RANGE = " (dynamo_timed)"
"""How torch.compile names the ranges of its compiler's phases: ``record_function("<phase> (dynamo_timed)")``
(``torch._dynamo.utils.dynamo_timed``, in torch 2.11 and 2.13 alike): Dynamo's tracing
(``_compile.compile_inner (dynamo_timed)``), AOT autograd, Inductor's lowering and code generation, max-autotune's
benchmarks of GEMM candidates (``addmm_template_autotuning (dynamo_timed)``), CUDA graph trees' recording
(``CUDAGraphNode.record (dynamo_timed)``). What runs inside such a range is the compiler's work, not the step's
code: the ops it runs on fake tensors (no kernel), the candidates it benchmarks on the GPU, the synchronisations
around them (:attr:`Shared.compiler_work`)."""
COMPILED_GRAPH_CALL = "## Call CompiledFxGraph "
"""How the profiler names a call of a torch.compile'd graph (``## Call CompiledFxGraph <hash> ##``)."""
UNRECORDED_WAIT_NS = 100_000
"""How long after its launch call returned (or, launched before the recording, after the recording began) a GPU's
first recorded op must start for :attr:`Shared.unrecorded_waits` to say that it waited behind work the trace does
not hold: several times the tens of µs in which a launch reaches a
GPU with nothing queued, and well below the waits seen behind a queued kernel (docs/FINDINGS.md, "A GPU's wait behind
work the trace does not hold", has both measured on the test traces and on an H100)."""


def is_host_copy(name) -> bool:
    """Whether a GPU op's name is a copy between host and device memory (``Memcpy HtoD ...``, ``Memcpy DtoH ...``, as
    CUDA's activity records name them; a device-to-device or peer copy is not one)."""
    return isinstance(name, str) and name.startswith(("Memcpy HtoD", "Memcpy DtoH"))


def is_pageable_copy(name) -> bool:
    """Whether a GPU op is a host↔device copy to or from pageable host memory (its name says so: ``Memcpy HtoD
    (Pageable -> Device)``, ``Memcpy DtoH (Device -> Pageable)``). The call that launched such a copy holds the CPU
    until its bytes are staged through a pinned buffer: it waits for the work queued ahead of the copy on its stream
    and for the copy itself, as a synchronize call would (:attr:`Shared.sync_waits`). Traces whose copy names do not
    say which memory (2021-era ones, ROCm's) have none."""
    return is_host_copy(name) and "pageable" in name.lower()

def frame(rows: list[tuple], cols: list[str]) -> pd.DataFrame:
    """A frame of Python row tuples (pandas infers each column's dtype from its values); object columns when empty."""
    if rows:
        return pd.DataFrame.from_records(rows, columns=cols)
    return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})


def factorize(values, use_na_sentinel: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values, use_na_sentinel=...)`` of a column of Python objects (text, mostly): (int64 codes, the
    distinct values as an object array, in the order they first come), computed by
    :func:`~profiling_core.trace._tables.first_seen_codes`. A missing value (None, NaN, ``pd.NA``, NaT) has code -1;
    with ``use_na_sentinel=False`` every missing value shares one code, at the place the first one came, whose
    value is NaN, as pandas gives it. TypeError, as from pandas, for a value that cannot be a dict key (a list)."""
    codes, uniq = first_seen_codes(values.tolist() if hasattr(values, "tolist") else list(values))
    na = np.array([v is None or v is pd.NA or (pd.api.types.is_scalar(v) and bool(pd.isna(v))) for v in uniq],
                  dtype=bool)
    if not na.any():
        out = np.empty(len(uniq), dtype=object)
        out[:] = uniq
        return codes, out
    keep = ~na
    if not use_na_sentinel:  # the missing values: one value, where the first of them came
        keep[int(np.argmax(na))] = True
    to = np.cumsum(keep) - 1
    to[na] = -1 if use_na_sentinel else to[int(np.argmax(na))]
    out = np.empty(int(keep.sum()), dtype=object)
    out[:] = [np.nan if n else v for v, n, k in zip(uniq, na, keep) if k]
    return to[codes], out


class Coded(NamedTuple):
    """A text column as codes into its distinct values: row k holds ``uniq[codes[k]]``, None where the code is -1
    (``pd.factorize``'s form). ``frame_cols`` builds such a column from the distinct values, not row by row."""

    codes: np.ndarray
    uniq: np.ndarray  # object array

    def values(self) -> np.ndarray:
        """The column as an object array (None for code -1)."""
        return np.append(self.uniq, None)[self.codes] if len(self.codes) else np.zeros(0, dtype=object)

    def __len__(self) -> int:
        return len(self.codes)

    @classmethod
    def of(cls, values) -> "Coded":
        return cls(*factorize(values))

    def take(self, idx: np.ndarray) -> "Coded":
        return Coded(self.codes[idx], self.uniq)


class IntsOrNull(NamedTuple):
    """An integer column with NULLs: ``values`` (int64) where not ``missing`` (``frame_cols`` makes it pandas'
    nullable Int64)."""

    values: np.ndarray
    missing: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def objects(self) -> np.ndarray:
        """The column as Python ints and None."""
        return nullable(self.values, self.missing)

    def take(self, idx: np.ndarray) -> "IntsOrNull":
        return IntsOrNull(self.values[idx], self.missing[idx])

    def array(self) -> pd.arrays.IntegerArray:
        """The column as pandas' nullable Int64 (NA where missing)."""
        return pd.arrays.IntegerArray(self.values.astype(np.int64, copy=False), self.missing.copy())


def frame_cols(data: dict) -> pd.DataFrame:
    """A frame of column arrays (``{column: values in row order}``), each kept as it is, so a column's dtype is the
    array's: an int64, float64 or bool numpy array stays one; a :class:`Coded` text column becomes an object column
    holding one shared ``str`` per distinct value (None for NULL); an :class:`IntsOrNull` column becomes pandas'
    nullable Int64; anything else (an object array, a list) an object column."""
    cols = list(data)
    n = len(data[cols[0]]) if cols else 0
    if n == 0:
        return frame([], cols)
    out = {}
    for c, v in data.items():
        if isinstance(v, IntsOrNull):
            v = v.array()
        elif isinstance(v, Coded):
            v = pd.Series(v.values(), dtype=object, copy=False)
        elif not (isinstance(v, np.ndarray) and v.dtype in (np.int64, np.float64, np.bool_)):
            a = np.empty(len(v), dtype=object)
            a[:] = v.tolist() if isinstance(v, np.ndarray) else list(v)
            v = pd.Series(a, dtype=object, copy=False)
        out[c] = v
    return pd.DataFrame(out)


def _ints_or_null(a: np.ndarray):
    """An object array of ints and None as IntsOrNull; itself if it holds anything else."""
    vals = a.tolist()
    if all((type(v) is int and -(1 << 63) <= v < (1 << 63)) or v is None for v in vals):
        return IntsOrNull(np.array([0 if v is None else v for v in vals], dtype=np.int64),
                          np.array([v is None for v in vals], dtype=bool))
    return a


def take_rows(col, idx: np.ndarray):
    """Rows ``idx`` of a column: a numpy array, a Coded or an IntsOrNull column."""
    return col.take(idx) if isinstance(col, (IntsOrNull, Coded)) else col[idx]


def expand_ranges(lo: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(which, position) for every position in the ranges [lo[k], lo[k] + n[k]), range after range: ``which`` is
    k; e.g. lo [5, 9], n [2, 1] -> which [0, 0, 1], position [5, 6, 9] (numpy's repeat instead of a loop)."""
    which = np.repeat(np.arange(len(lo)), n)
    start = np.cumsum(n) - n  # where each range starts in the output
    return which, np.repeat(lo, n) + (np.arange(len(which)) - np.repeat(start, n))


def nullable(values: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """An object array of Python ints with None where ``missing`` (a column of ints and NULLs, as a query gives)."""
    a = values.astype(object)
    a[missing] = None
    return a


def coverage_ns(b: np.ndarray, e: np.ndarray, group: np.ndarray | None = None, n: int = 1,
                cls: np.ndarray | None = None, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """What intervals [b, e) (integer ns) cover, per group and class: (``first``, ``own``), int64 arrays (n, k).

    ``group`` (0..n-1, default all 0) separates intervals that are measured apart; ``cls`` (0..k-1, default all 0)
    ranks them. ``own[g, c]``: the length of the union of group g's intervals of class c. ``first[g, c]``: the time
    where c is the first (lowest) class with an interval running in group g; so ``first[g].sum()`` is the length
    of the union of all of group g's intervals, each instant counted once.

    One sweep: the groups are laid end to end (each shifted to start one ns after the previous one's last end), the
    starts and ends sorted once, a running count per class gives which classes cover each piece between two
    consecutive boundaries. :func:`union_ns` is this with one group and one class."""
    first, own = np.zeros((n, k), dtype=np.int64), np.zeros((n, k), dtype=np.int64)
    m = len(b)
    if m == 0:
        return first, own
    b = np.asarray(b, dtype=np.int64)
    e = np.maximum(np.asarray(e, dtype=np.int64), b)  # an interval ending before it starts covers nothing
    g = np.zeros(m, dtype=np.int64) if group is None else np.asarray(group, dtype=np.int64)
    c = np.zeros(m, dtype=np.int64) if cls is None else np.asarray(cls, dtype=np.int64)
    if n > 1:
        by_g = np.argsort(g, kind="stable")
        gg = g[by_g]
        heads = np.flatnonzero(np.r_[True, gg[1:] != gg[:-1]])  # each group's first row in group order
        lo, span = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        lo[gg[heads]] = np.minimum.reduceat(b[by_g], heads)
        span[gg[heads]] = np.maximum.reduceat(e[by_g], heads) - lo[gg[heads]]
        del by_g, gg
        shift = (np.cumsum(span + 1) - (span + 1) - lo)[g]
        b, e = b + shift, e + shift
    # (small dtypes where they fit: this runs over every GPU op of a trace at once)
    order = np.argsort(np.concatenate([b, e]), kind="stable")
    seg = np.diff(np.concatenate([b, e])[order])  # piece i lies between boundaries i and i + 1, in group gs[i]
    step = (order < m).astype(np.int8) * np.int8(2) - np.int8(1)  # +1 where an interval starts, -1 where one ends
    small = np.int8 if k < 127 else np.int64
    which = np.concatenate([c, c]).astype(small)[order]
    gs = np.concatenate([g, g]).astype(np.int32 if n < 2 ** 31 else np.int64)[order][:-1]
    del order
    top = np.full(len(seg), k, dtype=small)  # the first class covering each piece (k: none)
    for cc in range(k - 1, -1, -1):
        on = np.cumsum(np.where(which == cc, step, np.int8(0)), dtype=np.int32)[:-1] > 0
        own[:, cc] = np.rint(np.bincount(gs[on], weights=seg[on], minlength=n)).astype(np.int64)
        top[on] = cc
    hit = top < k
    first[:] = np.rint(np.bincount(gs[hit].astype(np.int64) * k + top[hit], weights=seg[hit], minlength=n * k)).astype(
        np.int64).reshape(n, k)
    return first, own


AUTOGRAD_FUNCTION = "autograd::engine::evaluate_function:"
"""The prefix of the slice the autograd engine opens around each backward function it runs."""
_BACKWARD_NODE = re.compile(r"\w+Backward\d*|torch::autograd::AccumulateGrad")
"""A backward node's own name (``MmBackward``, ``AddBackward0``, the gradient accumulation), which the 2021 format
records with no :data:`AUTOGRAD_FUNCTION` slice around it (newer traces record it too, inside that slice)."""


def merged(b: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [b, e) as disjoint sorted intervals (starts, ends)."""
    if len(b) == 0:
        return b, e
    o = np.argsort(b, kind="stable")
    b, e = b[o], np.maximum.accumulate(e[o])
    heads = np.flatnonzero(np.r_[True, b[1:] > e[:-1]])
    return b[heads], np.maximum.reduceat(e, heads)


def covered_ns(lo: np.ndarray, hi: np.ndarray, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per window [lo, hi): how much of it the disjoint sorted intervals [s, t) (:func:`merged`) cover."""
    before = np.r_[0, np.cumsum(t - s)]  # before[j]: the length of the intervals ahead of interval j

    def upto(x):  # how much of (-inf, x) they cover
        k = np.searchsorted(s, x, side="right")  # the intervals that start at or before x
        last = np.maximum(k - 1, 0)
        return before[last] + np.where(k > 0, np.clip(np.minimum(x, t[last]) - s[last], 0, None), 0)
    return upto(hi) - upto(lo)


def union_ns(b: np.ndarray, e: np.ndarray) -> int:
    """Total length of the union of intervals [b, e) (integer ns); 0 for none (:func:`coverage_ns`)."""
    return int(coverage_ns(b, e)[0].sum())


def unions_ns(parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """:func:`union_ns` of each (b, e) of ``parts`` (int64 array, one length per part), in one sweep."""
    n = len(parts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    sizes = [len(b) for b, _ in parts]
    group = np.repeat(np.arange(n, dtype=np.int64), sizes)
    b = np.concatenate([np.asarray(b, dtype=np.int64) for b, _ in parts])
    e = np.concatenate([np.asarray(e, dtype=np.int64) for _, e in parts])
    return coverage_ns(b, e, group, n)[0][:, 0]


class RowIds:
    """The ``id`` column of slices whose ids are their rows (0..n-1, as on the mirror): ``ids[rows]`` is ``rows``
    itself, without an n-entry ``arange`` (1.7 MiB on a 93 MB trace). Takes an integer, an integer array or a boolean
    mask, as the analyses index it."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, rows):
        if isinstance(rows, (int, np.integer)):
            if not 0 <= rows < self.n:
                raise IndexError(f"row {rows} of {self.n}")
            return np.int64(rows)
        if isinstance(rows, slice):
            return np.arange(self.n, dtype=np.int64)[rows]
        a = np.asarray(rows)
        return np.flatnonzero(a) if a.dtype == bool else a.astype(np.int64, copy=False)

    def __eq__(self, other) -> bool:
        return isinstance(other, RowIds) and other.n == self.n

    __hash__ = None


class Shared:
    """Shared inputs of one trace's analyses; every attribute is computed on first use."""

    def __init__(self, session) -> None:
        self.session = session
        self._pair_codes: dict = {}
        self._pair_rows: tuple = ()  # (launch rows, GPU op rows) of ``slices``, set with ``p``
        self._memo: dict = {}  # (``cached``)

    # --- raw queries ----------------------------------------------------------------------------------------------
    @cached_property
    def gpu_ops_raw(self) -> pd.DataFrame:
        """What the ``kernels`` query returns (GPU ops on thread tracks with device and stream, in (ts, id) order),
        from the shared slice tree and thread lanes; ``name`` and ``category`` as object columns (one row per GPU
        op: each distinct name is one shared ``str``, not a copy per row)."""
        t, i = self.slices, self.gpu_lane_rows()
        has, tid, pid = self.lane_of
        u = t["utid"][i] + 1
        return frame_cols({"id": t["id"][i], "name": self.name_codes_at(i), "category": self.category_codes_at(i, True),
                           "start_ns": t["ts"][i], "dur_ns": t["dur"][i], "device": take_rows(pid, u),
                           "stream": take_rows(tid, u)})

    def gpu_lane_rows(self) -> np.ndarray:
        """Rows of ``slices`` of the GPU ops on a thread track with a thread row (a device and a stream), in (ts, id)
        order: the rows of :func:`gpu_ops`."""
        t, i = self.slices, self.gpu_rows
        has = self.lane_of[0]
        i = i[has[t["utid"][i] + 1]]
        return i[np.lexsort((t["id"][i], t["ts"][i]))]

    @cached_property
    def lane_of(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``lanes`` as arrays indexed by utid + 1 (index 0: off-thread, utid -1): (has a thread row, tid, pid);
        tid and pid as :class:`IntsOrNull` when they are integers (None where there is none), else object arrays."""
        lanes = self.lanes
        t = self.slices
        k = max([int(t["utid"].max()) if len(t["utid"]) else -1, *lanes]) + 2
        has = np.zeros(k, dtype=bool)
        tid, pid = np.full(k, None, dtype=object), np.full(k, None, dtype=object)
        for u, (td, pd_) in lanes.items():
            if u >= 0:
                has[u + 1], tid[u + 1], pid[u + 1] = True, td, pd_
        return has, _ints_or_null(tid), _ints_or_null(pid)

    def gpu_lane(self, gpu_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(on a thread track with a thread row, stream tid) of these GPU op ids (``kernels.sql``'s join)."""
        has, tid, _pid = self.lane_of
        u = self.slices["utid"][self.pos(gpu_ids)] + 1
        return has[u], take_rows(tid, u)

    @cached_property
    def pair_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """(pair index, step list index) for every pair whose launch lies in a step slice's window. A call counts in
        the steps of its own process where that process has step slices (ranks' traces merged into one file: each
        rank's steps overlap the others' in time), else in any step whose window holds it (the study's SQL states the
        same rule in its ``launch_step`` fragment)."""
        idx, which = [], []
        steps = self.steps_list
        for k, (_sid, _n, _nm, ts, dur, _d, _u) in enumerate(steps):
            i = self.pairs_in(ts, ts + dur)
            idx.append(i)
            which.append(np.full(len(i), k, dtype=np.int64))
        if not idx:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        i, k = np.concatenate(idx).astype(np.int64), np.concatenate(which)
        step_pid = self.pid_codes(np.array([-1 if r[6] is None else r[6] for r in steps], dtype=np.int64))
        if len(np.unique(step_pid)) > 1 and len(i):
            call_pid = self.pid_codes(self.slices["utid"][self.pos(self.p["launch_id"][i])])
            keep = (call_pid == step_pid[k]) | ~np.isin(call_pid, step_pid)
            i, k = i[keep], k[keep]
        return i, k

    @cached_property
    def _pairs_by_step(self) -> list[np.ndarray]:
        i, k = self.pair_steps
        order = np.argsort(k, kind="stable")
        bounds = np.searchsorted(k[order], np.arange(len(self.steps_list) + 1))
        return [i[order][a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]

    def step_pairs(self, j: int) -> np.ndarray:
        """The pairs (indices, sorted) that count in the step at ``steps_list`` index ``j`` (:attr:`pair_steps`)."""
        return self._pairs_by_step[j]

    @cached_property
    def pair_step(self) -> np.ndarray:
        """Per launch pair (``p``): the number of the first step (time order) whose window holds its launch call, -1
        for none."""
        at = np.full(len(self.p["launch_id"]), -1, dtype=np.int64)
        i, k = self.pair_steps
        if len(i):
            order = np.lexsort((k, i))
            i, k = i[order], k[order]
            first = np.ones(len(i), dtype=bool)
            first[1:] = i[1:] != i[:-1]
            numbers = np.array([r[1] for r in self.steps_list], dtype=np.int64)
            at[i[first]] = numbers[k[first]]
        return at

    @cached_property
    def step_counts(self) -> dict[str, np.ndarray]:
        """Per step (``steps_list`` index), over the pairs whose launch lies in its window: the distinct GPU ops
        (``gpu_ops``), of them ``kernels``, ``memcpys`` (``memcpy_dtod``/``htod``/``dtoh`` by name), ``memsets``;
        the distinct launch calls (``launches``) and those with a kernel pair (``kernel_launches``).

        Vectorised over all steps: (step, GPU op) and (step, launch) pairs sorted once; a pair counts where it
        is the first of its kind (a GPU op's category and name are the same in each of its pairs)."""
        n = len(self.steps_list)
        i, k = self.pair_steps
        p = self.p
        if len(i) == 0:
            return {c: np.zeros(n, dtype=np.int64) for c in ("gpu_ops", "kernels", "memcpys", "memcpy_dtod",
                                                              "memcpy_htod", "memcpy_dtoh", "memsets", "launches",
                                                              "kernel_launches")}

        firsts = self._step_firsts
        cat = p["gpu_category"]
        is_k = cat == "kernel"
        gi, gk = firsts(p["gpu_id"])
        gc, kind = cat[gi], p["memcpy_kind"][gi]
        is_cp = (gc == "gpu_memcpy") | (gc == "memcpy")

        def count(mask=None):
            return np.bincount(gk if mask is None else gk[mask], minlength=n)
        return {
            "gpu_ops": count(), "kernels": count(gc == "kernel"), "memcpys": count(is_cp),
            "memcpy_dtod": count(is_cp & (kind == "DtoD")), "memcpy_htod": count(is_cp & (kind == "HtoD")),
            "memcpy_dtoh": count(is_cp & (kind == "DtoH")), "memsets": count((gc == "gpu_memset") | (gc == "memset")),
            "launches": np.bincount(firsts(p["launch_id"])[1], minlength=n),
            "kernel_launches": np.bincount(firsts(p["launch_id"], is_k[i])[1], minlength=n),
        }

    def _step_firsts(self, values: np.ndarray, keep: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Over :attr:`pair_steps` (those whose ``keep``, a mask over them, is set): (pair index, step list index) of
        the first pair of each distinct (step, ``values[pair]``)."""
        i, k = self.pair_steps
        ii, kk = (i, k) if keep is None else (i[keep], k[keep])
        v = values[ii]
        order = np.lexsort((v, kk))
        ii, kk, v = ii[order], kk[order], v[order]
        new = np.ones(len(ii), dtype=bool)
        new[1:] = (kk[1:] != kk[:-1]) | (v[1:] != v[:-1])
        return ii[new], kk[new]

    def step_gpu_ops(self, keep: np.ndarray) -> np.ndarray:
        """Per step (``steps_list`` index): the distinct GPU ops of the pairs (``p``) that ``keep`` (a mask over them)
        holds and whose launch lies in the step's window, as :attr:`step_counts` counts ``gpu_ops``."""
        i, _k = self.pair_steps
        return np.bincount(self._step_firsts(self.p["gpu_id"], keep[i])[1], minlength=len(self.steps_list))

    def launch_pairs_of(self, launch_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which, pair): for each of ``launch_ids`` in turn, the indices of its pairs in gpu_id order (the pairs are
        in (launch_id, gpu_id) order, so each launch's pairs are one run); ``which`` indexes ``launch_ids``."""
        lid = self.p["launch_id"]
        lo = np.searchsorted(lid, launch_ids, side="left")
        return expand_ranges(lo, np.searchsorted(lid, launch_ids, side="right") - lo)

    @cached_property
    def tables(self):
        """The session's typed tables (``TraceTables``), which every piece here reads."""
        return self.session.tables

    @cached_property
    def step_slices(self) -> pd.DataFrame:
        """Every ``ProfilerStep#N`` slice that is not a ``gpu_user_annotation`` copy, in (ts, id) order: ``step_id``,
        ``step`` (N: :func:`step_number`), ``name``, ``ts``, ``dur``, ``depth``, ``utid``
        (None off-thread)."""
        t = self.slices
        m = self.name_mask(lambda u: isinstance(u, str) and u.startswith("ProfilerStep#"))
        if m.any():
            m &= np.array([c != "gpu_user_annotation" for c in t["cat_uniq"]], dtype=bool)[t["cat_codes"]]
        rows_i = np.flatnonzero(m)
        rows_i = rows_i[np.lexsort((rows_i, t["ts"][rows_i]))]
        names = self.names_at(rows_i).tolist()
        steps = {nm: step_number(nm) for nm in set(names)}
        rows = [(i, steps[nm], nm, ts, dur, depth, None if u < 0 else u)
                for i, nm, ts, dur, depth, u in zip(rows_i.tolist(), names, t["ts"][rows_i].tolist(),
                                                    t["dur"][rows_i].tolist(), t["depth"][rows_i].tolist(),
                                                    t["utid"][rows_i].tolist())]
        return frame(rows, ["step_id", "step", "name", "ts", "dur", "depth", "utid"])

    @cached_property
    def slices(self) -> dict:
        """``slice_tree`` as columns: ``id`` (a :class:`RowIds` when the ids are the rows, else an int64 array), int64
        arrays ``ts``, ``dur`` (a step slice's cut at the recording's end: :func:`_steps_cut_at_recording`),
        ``track_id``, ``depth``, ``parent``
        (-1 for none), ``utid`` (-1 off-thread), ``ppos`` (the parent's row, -1 for none: ``parent`` itself when the
        ids are the rows); names and categories as codes into their distinct values in order of first appearance
        (``name_codes``/``name_uniq``, ``cat_codes``/``cat_uniq``, ``cat_low_uniq``: lower case; code -1 is NULL and
        takes the last entry, None; see :meth:`names_at`, :meth:`cats_at`). On the mirror the codes are its own
        (``TraceTables.name``/``category``). Per-row arrays are only what the analyses need: on a 93 MB trace each
        is 1.7 MiB."""
        tb = self.tables
        n = tb.slice_count
        cat_col, name_col = tb.category, tb.name
        out: dict = {"id": RowIds(n), "ts": tb.ts, "dur": tb.dur, "track_id": tb.track_id,
                     "depth": tb.depth, "parent": tb.parent_id,
                     "utid": tb.track_utid[tb.track_id] if n else np.zeros(0, np.int64)}
        low = np.array([u.lower() if isinstance(u, str) else None for u in cat_col.uniq] + [None], dtype=object)
        out["cat_low_uniq"] = low  # ``cat`` of each category code (code -1, NULL: the last)
        for c, col in (("cat", cat_col), ("name", name_col)):
            out[c + "_codes"], out[c + "_uniq"] = col.codes, [*col.uniq, None]  # code -1 (NULL) indexes the None
            out[c + "_uniq_arr"] = col.lookup  # indexed by the codes: the values of those rows
        out["ppos"] = out["parent"]  # slice ids are the rows: a parent's id is its row
        out["dense"] = True
        out["dur"] = _steps_cut_at_recording(out)
        return out

    def name_mask(self, pred) -> np.ndarray:
        """Boolean array over ``slices``: ``pred(name)`` (evaluated once per distinct name; None for NULL)."""
        t = self.slices
        return np.array([bool(pred(u)) for u in t["name_uniq"]] or [False], dtype=bool)[t["name_codes"]]

    def cat_mask(self, pred) -> np.ndarray:
        """Boolean array over ``slices``: ``pred(category)`` (raw category; once per distinct one; None for NULL)."""
        t = self.slices
        return np.array([bool(pred(u)) for u in t["cat_uniq"]] or [False], dtype=bool)[t["cat_codes"]]

    def cats_at(self, rows: np.ndarray) -> np.ndarray:
        """The lower-cased categories of these rows of ``slices`` as an object array (None for NULL)."""
        t = self.slices
        return t["cat_low_uniq"][t["cat_codes"][rows]]

    def name_codes_at(self, rows: np.ndarray) -> Coded:
        """The names of these rows of ``slices`` as a :class:`Coded` column."""
        t = self.slices
        return Coded(t["name_codes"][rows], t["name_uniq_arr"][:-1])

    def category_codes_at(self, rows: np.ndarray, lower: bool = False) -> Coded:
        """The categories (raw, or as ``cat``: lower case) of these rows of ``slices`` as a :class:`Coded` column."""
        t = self.slices
        return Coded(t["cat_codes"][rows], (t["cat_low_uniq"] if lower else t["cat_uniq_arr"])[:-1])

    def pair_codes(self, col: str) -> Coded:
        """A text column of the pairs ``p`` as a :class:`Coded` column (the codes of the slices at either end; other
        columns factorized once)."""
        got = self._pair_codes.get(col)
        if got is None:
            p = self.p
            launch_rows, gpu_rows = self._pair_rows
            if col in ("gpu_name", "launch_name"):
                got = self.name_codes_at(launch_rows if col == "launch_name" else gpu_rows)
            elif col in ("gpu_category", "gpu_category_raw"):
                got = self.category_codes_at(gpu_rows, lower=col == "gpu_category")
            else:
                got = Coded.of(p[col])
            self._pair_codes[col] = got
        return got

    def names_at(self, rows: np.ndarray) -> np.ndarray:
        """The names of these rows of ``slices`` as an object array (None for NULL)."""
        t = self.slices
        return t["name_uniq_arr"][t["name_codes"][rows]]

    def categories_at(self, rows: np.ndarray) -> np.ndarray:
        """The (raw) categories of these rows of ``slices`` as an object array (None for NULL)."""
        t = self.slices
        return t["cat_uniq_arr"][t["cat_codes"][rows]]

    def pos(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``slices`` holding these slice ids."""
        return ids if self.slices["dense"] else np.searchsorted(self.slices["id"], ids)

    # --- arrays ---------------------------------------------------------------------------------------------------
    def _launch_pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(launch row, GPU op row, paired by correlation) of every launch call ↔ GPU op pair, in (launch, GPU op)
        order, each pair once.

        A GPU op is paired with the slice at the other end of each flow that ends on it, unless that slice is a
        ``[memory]`` event: the 2021 format writes its flows' starts and its memory events with an integer tid and
        its calls with a string one, so trace_processor binds the flows to the memory events of a lane of their
        own, which launch nothing. A GPU op that two or more flows end on was launched by the calls whose
        ``args.correlation`` is its own: a flow whose call has another correlation is dropped (:func:`_misbound`).
        A GPU op with no such flow (2021-era traces, or the op whose flow was dropped) is paired with every runtime
        call (category cuda_runtime, cuda_driver or runtime) that can launch work (:meth:`_launches_nothing`) and
        whose ``args.correlation`` equals its own; where calls of several processes can launch work (ranks' traces
        merged into one file), so is an op with a flow whose correlation id such calls of two or more processes
        share, and each GPU's ops keep the calls of one process (:meth:`_one_process_each`)."""
        tb = self.tables
        n = tb.slice_count
        gr = self.gpu_rows
        is_gpu = np.zeros(n, dtype=bool)
        is_gpu[gr] = True
        fo, fi = tb.flow_out.astype(np.int64), tb.flow_in.astype(np.int64)
        m = (fi >= 0) & (fi < n) & (fo >= 0) & (fo < n)
        m[m] = is_gpu[fi[m]]
        m[m] = ~self.name_mask(lambda u: u == "[memory]")[fo[m]]  # a memory event launches nothing (see the docstring)
        lo, gi = fo[m], fi[m]
        ok = ~_misbound(tb, lo, gi) & ~self._launches_nothing(lo)
        lo, gi = lo[ok], gi[ok]
        by_corr = np.zeros(len(lo), dtype=bool)
        has_flow = np.zeros(n, dtype=bool)
        has_flow[gi] = True
        runtime = self._launch_calls
        several = self.several_launchers
        corr = (tb.args.get("correlation", tb.arg_set_id[runtime].tolist() + tb.arg_set_id[gr].tolist())
                if several else None)
        # one process: only the ops without a flow are paired by correlation; several (ranks merged into one
        # file): every op, so that :meth:`_one_process_each` sees each rank's call where their ids repeat
        wanted = gr[(tb.arg_set_id[gr] >= 0) & (several | ~has_flow[gr])]
        if len(wanted):
            c_lo, c_gi = _equal_arg(tb, "correlation", runtime, wanted, corr)
            if several:  # an op with a flow gains its other calls only where its correlation id repeats
                c_pid = self.pid_codes(self.slices["utid"][c_lo])
                n_pids = pd.Series(c_pid).groupby(c_gi).transform("nunique").to_numpy()
                keep = ~has_flow[c_gi] | (n_pids > 1)
                c_lo, c_gi = c_lo[keep], c_gi[keep]
            lo, gi = np.concatenate([lo, c_lo]), np.concatenate([gi, c_gi])
            by_corr = np.concatenate([by_corr, np.ones(len(c_lo), dtype=bool)])
        lo, gi, by_corr = self._one_process_each(lo, gi, by_corr, corr)
        order = np.lexsort((by_corr, gi, lo))  # a pair found by flow and by correlation is kept as a flow's
        lo, gi, by_corr = lo[order], gi[order], by_corr[order]
        keep = np.ones(len(lo), dtype=bool)
        keep[1:] = (lo[1:] != lo[:-1]) | (gi[1:] != gi[:-1])
        return lo[keep], gi[keep], by_corr[keep]

    @cached_property
    def _launch_calls(self) -> np.ndarray:
        """Rows of the runtime calls (category cuda_runtime, cuda_driver or runtime) with args that can launch work
        (:meth:`_launches_nothing`): the calls a GPU op without a flow is paired with by correlation."""
        tb = self.tables
        runtime = np.flatnonzero(self.cat_mask(lambda c: isinstance(c, str) and c.lower() in _RUNTIME_CATS)
                                 & (tb.arg_set_id >= 0))
        return runtime[~self._launches_nothing(runtime)]

    @cached_property
    def several_launchers(self) -> bool:
        """Whether two or more processes made such calls (ranks' traces merged into one file; the SQL's
        ``launch_procs``)."""
        return len(set(self.pids_of(np.unique(self.slices["utid"][self._launch_calls]))) - {None}) > 1

    def _one_process_each(self, lo: np.ndarray, gi: np.ndarray, by_corr: np.ndarray, corr: dict | None) -> tuple:
        """The pairs less those that tie a GPU op to a call of another process than the one that drives its GPU.

        Where ranks' traces were merged into one file their correlation ids repeat (each process counts its own
        from 1), and so do their flow ids, whose repeats the reader binds to the first call that began them: a GPU
        op then matches a call of each rank. A GPU (the process its ops are written under) is driven by one
        process. Of the processes whose calls such ops match, the GPU's ops keep the calls of the one that
        1. has a call at or before the start of the most of them (an op cannot start before its launch), then
        2. most often holds the GPU's place in its correlation id's group: the k-th process to make a call of that
           id, the k-th GPU to start an op of it (ranks that run in step launch and run in the same order; where
           the first rule cannot tell them apart their figures differ by no more than their offset), then
        3. has the lower pid.
        An op that matches calls of none of the chosen process keeps its pairs; so does one that matches calls of
        one process only, unless its GPU's ops keep another process's calls: then that call is another rank's whose
        id the op's own launch (before the recording, not in the file) shared, and the op is left unpaired, as an
        op whose launch the trace does not hold. ``corr``: the ``args.correlation`` of the GPU ops by arg set (None
        where one process made the launch calls)."""
        if not len(lo) or corr is None:
            return lo, gi, by_corr
        t = self.slices
        lp = self.pid_codes(t["utid"][lo])
        df = pd.DataFrame({"gi": gi, "lp": lp, "lts": t["ts"][lo], "gts": t["ts"][gi]})
        amb = df.groupby("gi")["lp"].transform("nunique").to_numpy() > 1
        if not amb.any():
            return lo, gi, by_corr
        a = df[amb].copy()
        ag = a["gi"].to_numpy()
        a["gp"] = self.pid_codes(t["utid"][ag])
        ops, at = np.unique(ag, return_inverse=True)  # (each op's id read once, not once per call it matches)
        values = [corr.get(x) for x in self.tables.arg_set_id[ops].tolist()]
        grp = factorize(np.array([None if isinstance(v, list) else v for v in values], dtype=object))[0][at]
        a["grp"] = np.where(grp >= 0, grp, -1 - ag)  # an op without a correlation id is a group of its own
        calls = a.groupby(["grp", "lp"], as_index=False)["lts"].min().sort_values(["grp", "lts", "lp"])
        calls["k"] = calls.groupby("grp").cumcount()
        gpus = a.groupby(["grp", "gp"], as_index=False)["gts"].min().sort_values(["grp", "gts", "gp"])
        gpus["k"] = gpus.groupby("grp").cumcount()
        a = a.merge(calls[["grp", "lp", "k"]], on=["grp", "lp"]).merge(gpus[["grp", "gp", "k"]], on=["grp", "gp"],
                                                                       suffixes=("_call", "_gpu"))
        pairs = a.groupby(["gp", "lp"]).size().index
        score = pd.DataFrame({  # per (GPU, process): how many of the GPU's ops each rule holds for
            "causal": a[a["lts"] <= a["gts"]].groupby(["gp", "lp"])["gi"].nunique(),
            "placed": a[a["k_call"] == a["k_gpu"]].groupby(["gp", "lp"])["gi"].nunique()}).reindex(pairs).fillna(0)
        score = score.reset_index().sort_values(["gp", "causal", "placed", "lp"],
                                                ascending=[True, False, False, True])
        chosen = score.drop_duplicates("gp").set_index("gp")["lp"]
        gp_all = self.pid_codes(t["utid"][gi])
        want = chosen.reindex(gp_all).to_numpy(dtype=float, na_value=np.nan)  # (NaN: a GPU no rule chose for)
        own = lp == want
        has_own = pd.Series(own & amb).groupby(gi).transform("any").to_numpy()
        keep = np.where(amb, own | ~has_own, own | np.isnan(want))
        return lo[keep], gi[keep], by_corr[keep]

    def _launches_nothing(self, rows: np.ndarray) -> np.ndarray:
        """Which of these slices are runtime calls (category cuda_runtime, cuda_driver or runtime) that launch no GPU
        work: their name names no launch, copy or memset (``cudaEventQuery``, ``cudaFuncSetAttribute``,
        ``cudaPeekAtLastError``, an occupancy query). A flow's start is written at its launch call's start, in whole
        microseconds on older traces; where a zero-length call was written at that same microsecond just before it,
        the reader binds the flow to that call (HTA's A100 control trace: 67 such flows), so the op it ends on is
        left to its correlation."""
        runtime = self.cat_mask(lambda c: isinstance(c, str) and c.lower() in _RUNTIME_CATS)[rows]
        launching = self.name_mask(lambda x: isinstance(x, str) and any(k in x.lower()
                                                                         for k in ("launch", "memcpy", "memset")))[rows]
        return runtime & ~launching

    @cached_property
    def p(self) -> dict[str, np.ndarray]:
        """The launch pairs (:meth:`_launch_pairs`: one row per launch call ↔ GPU op pair, in launch_id, gpu_id
        order) as arrays: ints as int64 (``launch_parent``: the slice the call sits in, :meth:`enclosing_rows` for a
        call the reader could not nest; -1 for none), text and ``launch_utid`` (None for none) as object."""
        t = self.slices
        lpos, gpos, by_corr = self._launch_pairs()
        self._pair_rows = (lpos, gpos)
        how = np.array(["flow", "correlation"], dtype=object)  # one str object per kind, shared by its rows
        par, utid = t["parent"][lpos], t["utid"][lpos]
        out = {"launch_id": lpos, "gpu_id": gpos, "launch_ts": t["ts"][lpos], "launch_dur": t["dur"][lpos],
               "gpu_ts": t["ts"][gpos], "gpu_dur": t["dur"][gpos], "launch_track_id": t["track_id"][lpos],
               "paired_by": how[by_corr.astype(np.int64)], "launch_name": self.names_at(lpos),
               "gpu_name": self.names_at(gpos), "gpu_category": self.cats_at(gpos),
               "gpu_category_raw": self.categories_at(gpos), "launch_utid": nullable(utid, utid < 0)}
        out["gpu_end"] = out["gpu_ts"] + out["gpu_dur"]
        par = par.astype(np.int64)
        lone = np.flatnonzero(par < 0)
        if len(lone):
            par[lone] = self.enclosing_rows(lpos[lone])
        out["launch_parent"] = par
        names = self.name_codes_at(gpos)
        self._pair_codes["gpu_name"] = names  # what pair_codes("gpu_name") gives
        kinds = np.array([x[7:11] if isinstance(x, str) and x.startswith(("Memcpy DtoD", "Memcpy HtoD", "Memcpy DtoH"))
                          else "" for x in names.uniq.tolist()] + [""], dtype=object)
        out["memcpy_kind"] = kinds[names.codes] if len(names.codes) else np.zeros(0, dtype=object)
        out["by_launch_ts"] = np.argsort(out["launch_ts"], kind="stable")
        out["launch_ts_sorted"] = out["launch_ts"][out["by_launch_ts"]]
        return out

    @cached_property
    def steps_list(self) -> list[tuple]:
        """(step_id, step, name, ts, dur, depth, utid) of every step slice in (ts, id) order; utid None off-thread."""
        df = self.step_slices
        if df.empty:
            return []
        return [tuple(None if (v is None or (isinstance(v, float) and np.isnan(v))) else v for v in r)
                for r in df[["step_id", "step", "name", "ts", "dur", "depth", "utid"]].itertuples(index=False)]

    def pairs_in(self, ts: int, end: int) -> np.ndarray:
        """Indices (into the pairs, in launch_id, gpu_id order) of pairs whose launch call starts in [ts, end)."""
        p = self.p
        lo, hi = np.searchsorted(p["launch_ts_sorted"], [ts, end], side="left")
        return np.sort(p["by_launch_ts"][lo:hi])

    @cached_property
    def gpu_rows(self) -> np.ndarray:
        """Rows of ``slices`` that are GPU ops (kernel, memcpy, memset; any track)."""
        t = self.slices
        return np.flatnonzero(np.array([c in _GPU_CATS for c in t["cat_low_uniq"]], dtype=bool)[t["cat_codes"]])

    @cached_property
    def ops(self) -> dict[str, np.ndarray]:
        """Every GPU op interval (any track): id, ts, end, category (lower case)."""
        t, i = self.slices, self.gpu_rows
        return {"id": t["id"][i], "ts": t["ts"][i], "end": t["ts"][i] + t["dur"][i], "category": self.cats_at(i)}

    @cached_property
    def op_devices(self) -> tuple[np.ndarray, list]:
        """(code, devices): the GPU each op of :attr:`ops` ran on, as an index (int64) into ``devices``, the sorted
        distinct pids of the GPU lanes that hold ops (Kineto writes a GPU's ops under a pid that is its device
        index); -1 for an op off a thread lane, or on a lane without a process id."""
        t, i = self.slices, self.gpu_rows
        has, _tid, pid = self.lane_of
        u = t["utid"][i] + 1
        pids = take_rows(pid, u)
        known = has[u]
        if isinstance(pids, IntsOrNull):
            known = known & ~pids.missing
            vals = pids.values
        else:  # (pids that are not integers: a lane's pid as text)
            known = known & np.array([v is not None for v in pids.tolist()], dtype=bool)
            vals = np.array([str(v) for v in pids.tolist()], dtype=object)
        devices = sorted(set(vals[known].tolist()))
        code = np.full(len(i), -1, dtype=np.int64)
        if devices:
            code[known] = np.searchsorted(np.array(devices, dtype=object if vals.dtype == object else np.int64),
                                          vals[known])
        return code, devices

    @cached_property
    def ops_by_ts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The GPU op intervals sorted by start: (ts, end, running max of end) for overlap look-ups."""
        o = self.ops
        order = np.argsort(o["ts"], kind="stable")
        ts, end = o["ts"][order], o["end"][order]
        return ts, end, np.maximum.accumulate(end) if len(end) else end

    @cached_property
    def sync_waits(self) -> pd.DataFrame:
        """Each synchronize call (:data:`SYNC_CALLS`, any track) in (ts, id) order, with what the GPU did during it
        (:meth:`_waits_in`): what ``sync_wait.sql`` returns. Read by ``timing.sync_wait`` and by the steps'
        ``sync_wait_us``; do not modify."""
        return self._waits_in(np.flatnonzero(self.name_mask(lambda x: x in SYNC_CALLS)))

    @cached_property
    def copy_waits(self) -> pd.DataFrame:
        """Each call that launched a copy to or from pageable host memory (:func:`is_pageable_copy`), in (ts, id)
        order, with what the GPU did during it (:meth:`_waits_in`): the call holds the CPU until the copy's bytes are
        staged, so it waits for the GPU as a synchronize call does. Read by the steps' ``sync_wait_us``; do not
        modify."""
        p = self.p
        if not len(p["gpu_id"]):
            return self._waits_in(np.zeros(0, dtype=np.int64))
        return self._waits_in(np.unique(p["launch_id"][self.name_mask(is_pageable_copy)[p["gpu_id"]]]))

    def _waits_in(self, i: np.ndarray) -> pd.DataFrame:
        """These slices (rows) in (ts, id) order, with what the GPU did while each ran: ``id``, ``name``,
        ``start_ns``, ``dur_ns``, ``gpu_busy_ns`` (the union of the GPU op intervals inside the call), ``gpu_ops``
        (ops overlapping it), ``last_gpu_end_ns``. Where several processes launched GPU work (ranks merged into one
        file), a call waits only for its own process's: the ops another process launched are left out (an op
        without a launch call in the trace counts for every process)."""
        t = self.slices
        i = i[np.lexsort((t["id"][i], t["ts"][i]))]
        proc, op_proc = self._launching_processes(i)
        rows, parts = [], []
        for k, (sid, name, ts, dur) in enumerate(zip(t["id"][i].tolist(), self.names_at(i).tolist(),
                                                     t["ts"][i].tolist(), t["dur"][i].tolist())):
            end = ts + dur
            b, e = self.ops_overlapping(ts, end)
            if op_proc is not None:
                mine = self._ops_overlapping_mask(ts, end)
                keep = (op_proc[mine] < 0) | (op_proc[mine] == proc[k])
                b, e = b[keep], e[keep]
            n = len(b)
            parts.append((np.maximum(b, ts), np.minimum(e, end)))
            rows.append((sid, name, ts, dur, n, int(e.max()) if n else None))
        busy = unions_ns(parts).tolist()  # every call's union in one sweep
        return frame([(sid, name, ts, dur, u, n, last) for (sid, name, ts, dur, n, last), u in zip(rows, busy)],
                     ["id", "name", "start_ns", "dur_ns", "gpu_busy_ns", "gpu_ops", "last_gpu_end_ns"])

    @cached_property
    def unrecorded_waits(self) -> tuple[np.ndarray, np.ndarray]:
        """Where a GPU waited behind work the trace does not hold, as disjoint sorted intervals (start, end), ns.

        The rule, per GPU (the ops of one lane pid, :attr:`op_devices`; ops of no known GPU as one more): take its
        first recorded op (the earliest start, any stream; of several starting then, those with a launch call). If
        that op's launch call is in the trace and the op started more than :data:`UNRECORDED_WAIT_NS` after the call
        returned, the GPU spent [call's end, op's start) on something ahead of it in its queue, and nothing the trace
        records ran on that GPU before the op: work queued before the recording began (a schedule's warm-up steps
        whose kernels still ran when the active steps began: the profiler records no op that started before it
        did), or, on a GPU shared with another process, that process's work. If the first op has no launch call in
        the trace where the trace holds those of the GPU's other ops, it was launched before the recording began
        (a warm-up step's op that started after it); where it started more than :data:`UNRECORDED_WAIT_NS` after the
        recording began (the start of the profiler's own ``Trace`` slice, :attr:`recording_starts`: the last before
        the op), the GPU spent [recording's start, op's start) on the work queued ahead of it, for the same reason.
        Nothing is said of the time before the call (the GPU may have been busy or idle then), of a first op with no
        launch call in a trace without a ``Trace`` slice or without the GPU's launch calls, or of later ops (a wait
        behind recorded work on another stream is not one).

        Where the trace's GPU clock runs behind its CPU clock, every op seems to start late. So a GPU is left out
        where the trace shows it never starting an op promptly: where every op launched onto it when it was free
        (all it had started had ended when the call began, and the op is the next it starts) started more than
        :data:`UNRECORDED_WAIT_NS` after its call returned (:meth:`_late_clock`); a GPU with no such op is judged by
        the rule alone."""
        o, p = self.ops, self.p
        none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        if not len(o["ts"]) or not len(p["gpu_id"]):
            return none
        code = self.op_devices[0]
        rows = self.gpu_rows
        call_end = p["launch_ts"] + p["launch_dur"]
        by_gpu = np.argsort(p["gpu_id"], kind="stable")
        pair_gpu = code[np.searchsorted(rows, p["gpu_id"])]  # (gpu_rows is sorted; the pairs' GPU ops are among it)
        b, e = [], []
        for d in np.unique(code).tolist():
            idx = np.flatnonzero(code == d)
            ts = o["ts"][idx]
            first = rows[idx[ts == ts.min()]]
            at = np.searchsorted(p["gpu_id"][by_gpu], first)
            lo = np.searchsorted(p["gpu_id"][by_gpu], first, side="right")
            calls = np.concatenate([by_gpu[a:z] for a, z in zip(at.tolist(), lo.tolist())])
            end, mine = int(ts.min()), pair_gpu == d
            if len(calls):
                start = int(call_end[calls].max())
            else:  # (launched before the recording: from the recording's start, where the GPU's launches are held)
                began = self.recording_starts[self.recording_starts <= end]
                if not len(began) or not mine.any():
                    continue
                start = int(began.max())
            if end - start > UNRECORDED_WAIT_NS and not self._late_clock(ts, o["end"][idx], mine):
                b.append(start)
                e.append(end)
        if not b:
            return none
        return merged(np.array(b, dtype=np.int64), np.array(e, dtype=np.int64))

    @cached_property
    def recording_starts(self) -> np.ndarray:
        """The starts (ns, sorted) of the profiler's own ``Trace`` slices (Kineto's "PyTorch Profiler (N)", one per
        recording): when each recording began. Empty where the trace has none."""
        t = self.slices
        return np.sort(t["ts"][_recordings(t)].astype(np.int64))

    def _late_clock(self, ts: np.ndarray, end: np.ndarray, mine: np.ndarray) -> bool:
        """Whether one GPU (its ops' ``ts`` and ``end``; ``mine``, a mask of the launch pairs of its ops) never started
        an op promptly where it could: True when every op but the first launched onto it while it was free (every op
        it started before the call began had ended by then, and this op is the next it starts) started more than
        :data:`UNRECORDED_WAIT_NS` after its call returned; False when one did not, or when no op was launched onto
        it free."""
        p = self.p
        order = np.argsort(ts, kind="stable")
        ts_s, reach = ts[order], np.maximum.accumulate(end[order])
        cs, ce, st = p["launch_ts"][mine], (p["launch_ts"] + p["launch_dur"])[mine], p["gpu_ts"][mine]
        i = np.searchsorted(ts_s, cs, side="left")  # ops [0, i) started before the call began
        done = (i == 0) | (reach[np.maximum(i - 1, 0)] <= cs)
        nxt = ts_s[np.minimum(i, len(ts_s) - 1)]
        free = done & (i < len(ts_s)) & (nxt == st) & (st > ts_s[0])
        return bool(free.any()) and int((st[free] - ce[free]).min()) > UNRECORDED_WAIT_NS

    def unrecorded_in(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per window [lo, hi) (int64 ns arrays): how long :attr:`unrecorded_waits` cover it where no recorded GPU op
        (any GPU, any stream) runs: time a GPU spent on work the trace does not hold, and not recorded work."""
        lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
        out = np.zeros(len(lo), dtype=np.int64)
        wb, we = self.unrecorded_waits
        if not len(wb):
            return out
        s, t = self.ops_union
        for b, e in zip(wb.tolist(), we.tolist()):  # (disjoint: their parts add up)
            cb, ce = np.clip(lo, b, e), np.clip(hi, b, e)
            out += (ce - cb) - covered_ns(cb, ce, s, t)
        return out

    @cached_property
    def ops_union(self) -> tuple[np.ndarray, np.ndarray]:
        """The union of every GPU op interval (any track) as disjoint sorted intervals (:func:`merged`)."""
        return merged(self.ops["ts"], self.ops["end"])

    def _launching_processes(self, rows: np.ndarray) -> tuple:
        """(process code of each of these slices, process code of each GPU op in :attr:`ops_by_ts` order: its launch
        call's, -1 without one); (None, None) where one process at most made launch calls (:attr:`several_launchers`)
        or no call launched any."""
        p = self.p
        if not len(p["gpu_id"]) or not self.several_launchers:
            return None, None
        pid = self.pids_of(p["launch_utid"])
        codes: dict = {}
        pc = np.array([-1 if x is None else codes.setdefault(x, len(codes)) for x in pid], dtype=np.int64)
        o = self.ops
        order = np.argsort(o["ts"], kind="stable")
        op_proc = np.full(len(o["ts"]), -1, dtype=np.int64)
        at = np.searchsorted(self.gpu_rows, p["gpu_id"])  # (the pairs' GPU ops are among gpu_rows, sorted)
        op_proc[at] = pc
        mine = self.pids_of(self.slices["utid"][rows])
        return (np.array([codes.get(x, -2) for x in mine], dtype=np.int64), op_proc[order])

    def _ops_overlapping_mask(self, b: int, e: int) -> np.ndarray:
        """The positions in :attr:`ops_by_ts` of the ops :meth:`ops_overlapping` returns, same order."""
        ts, end, _run = self.ops_by_ts
        hi = int(np.searchsorted(ts, e, side="left"))
        return np.flatnonzero(end[:hi] > b)

    def ops_overlapping(self, b: int, e: int) -> tuple[np.ndarray, np.ndarray]:
        """(ts, end) of the GPU ops with ts < e and end > b."""
        ts, end, _run = self.ops_by_ts
        hi = int(np.searchsorted(ts, e, side="left"))
        m = end[:hi] > b
        return ts[:hi][m], end[:hi][m]

    @cached_property
    def op_categories(self) -> np.ndarray:
        """The category of every GPU op of :attr:`ops` (same order) as an index (int8) into ``GPU_OP_CATEGORIES``
        (``categories.gpu_op_category`` of its name and trace category; decided once per distinct pair)."""
        t, i = self.slices, self.gpu_rows
        if len(i) == 0:
            return np.zeros(0, dtype=np.int8)
        m = len(t["cat_uniq"]) + 1
        key = (t["name_codes"][i].astype(np.int64) + 1) * m + (t["cat_codes"][i] + 1)
        uk, inv = np.unique(key, return_inverse=True)
        names, cats = t["name_uniq"], t["cat_uniq"]  # index -1: None (code -1, NULL)
        index = {c: k for k, c in enumerate(GPU_OP_CATEGORIES)}
        return np.array([index[gpu_op_category(names[k // m - 1], cats[k % m - 1])] for k in uk.tolist()],
                        dtype=np.int8)[inv.reshape(-1)]

    @cached_property
    def backward_work(self) -> np.ndarray:
        """Boolean array over ``slices``: the slices that are the backward's work, the autograd engine running one
        backward function each. The rule, stated here once (``table.engine_work_beside`` and ``phases`` read it): a
        slice on a thread, not a ``gpu_user_annotation`` copy, that is either

        - an ``autograd::engine::evaluate_function: …`` slice (:data:`AUTOGRAD_FUNCTION`), or
        - a backward node's own slice (``MmBackward``, ``AddBackward0``, ``torch::autograd::AccumulateGrad``:
          :data:`_BACKWARD_NODE`) with no such slice, nor another node, among its ancestors.

        The second is the 2021 format, which has no ``evaluate_function`` slices: its nodes lie at the top of the
        engine's own thread on a GPU, and under the calling thread's slices (the step) on a CPU run, where the engine
        runs the backward on the thread that called ``backward()``. In a newer trace a node's slice lies inside its
        ``evaluate_function`` slice and so is not counted again; a node run inside another (a reentrant backward)
        neither. The engine's own work between nodes (the 2021 format's top-level ``aten::add`` that sums two
        gradients for one input) is not a node and not counted."""
        t = self.slices
        fn = self.name_mask(lambda u: isinstance(u, str) and u.startswith(AUTOGRAD_FUNCTION))
        node = self.name_mask(lambda u: isinstance(u, str) and bool(_BACKWARD_NODE.fullmatch(u)))
        out = (fn | node) & (t["utid"] >= 0) & ~self.cat_mask(lambda c: c == "gpu_user_annotation")
        rows = np.flatnonzero(node & out)
        if len(rows):  # a node inside an evaluate_function slice or another node is that one's work
            ppos, hit = t["ppos"], fn | node
            up, held = ppos[rows], np.zeros(len(rows), dtype=bool)
            while (up >= 0).any():
                on = up >= 0
                held[on] |= hit[up[on]]
                up = np.where(on, ppos[np.maximum(up, 0)], -1)
            out[rows[held]] = False
        return out

    @cached_property
    def step_windows(self) -> dict:
        """The steps' windows on the timeline (``steps_list`` order), int64 arrays: ``start``, ``end``: the step's
        start and the later of its end and the end of the GPU work launched in its slice (``gpu_busy``'s window of a step: an asynchronous step's
        work counts with it, however late it runs); ``lo``, ``hi``: those windows made disjoint, each from the later
        of its start and every earlier window's end (``hi`` at least ``lo``), so they tile the windows' union
        (a step whose window lies inside an earlier one's gets an empty one)."""
        st, p = self.steps_list, self.p
        launched = [self.pairs_in(ts, ts + dur) for _sid, _n, _nm, ts, dur, _d, _u in st]
        start = np.array([r[3] for r in st], dtype=np.int64)
        end = np.array([max(r[3] + r[4], int(p["gpu_end"][k].max()) if len(k) else 0) for r, k in zip(st, launched)],
                       dtype=np.int64)
        before = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, end[:-1]]) if len(st) else end
        lo = np.maximum(start, before)
        return {"start": start, "end": end, "lo": lo, "hi": np.maximum(lo, end)}

    @cached_property
    def step_gpu_time(self) -> dict[str, np.ndarray]:
        """What the GPU did inside each step's window [lo, hi) of :attr:`step_windows` (disjoint windows), from every
        GPU op interval clipped to it (whatever launched it): ``busy`` (n,), the union of all of them (idle being the
        rest of the window less ``unrecorded``); ``time`` (n, K), that union split over the K ``GPU_OP_CATEGORIES`` by their order (an
        instant where several categories run counts for the first of them, so the K add up to ``busy``); ``own``
        (n, K), each category's own union, overlaps with other categories included; ``unrecorded`` (n,), the time a
        GPU spent on work the trace does not hold where no recorded op ran (:meth:`unrecorded_in`). All int64 ns.

        One :func:`coverage_ns` sweep over all steps (groups) and categories (classes)."""
        st = self.steps_list
        n, k = len(st), len(GPU_OP_CATEGORIES)
        zero = {"busy": np.zeros(n, dtype=np.int64), "time": np.zeros((n, k), dtype=np.int64),
                "own": np.zeros((n, k), dtype=np.int64), "unrecorded": np.zeros(n, dtype=np.int64)}
        ops = self.ops
        if n == 0 or len(ops["ts"]) == 0:
            return zero
        w = self.step_windows
        zero["unrecorded"] = self.unrecorded_in(w["lo"], w["hi"])
        order = np.argsort(ops["ts"], kind="stable")
        ts, end, cat = ops["ts"][order], ops["end"][order], self.op_categories[order]
        reach = np.maximum.accumulate(end)  # the latest end so far: the ops before the first reach > b end by b
        sel, which = [], []
        for j, (b, e) in enumerate(zip(w["lo"].tolist(), w["hi"].tolist())):
            lo = int(np.searchsorted(reach, b, side="right"))
            hi = int(np.searchsorted(ts, e, side="left"))
            s = lo + np.flatnonzero(end[lo:hi] > b)  # starts before the window's end, ends after its start
            sel.append(s)
            which.append(np.full(len(s), j, dtype=np.int64))
        s, j = np.concatenate(sel), np.concatenate(which)
        if len(s) == 0:
            return zero
        b, e = np.maximum(ts[s], w["lo"][j]), np.minimum(end[s], w["hi"][j])
        time, own = coverage_ns(b, e, j, n, cat[s], k)
        return {"busy": time.sum(axis=1), "time": time, "own": own, "unrecorded": zero["unrecorded"]}

    def under(self, rows: np.ndarray, named: np.ndarray) -> np.ndarray:
        """Whether each of ``rows`` (of ``slices``) has an ancestor (parent chain) among ``named`` (a boolean array
        over ``slices``, e.g. :meth:`name_mask`)."""
        ppos = self.slices["ppos"]
        hit = np.zeros(len(rows), dtype=bool)
        cur = ppos[rows] if len(rows) else np.zeros(0, dtype=np.int64)
        while (live := cur >= 0).any():
            hit[live] |= named[cur[live]]
            cur = np.where(live & ~hit, ppos[np.maximum(cur, 0)], -1)
        return hit

    @cached_property
    def compiler_work(self) -> np.ndarray:
        """Boolean over ``slices``: the slice is one of torch.compile's compiler ranges (:data:`COMPILER_RANGE`) or
        lies under one (its parent chain), or is one of Kineto's overhead events (category ``overhead``, on a thread
        of their own) that starts inside one's time: the compiler's own work, which a step that compiles (a cold
        compiled run's first step, a recompile, a CUDA graph's recording) holds and the steps after it do not. All
        False in a trace without such ranges (eager code, or a compile outside the recording)."""
        ranges = self.name_mask(lambda x: isinstance(x, str) and x.endswith(COMPILER_RANGE))
        if not ranges.any():
            return ranges
        rows = np.flatnonzero(~ranges)
        out = ranges.copy()
        out[rows] = self.under(rows, ranges)
        # Kineto's overhead events (``Lazy Function Loading``…) are written on a thread of their own, under no slice:
        # one that starts inside a compiler range's time is the compiler's (loading the kernels it benchmarks)
        t = self.slices
        over = np.flatnonzero(self.cat_mask(lambda c: isinstance(c, str) and c.lower() == "overhead") & ~out)
        if len(over):
            top = np.flatnonzero(ranges)
            b, e = merged(t["ts"][top], t["ts"][top] + t["dur"][top])
            k = np.searchsorted(b, t["ts"][over], side="right") - 1
            out[over] = (k >= 0) & (t["ts"][over] < e[np.maximum(k, 0)])
        return out

    def compiler_ns(self, lo: np.ndarray, hi: np.ndarray, utids: list) -> np.ndarray:
        """For each window ``[lo, hi)`` (ns): how much of it the compiler's ranges (:attr:`compiler_work`) cover on
        the threads of the process of thread ``utids[k]`` (None: of any process), each instant once."""
        out = np.zeros(len(lo), dtype=np.int64)
        work = self.compiler_work
        if not len(lo) or not work.any():
            return out
        t = self.slices
        top = np.flatnonzero(work)
        up = t["ppos"][top]
        top = top[(up < 0) | ~work[np.maximum(up, 0)]]  # the outermost: no parent of the compiler's
        pids = np.array(self.pids_of(t["utid"][top].tolist()), dtype=object)
        wanted = self.pids_of(utids)
        for p in set(wanted):
            k = np.array([w == p for w in wanted], dtype=bool)
            mine = top if p is None else top[pids == p]
            if len(mine):
                out[k] = covered_ns(lo[k], hi[k], *merged(t["ts"][mine], t["ts"][mine] + t["dur"][mine]))
        return out

    @cached_property
    def _is_aten(self) -> np.ndarray:
        """Boolean over ``slices``: the name starts with ``aten::``."""
        return self.name_mask(lambda x: isinstance(x, str) and x.startswith("aten::"))

    def aten_op_of(self, rows: np.ndarray) -> np.ndarray:
        """For each of these rows of ``slices``: the row of its innermost enclosing ``aten::`` op (its nearest
        ``aten::`` ancestor, the slice itself not counted), -1 where it has none. Walks up all of them at once."""
        t, is_aten = self.slices, self._is_aten
        out = np.full(len(rows), -1, dtype=np.int64)
        cur = np.asarray(rows, dtype=np.int64).copy()
        live = np.flatnonzero(cur >= 0)
        cur[live] = t["ppos"][cur[live]]
        live = live[cur[live] >= 0]
        while len(live):
            hit = is_aten[cur[live]]
            out[live[hit]] = cur[live[hit]]
            live = live[~hit]
            cur[live] = t["ppos"][cur[live]]
            live = live[cur[live] >= 0]
        return out

    def enclosing_rows(self, rows: np.ndarray, hosts: np.ndarray | None = None) -> np.ndarray:
        """For these rows of ``slices``: the row of the innermost slice that encloses each in time (the latest start,
        then the shortest, then the first), -1 where none does; by default among the other tracks of its own thread,
        or, with ``hosts`` (a boolean mask over ``slices``), among those slices, whatever their thread.

        A slice that starts inside another and ends after it cannot be nested: trace_processor (and the mirror)
        puts it at depth 0 on another track of its thread, without a parent (HTA's A100 control trace: a
        ``cudaLaunchKernel`` that starts 2 µs before a ``cudaPointerGetAttributes`` above it ends, inside its
        ``aten::mm``). Only the thread's other tracks can hold an enclosing slice: on its own track it would have
        been nested. A slice written on no thread of its own (Kineto's thread 0) is held by another thread's slice:
        ``hosts`` names them (``table._host_utid``). Each track is properly nested, so the innermost slice enclosing
        a time span on it is the last slice starting at or before the span (the deepest of equal starts), or an
        ancestor of that slice."""
        t = self.slices
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(len(rows), -1, dtype=np.int64)
        if not len(rows):
            return out
        ts, dur, utid, track = t["ts"], t["dur"], t["utid"], t["track_id"]
        best_ts = np.full(len(rows), np.iinfo(np.int64).min)
        best_dur = np.zeros(len(rows), dtype=np.int64)
        if hosts is None:
            on_thread = np.flatnonzero(np.isin(utid, np.unique(utid[rows])) & (utid >= 0))
        else:
            on_thread = np.flatnonzero(hosts & (utid >= 0))
        if not len(on_thread):
            return out
        ok = np.zeros(len(ts), dtype=bool)
        ok[on_thread] = True
        for tr in np.unique(track[on_thread]):
            mine = on_thread[track[on_thread] == tr]
            mine = mine[np.lexsort((t["depth"][mine], ts[mine]))]  # by start, the deepest of equal starts last
            ask = np.flatnonzero(((utid[rows] == utid[mine[0]]) if hosts is None else True) & (track[rows] != tr))
            if not len(ask):
                continue
            a, e = ts[rows[ask]], ts[rows[ask]] + dur[rows[ask]]
            k = np.searchsorted(ts[mine], a, side="right") - 1
            cur = np.where(k >= 0, mine[np.maximum(k, 0)], -1)
            live = np.flatnonzero(cur >= 0)
            while len(live):  # climb until the slice (one of those searched) also ends at or after the span's end
                c = cur[live]
                done = (ts[c] + dur[c] >= e[live]) & ok[c]
                live = live[~done]
                cur[live] = t["ppos"][cur[live]]
                live = live[cur[live] >= 0]
            found = np.flatnonzero(cur >= 0)
            c, i = cur[found], ask[found]
            better = (ts[c] > best_ts[i]) | ((ts[c] == best_ts[i]) & ((dur[c] < best_dur[i])
                                                                   | ((dur[c] == best_dur[i]) & (c < out[i]))))
            out[i[better]], best_ts[i[better]], best_dur[i[better]] = c[better], ts[c[better]], dur[c[better]]
        return out

    @cached_property
    def trace_window(self) -> tuple:
        """(first ts, last end) over slices with a category other than Trace; (None, None) when there are none."""
        t = self.slices
        m = np.array([c is not None and c != "Trace" for c in t["cat_uniq"]], dtype=bool)[t["cat_codes"]]
        if not m.any():
            return None, None
        return int(t["ts"][m].min()), int((t["ts"][m] + t["dur"][m]).max())

    def cached(self, key: str, build):
        """``build(self)``, computed once for this trace under ``key``: a piece that lives in the module that
        builds it but that several analyses read (``phases``' phase ranges)."""
        if key not in self._memo:
            self._memo[key] = build(self)
        return self._memo[key]

    @cached_property
    def lanes(self) -> dict:
        """{utid: (tid, pid)} of every thread (pid None without a process row)."""
        tb = self.tables
        pid_of = {upid: pid for upid, pid, _name in tb.processes}
        return {utid: (tid, pid_of.get(upid)) for utid, tid, _name, upid, _main in sorted(tb.threads)}

    def pid_codes(self, utids: np.ndarray) -> np.ndarray:
        """:meth:`pids_of` as int64 codes (-1 for none), for arrays of utids (-1 for a slice on no thread), from
        :attr:`lane_of`: the pid itself where every pid is an integer (so codes order as pids do)."""
        _has, _tid, pid = self.lane_of
        u = np.asarray(utids, dtype=np.int64) + 1
        u = np.where((u >= 0) & (u < len(pid)), u, 0)  # (index 0: no thread)
        if isinstance(pid, IntsOrNull):
            return np.where(pid.missing[u], -1, pid.values[u])
        codes, _uniq = factorize(pid)  # (pids of another type: codes in order of first sight, -1 for None)
        return codes[u]

    def pids_of(self, utids) -> list:
        """The process id (pid) of each of these threads (utids): None for no thread (None, NaN or a negative
        utid: a slice written on no thread) and for a thread without a process row."""
        lanes = self.lanes
        return [lanes.get(int(u), (None, None))[1] if u is not None and u == u and u >= 0 else None
                for u in (utids.tolist() if hasattr(utids, "tolist") else utids)]

def _recordings(t: dict) -> np.ndarray:
    """A mask over the slices ``t`` (:attr:`Shared.slices`' columns): the profiler's own ``Trace`` slices (Kineto's
    "PyTorch Profiler (N)"), one per recording, from its start to its end."""
    return np.array([c == "trace" for c in t["cat_low_uniq"]], dtype=bool)[t["cat_codes"]]


def _steps_cut_at_recording(t: dict) -> np.ndarray:
    """The slices' durations with every step slice (``ProfilerStep#N``, not a ``gpu_user_annotation`` copy) cut at
    the end of the recording: the latest end of the profiler's own ``Trace`` slices (Kineto's "PyTorch Profiler
    (N)", one per recording) where the trace has any. A step slice can be written with an end long after the
    profiler stopped (HTA's Triton example: a 13.3 s step in a 355 ms recording); nothing of it was recorded past
    that point. A step starting after the recording's end keeps no time. The same rule as the queries' fragment
    ``_recording.sql``. ``dur`` itself when nothing is cut."""
    dur = t["dur"]
    cats = t["cat_low_uniq"]
    rec = _recordings(t)
    if not rec.any():
        return dur
    end = int((t["ts"][rec] + dur[rec]).max())
    step_name = np.array([isinstance(u, str) and u.startswith("ProfilerStep#") for u in t["name_uniq"]],
                         dtype=bool)[t["name_codes"]]
    over = step_name & (t["ts"] + dur > end)
    if over.any():
        over &= np.array([c != "gpu_user_annotation" for c in cats], dtype=bool)[t["cat_codes"]]
    if not over.any():
        return dur
    dur = dur.copy()
    dur[over] = np.maximum(end - t["ts"][over], 0)
    return dur


def step_number(name) -> int:
    """N of a ``ProfilerStep#N`` name, as the study's SQL reads it (``CAST(substr(name, 14) AS INT)``: SQLite's rule,
    trace_processor's too): the integer the text after ``#`` begins with, after ASCII white space and with its sign,
    held to int64's range; 0 where that text begins with no digits (``ProfilerStep#x``). Every analysis numbers steps
    by this, so the queries and the analyses name a step alike."""
    m = _STEP_NUMBER.match(name, 13) if isinstance(name, str) else None
    if m is None:
        return 0
    digits = m.group(2).lstrip("0") or "0"
    n = 1 << 63 if len(digits) > 19 else int(digits)  # (a longer run of digits is past int64 either way)
    return -min(n, 1 << 63) if m.group(1) == "-" else min(n, (1 << 63) - 1)


_STEP_NUMBER = re.compile(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)")


def _misbound(tb, launch_rows: np.ndarray, gpu_rows: np.ndarray) -> np.ndarray:
    """Which of these flows (launch call row → GPU op row) end on a GPU op that two or more of them end on, while
    their call's ``args.correlation`` and the op's are both written and differ.

    Kineto writes a flow's end at its kernel's start, and the trace's reader binds it to the slice that encloses
    that time on the GPU lane. When a kernel starts before the one ahead of it on the same stream has ended (cuBLAS'
    ``splitKreduce_kernel`` 0.13 µs before its ``nvjet`` GEMM ends, on the H200), its flow can bind to the kernel
    ahead, which then has two launches and the kernel none. The correlation id, written on both the call and the
    kernel, says which flow is whose. Only ops with more than one flow are read (one flow per op is the rule, and
    a graph launch's flows end on different ops), so a trace without such an op reads no args here."""
    bad = np.zeros(len(gpu_rows), dtype=bool)
    if not len(gpu_rows):
        return bad
    _, inverse, counts = np.unique(gpu_rows, return_inverse=True, return_counts=True)
    multi = np.flatnonzero(counts[inverse] > 1)
    if not len(multi):
        return bad
    lr, gr = launch_rows[multi], gpu_rows[multi]
    values = tb.args.get("correlation", tb.arg_set_id[lr].tolist() + tb.arg_set_id[gr].tolist())
    for k, a, b in zip(multi.tolist(), tb.arg_set_id[lr].tolist(), tb.arg_set_id[gr].tolist()):
        ca, cb = values.get(a), values.get(b)
        bad[k] = (ca is not None and cb is not None and not isinstance(ca, list) and not isinstance(cb, list)
                  and ca != cb)
    return bad


def _equal_arg(tb, key: str, a_rows: np.ndarray, b_rows: np.ndarray, values: dict | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) rows of every pair of an ``a_rows`` slice and a ``b_rows`` slice whose argument ``key`` is one equal
    scalar (not None); ``values``: that argument by arg set where already read for both sides."""
    if values is None:
        values = tb.args.get(key, tb.arg_set_id[a_rows].tolist() + tb.arg_set_id[b_rows].tolist())  # both at once
    by_value: dict = {}
    for r, asid in zip(a_rows.tolist(), tb.arg_set_id[a_rows].tolist()):
        v = values.get(asid)
        if v is not None and not isinstance(v, list):
            by_value.setdefault(v, []).append(r)
    out_a, out_b = [], []
    for r, asid in zip(b_rows.tolist(), tb.arg_set_id[b_rows].tolist()):
        v = values.get(asid)
        if v is not None and not isinstance(v, list):
            for x in by_value.get(v, ()):
                out_a.append(x)
                out_b.append(r)
    return np.array(out_a, dtype=np.int64), np.array(out_b, dtype=np.int64)


def shared_for(session, shared: Shared | None) -> Shared:
    """``shared`` when given (and for this session), else a new one."""
    return shared if shared is not None and shared.session is session else Shared(session)
