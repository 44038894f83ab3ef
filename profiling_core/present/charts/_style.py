"""What every chart shares: the width, the palettes, the column check, number formats, the empty chart."""
from __future__ import annotations

from typing import Iterable

import altair as alt
import pandas as pd

WIDTH = 640
"""Default width in pixels; the app stretches charts to the container, exports keep this width."""

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
    "idle": "#d9d9d9",
}

# Phases of a training step (``analyses.phases``), in the order they stack, with one colour each.
PHASE_COLORS = {
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
