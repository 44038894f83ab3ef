"""Durations and sizes for people: the one formatter of each that the findings, the CLI and the app's pages share.

The analyses keep durations as float microseconds (``*_us`` columns); every place that shows one to a reader
goes through :func:`format_duration_us`, so a number reads the same in a finding, a page and a terminal. A size in
bytes (a run store's folder) reads through :func:`human_bytes`, a rate through :func:`format_rate`, a count per step
through :func:`format_count`.
"""
from __future__ import annotations

import math
from typing import Any, Optional

__all__ = ["format_duration_us", "MISSING", "human_bytes", "format_rate", "format_count"]

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


def human_bytes(n: float) -> str:
    """A size in bytes as short text in binary units: ``"512 B"``, ``"1.5 KiB"``, ``"2.0 MiB"``, ``"3.1 GiB"``.

    Whole bytes below 1 KiB, one decimal above; GiB all the way up (2 TiB reads ``"2,048.0 GiB"``), with thousands
    separated by commas. A negative size (memory freed) reads as its magnitude with a minus sign (``"-1.5 KiB"``).
    """
    if n < 0:
        return "-" + human_bytes(-n)
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} GiB"


def _finite(x: Any) -> Optional[float]:
    """``x`` as a finite float, or None (None, NaN, infinity, ``pd.NA``, text that is no number)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) or math.isinf(v) else v


def format_rate(x: Any) -> str:
    """A rate (GFLOP/s, TFLOP/s) as short text with three significant digits and no exponent: ``"0.000581"``,
    ``"0.556"``, ``"12.3"``, ``"233"``, ``"1,920"`` (``:.3g`` would write ``"1.92e+03"``, and a fixed ``:.3f``
    rounds 0.000581 up to ``"0.001"``). :data:`MISSING` for None, NaN or text."""
    v = _finite(x)
    if v is None:
        return MISSING
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{max(0, 2 - math.floor(math.log10(abs(v))))}f}"


def format_count(x: Any) -> str:
    """A count, or a count per step or per token (a mean or a median: ``1.5``), as short text: a whole number in
    full (``"1462"``, ``"1000000"``), any other to six significant digits (``"3.33333"``), never in exponent form
    (``:g`` writes 1,000,000 as ``"1e+06"``); a fraction of a million or more keeps one decimal (``"1234567.5"``), one
    below 1e-4 is written out (``"0.0000125"``). :data:`MISSING` for None, NaN, infinity or text."""
    v = _finite(x)
    if v is None:
        return MISSING
    if v.is_integer():
        return str(int(v))
    text = f"{v:.6g}"
    if "e" in text:  # six significant digits written out below 1e-4; one decimal from a million on
        text = f"{v:.1f}" if abs(v) >= 1 else f"{v:.{5 - math.floor(math.log10(abs(v)))}f}".rstrip("0")
    return text
