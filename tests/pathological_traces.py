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


_CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))  # (a regression fails here, instead of filling the machine)
sys.path.insert(0, {root!r})
from profiling_core.trace import open_trace
t0 = time.perf_counter()
try:
    with open_trace({path!r}, engine="sqlite"{extra}) as s:
        out = {{"events": s.load_stats.events, "slices": s.load_stats.slices}}
except Exception as e:
    out = {{"error": type(e).__name__, "message": str(e)}}
out["wall_s"] = time.perf_counter() - t0
try:  # this process's own peak RSS (ru_maxrss would start from the parent's RSS at fork)
    out["rss_mib"] = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
except (OSError, StopIteration):
    out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def load_in_child(path, root: str, extra: str = "", limit: int = 4 << 30, timeout: float = 120) -> dict:
    """``open_trace(path)`` of the package under ``root``, in a fresh process under an address-space limit of
    ``limit`` bytes, killed after ``timeout`` s: what it loaded (``events``, ``slices``) or raised (``error``,
    ``message``), its wall time after the import (``wall_s``) and its own peak RSS (``rss_mib``). A child that was
    killed or died has ``error`` saying so, ``wall_s`` None and the kernel's ru_maxrss as ``rss_mib``."""
    import json
    import os
    import subprocess
    import sys
    import threading
    code = _CHILD.format(root=root, path=str(path), extra=extra, limit=limit)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    watchdog = threading.Timer(timeout, p.kill)  # (a regression fails instead of stalling)
    watchdog.start()
    try:
        out = p.stdout.read().decode(errors="replace")
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    finally:
        watchdog.cancel()
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        why = f"killed after {timeout:.0f} s" if p.returncode == -9 else f"exit status {p.returncode}: {out[-500:]}"
        return {"error": why, "wall_s": None, "rss_mib": usage.ru_maxrss / 1024}
