"""profiling_core: learn to read PyTorch profiles by experiment.

Public surface (everything else is private):

- ``ExperimentConfig``: what to run, validated at construction; ``ExperimentConfig.for_workload(name, knobs,
  ...)`` makes one of any workload.
- ``WORKLOADS`` / ``get_workload(name)`` / ``workload_names()``: the workloads (``matmul_add``, ``linear``, ``mlp``,
  ``attention``, ``transformer_block``, ``script``), each a ``Workload`` with its ``Knob``s, size knob and per-step
  FLOPs / bytes (``profiling_core.workloads``); ``sdpa_backend_from_names(names)``: which attention backend a
  trace's op and kernel names say ran.
- ``run_experiment(config, ...)`` / ``run_sweep(configs, ...)``: real torch.profiler runs, each in a fresh
  worker process, landing atomically in a ``RunStore``.
- ``RunStore``: list, open, delete and import runs.
- ``open_trace(path, engine="auto")``: SQL over a Chrome/Kineto trace (perfetto's trace_processor, or the
  offline SQLite mirror of its tables).
- ``environment_info()``: torch / CUDA versions and the device this machine would profile on (asked once of a
  subprocess, so the caller never imports torch).
- ``prestart_worker()``: start the fork server in the background, so the first ``prestart=1`` run pays no
  torch import.
- ``machine_busy(meta)``: a warning sentence when the machine was busy around a run (load average vs cores).
- ``format_duration_us(us)``: a duration in µs as text for people (``"12.3 µs"``, ``"4.56 ms"``, ``"n/a"``).
- ``calibrate(job)``: measure the device's GEMM and memory peaks in a worker (``peaks.CalibrationJob``), kept in the
  store (``peaks.PeakBook``) as a ``peaks.DevicePeaks``.
- ``diagnose(session, report, config, peaks)``: every GEMM and copy against those peaks (``roofline``) and the
  anti-pattern rules' findings (``profiling_core.diagnosis``).
- ``md_text(s)`` / ``md_code(s)``: an untrusted string (a kernel, run or file name, an error message) as Streamlit
  Markdown that shows it literally: escaped running text, or a code span (``profiling_core.markdown``).
- the exception classes in ``profiling_core.errors``; the submodules ``analyses``, ``findings``, ``charts``,
  ``export``, ``queries``, ``config``, ``markdown``, ``peaks``, ``diagnosis`` and ``workloads``.

Nothing here imports streamlit; only the worker imports torch.
"""
from __future__ import annotations

from .config import ExperimentConfig
from .workloads import WORKLOADS, Knob, Workload, get_workload, sdpa_backend_from_names, workload_names
from .errors import (ConfigError, DeviceBusyError, DoesNotFitError, EngineUnavailableError,
                     InvalidRunIdError, ProfilingError, QueryError, RunNotFoundError, RunStoreError,
                     TraceError, TraceFormatError, TraceTooLargeError, WorkerError)

__all__ = [
    "ExperimentConfig", "WORKLOADS", "Workload", "Knob", "get_workload", "workload_names",
    "sdpa_backend_from_names", "run_experiment", "run_sweep", "RunStore", "Run", "open_trace", "environment_info",
    "prestart_worker", "format_duration_us", "machine_busy", "QueryLimits", "md_text", "md_code",
    "calibrate", "diagnose", "DevicePeaks", "PeakBook", "CalibrationJob",
    "ProfilingError", "ConfigError", "DoesNotFitError", "WorkerError", "InvalidRunIdError",
    "RunNotFoundError", "RunStoreError", "DeviceBusyError", "TraceError", "TraceFormatError",
    "TraceTooLargeError", "EngineUnavailableError", "QueryError",
]

_LAZY = {
    "run_experiment": ("runner", "run_experiment"),
    "run_sweep": ("sweep", "run_sweep"),
    "RunStore": ("store", "RunStore"),
    "Run": ("store", "Run"),
    "open_trace": ("trace", "open_trace"),
    "QueryLimits": ("trace", "QueryLimits"),
    "environment_info": ("runner", "environment_info"),
    "prestart_worker": ("runner", "prestart_worker"),
    "machine_busy": ("runner", "machine_busy"),
    "format_duration_us": ("units", "format_duration_us"),
    "md_text": ("markdown", "md_text"),
    "md_code": ("markdown", "md_code"),
    "calibrate": ("runner", "calibrate"),
    "diagnose": ("diagnosis", "diagnose"),
    "DevicePeaks": ("peaks", "DevicePeaks"),
    "PeakBook": ("peaks", "PeakBook"),
    "CalibrationJob": ("peaks", "CalibrationJob"),
}


def __getattr__(name: str):
    # Lazy so that importing the config in the worker (or a notebook) stays cheap.
    if name in _LAZY:
        import importlib
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{mod}", __name__), attr)
    raise AttributeError(f"module 'profiling_core' has no attribute {name!r}")
