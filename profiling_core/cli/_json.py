"""JSON as the command line prints it: every value JSON can hold (:func:`clean`), so that any JSON reader takes it."""
from __future__ import annotations

import json
import math
import sys
from typing import Any


def clean(x: Any) -> Any:
    """JSON-safe values: NaN, infinities and pandas' NA → None, numpy numbers → Python numbers, dict keys → str."""
    t = type(x)
    if x is None or t is str or t is int or t is bool:  # (most values: answered before the checks below)
        return x
    if t is float:
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if hasattr(x, "item"):
        try:
            x = x.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(x, float) and not math.isfinite(x):
        return None
    pd = sys.modules.get("pandas")  # (pandas' NA can only come from a process that imported pandas)
    if pd is not None and x is pd.NA:
        return None
    return x


def dumps(value: Any, **kw: Any) -> str:
    """``value`` as JSON text after :func:`clean`: NaN and infinities (a meta.json field outside the checked schema,
    a calibration's ``extra``) become null, which every JSON reader takes (``NaN`` is no JSON)."""
    return json.dumps(clean(value), allow_nan=False, **kw)
