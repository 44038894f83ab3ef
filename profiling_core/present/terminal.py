"""Text for a terminal: strings from traces, file names, run names and the files the store keeps are untrusted, so the
CLI's human output shows their control characters (ESC sequences, carriage returns, newlines, bidi overrides) as
visible escapes instead of letting them move the cursor, recolour, retitle or reorder what the user reads.

:func:`terminal_safe` is the one escaping function; :func:`echo` prints lines through it, and is how the CLI prints
every line of its human output."""
from __future__ import annotations

import re
import sys
from typing import IO

BIDI_CONTROLS = "\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""The bidi marks, embeddings, overrides and isolates (as a regex character-class body): a name that holds one
reorders what follows it wherever it is shown (``aten::add\u202e sm 0.1`` reads "aten::add 1.0 ms"), so every
surface that shows untrusted text (the terminal, Streamlit's Markdown, the HTML report, the charts) writes them as
visible escapes (:func:`visible_bidi`)."""
_BIDI = re.compile(f"[{BIDI_CONTROLS}]")
# C0 and C1 controls, the bidi marks and overrides, and lone surrogates (a file name's bytes that are not UTF-8, as
# Python decodes them): a terminal acts on the first ones, and printing the last raises UnicodeEncodeError
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{BIDI_CONTROLS}\ud800-\udfff]")


def visible_escape(char: str) -> str:
    """One character as the escape that shows it: ``\\xNN`` below U+0100, else ``\\uNNNN``."""
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def visible_bidi(text: object) -> str:
    """``str(text)`` with each of :data:`BIDI_CONTROLS` shown as its ``\\uNNNN`` escape."""
    return _BIDI.sub(lambda m: visible_escape(m[0]), str(text))


def terminal_safe(text: object) -> str:
    """``str(text)`` with every C0/C1 control and bidi control shown as ``\\xNN`` / ``\\uNNNN`` (tabs too), and a lone
    surrogate as ``\\udcNN``."""
    return _CONTROL.sub(lambda m: visible_escape(m[0]), str(text))


def echo(*lines: object, file: IO[str] | None = None, end: str = "\n", flush: bool = False) -> None:
    """Print each of ``lines`` as one line, through :func:`terminal_safe`: whatever a line holds (a kernel's name, a
    calibration's text, a lock holder's note), it stays one line and cannot drive the terminal."""
    print("\n".join(terminal_safe(line) for line in lines), file=file or sys.stdout, end=end, flush=flush)
