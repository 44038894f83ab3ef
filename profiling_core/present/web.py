"""Untrusted text inside HTML, JavaScript and SVG: run, upload, kernel and op names, file names, paths, error messages.

Every string that reaches a page the project writes itself (the one-file HTML report, the Perfetto button's page)
goes through one of these, by where it lands:

- :func:`html_text`: HTML text or a quoted attribute value: ``& < > " '`` become character references, so a name
  can open no tag, close no attribute and start no comment; bidi controls become visible escapes
  (:data:`~profiling_core.present.terminal.BIDI_CONTROLS`), so a name cannot reorder the figures after it.
- :func:`script_json`: a value inside a ``<script>`` element, as a JavaScript literal. JSON alone is not enough
  there: the HTML parser reads a script's body before JavaScript does, and ``</script`` ends it, while ``<!--``
  followed by ``<script`` puts it into the "double-escaped" state in which the real ``</script>`` no longer ends
  it (Chromium then runs nothing of the script). So ``<``, ``>`` and ``&`` are written as ``\\u003c``,
  ``\\u003e``, ``\\u0026``, and every other non-ASCII character (U+2028 and U+2029, line terminators in old
  JavaScript, included) as its ``\\uXXXX`` escape: the body then holds no ``</``, ``<!--`` or ``-->`` whatever the
  value, and JavaScript reads the value back exactly.
- :func:`vega_safe`: a chart's Vega-Lite spec, before the browser or vl-convert draws it: in every string, the
  characters XML 1.0 does not allow (C0 controls but tab, newline and carriage return; U+FFFE, U+FFFF; lone
  surrogates), U+2028/U+2029 and the bidi controls become visible escapes (``\\x1b``, ``\\u2028``). vl-convert
  parses the SVG it writes as XML and aborts the whole process on the first kind (a Rust panic, no exception: a
  kernel named with an ESC sequence took the app down from a PNG or report button); Vega-Lite writes a custom sort
  order into an expression whose parser refuses the second ("Unexpected token ILLEGAL": no chart).

Terminal output has its own rule (:func:`profiling_core.present.terminal_safe`) and Streamlit's Markdown its own
(:func:`profiling_core.present.md_text`).
"""
from __future__ import annotations

import html
import json
import re
from typing import Any

from .terminal import BIDI_CONTROLS, visible_bidi, visible_escape

__all__ = ["html_text", "script_json", "vega_safe"]

_VEGA_UNSAFE = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff\u2028\u2029{BIDI_CONTROLS}]")

_SCRIPT_UNSAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def html_text(text: object) -> str:
    """``str(text)`` as HTML text (or a quoted attribute's value) that shows it literally.

    >>> html_text('<!--<script>"x"')
    '&lt;!--&lt;script&gt;&quot;x&quot;'
    """
    return html.escape(visible_bidi(text), quote=True)


def script_json(value: Any) -> str:
    """``value`` (JSON-able: strings, numbers, lists, dicts) as a JavaScript literal safe inside ``<script>``.

    >>> script_json({"title": "a</script><!--<script>"})
    '{"title": "a\\\\u003c/script\\\\u003e\\\\u003c!--\\\\u003cscript\\\\u003e"}'
    """
    # ensure_ascii: every non-ASCII character (U+2028/2029, lone surrogates) as a \\u escape; then the three
    # characters the HTML tokenizer acts on inside a script. Their escapes mean the same characters to JSON and JS.
    return json.dumps(value, ensure_ascii=True).translate(_SCRIPT_UNSAFE)


def vega_safe(value: Any) -> Any:
    """``value`` (a JSON-like spec: dicts, lists, strings, numbers) with the characters XML 1.0 refuses and U+2028/
    U+2029, in every string and every key, shown as visible escapes; everything else as it is.

    >>> vega_safe({"k\\x1b": ["a\\x1b[31mb", 1, "tab\\tok"]})
    {'k\\\\x1b': ['a\\\\x1b[31mb', 1, 'tab\\tok']}
    """
    if isinstance(value, str):
        return _VEGA_UNSAFE.sub(lambda m: visible_escape(m[0]), value)
    if isinstance(value, dict):
        return {vega_safe(k): vega_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [vega_safe(v) for v in value]
    return value
