"""``memory_peak``: a device's peak far above the memory its steps keep: a temporary (an activation, an
intermediate, a copy) that could be freed sooner, computed in chunks, or recomputed.

The steady state is what a step leaves allocated when it ends (the median of the steps' end levels,
``analyses.memory.memory_churn``), or, in a trace without steps, the higher of the window's first and last levels
(what the window keeps: the text then names no step).
The rule speaks when the peak exceeds it by :data:`PEAK_OVER_STEADY_AT` times the steady state and by at least
:data:`MIN_TRANSIENT_BYTES`, and names the op at the peak, its call chain and what was live there. A device whose
level counts from the window's start (``analyses.memory.RELATIVE_BASES``: a trace without totals, a CPU) is left
out: the excess is known, the steady state is not (what was allocated before the window is in neither), so the
rule cannot say the peak is far above it. So is a device whose peak is the level the window opened with
(``at_opening``): what rose above the steady state was allocated before the window, by no op the trace holds, and
no temporary of the steps made it.
The text names what makes half the excess or more. Where the blocks live at the peak that the window never frees
(still held when it ended) do, or the level never falls back by half the excess after the peak
(``low_after_peak_bytes``: memory allocated with no event of its own, the totals rising between events, stays too),
the peak stays. Else, where the window's blocks live at the peak and freed after it do, temporaries make it (without
addresses, where no block can be followed, what the level gave back after the peak is taken for them). Where neither
does, the rule is left out: no temporary of the steps made most of the peak (as where blocks allocated before the
window and freed in it, live at the peak, make most of the excess: a cache cleared in the first step, at_opening's
case with a step's work on top)."""
from __future__ import annotations

import pandas as pd

from ....analyses.memory import RELATIVE_BASES, chain_tail
from ....units import human_bytes
from ..base import Diagnosis, _Ctx

PEAK_OVER_STEADY_AT = 1.0
"""How far above the steady state, as a multiple of it, the peak must rise: at 1.0 the temporaries at the peak are as
large as everything the steps keep (weights, state, caches), so freeing or chunking them would halve the peak."""
MIN_TRANSIENT_BYTES = 64 << 20
"""The least excess over the steady state worth naming (64 MiB): below it no device runs short for it, and small
CPU runs (a few KiB of temporaries over none kept) would be named for nothing."""
TOP_LIVE = 3


def _steady(r, device: str, peak_row) -> tuple[float, str, str]:
    """(the level the device keeps, what keeps it: its steps or, without any, the window, how it was read)."""
    ch = r.memory.churn
    ch = ch[ch["device"] == device] if len(ch) else ch
    if len(ch):
        return float(ch["end_allocated_bytes"].median()), "its steps keep", "the median level at the end of a step"
    return float(max(peak_row["first_allocated_bytes"], peak_row["last_allocated_bytes"])), "the window keeps", \
        "the higher of the levels at the window's start and end"


def _rule_memory_peak(c: _Ctx) -> Diagnosis | None:
    m = c.report.memory
    if not m.has_events:
        return None
    found = []
    for pk in m.peaks.to_dict(orient="records"):
        if pk["basis"] in RELATIVE_BASES or pk["at_opening"]:
            continue
        steady, keeper, how = _steady(c.report, pk["device"], pk)
        extra = pk["peak_allocated_bytes"] - steady
        if extra >= MIN_TRANSIENT_BYTES and extra >= PEAK_OVER_STEADY_AT * max(steady, 0.0):
            live = m.live_at_peak
            live = live[(live["device"] == pk["device"]) & (live["origin"] == "window")] if len(live) else live
            kept = int(live["kept_bytes"].sum()) if len(live) else 0  # (live at the peak, never freed in the window)
            stay = int(pk["low_after_peak_bytes"] - steady)  # (of the excess, what the level never gave back)
            temps = int(live["bytes"].sum()) - kept if pk["has_addresses"] else \
                int(pk["peak_allocated_bytes"] - pk["low_after_peak_bytes"])  # (freed after the peak)
            what = "kept" if kept >= extra / 2 else "level" if stay >= extra / 2 else "temps" if temps >= extra / 2 \
                else None
            if what:
                found.append((extra, pk, steady, keeper, how, live, kept, stay, what))
    if not found:
        return None
    extra, pk, steady, keeper, how, live, kept, stay, what = max(found, key=lambda x: x[0])
    dev = pk["device"]
    stays = what != "temps"
    rest, live = live.iloc[TOP_LIVE:], live.head(TOP_LIVE)
    where = f" in {pk['op']}" if pk["op"] else ""
    step = f" (step {int(pk['step'])})" if not pd.isna(pk["step"]) else ""  # (not :g: step 1,000,000 is 1e+06)
    text = (f"{dev} peaks at {human_bytes(pk['peak_allocated_bytes'])} allocated{where}{step}, "
            f"{human_bytes(extra)} above the {human_bytes(steady)} {keeper} ({how}): "
            + (f"most of it stays: {human_bytes(kept)} of the blocks live at the peak are never freed in the window "
               "(still held when it ended), so no temporary made it." if what == "kept" else
               f"most of it stays: after the peak the level never falls below "
               f"{human_bytes(pk['low_after_peak_bytes'])}, {human_bytes(stay)} above the {human_bytes(steady)} "
               f"{keeper}, so temporaries do not make most of it"
               + (f" ({human_bytes(kept)} of the blocks live at the peak are never freed in the window)." if kept
                  else ".") if what == "level" else
               "temporaries that live only around the peak make most of it"
               + (f" ({human_bytes(kept)} of the blocks live there are never freed in the window)." if kept else ".")))
    if pk["call_chain"]:
        text += f" Call chain at the peak: {chain_tail(pk['call_chain'])}."
    if len(live):
        text += " Allocated in the window and live at the peak: " + ", ".join(
            f"{op or 'top level'} {human_bytes(b)} in {n} block{'s' if n != 1 else ''}"
            for op, b, n in zip(live["op"], live["bytes"], live["blocks"])) + (
            f", and {human_bytes(int(rest['bytes'].sum()))} from {len(rest)} more op{'s' if len(rest) > 1 else ''}"
            if len(rest) else "") + "."
    fix = ("What stays allocated after the peak is no temporary: find what keeps it (the ops whose blocks are never "
           "freed: a cache, a list that keeps tensors, state built once in a late step) and free it, keep it on the "
           "host, or give it a fixed size; torch.cuda.memory._record_memory_history() names every block's stack."
           if stays else
           "Shorten the temporaries' lives: free intermediates as soon as they are used (del, in-place ops, no "
           "references kept for logging), compute the largest one in chunks (e.g. the loss over the vocabulary, "
           "attention over blocks of the sequence), run inference under torch.inference_mode(), and in training "
           "recompute activations instead of keeping them (torch.utils.checkpoint) or use a smaller micro-batch "
           "with gradient accumulation. torch.cuda.memory._record_memory_history() names every block's stack.")
    ev = {"device": dev, "peak_allocated_bytes": int(pk["peak_allocated_bytes"]), "steady_bytes": steady,
          "steady_basis": how, "excess_bytes": extra, "op": pk["op"], "step": int(pk["step"]) if step else None,
          "basis": pk["basis"], "threshold": PEAK_OVER_STEADY_AT, "min_excess_bytes": MIN_TRANSIENT_BYTES,
          "kept_bytes": kept, "stays_bytes": stay,
          "live_at_peak": [{"op": op, "bytes": int(b), "blocks": int(n)}
                           for op, b, n in zip(live["op"], live["bytes"], live["blocks"])]}
    title = "Memory peaks far above what the " + ("steps keep" if keeper == "its steps keep" else "window keeps")
    return Diagnosis("memory_peak", title, text, fix, None,
                     "memory, not time: the bytes above the steady state are what the change can save", ev)
