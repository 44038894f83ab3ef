"""Running: real torch.profiler experiments, each in a fresh worker process, behind the device lock.

- ``runner``: :func:`run_experiment` (one config in a worker, landing atomically in the store), :func:`calibrate`
  (the device's peaks, measured in a worker), :func:`environment_info`, :func:`prestart_worker` (the fork server),
  :func:`machine_busy` (was the machine loaded around a run).
- ``sweep``: :func:`run_sweep` over many configs with progress and cancel; :func:`sweep_configs` makes them
  (:func:`sweep_values` reads the axis's values from text);
  :func:`sweep_points` gives each point's median and spread (``SPREAD_WARN_PCT``).
- ``worker``: the worker process, the fork server and the persistent workers (``python -m
  profiling_core.run.worker``; ``PROCESS_KINDS``, :func:`persistent_refusal`, :func:`stop_persistent_workers`);
  ``loop``: what
  the worker runs (build the workload, warm up, profile with the schedule, export); ``calibration``:
  :class:`CalibrationJob` and :func:`measure_peaks`; ``lock``: :func:`device_lock`, one run per device;
  ``host``: facts of the machine read without torch.

- ``cluster``: the ``ray`` executor of sweeps (each run a Ray task on a cluster's node, its artifacts committed
  here; ``device_type_resource``: the custom resource a node of a device type declares; :func:`ray_missing`:
  whether Ray is installed, found without importing it). :func:`check_executor` refuses a sweep's executor options
  before anything runs.

Only the worker imports torch; only ``cluster`` imports ray, when a Ray sweep runs.
"""
from __future__ import annotations

from .calibration import CalibrationJob, measure_peaks
from .lock import device_lock
from .runner import calibrate, environment_info, machine_busy, prestart_worker, run_experiment
from .cluster import PLACEMENTS, ray_missing
from .sweep import EXECUTORS, SPREAD_WARN_PCT, check_executor, SweepProgress, SweepResult, run_sweep, sweep_configs, sweep_points, sweep_values
from .worker import COMPILE_CACHES, PROCESS_KINDS, persistent_refusal, shared_cache_refusal, stop_persistent_workers

__all__ = ["run_experiment", "run_sweep", "sweep_configs", "sweep_values", "sweep_points", "SPREAD_WARN_PCT", "SweepProgress",
           "SweepResult", "calibrate", "CalibrationJob", "measure_peaks", "environment_info", "prestart_worker",
           "machine_busy", "device_lock", "PROCESS_KINDS", "COMPILE_CACHES", "shared_cache_refusal", "persistent_refusal", "stop_persistent_workers", "EXECUTORS",
           "check_executor", "PLACEMENTS", "ray_missing"]
