"""Reading a trace file's bytes: gzip detected by magic bytes, size capped while streaming."""
from __future__ import annotations

import os
import zlib

from ..errors import TraceFormatError, TraceTooLargeError

DEFAULT_MAX_BYTES = 512 * 1024 * 1024  # uncompressed bytes
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 4 * 1024 * 1024


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def read_trace_bytes(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes | bytearray:
    """Return the (decompressed) JSON bytes of ``path``.

    Raises TraceError subclasses for a missing file, gzip garbage or a size past ``max_bytes``.
    A .gz is streamed in chunks and refused as soon as its output passes the cap, so a
    gzip bomb never lands in memory.
    """
    out = bytearray()
    for chunk in iter_trace_chunks(path, max_bytes):
        if not out and len(chunk) == _size_hint(path):
            return chunk  # a plain file read in one go
        out += chunk
    return out


def _size_hint(path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def iter_trace_chunks(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES, chunk: int | None = None):
    """The (decompressed) JSON bytes of ``path``, a chunk at a time (the whole file when ``chunk`` is None).

    A UTF-8 byte order mark before the JSON (of a plain file or of a gzip's content) is dropped: RFC 8259 lets a
    parser ignore one, and Windows tools write one. Raises the same TraceError subclasses, with the same messages, as
    :func:`read_trace_bytes`.
    """
    return _without_bom(_iter_chunks(path, max_bytes, chunk))


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
            head = f.read(2)
            if head == _GZIP_MAGIC:
                f.seek(0)
                yield from _iter_gzip(f, path, max_bytes, chunk or _CHUNK)
                return
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise TraceTooLargeError(
                    f"{os.fspath(path)} is {_mib(size)} ({size} bytes), over the cap of "
                    f"{_mib(max_bytes)} ({max_bytes} bytes); pass a larger max_bytes to open it")
            f.seek(0)
            if chunk is None:
                yield f.read()
                return
            while data := f.read(chunk):
                yield data
    except FileNotFoundError:
        raise TraceFormatError(f"no such trace file: {os.fspath(path)}") from None
    except IsADirectoryError:
        raise TraceFormatError(f"{os.fspath(path)} is a directory, not a trace file") from None
    except PermissionError as e:
        raise TraceFormatError(f"cannot read {os.fspath(path)}: {e.strerror}") from None


def _iter_gzip(f, path, max_bytes: int, chunk: int):
    total = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""
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
                    f"(the cap, {max_bytes} bytes); stopped reading it; pass a larger max_bytes to open it")
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
                    f"(the cap, {max_bytes} bytes); stopped reading it; pass a larger max_bytes to open it")
            yield out
        if not d.eof:
            raise TraceFormatError(f"{os.fspath(path)} is a truncated gzip file (unexpected end of stream)")
    except zlib.error as e:
        raise TraceFormatError(f"{os.fspath(path)} is not a valid gzip file: {e}") from None


__all__ = ["read_trace_bytes", "iter_trace_chunks", "DEFAULT_MAX_BYTES"]


def check_size(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
    """Raise TraceTooLargeError if ``path`` (decompressed) is over ``max_bytes``; keeps nothing in memory."""
    try:
        with open(path, "rb") as f:
            if f.read(2) != _GZIP_MAGIC:
                size = os.fstat(f.fileno()).st_size
                if size > max_bytes:
                    raise TraceTooLargeError(
                        f"{os.fspath(path)} is {_mib(size)} ({size} bytes), over the cap of "
                        f"{_mib(max_bytes)} ({max_bytes} bytes); pass a larger max_bytes to open it")
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
                            f"(the cap, {max_bytes} bytes); pass a larger max_bytes to open it")
                if d.eof:
                    break
    except FileNotFoundError:
        raise TraceFormatError(f"no such trace file: {os.fspath(path)}") from None
    except zlib.error as e:
        raise TraceFormatError(f"{os.fspath(path)} is not a valid gzip file: {e}") from None
