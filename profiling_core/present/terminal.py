"""Text for a terminal: strings from traces, file names and run names are untrusted, so the CLI's human output shows
their control characters (ESC sequences, carriage returns, newlines, bidi overrides) as visible escapes instead of
letting them move the cursor, recolour, retitle or reorder what the user reads."""
from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible_escape(char: str) -> str:
    """One character as the escape that shows it: ``\\xNN`` below U+0100, else ``\\uNNNN``."""
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def terminal_safe(text: object) -> str:
    """``str(text)`` with every C0/C1 control and bidi control shown as ``\\xNN`` / ``\\uNNNN`` (tabs too)."""
    return _CONTROL.sub(lambda m: visible_escape(m[0]), str(text))
