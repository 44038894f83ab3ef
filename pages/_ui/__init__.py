"""What every page shares, one module per concern; pages do ``from pages import _ui as ui`` and call ``ui.xxx``.

Pages are UI only: what they show is computed by ``profiling_core``; this package draws it and caches it.

- ``notices``: one readable error box (:func:`show_error`), and what a finished action left to say (:func:`show_notices`).
- ``cache``: the run store and every run's session, report, findings and diagnosis, cached by run id or trace
  version (``st.cache_data`` / ``st.cache_resource``, and a memo per script run); chart specs; this machine's facts.
- ``state``: the current run, the run pickers that follow it, and the runs a page's action announces.
- ``jobs``: profiles, sweeps and calibrations in background :class:`~pages._ui.jobs.Job` s, with progress and Cancel.
- ``blocks``: a chart or a table with its downloads, the page's HTML report, findings, the diagnosis.
- ``form``: the experiment form (workload, knobs, dtype, device, warm-up, compile, schedule) and its words; where a
  sweep's runs happen (this machine or a Ray cluster: ``executor_control``).
- ``frame``: the start of each script run, deep links through the app's frame, the sidebar.

Each module imports only those above it in this list (no cycles).
"""
from __future__ import annotations

from profiling_core.present import md_code, md_text, peaks_frame
from profiling_core.workloads import get_workload, workload_names

from .blocks import (PERFETTO_HOWTO, STEP_MEDIAN_HELP, chart_block, fit_height, per_step_notes, report_button,
                     show_diagnosis, show_findings, table_block, peaks_note, cost_line)
from .cache import (calibrations, chart, config_matches, config_summary, corrupt_runs, diagnosis, environment, findings,
                    fusions, gemm_vs_peak, hand_over_session, load_run, machine_comparison, machines, mode_label,
                    overview, readable, report, runs_frame, session, step_timeline, store, store_summary, summaries)
from .form import (COMPILE_MODES, DEVICES, SCHEDULE_WARMUP_LABEL, SIZES, WARMUP_CALLS_HELP, WARMUP_CALLS_LABEL,
                   chosen_process, config_form, dtype_select, executor_control, knob_widget)
from .frame import follow_deep_link, in_frame, new_script_run, sidebar
from .jobs import (finish_calibration, finish_profile, finish_sweep, follow_job, get_job, pop_job, start_calibration,
                   start_profile, start_sweep)
from .memory import memory, memory_categories, memory_section
from .notices import show_error, show_notices
from .state import (CURRENT_RUN, current_run_id, end_action, label_of, newest_run, run_picker, runs_multiselect,
                    set_current_run, sql_engine)

__all__ = [
    "md_code", "md_text", "peaks_frame", "get_workload", "workload_names",
    "PERFETTO_HOWTO", "STEP_MEDIAN_HELP", "chart_block", "per_step_notes", "fit_height", "report_button",
    "show_diagnosis", "show_findings", "table_block", "peaks_note", "cost_line",
    "calibrations", "chart", "config_matches", "config_summary", "corrupt_runs", "diagnosis", "environment", "findings",
    "fusions", "machine_comparison", "machines",
    "gemm_vs_peak", "hand_over_session", "load_run", "memory", "memory_categories", "memory_section", "mode_label",
    "overview", "readable", "report", "runs_frame",
    "session", "step_timeline", "store",
    "store_summary", "summaries",
    "COMPILE_MODES", "DEVICES", "SCHEDULE_WARMUP_LABEL", "SIZES", "WARMUP_CALLS_HELP", "WARMUP_CALLS_LABEL",
    "chosen_process", "config_form", "dtype_select", "executor_control", "knob_widget",
    "follow_deep_link", "in_frame", "new_script_run", "sidebar",
    "finish_calibration", "finish_profile", "finish_sweep", "follow_job", "get_job", "pop_job", "start_calibration",
    "start_profile", "start_sweep",
    "show_error", "show_notices",
    "CURRENT_RUN", "current_run_id", "end_action", "label_of", "newest_run", "run_picker", "runs_multiselect",
    "set_current_run", "sql_engine",
]
