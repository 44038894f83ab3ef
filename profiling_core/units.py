"""Durations for people: the one formatter the findings, the CLI and the app's pages share.

The analyses keep durations as float microseconds (``*_us`` columns); every place that shows one to a reader
goes through :func:`format_duration_us`, so a number reads the same in a finding, a page and a terminal.
"""
from __future__ import annotations

import math
from typing import Any

__all__ = ["format_duration_us", "MISSING"]

MISSING = "n/a"
"""What :func:`format_duration_us` shows for a duration the trace does not have (None, NaN, ``pd.NA``)."""


def format_duration_us(us: Any) -> str:
    """A duration given in microseconds, as short text: ``"12.3 µs"`` below 1 ms, ``"4.56 ms"`` from 1 ms on.

    Milliseconds cover everything larger as well (a 13 s step reads ``"13336.32 ms"``): the finding texts are
    snapshotted word for word (``tests/data/findings_snapshot``), and one unit above µs keeps a page's numbers
    comparable at a glance.

    Args:
        us: microseconds (int, float or a numpy/pandas scalar); None, NaN or ``pd.NA`` when unknown.

    Returns:
        The text, or :data:`MISSING` when the value is unknown or not a number.
    """
    try:
        x = float(us)
    except (TypeError, ValueError):  # None, pd.NA, text
        return MISSING
    if math.isnan(x):
        return MISSING
    if abs(round(x, 1)) >= 1000:  # 999.96 µs reads 1.00 ms, not 1000.0 µs
        return f"{x / 1000:.2f} ms"
    return f"{x:.1f} µs"
