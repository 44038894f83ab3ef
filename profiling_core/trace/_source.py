"""Reading a trace file's bytes: gzip detected by magic bytes, size capped while streaming.

The cap holds for whatever the path is: a regular file is refused by its size before it is read (and bounded while
read, should it grow); a .gz, a pipe (FIFO, ``/dev/stdin``) or a device (``/dev/zero``) is refused as soon as what
it gave passes the cap. It is ``DEFAULT_MAX_BYTES`` unless ``$PROFILING_MAX_TRACE_MIB`` sets another
(:func:`trace_cap`), for every reader of a trace: the app, the command line and the library alike.
"""
from __future__ import annotations

import os
import stat
import zlib

from ..errors import ConfigError, TraceFormatError, TraceTooLargeError

DEFAULT_MAX_BYTES = 512 * 1024 * 1024  # uncompressed bytes
CAP_VARIABLE = "PROFILING_MAX_TRACE_MIB"
_LARGER = f"set {CAP_VARIABLE} (MiB) or pass open_trace(path, max_bytes=N) to open a larger one"
STREAM_CHUNK = 4 << 20  # bytes of JSON read (and split into events) at a time by the streamed readers
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 4 * 1024 * 1024
_KINDS = ((stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def trace_cap(max_bytes: int | None = None) -> int:
    """The most (decompressed) bytes a trace may hold: ``max_bytes`` where given, else ``$PROFILING_MAX_TRACE_MIB``
    MiB where set, else ``DEFAULT_MAX_BYTES`` (512 MiB). Read at each call, so a setting made after the import holds.
    ConfigError where the variable is not a whole number of MiB from 1 to 1,048,576 (1 TiB)."""
    if max_bytes is not None:
        return max_bytes
    raw = os.environ.get(CAP_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= 1 << 20):
        raise ConfigError(CAP_VARIABLE, raw[:40], "a whole number of MiB from 1 to 1048576 (unset: 512)")
    return int(raw) << 20


def stream_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it is neither a regular file nor a directory ("a pipe (FIFO)", "a character device"...):
    it can then be read only once and its size is known only once read. None otherwise (also when it cannot be
    stat'ed: opening it reports why)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return _kind(mode)


def _kind(mode: int) -> str | None:
    for test, name in _KINDS:
        if test(mode):
            return name
    return None


def is_stream(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a pipe, a device or a socket (see :func:`stream_kind`)."""
    return stream_kind(path) is not None


def read_trace_bytes(path: str | os.PathLike, max_bytes: int | None = None) -> bytes | bytearray:
    """Return the (decompressed) JSON bytes of ``path``.

    Raises TraceError subclasses for a missing file, gzip garbage or a size past ``max_bytes`` (None:
    :func:`trace_cap`'s). A .gz (or a pipe, a device) is streamed in chunks and refused as soon as its output passes
    the cap, so a gzip bomb (or ``/dev/zero``) never lands in memory.
    """
    out: bytes | bytearray | None = None
    for chunk in iter_trace_chunks(path, max_bytes):
        if out is None:
            out = chunk  # a plain file read in one go is returned as it is
            continue
        if not isinstance(out, bytearray):
            out = bytearray(out)
        out += chunk
    return b"" if out is None else out


def iter_trace_chunks(path: str | os.PathLike, max_bytes: int | None = None, chunk: int | None = None):
    """The (decompressed) JSON bytes of ``path``, a chunk at a time (a regular file in one go when ``chunk`` is None).

    A UTF-8 byte order mark before the JSON (of a plain file or of a gzip's content) is dropped: RFC 8259 lets a
    parser ignore one, and Windows tools write one. Raises the same TraceError subclasses, with the same messages, as
    :func:`read_trace_bytes`.
    """
    return _without_bom(_iter_chunks(path, trace_cap(max_bytes), chunk))


_BOM = b"\xef\xbb\xbf"


def _without_bom(chunks):
    head = b""
    for data in chunks:
        if head is None:
            yield data
            continue
        head = head + data if head else data  # the first chunk itself (not a copy) when it holds 3 bytes or more
        if len(head) < len(_BOM) and _BOM.startswith(head):
            continue
        if rest := (head[len(_BOM):] if head.startswith(_BOM) else head):
            yield rest
        head = None
    if head:
        yield head


def _iter_chunks(path, max_bytes: int, chunk: int | None):
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            head = f.read(2)
            if head == _GZIP_MAGIC:
                yield from _iter_gzip(f, head, path, max_bytes, chunk or _CHUNK)
                return
            kind = _kind(st.st_mode)
            if kind is not None:  # a pipe or a device: never seek, count what it gives
                yield from _iter_bounded(f, head, path, max_bytes, chunk or _CHUNK, kind)
                return
            if st.st_size > max_bytes:
                raise TraceTooLargeError(
                    f"{os.fspath(path)} is {_mib(st.st_size)} ({st.st_size} bytes), over the cap of "
                    f"{_mib(max_bytes)} ({max_bytes} bytes); {_LARGER}")
            f.seek(0)
            if chunk is None:
                data = f.read(st.st_size)
                extra = f.read(1)
                if not extra:
                    yield data
                    return
                # longer than its size said (it grew while read, or a /proc file): read on, within the cap
                yield from _iter_bounded(f, data + extra, path, max_bytes, _CHUNK, "a file that grew while read")
                return
            yield from _iter_bounded(f, b"", path, max_bytes, chunk, "a file that grew while read")
    except FileNotFoundError:
        raise TraceFormatError(f"no such trace file: {os.fspath(path)}") from None
    except IsADirectoryError:
        raise TraceFormatError(f"{os.fspath(path)} is a directory, not a trace file") from None
    except PermissionError as e:
        raise TraceFormatError(f"cannot read {os.fspath(path)}: {e.strerror}") from None


def _iter_bounded(f, first: bytes, path, max_bytes: int, chunk: int, kind: str):
    """``first``, then what ``f`` gives a chunk at a time, refused once the total passes ``max_bytes``."""
    total = 0
    data = first
    while True:
        if data:
            total += len(data)
            if total > max_bytes:
                raise TraceTooLargeError(
                    f"{os.fspath(path)} ({kind}) gave more than {_mib(max_bytes)} (the cap, {max_bytes} bytes); "
                    f"stopped reading it; {_LARGER}")
            yield data
        data = f.read(chunk)
        if not data:
            return


def _iter_gzip(f, head: bytes, path, max_bytes: int, chunk: int):
    """The decompressed bytes of the gzip stream ``head`` + the rest of ``f`` (no seek: ``f`` may be a pipe)."""
    total = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = head
    try:
        while True:
            if not pending:
                pending = f.read(_CHUNK)
                if not pending:
                    break
            # max_length bounds each step's output, so a bomb never inflates past the cap.
            out = d.decompress(pending, min(chunk, max_bytes + 1 - total))
            total += len(out)
            if total > max_bytes:
                raise TraceTooLargeError(
                    f"{os.fspath(path)} decompresses to more than {_mib(max_bytes)} "
                    f"(the cap, {max_bytes} bytes); stopped reading it; "
                    f"{_LARGER}")
            if out:
                yield out
            pending = d.unconsumed_tail
            if d.eof:
                rest = d.unused_data or f.read(_CHUNK)
                if rest[:2] != _GZIP_MAGIC:
                    break  # trailing bytes after the last member are ignored, as gzip(1) does
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # concatenated members are legal
                pending = rest
        # Output held back by max_length when the input ran out: drain it.
        while not d.eof and (out := d.decompress(b"", min(chunk, max_bytes + 1 - total))):
            total += len(out)
            if total > max_bytes:
                raise TraceTooLargeError(
                    f"{os.fspath(path)} decompresses to more than {_mib(max_bytes)} "
                    f"(the cap, {max_bytes} bytes); stopped reading it; "
                    f"{_LARGER}")
            yield out
        if not d.eof:
            raise TraceFormatError(f"{os.fspath(path)} is a truncated gzip file (unexpected end of stream)")
    except zlib.error as e:
        raise TraceFormatError(f"{os.fspath(path)} is not a valid gzip file: {e}") from None


__all__ = ["read_trace_bytes", "iter_trace_chunks", "trace_cap", "DEFAULT_MAX_BYTES", "CAP_VARIABLE"]


def check_size(path: str | os.PathLike, max_bytes: int | None = None) -> None:
    """Raise TraceTooLargeError if ``path`` (decompressed) is over ``max_bytes`` (None: :func:`trace_cap`'s); keeps
    nothing in memory."""
    max_bytes = trace_cap(max_bytes)
    try:
        with open(path, "rb") as f:
            if f.read(2) != _GZIP_MAGIC:
                size = os.fstat(f.fileno()).st_size
                if size > max_bytes:
                    raise TraceTooLargeError(
                        f"{os.fspath(path)} is {_mib(size)} ({size} bytes), over the cap of "
                        f"{_mib(max_bytes)} ({max_bytes} bytes); {_LARGER}")
                return
            f.seek(0)
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            total = 0
            while chunk := f.read(_CHUNK):
                while chunk:
                    total += len(d.decompress(chunk, _CHUNK))
                    chunk = d.unconsumed_tail
                    if total > max_bytes:
                        raise TraceTooLargeError(
                            f"{os.fspath(path)} decompresses to more than {_mib(max_bytes)} "
                            f"(the cap, {max_bytes} bytes); {_LARGER}")
                if d.eof:
                    break
    except FileNotFoundError:
        raise TraceFormatError(f"no such trace file: {os.fspath(path)}") from None
    except zlib.error as e:
        raise TraceFormatError(f"{os.fspath(path)} is not a valid gzip file: {e}") from None
