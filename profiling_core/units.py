"""Durations and sizes for people: the one formatter of each that the findings, the CLI and the app's pages share.

The analyses keep durations as float microseconds (``*_us`` columns); every place that shows one to a reader
goes through :func:`format_duration_us`, so a number reads the same in a finding, a page and a terminal. A size in
bytes (a run store's folder) reads through :func:`human_bytes`, a rate through :func:`format_rate`, a count per step
through :func:`format_count`, a share of a whole through :func:`format_share`, a ratio through :func:`format_times`;
names listed side by side are cut to a width through :func:`cut_apart`.
"""
from __future__ import annotations

import math
import os
from typing import Any, Optional

__all__ = ["format_duration_us", "MISSING", "human_bytes", "format_rate", "format_count", "format_share",
           "format_times", "cut_apart"]

MISSING = "n/a"
"""What :func:`format_duration_us` shows for a duration the trace does not have (None, NaN, ``pd.NA``)."""


def format_duration_us(us: Any, fine: bool = False) -> str:
    """A duration given in microseconds, as short text: ``"12.3 µs"`` below 1 ms, ``"4.56 ms"`` from 1 ms on; with
    ``fine``, to the nanosecond below 1 ms and to the microsecond above (``"5.312 µs"``, ``"1.024 ms"``), for
    durations set side by side whose differences are the point (a kernel's min and max a few tenths of a percent
    apart would read as equal, or further apart than they are, to 0.1 µs).

    Milliseconds cover everything larger as well (a 13 s step reads ``"13336.32 ms"``): the finding texts are
    snapshotted word for word (``tests/data/findings_snapshot``), and one unit above µs keeps a page's numbers
    comparable at a glance.

    Args:
        us: microseconds (int, float or a numpy/pandas scalar); None, NaN or ``pd.NA`` when unknown.
        fine: three decimals in either unit instead of one (µs) or two (ms).

    Returns:
        The text, or :data:`MISSING` when the value is unknown or not a number.
    """
    try:
        x = float(us)
    except (TypeError, ValueError):  # None, pd.NA, text
        return MISSING
    if math.isnan(x):
        return MISSING
    digits = 3 if fine else 1
    if abs(round(x, digits)) >= 1000:  # 999.96 µs reads 1.00 ms, not 1000.0 µs
        return f"{x / 1000:.{3 if fine else 2}f} ms"
    return f"{x:.{digits}f} µs"


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


def format_share(x: Any, decimals: int = 0) -> str:
    """A fraction of a whole (0.25) as a percentage (``"25%"``), with ``decimals`` decimals, never written as 0% or
    100% unless it is exactly that: a share that would round to either takes more decimals, up to two (0.0016 reads
    ``"0.2%"``, 0.9984 ``"99.8%"``), and past that reads ``"under 0.01%"`` or ``"over 99.99%"``. A verdict that says
    the GPU sat idle 100% of a step while its busy time is there beside it contradicts itself. :data:`MISSING` for
    None, NaN, infinity or text."""
    v = _finite(x)
    if v is None:
        return MISSING
    pct = 100 * v
    for d in range(decimals, max(decimals, 2) + 1):
        text = f"{pct:.{d}f}"
        if float(text) not in (0.0, 100.0) or float(text) == pct:
            return text + "%"
    return "under 0.01%" if pct < 50 else "over 99.99%"


def format_times(x: Any, decimals: int = 2) -> str:
    """A ratio as a multiple (``"0.97"``, to be followed by ``×``), with ``decimals`` decimals; a positive ratio that
    would round to 0 takes two significant digits instead (``"0.0016"``), so 64 µs of GPU work beside 41 ms of CPU
    time does not read as none. :data:`MISSING` for None, NaN, infinity or text."""
    v = _finite(x)
    if v is None:
        return MISSING
    if v != 0 and float(f"{v:.{decimals}f}") == 0:
        return f"{v:.{max(decimals, 1 - math.floor(math.log10(abs(v))))}f}"
    return f"{v:.{decimals}f}"


def cut_apart(names: list[str], width: int) -> list[str]:
    """Names listed side by side, each cut to at most ``width`` characters with an ellipsis, keeping what tells it
    apart from the others: a name that shares a head of ``width`` characters or more with another (Tensile's, CUTLASS's
    and ATen's kernels differ in their tile sizes or template arguments, deep inside) shows its first 20 characters,
    then its text from a little before where it first differs from them. A name that fits is shown whole."""
    out = []
    for n in names:
        if len(n) <= width:
            out.append(n)
            continue
        common = max((len(os.path.commonprefix([n, m])) for m in names if m != n), default=0)
        if common < width - 1:
            out.append(n[:width - 1] + "…")
        else:  # the first 20 characters, then from a little before where it differs
            at = max(20, common - 8)
            out.append(n[:20] + "…" + n[at:at + width - 22] + "…")
    return out
