"""JSON bytes -> a flat list of typed events, without a Python dict per event.

``msgspec`` decodes each event into a small ``gc=False`` Struct; ``args`` stays a
``msgspec.Raw`` (a zero-copy slice of the input), so arguments cost nothing until a
query asks for them. JSON floats reach us as their text (``float_hook=str``) so that
absolute epoch timestamps keep their nanoseconds.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec
import numpy as np

from ..errors import TraceFormatError


class Event(msgspec.Struct, gc=False):
    """One Chrome trace event; every field is optional and loosely typed on purpose.

    (Fields in the order Kineto writes them, which makes msgspec's key lookup a little faster.)
    """

    ph: Any = None
    id: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.Raw()
    bp: Any = None
    s: Any = None


class _RawTrace(msgspec.Struct, gc=False):
    traceEvents: msgspec.Raw = msgspec.Raw()  # noqa: N815


_RAW_DECODER = msgspec.json.Decoder(_RawTrace | list[msgspec.Raw])
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_BATCH_DECODER = msgspec.json.Decoder(list[Event], float_hook=str)
_ONE_DECODER = msgspec.json.Decoder(Event, float_hook=str)
BATCH = 16384


def split_events(data: bytes | bytearray, source: str) -> list[msgspec.Raw]:
    """The trace's events as zero-copy raw JSON slices (an object with traceEvents, or a bare list).

    Raises TraceFormatError for anything that is not such a document.
    """
    try:
        doc = _RAW_DECODER.decode(data)
    except msgspec.ValidationError:
        raise TraceFormatError(f"{source}: top level must be a JSON object with 'traceEvents' "
                               "or a list of events") from None
    except msgspec.DecodeError as e:
        raise TraceFormatError(f"{source} is not valid JSON: {_short(e)}") from None
    except RecursionError:
        raise TraceFormatError(f"{source} nests JSON arrays/objects too deeply to be a trace") from None
    if isinstance(doc, list):
        return doc
    if not len(doc.traceEvents) or bytes(doc.traceEvents) == b"null":
        raise TraceFormatError(f"{source} is a JSON object without a 'traceEvents' list; "
                               "expected a Chrome/Kineto trace")
    try:
        return _RAW_LIST_DECODER.decode(doc.traceEvents)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise TraceFormatError(f"{source}: 'traceEvents' must be a list of events") from None
    except RecursionError:
        raise TraceFormatError(f"{source} nests JSON arrays/objects too deeply to be a trace") from None


class NotStreamable(Exception):
    """The document is not a plain ``{... "traceEvents": [...] ...}`` / ``[...]`` that can be split while read."""


_WS = b" \t\r\n"
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|([\[\]{}])', re.S)  # a JSON string, or a bracket (group 1)
_CUT_TRIES = 16
_PIECE = 1 << 20  # bytes of JSON decoded into events at a time by stream_typed


def stream_events(chunks):
    """Split the trace's event list into raw JSON slices while its bytes arrive; see :func:`_stream`."""
    for raws, _events in _stream(chunks, False):
        yield raws


def stream_typed(chunks):
    """Like :func:`stream_events`, but yields ``(raws, None)`` or ``(None, events)``: a piece of the list that
    decodes whole as events comes back already decoded (the same ``Event`` values :func:`iter_batches` gives for
    its raw slices), so the common case parses each byte once. A chunk read is decoded a piece of about
    ``_PIECE`` bytes at a time (so its events are still in the CPU's cache when the caller goes through them); where
    a chunk has no valid cut near that size, the cuts are those of stream_events.
    """
    return _stream(chunks, True)


def _stream(chunks, typed: bool):
    """Split the trace's event list into raw JSON slices while its bytes arrive (``chunks``: an iterator).

    Yields lists of msgspec.Raw, in file order, whose concatenation is exactly what
    :func:`split_events` returns for the whole document; only about one chunk is held at a time.
    A cut is made after a ``},`` once ``[`` + the bytes up to it + ``]`` decode as a list: that holds
    only where the ``},`` ends a top-level event (inside a string or a nested value the brackets
    cannot balance). At the end, the list's closing bracket is found by counting brackets outside strings
    (:func:`_list_end`); the list up to it must decode, and so must the document around the list (``head`` + ``[]``
    + tail) on its own.

    Raises NotStreamable for anything else (invalid JSON, no ``traceEvents`` list, duplicate keys...):
    the caller then reads the whole document the ordinary way, which reports the error.
    """
    it = iter(chunks)
    buf = bytearray()
    eof = False

    def more() -> bool:
        nonlocal eof
        for c in it:
            if c:
                buf.extend(c)
                return True
        eof = True
        return False

    # 1. the start of the event list
    while not buf.lstrip(_WS) and more():
        pass
    body = buf.lstrip(_WS)
    if not body:
        raise NotStreamable("empty")
    head: bytes | None = None
    if body[:1] == b"[":
        pos = len(buf) - len(body) + 1
    elif body[:1] == b"{":
        while (i := buf.find(b'"traceEvents"')) < 0:
            if len(buf) > (64 << 20) or not more():
                raise NotStreamable("no traceEvents key")
        j = i + len(b'"traceEvents"')
        while True:
            rest = bytes(buf[j:j + 256]).lstrip(_WS)
            if rest[:1] == b":" and rest[1:].lstrip(_WS)[:1] == b"[":
                break
            if len(buf) - j > 256 or not more():
                raise NotStreamable("traceEvents is not a list")
        head = bytes(buf[:i])
        _check_doc(head, None)
        pos = buf.index(b"[", j) + 1
    else:
        raise NotStreamable("not an object or a list")
    del buf[:pos]
    # 2. the events, a chunk at a time (typed: a piece of about _PIECE bytes at a time, see stream_typed)
    cuts = 0
    lo = 0  # buf[:lo] is yielded already (taken off buf once per chunk read, not once per piece)

    def cut_before(limit: int):
        """The events of buf[lo:] before the last valid cut below ``limit`` (typed or raw, as ``_stream`` yields
        them), with ``lo`` moved past them; None if none of the last _CUT_TRIES ``},`` below it is a valid cut."""
        nonlocal cuts, lo
        cut = limit
        for _ in range(_CUT_TRIES):
            cut = buf.rfind(b"},", lo, cut)
            if cut < 0:
                return None
            with memoryview(buf) as view:
                text = b"".join((b"[", view[lo:cut + 1], b"]"))
            if typed:
                # A list that decodes as events is valid JSON, so the raw split below would cut here too.
                try:
                    events = _BATCH_DECODER.decode(text)
                except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                    events = None
                if events is not None:
                    lo = cut + 2
                    cuts += 1
                    return None, events
            try:
                raws = _RAW_LIST_DECODER.decode(text)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                continue
            lo = cut + 2
            cuts += 1
            return raws, None
        return None

    while not eof:
        del buf[:lo]
        lo = 0
        more()
        if eof:
            break
        while True:
            piece = typed and len(buf) - lo > 2 * _PIECE
            got = cut_before(lo + _PIECE) if piece else None
            if got is None:
                piece = False
                got = cut_before(len(buf))
            if got is not None:
                yield got
                del got  # the caller's batch is freed as soon as the caller drops it (before the next decode)
            if not piece:
                break
    del buf[:lo]
    # 3. the last events, the closing bracket and what follows the list
    text = b"[" + buf
    buf.clear()
    end = len(text) if head is None else _list_end(text)  # (a bare list: nothing may follow it)
    if end is None:
        raise NotStreamable("the event list does not close")
    try:
        raws = _RAW_LIST_DECODER.decode(text[:end])
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise NotStreamable("bad end") from None
    if cuts and not raws:
        raise NotStreamable("a comma before the closing bracket")  # [..., {...},] is not JSON
    if head is not None:
        _check_doc(head, bytes(text[end:]))
    yield raws, None


def _list_end(text: bytes) -> int | None:
    """The index just after the bracket that closes the list ``text`` starts with, counting brackets outside strings;
    None if it does not close. Only a proposal: the caller decodes the list up to there and the document around it,
    so that invalid JSON is refused whatever this finds."""
    depth = 0
    for m in _TOKEN.finditer(text):
        b = m.group(1)
        if b is None:
            continue
        depth += 1 if b in b"[{" else -1
        if depth == 0:
            return m.end()
    return None


def _check_doc(head: bytes, tail: bytes | None) -> None:
    """``head`` + an empty traceEvents list + ``tail`` must be a valid document (tail None = not read yet)."""
    if tail is not None and b'"traceEvents"' in tail:
        raise NotStreamable("traceEvents twice")
    doc = head + b'"traceEvents":[]' + (b"}" if tail is None else tail)
    try:
        d = _RAW_DECODER.decode(doc)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise NotStreamable("invalid document around traceEvents") from None
    if isinstance(d, list) or bytes(d.traceEvents) != b"[]":
        raise NotStreamable("unexpected document")


def iter_batches(raws: list[msgspec.Raw], size: int = BATCH, base: int = 0):
    """Typed events, ``size`` at a time (so only one batch of Structs is alive at once).

    Entries that are not JSON objects (or nest too deeply) come back as Event(ph=None).
    ``base`` is the file index of ``raws[0]``.
    """
    for start in range(0, len(raws), size):
        chunk = raws[start:start + size]
        try:
            yield base + start, _BATCH_DECODER.decode(b"[" + b",".join(chunk) + b"]")
            continue
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            pass
        out: list[Event] = []
        for raw in chunk:  # slow path: find and drop the bad entries one by one
            try:
                out.append(_ONE_DECODER.decode(raw))
            except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                out.append(Event(ph=None))  # counted by the builder as missing_or_bad_ph
        yield base + start, out


def _short(e: Exception) -> str:
    msg = str(e)
    return msg if len(msg) < 200 else msg[:200] + "..."


def ns_of_decimals(values: list[str]) -> np.ndarray | None:
    """to_ns of each value (int64), for values all written with exactly three decimals ("1234.567", "-0.250": how
    Kineto writes ts and dur); None if one of them is not (the caller then uses to_ns).

    Such a value, without its dot, is the ns value as an integer (to_ns truncates past the third decimal; here there is
    nothing past it). Checked on the values joined by commas: only ASCII digits, '.', ',' and '-'; one dot per value,
    three characters before its end; then int() (through numpy) refuses anything else ('-' not in front, no digits).
    """
    text = ",".join(values)
    if not text.isascii():
        return None
    raw = text.encode("ascii")
    if raw.translate(None, b"0123456789.,-"):
        return None
    b = np.frombuffer(raw, dtype=np.uint8)
    commas = np.flatnonzero(b == 44)
    dots = np.flatnonzero(b == 46)
    if len(commas) != len(values) - 1 or len(dots) != len(values) or dots[-1] != len(b) - 4 \
            or not (dots[:-1] == commas - 4).all():
        return None
    try:
        return np.array(text.replace(".", "").split(","), dtype=np.int64)
    except (ValueError, OverflowError):
        return None


def to_ns(v: Any) -> int | None:
    """A JSON µs value (int, or float/str as text) -> integer ns, the value its decimal digits state.

    The decimal digits are used as text (no double rounding); digits past the third decimal
    are truncated toward zero. Returns None for anything that is not a finite number.
    """
    t = type(v)
    if t is int:
        return v * 1000
    if t is not str:
        return None
    i, dot, f = v.partition(".")
    if not v.isascii():
        return None
    if (f.isdigit() or (dot and not f)) and i and (i.isdigit() or (i[0] == "-" and i[1:].isdigit())):
        neg = i[0] == "-"
        ns = abs(int(i)) * 1000 + (int((f + "000")[:3]) if f else 0)
        return -ns if neg else ns
    if not dot and (i.isdigit() or (i[:1] == "-" and i[1:].isdigit())):
        return int(i) * 1000
    try:
        d = Decimal(v.strip())
    except (InvalidOperation, ValueError):
        return None
    if not d.is_finite() or abs(d) > Decimal(9) * 10 ** 15:
        return None
    return int(d * 1000)
