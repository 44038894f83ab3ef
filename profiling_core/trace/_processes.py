"""Some processes' events of a trace, as a trace of their own: one rank of a file that merged several ranks' traces.

Each event is copied as the bytes the file holds (no number is parsed and written again), in the file's order; the
document's other members (``deviceProperties``, the recording options, ``distributedInfo``...) are kept as they are.
"""
from __future__ import annotations

import contextlib
import functools
import numbers
import os

from ._source import read_trace_bytes

__all__ = ["same_pid", "write_without_processes"]


@functools.cache
def _codecs():
    """msgspec's decoders this module reads with, made at its first use (``import profiling_core.trace`` stays
    without msgspec and numpy)."""
    import msgspec

    class Pid(msgspec.Struct, gc=False):
        pid: object = None
        ph: object = None

    return (msgspec, msgspec.json.Decoder(dict[str, msgspec.Raw] | list[msgspec.Raw]),
            msgspec.json.Decoder(list[Pid]), msgspec.json.Decoder(Pid), msgspec.json.Encoder())


def _key(pid):
    """A pid as the rule compares it: an integer (bool aside) or a text; None for any other value."""
    if isinstance(pid, numbers.Integral) and not isinstance(pid, bool):
        return ("int", int(pid))
    return ("str", pid) if isinstance(pid, str) else None


def same_pid(a, b) -> bool:
    """Whether two pids name one process: the same integer (Python's or numpy's; true and 1.0 are none) or the same
    text (1 and "1" differ); anything else names no process."""
    k = _key(a)
    return k is not None and k == _key(b)


def write_without_processes(src: str | os.PathLike, dst: str | os.PathLike, pids,
                            max_bytes: int | None = None, keep=None, placed: dict | None = None) -> int:
    """Write to ``dst`` (plain JSON) the trace ``src`` less every event of the processes ``pids``.

    Each of ``pids`` is a process's pid as the file writes it (an integer or a text; 1 and "1" differ), or a tuple of
    the values one process may be written as (``(number, name)``). A text pid also stands for the number this
    project's reader gives it (``_ids.Ids``: 2**30 + its crc32), the pid the tables hold for its process. An event
    goes where its ``pid`` equals one of them, metadata events
    (``process_name``, ``thread_name``...) included; every other event stays, in the file's order, as its bytes: those
    of other processes, and those of none (the profiler's own ``Spans``/``Traces`` and its global instants, which no
    one rank owns). Returns how many events were kept.

    ``keep`` (the same form as ``pids``): the processes of the part the file is written for, where ``pids`` are the
    other parts' (the other ranks of a file that merged ranks' traces). The events of processes in neither (the
    profiler's own ``Spans``/``Traces`` and its overhead events on pid -1, one set per rank) then go with the part
    the file holds them in: the one whose events last came before them, or, before any part's, the first part's (a
    rank's trace ends with its profiler's own events, so a file that joined the ranks' traces one after the other
    holds each rank's after its other events). Where the kept part's events do not sit in one run (ranks merged event
    by event, or sorted by time), no place says whose they are: they all stay, and ``placed`` (a dict, where given)
    gets ``by_position`` False (True where they were placed).
    Raises ValueError where a process (no value of its tuple) is the pid of no event of the file, naming it, or where
    text pids that share such a number would go: what is left out would not be what was asked for (``dst`` is then
    removed); TraceFormatError for a file that is not a trace (a JSON object with a ``traceEvents`` list, or a list
    of events), TraceTooLargeError past ``max_bytes`` decompressed (None: ``trace_cap``'s), OSError where ``dst``
    cannot be written.
    """
    from ._decode import NotStreamable
    asked = [tuple(w) if isinstance(w, tuple) else (w,) for w in pids]
    dropped = {_key(v) for w in asked for v in w} - {None}  # (a pid that is neither has no key: it stays)
    own = None if keep is None else {_key(v) for w in keep for v in (w if isinstance(w, tuple) else (w,))} - {None}
    whole = False
    try:
        for kept_keys in ((own, None) if own is not None else (None,)):
            rule = _Rule(dropped, kept_keys)
            try:
                kept = (_write_whole if whole else _write_streamed)(src, dst, max_bytes, rule)
            except NotStreamable:  # (a document the loader too reads whole: its errors are said there)
                whole = True
                rule = _Rule(dropped, kept_keys)
                kept = _write_whole(src, dst, max_bytes, rule)
            if rule.runs <= 1:  # (without kept_keys, runs stays 0)
                break
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(dst)  # (what was written of it is no trace)
        raise
    if placed is not None:
        placed["by_position"] = own is not None and rule.kept is not None
    absent, clash = rule.missing(asked)
    if absent or clash:
        os.unlink(dst)
        raise ValueError((
            f"no event has the pid of process{'es' if len(absent) > 1 else ''} "
            + ", ".join(" or ".join(repr(v) for v in w) for w in absent) if absent else
            "the text pids " + "; ".join(" and ".join(map(repr, t)) for t in clash) + " share the number a reader "
            "gives them") + ": what to leave out cannot be told apart from the rest")
    return kept


class _Rule:
    """Which events go, by their pid, decided once per distinct pid; and which pids the file wrote.

    With ``kept`` (the processes of the part kept), a process in neither set (the profiler's own ``Spans`` and
    ``Traces``, its overhead events on pid -1) has its events placed by the file's order: they go with the part whose
    events last came before them (before any, with the first part's), where the kept part's events sit in one run
    (``runs``: how many runs of the kept part's events the file holds)."""

    _GO, _STAY, _NONE = 1, 0, -1

    def __init__(self, dropped: set, kept: set | None = None) -> None:
        self.dropped = dropped
        self.kept = kept
        self.ints: dict = {}  # an integer pid: _GO, _STAY or _NONE (most events have one)
        self.texts: dict = {}  # a text pid: the same (the text, or the number a reader gives it)
        self.others: set = set()  # the other pids written, as keys
        self.side = None  # (with kept) whose events came last: _GO or _STAY; None before any
        self.lead: list = []  # (with kept) events of no part before the first part's: placed with it
        self.runs = 0

    def _of(self, keys) -> int:
        if any(k in self.dropped for k in keys):
            return self._GO
        if self.kept is None or any(k in self.kept for k in keys):
            return self._STAY
        return self._NONE

    def write(self, f, raws, pids, meta, kept: int) -> int:
        """Write the events ``raws`` (their ``pids``; ``meta``: whether each is metadata, ``"ph": "M"``) that stay
        to ``f``, comma-separated after ``kept`` written before; returns the new count. A metadata event (a trace
        names its processes and threads first, the GPUs it never used among them) places nothing."""
        from ._ids import Ids
        ints, texts = self.ints, self.texts
        go, stay = self._GO, self._STAY
        for e, pid, m in zip(raws, pids, meta):
            if type(pid) is int:
                what = ints.get(pid)
                if what is None:
                    what = ints[pid] = self._of((_key(pid),))
            elif type(pid) is str:
                what = texts.get(pid)
                if what is None:
                    what = texts[pid] = self._of((("str", pid), ("int", Ids().num(pid))))
            else:
                key = _key(pid)
                self.others.add(key)
                what = self._of((key,))
            if what < 0:  # an event of no part: where the file holds it
                if self.side is None:
                    self.lead.append(e)
                    continue
                what = self.side
            elif self.kept is not None and what != self.side and not m:
                if what == stay:
                    self.runs += 1
                if self.side is None and what == stay:
                    for b in self.lead:
                        f.write(b"," if kept else b"")
                        f.write(b)
                        kept += 1
                self.side, self.lead = what, []
            if what != go:
                f.write(b"," if kept else b"")
                f.write(e)
                kept += 1
        return kept

    def finish(self, f, kept: int) -> int:
        """Write what is left to place (events of no part in a file of no part's events: they stay)."""
        for b in self.lead:
            f.write(b"," if kept else b"")
            f.write(b)
            kept += 1
        self.lead = []
        return kept

    def missing(self, asked: list) -> tuple[list, list]:
        """(the processes asked for that no event has, the groups of text pids a reader numbers alike of which one
        would go)."""
        from ._ids import Ids
        numbered: dict = {}  # the number a reader gives each text pid: which texts share one
        for text in self.texts:
            numbered.setdefault(Ids().num(text), []).append(text)
        clash = [t for n, t in numbered.items() if len(t) > 1 and ("int", n) in self.dropped]
        written = (self.others | {("int", p) for p in self.ints} | {("str", t) for t in self.texts}
                   | {("int", n) for n in numbered})
        return [w for w in asked if not any(k is not None and k in written for k in map(_key, w))], clash


def _pids(raws: list) -> tuple[list, list]:
    """Each event's pid (None for an element that is not an object): one decode for the lot, one per event where
    that fails (an element that is no object; text that is not Unicode, read as the loader reads it)."""
    msgspec, _top, pids_of, _pid_of, _enc = _codecs()
    try:
        got = pids_of.decode(b"".join((b"[", b",".join(raws), b"]")))
        return [e.pid for e in got], [e.ph == "M" for e in got]
    except (msgspec.ValidationError, msgspec.DecodeError):
        return [_pid_or_none(e) for e in raws], [False] * len(raws)


def _write_streamed(src, dst, max_bytes, rule: _Rule) -> int:
    """The file written as the loader streams it (:func:`._decode.stream_events`: a chunk of events at a time, the
    document's bytes around its list kept as they are). NotStreamable where the loader reads it whole."""
    from ._decode import stream_events
    from ._source import STREAM_CHUNK, iter_trace_chunks
    around: dict = {}
    kept = 0
    with open(dst, "wb") as f:
        started = False
        for raws in stream_events(iter_trace_chunks(src, max_bytes, STREAM_CHUNK), around=around):
            if not started:
                head = around["head"]
                f.write(b"[" if head is None else head + b'"traceEvents":[')
                started = True
            kept = rule.write(f, raws, *_pids(raws), kept)
        kept = rule.finish(f, kept)
        f.write(b"]" + around["tail"])
    return kept


def _write_whole(src, dst, max_bytes, rule: _Rule) -> int:
    """The file read whole, as the loader reads a document its splitter refuses (``_decode.split_events``: its
    errors for what is no trace, its reading of a lone surrogate escape); the document's other members re-encoded
    around the events' bytes."""
    from ._decode import repair_surrogates, split_events
    msgspec, top, _pids_of, _pid_of, encoder = _codecs()
    data = read_trace_bytes(src, max_bytes)
    events = split_events(data, os.fspath(src))
    try:
        doc = top.decode(data)
    except msgspec.DecodeError:  # (a lone surrogate escape, which split_events read as U+FFFD)
        doc = top.decode(repair_surrogates(data)[0])
    kept = 0
    with open(dst, "wb") as f:
        if isinstance(doc, list):
            f.write(b"[")
            kept = rule.finish(f, rule.write(f, events, *_pids(events), 0))
            f.write(b"]")
            return kept
        f.write(b"{")
        for i, (k, v) in enumerate(doc.items()):
            f.write((b"," if i else b"") + encoder.encode(k) + b":")
            if k == "traceEvents":
                f.write(b"[")
                kept = rule.finish(f, rule.write(f, events, *_pids(events), 0))
                f.write(b"]")
            else:
                f.write(v)
        f.write(b"}")
    return kept


def _pid_or_none(raw):
    """One event's pid: None where it is no object (no process's event: it stays, as the loader's to skip); text
    that is not Unicode is read as the loader reads it (U+FFFD)."""
    from ._decode import repair_surrogates, repair_utf8
    msgspec, _top, _pids_of, pid_of, _enc = _codecs()
    for text in (raw, repair_surrogates(repair_utf8(bytes(raw))[0])[0]):
        try:
            return pid_of.decode(text).pid
        except msgspec.ValidationError:
            return None
        except msgspec.DecodeError:
            continue
    return None
