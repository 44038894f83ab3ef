"""``profiler_overhead``: the trace was recorded with with_stack or profile_memory (its header or the run's config
says so: ``analyses.recorded_with``), which add CPU time to its ops: with_stack to every op, profile_memory to each
allocation and free it records (none where the trace holds no ``[memory]`` event, which the finding then says instead
of a cost)."""
from __future__ import annotations

from typing import Optional

from ....analyses import recorded_with
from ..base import Diagnosis, _Ctx


def _rule_profiler_overhead(c: _Ctx) -> Optional[Diagnosis]:
    on = [k for k in ("with_stack", "profile_memory")
          if recorded_with(k, c.report.summary.get("recorded_with"), c.config)]
    if not on:
        return None
    tb = c.session.tables
    mem = sum(1 for n in tb.name.tolist() if n == "[memory]")
    parts = []  # what each option records, and whether it cost anything here
    if "with_stack" in on:
        parts.append("with_stack: the profiler then records a Python stack for each op, which adds CPU time to "
                     "every op")
    if "profile_memory" in on and mem:
        parts.append(f"profile_memory: the profiler then records every allocation and free ({mem:,} [memory] events "
                     "here), which adds CPU time to each op that allocates or frees")
    elif "profile_memory" in on:  # (on, yet nothing recorded: no allocation or free, so no cost of it either)
        parts.append("profile_memory, but the trace holds no [memory] event: nothing was allocated or freed "
                     "through the allocator while it recorded, so it had nothing to record and added no "
                     "per-allocation CPU time here")
    text = "This trace was recorded with " + "; and with ".join(parts) + "."
    if "with_stack" in on or mem:
        text += (" The CPU-side "
                 + ("times of this trace (step time, launch latency, op durations) include that cost; GPU kernel "
                    "times do not." if c.report.has_gpu else "times of this trace (step time, op durations) include "
                    "that cost; it ran on the CPU, so every time here does."))
        fix = ("Profile timing with record_shapes only (or nothing extra), and make a second run with with_stack / "
               "profile_memory when you need stacks or memory; compare the two runs' CPU step times.")
    else:
        fix = ("Nothing to change for these times: profile_memory recorded nothing here. For a step that does "
               "allocate, profile timing without it and memory in a second run, and compare the two runs' CPU step "
               "times.")
    return Diagnosis("profiler_overhead", "The profiler's own overhead", text, fix, None,
                     "not measurable from one trace: compare with a run without these options",
                     {"options": on, "memory_events": mem})
