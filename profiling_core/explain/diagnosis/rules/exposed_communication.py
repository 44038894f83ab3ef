"""``exposed_communication``: the GPU waits for collectives that no other work overlaps. Found per GPU over the steady
state's steps (``analyses.measured_steps``): the time its collectives ran with nothing else beside them on the same GPU
(any stream; as ``step_breakdown`` counts communication, whose rule compute, copies and memsets come before; another
GPU's work hides none of it), at least :data:`EXPOSED_AT` of the steps' windows (``step_breakdown``'s), summed;
where several GPUs ran collectives, the one that waited most. The text names the collectives (``nccl``/``rccl``
kernels: each kind's own time in the same steady windows) and how much of their time other work hid; the fix follows
the collective: gradient all-reduce (DDP), all-gather and reduce-scatter (FSDP, ZeRO), send/receive
and all-to-all (pipeline stages, sharded embeddings). The cost is the exposed time per step (mean): the most that
overlapping it with compute can save, and no more than the step can lose (``base._gpu_time_cost``)."""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

from ....analyses import measured_steps
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
    basis = [int(x) for x in measured_steps(r.steps)["step"]]
    comm = sb[(sb["category"] == "communication") & sb["step"].isin(basis)]
    window = float(comm["window_us"].sum())
    n = len(comm)
    device, exposed, busy = _exposed(c, set(basis))
    if window <= 0 or exposed < EXPOSED_AT * window:
        return None
    kinds = _kinds_in_windows(c, set(basis), device)
    named = ", ".join(f"{k} {_fmt_us(v / n)}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    together = sum(kinds.values())
    hidden = 1.0 - exposed / busy if busy > 0 else 0.0
    several = len(set(r.gpu_ops["device"].dropna().tolist())) > 1
    text = (f"The GPU{f' (device {device}, the one whose collectives waited most)' if several else ''} waits for "
            f"communication that no other work overlaps: in the steady state ({n} step"
            f"{'s' if n != 1 else ''}) it ran only collectives for {_fmt_us(exposed / n)} per step on average, "
            f"{format_share(exposed / window)} of the steps' windows; its other work (compute, copies) hid "
            f"{format_share(hidden)} of the "
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
    ev = {"basis_steps": basis, "device": device, "exposed_us_per_step": exposed / n,
          "communication_us_per_step": busy / n, "exposed_share": exposed / window, "hidden_share": hidden,
          "collectives_us_per_step": {k: v / n for k, v in kinds.items()}, "exposed_at": EXPOSED_AT}
    alone = "the time per steady-state step the GPU ran only collectives (mean)"
    cost, cost_basis = _gpu_time_cost(r, exposed / n, alone)
    if cost_basis == alone:
        cost_basis += ": the most that overlapping them with compute can save"
    return Diagnosis("exposed_communication", "Communication that no other GPU work overlaps", text, fix, cost,
                     cost_basis, ev)


def _in_windows(c: _Ctx, basis: set, ops) -> list:
    """For each of the steps ``basis`` (in ``steps_list`` order), the ops' intervals clipped to its window: (starts,
    ends), ns."""
    st, w = c.shared.steps_list, c.shared.step_windows
    b = ops["start_ns"].to_numpy(dtype=np.int64)
    e = b + np.round(ops["dur_us"].to_numpy(dtype=np.float64) * 1000).astype(np.int64)
    out = []
    for k, row in enumerate(st):
        if row[1] is None or int(row[1]) not in basis:
            continue
        kb, ke = np.maximum(b, int(w["lo"][k])), np.minimum(e, int(w["hi"][k]))
        keep = ke > kb
        out.append((kb[keep], ke[keep]))
    return out


def _exposed(c: _Ctx, basis: set) -> tuple:
    """(device, exposed µs, collectives' µs) summed over the steps ``basis``, of the GPU whose collectives ran
    longest with nothing else beside them on that GPU: per step window, the union of its collectives less the part
    of it its other GPU ops (compute, copies, memsets: ``step_breakdown``'s rule) covered. Another GPU's work hides
    none of this GPU's wait (one process can drive several GPUs). (None, 0, 0) without collectives."""
    ops = c.report.gpu_ops
    if ops.empty:
        return None, 0.0, 0.0
    known: dict = {}  # (name, category) -> its GPU op category: once per distinct pair
    cat = np.array([known[key] if key in known else known.setdefault(key, gpu_op_category(*key))
                    for key in zip(ops["name"].astype(object), ops["category"].astype(object))], dtype=object)
    dev = ops["device"].astype(object).where(ops["device"].notna(), None).to_numpy(dtype=object)
    best = (None, 0.0, 0.0)
    for d in sorted(set(dev.tolist()), key=lambda x: (x is None, x if x is not None else 0)):
        on = np.array([x == d if d is not None else x is None for x in dev.tolist()], dtype=bool)
        comm = _in_windows(c, basis, ops[on & (cat == "communication")])
        if not sum(len(x) for x, _ in comm):
            continue
        work = _in_windows(c, basis, ops[on & (cat != "communication")])
        both = [(np.concatenate([a, x]), np.concatenate([z, y])) for (a, z), (x, y) in zip(comm, work)]
        u_comm, u_work, u_both = (float(unions_ns(p).sum()) / 1000.0 for p in (comm, work, both))
        exposed = u_both - u_work  # |comm ∪ other| − |other|: the collectives' time with nothing else beside it
        if best[0] is None or exposed > best[1]:
            best = (d, exposed, u_comm)
    return best


def _kinds_in_windows(c: _Ctx, basis: set, device=None) -> dict[str, float]:
    """{collective kind: µs} over the steps ``basis``: per step, the union of that kind's kernels (``gpu_ops`` of
    category ``communication``, on ``device`` where given) clipped to the step's window (``step_breakdown``'s),
    summed over the steps; the basis of the rule's exposed and overlapped time, so the figures read against each
    other."""
    ops = c.report.gpu_ops
    if device is not None and not ops.empty:
        ops = ops[ops["device"] == device]
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
