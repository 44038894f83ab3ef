"""``memory_growth``: a device's allocated memory grows in every step: something is kept across steps (a list of
losses still attached to their graph, a cache keyed by step, a tensor appended each iteration) and the run ends out
of memory if it is long enough.

Read from ``analyses.memory.memory_churn``, by levels alone: the level a step leaves is the level at the next step's
start (what the step and the time after it kept), and for the last step its own end. The rule speaks when that level
rises with every step after the first (which may build lasting state, an optimizer's, a cache's), at least
:data:`MIN_GROWING_STEPS` of them, and names the ops whose blocks stay (``analyses.memory.unfreed``). A step's growth
is the rise of that level over the previous step's, so the figures of its sentence add up: the growths sum to the
difference between the two levels it names. What a step allocates and frees again before the next begins, inside it
or between steps, is no growth. On a device whose level counts from the window's start
(``analyses.memory.RELATIVE_BASES``: a CPU, a trace without totals) the sentence says so beside the levels, as the
peak's sentence and ``q1.memory`` do, and a level below 0 (without totals, a window that freed more than it had
allocated: what was allocated before it) as so much below the window's start."""
from __future__ import annotations

import pandas as pd

from ....analyses.memory import RELATIVE_BASES
from ....units import human_bytes
from ..base import Diagnosis, _Ctx

MIN_GROWING_STEPS = 2
"""Steps whose level must each rise above the previous step's: two rises in a row after the first step are a trend;
one could be a cache filled once."""
TOP_OPS = 3


def _left(ch: pd.DataFrame) -> pd.Series:
    """The level each step of one device leaves (in step order): the next step's start, the last step's end."""
    ch = ch.sort_values("step")
    left = ch["start_allocated_bytes"].shift(-1)
    left.iloc[-1] = ch["end_allocated_bytes"].iloc[-1]
    return pd.Series(left.astype("int64").to_numpy(), index=ch["step"].astype(int).to_numpy())


def _growing(churn: pd.DataFrame, steps: list[int]) -> list[tuple[int, str, pd.Series]]:
    """(growth over the steps after the first, device, each such step's growth) of the devices that grow. A step of
    ``steps`` (the trace's) after a device's first with no row of its own, between its rows or after its last, left
    that device's level as it was: no rise, so no growth in every step."""
    found = []
    for dev, ch in churn.groupby("device", sort=False):
        left = _left(ch)
        after = [k for k in steps if left.index[0] <= k]
        left = left.reindex(sorted(set(after) | set(left.index.tolist()))).ffill().astype("int64")
        rise = left.diff().iloc[1:]
        if len(rise) >= MIN_GROWING_STEPS and (rise > 0).all():
            found.append((int(left.iloc[-1] - left.iloc[0]), dev, rise.astype("int64")))
    return found


def _steps_text(steps: list) -> str:
    if not steps:
        return "outside every step"
    return f"steps {', '.join(map(str, steps[:6]))}{', …' if len(steps) > 6 else ''}"


def _level(x: int) -> str:
    """A level the sentence names: bytes, or, below 0, how far below the window's start it is."""
    return human_bytes(x) if x >= 0 else f"{human_bytes(-x)} below the window's start"


def _counted(peaks: pd.DataFrame, dev: str) -> str:
    """How the device's levels are counted where they leave out what was allocated before the window, else ""."""
    basis = peaks.loc[peaks["device"] == dev, "basis"]
    return RELATIVE_BASES[basis.iloc[0]][0] if len(basis) and basis.iloc[0] in RELATIVE_BASES else ""


def _rule_memory_growth(c: _Ctx) -> Diagnosis | None:
    m = c.report.memory
    found = _growing(m.churn, [int(k) for k in c.report.steps["step"]]) if not m.churn.empty else []
    if not found:
        return None
    total, dev, rise = max(found, key=lambda x: x[0])
    left = _left(m.churn[m.churn["device"] == dev])
    per = float(rise.median())
    steps = [int(s) for s in rise.index]
    u = m.unfreed[m.unfreed["device"] == dev].head(TOP_OPS) if len(m.unfreed) else m.unfreed
    start, end = _level(int(left.iloc[0])), _level(int(left.iloc[-1]))
    counted = _counted(m.peaks, dev)
    text = (f"{dev}'s allocated memory grows in every step: steps {steps[0]}–{steps[-1]} each leave about "
            f"{human_bytes(per)} more allocated than the step before ({human_bytes(total)} over {len(steps)} steps, "
            + (f"from {start} left by step {int(left.index[0])} to {end} left by step {steps[-1]}" if start != end
               else f"on top of {start}") + (f", {counted}" if counted else "")
            + "). A run long enough runs out of memory.")
    if len(u):
        text += " Allocated in the window and never freed: " + ", ".join(
            f"{op or 'top level'} {human_bytes(b)} in {n} block{'s' if n != 1 else ''} ({_steps_text(s)})"
            for op, b, n, s in zip(u["op"], u["bytes"], u["blocks"], u["steps"])) + "."
    fix = ("Find what the loop keeps: a loss or output appended to a list (keep loss.item() every N steps, or "
           "loss.detach(), not the tensor with its graph), a dict or cache filled per step, a tensor accumulated "
           "without .detach() (total += loss keeps every step's graph). "
           + ("torch.cuda.memory._record_memory_history() and its snapshot name the stack of every block still alive."
              if str(dev).startswith(("cuda", "hip")) else
              "torch.cuda's memory history records only the CUDA allocator, not this device's: profile again with "
              "profile_memory=True and with_stack=True, and the profiler's table grouped by stack "
              "(prof.key_averages(group_by_stack_n=5).table(sort_by='self_cpu_memory_usage')) says where the kept "
              "memory is allocated."))
    ev = {"device": dev, "steps": steps, "growth_bytes_per_step": [int(x) for x in rise],
          "median_growth_bytes": per, "growth_bytes": total, "min_growing_steps": MIN_GROWING_STEPS,
          "unfreed": [{"op": op, "bytes": int(b), "blocks": int(n), "steps": list(s)}
                      for op, b, n, s in zip(u["op"], u["bytes"], u["blocks"], u["steps"])]}
    return Diagnosis("memory_growth", "Memory grows every step", text, fix, None,
                     "memory, not time: each step keeps what the text says", ev)
