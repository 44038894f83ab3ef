"""The mirror's console queries, run in a child process that can be ended at the deadline.

SQLite checks a statement's deadline between the steps of its program, and one SQL function call is one step:
``printf('%.*c', 1e9, 'x')`` ran 7.7 s past a 0.3 s deadline, ``instr`` over two 16 MiB strings would run for tens of
minutes, and ``sqlite3_interrupt`` waits for the step too. Bounding each function's arguments would be a list to keep
in step with SQLite's (``printf`` widths, ``replace``/``instr``/``like`` over long values, ...), so a console
statement instead runs where it can be stopped whatever it does: in a child process of its own (``python -m
profiling_core.trace._console``), which opens the trace's two SQLite files read-only (``_query.QueryConnection``:
the same functions, rules and caps as the session's own connection). The child stops a statement at its deadline
itself when SQLite reaches a step; if no answer has come ``GRACE_S`` later, the session ends the child (SIGKILL),
which frees it at once, and the next console query starts another (~0.3 s). That is what the perfetto engine does
with trace_processor's process. The child keeps SQLite's sorts and temporary tables in memory and caps that memory
(``QueryLimits.max_work_bytes``, ``QueryConnection``'s ``work_bytes``); a query under another cap gets another child.

Messages are msgpack frames (a 4-byte length, then the body) over the child's stdin/stdout: plain values only, so
nothing the child sends can run code in the session. The child exits when its stdin closes or its parent is gone.
"""
from __future__ import annotations

import dataclasses
import gc
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import msgspec

from ..errors import QueryError
from ._query import require_utf8
from ._rules import stopped_error

GRACE_S = 0.5      # how long past its deadline a statement may take to answer before its process is ended
START_S = 60.0     # how long a new child may take to start (a loaded machine)
_HEADER = struct.Struct(">I")


def _frame(value: Any) -> bytes:
    body = msgspec.msgpack.encode(value)
    return _HEADER.pack(len(body)) + body


def _read_exact(fd: int, n: int, until: float | None) -> bytes | None:
    """``n`` bytes from ``fd``; None at end of file or when ``until`` (a monotonic time) passes first."""
    parts, got = [], 0
    while got < n:
        if until is not None:
            left = until - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


class Reply(msgspec.Struct, array_like=True):
    """What the child answers: ``error`` (a QueryError's text) or the statement's ``columns``, ``rows`` and ``cut``
    (decoded to tuples in C, and checked: nothing else can come back)."""
    error: str | None
    columns: list[str] = []
    rows: list[tuple] = []
    cut: bool = False


_decode_reply = msgspec.msgpack.Decoder(Reply).decode


def _read_frame(fd: int, until: float | None, decode=msgspec.msgpack.decode) -> tuple[bool, Any]:
    """(True, value) of the next frame; (False, None) at end of file or when ``until`` passes before it begins."""
    head = _read_exact(fd, _HEADER.size, until)
    if head is None:
        return False, None
    body = _read_exact(fd, _HEADER.unpack(head)[0], None)  # begun: the rest follows at once
    if body is None:
        return False, None
    was = gc.isenabled()
    gc.disable()  # a result is up to a million values and no cycles (the collector would walk them all)
    try:
        return True, decode(body)
    finally:
        if was:
            gc.enable()


class ConsoleProcess:
    """The child process that runs one session's console statements (started on first use, again after it was
    ended). ``rows(sql, limits)`` is ``QueryConnection.rows`` run there."""

    def __init__(self, db_path: str, args_path: str) -> None:
        self._paths = (db_path, args_path)
        self._proc: subprocess.Popen | None = None
        self._work_bytes: int | None = None  # the running child's cap on SQLite's memory (max_work_bytes)
        self._busy = False
        self._closed = False
        self.started = 0  # how many children were started (one more after each that was ended)

    def _start(self, work_bytes: int) -> subprocess.Popen:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = subprocess.Popen([sys.executable, "-m", "profiling_core.trace._console", str(os.getpid()),
                                 *self._paths, str(int(work_bytes))], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, close_fds=True)
        self.started += 1
        try:
            ok, hello = _read_frame(proc.stdout.fileno(), time.monotonic() + START_S, _decode_reply)
        except msgspec.DecodeError:
            ok = False
        if not ok or hello.error is not None:
            self._end(proc)
            why = hello.error if ok else "it did not start"
            raise QueryError(f"the console's SQL process could not open the trace's tables: {why}")
        return proc

    @staticmethod
    def _end(proc: subprocess.Popen) -> None:
        try:
            proc.kill()
        except OSError:
            pass
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def rows(self, sql: str, limits: Any) -> tuple[list[str], list[tuple], bool]:
        if not isinstance(sql, str):
            raise QueryError(f"query must be a string, got {type(sql).__name__}")
        if self._closed:
            raise QueryError("the trace session is closed")
        if self._proc is not None and self._work_bytes != limits.max_work_bytes:
            # (SQLite's heap limit can be lowered, never raised, in a process: another cap takes another child)
            proc, self._proc = self._proc, None
            self._end(proc)
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._start(limits.max_work_bytes)
            self._work_bytes = limits.max_work_bytes
        proc = self._proc
        require_utf8(sql)  # (the child is not asked)
        request = _frame([sql, dataclasses.asdict(limits)])
        self._busy = True
        try:
            proc.stdin.write(request)
            proc.stdin.flush()
            ok, reply = _read_frame(proc.stdout.fileno(), time.monotonic() + limits.deadline_s + GRACE_S,
                                    _decode_reply)
        except (OSError, ValueError):  # the child is gone (a crash, or close()), or sent what it may not
            ok = False
        except BaseException:
            # (a KeyboardInterrupt, say, while the child still works: its answer would stay in the pipe and be read
            # as the next query's, so the child ends here, as at a time-out)
            self._proc = None
            self._end(proc)
            raise
        finally:
            self._busy = False
        if not ok:  # past the deadline inside one step, or the child died
            self._proc = None
            status = proc.poll()
            self._end(proc)
            if self._closed:
                raise QueryError("the trace session is closed")
            if status is None:
                raise stopped_error(limits)
            raise QueryError(f"the query ended the SQL process that ran it (exit status {status}); "
                             "the next query starts another")
        if reply.error is not None:
            raise QueryError(reply.error)
        return reply.columns, reply.rows, reply.cut

    def close(self) -> None:
        """End the child (a statement running there ends too, and its caller gets QueryError)."""
        self._closed = True
        proc = self._proc
        if proc is None:
            return
        if self._busy:  # the caller waiting on it sees the end of its output, and closes its pipes
            try:
                proc.kill()
            except OSError:
                pass
        else:
            self._proc = None
            self._end(proc)


def _watch_parent(parent: int) -> None:
    """(a thread of the child) End the child once its parent is gone, even in the middle of a statement."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main(argv: list[str]) -> int:
    from ._query import QueryConnection

    parent, db_path, args_path, work_bytes = int(argv[0]), argv[1], argv[2], int(argv[3])
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the session ends it (a Ctrl-C reaches the session)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing else may write into the frames
    try:
        qc = QueryConnection(db_path, args_path, work_bytes)  # (this process's SQLite memory: one statement at a time)
    except Exception as e:  # noqa: BLE001 - told to the session
        out.write(_frame(Reply(f"{type(e).__name__}: {e}")))
        out.flush()
        return 1
    out.write(_frame(Reply(None)))
    out.flush()
    fd = sys.stdin.fileno()
    while True:
        ok, request = _read_frame(fd, None)
        if not ok:
            return 0
        sql, limits = request[0], types.SimpleNamespace(**request[1])  # a QueryLimits' fields
        try:
            reply = Reply(None, *qc.rows(sql, limits))
        except QueryError as e:
            reply = Reply(str(e))
        except Exception as e:  # noqa: BLE001 - told to the session
            reply = Reply(f"SQL error: {type(e).__name__}: {e}")
        try:
            data = _frame(reply)
        except (TypeError, OverflowError) as e:
            data = _frame(Reply(f"SQL error: the result cannot be sent: {e}"))
        out.write(data)
        out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
