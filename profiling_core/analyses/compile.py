"""What torch.compile adds per step on the CPU and changes on the GPU (study questions 9 and 10)."""
from __future__ import annotations

import pandas as pd

import numpy as np

from ._common import ints, nullable_int, run_query, us
from ._shared import Shared, frame, shared_for

__all__ = ["compile_breakdown"]

_COUNTS = ("step", "cache_lookups", "compiled_regions", "prologues", "fx_graph_calls", "graph_launches", "kernels",
           "memcpys", "memcpy_dtod", "memcpy_htod", "memcpy_dtoh", "memsets", "launches", "kernel_launches")


def _compile_breakdown_raw(sh: Shared) -> pd.DataFrame:
    """What ``compile_breakdown.sql`` returns: its CPU half from ``compile_cpu``, its GPU half from the shared pairs."""
    cols = ["step", "start_ns", "cpu_dur_ns", "cache_lookups", "cache_lookup_ns", "compiled_regions",
            "compiled_region_ns", "prologues", "prologue_ns", "fx_graph_calls", "fx_graph_ns", "fx_graph_hash",
            "graph_launches", "kernels", "memcpys", "memcpy_dtod", "memcpy_htod", "memcpy_dtoh", "memsets",
            "launches", "kernel_launches"]
    cpu = run_query(sh.session, "compile_cpu")
    if cpu.empty:
        return frame([], cols)
    p = sh.p
    rows = []
    for r in cpu.itertuples(index=False):
        ts, dur = int(r.start_ns), int(r.cpu_dur_ns)
        i = sh.pairs_in(ts, ts + dur)
        gid, lid, cat = p["gpu_id"][i], p["launch_id"][i], p["gpu_category"][i]
        is_k = cat == "kernel"
        is_cp = np.isin(cat, ("gpu_memcpy", "memcpy"))
        kind = p["memcpy_kind"][i]

        def cpy(k):
            return len(set(gid[is_cp & (kind == k)].tolist())) if len(i) else 0
        rows.append((r.step, r.start_ns, r.cpu_dur_ns, r.cache_lookups, r.cache_lookup_ns, r.compiled_regions,
                     r.compiled_region_ns, r.prologues, r.prologue_ns, r.fx_graph_calls, r.fx_graph_ns,
                     r.fx_graph_hash, r.graph_launches,
                     len(set(gid[is_k].tolist())), len(set(gid[is_cp].tolist())),
                     cpy("DtoD"), cpy("HtoD"), cpy("DtoH"),
                     len(set(gid[np.isin(cat, ("gpu_memset", "memset"))].tolist())),
                     len(set(lid.tolist())), len(set(lid[is_k].tolist()))))
    return frame(rows, cols)


def compile_breakdown(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per step: torch.compile's CPU rows and the GPU work the step launched.

    Args:
        session: a trace session.

    Returns:
        DataFrame in step order with ``step``, ``start_ns``, ``cpu_dur_us``; counts and total µs of
        ``TorchDynamo Cache Lookup`` (``cache_lookups``, ``cache_lookup_us``), ``Torch-Compiled Region``
        (``compiled_regions``, ``compiled_region_us``), ``AOTDispatcher Runtime Wrapper Prologue`` (``prologues``,
        ``prologue_us``), ``## Call CompiledFxGraph <hash>`` (``fx_graph_calls``, ``fx_graph_us``,
        ``fx_graph_hash``: the hash(es) called in that step, comma-separated, NA in eager steps);
        ``graph_launches`` (cudaGraphLaunch calls); GPU ops launched in the step: ``kernels``, ``memcpys``,
        ``memcpy_dtod``, ``memcpy_htod``, ``memcpy_dtoh``, ``memsets``; ``launches`` (calls that launched GPU
        work) and ``kernel_launches``. All zeros for an eager trace; empty without steps.
    """
    df = _compile_breakdown_raw(shared_for(session, shared))
    df = ints(df, *_COUNTS)
    df = nullable_int(df, "start_ns")
    df = us(df, {"cpu_dur_ns": "cpu_dur_us", "cache_lookup_ns": "cache_lookup_us",
                 "compiled_region_ns": "compiled_region_us", "prologue_ns": "prologue_us",
                 "fx_graph_ns": "fx_graph_us"})
    df["fx_graph_hash"] = df["fx_graph_hash"].astype("object").where(df["fx_graph_hash"].notna(), None)
    return df[["step", "start_ns", "cpu_dur_us", "cache_lookups", "cache_lookup_us", "compiled_regions",
               "compiled_region_us", "prologues", "prologue_us", "fx_graph_calls", "fx_graph_us", "fx_graph_hash",
               "graph_launches", "kernels", "memcpys", "memcpy_dtod", "memcpy_htod", "memcpy_dtoh", "memsets",
               "launches", "kernel_launches"]]
