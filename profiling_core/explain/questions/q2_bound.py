"""Question 2, overhead-bound or compute-bound (``q2.bound``): the GPU's busy share of the steps against the
threshold of ``analyses.cpu_vs_gpu``'s per-step verdicts; on a CPU, the GEMM's own time against the step."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...analyses.steps import OVERHEAD_BOUND_BELOW, bound
from ...units import format_duration_us as _us
from .base import NO_GPU_TEXT, Finding, _num, _self_times_by_step


_OVERHEAD_BELOW = OVERHEAD_BOUND_BELOW  # the threshold of analyses.cpu_vs_gpu's per-step verdicts
_MATH_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")  # the ops that do the GEMM (matmul dispatches)


def _all_steps(n: int) -> str:
    return "the only step" if n == 1 else f"all {n} steps"


def _bound_basis(cv: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The steps the overhead/compute verdict rests on: with 3 or more steps, those after the first (the first
    carries start-up effects that differ with the schedule); otherwise all of them."""
    if len(cv) >= 3:
        return cv.iloc[1:], f"the {len(cv) - 1} steps after the first (the first carries start-up effects)"
    return cv, _all_steps(len(cv))


def _q2_bound(r, config=None) -> list[Finding]:
    s = r.steps
    if s.empty:
        if not r.has_gpu:
            return [Finding("q2.bound", 2, "CPU only", NO_GPU_TEXT + " and no ProfilerStep: nothing to compare.",
                            {"steps": 0, "gpu_ops": 0})]
        frac = r.summary.get("gpu_busy_fraction")
        return [Finding("q2.bound", 2, "GPU busy share",
                        f"No ProfilerStep in this trace; over the whole trace the GPU was busy "
                        f"{_us(r.summary['gpu_busy_us'])}, {100 * (frac or 0):.1f}% of its span.",
                        {"steps": 0, "gpu_busy_us": _num(r.summary["gpu_busy_us"]), "gpu_busy_fraction": _num(frac)})]
    cpu_med = float(s["cpu_dur_us"].median())
    if not r.has_gpu:
        return [_q2_cpu(r, cpu_med)]
    gpu_med = float(s["gpu_busy_us"].median())
    frac_med = float(s["gpu_busy_fraction"].median())
    cv = r.cpu_vs_gpu
    bounds = cv["bound"].value_counts().to_dict()
    majority = max(bounds, key=bounds.get)
    # The verdict: the median GPU busy share of the basis steps against the threshold the per-step labels use.
    basis, basis_text = _bound_basis(cv)
    with_gpu = basis[basis["bound"] != "no-gpu"]
    frac_basis = float(with_gpu["gpu_busy_fraction"].median()) if len(with_gpu) else 0.0
    label = bound(frac_basis, len(with_gpu))  # the per-step rule, applied to the basis steps' median
    ev = {"steps": int(len(s)), "cpu_step_median_us": _num(cpu_med), "gpu_step_median_us": _num(gpu_med),
          "gpu_busy_fraction_median": _num(frac_med), "bound": label,
          "bound_basis": "after_first" if len(cv) >= 3 else "all",
          "bound_basis_steps": [int(x) for x in basis["step"]],
          "bound_basis_gpu_busy_fraction_median": _num(frac_basis), "bound_threshold": _OVERHEAD_BELOW,
          "bound_majority": majority, "bound_counts": {k: int(v) for k, v in bounds.items()},
          "gpu_busy_fraction": _num(r.summary.get("gpu_busy_fraction"))}
    rel = "more" if gpu_med > cpu_med else "less"
    counts = ", ".join(f"{int(v)} {k}" for k, v in sorted(bounds.items(), key=lambda kv: -kv[1]))
    cmp = f"{'below' if label == 'overhead-bound' else 'at or above'} {100 * _OVERHEAD_BELOW:.0f}%"
    text = (f"Per step the CPU spent a median {_us(cpu_med)} and launched {_us(gpu_med)} of GPU work ({rel} GPU "
            f"than CPU time); ")
    if len(s) == 1:
        text += (f"the GPU was busy {100 * frac_med:.1f}% of the only step's wall time ({cmp}), so the workload is "
                 f"{label}." if label != "no-gpu" else "the only step launched no GPU work: no verdict.")
        return [Finding("q2.bound", 2, label.capitalize(), text, ev)]
    text += (f"the GPU was busy {100 * frac_med:.1f}% of a step's wall time (median of all {len(s)} steps; one by "
             f"one: {counts}). ")
    if label == "no-gpu":
        text += f"None of {basis_text} launched GPU work, so there is no overhead/compute verdict."
    else:
        text += (f"Verdict from {basis_text}: the GPU was busy a median {100 * frac_basis:.1f}% of their wall time "
                 f"({cmp}), so the workload is {label}.")
    return [Finding("q2.bound", 2, label.capitalize(), text, ev)]


def _q2_cpu(r, cpu_med: float) -> Finding:
    """Question 2 on a CPU: the math (the GEMM op's own time, its children excluded) against the step, the rest being
    framework overhead around it; the same verdict rule as on a GPU, with the math's share in place of the GPU's
    busy share; and the GEMM's achieved GFLOP/s where its FLOPs are known."""
    s = r.steps
    ev = {"steps": int(len(s)), "cpu_step_median_us": _num(cpu_med), "gpu_ops": 0}
    text = f"{NO_GPU_TEXT}: {_all_steps(len(s))} ran on the CPU, median {_us(cpu_med)} per step."
    ch = r.dispatch_chains
    numbers = [int(x) for x in s["step"]]
    by_step = _self_times_by_step(ch, numbers) if not ch.empty else {}
    shares, maths = [], []
    for k, dur in zip(numbers, s["cpu_dur_us"].astype(float)):
        g = by_step.get(k)
        if g is None or dur <= 0:
            continue
        math_us = float(g.loc[g["name"].astype(str).isin(_MATH_OPS), "self_us"].sum())
        maths.append(math_us)
        shares.append(math_us / dur)
    if not shares or max(maths) <= 0:
        return Finding("q2.bound", 2, "CPU only", text, ev)
    share, math_med = float(np.median(shares)), float(np.median(maths))
    label = bound(share)
    ev.update({"cpu_math_us_median": _num(math_med), "cpu_math_share_median": _num(share), "bound": label,
               "bound_threshold": _OVERHEAD_BELOW, "bound_basis": "cpu_math_share"})
    text += (f" The GEMM itself (the GEMM op's own time, its children excluded) took a median {_us(math_med)}, "
             f"{100 * share:.1f}% of a step; the other {100 * (1 - share):.1f}% is framework overhead around the "
             f"math (dispatch through aten::matmul, the add, the profiler's step). "
             f"{'Below' if label == 'overhead-bound' else 'At or above'} {100 * _OVERHEAD_BELOW:.0f}%, so on this CPU "
             f"the workload is {label}.")
    g = r.gemm_throughput
    cpu_g = g[g["device"] == "cpu"] if not g.empty else g
    if len(cpu_g):
        gflops = float(cpu_g["tflops"].median()) * 1000
        ev["gemm_gflops_median"] = _num(gflops)
        text += f" The GEMM ran at a median {gflops:.1f} GFLOP/s (FLOPs from {cpu_g['flops_from'].iloc[0]})."
    return Finding("q2.bound", 2, label.capitalize(), text, ev)
