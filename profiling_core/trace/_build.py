"""Decoded events -> trace_processor-shaped rows (processes, threads, tracks, slices, flows).

The rules follow what a real trace_processor (after v58) does with a Chrome JSON trace; see
docs/SQL.md for each rule and for every known difference.

Both passes have a fast path that works on columns (numpy arrays, lists) and a per-event / per-slice path that
states the rules one event at a time: ``_Collector._run_fast`` / ``_run_events`` and ``_Nester.run_fast`` /
``run_loop``. A fast path only takes what it can prove it handles exactly as the other path does and hands the rest
to it; ``_FAST_COLLECT`` / ``_FAST_NEST`` False turn them off (tests/test_trace_loader_columnar.py compares both).
"""
from __future__ import annotations

import zlib
from array import array
from dataclasses import dataclass, field
from itertools import compress, count, islice, repeat
from operator import itemgetter
from typing import Any

import msgspec
import numpy as np

from ._decode import Event, ns_of_decimals, to_ns
from ._tables import TextColumn

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
    category: TextColumn
    name: TextColumn
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


_FAST_COLLECT = True  # False: every event goes through _Collector._run_events (tests compare both paths)
_FAST_NEST = True     # False: _Nester.run_loop nests every slice (tests compare both paths)
_MIN_RUN = 64         # shortest run of X / flow events that _Collector._run_fast takes
_FAST_CHUNK = 2048    # events per _Collector._run_fast call (they stay in the CPU cache across its passes)
_S, _T, _F, _WAIT = 0, 1, 2, 3  # flow event kinds (_WAIT, in _Nester.bind_flows: an 'f' without bp=e)
_FLOW_KIND = {"s": _S, "t": _T, "f": _F}
_FLOW_PH = "stf"                 # kind -> ph
_FAST_PH = {"X": 1, "s": 2, "t": 3, "f": 4}  # a flow's code - 2 is its kind (_S, _T, _F)
_INT, _STR, _INT_STR, _INT_BOOL = {int}, {str}, {int, str}, {int, bool}
_U64 = 0xFFFFFFFFFFFFFFFF
_U32 = 1 << 32
_US_MAX = (_TS_LIMIT - 1) // 1000  # largest int µs whose ns value is below _TS_LIMIT


def _take(seq: list, idx: np.ndarray):
    """seq[i] for each i of idx (not empty), as a sequence."""
    if len(idx) == 1:
        return [seq[int(idx[0])]]
    return itemgetter(*idx.tolist())(seq)


def _flow_ids(ids: list) -> np.ndarray | None:
    """_flow_id of each id, as uint64; None if one of them is not a flow id."""
    if set(map(type, ids)) == _INT:
        try:
            a = np.array(ids, dtype=np.int64)
        except OverflowError:  # ids of 2**63 and more
            a = None
        if a is not None and a.min() >= 0:
            return a.view(np.uint64)
    out = [v & _U64 if type(v) is int else _flow_id(v) for v in ids]
    if None in out:
        return None
    return np.array(out, dtype=np.uint64)


def _id_ok(v: Any) -> bool:
    """Whether _Ids.num gives a number for v."""
    t = type(v)
    return (t is int and -(1 << 62) < v < (1 << 62)) or v is None or t is str


def _ns_column(values: list, signed: bool) -> np.ndarray | None:
    """JSON µs values -> int64 ns (as to_ns gives them), or None if one of them is not a number or is out of range
    (a timestamp outside (-_TS_LIMIT, _TS_LIMIT); with ``signed`` False, a duration outside [0, _TS_LIMIT))."""
    types = set(map(type, values))
    if types == _INT:
        try:
            a = np.array(values, dtype=np.int64)
        except OverflowError:
            return None
        if a.max() > _US_MAX or a.min() < (-_US_MAX if signed else 0):
            return None
        return a * 1000
    if not types <= _INT_STR:
        return None
    a = ns_of_decimals(values) if types == _STR else None  # (most newer Kineto traces)
    if a is None:
        ns = [v * 1000 if type(v) is int else to_ns(v) for v in values]
        if None in ns:
            return None
        lo, hi = min(ns), max(ns)
        if hi >= _TS_LIMIT or lo <= (-_TS_LIMIT if signed else -1):
            return None
        return np.array(ns, dtype=np.int64)
    if a.max() >= _TS_LIMIT or a.min() <= (-_TS_LIMIT if signed else -1):
        return None
    return a


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
        self.f_kind = array("b")       # _S, _T, _F
        self.f_enc = array("b")        # bp == "e" (binds to the enclosing slice)
        self.f_th = array("q")         # thread index
        self.f_id = array("Q")         # flow id; with f_text, the flow's key (id, cat, name)
        self.f_text = array("q")       # a number per distinct (cat, name)
        self.flow_texts: dict[tuple, int] = {}
        self.n_texts = 0               # numbers handed out (a pair's number: the first free one when first seen)
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
            # trace_processor takes a pid/tid only as an unsigned 32-bit number: an integer pid outside that range
            # (-1: Kineto's "overhead" events) is 0, such a tid (Kineto's negative GPU lane tids) is the pid, and so
            # is tid 0 (the process's main thread)
            if type(pid) is int and not 0 <= p < _U32:
                p = 0
            if (type(tid) is int and not 0 <= q < _U32) or q == 0:
                q = p
            t = self.thread_canon.get((p, q))
            if t is None:
                t = self.thread_canon[(p, q)] = len(self.thread_keys)
                self.thread_keys.append((p, q, pid, tid))
            self.thread_index[key] = t
            if self.ids.is_synthetic(pid):
                self.proc_raw.setdefault(p, pid)
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
        """Consume one batch; ``start`` is the file index of its first event.

        Runs of at least ``_MIN_RUN`` consecutive X / flow (s, t, f) events go through :meth:`_run_fast`, which
        handles a whole run at once with columns; every other event, and any run the fast path cannot prove it
        handles exactly as :meth:`_run_events` would, goes through :meth:`_run_events` (the per-event rules).
        Both append to the same columns in file order, so the result does not depend on which path ran.
        """
        n = len(events)
        if not _FAST_COLLECT or n < _MIN_RUN:
            self._run_events(start, events, 0, n)
            return
        try:
            code = np.fromiter(map(_FAST_PH.get, [e.ph for e in events], repeat(0)), dtype=np.int8, count=n)
        except TypeError:  # an unhashable ph (a list or an object)
            self._run_events(start, events, 0, n)
            return
        edges = np.diff(np.concatenate(([0], (code > 0).view(np.int8), [0])))  # +1: a run starts, -1: it ends
        pos = 0
        for a, b in zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()):
            if b - a < _MIN_RUN:
                continue
            if pos < a:
                self._run_events(start, events, pos, a)
            for c in range(a, b, _FAST_CHUNK):  # a piece at a time: its events stay in the CPU's cache
                d = min(b, c + _FAST_CHUNK)
                if not self._run_fast(start + c, events[c:d], code[c:d]):
                    self._run_events(start, events, c, d)
            pos = b
        if pos < n:
            self._run_events(start, events, pos, n)

    def _run_fast(self, base: int, evs: list[Event], code: np.ndarray) -> bool:
        """Consume ``evs`` (X and flow events only; ``base`` is the file index of evs[0]) column by column.

        Exactly what :meth:`_run_events` does for these events, for the common case only: every timestamp (and
        X duration) an int, or a number as text, that converts to an in-range ns value; every X duration >= 0;
        every flow id usable; every (pid, tid) usable as ids. Anything else (an event that would be skipped, or a
        thread that cannot be made) returns False before anything was changed, and the caller runs the per-event
        path on the same events. New threads are made in file order, as the per-event path makes them.
        """
        xi = np.flatnonzero(code == 1)
        fi = np.flatnonzero(code >= 2)
        nx, nf = len(xi), len(fi)
        xev = evs if not nf else _take(evs, xi) if nx else []
        fev = evs if not nx else _take(evs, fi) if nf else []
        # 1. check (nothing is changed until every event is known to be kept)
        if nx:
            x_ts = _ns_column([e.ts for e in xev], True)
            x_dur = _ns_column([e.dur for e in xev], False) if x_ts is not None else None
            if x_dur is None:
                return False
        if nf:
            f_ts = _ns_column([e.ts for e in fev], True)
            if f_ts is None:
                return False
            fids = _flow_ids([e.id for e in fev])
            if fids is None:
                return False
        th = self._threads([e.pid for e in evs], [e.tid for e in evs])
        if th is None:
            return False
        # 2. append
        if nx:
            raws = [e.args for e in xev]
            has = np.fromiter(map(len, raws), np.int64, nx) > 4
            for i in np.flatnonzero(~has).tolist():
                has[i] = bytes(raws[i]) not in _EMPTY_ARGS
            n_args = self.n_args
            m = int(np.count_nonzero(has))
            if m == nx:
                self.args.extend(zip(range(n_args, n_args + m), raws))
                aid = np.arange(n_args, n_args + m, dtype=np.int64)
            else:
                self.args.extend(zip(range(n_args, n_args + m), compress(raws, has.tolist())))
                aid = np.where(has, np.cumsum(has) + (n_args - 1), -1)
            self.n_args = n_args + m
            self.s_ts.frombytes(x_ts.tobytes())
            self.s_dur.frombytes(x_dur.tobytes())
            self.s_th.frombytes((th if not nf else th[xi]).tobytes())
            self.s_name.extend(self._intern([e.name for e in xev], "[No name]"))
            self.s_cat.extend(self._intern([e.cat for e in xev], None))
            self.s_args.frombytes(aid.astype(np.int64).tobytes())
            self.s_idx.frombytes((xi + base).astype(np.int64).tobytes())
        if nf:
            self.f_ts.frombytes(f_ts.tobytes())
            self.f_idx.frombytes((fi + base).astype(np.int64).tobytes())
            self.f_kind.frombytes((code[fi] - 2).astype(np.int8).tobytes())
            self.f_enc.frombytes(np.array([e.bp == "e" for e in fev], dtype=np.int8).tobytes())
            self.f_th.frombytes((th if not nx else th[fi]).tobytes())
            self.f_id.frombytes(fids.tobytes())
            texts = zip(self._intern([e.cat for e in fev], None), self._intern([e.name for e in fev], None))
            self.f_text.frombytes(np.fromiter(map(self.flow_texts.setdefault, texts, count(self.n_texts)), np.int64,
                                              nf).tobytes())
            self.n_texts += nf
        return True

    def _threads(self, pids: list, tids: list) -> np.ndarray | None:
        """The thread index of each (pid, tid), found or made (in order) as the per-event path does; None (and
        nothing made) if one of them cannot be a thread.

        Integer ids: one lookup per run of equal (pid, tid) (equal numbers are equal keys of ``thread_index``)."""
        get = self.thread_index.get
        if set(map(type, pids)) <= _INT_BOOL and set(map(type, tids)) <= _INT_BOOL:
            try:
                p, t = np.array(pids, dtype=np.int64), np.array(tids, dtype=np.int64)
            except OverflowError:
                p = t = None
            if p is not None:
                starts = [0, *(np.flatnonzero((p[1:] != p[:-1]) | (t[1:] != t[:-1])) + 1).tolist()]
                found = [get((pids[i], tids[i])) for i in starts]
                if None not in found:
                    return np.repeat(np.array(found, np.int64), np.diff([*starts, len(pids)]))
        keys = list(zip(pids, tids))
        try:
            return np.array(list(map(get, keys)), dtype=np.int64)
        except TypeError:  # a new thread (None), or ids that cannot be one (unhashable)
            if not self._new_threads(keys):
                return None
            return np.array(list(map(get, keys)), dtype=np.int64)

    def _new_threads(self, keys: list[tuple]) -> bool:
        """Make the threads of ``keys`` ((pid, tid) as written) that do not exist yet, in order; False (and
        nothing made) if one of them cannot be a thread (the per-event path then skips it as bad_pid_or_tid)."""
        index, new = self.thread_index, {}
        for key in keys:
            try:
                if key in index or key in new:
                    continue
            except TypeError:
                return False
            if not (_id_ok(key[0]) and _id_ok(key[1])):
                return False
            new[key] = None
        for pid, tid in new:
            self.thread(pid, tid)
        return True

    def _intern(self, values: list, default: Any) -> list:
        """Names/categories as the per-event path stores them: non-empty strings interned, anything else
        ``default``.

        Tries the plain interning first; if that put something else than a non-empty string into ``strings`` (it
        holds only those), takes it out again and applies the per-event rule to each value.
        """
        strings = self.strings
        n = len(strings)
        try:
            out = list(map(strings.setdefault, values, values))
        except TypeError:  # an unhashable value (a list, an object)
            out = None
        if len(strings) > n:
            bad = [k for k in islice(reversed(strings), len(strings) - n) if type(k) is not str or not k]
            for k in bad:
                del strings[k]
            if bad:
                out = None
        if out is not None:
            return out
        sd = strings.setdefault
        return [sd(v, v) if type(v) is str and v else default for v in values]

    def _run_events(self, start: int, events: list[Event], lo: int, hi: int) -> None:
        """Consume events[lo:hi], one at a time (file index of events[0] is ``start``)."""
        skip = self.stats.skip
        thread_index, sd = self.thread_index, self.strings.setdefault
        s_ts, s_dur, s_th, s_idx = self.s_ts.append, self.s_dur.append, self.s_th.append, self.s_idx.append
        s_name, s_cat, s_args, args = self.s_name.append, self.s_cat.append, self.s_args.append, self.args.append
        f_ts, f_idx, f_kind, f_enc = self.f_ts.append, self.f_idx.append, self.f_kind.append, self.f_enc.append
        f_th, f_id, f_text, flow_texts = self.f_th.append, self.f_id.append, self.f_text.append, self.flow_texts
        # (the caller swaps self.args for a new list after each batch)
        n_args = self.n_args
        empty = _EMPTY_ARGS
        for idx, e in enumerate(events[lo:hi] if lo or hi < len(events) else events, start + lo):
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
                f_kind(_FLOW_KIND[ph])
                f_enc(e.bp == "e")
                f_th(th)
                f_id(fid)
                f_text(flow_texts.setdefault((cat, name), self.n_texts))
                self.n_texts += 1
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
        self.f_kind.append(_FLOW_KIND[e.ph])
        self.f_enc.append(e.bp == "e")
        self.f_th.append(th)
        self.f_id.append(fid)
        self.f_text.append(self.flow_texts.setdefault((cat, name), self.n_texts))
        self.n_texts += 1

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


def _np8(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=np.int8) if len(a) else np.zeros(0, dtype=np.int8)


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
        self.f_rest: list[tuple] = []      # per flow event: (ph, key number, thread index, bp == "e"); run_loop
        self.flow_cols: tuple | None = None  # the same as three arrays (bind_flows)
        self.trace_ids: dict[tuple, int] = {}

    def track(self, key: tuple, kind: str) -> int:
        tid = self.track_ids.get(key)
        if tid is None:
            tid = self.track_ids[key] = len(self.tracks)
            self.tracks.append((key, kind))
        return tid

    def top(self, t: int) -> int | None:
        """The slice a flow event on thread t binds to: the top of the thread's own track (lane 0), as the last slice
        that arrived there left it (trace_processor binds flows to its thread track, never to a track of overlapping
        slices)."""
        lanes = self.lanes_of.get(t)
        if not lanes or not lanes[0]:
            return None
        return lanes[0][-1][1]

    def run(self):
        """Slice ids (in the merged order below), depth, parent, track of every slice; the flows.

        Slices and flow events are processed in (ts, slices before flows, longer first, file order). Each thread
        keeps a stack of open slices per lane, popped lazily (only when its next slice arrives): a slice goes on the
        first lane where, once the slices that ended by its start are popped, it fits inside the top (or the lane is
        empty); if none, a new lane (a spill track). A flow event binds to the top of its thread (of the lane whose
        top began last), however stale; an 'f' without bp=e waits for the thread's next slice.

        :meth:`run_fast` does this with arrays for every thread whose slices nest on one lane, and walks the others
        one slice at a time (:func:`_walk`); :meth:`run_loop` is the plain loop over everything (``_FAST_NEST``
        False). Both give the same result.
        """
        c = self.c
        ns, nf = len(c.s_ts), len(c.f_ts)
        s_ts, s_dur = _np(c.s_ts), _np(c.s_dur)
        if _FAST_NEST:
            return self.run_fast(s_ts, s_dur)
        ts = np.concatenate([s_ts, _np(c.f_ts)])
        negdur = np.concatenate([-s_dur, np.zeros(nf, dtype=np.int64)])
        kind = np.concatenate([np.zeros(ns, dtype=np.int8), np.ones(nf, dtype=np.int8)])
        idx = np.concatenate([_np(c.s_idx), _np(c.f_idx)])
        order = np.lexsort((idx, negdur, kind, ts))
        del ts, negdur, kind, idx
        return self.run_loop(order, s_ts, s_dur)

    def run_fast(self, s_ts: np.ndarray, s_dur: np.ndarray):
        """What :meth:`run_loop` does, thread by thread (threads do not interact, except through track ids and
        flows, which are put in the loop's order afterwards).

        A thread's slices go on lanes through :func:`_place`: lane 0 with arrays (checked exactly, see
        :func:`_nest_window`), and only the slices that do not fit it (spills) one at a time; a flow event on a thread
        binds to its last slice before it (nothing is popped until the next slice arrives), or to a spilled slice's
        lane if that began later. Threads with few slices, or many spills, are walked one slice at a time by
        :func:`_walk`, the loop's own rules. Tracks are numbered in the order the loop makes them (by the slice that
        first lands on each). Flow events then run through the loop's flow rules in the loop's order, a waiting 'f' at
        the position of the slice that binds it.
        """
        c = self.c
        stats = c.stats
        ns, nf = len(s_ts), len(c.f_ts)
        # The merged order, as two sorted lists: slices by (ts, longer first, file order), flow events by
        # (ts, file order) (they were collected in file order); a flow event comes after the slices of its ts.
        o_k = _slice_order(s_ts, s_dur, _np(c.s_idx))
        o_ts, o_dur = s_ts[o_k], s_dur[o_k]
        o_end = o_ts + o_dur
        o_th = _np(c.s_th)[o_k]
        f_ts = _np(c.f_ts)
        f_k = np.argsort(f_ts, kind="stable")             # flow indexes in merged order
        f_nsb = np.searchsorted(o_ts, f_ts[f_k], "right")  # per flow event: how many slices come before it
        f_th = _np(c.f_th)[f_k]
        depth = np.zeros(ns, np.int64)
        parent = np.full(ns, -1, np.int64)
        lane = np.zeros(ns, np.int64)
        f_top = np.full(nf, -1, np.int64)   # the slice a flow event binds to (-1: none)
        f_next = np.full(nf, -1, np.int64)  # the next slice on its thread (-1: none)
        flows_of = dict(_groups(f_th)) if nf else {}
        made = []    # (slice id, track key, kind): the loop makes the track as it places that slice
        groups = []  # (slice ids, track keys of its lanes)
        for t, g in (_groups(o_th) if ns else ()):
            if t < 0:
                key = ("global",) if t == -1 else ("process", -2 - t)
                made.append((int(g[0]), key, "legacy_chrome_global_instants" if t == -1
                             else "legacy_chrome_process_instants"))
                groups.append((g, [key]))
                continue
            fl = flows_of.pop(t, None)
            fn = f_nsb[fl] if fl is not None else f_nsb[:0]
            placed = _place(g, o_ts[g], o_end[g], fn) if len(g) >= _MIN_NEST else None
            if placed is None:
                placed = _walk(g.tolist(), o_ts[g].tolist(), o_end[g].tolist(), fn.tolist())
            lanes, d, p, tops, firsts = placed
            lane[g] = lanes
            depth[g] = d
            parent[g] = p
            keys = [("thread", t, li) for li in range(len(firsts))]
            made.extend((sid, key, _SPILL_TRACK) for sid, key in zip(firsts[1:], keys[1:]))
            stats.spill_tracks += len(firsts) - 1
            if fl is not None:
                f_top[fl] = tops
            made.append((int(g[0]), keys[0], "thread_execution"))
            groups.append((g, keys))
            if fl is not None:
                k = np.searchsorted(g, f_nsb[fl])
                f_next[fl] = np.where(k < len(g), g[np.minimum(k, len(g) - 1)], -1)
        made.sort(key=itemgetter(0))
        for _sid, key, kind in made:
            self.track(key, kind)
        o_track = np.empty(ns, np.int64)
        for g, keys in groups:
            ids = [self.track_ids[key] for key in keys]
            o_track[g] = ids[0] if len(ids) == 1 else np.array(ids, np.int64)[lane[g]]
        if nf:
            key = _key_numbers(np.frombuffer(c.f_id, dtype=np.uint64)[f_k], _np(c.f_text)[f_k])
            self.bind_flows(_np8(c.f_kind)[f_k], _np8(c.f_enc)[f_k].astype(bool), key, f_nsb, f_top,
                            f_next)
        return o_ts, o_dur, o_track, depth, parent, o_k

    def bind_flows(self, kind: np.ndarray, enc: np.ndarray, key: np.ndarray, f_nsb: np.ndarray, f_top: np.ndarray,
                   f_next: np.ndarray) -> None:
        """The loop's flow rules (flow_event, bind_pending) with arrays, for the flow events (kind, bp == "e", key
        number; in merged order) whose slices are known: ``f_top`` (for an 'f' without bp=e: ``f_next``, and it runs
        when that slice is placed, i.e. after the flow events before that slice and before those after it).

        Per flow key (id, cat, name), in that order: the first 's' with a slice opens the flow (later ones are
        duplicates); a 't' or 'f' before it has no start; after it, each 't'/'f' links the slice of the last opener
        (that 's' or a later 't') to its own, and a 't' becomes the opener. Trace ids count keys in the order they
        were opened. Skip reasons are counted, and first counted, in the order the loop meets them.
        """
        nk = int(key.max()) + 1
        kind = np.where((kind == _F) & ~enc, _WAIT, kind)
        waits = (kind == _WAIT) & (f_next < 0)  # never bound
        ops = np.flatnonzero(~waits)
        ops = ops[np.argsort(np.where(kind == _WAIT, 2 * f_next + 1, 2 * f_nsb)[ops], kind="stable")]
        code = key[ops]
        kind = kind[ops]
        sid = np.where(kind == _WAIT, f_next[ops], f_top[ops])
        m = len(ops)
        pos = np.arange(m)
        lost = (kind != _WAIT) & (sid < 0)            # flow_no_enclosing_slice
        opens = ~lost & (kind == _S)
        first = np.full(nk, m, np.int64)              # per key: the op that opened it (m: none)
        uk, at = np.unique(code[opens], return_index=True)
        first[uk] = pos[opens][at]
        opener = first[code]
        dup = opens & (pos > opener)                  # flow_duplicate_id
        ends = ~lost & (kind != _S)
        linked = ends & (pos > opener)
        unstarted = ends & ~linked                    # flow_end_without_start
        # the slice each linked op links from: that of the key's last opener before it
        setter = (opens & (pos == opener)) | (linked & (kind == _T))
        by = np.argsort(code, kind="stable")           # ops of a key together, in order
        last = np.maximum.accumulate(np.where(setter[by], pos, -1))  # (a linked op's key has one before it)
        src = np.empty(m, np.int64)
        src[by] = by[np.concatenate(([0], last[:-1]))[:m]]
        trace = np.zeros(nk, np.int64)
        trace[code[pos[opens & (pos == opener)]]] = np.arange(len(uk))
        self.flow_cols = (sid[src[linked]], sid[linked], trace[code[linked]])
        reasons = [(int(mask.argmax()), reason, int(np.count_nonzero(mask))) for mask, reason in (
            (lost, "flow_no_enclosing_slice"), (dup, "flow_duplicate_id"), (unstarted, "flow_end_without_start"))
            if mask.any()]
        for _at, reason, n in sorted(reasons):
            self.c.stats.skip(reason, n)
        n = int(np.count_nonzero(waits))
        if n:
            self.c.stats.skip("flow_end_without_next_slice", n)

    def run_loop(self, order: np.ndarray, s_ts: np.ndarray, s_dur: np.ndarray):
        """The nesting loop, one slice or flow event at a time (see :meth:`run`)."""
        c = self.c
        ns = len(s_ts)
        nf = len(order) - ns
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
        self.f_rest = f_rest = list(zip(map(_FLOW_PH.__getitem__, c.f_kind), zip(c.f_id, c.f_text), c.f_th,
                                        map(bool, c.f_enc)))
        open_flows, trace_ids, flows = self.open_flows, self.trace_ids, self.flows
        skip = stats.skip
        sid = 0
        for k, s, e, t in zip(ordl, starts, ends, ths):
            if k >= ns:
                # A flow event: what flow_event() does, inlined for its common cases.
                ph, key, ft, enclosing = f_rest[k - ns]
                if ph == "s" or enclosing:
                    lanes = lanes_of.get(ft)
                    if lanes is not None:
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
                li, st, new = _lane_for(lanes, s, e)
                if new:
                    stats.spill_tracks += 1
                lt = lane_tracks[t]
                if li < len(lt):
                    add_track(lt[li])
                else:
                    tr = track(("thread", t, li), "thread_execution" if li == 0 else _SPILL_TRACK)
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
        ph, key, t, enclosing = self.f_rest[j]
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


def _key_numbers(fid: np.ndarray, text: np.ndarray) -> np.ndarray:
    """A number per distinct (fid, text) pair (0, 1, ...; any order) for each flow event."""
    if not len(fid):
        return np.zeros(0, np.int64)
    bits = int(text.max()).bit_length()
    if int(fid.max()).bit_length() + bits <= 63:  # the pair as one int64
        return np.unique((fid.astype(np.int64) << bits) | text, return_inverse=True)[1].astype(np.int64)
    order = np.lexsort((text, fid))
    f, t = fid[order], text[order]
    new = np.concatenate(([False], (f[1:] != f[:-1]) | (t[1:] != t[:-1])))
    out = np.empty(len(fid), np.int64)
    out[order] = np.cumsum(new)
    return out


def _slice_order(ts: np.ndarray, dur: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Slice indexes sorted by (ts, longer first, file index idx)."""
    if len(ts) < 2:
        return np.arange(len(ts))
    if (idx[1:] > idx[:-1]).all():  # in file order already (no B/E slices): a stable sort keeps that order for ties
        t0 = int(ts.min())
        bits = int(dur.max()).bit_length()
        if (int(ts.max()) - t0).bit_length() + bits <= 62:  # (ts, -dur) as one int64: one (fast, stable) argsort
            return np.argsort(((ts - t0) << bits) | (int(dur.max()) - dur), kind="stable")
        return np.lexsort((-dur, ts))
    return np.lexsort((idx, -dur, ts))


def _stable_argsort(a: np.ndarray) -> np.ndarray:
    """np.argsort(a, kind="stable"), faster for small values (numpy radix-sorts 16-bit integers)."""
    if len(a) and -(1 << 15) <= a.min() and a.max() < (1 << 15):
        return np.argsort(a.astype(np.int16), kind="stable")
    return np.argsort(a, kind="stable")


def _groups(keys: np.ndarray):
    """(key, positions of keys holding it (increasing)) for each distinct key, in increasing key order."""
    by = _stable_argsort(keys)
    k = keys[by]
    cut = np.flatnonzero(k[1:] != k[:-1]) + 1
    starts = [0, *cut.tolist()]
    ends = [*cut.tolist(), len(k)]
    return [(int(k[a]), by[a:b]) for a, b in zip(starts, ends)]


_MIN_NEST = 32  # fewer slices on a thread: _walk it
_SPILL_TRACK = "thread_overlapping_slice"  # trace_processor's type of a thread's tracks for overlapping slices


def _nest_window(starts: np.ndarray, ends: np.ndarray, below_start: np.ndarray, below_end: np.ndarray,
                 below_at: np.ndarray, base: int):
    """Lane 0 of one thread for a window of its slices: (v, depth, parent) where the first v slices all go on lane 0
    (v = len(starts): all of them; else slice v does not fit it) and depth, parent (thread positions, -1 for none) are
    exact for those v.

    Slices in slice id order (starts non-decreasing); ``base``: the thread position of the first. ``below_end``,
    ``below_at``: lane 0's stack before it (bottom to top: ends non-increasing; thread positions), maybe partly ended.

    The loop (run_loop) pops a lane's stack only when a slice arrives, then pushes it on the first lane where it fits.
    If no slice of the window has spilled before slice i, lane 0's stack once popped for i holds exactly the earlier
    lane-0 slices that end after i starts (stacked slices nest, so the ones popped are those that ended): the alive
    part of the stack below (a prefix of it) and the window's slices j < i with ends[j] > starts[i]. So depth[i] is
    their count; the top (parent[i]) is, if a window slice is alive, the last earlier window slice of depth[i] - 1
    (every slice after it and before i sits above it, deeper), else the top of the alive part below. Slice i fits if
    it ends within that top. Checking that for every i, with depth and parent from those formulas, proves (by
    induction over i) that the first v fit and that the formulas are the loop's values for them.
    """
    w = len(starts)
    # window slice j is popped when the first slice after it that it does not enclose by _closes arrives: one that
    # starts at or after its end; for an instant (dur 0), one that starts after it (the later slices at its ts are
    # instants too: longer ones come first)
    popped = np.maximum(np.where(ends > starts, np.searchsorted(starts, ends, side="left"),
                                 np.searchsorted(starts, ends, side="right")), np.arange(1, w + 1))
    alive = np.arange(w) - np.cumsum(np.bincount(popped, minlength=w + 1))[:w]
    if len(below_end):
        # the stack below that slice i finds alive: the slices ending after it starts, and the instants ending at its
        # start (only an instant can start there then; a slice ending there is closed unless it is an instant)
        rev = below_end[::-1]
        gt = len(below_end) - np.searchsorted(rev, starts, side="right")
        ge = len(below_end) - np.searchsorted(rev, starts, side="left")
        at_end = np.minimum(gt, len(below_end) - 1)
        below = np.where((ge > gt) & (below_start[at_end] == below_end[at_end]), ge, gt)
    else:
        below = np.zeros(w, np.int64)
    depth = below + alive
    parent = np.full(w, -1, np.int64)
    ok = np.ones(w, bool)
    by_depth = _stable_argsort(depth)           # positions by (depth, position)
    child = by_depth[alive[by_depth] > 0]       # (in that order, so the queries below increase)
    if len(child):
        key = depth[by_depth] * (w + 1) + by_depth  # increasing
        at = np.searchsorted(key, (depth[child] - 1) * (w + 1) + child) - 1
        p = by_depth[np.maximum(at, 0)]
        open_at = (ends[p] > starts[child]) | ((ends[p] == starts[child]) & (starts[p] == ends[p])
                                               & (starts[child] == ends[child]))  # not closed by the child
        ok[child] = ((at >= 0) & (depth[p] == depth[child] - 1) & (p < child) & open_at & (ends[child] <= ends[p]))
        parent[child] = p + base
    low = np.flatnonzero((alive == 0) & (below > 0))
    if len(low):
        top = below[low] - 1
        ok[low] = ends[low] <= below_end[top]
        parent[low] = below_at[top]
    bad = np.flatnonzero(~ok)
    return (int(bad[0]) if len(bad) else w), depth, parent


def _place(sids: np.ndarray, starts: np.ndarray, ends: np.ndarray, f_nsb: np.ndarray):
    """What _walk gives for one thread (numpy arrays; tops and parents as slice ids), or None if many slices spill
    (then _walk is cheaper).

    Lane 0 goes window by window through _nest_window; a slice that does not fit lane 0 is placed on lanes 1, 2, ...
    one at a time, by the loop's rules. Lanes 1+ change only when such a slice arrives (the loop looks at them only for
    a slice that does not fit lane 0), and lane 0 does not depend on them. A flow event binds to the top of lane 0:
    right after a lane-0 slice x, x itself; right after a spilled slice, lane 0's top once that slice's arrival
    popped it.
    """
    n = len(sids)
    depth = np.zeros(n, np.int64)
    parent = np.full(n, -1, np.int64)   # thread positions while placing
    lane = np.zeros(n, np.int64)
    firsts = [int(sids[0])]
    upper: list[list] = []              # lanes 1, 2, ...: stacks of (end, thread position, start)
    spilled: list[int] = []             # thread positions of the slices placed on lanes 1+
    spill_top: list[int] = []           # the flow top (lane 0's top) right after each of those
    below: list[int] = []               # lane 0's stack before pos (thread positions, bottom to top)
    most = 8 + n // 1024
    pos, size = 0, n
    while pos < n:
        end = min(n, pos + size)
        at = np.array(below, np.int64)
        v, d, p = _nest_window(starts[pos:end], ends[pos:end], starts[at], ends[at], at, pos)
        depth[pos:pos + v] = d[:v]
        parent[pos:pos + v] = p[:v]
        if v:
            below = _chain(parent, pos + v - 1)
        pos += v
        if pos == end:
            size *= 2
            continue
        if len(spilled) >= most:
            return None
        # slice pos does not fit lane 0: its arrival pops lane 0, then it goes on lanes 1+ as in the loop
        s, e = int(starts[pos]), int(ends[pos])
        while below and _closes(int(starts[below[-1]]), int(ends[below[-1]]), s, e):
            below.pop()
        li, st, new = _lane_for(upper, s, e)
        li += 1  # upper holds lanes 1+
        if new:
            firsts.append(int(sids[pos]))
        lane[pos] = li
        if st:
            depth[pos] = len(st)
            parent[pos] = st[-1][1]
        st.append((e, pos, s))
        spilled.append(pos)
        spill_top.append(below[-1] if below else -1)
        pos += 1
        size = max(256, 2 * v)
    # flow events: the thread's last slice before each
    last = np.searchsorted(sids, f_nsb) - 1
    if spilled:
        sp = np.array(spilled, np.int64)
        k = np.searchsorted(sp, last, side="right")  # spills at or before it
        ks = np.maximum(k - 1, 0)
        tops = last.copy()
        after = (k > 0) & (sp[ks] == last)
        tops[after] = np.array(spill_top, np.int64)[ks[after]]
        tops[last < 0] = -1
    else:
        tops = last
    tops = np.where(tops >= 0, sids[np.maximum(tops, 0)], -1)
    parent = np.where(parent >= 0, sids[np.maximum(parent, 0)], -1)
    return lane, depth, parent, tops, firsts


def _chain(parent: np.ndarray, j: int) -> list:
    """Thread positions from the bottom of j's stack (following parents) up to j."""
    out = []
    while j >= 0:
        out.append(j)
        j = int(parent[j])
    out.reverse()
    return out


def _closes(start: int, end: int, s: int, e: int) -> bool:
    """Whether an open slice [start, end) is closed by a slice [s, e) that starts on its track (trace_processor's rule):
    it starts after the open slice's end, or at it, unless both are instants (dur 0): instants at one ts stack."""
    return end < s or (end == s and not (start == end and e == s))


def _lane_for(lanes: list, s: int, e: int) -> tuple[int, list, bool]:
    """The lazy-stack rule for a slice [s, e) arriving on a thread with these lanes (stacks of (end, id, start)):
    each lane in turn first drops the slices it closes (:func:`_closes`); the slice goes on the first lane that is then empty or
    whose top encloses it (e <= that top's end); when none does, on a new lane (appended). Returns (lane index, that
    lane's stack, whether the lane is new)."""
    li = 0
    for st in lanes:
        while st and _closes(st[-1][2], st[-1][0], s, e):
            st.pop()
        if not st or e <= st[-1][0]:
            return li, st, False
        li += 1
    st = []
    lanes.append(st)
    return li, st, True


def _walk(sids: list, starts: list, ends: list, f_nsb: list):
    """run_loop's rules for the slices of one thread (ids ``sids``, increasing) and its flow events (``f_nsb``: how
    many slices, of all threads, come before each; non-decreasing).

    Returns per slice its lane, depth and parent id; per flow event the slice it binds to (-1: none); and the
    id of the first slice placed on each lane.
    """
    lanes: list[list] = [[]]
    firsts = [sids[0]] if sids else []
    out_lane, out_depth, out_parent, tops = [], [], [], []
    nfl, fi = len(f_nsb), 0
    for sid, s, e in zip(sids, starts, ends):
        while fi < nfl and f_nsb[fi] <= sid:
            tops.append(_top(lanes))
            fi += 1
        li, st, new = _lane_for(lanes, s, e)
        if new:
            firsts.append(sid)
        out_lane.append(li)
        if st:
            out_depth.append(len(st))
            out_parent.append(st[-1][1])
        else:
            out_depth.append(0)
            out_parent.append(-1)
        st.append((e, sid, s))
    while fi < nfl:
        tops.append(_top(lanes))
        fi += 1
    return out_lane, out_depth, out_parent, tops, firsts


def _top(lanes: list) -> int:
    """_Nester.top for a thread's lanes, -1 for none."""
    return lanes[0][-1][1] if lanes[0] else -1


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
    if n.flow_cols is not None:
        fl = np.stack(n.flow_cols, axis=1).astype(np.int64).reshape(-1, 3)
    else:
        fl = np.array(n.flows, dtype=np.int64).reshape(-1, 3)
    # A row goes out of the slice that began first (trace_processor orders the two ends of each link by start time;
    # with equal starts, the flow's earlier end stays out).
    later = o_ts[fl[:, 0]] > o_ts[fl[:, 1]]
    fl[later, :2] = fl[later, 1::-1]
    stats.flows = len(fl)
    return Model(
        processes=processes, threads=threads, tracks=tracks,
        ts=o_ts, dur=o_dur, track_id=np.asarray(o_track, dtype=np.int64),
        category=TextColumn.of(s_cat, o_k), name=TextColumn.of(s_name, o_k),
        depth=np.asarray(o_depth, dtype=np.int64), parent_id=np.asarray(o_parent, dtype=np.int64),
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
                threads.append((len(threads), p, _thread_name(c, m), upid, 1))
        if t not in utid_of:
            utid_of[t] = len(threads)
            threads.append((len(threads), q, _thread_name(c, t), upid_of[p], int(q == p)))
    return processes, threads, utid_of, upid_of


def _thread_name(c: _Collector, t: int):
    """A thread's name: a string tid (even "") names its thread (trace_processor renames the thread to it at each of
    its events, after any ``thread_name`` metadata); else the ``thread_name`` metadata, if any."""
    raw = c.thread_keys[t][3]
    if type(raw) is str:
        return raw
    return c.thread_names.get(t)
