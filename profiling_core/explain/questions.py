"""Findings: short statements, with their evidence, about what THIS trace shows for each study question.

Every sentence is built from the analyses of the trace in hand (no text fixed in advance): on an H200 there is
no occupancy query before the GEMM, on an A100 there may be one, on a CPU-only trace there is no GPU lane, and the
findings say so. ``question`` refers to the ten questions of the study (docs: STUDY.md).

    >>> from profiling_core import open_trace
    >>> from profiling_core.findings import findings
    >>> for f in findings(open_trace("trace.json")):      # doctest: +SKIP
    ...     print(f.question, f.title, "-", f.text)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from ..analyses.steps import OVERHEAD_BOUND_BELOW, bound
from ..config import config_field as _cfg
from ..units import format_duration_us as _us  # the one duration formatter (findings, CLI, pages)

__all__ = ["Finding", "findings", "NO_GPU_TEXT", "FIRST_STEP_SLOWER_PCT", "MEAN_ABOVE_MEDIAN_PCT", "MIN_LAUNCHES_FOR_SKEW"]

NO_GPU_TEXT = "This trace has no GPU lane (no kernel, memcpy or memset events)"
_MAX_LISTED = 6
_OVERHEAD_BELOW = OVERHEAD_BOUND_BELOW  # the threshold of analyses.cpu_vs_gpu's per-step verdicts
FIRST_STEP_SLOWER_PCT = 5.0
"""A first profiled step counts as slower than the others (question 3) when it took more than this many percent above
their median; within it, the difference is noise and no cost is explained."""
MEAN_ABOVE_MEDIAN_PCT = 2.0
"""A kernel whose mean lies more than this many percent above its median is skewed by a few slow launches
(question 8); the Kernel variance page gives each kernel the same verdict."""
MIN_LAUNCHES_FOR_SKEW = 3
"""Fewer launches than this say nothing about skew: the question-8 finding and the page then give no verdict."""


@dataclass(frozen=True)
class Finding:
    """One statement about the trace, with the numbers and slice names it rests on."""

    id: str
    """Stable identifier, e.g. ``q6.launch_path``."""
    question: int
    """The study question (1..10) it answers."""
    title: str
    text: str
    """Plain text, not Markdown: it quotes the trace's names as they are, so whoever renders it escapes it
    (the app: ``profiling_core.md_text``; the HTML report: ``html.escape``)."""
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.question <= 10:
            raise ValueError(f"question must be 1..10, got {self.question!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "title": self.title, "text": self.text,
                "evidence": self.evidence}


def _short(name: str, n: int = 60) -> str:
    name = str(name)
    return name if len(name) <= n else name[: n - 1] + "…"


def _num(x) -> Optional[float]:
    return None if x is None or pd.isna(x) else round(float(x), 3)


def _n(count, word: str, plural: Optional[str] = None) -> str:
    """``1 launch``, ``3 launches``; a median such as 1.5 keeps the plural."""
    return f"{count:g} {word if count == 1 else (plural or word + 's')}"


def _ordinal(i: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(i, f"{i}th")


def _as_config(config):
    """The run's config as an ``ExperimentConfig`` (a meta.json dict is read by ``ExperimentConfig.from_dict``, which
    knows what older runs ran with); None when unknown or unreadable."""
    from ..config import ExperimentConfig
    from ..errors import ConfigError
    if config is None or isinstance(config, ExperimentConfig):
        return config
    try:
        return ExperimentConfig.from_dict(dict(config))
    except (ConfigError, TypeError, ValueError):
        return None


# --- one function per question; each returns a list of findings --------------------------------------------------

def _q1_table(r, config=None) -> list[Finding]:
    t = r.profiler_table
    if t.empty:
        return []
    self_cpu = float(t["self_cpu_us"].sum())
    top = t.sort_values("self_cpu_us", ascending=False).iloc[0]
    ev = {"self_cpu_total_us": _num(self_cpu), "top_self_cpu_row": str(top["name"]),
          "top_self_cpu_us": _num(top["self_cpu_us"]), "rows": int(len(t))}
    text = (f"The table has {len(t)} rows; self CPU time sums to {_us(self_cpu)} and the largest self CPU row is "
            f"{_short(top['name'])} ({_us(top['self_cpu_us'])}); total CPU time of a row includes its children.")
    out = [Finding("q1.table", 1, "Self vs total CPU time", text, ev)]
    if not r.has_gpu:
        out.append(Finding("q1.no_gpu", 1, "No device columns", NO_GPU_TEXT + ": the table has no CUDA columns to "
                           "read, only CPU time.", {"gpu_ops": 0}))
        return out
    dev_sum = float(t["self_device_us"].sum())
    busy = float(r.summary["gpu_busy_us"]) if r.summary.get("gpu_busy_scope") == "trace" else float(
        r.gpu_busy.set_index("scope").loc["trace", "busy_us"])
    ann = t[(t["lane"] == "gpu") & ~t["name"].isin(set(r.gpu_ops["name"].unique()))]
    cpu_dev = t[(t["lane"] == "cpu") & (t["self_device_us"] > 0)]
    ev2 = {"sum_self_device_us": _num(dev_sum), "gpu_busy_us": _num(busy),
           "ratio": _num(dev_sum / busy) if busy > 0 else None,
           "gpu_annotation_rows": sorted(map(str, ann["name"])), "cpu_rows_with_device_time": sorted(
               map(str, cpu_dev["name"]))}
    text2 = (f"Summing self device time over all rows gives {_us(dev_sum)}, "
             f"{dev_sum / busy:.1f}× the {_us(busy)} the GPU was actually busy (union of kernel, memcpy and memset "
             f"intervals): ") if busy > 0 else f"Summing self device time over all rows gives {_us(dev_sum)}: "
    parts = []
    if len(cpu_dev):
        parts.append("the ops that launched GPU work (" + ", ".join(map(_short, cpu_dev["name"][:4])) +
                     ") carry their kernels' time")
    if len(ann):
        parts.append("the GPU-side annotation rows (" + ", ".join(map(_short, ann["name"][:4])) +
                     ") carry the time of everything under them")
    text2 += ("; ".join(parts) or "no row is counted twice") + "."
    out.append(Finding("q1.double_count", 1, "Summing Self CUDA double counts", text2, ev2))
    return out


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


def _per_name(col: pd.Series, fn) -> np.ndarray:
    """``fn(col.astype(str))`` as an object array, computed once per distinct value and taken back to every row: a
    dispatch-chain column has 80k+ rows of a few hundred names on a large trace, and the per-row text copies
    cost tens of MiB."""
    codes, uniq = pd.factorize(col, use_na_sentinel=False)  # a missing value is one more distinct value
    return fn(pd.Series(uniq, dtype=object).astype(str)).to_numpy(dtype=object)[codes]


def _self_times_by_step(ch: pd.DataFrame, steps) -> dict:
    """``{step: CPU slices of that step's chain}`` for the given steps (id, name with ProfilerStep#N as
    ProfilerStep*, dur_us, self_us = dur_us less its children's, occurrence = the how-manieth slice of that name in
    the step), computed in one pass over the chains (children summed per step and parent)."""
    cpu = ch.loc[ch["lane"] == "cpu", ["step", "id", "parent_id", "name", "dur_us"]]  # only the columns used
    child = cpu.groupby(["step", "parent_id"])["dur_us"].sum()
    out = cpu.drop(columns="parent_id")
    del cpu
    out["name"] = _per_name(out["name"], lambda t: t.str.replace(r"^ProfilerStep#\d+$", "ProfilerStep*", regex=True))
    at = child.index.get_indexer(pd.MultiIndex.from_arrays([out["step"], out["id"]]))
    sums = np.append(child.to_numpy(dtype=float), 0.0)  # index -1 (no children) takes the 0
    out["self_us"] = out["dur_us"] - sums[at]
    out["occurrence"] = out.groupby(["step", "name"]).cumcount()
    out = out[out["step"].isin(list(steps))]
    return {k: g.drop(columns="step") for k, g in out.groupby("step", sort=False)}


_CALL_CATEGORIES = ("cuda_runtime", "cuda_driver", "runtime", "driver")
_LAZY_LOADING = ("Lazy Function Loading", "Runtime Triggered Module Loading")
_PROFILER_STARTUP = ("Activity Buffer Request",)


def _first_step_only_calls(r, first_step: int) -> pd.DataFrame:
    """Runtime/driver calls made in the first step under names that no later step calls (name, calls, us)."""
    ch = r.dispatch_chains
    if ch.empty:
        return pd.DataFrame(columns=["name", "calls", "us"])
    # the category test once per distinct category (missing categories are no call), names as text once
    cat = ch["category"]
    keep = [c for c in cat.dropna().unique() if str(c).lower() in _CALL_CATEGORIES]
    calls = ch[cat.isin(keep)]
    names = pd.Series(_per_name(calls["name"], lambda t: t), index=calls.index, dtype=object)
    later = set(names[calls["step"] != first_step].unique())
    sel = (calls["step"] == first_step) & ~names.isin(later)
    first = calls[sel]
    out = first.groupby(names[sel])["dur_us"].agg(["count", "sum"]).reset_index()
    out.columns = ["name", "calls", "us"]
    return out.sort_values("us", ascending=False, kind="stable").reset_index(drop=True)


def _table_rows(r, names) -> pd.DataFrame:
    t = r.profiler_table
    return t[(t["lane"] == "cpu") & t["name"].astype(str).isin(names)] if not t.empty else t


_GEMM_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul")
_MATH_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")  # the ops that do the GEMM (matmul dispatches)


def _cold_start_causes(only: pd.DataFrame, lazy: pd.DataFrame, slice_name: str) -> str:
    """What the calls found point at (workspace, library heuristics, lazy loading), only for those present."""
    names = " ".join(only["name"])
    causes = []
    if "Malloc" in names:
        causes.append("workspace allocation (cudaMalloc)")
    if "Occupancy" in names or "FuncSetAttribute" in names or "DeviceGetAttribute" in names:
        lib = f"the GEMM library's (cuBLAS, under {slice_name})" if slice_name in _GEMM_OPS else "a library's"
        causes.append(f"{lib} set-up and kernel heuristics (attribute and occupancy queries)")
    if len(lazy):
        causes.append("lazy module loading (" + ", ".join(sorted(map(str, lazy["name"]))) + ")")
    return ", ".join(causes)


def _q3_cold(r, config=None) -> list[Finding]:
    s = r.steps
    if len(s) < 2:
        return []
    first, rest = s.iloc[0], s.iloc[1:]
    first_step = int(first["step"])
    rest_med = float(rest["cpu_dur_us"].median())
    ratio = float(first["cpu_dur_us"]) / rest_med if rest_med > 0 else None
    extra = float(first["cpu_dur_us"]) - rest_med
    slower = extra > FIRST_STEP_SLOWER_PCT / 100 * rest_med
    ev = {"first_step": first_step, "first_step_cpu_us": _num(first["cpu_dur_us"]),
          "other_steps_median_us": _num(rest_med), "ratio": _num(ratio), "extra_us": _num(extra),
          "first_step_slower": bool(slower)}
    text = (f"The first profiled step (ProfilerStep#{first_step}) took {_us(first['cpu_dur_us'])} on the "
            f"CPU against a median {_us(rest_med)} for the {len(rest)} others ({ratio:.{2 if ratio < 10 else 1}f}×).")
    if not slower:
        faster = extra < -FIRST_STEP_SLOWER_PCT / 100 * rest_med
        text += (f" It was {'faster than' if faster else 'within ' + f'{FIRST_STEP_SLOWER_PCT:g}% of'} the others: "
                 f"this window shows no first-step cost to explain"
                 + (" (the run's cold-start work fell before the recorded steps)." if _is_cold(r, config)
                    else "."))
        ev["cold_start"] = _is_cold(r, config)
        return [Finding("q3.cold_start", 3, "First step vs the others", text, ev)]
    ch = r.dispatch_chains
    if not ch.empty:
        # the other step numbers, each once: with several ranks or threads in one trace a number names one step
        # slice per rank, and the chains of a number hold them all (counting them once per slice made the
        # reference grow with the square of the ranks, and counted the first step among "the others")
        rest_steps = list(dict.fromkeys(k for k in map(int, rest["step"]) if k != first_step))
        by_step = _self_times_by_step(ch, {first_step, *rest_steps})
        f0 = by_step.get(first_step)
        others = [by_step[k] for k in rest_steps if k in by_step]
        if f0 is not None and others:
            ref = pd.concat(others).groupby(["name", "occurrence"])["self_us"].median()
            at = ref.index.get_indexer(pd.MultiIndex.from_arrays([f0["name"], f0["occurrence"]]))
            f0 = f0.assign(ref=np.where(at >= 0, ref.to_numpy(dtype=float)[at], 0.0))
            f0["excess_us"] = f0["self_us"] - f0["ref"]
            worst = f0.sort_values("excess_us", ascending=False).iloc[0]
            ev.update({"largest_excess_slice": str(worst["name"]), "largest_excess_us": _num(worst["excess_us"]),
                       "largest_excess_self_us": _num(worst["self_us"]),
                       "largest_excess_usual_us": _num(worst["ref"])})
            text += (f" Most of the extra time shows as self time of {_short(worst['name'])}: {_us(worst['self_us'])} "
                     f"against {_us(worst['ref'])} in the other steps.")
    g = r.cold_start_gap.dropna(subset=["gap_us"])
    if len(g) >= 2:
        ev.update({"first_gap_us": _num(g["gap_us"].iloc[0]), "other_gaps_median_us": _num(
            g["gap_us"].iloc[1:].median()), "first_aten": str(g["first_aten"].iloc[0])})
        text += (f" From entering matmul_add to the first aten:: op ({g['first_aten'].iloc[0]}) took "
                 f"{_us(g['gap_us'].iloc[0])} in the first region against a median {_us(g['gap_us'].iloc[1:].median())}"
                 f" later.")
    text += _q3_cause(r, config, first_step, extra, ev)
    return [Finding("q3.cold_start", 3, "First step vs the others", text, ev)]


def _is_cold(r, config) -> bool:
    """Whether the profile holds the process's first run of the workload: the config's warm-up when known, else
    the trace (runtime calls only the first step makes, or lazy-loading slices)."""
    warmup = _cfg(config, "warmup")
    if warmup is not None:
        return warmup == 0
    if r.steps.empty:
        return bool(len(_table_rows(r, _LAZY_LOADING)))
    return bool(len(_first_step_only_calls(r, int(r.steps["step"].iloc[0]))) or len(_table_rows(r, _LAZY_LOADING)))


def _q3_cause(r, config, first_step: int, extra: float, ev: dict) -> str:
    """Cold start or the profiler's own start-up: from the config's warm-up when known, else from the trace."""
    only = _first_step_only_calls(r, first_step)
    lazy = _table_rows(r, _LAZY_LOADING)
    startup = _table_rows(r, _PROFILER_STARTUP)
    startup_us = float(startup["cpu_total_us"].sum()) if len(startup) else 0.0
    warmup = _cfg(config, "warmup")
    cold = _is_cold(r, config)
    ev.update({"cold_start": cold, "cold_start_basis": "config" if warmup is not None else "trace",
               "config_warmup": warmup, "first_step_only_calls": {n: int(c) for n, c in zip(only["name"],
                                                                                             only["calls"])},
               "first_step_only_calls_us": _num(only["us"].sum()) if len(only) else 0.0,
               "lazy_loading_slices": sorted(map(str, lazy["name"])), "profiler_startup_us": _num(startup_us)})
    why = (f"the run's config has {'no' if warmup == 0 else f'{warmup} iterations of'} warm-up"
           if warmup is not None else None)
    if cold and (len(only) or len(lazy)):
        listed = ", ".join(f"{n} ×{int(c)} ({_us(u)})" for n, c, u in only[["name", "calls", "us"]].head(4)
                           .itertuples(index=False))
        more = f" and {len(only) - 4} more" if len(only) > 4 else ""
        calls_us = float(only["us"].sum())
        out = f" This is a cold start ({why or 'from the trace: the first step does work no later step repeats'}):"
        if len(only):
            out += (f" the first step alone calls {listed}{more}, {_us(calls_us)} in all"
                    + (f", {100 * calls_us / extra:.0f}% of the {_us(extra)} extra; the rest is host-side work "
                       f"with no CUDA call in the trace" if extra > 0 else "") + ".")
        causes = _cold_start_causes(only, lazy, str(ev.get("largest_excess_slice", "")))
        if causes:
            out += f" These point at {causes}; warm-up before profiling moves that cost out of the profile."
        return out
    if cold:
        return (f" No warm-up ({why}), but no call in the first step is missing from the later ones: "
                + (f"the {first_step} schedule step(s) before ProfilerStep#{first_step} already ran the function "
                   f"unrecorded, so the cold start fell outside this window and the extra is the profiler's own "
                   f"first-step overhead." if first_step > 0 else
                   "the cold-start work does not show as CUDA calls here; the extra is the process's first "
                   "profiled call."))
    why = why or "from the trace: no call in the first step is missing from the later ones"
    out = f" This is not a cold start ({why})"
    if startup_us > 0:
        share = f", {100 * startup_us / extra:.0f}% of the {_us(extra)} extra" if extra > 0 else ""
        return out + (f": the extra is the profiler's own start-up — its "
                      f"{' and '.join(map(str, sorted(set(startup['name']))))} took {_us(startup_us)}{share}.")
    return out + (": the extra is the profiler's own first-step overhead"
                  + (f" (ProfilerStep#{first_step} is the first step it records, after {first_step} unrecorded "
                     f"schedule step(s))." if first_step > 0 else "."))


def _q4_offset(r, config=None) -> list[Finding]:
    if not r.has_gpu:
        return [Finding("q4.offset", 4, "No GPU lane", NO_GPU_TEXT + ", so there is no CPU-to-GPU offset to read.",
                        {"gpu_ops": 0})]
    ll = r.launch_latency
    if ll.empty:
        return [Finding("q4.offset", 4, "No launch pairs", "The trace has GPU ops but no flow or correlation links "
                        "them to launch calls, so the queueing delay cannot be measured.",
                        {"gpu_ops": int(len(r.gpu_ops)), "pairs": 0})]
    lat = ll["latency_us"]
    ev = {"pairs": int(len(ll)), "median_us": _num(lat.median()), "min_us": _num(lat.min()),
          "max_us": _num(lat.max()), "first_us": _num(lat.iloc[0]), "last_us": _num(lat.iloc[-1]),
          "paired_by": sorted(set(ll["paired_by"]))}
    text = (f"Each GPU op started a median {_us(lat.median())} after its launch call began (min {_us(lat.min())}, "
            f"max {_us(lat.max())}, over {len(ll)} ops paired by {' and '.join(ev['paired_by'])}).")
    if len(ll) >= 3 and lat.iloc[-1] > 3 * max(lat.iloc[0], 1e-9):
        text += (f" The delay grows from {_us(lat.iloc[0])} for the first op to {_us(lat.iloc[-1])} for the last: the "
                 f"CPU launches faster than the GPU executes, so work queues up and the GPU lane drifts right.")
    ov = r.profiler_table[r.profiler_table["name"].astype(str).str.contains("Activity Buffer Request")]
    if len(ov):
        ev["activity_buffer_request_us"] = _num(ov["cpu_total_us"].sum())
        text += f" The profiler's own 'Activity Buffer Request' took {_us(ov['cpu_total_us'].sum())} on the CPU."
    return [Finding("q4.offset", 4, "CPU-to-GPU offset", text, ev)]


def _missing(x) -> bool:
    """None, NaN or pd.NA (a parent id that ends the walk up)."""
    return x is None or x is pd.NA or (isinstance(x, float) and x != x)


def _chain_paths(chain: pd.DataFrame) -> list[list[str]]:
    """Per GPU op of the chain (in row order): the names from the outermost ancestor (at most 50 names, the
    nearest kept) down to the op. Parent links are read from dicts built once; the walk above each op's parent
    (shared by every op the same call launched) is computed once per parent."""
    if not chain["id"].is_unique:  # ambiguous ids: keep the row-by-row lookups' exact behaviour
        return _chain_paths_by_loc(chain)
    ids = chain["id"].tolist()
    name_of = dict(zip(ids, chain["name"].tolist()))
    parent_of = dict(zip(ids, chain["parent_id"].tolist()))
    above: dict = {}  # parent id -> names walked up from it (at most 49: the op's own name comes first)

    def walk_up(start) -> list[str]:
        names, cur = [], start
        while not _missing(cur) and cur in name_of and len(names) < 49:
            names.append(str(name_of[cur]))
            cur = parent_of[cur]
        return names

    paths = []
    gpu = chain["lane"] == "gpu"
    for gid in chain.loc[gpu, "id"].tolist():
        names = [str(name_of[gid])]
        parent = parent_of[gid]
        if not _missing(parent):
            if parent not in above:
                above[parent] = walk_up(parent)
            names += above[parent]
        paths.append(names[::-1])
    return paths


def _chain_paths_by_loc(chain: pd.DataFrame) -> list[list[str]]:
    by_id = chain.set_index("id")
    paths = []
    for gid in chain.loc[chain["lane"] == "gpu", "id"]:
        names, cur = [], gid
        while cur is not None and not pd.isna(cur) and cur in by_id.index and len(names) < 50:
            names.append(str(by_id.at[cur, "name"]))
            cur = by_id.at[cur, "parent_id"]
        paths.append(names[::-1])
    return paths


def _q5_chain(r, config=None) -> list[Finding]:
    ch = r.dispatch_chains
    if ch.empty:
        return []
    with_gpu = r.steps.loc[r.steps["gpu_ops"] > 0, "step"]
    step = int(with_gpu.iloc[-1] if len(with_gpu) else r.steps["step"].iloc[-1])
    chain = ch[ch["step"] == step]
    paths = list(dict.fromkeys(tuple(p) for p in _chain_paths(chain)))
    if not paths:
        cpu = chain[chain["lane"] == "cpu"].sort_values(["depth", "start_ns"])
        names = list(dict.fromkeys(cpu["name"].astype(str)))[:8]
        return [Finding("q5.chain", 5, "CPU-only dispatch",
                        f"{NO_GPU_TEXT if not r.has_gpu else 'No GPU op was launched in this step'}: "
                        f"ProfilerStep#{step} holds {len(cpu)} CPU slices ({', '.join(map(_short, names))}).",
                        {"step": step, "cpu_slices": int(len(cpu)), "names": names})]
    shown = paths[:_MAX_LISTED]
    text = f"In ProfilerStep#{step}: " + "; ".join(" → ".join(_short(n, 48) for n in p) for p in shown)
    text += f"; and {len(paths) - len(shown)} more distinct chains." if len(paths) > len(shown) else "."
    return [Finding("q5.chain", 5, "Dispatch chain", text, {"step": step, "paths": [list(p) for p in paths]})]


_OCCUPANCY_PREFIXES = ("cudaOccupancy", "cuOccupancy", "hipOccupancy")


def _occupancy_steps(r) -> dict[str, list[int]]:
    """Per GPU op name: the step of each of its launches that an occupancy query precedes under the same parent op
    (as ``launch_paths`` counts them), read from the dispatch chains."""
    ch = r.dispatch_chains
    if ch.empty:
        return {}
    occ = ch[_per_name(ch["name"], lambda t: t.str.startswith(_OCCUPANCY_PREFIXES)).astype(bool)]
    if occ.empty:
        return {}
    first_q = occ.groupby(["step", "parent_id"])["start_ns"].min().rename("first_q").reset_index()
    if ch.duplicated(["step", "id"]).any():  # ambiguous ids: keep the row-by-row lookups' exact behaviour
        return _occupancy_steps_by_loc(ch, first_q.set_index(["step", "parent_id"])["first_q"])
    # each GPU op -> its launch call (its parent, same step) -> the first occupancy query under the launch's parent
    gpu = ch.loc[(ch["lane"] == "gpu") & ch["parent_id"].notna(), ["step", "parent_id", "name"]]
    gpu = gpu.assign(_pos=range(len(gpu)))
    launch = ch[["step", "id", "parent_id", "start_ns"]].rename(
        columns={"id": "parent_id", "parent_id": "launch_parent", "start_ns": "launch_start"})
    m = gpu.merge(launch, on=["step", "parent_id"], how="inner")
    m = m[m["launch_parent"].notna()]
    m = m.merge(first_q.rename(columns={"parent_id": "launch_parent"}), on=["step", "launch_parent"], how="inner")
    m = m[(m["first_q"] <= m["launch_start"]).fillna(False).astype(bool)].sort_values("_pos", kind="stable")
    out: dict[str, list[int]] = {}
    for name, step in zip(m["name"].tolist(), m["step"].tolist()):
        out.setdefault(str(name), []).append(int(step))
    return out


def _occupancy_steps_by_loc(ch: pd.DataFrame, first_q: pd.Series) -> dict[str, list[int]]:
    by_id = ch.set_index(["step", "id"])
    out: dict[str, list[int]] = {}
    for row in ch[ch["lane"] == "gpu"].itertuples(index=False):
        key = (row.step, row.parent_id)
        if pd.isna(row.parent_id) or key not in by_id.index:
            continue
        launch = by_id.loc[key]
        q = first_q.get((row.step, launch["parent_id"]))
        if q is not None and q <= launch["start_ns"]:
            out.setdefault(str(row.name), []).append(int(row.step))
    return out


def _occupancy_clause(name: str, n_launch: int, n_query: int, steps_with: list[int], first_step) -> str:
    """``X, before every one of its 3 launches`` or ``X, only before the first of its 3 launches, in …``."""
    who = _short(name)
    if n_query >= n_launch:
        return f"{who}, before " + ("its only launch" if n_launch == 1 else f"every one of its {n_launch} launches")
    steps = sorted(set(steps_with))
    where = ""
    if steps:
        where = ", in " + (f"the first profiled step (ProfilerStep#{steps[0]})" if steps == [first_step]
                           else "ProfilerStep#" + ", #".join(map(str, steps)))
    which = "the first" if n_query == 1 and steps == [first_step] else f"{n_query}"
    return f"{who}, only before {which} of its {_n(n_launch, 'launch', 'launches')}{where}"


def _occupancy_text(occ: pd.DataFrame, steps_of: dict, first_step, cold: bool) -> str:
    """The occupancy-query sentences: kernels queried before every launch (sized launch by launch, the post's
    pattern) apart from kernels queried before only some launches (a one-time query)."""
    rows = list(zip(occ["name"].astype(str), occ["count"].astype(int), occ["occupancy_queries"].astype(int)))[
        :_MAX_LISTED]
    every = [r for r in rows if r[2] >= r[1]]
    some = [r for r in rows if r[2] < r[1]]
    parts = []
    if every:
        parts.append("; ".join(_occupancy_clause(n, c, q, steps_of.get(n, []), first_step) for n, c, q in every)
                     + ": sized adaptively launch by launch (the per-launch pattern of the study's post)")
    if some:
        once = all(q == 1 or sorted(set(steps_of.get(n, []))) == [first_step] for n, _, q in some)
        parts.append("; ".join(_occupancy_clause(n, c, q, steps_of.get(n, []), first_step) for n, c, q in some)
                     + (": a one-time query on the op's first call" + (" in a cold process" if cold else "")
                        + ", not a per-launch pattern" if once else ": not every launch is preceded by one"))
    return "An occupancy query precedes the launch of " + ". And of ".join(parts) + ". "


def _q6_paths(r, config=None) -> list[Finding]:
    if not r.has_gpu:
        return [Finding("q6.launch_path", 6, "No GPU lane", NO_GPU_TEXT + ": no kernel was launched.",
                        {"gpu_ops": 0})]
    lp = r.launch_paths[r.launch_paths["category"] == "kernel"]
    if lp.empty:
        return []
    occ = lp[lp["occupancy_query_before"]]
    ev = {"kernels": {str(n): a for n, a in zip(lp["name"], lp["launch_apis"])},
          "occupancy_query_kernels": sorted(map(str, occ["name"])),
          "occupancy_queries": int(lp["occupancy_queries"].sum())}
    top = lp.sort_values("count", ascending=False, kind="stable").head(_MAX_LISTED)
    per = "; ".join(f"{_short(n, 48)} by {a} (from {p or 'no parent op'}, {c}×)" for n, a, p, c in
                    zip(top["name"], top["launch_apis"], top["parent_ops"], top["count"]))
    if len(lp) > len(top):
        per += f"; and {len(lp) - len(top)} more kernels"
    if occ.empty:
        text = f"No occupancy query (cudaOccupancy…) precedes any kernel launch in this trace. Launches: {per}."
    else:
        steps_of = _occupancy_steps(r)
        first_step = int(r.steps["step"].iloc[0]) if not r.steps.empty else None
        ev["occupancy_query_launches"] = {str(n): {"launches": int(c), "with_query": int(q),
                                                   "steps": sorted(set(steps_of.get(str(n), [])))}
                                          for n, c, q in zip(occ["name"], occ["count"], occ["occupancy_queries"])}
        plain = lp[~lp["occupancy_query_before"]]
        text = (_occupancy_text(occ, steps_of, first_step, _is_cold(r, config))
                + (f"{_n(len(plain), 'other kernel name')} launch{'es' if len(plain) == 1 else ''} without one. "
                   if len(plain) else "")
                + f"Launches: {per}.")
    return [Finding("q6.launch_path", 6, "How kernels are launched", text, ev)]


def _q7_sync(r, config=None) -> list[Finding]:
    sw = r.sync_wait
    if sw.empty:
        return [Finding("q7.sync", 7, "No synchronize call", "No cudaDeviceSynchronize / cudaStreamSynchronize call "
                        "in this trace." + ("" if r.has_gpu else " " + NO_GPU_TEXT + "."), {"syncs": 0})]
    longest = sw.sort_values("dur_us", ascending=False).iloc[0]
    ev = {"syncs": int(len(sw)), "name": str(longest["name"]), "dur_us": _num(longest["dur_us"]),
          "gpu_busy_us": _num(longest["gpu_busy_us"]), "idle_pct": _num(longest["idle_pct"]),
          "gpu_ops": int(longest["gpu_ops"])}
    text = (f"The longest {longest['name']} took {_us(longest['dur_us'])}; the GPU was busy {_us(longest['gpu_busy_us'])}"
            f" of it ({longest['idle_pct']:.0f}% idle, {int(longest['gpu_ops'])} GPU op(s) overlapping). ")
    if not r.has_gpu:
        text += NO_GPU_TEXT + "."
    elif longest["idle_pct"] >= 50:
        text += ("The GPU had little or nothing left to run: most of the call is the synchronisation itself "
                 "(the profiler syncs at the end of its window), not waiting for GPU work.")
    else:
        text += "The CPU waited for GPU work it had queued earlier: the sync's length is the GPU's backlog."
    return [Finding("q7.sync", 7, "Why the sync is long", text, ev)]


def _q8_variance(r, config=None) -> list[Finding]:
    ks = r.kernel_stats
    if ks.empty:
        return [] if r.has_gpu else [Finding("q8.variance", 8, "No GPU lane", NO_GPU_TEXT + ": no kernel durations.",
                                             {"kernels": 0})]
    k = ks.iloc[0]
    ev = {"kernel": str(k["name"]), "count": int(k["count"]), "median_us": _num(k["median_us"]),
          "mean_us": _num(k["mean_us"]), "min_us": _num(k["min_us"]), "max_us": _num(k["max_us"]),
          "std_us": _num(k["std_us"]), "cv": _num(k["cv"])}
    spread = (k["max_us"] / k["min_us"] - 1) * 100 if k["min_us"] > 0 else float("nan")
    text = (f"{_short(k['name'])} (the largest total) ran {int(k['count'])}×: median {_us(k['median_us'])}, mean "
            f"{_us(k['mean_us'])}, min {_us(k['min_us'])}, max {_us(k['max_us'])} (max {spread:.1f}% above min, "
            f"CV {100 * (k['cv'] if pd.notna(k['cv']) else 0):.1f}%).")
    if int(k["count"]) >= MIN_LAUNCHES_FOR_SKEW:
        skew = (k["mean_us"] / k["median_us"] - 1) * 100 if k["median_us"] > 0 else 0.0
        ev["mean_above_median_pct"] = _num(skew)
        text += (f" The mean is {abs(skew):.1f}% {'above' if skew >= 0 else 'below'} the median"
                 + (": a few slow launches pull it up; read the median." if skew > MEAN_ABOVE_MEDIAN_PCT else "."))
    return [Finding("q8.variance", 8, "Same kernel, different times", text, ev)]


def _q9_compile(r, config=None) -> list[Finding]:
    cb = r.compile_breakdown
    if cb.empty:
        return []
    regions = int(cb["compiled_regions"].sum())
    ev = {"steps": int(len(cb)), "compiled_regions": regions,
          "compiled_regions_per_step": _num(regions / len(cb)),
          "kernel_launches_per_step": _num(cb["kernel_launches"].median()),
          "launches_per_step": _num(cb["launches"].median()),
          "kernels_per_step": _num(cb["kernels"].median()), "memcpy_dtod": int(cb["memcpy_dtod"].sum()),
          "memsets": int(cb["memsets"].sum()), "graph_launches": int(cb["graph_launches"].sum()),
          "memcpy_dtod_per_step": _num(cb["memcpy_dtod"].median()), "memsets_per_step": _num(cb["memsets"].median()),
          "graph_launches_per_step": _num(cb["graph_launches"].median())}
    if regions == 0 and not r.has_gpu:
        return [Finding("q9.compile", 9, "Eager execution", "No torch.compile rows (TorchDynamo Cache Lookup, "
                        "Torch-Compiled Region) in this trace: it ran eagerly. " + NO_GPU_TEXT + ".", ev)]
    if regions == 0:
        text = (f"No torch.compile rows (TorchDynamo Cache Lookup, Torch-Compiled Region) in this trace: it ran "
                f"eagerly, with a median {_n(ev['kernel_launches_per_step'], 'kernel launch', 'kernel launches')} "
                f"and {_n(ev['kernels_per_step'], 'kernel')} per step.")
        return [Finding("q9.compile", 9, "Eager execution", text, ev)]
    hashes = sorted({h for v in cb["fx_graph_hash"].dropna() for h in str(v).split(",") if h})
    ev["fx_graph_hashes"] = hashes
    kernels = sorted(set(r.launch_paths.loc[r.launch_paths["category"] == "kernel", "name"].astype(str)))
    ev["kernel_names"] = kernels
    text = (f"torch.compile ran: {regions} Torch-Compiled Region slices over {len(cb)} steps, with "
            f"{len(hashes)} distinct CompiledFxGraph hash{'es' if len(hashes) != 1 else ''}"
            + (" (the same every step: a cache hit)" if len(hashes) == 1 and int(cb["fx_graph_calls"].sum()) > 1
               else "") + ". Per step (median): "
            f"{_n(ev['kernel_launches_per_step'], 'kernel launch', 'kernel launches')}, "
            f"{_n(ev['kernels_per_step'], 'kernel')}")
    totals = []
    for key, word, plural, note in (("memcpy_dtod", "device-to-device copy", "device-to-device copies", ""),
                                    ("memsets", "memset", None, ""),
                                    ("graph_launches", "cudaGraphLaunch call", None, " (CUDA graphs replayed)")):
        if ev[key]:
            text += f", {_n(ev[key + '_per_step'], word, plural)}"
            totals.append(_n(ev[key], word, plural) + note)
    if totals:
        text += f"; in total over the {_n(len(cb), 'step')}: {', '.join(totals)}"
    text += "."
    if kernels:
        text += " Kernels: " + ", ".join(_short(k, 48) for k in kernels) + "."
    text += _bias_copy(r, config, ev)
    return [Finding("q9.compile", 9, "What torch.compile changed", text, ev)]


def _bias_copy(r, config, ev: dict) -> str:
    """Question 9's central observation: whether Inductor's ``aten::addmm`` copied the bias into the output (a
    device-to-device memcpy launched under it) before the GEMM. From the launch paths; the bias's shape from the
    run's config when known. Seen on an H200: a matrix bias gives the copy and a GEMM with beta = 1 (``…badd…``); a
    vector bias gives no copy and the bias in the GEMM's epilogue (``…bias…``)."""
    lp = r.launch_paths
    copies = lp[lp["name"].astype(str).str.startswith("Memcpy DtoD")] if not lp.empty else lp
    by_addmm = int(copies.loc[copies["parent_ops"].astype(str).str.contains("aten::addmm", regex=False),
                              "count"].sum()) if len(copies) else 0
    ev["bias_copies_by_addmm"] = by_addmm
    cfg = _as_config(config)
    if cfg is not None and not cfg.is_matmul_add:
        cfg = None  # the bias knob is matmul_add's: another workload's config says nothing of this bias's shape
    bias = cfg.bias if cfg is not None else None
    shape = f" {cfg.bias_shape()}" if cfg is not None else ""
    if bias:
        ev["bias"] = bias
    if by_addmm:
        return (f" The device-to-device copy is launched by aten::addmm: Inductor turned add(matmul) into addmm, "
                f"which first copies the bias{shape if bias == 'matrix' else ''} into the output, then runs the GEMM "
                f"adding its product to it; a bias shaped like the output does that (the study's matrix bias), "
                f"while a vector bias rides in the GEMM's epilogue with no copy.")
    has_addmm = bool((r.profiler_table["name"].astype(str) == "aten::addmm").any()) if not r.profiler_table.empty \
        else False
    if bias == "vector" and has_addmm:
        return (f" aten::addmm launched no copy: the vector bias{shape} is added in the GEMM's epilogue; with a bias "
                f"shaped like the output (the study's matrix bias) addmm would first copy it into the output "
                f"(a Memcpy DtoD).")
    return ""


def _q10_cost(r, config=None) -> list[Finding]:
    cb = r.compile_breakdown
    if cb.empty:
        return []
    cpu_med = float(cb["cpu_dur_us"].median())
    if int(cb["compiled_regions"].sum()) == 0:
        text = (f"Eager steps took a median {_us(cpu_med)} of CPU time; profile the same size with torch.compile to "
                f"compare the compiled path's CPU cost.")
        return [Finding("q10.compile_cost", 10, "CPU cost per step (eager)", text,
                        {"cpu_step_median_us": _num(cpu_med), "compiled": False})]
    region, fx = float(cb["compiled_region_us"].median()), float(cb["fx_graph_us"].median())
    lookup, prologue = float(cb["cache_lookup_us"].median()), float(cb["prologue_us"].median())
    ev = {"cpu_step_median_us": _num(cpu_med), "compiled_region_us": _num(region), "fx_graph_us": _num(fx),
          "cache_lookup_us": _num(lookup), "prologue_us": _num(prologue), "compiled": True,
          "wrapper_us": _num(region - fx)}
    text = (f"Compiled steps took a median {_us(cpu_med)} of CPU time: Torch-Compiled Region {_us(region)}, of which "
            f"CompiledFxGraph {_us(fx)} and {_us(region - fx)} of Dynamo/AOT wrapping (prologue {_us(prologue)}); "
            f"cache lookup {_us(lookup)} before it.")
    if int(cb["graph_launches"].sum()):
        text += " In this mode the GPU work is replayed from a CUDA graph (cudaGraphLaunch)."
    return [Finding("q10.compile_cost", 10, "CPU cost of torch.compile", text, ev)]


_RULES: tuple[Callable, ...] = (_q1_table, _q2_bound, _q3_cold, _q4_offset, _q5_chain, _q6_paths, _q7_sync,
                                _q8_variance, _q9_compile, _q10_cost)


def findings(report_or_session, config=None) -> list[Finding]:
    """Turn a trace's analyses into short findings, ordered by study question.

    Args:
        report_or_session: a :class:`profiling_core.analyses.Report`, or a trace session (analysed here).
        config: the ``ExperimentConfig`` of the run, if known (passed to ``analyze``).

    Returns:
        A list of :class:`Finding`, one or more per study question the trace can answer (questions that need
        data the trace lacks, e.g. a dispatch chain without steps, are left out; a missing GPU lane is said).
    """
    from ..analyses import Report, analyze
    r = report_or_session if isinstance(report_or_session, Report) else analyze(report_or_session, config=config)
    out: list[Finding] = []
    for rule in _RULES:
        out.extend(rule(r, config))
    return out
