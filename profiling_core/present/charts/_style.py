"""What every chart shares: the width, the palettes, the column check, number formats, the empty chart, and the
rules by which a chart of a big trace's events stays drawable (:data:`MAX_ROWS`)."""
from __future__ import annotations

from typing import Callable, Iterable, Optional

import altair as alt
import numpy as np
import pandas as pd

from ...units import format_duration_us

WIDTH = 640
"""Default width in pixels; the app stretches charts to the container, exports keep this width."""


def names_legend() -> alt.Legend:
    """The legend of a colour that names runs or kernels: below the chart, one name per line, each drawn whole up to
    the chart's width (Vega's default cuts a label at 160 px with an ellipsis, where run names run to ~50
    characters)."""
    return alt.Legend(orient="bottom", columns=1, labelLimit=WIDTH)


# Categories of trace events, in the order the legend shows them, with one colour each.
CATEGORY_COLORS = {
    "step": "#c7c7c7",
    "annotation": "#9467bd",
    "cpu_op": "#1f77b4",
    "runtime": "#ff7f0e",
    "driver": "#d62728",
    "kernel": "#2ca02c",
    "memcpy": "#8c564b",
    "memset": "#e377c2",
    "other": "#7f7f7f",
}

# Categories of GPU time (``analyses.step_breakdown``), in the order they stack, with one colour each: every
# breakdown chart uses the same order and colours, so two runs' charts read alike.
BREAKDOWN_COLORS = {
    "gemm": "#1f77b4",
    "convolution": "#17becf",
    "attention": "#9467bd",
    "elementwise": "#2ca02c",
    "other": "#bcbd22",
    "memcpy": "#8c564b",
    "memset": "#e377c2",
    "communication": "#ff7f0e",
    "unrecorded": "#969696",
    "idle": "#d9d9d9",
}

# Phases of a training step (``analyses.phases``), in the order they stack, with one colour each.
PHASE_COLORS = {
    "data": "#8c564b",
    "forward": "#1f77b4",
    "backward": "#ff7f0e",
    "optimizer": "#2ca02c",
    "zero_grad": "#9467bd",
    "other": "#d9d9d9",
}

# torch's memory profiler's categories (``store.MEMORY_CATEGORIES``), in its stacking order, in its own colours.
MEMORY_COLORS = {
    "PARAMETER": "#006400",
    "OPTIMIZER_STATE": "#daa520",
    "INPUT": "#333333",
    "TEMPORARY": "#9370db",
    "ACTIVATION": "#d62728",
    "GRADIENT": "#0000cd",
    "AUTOGRAD_DETAIL": "#4169e1",
    "unknown": "#a0a0a0",
}


MAX_ROWS = 5000
"""Altair's cap on the rows of one dataset of a chart (``alt.data_transformers``' default ``max_rows``): a chart given
more raises ``MaxRowsError`` instead of drawing, and a real trace has far more events (9,450 launches in HTA's A100
trace, 13,905 slices in one step of TraceLens' Qwen trace). So every chart that draws one mark per event keeps each of
its datasets at or under a bound of its own, by one of the rules below, and says in its subtitle what it left out;
the CSV beside a chart in the app keeps every row."""

MAX_SLICES = 4000
"""The most slices a timeline draws (``step_timeline``, ``dispatch_flame``, ``trace_overview``): beyond it the
shortest are left out (:func:`keep_longest`)."""

MAX_POINTS = 2000
"""The most points a scatter or line of events draws (``launch_latency``, the memory charts): beyond it, in each of
``MAX_POINTS // 4`` equal slices of time, the points of its lowest and highest value and its last one
(:func:`thin_by_time`)."""

MAX_BARS = 200
"""The most bars a bar chart draws (a bar per step or run of ``time_by_category``, per step of ``phase_bars``, per
category and group of ``grouped_bars``): beyond it the longest (:func:`keep_longest_bars`). A step's bar stacks up to
ten categories of GPU time, one row each, so 500 steps were over ``MAX_ROWS``; and vl-convert (the PNG, SVG and HTML
report) fails on a chart whose y order lists some 1,400 bars (two runs' kernels of a compiled model)."""


def keep_longest(data: pd.DataFrame, max_rows: int = MAX_SLICES, *, dur: str = "dur_us",
                 what: str = "slices", fmt: Optional[Callable[[float], str]] = format_duration_us
                 ) -> tuple[pd.DataFrame, Optional[str]]:
    """The ``max_rows`` longest rows of ``data`` by ``dur`` (between equal ones, the earlier row), in their order,
    and a note saying how many shorter ones were left out and the longest of those (as ``fmt`` writes it; None: not
    said); ``data`` itself and None when it has no more rows than that.

    The rule for timelines: a chart ``WIDTH`` pixels wide shows a slice only when it spans a visible part of the
    time axis, so the longest slices are the ones a reader can see; what is left out is each at most as long as the
    note says."""
    n = len(data)
    if n <= max_rows:
        return data, None
    d = pd.to_numeric(data[dur], errors="coerce").fillna(-np.inf).to_numpy(dtype=float)
    order = np.lexsort((np.arange(n), -d))  # longest first; the earlier row first among equals
    keep = np.sort(order[:max_rows])
    longest_out = float(d[order[max_rows]])
    bound = f", each {fmt(longest_out)} or shorter," if fmt is not None and np.isfinite(longest_out) else ""
    note = (f"{n:,} {what}: the {n - max_rows:,} shortest{bound} are left out to keep the chart drawable "
            "(the CSV has them all)")
    return data.iloc[keep], note


def keep_longest_bars(data: pd.DataFrame, bar: str, by: str, max_bars: int = MAX_BARS, *, stacked: bool = True,
                      what: str = "bars") -> tuple[pd.DataFrame, Optional[str]]:
    """The rows of the ``max_bars`` longest bars of ``data`` (a bar: the rows of one value of its column ``bar``), in
    their order, and :func:`keep_longest`'s note on those left out; ``data`` itself and None when it has no more
    bars than that. A bar's length is the sum of its rows' ``by`` (``stacked``: parts stacked into one bar) or their
    largest (bars side by side); the note gives the longest left out when ``by`` is in µs (``*_us``).

    The rule for bar charts of many steps or names: the longest bars are the ones a reader compares; the rest are
    each at most as long as the note says."""
    values = pd.to_numeric(data[by], errors="coerce").groupby(data[bar].to_numpy(), sort=False)
    length = values.sum() if stacked else values.max()
    if len(length) <= max_bars:
        return data, None
    kept, note = keep_longest(pd.DataFrame({"bar": length.index, "length": length.to_numpy()}), max_bars,
                              dur="length", what=what, fmt=format_duration_us if by.endswith("_us") else None)
    return data[data[bar].isin(set(kept["bar"])).to_numpy()], note


def thin_by_time(t_ns: pd.Series, values: list[pd.Series], max_points: int = MAX_POINTS,
                 what: str = "instants") -> tuple[pd.Series, Optional[str]]:
    """A mask of the rows to draw (at most about ``max_points``) and a note saying how they were chosen, or None when
    all are drawn: in each of ``max_points // 4`` equal slices of the time ``t_ns``, the row of its lowest and of its
    highest value of each of ``values`` (series aligned with ``t_ns``) and its last row.

    The rule for points and lines of events: the envelope of the values over time (a peak, a growing latency) stays
    as it is; what is left out lies between the lowest and highest drawn in its slice of time."""
    n = len(t_ns)
    if n <= max_points:
        return pd.Series(True, index=t_ns.index), None
    slices = max_points // 4
    t = t_ns.astype("float64")  # (int64 arithmetic would overflow on a span near the loader's ±2**62 ns)
    lo, span = float(t.min()), float(t.max()) - float(t.min())
    bucket = ((t - lo) / span * slices if span > 0 else t * 0).astype("int64").clip(0, slices - 1)
    keep = set(bucket.groupby(bucket).apply(lambda b: b.index[-1]))
    for v in values:
        v = pd.to_numeric(v, errors="coerce")
        if v.notna().any():
            keep |= set(v.groupby(bucket).idxmax().dropna()) | set(v.groupby(bucket).idxmin().dropna())
    mask = pd.Series(t_ns.index.isin(list(keep)), index=t_ns.index)
    return mask, (f"{n:,} {what} drawn as {int(mask.sum()):,}: in each of {slices} slices of time its lowest, "
                  "highest and last (the CSV has them all)")


def with_notes(title, notes: Iterable[Optional[str]]):
    """``title`` with the notes that are not None as its subtitle (one line each); ``title`` itself when none is."""
    lines = [n for n in notes if n]
    if not lines:
        return title
    if isinstance(title, alt.TitleParams):
        old = title.subtitle if isinstance(title.subtitle, list) else ([title.subtitle] if isinstance(
            title.subtitle, str) else [])
        return alt.TitleParams(title.text, subtitle=old + lines)
    return alt.TitleParams(title, subtitle=lines)


def _require(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} needs column(s) {', '.join(missing)}; "
                         f"got {', '.join(map(str, df.columns)) or 'no columns'}")


def _us_format(values: pd.Series) -> str:
    """A d3 number format that keeps µs values readable whatever their range."""
    top = float(values.abs().max()) if len(values) else 0.0
    return ",.0f" if top >= 100 else ",.2f"


def decade_ticks(values: pd.Series) -> list[float]:
    """Tick values for a (symmetric) log axis over ``values``: 0 where the axis starts there, then every power of ten
    up to the first one at or above the largest value, so the axis reads in decades (Vega-Lite's own symlog ticks
    can be as few as two: 0 and the maximum)."""
    import math
    v = pd.to_numeric(values, errors="coerce").dropna()
    pos = v[v > 0]
    if not len(pos):
        return [0.0]
    lo = math.floor(math.log10(float(pos.min())))
    hi = math.ceil(math.log10(float(pos.max())))
    return [0.0] + [float(10 ** k) for k in range(lo, hi + 1)]


def log_ticks(values: Iterable[float]) -> list[float]:
    """Tick values for a log axis (not symlog) over ``values``: each power of ten in their range, with 2× and 5× between
    when the range spans under three decades, so no two labels print over each other (Vega-Lite's own ticks put 1, 2
    and 5 of every decade on the axis, which collide once it spans five)."""
    import math
    v = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").dropna()
    pos = v[v > 0]
    if not len(pos):
        return []
    lo = math.floor(math.log10(float(pos.min())))
    hi = math.ceil(math.log10(float(pos.max())))
    steps = (1,) if hi - lo >= 3 else (1, 2, 5)
    return [float(m * 10 ** k) for k in range(lo, hi + 1) for m in steps if m * 10 ** k <= 10 ** hi]


LOG_AXIS_FORMAT = ",.4~r"
"""A d3 format for the ticks of a log axis of µs (or counts): plain decimals with thousands separators, no SI
prefixes (``~s`` reads 0.01 µs as "10m")."""


def _plain_format(values: pd.Series) -> str:
    """A d3 format for counts and other plain numbers that never prints an exponent ("5.46e+3") or a run of zeros
    ("0.000000"): whole numbers with thousands separators, else up to three decimals with trailing zeros dropped."""
    v = pd.to_numeric(values, errors="coerce").dropna()
    if len(v) and (v == v.round()).all():
        return ",.0f"
    return ",.0f" if len(v) and float(v.abs().max()) >= 1000 else ",.3~f"


def empty_chart(message: str, *, height: int = 80) -> alt.Chart:
    """A chart with one line of text: used where a panel has no data (e.g. GPU lanes on a CPU trace)."""
    return (alt.Chart(pd.DataFrame({"message": [message]}))
            .mark_text(fontSize=13, color="#666")
            .encode(text="message:N")
            .properties(width=WIDTH, height=height))
