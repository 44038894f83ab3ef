"""The profiler table (``prof.key_averages().table()``) rebuilt from the trace (study question 1)."""
from __future__ import annotations

import pandas as pd

from ._common import ints, run_query, us

__all__ = ["profiler_table"]


def profiler_table(session) -> pd.DataFrame:
    """The profiler table rebuilt from the trace, one row per name and lane.

    CPU rows (cpu_op, user_annotation, cuda_runtime, cuda_driver, overhead, 2021 Operator/Runtime): self CPU =
    duration minus the durations of the slice's children; self device = GPU ops launched by calls whose parent is
    the op; device total = GPU ops launched anywhere inside it. GPU rows (kernels, memcpy, memset and
    gpu_user_annotation such as the GPU-side ``matmul_add``) carry their duration as device time, as in torch's
    table, which is why summing "Self CUDA" over all rows double counts. ``ProfilerStep#N`` rows merge into
    ``ProfilerStep*``.

    Args:
        session: a trace session.

    Returns:
        DataFrame sorted by self device time then self CPU time: ``name``, ``lane`` (``cpu``/``gpu``), ``calls``,
        ``self_cpu_us``, ``cpu_total_us``, ``self_device_us``, ``device_total_us``, ``cpu_avg_us``
        (cpu_total / calls).
    """
    df = run_query(session, "profiler_table")
    df = ints(df, "calls")
    df = us(df, {"self_cpu_ns": "self_cpu_us", "cpu_total_ns": "cpu_total_us",
                 "self_device_ns": "self_device_us", "device_total_ns": "device_total_us"})
    df["cpu_avg_us"] = df["cpu_total_us"] / df["calls"].where(df["calls"] > 0)
    for c in ("name", "lane"):
        df[c] = df[c].astype("object")
    return df[["name", "lane", "calls", "self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us",
               "cpu_avg_us"]].reset_index(drop=True)
