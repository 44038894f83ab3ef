"""The offline engine: a read-only SQLite database shaped like trace_processor's tables.

Built once per trace into a temporary file (deleted on close), so a large trace does not sit in
RSS. SQL runs on the files opened read-only, under an authorizer that allows reading only, plus ``PRAGMA query_only``
(``_query``); console queries run in a child process that is ended at their deadline (``_console``).
"""
from __future__ import annotations

import gc
import functools
import itertools
import os
import pickle
import signal
import sqlite3
import sys
import tempfile
import threading
from array import array
from operator import attrgetter
from typing import Any, Callable

import msgspec
import numpy as np

from ..errors import QueryError, TraceError, TraceFormatError
from . import _schema
from ._collect import Collector
from ._console import ConsoleProcess
from ._query import QueryConnection
from ._model import Model, build
from ._stats import LoadStats
from ._tables import ABSENT, TraceTables, visible_arg
from ._decode import NotStreamable, iter_batches, repair_utf8, split_events, stream_typed
from ._source import STREAM_CHUNK, is_stream, iter_trace_chunks, read_trace_bytes

_STREAM_CHUNK = STREAM_CHUNK  # bytes of JSON read (and split into events) at a time


_PREFIX = "trace-mirror-"


def _remove_orphans(tmp_dir: str | None) -> None:
    """Delete the files of mirrors whose process is gone (killed: SIGKILL, a time-out, a crash), so they cannot fill
    the temporary directory (the args file and the args database are each ~half the trace's size). Each file's
    name carries its process id; a process that still exists keeps its files (a reused pid only means a file is kept
    a little longer)."""
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
        if not pid.isdecimal():
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


@functools.lru_cache(maxsize=64)
def _args_decoder(names: tuple[str, ...]) -> msgspec.json.Decoder:
    """A decoder of an arg set's JSON object into just these top-level keys (the others are skipped unread)."""
    fields = [(f"a{k}", msgspec.Raw, msgspec.Raw()) for k in range(len(names))]
    return msgspec.json.Decoder(msgspec.defstruct("Args", fields, rename={f"a{k}": n for k, n in enumerate(names)},
                                                  gc=False))


class RawArgs:
    """The mirror's :class:`~profiling_core.trace._tables.ArgsReader`: each arg set's raw JSON from the args file
    (complete once the trace is loaded), decoded with msgspec into just the top-level keys asked for (a struct of
    those fields, each kept as raw JSON: the other keys are skipped in C), each distinct value's text decoded once
    per call (shapes and types repeat), and shown as trace_processor's ``args`` table shows it
    (``visible_arg``). An arg set that is not a JSON object has no arguments; of a key written twice, the last
    counts."""

    def __init__(self, backend: "MirrorBackend") -> None:
        self._backend = backend
        self._value = msgspec.json.Decoder().decode

    def get(self, name: str, arg_set_ids) -> dict:
        return self.get_many((name,), arg_set_ids)[name]

    def get_many(self, names, arg_set_ids) -> dict[str, dict]:
        names = tuple(dict.fromkeys(names))
        decode = _args_decoder(names).decode
        ids, raws = self._backend.raw_args(arg_set_ids)
        out: dict[str, dict] = {name: {} for name in names}
        shown: list[dict] = [{b"": ABSENT} for _ in names]  # per name: each distinct text -> what it shows
        for c in range(0, len(ids), _ARGS_PER_PASS):  # (a pass at a time: its structs and texts are then dropped)
            kept, structs = [], []
            for a, raw in zip(ids[c:c + _ARGS_PER_PASS], raws[c:c + _ARGS_PER_PASS]):
                try:
                    structs.append(decode(raw))
                except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # (not a JSON object)
                    continue
                kept.append(a)
            for k, name in enumerate(names):
                texts = list(map(bytes, map(attrgetter(f"a{k}"), structs)))  # (b"": not in the arg set)
                seen = shown[k]
                new = [t for t in dict.fromkeys(texts) if t not in seen]  # (shapes and types repeat)
                seen.update(zip(new, self._shown(new)))
                out[name].update((a, v) for a, v in zip(kept, map(seen.__getitem__, texts)) if v is not ABSENT)
        return out

    def _shown(self, texts: list[bytes]) -> list:
        """What each of these JSON texts shows (``visible_arg``); ABSENT for one nested too deeply to decode or
        show."""
        out = []
        for text in texts:
            try:
                v = self._value(text)
                out.append(visible_arg(v))
            except (msgspec.DecodeError, RecursionError):
                out.append(ABSENT)
        return out


class MirrorBackend:
    """Owns the columns, the args file, the SQLite files and the connections of one loaded trace.

    Loading reads the JSON into columns (:class:`TraceTables`, what the analyses read) and each event's args, as
    raw JSON, into the args file (what :class:`RawArgs` reads), and returns; a background thread then copies the
    columns into the SQLite file, and the args into the args database, when the first query needs them (``sql_tables=
    "on_first_query"``: nothing is spent on SQLite by a caller that only reads the columns) or right away
    (``"background"``). SQLite's own work (inserting the rows, building the indexes) runs with the GIL released, so
    it overlaps with whatever the caller does next. A query waits for it (and raises its error, if it had one);
    ``close()`` interrupts it.
    """

    def __init__(self, path: str, max_bytes: int, tmp_dir: str | None = None,
                 sql_tables: str = "on_first_query", while_loading: Callable[[], Any] | None = None) -> None:
        _remove_orphans(tmp_dir)
        fd, self.db_path = tempfile.mkstemp(prefix=f"{_PREFIX}{os.getpid()}-", suffix=".sqlite", dir=tmp_dir)
        os.close(fd)
        self.stats = LoadStats()
        self._lock = threading.Lock()
        self._console_lock = threading.Lock()
        self.args_file = self.db_path[:-len(".sqlite")] + "-args.bin"  # the raw args, written by the load
        self.args_path = self.db_path[:-len(".sqlite")] + "-args.sqlite"  # their SQL table, written with the others
        self._args_fd: int | None = None
        self._args_offsets = np.zeros(1, dtype=np.int64)
        self._query: QueryConnection | None = None
        self._console: ConsoleProcess | None = None
        self._closed = False
        self._builder: threading.Thread | None = None
        self._build_conn: sqlite3.Connection | None = None
        self._build_error: BaseException | None = None
        self._start_lock = threading.Lock()
        self.tables: TraceTables | None = None
        try:
            model = load_model(path, max_bytes, self.stats, self.args_file, while_loading)
            self._args_offsets = model.args_offsets
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
        """(background thread) Write the columns into the SQLite file (tables, rows, views, indexes), and the args
        file into the args database."""
        conn = None
        try:
            conn = self._build_conn = sqlite3.connect(self.db_path, check_same_thread=False)
            _write_tables(conn, model, lambda: self._closed)
            conn.execute("ATTACH DATABASE ? AS argsdb", (_private(self.args_path),))
            conn.execute("PRAGMA argsdb.journal_mode = OFF")
            conn.execute("PRAGMA argsdb.synchronous = OFF")
            conn.execute("BEGIN")
            _write_args_table(conn, self.args_file, model.args_offsets, lambda: self._closed)
            conn.execute("COMMIT")
        except BaseException as e:  # noqa: BLE001 - raised by the first query, in the caller's thread
            self._build_error = e
        finally:
            self._build_conn = None
            if conn is not None:
                conn.close()

    def start_sql(self) -> None:
        """Start writing the SQLite tables in the background now, if that has not started (``sql_tables=
        "on_first_query"`` waited for a first query); returns at once."""
        builder = self._builder
        if builder is not None:
            with self._start_lock:
                if builder.ident is None and not self._closed:
                    builder.start()

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

    def raw_args(self, arg_set_ids) -> tuple[list[int], list[bytes]]:
        """(ids, raws): these arg set ids, each once, in order, and the raw JSON text of each one's ``args`` (ids of
        no arg set are left out).

        Read from the args file, which is complete when the load returns: so this never waits for the SQL tables.
        Arg sets close to each other in the file are read with one call (``_ARGS_GAP``, ``_ARGS_SPAN``); nothing
        of the file is kept in memory between calls. Raises QueryError on a closed session."""
        off = self._args_offsets
        ids = np.unique(np.asarray(arg_set_ids if isinstance(arg_set_ids, (list, tuple, np.ndarray))
                                   else list(arg_set_ids), dtype=np.int64).ravel())
        ids = ids[(ids >= 0) & (ids < len(off) - 1)]
        with self._lock:
            if self._closed:
                raise QueryError("the trace session is closed")
            if not len(ids):
                return [], []
            try:
                if self._args_fd is None:
                    self._args_fd = os.open(self.args_file, os.O_RDONLY)
                fd = self._args_fd
                start, end = off[ids], off[ids + 1]
                cut = np.flatnonzero((start[1:] - end[:-1] > _ARGS_GAP)
                                     | (start[1:] // _ARGS_SPAN != start[:-1] // _ARGS_SPAN)) + 1
                first, last = np.r_[0, cut], np.r_[cut, len(ids)] - 1  # each read's first and last arg set
                base = np.repeat(start[first], np.diff(np.r_[first, len(ids)]))
                rel_s, rel_e = (start - base).tolist(), (end - base).tolist()
                raws: list[bytes] = []
                for i, j, at, size in zip(first.tolist(), (last + 1).tolist(), start[first].tolist(),
                                          (end[last] - start[first]).tolist()):
                    data = os.pread(fd, size, at)
                    if len(data) != size:
                        raise OSError(f"{self.args_file} is shorter than the args written to it")
                    raws += [data[x:y] for x, y in zip(rel_s[i:j], rel_e[i:j])]
                return ids.tolist(), raws
            except OSError as e:
                raise QueryError(f"the trace's args could not be read: {e}") from None

    def _connection(self) -> QueryConnection:
        """The query connection, opened on first use once the tables are built (call with self._lock held)."""
        if self._closed:
            raise QueryError("the trace session is closed")
        if self._query is None:
            self.wait_sql()
            try:
                self._query = QueryConnection(self.db_path, self.args_path)
            except sqlite3.Error as e:
                raise QueryError(f"the trace's SQL tables could not be opened: {e}") from None
        return self._query

    def query_rows(self, sql: str, limits: Any = None) -> tuple[list[str], list[tuple], bool]:
        """(columns, rows, cut): the rows of one read-only statement (``QueryConnection.rows``). With ``limits`` (a
        QueryLimits: a console query) it runs in the session's console process (``_console``), which is ended if the
        statement is still running ``GRACE_S`` past its deadline; without, on the session's own connection."""
        if limits is None:
            with self._lock:
                return self._connection().rows(sql)
        with self._console_lock:
            if self._closed:
                raise QueryError("the trace session is closed")
            if self._console is None:
                self.wait_sql()
                self._console = ConsoleProcess(self.db_path, self.args_path)
            return self._console.rows(sql, limits)

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
        fd, self._args_fd = self._args_fd, None
        if fd is not None:
            os.close(fd)
        for name in ("_console", "_query"):
            conn = getattr(self, name, None)
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            setattr(self, name, None)
        for name in ("db_path", "args_path", "args_file"):
            path = getattr(self, name, None)
            if path:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                setattr(self, name, None)


def _private(path: str) -> str:
    """``path``, created empty and readable by this user alone (as ``mkstemp`` makes the SQLite file): the args are a
    copy of the trace's, which another user of the temporary directory may not read."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    return path


class _ArgsFile:
    """Writes each arg set's raw JSON, one after the other in arg set id order, into the args file while the trace is
    decoded (:meth:`put`); :meth:`finish` gives the offsets of the arg sets in it (arg set ``a`` is the bytes from
    ``offsets[a]`` to ``offsets[a + 1]``). A plain file written in this thread: the bytes are copied once, nothing
    else is built (no index: the offsets are one), so decoding never waits for it."""

    def __init__(self, path: str) -> None:
        self.file = open(_private(path), "wb")
        self.lengths = array("q")
        self.repaired = 0  # byte sequences of args that were not UTF-8 (see _decode.repair_utf8)

    def put(self, rows: list) -> None:
        """Append ``rows``, (arg set id, raw JSON) pairs whose ids continue the ones written."""
        if not rows:
            return
        if rows[0][0] != len(self.lengths) or rows[-1][0] - rows[0][0] != len(rows) - 1:
            raise AssertionError("arg set ids are not consecutive")
        raws = [r for _, r in rows]
        blob = b"".join(raws)
        if repair_utf8(blob)[1]:
            # Raw args are not UTF-8-checked by the decoder; repair the few that are not (U+FFFD).
            fixed = [repair_utf8(bytes(r)) for r in raws]
            raws = [r for r, _ in fixed]
            self.repaired += sum(n for _, n in fixed)
            blob = b"".join(raws)
        self.lengths.extend(map(len, raws))
        self.file.write(blob)

    def finish(self) -> np.ndarray:
        self.file.close()
        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(self.lengths, dtype=np.int64), out=offsets[1:])
        return offsets

    def close(self) -> None:
        self.file.close()


def _write_args_table(conn: sqlite3.Connection, args_file: str, offsets: np.ndarray, cancelled) -> None:
    """Fill ``argsdb._args_raw`` (the SQL ``args`` view's rows) from the args file: one statement per batch of up
    to ``_ARGS_BATCH`` bytes, the batch's bytes as one blob cut by SQLite (``_ARGS_INSERT``), so the GIL is
    released for the whole batch."""
    conn.execute(_schema.ARGS_TABLE.replace("_args_raw", "argsdb._args_raw", 1))
    n = len(offsets) - 1
    lengths = np.diff(offsets)
    with open(args_file, "rb") as f:
        a = 0
        while a < n:
            if cancelled():
                raise _Cancelled
            b = max(a + 1, int(np.searchsorted(offsets, offsets[a] + _ARGS_BATCH, side="right")) - 1)
            b = min(b, n)
            blob = f.read(int(offsets[b] - offsets[a]))
            conn.execute(_ARGS_INSERT, (blob, _ENCODE(lengths[a:b].tolist()), a))
            a = b


# Reading arg sets (raw_args): two wanted arg sets at most _ARGS_GAP bytes apart in the file are read with one call,
# which reads at most about _ARGS_SPAN bytes.
_ARGS_GAP, _ARGS_SPAN = 16 << 10, 1 << 20
_ARGS_PER_PASS = 8192  # arg sets decoded at a time by RawArgs.get_many
_ARGS_BATCH = 8 << 20  # bytes of args per INSERT statement (one arg set longer than this goes alone)
_ENCODE = msgspec.json.Encoder().encode
# A batch's ids are consecutive: only its lengths cross over as JSON (written in C by msgspec); SQLite computes
# ids and offsets.
_ARGS_INSERT = ("INSERT INTO argsdb._args_raw SELECT ?3 + key, substr(?1, 1 + pos - value, value) FROM "
                "(SELECT key, value, sum(value) OVER (ORDER BY key) AS pos FROM json_each(?2))")



def _load_model(path: str, max_bytes: int, stats: LoadStats, args_file: str) -> Model:
    """Read and decode (a batch at a time) into the tables' columns; args go to the args file while the JSON is in
    memory."""
    gc_was = gc.isenabled()
    gc.disable()  # the loader makes millions of small objects and no cycles
    try:
        # A pipe or a device can be read only once: its bytes (up to the cap) are read first and split from memory.
        data = read_trace_bytes(path, max_bytes) if is_stream(path) else None
        chunks = iter_trace_chunks(path, max_bytes, _STREAM_CHUNK) if data is None else \
            (data[i:i + _STREAM_CHUNK] for i in range(0, len(data), _STREAM_CHUNK))
        try:
            collector = _collect(stream_typed(chunks, stats), stats, args_file)
        except NotStreamable:
            # Not a plain trace document (or not valid JSON): read it whole, which reports any error exactly.
            stats.__init__()
            os.unlink(args_file)
            if data is None:
                data = read_trace_bytes(path, max_bytes)
            raws = split_events(data, os.fspath(path), stats)
            data = None
            collector = _collect(iter([(raws, None)]), stats, args_file)
            del raws
        del data, chunks
        model = build(collector)
        del collector
    finally:
        if gc_was:
            gc.enable()
    if stats.events and not stats.slices and not stats.counters and stats.skipped_total >= stats.events:
        raise TraceFormatError(
            f"{os.fspath(path)}: none of its {stats.events} events could be used "
            f"(skipped: {', '.join(f'{k}: {v}' for k, v in sorted(stats.skipped.items()))})")
    return model


def load_model(path: str, max_bytes: int, stats: LoadStats, args_file: str,
               while_loading: Callable[[], Any] | None = None) -> Model:
    """The trace's columns (:func:`_load_model`); with ``while_loading``, that function runs in this thread while
    the trace loads.

    The load is Python code that holds the GIL, so a thread would not overlap with ``while_loading`` (the command
    line's imports of pandas and the analyses, measured: no gain). Where it can, the same ``_load_model`` runs
    instead in a child process forked from this one, which sends back the columns and the load's stats (pickled:
    a few MiB of arrays for a trace of 100k events) or the error it raised, and ends; the args file it wrote is
    the file this process named. It forks only on Linux, and only while this process runs no other thread (a
    fork copies no thread, and a lock another thread held would stay held in the child); otherwise
    ``while_loading`` runs first and the load after it, here. Either way: the same columns, stats and errors."""
    if while_loading is None:
        return _load_model(path, max_bytes, stats, args_file)
    if not (sys.platform.startswith("linux") and threading.active_count() == 1):
        while_loading()
        return _load_model(path, max_bytes, stats, args_file)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: load, answer, end (no atexit handlers, no flush of the parent's buffers)
        code = 0
        try:
            os.close(r)
            try:
                out = ("ok", _load_model(path, max_bytes, stats, args_file), stats)
            except BaseException as e:  # noqa: BLE001 - sent to the parent, which raises it
                out = ("error", e, stats)
            try:
                data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as e:  # noqa: BLE001 - an error that does not pickle: its text
                data = pickle.dumps(("error", TraceError(f"{path}: {type(out[1]).__name__}: {out[1]}"
                                                         if out[0] == "error" else f"{path}: {e}"), stats))
            with open(w, "wb", closefd=True) as f:
                f.write(data)
        except BaseException:  # noqa: BLE001 - the parent says the loader ended without an answer
            code = 1
        os._exit(code)
    os.close(w)
    try:
        try:
            while_loading()
        except BaseException:
            os.kill(pid, signal.SIGKILL)
            raise
        with open(r, "rb", closefd=False) as f:
            data = f.read()
    finally:
        os.close(r)
        _, status = os.waitpid(pid, 0)
    if not data:
        how = (f"was ended by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exited with status {os.waitstatus_to_exitcode(status)}")
        raise TraceError(f"{path}: the process loading the trace {how} before it answered (out of memory?)")
    kind, value, child_stats = pickle.loads(data)
    vars(stats).update(vars(child_stats))
    if kind == "error":
        raise value
    return value


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


def _collect(chunks, stats: LoadStats, args_file: str):
    """Feed every event of ``chunks`` (``(raws, None)`` or ``(None, events)``) to a new collector; args go to
    the args file (their offsets in it: the collector's ``args_offsets``)."""
    collector = Collector(stats)
    out = _ArgsFile(args_file)
    n = 0
    try:
        for raws, events in chunks:
            if events is not None:
                collector.run(n, events)
                out.put(collector.args)
                collector.args = []
                n += len(events)
                del events
                continue
            for start, batch in iter_batches(raws, base=n, stats=stats):
                collector.run(start, batch)
                out.put(collector.args)
                collector.args = []
            n += len(raws)
            del raws
    except BaseException:
        out.close()
        raise
    collector.args_offsets = out.finish()
    if out.repaired:
        stats.repair("invalid_utf8", out.repaired)
    stats.events = n
    return collector


_SLICE_ROW = "(?,?,?,?,?,?,?,nullif(?,-1),nullif(?,-1))"  # id, ts, dur, track_id, category, name, depth, parent, args
_FLOW_ROW = "(?,?,?,?,NULL)"
_COUNTER_ROW = "(?,?,?,?,NULL)"  # id, ts, track_id, value (a NaN is stored as NULL, as SQLite stores it), arg_set_id


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
    conn.executemany("INSERT INTO _track VALUES (?,?,?,NULL,NULL,NULL,0,NULL,?,?,'slice',NULL,NULL)", m.tracks)
    conn.executemany("INSERT INTO _track VALUES (?,?,'json_counter',NULL,NULL,NULL,0,NULL,NULL,?,'counter',NULL,NULL)",
                     m.counter_tracks)
    n = len(m.ts)
    _insert_rows(conn, "_slice", _SLICE_ROW,
                 [range(n), m.ts, m.dur, m.track_id, m.category, m.name, m.depth, m.parent_id, m.arg_set_id], n,
                 cancelled)
    n = len(m.flow_out)
    _insert_rows(conn, "flow", _FLOW_ROW,
                 [range(n), m.flow_out, m.flow_in, m.flow_trace_id], n, cancelled)
    n = len(m.counter_ts)
    _insert_rows(conn, "counter", _COUNTER_ROW, [range(n), m.counter_ts, m.counter_track_id, m.counter_value], n,
                 cancelled)
