"""Charts: pure functions, DataFrame in, Altair chart out.

Every function takes a tidy DataFrame whose columns carry their unit (``dur_us``, ``start_us``),
returns an ``alt.Chart`` (or a layer of charts) and touches nothing else: no Streamlit, no files,
no trace sessions. The app draws their Vega-Lite spec with ``st.vega_lite_chart`` and
``profiling_core.present.export`` turns them into PNG/SVG/HTML. They are tested through ``chart.to_dict()``.

Column contracts are stated in each docstring; a missing column raises ``ValueError`` naming it
and the columns that were given, so a page never shows a half-drawn chart.

The modules, by what they chart (every name is importable from here: ``charts.step_timeline(...)``):

- ``timeline``: :func:`step_timeline`, :func:`dispatch_flame`, :func:`trace_overview`, and the shaping of
  ``analyses.dispatch_chain(s)`` for them (:func:`timeline_from_chain`, :func:`flame_from_chain`,
  :func:`overview_from_chains`, :func:`chart_category`).
- ``sweep``: :func:`overhead_vs_compute`, :func:`crossover_points`, :func:`gpu_busy_fraction`.
- ``kernels``: :func:`kernel_durations_by_step`, :func:`kernel_spread`, :func:`launch_latency`, :func:`cold_vs_warm`,
  :func:`sync_idle` (its rows: :func:`sync_parts`).
- ``bars``: :func:`grouped_bars`, :func:`time_by_category`, :func:`breakdown_bars`, :func:`phase_bars`.
- ``peaks``: :func:`roofline`, :func:`achieved_vs_peak`.
- ``memory``: :func:`memory_timeline_chart`, :func:`memory_categories_chart`, :func:`memory_comparison_chart`.
- ``_style``: what they share: ``WIDTH``, ``CATEGORY_COLORS``, ``BREAKDOWN_COLORS``, :func:`empty_chart`, the
  column check and number formats, and the bounds that keep a big trace's charts drawable (``MAX_ROWS``: the
  longest ``MAX_SLICES`` slices of a timeline, ``keep_longest``; the lowest, highest and last of each slice of time
  for ``MAX_POINTS`` points, ``thin_by_time``; the longest ``MAX_BARS`` bars of a bar chart, ``keep_longest_bars``);
  each chart's subtitle says what it left out.
"""
from __future__ import annotations

# The F401 waivers: public names beyond __all__ (as before the split), reached as charts.<name>: the palettes, the
# width, trace_overview and the timelines' shaping helpers.
from ._style import BREAKDOWN_COLORS, CATEGORY_COLORS, MEMORY_COLORS, PHASE_COLORS, WIDTH, empty_chart  # noqa: F401
from .bars import breakdown_bars, grouped_bars, phase_bars, time_by_category
from .kernels import (cold_vs_warm, kernel_durations_by_step, kernel_spread, launch_latency, sync_idle,
                      sync_parts)
from .kernels import MAX_CALL_LINES, MAX_COLOURS, MAX_SYNC_BARS  # noqa: F401
from ._style import (MAX_BARS, MAX_POINTS, MAX_ROWS, MAX_SLICES, keep_longest, keep_longest_bars,  # noqa: F401
                     thin_by_time)  # noqa: F401
from .memory import memory_categories_chart, memory_comparison_chart, memory_timeline_chart
from .peaks import achieved_vs_peak, roofline
from .sweep import crossover_points, gpu_busy_fraction, overhead_vs_compute
from .timeline import dispatch_flame, step_timeline
from .timeline import (OVERVIEW_MAX_SLICES, chart_category, flame_from_chain, overview_from_chains,  # noqa: F401
                       timeline_from_chain, trace_overview)  # noqa: F401

__all__ = [
    "step_timeline", "overhead_vs_compute", "gpu_busy_fraction", "crossover_points",
    "kernel_durations_by_step", "kernel_spread", "grouped_bars", "launch_latency",
    "dispatch_flame", "cold_vs_warm", "sync_idle", "sync_parts", "empty_chart", "roofline", "achieved_vs_peak",
    "time_by_category",
    "breakdown_bars", "BREAKDOWN_COLORS", "phase_bars", "PHASE_COLORS", "memory_timeline_chart",
    "memory_categories_chart", "memory_comparison_chart", "MEMORY_COLORS",
]
