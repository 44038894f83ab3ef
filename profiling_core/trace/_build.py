"""Decoded events -> trace_processor-shaped rows (processes, threads, tracks, slices, flows).

The rules follow what a real trace_processor (after v58) does with a Chrome JSON trace; see
docs/SQL.md for each rule and for every known difference.
"""
from __future__ import annotations

import zlib
from array import array
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
    # slice columns, in slice id order (int64 arrays; -1 stands for NULL in parent_id and arg_set_id)
    ts: np.ndarray
    dur: np.ndarray
    track_id: np.ndarray
    category: list[Any]
    name: list[Any]
    depth: np.ndarray
    parent_id: np.ndarray
    arg_set_id: np.ndarray
    # flow columns, in flow id order
    flow_out: np.ndarray
    flow_in: np.ndarray
    flow_trace_id: np.ndarray
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
    """A name/category as TP stores it: strings as they are, "" and non-strings as NULL."""
    if type(v) is str:
        return v or None
    return None


def _slice_name(v: Any) -> str:
    """TP names a slice without a (non-empty string) name "[No name]"."""
    return v if type(v) is str and v else "[No name]"


def _flow_id(v: Any) -> int | None:
    """TP's v1 flow id: a number (as uint64), or a string read as hex."""
    if type(v) is int:
        return v & 0xFFFFFFFFFFFFFFFF
    if type(v) is str:
        try:
            return int(v, 16) & 0xFFFFFFFFFFFFFFFF
        except ValueError:
            return None
    return None


class _Collector:
    """First pass over the events in file order: classify, normalise, count."""

    def __init__(self, stats: LoadStats) -> None:
        self.stats = stats
        self.ids = _Ids()
        self.thread_index: dict[tuple, int] = {}    # (pid raw, tid raw) -> thread index
        self.thread_canon: dict[tuple, int] = {}    # (pid num, tid num) -> thread index
        self.thread_keys: list[tuple] = []          # index -> (pid num, tid num, pid raw, tid raw)
        self.proc_names: dict[int, str] = {}
        self.proc_raw: dict[int, Any] = {}
        self.thread_names: dict[int, str] = {}
        self.proc_first: dict[int, tuple] = {}
        # slices, as compact columns (one entry per slice, in file order)
        self.s_ts = array("q")
        self.s_dur = array("q")
        self.s_th = array("q")         # thread index; -1 global instant track; <= -2 process track
        self.s_name: list[Any] = []    # interned strings
        self.s_cat: list[Any] = []
        self.s_args = array("q")       # arg_set_id, -1 for none
        self.s_idx = array("q")
        self.strings: dict[str, str] = {}
        self.args: list[tuple] = []    # (arg_set_id, bytes) of the current batch; drained by the caller
        self.n_args = 0
        # flows: ts, file index, and (ph, key, thread index, bind_enclosing)
        self.f_ts = array("q")
        self.f_idx = array("q")
        self.f_rest: list[tuple] = []
        self._be: dict[int, list] = {}

    def thread(self, pid: Any, tid: Any) -> int | None:
        """Thread index for a (pid, tid) as written in the JSON; None if they are not ids."""
        key = (pid, tid)
        try:
            t = self.thread_index.get(key)
        except TypeError:  # a list or object as pid/tid
            return None
        if t is None:
            p, q = self.ids.num(pid), self.ids.num(tid)
            if p is None or q is None:
                return None
            if p < 0:  # TP reads pid -1 (Kineto's "overhead" events) as 0
                p = 0
            if q == 0:  # TP puts tid 0 on the process's main thread (tid = pid)
                q = p
            t = self.thread_canon.get((p, q))
            if t is None:
                t = self.thread_canon[(p, q)] = len(self.thread_keys)
                self.thread_keys.append((p, q, pid, tid))
            self.thread_index[key] = t
            if self.ids.is_synthetic(pid):
                self.proc_raw.setdefault(p, pid)
            if self.ids.is_synthetic(tid):
                self.thread_names.setdefault(t, tid)
        return t

    def add_args(self, raw: msgspec.Raw) -> int:
        if len(raw) <= 4 and bytes(raw) in _EMPTY_ARGS:
            return -1
        a = self.n_args
        self.n_args += 1
        self.args.append((a, bytes(raw)))
        return a

    def add_slice(self, idx: int, ts: int, dur: int, th: int, e: Event) -> None:
        self.s_ts.append(ts)
        self.s_dur.append(dur)
        self.s_th.append(th)
        # Global/process instants keep a NULL name; thread slices get "[No name]" (as TP does).
        name = _slice_name(e.name) if th >= 0 else _text(e.name)
        self.s_name.append(self.strings.setdefault(name, name) if name else name)
        cat = _text(e.cat)
        self.s_cat.append(self.strings.setdefault(cat, cat) if cat else cat)
        self.s_args.append(self.add_args(e.args))
        self.s_idx.append(idx)

    def finish(self) -> None:
        for stack in self._be.values():
            if stack:
                self.stats.skip("B_without_E", len(stack))
        self._be.clear()
        self.strings.clear()

    def run(self, start: int, events: list[Event]) -> None:
        """Consume one batch; ``start`` is the file index of its first event."""
        skip = self.stats.skip
        thread_index, sd = self.thread_index, self.strings.setdefault
        s_ts, s_dur, s_th, s_idx = self.s_ts.append, self.s_dur.append, self.s_th.append, self.s_idx.append
        s_name, s_cat, s_args, args = self.s_name.append, self.s_cat.append, self.s_args.append, self.args.append
        f_ts, f_idx, f_rest = self.f_ts.append, self.f_idx.append, self.f_rest.append
        # (the caller swaps self.args for a new list after each batch)
        n_args = self.n_args
        empty = _EMPTY_ARGS
        for idx, e in enumerate(events, start):
            ph = e.ph
            if ph == "X":  # noqa: SIM114
                # The hot path, inlined: ~1/2 of a Kineto trace's events are X.
                ts = e.ts
                ts = ts * 1000 if type(ts) is int else to_ns(ts)
                dur = e.dur
                dur = dur * 1000 if type(dur) is int else to_ns(dur)
                if ts is None or dur is None:
                    skip("X_missing_or_bad_ts" if ts is None else "X_missing_or_bad_dur")
                    continue
                if dur < 0:
                    skip("X_negative_dur")
                    continue
                if not (-_TS_LIMIT < ts < _TS_LIMIT and dur < _TS_LIMIT):
                    skip("ts_out_of_range")
                    continue
                try:
                    th = thread_index.get((e.pid, e.tid))
                except TypeError:
                    th = None
                if th is None:
                    th = self.thread(e.pid, e.tid)
                    if th is None:
                        skip("bad_pid_or_tid")
                        continue
                name = e.name
                s_name(sd(name, name) if type(name) is str and name else "[No name]")
                cat = e.cat
                s_cat(sd(cat, cat) if type(cat) is str and cat else None)
                raw = e.args
                if len(raw) > 4 or bytes(raw) not in empty:
                    s_args(n_args)
                    args((n_args, raw))  # a zero-copy slice of the JSON, held only until the args writer takes it
                    n_args += 1
                else:
                    s_args(-1)
                s_ts(ts)
                s_dur(dur)
                s_th(th)
                s_idx(idx)
                continue
            if ph == "f" or ph == "s" or ph == "t":
                # Flow events (~1/3 of a Kineto trace), inlined: exactly what self.flow() does.
                ts = e.ts
                ts = ts * 1000 if type(ts) is int else to_ns(ts)
                if ts is None or not -_TS_LIMIT < ts < _TS_LIMIT:
                    skip("flow_missing_or_bad_ts")
                    continue
                fid = e.id
                fid = fid & 0xFFFFFFFFFFFFFFFF if type(fid) is int else _flow_id(fid)
                if fid is None:
                    skip("flow_invalid_id")
                    continue
                try:
                    th = thread_index.get((e.pid, e.tid))
                except TypeError:
                    th = None
                if th is None:
                    th = self.thread(e.pid, e.tid)
                    if th is None:
                        skip("bad_pid_or_tid")
                        continue
                cat = e.cat
                cat = sd(cat, cat) if type(cat) is str and cat else None
                name = e.name
                name = sd(name, name) if type(name) is str and name else None
                f_ts(ts)
                f_idx(idx)
                f_rest((ph, (fid, cat, name), th, e.bp == "e"))
                continue
            self.n_args = n_args  # the slow paths below use add_slice/add_args
            if ph == "i" or ph == "I" or ph == "R":
                self.instant(idx, e)
            elif ph == "M":
                self.metadata(e)
            elif ph == "B" or ph == "E":
                self.begin_end(idx, e)
            elif ph is None or type(ph) is not str:
                skip("missing_or_bad_ph")
            else:
                skip(f"unsupported_phase:{ph[:8]}")
            n_args = self.n_args
        self.n_args = n_args

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
        elif e.s is None or e.s == "t":
            self.add_slice(idx, ts, 0, th, e)
        else:
            self.stats.skip("i_bad_scope")

    def flow(self, idx: int, e: Event) -> None:
        ts = to_ns(e.ts)
        if ts is None or not -_TS_LIMIT < ts < _TS_LIMIT:
            self.stats.skip("flow_missing_or_bad_ts")
            return
        fid = _flow_id(e.id)
        if fid is None:
            self.stats.skip("flow_invalid_id")
            return
        th = self.thread(e.pid, e.tid)
        if th is None:
            self.stats.skip("bad_pid_or_tid")
            return
        cat, name = _text(e.cat), _text(e.name)
        if cat:
            cat = self.strings.setdefault(cat, cat)
        if name:
            name = self.strings.setdefault(name, name)
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


def _np(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, dtype=np.int64)


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
        s_ts, s_dur = _np(c.s_ts), _np(c.s_dur)
        ts = np.concatenate([s_ts, _np(c.f_ts)])
        negdur = np.concatenate([-s_dur, np.zeros(nf, dtype=np.int64)])
        kind = np.concatenate([np.zeros(ns, dtype=np.int8), np.ones(nf, dtype=np.int8)])
        idx = np.concatenate([_np(c.s_idx), _np(c.f_idx)])
        order = np.lexsort((idx, negdur, kind, ts))
        del ts, negdur, kind, idx
        o_k = order[order < ns]          # slice indexes in slice id order
        o_ts, o_dur = s_ts[o_k], s_dur[o_k]
        # Per position of the merged order: k (>= ns: a flow event), and for slices ts, end, thread.
        # (Lists of plain ints: the loop below touches only those.)
        pad = np.zeros(nf, dtype=np.int64)
        ordl = order.tolist()
        starts = np.concatenate([s_ts, pad])[order].tolist()
        ends = np.concatenate([s_ts + s_dur, pad])[order].tolist()
        ths = np.concatenate([_np(c.s_th), pad])[order].tolist()
        del order, pad
        o_track, o_depth, o_parent = [], [], []
        add_track, add_depth, add_parent = o_track.append, o_depth.append, o_parent.append
        lanes_of, pending, stats = self.lanes_of, self.pending, c.stats
        lane_tracks: dict[int, list] = {}  # thread -> track id of each of its lanes
        other_tracks: dict[int, int] = {}  # -1 (global) or <= -2 (process) -> track id
        track, flow_event = self.track, self.flow_event
        f_rest, open_flows, trace_ids, flows = c.f_rest, self.open_flows, self.trace_ids, self.flows
        skip = stats.skip
        sid = 0
        for k, s, e, t in zip(ordl, starts, ends, ths):
            if k >= ns:
                # A flow event: what flow_event() does, inlined for its common cases.
                ph, key, ft, enclosing = f_rest[k - ns]
                if ph == "s" or enclosing:
                    lanes = lanes_of.get(ft)
                    if lanes is not None and len(lanes) == 1:
                        st = lanes[0]
                        if not st:
                            skip("flow_no_enclosing_slice")
                            continue
                        fsid = st[-1][1]
                        if ph == "s":
                            if key in open_flows:
                                skip("flow_duplicate_id")
                            else:
                                open_flows[key] = fsid
                                trace_ids.setdefault(key, len(trace_ids))
                            continue
                        out = open_flows.get(key)
                        if out is None:
                            skip("flow_end_without_start")
                            continue
                        flows.append((out, fsid, trace_ids[key]))
                        if ph == "t":
                            open_flows[key] = fsid
                        continue
                flow_event(k - ns)
                continue
            if t >= 0:
                lanes = lanes_of.get(t)
                if lanes is None:
                    lanes = lanes_of[t] = [[]]
                    lane_tracks[t] = []
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
                lt = lane_tracks[t]
                if li < len(lt):
                    add_track(lt[li])
                else:
                    tr = track(("thread", t, li), "thread_execution")
                    lt.append(tr)
                    add_track(tr)
                if st:
                    add_depth(len(st))
                    add_parent(st[-1][1])
                else:
                    add_depth(0)
                    add_parent(-1)
                st.append((e, sid, s))
                if pending and t in pending:
                    self.bind_pending(t, sid)
            else:
                tr = other_tracks.get(t)
                if tr is None:
                    if t == -1:
                        tr = track(("global",), "legacy_chrome_global_instants")
                    else:
                        tr = track(("process", -2 - t), "legacy_chrome_process_instants")
                    other_tracks[t] = tr
                add_track(tr)
                add_depth(0)
                add_parent(-1)
            sid += 1
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


def build(collector: _Collector) -> Model:
    """Turn the collected events into the rows of the mirror's tables (args were drained already)."""
    c = collector
    stats = c.stats
    c.finish()
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
    s_name, s_cat = c.s_name, c.s_cat
    stats.slices = len(o_ts)
    stats.flows = len(n.flows)
    ok = o_k.tolist()
    fl = np.array(n.flows, dtype=np.int64).reshape(-1, 3)
    return Model(
        processes=processes, threads=threads, tracks=tracks,
        ts=o_ts, dur=o_dur, track_id=np.array(o_track, dtype=np.int64),
        category=[s_cat[k] for k in ok], name=[s_name[k] for k in ok],
        depth=np.array(o_depth, dtype=np.int64), parent_id=np.array(o_parent, dtype=np.int64),
        arg_set_id=_np(c.s_args)[o_k],
        flow_out=fl[:, 0].copy(), flow_in=fl[:, 1].copy(), flow_trace_id=fl[:, 2].copy(),
        stats=stats)


def new_collector(stats: LoadStats) -> _Collector:
    return _Collector(stats)


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
