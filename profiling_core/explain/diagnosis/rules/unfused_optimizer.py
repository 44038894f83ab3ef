"""``unfused_optimizer``: a training step whose optimizer runs the for-loop implementation: a few ATen ops (and on a
GPU a few kernels) per parameter, where torch offers ``foreach`` (one multi-tensor op per update term) and ``fused``
(one kernel for all parameters).

The optimizer phase is ``analyses.phases``' (``train::optimizer``, else the profiler's ``Optimizer.step#...``). The
implementation is read from the ATen ops inside it: ``aten::_fused_*`` is fused, ``aten::_foreach_*`` is foreach,
and from its kernels: a ``multi_tensor_apply`` kernel launched in it is a multi-tensor update (apex's and DeepSpeed's
FusedAdam run no ``_foreach_`` op: in HTA's A100 trace one updates 257 parameters in 8 such kernels a step, beside
257 ``aten::add_`` of its step counters); none of these is the for-loop. The rule speaks when the for-loop ran at least :data:`PER_PARAMETER_OPS_AT` ATen ops per
step. The cost bound follows the one bound rule (``analyses.steps.bound``): when the GPU sets the pace (a
compute-bound steady state) it is the optimizer phase's GPU time per step, else its CPU time (a fused optimizer still
takes some of either), no more than the step can lose: its CPU time less the GPU work it launches other than the
optimizer's (``base._cpu_time_cost``), since the step gets no shorter than that work."""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

from ....analyses import GPU_PACED, measured_steps, phase_ops
from ....analyses._shared import shared_for
from ..base import Diagnosis, _Ctx, _cpu_time_cost, _fmt_n, _fmt_us, _in_this_app, _multi_tensor_kernels

PER_PARAMETER_OPS_AT = 8
"""ATen ops per step in the optimizer phase from which a for-loop optimizer is worth naming (a for-loop Adam runs
about ten per parameter; SGD on one or two tensors stays below)."""

_CLASS = re.compile(r"Optimizer\.step#([A-Za-z0-9_]+)\.step")


def _inside_optimizer_step(c: _Ctx, ops) -> Optional[np.ndarray]:
    """Which of the phase's ATen ops ``ops`` (``phase_ops`` rows) start inside a ``Optimizer.step#...`` range on
    their thread (a mask), or None where the trace recorded no such range (or none holds any of them)."""
    sh = shared_for(c.session, c.shared)
    t = sh.slices
    ranges = np.flatnonzero(sh.name_mask(lambda n: isinstance(n, str) and _CLASS.match(n) is not None))
    if not len(ranges) or not len(ops):
        return None
    rows = sh.pos(ops["slice_id"].to_numpy(dtype=np.int64))
    ts, utid = t["ts"][rows], t["utid"][rows]
    inside = np.zeros(len(rows), dtype=bool)
    for j in ranges.tolist():
        inside |= (utid == t["utid"][j]) & (ts >= t["ts"][j]) & (ts < t["ts"][j] + t["dur"][j])
    return inside if inside.any() else None


def _rule_unfused_optimizer(c: _Ctx) -> Optional[Diagnosis]:
    r = c.report
    if not r.has_phases:
        return None
    opt = r.phases[r.phases["phase"] == "optimizer"]
    if opt.empty or not (opt["cpu_us"] > 0).any():
        return None
    ops = phase_ops(c.session, "optimizer", shared=c.shared)
    names = ops["name"].astype(str)
    if names.str.startswith(("aten::_fused_", "aten::_foreach_")).any():
        return None  # fused or foreach ran
    if "optimizer" in _multi_tensor_kernels(c)[1]:
        return None  # a multi-tensor update ran without torch's foreach or fused ops
    # per step: over the steady state's steps in which the optimizer ran (the first step creates the optimizer's
    # state, a recompile is no update's cost), where there are any; else over every step it ran in
    ran = opt[opt["cpu_us"] > 0]
    basis = ran[ran["step"].isin(measured_steps(r.steps)["step"])]
    basis = basis if len(basis) else ran
    n_steps = max(1, len(set(basis["step"])))
    in_basis = ops[ops["step"].isin(basis["step"])]
    ops, names = (in_basis, in_basis["name"].astype(str)) if len(in_basis) else (ops, names)
    # the optimizer's own ops: those inside the profiler's Optimizer.step#... range where it recorded one (the phase
    # also holds a GradScaler's unscale and step, whose multi-tensor _amp_foreach_ op is no update's)
    phase_n = len(ops)
    own = _inside_optimizer_step(c, ops)
    if own is not None:
        ops, names = ops[own], names[own]
    per_step = len(ops) / n_steps
    if per_step < PER_PARAMETER_OPS_AT:
        return None
    cpu_us, gpu_us = float(basis["cpu_us"].median()), float(basis["gpu_us"].median())
    kernels = float(basis["kernels"].median())
    cls = next((m.group(1) for n in c.session.tables.name.uniq if isinstance(n, str) and (m := _CLASS.match(n))),
               None)
    counts = names.value_counts()
    top = counts.head(4)
    what = ", ".join(f"{n} ×{_fmt_n(k / n_steps)}" for n, k in top.items()) + (
        f" and {len(counts) - len(top)} more op name{'s' if len(counts) - len(top) > 1 else ''}"
        if len(counts) > len(top) else "")
    on_gpu = r.has_gpu
    aside = phase_n - len(ops)
    text = (f"The optimizer{f' ({cls})' if cls else ''} ran its for-loop implementation: {_fmt_n(per_step)} ATen "
            f"ops per step{' inside its Optimizer.step range' if own is not None else ''} ({what}), none of them a "
            "multi-tensor (_foreach_) or fused (_fused_) op"
            + (f" (the optimizer phase's {_fmt_n(aside / n_steps)} other ATen ops per step are outside that range: a "
               "GradScaler's unscale and step, say; the time figures that follow are the phase's, theirs included)"
               if aside else "")
            + (f"; {_fmt_n(kernels)} kernels per step in the optimizer phase, {_fmt_us(gpu_us)} of GPU time" if on_gpu
               else "")
            + f", {_fmt_us(cpu_us)} of CPU time per step. Each parameter's update is a few small ops, each "
            "dispatched (and on a GPU launched) on its own.")
    fix = ("Construct the optimizer with fused=True (torch.optim.Adam/AdamW/SGD(..., fused=True): one kernel updates "
           "every parameter; CUDA, and the CPU in recent torch) or foreach=True (one multi-tensor op per update term; "
           "torch's default on CUDA, not on a CPU)." + _in_this_app(c, "the impl knob", knob="impl"))
    # gradient accumulation: the optimizer runs in one step of several; the cost is per step, all steps counted
    # (each step number once: in a file of merged ranks a number names one step slice per rank, and the phases'
    # rows, by step number, hold them all)
    steady = sorted({int(x) for x in measured_steps(r.steps)["step"]})
    ran = set(int(x) for x in opt.loc[opt["cpu_us"] > 0, "step"])
    k = len(ran & set(steady))
    every = k / len(steady) if steady and k else 1.0
    if every < 1:
        text += (f" The optimizer ran in {k} of the {len(steady)} steady-state steps (gradient accumulation): the "
                 "figures above are per step that ran it, the cost below per step of the loop.")
    paced_by = (r.summary.get("steady_state") or {}).get("bound")
    gpu_paced = on_gpu and paced_by in GPU_PACED
    if gpu_paced:
        cost, basis_text = (gpu_us * every, "the optimizer phase's GPU time per step (the GPU sets the pace: a "
                            f"{paced_by} step): what a fused optimizer could save at most (it still takes some)")
    else:  # the CPU sets the pace: the step gets no shorter than the GPU work left once the optimizer is fused
        cost, basis_text = _cpu_time_cost(
            r, cpu_us * every, "the optimizer phase's CPU time per step: what a fused optimizer could save at most (it "
            "still takes some)", f"the optimizer's {_fmt_us(cpu_us * every)} of CPU time per step",
            gpu_us * every if on_gpu else 0.0,
            " other than the optimizer's own, which a fused optimizer shortens too" if on_gpu else "")
    return Diagnosis("unfused_optimizer", "For-loop optimizer: per-parameter ops every step", text, fix, cost,
                     basis_text,
                     {"slice_ids": ops["slice_id"].astype(int).tolist()[:50], "optimizer": cls,
                      "steady_steps_with_optimizer": k, "steady_steps": len(steady),
                      "aten_ops_per_step": per_step, "kernels_per_step": kernels, "gpu_us_per_step": gpu_us,
                      "cpu_us_per_step": cpu_us})
