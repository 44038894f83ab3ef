"""Charts: pure functions, DataFrame in, Altair chart out.

Every function takes a tidy DataFrame whose columns carry their unit (``dur_us``, ``start_us``),
returns an ``alt.Chart`` (or a layer of charts) and touches nothing else: no Streamlit, no files,
no trace sessions. The app draws them with ``st.altair_chart`` and ``profiling_core.export`` turns
them into PNG/SVG/HTML. They are tested through ``chart.to_dict()``.

Column contracts are stated in each docstring; a missing column raises ``ValueError`` naming it
and the columns that were given, so a page never shows a half-drawn chart.
"""
from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

import altair as alt
import pandas as pd

from ..analyses.breakdown import category_totals
from ..analyses.categories import BREAKDOWN_CATEGORIES

__all__ = [
    "step_timeline", "overhead_vs_compute", "gpu_busy_fraction", "crossover_points",
    "kernel_durations_by_step", "kernel_spread", "grouped_bars", "launch_latency",
    "dispatch_flame", "cold_vs_warm", "sync_idle", "empty_chart", "roofline", "achieved_vs_peak", "time_by_category",
    "breakdown_bars", "BREAKDOWN_COLORS",
]

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
    "attention": "#9467bd",
    "elementwise": "#2ca02c",
    "other": "#bcbd22",
    "memcpy": "#8c564b",
    "memset": "#e377c2",
    "communication": "#ff7f0e",
    "idle": "#d9d9d9",
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


# --- timeline ------------------------------------------------------------------------------------

_CHAR_PX = 5.5  # width of one 9-px label character


def _bar_labels(data: pd.DataFrame) -> pd.DataFrame:
    """The bars of a timeline that get their name written on them: those at least ~6 characters wide at the chart's
    width, each name cut to what fits (with an ellipsis)."""
    span = float(data["end_us"].max() - data["start_us"].min()) if len(data) else 0.0
    if span <= 0:
        return data.iloc[0:0].assign(label="")
    fits = ((data["dur_us"] / span * WIDTH - 4) / _CHAR_PX).astype(int)
    out = data[fits >= 6].copy()
    n = fits[fits >= 6]
    names = out["name"].astype(str)
    out["label"] = [nm if len(nm) <= k else nm[: k - 1] + "…" for nm, k in zip(names, n)]
    return out[["start_us", "lane", "depth", "label"]]

def step_timeline(slices: pd.DataFrame, links: Optional[pd.DataFrame] = None, *,
                  title: str = "Step timeline", lane_order: Optional[Sequence[str]] = None) -> alt.LayerChart:
    """Gantt chart of trace slices on their lanes (CPU thread, GPU stream), launch→kernel links on top.

    slices: ``lane`` (str), ``name`` (str), ``start_us``, ``end_us`` (float, relative to any origin),
    optional ``category`` (a key of CATEGORY_COLORS; colours the bars) and ``depth`` (int; nested
    slices are drawn thinner so the parent stays visible).
    links: optional, one row per launch→kernel flow: ``launch_us``, ``kernel_us``, ``launch_lane``,
    ``kernel_lane`` and optional ``name`` (the kernel).
    """
    _require(slices, ["lane", "name", "start_us", "end_us"], "step_timeline")
    data = slices.copy()
    if "category" not in data.columns:
        data["category"] = "other"
    if "depth" not in data.columns:
        data["depth"] = 0
    data["dur_us"] = data["end_us"] - data["start_us"]
    # Deeper slices are thinner bars, so a parent and its children stay distinguishable on one lane.
    data["thickness"] = (1.0 - 0.12 * data["depth"].clip(lower=0, upper=6)).round(2)
    order = list(lane_order) if lane_order else list(dict.fromkeys(data["lane"]))
    cats = [c for c in CATEGORY_COLORS if c in set(data["category"])] or ["other"]
    y = alt.Y("lane:N", sort=order, title=None, axis=alt.Axis(labelLimit=220))
    bars = (alt.Chart(data).mark_bar(opacity=0.85, stroke="white", strokeWidth=0.3)
            .encode(x=alt.X("start_us:Q", title="time (µs)", axis=alt.Axis(format=",.0f")),
                    x2="end_us:Q",
                    y=y,
                    yOffset=alt.YOffset("depth:O", title=None),
                    color=alt.Color("category:N", title="event",
                                    scale=alt.Scale(domain=cats, range=[CATEGORY_COLORS[c] for c in cats]),
                                    legend=alt.Legend(orient="top", direction="horizontal")),
                    tooltip=[alt.Tooltip("name:N"), alt.Tooltip("lane:N"), alt.Tooltip("category:N"),
                             alt.Tooltip("start_us:Q", format=",.2f", title="start (µs)"),
                             alt.Tooltip("dur_us:Q", format=",.2f", title="duration (µs)")]))
    layers = [bars]
    labelled = _bar_labels(data)
    if len(labelled):  # names on the bars wide enough to hold some text, so an exported PNG reads without hovering
        layers.append(alt.Chart(labelled).mark_text(align="left", baseline="middle", dx=2, fontSize=9,
                                                     color="#111")
                      .encode(x="start_us:Q", y=y, yOffset=alt.YOffset("depth:O", title=None), text="label:N"))
    if links is not None and len(links):
        _require(links, ["launch_us", "kernel_us", "launch_lane", "kernel_lane"], "step_timeline links")
        ln = links.copy()
        if "name" not in ln.columns:
            ln["name"] = ""
        ln["latency_us"] = ln["kernel_us"] - ln["launch_us"]
        layers.append(
            alt.Chart(ln).mark_rule(color="#444", strokeDash=[3, 2], strokeWidth=1)
            .encode(x="launch_us:Q", x2="kernel_us:Q", y=alt.Y("launch_lane:N", sort=order), y2="kernel_lane:N",
                    tooltip=[alt.Tooltip("name:N", title="kernel"),
                             alt.Tooltip("latency_us:Q", format=",.2f", title="launch → start (µs)")]))
    n_lanes = max(1, len(order))
    return (alt.layer(*layers).properties(title=title, width=WIDTH, height=max(120, 70 * n_lanes))
            .resolve_scale(y="shared"))


# --- overhead vs compute -------------------------------------------------------------------------

def crossover_points(sweep: pd.DataFrame, a: str = "cpu_us_per_step", b: str = "gpu_busy_us_per_step"
                     ) -> pd.DataFrame:
    """Where curve ``b`` overtakes curve ``a`` along ``size``, per ``mode`` (log-log interpolation).

    sweep: ``size``, ``mode`` (optional), and the two columns. Returns ``mode``, ``size`` (float, the
    interpolated crossing), ``value_us``; empty when the curves never cross inside the sweep.
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
                rows.append({"mode": mode, "size": math.exp(lx), "value_us": math.exp(lv)})
                break
    return pd.DataFrame(rows, columns=["mode", "size", "value_us"])


def overhead_vs_compute(sweep: pd.DataFrame, *, title: str = "CPU time vs GPU busy time per step"
                        ) -> alt.LayerChart:
    """Log-log lines of CPU time per step and GPU busy time per step against matrix size; crossings marked.

    sweep: ``size``, ``cpu_us_per_step``, ``gpu_busy_us_per_step``, optional ``mode`` (eager /
    compile mode; drawn as dashes so both overlay). With repeated points (``profiling_core.sweep.sweep_points``:
    the values are medians, ``<value>_min`` / ``<value>_max`` their range) each point carries its min–max bar.
    """
    _require(sweep, ["size", "cpu_us_per_step", "gpu_busy_us_per_step"], "overhead_vs_compute")
    data = sweep.copy()
    if "mode" not in data.columns:
        data["mode"] = "eager"
    long = data.melt(id_vars=["size", "mode"], value_vars=["cpu_us_per_step", "gpu_busy_us_per_step"],
                     var_name="metric", value_name="us_per_step")
    long["metric"] = long["metric"].map({"cpu_us_per_step": "CPU per step",
                                         "gpu_busy_us_per_step": "GPU busy per step"})
    long = long[long["us_per_step"] > 0]
    x = alt.X("size:Q", scale=alt.Scale(type="log", base=2), title="matrix size n (n×n)",
              axis=alt.Axis(format=",.0f"))
    lines = (alt.Chart(long).mark_line(point=True)
             .encode(x=x,
                     y=alt.Y("us_per_step:Q", scale=alt.Scale(type="log"), title="µs per step"),
                     color=alt.Color("metric:N", title=None,
                                     scale=alt.Scale(domain=["CPU per step", "GPU busy per step"],
                                                     range=["#1f77b4", "#2ca02c"])),
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
        spread = spread[(spread["lo_us"] > 0) & (spread["hi_us"] > spread["lo_us"])]
        if len(spread):
            layers.append(alt.Chart(spread).mark_rule(strokeWidth=2, opacity=0.6)
                          .encode(x=x, y="lo_us:Q", y2="hi_us:Q",
                                  color=alt.Color("metric:N", title=None,
                                                  scale=alt.Scale(domain=["CPU per step", "GPU busy per step"],
                                                                  range=["#1f77b4", "#2ca02c"])),
                                  tooltip=["mode:N", "metric:N", alt.Tooltip("size:Q", format=",.0f"),
                                           alt.Tooltip("lo_us:Q", format=",.2f", title="min µs"),
                                           alt.Tooltip("hi_us:Q", format=",.2f", title="max µs")]))
    cross = crossover_points(data)
    if len(cross):
        cross["label"] = cross.apply(lambda r: f"crossover {r['mode']}: n≈{r['size']:,.0f}", axis=1)
        layers.append(alt.Chart(cross).mark_rule(color="#d62728", strokeDash=[4, 3])
                      .encode(x="size:Q", tooltip=["label:N"]))
        layers.append(alt.Chart(cross).mark_point(shape="diamond", size=120, color="#d62728", filled=True)
                      .encode(x="size:Q", y="value_us:Q", tooltip=["label:N"]))
        layers.append(alt.Chart(cross).mark_text(align="left", dx=6, dy=-10, color="#d62728")
                      .encode(x="size:Q", y="value_us:Q", text="label:N"))
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=320)


def gpu_busy_fraction(sweep: pd.DataFrame, *, title: str = "GPU busy fraction of the step") -> alt.Chart:
    """GPU busy time as a share of the step, against size (log x), one line per mode.

    sweep: ``size``, ``gpu_busy_fraction`` (0..1), optional ``mode``.
    """
    _require(sweep, ["size", "gpu_busy_fraction"], "gpu_busy_fraction")
    if not (pd.to_numeric(sweep["gpu_busy_fraction"], errors="coerce").fillna(0) > 0).any():
        return empty_chart(f"{title}: zero at every size (these runs launched no GPU work)")
    data = sweep.copy()
    if "mode" not in data.columns:
        data["mode"] = "eager"
    return (alt.Chart(data).mark_line(point=True)
            .encode(x=alt.X("size:Q", scale=alt.Scale(type="log", base=2), title="matrix size n",
                            axis=alt.Axis(format=",.0f")),
                    y=alt.Y("gpu_busy_fraction:Q", title="GPU busy / step time",
                            scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
                    color=alt.Color("mode:N", title="mode"),
                    tooltip=["mode:N", alt.Tooltip("size:Q", format=",.0f"),
                             alt.Tooltip("gpu_busy_fraction:Q", format=".1%", title="busy")])
            .properties(title=title, width=WIDTH, height=240))


# --- kernel variance -----------------------------------------------------------------------------

def kernel_durations_by_step(durations: pd.DataFrame, *, title: str = "Kernel duration per step"
                             ) -> alt.FacetChart:
    """Per kernel (one row each, own y scale): duration across steps, median (solid) and mean (dashed) rules.

    durations: ``step`` (int), ``kernel`` (str), ``dur_us``; optional ``run`` to compare runs
    (one colour per run).
    """
    _require(durations, ["step", "kernel", "dur_us"], "kernel_durations_by_step")
    data = durations.copy()
    if "run" not in data.columns:
        data["run"] = "this run"
    data["kernel_short"] = data["kernel"].astype(str).str.slice(0, 60)
    grouped = data.groupby(["run", "kernel_short"])["dur_us"]
    data["median_us"] = grouped.transform("median")
    data["mean_us"] = grouped.transform("mean")
    color = alt.Color("run:N", title="run")
    base = alt.Chart().encode(color=color)
    # one slow step (the first, cold) would flatten the others to a line: a log axis keeps them apart
    outlier = bool(len(data) and (data["dur_us"] > 10 * data["median_us"]).any())
    scale = alt.Scale(type="log") if outlier and (data["dur_us"] > 0).all() else alt.Scale(zero=False)
    lines = base.mark_line(point=True).encode(
        x=alt.X("step:O", title="profiled step", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("dur_us:Q", title="duration (µs)" + (", log scale" if scale.type == "log" else ""), scale=scale,
                axis=alt.Axis(format="~s" if scale.type == "log" else ",.3~f")),
        tooltip=["run:N", "kernel:N", "step:O", alt.Tooltip("dur_us:Q", format=",.2f", title="µs"),
                 alt.Tooltip("median_us:Q", format=",.2f", title="median µs"),
                 alt.Tooltip("mean_us:Q", format=",.2f", title="mean µs")])
    median = base.mark_rule(strokeWidth=1.5, opacity=0.8).encode(
        y="median_us:Q", tooltip=["run:N", alt.Tooltip("median_us:Q", format=",.2f", title="median µs")])
    mean = base.mark_rule(strokeDash=[6, 3], strokeWidth=1.5, opacity=0.8).encode(
        y="mean_us:Q", tooltip=["run:N", alt.Tooltip("mean_us:Q", format=",.2f", title="mean µs")])
    return (alt.layer(lines, median, mean, data=data).properties(width=WIDTH, height=170)
            .facet(row=alt.Row("kernel_short:N", title=None,
                               header=alt.Header(labelAngle=0, labelAlign="left", labelAnchor="start",
                                                 labelOrient="top", labelFontWeight="bold")))
            .resolve_scale(y="independent")
            .properties(title=alt.TitleParams(title, subtitle="solid rule: median, dashed rule: mean")))


def kernel_spread(durations: pd.DataFrame, *, title: str = "Spread of kernel durations") -> alt.FacetChart:
    """Per kernel (one row each, own x scale): box plot (min..max whiskers, quartiles, median) per run,
    mean as a red tick.

    durations: ``kernel``, ``dur_us``, optional ``run``.
    """
    _require(durations, ["kernel", "dur_us"], "kernel_spread")
    data = durations.copy()
    if "run" not in data.columns:
        data["run"] = "this run"
    data["kernel_short"] = data["kernel"].astype(str).str.slice(0, 60)
    data["mean_us"] = data.groupby(["run", "kernel_short"])["dur_us"].transform("mean")
    y = alt.Y("run:N", title=None, axis=alt.Axis(labelLimit=260))
    box = alt.Chart().mark_boxplot(extent="min-max", size=14).encode(
        x=alt.X("dur_us:Q", title="duration (µs)", scale=alt.Scale(zero=False)), y=y,
        color=alt.Color("run:N", title="run", legend=None))
    mean = alt.Chart().mark_tick(color="#d62728", thickness=2, size=18).encode(
        x="mean_us:Q", y=y, tooltip=["run:N", alt.Tooltip("mean_us:Q", format=",.2f", title="mean µs")])
    n_runs = max(1, data["run"].nunique())
    return (alt.layer(box, mean, data=data).properties(width=WIDTH, height=30 * n_runs + 10)
            .facet(row=alt.Row("kernel_short:N", title=None,
                               header=alt.Header(labelAngle=0, labelAlign="left", labelAnchor="start",
                                                 labelOrient="top", labelFontWeight="bold")))
            .resolve_scale(x="independent")
            .properties(title=alt.TitleParams(title, subtitle="box: quartiles and median, whiskers: min..max, "
                                                              "red tick: mean")))


# --- generic comparisons -------------------------------------------------------------------------

def grouped_bars(df: pd.DataFrame, *, category: str, value: str, group: Optional[str] = None,
                 title: str = "", value_title: Optional[str] = None, log: bool = False,
                 spread: Optional[tuple[str, str]] = None) -> alt.Chart:
    """Horizontal bars of ``value`` per ``category``, side by side per ``group`` (e.g. eager vs compile).

    df: the three named columns (``group`` optional). Values are labelled at the bar end. ``spread``: two columns
    (low, high) of each bar's range (the min and max of repeated runs whose median the bar is), drawn as a rule.
    """
    cols = [category, value] + ([group] if group else []) + (list(spread) if spread else [])
    _require(df, cols, "grouped_bars")
    data = df[cols].copy()
    data[category] = data[category].astype(str)
    vals = pd.to_numeric(data[value], errors="coerce")
    if not len(vals) or not (vals.fillna(0) != 0).any():
        return empty_chart(f"{title or value}: every value is zero" + (f" ({', '.join(sorted(set(data[category])))})"
                                                                       if len(data) else ""))
    fmt = _us_format(data[value]) if value.endswith("_us") else _plain_format(vals)
    positive = vals[vals > 0]
    log = log or (len(positive) > 1 and float(positive.max()) >= 100 * float(positive.min()))  # spans decades
    scale = alt.Scale(type="symlog") if log else alt.Scale()
    enc = dict(x=alt.X(f"{value}:Q", title=value_title or value, scale=scale),
               y=alt.Y(f"{category}:N", title=None, sort=list(dict.fromkeys(data[category])),
                       axis=alt.Axis(labelLimit=320)),
               tooltip=[f"{c}:N" for c in cols if c != value] + [alt.Tooltip(f"{value}:Q", format=fmt)])
    if group:
        enc["color"] = alt.Color(f"{group}:N", title=group)
        enc["yOffset"] = alt.YOffset(f"{group}:N")
    base = alt.Chart(data).encode(**enc)
    bars = base.mark_bar()
    labels = base.mark_text(align="left", dx=3, fontSize=10).encode(text=alt.Text(f"{value}:Q", format=fmt))
    layers = [bars, labels]
    if spread:
        lo, hi = spread
        layers.append(base.mark_rule(color="#222", strokeWidth=1.5).encode(
            x=alt.X(f"{lo}:Q", scale=scale), x2=f"{hi}:Q",
            tooltip=[alt.Tooltip(f"{lo}:Q", format=fmt, title="min"), alt.Tooltip(f"{hi}:Q", format=fmt, title="max")]))
    n = data[category].nunique() * (data[group].nunique() if group else 1)
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=max(60, 22 * n + 20))


def launch_latency(latency: pd.DataFrame, *, title: str = "Launch latency: kernel start − launch call start"
                   ) -> alt.Chart:
    """Points of launch latency per kernel across steps.

    latency: ``kernel``, ``latency_us``, optional ``step`` and ``launch`` (the launch call's name).
    """
    _require(latency, ["kernel", "latency_us"], "launch_latency")
    data = latency.copy()
    if "step" not in data.columns:
        data["step"] = range(len(data))
    if "launch" not in data.columns:
        data["launch"] = ""
    data["kernel_short"] = data["kernel"].astype(str).str.slice(0, 48)
    return (alt.Chart(data).mark_point(size=70, opacity=0.85, filled=True)
            .encode(x=alt.X("step:O", title="profiled step", axis=alt.Axis(labelAngle=0)),
                    y=alt.Y("latency_us:Q", title="latency (µs)"),
                    color=alt.Color("kernel_short:N", title="kernel",
                                    legend=alt.Legend(orient="bottom", columns=1, labelLimit=400)),
                    shape=alt.Shape("launch:N", title="launch call"),
                    tooltip=["kernel:N", "launch:N", "step:O",
                             alt.Tooltip("latency_us:Q", format=",.2f", title="µs")])
            .properties(title=title, width=WIDTH, height=260))


def dispatch_flame(chain: pd.DataFrame, *, title: str = "Dispatch chain (flame view)") -> alt.LayerChart:
    """Icicle/flame view of nested slices: depth down, time across; GPU ops at the bottom.

    chain: ``name``, ``start_us``, ``end_us``, ``depth`` (int, 0 = outermost), optional ``category``.
    """
    _require(chain, ["name", "start_us", "end_us", "depth"], "dispatch_flame")
    data = chain.copy()
    if "category" not in data.columns:
        data["category"] = "cpu_op"
    data["dur_us"] = data["end_us"] - data["start_us"]
    span = float(data["end_us"].max() - data["start_us"].min()) if len(data) else 1.0
    # Only label slices wide enough to hold their name.
    data["label"] = data.apply(lambda r: r["name"] if r["dur_us"] > span * len(str(r["name"])) / 110
                               else "", axis=1)
    cats = [c for c in CATEGORY_COLORS if c in set(data["category"])] or ["other"]
    base = alt.Chart(data).encode(
        x=alt.X("start_us:Q", title="time (µs)", axis=alt.Axis(format=",.0f")),
        y=alt.Y("depth:O", title="depth", axis=alt.Axis(labels=True)))
    bars = base.mark_bar(stroke="white", strokeWidth=0.5).encode(
        x2="end_us:Q",
        color=alt.Color("category:N", title="event",
                        scale=alt.Scale(domain=cats, range=[CATEGORY_COLORS[c] for c in cats]),
                        legend=alt.Legend(orient="top", direction="horizontal")),
        tooltip=["name:N", "category:N", "depth:O",
                 alt.Tooltip("start_us:Q", format=",.2f", title="start (µs)"),
                 alt.Tooltip("dur_us:Q", format=",.2f", title="duration (µs)")])
    text = base.mark_text(align="left", dx=3, fontSize=10, color="white").encode(text="label:N")
    return alt.layer(bars, text).properties(title=title, width=WIDTH,
                                            height=max(80, 28 * (int(data["depth"].max()) + 1 if len(data) else 1)))


def cold_vs_warm(steps: pd.DataFrame, *, title: str = "Step duration: cold vs warm") -> alt.Chart:
    """Bars of each profiled step's duration, one colour per run (cold / warm side by side).

    steps: ``step``, ``dur_us``, ``label`` (e.g. "cold", "warm"); with repeated pairs, ``dur_us`` is the median of
    the repeats and optional ``lo_us`` / ``hi_us`` their range, drawn as a bar over each (a symlog axis when the
    cold step dwarfs the warm ones).
    """
    _require(steps, ["step", "dur_us", "label"], "cold_vs_warm")
    pos = steps["dur_us"][steps["dur_us"] > 0]
    log = len(pos) > 1 and float(pos.max()) >= 100 * float(pos.min())
    yscale = alt.Scale(type="symlog") if log else alt.Scale()  # (bars start at 0, which a log scale cannot draw)
    y = alt.Y("dur_us:Q", title="step duration (µs)" + (", symmetric log scale" if log else ""), scale=yscale)
    enc = dict(x=alt.X("step:O", title="profiled step", axis=alt.Axis(labelAngle=0)), xOffset="label:N",
               color=alt.Color("label:N", title=None))
    bars = (alt.Chart(steps).mark_bar()
            .encode(y=y, tooltip=["label:N", "step:O", alt.Tooltip("dur_us:Q", format=",.2f", title="µs")], **enc))
    layers = [bars]
    if {"lo_us", "hi_us"} <= set(steps.columns):
        layers.append(alt.Chart(steps).mark_rule(color="#222", strokeWidth=1.5)
                      .encode(y=alt.Y("lo_us:Q", scale=yscale), y2="hi_us:Q",
                              tooltip=["label:N", "step:O", alt.Tooltip("lo_us:Q", format=",.2f", title="min µs"),
                                       alt.Tooltip("hi_us:Q", format=",.2f", title="max µs")], **enc))
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=260)


def sync_idle(parts: pd.DataFrame, *, title: str = "What the synchronize waited for") -> alt.Chart:
    """Stacked horizontal bar(s): GPU busy vs idle during each synchronize call.

    parts: ``label`` (which sync), ``part`` ("GPU busy" / "GPU idle"), ``dur_us``.
    """
    _require(parts, ["label", "part", "dur_us"], "sync_idle")
    return (alt.Chart(parts).mark_bar()
            .encode(x=alt.X("dur_us:Q", title="µs", stack="zero"),
                    y=alt.Y("label:N", title=None, axis=alt.Axis(labelLimit=320)),
                    color=alt.Color("part:N", title=None,
                                    scale=alt.Scale(domain=["GPU busy", "GPU idle"], range=["#2ca02c", "#d9d9d9"])),
                    tooltip=["label:N", "part:N", alt.Tooltip("dur_us:Q", format=",.2f", title="µs")])
            .properties(title=title, width=WIDTH, height=max(60, 30 * parts["label"].nunique() + 20)))


def time_by_category(breakdown: pd.DataFrame, *, bar: str = "step", value: str = "time_us",
                     title: str = "Where each step's time goes on the GPU") -> alt.Chart:
    """Horizontal stacked bars: one bar per distinct ``bar`` value (a step, or a run), split by category of GPU time.

    breakdown: ``category`` (a key of BREAKDOWN_COLORS), the ``bar`` column and the ``value`` column: ``time_us``
    (or ``per_step_us``: stacked µs) or ``share`` (0..1: stacked to 100 %); ``time_us``, ``share`` and
    ``overlapped_us`` join the tooltip where present. Bars keep their order of first appearance; categories always
    stack in BREAKDOWN_CATEGORIES order with their own colours, whichever are present.
    """
    _require(breakdown, ["category", bar, value], "time_by_category")
    unknown = sorted(set(breakdown["category"].astype(str)) - set(BREAKDOWN_COLORS))
    if unknown:
        raise ValueError(f"time_by_category: unknown categor(ies) {', '.join(unknown)}; "
                         f"known: {', '.join(BREAKDOWN_COLORS)}")
    extra = [c for c in ("time_us", "per_step_us", "share", "overlapped_us") if c in breakdown.columns and c != value]
    data = breakdown[["category", bar, value, *extra]].copy()
    data[bar] = data[bar].astype(str)
    data["order"] = data["category"].map({c: k for k, c in enumerate(BREAKDOWN_CATEGORIES)})
    is_share = value == "share"
    fmt = ".1%" if is_share else _us_format(data[value])
    tips = [f"{bar}:N", "category:N", alt.Tooltip(f"{value}:Q", format=fmt, title=value)]
    tips += [alt.Tooltip(f"{c}:Q", format=".1%" if c == "share" else ",.2f", title=c) for c in extra]
    x_title = "share of the step's window" if is_share else ("µs per step" if value == "per_step_us" else "µs")
    return (alt.Chart(data).mark_bar()
            .encode(x=alt.X(f"{value}:Q", title=x_title, stack="zero",
                            axis=alt.Axis(format=".0%") if is_share else alt.Axis(format=",.0f")),
                    y=alt.Y(f"{bar}:N", title=None, sort=list(dict.fromkeys(data[bar])),
                            axis=alt.Axis(labelLimit=320)),
                    color=alt.Color("category:N", title="GPU time",
                                    scale=alt.Scale(domain=list(BREAKDOWN_COLORS),
                                                    range=list(BREAKDOWN_COLORS.values())),
                                    legend=alt.Legend(orient="top", direction="horizontal")),
                    order=alt.Order("order:Q", sort="ascending"),
                    tooltip=tips)
            .properties(title=title, width=WIDTH, height=max(60, 24 * data[bar].nunique() + 20)))


# --- shaping analysis output for the charts above ---------------------------------------------------

_CATEGORY_OF = {"cpu_op": "cpu_op", "operator": "cpu_op", "cuda_runtime": "runtime", "runtime": "runtime",
                "cuda_driver": "driver", "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
                "gpu_memset": "memset", "memset": "memset", "user_annotation": "annotation",
                "gpu_user_annotation": "annotation"}


def breakdown_bars(breakdowns: "dict[str, pd.DataFrame]", *, per: str = "step") -> pd.DataFrame:
    """The rows of :func:`time_by_category` (bar column ``bar``) for one or more runs' ``step_breakdown``.

    breakdowns: {run label: that run's ``analyses.step_breakdown``}; a label "" for a single run.
    per: ``"step"``: one bar per step of each run (``"label · step N"``, or ``"step N"``), columns ``time_us``,
    ``share``, ``overlapped_us``; ``"run"``: one bar per run over all its steps (``analyses.category_totals``),
    columns ``time_us``, ``per_step_us``, ``share``, ``overlapped_us``. Runs without steps give no rows.
    """
    if per not in ("step", "run"):
        raise ValueError(f"breakdown_bars: per must be 'step' or 'run'; got {per!r}")
    parts = []
    for label, bd in breakdowns.items():
        _require(bd, ["step", "category", "time_us", "share", "overlapped_us"], "breakdown_bars")
        if per == "run":
            t = category_totals(bd)
            parts.append(t[["category", "time_us", "per_step_us", "share", "overlapped_us"]]
                         .assign(bar=label or "this run"))
        else:
            lead = f"{label} · " if label else ""
            parts.append(bd[["category", "time_us", "share", "overlapped_us"]]
                         .assign(bar=[f"{lead}step {s}" for s in bd["step"].tolist()]))
    cols = ["bar", "category", "time_us", "share", "overlapped_us"] + (["per_step_us"] if per == "run" else [])
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    return pd.concat(parts, ignore_index=True)[cols]


def chart_category(category: str, name: str = "") -> str:
    """The colour class of a trace event (a key of CATEGORY_COLORS) from its category and name."""
    if str(name).startswith("ProfilerStep#"):
        return "step"
    return _CATEGORY_OF.get(str(category).lower(), "other")


def timeline_from_chain(chain: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Slices and launch→GPU links for :func:`step_timeline` from one step of ``analyses.dispatch_chain``.

    chain: ``id``, ``parent_id``, ``depth``, ``name``, ``category``, ``lane`` (cpu/gpu), ``start_ns``, ``dur_us``.
    Times become µs from the step's start; GPU rows sit on a "GPU" lane, linked to their launch call.
    """
    _require(chain, ["id", "parent_id", "depth", "name", "category", "lane", "start_ns", "dur_us"],
             "timeline_from_chain")
    if chain.empty:
        return (pd.DataFrame(columns=["lane", "name", "start_us", "end_us", "depth", "category"]),
                pd.DataFrame(columns=["launch_us", "kernel_us", "launch_lane", "kernel_lane", "name"]))
    t0 = int(chain["start_ns"].min())
    df = chain.copy()
    df["start_us"] = (df["start_ns"].astype("int64") - t0) / 1000.0
    df["end_us"] = df["start_us"] + df["dur_us"].astype(float)
    df["category"] = [chart_category(c, n) for c, n in zip(df["category"], df["name"])]
    is_gpu = df["lane"].astype(str) == "gpu"
    df["lane"] = is_gpu.map({True: "GPU", False: "CPU"})
    df["depth"] = df["depth"].astype(int).where(~is_gpu, 0)
    slices = df[["lane", "name", "start_us", "end_us", "depth", "category"]].reset_index(drop=True)
    starts = dict(zip(df["id"].astype("int64"), df["start_us"]))
    gpu = df[is_gpu & df["parent_id"].notna()]
    links = pd.DataFrame({
        "launch_us": [starts.get(int(p)) for p in gpu["parent_id"]],
        "kernel_us": list(gpu["start_us"]),
        "launch_lane": "CPU", "kernel_lane": "GPU", "name": list(gpu["name"])})
    return slices, links.dropna(subset=["launch_us"]).reset_index(drop=True)


def flame_from_chain(chain: pd.DataFrame) -> pd.DataFrame:
    """Rows for :func:`dispatch_flame` from one step of ``analyses.dispatch_chain`` (GPU ops one level below
    their launch call)."""
    slices, _ = timeline_from_chain(chain)
    out = slices.copy()
    if len(chain) and (chain["lane"].astype(str) == "gpu").any():
        depth_of = dict(zip(chain["id"].astype("int64"), chain["depth"].astype(int)))
        gpu = chain["lane"].astype(str).to_numpy() == "gpu"
        out.loc[gpu, "depth"] = [depth_of.get(int(p), 0) + 1 if pd.notna(p) else 0
                                 for p in chain.loc[gpu, "parent_id"]]
    return out


OVERVIEW_MAX_SLICES = 4000
"""The most slices :func:`trace_overview` draws; beyond it the shortest are left out (and it says so)."""


def overview_from_chains(chains: pd.DataFrame, *, max_depth: int = 3,
                         max_slices: int = OVERVIEW_MAX_SLICES) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Slices of every step for :func:`trace_overview` from ``analyses.dispatch_chains``: the CPU slices down to
    ``max_depth`` (the step is depth 0) and every GPU op, times in µs from the first step's start, lanes "CPU" and
    "GPU"; at most ``max_slices`` of them, the longest kept. Returns (slices, step boundaries, slices left out)."""
    _require(chains, ["step", "id", "depth", "name", "category", "lane", "start_ns", "dur_us"], "overview_from_chains")
    cols = ["lane", "name", "start_us", "end_us", "depth", "category", "step"]
    if chains.empty:
        return pd.DataFrame(columns=cols), pd.DataFrame(columns=["step", "start_us"]), 0
    df = chains[(chains["lane"].astype(str) == "gpu") | (chains["depth"] <= max_depth)].copy()
    t0 = int(chains["start_ns"].min())
    df["start_us"] = (df["start_ns"].astype("int64") - t0) / 1000.0
    df["end_us"] = df["start_us"] + df["dur_us"].astype(float)
    is_gpu = df["lane"].astype(str) == "gpu"
    df["lane"] = is_gpu.map({True: "GPU", False: "CPU"})
    df["depth"] = df["depth"].astype(int).where(~is_gpu, 0)
    df["category"] = [chart_category(c, n) for c, n in zip(df["category"], df["name"])]
    steps = (df[(df["depth"] == 0) & ~is_gpu].groupby("step")["start_us"].min().reset_index())
    dropped = max(0, len(df) - max_slices)
    if dropped:
        df = df.nlargest(max_slices, "dur_us")
    return df[cols].sort_values("start_us").reset_index(drop=True), steps, dropped


def trace_overview(slices: pd.DataFrame, steps: pd.DataFrame, *, title: str = "The whole run") -> alt.LayerChart:
    """Every profiled step on one zoomable timeline (drag to pan, scroll to zoom): CPU slices by depth, GPU ops on
    their lane, a rule and label at each step's start. slices/steps: from :func:`overview_from_chains`."""
    _require(slices, ["lane", "name", "start_us", "end_us", "depth", "category"], "trace_overview")
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    cats = [c for c in CATEGORY_COLORS if c in set(slices["category"])] or ["other"]
    x = alt.X("start_us:Q", title="time since the first step (µs)", axis=alt.Axis(format="~s"))
    bars = (alt.Chart(slices).mark_bar(opacity=0.85)
            .encode(x=x, x2="end_us:Q", y=alt.Y("lane:N", sort=["CPU", "GPU"], title=None),
                    yOffset=alt.YOffset("depth:O", title=None),
                    color=alt.Color("category:N", title="event",
                                    scale=alt.Scale(domain=cats, range=[CATEGORY_COLORS[c] for c in cats]),
                                    legend=alt.Legend(orient="top", direction="horizontal")),
                    tooltip=[alt.Tooltip("name:N"), alt.Tooltip("lane:N"),
                             alt.Tooltip("start_us:Q", format=",.1f", title="start (µs)"),
                             alt.Tooltip("end_us:Q", format=",.1f", title="end (µs)")])
            .add_params(zoom))
    marks = steps.assign(label=[f"step {s}" for s in steps["step"]])
    rules = alt.Chart(marks).mark_rule(color="#888", strokeDash=[4, 3]).encode(x="start_us:Q")
    labels = (alt.Chart(marks).mark_text(align="left", dx=3, dy=-4, fontSize=10, color="#555")
              .encode(x="start_us:Q", y=alt.value(0), text="label:N"))
    return alt.layer(bars, rules, labels).properties(title=title, width=WIDTH, height=200)


# --- against the device's peaks ------------------------------------------------------------------

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
    (``profiling_core.diagnosis.roofline``; rows without an intensity are left out). peaks: {dtype: TFLOP/s};
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


def achieved_vs_peak(points: pd.DataFrame, *, peaks: Optional[dict] = None,
                     title: str = "GEMM throughput against size, with the measured peak") -> alt.LayerChart:
    """Achieved TFLOP/s of the GEMM against matrix size (log x), one line per ``mode``, each dtype's measured peak
    as a horizontal rule.

    points: ``size``, ``tflops``, optional ``mode``, ``dtype``. peaks: {dtype: TFLOP/s} (the dtypes in points)."""
    _require(points, ["size", "tflops"], "achieved_vs_peak")
    data = points[pd.to_numeric(points["tflops"], errors="coerce") > 0].copy()
    if data.empty:
        return empty_chart(f"{title}: no GEMM with known FLOPs in these runs")
    if "mode" not in data.columns:
        data["mode"] = "eager"
    x = alt.X("size:Q", scale=alt.Scale(type="log", base=2), title="matrix size n", axis=alt.Axis(format=",.0f"))
    layers = [alt.Chart(data).mark_line(point=True)
              .encode(x=x, y=alt.Y("tflops:Q", scale=alt.Scale(type="log"), title="achieved TFLOP/s"),
                      color=alt.Color("mode:N", title="mode"),
                      tooltip=["mode:N", alt.Tooltip("size:Q", format=",.0f"),
                               alt.Tooltip("tflops:Q", format=",.3f", title="TFLOP/s")])]
    if peaks:
        rules = pd.DataFrame([{"tflops": v, "label": f"{d} peak (measured) {v:,.1f} TFLOP/s"}
                              for d, v in peaks.items()])
        layers.append(alt.Chart(rules).mark_rule(strokeDash=[5, 3], color="#d62728")
                      .encode(y="tflops:Q", tooltip=["label:N"]))
        layers.append(alt.Chart(rules).mark_text(align="left", dy=-6, color="#d62728")
                      .encode(y="tflops:Q", text="label:N", x=alt.value(4)))
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=300)
