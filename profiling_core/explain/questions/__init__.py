"""Findings: short statements, with their evidence, about what THIS trace shows for each study question.

Every sentence is built from the analyses of the trace in hand (no text fixed in advance): on an H200 there is
no occupancy query before the GEMM, on an A100 there may be one, on a CPU-only trace there is no GPU lane, and the
findings say so. ``question`` refers to the ten questions of the study (docs: STUDY.md).

One module per question, named after its findings' ids: ``q1_table``, ``q1_memory`` (the table's memory columns:
where the memory goes), ``q2_bound``, ``q3_cold_start``,
``q4_offset``, ``q5_chain``, ``q6_launch_path``, ``q7_sync``, ``q8_variance``, ``q9_compile``,
``q10_compile_cost``; each holds a function ``(report, config) -> [Finding]`` and the thresholds its verdict uses.
``base`` holds :class:`Finding` and what more than one question shares. This module runs them in order.

    >>> from profiling_core import open_trace
    >>> from profiling_core.explain import findings
    >>> for f in findings(open_trace("trace.json")):      # doctest: +SKIP
    ...     print(f.question, f.title, "-", f.text)
"""
from __future__ import annotations

from typing import Callable

from .base import NO_GPU_TEXT, Finding, empty_steps_text
from .q1_memory import _q1_memory
from .q1_table import _q1_table
from .q2_bound import (_q2_bound, blocked_in, cpu_bound, cut_steps_text, devices_text,
                       merged_processes_text, rank_text, UNPLACED_EVENTS_TEXT)
from .q3_cold_start import FIRST_STEP_SLOWER_PCT, _q3_cold
from .q4_offset import _q4_offset, offset_text, started_before_launch_text
from .q5_chain import _q5_chain
from .q6_launch_path import _q6_paths, occupancy_pattern
from .q7_sync import _q7_sync
from .q8_variance import (MEAN_ABOVE_MEDIAN_PCT, MIN_LAUNCHES_FOR_SKEW, _q8_variance, kernel_groups,
                          mean_above_median_pct, skew_text)
from .q9_compile import _q9_compile
from .q10_compile_cost import _q10_cost

__all__ = ["Finding", "findings", "NO_GPU_TEXT", "FIRST_STEP_SLOWER_PCT", "MEAN_ABOVE_MEDIAN_PCT",
           "MIN_LAUNCHES_FOR_SKEW", "UNPLACED_EVENTS_TEXT", "blocked_in", "cpu_bound", "cut_steps_text",
           "devices_text", "merged_processes_text", "rank_text", "kernel_groups", "mean_above_median_pct",
           "occupancy_pattern", "offset_text", "skew_text", "started_before_launch_text", "empty_steps_text"]


_RULES: tuple[Callable, ...] = (_q1_table, _q1_memory, _q2_bound, _q3_cold, _q4_offset, _q5_chain, _q6_paths, _q7_sync,
                                _q8_variance, _q9_compile, _q10_cost)


def findings(report_or_session, config=None) -> list[Finding]:
    """Turn a trace's analyses into short findings, ordered by study question.

    Args:
        report_or_session: a :class:`profiling_core.analyses.Report`, or a trace session (analysed here).
        config: the ``ExperimentConfig`` of the run, if known (passed to ``analyze``).

    Returns:
        A list of :class:`Finding`, one or more per study question: where the trace lacks what a question reads (a
        GPU lane, ProfilerStep slices for the questions that compare or count steps) the finding says so and how to
        record it.
    """
    from ...analyses import NO_WORK_TEXT, Report, analyze
    r = report_or_session if isinstance(report_or_session, Report) else analyze(report_or_session, config=config)
    if r.summary.get("work", 1) == 0:  # (the profiler's own slices alone: nothing any question can read)
        return [Finding("q1.no_work", 1, "Nothing recorded", NO_WORK_TEXT, {"work": 0})] + [
            Finding(f"q{q}.no_work", q, "Nothing recorded", "This trace recorded no work (question 1 says why): "
                    "nothing to read for this question.", {"work": 0}) for q in range(2, 11)]
    out: list[Finding] = []
    for rule in _RULES:
        out.extend(rule(r, config))
    return out
