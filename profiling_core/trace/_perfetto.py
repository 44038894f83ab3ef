"""The perfetto engine: perfetto's own Python API driving a real trace_processor binary.

The binary comes from ``perfetto_bin`` / ``$PERFETTO_BIN``, else from the perfetto package's
pinned download (cached under ~/.local/share/perfetto). In auto mode that download gets a short,
hard time bound (it runs in a daemon thread), so an offline machine falls back to the mirror fast.
"""
from __future__ import annotations

import os
import threading

from ..errors import EngineUnavailableError, QueryError, TraceError
from ._source import check_size


def _fetch_binary(timeout_s: float | None) -> str:
    """Path of the perfetto package's own trace_processor_shell (download it if needed)."""
    result: dict = {}

    def fetch() -> None:
        try:
            from perfetto.trace_processor.platform import PlatformDelegate
            result["path"] = PlatformDelegate().get_shell_path(None)
        except BaseException as e:  # noqa: BLE001 - reported below
            result["error"] = e

    th = threading.Thread(target=fetch, name="perfetto-fetch", daemon=True)
    th.start()
    th.join(timeout_s)
    if th.is_alive():
        raise EngineUnavailableError(
            f"no trace_processor binary (set PERFETTO_BIN); fetching one did not finish in {timeout_s:g} s")
    if "error" in result:
        e = result["error"]
        err = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}" if str(e).strip() else type(e).__name__
        raise EngineUnavailableError(f"no trace_processor binary (set PERFETTO_BIN); fetching one failed: {err}")
    return result["path"]


class PerfettoBackend:
    def __init__(self, tp) -> None:
        self._tp = tp
        self._lock = threading.Lock()

    def query_df(self, sql: str):
        if not isinstance(sql, str):
            raise QueryError(f"query must be a string, got {type(sql).__name__}")
        with self._lock:
            if self._tp is None:
                raise QueryError("the trace session is closed")
            try:
                return self._tp.query(sql).as_pandas_dataframe()
            except Exception as e:  # perfetto raises TraceProcessorException
                raise QueryError(f"SQL error: {str(e).strip()[:500]}") from None

    def close(self) -> None:
        tp, self._tp = self._tp, None
        if tp is not None:
            try:
                tp.close()
            except Exception:  # noqa: BLE001
                pass


def open_perfetto(path: str, binary: str | None, *, max_bytes: int, timeout_s: float | None):
    """Open ``path`` with trace_processor. Raises EngineUnavailableError if it cannot run."""
    from ._session import TraceSession

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
    check_size(path, max_bytes)
    if not os.path.isfile(path):
        raise TraceError(f"no such trace file: {path}")
    try:
        tp = TraceProcessor(trace=path, config=TraceProcessorConfig(
            bin_path=binary, load_timeout=int(timeout_s or 60) if timeout_s else 60))
    except Exception as e:  # noqa: BLE001 - the API raises plain Exceptions
        raise EngineUnavailableError(f"trace_processor failed to start or load the trace: "
                                     f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__}"
                                     ) from None
    return TraceSession(path, "perfetto", why, PerfettoBackend(tp), None)
