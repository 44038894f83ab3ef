"""Question 8, the same kernel at different times (``q8.variance``): the largest kernel's spread, and whether a few
slow launches skew its mean (the Kernel variance page gives each kernel the same verdict)."""
from __future__ import annotations

import pandas as pd

from ...units import format_duration_us as _us
from .base import NO_GPU_TEXT, Finding, _num, _short


MEAN_ABOVE_MEDIAN_PCT = 2.0
"""A kernel whose mean lies more than this many percent above its median is skewed by a few slow launches
(question 8); the Kernel variance page gives each kernel the same verdict."""
MIN_LAUNCHES_FOR_SKEW = 3
"""Fewer launches than this say nothing about skew: the question-8 finding and the page then give no verdict."""


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
