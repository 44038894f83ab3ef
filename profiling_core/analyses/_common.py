"""Helpers shared by the analyses: convert ns columns to µs, cast counts, tell how a trace was recorded."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..config import config_field

GPU_OP_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
"""Categories (lower-cased) of GPU work: 2022+ Kineto names and the 2021 ones (Kernel, Memcpy, Memset)."""


def _numpy_kind(s: pd.Series) -> str:
    """The kind of a column held as a plain numpy array (``"i"``, ``"u"``, ``"f"``, ...); ``""`` for an object,
    text or nullable (extension) column."""
    return s.dtype.kind if isinstance(s.dtype, np.dtype) and s.dtype != object else ""


def _replaced(df: pd.DataFrame, new: dict, drop=()) -> pd.DataFrame:
    """``df`` with the columns of ``new`` ({column: array}) put in, each where it was or else after the others,
    and the columns ``drop`` left out: one new frame (pandas pays a fixed cost per column inserted into a frame,
    whatever its length, and the analyses convert dozens of columns per trace), ``df`` itself unchanged."""
    if not new and not drop:
        return df
    cols = {c: (pd.Series(new[c], index=df.index, copy=False) if c in new else df[c])
            for c in df.columns if c not in drop or c in new}
    for c, v in new.items():
        if c not in cols:
            cols[c] = pd.Series(v, index=df.index, copy=False)
    return pd.DataFrame(cols, index=df.index, copy=False)


def _floats(s: pd.Series) -> np.ndarray:
    """A column's values as float64 (text or NULL where a number should be: NaN)."""
    if _numpy_kind(s) in ("i", "u", "f"):
        return s.to_numpy(dtype=np.float64)
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def us(df: pd.DataFrame, mapping: dict[str, str]) -> pd.DataFrame:
    """Add float µs columns from integer ns ones: ``mapping`` is ``{ns_column: us_column}`` (no µs column named as
    an ns one); drops the ns columns. Text or NULL where a number should be reads as NaN."""
    new = {us_col: _floats(df[ns_col]) / 1000.0 for ns_col, us_col in mapping.items()}
    return _replaced(df, new, drop=list(mapping))


def nullable_int(df: pd.DataFrame, *cols: str) -> pd.DataFrame:
    """Cast columns holding integers or NULLs to pandas' nullable Int64 (timestamps in ns stay exact; a float is
    rounded first, text reads as NULL)."""
    new = {}
    for c in cols:
        s = df[c]
        if s.dtype == "Int64":
            continue
        new[c] = (pd.arrays.IntegerArray(s.to_numpy(dtype=np.int64), np.zeros(len(s), dtype=bool))
                  if _numpy_kind(s) in ("i", "u") and s.dtype != np.uint64
                  else pd.to_numeric(s, errors="coerce").round().astype("Int64").array)
    return _replaced(df, new)


def ints(df: pd.DataFrame, *cols: str) -> pd.DataFrame:
    """Cast count columns to plain int64 (NULL counts become 0)."""
    new = {c: pd.to_numeric(df[c], errors="coerce").fillna(0).astype("int64").to_numpy()
           for c in cols if df[c].dtype != np.int64}
    return _replaced(df, new)


def ratio(num: pd.Series, den: pd.Series) -> pd.Series:
    """num / den as float, NaN where den is 0 or missing; row by row, so the two must be columns of the same rows
    (ValueError for columns of different indexes). Computed on numpy arrays: pandas' arithmetic costs ~1 ms a call
    whatever the length, and the analyses divide per-step columns of a few rows."""
    if not num.index.equals(den.index):
        raise ValueError("ratio: num and den must have the same index")
    n, d = _floats(num), _floats(den)
    ok = d > 0  # (False for NaN)
    out = np.full(len(n), np.nan)
    np.divide(n, d, out=out, where=ok)
    return pd.Series(out, index=num.index, copy=False)


SIZE_LIMIT = 2 ** 63
"""Sizes are below this: torch holds a tensor's sizes, its element count and a copy's bytes as int64."""


def is_size(v) -> bool:
    """Whether ``v`` is a size torch can have recorded (a dimension, an element count, a number of bytes): a whole
    number (not a bool) from 0 to below :data:`SIZE_LIMIT`. A larger one is no size a tensor had, and FLOPs or bytes
    made from it would not fit a float."""
    return type(v) is int and 0 <= v < SIZE_LIMIT


def recorded_with(option: str, recorded, config=None) -> bool:
    """Whether the trace was recorded with the torch.profiler ``option`` (``profile_memory``, ``with_stack``,
    ``record_shapes``, ...): the trace says so (``recorded``: ``TraceSession.recorded_with`` or a report's
    ``summary["recorded_with"]``, the options torch wrote at the document's top level as on) or the run's config does.
    The one test of it for every text that depends on how a trace was recorded."""
    return option in (recorded or ()) or bool(config_field(config, option))
