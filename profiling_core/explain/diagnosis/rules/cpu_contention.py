"""``cpu_contention``: on a CPU, the workload's ops run far slower than their own work needs. Two readings of the
trace, either enough:

- a work op's call takes at least :data:`SLOW_CALL_AT` times the median of the same call (same op, same recorded
  shapes and dtypes; calls whose shapes the trace did not record are never the same call) over the run's steps
  after the first, over at least :data:`MIN_CALLS` calls;
- a GEMM of at least ``analyses.steps.CPU_GEMM_FLOOR_MIN_US`` of own time runs below
  ``analyses.steps.CPU_GEMM_FLOOR_GFLOPS``, a rate any core exceeds on a product of that size (FLOPs from its
  recorded shapes); question 2 judges a CPU run's GEMM calls by the same two figures.

Both are what an op's intra-op threads look like when they do not get their cores: torch runs a CPU op's parallel
region on its OpenMP threads (one per core by default) and waits for the slowest; on a machine busy with other work
a thread that lost its core stalls the op for a scheduler slice (milliseconds), a thousand times a 64² GEMM. The fix
names the threads knob (fewer threads than idle cores, or one) and a quieter machine. It fires only when the time
lost is at least :data:`MIN_LOST_SHARE` of the steps' time (the lost time per step against the mean step: both are
means over the steps after the first). The cost is the time the slow calls took above their median, or
above the floor rate for a GEMM: what they would save running as the same call does elsewhere in the run."""
from __future__ import annotations

import json
from typing import Optional

import numpy as np

from ....analyses.steps import CPU_GEMM_FLOOR_GFLOPS, CPU_GEMM_FLOOR_MIN_US, working_steps
from ....config import config_field as _cfg
from ....units import format_rate, format_share
from ...questions.base import _self_times_by_step, _work_ops
from ..base import Diagnosis, _Ctx, _args_each, _fmt_us

SLOW_CALL_AT = 10.0
"""A call at least this many times the median of the same call is slow."""
MIN_CALLS = 3
"""Calls of one op and shape needed to read a median."""
MIN_LOST_SHARE = 0.1
"""Share of the median step the slow calls must lose for the rule to speak."""
TOP_CALLS = 5


def _calls(r, session, steps: list[int]):
    """(per call: step, id, name, shapes, dtypes, own µs) of the work ops of ``steps``, the recorded ``Input Dims``
    and ``Input type`` as JSON text ("null" where the trace recorded none)."""
    by_step = _self_times_by_step(r.dispatch_chains, steps)
    rows = []
    for k in steps:
        g = by_step.get(k)
        if g is None:
            continue
        w = _work_ops(g)
        rows += [(k, int(i), str(n), float(us)) for i, n, us in zip(w["id"], w["name"], w["self_us"])]
    dims, types = _args_each(session, ("Input Dims", "Input type"), [i for _, i, _, _ in rows])
    texts: dict[int, str] = {}  # id of a value (held in dims/types meanwhile) -> its JSON: equal ones often share one

    def text(d) -> str:
        t = texts.get(id(d))
        if t is None:
            t = texts[id(d)] = json.dumps(d)
        return t
    return [(k, i, n, text(dims.get(i)), text(types.get(i)), us) for k, i, n, us in rows]


def _rule_cpu_contention(c: _Ctx) -> Optional[Diagnosis]:
    r = c.report
    if r.has_gpu or r.steps.empty or r.dispatch_chains.empty:
        return None
    work = working_steps(r.steps)  # (an empty step is no step of the loop)
    # each step number once: where ranks' traces were merged into one file, a number names one step slice per rank
    numbers = sorted({int(x) for x in work["step"]})
    basis = numbers[1:] if len(numbers) > 1 else numbers
    calls = _calls(r, c.session, numbers)
    groups: dict[tuple, list[float]] = {}
    for k, _i, n, shape, dtypes, us in calls:
        if k in basis and shape != "null":  # (without recorded shapes, no two calls are known to be the same)
            groups.setdefault((n, shape, dtypes), []).append(us)
    medians = {key: float(np.median(v)) for key, v in groups.items() if len(v) >= MIN_CALLS}
    g = r.gemm_throughput
    flops = {int(i): float(f) for i, f, d in zip(g["id"], g["flops"], g["device"]) if d == "cpu" and f > 0} \
        if not g.empty else {}
    slow = []
    for k, i, n, shape, dtypes, us in calls:
        if k not in basis:
            continue
        med = medians.get((n, shape, dtypes))
        lost_vs_median = us - med if med and us >= SLOW_CALL_AT * med else 0.0
        f = flops.get(i)
        floor_us = f / (CPU_GEMM_FLOOR_GFLOPS * 1e3) if f else None
        lost_vs_floor = us - floor_us if floor_us is not None and us >= CPU_GEMM_FLOOR_MIN_US and us > floor_us else 0.0
        if max(lost_vs_median, lost_vs_floor) > 0:
            slow.append({"step": k, "id": i, "name": n, "shape": json.loads(shape), "own_us": us,
                         "median_us": med, "gflops": f / us / 1e3 if f else None,
                         "lost_us": max(lost_vs_median, lost_vs_floor),
                         "by": "floor rate" if lost_vs_floor >= lost_vs_median else "median"})
    durs = work[work["step"].isin(basis)]["cpu_dur_us"]  # (one per step slice: per rank where ranks were merged)
    step_us, mean_us = float(durs.median()), float(durs.mean())
    lost = sum(x["lost_us"] for x in slow) / len(durs)  # (a mean per step: its share is of the mean step)
    if not slow or not mean_us > 0 or lost < MIN_LOST_SHARE * mean_us:
        return None
    slow.sort(key=lambda x: -x["lost_us"])
    said = []
    floor = [x for x in slow if x["by"] == "floor rate"]
    by_op: dict[tuple, list] = {}
    for x in floor:
        by_op.setdefault((x["name"], json.dumps(x["shape"])), []).append(x)
    for (name, shape), xs in by_op.items():
        said.append(f"{name} {shape} ran at a median {format_rate(np.median([x['gflops'] for x in xs]))} GFLOP/s over "
                    f"{len(xs)} call{'s' if len(xs) > 1 else ''} ({_fmt_us(float(np.median([x['own_us'] for x in xs])))}"
                    f"{' each' if len(xs) > 1 else ''}), where one core runs a GEMM above "
                    f"{CPU_GEMM_FLOOR_GFLOPS:g} GFLOP/s")
    stalls = [x for x in slow if x not in floor]
    for x in stalls[:TOP_CALLS]:
        said.append(f"{x['name']} {x['shape']} took {_fmt_us(x['own_us'])} in step {x['step']} against a median "
                    f"{_fmt_us(x['median_us'])} for the same call ({x['own_us'] / x['median_us']:,.0f}×)")
    more = len(stalls) - TOP_CALLS
    threads = _cfg(c.config, "threads")
    how = ("torch's default, one per core" if threads is None and c.config is not None else
           f"{threads}" if threads is not None else "not recorded in an imported trace")
    text = (f"On this CPU the workload's ops ran far slower than their work needs: {'; '.join(said)}"
            f"{f' (and {more} more slow calls)' if more > 0 else ''}. That is what an op's threads look like when "
            f"they do not get their cores (threads: {how}). torch runs each op's "
            "parallel region on its OpenMP threads and waits for the slowest; a thread that lost its core to other "
            f"work stalls the op for a scheduler slice. The slow calls lose {_fmt_us(lost)} per step, "
            f"{format_share(lost / mean_us)} of the steps' time (a mean step: {_fmt_us(mean_us)}).")
    if threads == 1:
        fix = ("The run already used one thread: profile on a quieter machine (stop what else runs; the Home page "
               "and each run's load average say how busy it was), then compare the step times.")
    else:
        fix = ("Profile with one thread, or fewer threads than the machine has idle cores: threads=1 in the Profile "
               "form's *CPU threads*, `--threads 1` on the command line, torch.set_num_threads(1) in your code; or "
               "profile on a quieter machine. Compare the step times of both runs.")
    return Diagnosis("cpu_contention", "CPU ops stalled: their threads did not get the cores", text, fix, lost,
                     "the slow calls' own time above the same call's median (a GEMM: above the floor rate), per "
                     "step after the first",
                     {"threads": threads, "basis_steps": basis, "median_step_us": step_us, "mean_step_us": mean_us,
                      "slow_call_at": SLOW_CALL_AT, "floor_gflops": CPU_GEMM_FLOOR_GFLOPS,
                      "slow_calls": slow[:20], "slice_ids": [x["id"] for x in slow][:50]})
