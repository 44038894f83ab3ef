"""First pass of the loader: decoded events, in file order -> slice, flow, thread and metadata columns.

What each event becomes (the rules of docs/SQL.md, "Rules"; the second pass, ``_nest.py``, nests what this keeps):

- ``X``: a slice. ts and dur are µs (int, or a float/number as text) read as exact ns (``to_ns``). Skipped, in this
  order of checks: ts not a number (``X_missing_or_bad_ts``), dur not a number (``X_missing_or_bad_dur``), dur < 0
  (``X_negative_dur``), ts outside (-2**62, 2**62) ns or dur >= 2**62 ns (``ts_out_of_range``), pid/tid not ids
  (``bad_pid_or_tid``).
- ``s`` / ``t`` / ``f``: a flow event (kind, bp == "e", thread, key (id, cat, name)). Skipped: ts not a number or out
  of range (``flow_missing_or_bad_ts``), no flow id (``flow_invalid_id``), pid/tid not ids.
- ``i`` / ``I`` / ``R``: an instant (a slice of dur 0) on its thread (scope "t" or none), on the global instants
  track ("g") or on its process's instants track ("p"); another scope is ``i_bad_scope``.
- ``B`` / ``E``: a stack per thread; an E closes the thread's last open B (a slice with the B's name, args and file
  index). ``E_without_B``, ``E_before_B``; B's still open at the end are ``B_without_E``.
- ``M``: ``process_name`` / ``thread_name`` (args.name, a string) name a process / thread; the first makes the
  process's main thread. (Text that is not UTF-8 reads with U+FFFD, as everywhere: ``_decode.repair_utf8``.)
- ``C``: a counter value per field of its ``args`` object, in order (duplicates too), named ``name`` (``""`` when it
  is not a non-empty string), `` id: <id>`` when ``id`` is a non-empty string, a space and the field's key; a number
  is its value as a double, a string is read by ``_decode.strtod``; any other value is skipped
  (``C_arg_not_a_number``, counted per field). Skipped events: ts not a number or out of range
  (``C_missing_or_bad_ts``), pid/tid not ids, args missing or not an object (``C_without_args``). The event makes
  its thread (and process) as any kept event does, even when none of its fields is a number.
- Anything else is skipped (``missing_or_bad_ph``, ``unsupported_phase:<ph>``).

A thread (and its process) is made when the first event that needs it is kept, in file order (``_ids.py`` says how
pid/tid values become numbers). Names: a thread slice without a non-empty string name is "[No name]", a global or
process instant keeps NULL; a category that is not a non-empty string is NULL. Args that are empty, ``{}`` or
``null`` get no arg set; the others get arg set ids in the order their slices are made (an E makes its B/E slice).
Skip reasons are counted in the order they are first met.

X, flow and instant events, almost every event of a Kineto trace (instants: one per allocation and free of a trace
recorded with ``profile_memory``), are handled a chunk at a time as columns (lists and numpy arrays); the other phases
one event at a time, in file order between them (see :meth:`Collector.run`).
"""
from __future__ import annotations

from array import array
from itertools import compress, count, islice, repeat
from operator import itemgetter
from typing import Any

import msgspec
import numpy as np

from ._decode import (
    Event,
    counter_fields,
    counter_value,
    ns_of_decimals,
    repair_utf8,
    to_ns,
)
from ._ids import Ids, flow_ids, thread_numbers
from ._stats import LoadStats

_TS_LIMIT = 1 << 62  # ns; anything larger cannot be a real timestamp (and would overflow sums)
_US_MAX = (_TS_LIMIT - 1) // 1000  # largest int µs whose ns value is below _TS_LIMIT
_EMPTY_ARGS = (b"", b"{}", b"null")
_CHUNK = 2048  # events handled as columns at a time (they stay in the CPU's cache across the column steps)
# the phases handled as columns -> their codes: X 1, a flow its kind + 2, an instant _INSTANT
_PH_CODE = {"X": 1, "s": 2, "t": 3, "f": 4, "i": 5, "I": 5, "R": 5}
_INSTANT = 5
# an instant's scope -> where its slice goes: 0 its thread, 1 the global instants track, 2 its process's track;
# any other scope: _BAD_SCOPE
_SCOPE = {None: 0, "t": 0, "g": 1, "p": 2}
_BAD_SCOPE = 3
_NO_ROWS = np.zeros(0, np.int64)
_INT, _STR, _INT_STR, _INT_BOOL, _NUMBERS = {int}, {str}, {int, str}, {int, bool}, {int, float}
# states of a µs value (_ns_values) and skip reasons of column events (their codes, 0: kept)
_OK, _NAN, _NEG, _OUT = 0, 1, 2, 3
_REASONS = ("", "X_missing_or_bad_ts", "X_missing_or_bad_dur", "X_negative_dur", "ts_out_of_range",
            "flow_missing_or_bad_ts", "flow_invalid_id", "i_missing_or_bad_ts", "i_bad_scope")
_R_X_TS, _R_X_DUR, _R_X_NEG, _R_RANGE, _R_F_TS, _R_F_ID, _R_I_TS, _R_I_SCOPE = range(1, 9)


class Collector:
    """The first pass's state: feed it every batch of decoded events in file order (:meth:`run`), then
    :meth:`finish`; ``_model.build`` reads its columns. ``args`` holds the (arg set id, raw JSON) rows of the batches
    run since the caller last took them (the caller swaps it for a new list)."""

    def __init__(self, stats: LoadStats) -> None:
        self.stats = stats
        self.ids = Ids()
        self.thread_index: dict[tuple, int] = {}    # (pid raw, tid raw) -> thread index
        self.thread_canon: dict[tuple, int] = {}    # (pid num, tid num) -> thread index
        self.thread_keys: list[tuple] = []          # index -> (pid num, tid num, pid raw, tid raw)
        self.proc_names: dict[int, str] = {}
        self.proc_raw: dict[int, Any] = {}          # pid num -> its string pid (a synthetic process's name)
        self.thread_names: dict[int, str] = {}
        # slices, as compact columns (one entry per slice, in the order they are made)
        self.s_ts = array("q")
        self.s_dur = array("q")
        self.s_th = array("q")         # thread index; -1 global instant track; <= -2 process track (-2 - pid)
        self.s_name: list[Any] = []    # interned strings
        self.s_cat: list[Any] = []
        self.s_args = array("q")       # arg_set_id, -1 for none
        self.s_idx = array("q")        # file index (a B/E slice: its B's)
        self.strings: dict[str, str] = {}
        self.args: list[tuple] = []
        self.n_args = 0
        self.args_offsets = np.zeros(1, dtype=np.int64)  # set by whoever took ``args`` (_mirror._collect)
        # flow events, in file order
        self.f_ts = array("q")
        self.f_idx = array("q")
        self.f_kind = array("b")       # 0 s, 1 t, 2 f (_nest's kinds)
        self.f_enc = array("b")        # bp == "e" (binds to the enclosing slice)
        self.f_th = array("q")         # thread index
        self.f_id = array("Q")         # flow id; with f_text, the flow's key (id, cat, name)
        self.f_text = array("q")       # a number per distinct (cat, name)
        self.flow_texts: dict[tuple, int] = {}
        self.n_texts = 0               # numbers handed out (a pair's number: the first free one when first seen)
        # counter values ("C" events): per value, in file order, its value and name (its track's, in its process);
        # per event with values, its ts, thread and number of values
        self.c_value = array("d")
        self.c_name: list[str] = []
        self.c_ev_ts = array("q")
        self.c_ev_th = array("q")
        self.c_ev_n = array("q")
        self._c_names: dict[tuple, list] = {}  # (prefix, keys) -> the counters' names (interned)
        self._be: dict[int, list] = {}  # thread index -> open B events (file index, ts, event)
        self._tally: dict[str, list] = {}  # this chunk's skip reasons -> [file index first met, count]
        self._side: list[tuple] = []   # this chunk's B/E slices (see _side_slice)

    def thread(self, pid: Any, tid: Any) -> int | None:
        """The thread index of a (pid, tid) as written in the JSON, made if new; None if they are not ids."""
        key = (pid, tid)
        try:
            t = self.thread_index.get(key)
        except TypeError:  # a list or object as pid/tid
            return None
        if t is None:
            p, q = self.ids.num(pid), self.ids.num(tid)
            if p is None or q is None:
                return None
            p, q = thread_numbers(pid, tid, p, q)
            t = self.thread_canon.get((p, q))
            if t is None:
                t = self.thread_canon[(p, q)] = len(self.thread_keys)
                self.thread_keys.append((p, q, pid, tid))
            self.thread_index[key] = t
            if type(pid) is str:
                self.proc_raw.setdefault(p, pid)
        return t

    def run(self, start: int, events: list[Event]) -> None:
        """Consume one batch of events (``start``: the file index of events[0]), a chunk at a time."""
        for a in range(0, len(events), _CHUNK):
            self._chunk(start + a, events[a:a + _CHUNK] if len(events) > _CHUNK else events)

    def finish(self) -> None:
        """After the last batch: count the B's never closed; drop the interning table."""
        for stack in self._be.values():
            if stack:
                self.stats.skip("B_without_E", len(stack))
        self._be.clear()
        self.strings.clear()
        self._c_names.clear()

    # ------------------------------------------------------------------------------------------------ a chunk

    def _chunk(self, base: int, evs: list[Event]) -> None:
        """Consume ``evs`` (``base``: the file index of evs[0]), with the effect of taking them one at a time.

        The X, flow and instant events go as columns: their values are checked with masks (each skipped one gets its
        reason), and their threads looked up (nothing made). Then, in file order, the events of other phases run one
        at a time, and each column event whose thread was not found is resolved (made, or skipped as bad_pid_or_tid)
        at its place among them, so that threads are made, and arg set ids and skip reasons handed out, in file
        order (an instant of a bad scope makes its thread before it is skipped). Finally the kept column events are
        appended, the chunk's slices in the order they were made.
        """
        n = len(evs)
        phs = [e.ph for e in evs]
        try:
            code = np.fromiter(map(_PH_CODE.get, phs, repeat(0)), np.int8, n)
        except TypeError:  # an unhashable ph (a list or an object)
            code = np.fromiter((_PH_CODE.get(p, 0) if type(p) is str else 0 for p in phs), np.int8, n)
        del phs
        self._tally, self._side = {}, []
        col = np.flatnonzero(code)                      # chunk positions of the column events
        whole = len(col) == n
        others = [] if whole else np.flatnonzero(code == 0).tolist()
        cols = _Columns(self, evs if whole else _take(evs, col), code if whole else code[col]) if len(col) else None
        missing: list = []  # (chunk position, column index) of kept-so-far column events whose thread is not known
        if cols is not None and len(cols.missing):
            missing = list(zip((cols.missing if whole else col[cols.missing]).tolist(), cols.missing.tolist()))
        mi, nm = 0, len(missing)
        for p in others:
            while mi < nm and missing[mi][0] < p:
                self._resolve(base, cols, *missing[mi])
                mi += 1
            self._event(base + p, evs[p])
        for p, j in missing[mi:]:
            self._resolve(base, cols, p, j)
        if cols is not None:
            cols.tally(self, base + (np.arange(n) if whole else col))
            cols.append(self, base + (np.arange(n) if whole else col))
        if self._side:  # (no X or instant slices in the chunk)
            self._add_slices([], _NO_ROWS, _NO_ROWS, _NO_ROWS, [], [], _NO_ROWS)
        for reason, (_at, k) in sorted(self._tally.items(), key=lambda kv: kv[1][0]):
            self.stats.skip(reason, k)

    def _resolve(self, base: int, cols: "_Columns", p: int, j: int) -> None:
        """The thread of column event j (at chunk position p), made if new, or its skip (bad_pid_or_tid)."""
        e = cols.events[j]
        t = self.thread(e.pid, e.tid)
        if t is None:
            self._skip(base + p, "bad_pid_or_tid")
        else:
            cols.th[j] = t

    def _skip(self, at: int, reason: str, k: int = 1) -> None:
        """Count ``k`` events skipped for ``reason``, the first at file index ``at``."""
        t = self._tally.get(reason)
        if t is None:
            self._tally[reason] = [at, k]
        else:
            t[0] = min(t[0], at)
            t[1] += k

    def _add_slices(self, raws: list, ts: np.ndarray, dur: np.ndarray, th: np.ndarray, names: list, cats: list,
                    idx: np.ndarray) -> None:
        """Append slices (X and instant slices of this chunk, in file order) and this chunk's B/E slices, in the order
        they were made; each with args gets the next arg set id."""
        if self._side:
            made = np.concatenate([idx, np.array([s[0] for s in self._side], np.int64)])  # when each was made
            order = np.argsort(made, kind="stable")
            side = list(zip(*self._side))
            self._side = []
            get = itemgetter(*order.tolist()) if len(order) > 1 else (lambda v: (v[0],))
            raws = list(get([*raws, *side[7]]))
            names, cats = list(get([*names, *side[5]])), list(get([*cats, *side[6]]))
            ts = np.concatenate([ts, np.array(side[2], np.int64)])[order]
            dur = np.concatenate([dur, np.array(side[3], np.int64)])[order]
            th = np.concatenate([th, np.array(side[4], np.int64)])[order]
            idx = np.concatenate([idx, np.array(side[1], np.int64)])[order]
        n = len(raws)
        has = np.fromiter(map(len, raws), np.int64, n) > 4
        for i in np.flatnonzero(~has).tolist():
            has[i] = bytes(raws[i]) not in _EMPTY_ARGS
        a0 = self.n_args
        m = int(np.count_nonzero(has))
        if m == n:
            self.args.extend(zip(range(a0, a0 + m), raws))  # zero-copy slices of the JSON, until they are written
            aid = np.arange(a0, a0 + m, dtype=np.int64)
        else:
            self.args.extend(zip(range(a0, a0 + m), compress(raws, has.tolist())))
            aid = np.where(has, np.cumsum(has) + (a0 - 1), -1)
        self.n_args = a0 + m
        self.s_ts.frombytes(ts.tobytes())
        self.s_dur.frombytes(dur.tobytes())
        self.s_th.frombytes(th.astype(np.int64).tobytes())
        self.s_name.extend(names)
        self.s_cat.extend(cats)
        self.s_args.frombytes(aid.astype(np.int64).tobytes())
        self.s_idx.frombytes(idx.astype(np.int64).tobytes())

    def _intern(self, values: list, default: Any) -> list:
        """Names/categories as stored: non-empty strings interned (one object per distinct string), anything else
        ``default``.

        Tries the plain interning first; if that put something else than a non-empty string into ``strings`` (it
        holds only those), takes it out again and applies the rule to each value.
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

    # ----------------------------------------------------------------------------- phases taken one at a time

    def _event(self, idx: int, e: Event) -> None:
        """An event of a phase that is not handled as columns (file index ``idx``)."""
        ph = e.ph
        if ph == "M":
            self._metadata(idx, e)
        elif ph == "B" or ph == "E":
            self._begin_end(idx, e)
        elif ph == "C":
            self._counter(idx, e)
        elif ph is None or type(ph) is not str:
            self._skip(idx, "missing_or_bad_ph")
        else:
            self._skip(idx, f"unsupported_phase:{ph[:8]}")

    def _side_slice(self, at: int, idx: int, ts: int, dur: int, th: int, e: Event) -> None:
        """A B/E slice (made at file index ``at``, the E's; ``idx``: its own, the B's), appended with the chunk's X and
        instant slices in the order they were made."""
        name = _slice_name(e.name)
        cat = _text(e.cat)
        sd = self.strings.setdefault
        self._side.append((at, idx, ts, dur, th, sd(name, name), sd(cat, cat) if cat else cat, e.args))

    def _counter(self, idx: int, e: Event) -> None:
        ts = to_ns(e.ts)
        if ts is None or not -_TS_LIMIT < ts < _TS_LIMIT:
            self._skip(idx, "C_missing_or_bad_ts")
            return
        th = self.thread(e.pid, e.tid)
        if th is None:
            self._skip(idx, "bad_pid_or_tid")
            return
        fields = counter_fields(e.args, self.stats) if len(e.args) else None
        if fields is None:
            self._skip(idx, "C_without_args")
            return
        keys, values = fields
        prefix = e.name if type(e.name) is str else ""
        if type(e.id) is str and e.id:
            prefix += " id: " + e.id
        numbers = None
        if set(map(type, values)) <= _NUMBERS:
            try:
                numbers = list(map(float, values))
            except OverflowError:  # (an integer of more than 308 digits)
                pass
        if numbers is None:
            got = list(map(counter_value, values))
            keep = [v is not None for v in got]
            if not all(keep):
                self._skip(idx, "C_arg_not_a_number", keep.count(False))
                keys, numbers = tuple(compress(keys, keep)), list(compress(got, keep))
            else:
                numbers = got
            if not numbers:
                return
        names = self._c_names.get((prefix, keys))
        if names is None:
            sd = self.strings.setdefault
            names = self._c_names[(prefix, keys)] = [sd(n, n) for n in (f"{prefix} {k}" for k in keys)]
        self.c_value.extend(numbers)
        self.c_name.extend(names)
        self.c_ev_ts.append(ts)
        self.c_ev_th.append(th)
        self.c_ev_n.append(len(numbers))

    def _metadata(self, idx: int, e: Event) -> None:
        if e.name not in ("process_name", "thread_name"):
            return
        value = None
        if len(e.args):
            raw = e.args
            try:
                try:
                    value = msgspec.json.decode(raw).get("name")
                except msgspec.DecodeError:
                    raw, n = repair_utf8(bytes(raw))  # (args are not UTF-8-checked when the event is decoded)
                    if not n:
                        raise
                    value = msgspec.json.decode(raw).get("name")
                    self.stats.repair("invalid_utf8", n)
            except (msgspec.DecodeError, AttributeError, RecursionError):
                value = None
        if type(value) is not str:
            self._skip(idx, "M_without_name")
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

    def _begin_end(self, idx: int, e: Event) -> None:
        ts = to_ns(e.ts)
        th = self.thread(e.pid, e.tid)
        if ts is None or th is None or not -_TS_LIMIT < ts < _TS_LIMIT:
            self._skip(idx, f"{e.ph}_missing_or_bad_ts")
            return
        stack = self._be.setdefault(th, [])
        if e.ph == "B":
            stack.append((idx, ts, e))
            return
        if not stack:
            self._skip(idx, "E_without_B")
            return
        bidx, bts, b = stack.pop()
        if ts < bts:
            self._skip(idx, "E_before_B")
            return
        self._side_slice(idx, bidx, bts, ts - bts, th, b)


class _Columns:
    """The X, flow and instant events of a chunk (``events``, in file order; ``code``: their phase codes) as columns:
    values converted and checked, each event's skip reason code (``reason``, None when none is skipped), and the
    thread of each (``th``, -1 where not known yet; ``missing``: the indexes of the events whose thread the collector
    must resolve).

    X events and instants are the chunk's slice events (``ss``: their indexes, ``sev``: the events, ``ts``/``dur``:
    their values, an instant's dur 0; ``scope``: each one's _SCOPE code, X 0, None when all are 0). An instant's
    checks that need its thread (its scope, ``i_bad_scope``) wait until the threads are resolved (:meth:`tally`)."""

    def __init__(self, c: Collector, events: list[Event], code: np.ndarray) -> None:
        self.events = events
        n = len(events)
        flow = (code >= 2) & (code <= 4)
        self.ss = ss = np.flatnonzero(~flow)
        self.fs = fs = np.flatnonzero(flow)
        ns, nf = len(ss), len(fs)
        self.sev = events if not nf else _take(events, ss) if ns else []
        self.fev = events if not ns else _take(events, fs) if nf else []
        self.code = code
        self.scope = None
        reason = None
        if ns:
            inst = code[ss] == _INSTANT
            ni = int(np.count_nonzero(inst))
            self.ts, ts_st = _ns_values([e.ts for e in self.sev], True)
            if not ni:
                self.dur, dur_st = _ns_values([e.dur for e in self.sev], False)
            else:
                x = ~inst
                xev = list(compress(self.sev, x.tolist())) if ni < ns else []
                self.dur = np.zeros(ns, np.int64)
                dur_st = None
                if xev:
                    dur, x_st = _ns_values([e.dur for e in xev], False)
                    self.dur[x] = dur
                    if x_st is not None:
                        dur_st = np.zeros(ns, np.int8)
                        dur_st[x] = x_st
                iev = self.sev if ni == ns else list(compress(self.sev, inst.tolist()))
                scope = _scopes([e.s for e in iev])
                if scope.any():
                    self.scope = np.zeros(ns, np.int8)
                    self.scope[inst] = scope
            if ts_st is not None or dur_st is not None:
                r = _x_reasons(ts_st, dur_st, ns)
                if ni and ts_st is not None:
                    r[inst & (ts_st != _OK)] = _R_I_TS  # (an instant's ts: any bad value, out of range too)
                reason = np.zeros(n, np.int8)
                reason[ss] = r
        if nf:
            self.f_ts, ts_st = _ns_values([e.ts for e in self.fev], True)
            self.fids, bad_id = flow_ids([e.id for e in self.fev])
            if ts_st is not None or bad_id is not None:
                r = np.zeros(nf, np.int8)
                if bad_id is not None:
                    r[bad_id] = _R_F_ID
                if ts_st is not None:
                    r[ts_st != _OK] = _R_F_TS  # (checked first)
                if reason is None:
                    reason = np.zeros(n, np.int8)
                reason[fs] = r
        self.reason = reason
        self.th = th = _lookup(c.thread_index, [e.pid for e in events], [e.tid for e in events])
        missing = np.flatnonzero(th < 0)
        self.missing = missing[reason[missing] == 0] if reason is not None and len(missing) else missing

    def tally(self, c: Collector, at: np.ndarray) -> None:
        """Once the threads are resolved: skip the instants of a bad scope (those whose thread is known), and count
        the events skipped on their values (``at``: the file index of each event)."""
        if self.scope is not None:
            bad = np.zeros(len(self.events), bool)
            bad[self.ss] = self.scope == _BAD_SCOPE
            bad &= self.th >= 0
            if self.reason is not None:
                bad &= self.reason == 0
            if bad.any():
                if self.reason is None:
                    self.reason = np.zeros(len(self.events), np.int8)
                self.reason[bad] = _R_I_SCOPE
        if self.reason is None:
            return
        for r in np.unique(self.reason[self.reason > 0]).tolist():
            hit = self.reason == r
            c._skip(int(at[int(hit.argmax())]), _REASONS[r], int(np.count_nonzero(hit)))

    def append(self, c: Collector, at: np.ndarray) -> None:
        """Append the kept events' slices (with the chunk's others, see Collector._add_slices) and flow events (after
        :meth:`tally`)."""
        keep = self.th >= 0
        if self.reason is not None:
            keep &= self.reason == 0
        if keep.all():
            keep = None
        ss, fs = self.ss, self.fs
        if len(ss):
            sev, ts, dur, scope = self.sev, self.ts, self.dur, self.scope
            if keep is not None:
                k = keep[ss]
                ss, sev, ts, dur = ss[k], list(compress(sev, k.tolist())), ts[k], dur[k]
                scope = None if scope is None else scope[k]
            th = self.th[ss]
            names = c._intern([e.name for e in sev], "[No name]")
            if scope is not None:  # instants on the global or a process's track (kept: no bad scope is left)
                for j in np.flatnonzero(scope).tolist():
                    if _text(sev[j].name) is None:
                        names[j] = None  # (their name is NULL, not "[No name]")
                th[scope == 1] = -1
                p = np.flatnonzero(scope == 2)
                if len(p):
                    keys = c.thread_keys
                    th[p] = [-2 - keys[t][0] for t in th[p].tolist()]
            c._add_slices([e.args for e in sev], ts, dur, th, names, c._intern([e.cat for e in sev], None), at[ss])
        if len(fs):
            fev, ts, fids = self.fev, self.f_ts, self.fids
            if keep is not None:
                k = keep[fs]
                fs, fev, ts, fids = fs[k], list(compress(fev, k.tolist())), ts[k], fids[k]
            nf = len(fs)
            if not nf:
                return
            c.f_ts.frombytes(ts.tobytes())
            c.f_idx.frombytes(at[fs].astype(np.int64).tobytes())
            c.f_kind.frombytes((self.code[fs] - 2).astype(np.int8).tobytes())
            c.f_enc.frombytes(np.array([e.bp == "e" for e in fev], dtype=np.int8).tobytes())
            c.f_th.frombytes(self.th[fs].astype(np.int64).tobytes())
            c.f_id.frombytes(fids.tobytes())
            texts = zip(c._intern([e.cat for e in fev], None), c._intern([e.name for e in fev], None))
            c.f_text.frombytes(np.fromiter(map(c.flow_texts.setdefault, texts, count(c.n_texts)), np.int64,
                                           nf).tobytes())
            c.n_texts += nf


def _scopes(values: list) -> np.ndarray:
    """Each instant's _SCOPE code from its ``s``."""
    try:
        return np.fromiter(map(_SCOPE.get, values, repeat(_BAD_SCOPE)), np.int8, len(values))
    except TypeError:  # an unhashable scope (a list or an object)
        return np.fromiter((_SCOPE.get(v, _BAD_SCOPE) if v is None or type(v) is str else _BAD_SCOPE for v in values),
                           np.int8, len(values))


def _lookup(index: dict, pids: list, tids: list) -> np.ndarray:
    """The thread index of each (pid, tid) (not empty) that ``index`` has, -1 for the others (nothing is made).

    Integer ids: one lookup per run of equal (pid, tid) (equal numbers are equal keys of the index)."""
    get = index.get
    if set(map(type, pids)) <= _INT_BOOL and set(map(type, tids)) <= _INT_BOOL:
        try:
            p, t = np.array(pids, dtype=np.int64), np.array(tids, dtype=np.int64)
        except OverflowError:
            p = t = None
        if p is not None:
            starts = [0, *(np.flatnonzero((p[1:] != p[:-1]) | (t[1:] != t[:-1])) + 1).tolist()]
            found = [get((pids[i], tids[i]), -1) for i in starts]
            return np.repeat(np.array(found, np.int64), np.diff([*starts, len(pids)]))
    keys = list(zip(pids, tids))
    try:
        return np.fromiter(map(get, keys, repeat(-1)), np.int64, len(keys))
    except TypeError:  # ids that cannot be a key (a list, an object)
        out = []
        for k in keys:
            try:
                out.append(get(k, -1))
            except TypeError:
                out.append(-1)
        return np.array(out, np.int64)


def _x_reasons(ts_st: np.ndarray | None, dur_st: np.ndarray | None, n: int) -> np.ndarray:
    """Each X event's skip reason code from the states of its ts and dur (the checks in the order of the module
    docstring: a later assignment is an earlier check)."""
    zero = np.zeros(n, np.int8)
    ts_st = zero if ts_st is None else ts_st
    dur_st = zero if dur_st is None else dur_st
    r = np.zeros(n, np.int8)
    r[(ts_st == _OUT) | (dur_st == _OUT)] = _R_RANGE
    r[dur_st == _NEG] = _R_X_NEG
    r[dur_st == _NAN] = _R_X_DUR
    r[ts_st == _NAN] = _R_X_TS
    return r


def _ns_values(values: list, signed: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """JSON µs values -> int64 ns (as to_ns reads them; 0 where unusable), and each value's state (None when all are
    _OK): _NAN not a number; _OUT outside (-2**62, 2**62) ns (``signed``) or >= 2**62 ns; _NEG (not ``signed``: a
    duration) < 0."""
    a = _ns_column(values, signed)
    if a is not None:
        return a, None
    ns, st = [], []
    for v in values:  # (a column with an unusable value: one at a time)
        x = v * 1000 if type(v) is int else to_ns(v)
        if x is None:
            ns.append(0)
            st.append(_NAN)
        elif not signed and x < 0:
            ns.append(0)
            st.append(_NEG)
        elif x >= _TS_LIMIT or (signed and x <= -_TS_LIMIT):
            ns.append(0)
            st.append(_OUT)
        else:
            ns.append(x)
            st.append(_OK)
    return np.array(ns, np.int64), np.array(st, np.int8)


def _ns_column(values: list, signed: bool) -> np.ndarray | None:
    """_ns_values's ns when every value is usable, else None (the common cases with one conversion each)."""
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


def _take(seq: list, idx: np.ndarray):
    """seq[i] for each i of idx (not empty), as a sequence."""
    if len(idx) == 1:
        return [seq[int(idx[0])]]
    return itemgetter(*idx.tolist())(seq)


def _text(v: Any) -> Any:
    """A name/category as TP stores it: strings as they are, "" and non-strings as NULL."""
    if type(v) is str:
        return v or None
    return None


def _slice_name(v: Any) -> str:
    """TP names a thread slice without a (non-empty string) name "[No name]"."""
    return v if type(v) is str and v else "[No name]"
