"""``allocator_in_step``: the caching allocator goes to the driver in every steady-state step. PyTorch's CUDA
allocator keeps the blocks a step frees and hands them to the next step, so a warm loop calls neither ``cudaMalloc``
nor ``cudaFree`` (nor, with ``expandable_segments``, the driver's ``cuMemCreate``/``cuMemMap``/``cuMemUnmap``/
``cuMemRelease``). Found by those calls on the threads that run the step in every step of the steady state
(``analyses.measured_steps``; ``report.cpu_own_times`` less its part beside the step: a thread that holds no step slice
and launches nothing in the step's window spends its own time, not the step's, and is named apart): once in one step
is a cache that grew, and no rule. Frees in every step (on any thread: the cache is the process's) mean cached blocks
are given back each step, by ``torch.cuda.empty_cache()`` in the loop or by the allocator itself when an allocation
did not fit and it released its cache to retry (memory near full); allocations alone, a cache that grows or shapes
that change. The stream-ordered ``cudaMallocAsync``/``cudaFreeAsync`` of the ``backend:cudaMallocAsync`` allocator
are its normal path and are not counted. The cost is the step's calls' own CPU time per step (mean): what the step
spends asking the driver for memory (a ``cudaFree``'s time includes its wait for the device to finish its work), no
more than the step can lose: its CPU time less the GPU work it launches (``base._cpu_time_cost``)."""
from __future__ import annotations

from typing import Optional

from ....analyses import measured_steps
from ....units import format_share
from ..base import Diagnosis, _Ctx, _cpu_time_cost, _fmt_n, _fmt_us

FREES = ("cudaFree", "hipFree", "cuMemUnmap", "cuMemRelease", "cuMemAddressFree")
ALLOCS = ("cudaMalloc", "hipMalloc", "cuMemCreate", "cuMemMap", "cuMemAddressReserve", "cuMemSetAccess")


def _rule_allocator_in_step(c: _Ctx) -> Optional[Diagnosis]:
    r = c.report
    own = r.cpu_own_times
    if not r.has_gpu or own.empty or r.steps.empty:
        return None
    basis = [int(x) for x in measured_steps(r.steps)["step"]]
    every = own[own["step"].isin(basis) & own["name"].astype(str).isin(FREES + ALLOCS)]
    calls = every.assign(calls=every["calls"] - every["beside_calls"], own_us=every["own_us"] - every["beside_us"])
    calls = calls[calls["calls"] > 0]
    if calls.empty or set(calls["step"].astype(int)) != set(basis):
        return None
    n = len(basis)
    by_name = calls.groupby(calls["name"].astype(str))[["calls", "own_us"]].sum()
    us = float(by_name["own_us"].sum()) / n
    cpu = float(r.steps.loc[r.steps["step"].isin(basis), "cpu_dur_us"].sum()) / n
    listed = ", ".join(f"{name} ×{_fmt_n(row.calls / n)}"
                       for name, row in by_name.sort_values("own_us", ascending=False).iterrows())
    frees = bool(every["name"].astype(str).isin(FREES).any())  # (any thread's: the blocks are the process's)
    aside = every[every["beside_calls"] > 0]
    scope = f"every one of the {n} steady-state steps" if n > 1 else "the one steady-state step"
    text = (f"The caching allocator goes to the driver in {scope}: {listed} per step, {_fmt_us(us)} of CPU time per "
            f"step ({format_share(us / cpu)} of the step's {_fmt_us(cpu)}). A warm loop's allocator hands each step "
            "the blocks the step before freed, and asks the driver for none.")
    if len(aside):
        text += (f" Threads beside the step (no step slice, no launch) made {_fmt_n(aside['beside_calls'].sum() / n)} "
                 f"more such calls per step, {_fmt_us(float(aside['beside_us'].sum()) / n)}, time that overlaps the "
                 "step's and is not counted.")
    if frees:
        where = ("in the loop" if by_name.index.isin(FREES).any()
                 else "on a thread beside the step")  # (only the other threads free)
        text += (f" Blocks are given back every step: that is torch.cuda.empty_cache() {where}, or the allocator "
                 "releasing its cache to retry an allocation that did not fit (memory near full); cudaFree also "
                 "waits for the device to finish its work.")
        fix = ("Take torch.cuda.empty_cache() out of the loop (it returns every cached block, and the next step asks "
               "the driver for them again); if memory is near full, leave the allocator room: a smaller batch, "
               "activation checkpointing, or PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against "
               "fragmentation (torch.cuda.memory_stats()'s num_alloc_retries counts the retries).")
    else:
        fix = ("The cache grows in every step: something the loop keeps grows (a list of losses kept as tensors, a "
               "history), or each step's shapes are new (variable lengths: pad or bucket them to a few sizes); "
               "profile_memory=True shows which ops' blocks stay.")
    ev = {"basis_steps": basis, "calls_per_step": {k: float(v) / n for k, v in by_name["calls"].items()},
          "us_per_step": us, "cpu_step_us": cpu, "frees": frees,
          "beside_calls_per_step": float(aside["beside_calls"].sum()) / n}
    cost, basis_text = _cpu_time_cost(
        r, us, "the CPU time of the driver allocation calls per steady-state step (mean): what the step spends asking "
        "the driver for memory (a cudaFree's time includes its wait for the device where the GPU had work queued)",
        f"the {_fmt_us(us)} of allocation calls per step")
    return Diagnosis("allocator_in_step", "The allocator asks the driver for memory in every step", text, fix, cost,
                     basis_text, ev)
