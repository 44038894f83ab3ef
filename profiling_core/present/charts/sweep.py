"""Charts of a size sweep: CPU vs GPU busy time per step with their crossover, the GPU busy fraction."""
from __future__ import annotations

import math

import altair as alt
import pandas as pd

from ._style import LOG_AXIS_FORMAT, WIDTH, _require, empty_chart, log_ticks


OWN = "CPU's own per step (less its waits for the GPU)"
"""The overhead chart's name for the CPU time per step less the time it blocked waiting for the GPU."""


def crossover_points(sweep: pd.DataFrame, a: str = "cpu_us_per_step", b: str = "gpu_busy_us_per_step"
                     ) -> pd.DataFrame:
    """Where curve ``b`` overtakes curve ``a`` along ``size``, per ``mode`` (log-log interpolation).

    sweep: ``size``, ``mode`` (optional), and the two columns. Returns ``mode``, ``size`` (float, the
    interpolated crossing), ``value_us``, ``below`` and ``above`` (the measured sizes on either side of it: where the
    curves were last measured apart, and first measured crossed; the interpolation says nothing of the sizes between,
    which may cross anywhere) and ``overtakes`` (True where ``b`` rises above ``a`` there, False where it falls
    below); empty when the curves never cross inside the sweep.
    """
    _require(sweep, ["size", a, b], "crossover_points")
    data = sweep.copy()
    if "mode" not in data.columns:
        data["mode"] = "eager"
    rows = []
    for mode, g in data.sort_values("size").groupby("mode", sort=False):
        g = g[(g[a] > 0) & (g[b] > 0)]
        xs, ya, yb = list(g["size"]), list(g[a]), list(g[b])
        for i in range(1, len(xs)):
            d0 = math.log(yb[i - 1]) - math.log(ya[i - 1])
            d1 = math.log(yb[i]) - math.log(ya[i])
            if d0 < 0 <= d1 or d0 > 0 >= d1:
                t = 0.0 if d1 == d0 else d0 / (d0 - d1)
                lx = math.log(xs[i - 1]) + t * (math.log(xs[i]) - math.log(xs[i - 1]))
                lv = math.log(ya[i - 1]) + t * (math.log(ya[i]) - math.log(ya[i - 1]))
                rows.append({"mode": mode, "size": math.exp(lx), "value_us": math.exp(lv), "below": xs[i - 1],
                             "above": xs[i], "overtakes": d0 < 0})
                break
    return pd.DataFrame(rows, columns=["mode", "size", "value_us", "below", "above", "overtakes"])


def overhead_vs_compute(sweep: pd.DataFrame, *, title: str = "CPU time vs GPU busy time per step",
                        x_title: str = "matrix size n (n×n)", symbol: str = "n") -> alt.LayerChart:
    """Log-log lines of CPU time per step and GPU busy time per step against the size; crossings marked.

    x_title, symbol: the size axis's title and its name in the crossover's label (``present.size_axis_title``:
    matmul_add's matrix size n by default, e.g. ``new_tokens (causal_lm)`` and ``new_tokens`` for a decode sweep).

    sweep: ``size``, ``cpu_us_per_step``, ``gpu_busy_us_per_step``, optional ``mode`` (eager /
    compile mode; drawn as dashes so both overlay). With repeated points (``profiling_core.run.sweep_points``:
    the values are medians, ``<value>_min`` / ``<value>_max`` their range) each point carries its min–max bar. With
    ``cpu_own_us_per_step`` (``present.step_summary``'s: the CPU time less the time it blocked waiting for the GPU,
    which question 2 weighs the GPU work against), a third line where it is below the CPU time at some size: a loop
    that synchronizes every step holds its GPU work inside its CPU time, and only this line can meet the GPU's.
    """
    _require(sweep, ["size", "cpu_us_per_step", "gpu_busy_us_per_step"], "overhead_vs_compute")
    data = sweep.copy()
    if "mode" not in data.columns:
        data["mode"] = "eager"
    names = {"cpu_us_per_step": "CPU per step", "gpu_busy_us_per_step": "GPU busy per step",
             "cpu_own_us_per_step": OWN}
    own = "cpu_own_us_per_step" in data.columns and bool((data["cpu_own_us_per_step"] < data["cpu_us_per_step"]).any())
    long = data.melt(id_vars=["size", "mode"], value_vars=[c for c in names if c in data.columns and
                                                           (own or c != "cpu_own_us_per_step")],
                     var_name="metric", value_name="us_per_step")
    long["metric"] = long["metric"].map(names)
    long = long[long["us_per_step"] > 0]
    # the legend names only the curves drawn: a CPU run's GPU busy time is zero at every size, and has no line
    metrics = [m for m in ("CPU per step", OWN, "GPU busy per step") if (long["metric"] == m).any()]
    colors = alt.Scale(domain=metrics, range=[{"CPU per step": "#1f77b4", OWN: "#9ecae1",
                                               "GPU busy per step": "#2ca02c"}[m] for m in metrics])
    x = alt.X("size:Q", scale=alt.Scale(type="log", base=2), title=x_title,
              axis=alt.Axis(format=",.0f"))
    spans = [data[c] for c in data.columns if c.startswith(("cpu_us_per_step", "gpu_busy_us_per_step")
                                                            + (("cpu_own_us_per_step",) if own else ()))
             and not c.endswith("_pct")]
    ticks = log_ticks(pd.concat(spans, ignore_index=True)) if spans else []
    lines = (alt.Chart(long).mark_line(point=True)
             .encode(x=x,
                     y=alt.Y("us_per_step:Q", scale=alt.Scale(type="log"), title="µs per step",
                             axis=alt.Axis(values=ticks, format=LOG_AXIS_FORMAT)),
                     color=alt.Color("metric:N", title=None, scale=colors, legend=alt.Legend(labelLimit=0)),
                     strokeDash=alt.StrokeDash("mode:N", title="mode"),
                     tooltip=["mode:N", "metric:N", alt.Tooltip("size:Q", format=",.0f"),
                              alt.Tooltip("us_per_step:Q", format=",.2f", title="µs per step")]))
    layers = [lines]
    if {"cpu_us_per_step_min", "cpu_us_per_step_max"} <= set(data.columns):  # repeated points: their min–max
        spread = []
        for col, metric in (("cpu_us_per_step", "CPU per step"), ("gpu_busy_us_per_step", "GPU busy per step")):
            if f"{col}_min" in data.columns:
                part = data[["size", "mode", f"{col}_min", f"{col}_max"]].rename(
                    columns={f"{col}_min": "lo_us", f"{col}_max": "hi_us"})
                spread.append(part.assign(metric=metric))
        spread = pd.concat(spread, ignore_index=True)
        spread = spread[(spread["lo_us"] > 0) & (spread["hi_us"] > spread["lo_us"]) & spread["metric"].isin(metrics)]
        if len(spread):
            layers.append(alt.Chart(spread).mark_rule(strokeWidth=2, opacity=0.6)
                          .encode(x=x, y="lo_us:Q", y2="hi_us:Q",
                                  color=alt.Color("metric:N", title=None, scale=colors),
                                  tooltip=["mode:N", "metric:N", alt.Tooltip("size:Q", format=",.0f"),
                                           alt.Tooltip("lo_us:Q", format=",.2f", title="min µs"),
                                           alt.Tooltip("hi_us:Q", format=",.2f", title="max µs")]))
    cross = crossover_points(data)
    if len(cross):
        cross["label"] = cross.apply(lambda r: f"crossover {r['mode']}: {symbol}≈{r['size']:,.0f}", axis=1)
        layers.append(alt.Chart(cross).mark_rule(color="#d62728", strokeDash=[4, 3])
                      .encode(x="size:Q", tooltip=["label:N"]))
        layers.append(alt.Chart(cross).mark_point(shape="diamond", size=120, color="#d62728", filled=True)
                      .encode(x="size:Q", y="value_us:Q", tooltip=["label:N"]))
        layers.append(alt.Chart(cross).mark_text(align="left", dx=6, dy=-10, color="#d62728")
                      .encode(x="size:Q", y="value_us:Q", text="label:N"))
    sub = [] if "GPU busy per step" in metrics else ["no GPU busy time at any size: these runs launched no GPU work"]
    return alt.layer(*layers).properties(title=alt.TitleParams(title, subtitle=sub) if sub else title,
                                         width=WIDTH, height=320)


def gpu_busy_fraction(sweep: pd.DataFrame, *, title: str = "GPU busy fraction of the step",
                      x_title: str = "matrix size n") -> alt.Chart:
    """GPU busy time as a share of the step, against size (log x, titled ``x_title``), one line per mode.

    sweep: ``size``, ``gpu_busy_fraction`` (0..1), optional ``mode``.
    """
    _require(sweep, ["size", "gpu_busy_fraction"], "gpu_busy_fraction")
    if not (pd.to_numeric(sweep["gpu_busy_fraction"], errors="coerce").fillna(0) > 0).any():
        return empty_chart(f"{title}: zero at every size (these runs launched no GPU work)")
    data = sweep.copy()
    if "mode" not in data.columns:
        data["mode"] = "eager"
    return (alt.Chart(data).mark_line(point=True)
            .encode(x=alt.X("size:Q", scale=alt.Scale(type="log", base=2), title=x_title,
                            axis=alt.Axis(format=",.0f")),
                    y=alt.Y("gpu_busy_fraction:Q", title="GPU busy / step time",
                            scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
                    color=alt.Color("mode:N", title="mode"),
                    tooltip=["mode:N", alt.Tooltip("size:Q", format=",.0f"),
                             alt.Tooltip("gpu_busy_fraction:Q", format=".1%", title="busy")])
            .properties(title=title, width=WIDTH, height=240))
