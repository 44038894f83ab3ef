"""Question 2, overhead-bound or compute-bound (``q2.bound``): the one bound rule (``analyses.steps.bound``) on the
steady state, GPU work launched per step against CPU time per step, with the in-window busy share and whether the
queue grew (``analyses.steps.queue_growth``, question 4's rule) as evidence; on a CPU, the work ops' own time against
the step."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...analyses.steps import (CPU_GEMM_FLOOR_GFLOPS, CPU_GEMM_FLOOR_MIN_US, CPU_MATH_BOUND_AT, DATA_WAIT_AT,
                                GPU_BOUND_AT, STARVED_AT, QUEUE_GREW, bound, counted_wait, data_wait, gpu_paced_up_to,
                                queue_growth, measured_steps, steady_state, working_steps)
from ...analyses import recorded_with
from ...analyses._shared import COMPILER_RANGE, merged
from ...analyses.compile import COMPILED_GRAPH_CALL
from ...analyses.phases import is_data_loader_next
from ...units import format_duration_us as _us
from ...units import format_rate, format_share, format_times
from .base import (NO_GPU_TEXT, Finding, _all_steps, _basis_text, _compiler_every_step, _num, _per_name,
                   _self_times_by_slice, _work_ops)

_TOP_WORK_OPS = 3


UNLIKE_STEPS = 2.0
"""Two steady-state steps whose CPU times differ by this factor or more: their median, their mean, is no step's."""


def _q2_bound(r, config=None) -> list[Finding]:
    found = _q2_verdict(r)
    said = cut_steps_text(r.steps)
    if said:  # the rule that cut them, said where their figures are read
        f = found[0]
        cut = r.steps[r.steps["cut_us"] > 0]
        ev = {**f.evidence, "steps_cut_us": {str(nm): _num(float(c)) for nm, c in zip(cut["name"], cut["cut_us"])}}
        found = [replace(f, text=f"{f.text} {said}", evidence=ev), *found[1:]]
    gpus = r.summary.get("step_devices") or []
    if len(gpus) > 1 and found:  # several GPUs: say what each GPU figure counts, and each GPU's own
        f = found[0]
        text = f"{f.text} {devices_text(gpus, len(r.summary.get('step_processes') or []))}"
        found = [replace(f, text=text, evidence={**f.evidence, "step_devices": gpus}),
                 *found[1:]]
    note = stack_note(r, config, found[0].evidence) if found else None
    if note:  # the recording's own cost, said where the verdict it can sway is read
        f = found[0]
        found = [replace(f, text=f"{f.text} {note[0]}", evidence={**f.evidence, **note[1]}), *found[1:]]
    pids = r.summary.get("step_processes") or []
    if len(pids) > 1 and found:  # merged ranks: say it where the per-step figures are read
        f = found[0]
        text = f"{f.text} {merged_processes_text(pids)}"
        found = [replace(f, text=text, evidence={**f.evidence, "step_processes": pids}), *found[1:]]
    return found


STACK_NOTE_AT = 0.25
"""Question 2 says that an overhead-bound verdict on a with_stack trace may be the recording's where the GPU work per
step is at least this share of what would make the steps compute-bound: the with_stack runs in docs/FINDINGS.md took
at most 3.6 times the CPU time per step of the same runs without it, and a step further from the line would stay
overhead-bound with four times less CPU time."""


def stack_note(r, config, ev: dict):
    """(What question 2 adds, its evidence) to an overhead-bound verdict on a trace recorded with ``with_stack``
    (:func:`~profiling_core.analyses.recorded_with`), else None. Recording a Python stack for each op adds CPU time to
    every op and none to the GPU's work, so such a trace can be overhead-bound where the code is not (docs/FINDINGS.md
    has runs where it was, and runs where the difference was below the noise between two runs): on a GPU, the note
    gives the CPU time per step at or below which the same GPU work makes the steps compute-bound (or copy-bound) by
    the bound rule (:func:`~profiling_core.analyses.steps.gpu_paced_up_to`; the label is
    :func:`~profiling_core.analyses.steps.bound`'s at that time), where the GPU work is at least
    :data:`STACK_NOTE_AT` of that."""
    if ev.get("bound") != "overhead-bound" or not recorded_with("with_stack", r.summary.get("recorded_with"), config):
        return None
    ss = r.summary.get("steady_state") or {}
    gpu, wait = float(ss.get("gpu_us_per_step") or 0.0), float(ss.get("sync_wait_us_per_step") or 0.0)
    cpu = float(ss.get("cpu_us_per_step") or 0.0)
    if r.has_gpu and gpu < STACK_NOTE_AT * GPU_BOUND_AT * (cpu - counted_wait(wait, cpu)):
        return None  # (too far from the line for the recording's cost to move it)
    head = ("This trace recorded a Python stack for each op (with_stack=True), which adds CPU time to every op"
            + ("" if r.has_gpu else " and its dispatch"))
    tail = " Read the bound from a run without with_stack (What to change: *The profiler's own overhead*)."
    if not r.has_gpu or not gpu:
        return (f"{head}: part of the overhead here may be the recording's.{tail}", {"recorded_with_stack": True})
    at, line = gpu_paced_up_to(gpu, wait), gpu / GPU_BOUND_AT
    # compute- or copy-bound: the rule's label where it is GPU-paced (read at the ratio's line, which the float sums
    # of the wait cannot put a rounding step past)
    paced = bound(gpu, line, sync_wait_us=wait, copy_us=float(ss.get("copy_us_per_step") or 0.0),
                  other_us=float(ss.get("other_us_per_step") or 0.0))
    return (f"{head} and none to the GPU's work, so this verdict may be the recording's: the same GPU work makes the "
            f"steps {paced} at {_us(at)} of CPU time per step or less"
            + (", its blocked time included" if at > line else "") + f".{tail}",
            {"recorded_with_stack": True, "compute_bound_at_cpu_us": _num(at)})


def cut_steps_text(steps) -> str:
    """What question 2 and the pages' per-step notes say of step slices written past the end of the recording
    (``steps.cut_us`` > 0: the profiler's own Trace slice ends first, and only the recorded part counts); "" when
    none was."""
    cut = steps[steps["cut_us"] > 0] if "cut_us" in steps else steps.iloc[:0]
    if not len(cut):
        return ""
    names = ", ".join(f"{nm}'s by {_us(float(c))}" for nm, c in zip(cut["name"][:3], cut["cut_us"][:3]))
    more = f" and {len(cut) - 3} more" if len(cut) > 3 else ""
    return (f"The step slice{'s' if len(cut) > 1 else ''} outlast{'' if len(cut) > 1 else 's'} the recording (the "
            f"profiler's own Trace slice), {names}{more}: only the recorded part counts in every figure here.")


def merged_processes_text(pids: list) -> str:
    """What question 2 and ``analyze``'s summary say of a trace whose step slices belong to several processes
    (``pids``, ``Report.summary["step_processes"]``: the first eight named)."""
    named = ", ".join(map(str, pids[:8])) + (f" and {len(pids) - 8} more" if len(pids) > 8 else "")
    return (f"This trace holds the steps of {len(pids)} processes (pid {named}): ranks' traces merged into one file. "
            "Every per-step figure here mixes their steps and their GPU work: read each rank's own trace.")


UNPLACED_EVENTS_TEXT = ("The events that carry no rank's pid (the profiler's own recording span and overhead events, "
                        "one set per rank) stay for every rank: the ranks' events interleave in the file, so no place "
                        "says whose they are, and the profiler's start-up and the recording's window may count every "
                        "rank's.")
"""What a rank written out of a merged file (``analyses.write_rank``) holds besides its own events where the file's
ranks interleave (its entry's ``unowned_events_placed`` False)."""


def rank_text(rank: dict) -> str:
    """What ``analyze``'s summary says of one rank read out of a file that merged several ranks' traces (``rank``:
    an entry of :func:`profiling_core.analyses.ranks` with ``processes``, the pids that hold steps in the file)."""
    pids = rank["processes"]
    named = ", ".join(map(str, pids[:8])) + (f" and {len(pids) - 8} more" if len(pids) > 8 else "")
    gpus = rank["gpus"]
    lanes = (f"the GPU lane{'s' if len(gpus) > 1 else ''} its calls launched work on (pid "
             f"{', '.join(map(str, gpus[:8]))}{' and more' if len(gpus) > 8 else ''})" if gpus
             else "no GPU lane (its calls launched no GPU op the trace pairs with them)")
    return (f"This file holds the steps of {len(pids)} processes (pid {named}): ranks' traces merged into one file. "
            f"Everything here reads one rank, as its own trace would hold it: process {rank['pid']} "
            f"({rank['steps']} step slice{'s' if rank['steps'] != 1 else ''}) and {lanes}; the other ranks' events "
            "are left out." + (" " + UNPLACED_EVENTS_TEXT if rank.get("unowned_events_placed") is False else ""))


def devices_text(gpus: list, processes: int = 1) -> str:
    """What question 2 and ``analyze``'s summary say of steps whose GPU work ran on several GPUs (``gpus``,
    ``Report.summary["step_devices"]``: the first eight named) of one process, or of the ``processes`` whose threads
    hold step slices (``Report.summary["step_processes"]``: ranks' traces merged into one file): every other GPU
    figure is the time at least one of them was busy, so each one's own busy time is given beside it, measured the
    same two ways (the work a step launched on it; its busy share of the step's window)."""
    each = "; ".join(f"device {g['device']} {_us(g['busy_us'])} launched, busy "
                     f"{format_share(g['busy_fraction'], 1)} of "
                     "the step's window" for g in gpus[:8]) + (f"; and {len(gpus) - 8} more" if len(gpus) > 8 else "")
    whose = "of this process" if processes <= 1 else f"of these {processes} processes"
    return (f"The steps' GPU work ran on {len(gpus)} GPUs {whose}: every GPU figure here counts the time at "
            "least one of them was busy with the work it counts (the steps' own, or all of it for the busy share of a "
            "step's window), so no GPU on its own was busy with that work for longer than they say. Each GPU's own "
            f"figures per step (median): {each}.")


def _q2_verdict(r) -> list[Finding]:
    s = r.steps
    if s.empty:
        if not r.has_gpu:
            return [Finding("q2.bound", 2, "CPU only", NO_GPU_TEXT + " and no ProfilerStep: nothing to compare.",
                            {"steps": 0, "gpu_ops": 0})]
        frac = r.summary.get("gpu_busy_fraction")
        return [Finding("q2.bound", 2, "GPU busy share",
                        f"No ProfilerStep in this trace; over the whole trace the GPU was busy "
                        f"{_us(r.summary['gpu_busy_us'])}, {format_share(frac or 0, 1)} of its span.",
                        {"steps": 0, "gpu_busy_us": _num(r.summary["gpu_busy_us"]), "gpu_busy_fraction": _num(frac)})]
    # the per-step figures: the steps the loop worked in, less those in which torch.compile's compiler ran
    all_steps, s = s, measured_steps(s)
    cpu_med = float(s["cpu_dur_us"].median())
    if not r.has_gpu:
        return [_q2_cpu(r, cpu_med)]
    ss = r.summary.get("steady_state") or steady_state(all_steps)
    queue = r.summary.get("queue_growth") or queue_growth(r.launch_latency, all_steps)
    label = ss["bound"]
    cv = r.cpu_vs_gpu
    # (row for row: cpu_vs_gpu has one row per step slice, in the steps' order; in a file of merged ranks one step
    # number names a step slice of each rank)
    cv = cv[all_steps.index.isin(s.index)]
    bounds = cv["bound"].value_counts().to_dict()
    counts = ", ".join(f"{int(v)} {k}" for k, v in sorted(bounds.items(), key=lambda kv: -kv[1]))
    ev = {"steps": int(len(all_steps)), **({"empty_steps": ss["empty_steps"]} if ss.get("empty_steps") else {}),
          "cpu_step_median_us": _num(cpu_med),
          "gpu_step_median_us": _num(float(s["gpu_busy_us"].median())),
          "gpu_busy_fraction_median": _num(float(s["gpu_busy_fraction"].median())), "bound": label,
          "bound_rule": "gpu_us_per_step >= threshold x (cpu_us_per_step - sync_wait_us_per_step), or "
                        "starved_share <= starved_at with launch_us_per_step >= cpu_us_per_step - "
                        "sync_wait_us_per_step - gpu_us_per_step: compute-bound (copy-bound where copy_us_per_step >= "
                        "other_us_per_step), else overhead-bound",
          "copy_us_per_step": _num(ss.get("copy_us_per_step")), "other_us_per_step": _num(ss.get("other_us_per_step")),
          "launch_us_per_step": _num(ss.get("launch_us_per_step")),
          "starved_share": _num(ss.get("starved_share")), "starved_at": STARVED_AT,
          "bound_threshold": GPU_BOUND_AT, "bound_basis": ss["basis"], "bound_basis_steps": ss["basis_steps"],
          "cpu_us_per_step": _num(ss["cpu_us_per_step"]), "gpu_us_per_step": _num(ss["gpu_us_per_step"]),
          "sync_wait_us_per_step": _num(ss.get("sync_wait_us_per_step")),
          "gpu_to_cpu": _num(ss["gpu_to_cpu"]), "gpu_idle_share": _num(ss["gpu_idle_share"]),
          "busy_in_window": _num(ss["busy_in_window"]),
          "queue": queue["state"],
          "unlaunched_in_window": _num(ss.get("unlaunched_in_window")),
          "unrecorded_in_window": _num(ss.get("unrecorded_in_window")),
          "unlaunched_wait_us_per_step": _num(ss.get("unlaunched_wait_us_per_step")),
          "bound_counts": {k: int(v) for k, v in bounds.items()},
          "gpu_busy_fraction": _num(r.summary.get("gpu_busy_fraction"))}
    basis = _basis_text(ss, len(working_steps(all_steps)))
    if label == "no-gpu":
        text = (f"In steady state ({basis}) no step launched GPU work (median {_us(ss['cpu_us_per_step'])} of CPU "
                "per step), so there is no overhead/compute verdict.")
        return [Finding("q2.bound", 2, "No-gpu", text, ev)]
    cpu, gpu, ratio = ss["cpu_us_per_step"], ss["gpu_us_per_step"], ss["gpu_to_cpu"] or 0.0
    wait = ss.get("sync_wait_us_per_step") or 0.0
    median = "a median " if len(ss["basis_steps"]) > 1 else ""
    early = ss.get("unlaunched_wait_us_per_step") or 0.0
    grew = _grew_text(queue)
    if wait > 0:
        text = (f"In steady state ({basis}) a step took {median}{_us(cpu)} of CPU time, {_us(wait)} of it blocked in "
                f"{blocked_in(s, ss)} while the GPU worked (time the GPU's pace sets, so not the CPU's own"
                + (f"; {_us(early)} of it on {EARLIER_WORK} and no step counts as its GPU work"
                   if early >= EARLIER_AT * wait else "")
                + f"), and launched {_us(gpu)} of GPU work "
                + (f"({format_times(ratio)}× the CPU's own {_us(cpu - wait)}). " if cpu - wait > 0 else
                   "(all of the CPU's time was that wait: it had none of its own). "))
    else:
        text = (f"In steady state ({basis}) a step took {median}{_us(cpu)} of CPU time and launched {_us(gpu)} of "
                f"GPU work ({format_times(ratio)}× the CPU time). ")
    two = s[s["step"].isin(ss["basis_steps"])]["cpu_dur_us"].astype(float).tolist()
    if len(two) == 2 and min(two) > 0 and max(two) >= UNLIKE_STEPS * min(two):  # a mean no step took
        text += (f"(The median of two steps is their mean, and these two differ: {_us(two[0])} and {_us(two[1])} of "
                 "CPU time; profile more steps to tell a steady state from a one-off.) ")
    if ss.get("bound_of_every_step"):  # every step gets this verdict on its own figures; their medians would not
        rows = cv
        each = "; ".join(f"step {int(x.step)}: "
                         + (f"{format_times(x.gpu_to_cpu)}× GPU work per CPU time" if _num(x.gpu_to_cpu) is not None
                            else "no CPU time of its own")
                         + ", the GPU idle with nothing launched "
                         + f"{format_share(_num(x.gpu_starved_share) or 0, 1)} of it"
                         for x in rows.itertuples())
        text += (f"Each of these steps is {label} by the rule on its own figures ({each}; the rule: GPU work at least "
                 f"{GPU_BOUND_AT:g}× the CPU's own time, or idle with nothing launched at most {100 * STARVED_AT:g}% "
                 "of the step while its launch calls took the CPU's own time beyond its GPU work, is compute-bound), "
                 "though the medians, taken across steps that meet the rule in "
                 f"different ways, would not be: the verdict is the steps', {label}.")
    elif label == "copy-bound":
        copy, other = ss.get("copy_us_per_step") or 0.0, ss.get("other_us_per_step") or 0.0
        lead = ("The GPU has at least as much to do as the CPU's own time" if gpu >= GPU_BOUND_AT * (cpu - wait) else
                "The GPU never waited for a launch (it sat idle with nothing launched for it "
                f"{format_share(ss['starved_share'] or 0.0, 1)} of {'each step' if median else 'the step'})")
        text += (f"{lead}, and its copies between host and device keep it busy {_us(copy)} a step, at least as long "
                 f"as all its other work ({_us(other)}): the copies set the pace, not the GPU's compute, so the "
                 "workload is copy-bound. "
                 + ("Its copies to or from pageable memory are staged through a pinned buffer while the CPU waits, at a "
                    "fraction of a pinned copy's rate: pin the host memory and copy with non_blocking=True. "
                    if "pageable" in blocked_in(s, ss) else "")
                 + "The fewer bytes cross the link each step (data kept on the device, a smaller dtype) and the more "
                 "of them overlap with compute (a copy on a side stream ahead of the step that needs it), the "
                 "shorter the step.")
    elif label == "compute-bound" and gpu < GPU_BOUND_AT * (cpu - wait):  # (the rule's other test: no starving)
        starved = ss["starved_share"] or 0.0
        text += ("Yet the GPU never waited for a launch: "
                 + ("it never sat idle with nothing launched for it (every gap in its work came with launched work "
                    "already queued" if starved < 0.0005 else
                    f"it sat idle with nothing launched for it only {format_share(starved, 1)} of "
                    f"{'each step' if median else 'the step'} (every other gap in its work came with launched work "
                    "already queued")
                 + (f"; {grew}" if grew else "")
                 + "). A full launch queue makes each launch call wait for the GPU"
                 + ((f" (the launch calls took a median {_us(ss['launch_us_per_step'])} of each step's CPU time"
                     if median else f" (the step's launch calls took {_us(ss['launch_us_per_step'])} of its CPU time")
                    + f", at least the {_us(cpu - wait - gpu)} by which the CPU's own time exceeds its GPU work)"
                    if ss.get("launch_us_per_step") is not None else "")
                 + ", so the CPU's time follows the GPU's: the GPU sets the pace and the workload is compute-bound.")
    elif label == "compute-bound":
        text += ("The GPU has at least as much to do as the CPU, so the CPU "
                 + ("waits for it in those calls" if wait > 0 else "runs ahead")
                 + " and the GPU sets the pace: the workload is compute-bound.")
        comm = _exposed_collectives(r, ss["basis_steps"])
        # (the breakdown counts every collective in the step's window, whoever launched it: more than the GPU work
        # the step launched is not "of that GPU work", and the sentence is not said)
        if 0 < comm <= gpu and gpu - comm < GPU_BOUND_AT * (cpu - wait):  # the verdict rests on communication
            ev["exposed_collectives_us_per_step"] = _num(comm)
            text += (f" Of that GPU work, {_us(comm)} a step (median) is collectives that no other GPU work overlaps: "
                     f"without them the GPU would have {_us(gpu - comm)} to do against the CPU's own "
                     f"{_us(cpu - wait)} and would wait on the CPU, so overlapping them makes the step overhead-bound "
                     "and shortens it by less than they take (What to change: *Communication that no other GPU "
                     "work overlaps*).")
        busy = ss["busy_in_window"]
        if wait > 0 and busy is not None and busy >= 0.5 and busy < 0.9:  # (below a half: said just below)
            text += (f" As recorded the GPU was busy {format_share(busy, 1)} of each step's window"
                     f"{_earlier_share(ss)}: "
                     "while the CPU waits in "
                     "those calls nothing more is queued, so the GPU idles while the CPU does its own work after them, "
                     "until those calls are gone.")
        hidden = ss.get("unrecorded_in_window") or 0.0
        if busy is not None and (busy < 0.5 or (hidden >= EARLIER_AT and busy - hidden < 0.5)):
            # (busy with work the trace does not hold: the step's own work still runs after its window)
            text += (f" Inside each step's own CPU window the GPU was busy {'only ' if busy < 0.5 else ''}"
                     f"{format_share(busy, 1)}{_earlier_share(ss)}: the work a step "
                     "launches runs after that window, behind the work queued before it")
            if grew:
                text += f" ({grew})"
            text += "."
    else:
        text += ("The GPU runs out of work and waits for the next launch: "
                 + ("were the CPU not blocked, steps back to back would still leave it idle " if wait > 0 else
                    "with steps back to back it sits idle ")
                 + f"{format_share(ss['gpu_idle_share'])} of each step, so the workload is overhead-bound.")
        if ss["busy_in_window"] is not None:  # (a measure of its own: a step's GPU work may run outside its window)
            text += (" Evidence beside the verdict, measured another way: inside each step's own CPU window the GPU "
                     f"was busy {median}{format_share(ss['busy_in_window'], 1)}{_earlier_share(ss)}.")
        dw = data_wait(all_steps)
        if dw["share"] is not None and dw["share"] >= DATA_WAIT_AT:  # what keeps the CPU from launching: its input
            ev.update({"data_us_per_step": _num(dw["data_us_per_step"]), "data_share": _num(dw["share"])})
            text += (f" Of the steps' CPU time, {format_share(dw['share'])} went to waiting for input: the DataLoader "
                     f"handing out each batch took {_us(dw['data_us_per_step'])} per step on average (What to change: "
                     "*The step waits for its batch*).")
    if len(s) > 1:
        text += f" Step by step, by the same rule: {counts}."
    text += _compiler_every_step(s)
    return [Finding("q2.bound", 2, label.capitalize(), text, ev)]


EARLIER_WORK = "work launched before the profiler began recording, whose launch calls the trace does not hold"
"""What question 2 calls the GPU work a trace holds no launch call for (``steps.unlaunched_in_step_us``)."""

UNRECORDED_WORK = ("work the trace does not hold, queued before the recording began, which the GPU's first recorded "
                   "op waited behind")
"""What question 2 calls the time a GPU's first recorded op waited behind work the trace does not hold
(``steps.unrecorded_in_step_us``, ``Shared.unrecorded_waits``)."""

EARLIER_AT = 0.01
"""Question 2 names the share of a step's blocked time, or of its window, that the GPU spent on work launched before
the profiler began recording from this share on: below it, that work moves the figure it would stand beside (the
blocked time, the busy share) by less than a hundredth."""


def _earlier_share(ss: dict) -> str:
    """The clause that says how much of a step's window the GPU spent on work launched before the profiler began
    recording (``steady_state``'s ``unlaunched_in_window``: recorded, with no launch call) and on work the trace does
    not hold (``unrecorded_in_window``: a GPU's first recorded op waiting behind it), each where it is at least
    :data:`EARLIER_AT`; else "". ("that earlier work" where the blocked time's clause named it.)"""
    share, hidden = ss.get("unlaunched_in_window") or 0.0, ss.get("unrecorded_in_window") or 0.0
    parts = []
    if share >= EARLIER_AT:
        wait, early = ss.get("sync_wait_us_per_step") or 0.0, ss.get("unlaunched_wait_us_per_step") or 0.0
        said = wait > 0 and early >= EARLIER_AT * wait
        parts.append(f"{format_share(share, 1)} of the window on {'that earlier work' if said else EARLIER_WORK}")
    if hidden >= EARLIER_AT:
        parts.append(f"{format_share(hidden, 1)} of the window on {UNRECORDED_WORK}")
    return f" ({'; '.join(parts)})" if parts else ""


def _outside_input_and_compiler(g):
    """The slices of one step's chain (:func:`~.base._self_times_by_slice`) that start outside every DataLoader
    batch (``analyses.is_data_loader_next``) and every range of torch.compile's compiler (``COMPILER_RANGE``) of
    that chain: the collation's ops inside a batch are the input's work; the ops inside the compiler's ranges are
    its own (tracing on fake tensors, code generation), done once where it compiles."""
    ranges = g[_per_name(g["name"], lambda t: t.map(is_data_loader_next) | t.str.endswith(COMPILER_RANGE))
               .astype(bool)]
    if ranges.empty:
        return g
    b = ranges["start_ns"].to_numpy(dtype=np.int64)
    b, e = merged(b, b + np.round(ranges["dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64))
    ts = g["start_ns"].to_numpy(dtype=np.int64, na_value=-1)
    k = np.searchsorted(b, ts, side="right") - 1
    inside = (k >= 0) & (ts < e[np.maximum(k, 0)])
    return g[~inside]


def _exposed_collectives(r, basis: list) -> float:
    """The median, over the steady state's steps, of the time the GPU ran collectives alone (``step_breakdown``'s
    ``communication`` category: no compute, copy or memset beside them); 0 without any."""
    sb = r.step_breakdown
    if sb.empty:
        return 0.0
    comm = sb[(sb["category"] == "communication") & sb["step"].isin(basis)]["time_us"]
    return float(comm.median()) if len(comm) else 0.0


def blocked_in(steps, ss: dict) -> str:
    """Where the steady state's steps (``ss``: ``analyses.steady_state`` of ``steps``) were blocked on the GPU
    (``steps.sync_wait_us``): synchronize calls, copies to or from pageable memory (``copy_wait_us``), or both; what
    question 2 and ``analyze``'s summary say."""
    b = steps[steps["step"].isin(ss["basis_steps"])] if "copy_wait_us" in steps else steps.iloc[:0]
    copies = bool(len(b)) and float(b["copy_wait_us"].sum()) > 0
    syncs = not len(b) or float((b["sync_wait_us"] - b["copy_wait_us"]).sum()) > 0
    if copies and syncs:
        return "synchronize calls and in copies to or from pageable memory (which wait for the GPU too)"
    if copies:
        return "copies to or from pageable memory (which wait for the GPU as a synchronize call does)"
    return "synchronize calls"


def cpu_bound(r) -> dict:
    """Question 2's rule on a CPU, over the steady state's steps (``analyses.measured_steps``): the work ops' own time
    (ATen ops that do arithmetic or move data, and the calls of torch.compile'd graphs, whose own time is Inductor's
    generated code; metadata-only ops and composite wrappers excluded; those inside a DataLoader's batch are the
    input's) against each step, beside the time the DataLoader took to hand out the batch (``steps.data_us``), the
    rest being framework overhead (Python, dispatch, the profiler). The verdict, of the medians of the steps' own
    shares: ``compute-bound`` from :data:`~profiling_core.analyses.steps.CPU_MATH_BOUND_AT` of the step in work ops
    (the rule is stated there), else ``input-bound`` where the batches take at least what the overhead takes, else
    ``overhead-bound``.

    Returns a dict: ``bound`` (None without steps, or where no step did any work), ``steps`` (the measured steps'
    frame), ``cpu_work_share`` and ``cpu_work_us`` (medians of each step's share and time in work ops),
    ``data_share`` (median share in the batches), ``overhead_share`` (what is left), ``shares`` (each step's share,
    in the steps' order), ``work_ops`` ({op: its own time in each step, 0 in a step without it}). Two ranks' step
    N in one file are two steps, each with its own work and duration."""
    s = measured_steps(r.steps) if len(r.steps) else r.steps
    out = {"bound": None, "steps": s, "cpu_work_share": None, "cpu_work_us": None, "data_share": None,
           "overhead_share": None, "shares": [], "work_ops": {}}
    ch = r.dispatch_chains
    if not len(s) or ch.empty:
        return out
    by_slice = _self_times_by_slice(ch, [int(x) for x in s["slice_id"]])
    data = s["data_us"].astype(float).tolist() if "data_us" in s else [0.0] * len(s)
    shares, works, data_shares, op_steps = [], [], [], []
    for k, dur, data_us in zip(s["slice_id"].tolist(), s["cpu_dur_us"].astype(float), data):
        g = by_slice.get(int(k))
        if g is None or dur <= 0:
            continue
        w = _work_ops(_outside_input_and_compiler(g))
        work_us = float(w["self_us"].sum())
        works.append(work_us)
        shares.append(work_us / dur)
        data_shares.append(min(1.0, data_us / dur))
        op_steps.append({name: float(us) for name, us in w.groupby(w["name"].astype(str))["self_us"].sum().items()})
    if not shares or max(works) <= 0:
        return out
    # an op absent from a step took none of it: each op's median is over every step counted (an evaluation's conv
    # in one step of four is no step's median)
    per_op = {n: [d.get(n, 0.0) for d in op_steps] for n in dict.fromkeys(n for d in op_steps for n in d)}
    share, work_med, data_share = float(np.median(shares)), float(np.median(works)), float(np.median(data_shares))
    rest = max(0.0, 1.0 - share - data_share)
    label = ("compute-bound" if share >= CPU_MATH_BOUND_AT else "input-bound" if data_share > 0 and data_share >= rest
             else "overhead-bound")
    out.update(bound=label, cpu_work_share=share, cpu_work_us=work_med, data_share=data_share, overhead_share=rest,
               shares=shares, work_ops=per_op)
    return out


def _q2_cpu(r, cpu_med: float) -> Finding:
    """Question 2 on a CPU: :func:`cpu_bound`'s verdict with its evidence, and the GEMMs' achieved GFLOP/s where
    their FLOPs are known."""
    work = working_steps(r.steps)  # (the profiler's closing stub is no step of the loop)
    ss = r.summary.get("steady_state") or steady_state(r.steps)
    stubs = ss.get("empty_steps") or []
    cb = cpu_bound(r)
    # the steady state's steps: after the first (from 3 on), none in which torch.compile's compiler ran
    s = cb["steps"]
    ev = {"steps": int(len(s)), "cpu_step_median_us": _num(cpu_med), "gpu_ops": 0,
          **({"empty_steps": stubs} if stubs else {}), "basis_steps": [int(k) for k in s["step"]]}
    if ss.get("compile_steps"):
        ev["compile_steps"] = ss["compile_steps"]
    steady = f"in steady state ({_basis_text(ss, len(work))}) a step took a median {_us(cpu_med)}"
    devices = [d.get("name") for d in r.summary.get("devices") or [] if d.get("name")]
    if devices:  # a trace from a GPU machine whose steps ran no GPU op: say so, not "ran on the CPU"
        text = (f"This trace names {devices[0]}{' and more GPUs' if len(devices) > 1 else ''} but recorded no kernel, "
                f"memcpy or memset: {_all_steps(len(work))} did their work on the CPU; {steady}.")
        ev["devices"] = devices[:8]
    else:
        text = f"{NO_GPU_TEXT}: {_all_steps(len(work))} ran on the CPU; {steady}."
    if cb["bound"] is None:
        return Finding("q2.bound", 2, "CPU only", text, ev)
    label, share, work_med = cb["bound"], cb["cpu_work_share"], cb["cpu_work_us"]
    data_share, rest, shares, per_op = cb["data_share"], cb["overhead_share"], cb["shares"], cb["work_ops"]
    top = sorted(((float(np.median(v)), n) for n, v in per_op.items() if np.median(v) > 0),
                 reverse=True)[:_TOP_WORK_OPS]
    listed = ", ".join(f"{n} {_us(us)}" for us, n in top)
    ev.update({"cpu_work_us_median": _num(work_med), "cpu_work_share_median": _num(share), "bound": label,
               "bound_threshold": CPU_MATH_BOUND_AT, "bound_basis": "cpu_work_share",
               "work_ops": {n: _num(us) for us, n in top}})
    compiled = (", and compiled graphs' generated code" if any(n.startswith(COMPILED_GRAPH_CALL) for n in per_op)
                else "")
    listed = f"their own time: {listed}" if listed else "each absent from half the steps or more"
    text += (f" The work ops (the ATen ops that compute or move data{compiled}, {listed}) took a median "
             f"{_us(work_med)} per step and a median {format_share(share, 1)} of each step (each step's own share); ")
    if data_share > 0:
        ev["data_share_median"] = _num(data_share)
        text += (f"the DataLoader handing out the step's batch (enumerate(DataLoader)#...__next__, its ops included) "
                 f"{format_share(data_share, 1)}; the other {format_share(rest, 1)} is framework overhead around the "
                 "ops (Python, "
                 "dispatch through the wrapping ops, the profiler's step). ")
    else:
        text += (f"the other {format_share(1 - share, 1)} is "
                 + ("torch.compile's compiler (below) and " if _compiler_every_step(s) else "")
                 + "framework overhead around them (Python, dispatch through the wrapping ops, the profiler's "
                 "step). ")
    if label == "compute-bound":
        text += f"At or above {100 * CPU_MATH_BOUND_AT:.0f}%, so on this CPU the workload is compute-bound."
    elif label == "input-bound":
        dw = data_wait(r.steps)  # (the rule's own test: the pointer only where the rule speaks)
        text += (f"Below {100 * CPU_MATH_BOUND_AT:.0f}%, and the batches take more of the step than the overhead: on "
                 "this CPU the loop is input-bound, waiting for its data"
                 + (" (What to change: *The step waits for its batch*)." if dw["share"] is not None
                    and dw["share"] >= DATA_WAIT_AT else "."))
    else:
        text += f"Below {100 * CPU_MATH_BOUND_AT:.0f}%, so on this CPU the workload is overhead-bound."
    if min(shares) < CPU_MATH_BOUND_AT <= max(shares):  # the steps themselves fall on both sides of the line
        ev["cpu_work_share_range"] = [_num(min(shares)), _num(max(shares))]
        text += (f" The steps disagree: their work took from {format_share(min(shares), 1)} to "
                 f"{format_share(max(shares), 1)} "
                 f"of a step, on both sides of {100 * CPU_MATH_BOUND_AT:.0f}%, so the verdict is the median's and a "
                 "close one: profile more steps, on a quiet machine, before acting on it.")
    g = r.gemm_throughput
    cpu_g = g[g["device"] == "cpu"] if not g.empty else g
    if len(cpu_g):  # the calls of the steps read here (not the first call of a graph compiled in a step left out)
        lo = s["start_ns"].to_numpy(dtype=np.int64, na_value=0)
        hi = lo + np.round(s["cpu_dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64)
        at = cpu_g["start_ns"].to_numpy(dtype=np.int64)
        cpu_g = cpu_g[((at[:, None] >= lo[None, :]) & (at[:, None] < hi[None, :])).any(axis=1)]
    every = _compiler_every_step(s)
    if len(cpu_g):
        gflops = float(cpu_g["tflops"].median()) * 1000
        ev["gemm_gflops_median"] = _num(gflops)
        text += (f" The GEMM calls of these steps ran at a median {format_rate(gflops)} GFLOP/s each (FLOPs from "
                 f"{cpu_g['flops_from'].iloc[0]}; the roofline divides a GEMM's FLOPs by its mean call, so its slow "
                 "calls weigh more there).")
        # the floor is judged on calls long enough for their math to show (CPU_GEMM_FLOOR_MIN_US), as the
        # cpu_contention rule judges them: a shorter call's time is mostly its dispatch and set-up
        long = cpu_g[cpu_g["time_us"] >= CPU_GEMM_FLOOR_MIN_US]
        slow = float(long["tflops"].median()) * 1000 if len(long) else None
        if every:  # each the first call of a graph compiled in its own step
            text += " Each is the first call of a graph compiled in its own step."
        elif slow is not None and slow < CPU_GEMM_FLOOR_GFLOPS:
            ev["gemm_below_floor_gflops"] = CPU_GEMM_FLOOR_GFLOPS
            ev["gemm_gflops_median_of_long_calls"] = _num(slow)
            said = ("That is" if len(long) == len(cpu_g) else
                    f"The one call of {_us(CPU_GEMM_FLOOR_MIN_US)} or more ran at {format_rate(slow)} GFLOP/s,"
                    if len(long) == 1 else f"The {len(long)} calls of {_us(CPU_GEMM_FLOOR_MIN_US)} or more ran at "
                    f"a median {format_rate(slow)} GFLOP/s,")
            text += (f" {said} below the {CPU_GEMM_FLOOR_GFLOPS:g} GFLOP/s any core exceeds on a call that long: the "
                     "GEMMs' time is threads waiting for cores, not math, so read the verdict as where the step's "
                     "time went, not as heavy compute.")
        elif gflops < CPU_GEMM_FLOOR_GFLOPS:  # short calls only: their rate says nothing of the cores
            call_us = float(cpu_g["time_us"].median())
            ev["gemm_call_us_median"] = _num(call_us)
            text += (f" Those calls are short (a median {_us(call_us)}), under the {_us(CPU_GEMM_FLOOR_MIN_US)} from "
                     f"which a GEMM's rate is judged against the {CPU_GEMM_FLOOR_GFLOPS:g} GFLOP/s any core exceeds: "
                     "a call that short is mostly its dispatch and set-up, not its math.")
    return Finding("q2.bound", 2, label.capitalize(), text + every, ev)


def _grew_text(q: dict) -> str:
    """That the launch queue grew, with the figures :func:`~profiling_core.analyses.steps.queue_growth` rests it on
    (the first and last step's first GPU op's wait after its launch call), where that rule says it grew from step to
    step; "" where it does not (question 4 says the same)."""
    if q.get("state") not in QUEUE_GREW:
        return ""
    first = q["step_first_us"]
    a, b = next(iter(first)), next(reversed(first))
    return (f"the queue grew{' and then held' if q['state'] == 'grew_held' else ''}: the first GPU op of step {b} "
            f"started {_us(first[b])} after its launch call, against {_us(first[a])} in step {a}")
