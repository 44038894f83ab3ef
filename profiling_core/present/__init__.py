"""Presenting: charts, reports and text for people, with every untrusted string escaped.

- ``charts``: the Altair charts of every page (pure: DataFrames in, charts out).
- ``export``: a chart as PNG / SVG / its Vega-Lite spec, a frame as CSV, the one-file HTML report
  (:class:`ReportSection`, :func:`html_report`), and the page that opens a trace in the Perfetto UI.
- ``markdown``: :func:`md_text` / :func:`md_code`, an untrusted name as Streamlit Markdown shown literally.
- ``web``: :func:`html_text` (HTML text and attribute values), :func:`script_json` (a value inside ``<script>``)
  and :func:`vega_safe` (a chart's strings, before it is drawn): the only ways an untrusted string enters the
  HTML, JavaScript and SVG written here.
- ``terminal``: :func:`terminal_safe`, control characters as visible escapes for the CLI's human output, and
  :func:`echo`, which prints lines through it.
- ``summaries``: tables and labels about runs from plain data (a ``Run``, its ``Report``, its ``DiagnosisReport``,
  calibrations): :func:`runs_table`, :func:`config_summary`, :func:`mode_label`, :func:`run_size`,
  :func:`step_summary` / :func:`step_summaries`, :func:`peaks_frame`, :func:`gemm_vs_peak`, ...
- ``machines``: the same config across machines (:func:`machine_comparison`: over each machine's runs, the median
  per-step time and GEMM against each device's own peak with their spread, the gaps beyond it, the findings and
  diagnoses that differ) and the machines of a store (:func:`machines_table`).
- ``memory``: the memory section of a run (:func:`memory_section`: its charts' frames and its peak in a sentence)
  and the comparison of runs (:func:`memory_comparison`), from the analyses' memory frames.

Nothing here imports streamlit or torch.
"""
from __future__ import annotations

from .markdown import md_code, md_text
from .terminal import echo, terminal_safe
from .web import html_text, script_json, vega_safe

__all__ = ["charts", "export", "ReportSection", "html_report", "chart_png", "chart_svg", "chart_spec", "dataframe_csv",
           "significant_figures", "safe_filename", "perfetto_open_html", "PERFETTO_OPEN_MAX_BYTES", "PERFETTO_UI",
           "md_text", "md_code",
           "html_text", "script_json", "vega_safe", "terminal_safe", "echo", "summaries", "RUNS_COLUMNS", "runs_table",
           "run_labels", "newest_run", "store_size_text", "config_summary", "mode_label", "run_size",
           "STEP_SUMMARY_COLUMNS", "step_summary", "step_summaries", "peaks_frame", "GEMM_VS_PEAK_COLUMNS",
           "gemm_vs_peak", "comparison_warnings", "STEP_KINDS", "step_kind", "different_work", "run_size_axis",
           "size_axis_title", "crossover_sentence", "sweep_bounds", "bound_sentence", "PHASE_SUMMARY_COLUMNS",
           "phase_summary", "setting_parts",
           "setting_labels", "chain_lines", "memory",
           "MEMORY_HOWTO", "MEMORY_HOWTO_RUNS",
           "MemorySection", "memory_section", "memory_steps", "memory_comparison", "peak_sentence", "machines",
           "MACHINE_COMPARISON_COLUMNS", "MACHINE_RUNS_COLUMNS", "MACHINE_GAPS_COLUMNS", "MACHINES_COLUMNS", "ABSENT",
           "DIFFERS", "TOO_NOISY", "ONE_RUN", "ONE_RUN_DIFFERS", "VARIES", "GAP_VALUES", "MachineComparison",
           "machine_comparison", "machines_table", "machine_labels"]

_EXPORT = {"ReportSection", "html_report", "chart_png", "chart_svg", "chart_spec", "dataframe_csv", "safe_filename",
           "significant_figures", "perfetto_open_html", "PERFETTO_OPEN_MAX_BYTES", "PERFETTO_UI"}
_SUMMARIES = {"RUNS_COLUMNS", "runs_table", "run_labels", "newest_run", "store_size_text", "config_summary",
              "mode_label", "run_size", "STEP_SUMMARY_COLUMNS", "step_summary", "step_summaries", "peaks_frame",
              "GEMM_VS_PEAK_COLUMNS", "gemm_vs_peak", "comparison_warnings", "STEP_KINDS", "step_kind",
              "different_work", "run_size_axis", "size_axis_title", "crossover_sentence", "sweep_bounds",
              "bound_sentence", "PHASE_SUMMARY_COLUMNS", "phase_summary",
              "setting_parts", "setting_labels", "chain_lines"}
_MEMORY = {"MEMORY_HOWTO", "MEMORY_HOWTO_RUNS", "MemorySection", "memory_section", "memory_steps", "memory_comparison",
           "peak_sentence"}
_MACHINES = {"MACHINE_COMPARISON_COLUMNS", "MACHINE_RUNS_COLUMNS", "MACHINE_GAPS_COLUMNS", "MACHINES_COLUMNS",
             "ABSENT", "DIFFERS", "TOO_NOISY", "ONE_RUN", "ONE_RUN_DIFFERS", "VARIES", "GAP_VALUES",
             "MachineComparison", "machine_comparison", "machines_table", "machine_labels"}


def __getattr__(name: str):
    # charts and export import altair (half a second), summaries pandas: loaded on first use, so the CLI's
    # terminal_safe stays cheap
    import importlib
    if name in ("charts", "export", "summaries", "memory", "machines"):
        return importlib.import_module(f".{name}", __name__)
    if name in _EXPORT:
        return getattr(importlib.import_module(".export", __name__), name)
    if name in _SUMMARIES:
        return getattr(importlib.import_module(".summaries", __name__), name)
    if name in _MEMORY:
        return getattr(importlib.import_module(".memory", __name__), name)
    if name in _MACHINES:
        return getattr(importlib.import_module(".machines", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
