"""trace_processor's recorded tables (tests/data/tp_tables, or the shared recordings of every shared trace) loaded
into SQLite, for the tests (not collected: no test_ prefix).

This replays what a real trace_processor_shell printed for a trace; it is not the engine. SQL written for the
perfetto engine (the extraction queries of ``profiling_core.trace._extract``) runs over these tables as it would over
trace_processor's, because they hold its rows under its table and column names.
"""
from __future__ import annotations

import csv
import gzip
import io
import os
import sqlite3
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

DATA = Path(__file__).parent / "data"
LOCAL = DATA / "tp_tables"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"

# Column types, as trace_processor declares them (SQLite's affinity turns the CSV's digits into numbers).
SCHEMA = {
    "slice": "id INTEGER, ts INTEGER, dur INTEGER, track_id INTEGER, category TEXT, name TEXT, depth INTEGER, "
             "parent_id INTEGER, arg_set_id INTEGER",
    "flow": "id INTEGER, slice_out INTEGER, slice_in INTEGER, trace_id INTEGER, arg_set_id INTEGER",
    "thread": "utid INTEGER, tid INTEGER, name TEXT, upid INTEGER, is_main_thread INTEGER",
    "process": "upid INTEGER, pid INTEGER, name TEXT",
    "thread_track": "id INTEGER, utid INTEGER, name TEXT",
    "track": "id INTEGER, name TEXT, type TEXT",
    "args": "arg_set_id INTEGER, flat_key TEXT, key TEXT, int_value INTEGER, string_value TEXT, real_value REAL, "
            "value_type TEXT",
}
NULL = "[NULL]"
# Every table and view a real trace_processor v58.2 has after loading a Kineto JSON trace, with its columns
# (tests/data/tp_tables/schema_v58.2.csv.gz, a copy of the shared recording; its README says how it was made).
TP_SCHEMA = LOCAL / "schema_v58.2.csv.gz"
# Stand-ins for two of trace_processor's standard-library modules (``INCLUDE PERFETTO MODULE``), for the fake below:
# the views they add, reduced to columns the recorded tables have. Not trace_processor's definitions.
MODULES = {
    "slices.with_context": (
        "CREATE VIEW IF NOT EXISTS thread_slice AS SELECT s.id, s.ts, s.dur, s.category, s.name, s.track_id, "
        "t.utid, t.tid, t.name AS thread_name, s.depth, s.parent_id, s.arg_set_id FROM slice s "
        "JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING (utid)"),
    "slices.flow": "CREATE VIEW IF NOT EXISTS _flow_ends AS SELECT slice_out, slice_in FROM flow",
}


def _frame(cols: list[str], rows: list[tuple]) -> pd.DataFrame:
    import pandas as pd
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    return pd.DataFrame.from_records(rows, columns=cols)


def tp_schema() -> dict[str, list[str]]:
    """{table or view: its columns} of the recorded schema of trace_processor v58.2."""
    with gzip.open(TP_SCHEMA, "rt", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(io.StringIO(f.read())))[1:]
    out: dict[str, list[str]] = {}
    for table, _kind, column, _type in rows:
        out.setdefault(table, []).append(column)
    return out


def read_csv(folder: Path, table: str) -> tuple[list[str], list[list]]:
    """(header, rows) of one recorded table; NULL cells as None, every other cell as the text the shell printed."""
    with gzip.open(folder / f"{table}.csv.gz", "rt", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(io.StringIO(f.read())))
    return rows[0], [[None if v == NULL else v for v in r] for r in rows[1:]]


def record_from_mirror(trace: Path, folder: Path) -> Path:
    """Write ``trace``'s tables as this project's offline mirror holds them, in the recorded tables' format (one
    ``TABLE.csv.gz`` per table of ``SCHEMA``, a header, NULL as ``[NULL]``), for a trace no trace_processor recorded:
    a stand-in server then answers from them, which tests the perfetto engine's side of a path (its start, its
    hand-over, what it does between two traces), not trace_processor's reading of the file."""
    from profiling_core.trace import open_trace
    folder.mkdir(parents=True, exist_ok=True)
    with open_trace(trace, engine="sqlite") as s:
        for table, cols in SCHEMA.items():
            names = [c.split()[0] for c in cols.split(", ")]
            # (as text: a column with NULLs would come back as floats, and int_value holds 64-bit ids)
            df = s.query(f"SELECT {', '.join(f'CAST({c} AS TEXT) AS {c}' for c in names)} FROM {table}")
            with gzip.open(folder / f"{table}.csv.gz", "wt", encoding="utf-8", newline="") as f:
                w = csv.writer(f)
                w.writerow(names)
                for row in df.itertuples(index=False):
                    w.writerow([NULL if v is None or (isinstance(v, float) and v != v) else v for v in row])
    return folder


class RecordedTrace:
    """One trace's recorded tables in an in-memory SQLite database; ``query(sql)`` returns a DataFrame. With
    ``full_schema`` every other table and view of the recorded schema (``TP_SCHEMA``) is there too, empty."""

    def __init__(self, folder: Path, full_schema: bool = False) -> None:
        self.folder = folder
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        for table, cols in SCHEMA.items():
            header, rows = read_csv(folder, table)
            self.conn.execute(f"CREATE TABLE {table} ({cols})")
            self.conn.executemany(f"INSERT INTO {table} ({', '.join(header)}) VALUES "
                                  f"({', '.join('?' * len(header))})", rows)
        if full_schema:  # (a recorded table gains the columns that were not recorded, NULL)
            for table, cols in tp_schema().items():
                if table not in SCHEMA:
                    quoted = ", ".join(f'"{c}"' for c in cols)
                    self.conn.execute(f'CREATE TABLE "{table}" ({quoted})')
                else:
                    have = {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}
                    for c in cols:
                        if c not in have:
                            self.conn.execute(f'ALTER TABLE {table} ADD COLUMN "{c}"')
        # trace_processor's extract_arg(arg_set_id, key): the value at that key of that arg set, NULL when absent
        values = {(a, k): iv if vt in ("int", "bool", "uint", "pointer") else rv if vt == "real" else sv
                  for a, k, iv, sv, rv, vt in self.conn.execute(
                      "SELECT arg_set_id, key, int_value, string_value, real_value, value_type FROM args")}
        self.conn.create_function("extract_arg", 2, lambda a, k: values.get((a, k)), deterministic=True)
        self._tables = None

    def rows(self, sql: str) -> tuple[list[str], list[tuple]]:
        cur = self.conn.execute(sql)
        return [d[0] for d in cur.description], cur.fetchall()

    def query(self, sql: str) -> pd.DataFrame:
        return _frame(*self.rows(sql))

    def columns(self, sql: str) -> dict[str, list]:
        """``{column: list of values}`` (None for NULL) of ``sql``'s rows, as the perfetto engine hands them over."""
        cols, rows = self.rows(sql)
        return {c: [r[j] for r in rows] for j, c in enumerate(cols)}

    @property
    def tables(self):
        """What the perfetto engine's ``tables`` would be: the extraction queries run over the recording."""
        if self._tables is None:
            from profiling_core.trace._extract import tables_from_sql
            self._tables = tables_from_sql(self.columns)
        return self._tables

    def close(self) -> None:
        self.conn.close()


def local_recordings() -> dict[str, tuple[Path, Path]]:
    """{trace name: (the trace file in tests/data/traces, its recorded tables)}."""
    out = {}
    for folder in sorted(p for p in LOCAL.iterdir() if p.is_dir()):
        for ext in (".json", ".json.gz"):
            trace = DATA / "traces" / f"{folder.name}{ext}"
            if trace.exists():
                out[folder.name] = (trace, folder)
    return out


def shared_recordings() -> dict[str, tuple[Path, Path]]:
    """{recording folder name: (the shared trace, its recorded tables)} for every shared trace (empty without the
    shared folder beside the repository)."""
    rec = SHARED / "tp_tables"
    if not rec.is_dir():
        return {}
    files = {}
    for p in [*(SHARED / "h200").glob("*.json"), *(SHARED / "third_party").rglob("*.json"),
              *(SHARED / "third_party").rglob("*.json.gz")]:
        files[p.name[:-len(".gz")] if p.name.endswith(".gz") else p.name] = p
    out = {}
    for folder in sorted(p for p in rec.iterdir() if p.is_dir()):
        stem = folder.name.split("__", 1)[1]
        trace = files.get(f"{stem}.json")
        if trace is not None:
            out[folder.name] = (trace, folder)
    return out


def _serve(folder: str) -> None:
    """(a FakeTraceProcessor's process) Answer each SQL text read from stdin over the recording, on stdout: (columns,
    rows), or the error's text as trace_processor would give it."""
    reader = Connection(os.dup(0), writable=False)
    writer = Connection(os.dup(1), readable=False)
    rec = RecordedTrace(Path(folder), full_schema=True)
    while True:
        try:
            sql = reader.recv()
        except EOFError:
            return
        words = sql.split()
        try:
            if [w.upper() for w in words[:3]] == ["INCLUDE", "PERFETTO", "MODULE"] and len(words) == 4:
                if words[3] not in MODULES:
                    raise RuntimeError(f"Traceback (most recent call last):\n  File \"stdin\" line 1 col 1\n"
                                       f"  {sql}\n  ^\nUnknown module name provided - {words[3]}")
                rec.conn.execute(MODULES[words[3]])
                sql = "SELECT 1 AS included WHERE 0"
            writer.send(("ok", rec.rows(sql)))
        except Exception as e:  # noqa: BLE001 - handed to the caller, as trace_processor's error text
            writer.send(("error", str(e)))


class _Result:
    """What perfetto's ``QueryResultIterator`` offers the engine: ``column_names``, ``cells`` (one object per cell,
    row after row, None for NULL) and ``as_pandas_dataframe()``."""

    def __init__(self, cols: list[str], rows: list[tuple]) -> None:
        import numpy as np
        self.column_names = list(cols)
        self.cells = np.empty(len(rows) * len(cols), dtype=object)
        self.cells[:] = [v for r in rows for v in r]
        self._frame = _frame(cols, rows)

    def as_pandas_dataframe(self) -> pd.DataFrame:
        return self._frame


class FakeTraceProcessor:
    """Stands in for perfetto's ``TraceProcessor`` over a recording, for the perfetto engine's own logic (its console
    rules and caps) where no trace_processor binary can run: a process of its own (as trace_processor is) holding
    the recording in SQLite, with ``query(sql).as_pandas_dataframe()`` and ``close()``, which ends that process, and
    so a statement running there, even inside one SQL function call, and every later one. It has every table and
    view of the recorded schema (those not recorded are empty) and answers ``INCLUDE PERFETTO MODULE`` for the
    stand-ins in ``MODULES``; everything else is plain SQLite, with no authorizer: what the engine's gate lets
    through really runs. ``sent`` lists the SQL it was given, ``answered`` the number of rows of each answer."""

    def __init__(self, folder: Path) -> None:
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import tp_recorded; " \
               f"tp_recorded._serve({str(folder)!r})"
        self._proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._writer = Connection(os.dup(self._proc.stdin.fileno()), readable=False)
        self._reader = Connection(os.dup(self._proc.stdout.fileno()), writable=False)
        self._closed = threading.Event()
        self.sent: list[str] = []
        self.answered: list[int] = []

    def query(self, sql: str):
        if self._closed.is_set():
            raise ConnectionError("trace_processor is not running")
        self.sent.append(sql)
        try:
            self._writer.send(sql)
            while not self._reader.poll(0.02):
                if self._closed.is_set() or self._proc.poll() is not None:
                    raise EOFError
            kind, value = self._reader.recv()
        except (EOFError, OSError):
            raise ConnectionError("trace_processor was ended") from None
        if kind == "error":
            raise RuntimeError(value)
        self.answered.append(len(value[1]))
        return _Result(*value)

    def close(self) -> None:
        self._closed.set()
        self._proc.kill()
        self._proc.wait(5)
        for f in (self._writer, self._reader, self._proc.stdin, self._proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def perfetto_session(trace: Path, folder: Path):
    """A TraceSession of the perfetto engine whose trace_processor is a :class:`FakeTraceProcessor`; its ``started``
    list holds every FakeTraceProcessor the engine started (a stopped console query makes it start another)."""
    from profiling_core.trace import TraceSession
    from profiling_core.trace._perfetto import PerfettoBackend
    started: list[FakeTraceProcessor] = []

    def start() -> FakeTraceProcessor:
        started.append(FakeTraceProcessor(folder))
        return started[-1]
    session = TraceSession(str(trace), "perfetto", "a replay of trace_processor's recorded tables",
                           PerfettoBackend(start))
    session.started = started
    return session


CELLS_PER_BATCH = 50_000


def _protos():
    from perfetto.trace_processor.platform import PlatformDelegate
    from perfetto.trace_processor.protos import ProtoFactory
    return ProtoFactory(PlatformDelegate())


def encode_result(protos, cols: list, rows: list) -> bytes:
    """``rows`` as the QueryResult protobuf trace_processor sends (whole rows per batch, at most CELLS_PER_BATCH cells
    each, the last one flagged): NULL, integer, float, string and blob cells as trace_processor types them."""
    res = protos.QueryResult()
    res.column_names.extend(cols)
    per = max(1, CELLS_PER_BATCH // max(1, len(cols)))
    for start in range(0, max(1, len(rows)), per):
        b = res.batch.add()
        cells, ints, floats, strings, blobs = [], [], [], [], []
        for row in rows[start:start + per]:
            for v in row:
                if v is None:
                    cells.append(1)
                elif isinstance(v, int):
                    cells.append(2)
                    ints.append(v)
                elif isinstance(v, float):
                    cells.append(3)
                    floats.append(v)
                elif isinstance(v, str):
                    cells.append(4)
                    strings.append(v)
                else:
                    cells.append(5)
                    blobs.append(bytes(v))
        b.cells.extend(cells)
        b.varint_cells.extend(ints)
        b.float64_cells.extend(floats)
        b.string_cells = "".join(s + "\0" for s in strings)
        b.blob_cells.extend(blobs)
        b.is_last_batch = start + per >= len(rows)
    return res.SerializeToString()


class ProtoTraceProcessor:
    """Stands in for perfetto's ``TraceProcessor`` over a recording, in this process: ``query(sql)`` answers over the
    recorded tables, encodes the rows as trace_processor would send them (:func:`encode_result`), and does what
    perfetto's own ``query`` does with those bytes (``QueryResult.ParseFromString``, then perfetto's
    ``QueryResultIterator``), so the engine reads perfetto's own result objects. ``sent`` lists the SQL; ``recording``
    is the :class:`RecordedTrace` it answers over."""

    def __init__(self, folder: Path) -> None:
        from perfetto.trace_processor.api import TraceProcessor
        self.recording = self._rec = RecordedTrace(Path(folder))
        self._protos, self._iter = _protos(), TraceProcessor.QueryResultIterator
        self.sent: list[str] = []

    def query(self, sql: str):
        self.sent.append(sql)
        response = self._protos.QueryResult()
        response.ParseFromString(encode_result(self._protos, *self._rec.rows(sql)))
        return self._iter(response.column_names, response.batch)

    def close(self) -> None:
        self._rec.close()
