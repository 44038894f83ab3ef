"""JSON as the command line prints it: every value JSON can hold (:func:`clean`), so that any JSON reader takes it."""
from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from ..present.terminal import BIDI_CONTROLS

_SHOWN = re.compile(f"[\x7f-\x9f\u2028\u2029{BIDI_CONTROLS}]")


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


def escaped(text: str) -> str:
    """JSON text written with ``ensure_ascii=False`` (names in UTF-8, as written: ``µs``, not ``\\u00b5s``) with
    the characters a terminal would act on or that reorder what it shows (C1 controls, U+2028/U+2029 and
    ``present.terminal.BIDI_CONTROLS``; ``json`` already escapes the C0 ones) as ``\\uNNNN`` escapes: they can only
    stand inside its strings, where the escape means the same character to any JSON reader."""
    return _SHOWN.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
