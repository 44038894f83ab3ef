"""Question 8, the same kernel at different times (``q8.variance``): the largest kernel's spread, and whether a few
slow launches skew its mean (the Kernel variance page gives each kernel the same verdict).

The kernel read is the one with the largest total time among those launched at least twice: one launch has no
spread to read, so larger kernels that ran once are passed over (and counted). Where every kernel ran once, the
finding says so and quotes no spread.

One kernel name can run several shapes (cuBLAS picks one kernel for a range of sizes): where the GEMM ops that
launched it recorded their shapes (``gemm_kernel_shapes``: each launch with its op's shape), its launches are grouped
by shape, and a name that ran more than one size is said so, with each size's own median and spread; its spread over
all launches is then shape, not noise, and the skew verdict is given for each size. Otherwise a name launched in more
than one configuration (grid and block, ``report.kernel_configs``) is read the same way, per configuration."""
from __future__ import annotations

from typing import Optional

import pandas as pd

from ...units import format_duration_us as _us
from .base import NO_GPU_TEXT, Finding, _n, _num, _short


MEAN_ABOVE_MEDIAN_PCT = 2.0
"""A kernel whose mean lies more than this many percent above its median is skewed by a few slow launches
(question 8); the Kernel variance page gives each kernel the same verdict."""
_MAX_GROUPS = 4  # GEMM shapes or launch configurations listed in the text (all of them in the evidence)
MIN_LAUNCHES_FOR_SKEW = 3
"""Fewer launches than this say nothing about skew: the question-8 finding and the page then give no verdict."""


def _q8_variance(r, config=None) -> list[Finding]:
    ks = r.kernel_stats
    if ks.empty:
        return [] if r.has_gpu else [Finding("q8.variance", 8, "No GPU lane", NO_GPU_TEXT + ": no kernel durations.",
                                             {"kernels": 0})]
    repeated = ks[ks["count"] > 1]
    if repeated.empty:
        return [_each_ran_once(ks)]
    theirs = _compilers_only(r, repeated)
    if theirs.any() and not theirs.all():  # the workload's kernels, not torch.compile's benchmarks of candidates
        ks, repeated = ks[~ks["name"].isin(repeated.loc[theirs, "name"])], repeated[~theirs]
    k = repeated.iloc[0]
    ev = {"kernel": str(k["name"]), "count": int(k["count"]), "median_us": _num(k["median_us"]),
          "mean_us": _num(k["mean_us"]), "min_us": _num(k["min_us"]), "max_us": _num(k["max_us"]),
          "std_us": _num(k["std_us"]), "cv": _num(k["cv"])}
    # (a launch recorded as 0 µs, as traces with whole-µs times write a short one: no percentage of it to give)
    spread = (f"max {(k['max_us'] / k['min_us'] - 1) * 100:.1f}% above min" if k["min_us"] > 0
              else "the shortest launch recorded as 0 µs")
    # (to the nanosecond: the spread and the mean's distance from the median are read off these four)
    stat = {c: _us(k[c], fine=True) for c in ("median_us", "mean_us", "min_us", "max_us")}
    left_out = int(theirs.sum()) if not theirs.all() else 0
    text = (f"{_short(k['name'])} ({_which(ks, repeated, left_out)}) ran {int(k['count'])}×: "
            f"median {stat['median_us']}, mean {stat['mean_us']}, min {stat['min_us']}, max {stat['max_us']} "
            f"({spread}, "
            f"CV {100 * (k['cv'] if pd.notna(k['cv']) else 0):.1f}%).")
    cl = r.compiler_launches
    ours = int(cl.loc[cl["name"] == k["name"], "count"].sum()) if len(cl) else 0
    if ours:  # the same kernel run by the compiler's benchmarks: in these figures, as in the trace
        ev["compiler_launches"] = ours
        text += (f" {ours:,} of its {int(k['count']):,} launches were torch.compile's compiler's, while it compiled "
                 "(under max-autotune, its benchmarks), and are in these figures.")
    kind, groups = kernel_groups(r, str(k["name"]))
    if kind == "shape":
        ev["shapes"] = [{c: _num(g[c]) if c in ("median_us", "mean_us", "cv") else g[c]
                         for c in ("shape", "gflop", "count", "median_us", "mean_us", "cv")} for g in groups]
        shaped = sum(g["count"] for g in groups)
        unshaped = (f"; {int(k['count']) - shaped} of its {int(k['count'])} launches have none: launched before "
                    "the profiler started, or by an op that recorded none" if shaped < int(k["count"]) else "")
        return _per_group(
            text, ev, groups, lambda g: f"{g['shape']} ({g['gflop']:,.3g} GFLOP)",
            f" It ran {len(groups)} GEMM shapes (M×K×N, from the launching ops' recorded shapes{unshaped}): ",
            "The spread over all its launches is shape, not noise: read each shape's own.",
            lambda g: f"At {g['shape']} its mean")
    if kind == "config":
        ev["configs"] = [{c: _num(g[c]) if c in ("median_us", "mean_us", "cv") else g[c]
                          for c in ("grid", "block", "count", "median_us", "mean_us", "cv")} for g in groups]
        return _per_group(
            text, ev, groups, lambda g: f"grid {g['grid']}, block {g['block']}",
            f" It ran in {len(groups)} launch configurations (grid and block, from the kernels' args): ",
            "A launch in another configuration does another amount of work, so the spread over all its launches is "
            "partly work, not noise: read each configuration's own.",
            lambda g: f"In grid {g['grid']}, block {g['block']} its mean")
    if int(k["count"]) >= MIN_LAUNCHES_FOR_SKEW:
        text += _skew("The mean", "the median", k, ev)
    return [Finding("q8.variance", 8, "Same kernel, different times", text, ev)]


def _compilers_only(r, ks) -> pd.Series:
    """Which of these ``kernel_stats`` rows are kernels that only torch.compile's compiler launched, while it
    compiled (``analyses.compiler_only_kernels``: under max-autotune, its benchmarks of candidate kernels)."""
    from ...analyses import compiler_only_kernels
    return ks["name"].isin(compiler_only_kernels(r))


def _which(ks, repeated, left_out: int = 0) -> str:
    """Which kernel question 8 reads, as the parenthesis after its name: the largest total, or the largest of those
    launched more than once (``repeated``) where larger ones ran once; of the workload's kernels, where
    ``left_out`` kernels that only torch.compile's compiler launched were passed over."""
    once = int((ks["total_us"] > repeated["total_us"].iloc[0]).sum())
    theirs = (f"; {_n(left_out, 'kernel')} that only torch.compile's compiler launched while it compiled, which "
              "question 3 counts, left out" if left_out else "")
    if not once:
        return "the largest total" + theirs
    return (f"the largest total of the kernels launched more than once; {_n(once, 'larger kernel')}, each launched "
            f"once, {'has' if once == 1 else 'have'} no spread to read" + theirs)


def _each_ran_once(ks) -> Finding:
    """Question 8 where every kernel was launched once: no spread to read, so none is quoted."""
    k = ks.iloc[0]
    which = (f"The trace's only kernel, {_short(k['name'])}, was launched once ({_us(k['total_us'])})" if len(ks) == 1
             else f"Each of the trace's {len(ks)} kernel names was launched once (the largest, {_short(k['name'])}, "
                  f"took {_us(k['total_us'])})")
    text = (f"{which}: a kernel's spread cannot be read from a single launch. Profile more iterations to see how much "
            "the same kernel varies.")
    return Finding("q8.variance", 8, "Same kernel, different times", text,
                   {"kernel": str(k["name"]), "count": int(k["count"]), "kernels": int(len(ks))})


def _per_group(text: str, ev: dict, groups: list[dict], label, head: str, tail: str, lead) -> list[Finding]:
    """Q8 on a kernel whose launches fall in groups that do different work (GEMM shapes, launch configurations):
    each group's count, median and CV (the first :data:`_MAX_GROUPS`), then the skew verdict of the group with
    the largest total (count × mean)."""
    listed = groups[:_MAX_GROUPS]
    parts = [f"{label(g)} ×{g['count']}: median {_us(g['median_us'])}, CV {100 * g['cv']:.1f}%" for g in listed]
    more = f"; {len(groups) - len(listed)} more" if len(groups) > len(listed) else ""
    text += head + "; ".join(parts) + more + ". " + tail
    big = max(groups, key=lambda g: g["count"] * g["mean_us"])
    if big["count"] >= MIN_LAUNCHES_FOR_SKEW:
        text += _skew(lead(big), "its median", big, ev)
    return [Finding("q8.variance", 8, "Same kernel, different times", text, ev)]


def _skew(lead: str, median: str, g, ev: dict) -> str:
    """The skew verdict of launches with this ``mean_us`` and ``median_us`` (:func:`skew_text`), as a sentence
    starting with ``lead``; its figure goes into ``ev`` (None where the median is 0 µs)."""
    ev["mean_above_median_pct"] = _num(mean_above_median_pct(g["mean_us"], g["median_us"]))
    return f" {lead} {skew_text(g['mean_us'], g['median_us'], median)}."


def mean_above_median_pct(mean_us: float, median_us: float) -> Optional[float]:
    """How far the mean lies above the median, in percent of the median (negative below it); None where the median
    is 0 µs (at least half the launches recorded as 0 µs, as traces with whole-µs times write short ones)."""
    return (mean_us / median_us - 1) * 100 if median_us > 0 else None


def skew_text(mean_us: float, median_us: float, median: str = "the median") -> str:
    """How a kernel's mean stands to its median (:func:`mean_above_median_pct`), as the rest of a sentence about the
    mean (no full stop): more than :data:`MEAN_ABOVE_MEDIAN_PCT` above it, a few slow launches pull it up; as far
    below it, a few fast ones pull it down (read the median either way); closer, within that threshold, the two
    agree; under 0.05% apart, they are equal. Over a median of 0 µs there is no percentage: the mean is named. The
    question-8 finding and the Kernel variance page both say it so."""
    pct = mean_above_median_pct(mean_us, median_us)
    if pct is None:
        if mean_us <= 0:
            return f"equals {median} (0 µs)"
        return (f"is {_us(mean_us)} where {median} is 0 µs (at least half the launches recorded as 0 µs): a few "
                "longer launches pull it up; read the median")
    side = "above" if pct >= 0 else "below"
    if pct > MEAN_ABOVE_MEDIAN_PCT:
        return f"is {pct:.1f}% above {median}: a few slow launches pull it up; read the median"
    if pct < -MEAN_ABOVE_MEDIAN_PCT:
        return f"is {-pct:.1f}% below {median}: a few fast launches pull it down; read the median"
    if abs(pct) < 0.05:
        return f"equals {median} (to 0.1%)"
    return f"is {abs(pct):.1f}% {side} {median}, within {MEAN_ABOVE_MEDIAN_PCT:g}%: mean and median agree"


def kernel_groups(r, name: str) -> tuple[str, list[dict]]:
    """How question 8 reads the launches of kernel ``name``: ``("shape", groups)`` where the GEMM ops that launched
    it recorded more than one shape (:func:`_by_shape`), else ``("config", groups)`` where it ran in more than one
    launch configuration (:func:`_by_config`), else ``("", [])``: its spread over all its launches is then its own.
    Each group has ``count``, ``median_us``, ``mean_us``, ``min_us``, ``max_us`` and ``cv``, and ``shape`` and
    ``gflop`` or ``grid`` and ``block``. The question-8 finding and the Kernel variance page both read a kernel so:
    the page gives each group its skew verdict, the finding that of the group with the largest total."""
    shapes = _by_shape(r, name)
    if len(shapes) > 1:
        return "shape", shapes
    configs = _by_config(r, name)
    if len(configs) > 1:
        return "config", configs
    return "", []


def _stats(n, med, mean, lo, hi, cv) -> dict:
    """A group's duration statistics as plain numbers (a CV the trace cannot give, one launch's, as 0)."""
    return {"count": int(n), "median_us": float(med), "mean_us": float(mean), "min_us": float(lo),
            "max_us": float(hi), "cv": float(cv) if cv == cv and cv is not None else 0.0}


def _by_config(r, name: str) -> list[dict]:
    """The launches of kernel ``name`` by launch configuration (``report.kernel_configs``), the largest total first:
    [{"grid", "block", "count", "median_us", "mean_us", "min_us", "max_us", "cv"}]; [] where the report has none."""
    c = getattr(r, "kernel_configs", None)
    if c is None or c.empty:
        return []
    mine = c[c["name"].astype(object) == name]
    return [{"grid": g if g is not None else "not recorded", "block": b if b is not None else "not recorded",
             **_stats(*rest)}
            for g, b, *rest in zip(mine["grid"], mine["block"], mine["count"], mine["median_us"], mine["mean_us"],
                                   mine["min_us"], mine["max_us"], mine["cv"])]


def _by_shape(r, name: str) -> list[dict]:
    """The launches of kernel ``name`` grouped by the shape (M×K×N) of the GEMM op that launched each
    (``report.gemm_kernel_shapes``: recorded shapes; two shapes of equal FLOPs are two groups), largest FLOPs first,
    then shape: [{"shape", "gflop", "count", "median_us", "mean_us", "min_us", "max_us", "cv"}]; [] where no such
    op recorded its shapes."""
    g = getattr(r, "gemm_kernel_shapes", None)
    if g is None or g.empty:
        return []
    mine = g[g["name"].astype(object) == name]
    out = [{"shape": str(shape), "gflop": float(flops) / 1e9, **_stats(*rest)}
           for shape, flops, *rest in zip(mine["shape"], mine["flops"], mine["count"], mine["median_us"],
                                          mine["mean_us"], mine["min_us"], mine["max_us"], mine["cv"])]
    out.sort(key=lambda x: (-x["gflop"], x["shape"]))
    return out
