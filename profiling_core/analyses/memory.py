"""Where the memory goes, from the trace's ``[memory]`` events alone.

torch.profiler with ``profile_memory=True`` writes one ``[memory]`` instant event per allocation and per free, with
its ``Bytes`` (negative for a free), the block's ``Addr``, the allocator's ``Total Allocated`` and ``Total Reserved``
after it, and its ``Device Type`` / ``Device Id``. trace_processor (and the mirror) load them as slices of duration 0
nested under the op that was running on their thread. The rules, each stated once:

- **Events.** A slice named ``[memory]`` whose ``Bytes`` is a number of magnitude below 2⁴⁴ (16 TiB) is an event
  (``Bytes`` rounded to whole bytes; a JSON boolean is no number); one without is left out of every frame and counted
  (``MemoryReport.summary["skipped_events"]``). Events are taken in (timestamp, slice id) order.
- **Device.** ``Device Type`` is c10's ``DeviceType`` number (0 CPU, 1 CUDA, 6 HIP, 12 XPU, 13 MPS, 20 the private
  backend, ... :data:`DEVICE_TYPES`): ``"cpu"`` for the CPU whatever its id, else ``"<type>:<id>"`` (``"cuda:0"``),
  ``"<type>"`` without an id, ``"device_type_<n>"`` for a number torch does not name, ``"unknown"`` without one.
  Where events of several processes (ranks merged into one file) name the same device, each process's is a device of
  its own, named with the pid of the event's thread: ``"cuda:0 (pid 2)"`` (:func:`device_of` gives the device back);
  a trace whose devices are each one process's keeps the bare names.
- **Totals.** ``Total Allocated`` / ``Total Reserved`` count where they are numbers from 0 to below 2⁴⁴ (else NaN:
  a negative, missing or absurd total is no total). The CPU allocator reserves nothing and writes 0: a device whose
  every reserved figure is 0 has none (NaN).
- **Allocated level** (``level_bytes``, what every other figure reads): the device's ``Total Allocated`` where the
  event has one; between and around such events, the nearest earlier one (else the next one) carried by the events'
  ``Bytes``. A device whose events have no total at all (2021 traces) is measured by the running sum of ``Bytes``
  from the window's start, which starts at 0: it counts only what the window allocated (``basis`` ``running_sum``
  instead of ``total``).
- **The CPU's totals** are not the process's: torch's CPU memory reporter (``ProfiledCPUMemoryReporter``) counts a
  block only when it was allocated while memory profiling was on, and reports the free of no other block, so a
  tensor made before the profiler began recording (an input, a weight) shows in neither its totals nor its events.
  The CPU's level is what the profiler saw allocated (``basis`` ``since_profiling``; on a real CPU run it starts at
  0 with the inputs already allocated). The reporter keeps its count for the process's life, though: a second
  profiler session in one process, or a schedule's later cycle, opens where the earlier recording left it (torch
  2.13, CPU: two ``with profile(...)`` blocks in one process, the second's first event's ``Total Allocated`` less
  its ``Bytes`` 4,259,840 B, the first's last total; ``schedule(..., repeat=2)``, the second cycle's 3,279,360 B,
  the first cycle's last total), and a block an earlier recording allocated and no recording saw freed stays in
  it. A CPU whose level opens above 0 is so counted from an earlier recording in the process (``basis``
  ``since_earlier_recording``); one that opens at 0, from when this recording began. Such a device, and a
  ``running_sum`` one, is measured from the window's start: :data:`RELATIVE_BASES` says why in words, and only a
  ``total`` device's peak is the device's own.
- **Op.** An event's op is the slice it is nested in (its parent in the slice table: an ATen op, a
  ``record_function`` range, a Python frame with ``with_stack``; never another ``[memory]`` event, under which a
  loader may nest one of the same timestamp), None at the top level of its lane (2021 traces put
  memory events on a lane of their own, so all of theirs are at the top level). Frames grouped by op
  (:func:`memory_by_op`, :func:`unfreed`, :func:`live_at_peak`) merge ``ProfilerStep#N`` into ``ProfilerStep*`` as
  the profiler table does; an op's total counts the events nested anywhere under each of its slices (a slice nested
  in one of the same name counts twice, as torch's ``cpu_memory_usage`` does).
- **Peak.** A device's peak is the highest level the window saw, the level it opened with
  (``first_allocated_bytes``) among them: the first event at the highest level, or the window's opening when that
  level is higher than every event's (``at_opening``: a window whose first events free what was allocated before it;
  the peak then has no op and no step, and takes its time and reserved figure from the first event). A step's peak
  likewise is the highest of the level it began with and its events' levels.
- **Step.** An event's step is the ``ProfilerStep#N`` (CPU slice, any thread of the event's process) whose window
  holds its timestamp (its number as every analysis reads it, exact however large: a nullable integer column), none
  outside every step; where windows overlap (ranks' traces merged into one file), the latest to start. An event of
  a process without steps takes any process's step whose window holds it.
- **Blocks.** A block is matched by address within its device: an allocation opens it, the next free of that
  address closes it (the free's own ``Bytes`` count in the level either way); an allocation at an address still open
  closes the older block there (its free was not recorded). A free of an address no allocation of the window opened
  is a block allocated before the window. Without ``Addr`` (2021 traces) no block can be followed: those devices
  have no rows in :func:`live_at_peak` and :func:`unfreed`.
- **The window.** Only what the profiler recorded counts: blocks allocated before it (weights, a warm-up's caches)
  show only through the totals and through their frees. ``first_allocated_bytes`` is the level before the window's
  first event (what was already allocated), ``last_allocated_bytes`` the level after its last.
- **Against torch.** :func:`memory_by_op` is the profiler table's memory columns (``key_averages()``:
  ``self_cpu_memory_usage``, ``cpu_memory_usage`` for the CPU, ``self_device_memory_usage``,
  ``device_memory_usage`` for CUDA); torch lists the top-level events as ``[memory]`` (here ``op`` None). Two of
  torch's ways differ from this rule, which gives each event to the op it is nested under (the op that made it):
  torch's total of an op is every event in its time window on any thread (so a training step's ``ProfilerStep*`` and
  model range also count the backward's allocations on the autograd thread, which here belong to the autograd
  thread's ops), and its table merges an op whose only child has the same name (a redispatch such as
  ``aten::mse_loss`` under ``aten::mse_loss``) into one row, where this counts both slices. On one thread and
  without such pairs the figures are torch's to the byte (a CPU run, tested against ``key_averages``; on an H200
  MLP training step 49 of the table's 52 rows with a name of their own, the other three by these two ways). A run's
  ``meta.json`` keeps ``peak_device_memory_bytes`` (``torch.cuda.max_memory_allocated()``), which counts the whole
  process: the tensors built before the profiler started and every warm-up step. The trace's peak can only see the
  window, so it is at most that figure, and equal to it when the window holds the process's peak (a steady loop
  whose profiled steps repeat the warm-up's; :data:`PEAK_MATCH_TOLERANCE`). On the eager H200 runs kept in
  ``tests/data/h200_memory`` (``eager``, ``train``, ``train_fused``, ``script_cache``: 3 or 5 warm-up calls) the two
  are equal to the byte. Under CUDA graphs they are not: a replay allocates from its graph's pool, which no event
  records, so the process's peak lies outside the window. ``ro``'s profiled steps record no event at all, and only
  the run's figure is left; ``train_ro``'s record the work outside its graphs and peak at 486,667,776 B, 73 % of the
  run's 662,867,456 B.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ._common import recorded_with
from ._shared import Shared, frame, shared_for
from .table import NO_WORK_TEXT, row_label, work_count

__all__ = [
    "BEFORE_WINDOW",
    "DEVICE_TYPES",
    "NO_MEMORY_TEXT",
    "PEAK_MATCH_TOLERANCE",
    "RELATIVE_BASES",
    "MemoryReport",
    "chain_tail",
    "device_of",
    "live_at_peak",
    "memory_by_op",
    "memory_churn",
    "memory_peaks",
    "memory_report",
    "memory_timeline",
    "unfreed",
]

NO_MEMORY_TEXT = ("This trace has no [memory] events, so it cannot say where the memory goes: record them with "
                  "profile_memory=True (torch.profiler.profile(..., profile_memory=True); in the app, the Profile "
                  "form's profile-memory knob; on the command line, run --profile-memory).")
"""What the report, the findings and the CLI say of a trace without memory events, and how to record them."""

NOTHING_RECORDED_TEXT = ("This trace was recorded with profile_memory=True, yet its profiled steps recorded no "
                         "[memory] event: they allocated and freed nothing through the allocator. A step that "
                         "replays CUDA graphs does so (each replay runs in its graph's private pool, captured "
                         "before the window); what was allocated before the window is no event either.")
"""What they say instead when memory was recorded (``recorded_with``: the trace's own header or the run's config says
so) and the trace has no event."""


DEVICE_TYPES = {0: "cpu", 1: "cuda", 2: "mkldnn", 3: "opengl", 4: "opencl", 5: "ideep", 6: "hip", 7: "fpga",
                8: "maia", 9: "xla", 10: "vulkan", 11: "metal", 12: "xpu", 13: "mps", 14: "meta", 15: "hpu", 16: "ve",
                17: "lazy", 18: "ipu", 19: "mtia", 20: "privateuseone"}
"""c10's ``DeviceType`` numbers, as the ``Device Type`` argument writes them, and torch's names for them."""

RELATIVE_BASES = {
    "running_sum": ("counted from the window's start",
                    ("the trace has no allocator totals (the 2021 format), so this is what the window allocated less "
                     "what it freed, from 0 at its start; what was allocated before it, and so the device's own "
                     "peak, the trace cannot know")),
    "since_profiling": ("counted from when the profiler began recording",
                        ("torch counts a CPU's memory only from when the profiler began recording it (a tensor made "
                         "before, such as an input or a weight, shows neither its allocation nor its free), so this "
                         "is what the recording allocated less what it freed; what the process held, and so "
                         "its own peak, the trace cannot know")),
    "since_earlier_recording": ("counted from an earlier recording in this process",
                                ("torch counts a CPU's memory only while a profiler records it, and carries the "
                                 "count from one recording to the next in one process (a second profiler session, "
                                 "a schedule's later cycle): the window opened with what earlier recordings "
                                 "allocated and no recording saw freed (still held, or freed while none recorded), "
                                 "so this is that plus what this recording allocated less what it freed; what the "
                                 "process held, and so its own peak, the trace cannot know")),
}
"""The ``basis`` values whose level leaves out what was allocated before the window (the *Allocated level* and *The
CPU's totals* rules), each with (a short label to put beside a figure, why, as a clause): every figure of such a
device counts from the window's start (``since_earlier_recording``: from what earlier recordings left), and only
differences between them (what a step allocated, what the peak rose above a step's end) are the device's own."""

CHAIN_CHARS = 200
"""The most characters of a call chain a statement quotes: its innermost end, where the op is (a chain of Python
frames, with_stack's, runs to thousands)."""


def chain_tail(chain: str, n: int = CHAIN_CHARS) -> str:
    """``chain`` (a ``call_chain``), or its last ``n`` - 1 characters after an ellipsis when it is longer."""
    return chain if len(chain) <= n else "…" + chain[-(n - 1):]


BEFORE_WINDOW = "before the window"
"""``origin`` of the blocks allocated before the profiler's window (their op is unknown: None)."""

PEAK_MATCH_TOLERANCE = 0.01
"""How far below ``torch.cuda.max_memory_allocated()`` the trace's peak may be on a run whose profiled steps repeat
its warm-up steps (the same allocations in the same order): 1 %, for the few blocks a profiled step allocates in
another order than a warm-up one. Above that figure it never is: the trace's totals are the same allocator's."""

_TIMELINE = ["device", "start_ns", "bytes", "allocated_bytes", "reserved_bytes", "step", "op", "slice_id", "addr",
             "level_bytes"]
_PEAKS = ["device", "peak_allocated_bytes", "peak_reserved_bytes", "peak_ns", "step", "op", "call_chain",
          "first_allocated_bytes", "last_allocated_bytes", "basis", "events", "alloc_bytes", "freed_bytes",
          "reserved_at_peak_bytes", "gap_at_peak_bytes", "gap_max_bytes", "gap_median_bytes", "has_addresses",
          "at_opening", "low_after_peak_bytes"]
_LIVE = ["device", "op", "origin", "bytes", "blocks", "kept_bytes"]
_BY_OP = ["op", "device", "self_alloc_bytes", "self_freed_bytes", "self_net_bytes", "total_net_bytes", "self_events"]
_UNFREED = ["op", "device", "bytes", "blocks", "steps"]
_CHURN = ["step", "device", "alloc_bytes", "freed_bytes", "net_bytes", "peak_allocated_bytes",
          "start_allocated_bytes", "end_allocated_bytes", "events"]


_MAX_BYTES = 2.0 ** 44
"""The largest ``Bytes`` or total an event may carry (16 TiB, more than any device holds): beyond it a figure is no
size. Below it a figure is exact in a float64 (below 2⁵³) and half a million of them sum within an int64 (near 2⁶⁰
nine of them wrapped around, and the level of a device went negative)."""


def _empty(cols: list[str]) -> pd.DataFrame:
    return frame([], cols)


_OPTIONAL_TEXT = ("op",)
"""The text columns whose rows may have none (None: an event at the top level, a block from before the window)."""


def _frame(rows: list[tuple], cols: list[str]) -> pd.DataFrame:
    """``frame(rows, cols)`` whose :data:`_OPTIONAL_TEXT` columns hold None where a row has no text (pandas reads
    None beside text as NaN, which a sentence would print as "nan")."""
    df = frame(rows, cols)
    for k, c in enumerate(cols):
        if c in _OPTIONAL_TEXT and rows:
            df[c] = pd.Series([r[k] for r in rows], dtype=object)
    return df


def _numbers(values: list) -> np.ndarray:
    """Each value as a float64 where it is a finite number (an int or a float, not a bool), NaN for anything else
    (missing, text, a bool, an infinity, an integer beyond a float's range). Converted at once where every value is
    an int or a float (the common case), one at a time otherwise."""
    if set(map(type, values)) <= {int, float}:
        try:
            a = np.array(values, dtype=np.float64)
        except OverflowError:
            a = None
        if a is not None:
            a[~np.isfinite(a)] = np.nan
            return a
    out = np.full(len(values), np.nan)
    for k, v in enumerate(values):
        if type(v) is not bool and isinstance(v, (int, float)):
            try:
                x = float(v)
            except OverflowError:
                continue
            if math.isfinite(x):
                out[k] = x
    return out


def device_name(kind, index) -> str:
    """The device of an event (the module's *Device* rule)."""
    if type(kind) is not int:
        return "unknown"
    name = DEVICE_TYPES.get(kind, f"device_type_{kind}")
    if kind == 0:
        return name
    return f"{name}:{index}" if type(index) is int and index >= 0 else name


class _Events:
    """The memory events of one trace as columns in timeline order, and the block matching (computed once)."""

    def __init__(self, sh: Shared) -> None:
        t = sh.slices
        tb = sh.tables
        rows = np.flatnonzero(sh.name_mask(lambda u: u == "[memory]"))
        asid = tb.arg_set_id[rows] if len(rows) else np.zeros(0, dtype=np.int64)
        ids = [int(a) for a in asid.tolist() if a >= 0]
        keys = ("Bytes", "Addr", "Total Allocated", "Total Reserved", "Device Type", "Device Id")
        got = tb.args.get_many(keys, ids) if ids else {k: {} for k in keys}
        nb = _numbers([got["Bytes"].get(a) for a in asid.tolist()])
        keep = np.abs(nb) < _MAX_BYTES  # (False for NaN)
        self.skipped = int((~keep).sum())
        rows, asid = rows[keep], asid[keep]
        nbytes = np.rint(nb[keep]).astype(np.int64)  # (round half to even, as Python's round)
        ts = t["ts"][rows]
        order = np.lexsort((rows, ts))
        self.rows, self.ts, self.bytes, asid = rows[order], ts[order], nbytes[order], asid[order].tolist()
        n = len(self.rows)

        def total(key):
            v = _numbers([got[key].get(a) for a in asid])
            return np.where((v >= 0) & (v < _MAX_BYTES), np.rint(v), np.nan)
        self.alloc, self.res = total("Total Allocated"), total("Total Reserved")
        addr = [got["Addr"].get(a) for a in asid]
        self.addr = [v if type(v) is int else None for v in addr]
        named: dict = {}  # (kind, index, their types) -> device_name: a few devices for thousands of events
        names = []
        for kind, index in zip([got["Device Type"].get(a) for a in asid], [got["Device Id"].get(a) for a in asid]):
            try:
                key = (type(kind), kind, type(index), index)
                name = named.get(key)
                if name is None:
                    name = named[key] = device_name(kind, index)
            except TypeError:  # (a list: no dict key)
                name = device_name(kind, index)
            names.append(name)
        names = _with_process(names, sh.pids_of(t["utid"][self.rows]))
        self.devices = sorted(set(names), key=_device_key)
        code = {d: k for k, d in enumerate(self.devices)}
        self.dev = np.array([code[d] for d in names], dtype=np.int64)
        self.parent = t["ppos"][self.rows] if n else np.zeros(0, dtype=np.int64)
        # an event's op is the nearest slice around it that is no [memory] event itself: at one timestamp a loader may
        # nest one instant under another
        is_event = np.zeros(len(t["ppos"]), dtype=bool)
        is_event[self.rows] = True
        up = np.flatnonzero(self.parent >= 0)
        up = up[is_event[self.parent[up]]]
        while len(up):
            self.parent[up] = t["ppos"][self.parent[up]]
            up = up[(self.parent[up] >= 0)]
            up = up[is_event[self.parent[up]]]
        self.sh = sh
        self._steps()
        self._levels()
        self._blocks()

    def _steps(self) -> None:
        """``step`` (int64: the step number, exact however large) and ``in_step`` (whether the event is in a step's
        window; ``step`` is 0 where not) per event."""
        st = self.sh.steps_list
        self.step = np.zeros(len(self.ts), dtype=np.int64)
        self.in_step = np.zeros(len(self.ts), dtype=bool)
        if not st or not len(self.ts):
            return
        starts = np.array([r[3] for r in st], dtype=np.int64)
        ends = starts + np.array([r[4] for r in st], dtype=np.int64)
        nums = np.array([int(r[1]) for r in st], dtype=np.int64)
        pid_code: dict = {}
        step_pid = np.array([pid_code.setdefault(x, len(pid_code)) for x in self.sh.pids_of([r[6] for r in st])],
                            dtype=np.int64)
        ev_pid = np.array([pid_code.get(x, -1) for x in self.sh.pids_of(self.sh.slices["utid"][self.rows])],
                          dtype=np.int64)
        # the step of the event's own process whose window holds it (ranks merged into one file each have theirs,
        # and their windows overlap); an event of a process without steps: any process's step whose window holds it
        for p in np.unique(step_pid).tolist():
            mine = np.flatnonzero(step_pid == p)
            ev = np.flatnonzero(ev_pid == p)
            self._hold(ev, starts[mine], ends[mine], nums[mine])
        self._hold(np.flatnonzero(~self.in_step & (ev_pid < 0)), starts, ends, nums)

    def _hold(self, ev: np.ndarray, starts: np.ndarray, ends: np.ndarray, nums: np.ndarray) -> None:
        """Give events ``ev`` the step of these windows (``starts`` sorted) that holds each: the latest to start,
        where windows overlap."""
        if not len(ev) or not len(starts):
            return
        ts = self.ts[ev]
        k = np.searchsorted(starts, ts, side="right") - 1
        reach = np.maximum.accumulate(ends)  # (an earlier, longer window may hold what the latest one does not)
        while len(ev):
            keep = k >= 0
            ev, ts, k = ev[keep], ts[keep], k[keep]
            held = ts < ends[k]
            self.step[ev[held]] = nums[k[held]]
            self.in_step[ev[held]] = True
            on = ~held & (ts < reach[k])  # (still inside an earlier window: try the one before)
            ev, ts, k = ev[on], ts[on], k[on] - 1

    def step_at(self, i: int):
        """Event ``i``'s step number, None outside every step."""
        return int(self.step[i]) if self.in_step[i] else None

    def _levels(self) -> None:
        """``level`` (int64) per event and ``basis`` per device (the *Allocated level* rule); reserved NaN on a device
        whose reserved figures are all 0 (the *Totals* rule)."""
        n = len(self.ts)
        self.level = np.zeros(n, dtype=np.int64)
        self.basis: dict[int, str] = {}
        for d in range(len(self.devices)):
            i = np.flatnonzero(self.dev == d)
            c = np.cumsum(self.bytes[i])
            a = self.alloc[i]
            valid = ~np.isnan(a)
            if valid.any():
                off = np.full(len(i), np.nan)
                off[valid] = a[valid] - c[valid]
                s = pd.Series(off).ffill().bfill().to_numpy()
                self.level[i] = c + s.astype(np.int64)
                if device_of(self.devices[d]) != "cpu":
                    self.basis[d] = "total"
                else:  # (the opening level: what earlier recordings left in torch's count, *The CPU's totals*)
                    self.basis[d] = "since_profiling" if self.level[i[0]] == self.bytes[i[0]] else \
                        "since_earlier_recording"
            else:
                self.level[i] = c
                self.basis[d] = "running_sum"
            r = self.res[i]
            if not (r[~np.isnan(r)] > 0).any():
                self.res[i] = np.nan

    def _blocks(self) -> None:
        """``closed_at`` per allocation (the event that frees it, -1 never in the window; -2 for events that are no
        allocation) and ``before`` (frees of blocks allocated before the window), by the *Blocks* rule."""
        n = len(self.ts)
        self.closed_at = np.full(n, -2, dtype=np.int64)
        self.before = np.zeros(n, dtype=bool)
        self.has_addr = np.zeros(len(self.devices), dtype=bool)
        open_: dict = {}
        for i, (d, b, a) in enumerate(zip(self.dev.tolist(), self.bytes.tolist(), self.addr)):
            if a is None:
                continue
            self.has_addr[d] = True
            key = (d, a)
            if b > 0:
                j = open_.get(key)
                if j is not None:
                    self.closed_at[j] = i
                self.closed_at[i] = -1
                open_[key] = i
            elif b < 0:
                j = open_.pop(key, None)
                if j is None:
                    self.before[i] = True
                else:
                    self.closed_at[j] = i

    # --- helpers ---------------------------------------------------------------------------------------------------
    def op_names(self, rows: np.ndarray) -> np.ndarray:
        """The names of these parent rows (-1: None)."""
        out = np.full(len(rows), None, dtype=object)
        m = rows >= 0
        out[m] = self.sh.names_at(rows[m])
        return out

    def label_codes(self, rows: np.ndarray) -> np.ndarray:
        """The op labels (``ProfilerStep#N`` as ``ProfilerStep*``) of these parent rows as codes into
        :attr:`label_uniq` (-1: no op)."""
        if not hasattr(self, "label_uniq"):
            t = self.sh.slices
            uniq = [row_label(u) for u in t["name_uniq"][:-1]]
            self.label_uniq = list(dict.fromkeys(u for u in uniq if u is not None))
            at = {u: k for k, u in enumerate(self.label_uniq)}
            self._label_of = np.array([at.get(u, -1) if u is not None else -1 for u in uniq] + [-1], dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(len(rows), -1, dtype=np.int64)
        m = rows >= 0
        out[m] = self._label_of[self.sh.slices["name_codes"][rows[m]]]
        return out

    def label(self, code: int):
        return None if code < 0 else self.label_uniq[code]

    def chain(self, row: int) -> str:
        """The names of the slice at ``row`` and its ancestors, outermost first, joined by `` > ``."""
        t, out = self.sh.slices, []
        while row >= 0:
            out.append(str(self.sh.names_at(np.array([row]))[0]))
            row = int(t["ppos"][row])
        return " > ".join(reversed(out))

    def device_rows(self, d: int) -> np.ndarray:
        return np.flatnonzero(self.dev == d)

    def peak(self, d: int) -> tuple[np.ndarray, int, int]:
        """(the device's rows, the position among them of its peak's event or -1 for the window's opening, the level
        the window opened with), by the *Peak* rule."""
        i = self.device_rows(d)
        lv = self.level[i]
        opening = int(lv[0] - self.bytes[i[0]])
        k = int(np.argmax(lv))
        return i, (-1 if opening > lv[k] else k), opening


def device_of(label: str) -> str:
    """The device of a memory device's label, without its process (``"cuda:0"`` of ``"cuda:0 (pid 2)"``)."""
    return label.split(" (", 1)[0]


def _with_process(names: list[str], pids: list) -> list[str]:
    """Each event's device, named with its process where events of several processes share the device (the *Device*
    rule); the names as they are where each device is one process's."""
    procs: dict[str, set] = {}
    for name, pid in zip(names, pids):
        procs.setdefault(name, set()).add(pid)
    return [f"{name} (pid {pid})" if len(procs[name]) > 1 else name for name, pid in zip(names, pids)]


def _device_key(name: str):
    device, _, proc = name.partition(" (pid ")
    kind, _, index = device.partition(":")
    pid = proc.rstrip(")")
    order = {v: k for k, v in DEVICE_TYPES.items()}
    return (order.get(kind, 99), kind, int(index) if index.isdecimal() else -1, device,
            int(pid) if pid.isdecimal() else -1, name)


def _events(session, shared: Shared | None) -> _Events:
    """The trace's memory events, built once per :class:`Shared` and kept in it (they hold the Shared: a cache beside
    it, keyed by it, would keep both alive for the process's life)."""
    return shared_for(session, shared).cached("memory_events", _Events)


def memory_timeline(session, shared: Shared | None = None) -> pd.DataFrame:
    """One row per ``[memory]`` event in (timestamp, slice id) order.

    Returns:
        DataFrame with ``device`` (``"cuda:0"``, ``"cpu"``, ...), ``start_ns``, ``bytes`` (signed: negative for a
        free), ``allocated_bytes`` / ``reserved_bytes`` (the event's totals, NaN where it has none), ``step`` (the
        profiler step, nullable Int64: NA outside every step), ``op`` (the slice the event is nested in, None at the
        top level), ``slice_id``, ``addr`` (None without one) and ``level_bytes`` (the allocated level every other
        frame reads: the module's *Allocated level* rule). Empty (same columns) without memory events.
    """
    ev = _events(session, shared)
    if not len(ev.ts):
        return _empty(_TIMELINE)
    addr = np.empty(len(ev.addr), dtype=object)
    addr[:] = ev.addr
    return pd.DataFrame({
        "device": pd.Series(np.array(ev.devices, dtype=object)[ev.dev], dtype=object),
        "start_ns": ev.ts, "bytes": ev.bytes, "allocated_bytes": ev.alloc, "reserved_bytes": ev.res,
        "step": pd.arrays.IntegerArray(ev.step, ~ev.in_step), "op": pd.Series(ev.op_names(ev.parent), dtype=object),
        "slice_id": np.asarray(ev.sh.slices["id"][ev.rows], dtype=np.int64), "addr": pd.Series(addr, dtype=object),
        "level_bytes": ev.level})


def memory_peaks(session, shared: Shared | None = None) -> pd.DataFrame:
    """One row per device: its peak, where it happened, and the gap between reserved and allocated.

    Returns:
        DataFrame with ``device``, ``peak_allocated_bytes`` (the highest level, the window's opening level included:
        the *Peak* rule), ``peak_reserved_bytes`` (the highest reserved figure, NaN without one), ``peak_ns`` /
        ``step`` / ``op`` of the first event at the peak, ``call_chain`` (the names of its op and the op's ancestors,
        outermost first, `` > ``-joined; "" at the top level), ``first_allocated_bytes`` / ``last_allocated_bytes``
        (the level at the window's start and end), ``basis`` (``total``, ``since_profiling`` or
        ``since_earlier_recording`` for the CPU, ``running_sum``: :data:`RELATIVE_BASES`), ``events``,
        ``alloc_bytes`` / ``freed_bytes`` (what the window
        allocated and freed), and the reserved memory no tensor holds: ``reserved_at_peak_bytes`` (the reserved
        figure at the peak's event), ``gap_at_peak_bytes`` (that less the peak), ``gap_max_bytes`` /
        ``gap_median_bytes`` (reserved less allocated over the device's events; NaN without reserved figures),
        ``has_addresses`` (blocks can be followed), ``at_opening`` (the peak is the level the window opened with:
        then ``step`` NA, ``op`` None, ``call_chain`` "", ``peak_ns`` and ``reserved_at_peak_bytes`` the first
        event's), ``low_after_peak_bytes`` (the lowest level from the peak's event to the window's end: what of the
        peak never came back down). Empty (same columns) without memory events.
    """
    ev = _events(session, shared)
    out = _frame([_peak_row(ev, d) for d in range(len(ev.devices))], _PEAKS)
    out["step"] = out["step"].astype("Int64")
    return out


def _peak_row(ev: _Events, d: int) -> tuple:
    i, k, opening = ev.peak(d)
    lv, b, res = ev.level[i], ev.bytes[i], ev.res[i]
    q = max(k, 0)  # the event the peak takes its time and reserved figure from
    peak = opening if k < 0 else int(lv[k])
    parent = -1 if k < 0 else int(ev.parent[i[k]])
    gap = res - lv
    has_res = bool((~np.isnan(res)).any())
    return (ev.devices[d], peak, float(np.nanmax(res)) if has_res else np.nan, int(ev.ts[i[q]]),
            None if k < 0 else ev.step_at(i[k]), ev.op_names(np.array([parent]))[0], ev.chain(parent), opening,
            int(lv[-1]), ev.basis[d], len(i), int(b[b > 0].sum()), int(-b[b < 0].sum()), float(res[q]),
            float(res[q] - peak), float(np.nanmax(gap)) if has_res else np.nan,
            float(np.nanmedian(gap)) if has_res else np.nan, bool(ev.has_addr[d]), k < 0, int(lv[max(k, 0):].min()))


def live_at_peak(session, device: str | None = None, shared: Shared | None = None) -> pd.DataFrame:
    """What was live at each device's peak (after the peak's event), grouped by the op that allocated it.

    Args:
        device: one device's rows only (``"cuda:0"``); all devices when None.

    Returns:
        DataFrame with ``device``, ``op`` (the allocating op's label; None for blocks from before the window),
        ``origin`` (``window``, or :data:`BEFORE_WINDOW`), ``bytes``, ``blocks``, ``kept_bytes`` (of ``bytes``, the
        blocks never freed in the window: still held when it ended); largest first per device. Blocks
        from before the window come as two rows where they can be known: those freed later in the window (counted
        from their frees: ``blocks`` exact) and, where the trace has totals, the rest of what was allocated when the
        window opened (never freed in it: ``blocks`` NA, unknown; no more than the peak leaves beside the other rows,
        where the totals fell with no free event). With totals the rows of a device add up to its
        ``peak_allocated_bytes`` at most. A device without addresses has no rows (the *Blocks* rule). Empty (same
        columns) when no device qualifies.
    """
    ev = _events(session, shared)
    out = []
    for d, name in enumerate(ev.devices):
        if (device is not None and name != device) or not ev.has_addr[d]:
            continue
        i, k, opening = ev.peak(d)
        p = int(i[k]) if k >= 0 else -1  # the peak's event, as a timeline index (-1: the window's opening)
        level = int(ev.level[p]) if k >= 0 else opening  # (the device's allocated bytes at its peak)
        alloc = i[(i <= p) & (ev.closed_at[i] != -2)]
        alloc = alloc[(ev.closed_at[alloc] == -1) | (ev.closed_at[alloc] > p)]
        g = pd.DataFrame({"op": ev.label_codes(ev.parent[alloc]), "bytes": ev.bytes[alloc],
                          "kept": np.where(ev.closed_at[alloc] == -1, ev.bytes[alloc], 0)})
        for op, x in g.groupby("op", sort=False):
            out.append((name, ev.label(op), "window", int(x["bytes"].sum()), len(x), int(x["kept"].sum())))
        freed_before = i[ev.before[i]]
        later = freed_before[freed_before > p]
        if len(later):
            out.append((name, None, BEFORE_WINDOW, int(-ev.bytes[later].sum()), len(later), 0))
        if ev.basis[d] != "running_sum":  # with totals: the rest of what the window opened with
            rest = opening + int(ev.bytes[freed_before].sum())
            # (no more than the peak leaves beside the rows above: a total that fell with no free event of its own,
            # memory freed where the profiler saw no event, left less of it live)
            rest = min(rest, level - sum(row[3] for row in out if row[0] == name))
            if rest > 0:
                out.append((name, None, BEFORE_WINDOW, rest, None, rest))
    df = _frame(out, _LIVE)
    if df.empty:
        return df
    df["blocks"] = pd.array(df["blocks"].tolist(), dtype="Int64")
    df["bytes"] = df["bytes"].astype("int64")
    df["kept_bytes"] = df["kept_bytes"].astype("int64")
    order = sorted(range(len(df)), key=lambda k: (ev.devices.index(df["device"].iat[k]), -df["bytes"].iat[k]))
    return df.iloc[order].reset_index(drop=True)


def memory_by_op(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per op and device, what it allocated and freed itself, and the net of everything nested under it.

    These are the profiler table's memory columns (torch's ``key_averages()``: ``self_cpu_memory_usage`` is
    ``self_net_bytes`` of the CPU row, ``cpu_memory_usage`` its ``total_net_bytes``; ``self_device_memory_usage`` and
    ``device_memory_usage`` those of the CUDA rows).

    Returns:
        DataFrame with ``op`` (the label: ``ProfilerStep*`` for the steps; None for events at the top level, torch's
        ``[memory]`` row), ``device``, ``self_alloc_bytes`` / ``self_freed_bytes`` (the events nested directly in
        the op: what they allocated, what they freed, both ≥ 0), ``self_net_bytes`` (the difference),
        ``total_net_bytes`` (the net of the events nested anywhere under each of its slices) and ``self_events``;
        sorted by ``total_net_bytes`` then ``self_alloc_bytes``, largest first. Empty (same columns) without memory
        events.
    """
    ev = _events(session, shared)
    if not len(ev.ts):
        return _empty(_BY_OP)
    t = ev.sh.slices
    b = ev.bytes
    direct = pd.DataFrame({"op": ev.label_codes(ev.parent), "dev": ev.dev, "alloc": np.where(b > 0, b, 0),
                           "freed": np.where(b < 0, -b, 0), "n": 1})
    self_ = direct.groupby(["op", "dev"], sort=False)[["alloc", "freed", "n"]].sum()
    # every (ancestor, event) once per level: the op's own events, then its children's, up to the root; an event at
    # the top level counts for itself (op -1), as torch's [memory] row
    anc, which = [np.full(int((ev.parent < 0).sum()), -1, dtype=np.int64)], [np.flatnonzero(ev.parent < 0)]
    cur, idx = ev.parent.copy(), np.arange(len(b))
    live = cur >= 0
    cur, idx = cur[live], idx[live]
    while len(cur):
        anc.append(ev.label_codes(cur))
        which.append(idx)
        cur = t["ppos"][cur]
        m = cur >= 0
        cur, idx = cur[m], idx[m]
    a, w = np.concatenate(anc), np.concatenate(which)
    totals = pd.DataFrame({"op": a, "dev": ev.dev[w], "net": b[w]}).groupby(["op", "dev"], sort=False)["net"].sum()
    totals = totals.to_dict()
    rows = []
    for op, d in dict.fromkeys([*self_.index.tolist(), *totals]):
        s = self_.loc[(op, d)] if (op, d) in self_.index else None
        al, fr, n = (int(s["alloc"]), int(s["freed"]), int(s["n"])) if s is not None else (0, 0, 0)
        rows.append((ev.label(op), ev.devices[d], al, fr, al - fr, int(totals.get((op, d), 0)), n))
    df = _frame(rows, _BY_OP)
    df = df.sort_values(["total_net_bytes", "self_alloc_bytes"], ascending=False, kind="stable")
    return df.reset_index(drop=True)


def unfreed(session, shared: Shared | None = None) -> pd.DataFrame:
    """The blocks allocated in the window and never freed in it, per op and device: leaks across steps, caches that
    grow, and what the last step still held when the profiler stopped.

    Returns:
        DataFrame with ``op`` (the allocating op's label, None at the top level), ``device``, ``bytes``, ``blocks``,
        ``steps`` (the sorted step numbers that allocated them, a list; empty outside steps); largest first. A
        device without addresses has no rows (the *Blocks* rule). Empty (same columns) when nothing qualifies.
    """
    ev = _events(session, shared)
    i = np.flatnonzero(ev.closed_at == -1)
    if not len(i):
        return _empty(_UNFREED)
    g = pd.DataFrame({"op": ev.label_codes(ev.parent[i]), "dev": ev.dev[i], "bytes": ev.bytes[i],
                      "step": ev.step[i], "in_step": ev.in_step[i]})
    rows = []
    for (op, d), x in g.groupby(["op", "dev"], sort=False):
        steps = sorted({int(s) for s, m in zip(x["step"].tolist(), x["in_step"].tolist()) if m})
        rows.append((ev.label(op), ev.devices[d], int(x["bytes"].sum()), len(x), steps))
    df = _frame(rows, _UNFREED).sort_values("bytes", ascending=False, kind="stable")
    return df.reset_index(drop=True)


def memory_churn(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per profiler step and device: what the step allocated and freed, and its levels.

    Returns:
        DataFrame with ``step``, ``device``, ``alloc_bytes``, ``freed_bytes``, ``net_bytes`` (allocated less freed:
        what the step left behind), ``peak_allocated_bytes`` (the highest level in the step, the one it began with
        included),
        ``start_allocated_bytes`` / ``end_allocated_bytes`` (the level before its first event and after its last)
        and ``events``; in step order, devices in order. Events outside every step are in no row. Empty (same
        columns) without events in steps.
    """
    ev = _events(session, shared)
    m = ev.in_step
    if not m.any():
        return _empty(_CHURN)
    rows = []
    idx = np.flatnonzero(m)
    g = pd.DataFrame({"step": ev.step[idx], "dev": ev.dev[idx], "i": idx})
    for (step, d), x in g.groupby(["step", "dev"], sort=True):
        i = x["i"].to_numpy()
        b = ev.bytes[i]
        lv = ev.level[i]
        al, fr = int(b[b > 0].sum()), int(-b[b < 0].sum())
        start = int(lv[0] - b[0])
        rows.append((int(step), ev.devices[d], al, fr, al - fr, max(int(lv.max()), start), start, int(lv[-1]),
                     len(i)))
    return frame(rows, _CHURN)


@dataclass(frozen=True)
class MemoryReport:
    """Every memory analysis of one trace, computed once (the frames as the functions of the same name return
    them), and ``summary``: ``events``, ``skipped_events``, ``devices`` ({device: ``peak_allocated_bytes``,
    ``peak_reserved_bytes``, ``basis``, ``first_allocated_bytes``, ``last_allocated_bytes``, ``gap_at_peak_bytes``,
    ``op``, ``step``, ``events``, ``at_opening``}) and ``note`` (without events :data:`NO_MEMORY_TEXT`, or
    :data:`NOTHING_RECORDED_TEXT` for a run that recorded memory, :data:`~.table.NO_WORK_TEXT` for a trace that
    recorded no work at all; else None)."""

    timeline: pd.DataFrame = field(default_factory=lambda: _empty(_TIMELINE))
    peaks: pd.DataFrame = field(default_factory=lambda: _empty(_PEAKS))
    live_at_peak: pd.DataFrame = field(default_factory=lambda: _empty(_LIVE))
    by_op: pd.DataFrame = field(default_factory=lambda: _empty(_BY_OP))
    unfreed: pd.DataFrame = field(default_factory=lambda: _empty(_UNFREED))
    churn: pd.DataFrame = field(default_factory=lambda: _empty(_CHURN))
    summary: dict[str, Any] = field(default_factory=lambda: {"events": 0, "skipped_events": 0, "devices": {},
                                                             "note": NO_MEMORY_TEXT})

    @property
    def has_events(self) -> bool:
        """True when the trace holds memory events."""
        return not self.timeline.empty


def _summary(ev: _Events, peaks: pd.DataFrame) -> dict[str, Any]:
    def num(x):
        return None if x is None or (isinstance(x, float) and math.isnan(x)) else (int(x) if float(x).is_integer()
                                                                                    else float(x))
    devices = {r["device"]: {"peak_allocated_bytes": int(r["peak_allocated_bytes"]),
                             "peak_reserved_bytes": num(r["peak_reserved_bytes"]), "basis": r["basis"],
                             "first_allocated_bytes": int(r["first_allocated_bytes"]),
                             "last_allocated_bytes": int(r["last_allocated_bytes"]),
                             "gap_at_peak_bytes": num(r["gap_at_peak_bytes"]), "op": r["op"],
                             "step": None if pd.isna(r["step"]) else int(r["step"]), "events": int(r["events"]),
                             "at_opening": bool(r["at_opening"])}
               for r in peaks.to_dict(orient="records")}
    return {"events": len(ev.ts), "skipped_events": ev.skipped, "devices": devices,
            "note": None if len(ev.ts) else NO_MEMORY_TEXT}


def memory_report(session, shared: Shared | None = None, config=None) -> MemoryReport:
    """Every memory analysis of ``session`` once (what ``analyze`` puts in ``Report.memory``); ``config``, the run's
    (when known), tells a run that recorded memory and saw no event (:data:`NOTHING_RECORDED_TEXT`) from a trace
    made without ``profile_memory`` (:data:`NO_MEMORY_TEXT`); so does the trace's own header (:func:`recorded_with`)."""
    sh = shared_for(session, shared)
    ev = _events(session, sh)
    peaks = memory_peaks(session, shared=sh)
    summary = _summary(ev, peaks)
    if not len(ev.ts) and not work_count(sh):  # (nothing recorded at all: no sign of the allocator's work either)
        summary["note"] = NO_WORK_TEXT
    elif not len(ev.ts) and recorded_with("profile_memory", getattr(session, "recorded_with", None), config):
        summary["note"] = NOTHING_RECORDED_TEXT
    return MemoryReport(timeline=memory_timeline(session, shared=sh), peaks=peaks,
                        live_at_peak=live_at_peak(session, shared=sh), by_op=memory_by_op(session, shared=sh),
                        unfreed=unfreed(session, shared=sh), churn=memory_churn(session, shared=sh),
                        summary=summary)
