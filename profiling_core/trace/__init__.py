"""SQL over Chrome/Kineto traces.

``open_trace(path, engine="auto")`` returns a ``TraceSession`` whose ``query(sql)`` gives a pandas
DataFrame. Two engines answer the same SQL (trace_processor's table and column names):

- ``"perfetto"``: a real trace_processor (perfetto's Python API; binary from ``$PERFETTO_BIN``).
- ``"sqlite"``: an offline SQLite mirror of trace_processor's tables (``slice``, ``thread``,
  ``thread_track``, ``process``, ``track``, ``flow``, ``args``, ``extract_arg``) built by this package.

docs/SQL.md lists the subset, the rules, and every known difference between the two.
"""
from __future__ import annotations

from ._stats import LoadStats
from ._session import ConsoleResult, QueryLimits, TraceSession, open_trace
from ._processes import same_pid, write_without_processes
from ._source import CAP_VARIABLE, DEFAULT_MAX_BYTES, trace_cap

__all__ = ["open_trace", "TraceSession", "QueryLimits", "ConsoleResult", "LoadStats", "DEFAULT_MAX_BYTES",
           "CAP_VARIABLE", "trace_cap", "same_pid", "write_without_processes"]
