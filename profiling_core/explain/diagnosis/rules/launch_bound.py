"""``launch_bound``: the GPU waits on the CPU (busy under :data:`LAUNCH_BOUND_BUSY_BELOW` of the steps, kernels
under :data:`SHORT_KERNEL_US`, at least :data:`MIN_OPS_PER_STEP` GPU ops per step), with the launch calls' own
cost and what one graph launch in their place would save."""
from __future__ import annotations

from typing import Optional

from ..base import Diagnosis, _Ctx, _fmt_us, _steps


LAUNCH_BOUND_BUSY_BELOW = 0.5
"""GPU busy share of the steps below which the GPU counts as waiting on the CPU."""
SHORT_KERNEL_US = 10.0
"""Median kernel time below which the kernels count as tiny (a launch call costs a few µs)."""
MIN_OPS_PER_STEP = 2
LAUNCHES_DOMINATE = 0.25
"""Share of the step the launch calls must take (their count times their median duration, so that one call that
blocked does not count as launch cost) for the rule to recommend fewer launches first."""
_LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "hipLaunchKernel",
                 "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync",
                 "cudaMemsetAsync")


def _rule_launch_bound(c: _Ctx) -> Optional[Diagnosis]:
    """The GPU waits on the CPU: busy < 50 % of the steps, tiny kernels (median < 10 µs), at least two GPU ops per
    step. The launch calls' own time is measured; the gain of one graph launch in their place is estimated from
    their count and median duration; the most any change on the CPU side can save is the step less the GPU's
    busy time."""
    r = c.report
    s = r.summary
    if not s.get("has_gpu") or not s.get("steps") or s.get("gpu_busy_fraction") is None:
        return None
    busy = float(s["gpu_busy_fraction"])
    st = r.steps
    per_step_ops = float(st["gpu_ops"].median())
    ks = r.gpu_ops[r.gpu_ops["category"] == "kernel"]["dur_us"]
    if busy >= LAUNCH_BOUND_BUSY_BELOW or ks.empty or float(ks.median()) >= SHORT_KERNEL_US \
            or per_step_ops < MIN_OPS_PER_STEP:
        return None
    cpu = float(st["cpu_dur_us"].median())
    gpu = float(st["gpu_busy_us"].median())
    lat = r.launch_latency
    calls = lat[lat["launch_name"].isin(_LAUNCH_CALLS) & lat["step"].notna()].drop_duplicates("launch_id") \
        if not lat.empty else lat
    n_calls = len(calls) / _steps(r)
    call_us = float(calls["launch_dur_us"].median()) if len(calls) else None
    calls_us = float(calls["launch_dur_us"].sum()) / _steps(r) if len(calls) else 0.0
    graphs = int((calls["launch_name"] == "cudaGraphLaunch").sum()) if len(calls) else 0
    text = (f"The GPU waits on the CPU: it is busy {busy:.0%} of each step, {_fmt_us(gpu)} of work in a "
            f"{_fmt_us(cpu)} step (medians), {per_step_ops:g} GPU ops per step with a median kernel of "
            f"{_fmt_us(float(ks.median()))}.")
    if call_us is not None:
        text += (f" The {n_calls:g} launch calls per step take {_fmt_us(calls_us)} in all (median "
                 f"{_fmt_us(call_us)} each, {n_calls * call_us / cpu:.0%} of the step at that median); the rest of the step is other CPU work (Python, the dispatcher, "
                 "the profiler, whatever else the step does).")
    if graphs:
        text += f" The step already replays a CUDA graph ({graphs / _steps(r):g} cudaGraphLaunch per step)."
    gain = max(0.0, (n_calls - 1) * call_us) if call_us is not None and not graphs else None
    if call_us is not None and n_calls * call_us >= LAUNCHES_DOMINATE * cpu and not graphs:
        fix = ("Cut the launches: torch.compile fuses kernels (mode='default'), and mode='reduce-overhead' replays "
               f"the step as one CUDA graph (about {_fmt_us(gain)} per step less in launch calls, from "
               f"{n_calls:g} calls of {_fmt_us(call_us)}); or give each launch more work (a larger batch). Measure "
               "it: graph replay has its own per-call cost (input copies, checks).")
    else:
        fix = ("Give each step more GPU work (a larger batch or size per call), and find what the CPU does between "
               "the launches (the profiler table's CPU self time, sorted): fewer launches alone save only the launch "
               "calls' share" + (f" (about {_fmt_us(gain)} per step with one graph launch)" if gain else "") + ".")
    return Diagnosis("launch_bound", "The GPU waits on the CPU (launch-bound steps)", text, fix, max(0.0, cpu - gpu),
                     "step time less GPU busy time: the most that any change on the CPU side can save per step",
                     {"gpu_busy_fraction": busy, "cpu_step_us": cpu, "gpu_busy_us": gpu,
                      "gpu_ops_per_step": per_step_ops, "launch_calls_per_step": n_calls, "launch_call_us": call_us,
                      "launch_calls_us_per_step": calls_us, "graph_launch_gain_us": gain,
                      "slice_ids": st["slice_id"].astype(int).tolist()[:50]})
