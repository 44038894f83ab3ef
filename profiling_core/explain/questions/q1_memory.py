"""Question 1, the profiler table's memory columns (``q1.memory``): where the memory goes, from the trace's
``[memory]`` events (``analyses.memory``): each device's peak and where it happened, what was allocated before the
window and still live at the peak, what the window allocated that was live there, and what the window never freed;
or, without events, how to record them."""
from __future__ import annotations

import pandas as pd

from ...analyses.memory import BEFORE_WINDOW, RELATIVE_BASES
from ...units import human_bytes
from .base import Finding, _short

TOP_LIVE = 3


def _blocks(n) -> str:
    return f"{int(n)} block{'s' if int(n) != 1 else ''}"


def _live(m, dev: str, origin: str):
    """The rows of ``live_at_peak`` of this device and origin."""
    live = m.live_at_peak
    return live[(live["device"] == dev) & (live["origin"] == origin)] if len(live) else live


def _peak_clause(pk: dict, before_bytes: int) -> str:
    """The device's peak: how much, when, where, and how much of it was allocated before the window."""
    relative = RELATIVE_BASES.get(pk["basis"])
    s = f"{pk['device']} peaks at {human_bytes(pk['peak_allocated_bytes'])} allocated"
    if relative:
        s += f" {relative[0]}"
    if pk["reserved_at_peak_bytes"] == pk["reserved_at_peak_bytes"]:  # (the peak's event may lack a reserved figure)
        s += f" ({human_bytes(pk['reserved_at_peak_bytes'])} reserved by the allocator then)"
    if pk["at_opening"]:
        s += ", when the window opened (before its first event)"
    if pk["op"]:
        s += f", in {_short(pk['op'])}"
    if not pd.isna(pk["step"]):
        s += f" (step {int(pk['step'])})"  # (not :g, which writes step 1,000,000 as 1e+06)
    if relative:
        return s + f": {relative[1]}"
    if before_bytes > 0:  # what was allocated before the window and is still live at the peak
        return s + (f"; {human_bytes(before_bytes)} of it was allocated before the profiler's window (weights, "
                    "state, tensors built before it)")
    if not pk["has_addresses"] and pk["first_allocated_bytes"] > 0:  # (no blocks: what is still live is unknown)
        return s + (f"; the window opened with {human_bytes(pk['first_allocated_bytes'])} allocated (weights, state, "
                    "tensors built before it)")
    return s


def _q1_memory(r, config=None) -> list[Finding]:
    m = r.memory
    if not m.has_events:
        return [Finding("q1.memory", 1, "No memory events", m.summary["note"], {"memory_events": 0})]
    parts, devices = [], {}
    for pk in m.peaks.to_dict(orient="records"):
        dev = pk["device"]
        before_bytes = int(_live(m, dev, BEFORE_WINDOW)["bytes"].sum())
        s = _peak_clause(pk, before_bytes)
        live = _live(m, dev, "window")
        top = live.head(TOP_LIVE)
        if len(top):
            rest = live.iloc[len(top):]
            s += ". Allocated in the window and live at the peak: " + ", ".join(
                f"{_short(op) if op else 'top level'} {human_bytes(b)} in {_blocks(n)}"
                for op, b, n in zip(top["op"], top["bytes"], top["blocks"])) + (
                f", and {human_bytes(int(rest['bytes'].sum()))} from {len(rest)} more op{'s' if len(rest) > 1 else ''}"
                if len(rest) else "")
        u = m.unfreed[m.unfreed["device"] == dev] if len(m.unfreed) else m.unfreed
        if pk["has_addresses"]:
            if len(u):
                s += (f". The window left {human_bytes(int(u['bytes'].sum()))} in {_blocks(u['blocks'].sum())} "
                      f"never freed, the most from {_short(u['op'].iloc[0]) if u['op'].iloc[0] else 'the top level'}")
            else:
                s += ". Every block the window allocated it also freed"
        parts.append(s + ".")
        devices[dev] = {"peak_allocated_bytes": int(pk["peak_allocated_bytes"]),
                        "reserved_at_peak_bytes": None if pk["reserved_at_peak_bytes"] != pk["reserved_at_peak_bytes"]
                        else float(pk["reserved_at_peak_bytes"]),
                        "op": pk["op"], "step": None if pd.isna(pk["step"]) else int(pk["step"]),
                        "basis": pk["basis"], "first_allocated_bytes": int(pk["first_allocated_bytes"]),
                        "live_before_window_bytes": before_bytes,
                        "live_at_peak": [{"op": op, "bytes": int(b), "blocks": int(n)}
                                         for op, b, n in zip(top["op"], top["bytes"], top["blocks"])],
                        "unfreed_bytes": int(u["bytes"].sum()) if len(u) else 0}
    text = " ".join(parts)
    return [Finding("q1.memory", 1, "Where the memory goes", text,
                    {"memory_events": int(m.summary["events"]), "devices": devices})]
