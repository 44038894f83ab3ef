"""pid, tid and flow id values as a trace writes them -> the numbers trace_processor keys them by.

Chrome JSON allows anything in these fields; Kineto writes integers, strings ("Spans", "stream 7") and negative or
huge numbers. trace_processor's reading of each (docs/SQL.md, "Rules" and "Synthetic pids and tids"):

- an integer pid/tid is taken as an unsigned 32-bit number: a pid outside that range is 0, such a tid (Kineto's
  negative GPU lane tids) is the pid's main thread, and so is tid 0;
- a string pid/tid gets a stable synthetic number (ours: 2**30 + crc32, see :class:`Ids`); a string tid also names
  its thread;
- a missing one is 0; anything else (a float, a bool, a list) is not an id, and the event is skipped;
- a flow id is a number (as uint64) or a string read as hex.
"""
from __future__ import annotations

import zlib
from typing import Any

import numpy as np

_U32 = 1 << 32
_U64 = 0xFFFFFFFFFFFFFFFF
_INT = {int}


class Ids:
    """pid/tid values -> numbers; each distinct string gets 2**30 + its crc32 (low 30 bits), the next free number on a
    collision (so the first string seen keeps its number)."""

    def __init__(self) -> None:
        self._syn: dict[str, int] = {}
        self._used: set[int] = set()

    def num(self, v: Any) -> int | None:
        """The number of a pid/tid value; None if it is not an id (see :func:`id_ok`)."""
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


def id_ok(v: Any) -> bool:
    """Whether :meth:`Ids.num` gives a number for v (an int of less than 62 bits, None or a string)."""
    t = type(v)
    return (t is int and -(1 << 62) < v < (1 << 62)) or v is None or t is str


def thread_numbers(pid: Any, tid: Any, p: int, q: int) -> tuple[int, int]:
    """(pid, tid) numbers of a thread as trace_processor keys it, from the written values and their :meth:`Ids.num`:
    an integer pid outside uint32 is 0 (Kineto's -1 "overhead" events); an integer tid outside uint32, or tid 0, is
    the pid (the process's main thread)."""
    if type(pid) is int and not 0 <= p < _U32:
        p = 0
    if (type(tid) is int and not 0 <= q < _U32) or q == 0:
        q = p
    return p, q


def flow_id(v: Any) -> int | None:
    """trace_processor's v1 flow id: a number (as uint64), or a string read as hex; None for anything else."""
    if type(v) is int:
        return v & _U64
    if type(v) is str:
        try:
            return int(v, 16) & _U64
        except ValueError:
            return None
    return None


def flow_ids(ids: list) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`flow_id` of each value as uint64 (0 where it has none), and where it has none (a bool mask; None when
    every value has one)."""
    if set(map(type, ids)) == _INT:  # (the common case: one conversion)
        try:
            a = np.array(ids, dtype=np.int64)
        except OverflowError:  # ids of 2**63 and more
            a = None
        if a is not None and a.min() >= 0:
            return a.view(np.uint64), None
    out = [v & _U64 if type(v) is int else flow_id(v) for v in ids]
    if None not in out:
        return np.array(out, dtype=np.uint64), None
    bad = np.array([v is None for v in out])
    return np.array([0 if v is None else v for v in out], dtype=np.uint64), bad
