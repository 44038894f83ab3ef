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
    def __init__(self, tp) -> None:
        self._tp = tp
        self._lock = threading.Lock()
        self._tables = None

    @property
    def tables(self):
        """The typed tables the analyses read, from the extraction queries (``_extract.py``), on first use."""
        if self._tables is None:
            from ._extract import tables_from_sql
            self._tables = tables_from_sql(self.query_df)
        return self._tables

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

    def query_capped(self, sql: str, limits):
        """The console's query on trace_processor: its rows cut at ``limits.max_rows``. trace_processor runs the
        statement in its own process, so the deadline and size caps of the mirror are not enforced here."""
        frame = self.query_df(sql)
        cut = len(frame) > limits.max_rows
        return (frame.iloc[:limits.max_rows] if cut else frame), cut

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
    kind = stream_kind(path)
    if kind is not None:  # (checked before check_size, which would consume a pipe)
        raise EngineUnavailableError(f"trace_processor reads regular files only, and {path} is {kind}")
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
