"""Trace documents shaped against the loader's streaming splitter, and gzip bombs.

The splitter cuts the event list where a guessed ``},`` decodes; these shapes put many ``},`` where no cut can be
made (inside strings, at a nested level) and make elements longer than a read chunk, so a splitter that retries its
guesses on a growing buffer turns quadratic. Each shape is a valid trace (so the loader must load it, with a known
number of events). Used by tests/test_trace_bad_input.py, tests/test_trace_loader_oracle.py, scripts/fuzz_traces.py
and scripts/bench_trace.py (``--pathological``).
"""
from __future__ import annotations

import zlib

_EVENT = b'{"ph": "X", "cat": "cpu_op", "name": "%s", "pid": 1, "tid": 1, "ts": %d, "dur": 1%s}'


def _trace(size: int, event) -> tuple[bytes, int]:
    """A trace of events ``event(i)`` (bytes) until about ``size`` bytes; and how many events it has."""
    out, n, i = [b'{"traceEvents": ['], 0, 0
    while n < size or not i:
        e = event(i)
        out.append(e if not i else b"," + e)
        n += len(e) + 1
        i += 1
    out.append(b"]}")
    return b"".join(out), i


def brace_names(size: int, name_bytes: int = 1 << 20) -> tuple[bytes, int]:
    """Events whose names are ``name_bytes`` of ``},`` (every ``},`` of the file inside a string)."""
    name = b"}," * (name_bytes // 2)
    return _trace(size, lambda i: _EVENT % (name, i, b""))


def whitespace(size: int, run: int = 256 << 10) -> tuple[bytes, int]:
    """Events with 64 ``},`` in their name and a ``run``-byte whitespace run inside the object."""
    name, pad = b"}," * 64, b", " + b" \n\t" * (run // 3) + b'"k": 0'
    return _trace(size, lambda i: _EVENT % (name, i, pad))


def nested_args(size: int, event_bytes: int = 2 << 20) -> tuple[bytes, int]:
    """Events whose args hold ``event_bytes`` of small objects (a ``},`` every few bytes, at a nested level)."""
    args = b', "args": {' + b",".join([b'"k": {"a": {}}'] * (event_bytes // 15)) + b"}"
    return _trace(size, lambda i: _EVENT % (b"n", i, args))


def one_string(size: int) -> tuple[bytes, int]:
    """One event whose name is the whole file: ``size`` bytes of ``},``."""
    return _trace(size, lambda i: _EVENT % (b"}," * (size // 2), i, b""))


def escapes(size: int, name_bytes: int = 64 << 10) -> tuple[bytes, int]:
    """Events whose names are runs of escaped quotes and backslashes around ``},`` (``\\"},\\\\``)."""
    name = b'\\"},\\\\' * (name_bytes // 7)
    return _trace(size, lambda i: _EVENT % (name, i, b""))


SHAPES = {"brace_names": brace_names, "whitespace": whitespace, "nested_args": nested_args,
          "one_string": one_string, "escapes": escapes}

# gzip bombs: a trace that opens and never closes, so only the cap stops it
BOMBS = {"brace_string": (b'{"traceEvents": [{"ph": "X", "name": "', b"},"),
         "nested": (b'{"traceEvents": [{"ph": "X", "args": {', b'"": {},'),
         "whitespace": (b'{"traceEvents": [{"ph": "X"}, ', b" \n")}


def write_bomb(path, kind: str = "brace_string", decompressed: int = 2 << 30) -> int:
    """Write a gzip file that decompresses to ``decompressed`` bytes of the ``kind`` bomb; return its size."""
    head, unit = BOMBS[kind]
    block = unit * ((1 << 20) // len(unit))
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    n = 0
    with open(path, "wb") as f:
        n += f.write(comp.compress(head))
        for _ in range(decompressed // len(block)):
            n += f.write(comp.compress(block))
        n += f.write(comp.flush())
    return n
