"""What the pages show about memory, from the analyses' memory report: the section of one run, the comparison of several.

``analyze`` puts every memory analysis of a trace in ``Report.memory`` (``profiling_core.analyses.MemoryReport``):
the timeline (one row per ``[memory]`` event, ``level_bytes`` the allocated level every figure reads), the peaks
(one row per device, with its ``basis``), what was live at each peak, what the window never freed and per-step
churn. :func:`memory_section` turns it, with the run's steps and torch's categories
(``profiling_core.store.memory_categories``), into what the Profile page draws, says and lists;
:func:`memory_comparison` into the Runs page's table and overlay. Texts here are plain: they quote op names from the
trace, so a page shows them through ``md_text`` (tables go to dataframes, which show text as text).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import pandas as pd

from ..analyses.memory import (
    BEFORE_WINDOW,
    NOTHING_RECORDED_TEXT,
    RELATIVE_BASES,
    chain_tail,
    device_of,
)
from ..units import human_bytes
from .markdown import md_text

__all__ = ["MEMORY_HOWTO", "MEMORY_HOWTO_RUNS", "MemorySection", "memory_section", "memory_steps", "peak_sentence",
           "main_device", "memory_comparison", "MEMORY_COMPARISON_COLUMNS", "LIVE_COLUMNS", "UNFREED_COLUMNS",
           "CHURN_COLUMNS", "MEMORY_TABLE_ROWS"]

MEMORY_HOWTO = ("This run has no [memory] events, so there is no memory to show: profile it again with "
                "**profile_memory** ticked in the form's profiler options (tick **with_stack** and **record_shapes** "
                "too for torch's memory categories: parameters, optimizer state, activations, gradients …).")
"""The one line the Profile page shows for a trace made without memory events (fixed text: Markdown as it is)."""
MEMORY_HOWTO_RUNS = ("Neither run has [memory] events: profile them with **profile_memory** ticked in the Profile "
                     "form's profiler options to compare their memory.")

MEMORY_COMPARISON_COLUMNS = ["run", "device", "peak_allocated", "peak_reserved", "counted", "step", "op",
                             "peak_allocated_bytes", "peak_reserved_bytes"]
LIVE_COLUMNS = ["device", "op", "origin", "size", "blocks", "bytes"]
"""What was live at each device's peak (``MemorySection.live``), largest first."""
UNFREED_COLUMNS = ["device", "op", "size", "blocks", "steps", "bytes"]
"""What the window allocated and never freed (``MemorySection.unfreed``), largest first."""
CHURN_COLUMNS = ["step", "device", "allocated", "freed", "net", "peak", "events", "alloc_bytes", "freed_bytes",
                 "net_bytes", "peak_allocated_bytes"]
"""Per profiled step and device, what it allocated and freed (``MemorySection.churn``)."""
MEMORY_TABLE_ROWS = 10
"""The most rows per device the live-at-peak and never-freed tables keep (the rest are counted in a note)."""
TOP_LEVEL = "(top level)"
"""The op of an event at the top level of its lane (no op around it)."""


def _missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def memory_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """``step``, ``start_ns``, ``end_ns`` of the profiled steps, for the memory charts, from ``analyses.steps``
    (``step``, ``start_ns``, ``cpu_dur_us``)."""
    if steps is None or not len(steps):
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "start_ns": pd.Series(dtype="int64"),
                             "end_ns": pd.Series(dtype="int64")})
    start = steps["start_ns"].astype("int64")
    return pd.DataFrame({"step": steps["step"].astype("int64").to_numpy(), "start_ns": start.to_numpy(),
                         "end_ns": (start + (steps["cpu_dur_us"].astype(float) * 1000).round().astype("int64"))
                         .to_numpy()})


def _as_steps(steps: Optional[pd.DataFrame]) -> pd.DataFrame:
    """Steps from ``analyses.steps`` (with ``cpu_dur_us``) or already :func:`memory_steps`'s."""
    if steps is not None and "cpu_dur_us" in steps.columns:
        return memory_steps(steps)
    return steps if steps is not None else memory_steps(None)


def _chain_text(chain) -> str:
    if _missing(chain):
        return ""
    if isinstance(chain, (list, tuple)):
        chain = " › ".join(str(c) for c in chain)
    return chain_tail(str(chain))


def _relative(peak: Mapping) -> Optional[tuple[str, str]]:
    """(label, why) when the device's level counts from the window's start (``analyses.memory.RELATIVE_BASES``)."""
    return RELATIVE_BASES.get(str(peak.get("basis", "total")))


def _when(peak: Mapping, origin_ns: Optional[int], has_steps: bool) -> str:
    """When the peak happened, as a clause (", ..."), or "" when it cannot be said."""
    if bool(peak.get("at_opening", False)):
        return ", when the window opened (before its first event)"
    if origin_ns is None or _missing(peak.get("peak_ns")):
        return ""
    ms = (int(peak["peak_ns"]) - int(origin_ns)) / 1e6
    if not has_steps:
        return f", {ms:,.2f} ms after the first memory event"
    if ms < 0:
        return f", {-ms:,.2f} ms before the first step"
    if _missing(peak.get("step")):  # (between steps or after the last: in none of them)
        return f", {ms:,.2f} ms after the first step began, outside every step"
    return f", {ms:,.2f} ms into the profiled steps"


def _window_change(first: float, last: float, relative: bool) -> str:
    """How the window ended against how it began, as sentences: the window's, from its first memory event to its
    last (events outside every step among them), not the steps'."""
    grew, fell = last > first, last < first
    over, gave = "the window", "what the window allocated, it gave back"
    if relative:
        change = last - first
        return (f" The window ended with {human_bytes(change)} more allocated than at its start: memory grew over "
                f"{over}." if grew else
                f" The window ended with {human_bytes(-change)} less allocated than at its start." if fell else
                f" The window ended where it began: {gave}.")
    text = f" The window began with {human_bytes(first)} allocated and ended with {human_bytes(last)}"
    return text + (f": memory grew over {over}." if grew else f": {gave}." if not fell else ".")


def peak_sentence(peak: Mapping, origin_ns: Optional[int] = None, has_steps: bool = True) -> str:
    """The peak of one device in a sentence: how much was allocated (and reserved), when, in which step and op, and
    where the window began and ended. ``peak``: a row of ``memory_peaks``. ``origin_ns``: the first profiled step's
    start, or, ``has_steps`` False, the first memory event (the times are said from it, and no step is named then).
    On a device whose level counts from the window's start (its ``basis``: a trace without totals, a CPU) it says so
    and why, and gives the window's change instead of levels the trace cannot know. Plain text (it quotes the
    trace's op)."""
    device = str(peak.get("device"))
    relative = _relative(peak)
    text = f"{device} peaked at {human_bytes(float(peak['peak_allocated_bytes']))} allocated"
    if relative:
        text += f" {relative[0]}"
    reserved = peak.get("peak_reserved_bytes")
    if not _missing(reserved):
        text += f" ({human_bytes(float(reserved))} reserved at most)"
    text += _when(peak, origin_ns, has_steps)
    step = peak.get("step")
    if not _missing(step):
        text += f", in step {int(step)}"
    op = peak.get("op")
    if not _missing(op) and str(op):
        text += f", inside {op}"
        chain = _chain_text(peak.get("call_chain"))
        if chain and chain != str(op):
            text += f" (called from {chain})"
    text += "."
    first, last = peak.get("first_allocated_bytes"), peak.get("last_allocated_bytes")
    if not _missing(first) and not _missing(last):
        text += _window_change(float(first), float(last), bool(relative))
    if relative:
        text += f" {relative[0][0].upper()}{relative[0][1:]}: {relative[1]}."
    return text


@dataclass
class MemorySection:
    """What the Profile page's memory section shows. ``has_events`` False: only ``note_markdown`` (why there is no
    memory to show: :data:`MEMORY_HOWTO`, or that the run recorded memory and its steps made no event)."""

    has_events: bool
    timeline: pd.DataFrame
    """For the chart: the analyses' timeline with ``allocated_bytes`` the allocated level (``level_bytes``)."""
    peaks: pd.DataFrame
    steps: pd.DataFrame
    origin_ns: Optional[int]
    sentences: list[str] = field(default_factory=list)
    live: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LIVE_COLUMNS))
    unfreed: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=UNFREED_COLUMNS))
    churn: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CHURN_COLUMNS))
    table_notes: list[str] = field(default_factory=list)
    """Plain sentences about the tables: rows left out, devices whose blocks cannot be followed, figures counted
    from the window's start."""
    note_markdown: str = ""
    note_text: str = ""
    categories: Optional[pd.DataFrame] = None
    categories_note: Optional[str] = None


def _device_order(peaks: pd.DataFrame) -> list[str]:
    """The devices of ``peaks``, the main one (:func:`main_device`) first, then by name."""
    main = main_device(peaks)
    return sorted((str(d) for d in peaks["device"]), key=lambda d: (d != main, d))


def _op_text(op, origin: str = "window") -> str:
    if not _missing(op) and str(op):
        return str(op)
    return "" if origin == BEFORE_WINDOW else TOP_LEVEL


def _top_per_device(df: pd.DataFrame, order: list[str], what: str, notes: list[str]) -> pd.DataFrame:
    parts = []
    for dev in order:
        g = df[df["device"].astype(str) == dev]
        if len(g) > MEMORY_TABLE_ROWS:
            notes.append(f"{dev}: the {MEMORY_TABLE_ROWS} largest rows of {len(g)} {what} are listed "
                         f"({human_bytes(float(g['bytes'].iloc[MEMORY_TABLE_ROWS:].sum()))} more in the rest).")
        parts.append(g.head(MEMORY_TABLE_ROWS))
    return pd.concat(parts, ignore_index=True) if parts else df.iloc[0:0]


def _live_table(live: pd.DataFrame, order: list[str], notes: list[str]) -> pd.DataFrame:
    if live is None or not len(live):
        return pd.DataFrame(columns=LIVE_COLUMNS)
    live = live.sort_values("bytes", ascending=False, kind="stable")
    t = pd.DataFrame({"device": live["device"].astype(str),
                      "op": [_op_text(o, g) for o, g in zip(live["op"], live["origin"])],
                      "origin": live["origin"].astype(str), "size": [human_bytes(float(b)) for b in live["bytes"]],
                      "blocks": pd.array(live["blocks"].tolist(), dtype="Int64"),
                      "bytes": live["bytes"].astype("int64")})
    return _top_per_device(t, order, "live at the peak", notes)[LIVE_COLUMNS]


def _unfreed_table(unfreed: pd.DataFrame, order: list[str], notes: list[str]) -> pd.DataFrame:
    if unfreed is None or not len(unfreed):
        return pd.DataFrame(columns=UNFREED_COLUMNS)
    u = unfreed.sort_values("bytes", ascending=False, kind="stable")
    t = pd.DataFrame({"device": u["device"].astype(str), "op": [_op_text(o) for o in u["op"]],
                      "size": [human_bytes(float(b)) for b in u["bytes"]],
                      "blocks": u["blocks"].astype("int64"),
                      "steps": [", ".join(str(int(x)) for x in s) for s in u["steps"]],
                      "bytes": u["bytes"].astype("int64")})
    return _top_per_device(t, order, "never freed", notes)[UNFREED_COLUMNS]


def _signed(n: float) -> str:
    return ("+" if n > 0 else "") + human_bytes(n)


def _churn_table(churn: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    if churn is None or not len(churn):
        return pd.DataFrame(columns=CHURN_COLUMNS)
    rank = {d: k for k, d in enumerate(order)}
    c = churn.assign(_dev=[rank.get(str(d), len(rank)) for d in churn["device"]]).sort_values(
        ["_dev", "step"], kind="stable")
    return pd.DataFrame({"step": c["step"].astype("int64"), "device": c["device"].astype(str),
                         "allocated": [human_bytes(float(b)) for b in c["alloc_bytes"]],
                         "freed": [human_bytes(float(b)) for b in c["freed_bytes"]],
                         "net": [_signed(float(b)) for b in c["net_bytes"]],
                         "peak": [human_bytes(float(b)) for b in c["peak_allocated_bytes"]],
                         "events": c["events"].astype("int64"), "alloc_bytes": c["alloc_bytes"].astype("int64"),
                         "freed_bytes": c["freed_bytes"].astype("int64"), "net_bytes": c["net_bytes"].astype("int64"),
                         "peak_allocated_bytes": c["peak_allocated_bytes"].astype("int64")}).reset_index(drop=True)


def _no_events_note(memory: Any) -> tuple[str, str]:
    """(Markdown, plain text) of why a trace without memory events has nothing to show."""
    note = (getattr(memory, "summary", None) or {}).get("note")
    if note == NOTHING_RECORDED_TEXT:
        return md_text(note), note
    return MEMORY_HOWTO, MEMORY_HOWTO.replace("**", "")


def memory_section(memory: Any, steps: Optional[pd.DataFrame] = None, categories: Optional[pd.DataFrame] = None,
                   categories_note: Optional[str] = None) -> MemorySection:
    """The memory section of a run from its memory report (``Report.memory``, ``analyses.MemoryReport``), its steps
    (``analyses.steps``, or already :func:`memory_steps`) and torch's categories (``store.memory_categories``; empty
    or None when the run has none, ``categories_note`` saying why). Times of the charts and sentences run from the
    first profiled step's start (else the first memory event)."""
    st = _as_steps(steps)
    timeline, peaks = memory.timeline, memory.peaks
    if not len(timeline):
        md, plain = _no_events_note(memory)
        return MemorySection(False, timeline, peaks, st, None, note_markdown=md, note_text=plain,
                             categories=categories, categories_note=categories_note)
    origin = int(st["start_ns"].min()) if len(st) else int(timeline["start_ns"].min())
    order = _device_order(peaks)
    by_device = {str(r["device"]): r for r in peaks.to_dict("records")}
    sentences = [peak_sentence(by_device[d], origin, has_steps=bool(len(st))) for d in order]
    notes: list[str] = []
    live = _live_table(memory.live_at_peak, order, notes)
    unfreed = _unfreed_table(memory.unfreed, order, notes)
    blind = [d for d in order if not bool(by_device[d].get("has_addresses", True))]
    if blind:
        notes.append(f"{', '.join(blind)}: the trace's [memory] events have no addresses, so no block can be "
                     "followed from its allocation to its free: nothing is listed as live at the peak or never "
                     "freed there.")
    relative = [d for d in order if _relative(by_device[d])]
    for label in dict.fromkeys(_relative(by_device[d])[0] for d in relative):
        devs = [d for d in relative if _relative(by_device[d])[0] == label]
        notes.append(f"{', '.join(devs)}: the per-step peaks are {label} (see above); what each step allocated, "
                     "freed and left behind is the device's own.")
    cats = categories if categories is not None and len(categories) else None
    return MemorySection(True, timeline.assign(allocated_bytes=timeline["level_bytes"].astype(float)), peaks, st,
                         origin, sentences, live, unfreed, _churn_table(memory.churn, order), notes,
                         categories=cats, categories_note=None if cats is not None else categories_note)


def main_device(peaks: pd.DataFrame) -> Optional[str]:
    """The device whose memory a run is about: the accelerator with the highest allocated peak, else the CPU."""
    if peaks is None or not len(peaks):
        return None
    p = peaks.assign(_acc=peaks["device"].astype(str).map(device_of) != "cpu").sort_values(
        ["_acc", "peak_allocated_bytes"], ascending=[False, False])
    return str(p["device"].iloc[0])


def memory_comparison(runs: Mapping[str, tuple]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The Runs page's memory comparison: ``runs`` maps a run's label to ``(memory, steps)``: its memory report
    (``Report.memory``) and its steps (``analyses.steps`` or :func:`memory_steps`).

    Returns (table, overlay): the table has one row per run and device, :data:`MEMORY_COMPARISON_COLUMNS` (the peaks
    as text and in bytes; ``counted`` says how a device's level is counted where it leaves out what was allocated
    before the window; a run without memory events has one row saying so); the overlay is the allocated level of
    each run's main device (:func:`main_device`) over time, ``run``, ``device``, ``t_ms`` (ms from that run's first
    profiled step), ``allocated_bytes``, for ``charts.memory_comparison_chart``."""
    rows, lines = [], []
    for label, (memory, steps) in runs.items():
        timeline, peaks = memory.timeline, memory.peaks
        if timeline is None or not len(timeline):
            rows.append({"run": label, "device": "", "peak_allocated": "no [memory] events", "peak_reserved": "",
                         "counted": "", "step": pd.NA, "op": "", "peak_allocated_bytes": pd.NA,
                         "peak_reserved_bytes": pd.NA})
            continue
        for r in peaks.sort_values("device").to_dict("records"):
            res = r.get("peak_reserved_bytes")
            rel = _relative(r)
            rows.append({"run": label, "device": str(r["device"]),
                         "peak_allocated": human_bytes(float(r["peak_allocated_bytes"])),
                         "peak_reserved": "" if _missing(res) else human_bytes(float(res)),
                         "counted": rel[0] if rel else "",
                         "step": pd.NA if _missing(r.get("step")) else int(r["step"]),
                         "op": "" if _missing(r.get("op")) else str(r["op"]),
                         "peak_allocated_bytes": int(r["peak_allocated_bytes"]),
                         "peak_reserved_bytes": pd.NA if _missing(res) else int(res)})
        st = _as_steps(steps)
        origin = int(st["start_ns"].min()) if len(st) else int(timeline["start_ns"].min())
        device = main_device(peaks) or str(timeline["device"].iloc[0])
        g = timeline[timeline["device"].astype(str) == device].sort_values("start_ns", kind="stable")
        lines.append(pd.DataFrame({"run": label, "device": device,
                                   "t_ms": (g["start_ns"].astype("int64") - origin) / 1e6,
                                   "allocated_bytes": g["level_bytes"].astype(float)}))
    table = pd.DataFrame(rows, columns=MEMORY_COMPARISON_COLUMNS)
    table["step"] = table["step"].astype("Int64")
    for c in ("peak_allocated_bytes", "peak_reserved_bytes"):
        table[c] = table[c].astype("Int64")
    overlay = (pd.concat(lines, ignore_index=True) if lines else
               pd.DataFrame({"run": pd.Series(dtype=object), "device": pd.Series(dtype=object),
                             "t_ms": pd.Series(dtype=float), "allocated_bytes": pd.Series(dtype=float)}))
    return table, overlay
