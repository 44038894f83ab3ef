"""Question 4, why the GPU lane is offset from the CPU lane (``q4.offset``): each GPU op's start against its launch
call's, and whether the queue grows."""
from __future__ import annotations

from ...units import format_duration_us as _us
from .base import NO_GPU_TEXT, Finding, _num


def _q4_offset(r, config=None) -> list[Finding]:
    if not r.has_gpu:
        return [Finding("q4.offset", 4, "No GPU lane", NO_GPU_TEXT + ", so there is no CPU-to-GPU offset to read.",
                        {"gpu_ops": 0})]
    ll = r.launch_latency
    if ll.empty:
        return [Finding("q4.offset", 4, "No launch pairs", "The trace has GPU ops but no flow or correlation links "
                        "them to launch calls, so the queueing delay cannot be measured.",
                        {"gpu_ops": int(len(r.gpu_ops)), "pairs": 0})]
    lat = ll["latency_us"]
    ev = {"pairs": int(len(ll)), "median_us": _num(lat.median()), "min_us": _num(lat.min()),
          "max_us": _num(lat.max()), "first_us": _num(lat.iloc[0]), "last_us": _num(lat.iloc[-1]),
          "paired_by": sorted(set(ll["paired_by"]))}
    text = (f"Each GPU op started a median {_us(lat.median())} after its launch call began (min {_us(lat.min())}, "
            f"max {_us(lat.max())}, over {len(ll)} ops paired by {' and '.join(ev['paired_by'])}).")
    if len(ll) >= 3 and lat.iloc[-1] > 3 * max(lat.iloc[0], 1e-9):
        text += (f" The delay grows from {_us(lat.iloc[0])} for the first op to {_us(lat.iloc[-1])} for the last: the "
                 f"CPU launches faster than the GPU executes, so work queues up and the GPU lane drifts right.")
    ov = r.profiler_table[r.profiler_table["name"].astype(str).str.contains("Activity Buffer Request")]
    if len(ov):
        ev["activity_buffer_request_us"] = _num(ov["cpu_total_us"].sum())
        text += f" The profiler's own 'Activity Buffer Request' took {_us(ov['cpu_total_us'].sum())} on the CPU."
    return [Finding("q4.offset", 4, "CPU-to-GPU offset", text, ev)]
