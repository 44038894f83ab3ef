"""open_trace() and TraceSession: one loaded trace, SQL in, DataFrame out."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..errors import EngineUnavailableError, ProfilingError, QueryError
from ._source import trace_cap

if TYPE_CHECKING:
    import pandas as pd

    from ._stats import LoadStats

ENGINES = ("auto", "perfetto", "sqlite")
SQL_TABLES = ("on_first_query", "background")  # when the mirror writes its SQLite tables (see open_trace)


@dataclass(frozen=True)
class QueryLimits:
    """The caps on a console query (``TraceSession.console``); the app's own queries run without them.

    Attributes:
        deadline_s: the statement is stopped after this many seconds (QueryError naming the limit), even inside one
            SQL function call (its process is ended: the mirror's console process, or trace_processor's), which also
            frees the session for other callers.
        max_rows: fetching stops after this many rows (the result says it was cut).
        max_result_bytes: fetching stops once the result passes this many bytes, each value counting 16 bytes
            (``_rules.CELL_BYTES``: a NULL or a number too) plus the length of its text or blob.
        max_value_bytes: no single string or blob may be longer (SQLite's ``SQLITE_LIMIT_LENGTH``).
        max_work_bytes: on the mirror, the memory SQLite may hold while the statement runs, its sorting, grouping and
            temporary tables included (kept in memory, not in temporary files that only the disk caps); past it
            the statement fails with QueryError. trace_processor keeps its own memory.
    """
    deadline_s: float = 10.0
    max_rows: int = 100_000
    max_result_bytes: int = 64 * 2**20
    max_value_bytes: int = 16 * 2**20
    max_work_bytes: int = 2**30

    def __post_init__(self) -> None:
        # (a NaN or infinite deadline would reach the console as no deadline, or as an error mid-query)
        if not (isinstance(self.deadline_s, (int, float)) and not isinstance(self.deadline_s, bool)
                and math.isfinite(self.deadline_s) and self.deadline_s > 0):
            raise ValueError(f"QueryLimits.deadline_s must be a finite number of seconds above 0, got "
                             f"{self.deadline_s!r}")
        for name in ("max_rows", "max_result_bytes", "max_value_bytes", "max_work_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
                raise ValueError(f"QueryLimits.{name} must be a whole number above 0, got {v!r}")


@dataclass(frozen=True)
class ConsoleResult:
    """A console query's rows, and whether a cap cut them (``cut``) under ``limits``."""
    frame: pd.DataFrame
    cut: bool
    limits: QueryLimits


class TraceSession:
    """A trace opened for SQL. Use ``query(sql)``; close it (or use ``with``) when done.

    Attributes:
        path: the trace file.
        engine: ``"perfetto"`` (a real trace_processor) or ``"sqlite"`` (the offline mirror).
        engine_reason: one line saying why this engine was chosen.
        load_stats: for the mirror, what was read and what was skipped (``LoadStats``);
            None for perfetto.
        devices: the GPUs the trace says it ran on (Kineto's ``deviceProperties``: ``[{"id", "name",
            "compute_capability"}]``, ``[]`` when it names none): read with the events by the mirror, and for
            perfetto (trace_processor does not keep them) by the same streamed reading of the document, its events
            split but not decoded, while trace_processor loads the trace (else on first use).
        recorded_with: the torch.profiler options the trace says it was recorded with (``profile_memory``,
            ``with_stack``, ``record_shapes``, ``with_flops``, ``with_modules``: those torch wrote at the top level
            as on), read as ``devices`` is.
    """

    def __init__(self, path: str, engine: str, engine_reason: str, backend: Any,
                 load_stats: LoadStats | None = None, devices: list | None = None,
                 recorded_with: list | None = None) -> None:
        self.path = path
        self.engine = engine
        self.engine_reason = engine_reason
        self.load_stats = load_stats
        self._backend = backend
        self._devices: list | None = devices if load_stats is None else load_stats.devices
        self._recorded: list | None = recorded_with if load_stats is None else load_stats.recorded_with

    def _read_header(self) -> None:
        header = _header_of_file(self.path)
        if self._devices is None:
            self._devices = header.devices
        if self._recorded is None:
            self._recorded = header.recorded_with

    @property
    def devices(self) -> list[dict]:
        if self._devices is None:
            self._read_header()
        return self._devices

    @property
    def recorded_with(self) -> list[str]:
        if self._recorded is None:
            self._read_header()
        return self._recorded

    def query(self, sql: str) -> pd.DataFrame:
        """Run one read-only SQL statement; returns its rows as a DataFrame.

        Raises QueryError for SQL errors or a closed session; on the mirror also for what the console's rules refuse
        (writes, ATTACH, extension loading...). On the perfetto engine the SQL goes to trace_processor as it is.
        """
        if self._backend is None:
            raise QueryError("the trace session is closed")
        return self._backend.query_df(sql)

    def console(self, sql: str, limits: QueryLimits | None = None) -> ConsoleResult:
        """Run one statement a user typed, under ``limits`` (default ``QueryLimits()``): the console's read-only
        rules (``_rules``: one SELECT, WITH, VALUES or EXPLAIN query or read-only PRAGMA, judged the same way on both
        engines; on the perfetto engine also trace_processor's own tables and ``INCLUDE PERFETTO MODULE``), plus a
        deadline, a row cap, a result-size cap, a value-size cap and, on the mirror, a cap on SQLite's memory.
        Raises QueryError for a statement the rules refuse, and for one stopped at its deadline, holding a value
        over the size cap or needing more memory than the cap."""
        if self._backend is None:
            raise QueryError("the trace session is closed")
        limits = QueryLimits() if limits is None else limits
        frame, cut = self._backend.query_capped(sql, limits)
        return ConsoleResult(frame, cut, limits)

    @property
    def tables(self):
        """The trace's typed tables (:class:`~profiling_core.trace._tables.TraceTables`: numpy columns of ``slice``,
        ``flow``, ``thread``, ``process``, ``thread_track`` and an args reader), which every analysis reads: on the
        mirror the columns it loaded, on perfetto the results of the extraction queries (run on first use). Raises
        QueryError on a closed session."""
        if self._backend is None:
            raise QueryError("the trace session is closed")
        return self._backend.tables

    def close(self) -> None:
        """Release the engine (and delete the mirror's temporary database). Idempotent."""
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()

    @property
    def closed(self) -> bool:
        return self._backend is None

    def __enter__(self) -> TraceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"TraceSession({self.path!r}, engine={self.engine!r}, {state})"


class _MirrorAdapter:
    def __init__(self, backend) -> None:
        self._b = backend

    def query_df(self, sql: str):
        import pandas as pd
        cols, rows, _cut = self._b.query_rows(sql, None)
        return pd.DataFrame.from_records(rows, columns=cols) if rows else pd.DataFrame(
            {c: pd.Series(dtype=object) for c in cols})

    def query_capped(self, sql: str, limits: QueryLimits):
        from ._rules import console_frame
        cols, rows, cut = self._b.query_rows(sql, limits)
        return console_frame(cols, rows), cut

    @property
    def tables(self):
        return self._b.tables

    def close(self) -> None:
        self._b.close()

    def build_sql_in_background(self) -> None:
        self._b.start_sql()


def _taken_over(loaded: "TraceSession", path: str, reason: str, sql_tables: str) -> "TraceSession":
    """A session on ``path`` that takes over the mirror ``loaded`` holds (its columns, args and SQLite files): no
    second load. ``loaded`` is closed to its caller from then on (it no longer owns the backend)."""
    backend, loaded._backend = loaded._backend, None
    if sql_tables == "background":
        backend.build_sql_in_background()
    return TraceSession(path, "sqlite", reason, backend, loaded.load_stats)


def _header_of_file(path: str, max_bytes: int | None = None) -> LoadStats:
    """The document-level facts of the trace at ``path`` as a ``LoadStats`` (its ``devices``, from ``deviceProperties``,
    and its ``recorded_with``), read as the mirror's loader reads them: the document streamed a chunk at a time
    (``STREAM_CHUNK``, as the mirror reads it) and split around its events, which are not decoded, else (a document that
    cannot be streamed) split whole; none for a file it cannot read. Only about a chunk is held at a time."""
    from ._decode import NotStreamable, split_events, stream_events
    from ._source import STREAM_CHUNK, iter_trace_chunks, read_trace_bytes
    from ._stats import LoadStats

    stats = LoadStats()
    try:
        for _ in stream_events(iter_trace_chunks(path, max_bytes, STREAM_CHUNK), stats):
            pass
    except NotStreamable:
        try:
            split_events(read_trace_bytes(path, max_bytes), path, stats)
        except (ProfilingError, OSError):
            return LoadStats()
    except (ProfilingError, OSError):
        return LoadStats()
    return stats


def open_mirror(path: str, max_bytes: int | None = None, reason: str = "",
                sql_tables: str = "on_first_query", while_loading: Callable[[], Any] | None = None) -> TraceSession:
    from ._mirror import MirrorBackend

    backend = MirrorBackend(path, trace_cap(max_bytes), sql_tables=sql_tables, while_loading=while_loading)
    return TraceSession(os.fspath(path), "sqlite", reason or "sqlite: the offline SQLite mirror was asked for",
                        _MirrorAdapter(backend), backend.stats)


def open_trace(path: str | os.PathLike, engine: str = "auto", *, max_bytes: int | None = None,
               perfetto_bin: str | None = None, perfetto_timeout_s: float = 5.0,
               sql_tables: str = "on_first_query",
               while_loading: Callable[[], Any] | None = None,
               loaded: TraceSession | None = None) -> TraceSession:
    """Open a Chrome/Kineto JSON trace (``.json`` or gzip, detected by content) for SQL.

    Args:
        path: the trace file.
        engine: ``"perfetto"`` (trace_processor; raises EngineUnavailableError if it cannot run),
            ``"sqlite"`` (the offline mirror of trace_processor's tables), or ``"auto"``
            (default): perfetto if a binary is given (``perfetto_bin`` or ``$PERFETTO_BIN``) or can be
            fetched within ``perfetto_timeout_s``, else the mirror; ``engine_reason`` says which and why.
        max_bytes: refuse traces larger than this once decompressed with TraceTooLargeError (default:
            ``$PROFILING_MAX_TRACE_MIB`` MiB where set, else 512 MiB; ``trace.trace_cap``).
        perfetto_bin: path of a ``trace_processor_shell`` binary (overrides ``$PERFETTO_BIN``).
        perfetto_timeout_s: how long auto mode waits for perfetto to start before falling back.
        sql_tables: the mirror only: when its SQLite tables are written from the loaded columns —
            ``"on_first_query"`` (default: when SQL is first asked for; the analyses read the columns and need no
            SQL, so they never wait for SQLite or share the CPU with it) or ``"background"`` (by a background thread as
            soon as the load returns, so SQL is usually ready before it is asked for; the app does this).
        while_loading: a function to run in this thread while the trace loads (the command line imports the
            analyses meanwhile). The mirror then loads in a child process forked from this one, where it can
            (``_mirror.load_model`` says when: on Linux, with no other thread running), so the two overlap; with
            perfetto it runs while trace_processor starts and loads the trace. Either way it has run once when this returns, and an error it
            raises is raised here (the load is then stopped).
        loaded: an open session of the offline mirror already loaded from this file's bytes (``RunStore.import_trace``
            hands over the one its check loaded): where this call opens the mirror (``engine="sqlite"``, or
            ``"auto"`` when perfetto cannot run) it takes that session's tables over instead of loading the file
            again, and ``engine_reason`` says so; where it opens perfetto, ``loaded`` is closed. Either way ``loaded``
            is closed to the caller afterwards. ValueError for a closed session or one of another engine.

    Returns:
        A TraceSession; close it when done (or use it as a context manager).
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    max_bytes = trace_cap(max_bytes)
    if not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
    if sql_tables not in SQL_TABLES:
        raise ValueError(f"sql_tables must be one of {', '.join(SQL_TABLES)}, got {sql_tables!r}")
    if loaded is not None and (loaded.closed or loaded.engine != "sqlite"):
        raise ValueError("loaded must be an open session of the offline SQLite mirror, got "
                         + ("a closed session" if loaded.closed else f"one of engine {loaded.engine!r}"))
    path = os.fspath(path)
    once = "; its tables taken over from the session that had loaded this file, not read again" if loaded else ""
    if engine == "sqlite":
        if loaded is not None:
            if while_loading is not None:
                while_loading()
            return _taken_over(loaded, path, "sqlite: the offline SQLite mirror was asked for" + once, sql_tables)
        return open_mirror(path, max_bytes, sql_tables=sql_tables, while_loading=while_loading)
    from ._perfetto import open_perfetto
    binary = perfetto_bin or os.environ.get("PERFETTO_BIN") or None
    ran: list = []
    header: list = []

    def meanwhile() -> None:  # while trace_processor loads: the caller's work, then the file's deviceProperties
        if while_loading is not None:
            ran.append(True)
            while_loading()
        header.append(_header_of_file(path, max_bytes))
    try:
        backend, why = open_perfetto(path, binary, max_bytes=max_bytes,
                                     timeout_s=None if engine == "perfetto" else perfetto_timeout_s,
                                     while_loading=meanwhile)
    except EngineUnavailableError as e:
        if engine == "perfetto":
            if loaded is not None:
                loaded.close()
            raise
        reason = f"perfetto: {e}; using the offline SQLite mirror"
        if loaded is not None:
            if while_loading is not None and not ran:
                while_loading()
            return _taken_over(loaded, path, reason + once, sql_tables)
        return open_mirror(path, max_bytes, reason=reason, sql_tables=sql_tables,
                           while_loading=None if ran else while_loading)
    except BaseException:
        if loaded is not None:
            loaded.close()
        raise
    if loaded is not None:
        loaded.close()  # (perfetto's own tables answer from here on)
    return TraceSession(path, "perfetto", why, backend, None, devices=header[0].devices,
                        recorded_with=header[0].recorded_with)
