"""Timelines of trace slices: one step (:func:`step_timeline`), its dispatch chain as a flame
(:func:`dispatch_flame`), the whole run (:func:`trace_overview`), and the helpers that shape
``analyses.dispatch_chain(s)`` for them (:func:`timeline_from_chain`, :func:`flame_from_chain`,
:func:`overview_from_chains`, :func:`chart_category`)."""
from __future__ import annotations

from typing import Optional, Sequence

import altair as alt
import pandas as pd

from ._style import CATEGORY_COLORS, LOG_AXIS_FORMAT, MAX_SLICES, WIDTH, _require, keep_longest, with_notes

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
    A step of more than ``MAX_SLICES`` slices is drawn with its longest (``keep_longest``), and only the links whose
    GPU slice is drawn; the subtitle says how many were left out.
    """
    _require(slices, ["lane", "name", "start_us", "end_us"], "step_timeline")
    data = slices.copy()
    if "category" not in data.columns:
        data["category"] = "other"
    if "depth" not in data.columns:
        data["depth"] = 0
    data["dur_us"] = data["end_us"] - data["start_us"]
    data, note = keep_longest(data, MAX_SLICES)
    if note is not None and links is not None and len(links):
        _require(links, ["kernel_us", "kernel_lane"], "step_timeline links")
        drawn = set(zip(data["lane"].astype(str), data["start_us"].astype(float)))
        links = links.loc[[(str(lane), float(t)) in drawn for lane, t in zip(links["kernel_lane"], links["kernel_us"])]]
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
    return (alt.layer(*layers).properties(title=with_notes(title, [note]), width=WIDTH,
                                          height=max(120, 70 * n_lanes))
            .resolve_scale(y="shared"))


def dispatch_flame(chain: pd.DataFrame, *, title: str = "Dispatch chain (flame view)") -> alt.LayerChart:
    """Icicle/flame view of nested slices: depth down, time across; GPU ops at the bottom.

    chain: ``name``, ``start_us``, ``end_us``, ``depth`` (int, 0 = outermost), optional ``category``.
    A chain of more than ``MAX_SLICES`` slices is drawn with its longest (``keep_longest``); the subtitle says how
    many were left out.
    """
    _require(chain, ["name", "start_us", "end_us", "depth"], "dispatch_flame")
    data = chain.copy()
    if "category" not in data.columns:
        data["category"] = "cpu_op"
    data["dur_us"] = data["end_us"] - data["start_us"]
    span = float(data["end_us"].max() - data["start_us"].min()) if len(data) else 1.0
    data, note = keep_longest(data, MAX_SLICES)
    # Only label slices wide enough to hold their name.
    names = data["name"].astype(str)
    data["label"] = names.where(data["dur_us"] > span * names.str.len() / 110, "")
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
    return alt.layer(bars, text).properties(title=with_notes(title, [note]), width=WIDTH,
                                            height=max(80, 28 * (int(data["depth"].max()) + 1 if len(data) else 1)))


# --- shaping analyses.dispatch_chain(s) for the charts above ------------------------------------

_CATEGORY_OF = {"cpu_op": "cpu_op", "operator": "cpu_op", "cuda_runtime": "runtime", "runtime": "runtime",
                "cuda_driver": "driver", "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
                "gpu_memset": "memset", "memset": "memset", "user_annotation": "annotation",
                "gpu_user_annotation": "annotation"}


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


OVERVIEW_MAX_SLICES = MAX_SLICES
"""The most slices :func:`trace_overview` draws; beyond it the shortest are left out (``keep_longest``)."""


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
    df, _ = keep_longest(df, max_slices)
    return df[cols].sort_values("start_us", kind="stable").reset_index(drop=True), steps, dropped


def trace_overview(slices: pd.DataFrame, steps: pd.DataFrame, *, title: str = "The whole run") -> alt.LayerChart:
    """Every profiled step on one zoomable timeline (drag to pan, scroll to zoom): CPU slices by depth, GPU ops on
    their lane, a rule and label at each step's start. slices/steps: from :func:`overview_from_chains`. More than
    ``MAX_SLICES`` slices are drawn with their longest (``keep_longest``), and the subtitle says so."""
    _require(slices, ["lane", "name", "start_us", "end_us", "depth", "category"], "trace_overview")
    slices, note = keep_longest(slices.assign(dur_us=slices["end_us"] - slices["start_us"]), MAX_SLICES)
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    cats = [c for c in CATEGORY_COLORS if c in set(slices["category"])] or ["other"]
    x = alt.X("start_us:Q", title="time since the first step (µs)", axis=alt.Axis(format=LOG_AXIS_FORMAT))
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
    # inside the plot, under its top edge: above it they would print over the legend
    labels = (alt.Chart(marks).mark_text(align="left", baseline="top", dx=3, fontSize=10, color="#333")
              .encode(x="start_us:Q", y=alt.value(2), text="label:N"))
    return alt.layer(bars, rules, labels).properties(title=with_notes(title, [note]), width=WIDTH, height=200)
