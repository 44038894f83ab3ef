"""Per-kernel and per-step timings: kernel durations across steps and their spread, launch latency, cold vs
warm steps, what a synchronize waited for."""
from __future__ import annotations

import altair as alt
import pandas as pd

from ...explain import MEAN_ABOVE_MEDIAN_PCT, MIN_LAUNCHES_FOR_SKEW
from ...units import format_duration_us
from ._style import (LOG_AXIS_FORMAT, MAX_POINTS, MAX_ROWS, WIDTH, _require, decade_ticks, log_ticks, thin_by_time,
                     names_legend, with_notes)

MAX_CALL_LINES = 20
"""The most calls of one kernel in one step that :func:`kernel_durations_by_step` draws as a line each; a kernel
called more often in some step is drawn as the median of each step's calls with their min..max."""
MAX_COLOURS = 10
"""The most kernel names :func:`launch_latency` gives a colour of their own: beyond it the ``MAX_COLOURS - 1`` with
the most launches keep theirs and the rest share "other" (each point's tooltip names its kernel)."""
MAX_SYNC_BARS = 30
"""The most synchronize calls :func:`sync_idle` draws a bar for: the longest; the subtitle says how many more."""


def kernel_durations_by_step(durations: pd.DataFrame, *, title: str = "Kernel duration per step"
                             ) -> alt.FacetChart:
    """Per kernel (one row each, own y scale): duration across steps, median (solid) and mean (dashed) rules.

    durations: ``step`` (int), ``kernel`` (str), ``dur_us``; optional ``run`` to compare runs
    (one colour per run) and ``occurrence`` (the how-manieth call of the kernel in its step): a kernel called
    several times a step gets one line per call, not a zigzag through them. Kernels are told apart by their full
    names (a row's header shows the first 60 characters). A panel whose mean is more than question 8's
    ``MEAN_ABOVE_MEDIAN_PCT`` above its median (over at least ``MIN_LAUNCHES_FOR_SKEW`` launches) says so in its
    corner and names the slowest step, which is what pulls the mean up.
    """
    _require(durations, ["step", "kernel", "dur_us"], "kernel_durations_by_step")
    data = durations.reset_index(drop=True)
    if "run" not in data.columns:
        data["run"] = "this run"
    data["kernel"] = data["kernel"].astype(str)
    grouped = data.groupby(["run", "kernel"])["dur_us"]
    data["median_us"] = grouped.transform("median")
    data["mean_us"] = grouped.transform("mean")
    data["note"] = _skew_notes(data)  # (the medians, means and notes are of every launch, before any aggregation)
    data, aggregated = _aggregate_calls(data)
    calls = "occurrence" in data.columns and data["occurrence"].nunique() > 1
    if calls:
        data["call"] = data["occurrence"].astype(int) + 1
    color = alt.Color("run:N", title="run", legend=names_legend())
    base = alt.Chart().encode(color=color)
    # one slow step (the first, cold) would flatten the others to a line: a log axis keeps them apart
    outlier = bool(len(data) and (data["dur_us"] > 10 * data["median_us"]).any())
    scale = alt.Scale(type="log") if outlier and (data["dur_us"] > 0).all() else alt.Scale(zero=False)
    extra = {"detail": "call:N"} if calls else {}
    lines = base.mark_line(point=True).encode(
        **extra,
        x=alt.X("step:O", title="profiled step", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("dur_us:Q", title="duration (µs)" + (", log scale" if scale.type == "log" else ""), scale=scale,
                axis=alt.Axis(format=LOG_AXIS_FORMAT, values=log_ticks(data["dur_us"])) if scale.type == "log"
                else alt.Axis(format=",.3~f")),
        tooltip=["run:N", "kernel:N", "step:O", *(["call:O"] if calls else []),
                 alt.Tooltip("dur_us:Q", format=",.2f", title="µs"),
                 alt.Tooltip("median_us:Q", format=",.2f", title="median µs"),
                 alt.Tooltip("mean_us:Q", format=",.2f", title="mean µs")])
    median = base.mark_rule(strokeWidth=1.5, opacity=0.8).encode(
        y="median_us:Q", tooltip=["run:N", alt.Tooltip("median_us:Q", format=",.2f", title="median µs")])
    mean = base.mark_rule(strokeDash=[6, 3], strokeWidth=1.5, opacity=0.8).encode(
        y="mean_us:Q", tooltip=["run:N", alt.Tooltip("mean_us:Q", format=",.2f", title="mean µs")])
    subtitle = ["solid rule: median, dashed rule: mean" + ("; one line per call in a step" if calls else "")]
    layers = [lines, median, mean]
    if aggregated:
        subtitle.append(f"{len(aggregated)} kernel(s) called over {MAX_CALL_LINES} times in a step: the median of "
                        "each step's calls, the bar their min..max")
        layers.append(base.mark_rule(strokeWidth=1, opacity=0.5).encode(
            x="step:O", y="lo_us:Q", y2="hi_us:Q", tooltip=["run:N", "kernel:N", "step:O", "calls:Q",
                                                            alt.Tooltip("lo_us:Q", format=",.2f", title="min µs"),
                                                            alt.Tooltip("hi_us:Q", format=",.2f", title="max µs")]))
    data["note_row"] = data["note"].ne("") & ~data.duplicated(["run", "kernel"])
    data["note_line"] = data["run"].map({r: i for i, r in enumerate(dict.fromkeys(data["run"]))})
    notes = [alt.Chart().transform_filter(f"datum.note_row && datum.note_line == {i}")
             .mark_text(align="left", baseline="top", fontSize=11)
             .encode(x=alt.value(6), y=alt.value(4 + 13 * i), text="note:N", color=color)
             for i in sorted(set(data.loc[data["note_row"], "note_line"]))]
    return (alt.layer(*layers, *notes, data=data).properties(width=WIDTH, height=170)
            .facet(row=alt.Row("kernel:N", title=None,
                               header=alt.Header(labelAngle=0, labelAlign="left", labelAnchor="start",
                                                 labelOrient="top", labelFontWeight="bold", labelLimit=WIDTH)))
            .resolve_scale(y="independent")
            .properties(title=alt.TitleParams(title, subtitle=subtitle)))


def _aggregate_calls(data: pd.DataFrame) -> tuple[pd.DataFrame, list]:
    """``data`` with the rows of each (run, kernel) called over ``MAX_CALL_LINES`` times in some step (or, when the
    rows together are over ``MAX_ROWS``, of every (run, kernel) called more than once in a step) made one row per
    step: ``dur_us`` the median of its calls, ``lo_us`` / ``hi_us`` their min and max, ``calls`` how many; and the
    (run, kernel)s so made."""
    per_step = data.groupby(["run", "kernel", "step"])["dur_us"].transform("size")
    most = per_step.groupby([data["run"], data["kernel"]]).transform("max")
    many = most > (1 if len(data) > MAX_ROWS else MAX_CALL_LINES)
    if not many.any():
        return data, []
    keys = ["run", "kernel", "step"]
    agg = (data[many].groupby(keys, sort=False)
           .agg(dur_us=("dur_us", "median"), lo_us=("dur_us", "min"), hi_us=("dur_us", "max"),
                calls=("dur_us", "size"), median_us=("median_us", "first"), mean_us=("mean_us", "first"),
                note=("note", "first"))
           .reset_index())
    if "occurrence" in data.columns:
        agg["occurrence"] = 0
    made = list(dict.fromkeys(zip(agg["run"], agg["kernel"])))
    return pd.concat([data[~many], agg], ignore_index=True), made


def _skew_notes(data: pd.DataFrame) -> pd.Series:
    """Per row, its (run, kernel)'s note when the mean is well above the median (else ""): how far, and the slowest
    step, e.g. "mean 84% above the median: step 21 (900 µs) pulls it up; read the median"."""
    notes = pd.Series("", index=data.index, dtype=object)
    for _, g in data.groupby(["run", "kernel"], sort=False):
        median, mean = float(g["dur_us"].median()), float(g["dur_us"].mean())
        if len(g) < MIN_LAUNCHES_FOR_SKEW or median <= 0 or 100 * (mean / median - 1) <= MEAN_ABOVE_MEDIAN_PCT:
            continue
        slow = g.loc[g["dur_us"].idxmax()]
        notes[g.index] = (f"mean {100 * (mean / median - 1):.0f}% above the median: step {int(slow['step'])} "
                          f"({format_duration_us(float(slow['dur_us']))}) pulls it up; read the median")
    return notes


def kernel_spread(durations: pd.DataFrame, *, title: str = "Spread of kernel durations") -> alt.FacetChart:
    """Per kernel (one row each, own x scale): a box per run (min..max whiskers, quartiles, median), mean as a red
    tick.

    durations: ``kernel``, ``dur_us``, optional ``run``. The box is computed here, one row per (run, kernel), however
    many launches there are: quartiles and median as pandas' ``quantile`` (linear interpolation; the median is
    ``kernel_stats``' median).
    """
    _require(durations, ["kernel", "dur_us"], "kernel_spread")
    data = durations.copy()
    if "run" not in data.columns:
        data["run"] = "this run"
    data["kernel"] = data["kernel"].astype(str)  # full names tell kernels apart; headers show what fits
    g = data.groupby(["run", "kernel"], sort=False)["dur_us"]
    box = pd.DataFrame({"min_us": g.min(), "q1_us": g.quantile(0.25), "median_us": g.median(),
                        "q3_us": g.quantile(0.75), "max_us": g.max(), "mean_us": g.mean(),
                        "launches": g.size()}).reset_index()
    y = alt.Y("run:N", title=None, axis=alt.Axis(labelLimit=260))
    tip = ["run:N", "launches:Q"] + [alt.Tooltip(f"{c}_us:Q", format=",.2f", title=f"{t} µs") for c, t in
                                     (("min", "min"), ("q1", "25th pct"), ("median", "median"), ("q3", "75th pct"),
                                      ("max", "max"), ("mean", "mean"))]
    color = alt.Color("run:N", title="run", legend=None)
    whisker = alt.Chart().mark_rule().encode(x=alt.X("min_us:Q", title="duration (µs)", scale=alt.Scale(zero=False)),
                                             x2="max_us:Q", y=y, color=color, tooltip=tip)
    quartiles = alt.Chart().mark_bar(size=14).encode(x="q1_us:Q", x2="q3_us:Q", y=y, color=color, tooltip=tip)
    median = alt.Chart().mark_tick(color="white", thickness=2, size=14).encode(x="median_us:Q", y=y, tooltip=tip)
    mean = alt.Chart().mark_tick(color="#d62728", thickness=2, size=18).encode(
        x="mean_us:Q", y=y, tooltip=["run:N", alt.Tooltip("mean_us:Q", format=",.2f", title="mean µs")])
    n_runs = max(1, box["run"].nunique())
    return (alt.layer(whisker, quartiles, median, mean, data=box).properties(width=WIDTH, height=30 * n_runs + 10)
            .facet(row=alt.Row("kernel:N", title=None,
                               header=alt.Header(labelAngle=0, labelAlign="left", labelAnchor="start",
                                                 labelOrient="top", labelFontWeight="bold")))
            .resolve_scale(x="independent")
            .properties(title=alt.TitleParams(title, subtitle="box: quartiles and median, whiskers: min..max, "
                                                              "red tick: mean")))


def launch_latency(latency: pd.DataFrame, *, title: str = "Launch latency: kernel start − launch call start"
                   ) -> alt.Chart:
    """Points of launch latency per kernel across steps.

    latency: ``kernel``, ``latency_us``, optional ``step``, ``launch`` (the launch call's name) and ``t_ns`` (when
    the GPU op started; without it, rows are taken to be in that order). Over ``MAX_POINTS`` launches the chart draws
    ``thin_by_time``'s points (each slice of time's lowest, highest and last latency); over ``MAX_COLOURS`` kernel
    names, the ``MAX_COLOURS - 1`` with the most launches keep a colour of their own and the rest share "other".
    The subtitle says either.
    """
    _require(latency, ["kernel", "latency_us"], "launch_latency")
    data = latency.reset_index(drop=True)
    if "step" not in data.columns:
        data["step"] = range(len(data))
    if "launch" not in data.columns:
        data["launch"] = ""
    data["name"] = data["kernel"].astype(str)  # one colour per full name; the legend shows what fits
    t = pd.to_numeric(data["t_ns"], errors="coerce") if "t_ns" in data.columns else None
    if t is None or t.isna().any():  # (no time for some row: the rows' order is the time order)
        t = pd.Series(range(len(data)), index=data.index)
    keep, thinned = thin_by_time(t, [data["latency_us"]], MAX_POINTS, what="launches")
    counts = data["name"].value_counts(sort=False)
    notes = [thinned]
    if len(counts) > MAX_COLOURS:
        top = set(counts.sort_values(ascending=False, kind="stable").index[:MAX_COLOURS - 1])
        data["kernel"] = data["name"].where(data["name"].isin(top), "other")
        notes.append(f"{len(counts):,} GPU op names: the {MAX_COLOURS - 1} launched most often have a colour each, "
                     f"the other {len(counts) - MAX_COLOURS + 1:,} share one")
    else:
        data["kernel"] = data["name"]
    data = data[keep.to_numpy()][["kernel", "name", "launch", "step", "latency_us"]]
    return (alt.Chart(data).mark_point(size=70, opacity=0.85, filled=True)
            .encode(x=alt.X("step:O", title="profiled step", axis=alt.Axis(labelAngle=0)),
                    y=alt.Y("latency_us:Q", title="latency (µs)"),
                    color=alt.Color("kernel:N", title="kernel", legend=names_legend()),
                    shape=alt.Shape("launch:N", title="launch call"),
                    tooltip=[alt.Tooltip("name:N", title="kernel"), "launch:N", "step:O",
                             alt.Tooltip("latency_us:Q", format=",.2f", title="µs")])
            .properties(title=with_notes(title, notes), width=WIDTH, height=260))


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
    y = alt.Y("dur_us:Q", title="step duration (µs)" + (", symmetric log scale" if log else ""), scale=yscale,
              axis=alt.Axis(values=decade_ticks(steps["dur_us"]), format=LOG_AXIS_FORMAT) if log else alt.Axis())
    enc = dict(x=alt.X("step:O", title="profiled step", axis=alt.Axis(labelAngle=0)), xOffset="label:N",
               color=alt.Color("label:N", title=None, legend=names_legend()))
    bars = (alt.Chart(steps).mark_bar()
            .encode(y=y, tooltip=["label:N", "step:O", alt.Tooltip("dur_us:Q", format=",.2f", title="µs")], **enc))
    layers = [bars]
    if {"lo_us", "hi_us"} <= set(steps.columns):
        layers.append(alt.Chart(steps).mark_rule(color="#222", strokeWidth=1.5)
                      .encode(y=alt.Y("lo_us:Q", scale=yscale), y2="hi_us:Q",
                              tooltip=["label:N", "step:O", alt.Tooltip("lo_us:Q", format=",.2f", title="min µs"),
                                       alt.Tooltip("hi_us:Q", format=",.2f", title="max µs")], **enc))
    return alt.layer(*layers).properties(title=title, width=WIDTH, height=260)


_SYNC_PARTS = {"GPU busy": "#2ca02c", "GPU on unrecorded work": "#969696", "GPU idle": "#d9d9d9"}
"""The parts of a synchronize call's bar, in stacking order, with their colours (``unrecorded``'s and ``idle``'s as
in the breakdown)."""


def sync_parts(sync_wait: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`sync_idle` for ``analyses.sync_wait``'s calls, in their order: per call (``label``: its name
    and slice id) its GPU busy time, its time on unrecorded work (``unrecorded_us``) and the rest, idle."""
    label = sync_wait["name"] + " #" + sync_wait["id"].astype(str)
    idle = (sync_wait["dur_us"] - sync_wait["gpu_busy_us"] - sync_wait["unrecorded_us"]).clip(lower=0)
    return pd.concat([pd.DataFrame({"label": label, "part": part, "dur_us": dur})
                      for part, dur in zip(_SYNC_PARTS, (sync_wait["gpu_busy_us"], sync_wait["unrecorded_us"], idle))],
                     ignore_index=True)


def sync_idle(parts: pd.DataFrame, *, title: str = "What the synchronize waited for") -> alt.Chart:
    """Stacked horizontal bar(s): GPU busy vs idle during each synchronize call.

    parts: ``label`` (which sync), ``part`` (``_SYNC_PARTS``: "GPU busy", "GPU on unrecorded work" (``sync_wait``'s
    ``unrecorded_us``), "GPU idle"), ``dur_us``; the bars top down in the rows'
    order (the calls' time order, as ``sync_wait`` gives them). Over ``MAX_SYNC_BARS`` calls the longest are drawn,
    and the subtitle says how many more there are.
    """
    _require(parts, ["label", "part", "dur_us"], "sync_idle")
    total = parts.groupby("label", sort=False)["dur_us"].sum()
    note = None
    if len(total) > MAX_SYNC_BARS:
        longest = total.sort_values(ascending=False, kind="stable").index[:MAX_SYNC_BARS]
        parts = parts[parts["label"].isin(set(longest))]
        note = (f"{len(total):,} synchronize calls: the {MAX_SYNC_BARS} longest are drawn (the CSV has them all)")
    parts = parts.assign(order=parts["part"].map({p: k for k, p in enumerate(_SYNC_PARTS)}))
    return (alt.Chart(parts).mark_bar()
            .encode(x=alt.X("dur_us:Q", title="µs", stack="zero"), order=alt.Order("order:Q"),
                    y=alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=320)),  # in their order
                    color=alt.Color("part:N", title=None,
                                    scale=alt.Scale(domain=list(_SYNC_PARTS), range=list(_SYNC_PARTS.values()))),
                    tooltip=["label:N", "part:N", alt.Tooltip("dur_us:Q", format=",.2f", title="µs")])
            .properties(title=with_notes(title, [note]), width=WIDTH,
                        height=max(60, 30 * parts["label"].nunique() + 20)))
