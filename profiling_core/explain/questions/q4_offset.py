"""Question 4, why the GPU lane is offset from the CPU lane (``q4.offset``): each GPU op's start against its launch
call's, and whether the queue grows."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...analyses._shared import union_ns
from ...analyses.steps import STARVED_AT
from ...units import format_duration_us as _us
from ...units import format_share
from .base import NO_GPU_TEXT, Finding, _n, _num


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
    med = float(lat.median())
    text = (f"Each GPU op started a median {_us(abs(med))} {'after' if med >= 0 else 'before'} its launch call began "
            f"(min {offset_text(float(lat.min()))}, max {offset_text(float(lat.max()))}, over {_n(len(ll), 'op')} "
            f"paired by {' and '.join(ev['paired_by'])}).")
    early = int((lat < 0).sum())
    if early:  # no op starts before it is launched: the timestamps, not the queue, say so
        ev["started_before_launch"] = early
        text += f" {started_before_launch_text(early, len(ll))} and its growth is not read from them."
    else:
        text += _growth(ll, ev, r.steps)
    ov = r.profiler_table[r.profiler_table["name"].astype(str).str.contains("Activity Buffer Request")]
    if len(ov):
        ev["activity_buffer_request_us"] = _num(ov["cpu_total_us"].sum())
        text += f" The profiler's own 'Activity Buffer Request' took {_us(ov['cpu_total_us'].sum())} on the CPU."
    return [Finding("q4.offset", 4, "CPU-to-GPU offset", text, ev)]


def offset_text(us: float) -> str:
    """A GPU op's start after its launch call's (µs), as text: one that started before its call says so (no op can:
    the trace's GPU and CPU times disagree). Question 4 and the Dispatch page say it so."""
    return _us(us) if us >= 0 else f"{_us(-us)} before its call"


def started_before_launch_text(early: int, pairs: int) -> str:
    """That ``early`` of ``pairs`` GPU ops started before their launch call began, and what that says (the trace's
    clocks, not a queue), as a sentence without its full stop. Question 4 and the Dispatch page say it so."""
    return (f"{early} of the {pairs} GPU ops started before their launch call began, which no launched op can: the "
            "trace's GPU and CPU timestamps disagree (clocks not aligned when it was recorded, or the events were "
            "edited), so these delays measure no queue")


GROWS_AT = 3.0
"""A delay this many times its starting value is a queue that grew."""

RISES_AT = 0.10
"""A delay that rose at every one of three steps or more, by this share of a step's CPU time per step on average (the
median step's), is a queue that grew too, however long the first one was (a first step that already waited behind
a warm-up step's kernel: 3.50, 6.55, 9.62 ms on an H100)."""

QUEUED_AT = 0.9
"""With fewer than two steps, a last GPU op's long wait is a queue of work only where the GPU ran earlier work for at
least this share of it (an op launched onto an idle GPU that starts late waited for something else)."""


HELD_WITHIN = 0.10
"""Steps whose first GPU op waited within this share of the last step's wait: the queue held its length, where at
least half the steps after the first (and two) did (a slow steady drift has only its last steps that close)."""


def _held_tail(first):
    """The last steps (a Series by step) whose first op's delay is within :data:`HELD_WITHIN` of the last step's."""
    last = float(first.iloc[-1])
    k = len(first)
    while k > 0 and abs(float(first.iloc[k - 1]) - last) <= HELD_WITHIN * max(last, 1e-9):
        k -= 1
    return first.iloc[k:]


def _drained(steps, numbers) -> Optional[float]:
    """The median time the GPU sat idle with nothing launched for it (``steps.gpu_starved_us``) in these steps after
    the first, when it did so in every one of them (more than :data:`~profiling_core.analyses.STARVED_AT` of the
    step): the queue emptied each step, so no backlog carried from one to the next. None otherwise."""
    s = steps[steps["step"].isin(numbers)].iloc[1:] if "gpu_starved_us" in steps else steps.iloc[:0]
    if s.empty or not (s["gpu_starved_us"] > STARVED_AT * s["cpu_dur_us"]).all():
        return None
    return float(s["gpu_starved_us"].median())


def _growth(ll, ev: dict, steps) -> str:
    """Whether the queue grows, read where it can: across the steps (each step's first GPU op against the first
    step's, :data:`GROWS_AT` times as long, or longer at every step, :data:`RISES_AT`: the CPU runs further ahead every
    step, the GPU lane drifts right; where the last steps' first ops waited
    alike, :func:`_held_tail`, it grew and then held; where the GPU ran dry in every later step, :func:`_drained`, no
    backlog carried over) or within them (the later half of a step's ops against its first, the queue drained by the
    next step); with fewer than two steps, the trace's last op against its first, where the GPU ran earlier work
    through most of the last op's wait (:data:`QUEUED_AT`)."""
    o = ll.sort_values("launch_start_ns", kind="stable")
    stepped = o[o["step"].notna()] if "step" in o else o.iloc[:0]
    if stepped["step"].nunique() >= 2:
        g = stepped.groupby("step", sort=False)["latency_us"]
        first, last = g.first(), g.last()
        ev.update(step_first_us={int(k): _num(v) for k, v in first.items()},
                  step_last_us={int(k): _num(v) for k, v in last.items()})
        held = _held_tail(first)  # (the last steps whose first ops waited as long as the last one's: it stopped growing)
        cpu = float(steps["cpu_dur_us"].median()) if "cpu_dur_us" in steps and len(steps) else float("nan")
        rose = (len(first) >= 3 and bool((first.diff().iloc[1:] > 0).all())
                and float(first.iloc[-1] - first.iloc[0]) / (len(first) - 1) >= RISES_AT * cpu)
        grows = first.iloc[-1] > GROWS_AT * max(first.iloc[0], 1e-9) or rose
        if grows and len(held) >= max(2, (len(first) - 1) / 2):
            span = (f"{_us(held.min())} each" if _us(held.min()) == _us(held.max())
                    else f"{_us(held.min())} to {_us(held.max())}")
            return (f" The queue grew and then held: the first GPU op of step {int(first.index[0])} started "
                    f"{_us(first.iloc[0])} after its launch, those of steps {int(held.index[0])} to "
                    f"{int(held.index[-1])} {span}: the CPU stays a bounded distance ahead of the GPU (a full launch "
                    "queue, or a wait that holds it back), so the lanes do not drift further apart.")
        dry = _drained(steps, [int(k) for k in first.index])
        if grows and dry is not None:
            return (f" The first GPU op of step {int(first.index[0])} started {_us(first.iloc[0])} after its launch, "
                    f"that of step {int(first.index[-1])} {_us(first.iloc[-1])}; but the GPU ran dry with nothing "
                    f"launched for it in every step after the first (a median {_us(dry)} each), so the queue empties "
                    "within each step and no backlog carries over: the lanes do not drift apart (a step's first op "
                    "waits behind the end of the work before it).")
        if grows:
            return (f" The queue grows across the steps: the first GPU op of step {int(first.index[0])} started "
                    f"{_us(first.iloc[0])} after its launch, that of step {int(first.index[-1])} "
                    f"{_us(first.iloc[-1])}: the CPU launches faster than the GPU executes, so work queues up and the "
                    "GPU lane drifts right.")
        late = stepped.groupby("step", sort=False)["latency_us"].agg(lambda x: x.iloc[len(x) // 2:].median())
        within = (late / first.where(first > 0)).median()
        if within > GROWS_AT:
            # (the later half's median against the first: the last op may wait less than the later half)
            return (f" Within each step the later ops wait longer than the first (a median {_us(first.median())} for a "
                    f"step's first GPU op, "
                    f"{_us(late.median())} for the later half of its ops, {_us(last.median())} for its last): the CPU "
                    "launches a step's work faster than the GPU runs it, "
                    f"and the queue drains before the next step (the first ops of steps {int(first.index[0])} and "
                    f"{int(first.index[-1])} waited {_us(first.iloc[0])} and {_us(first.iloc[-1])}), so the lanes do "
                    "not drift apart.")
        return ""
    lat = o["latency_us"]
    if len(o) >= 3 and lat.iloc[-1] > GROWS_AT * max(lat.iloc[0], 1e-9):
        busy = _busy_share(o, o.iloc[-1])
        ev["last_wait_busy_share"] = _num(busy)
        if busy >= QUEUED_AT:
            return (f" The last GPU op started {_us(lat.iloc[-1])} after its launch call, the GPU busy with earlier "
                    f"work for {format_share(busy)} of that wait, where the first started {_us(lat.iloc[0])} after its "
                    "own: by the end the CPU had launched faster than the GPU executes, so work queued up (with fewer "
                    "than two steps the trace cannot say where the queue grew or drained in between).")
    return ""


def _busy_share(ops, op) -> float:
    """The share of ``op``'s wait (from its launch call's start to its own start) in which the GPU ran other ops of
    ``ops`` (``launch_latency`` rows): where it is low, the op waited for something else than a queue of work."""
    a, b = int(op["launch_start_ns"]), int(op["gpu_start_ns"])
    if b <= a:
        return 0.0
    start = ops["gpu_start_ns"].to_numpy(dtype=np.int64)
    end = start + np.round(ops["gpu_dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64)
    return union_ns(np.clip(start, a, b), np.clip(end, a, b)) / (b - a)
