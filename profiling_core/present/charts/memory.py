"""Charts of memory over time: a run's allocated and reserved bytes with its peak (:func:`memory_timeline_chart`), its
memory by torch's categories (:func:`memory_categories_chart`), several runs' allocated bytes side by side
(:func:`memory_comparison_chart`).

Times are ms from an origin the caller gives (a run's first profiled step: the same as its other time charts), bytes
in one binary unit per chart (B, KiB, MiB or GiB, by the largest value drawn). Several devices (a GPU run's
``cuda:0`` and its host's ``cpu``) are drawn one under the other, each on its own scale. Strings from the trace (op
names in the peak's label) are data, and every spec goes through ``vega_safe`` on its way to a page or a file.
"""
from __future__ import annotations

from typing import Optional

import altair as alt
import pandas as pd

from ._style import MAX_POINTS, MEMORY_COLORS, WIDTH, _require, empty_chart, names_legend, thin_by_time, with_notes

__all__ = ["memory_timeline_chart", "memory_categories_chart", "memory_comparison_chart", "byte_unit",
           "PEAK_OP_CHARS", "MAX_INSTANTS"]

_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
PANEL_HEIGHT = 220
_LABEL_CHAR_PX = 6.2  # width of one 11-px label character
SERIES_COLORS = {"allocated": "#1f77b4", "reserved": "#ff7f0e"}
PEAK_OP_CHARS = 60
"""The most characters of the op name a peak's label shows (the rest as an ellipsis; the tooltip has it whole)."""
MAX_INSTANTS = MAX_POINTS
"""The most instants a device's lines or areas are drawn with (``_style.MAX_POINTS``); beyond it the chart keeps, in
each of ``MAX_INSTANTS // 4`` equal slices of time, the instants of its lowest and highest value and its last one
(the peak among them), and says so (:func:`~profiling_core.present.charts._style.thin_by_time`). The CSV export keeps
every event."""


def thin_instants(t_ns: pd.Series, values: list[pd.Series]) -> tuple[pd.Series, Optional[str]]:
    """A mask of the instants to draw (at most about :data:`MAX_INSTANTS`) and a note saying how they were chosen, or
    None when all are drawn (``thin_by_time``'s rule)."""
    return thin_by_time(t_ns, values, MAX_INSTANTS, what="instants")


def byte_unit(values) -> tuple[str, int]:
    """The binary unit in which the largest of ``values`` reads 1 or more (``("MiB", 2**20)``); B when all are small."""
    v = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").abs().dropna()
    top = float(v.max()) if len(v) else 0.0
    return next(((u, n) for u, n in _UNITS if top >= n), ("B", 1))


def _short(text: object, n: int = PEAK_OP_CHARS) -> str:
    s = str(text)
    return s if len(s) <= n else s[: n - 1] + "…"


def _x_title(steps: Optional[pd.DataFrame], origin_ns: Optional[int]) -> str:
    first_step = int(steps["start_ns"].min()) if steps is not None and len(steps) else None
    if first_step is not None and origin_ns in (None, first_step):
        return "time since the first profiled step (ms)"
    return "time (ms)" if origin_ns is not None else "time since the first memory event (ms)"


def _titled(panels: list, devices: list, notes: list, title: str):
    """One panel titled with the chart's title and its device; several one under the other, each titled with its
    device. A panel's note (how its instants were thinned) is its subtitle."""
    if len(panels) == 1:
        return panels[0].properties(title=alt.TitleParams(title, subtitle=[f"device {devices[0]}"]
                                                          + ([notes[0]] if notes[0] else [])))
    return alt.vconcat(*(p.properties(title=alt.TitleParams(str(d), subtitle=[n]) if n else str(d))
                         for p, d, n in zip(panels, devices, notes, strict=True))).resolve_scale(
        x="shared", color="independent").properties(title=title)


def _origin(frames, origin_ns: Optional[int]) -> int:
    if origin_ns is not None:
        return int(origin_ns)
    starts = [int(f["start_ns"].min()) for f in frames if f is not None and len(f)]
    return min(starts) if starts else 0


def _window_end(steps: Optional[pd.DataFrame], t0: int, last_ms: float) -> float:
    """Where a device's lines end: the last step's end when it is later than the last event, else that event."""
    if steps is None or not len(steps) or "end_ns" not in steps.columns:
        return last_ms
    end = pd.to_numeric(steps["end_ns"], errors="coerce").max()
    return last_ms if pd.isna(end) else max(last_ms, (float(end) - t0) / 1e6)


def _held(long: pd.DataFrame, by: str, end_ms: float) -> pd.DataFrame:
    """``long`` with each ``by`` series' last value repeated at ``end_ms``, so a step line (or area) shows its final
    level up to the end of the window instead of stopping at the last event."""
    if not len(long):
        return long
    last = long.sort_values("t_ms", kind="stable").groupby(by, sort=False).tail(1)
    last = last[last["t_ms"] < end_ms].assign(t_ms=end_ms)
    return pd.concat([long, last], ignore_index=True)


def _step_layers(steps: Optional[pd.DataFrame], t0: int, end_ms: float, x_title: str) -> list:
    """Every other step shaded, and each step's number at its start, inside the plot's bottom edge (the top is where
    a peak's label goes)."""
    if steps is None or not len(steps):
        return []
    _require(steps, ["step", "start_ns"], "memory chart steps")
    s = steps.sort_values("start_ns").reset_index(drop=True)
    start = (s["start_ns"].astype("int64") - t0) / 1e6
    end = ((s["end_ns"].astype("Float64") - t0) / 1e6).astype(float) if "end_ns" in s.columns \
        else start.shift(-1).fillna(end_ms)
    marks = pd.DataFrame({"step": s["step"].astype(int), "start_ms": start, "end_ms": end.fillna(end_ms)})
    marks["label"] = [f"step {n}" for n in marks["step"]]
    x = alt.X("start_ms:Q", title=x_title)  # the same title as the data's axis: layers merge their axis titles
    shade = (alt.Chart(marks.iloc[::2]).mark_rect(color="#000", opacity=0.05)
             .encode(x=x, x2="end_ms:Q", tooltip=["label:N"]))
    rules = alt.Chart(marks).mark_rule(color="#888", strokeDash=[4, 3], strokeWidth=0.8).encode(x=x)
    labels = (alt.Chart(marks).mark_text(align="left", baseline="bottom", dx=3, fontSize=10, color="#333")
              .encode(x=x, y=alt.value(PANEL_HEIGHT - 2), text="label:N"))
    return [shade, rules, labels]


def _peak_label(row) -> str:
    from ...units import human_bytes
    parts = [f"peak {human_bytes(float(row['peak_allocated_bytes']))}"]
    step = row.get("step")
    if step is not None and not pd.isna(step):
        parts.append(f"step {int(step)}")
    op = row.get("op")
    if op is not None and not (isinstance(op, float) and pd.isna(op)) and str(op):
        parts.append(_short(op))
    return " · ".join(parts)


def _with_opening(drawn: pd.DataFrame, g: pd.DataFrame) -> pd.DataFrame:
    """``drawn`` (the device's events to draw) with the level the window opened with (the first event's level less
    its ``bytes``, where the frame has them) drawn at the first event's time, so a peak at the window's opening is on
    the line."""
    if "bytes" not in g.columns or not len(g) or not float(g["bytes"].iloc[0]):
        return drawn
    opening = g.iloc[[0]].assign(allocated_bytes=float(g["allocated_bytes"].iloc[0]) - float(g["bytes"].iloc[0]))
    return pd.concat([opening, drawn], ignore_index=True)


def memory_timeline_chart(timeline: pd.DataFrame, peaks: pd.DataFrame, steps: Optional[pd.DataFrame] = None, *,
                          origin_ns: Optional[int] = None, title: str = "Memory over time"):
    """Allocated and reserved bytes over time, per device, as steps (the value holds until the next event), the
    peak of allocated marked with a point and labelled with its size, step and op; the profiled steps shaded.

    timeline: ``device``, ``start_ns``, ``allocated_bytes``, ``reserved_bytes`` (NaN where the trace gives none: a
    CPU's allocator reserves nothing; the legend then names only allocated). peaks: ``device``,
    ``peak_allocated_bytes``, ``peak_ns``, optional ``step``, ``op`` (the op the peak happened in; a trace's text)
    and ``peak_reserved_bytes``. steps: optional ``step``, ``start_ns`` and ``end_ns``. Times are ms from
    ``origin_ns`` (default: the first step's start, else the first event).
    """
    _require(timeline, ["device", "start_ns", "allocated_bytes", "reserved_bytes"], "memory_timeline_chart")
    _require(peaks, ["device", "peak_allocated_bytes", "peak_ns"], "memory_timeline_chart peaks")
    if timeline.empty:
        return empty_chart(f"{title}: this trace has no [memory] events")
    t0 = _origin([steps if steps is not None and len(steps) else timeline], origin_ns)
    x_title = _x_title(steps, origin_ns)
    panels, devices, notes = [], [], []
    for device, g in timeline.groupby("device", sort=True):
        g = g.sort_values("start_ns", kind="stable").reset_index(drop=True)
        keep, note = thin_instants(g["start_ns"], [g["allocated_bytes"], g["reserved_bytes"]])
        g = _with_opening(g[keep], g)
        t_ms = (g["start_ns"].astype("int64") - t0) / 1e6
        long = pd.concat([pd.DataFrame({"t_ms": t_ms, "series": name, "value": pd.to_numeric(g[col], errors="coerce")})
                          for name, col in (("allocated", "allocated_bytes"), ("reserved", "reserved_bytes"))],
                         ignore_index=True).dropna(subset=["value"])
        unit, scale = byte_unit(long["value"])
        long["value_unit"] = long["value"] / scale
        drawn = [s for s in SERIES_COLORS if (long["series"] == s).any()]
        colors = alt.Scale(domain=drawn, range=[SERIES_COLORS[s] for s in drawn])
        x = alt.X("t_ms:Q", title=x_title, axis=alt.Axis(format=",.1f"))
        end_ms = _window_end(steps, t0, float(t_ms.max()) if len(t_ms) else 0.0)
        long = _held(long, "series", end_ms)
        layers = _step_layers(steps, t0, end_ms, x_title)
        layers.append(alt.Chart(long).mark_line(interpolate="step-after", strokeWidth=1.5)
                      .encode(x=x, y=alt.Y("value_unit:Q", title=f"{device} ({unit})",
                                           axis=alt.Axis(format=",.4~r")),
                              color=alt.Color("series:N", title=None, scale=colors,
                                              legend=alt.Legend(orient="top", direction="horizontal")),
                              tooltip=[alt.Tooltip("series:N"), alt.Tooltip("t_ms:Q", format=",.3f", title="ms"),
                                       alt.Tooltip("value_unit:Q", format=",.2f", title=unit)]))
        pk = peaks[peaks["device"].astype(str) == str(device)]
        if len(pk):
            row = pk.iloc[0]
            px = (int(row["peak_ns"]) - t0) / 1e6
            mark = pd.DataFrame({"t_ms": [px], "value_unit": [float(row["peak_allocated_bytes"]) / scale],
                                 "label": [_peak_label(row)],
                                 "op": [str(row["op"]) if "op" in pk.columns and row["op"] is not None
                                        and not (isinstance(row["op"], float) and pd.isna(row["op"])) else ""]})
            # a label that would run past the right edge runs left of its point instead
            right = end_ms > 0 and px / end_ms * WIDTH + 8 + _LABEL_CHAR_PX * len(mark["label"][0]) > WIDTH
            layers.append(alt.Chart(mark).mark_point(shape="diamond", size=110, filled=True, color="#d62728")
                          .encode(x="t_ms:Q", y="value_unit:Q",
                                  tooltip=[alt.Tooltip("label:N", title="peak"), alt.Tooltip("op:N", title="op")]))
            layers.append(alt.Chart(mark).mark_text(align="right" if right else "left", dx=-8 if right else 8,
                                                    dy=-10, fontSize=11, color="#d62728")
                          .encode(x="t_ms:Q", y="value_unit:Q", text="label:N"))
        panels.append(alt.layer(*layers).properties(width=WIDTH, height=PANEL_HEIGHT))
        devices.append(device)
        notes.append(note)
    return _titled(panels, devices, notes, title)


def memory_categories_chart(categories: pd.DataFrame, steps: Optional[pd.DataFrame] = None, *,
                            origin_ns: Optional[int] = None,
                            title: str = "Memory by category (torch's memory profiler)"):
    """Stacked areas of the bytes of each category over time, per device, in torch's order and colours; the legend
    names only the categories that ever held memory.

    categories: ``device``, ``start_ns``, ``category`` (one of ``store.MEMORY_CATEGORIES``), ``bytes`` (from
    ``profiling_core.store.memory_categories``). steps / origin_ns: as :func:`memory_timeline_chart`.
    """
    from ...store.memory import MEMORY_CATEGORIES
    _require(categories, ["device", "start_ns", "category", "bytes"], "memory_categories_chart")
    unknown = sorted(set(categories["category"].astype(str)) - set(MEMORY_CATEGORIES))
    if unknown:
        raise ValueError(f"memory_categories_chart: unknown categor(ies) {', '.join(unknown)[:200]}; known: "
                         f"{', '.join(MEMORY_CATEGORIES)}")
    if categories.empty:
        return empty_chart(f"{title}: no memory categories for this run")
    t0 = _origin([steps if steps is not None and len(steps) else categories], origin_ns)
    x_title = _x_title(steps, origin_ns)
    order = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
    panels, devices, notes = [], [], []
    for device, g in categories.groupby("device", sort=True):
        held = g.groupby("category")["bytes"].apply(lambda b: (b != 0).any())
        drawn = [c for c in MEMORY_CATEGORIES if held.get(c, False)]
        if not drawn:
            continue
        d = g[g["category"].isin(drawn)].copy()
        per_instant = d.groupby("start_ns", sort=True)["bytes"].sum()
        keep, note = thin_instants(pd.Series(per_instant.index, index=per_instant.index), [per_instant])
        d = d[d["start_ns"].isin(per_instant.index[keep.to_numpy()])]
        d["t_ms"] = (d["start_ns"].astype("int64") - t0) / 1e6
        totals = d.groupby("start_ns")["bytes"].sum()
        unit, scale = byte_unit(totals)
        d["value_unit"] = d["bytes"] / scale
        d["order"] = d["category"].map(order)
        end_ms = _window_end(steps, t0, float(d["t_ms"].max()))
        d = _held(d, "category", end_ms)
        layers = _step_layers(steps, t0, end_ms, x_title)
        layers.append(alt.Chart(d).mark_area(interpolate="step-after", opacity=0.85)
                      .encode(x=alt.X("t_ms:Q", title=x_title, axis=alt.Axis(format=",.1f")),
                              y=alt.Y("value_unit:Q", stack="zero", title=f"{device} ({unit})",
                                      axis=alt.Axis(format=",.4~r")),
                              color=alt.Color("category:N", title=None,
                                              scale=alt.Scale(domain=drawn, range=[MEMORY_COLORS[c] for c in drawn]),
                                              legend=alt.Legend(orient="top", direction="horizontal", columns=4)),
                              order=alt.Order("order:Q"),
                              tooltip=[alt.Tooltip("category:N"), alt.Tooltip("t_ms:Q", format=",.3f", title="ms"),
                                       alt.Tooltip("value_unit:Q", format=",.2f", title=unit)]))
        panels.append(alt.layer(*layers).properties(width=WIDTH, height=PANEL_HEIGHT))
        devices.append(device)
        notes.append(note)
    if not panels:
        return empty_chart(f"{title}: no category ever held memory")
    return _titled(panels, devices, notes, title)


def memory_comparison_chart(runs: pd.DataFrame, *, title: str = "Allocated memory over time, per run"):
    """One line of allocated bytes per run, each from its own window's start, so runs recorded at different times
    overlay.

    runs: ``run`` (its label), ``t_ms`` (ms since that run's first profiled step), ``allocated_bytes``, optional
    ``device`` (named in the legend when the runs' devices differ). From ``present.memory.memory_comparison``.
    """
    _require(runs, ["run", "t_ms", "allocated_bytes"], "memory_comparison_chart")
    data = runs.dropna(subset=["allocated_bytes"]).copy()
    if data.empty:
        return empty_chart(f"{title}: neither run has [memory] events")
    if "device" in data.columns and data.groupby("run")["device"].first().nunique() > 1:
        data["series"] = data["run"].astype(str) + " (" + data["device"].astype(str) + ")"
    else:
        data["series"] = data["run"].astype(str)
    unit, scale = byte_unit(data["allocated_bytes"])
    data["value_unit"] = data["allocated_bytes"] / scale
    names = list(dict.fromkeys(data["series"]))
    parts, thinned = [], []
    budget = max(8, MAX_INSTANTS // len(names))  # the runs share one chart's points
    for series, g in data.groupby("series", sort=False):
        g = g.sort_values("t_ms", kind="stable").reset_index(drop=True)
        keep, note = thin_by_time((g["t_ms"] * 1e6).round(), [g["allocated_bytes"]], budget, what="instants")
        parts.append(g[keep])
        thinned += [f"{series}: {note}"] if note else []
    data = pd.concat(parts, ignore_index=True)
    title = with_notes(title, thinned)
    return (alt.Chart(data[["series", "t_ms", "value_unit"]]).mark_line(interpolate="step-after", strokeWidth=1.5)
            .encode(x=alt.X("t_ms:Q", title="time since the run's first profiled step (ms)",
                            axis=alt.Axis(format=",.1f")),
                    y=alt.Y("value_unit:Q", title=f"allocated ({unit})", axis=alt.Axis(format=",.4~r")),
                    color=alt.Color("series:N", title=None, scale=alt.Scale(domain=names),
                                    legend=names_legend()),
                    tooltip=[alt.Tooltip("series:N", title="run"), alt.Tooltip("t_ms:Q", format=",.3f", title="ms"),
                             alt.Tooltip("value_unit:Q", format=",.2f", title=unit)])
            .properties(title=title, width=WIDTH, height=260))
