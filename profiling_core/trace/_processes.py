"""Some processes' events of a trace, as a trace of their own: one rank of a file that merged several ranks' traces.

Each event is copied as the bytes the file holds (no number is parsed and written again), in the file's order; the
document's other members (``deviceProperties``, the recording options, ``distributedInfo``...) are kept as they are.
"""
from __future__ import annotations

import functools
import numbers
import os

from ..errors import TraceFormatError
from ._source import read_trace_bytes

__all__ = ["same_pid", "write_without_processes"]


@functools.cache
def _codecs():
    """msgspec's decoders this module reads with, made at its first use (``import profiling_core.trace`` stays
    without msgspec and numpy)."""
    import msgspec

    class Pid(msgspec.Struct, gc=False):
        pid: object = None

    return (msgspec, msgspec.json.Decoder(dict[str, msgspec.Raw] | list[msgspec.Raw]),
            msgspec.json.Decoder(list[msgspec.Raw]), msgspec.json.Decoder(list[Pid]), msgspec.json.Decoder(Pid),
            msgspec.json.Encoder())


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
                            max_bytes: int | None = None) -> int:
    """Write to ``dst`` (plain JSON) the trace ``src`` less every event of the processes ``pids``.

    Each of ``pids`` is a process's pid as the file writes it (an integer or a text; 1 and "1" differ), or a tuple of
    the values one process may be written as (``(number, name)``). A text pid also stands for the number this
    project's reader gives it (``_ids.Ids``: 2**30 + its crc32), the pid the tables hold for its process. An event
    goes where its ``pid`` equals one of them, metadata events
    (``process_name``, ``thread_name``...) included; every other event stays, in the file's order, as its bytes: those
    of other processes, and those of none (the profiler's own ``Spans``/``Traces`` and its global instants, which no
    one rank owns). Returns how many events were kept.
    Raises ValueError where a process (no value of its tuple) is the pid of no event of the file, naming it, or where
    text pids that share such a number would go: what is left out would not be what was asked for (``dst`` is then
    removed); TraceFormatError for a file that is not a trace (a JSON object with a ``traceEvents`` list, or a list
    of events), TraceTooLargeError past ``max_bytes`` decompressed (None: ``trace_cap``'s), OSError where ``dst``
    cannot be written.
    """
    from ._decode import repair_surrogates, repair_utf8
    from ._ids import Ids
    msgspec, top, list_of, pids_of, pid_of, encoder = _codecs()
    source = os.fspath(src)
    data = read_trace_bytes(src, max_bytes)
    data, _ = repair_utf8(data)
    doc = None
    for attempt in (0, 1):
        try:
            doc = top.decode(data)
            break
        except msgspec.ValidationError:  # (a DecodeError too: asked first)
            raise TraceFormatError(f"{source}: top level must be a JSON object with 'traceEvents' or a list of "
                                   "events") from None
        except msgspec.DecodeError as e:
            if attempt:
                raise TraceFormatError(f"{source} is not valid JSON: {e}") from None
            data, _ = repair_surrogates(data)  # (as the loader reads a lone surrogate escape: U+FFFD)
    raw = doc if isinstance(doc, list) else doc.get("traceEvents")
    try:
        events = raw if isinstance(doc, list) else list_of.decode(raw) if raw is not None else None
    except (msgspec.ValidationError, msgspec.DecodeError):
        events = None
    if events is None:
        raise TraceFormatError(f"{source}: 'traceEvents' must be a list of events")
    asked = [tuple(w) if isinstance(w, tuple) else (w,) for w in pids]
    dropped = {_key(v) for w in asked for v in w} - {None}  # (an event whose pid is neither has no key: it stays)
    try:  # every event's pid in one pass; one event at a time where some element is not an object
        found = [e.pid for e in pids_of.decode(raw if not isinstance(doc, list) else data)]
    except (msgspec.ValidationError, msgspec.DecodeError):
        found = [_pid_or_none(pid_of, msgspec, e) for e in events]
    kept = 0
    ints: dict = {}  # an integer pid: whether its events go, decided once per distinct pid (most events have one)
    texts: dict = {}  # the same for a text pid
    others: set = set()  # the other pids written, as keys
    with open(dst, "wb") as f:  # (written a piece at a time: no second copy of the file in memory)
        def write_events() -> None:
            nonlocal kept
            f.write(b"[")
            for e, pid in zip(events, found):
                if type(pid) is int:
                    goes = ints.get(pid)
                    if goes is None:
                        goes = ints[pid] = _key(pid) in dropped
                elif type(pid) is str:
                    goes = texts.get(pid)
                    if goes is None:  # (the text, or the number a reader gives it)
                        goes = texts[pid] = ("str", pid) in dropped or ("int", Ids().num(pid)) in dropped
                else:
                    key = _key(pid)
                    others.add(key)
                    goes = key in dropped
                if not goes:
                    f.write(b"," if kept else b"")
                    f.write(e)
                    kept += 1
            f.write(b"]")
        if isinstance(doc, list):
            write_events()
        else:
            f.write(b"{")
            for i, (k, v) in enumerate(doc.items()):
                f.write((b"," if i else b"") + encoder.encode(k) + b":")
                if k == "traceEvents":
                    write_events()
                else:
                    f.write(v)
            f.write(b"}")
    numbered: dict = {}  # the number a reader gives each text pid: which texts share one
    for text in texts:
        numbered.setdefault(Ids().num(text), []).append(text)
    clash = [t for n, t in numbered.items() if len(t) > 1 and ("int", n) in dropped]
    written = others | {("int", p) for p in ints} | {("str", t) for t in texts} | {("int", n) for n in numbered}
    absent = [w for w in asked if not any(k is not None and k in written for k in map(_key, w))]
    if absent or clash:
        os.unlink(dst)
        raise ValueError((
            f"no event has the pid of process{'es' if len(absent) > 1 else ''} "
            + ", ".join(" or ".join(repr(v) for v in w) for w in absent) if absent else
            "the text pids " + "; ".join(" and ".join(map(repr, t)) for t in clash) + " share the number a reader "
            "gives them") + ": what to leave out cannot be told apart from the rest")
    return kept


def _pid_or_none(pid_of, msgspec, raw):
    try:
        return pid_of.decode(raw).pid
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None  # (not an object: no process's event; it stays, as the loader's to skip)
