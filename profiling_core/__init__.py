"""profiling_core: learn to read PyTorch profiles by experiment.

The card (everything a notebook needs)::

    ExperimentConfig(size=4096, warmup=10, compile="default")     what to run (any workload: .for_workload(name, knobs))
    run_experiment(config) -> Run / run_sweep(configs)           real torch.profiler runs, each in a fresh worker
    RunStore(root)                                                the runs (and calibrations) kept on disk
    open_trace(path, engine="auto") -> TraceSession               SQL and typed tables over a Chrome/Kineto trace
    analyze(session, config) -> Report                            every analysis of the trace, once
    findings(report) -> [Finding]                                 the study's answers, with their evidence
    diagnose(session, report, config, peaks) -> DiagnosisReport   GEMMs and copies against the device's peaks; rules
    calibrate() -> DevicePeaks                                    measure this device's GEMM and memory peaks
    ProfilingError and its subclasses (profiling_core.errors)     every error raised on purpose

The pipeline, one subpackage per stage (each one's docstring says what is in it)::

    workloads/  what a step runs: the registry and one module per workload
    run/        run it: worker process, fork server, device lock, sweeps, calibration
    store/      keep it: run folders and calibrations, atomically
    trace/      read it: the two SQL engines (trace_processor, the offline mirror) and their typed tables
    queries/    the study's SQL, one .sql per question (teaching material for the Trace lab)
    analyses/   measure it: pure functions of the tables -> DataFrames
    explain/    say it: findings per question, diagnosis rules against the peaks
    present/    show it: charts, the HTML report, Markdown / terminal escaping
    cli/        python -m profiling_core ...

``config`` (ExperimentConfig and its choices), ``errors`` and ``units`` are the vocabulary every stage shares.
Nothing here imports streamlit; only the worker imports torch.
"""
from __future__ import annotations

from .errors import (ConfigError, DeviceBusyError, DoesNotFitError, EngineUnavailableError, InvalidRunIdError,
                     ProfilingError, QueryError, RunNotFoundError, RunStoreError, TraceError, TraceFormatError,
                     TraceTooLargeError, WorkerError)

__all__ = [
    "ExperimentConfig", "run_experiment", "run_sweep", "RunStore", "open_trace", "analyze", "findings", "diagnose",
    "calibrate",
    "ProfilingError", "ConfigError", "DoesNotFitError", "WorkerError", "InvalidRunIdError", "RunNotFoundError",
    "RunStoreError", "DeviceBusyError", "TraceError", "TraceFormatError", "TraceTooLargeError",
    "EngineUnavailableError", "QueryError",
]

_LAZY = {  # loaded on first use, so that importing one stage (the worker, a notebook's config, a command) stays cheap
    "ExperimentConfig": "config",
    "run_experiment": "run",
    "run_sweep": "run",
    "calibrate": "run",
    "RunStore": "store",
    "open_trace": "trace",
    "analyze": "analyses",
    "findings": "explain",
    "diagnose": "explain",
}

_MOVED = {  # names the top level once had: where they live now
    "WORKLOADS": "workloads", "Workload": "workloads", "Knob": "workloads", "get_workload": "workloads",
    "workload_names": "workloads", "sdpa_backend_from_names": "workloads", "Run": "store",
    "DevicePeaks": "store", "PeakBook": "store", "CalibrationJob": "run", "environment_info": "run",
    "prestart_worker": "run", "machine_busy": "run", "format_duration_us": "units", "QueryLimits": "trace",
    "md_text": "present", "md_code": "present",
}


def __getattr__(name: str):
    import importlib
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name in _MOVED:
        raise AttributeError(f"profiling_core.{name} is not on the top-level card: "
                             f"use `from profiling_core.{_MOVED[name]} import {name}`")
    raise AttributeError(f"module 'profiling_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
