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
import sqlite3
from pathlib import Path

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


def read_csv(folder: Path, table: str) -> tuple[list[str], list[list]]:
    """(header, rows) of one recorded table; NULL cells as None, every other cell as the text the shell printed."""
    with gzip.open(folder / f"{table}.csv.gz", "rt", encoding="utf-8", newline="") as f:
        rows = list(csv.reader(io.StringIO(f.read())))
    return rows[0], [[None if v == NULL else v for v in r] for r in rows[1:]]


class RecordedTrace:
    """One trace's recorded tables in an in-memory SQLite database; ``query(sql)`` returns a DataFrame."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        for table, cols in SCHEMA.items():
            header, rows = read_csv(folder, table)
            self.conn.execute(f"CREATE TABLE {table} ({cols})")
            self.conn.executemany(f"INSERT INTO {table} ({', '.join(header)}) VALUES "
                                  f"({', '.join('?' * len(header))})", rows)
        # trace_processor's extract_arg(arg_set_id, key): the value at that key of that arg set, NULL when absent
        values = {(a, k): iv if vt in ("int", "bool", "uint", "pointer") else rv if vt == "real" else sv
                  for a, k, iv, sv, rv, vt in self.conn.execute(
                      "SELECT arg_set_id, key, int_value, string_value, real_value, value_type FROM args")}
        self.conn.create_function("extract_arg", 2, lambda a, k: values.get((a, k)), deterministic=True)
        self._tables = None

    def query(self, sql: str) -> pd.DataFrame:
        cur = self.conn.execute(sql)
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
        if not rows:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
        return pd.DataFrame.from_records(rows, columns=cols)

    @property
    def tables(self):
        """What the perfetto engine's ``tables`` would be: the extraction queries run over the recording."""
        if self._tables is None:
            from profiling_core.trace._extract import tables_from_sql
            self._tables = tables_from_sql(self.query)
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


class FakeTraceProcessor:
    """Stands in for perfetto's ``TraceProcessor`` over a recording, for the perfetto engine's own logic (its console
    rules and caps) where no trace_processor binary can run: ``query(sql).as_pandas_dataframe()``, and ``close()``,
    which ends a statement that is running (as ending trace_processor's process does) and every later one."""

    def __init__(self, folder: Path) -> None:
        self._rec = RecordedTrace(folder)
        self._closed = False
        self.sent: list[str] = []

    def query(self, sql: str):
        if self._closed:
            raise ConnectionError("trace_processor is not running")
        self.sent.append(sql)
        frame = self._rec.query(sql)
        return type("QueryResult", (), {"as_pandas_dataframe": lambda _self: frame})()

    def close(self) -> None:
        self._closed = True
        self._rec.conn.interrupt()


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
