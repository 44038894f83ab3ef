"""The one reader of the small files the store and the device lock keep, and of a calibration named on the command line.

A run's ``meta.json`` and ``table.txt``, a calibration in ``.calibrations/``, the device lock's holder file, the file
``analyze --peaks FILE`` names: each is a few KiB that anyone who can write to the folder can replace by something
else, a directory, a FIFO (reading it waits for a writer forever), a link to ``/dev/zero`` (it never ends), a file of
gigabytes.  :func:`read_small_file` looks at what the path *is* before reading it:

- ``os.stat`` (``os.lstat`` where links are not followed) first, so what is not a regular file is refused without
  being opened (opening a device can have effects of its own);
- then ``os.open`` with ``O_NONBLOCK`` (a FIFO swapped in since the check opens at once instead of waiting for a
  writer) and ``os.fstat`` of what was opened, the check that counts;
- a regular file over the cap is refused by its size, and the read itself stops one byte past the cap (a file that
  grows while read is refused too), as the trace loader caps traces (``trace._source``).

It never raises for what the path holds: it returns ``(data, None)`` or ``(None, why)``, where ``why`` names the
file as the caller calls it and says what was wrong.  :func:`read_json_object` reads a small JSON object through it.

The trace loader (``profiling_core.trace``) has a reader of its own: a trace may be a pipe or a gzip, read within
the same kind of cap; the files here may only be regular files.
"""
from __future__ import annotations

import json
import os
import re
import stat

__all__ = ["read_json_object", "read_small_file"]

_CHUNK = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a plain file"


def _size_text(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 and n % 2**20 == 0 else f"{n:,} bytes"


def _not_regular(what: str, mode: int) -> str:
    return f"{what} is not a regular file: it is {_kind(mode)}"


def read_small_file(path: os.PathLike | str, what: str, max_bytes: int, *, follow_symlinks: bool = True
                    ) -> tuple[bytes | None, str | None]:
    """``(the bytes of the file at path, None)``, or ``(None, why)`` when it is missing, cannot be read, is not a
    regular file (a directory, a FIFO, a device, a socket; a symbolic link where ``follow_symlinks`` is false), or
    holds more than ``max_bytes``.  ``what`` names the file in ``why`` (``"meta.json"``, ``"--peaks x.json"``)."""
    try:
        st = os.stat(path) if follow_symlinks else os.lstat(path)
    except FileNotFoundError:
        return None, f"{what} is missing"
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        return None, f"{what} cannot be read: {getattr(exc, 'strerror', None) or exc}"
    if not stat.S_ISREG(st.st_mode):
        return None, _not_regular(what, st.st_mode)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
                     | (0 if follow_symlinks else _NOFOLLOW))
    except FileNotFoundError:
        return None, f"{what} is missing"
    except OSError as exc:
        return None, f"{what} cannot be read: {exc.strerror}"
    try:
        st = os.fstat(fd)  # what was opened, whatever the path named a moment ago
        if not stat.S_ISREG(st.st_mode):
            return None, _not_regular(what, st.st_mode)
        if st.st_size > max_bytes:
            return None, f"{what} is over {_size_text(max_bytes)} ({st.st_size:,} bytes)"
        chunks, total = [], 0
        while total <= max_bytes:
            data = os.read(fd, min(_CHUNK, max_bytes + 1 - total))
            if not data:
                break
            chunks.append(data)
            total += len(data)
    except OSError as exc:
        return None, f"{what} cannot be read: {exc.strerror}"
    finally:
        os.close(fd)
    if total > max_bytes:
        return None, f"{what} is over {_size_text(max_bytes)} (it grew while read)"
    return b"".join(chunks), None


_JSON_TYPE = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
              type(None): "null"}


def _depth(value: object, limit: int) -> int:
    """How deeply ``value`` nests lists and dicts (counted a level at a time, no recursion), up to ``limit + 1``."""
    depth, level = 0, [value] if isinstance(value, (dict, list)) else []
    while level and depth <= limit:
        depth += 1
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x) if isinstance(v, (dict, list))]
    return depth


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _repaired(value):
    """``value`` with every lone surrogate of its strings (keys too) as U+FFFD: JSON's ``"\\ud800"`` is valid JSON
    but no Unicode text, and a page or a terminal that is sent one fails to encode it (the trace loader reads them
    so too). Walked with a stack, not by recursion."""
    def fix(x):
        return _LONE_SURROGATE.sub("\ufffd", x) if isinstance(x, str) else x
    root = [fix(value)]
    stack = [(root, 0)]
    while stack:
        holder, key = stack.pop()
        x = holder[key]
        if isinstance(x, list):
            for i, v in enumerate(x):
                x[i] = fix(v)
                stack.append((x, i))
        elif isinstance(x, dict):
            items = [(fix(k), fix(v)) for k, v in x.items()]
            x.clear()
            x.update(items)
            stack.extend((x, k) for k, _ in items)
    return root[0]


def read_json_object(path: os.PathLike | str, what: str, max_bytes: int, max_depth: int, *,
                     follow_symlinks: bool = True) -> tuple[dict, str | None]:
    """``(object, None)``, or ``({}, why)`` when the file at ``path`` (called ``what`` in the reason) cannot be read
    by :func:`read_small_file` (missing, not a regular file, over ``max_bytes``), is empty, not JSON (UTF-8, a byte
    order mark accepted), not a JSON object, or nested deeper than ``max_depth``.  A lone surrogate in a string
    (``"\\ud800"``) reads as U+FFFD.  Numbers are read as JSON has them (``NaN``, ``1e400`` as a float, ``10**400``
    as an int): the caller's schema bounds them."""
    data, why = read_small_file(path, what, max_bytes, follow_symlinks=follow_symlinks)
    if why is not None:
        return {}, why
    if not data.strip():
        return {}, f"{what} is empty"
    try:
        obj = json.loads(data)
    except RecursionError:
        return {}, f"{what} nests too deeply to be read"
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError; an int of over 4300 digits
        return {}, f"{what} is not valid JSON: {exc}"
    if not isinstance(obj, dict):
        return {}, f"{what} must hold a JSON object, got {_JSON_TYPE.get(type(obj), type(obj).__name__)}"
    if _depth(obj, max_depth) > max_depth:
        return {}, f"{what} nests more than {max_depth} levels deep"
    return _repaired(obj), None
