"""What the pages show about memory, from the analyses' frames: the section of one run, the comparison of several.

The analyses give, for a trace with ``[memory]`` events (a run profiled with ``profile_memory``), the timeline (one
row per event: ``device``, ``start_ns``, ``bytes``, ``allocated_bytes``, ``reserved_bytes``, ``step``, ``op``) and
the peaks (one row per device: ``device``, ``peak_allocated_bytes``, ``peak_reserved_bytes``, ``peak_ns``, ``step``,
``op``, ``call_chain``, ``first_allocated_bytes``, ``last_allocated_bytes``). :func:`memory_section` turns them, with
the run's steps and torch's categories (``profiling_core.store.memory_categories``), into what the Profile page
draws and says; :func:`memory_comparison` into the Runs page's table and overlay. Texts here are plain: they quote
op names from the trace, so a page shows them through ``md_text``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

import pandas as pd

from ..units import human_bytes

__all__ = ["MEMORY_HOWTO", "MEMORY_HOWTO_RUNS", "MemorySection", "memory_section", "memory_steps", "peak_sentence",
           "main_device", "memory_comparison", "MEMORY_COMPARISON_COLUMNS"]

MEMORY_HOWTO = ("This run has no [memory] events, so there is no memory to show: profile it again with "
                "**profile_memory** ticked in the form's profiler options (tick **with_stack** and **record_shapes** "
                "too for torch's memory categories: parameters, optimizer state, activations, gradients …).")
"""The one line the Profile page shows for a run without memory events (fixed text: Markdown as it is)."""
MEMORY_HOWTO_RUNS = ("Neither run has [memory] events: profile them with **profile_memory** ticked in the Profile "
                     "form's profiler options to compare their memory.")

MEMORY_COMPARISON_COLUMNS = ["run", "device", "peak_allocated", "peak_reserved", "step", "op",
                             "peak_allocated_bytes", "peak_reserved_bytes"]


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


def _chain_text(chain) -> str:
    if _missing(chain):
        return ""
    if isinstance(chain, (list, tuple)):
        return " › ".join(str(c) for c in chain)
    return str(chain)


def peak_sentence(peak: Mapping, origin_ns: Optional[int] = None) -> str:
    """The peak of one device in a sentence: how much was allocated (and reserved), when, in which step and op, and
    where the window began and ended. ``peak``: a row of ``memory_peaks``. Plain text (it quotes the trace's op)."""
    device = str(peak.get("device"))
    text = f"{device} peaked at {human_bytes(float(peak['peak_allocated_bytes']))} allocated"
    reserved = peak.get("peak_reserved_bytes")
    if not _missing(reserved):
        text += f" ({human_bytes(float(reserved))} reserved at most)"
    if origin_ns is not None and not _missing(peak.get("peak_ns")):
        text += f", {(int(peak['peak_ns']) - int(origin_ns)) / 1e6:,.2f} ms into the profiled steps"
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
        text += (f" The window began with {human_bytes(float(first))} allocated and ended with "
                 f"{human_bytes(float(last))}")
        text += (": memory grew over the profiled steps." if float(last) > float(first) else
                 ": what the steps allocated, they gave back." if float(last) == float(first) else ".")
    return text


@dataclass
class MemorySection:
    """What the Profile page's memory section shows. ``has_events`` False: only :data:`MEMORY_HOWTO`."""

    has_events: bool
    timeline: pd.DataFrame
    peaks: pd.DataFrame
    steps: pd.DataFrame
    origin_ns: Optional[int]
    sentences: list[str] = field(default_factory=list)
    categories: Optional[pd.DataFrame] = None
    categories_note: Optional[str] = None


def memory_section(timeline: pd.DataFrame, peaks: pd.DataFrame, steps: Optional[pd.DataFrame] = None,
                   categories: Optional[pd.DataFrame] = None,
                   categories_note: Optional[str] = None) -> MemorySection:
    """The memory section of a run from the analyses' ``memory_timeline`` and ``memory_peaks``, its steps
    (``analyses.steps``, or already :func:`memory_steps`) and torch's categories (``store.memory_categories``; empty or
    None when the run has none, ``categories_note`` saying why). Times of the charts and sentences run from the first
    profiled step's start (else the first memory event)."""
    st = memory_steps(steps) if steps is not None and "cpu_dur_us" in steps.columns else (
        steps if steps is not None else memory_steps(None))
    has = timeline is not None and len(timeline) > 0
    if not has:
        return MemorySection(False, timeline, peaks, st, None, [], categories, categories_note)
    origin = int(st["start_ns"].min()) if len(st) else int(timeline["start_ns"].min())
    order = peaks.assign(_main=[str(d) == main_device(peaks) for d in peaks["device"]]).sort_values(
        ["_main", "device"], ascending=[False, True])
    sentences = [peak_sentence(r, origin) for r in order.drop(columns=["_main"]).to_dict("records")]
    cats = categories if categories is not None and len(categories) else None
    return MemorySection(True, timeline, peaks, st, origin, sentences, cats, None if cats is not None else
                         categories_note)


def main_device(peaks: pd.DataFrame) -> Optional[str]:
    """The device whose memory a run is about: the accelerator with the highest allocated peak, else the CPU."""
    if peaks is None or not len(peaks):
        return None
    p = peaks.assign(_acc=peaks["device"].astype(str) != "cpu").sort_values(
        ["_acc", "peak_allocated_bytes"], ascending=[False, False])
    return str(p["device"].iloc[0])


def memory_comparison(runs: Mapping[str, tuple]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The Runs page's memory comparison: ``runs`` maps a run's label to ``(timeline, peaks, steps)`` (the
    analyses' frames; steps from ``analyses.steps`` or :func:`memory_steps`).

    Returns (table, overlay): the table has one row per run and device, :data:`MEMORY_COMPARISON_COLUMNS` (the peaks
    as text and in bytes; a run without memory events has one row saying so); the overlay is the allocated bytes of
    each run's main device (:func:`main_device`) over time, ``run``, ``device``, ``t_ms`` (ms from that run's first
    profiled step), ``allocated_bytes``, for ``charts.memory_comparison_chart``."""
    rows, lines = [], []
    for label, (timeline, peaks, steps) in runs.items():
        if timeline is None or not len(timeline):
            rows.append({"run": label, "device": "", "peak_allocated": "no [memory] events", "peak_reserved": "",
                         "step": pd.NA, "op": "", "peak_allocated_bytes": pd.NA, "peak_reserved_bytes": pd.NA})
            continue
        for r in peaks.sort_values("device").to_dict("records"):
            res = r.get("peak_reserved_bytes")
            rows.append({"run": label, "device": str(r["device"]),
                         "peak_allocated": human_bytes(float(r["peak_allocated_bytes"])),
                         "peak_reserved": "" if _missing(res) else human_bytes(float(res)),
                         "step": pd.NA if _missing(r.get("step")) else int(r["step"]),
                         "op": "" if _missing(r.get("op")) else str(r["op"]),
                         "peak_allocated_bytes": int(r["peak_allocated_bytes"]),
                         "peak_reserved_bytes": pd.NA if _missing(res) else int(res)})
        st = memory_steps(steps) if steps is not None and "cpu_dur_us" in steps.columns else steps
        origin = int(st["start_ns"].min()) if st is not None and len(st) else int(timeline["start_ns"].min())
        device = main_device(peaks) or str(timeline["device"].iloc[0])
        g = timeline[timeline["device"].astype(str) == device].sort_values("start_ns", kind="stable")
        lines.append(pd.DataFrame({"run": label, "device": device,
                                   "t_ms": (g["start_ns"].astype("int64") - origin) / 1e6,
                                   "allocated_bytes": g["allocated_bytes"].astype(float)}))
    table = pd.DataFrame(rows, columns=MEMORY_COMPARISON_COLUMNS)
    table["step"] = table["step"].astype("Int64")
    for c in ("peak_allocated_bytes", "peak_reserved_bytes"):
        table[c] = table[c].astype("Int64")
    overlay = (pd.concat(lines, ignore_index=True) if lines else
               pd.DataFrame({"run": pd.Series(dtype=object), "device": pd.Series(dtype=object),
                             "t_ms": pd.Series(dtype=float), "allocated_bytes": pd.Series(dtype=float)}))
    return table, overlay
