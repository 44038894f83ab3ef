"""Bar charts: :func:`grouped_bars` (a value per category, side by side per group) and the GPU-time breakdown
(:func:`time_by_category`, stacked by category; :func:`breakdown_bars` shapes ``analyses.step_breakdown`` for it)
and a training step's phases (:func:`phase_bars`, stacked forward / backward / optimizer / zero_grad / other)."""
from __future__ import annotations

from typing import Optional

import altair as alt
import pandas as pd

from ...analyses.breakdown import category_totals
from ...analyses.categories import BREAKDOWN_CATEGORIES
from ._style import (BREAKDOWN_COLORS, LOG_AXIS_FORMAT, MAX_BARS, PHASE_COLORS, WIDTH, _plain_format, _require,
                     _us_format, decade_ticks, empty_chart, keep_longest_bars, names_legend, with_notes)


def grouped_bars(df: pd.DataFrame, *, category: str, value: str, group: Optional[str] = None,
                 title: str = "", value_title: Optional[str] = None, log: bool = False,
                 spread: Optional[tuple[str, str]] = None) -> alt.Chart:
    """Horizontal bars of ``value`` per ``category``, side by side per ``group`` (e.g. eager vs compile).

    df: the three named columns (``group`` optional). Values are labelled at the bar end. ``spread``: two columns
    (low, high) of each bar's range (the min and max of repeated runs whose median the bar is), drawn as a rule.
    Over ``MAX_BARS`` bars, those of the categories with the longest bars are drawn (:func:`keep_longest_bars`), and
    the subtitle says how many categories were left out.
    """
    cols = [category, value] + ([group] if group else []) + (list(spread) if spread else [])
    _require(df, cols, "grouped_bars")
    data = df[cols].copy()
    data[category] = data[category].astype(str)
    vals = pd.to_numeric(data[value], errors="coerce")
    if not len(vals) or not (vals.fillna(0) != 0).any():
        return empty_chart(f"{title or value}: every value is zero" + (f" ({', '.join(sorted(set(data[category])))})"
                                                                       if len(data) else ""))
    groups = data[group].nunique() if group else 1
    data, note = keep_longest_bars(data, category, value, max(1, MAX_BARS // max(1, groups)), stacked=False,
                                   what=f"{category}s")
    vals = pd.to_numeric(data[value], errors="coerce")
    fmt = _us_format(data[value]) if value.endswith("_us") else _plain_format(vals)
    positive = vals[vals > 0]
    log = log or (len(positive) > 1 and float(positive.max()) >= 100 * float(positive.min()))  # spans decades
    scale = alt.Scale(type="symlog") if log else alt.Scale()
    axis = alt.Axis(values=decade_ticks(vals), format=LOG_AXIS_FORMAT) if log else alt.Axis()
    enc = dict(x=alt.X(f"{value}:Q", title=value_title or value, scale=scale, axis=axis),
               y=alt.Y(f"{category}:N", title=None, sort=list(dict.fromkeys(data[category])),
                       axis=alt.Axis(labelLimit=320)),
               tooltip=[f"{c}:N" for c in cols if c != value] + [alt.Tooltip(f"{value}:Q", format=fmt)])
    if group:
        enc["color"] = alt.Color(f"{group}:N", title=group, legend=names_legend())
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
    return alt.layer(*layers).properties(title=with_notes(title, [note]), width=WIDTH, height=max(60, 22 * n + 20))


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
    data, note = keep_longest_bars(data, bar, "time_us" if "time_us" in data.columns else value, what=f"{bar}s")
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
            .properties(title=with_notes(title, [note]), width=WIDTH,
                        height=max(60, 24 * data[bar].nunique() + 20)))


def phase_bars(phases: pd.DataFrame, *, value: str = "cpu_us",
               title: str = "Where each training step's time goes") -> alt.Chart:
    """Horizontal stacked bars, one per step (``step N``), split by phase of the training step.

    phases: ``analyses.phases`` (``step``, ``phase``: a key of PHASE_COLORS, and ``value``: ``cpu_us`` (the step's CPU
    time, the phases summing to it), ``gpu_us`` (the GPU work launched in each phase; no ``other`` bar part when it
    is 0) or ``share`` (0..1)); ``cpu_us``, ``gpu_us``, ``kernels`` and ``share`` join the tooltip where present.
    Phases stack in PHASE_COLORS order with their own colours. An empty frame gives :func:`empty_chart`. Over
    ``MAX_BARS`` steps the longest are drawn (by ``cpu_us`` where present, else ``value``: :func:`keep_longest_bars`),
    and the subtitle says how many were left out.
    """
    _require(phases, ["step", "phase", value], "phase_bars")
    if phases.empty:
        return empty_chart("no training phases in this trace")
    unknown = sorted(set(phases["phase"].astype(str)) - set(PHASE_COLORS))
    if unknown:
        raise ValueError(f"phase_bars: unknown phase(s) {', '.join(unknown)}; known: {', '.join(PHASE_COLORS)}")
    extra = [c for c in ("cpu_us", "gpu_us", "kernels", "share") if c in phases.columns and c != value]
    data = phases[["step", "phase", value, *extra]].copy()
    data["bar"] = [f"step {s}" for s in data["step"].tolist()]
    data, note = keep_longest_bars(data, "bar", "cpu_us" if "cpu_us" in data.columns else value, what="steps")
    data["order"] = data["phase"].map({c: k for k, c in enumerate(PHASE_COLORS)})
    is_share = value == "share"
    fmt = ".1%" if is_share else _us_format(data[value])
    tips = ["bar:N", "phase:N", alt.Tooltip(f"{value}:Q", format=fmt, title=value)]
    tips += [alt.Tooltip(f"{c}:Q", format=".1%" if c == "share" else ",.0f" if c == "kernels" else ",.2f", title=c)
             for c in extra]
    x_title = {"share": "share of the step", "gpu_us": "GPU µs launched in the phase"}.get(value, "CPU µs")
    return (alt.Chart(data).mark_bar()
            .encode(x=alt.X(f"{value}:Q", title=x_title, stack="zero",
                            axis=alt.Axis(format=".0%") if is_share else alt.Axis(format=",.0f")),
                    y=alt.Y("bar:N", title=None, sort=list(dict.fromkeys(data["bar"]))),
                    color=alt.Color("phase:N", title="phase",
                                    scale=alt.Scale(domain=list(PHASE_COLORS), range=list(PHASE_COLORS.values())),
                                    legend=alt.Legend(orient="top", direction="horizontal")),
                    order=alt.Order("order:Q", sort="ascending"),
                    tooltip=tips)
            .properties(title=with_notes(title, [note]), width=WIDTH,
                        height=max(60, 24 * data["bar"].nunique() + 20)))


def breakdown_bars(breakdowns: "dict[str, pd.DataFrame]", *, per: str = "step",
                   steps: "dict[str, pd.DataFrame] | None" = None) -> pd.DataFrame:
    """The rows of :func:`time_by_category` (bar column ``bar``) for one or more runs' ``step_breakdown``.

    breakdowns: {run label: that run's ``analyses.step_breakdown``}; a label "" for a single run.
    per: ``"step"``: one bar per step of each run (``"label · step N"``, or ``"step N"``), columns ``time_us``,
    ``share``, ``overlapped_us``; ``"run"``: one bar per run over the steady state's steps
    (``analyses.category_totals``), columns ``time_us``, ``per_step_us``, ``share``, ``overlapped_us``. Runs without
    steps give no rows.
    steps: with ``per="run"``, {run label: that run's ``analyses.steps``} (which steps are the steady state's).
    """
    if per not in ("step", "run"):
        raise ValueError(f"breakdown_bars: per must be 'step' or 'run'; got {per!r}")
    if per == "run" and (steps is None or set(steps) != set(breakdowns)):
        raise ValueError("breakdown_bars: per='run' needs steps={label: that run's analyses.steps} for every run "
                         f"of breakdowns ({sorted(breakdowns)}); got {None if steps is None else sorted(steps)}")
    parts = []
    for label, bd in breakdowns.items():
        _require(bd, ["step", "category", "time_us", "share", "overlapped_us"], "breakdown_bars")
        if per == "run":
            t = category_totals(bd, steps[label])
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
