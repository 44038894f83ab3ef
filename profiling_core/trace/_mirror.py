"""The offline engine: a read-only SQLite database shaped like trace_processor's tables.

Built once per trace into a temporary file (deleted on close), so a large trace does not sit in
RSS. User SQL runs under an authorizer that allows reading only, plus ``PRAGMA query_only``.
"""
from __future__ import annotations

import functools
import gc
import itertools
import json
import os
import queue
import re
import sqlite3
import tempfile
import threading
import time
from typing import Any

import msgspec

from ..errors import QueryError, TraceFormatError
from . import _schema
from ._collect import Collector
from ._model import Model, build
from ._stats import LoadStats
from ._rules import ReadOnlyRules, capped_rows, query_error, stopped_error
from ._tables import ABSENT, TraceTables, visible_arg
from ._decode import NotStreamable, iter_batches, repair_utf8, split_events, stream_typed
from ._source import is_stream, iter_trace_chunks, read_trace_bytes

_QUOTED = re.compile(r'\."((?:[^"\\]|\\.)*)"')
_INDEX = re.compile(r"\[\d+\]")
_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY_PART = re.compile(r"^(.*?)((?:\[\d+\])*)$")
_BULK_AFTER = 256  # extract_arg calls for one key before all its values are read at once
_STREAM_CHUNK = 4 << 20  # bytes of JSON read (and split into events) at a time
_BULK_KEYS = 16    # at most this many keys kept that way per trace


@functools.lru_cache(maxsize=4096)
def _tp_key(fullkey: str | None) -> str | None:
    """json_tree's '$."a b"[0].c' -> trace_processor's 'args.a b[0].c'."""
    if fullkey is None:
        return None
    return "args" + _QUOTED.sub(lambda m: "." + m.group(1), fullkey[1:])


@functools.lru_cache(maxsize=4096)
def _tp_flat_key(fullkey: str | None) -> str | None:
    key = _tp_key(fullkey)
    return None if key is None else _INDEX.sub("", key)


@functools.lru_cache(maxsize=1024)
def _json_path(key: str) -> str | None:
    """trace_processor's arg key ('args.External id', 'args.grid[0]') -> a JSON path."""
    if not key.startswith("args."):
        return None
    path = "$"
    for part in key[5:].split("."):
        name, idx = _KEY_PART.match(part).groups()
        if not name:
            return None
        path += "." + (name if _SIMPLE.match(name) else '"' + name.replace('"', '\\"') + '"') + idx
    return path


_PREFIX = "trace-mirror-"


def _remove_orphans(tmp_dir: str | None) -> None:
    """Delete the files of mirrors whose process is gone (killed: SIGKILL, a time-out, a crash), so they cannot fill
    the temporary directory (an args database is ~half the trace's size). Each file's name carries its process id;
    a process that still exists keeps its files (a reused pid only means a file is kept a little longer)."""
    d = tmp_dir or tempfile.gettempdir()
    try:
        names = os.listdir(d)
    except OSError:
        return
    alive: dict[int, bool] = {os.getpid(): True}
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        pid = name[len(_PREFIX):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        pid = int(pid)
        if pid not in alive:
            try:
                os.kill(pid, 0)
                alive[pid] = True
            except ProcessLookupError:
                alive[pid] = False
            except OSError:  # e.g. another user's process: it exists
                alive[pid] = True
        if not alive[pid]:
            try:
                os.unlink(os.path.join(d, name))
            except OSError:
                pass


class RawArgs:
    """The mirror's :class:`~profiling_core.trace._tables.ArgsReader`: each arg set's raw JSON from the args database
    (complete once the trace is loaded), its top-level value decoded with msgspec (each distinct value's text once)
    and shown as trace_processor's ``args`` table shows it (``visible_arg``). An arg set that is not a JSON object
    has no arguments; of a key written twice, the last counts."""

    def __init__(self, backend: "MirrorBackend") -> None:
        self._backend = backend
        self._top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
        self._value = msgspec.json.Decoder().decode

    def get(self, name: str, arg_set_ids) -> dict:
        raws = self._backend.raw_args(a for a in arg_set_ids if a >= 0)
        out: dict = {}
        seen: dict = {}
        for a, raw in raws.items():
            try:
                v = self._top(raw).get(name)
            except (msgspec.DecodeError, RecursionError):
                continue
            if v is None:
                continue
            text = bytes(v)
            got = seen.get(text, ABSENT)
            if got is ABSENT:
                try:
                    got = visible_arg(self._value(text))
                except (msgspec.DecodeError, RecursionError):
                    got = ABSENT
                seen[text] = got
            if got is not ABSENT:
                out[a] = got
        return out


class MirrorBackend:
    """Owns the columns, the SQLite file and the connections of one loaded trace.

    Loading reads the JSON into columns (:class:`TraceTables`, what the analyses read) and returns; a background
    thread then copies the columns into the SQLite file when the first query needs them (``sql_tables=
    "on_first_query"``: nothing is spent on SQLite by a caller that only reads the columns) or right away
    (``"background"``). SQLite's own work (inserting the rows, building the indexes) runs with the GIL released, so
    it overlaps with whatever the caller does next. A query waits for it (and raises its error, if it had one);
    ``close()`` interrupts it.
    """

    def __init__(self, path: str, max_bytes: int, tmp_dir: str | None = None,
                 sql_tables: str = "on_first_query") -> None:
        _remove_orphans(tmp_dir)
        fd, self.db_path = tempfile.mkstemp(prefix=f"{_PREFIX}{os.getpid()}-", suffix=".sqlite", dir=tmp_dir)
        os.close(fd)
        self.stats = LoadStats()
        self._lock = threading.Lock()
        self._rules: ReadOnlyRules | None = None
        self._arg_calls: dict[str, int] = {}
        self._arg_tables: dict[str, dict] = {}
        self.args_path = self.db_path[:-len(".sqlite")] + "-args.sqlite"
        self._conn = self._aux = self._args_conn = None
        self._closed = False
        self._builder: threading.Thread | None = None
        self._build_conn: sqlite3.Connection | None = None
        self._build_error: BaseException | None = None
        self._start_lock = threading.Lock()
        self.tables: TraceTables | None = None
        try:
            model = _load_model(path, max_bytes, self.stats, self.args_path)
            self.tables = TraceTables.from_model(model, RawArgs(self))
            self._builder = threading.Thread(target=self._build_sql, args=(model,), name="trace-sql-build",
                                             daemon=True)
            del model
            if sql_tables == "background":
                self._builder.start()
        except BaseException:
            self.close()
            raise

    def _build_sql(self, model: Model) -> None:
        """(background thread) Write the columns into the SQLite file: tables, rows, views, indexes."""
        conn = None
        try:
            conn = self._build_conn = sqlite3.connect(self.db_path, check_same_thread=False)
            _write_tables(conn, model, lambda: self._closed)
        except BaseException as e:  # noqa: BLE001 - raised by the first query, in the caller's thread
            self._build_error = e
        finally:
            self._build_conn = None
            if conn is not None:
                conn.close()

    def wait_sql(self) -> None:
        """Block until the SQLite tables are built (starting to build them if that waited for a first query); raise
        QueryError if building them failed."""
        builder = self._builder
        if builder is not None:
            with self._start_lock:
                if builder.ident is None and not self._closed:
                    builder.start()
            if builder.ident is not None:
                builder.join()
        if self._build_error is not None:
            e = self._build_error
            raise QueryError(f"the trace's SQL tables could not be written to {self.db_path}: "
                             f"{type(e).__name__}: {e}") from None

    def raw_args(self, arg_set_ids) -> dict[int, bytes]:
        """{arg_set_id: the raw JSON text of that event's ``args``} for these ids (unknown ids are left out).

        The args database is complete when the load returns (it is written while the JSON is decoded), so this
        never waits for the SQL tables. Raises QueryError on a closed session."""
        ids = sorted({int(a) for a in arg_set_ids})
        with self._lock:
            if self._closed:
                raise QueryError("the trace session is closed")
            if not ids:
                return {}
            if self._args_conn is None:
                self._args_conn = sqlite3.connect(f"file:{self.args_path}?mode=ro", uri=True,
                                                  check_same_thread=False)
                # Lookups by arg set id walk a few B-tree pages each: SQLite's default 2 MiB page cache would only
                # hold pages already used (−2 MiB at the analyses' peak on a 93 MB trace, same speed).
                self._args_conn.execute("PRAGMA cache_size = -256")
            try:
                return {a: bytes(r) for a, r in self._args_conn.execute(
                    "SELECT arg_set_id, raw FROM _args_raw WHERE arg_set_id IN (SELECT value FROM json_each(?))",
                    (json.dumps(ids),))}
            except sqlite3.Error as e:
                raise QueryError(f"the trace's args could not be read: {e}") from None

    def _connection(self) -> sqlite3.Connection:
        """The query connection, opened on first use once the tables are built (call with self._lock held)."""
        if self._closed:
            raise QueryError("the trace session is closed")
        if self._conn is None:
            self.wait_sql()
            conn = sqlite3.connect(self.db_path, check_same_thread=False)
            try:
                conn.execute("ATTACH DATABASE ? AS argsdb", (self.args_path,))
                conn.executescript(_schema.ARGS_VIEW)
                # A second, read-only connection serves extract_arg (a UDF cannot query its own connection).
                self._aux = sqlite3.connect(f"file:{self.args_path}?mode=ro", uri=True, check_same_thread=False)
                self._register(conn)
                self._rules = ReadOnlyRules(conn)
                conn.execute("PRAGMA query_only = ON")
                conn.set_authorizer(self._rules)
            except sqlite3.Error as e:
                conn.close()
                raise QueryError(f"the trace's SQL tables could not be opened: {e}") from None
            self._conn = conn
        return self._conn

    def _register(self, conn: sqlite3.Connection) -> None:
        conn.create_function("_tp_key", 1, _tp_key, deterministic=True)
        conn.create_function("_tp_flat_key", 1, _tp_flat_key, deterministic=True)
        conn.create_function("extract_arg", 2, self._extract_arg, deterministic=True)

    def _extract_arg(self, arg_set_id: Any, key: Any) -> Any:
        if arg_set_id is None or type(key) is not str:
            return None
        table = self._arg_tables.get(key)
        if table is not None and type(arg_set_id) is int:
            return table.get(arg_set_id)
        path = _json_path(key)
        if path is None:
            return None
        n = self._arg_calls[key] = self._arg_calls.get(key, 0) + 1
        if n >= _BULK_AFTER and type(arg_set_id) is int and key not in self._arg_tables \
                and len(self._arg_tables) < _BULK_KEYS:
            # A query asks this key of many rows (e.g. args.correlation of every launch): read it for all
            # arg sets in one pass in SQLite, then answer from a dict (~0.1 µs instead of ~5 µs a call).
            self._arg_tables[key] = table = self._bulk_arg(key, path)
            return table.get(arg_set_id)
        row = self._aux.execute(
            "SELECT json_extract(CAST(raw AS TEXT), ?), json_type(CAST(raw AS TEXT), ?) "
            "FROM _args_raw WHERE arg_set_id = ?", (path, path, arg_set_id)).fetchone()
        if row is None or row[1] in ("object", "array"):
            return None
        return row[0]

    def _bulk_arg(self, key: str, path: str) -> dict:
        """{arg_set_id: value} of ``key`` for every arg set that has it as a scalar (same rules as one call)."""
        sql = ("SELECT arg_set_id, json_extract(CAST(raw AS TEXT), ?1) FROM _args_raw "
               "WHERE json_type(CAST(raw AS TEXT), ?1) NOT IN ('object', 'array')")
        first = key[5:].split(".")[0].split("[")[0]
        params: tuple = (path,)
        if _SIMPLE.match(first):
            # Only arg sets whose text holds the key's name can hold it (one written with \u escapes has a backslash).
            sql += " AND (instr(raw, ?2) OR instr(raw, X'5C'))"
            params = (path, ('"' + first + '"').encode())
        return {a: v for a, v in self._aux.execute(sql, params) if v is not None}

    def query_rows(self, sql: str, limits: Any = None) -> tuple[list[str], list[tuple], bool]:
        """(columns, rows, cut): the rows of one read-only statement. With ``limits`` (a QueryLimits) the statement
        is interrupted at its deadline, no value may exceed ``max_value_bytes`` (SQLite's length limit, so none is
        built), and fetching stops at ``max_rows`` rows or ``max_result_bytes`` of text and blobs (``cut`` is then
        True; ``_rules.capped_rows``)."""
        if not isinstance(sql, str):
            raise QueryError(f"query must be a string, got {type(sql).__name__}")
        with self._lock:
            conn = self._connection()
            self._rules.reset()
            timed_out = [False]
            old_length = None
            if limits is not None:
                deadline = time.monotonic() + limits.deadline_s

                def _progress() -> int:
                    if time.monotonic() > deadline:
                        timed_out[0] = True
                        return 1  # SQLite interrupts the statement
                    return 0
                conn.set_progress_handler(_progress, 20_000)
                old_length = conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
            try:
                cur = conn.execute(sql)
                cols = [d[0] for d in cur.description] if cur.description else []
                if limits is None:
                    rows, cut = cur.fetchall(), False
                else:
                    rows, cut = capped_rows(cur, limits)  # SQLite steps one row at a time: nothing past the cap
                    cur.close()
            except (sqlite3.Error, sqlite3.Warning) as e:
                if timed_out[0]:
                    raise stopped_error(limits) from None
                raise query_error(e, self._rules, limits) from None
            except OverflowError as e:
                raise QueryError(f"SQL error: {e}") from None
            finally:
                if limits is not None:
                    conn.set_progress_handler(None, 0)
                    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, old_length)
        return cols, rows, cut

    def close(self) -> None:
        self._closed = True
        builder, self._builder = self._builder, None
        while builder is not None and builder.is_alive():
            # Closed before the SQL tables were needed: stop writing them (never delete the file under the thread).
            conn = self._build_conn
            if conn is not None:
                try:
                    conn.interrupt()
                except sqlite3.Error:
                    pass
            builder.join(0.01)
        for name in ("_conn", "_aux", "_args_conn"):
            conn = getattr(self, name, None)
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            setattr(self, name, None)
        for name in ("db_path", "args_path"):
            path = getattr(self, name, None)
            if path:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                setattr(self, name, None)


class _ArgsWriter:
    """Writes (arg_set_id, raw JSON) rows into the args database from a second thread.

    sqlite3 releases the GIL while SQLite copies rows into pages, so this overlaps with parsing.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.queue: queue.Queue = queue.Queue(maxsize=2)
        self.error: BaseException | None = None
        self.repaired = 0  # byte sequences of args that were not UTF-8 (see _decode.repair_utf8)
        self.thread = threading.Thread(target=self._run, name="trace-args-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn = None
        try:
            conn = sqlite3.connect(self.path)
            conn.execute("PRAGMA journal_mode = OFF")
            conn.execute("PRAGMA synchronous = OFF")
            conn.execute(_schema.ARGS_TABLE)
            conn.execute("BEGIN")
            while (rows := self.queue.get()) is not None:
                if rows:
                    # One statement per batch: the rows' bytes as one blob, cut by (id, start, length) triples in
                    # SQLite (substr on a blob is a byte copy), so the GIL is released for the whole batch instead
                    # of being taken back for every row as executemany does (which starved the parsing thread).
                    raws = [r for _, r in rows]
                    blob = b"".join(raws)
                    if repair_utf8(blob)[1]:
                        # Raw args are not UTF-8-checked by the decoder; repair the few that are not (U+FFFD).
                        fixed = [repair_utf8(bytes(r)) for r in raws]
                        raws = [r for r, _ in fixed]
                        self.repaired += sum(n for _, n in fixed)
                        blob = b"".join(raws)
                        del fixed
                    if len(blob) > _ARGS_BLOB_MAX:  # far below SQLite's 1e9-byte limit on one value
                        conn.executemany("INSERT INTO _args_raw VALUES (?,?)", zip([a for a, _ in rows], raws))
                        del blob, raws
                        continue
                    # A batch's ids are consecutive (the collector numbers arg sets as it meets them): only the
                    # lengths cross over as JSON (written in C by msgspec); SQLite computes ids and offsets.
                    first = rows[0][0]
                    if rows[-1][0] - first != len(rows) - 1:
                        raise AssertionError("arg set ids of a batch are not consecutive")
                    conn.execute(_ARGS_INSERT, (blob, _ENCODE(list(map(len, raws))), first))
                    del blob, raws
            conn.execute("COMMIT")
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            self.error = e
            while self.queue.get() is not None:  # drain so the producer never blocks
                pass
        finally:
            if conn is not None:
                conn.close()

    def put(self, rows: list) -> None:
        self.queue.put(rows)

    def finish(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


_ARGS_BLOB_MAX = 256 << 20
_ENCODE = msgspec.json.Encoder().encode
_ARGS_INSERT = ("INSERT INTO _args_raw SELECT ?3 + key, substr(?1, 1 + pos - value, value) FROM "
                "(SELECT key, value, sum(value) OVER (ORDER BY key) AS pos FROM json_each(?2))")



def _load_model(path: str, max_bytes: int, stats: LoadStats, args_path: str) -> Model:
    """Read and decode (a batch at a time) into the tables' columns; args go to their database while the JSON is in
    memory."""
    gc_was = gc.isenabled()
    gc.disable()  # the loader makes millions of small objects and no cycles
    try:
        # A pipe or a device can be read only once: its bytes (up to the cap) are read first and split from memory.
        data = read_trace_bytes(path, max_bytes) if is_stream(path) else None
        chunks = iter_trace_chunks(path, max_bytes, _STREAM_CHUNK) if data is None else \
            (data[i:i + _STREAM_CHUNK] for i in range(0, len(data), _STREAM_CHUNK))
        try:
            collector = _collect(stream_typed(chunks, stats), stats, args_path)
        except NotStreamable:
            # Not a plain trace document (or not valid JSON): read it whole, which reports any error exactly.
            stats.__init__()
            os.unlink(args_path)
            if data is None:
                data = read_trace_bytes(path, max_bytes)
            raws = split_events(data, os.fspath(path), stats)
            data = None
            collector = _collect(iter([(raws, None)]), stats, args_path)
            del raws
        del data, chunks
        model = build(collector)
        del collector
    finally:
        if gc_was:
            gc.enable()
    if stats.events and not stats.slices and stats.skipped_total >= stats.events:
        raise TraceFormatError(
            f"{os.fspath(path)}: none of its {stats.events} events could be used "
            f"(skipped: {', '.join(f'{k}: {v}' for k, v in sorted(stats.skipped.items()))})")
    return model


class _Cancelled(Exception):
    """The session was closed while its SQL tables were being written."""


def _write_tables(conn: sqlite3.Connection, model: Model, cancelled=lambda: False) -> None:
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    conn.executescript(_schema.TABLES)
    conn.execute("BEGIN")
    _insert(conn, model, cancelled)
    conn.execute("COMMIT")
    conn.executescript(_schema.VIEWS)
    for index in _schema.INDEXES.split(";"):
        if cancelled():
            raise _Cancelled
        if index.strip():
            conn.execute(index)


def _collect(chunks, stats: LoadStats, args_path: str):
    """Feed every event of ``chunks`` (``(raws, None)`` or ``(None, events)``) to a new collector; args go to
    their database."""
    collector = Collector(stats)
    writer = _ArgsWriter(args_path)
    n = 0
    try:
        for raws, events in chunks:
            if events is not None:
                collector.run(n, events)
                writer.put(collector.args)
                collector.args = []
                n += len(events)
                del events
                continue
            for start, batch in iter_batches(raws, base=n, stats=stats):
                collector.run(start, batch)
                writer.put(collector.args)
                collector.args = []
            n += len(raws)
            del raws
    finally:
        writer.finish()
    if writer.repaired:
        stats.repair("invalid_utf8", writer.repaired)
    stats.events = n
    return collector


_SLICE_ROW = "(?,?,?,?,?,?,?,nullif(?,-1),nullif(?,-1))"  # id, ts, dur, track_id, category, name, depth, parent, args
_FLOW_ROW = "(?,?,?,?,NULL)"


def _insert_rows(conn: sqlite3.Connection, table: str, row_sql: str, columns: list, n: int, cancelled) -> None:
    """Insert ``n`` rows given as ``columns`` (equal-length lists, ranges or numpy arrays) with multi-row
    ``INSERT … VALUES (…),(…)`` statements of as many rows as SQLite's parameter limit allows. Python only binds the values (one flat list per
    statement); SQLite inserts a whole statement's rows with the GIL released. Measured on a 225k-slice trace:
    0.25 s of work, against 0.31 s for ``executemany`` (which takes the GIL back for every row) and 0.6 s for an
    ``INSERT … SELECT … FROM json_each`` of msgspec-written JSON (GIL-free, but SQLite parses every row's JSON)."""
    width = row_sql.count("?")
    try:
        limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    except AttributeError:  # Python < 3.11: SQLite's default before 3.32 is the safe guess
        limit = 999
    per = max(1, min(limit, 32766) // width)
    full = None
    for a in range(0, n, per):
        if cancelled():
            raise _Cancelled
        b = min(n, a + per)
        if b - a == per:
            full = full or f"INSERT INTO {table} VALUES " + ",".join([row_sql] * per)
            sql = full
        else:
            sql = f"INSERT INTO {table} VALUES " + ",".join([row_sql] * (b - a))
        part = [c[a:b].tolist() if hasattr(c, "tolist") else c[a:b] for c in columns]  # numpy: one chunk at a time
        conn.execute(sql, list(itertools.chain.from_iterable(zip(*part))))
        del part


def _insert(conn: sqlite3.Connection, m: Model, cancelled=lambda: False) -> None:
    """Insert the model's rows (see :func:`_insert_rows`)."""
    conn.executemany("INSERT INTO process VALUES (?,?,?,?,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0)",
                     [(u, u, pid, name) for u, pid, name, _syn in m.processes])
    conn.executemany("INSERT INTO thread VALUES (?,?,?,?,NULL,NULL,?,?,?,0,NULL)",
                     [(u, u, tid, name, upid, main, int(u == 0)) for u, tid, name, upid, main in m.threads])
    conn.executemany("INSERT INTO _track VALUES (?,?,?,NULL,NULL,NULL,0,NULL,?,?)", m.tracks)
    n = len(m.ts)
    _insert_rows(conn, "_slice", _SLICE_ROW,
                 [range(n), m.ts, m.dur, m.track_id, m.category, m.name, m.depth, m.parent_id, m.arg_set_id], n,
                 cancelled)
    n = len(m.flow_out)
    _insert_rows(conn, "flow", _FLOW_ROW,
                 [range(n), m.flow_out, m.flow_in, m.flow_trace_id], n, cancelled)
