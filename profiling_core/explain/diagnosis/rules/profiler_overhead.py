"""``profiler_overhead``: the trace was recorded with with_stack or profile_memory, which add CPU time to every op
(the trace's header or the run's config says so: ``analyses.recorded_with``)."""
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
    text = (f"This trace was recorded with {' and '.join(on)}: the profiler then records a Python stack and/or every "
            f"allocation for each op ({mem:,} [memory] events here), which adds CPU time to every op. The CPU-side "
            + ("times of this trace (step time, launch latency, op durations) include that cost; GPU kernel times "
               "do not." if c.report.has_gpu else "times of this trace (step time, op durations) include that cost; "
               "it ran on the CPU, so every time here does."))
    fix = ("Profile timing with record_shapes only (or nothing extra), and make a second run with with_stack / "
           "profile_memory when you need stacks or memory; compare the two runs' CPU step times.")
    return Diagnosis("profiler_overhead", "The profiler's own overhead", text, fix, None,
                     "not measurable from one trace: compare with a run without these options",
                     {"options": on, "memory_events": mem})
