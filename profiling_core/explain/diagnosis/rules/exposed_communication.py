"""``exposed_communication``: the GPU waits for collectives that no compute overlaps. Found by
``analyses.step_breakdown``'s ``communication`` time (an instant counts for communication only when no compute, copy
or memset ran then, on any stream: the exposed communication) over the steady state's steps
(``analyses.basis_steps``): at least :data:`EXPOSED_AT` of their windows, summed. The text names the collectives
(``nccl``/``rccl`` kernels, from ``top_kernels``) and how much of their time compute hid; the fix follows the
collective: gradient all-reduce (DDP), all-gather and reduce-scatter (FSDP, ZeRO), send/receive and all-to-all
(pipeline stages, sharded embeddings). The cost is the exposed time per step (mean): the most that overlapping it
with compute can save."""
from __future__ import annotations

import re
from typing import Optional

from ....analyses import basis_steps
from ..base import Diagnosis, _Ctx, _fmt_us

EXPOSED_AT = 0.1
"""The share of the steady-state steps' windows the GPU spends in communication alone from which the rule speaks."""

_KINDS = (("AllReduce", "all-reduce"), ("ReduceScatter", "reduce-scatter"), ("AllGather", "all-gather"),
          ("AllToAll", "all-to-all"), ("SendRecv", "send/receive"), ("Send", "send/receive"), ("Recv", "send/receive"),
          ("Broadcast", "broadcast"), ("Reduce", "reduce"))


def _kind(name: str) -> str:
    """The collective a ``nccl``/``rccl`` kernel runs, from its name (``ncclKernel_AllReduce_RING_LL_Sum_float``,
    ``ncclDevKernel_SendRecv``): one of the second elements of ``_KINDS``, else ``collective``."""
    for word, kind in _KINDS:
        if re.search(rf"(?:^|_){word}(?:_|\(|$)", name):
            return kind
    return "collective"


def _rule_exposed_communication(c: _Ctx) -> Optional[Diagnosis]:
    r = c.report
    sb = r.step_breakdown
    if not r.has_gpu or sb.empty:
        return None
    basis = [int(x) for x in basis_steps(r.steps)["step"]]
    comm = sb[(sb["category"] == "communication") & sb["step"].isin(basis)]
    window = float(comm["window_us"].sum())
    exposed, busy = float(comm["time_us"].sum()), float(comm["busy_us"].sum())
    if window <= 0 or exposed < EXPOSED_AT * window:
        return None
    n = len(comm)
    tk = r.top_kernels
    tk = tk[tk["category"] == "communication"] if len(tk) else tk
    kinds: dict[str, float] = {}
    for name, total in zip(tk["name"].astype(str), tk["total_us"].astype(float)):
        kinds[_kind(name)] = kinds.get(_kind(name), 0.0) + total
    steps_all = max(1, len(r.steps))
    named = ", ".join(f"{k} {_fmt_us(v / steps_all)}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    hidden = 1.0 - exposed / busy if busy > 0 else 0.0
    text = (f"The GPU waits for communication that no compute overlaps: in the steady state ({n} step"
            f"{'s' if n != 1 else ''}) it ran only collectives for {_fmt_us(exposed / n)} per step, "
            f"{exposed / window:.0%} of the steps' windows; compute hid {hidden:.0%} of the collectives' "
            f"{_fmt_us(busy / n)} per step." + (f" Collective kernels per step (all steps): {named}." if named else ""))
    top = max(kinds, key=kinds.get) if kinds else "collective"
    fixes = {
        "all-reduce": "DDP overlaps each gradient bucket's all-reduce with the rest of the backward: keep that "
                      "overlap working (no find_unused_parameters unless needed, static_graph=True, "
                      "gradient_as_bucket_view=True; a smaller bucket_cap_mb starts the first all-reduce earlier), "
                      "all-reduce less often (model.no_sync() over gradient-accumulation micro-steps), or give each "
                      "GPU more compute per step (a larger per-GPU batch).",
        "all-gather": "FSDP and ZeRO gather each layer's parameters before using it: prefetch the next gather "
                      "(backward_prefetch=BACKWARD_PRE, forward_prefetch=True), wrap larger units, or give each GPU "
                      "more compute per step (a larger per-GPU batch).",
        "reduce-scatter": "FSDP and ZeRO reduce-scatter each unit's gradients in the backward: keep it overlapped "
                          "(backward_prefetch=BACKWARD_PRE), wrap larger units, reduce less often "
                          "(no_sync() over gradient-accumulation micro-steps), or give each GPU more compute per step.",
        "send/receive": "Point-to-point transfers (pipeline stages, or an all-to-all of sharded embeddings built from "
                        "sends and receives) run with nothing to overlap: pipeline them with compute (more "
                        "micro-batches per pipeline step; a train pipeline that fetches the next batch's embeddings "
                        "while this one computes), or move less (smaller activations or embeddings in the transfer).",
        "all-to-all": "The all-to-all (sharded embeddings, expert parallelism) runs with nothing to overlap: pipeline "
                      "it with compute (a train pipeline that starts the next batch's exchange during this one's "
                      "compute), or exchange less (smaller embedding dimensions, capacity factors).",
    }
    fix = fixes.get(top, "Overlap the collectives with compute (issue them on their own stream while the next "
                         "computation runs), communicate less often or less data, or give each GPU more compute per "
                         "step.")
    fix += (" Then check the link: the same bytes on NVLink take a fraction of their time over PCIe or the network "
            "(the collectives' kernel names say the algorithm, RING or TREE, not the link).")
    ev = {"basis_steps": basis, "exposed_us_per_step": exposed / n, "communication_us_per_step": busy / n,
          "exposed_share": exposed / window, "hidden_share": hidden, "collectives_us_per_step":
          {k: v / steps_all for k, v in kinds.items()}, "exposed_at": EXPOSED_AT}
    return Diagnosis("exposed_communication", "Communication that no compute overlaps", text, fix, exposed / n,
                     "the time per steady-state step the GPU ran only collectives (mean): the most that overlapping "
                     "them with compute can save", ev)
