"""The typed tables every analysis reads, as columns in memory (numpy arrays), the way trace_processor holds them.

trace_processor keeps each table column by column in memory and lets SQLite read them through virtual tables. The
mirror does the same in two halves: the loader builds these columns, and a second thread copies them into the SQLite
file that answers SQL (``_mirror.py``). The perfetto engine fills the same columns from a few extraction queries
(``_extract.py``). The analyses read only these (``TraceSession.tables``), never SQL, so each exists once for both
engines.

Every value here is what trace_processor's tables hold: ``slice`` in id order (ids are 0..n-1), ``flow`` in id
order, ``thread``/``process`` rows by utid/upid.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

import numpy as np


class TextColumn:
    """A text column as codes into its distinct values, the way trace_processor's string pool holds names: row i is
    ``uniq[codes[i]]``, None where the code is -1; the distinct values in order of first appearance (the codes
    ``pd.factorize`` gives), codes as int32. A 225k-slice trace has ~1k distinct names: 0.9 MiB of codes instead of a
    1.7 MiB list, and the analyses take the codes as they are."""

    __slots__ = ("codes", "uniq", "lookup")

    def __init__(self, codes: np.ndarray, uniq: list) -> None:
        self.codes, self.uniq = codes, uniq
        self.lookup = np.empty(len(uniq) + 1, dtype=object)  # indexed by a code: its value (code -1, NULL: None)
        self.lookup[:] = [*uniq, None]

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows) -> np.ndarray:
        """The values of these rows (a slice or an index array) as an object array."""
        return self.lookup[self.codes[rows]]

    def tolist(self) -> list:
        return self[:].tolist()

    def __eq__(self, other) -> bool:
        return isinstance(other, TextColumn) and self.uniq == other.uniq and np.array_equal(self.codes, other.codes)

    __hash__ = None

    @classmethod
    def of(cls, values, order: np.ndarray) -> "TextColumn":
        """``[values[i] for i in order]`` (a list or an object array of str, None for NULL; any other value, a NaN,
        counts as NULL) coded by :func:`first_seen_codes`: equal strings get one code whether they are one object
        (the mirror's loader interns them) or not (each of perfetto's result cells is a new one)."""
        if len(order) == 0:
            return cls(np.zeros(0, dtype=np.int32), [])
        cells = np.empty(len(values), dtype=object)
        cells[:] = values
        codes, uniq = first_seen_codes(cells[order], np.int32)
        text = [type(v) is str for v in uniq]
        if all(text):
            return cls(codes, uniq)
        to = np.cumsum(text, dtype=np.int32) - 1  # the other values are NULL: code -1, the later codes moved down
        to[~np.array(text)] = -1
        return cls(to[codes], [v for v, t in zip(uniq, text) if t])


def first_seen_codes(cells, dtype=np.int64) -> tuple[np.ndarray, list]:
    """Each cell's code (an integer array of ``dtype``) into the distinct cells, and those cells in the order they
    first come (the codes ``pd.factorize`` gives). Equal cells share a code by a dict's equality (``1 == 1.0``; a
    NaN matches only itself). The distinct cells are found by ``dict.fromkeys`` and each cell's code is looked up in
    C, so Python runs once per distinct value, not per cell; each string's hash is the one Python keeps with it
    (pandas' factorize reads every string's characters again; docs/BENCHMARKS.md has the figures). Raises TypeError
    on a cell that cannot be a dict key (a list)."""
    code = dict.fromkeys(cells)
    uniq = list(code)
    code.update(zip(uniq, range(len(uniq))))
    return np.fromiter(map(code.__getitem__, cells), dtype=dtype, count=len(cells)), uniq


class ArgsReader(Protocol):
    """The arguments of slices, as the analyses read them: ``get(name, arg_set_ids)`` gives ``{arg_set_id: value}``
    of the top-level argument ``name`` for those arg sets that have it; ``get_many(names, arg_set_ids)`` the same for
    several names of the same arg sets (a memory event's six, a GEMM's shapes and types) in one pass.

    A value is what trace_processor's ``args`` table can show of it (:func:`visible_arg`): a number or a string;
    a boolean as a bool (the table's ``bool`` value type; Python counts it as 0/1, so a reader that wants a number
    rejects it by its type); an array as a list of such values (nested arrays as lists), where a null element takes no
    position (trace_processor skips nulls), an empty array or an object inside it, which have no row of their own
    there, reads as an empty list, and trailing ones are dropped. An argument with nothing to show (null, an object,
    an empty array) is left out."""

    def get(self, name: str, arg_set_ids: Iterable[int]) -> dict: ...

    def get_many(self, names: Iterable[str], arg_set_ids: Iterable[int]) -> dict[str, dict]:
        """``{name: get(name, arg_set_ids)}`` for each name, each arg set read once for all of them."""
        ...


ABSENT = object()


def visible_arg(value):
    """A decoded JSON argument as trace_processor's ``args`` table shows it (see :class:`ArgsReader`); ABSENT when it
    has no row there."""
    t = type(value)
    if t is dict or value is None:
        return ABSENT
    if t is list:
        items = [visible_arg(x) for x in value if x is not None]
        while items and (items[-1] is ABSENT or items[-1] == []):
            items.pop()
        if not items:
            return ABSENT
        return [[] if x is ABSENT else x for x in items]
    return value


@dataclass(frozen=True)
class TraceTables:
    """Read-only columns of trace_processor's ``slice``, ``flow``, ``thread``, ``process`` and ``thread_track``
    tables, and the slices' arguments: what every analysis reads, whichever engine holds the trace (the mirror builds
    them while it loads; other engines run ``_extract.EXTRACTION_QUERIES``).

    Attributes:
        ts, dur, track_id, depth: ``slice`` columns (int64 ns / ids), row i = slice id i.
        parent_id, arg_set_id: ``slice`` columns, -1 where SQL has NULL.
        name, category: ``slice`` columns as :class:`TextColumn` (codes into the distinct values, like
            trace_processor's string pool; ``.tolist()`` gives the values, None where SQL has NULL).
        track_utid: per track id, its thread's utid (``thread_track.utid``), -1 for tracks that are not a thread's.
        flow_out, flow_in: ``flow.slice_out`` / ``flow.slice_in`` in flow id order.
        threads: ``thread`` rows ``(utid, tid, name, upid, is_main_thread)``.
        processes: ``process`` rows ``(upid, pid, name)``.
        args: an :class:`ArgsReader` of the slices' ``arg_set_id``.
    """

    ts: np.ndarray
    dur: np.ndarray
    track_id: np.ndarray
    depth: np.ndarray
    parent_id: np.ndarray
    arg_set_id: np.ndarray
    name: TextColumn
    category: TextColumn
    track_utid: np.ndarray
    flow_out: np.ndarray
    flow_in: np.ndarray
    threads: list[tuple]
    processes: list[tuple]
    args: ArgsReader

    def freeze(self) -> None:
        """Make the numpy columns read-only (the analyses share them)."""
        for a in (self.ts, self.dur, self.track_id, self.depth, self.parent_id, self.arg_set_id, self.flow_out,
                  self.flow_in, self.track_utid):
            a.flags.writeable = False

    @classmethod
    def from_model(cls, m, args: ArgsReader) -> TraceTables:
        track_utid = np.array([-1 if utid is None else utid for _id, _n, _k, utid, _u in m.tracks], dtype=np.int64)
        t = cls(ts=m.ts, dur=m.dur, track_id=m.track_id, depth=m.depth, parent_id=m.parent_id,
                arg_set_id=m.arg_set_id, name=m.name, category=m.category, track_utid=track_utid,
                flow_out=m.flow_out, flow_in=m.flow_in, threads=m.threads,
                processes=[(u, pid, name) for u, pid, name, _syn in m.processes], args=args)
        t.freeze()
        return t

    @property
    def slice_count(self) -> int:
        return len(self.ts)
