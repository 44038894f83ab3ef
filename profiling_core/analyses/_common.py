"""Helpers shared by the analyses: convert ns columns to µs, cast counts, tell how a trace was recorded."""
from __future__ import annotations

import pandas as pd

from ..config import config_field

GPU_OP_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
"""Categories (lower-cased) of GPU work: 2022+ Kineto names and the 2021 ones (Kernel, Memcpy, Memset)."""


def us(df: pd.DataFrame, mapping: dict[str, str]) -> pd.DataFrame:
    """Add float µs columns from integer ns ones: ``mapping`` is ``{ns_column: us_column}``; drops the ns columns."""
    for ns_col, us_col in mapping.items():
        df[us_col] = pd.to_numeric(df[ns_col], errors="coerce").astype("float64") / 1000.0
    return df.drop(columns=list(mapping))


def nullable_int(df: pd.DataFrame, *cols: str) -> pd.DataFrame:
    """Cast columns holding integers or NULLs to pandas' nullable Int64 (timestamps in ns stay exact)."""
    for c in cols:
        df[c] = pd.to_numeric(df[c], errors="coerce").round().astype("Int64")
    return df


def ints(df: pd.DataFrame, *cols: str) -> pd.DataFrame:
    """Cast count columns to plain int64 (NULL counts become 0)."""
    for c in cols:
        df[c] = pd.to_numeric(df[c], errors="coerce").fillna(0).astype("int64")
    return df


def ratio(num: pd.Series, den: pd.Series) -> pd.Series:
    """num / den as float, NaN where den is 0 or missing."""
    den = pd.to_numeric(den, errors="coerce").astype("float64")
    return pd.to_numeric(num, errors="coerce").astype("float64") / den.where(den > 0)


def recorded_with(option: str, recorded, config=None) -> bool:
    """Whether the trace was recorded with the torch.profiler ``option`` (``profile_memory``, ``with_stack``,
    ``record_shapes``, ...): the trace says so (``recorded``: ``TraceSession.recorded_with`` or a report's
    ``summary["recorded_with"]``, the options torch wrote at the document's top level as on) or the run's config does.
    The one test of it for every text that depends on how a trace was recorded."""
    return option in (recorded or ()) or bool(config_field(config, option))
