"""What torch.compile adds per step on the CPU and changes on the GPU (study questions 9 and 10)."""
from __future__ import annotations

import pandas as pd

from ._common import ints, nullable_int, run_query, us

__all__ = ["compile_breakdown"]

_COUNTS = ("step", "cache_lookups", "compiled_regions", "prologues", "fx_graph_calls", "graph_launches", "kernels",
           "memcpys", "memcpy_dtod", "memcpy_htod", "memcpy_dtoh", "memsets", "launches", "kernel_launches")


def compile_breakdown(session) -> pd.DataFrame:
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
    df = run_query(session, "compile_breakdown")
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
