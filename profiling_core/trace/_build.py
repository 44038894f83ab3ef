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
    flows: list[tuple]          # (id, slice_out, slice_in)
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
                if self.thread(e.pid, e.pid) is not None:
                    pass
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
