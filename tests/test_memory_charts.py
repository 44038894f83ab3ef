"""The memory charts and what the pages say about memory, from frames made by hand in the analyses' shapes: read
from the rendered SVG (what a viewer and an export see), not only from the spec."""
from __future__ import annotations

import html
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from profiling_core.analyses import MemoryReport
from profiling_core.present import charts as C
from profiling_core.present import memory_comparison, memory_section, peak_sentence
from profiling_core.present import vega_safe
from profiling_core.present.export import chart_png, chart_spec, chart_svg

MiB = 2**20
HOSTILE_OP = "\x1b[31m<script>alert(1)</script> \u2028 ![x](http://attacker.invalid/p.png) aten::mm"


def _texts(chart) -> list[str]:
    """The text a rendered chart shows (vl-convert's SVG, through the app's own export), unescaped: each <text>, and
    each line of a text of several lines (a <tspan>)."""
    svg = chart_svg(chart)
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)
            + re.findall(r"<tspan[^>]*>([^<]*)</tspan>", svg)]


def _timeline(device="cuda:0", reserved=True) -> pd.DataFrame:
    """[memory] events by hand: +1, +2, -1, +4, -4, -2 MiB at 0, 2, 3, 4, 5, 6 ms; allocated is their running sum."""
    deltas = [1, 2, -1, 4, -4, -2]
    alloc = np.cumsum(deltas)
    return pd.DataFrame({"device": device, "start_ns": [t * 1_000_000 for t in (0, 2, 3, 4, 5, 6)],
                         "bytes": [d * MiB for d in deltas], "allocated_bytes": alloc * MiB,
                         "reserved_bytes": [2 * MiB, 4 * MiB, 4 * MiB, 8 * MiB, 8 * MiB, 8 * MiB] if reserved
                         else [np.nan] * 6,
                         "step": [2, 2, 2, 3, 3, 3], "op": ["aten::empty", "aten::mm", "aten::add", "aten::mm",
                                                            "aten::sum", "aten::relu"]})


def _peaks(timeline: pd.DataFrame, op="aten::mm") -> pd.DataFrame:
    i = int(timeline["allocated_bytes"].to_numpy().argmax())  # by hand above: 6 MiB at 4 ms, in step 3
    r = timeline.iloc[i]
    return pd.DataFrame({"device": [r["device"]], "peak_allocated_bytes": [r["allocated_bytes"]],
                         "peak_reserved_bytes": [timeline["reserved_bytes"].max()], "peak_ns": [r["start_ns"]],
                         "step": [r["step"]], "op": [op], "call_chain": ["ProfilerStep#3 › train::forward › " + op],
                         "first_allocated_bytes": [timeline["allocated_bytes"].iloc[0]],
                         "last_allocated_bytes": [timeline["allocated_bytes"].iloc[-1]]})


def _report(timeline: pd.DataFrame, peaks: pd.DataFrame) -> MemoryReport:
    """The analyses' memory report of these frames (the level every figure reads is the allocated column here)."""
    return MemoryReport(timeline=timeline.assign(level_bytes=timeline["allocated_bytes"]), peaks=peaks)


STEPS = pd.DataFrame({"step": [2, 3], "start_ns": [0, 3_500_000], "end_ns": [3_500_000, 7_000_000]})


def test_the_peak_is_marked_and_labelled_with_its_size_step_and_op():
    tl = _timeline()
    shown = _texts(C.memory_timeline_chart(tl, _peaks(tl), STEPS))
    assert "peak 6.0 MiB · step 3 · aten::mm" in shown
    assert {"allocated", "reserved", "step 2", "step 3"} <= set(shown)
    assert "cuda:0 (MiB)" in shown and "time since the first profiled step (ms)" in shown
    spec = C.memory_timeline_chart(tl, _peaks(tl), STEPS).to_dict()
    peak = [r for d in spec["datasets"].values() for r in d if "label" in r and r["label"].startswith("peak")]
    assert peak == [{"t_ms": 4.0, "value_unit": 6.0, "label": "peak 6.0 MiB · step 3 · aten::mm", "op": "aten::mm"}]


def test_the_legend_names_only_the_lines_drawn():
    cpu = _timeline("cpu", reserved=False)  # a CPU's allocator reserves nothing: no reserved line to name
    shown = _texts(C.memory_timeline_chart(cpu, _peaks(cpu)))
    assert "allocated" in shown and "reserved" not in shown
    cats = pd.DataFrame({"device": "cpu", "start_ns": [0] * 8 + [1_000_000] * 8,
                         "category": ["PARAMETER", "OPTIMIZER_STATE", "INPUT", "TEMPORARY", "ACTIVATION", "GRADIENT",
                                      "AUTOGRAD_DETAIL", "unknown"] * 2,
                         "bytes": [400, 0, 10, 0, 0, 0, 0, 0, 400, 800, 10, 0, 0, 0, 0, 0]})
    shown = _texts(C.memory_categories_chart(cats))
    assert {"PARAMETER", "OPTIMIZER_STATE", "INPUT"} <= set(shown)
    assert not {"GRADIENT", "ACTIVATION", "TEMPORARY", "AUTOGRAD_DETAIL", "unknown"} & set(shown)


def test_categories_stack_in_torchs_order_and_hold_to_the_window_end():
    cats = pd.DataFrame({"device": "cpu", "start_ns": [0, 0, 2_000_000, 2_000_000],
                         "category": ["GRADIENT", "PARAMETER"] * 2, "bytes": [0, 100, 50, 100]})
    spec = C.memory_categories_chart(cats, STEPS).to_dict()
    area = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "area")
    assert area["encoding"]["color"]["scale"]["domain"] == ["PARAMETER", "GRADIENT"]
    assert area["encoding"]["y"]["stack"] == "zero" and area["encoding"]["order"]["field"] == "order"
    rows = spec["datasets"][area["data"]["name"]]
    # the last state (at 2 ms) is drawn to the last step's end, 7 ms
    assert {(r["category"], r["t_ms"], r["bytes"]) for r in rows if r["t_ms"] == 7.0} == {("GRADIENT", 7.0, 50),
                                                                                          ("PARAMETER", 7.0, 100)}
    with pytest.raises(ValueError, match="unknown categor\\(ies\\) WEIGHTS; known: PARAMETER, OPTIMIZER_STATE"):
        C.memory_categories_chart(cats.assign(category="WEIGHTS"))


def test_hostile_op_names_stay_text_in_the_svg_and_png():
    """An op name with an ESC sequence, a script tag, U+2028 and Markdown: vl-convert aborted the process on the
    control character; the export shows it as a visible escape and keeps the rest as text."""
    tl = _timeline().assign(op=HOSTILE_OP)
    chart = C.memory_timeline_chart(tl, _peaks(tl, op=HOSTILE_OP), STEPS)
    svg = chart_svg(chart)
    assert "<script" not in svg and "\x1b" not in svg and "\u2028" not in svg
    label = next(t for t in _texts(chart) if t.startswith("peak "))
    assert label.startswith("peak 6.0 MiB · step 3 · \\x1b[31m<script>alert(1)</script> \\u2028 ![x](http://")
    # cut to its first 59 characters and an ellipsis, then escaped (ESC reads \x1b, U+2028 reads \u2028)
    assert label.split(" · ", 2)[2] == vega_safe(HOSTILE_OP[:C.memory.PEAK_OP_CHARS - 1]) + "…"
    assert chart_png(chart)[:4] == b"\x89PNG"
    spec = chart_spec(chart)
    assert "\\x1b[31m<script>" in str(spec) and "\x1b" not in str(spec)


def test_two_devices_are_drawn_one_under_the_other_on_one_time_axis():
    gpu, cpu = _timeline("cuda:0"), _timeline("cpu", reserved=False).assign(
        allocated_bytes=lambda d: d["allocated_bytes"] / 1024)
    both = pd.concat([gpu, cpu], ignore_index=True)
    peaks = pd.concat([_peaks(gpu), _peaks(cpu)], ignore_index=True)
    chart = C.memory_timeline_chart(both, peaks, STEPS)
    spec = chart.to_dict()
    assert len(spec["vconcat"]) == 2 and spec["resolve"]["scale"]["x"] == "shared"
    shown = _texts(chart)
    assert {"cpu", "cuda:0", "cpu (KiB)", "cuda:0 (MiB)", "peak 6.0 KiB · step 3 · aten::mm"} <= set(shown)


def test_the_comparison_draws_one_line_per_run_from_each_runs_start():
    a = _timeline()
    b = _timeline().assign(start_ns=lambda d: d["start_ns"] + 10**12,
                           allocated_bytes=lambda d: d["allocated_bytes"] * 2)
    steps_b = STEPS.assign(start_ns=STEPS["start_ns"] + 10**12, end_ns=STEPS["end_ns"] + 10**12)
    table, overlay = memory_comparison({"A · eager": (_report(a, _peaks(a)), STEPS),
                                        "B · compiled": (_report(b, _peaks(b)), steps_b),
                                        "C · plain": (_report(a.iloc[0:0], _peaks(a).iloc[0:0]), STEPS)})
    assert overlay.groupby("run")["t_ms"].min().to_dict() == {"A · eager": 0.0, "B · compiled": 0.0}
    assert list(table["peak_allocated"]) == ["6.0 MiB", "12.0 MiB", "no [memory] events"]
    assert list(table["peak_reserved"]) == ["8.0 MiB", "8.0 MiB", ""]
    assert table["peak_allocated_bytes"].tolist()[:2] == [6 * MiB, 12 * MiB]
    shown = _texts(C.memory_comparison_chart(overlay))
    assert {"A · eager", "B · compiled"} <= set(shown) and "C · plain" not in shown
    assert "allocated (MiB)" in shown


def test_the_peak_in_a_sentence():
    tl = _timeline()
    sec = memory_section(_report(tl, _peaks(tl)), STEPS.assign(cpu_dur_us=[3500.0, 3500.0]).drop(columns=["end_ns"]))
    assert sec.has_events and sec.origin_ns == 0 and sec.categories is None
    assert sec.sentences == [
        "cuda:0 peaked at 6.0 MiB allocated (8.0 MiB reserved at most), 4.00 ms into the profiled steps, in step 3, "
        "inside aten::mm (called from ProfilerStep#3 › train::forward › aten::mm). The window began with 1.0 MiB "
        "allocated and ended with 0 B."]
    assert list(sec.steps["end_ns"]) == [3_500_000, 7_000_000]
    none = memory_section(_report(tl.iloc[0:0], _peaks(tl).iloc[0:0]), None, None, "memory categories need ...")
    assert not none.has_events and none.sentences == []
    cpu = _timeline("cpu", reserved=False)
    grew = _peaks(cpu).assign(last_allocated_bytes=7 * MiB, op=None, step=np.nan)
    assert peak_sentence(grew.iloc[0].to_dict()) == ("cpu peaked at 6.0 MiB allocated. The window began with 1.0 MiB "
                                                      "allocated and ended with 7.0 MiB: memory grew over the "
                                                      "window.")


def test_a_peak_before_the_first_step_or_in_a_trace_without_steps_is_placed_without_a_wrong_step_word():
    """The hand timeline's peak is at 4 ms: with the first step at 4.85 ms it is 0.85 ms before it (it said "-0.85
    ms into the profiled steps"); without steps the times run from the first memory event, and no step is named
    (it said "0.00 ms into the profiled steps" and "what the steps allocated, they gave back")."""
    tl = _timeline()
    late = pd.DataFrame({"step": [2], "start_ns": [4_850_000], "end_ns": [9_000_000]})
    assert ", 0.85 ms before the first step, in step 3," in memory_section(_report(tl, _peaks(tl)), late).sentences[0]
    flat = tl.assign(allocated_bytes=[6 * MiB, 1 * MiB, 1 * MiB, 1 * MiB, 1 * MiB, 6 * MiB], step=np.nan)
    pk = _peaks(flat).assign(call_chain="train::forward › aten::mm")
    assert (pk["peak_ns"].iloc[0], pk["first_allocated_bytes"].iloc[0], pk["last_allocated_bytes"].iloc[0]) == (
        0, 6 * MiB, 6 * MiB)
    text = memory_section(_report(flat, pk), None).sentences[0]
    assert text.startswith("cuda:0 peaked at 6.0 MiB allocated (8.0 MiB reserved at most), 0.00 ms after the first "
                           "memory event, inside aten::mm (called from train::forward › aten::mm).")
    assert text.endswith("The window began with 6.0 MiB allocated and ended with 6.0 MiB: what the window "
                         "allocated, it gave back.") and "step" not in text


def test_a_peak_after_the_last_step_is_said_outside_every_step():
    """The hand timeline's last three events (the peak's at 4 ms among them) come after the one step, which ends at
    3.5 ms: the sentence said "4.00 ms into the profiled steps" and, of the window's levels, "memory grew over the
    profiled steps" or "what the steps allocated, they gave back", though the allocation was outside the steps."""
    tl = _timeline().assign(step=[2, 2, 2, np.nan, np.nan, np.nan])
    one = pd.DataFrame({"step": [2], "start_ns": [0], "end_ns": [3_500_000]})
    assert tl["start_ns"].iloc[3] > one["end_ns"].iloc[0] and tl["allocated_bytes"].idxmax() == 3
    text = memory_section(_report(tl, _peaks(tl)), one).sentences[0]
    assert ", 4.00 ms after the first step began, outside every step, inside aten::mm" in text
    assert "into the profiled steps" not in text and "in step" not in text
    assert text.endswith("The window began with 1.0 MiB allocated and ended with 0 B.")


def test_a_peak_at_the_window_opening_is_drawn_on_the_line():
    """The window opens at 8 MiB and its first event frees 4 MiB: the peak is the opening level, at the first event's
    time, and the line starts there (it started at the first event's 4 MiB, the peak's mark above it)."""
    tl = pd.DataFrame({"device": "cuda:0", "start_ns": [1_000_000, 2_000_000, 3_000_000],
                       "bytes": [-4 * MiB, MiB, -MiB], "allocated_bytes": [4 * MiB, 5 * MiB, 4 * MiB],
                       "reserved_bytes": 16 * MiB, "step": 2, "op": [None, "aten::mm", "aten::add"]})
    opening = int(tl["allocated_bytes"].iloc[0] - tl["bytes"].iloc[0])
    pk = pd.DataFrame({"device": ["cuda:0"], "peak_allocated_bytes": [opening], "peak_ns": [1_000_000],
                       "step": [np.nan], "op": [None], "peak_reserved_bytes": [16 * MiB]})
    spec = C.memory_timeline_chart(tl, pk, STEPS).to_dict()
    line = next(d for d in spec["datasets"].values() if d and "series" in d[0])
    drawn = [(r["t_ms"], r["value_unit"]) for r in line if r["series"] == "allocated"]
    assert drawn[:2] == [(1.0, 8.0), (1.0, 4.0)] and max(v for _, v in drawn) == opening / MiB
    assert "peak 8.0 MiB" in _texts(C.memory_timeline_chart(tl, pk, STEPS))


def test_missing_columns_are_named():
    with pytest.raises(ValueError, match=r"memory_timeline_chart needs column\(s\) reserved_bytes; got device"):
        C.memory_timeline_chart(_timeline().drop(columns=["reserved_bytes"]), _peaks(_timeline()))
    with pytest.raises(ValueError, match=r"memory_comparison_chart needs column\(s\) t_ms"):
        C.memory_comparison_chart(pd.DataFrame({"run": ["a"], "allocated_bytes": [1]}))


def test_no_events_is_one_sentence():
    tl = _timeline().iloc[0:0]
    assert "this trace has no [memory] events" in str(C.memory_timeline_chart(tl, _peaks(_timeline()).iloc[0:0])
                                                      .to_dict())


def test_a_long_timeline_is_drawn_thinned_with_its_peak_and_says_so():
    """100,000 [memory] events would make a chart the browser crawls through: the chart keeps about MAX_INSTANTS
    of them, the peak among them, and its subtitle says so; the CSV export (the frame itself) keeps them all."""
    n = 100_000
    rng = np.random.default_rng(0)
    alloc = rng.integers(0, 1000, n) * 1024
    alloc[73_456] = 5_000 * 1024  # the one peak, by hand
    tl = pd.DataFrame({"device": "cpu", "start_ns": np.arange(n) * 1000, "bytes": 0, "allocated_bytes": alloc,
                       "reserved_bytes": np.nan, "step": 2, "op": "aten::mm"})
    chart = C.memory_timeline_chart(tl, _peaks(tl))
    spec = chart.to_dict()
    line = next(d for d in spec["datasets"].values() if d and "series" in d[0])
    assert len(line) <= C.memory.MAX_INSTANTS + 1
    assert max(r["value_unit"] for r in line) == pytest.approx(5_000 / 1024)  # the peak is drawn, in MiB
    shown = _texts(chart)
    assert any(t.startswith("100,000 instants drawn as ") and "its lowest, highest and last" in t for t in shown)
    assert "peak 4.9 MiB" in " ".join(shown)
    small = _texts(C.memory_timeline_chart(_timeline(), _peaks(_timeline())))
    assert not any("instants drawn as" in t for t in small)


@settings(max_examples=60, deadline=None)
@given(hs.lists(hs.integers(0, 10**9), min_size=1, max_size=6000), hs.integers(1, 10**6))
def test_thinning_keeps_the_extremes_and_the_last_whatever_the_events(values, gap):
    t = pd.Series(np.arange(len(values), dtype="int64") * gap)
    v = pd.Series(values, dtype="int64")
    keep, note = C.memory.thin_instants(t, [v])
    if len(values) <= C.memory.MAX_INSTANTS:
        assert keep.all() and note is None
        return
    kept = v[keep]
    assert kept.max() == v.max() and kept.min() == v.min() and bool(keep.iloc[-1])
    assert keep.sum() <= 3 * (C.memory.MAX_INSTANTS // 4) + 3
    assert note.startswith(f"{len(values):,} instants drawn as {int(keep.sum()):,}: ")


def test_a_long_call_chain_is_quoted_by_its_innermost_end():
    """with_stack's Python frames make chains of thousands of characters (the Qwen trace's peak: 1,800); the sentence
    quoted it whole, the memory_peak rule its last 200 characters."""
    frames = " > ".join(f"site-packages/module_{k}.py({k}): forward" for k in range(200)) + " > aten::mul"
    tl = _timeline()
    row = _peaks(tl, op="aten::mul").assign(call_chain=frames).iloc[0].to_dict()
    text = peak_sentence(row)
    quoted = text.split("(called from ", 1)[1].split(").", 1)[0]
    assert len(frames) > 8000 and len(quoted) == 200 and quoted == "…" + frames[-199:]
