"""The perfetto engine: perfetto's own Python API driving a real trace_processor binary.

The binary comes from ``perfetto_bin`` / ``$PERFETTO_BIN``, else from the perfetto package's
pinned download (cached under ~/.local/share/perfetto). In auto mode that download gets a short,
hard time bound and its output is captured, so an offline machine falls back to the mirror fast and quietly.
"""
from __future__ import annotations

import hashlib
import os
import platform
import random
import subprocess
import sys
import threading

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
        from ._rules import StatementGate, capped_rows, row_cap, stopped_error
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
                frame = self._run(sent)
            except QueryError:
                if stopped.is_set():
                    self._tp = None
                    raise stopped_error(limits) from None
                raise
            finally:
                timer.cancel()
            if stopped.is_set():  # the answer came just as the process was being ended
                self._tp = None
        rows, cut = capped_rows(frame.itertuples(index=False, name=None), limits)
        return frame.iloc[:len(rows)], cut

    def close(self) -> None:
        self._closed = True
        tp, self._tp = self._tp, None
        if tp is not None:
            try:
                tp.close()
            except Exception:  # noqa: BLE001
                pass


def open_perfetto(path: str, binary: str | None, *, max_bytes: int, timeout_s: float | None
                  ) -> tuple[PerfettoBackend, str]:
    """Open ``path`` with trace_processor: (its backend, the one line saying which binary). Raises
    EngineUnavailableError if it cannot run."""
    try:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    except ImportError as e:
        raise EngineUnavailableError(f"the perfetto package is not installed ({e})") from None
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
    config = TraceProcessorConfig(bin_path=binary, load_timeout=int(timeout_s or 60) if timeout_s else 60)
    try:
        backend = PerfettoBackend(lambda: TraceProcessor(trace=path, config=config))
    except Exception as e:  # noqa: BLE001 - the API raises plain Exceptions
        raise EngineUnavailableError(f"trace_processor failed to start or load the trace: "
                                     f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__}"
                                     ) from None
    return backend, why
