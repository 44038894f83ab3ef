"""Against the device's peaks: the roofline and achieved GEMM throughput against size, with the measured peak."""
from __future__ import annotations

from typing import Optional

import altair as alt
import pandas as pd

from ._style import LOG_AXIS_FORMAT, WIDTH, _require, empty_chart, log_ticks


def _ceilings(peaks: dict, bandwidth_gbs: Optional[float], lo: float, hi: float) -> pd.DataFrame:
    """The roofline's lines: for each dtype's peak P (TFLOP/s) and the bandwidth B (GB/s), min(P, B·I) from
    intensity ``lo`` to ``hi`` FLOP/byte, as points (the ridge I = P/B included)."""
    rows = []
    for dtype, peak in sorted(peaks.items(), key=lambda kv: -kv[1]):
        xs = {lo, hi}
        if bandwidth_gbs:
            ridge = peak * 1e12 / (bandwidth_gbs * 1e9)
            if lo < ridge < hi:
                xs.add(ridge)
        for x in sorted(xs):
            y = min(peak, bandwidth_gbs * x / 1e3) if bandwidth_gbs else peak
            rows.append({"ceiling": f"{dtype} peak {peak:,.0f}", "intensity": x, "tflops": y})
    return pd.DataFrame(rows)


def roofline(rows: pd.DataFrame, *, peaks: Optional[dict] = None, bandwidth_gbs: Optional[float] = None,
             title: str = "Roofline: achieved throughput against arithmetic intensity") -> alt.LayerChart:
    """Each op group as a point (log-log: FLOP per byte moved, achieved TFLOP/s), the device's ceilings drawn:
    the bandwidth slope (GB/s × intensity) up to each dtype's GEMM peak.

    rows: ``kind``, ``kernel``, ``intensity``, ``tflops``, optional ``dtype``, ``time_us``, ``fraction_of_peak``
    (``profiling_core.explain.roofline``; rows without an intensity are left out). peaks: {dtype: TFLOP/s};
    bandwidth_gbs: GB/s (both from a calibration). Only the ceilings of the dtypes the points have are drawn."""
    _require(rows, ["kind", "kernel", "intensity", "tflops"], "roofline")
    data = rows[pd.to_numeric(rows["intensity"], errors="coerce") > 0].copy()
    data = data[pd.to_numeric(data["tflops"], errors="coerce") > 0]
    if data.empty:
        return empty_chart(f"{title}: no op with known FLOPs and bytes in this trace")
    data["label"] = data["kernel"].astype(str).str.slice(0, 80)
    for c in ("dtype", "time_us", "fraction_of_peak"):
        if c not in data.columns:
            data[c] = None
    data["dtype"] = data["dtype"].fillna("—")
    data = data[["kind", "label", "dtype", "intensity", "tflops", "time_us", "fraction_of_peak"]]
    data[["intensity", "tflops"]] = data[["intensity", "tflops"]].astype(float)
    lo = min(0.05, float(data["intensity"].min()) / 2)
    hi = max(1e4, float(data["intensity"].max()) * 2)
    x = alt.X("intensity:Q", scale=alt.Scale(type="log", domain=[lo, hi]), title="arithmetic intensity (FLOP/byte)")
    y = alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="achieved TFLOP/s")
    layers = []
    shown = {d: v for d, v in (peaks or {}).items() if d in set(data["dtype"])} or (peaks or {})
    if shown:  # the ceilings of the dtypes on the chart (all of them when no point has a dtype)
        ceil = _ceilings(shown, bandwidth_gbs, lo, hi)
        layers.append(alt.Chart(ceil).mark_line(strokeDash=[5, 3], color="#7f7f7f")
                      .encode(x=x, y=y, detail="ceiling:N", tooltip=["ceiling:N"]))
        ends = ceil.sort_values("intensity").groupby("ceiling", sort=False).tail(1)
        layers.append(alt.Chart(ends).mark_text(align="right", dy=-6, color="#555555")
                      .encode(x=x, y=y, text="ceiling:N"))
    layers.append(alt.Chart(data).mark_point(filled=True, size=90)
                  .encode(x=x, y=y, color=alt.Color("kind:N", title=None), shape=alt.Shape("dtype:N", title="dtype"),
                          tooltip=["kind:N", "label:N", "dtype:N",
                                   alt.Tooltip("intensity:Q", format=",.2f", title="FLOP/byte"),
                                   alt.Tooltip("tflops:Q", format=",.3f", title="TFLOP/s"),
                                   alt.Tooltip("time_us:Q", format=",.2f", title="µs per call"),
                                   alt.Tooltip("fraction_of_peak:Q", format=".1%", title="of peak")]))
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=340)


def achieved_vs_peak(points: pd.DataFrame, *, peaks: Optional[dict] = None, peak_source: str = "measured",
                     title: str = "GEMM throughput against size, with the device's peak",
                     x_title: str = "matrix size n") -> alt.LayerChart:
    """Achieved TFLOP/s of the GEMM against the run's size (log x, titled ``x_title``), one line per ``mode``, each
    dtype's peak as a
    horizontal rule labelled with where it comes from (``peak_source``: ``measured`` by a calibration, or
    ``datasheet``, ``DevicePeaks.source``).

    points: ``size``, ``tflops``, optional ``mode``, ``dtype``. peaks: {dtype: TFLOP/s} (the dtypes in points)."""
    _require(points, ["size", "tflops"], "achieved_vs_peak")
    data = points[pd.to_numeric(points["tflops"], errors="coerce") > 0].copy()
    if data.empty:
        return empty_chart(f"{title}: no GEMM with known FLOPs in these runs")
    if "mode" not in data.columns:
        data["mode"] = "eager"
    x = alt.X("size:Q", scale=alt.Scale(type="log", base=2), title=x_title, axis=alt.Axis(format=",.0f"))
    ticks = log_ticks([*data["tflops"], *(peaks or {}).values()])
    layers = [alt.Chart(data).mark_line(point=True)
              .encode(x=x, y=alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="achieved TFLOP/s",
                                   axis=alt.Axis(values=ticks, format=LOG_AXIS_FORMAT)),
                      color=alt.Color("mode:N", title="mode"),
                      tooltip=["mode:N", alt.Tooltip("size:Q", format=",.0f"),
                               alt.Tooltip("tflops:Q", format=",.3f", title="TFLOP/s")])]
    if peaks:
        rules = pd.DataFrame([{"tflops": v, "label": f"{d} peak ({peak_source}) {v:,.1f} TFLOP/s"}
                              for d, v in peaks.items()])
        layers.append(alt.Chart(rules).mark_rule(strokeDash=[5, 3], color="#d62728")
                      .encode(y="tflops:Q", tooltip=["label:N"]))
        layers.append(alt.Chart(rules).mark_text(align="left", dy=-6, color="#d62728")
                      .encode(y="tflops:Q", text="label:N", x=alt.value(4)))
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=300)
