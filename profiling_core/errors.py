"""Every exception profiling_core raises on purpose.

Messages say what was wrong, the value, and what is allowed, so the CLI and the
app can show them as they are (one line, no traceback).
"""
from __future__ import annotations


__all__ = ["ProfilingError", "ConfigError", "DoesNotFitError", "WorkerError", "InvalidRunIdError", "RunNotFoundError",
           "RunStoreError", "DeviceBusyError", "TraceError", "TraceFormatError", "TraceTooLargeError",
           "EngineUnavailableError", "QueryError"]


class ProfilingError(Exception):
    """Base class of all errors raised by profiling_core."""


class ConfigError(ProfilingError, ValueError):
    """An ExperimentConfig field has a value that is not allowed."""

    def __init__(self, field: str, value: object, allowed: str):
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field} must be {allowed}, got {value!r}")


class DoesNotFitError(ProfilingError):
    """The experiment's tensors cannot fit the device; refused before allocating."""


class WorkerError(ProfilingError):
    """An experiment failed in its worker process.

    kind is one of: oom, does_not_fit, compile, cuda, crash, timeout, cancelled,
    export, store, device, workload (the workload cannot run as configured, e.g. an
    attention backend the device lacks), script (the user's script workload: its file,
    its function or its step failed), error.  stderr_tail holds the last lines the
    worker wrote to stderr (may be empty).
    """

    KINDS = ("oom", "does_not_fit", "compile", "cuda", "crash", "timeout", "cancelled",
             "export", "store", "device", "workload", "script", "error")

    def __init__(self, kind: str, message: str, stderr_tail: str = "", returncode: int | None = None):
        self.kind = kind
        self.message = message
        self.stderr_tail = stderr_tail
        self.returncode = returncode
        super().__init__(f"{kind}: {message}")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message,
                "stderr_tail": self.stderr_tail, "returncode": self.returncode}


class InvalidRunIdError(ProfilingError, ValueError):
    """A run id that is not a plain name inside the run store."""


class RunNotFoundError(ProfilingError, LookupError):
    """No run with that id in the store."""


class RunStoreError(ProfilingError):
    """The run store could not be read or written."""


class DeviceBusyError(ProfilingError):
    """The device is being profiled by another caller and fail-fast was asked."""


class TraceError(ProfilingError):
    """A trace file could not be loaded."""


class TraceFormatError(TraceError, ValueError):
    """The file is not a Chrome/Kineto trace this tool can read (says why)."""


class TraceTooLargeError(TraceError):
    """The trace is larger than the configured cap."""


class EngineUnavailableError(ProfilingError):
    """The requested SQL engine cannot run here (e.g. no trace_processor binary)."""


class QueryError(ProfilingError):
    """A SQL query failed or is not allowed (the read-only console)."""
