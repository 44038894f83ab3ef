"""``memory_growth``: a device's allocated memory grows in every step: something is kept across steps (a list of
losses still attached to their graph, a cache keyed by step, a tensor appended each iteration) and the run ends out
of memory if it is long enough.

Read from ``analyses.memory.memory_churn``: the rule speaks when the steps after the first (which may build lasting
state, an optimizer's, a cache's), at least :data:`MIN_GROWING_STEPS` of them, each leave more allocated than they
found, and names the ops whose blocks stay (``analyses.memory.unfreed``)."""
from __future__ import annotations

from ....units import human_bytes
from ..base import Diagnosis, _Ctx

MIN_GROWING_STEPS = 2
"""Steps that must each end with more allocated than they began with: two rises in a row after the first step are a
trend; one could be a cache filled once."""
TOP_OPS = 3


def _rule_memory_growth(c: _Ctx) -> Diagnosis | None:
    m = c.report.memory
    if m.churn.empty:
        return None
    found = []
    for dev, ch in m.churn.groupby("device", sort=False):
        basis = ch.sort_values("step").iloc[1:]
        if len(basis) >= MIN_GROWING_STEPS and (basis["net_bytes"] > 0).all():
            found.append((float(basis["net_bytes"].sum()), dev, basis))
    if not found:
        return None
    total, dev, basis = max(found, key=lambda x: x[0])
    per = float(basis["net_bytes"].median())
    steps = [int(s) for s in basis["step"]]
    u = m.unfreed[m.unfreed["device"] == dev].head(TOP_OPS) if len(m.unfreed) else m.unfreed
    start, end = (human_bytes(int(basis["start_allocated_bytes"].iloc[0])),
                  human_bytes(int(basis["end_allocated_bytes"].iloc[-1])))
    text = (f"{dev}'s allocated memory grows in every step: steps {steps[0]}–{steps[-1]} each leave about "
            f"{human_bytes(per)} more allocated than they found ({human_bytes(total)} over {len(steps)} steps, "
            + (f"from {start} to {end}" if start != end else f"on top of {start}")
            + "). A run long enough runs out of memory.")
    if len(u):
        text += " Allocated in the window and never freed: " + ", ".join(
            f"{op or 'top level'} {human_bytes(b)} in {n} block{'s' if n != 1 else ''} (steps "
            f"{', '.join(map(str, s[:6]))}{', …' if len(s) > 6 else ''})"
            for op, b, n, s in zip(u["op"], u["bytes"], u["blocks"], u["steps"])) + "."
    fix = ("Find what the loop keeps: a loss or output appended to a list (keep loss.item() every N steps, or "
           "loss.detach(), not the tensor with its graph), a dict or cache filled per step, a tensor accumulated "
           "without .detach() (total += loss keeps every step's graph). torch.cuda.memory._record_memory_history() and "
           "its snapshot name the stack of every block still alive.")
    ev = {"device": dev, "steps": steps, "net_bytes_per_step": [int(x) for x in basis["net_bytes"]],
          "median_net_bytes": per, "growth_bytes": total, "min_growing_steps": MIN_GROWING_STEPS,
          "unfreed": [{"op": op, "bytes": int(b), "blocks": int(n), "steps": list(s)}
                      for op, b, n, s in zip(u["op"], u["bytes"], u["blocks"], u["steps"])]}
    return Diagnosis("memory_growth", "Memory grows every step", text, fix, None,
                     "memory, not time: each step keeps what the text says", ev)
