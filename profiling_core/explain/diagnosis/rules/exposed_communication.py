"""``exposed_communication``: the GPU waits for collectives that no compute overlaps. Found by
``analyses.step_breakdown``'s ``communication`` time (an instant counts for communication only when no compute, copy
or memset ran then, on any stream: the exposed communication) over the steady state's steps
(``analyses.basis_steps``): at least :data:`EXPOSED_AT` of their windows, summed. The text names the collectives
(``nccl``/``rccl`` kernels: each kind's own time in the same steady windows) and how much of their time compute hid;
the fix follows the collective: gradient all-reduce (DDP), all-gather and reduce-scatter (FSDP, ZeRO), send/receive
and all-to-all (pipeline stages, sharded embeddings). The cost is the exposed time per step (mean): the most that
overlapping it with compute can save, and no more than the step can lose (``base._gpu_time_cost``)."""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

from ....analyses import basis_steps
from ....analyses._shared import unions_ns
from ....analyses.categories import gpu_op_category
from ....units import format_share
from ..base import Diagnosis, _Ctx, _fmt_us, _gpu_time_cost

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
    kinds = _kinds_in_windows(c, set(basis))
    named = ", ".join(f"{k} {_fmt_us(v / n)}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    together = sum(kinds.values())
    hidden = 1.0 - exposed / busy if busy > 0 else 0.0
    text = (f"The GPU waits for communication that no compute overlaps: in the steady state ({n} step"
            f"{'s' if n != 1 else ''}) it ran only collectives for {_fmt_us(exposed / n)} per step, "
            f"{format_share(exposed / window)} of the steps' windows; compute hid {format_share(hidden)} of the "
            "collectives' "
            f"{_fmt_us(busy / n)} per step." + (f" By collective, in the same steps: {named} per step" if named else "")
            + ("; run at once on several streams, they add up to more than the collectives' time above, which counts "
               "each instant once." if named and together > busy + 1.0 else "." if named else ""))
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
          {k: v / n for k, v in kinds.items()}, "exposed_at": EXPOSED_AT}
    alone = "the time per steady-state step the GPU ran only collectives (mean)"
    cost, cost_basis = _gpu_time_cost(r, exposed / n, alone)
    if cost_basis == alone:
        cost_basis += ": the most that overlapping them with compute can save"
    return Diagnosis("exposed_communication", "Communication that no compute overlaps", text, fix, cost, cost_basis,
                     ev)


def _kinds_in_windows(c: _Ctx, basis: set) -> dict[str, float]:
    """{collective kind: µs} over the steps ``basis``: per step, the union of that kind's kernels (``gpu_ops`` of
    category ``communication``) clipped to the step's window (``step_breakdown``'s), summed over the steps; the basis
    of the rule's exposed and overlapped time, so the figures read against each other."""
    ops = c.report.gpu_ops
    st, w = c.shared.steps_list, c.shared.step_windows
    steps = [k for k, row in enumerate(st) if row[1] is not None and int(row[1]) in basis]
    if ops.empty or not steps:
        return {}
    names, cats = ops["name"].astype(object).to_numpy(), ops["category"].astype(object).to_numpy()
    kind_of: dict = {}  # (name, category) -> its kind, or None for a GPU op that is not a collective: once each
    for key in set(zip(names.tolist(), cats.tolist())):
        kind_of[key] = _kind(str(key[0])) if gpu_op_category(*key) == "communication" else None
    kinds = [kind_of[key] for key in zip(names.tolist(), cats.tolist())]
    b = ops["start_ns"].to_numpy(dtype=np.int64)
    e = b + np.round(ops["dur_us"].to_numpy(dtype=np.float64) * 1000).astype(np.int64)
    labels = sorted({k for k in kinds if k is not None})
    kinds = np.array(kinds, dtype=object)
    parts, keys = [], []
    for kind in labels:
        mine = kinds == kind
        for k in steps:
            lo, hi = int(w["lo"][k]), int(w["hi"][k])
            kb, ke = np.maximum(b[mine], lo), np.minimum(e[mine], hi)
            keep = ke > kb
            parts.append((kb[keep], ke[keep]))
            keys.append(kind)
    out: dict[str, float] = {}
    for kind, ns in zip(keys, unions_ns(parts).tolist()):
        out[kind] = out.get(kind, 0.0) + ns / 1000.0
    return {k: v for k, v in out.items() if v > 0}
