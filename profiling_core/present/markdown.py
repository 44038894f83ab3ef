"""Untrusted text inside Streamlit Markdown: kernel, op, thread and run names, file names, paths, error messages.

Streamlit renders Markdown in far more places than ``st.markdown``: captions, headings, ``st.info``/``warning``/
``error``/``success``, toasts, widget, expander and metric labels, ``help`` tooltips and progress texts. Its Markdown
is GitHub-flavoured and more: a name from a trace could show an image (the viewer's browser fetches its URL), a link,
``:red[…]`` colours, ``:material/…:`` icons, ``:smile:`` emoji, ``$…$`` KaTeX, and turn ``->`` into an arrow.

- :func:`md_text` makes a string read literally as running text;
- :func:`md_code` makes it a code span (monospaced, as names read best), cut to a length.

Both give one line: whitespace, newlines included, becomes single spaces (a newline could start a heading or a
list). Dataframes, ``st.code`` and ``st.text`` do not render Markdown and need neither.

What Streamlit 1.67 does (seen in Chromium: tests/test_browser_hostile.py; the cases: tests/test_markdown_escape.py):
a backslash escapes any ASCII punctuation, so ``md_text`` escapes all of it (``[``, ``]``, ``(``, ``!``, ``<``,
``*``, ``_``, ``` ` ```, ``$``, ``:``, ``~``, ``|``, ``#`` …). Three things happen *after* the escapes are read,
on the plain text, and need a U+2060 WORD JOINER (invisible, zero width) to break them: GFM's bare links
(``http://…``, ``https://…``, ``www.…`` and ``name@host.tld``), the typographic symbols (``->`` ``<-`` ``--``
``>=`` ``<=`` ``~=``), and, before parsing at all, ``:material/`` (rewritten to ``:material_`` even inside code).
"""
from __future__ import annotations

import re

from .terminal import visible_bidi

__all__ = ["md_text", "md_code"]

WORD_JOINER = "\u2060"
"""Invisible and zero width: splits a bare link or an arrow for the renderer, not for the reader."""

_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character (CommonMark escapes any of them)
_BARE_LINK = re.compile(r"(?i)(https?(?=:)|www(?=\.)|(?=@))")  # GFM autolink literals: http(s)://, www., x@y.z
_SYMBOL = re.compile(r"([-<>~])(?=[-<>=])")  # -> <- -- >= <= ~= <-> become arrows and dashes
_MATERIAL = re.compile(r":(?=material/)")  # Streamlit rewrites ':material/' in the raw text, code spans included


def _one_line(text: object) -> str:
    """``text`` on one line, its bidi controls shown as escapes (``terminal.BIDI_CONTROLS``: a name cannot reorder
    what follows it)."""
    return " ".join(visible_bidi(text).split())


def md_text(text: object) -> str:
    r"""``text`` as Markdown that Streamlit shows literally, as running text, on one line.

    >>> md_text("**bold** [x](y.png)")
    '\\*\\*bold\\*\\* \\[x\\]\\(y\\.png\\)'
    """
    s = _BARE_LINK.sub(lambda m: m[0] + WORD_JOINER, _one_line(text))
    s = _SYMBOL.sub(lambda m: m[1] + WORD_JOINER, s)
    return _PUNCT.sub(r"\\\1", s)


def md_code(text: object, max_chars: int = 70) -> str:
    """``text`` as a Markdown code span that shows it literally (cut to ``max_chars``, on one line).

    Inside a code span nothing is Markdown (no link, image, emphasis, ``$math$`` or ``:red[…]``). A CommonMark code
    span is literal when its fence is longer than any run of backticks inside it; the padding spaces keep a leading
    or trailing backtick apart from the fence.

    >>> md_code("a `tick` here")
    '`` a `tick` here ``'
    """
    s = _one_line(text)
    s = s if len(s) <= max_chars else s[: max_chars - 1] + "…"
    s = _MATERIAL.sub(":" + WORD_JOINER, s)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", s)), default=0) + 1)
    return f"{fence} {s} {fence}"
