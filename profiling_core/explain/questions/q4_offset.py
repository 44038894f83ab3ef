"""Question 4, why the GPU lane is offset from the CPU lane (``q4.offset``): each GPU op's start against its launch
call's, and whether the queue grows."""
from __future__ import annotations

import numpy as np

from ...analyses.compile import outside_compiler
from ...analyses.steps import first_ops, queue_growth
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
    ll, left = outside_compiler(ll)  # not torch.compile's compiler's launches (its benchmarks)
    lat = ll["latency_us"]
    ev = {"pairs": int(len(ll)), "median_us": _num(lat.median()), "min_us": _num(lat.min()),
          "max_us": _num(lat.max()), "first_us": _num(lat.iloc[0]), "last_us": _num(lat.iloc[-1]),
          "paired_by": sorted(set(ll["paired_by"]))}
    med = float(lat.median())
    firsts = first_ops(ll)
    if len(firsts) < len(ll):  # calls of several ops (a CUDA graph's replay): the offset is each call's first op's
        fl = firsts["latency_us"]
        many = ll["launch_id"].value_counts()
        many = many[many > 1]
        graph = ll[ll["launch_id"].isin(many.index)]
        ev.update(median_us=_num(fl.median()), min_us=_num(fl.min()), max_us=_num(fl.max()), launches=int(len(fl)),
                  launches_of_several_ops=int(len(many)), their_ops=int(many.sum()))
        med = float(fl.median())
        apis = ", ".join(sorted(set(graph["launch_name"].astype(str)))) if "launch_name" in graph else "a graph launch"
        text = (f"Each launch call's first GPU op started a median {_us(abs(med))} "
                f"{'after' if med >= 0 else 'before'} the call began (min {offset_text(float(fl.min()))}, max "
                f"{offset_text(float(fl.max()))}, over {_n(len(fl), 'launch call')} paired by "
                f"{' and '.join(ev['paired_by'])}). {_n(len(many), 'call')} ({apis}) ran several GPU ops each, "
                f"{int(many.sum()):,} in all: a CUDA graph's replay runs its ops one after another, so a later one "
                f"starts after the graph's earlier ones (up to {_us(float(graph['latency_us'].max()))} after its "
                "call), its place in the graph rather than a queue; only each call's first op is read here.")
    else:
        text = (f"Each GPU op started a median {_us(abs(med))} {'after' if med >= 0 else 'before'} its launch call "
                f"began (min {offset_text(float(lat.min()))}, max {offset_text(float(lat.max()))}, over "
                f"{_n(len(ll), 'op')} paired by {' and '.join(ev['paired_by'])}).")
    if left:
        ev["compiler_pairs"] = left
        text += (f" The {left:,} GPU op{'s' if left != 1 else ''} launched inside torch.compile's compiler ranges "
                 "(compiling, benchmarking candidates under max-autotune, or recording a CUDA graph) are left out: "
                 "they are the compiler's.")
    early = int((lat < 0).sum())
    if early:  # no op starts before it is launched: the timestamps, not the queue, say so
        ev["started_before_launch"] = early
        text += f" {started_before_launch_text(early, len(ll))} and its growth is not read from them."
    else:
        text += _growth(r, ev)
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


def _growth(r, ev: dict) -> str:
    """What :func:`~profiling_core.analyses.steps.queue_growth` (the report's ``queue_growth``) says of the queue,
    as sentences with the figures it rests on; its state and figures go into the evidence."""
    q = r.summary.get("queue_growth") or queue_growth(r.launch_latency, r.steps)
    ev["queue"] = q["state"]
    if "step_first_us" in q:
        ev.update(step_first_us={k: _num(v) for k, v in q["step_first_us"].items()},
                  step_last_us={k: _num(v) for k, v in q["step_last_us"].items()})
    if "last_wait_busy_share" in q:
        ev["last_wait_busy_share"] = _num(q["last_wait_busy_share"])
    state = q["state"]
    if state is None:
        return ""
    if state == "queued_at_end":
        return (f" The last GPU op started {_us(q['last_us'])} after its launch call, the GPU busy with earlier "
                f"work for {format_share(q['last_wait_busy_share'])} of that wait, where the first started "
                f"{_us(q['first_us'])} after its own: by the end the CPU had launched faster than the GPU executes, so "
                "work queued up (with fewer than two steps the trace cannot say where the queue grew or drained in "
                "between).")
    first, last = q["step_first_us"], q["step_last_us"]
    a, b = next(iter(first)), next(reversed(first))
    if state == "grew_held":
        held = [first[k] for k in q["held_steps"]]
        span = (f"{_us(min(held))} each" if _us(min(held)) == _us(max(held))
                else f"{_us(min(held))} to {_us(max(held))}")
        return (f" The queue grew and then held: the first GPU op of step {a} started {_us(first[a])} after its "
                f"launch, those of steps {q['held_steps'][0]} to {q['held_steps'][-1]} {span}: the CPU stays a "
                "bounded distance ahead of the GPU (a full launch queue, or a wait that holds it back), so the lanes "
                "do not drift further apart.")
    if state == "drained":
        return (f" The first GPU op of step {a} started {_us(first[a])} after its launch, that of step {b} "
                f"{_us(first[b])}; but the GPU ran dry with nothing launched for it in every step after the first (a "
                f"median {_us(q['dry_us'])} each), so the queue empties within each step and no backlog carries over: "
                "the lanes do not drift apart (a step's first op waits behind the end of the work before it).")
    if state == "grows":
        return (f" The queue grows across the steps: the first GPU op of step {a} started {_us(first[a])} after its "
                f"launch, that of step {b} {_us(first[b])}: the CPU launches faster than the GPU executes, so work "
                "queues up and the GPU lane drifts right.")
    # (within: the later half's median against the first; the last op may wait less than the later half)
    return (f" Within each step the later ops wait longer than the first (a median {_us(_median(first))} for a step's "
            f"first GPU op, {_us(q['late_half_us'])} for the later half of its ops, {_us(_median(last))} for its "
            "last): the CPU launches a step's work faster than the GPU runs it, and the queue drains before the next "
            f"step (the first ops of steps {a} and {b} waited {_us(first[a])} and {_us(first[b])}), so the lanes do "
            "not drift apart.")


def _median(by_step: dict) -> float:
    return float(np.median(list(by_step.values())))
