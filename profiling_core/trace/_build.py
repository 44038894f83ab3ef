"""Decoded events -> trace_processor-shaped rows (processes, threads, tracks, slices, flows).

The rules follow what a real trace_processor (after v58) does with a Chrome JSON trace; see
docs/SQL.md for each rule and for every known difference.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from ._decode import Event, to_ns

_TS_LIMIT = 1 << 62  # ns; anything larger cannot be a real timestamp (and would overflow sums)
_EMPTY_ARGS = (b"", b"{}", b"null")

# What a row of each table holds (order = column order in _schema.py).
ProcessRow = tuple  # (upid, pid, name, is_synthetic)
ThreadRow = tuple   # (utid, tid, name, upid, is_main_thread)
TrackRow = tuple    # (id, name, type, utid or None, upid or None)


@dataclass
class LoadStats:
    """What the loader read and what it left out (and why)."""

    events: int = 0
    slices: int = 0
    flows: int = 0
    spill_tracks: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


@dataclass
class Model:
    processes: list[ProcessRow]
    threads: list[ThreadRow]
    tracks: list[TrackRow]
    # slice columns, in slice id order
    ts: list[int]
    dur: list[int]
    track_id: list[int]
    category: list[Any]
    name: list[Any]
    depth: list[int]
    parent_id: list[Any]
    arg_set_id: list[Any]
    flows: list[tuple]          # (id, slice_out, slice_in, trace_id)
    args: list[tuple]           # (arg_set_id, raw JSON bytes-like)
    stats: LoadStats


class _Ids:
    """pid/tid values -> numbers; string ids get a stable synthetic number (see docs/SQL.md)."""

    def __init__(self) -> None:
        self._syn: dict[str, int] = {}
        self._used: set[int] = set()

    def num(self, v: Any) -> int | None:
        t = type(v)
        if t is int:
            return v if -(1 << 62) < v < (1 << 62) else None
        if v is None:
            return 0
        if t is str:
            n = self._syn.get(v)
            if n is None:
                n = (1 << 30) | (zlib.crc32(v.encode("utf-8", "surrogatepass")) & ((1 << 30) - 1))
                while n in self._used:
                    n += 1
                self._used.add(n)
                self._syn[v] = n
            return n
        return None

    def is_synthetic(self, v: Any) -> bool:
        return type(v) is str


def _text(v: Any) -> Any:
    if v is None or type(v) is str:
        return v
    return msgspec.json.encode(v).decode() if not isinstance(v, msgspec.Raw) else None


class _Collector:
    """First pass over the events in file order: classify, normalise, count."""

    def __init__(self, stats: LoadStats) -> None:
        self.stats = stats
        self.ids = _Ids()
        self.thread_index: dict[tuple, int] = {}    # (pid raw, tid raw) -> thread index
        self.thread_keys: list[tuple] = []          # index -> (pid num, tid num, pid raw, tid raw)
        self.proc_names: dict[int, str] = {}
        self.proc_raw: dict[int, Any] = {}
        self.thread_names: dict[int, str] = {}
        self.proc_first: dict[int, tuple] = {}
        # slices
        self.s_ts: list[int] = []
        self.s_dur: list[int] = []
        self.s_th: list[int] = []      # thread index; -1 global instant track; <= -2 process track
        self.s_name: list[Any] = []
        self.s_cat: list[Any] = []
        self.s_args: list[Any] = []    # arg_set_id or None
        self.s_idx: list[int] = []
        self.args: list[tuple] = []
        # flows: (ts, idx, ph, key, thread index, bind_enclosing)
        self.f_ts: list[int] = []
        self.f_idx: list[int] = []
        self.f_rest: list[tuple] = []
        self._be: dict[int, list] = {}

    def thread(self, pid: Any, tid: Any) -> int | None:
        key = (pid, tid)
        try:
            t = self.thread_index.get(key)
        except TypeError:
            return None
        if t is None:
            p, q = self.ids.num(pid), self.ids.num(tid)
            if p is None or q is None:
                return None
            t = len(self.thread_keys)
            self.thread_index[key] = t
            self.thread_keys.append((p, q, pid, tid))
            if self.ids.is_synthetic(pid):
                self.proc_raw.setdefault(p, pid)
            if self.ids.is_synthetic(tid):
                self.thread_names.setdefault(t, tid)
        return t

    def add_args(self, raw: msgspec.Raw) -> Any:
        if len(raw) <= 4 and bytes(raw) in _EMPTY_ARGS:
            return None
        a = len(self.args)
        self.args.append((a, memoryview(raw)))
        return a

    def add_slice(self, idx: int, ts: int, dur: int, th: int, e: Event) -> None:
        self.s_ts.append(ts)
        self.s_dur.append(dur)
        self.s_th.append(th)
        self.s_name.append(_text(e.name))
        self.s_cat.append(_text(e.cat))
        self.s_args.append(self.add_args(e.args))
        self.s_idx.append(idx)

    def run(self, events: list[Event]) -> None:
        skip = self.stats.skip
        for idx, e in enumerate(events):
            ph = e.ph
            if ph == "X":
                ts = to_ns(e.ts)
                if ts is None:
                    skip("X_missing_or_bad_ts")
                    continue
                dur = to_ns(e.dur)
                if dur is None:
                    skip("X_missing_or_bad_dur")
                    continue
                if dur < 0:
                    skip("X_negative_dur")
                    continue
                if not (-_TS_LIMIT < ts < _TS_LIMIT and dur < _TS_LIMIT):
                    skip("ts_out_of_range")
                    continue
                th = self.thread(e.pid, e.tid)
                if th is None:
                    skip("bad_pid_or_tid")
                    continue
                self.add_slice(idx, ts, dur, th, e)
            elif ph in ("s", "f", "t"):
                self.flow(idx, e)
            elif ph == "i" or ph == "I":
                self.instant(idx, e)
            elif ph == "M":
                self.metadata(e)
            elif ph == "B" or ph == "E":
                self.begin_end(idx, e)
            else:
                skip(f"unsupported_phase:{ph}" if type(ph) is str and len(ph) <= 3 else "bad_phase")
        for stack in self._be.values():
            if stack:
                skip("B_without_E", len(stack))

    def instant(self, idx: int, e: Event) -> None:
        ts = to_ns(e.ts)
        if ts is None or not -_TS_LIMIT < ts < _TS_LIMIT:
            self.stats.skip("i_missing_or_bad_ts")
            return
        th = self.thread(e.pid, e.tid)
        if th is None:
            self.stats.skip("bad_pid_or_tid")
            return
        if e.s == "g":
            self.add_slice(idx, ts, 0, -1, e)
        elif e.s == "p":
            self.add_slice(idx, ts, 0, -2 - self.thread_keys[th][0], e)
        else:
            self.add_slice(idx, ts, 0, th, e)

    def flow(self, idx: int, e: Event) -> None:
        ts = to_ns(e.ts)
        if ts is None or not -_TS_LIMIT < ts < _TS_LIMIT:
            self.stats.skip("flow_missing_or_bad_ts")
            return
        fid = e.id
        if type(fid) not in (int, str):
            self.stats.skip("flow_without_id")
            return
        th = self.thread(e.pid, e.tid)
        if th is None:
            self.stats.skip("bad_pid_or_tid")
            return
        cat, name = _text(e.cat), _text(e.name)
        self.f_ts.append(ts)
        self.f_idx.append(idx)
        self.f_rest.append((e.ph, (fid, cat, name), th, e.bp == "e"))

    def metadata(self, e: Event) -> None:
        if e.name not in ("process_name", "thread_name"):
            return
        try:
            value = msgspec.json.decode(e.args).get("name") if len(e.args) else None
        except (msgspec.DecodeError, AttributeError, RecursionError):
            value = None
        if type(value) is not str:
            self.stats.skip("M_without_name")
            return
        if e.name == "process_name":
            p = self.ids.num(e.pid)
            if p is not None:
                self.proc_names[p] = value
                self.thread(e.pid, e.pid)  # TP creates each process's main thread
        else:
            t = self.thread(e.pid, e.tid)
            if t is not None:
                self.thread_names[t] = value

    def begin_end(self, idx: int, e: Event) -> None:
        ts = to_ns(e.ts)
        th = self.thread(e.pid, e.tid)
        if ts is None or th is None or not -_TS_LIMIT < ts < _TS_LIMIT:
            self.stats.skip(f"{e.ph}_missing_or_bad_ts")
            return
        stack = self._be.setdefault(th, [])
        if e.ph == "B":
            stack.append((idx, ts, e))
            return
        if not stack:
            self.stats.skip("E_without_B")
            return
        bidx, bts, b = stack.pop()
        if ts < bts:
            self.stats.skip("E_before_B")
            return
        self.add_slice(bidx, bts, ts - bts, th, b)


class _Nester:
    """Second pass, in (ts, slices before flows, longer first, file order): ids, depth, tracks, flows."""

    def __init__(self, c: _Collector) -> None:
        self.c = c
        self.lanes_of: dict[int, list[list]] = {}
        self.track_ids: dict[tuple, int] = {}
        self.tracks: list[tuple] = []      # (key, type)
        self.open_flows: dict[tuple, int] = {}
        self.pending: dict[int, list] = {}
        self.flows: list[tuple] = []       # (slice_out, slice_in, trace_id)
        self.trace_ids: dict[tuple, int] = {}

    def track(self, key: tuple, kind: str) -> int:
        tid = self.track_ids.get(key)
        if tid is None:
            tid = self.track_ids[key] = len(self.tracks)
            self.tracks.append((key, kind))
        return tid

    def top(self, t: int) -> int | None:
        """The slice a flow event on thread t binds to: the most recently begun open slice."""
        lanes = self.lanes_of.get(t)
        if not lanes:
            return None
        best = None
        for st in lanes:
            if st and (best is None or st[-1][2] >= best[2]):
                best = st[-1]
        return None if best is None else best[1]

    def run(self):
        c = self.c
        ns, nf = len(c.s_ts), len(c.f_ts)
        ts = np.array(c.s_ts + c.f_ts, dtype=np.int64)
        negdur = np.concatenate([-np.array(c.s_dur, dtype=np.int64), np.zeros(nf, dtype=np.int64)])
        kind = np.concatenate([np.zeros(ns, dtype=np.int8), np.ones(nf, dtype=np.int8)])
        idx = np.array(c.s_idx + c.f_idx, dtype=np.int64)
        order = np.lexsort((idx, negdur, kind, ts)).tolist()
        del ts, negdur, kind, idx
        s_ts, s_dur, s_th = c.s_ts, c.s_dur, c.s_th
        o_ts, o_dur, o_track, o_depth, o_parent, o_k = [], [], [], [], [], []
        lanes_of, pending, stats = self.lanes_of, self.pending, c.stats
        for k in order:
            if k >= ns:
                self.flow_event(k - ns)
                continue
            sid = len(o_ts)
            s = s_ts[k]
            d = s_dur[k]
            t = s_th[k]
            depth, parent = 0, None
            if t >= 0:
                e = s + d
                lanes = lanes_of.get(t)
                if lanes is None:
                    lanes = lanes_of[t] = [[]]
                li = 0
                for st in lanes:
                    while st and st[-1][0] <= s:
                        st.pop()
                    if not st or e <= st[-1][0]:
                        break
                    li += 1
                else:
                    st = []
                    lanes.append(st)
                    stats.spill_tracks += 1
                track = self.track(("thread", t, li), "thread_execution")
                depth = len(st)
                if st:
                    parent = st[-1][1]
                st.append((e, sid, s))
                if t in pending:
                    self.bind_pending(t, sid)
            elif t == -1:
                track = self.track(("global",), "legacy_chrome_global_instants")
            else:
                track = self.track(("process", -2 - t), "legacy_chrome_process_instants")
            o_ts.append(s)
            o_dur.append(d)
            o_track.append(track)
            o_depth.append(depth)
            o_parent.append(parent)
            o_k.append(k)
        for keys in pending.values():
            stats.skip("flow_end_without_next_slice", len(keys))
        return o_ts, o_dur, o_track, o_depth, o_parent, o_k

    def bind_pending(self, t: int, sid: int) -> None:
        for key in self.pending.pop(t):
            out = self.open_flows.get(key)
            if out is None:
                self.c.stats.skip("flow_end_without_start")
            else:
                self.flows.append((out, sid, self.trace_ids[key]))

    def flow_event(self, j: int) -> None:
        ph, key, t, enclosing = self.c.f_rest[j]
        skip = self.c.stats.skip
        if ph == "f" and not enclosing:
            self.pending.setdefault(t, []).append(key)
            return
        sid = self.top(t)
        if sid is None:
            skip("flow_no_enclosing_slice")
            return
        if ph == "s":
            if key in self.open_flows:
                skip("flow_duplicate_id")
            else:
                self.open_flows[key] = sid
                self.trace_ids.setdefault(key, len(self.trace_ids))
            return
        out = self.open_flows.get(key)
        if out is None:
            skip("flow_end_without_start")
            return
        self.flows.append((out, sid, self.trace_ids[key]))
        if ph == "t":
            self.open_flows[key] = sid


def build(events: list[Event], stats: LoadStats) -> Model:
    """Turn decoded events into the rows of the mirror's tables."""
    stats.events = len(events)
    c = _Collector(stats)
    c.run(events)
    n = _Nester(c)
    o_ts, o_dur, o_track, o_depth, o_parent, o_k = n.run()
    processes, threads, utid_of, upid_of = _processes_and_threads(c)
    tracks = []
    for tid, (key, kind) in enumerate(n.tracks):
        if key[0] == "thread":
            tracks.append((tid, None, kind, utid_of[key[1]], None))
        elif key[0] == "process":
            tracks.append((tid, None, kind, None, upid_of.get(key[1])))
        else:
            tracks.append((tid, None, kind, None, None))
    s_name, s_cat, s_args = c.s_name, c.s_cat, c.s_args
    stats.slices = len(o_ts)
    stats.flows = len(n.flows)
    return Model(
        processes=processes, threads=threads, tracks=tracks,
        ts=o_ts, dur=o_dur, track_id=o_track,
        category=[s_cat[k] for k in o_k], name=[s_name[k] for k in o_k],
        depth=o_depth, parent_id=o_parent, arg_set_id=[s_args[k] for k in o_k],
        flows=[(i, a, b, tr) for i, (a, b, tr) in enumerate(n.flows)],
        args=c.args, stats=stats)


def _processes_and_threads(c: _Collector):
    """upid/utid 0 are trace_processor's placeholders (pid 0 / tid 0, no name); then in first-seen order."""
    processes = [(0, 0, None, 0)]
    threads = [(0, 0, None, 0, 1)]
    upid_of: dict[int, int] = {}
    utid_of: dict[int, int] = {}
    main_of: dict[int, int] = {}  # pid -> thread index of its main thread
    for t, (p, q, _praw, _traw) in enumerate(c.thread_keys):
        if q == p and p not in main_of:
            main_of[p] = t
    for t, (p, q, praw, _traw) in enumerate(c.thread_keys):
        if p not in upid_of:
            upid = upid_of[p] = len(processes)
            name = c.proc_names.get(p, c.proc_raw.get(p))
            processes.append((upid, p, name, int(type(praw) is str)))
            m = main_of.get(p)
            if m is None:  # TP gives every process a main thread (tid = pid)
                threads.append((len(threads), p, None, upid, 1))
            elif m != t:
                utid_of[m] = len(threads)
                threads.append((len(threads), p, c.thread_names.get(m), upid, 1))
        if t not in utid_of:
            utid_of[t] = len(threads)
            threads.append((len(threads), q, c.thread_names.get(t), upid_of[p], int(q == p)))
    return processes, threads, utid_of, upid_of
