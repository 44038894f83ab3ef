"""Stage 5, explaining: what a report means, in plain words with its evidence, and what to change.

- ``questions/``: :func:`findings` turns an analysis :class:`~profiling_core.analyses.Report` into
  :class:`Finding` statements, one module per study question (``q1_table`` … ``q10_compile_cost``, the shared
  :class:`Finding` and helpers in ``base``), each with the numbers it rests on.
- ``diagnosis/``: :func:`diagnose` judges every GEMM and copy against the device's peaks (:func:`roofline`, in
  ``roofline``) and runs the anti-pattern rules (``rules/``, one module per rule), each returning a
  :class:`Diagnosis` (evidence, cost, the PyTorch change) or nothing.

Pure functions of the trace's tables, the report, the run's config and the peaks: no torch, no Streamlit.
"""
from __future__ import annotations

from .diagnosis import Diagnosis, DiagnosisReport, diagnose, roofline
from .questions import (FIRST_STEP_SLOWER_PCT, MEAN_ABOVE_MEDIAN_PCT, MIN_LAUNCHES_FOR_SKEW, NO_GPU_TEXT,
                        UNPLACED_EVENTS_TEXT, Finding, blocked_in, cpu_bound, cut_steps_text, devices_text, findings,
                        empty_steps_text, kernel_groups, mean_above_median_pct, merged_processes_text,
                        occupancy_pattern, rank_text, offset_text, skew_text, started_before_launch_text)

__all__ = ["findings", "Finding", "NO_GPU_TEXT", "FIRST_STEP_SLOWER_PCT", "MEAN_ABOVE_MEDIAN_PCT",
           "MIN_LAUNCHES_FOR_SKEW", "UNPLACED_EVENTS_TEXT", "blocked_in", "cpu_bound", "cut_steps_text",
           "devices_text", "merged_processes_text", "rank_text", "kernel_groups", "mean_above_median_pct",
           "occupancy_pattern", "offset_text", "skew_text", "started_before_launch_text", "empty_steps_text",
           "diagnose", "DiagnosisReport", "Diagnosis", "roofline"]
