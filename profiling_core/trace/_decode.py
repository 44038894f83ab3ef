"""JSON bytes -> a flat list of typed events, without a Python dict per event.

``msgspec`` decodes each event into a small ``gc=False`` Struct; ``args`` stays a
``msgspec.Raw`` (a zero-copy slice of the input), so arguments cost nothing until a
query asks for them. JSON floats reach us as their text (``float_hook=str``) so that
absolute epoch timestamps keep their nanoseconds.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

from ..errors import TraceFormatError


class Event(msgspec.Struct, gc=False):
    """One Chrome trace event; every field is optional and loosely typed on purpose."""

    ph: Any = None
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    bp: Any = None
    s: Any = None
    args: msgspec.Raw = msgspec.Raw()


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


def iter_batches(raws: list[msgspec.Raw], size: int = BATCH):
    """Typed events, ``size`` at a time (so only one batch of Structs is alive at once).

    Entries that are not JSON objects (or nest too deeply) come back as Event(ph=None).
    """
    for start in range(0, len(raws), size):
        chunk = raws[start:start + size]
        try:
            yield start, _BATCH_DECODER.decode(b"[" + b",".join(chunk) + b"]")
            continue
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            pass
        out: list[Event] = []
        for raw in chunk:  # slow path: find and drop the bad entries one by one
            try:
                out.append(_ONE_DECODER.decode(raw))
            except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                out.append(Event(ph=None))  # counted by the builder as missing_or_bad_ph
        yield start, out


def _short(e: Exception) -> str:
    msg = str(e)
    return msg if len(msg) < 200 else msg[:200] + "..."


def to_ns(v: Any) -> int | None:
    """A JSON µs value (int, or float/str as text) -> integer ns, exactly like trace_processor.

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
