"""JSON bytes -> a flat list of typed events, without a Python dict per event.

``msgspec`` decodes each event into a small ``gc=False`` Struct; ``args`` stays a
``msgspec.Raw`` (a zero-copy slice of the input), so arguments cost nothing until a
query asks for them. JSON floats reach us as their text (``float_hook=str``) so that
absolute epoch timestamps keep their nanoseconds.
"""
from __future__ import annotations

import json
import math
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
    deviceProperties: msgspec.Raw = msgspec.Raw()  # noqa: N815
    # the options torch.profiler recorded with, which it writes at the top level when on ("profile_memory": 1)
    record_shapes: Any = None
    profile_memory: Any = None
    with_stack: Any = None
    with_flops: Any = None
    with_modules: Any = None


RECORDING_OPTIONS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules")
"""The options of ``torch.profiler.profile`` a Kineto trace says it was recorded with: torch writes each one that was
on at the document's top level (``"profile_memory": 1``) and leaves out those that were off."""


def recording_options(doc: "_RawTrace") -> list[str]:
    """The :data:`RECORDING_OPTIONS` the document says were on (the value 1 or true; any other value says nothing)."""
    return [k for k in RECORDING_OPTIONS if getattr(doc, k) is True or (type(getattr(doc, k)) is int
                                                                          and getattr(doc, k) == 1)]


class _Device(msgspec.Struct, gc=False):
    id: Any = None
    name: Any = None
    computeMajor: Any = None  # noqa: N815
    computeMinor: Any = None  # noqa: N815


_DEVICES_DECODER = msgspec.json.Decoder(list[_Device])
MAX_DEVICES = 256


def devices_of(raw: msgspec.Raw) -> list[dict]:
    """A Kineto trace's ``deviceProperties`` (the GPUs it ran on) as ``[{"id", "name", "compute_capability"}]``:
    ids that are integers, names that are text (at most 200 characters), a compute
    capability "major.minor" where both are integers; at most :data:`MAX_DEVICES`. ``[]`` where the trace has none or
    the field is not a list of objects (it is metadata: never a reason to refuse a trace)."""
    if not len(raw) or bytes(raw).strip() == b"null":
        return []
    try:
        items = _DEVICES_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return []
    out = []
    for d in items[:MAX_DEVICES]:
        def _int(v):
            return v if isinstance(v, int) and not isinstance(v, bool) else None
        name = d.name[:200] if isinstance(d.name, str) else None
        major, minor = _int(d.computeMajor), _int(d.computeMinor)
        out.append({"id": _int(d.id), "name": name,
                    "compute_capability": f"{major}.{minor}" if major is not None and minor is not None else None})
    return out


_RAW_DECODER = msgspec.json.Decoder(_RawTrace | list[msgspec.Raw])
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_BATCH_DECODER = msgspec.json.Decoder(list[Event], float_hook=str)
_ONE_DECODER = msgspec.json.Decoder(Event, float_hook=str)
BATCH = 16384


def split_events(data: bytes | bytearray, source: str, stats=None) -> list[msgspec.Raw]:
    """The trace's events as zero-copy raw JSON slices (an object with traceEvents, or a bare list).

    Raises TraceFormatError for anything that is not such a document. Lone surrogate escapes are repaired first (see
    :func:`repair_surrogates`; counted in ``stats``, a LoadStats).
    """
    try:
        doc = _RAW_DECODER.decode(data)
    except msgspec.ValidationError:
        raise TraceFormatError(f"{source}: top level must be a JSON object with 'traceEvents' "
                               "or a list of events") from None
    except msgspec.DecodeError as e:
        fixed, n = repair_surrogates(data)
        if n:
            _count(stats, "lone_surrogate", n)
            return split_events(fixed, source, stats)
        raise TraceFormatError(f"{source} is not valid JSON: {_short(e)}") from None
    except RecursionError:
        raise TraceFormatError(f"{source} nests JSON arrays/objects too deeply to be a trace") from None
    if isinstance(doc, list):
        return doc
    if stats is not None:
        stats.devices = devices_of(doc.deviceProperties)
        stats.recorded_with = recording_options(doc)
    if not len(doc.traceEvents) or bytes(doc.traceEvents) == b"null":
        raise TraceFormatError(f"{source} is a JSON object without a 'traceEvents' list; "
                               "expected a Chrome/Kineto trace")
    try:
        return _RAW_LIST_DECODER.decode(doc.traceEvents)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise TraceFormatError(f"{source}: 'traceEvents' must be a list of events") from None
    except RecursionError:
        raise TraceFormatError(f"{source} nests JSON arrays/objects too deeply to be a trace") from None


# ---------------------------------------------------------------------------------------------- text repairs
# Text that is not valid Unicode is read with U+FFFD in its place (as Python's "replace" does), and each replacement is
# counted in LoadStats.repaired: "invalid_utf8" (a byte sequence that is not UTF-8), "lone_surrogate" (a \uD800-\uDFFF
# escape that is not half of a surrogate pair). msgspec refuses both; they are repaired only where a decode failed, so
# that valid traces never pay for the check.

_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def repair_surrogates(text):
    """``text`` (JSON) with each lone surrogate escape replaced by ``\\ufffd`` (the same length, so nothing moves), and
    how many there were; ``text`` itself when there are none."""
    lone = []
    high = -1  # a high surrogate escape waiting for its low half
    for m in _SURROGATE.finditer(text):
        p = k = m.start()
        while k and text[k - 1] == 0x5C:
            k -= 1
        if (p - k) & 1:
            continue  # an escaped backslash followed by "uD...": plain text
        is_high = text[p + 3] in b"89abAB"
        if high >= 0:
            if not is_high and p == high + 6:
                high = -1  # a pair
                continue
            lone.append(high)
            high = -1
        if is_high:
            high = p
        else:
            lone.append(p)
    if high >= 0:
        lone.append(high)
    if not lone:
        return text, 0
    out = bytearray(text)
    for p in lone:
        out[p:p + 6] = b"\\ufffd"
    return out, len(lone)


def repair_utf8(data: bytes):
    """``data`` with each byte sequence that is not UTF-8 replaced by U+FFFD, and how many there were; ``data`` itself
    when it is valid UTF-8."""
    if data.isascii():
        return data, 0
    try:
        str(data, "utf-8")
        return data, 0
    except UnicodeDecodeError:
        pass
    text = str(data, "utf-8", "replace")
    return text.encode("utf-8"), text.count("\ufffd") - bytes(data).count("\ufffd".encode("utf-8"))


def _count(stats, reason: str, n: int) -> None:
    if stats is not None:
        stats.repair(reason, n)


def _decode_piece(text: bytes, typed: bool, whole: bool, stats):
    """The JSON list ``text`` decoded: ``(None, events)`` (``typed`` and it decodes as events) or ``(raws, None)``;
    None if it is not a JSON list.

    Text that is not valid Unicode is repaired (and counted in ``stats``) where the list is known to be made of whole
    elements: lone surrogates when ``whole`` (they make any decode fail), invalid UTF-8 once the raw decode succeeded
    (only the typed decode checks it)."""
    text_error = False
    if typed:
        try:
            return None, _BATCH_DECODER.decode(text)
        except msgspec.DecodeError:
            text_error = True
        except (msgspec.ValidationError, RecursionError):
            pass
    try:
        raws = _RAW_LIST_DECODER.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        if whole:
            fixed, n = repair_surrogates(text)
            if n:
                _count(stats, "lone_surrogate", n)
                return _decode_piece(fixed, typed, whole, stats)
        return None
    if text_error:
        fixed, n = repair_utf8(text)
        if n:
            _count(stats, "invalid_utf8", n)
            return _decode_piece(fixed, typed, whole, stats)
    return raws, None


# --------------------------------------------------------------------------------------------------- streaming


class NotStreamable(Exception):
    """The document is not a plain ``{... "traceEvents": [...] ...}`` / ``[...]`` that can be split while read."""


_WS = b" \t\r\n"
_PIECE = 1 << 20  # bytes of JSON decoded into events at a time by stream_typed
_HEAD_MAX = 64 << 20  # bytes read looking for "traceEvents" before giving up on streaming
_SCAN_BLOCK = 1 << 20  # bytes the scanner looks at in one step (bounds its temporary arrays)


def stream_events(chunks, stats=None, around: dict | None = None):
    """Split the trace's event list into raw JSON slices while its bytes arrive; see :func:`_stream`. ``around``
    (a dict) is given the document's bytes around the list: ``head``, those before its ``"traceEvents"`` key (None
    for a bare list), set before the first slices are yielded, and ``tail``, those after the list's closing bracket,
    set before the last."""
    for raws, _events in _stream(chunks, False, stats, around):
        yield raws


def stream_typed(chunks, stats=None):
    """Like :func:`stream_events`, but yields ``(raws, None)`` or ``(None, events)``: a piece of the list that
    decodes whole as events comes back already decoded (the same ``Event`` values :func:`iter_batches` gives for
    its raw slices), so the common case parses each byte once. A chunk read is decoded a piece of about
    ``_PIECE`` bytes at a time (so its events are still in the CPU's cache when the caller goes through them).
    """
    return _stream(chunks, True, stats)


def _stream(chunks, typed: bool, stats, around: dict | None = None):
    """Split the trace's event list into raw JSON slices while its bytes arrive (``chunks``: an iterator).

    Yields lists of msgspec.Raw, in file order, whose concatenation is exactly what
    :func:`split_events` returns for the whole document; only about one chunk is held at a time (or one element, if an
    element is larger).

    The list is cut at a comma between two elements, and each piece (``[`` + the elements + ``]``) is decoded on its
    own: a cut stands only if its piece decodes as a list, which holds only where the comma separates two top-level
    elements (inside a string or a nested value the brackets cannot balance), so a wrong proposal is refused, never
    used. The proposals: first the last ``},`` below the piece's end (in a Kineto trace, the end of an event: that
    decode is the piece's decode, so it costs nothing extra); if that piece does not decode, the commas that
    :class:`_Scan` finds at the list's own level, in one pass over the bytes that carries on across chunks (so no byte
    is scanned twice, and a failed ``},`` guess is tried at most once per cut: the whole is linear in the input,
    whatever it holds). At the end, the list's closing bracket is the one the scan finds; the list up to it must
    decode, and so must the document around the list (``head`` + ``[]`` + tail) on its own.

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

    # 1. the start of the event list (leading whitespace is dropped as it comes, so a long run of it costs one pass)
    while not buf.lstrip(_WS):
        buf.clear()
        if not more():
            raise NotStreamable("empty")
    del buf[:len(buf) - len(buf.lstrip(_WS))]
    head: bytes | None = None
    if buf[:1] == b"[":
        pos = 1
    elif buf[:1] == b"{":
        key = b'"traceEvents"'
        seen = 0
        while (i := buf.find(key, seen)) < 0:
            seen = max(0, len(buf) - len(key) + 1)
            if len(buf) > _HEAD_MAX or not more():
                raise NotStreamable("no traceEvents key")
        j = i + len(key)
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
    if around is not None:
        around["head"] = head
    del buf[:pos]
    # 2. the events, a chunk at a time (typed: a piece of about _PIECE bytes at a time, see stream_typed)
    cuts = 0
    lo = 0  # buf[:lo] is yielded already (taken off buf once per chunk read, not once per piece)
    guess = True  # the next cut may be guessed at a "}," (false from a failed guess to the next cut)
    scan = _Scan()

    def take(k: int, sure: bool):
        """The elements of buf[lo:k] (k: a comma), decoded (typed or raw, as ``_stream`` yields them), with ``lo``
        moved past the comma; None if they do not decode and the comma was a guess (``sure``: found by the scan,
        so the document is not valid JSON if they do not decode)."""
        nonlocal cuts, lo, guess
        with memoryview(buf) as view:
            text = b"".join((b"[", view[lo:k], b"]"))
        got = _decode_piece(text, typed, sure, stats)
        if got is None or not len(got[0] if got[0] is not None else got[1]):
            if sure or got is not None:  # (an empty piece: a comma right after "[" or after another comma)
                raise NotStreamable("an element of the list does not decode")
            return None
        lo = k + 1
        cuts += 1
        guess = True
        return got

    def cut_before(limit: int):
        """The events of buf[lo:] before the last cut below ``limit``; None if there is none yet."""
        nonlocal guess
        if guess:
            k = buf.rfind(b"},", lo, limit)
            if k >= 0 and (got := take(k + 1, False)) is not None:
                return got
            guess = False
        scan.advance(buf, lo, limit)
        if scan.last_sep < lo:
            return None
        return take(scan.last_sep, True)

    while not eof:
        del buf[:lo]
        scan.shift(lo)
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
    scan.shift(lo)
    lo = 0
    # 3. the last events, the closing bracket and what follows the list
    if head is None:
        end = len(buf)  # (a bare list: nothing may follow it, and the decode checks that)
    else:
        scan.advance(buf, 0, len(buf))
        if scan.close < 0:
            raise NotStreamable("the event list does not close")
        end = scan.close + 1
    with memoryview(buf) as view:
        text = b"".join((b"[", view[:end]))
    got = _decode_piece(text, False, True, stats)
    if got is None:
        raise NotStreamable("bad end")
    raws = got[0]
    if cuts and not raws:
        raise NotStreamable("a comma before the closing bracket")  # [..., {...},] is not JSON
    if head is not None:
        doc = _check_doc(head, bytes(buf[end:]))
        if stats is not None:
            stats.devices = devices_of(doc.deviceProperties)
            stats.recorded_with = recording_options(doc)
    if around is not None:
        around["tail"] = bytes(buf[end:])
    buf.clear()
    yield raws, None


class _Scan:
    """Where the event list's elements end: one pass over the bytes (numpy, a block at a time) that tracks strings,
    escapes and the nesting depth, carried on across calls while the buffer grows.

    Positions are indexes in the caller's buffer (:meth:`shift` follows the buffer when its front is cut off). The
    scan starts at ``lo``, just after a cut (depth 0, outside any string), and restarts there whenever the caller cut
    past it. ``last_sep``: the last comma at the list's own level seen so far (-1 if none); ``close``: the list's
    closing bracket, once seen (-1 before). Only proposals: the caller decodes at them, so that invalid JSON is
    refused whatever the scan makes of it.
    """

    __slots__ = ("pos", "depth", "in_str", "carry", "last_sep", "close")

    def __init__(self) -> None:
        self.pos = -1
        self.last_sep = self.close = -1

    def shift(self, n: int) -> None:
        self.pos -= n
        self.last_sep -= n
        self.close -= n

    def advance(self, buf: bytearray, lo: int, stop: int) -> None:
        """Scan on to ``stop`` (or to the closing bracket)."""
        if self.pos < lo:
            self.pos, self.depth, self.in_str, self.carry, self.last_sep, self.close = lo, 0, 0, 0, -1, -1
        while self.close < 0 and self.pos < stop:
            self._block(buf, self.pos, min(stop, self.pos + _SCAN_BLOCK))

    def _block(self, buf: bytearray, s: int, e: int) -> None:
        n = e - s
        if self.in_str and buf.find(b'"', s, e) < 0:  # all of it inside one string: only a last backslash matters
            if buf[e - 1] == 0x5C:
                run = n - len(buf[s:e].rstrip(b"\\"))
                self.carry = (run + (self.carry if run == n else 0)) & 1
            else:
                self.carry = 0
            self.pos = e
            return
        b = np.frombuffer(buf, np.uint8, n, s)  # (a view: released before the caller resizes the buffer)
        low = b | 32  # "[" -> "{", "]" -> "}"
        at = np.flatnonzero((low == 123) | (low == 125) | (b == 44) | (b == 34))  # brackets, commas, quotes
        c = b[at]
        quote = c == 34
        if self.carry or buf.find(b"\\", s, e) >= 0:
            escaped, self.carry = _escaped_quotes(b, self.carry)
            if len(escaped):
                quote[np.searchsorted(at, escaped)] = False
        del b, low
        self.pos = e
        if not len(c):
            return
        low = c | 32  # "[" -> "{", "]" -> "}"
        delta = (low == 123).view(np.int8) - (low == 125).view(np.int8)  # how each moves the nesting depth
        del low
        outside = None
        if self.in_str or quote.any():
            inside = np.bitwise_xor.accumulate(quote.view(np.uint8))  # 1 from a string's opening quote to its closing
            if self.in_str:
                inside ^= 1
            self.in_str = int(inside[-1])
            outside = (inside == 0) & (c != 34)
            delta *= outside.view(np.int8)
            del inside
        depth = np.cumsum(delta, dtype=np.int32 if abs(self.depth) < 1 << 30 else np.int64)
        depth += self.depth
        self.depth = int(depth[-1])
        sep = (depth == 0) & (c == 44)
        if outside is not None:
            sep &= outside
        closed = np.flatnonzero(depth < 0)
        if len(closed):
            j = int(closed[0])
            self.close = s + int(at[j])
            sep = sep[:j]
        seps = np.flatnonzero(sep)
        if len(seps):
            self.last_sep = s + int(at[seps[-1]])


def _escaped_quotes(b: np.ndarray, carry: int):
    """The positions in ``b`` of the quotes that a backslash escapes (an odd run of backslashes right before them),
    and the parity of the run of backslashes ``b`` ends with (``carry``: that of the block before, if ``b`` starts
    with backslashes)."""
    bs = np.flatnonzero(b == 92)
    n = len(b)
    first = np.flatnonzero(b[:1] == 34) if carry else np.zeros(0, np.int64)  # a quote right after the carried run
    if not len(bs):
        return first, 0
    key = bs - np.arange(len(bs))  # the same value along a run of consecutive backslashes
    nxt = bs + 1
    ends = np.flatnonzero(nxt < n)
    ends = ends[b[nxt[ends]] == 34]  # backslashes followed by a quote (so the last of their run)
    start = np.searchsorted(key, key[ends], "left")
    run = ends - start + 1 + np.where(bs[start] == 0, carry, 0)
    escaped = np.concatenate([first, nxt[ends[(run & 1) == 1]]])
    out = 0
    if b[-1] == 92:
        last = len(bs) - 1
        s = int(np.searchsorted(key, key[last], "left"))
        out = (last - s + 1 + (carry if bs[s] == 0 else 0)) & 1
    return escaped, out


def _check_doc(head: bytes, tail: bytes | None) -> "_RawTrace":
    """``head`` + an empty traceEvents list + ``tail`` must be a valid document (tail None = not read yet); returns
    it."""
    if tail is not None and b'"traceEvents"' in tail:
        raise NotStreamable("traceEvents twice")
    doc = head + b'"traceEvents":[]' + (b"}" if tail is None else tail)
    try:
        d = _RAW_DECODER.decode(doc)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise NotStreamable("invalid document around traceEvents") from None
    if isinstance(d, list) or bytes(d.traceEvents) != b"[]":
        raise NotStreamable("unexpected document")
    return d


def iter_batches(raws: list[msgspec.Raw], size: int = BATCH, base: int = 0, stats=None):
    """Typed events, ``size`` at a time (so only one batch of Structs is alive at once).

    Entries that are not JSON objects (or nest too deeply) come back as Event(ph=None). Text that is not UTF-8 is
    repaired (see :func:`repair_utf8`; counted in ``stats``). ``base`` is the file index of ``raws[0]``.
    """
    for start in range(0, len(raws), size):
        chunk = raws[start:start + size]
        text = b"[" + b",".join(chunk) + b"]"
        try:
            yield base + start, _BATCH_DECODER.decode(text)
            continue
        except msgspec.DecodeError:
            text, n = repair_utf8(text)
            if n:
                _count(stats, "invalid_utf8", n)
                chunk = _RAW_LIST_DECODER.decode(text)  # the same entries, their text repaired
                try:
                    yield base + start, _BATCH_DECODER.decode(text)
                    continue
                except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                    pass
        except (msgspec.ValidationError, RecursionError):
            pass
        del text
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


# ------------------------------------------------------------------------------------------------ counter values
# A counter event's arguments (``"ph": "C"``), read as trace_processor reads them: its JSON tokenizer walks the args
# object field by field (each field in turn, duplicates too), takes a number as a double and a string through C's
# ``strtod`` (the whole string must be read), and skips any other value (and an args that is not an object).

_STRTOD = re.compile(  # what C's strtod reads in the "C" locale, anchored at both ends (fullmatch)
    r"[ \t\n\v\f\r]*(?P<sign>[+-]?)(?:"
    r"(?P<hex>0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)"
    r"|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<inf>[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)"
    r"|(?P<nan>[nN][aA][nN](?:\([0-9A-Za-z_]*\))?))")


def strtod(text: str) -> float | None:
    """``text`` read as trace_processor's ``base::StringToDouble`` reads it (C's strtod in the "C" locale; the value
    only if strtod read all of it, and the text is not empty): leading whitespace, a sign, decimal or hexadecimal
    (``0x1.8p3``) digits with an exponent, ``inf``/``infinity``/``nan``/``nan(...)`` in any case; too large is
    ±inf. None for anything else (trailing whitespace or characters, an empty string, ``1e``, ``1_000``). A NUL
    character ends the text, as it ends the C string."""
    text = text.split("\0", 1)[0]
    m = _STRTOD.fullmatch(text)
    if m is None:
        return None
    sign = -1.0 if m["sign"] == "-" else 1.0
    if m["dec"] is not None:
        return sign * float(m["dec"])
    if m["hex"] is not None:
        try:
            return sign * float.fromhex(m["hex"])
        except OverflowError:
            return sign * math.inf
    return sign * (math.inf if m["inf"] is not None else math.nan)


def counter_value(v: Any) -> float | None:
    """One argument of a counter event (as :func:`counter_fields` decodes it) as the counter's value: a number as a
    double, a string through :func:`strtod`; None (the value is skipped) for anything else (true/false, null, an
    object, an array)."""
    t = type(v)
    if t is float:
        return v
    if t is int:
        try:
            return float(v)
        except OverflowError:  # (an integer of more than 308 digits: strtod's double is ±inf)
            return math.inf if v > 0 else -math.inf
    if t is str:
        return strtod(v)
    return None


_ANY = msgspec.json.Decoder()


def counter_fields(raw, stats=None) -> tuple[tuple, tuple] | None:
    """The fields of a counter event's ``args`` (a raw JSON slice) as (keys, values), in order, duplicates kept;
    None where ``args`` is missing or not an object. Text that is not valid Unicode reads with U+FFFD (counted in
    ``stats``, a LoadStats).

    An object whose only colons are those of its fields (a flat object of numbers, as counters are written) cannot
    hold a key twice: msgspec decodes it (~10x faster than the json module). Any other goes through the json module,
    which keeps each field of a key written twice."""
    text = bytes(raw)
    if text.lstrip(b" \t\r\n")[:1] != b"{":
        return None
    try:
        fields = _ANY.decode(text)
        if text.count(b":") == len(fields):
            return tuple(fields), tuple(fields.values())
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass  # (not UTF-8, a lone surrogate, a number out of a double's range, too deep)
    text, n = repair_utf8(text)
    if n:
        _count(stats, "invalid_utf8", n)
    text, n = repair_surrogates(text)
    if n:
        _count(stats, "lone_surrogate", n)
    try:  # (integers as floats: one of any length is the double strtod makes of it)
        pairs = json.loads(text, object_pairs_hook=list, parse_int=float)
    except (ValueError, RecursionError):
        return None
    return tuple(k for k, _ in pairs), tuple(v for _, v in pairs)
