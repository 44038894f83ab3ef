"""Findings never contradict the numbers they quote (issue 11, item 3).

Every finding of every test trace (with and without its run's config), and of small synthetic traces made for the
edge cases (a faster first step, one step, no kernels, a kernel whose mean equals its median, a slower first step),
is checked sentence by sentence against its own evidence: a claim of extra time needs a slower first step, "pull it
up" needs a mean above the median by more than the threshold, a verdict needs its share on the right side of its
threshold, and no list is empty.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from profiling_core import ExperimentConfig
from profiling_core.analyses import CPU_MATH_BOUND_AT, GPU_BOUND_AT, STARVED_AT
from profiling_core.explain.questions import FIRST_STEP_SLOWER_PCT, MEAN_ABOVE_MEDIAN_PCT, findings
from profiling_core.trace import open_trace

DATA = Path(__file__).parent / "data"
TRACES = sorted(p for d in ("h200", "h200_app", "h200_bias", "h200_verdicts", "h200_train", "h200_train/app", "cpu", "third_party",
                            "traces")
                for p in (DATA / d).glob("*.json*") if not p.name.endswith((".meta.json", "peaks.json", "facts.json")))


def problems(fs) -> list[str]:
    """Every sentence of these findings that its evidence contradicts."""
    out = []
    for f in fs:
        t, ev = f.text, f.evidence
        if re.search(r":\s*\.|,\s*\.|(?<![\w.])\(\s*\)| nan\b|\bNaN\b", t):  # (a call, prof.step(), is no list)
            out.append(f"{f.id}: an empty list or a missing number: {t!r}")
        if f.id == "q3.cold_start" and "other_steps_median_us" not in ev:  # no later step that worked
            if "extra" in t or "×" in t or "cold start" in t:
                out.append(f"q3: compares the first step with steps that did nothing: {t!r}")
        elif f.id == "q3.cold_start":
            slower = ev["extra_us"] > FIRST_STEP_SLOWER_PCT / 100 * ev["other_steps_median_us"]
            if ("extra time" in t or "extra;" in t) and not slower:
                out.append(f"q3: speaks of extra time, but the first step was not slower: {ev}")
            if "faster than the others" in t and ev["extra_us"] >= 0:
                out.append(f"q3: says faster, but the first step took longer: {ev}")
            if slower and "no first-step cost" in t:
                out.append(f"q3: says no cost, but the first step was slower: {ev}")
            if "Most of the extra time" in t and not ev.get("largest_excess_us", 0) > ev["extra_us"] / 2:
                out.append(f"q3: says most of the extra, but the slice holds at most half of it: {ev}")
            if " of the extra time (" in t and ev.get("largest_excess_us", 0) > ev["extra_us"] * 1.0005:
                out.append(f"q3: a part of the extra larger than the whole: {ev}")
        if f.id == "q8.variance" and "mean_above_median_pct" in ev:
            pct = ev["mean_above_median_pct"]
            if ("pull it up" in t) != (pct > MEAN_ABOVE_MEDIAN_PCT):
                out.append(f"q8: the skew verdict and its {pct:.2f}% disagree: {t!r}")
            if abs(pct) >= 0.05 and ("% above the median" in t or "% above its median" in t) != (pct > 0):
                out.append(f"q8: above/below the median does not match {pct:.2f}%")
            if ("pull it down" in t) != (pct < -MEAN_ABOVE_MEDIAN_PCT):
                out.append(f"q8: says fast launches pull the mean down, against its {pct:.2f}%: {t!r}")
            if ("mean and median agree" in t or "equals the median" in t or "equals its median" in t) != (
                    abs(pct) <= MEAN_ABOVE_MEDIAN_PCT):
                out.append(f"q8: says the mean and median agree, against its {pct:.2f}%: {t!r}")
        if f.id == "q2.bound" and ev.get("bound") in ("overhead-bound", "compute-bound", "copy-bound", "input-bound"):
            if "cpu_work_share_median" in ev:  # a CPU: the work ops' share of the step, beside the batches' share
                share, data = ev["cpu_work_share_median"], ev.get("data_share_median", 0.0)
                want = ("compute-bound" if share >= CPU_MATH_BOUND_AT else
                        "input-bound" if data > 0 and data >= 1 - share - data else "overhead-bound")
                if ev["bound"] != want:
                    out.append(f"q2: verdict {ev['bound']} against a work share of {share}, a data share of {data}")
                if data > 0 and f"{100 * data:.1f}%" not in t:
                    out.append(f"q2: the batches' share {data} is not the one the text quotes")
                if f"{100 * share:.1f}%" not in t:
                    out.append(f"q2: the share {share} the verdict rests on is not the one the text quotes")
            else:  # a GPU: GPU work launched per step against the CPU's own time per step (its time less the
                # time it was blocked while the GPU worked: in synchronize calls, in copies to pageable memory)
                gpu, cpu, wait = ev["gpu_us_per_step"], ev["cpu_us_per_step"], ev["sync_wait_us_per_step"]
                fed = ev["starved_share"] is not None and ev["starved_share"] <= STARVED_AT  # never waited
                if (ev["bound"] == "overhead-bound") != (gpu < GPU_BOUND_AT * (cpu - wait) and not fed):
                    out.append(f"q2: verdict {ev['bound']} with {gpu} µs of GPU work per {cpu} µs of CPU, {wait} "
                               "of it blocked in synchronize calls")
                if (wait > 0) != bool(re.search(r"of it blocked in (synchronize calls|copies to or from pageable)", t)):
                    out.append(f"q2: {wait} µs blocked in synchronising calls, and the text says otherwise: {t!r}")
                copies, others = ev.get("copy_us_per_step") or 0.0, ev.get("other_us_per_step") or 0.0
                if ev["bound"] in ("compute-bound", "copy-bound") and (
                        (ev["bound"] == "copy-bound") != (copies > 0 and copies >= others)):
                    out.append(f"q2: verdict {ev['bound']} with {copies} µs of host copies against {others} µs of "
                               "the GPU's other work")
                # (the evidence keeps 3 decimals: 0.995 may be the text's 99%, rounded from 0.9947; a share the
                # text writes with more digits, as it does near 0% and 100%, is checked to its own last digit)
                said = re.search(r"idle (\d+(?:\.\d+)?)%", t)
                tol = 0.55 if said is None or "." not in said[1] else 0.051 + 10 ** -len(said[1].split(".")[1]) / 2
                if ev["bound"] == "overhead-bound" and (said is None
                                                        or abs(float(said[1]) - 100 * ev["gpu_idle_share"]) > tol):
                    out.append(f"q2: the idle share {ev['gpu_idle_share']} is not the one the text quotes")
                if ev["bound"] == "overhead-bound" and "more GPU" in t:
                    out.append("q2: overhead-bound, yet the text says more GPU than CPU time")
        forward = set(ev.get("fx_graph_hashes", [])) - set(ev.get("backward_fx_graph_hashes", []))
        if f.id == "q9.compile" and "a cache hit" in t and len(forward) != 1:
            out.append("q9: a cache hit needs one forward graph hash (a backward graph runs beside it)")
    return out


def _config_of(path: Path):
    meta = path.with_name(path.name.removesuffix(".json") + ".meta.json")
    return ExperimentConfig.from_dict(json.loads(meta.read_text())["config"]) if meta.is_file() else None


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_findings_of_every_test_trace_agree_with_their_numbers(path):
    with open_trace(path, engine="sqlite") as s:
        from profiling_core.analyses import analyze
        r = analyze(s)
    fs = findings(r)
    assert problems(fs) == []
    # every question gets an answer, or says what this trace lacks for it (no steps, no GPU lane)
    assert {f.question for f in fs} == set(range(1, 11))
    config = _config_of(path)
    if config is not None:
        assert problems(findings(r, config=config)) == []


# --- synthetic edge cases ------------------------------------------------------------------------------------------

def _trace(tmp_path, step_us: list[float], kernel_us: list[float] | None = None) -> Path:
    """A small Kineto-like trace: one ProfilerStep per entry of ``step_us`` (µs) on one CPU thread, each with
    matmul_add → aten::mm inside; with ``kernel_us``, aten::mm launches one kernel per step (paired by
    args.correlation, as 2021-era traces are)."""
    ev, t = [], 1000.0
    for i, d in enumerate(step_us):
        ev += [{"ph": "X", "name": f"ProfilerStep#{i}", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": t,
                "dur": d},
               {"ph": "X", "name": "matmul_add", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": t + 1,
                "dur": d - 2},
               {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": t + 2, "dur": d - 4}]
        if kernel_us is not None:
            ev += [{"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": 1, "tid": 1, "ts": t + 3,
                    "dur": 1, "args": {"correlation": 100 + i}},
                   {"ph": "X", "name": "gemm_kernel", "cat": "kernel", "pid": 0, "tid": 7, "ts": t + 5,
                    "dur": kernel_us[i], "args": {"correlation": 100 + i}}]
        t += d + 10
    path = tmp_path / "edge.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def _findings_of(path):
    with open_trace(path, engine="sqlite") as s:
        return {f.id: f for f in findings(s)}


@pytest.mark.parametrize("case,steps,kernels", [
    ("faster first step", [40.0, 60.0, 60.0, 62.0], None),
    ("first step within noise", [61.0, 60.0, 60.0, 62.0], None),
    ("slower first step", [400.0, 60.0, 60.0, 62.0], [10.0, 10.0, 10.0, 10.0]),
    ("one step", [60.0], [10.0]),
    ("no kernels", [60.0, 60.0, 60.0], None),
    ("mean equals median", [60.0, 60.0, 60.0, 60.0], [10.0, 10.0, 10.0, 10.0]),
    ("a few slow launches", [60.0, 60.0, 60.0, 60.0, 60.0], [10.0, 10.0, 10.0, 10.0, 30.0]),
    ("a few fast launches", [60.0, 60.0, 60.0, 60.0, 60.0], [10.0, 10.0, 10.0, 10.0, 2.0]),
    ("mean near the median", [60.0, 60.0, 60.0, 60.0, 60.0], [10.0, 10.0, 10.0, 10.1, 10.4]),
])
def test_edge_cases_say_nothing_their_numbers_contradict(tmp_path, case, steps, kernels):
    fs = _findings_of(_trace(tmp_path, steps, kernels))
    assert problems(fs.values()) == []
    if case == "faster first step":
        assert "faster than the others" in fs["q3.cold_start"].text
        assert "extra" not in fs["q3.cold_start"].text
    if case == "first step within noise":
        assert "within 5% of the others" in fs["q3.cold_start"].text
    if case == "slower first step":
        assert "Most of the extra time" in fs["q3.cold_start"].text  # the kernel-less 340 µs sits in one slice
    if case == "mean equals median":
        assert "The mean equals the median (to 0.1%)." in fs["q8.variance"].text
    if case == "a few slow launches":
        assert "pull it up" in fs["q8.variance"].text
    if case == "a few fast launches":  # by hand: mean 8.4 µs, median 10 µs: 16% below
        assert "The mean is 16.0% below the median: a few fast launches pull it down" in fs["q8.variance"].text
    if case == "mean near the median":  # by hand: mean 10.1 µs, median 10 µs: 1% above
        assert "The mean is 1.0% above the median, within 2%: mean and median agree." in fs["q8.variance"].text


def test_the_checks_can_fail():
    from profiling_core.explain.questions import Finding
    bad = [Finding("q3.cold_start", 3, "t", "Most of the extra time shows as …",
                   {"extra_us": -5.0, "other_steps_median_us": 60.0}),
           Finding("q3.cold_start", 3, "t", "Most of the extra time (29.4 µs of 62.2 µs) shows as …",
                   {"extra_us": 62.2, "other_steps_median_us": 33.9, "largest_excess_us": 29.4}),
           Finding("q9.compile", 9, "t", "Per step: 1 kernel. Kernels: .", {}),
           Finding("q8.variance", 8, "t", "The mean is 6.0% above the median.", {"mean_above_median_pct": 6.0})]
    assert len(problems(bad)) == 4
