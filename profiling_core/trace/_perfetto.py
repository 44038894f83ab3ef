"""The perfetto engine: perfetto's own Python API driving a real trace_processor binary.

The binary comes from ``perfetto_bin`` / ``$PERFETTO_BIN``, else from the perfetto package's
pinned download (cached under ~/.local/share/perfetto). In auto mode that download gets a short,
hard time bound and its output is captured, so an offline machine falls back to the mirror fast and quietly.
"""
from __future__ import annotations

import functools
import hashlib
import http.client
import importlib.util
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import EngineUnavailableError, QueryError, TraceError
from ._rules import SCHEMA_QUERY
from ._source import check_size, stream_kind


_CURL_FAILURES = {  # curl's exit statuses an offline or filtered machine gives, in words
    5: "no proxy could be reached", 6: "no network (the download host does not resolve)",
    7: "no network (the download host cannot be reached)", 22: "the download server refused it",
    28: "the download timed out", 35: "the secure connection failed", 56: "the connection broke off",
}


def _fetch_binary(timeout_s: float | None) -> str:
    """Path of the perfetto package's pinned trace_processor_shell (download it if needed).

    Does what ``perfetto.prebuilts.perfetto_prebuilts.get_perfetto_prebuilt`` does (same manifest, same
    cache path, same SHA-256 check), but runs curl with its output captured and a hard timeout, so an
    offline machine prints nothing (no "Downloading ..." line, no curl error) and falls back fast.
    """
    prefix = "no trace_processor binary (set PERFETTO_BIN); "
    try:
        from perfetto.prebuilts.manifests.trace_processor_shell import TRACE_PROCESSOR_SHELL_MANIFEST
    except ImportError as e:
        raise EngineUnavailableError(f"{prefix}the perfetto package has no prebuilt manifest ({e})") from None
    plat, machine = sys.platform.lower(), platform.machine().lower()
    entry = next((m for m in TRACE_PROCESSOR_SHELL_MANIFEST
                  if m.get("platform") == plat and machine in m.get("machine", [])), None)
    if entry is None or not entry.get("url"):
        raise EngineUnavailableError(f"{prefix}no prebuilt trace_processor for {plat}-{machine}")
    cache = os.path.join(os.path.expanduser("~"), ".local", "share", "perfetto", "prebuilts")
    root, ext = os.path.splitext(entry["file_name"])
    bin_path = os.path.join(cache, f"{root}-{entry['sha256'][:16]}{ext}")
    if os.path.exists(bin_path):  # only ever created by an atomic rename after the SHA-256 check
        return bin_path
    tmp_path = f"{bin_path}.{os.getpid()}.{random.randint(0, 1 << 30)}.tmp"
    try:
        os.makedirs(cache, exist_ok=True)
        p = subprocess.run(["curl", "-f", "-sS", "-L", "-o", tmp_path, entry["url"]], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s)
        if p.returncode != 0:
            why = _CURL_FAILURES.get(p.returncode, f"the download failed (curl exit status {p.returncode})")
            raise EngineUnavailableError(f"{prefix}the perfetto package could not download one: {why}")
        with open(tmp_path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != entry["sha256"]:
            raise EngineUnavailableError(f"{prefix}the perfetto package's download had the wrong checksum")
        os.chmod(tmp_path, 0o755)
        os.replace(tmp_path, bin_path)
        return bin_path
    except subprocess.TimeoutExpired:
        raise EngineUnavailableError(f"{prefix}the perfetto package's download did not finish in {timeout_s:g} s"
                                     ) from None
    except OSError as e:  # no curl, unwritable cache...
        raise EngineUnavailableError(f"{prefix}the perfetto package could not download one ({e.strerror or e})"
                                     ) from None
    finally:
        try:
            os.unlink(tmp_path)
        except OSError:
            pass


STATUS_POLL_S = 0.01
"""How often :meth:`Shell.wait` asks a starting trace_processor whether it listens yet."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    """Whether a trace_processor answers ``/status`` on ``port``."""
    conn = http.client.HTTPConnection("localhost", port, timeout=5)
    try:
        conn.request("GET", "/status")
        with conn.getresponse() as r:
            r.read()
            return r.status == 200
    except (OSError, http.client.HTTPException):  # refused (not listening yet), reset, not HTTP (yet)...
        return False
    finally:
        conn.close()


class Shell:
    """A ``trace_processor_shell`` serving HTTP on a local port, started by :func:`spawn_shell` and ended by
    :meth:`close` (its whole process group: nothing it started outlives it)."""

    def __init__(self, process: subprocess.Popen, port: int, output) -> None:
        self.process, self.port, self._output = process, port, output

    @property
    def addr(self) -> str:
        return f"localhost:{self.port}"

    def output(self) -> str:
        """The first line of what it printed (stdout and stderr), for an error message."""
        self._output.seek(0)
        text = self._output.read(4096).decode("utf-8", "replace").strip()
        return text.splitlines()[0][:200] if text else ""

    def wait(self, timeout_s: float) -> Shell:
        """Wait until it answers ``/status``, asking every ``STATUS_POLL_S``; itself. perfetto's own start
        (``shell.load_shell``) asks once a second, and its first question comes before any process can listen, so it
        spends a whole second there on every trace (the trace is then loaded by :func:`send_trace`, and queried
        through perfetto's client, ``TraceProcessor(addr=...)``). Raises EngineUnavailableError (and ends it) if it
        exits or does not answer within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not _listening(self.port):
            if self.process.poll() is not None:
                said = self.output()
                self.close()
                raise EngineUnavailableError(f"trace_processor exited as it started (status {self.process.returncode})"
                                             + (f": {said}" if said else ""))
            if time.monotonic() > deadline:
                self.close()
                raise EngineUnavailableError(f"trace_processor did not start serving within {timeout_s:g} s")
            time.sleep(STATUS_POLL_S)
        return self

    def close(self) -> None:
        p = self.process
        if p.poll() is None:
            try:
                if os.name == "posix":
                    os.killpg(p.pid, signal.SIGKILL)
                else:  # pragma: no cover - Windows
                    p.kill()
            except OSError:
                pass
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self._output.close()


def spawn_shell(binary: str) -> Shell:
    """Start ``binary`` as trace_processor's HTTP server (``-D --http-port PORT --no-ftrace-raw``, the arguments
    perfetto's own ``TraceProcessor`` starts it with) on a free local port; :meth:`Shell.wait` waits until it
    serves. Raises EngineUnavailableError if it cannot be started."""
    port = _free_port()
    output = tempfile.TemporaryFile()  # noqa: SIM115 - held by the Shell, closed by its close()
    try:
        process = subprocess.Popen([binary, "-D", "--http-port", str(port), "--no-ftrace-raw"],
                                   stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=os.name == "posix")
    except OSError as e:
        output.close()
        raise EngineUnavailableError(f"trace_processor could not be started: {e.strerror or e}") from None
    return Shell(process, port, output)


PARSE_CHUNK = 2**20
"""A trace goes to trace_processor in pieces of this size, as perfetto's client sends a file."""


@functools.cache
def rpc_message(name: str):
    """The class of trace_processor's RPC message ``perfetto.protos.<name>`` (``AppendTraceDataResult``...), from
    the descriptor the perfetto package ships, read with protobuf without importing perfetto's client."""
    from google.protobuf import descriptor_pb2, message_factory
    from google.protobuf.descriptor_pool import DescriptorPool
    spec = importlib.util.find_spec("perfetto")
    if spec is None or not spec.submodule_search_locations:
        raise EngineUnavailableError("the perfetto package is not installed")
    folder = os.path.join(next(iter(spec.submodule_search_locations)), "trace_processor")
    files = descriptor_pb2.FileDescriptorSet()
    with open(os.path.join(folder, "trace_processor.descriptor"), "rb") as f:
        files.MergeFromString(f.read())
    pool = DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"perfetto.protos.{name}"))


def send_trace(shell: Shell, path: str) -> None:
    """Load the trace at ``path`` into ``shell`` as perfetto's client loads a file (``TraceProcessor(trace=path)``):
    the file in ``PARSE_CHUNK`` pieces to ``/parse``, each answered by an ``AppendTraceDataResult``, then
    ``/notify_eof``, which returns once the load is done. Done here, not by that client, because the client imports
    pandas first (a third of a second): the load starts as soon as trace_processor listens. Raises
    EngineUnavailableError with trace_processor's error."""
    result_type = rpc_message("AppendTraceDataResult")
    conn = http.client.HTTPConnection("localhost", shell.port)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(PARSE_CHUNK):
                conn.request("POST", "/parse", body=chunk)
                with conn.getresponse() as r:
                    result = result_type.FromString(r.read())
                if result.error:
                    raise EngineUnavailableError(f"trace_processor could not load the trace: {result.error[:300]}")
        conn.request("GET", "/notify_eof")
        with conn.getresponse() as r:
            r.read()
    finally:
        conn.close()


class _Connected:
    """A :class:`Shell` with the trace loaded (:func:`send_trace`) and perfetto's ``TraceProcessor`` client
    connected to it, which ends with it: ``query``, ``close``."""

    def __init__(self, shell: Shell, path: str) -> None:
        self._shell = shell
        try:
            send_trace(shell, path)
            try:
                from perfetto.trace_processor import TraceProcessor
            except ImportError as e:
                raise EngineUnavailableError(f"the perfetto package is not installed ({e})") from None
            self._tp = TraceProcessor(addr=shell.addr)
        except BaseException:
            shell.close()
            raise

    def query(self, sql: str):
        return self._tp.query(sql)

    def close(self) -> None:
        try:
            self._tp.close()
        finally:
            self._shell.close()


class PerfettoBackend:
    """One trace in a trace_processor process, started by ``start()`` (a ``TraceProcessor``), and again after a
    console query was stopped at its deadline (stopping it means ending that process)."""

    def __init__(self, start) -> None:
        self._start = start
        self._tp = start()
        self._closed = False
        self._lock = threading.Lock()
        self._tables = None
        self._gate = None

    @property
    def tables(self):
        """The typed tables the analyses read, from the extraction queries (``_extract.py``), on first use."""
        if self._tables is None:
            from ._extract import tables_from_sql
            self._tables = tables_from_sql(self.query_columns)
        return self._tables

    def _running(self):
        """(with the lock held) the trace_processor, started again if a stopped query ended the last one."""
        if self._closed:
            raise QueryError("the trace session is closed")
        if self._tp is None:
            try:
                self._tp = self._start()
            except Exception as e:  # noqa: BLE001 - the API raises plain Exceptions
                raise QueryError(f"trace_processor could not be started again: {str(e).strip()[:200]}") from None
        return self._tp

    def _run(self, sql: str):
        """(with the lock held) ``sql``'s rows as a DataFrame."""
        tp = self._running()
        try:
            return tp.query(sql).as_pandas_dataframe()
        except Exception as e:  # perfetto raises TraceProcessorException
            raise QueryError(f"SQL error: {str(e).strip()[:500]}") from None

    def _rows(self, sql: str) -> tuple[list[str], list[tuple]]:
        """(with the lock held) ``sql``'s (column names, rows), each cell the Python object perfetto's iterator holds
        (None for NULL, whole numbers as int: exact)."""
        tp = self._running()
        try:
            it = tp.query(sql)
            names = list(it.column_names)
            cells = list(it.cells)
        except Exception as e:  # noqa: BLE001 - perfetto raises TraceProcessorException
            raise QueryError(f"SQL error: {str(e).strip()[:500]}") from None
        k = len(names)
        return names, [tuple(cells[i:i + k]) for i in range(0, len(cells), k)] if k else []

    def query_columns(self, sql: str) -> dict:
        """``sql``'s result as ``{column: object array of its values}`` (None for NULL): views of perfetto's
        ``QueryResultIterator`` as it holds them (``column_names`` and ``cells``, one Python object per cell, row after
        row), without the DataFrame ``as_pandas_dataframe`` would build of them: the extraction queries' hand-over."""
        import numpy as np
        with self._lock:
            tp = self._running()
            try:
                it = tp.query(sql)
            except Exception as e:  # noqa: BLE001 - perfetto raises TraceProcessorException
                raise QueryError(f"SQL error: {str(e).strip()[:500]}") from None
        names = list(it.column_names)
        cells = np.asarray(it.cells, dtype=object).reshape(-1, len(names))
        return {c: cells[:, j] for j, c in enumerate(names)}

    def query_df(self, sql: str):
        if not isinstance(sql, str):
            raise QueryError(f"query must be a string, got {type(sql).__name__}")
        with self._lock:
            return self._run(sql)

    def _schema(self):
        """(table, column) of every table and view the running trace_processor has (``_rules.SCHEMA_QUERY``)."""
        try:
            return self._run(SCHEMA_QUERY).itertuples(index=False, name=None)
        except QueryError as e:
            raise QueryError(f"trace_processor's tables could not be listed for the console's rules: {e}") from None

    def query_capped(self, sql: str, limits):
        """A console query on trace_processor, under the console's rules and caps.

        trace_processor runs the statement in its own SQLite, where no authorizer can be installed, so the
        statement is first judged here (``_rules.StatementGate``): compiled, not run, under the same rules, with the
        same messages, in an empty database holding trace_processor's own schema (so its tables and views, and those
        of a standard-library module included with ``INCLUDE PERFETTO MODULE``, can be read). Only the statement's
        body is sent (no trailing comment). The row cap is applied inside trace_processor: a query is wrapped in
        ``SELECT * FROM (...) LIMIT n``, n being the rows that fit under the row cap and, at ``CELL_BYTES`` a value,
        the size cap, so no more than that cross over; the caps are applied again to what arrives, counting text
        (a subquery's duplicate column names come back made unique, ``a`` and ``a:1``). At the deadline the
        trace_processor process is ended (the only way to stop its statement), which frees the session at once; the
        next query starts a new one, which loads the trace again."""
        from ._rules import StatementGate, capped_rows, console_frame, row_cap, stopped_error
        with self._lock:
            if self._gate is None:
                self._gate = StatementGate(self._schema)
            statement = self._gate.check(sql)
            sent = statement.body
            if statement.wrappable:
                sent = f"SELECT * FROM (\n{statement.body}\n) LIMIT {row_cap(statement, limits) + 1}"
            stopped = threading.Event()
            tp = self._running()

            def _stop() -> None:
                stopped.set()
                tp.close()
            timer = threading.Timer(limits.deadline_s, _stop)
            timer.daemon = True
            timer.start()
            try:
                names, rows = self._rows(sent)
            except QueryError:
                if stopped.is_set():
                    timer.join()  # (its close() ends the process: over when the error says it is)
                    self._tp = None
                    raise stopped_error(limits) from None
                raise
            finally:
                timer.cancel()
            if stopped.is_set():  # the answer came just as the process was being ended
                timer.join()
                self._tp = None
        rows, cut = capped_rows(rows, limits)
        return console_frame(names, rows), cut

    def close(self) -> None:
        self._closed = True
        tp, self._tp = self._tp, None
        if tp is not None:
            try:
                tp.close()
            except Exception:  # noqa: BLE001
                pass


def open_perfetto(path: str, binary: str | None, *, max_bytes: int, timeout_s: float | None,
                  while_loading: Callable[[], Any] | None = None) -> tuple[PerfettoBackend, str]:
    """Open ``path`` with trace_processor: (its backend, the one line saying which binary). Raises
    EngineUnavailableError if it cannot run.

    ``while_loading`` runs in this thread while trace_processor starts and loads the trace (perfetto's client sends
    it the file from another thread, which mostly waits on trace_processor, so the two overlap); the error it
    raises is raised here, after the trace_processor it waited beside is ended. It runs whenever the trace was
    handed to trace_processor, also when trace_processor then failed (EngineUnavailableError) and not when an
    earlier check failed."""
    if importlib.util.find_spec("perfetto") is None:
        raise EngineUnavailableError("the perfetto package is not installed")
    if binary is not None:
        if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
            raise EngineUnavailableError(f"trace_processor binary {binary!r} does not exist or is not executable")
        why = f"perfetto: trace_processor at {binary}"
    else:
        binary = _fetch_binary(timeout_s)
        why = f"perfetto: the perfetto package's trace_processor ({binary})"
    kind = stream_kind(path)
    if kind is not None:  # (checked before check_size, which would consume a pipe)
        raise EngineUnavailableError(f"trace_processor reads regular files only, and {path} is {kind}")
    check_size(path, max_bytes)
    if not os.path.isfile(path):
        raise TraceError(f"no such trace file: {path}")
    start_timeout = timeout_s or 60
    first = [spawn_shell(binary)]

    def start() -> _Connected:
        shell = first.pop() if first else spawn_shell(binary)
        return _Connected(shell.wait(start_timeout), path)

    loaded: dict = {}

    def load() -> None:
        try:
            loaded["backend"] = PerfettoBackend(start)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            loaded["error"] = e
    loader = threading.Thread(target=load, name="trace_processor load", daemon=True)
    loader.start()
    try:
        if while_loading is not None:
            while_loading()
    except BaseException:
        loader.join()
        if "backend" in loaded:
            loaded["backend"].close()
        raise
    loader.join()
    e = loaded.get("error")
    if e is None:
        return loaded["backend"], why
    if isinstance(e, EngineUnavailableError) or not isinstance(e, Exception):
        raise e
    said = str(e).strip()  # (perfetto's client raises plain Exceptions)
    raise EngineUnavailableError("trace_processor failed to start or load the trace: "
                                 f"{said.splitlines()[0][:200] if said else type(e).__name__}") from None
