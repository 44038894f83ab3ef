"""md_text / md_code: an untrusted string as Streamlit Markdown that shows it literally.

The cases are what Streamlit 1.67 was seen to do in Chromium (profiling_core/markdown.py says how): a backslash
escape neutralises Markdown syntax, and a WORD JOINER (U+2060, shown below as {wj}) breaks what Streamlit does on the
plain text after the escapes: bare links, typographic arrows, ':material/' icons.
"""
from __future__ import annotations

import re

import pytest

from profiling_core.present import md_code, md_text

WJ = "\u2060"


def shown(s: str) -> str:
    """The escaped form with the invisible word joiner made visible, for readable expected values."""
    return s.replace(WJ, "{wj}")


@pytest.mark.parametrize("name, expected", [
    ("aten::mm", r"aten\:\:mm"),
    ("64_fp32_cold_eager", r"64\_fp32\_cold\_eager"),
    ("![x](p.png)", r"\!\[x\]\(p\.png\)"),
    ("[click](javascript:alert(1))", r"\[click\]\(javascript\:alert\(1\)\)"),
    ("<img src=x onerror=alert(1)>", r"\<img src\=x onerror\=alert\(1\)\>"),
    ("**bold** _it_ ~~gone~~", r"\*\*bold\*\* \_it\_ \~\~gone\~\~"),
    (":red[x] $x$ :smile:", r"\:red\[x\] \$x\$ \:smile\:"),
    ("# h1 | a | `tick` 1. &amp; \\", r"\# h1 \| a \| \`tick\` 1\. \&amp\; \\"),
    ("http://a.invalid/p", r"http{wj}\:\/\/a\.invalid\/p"),
    ("HTTPS://a.invalid www.b.invalid", r"HTTPS{wj}\:\/\/a\.invalid www{wj}\.b\.invalid"),
    ("me@host.invalid", r"me{wj}\@host\.invalid"),
    ("a -> b <- c -- d >= e", r"a \-{wj}\> b \<{wj}\- c \-{wj}\- d \>{wj}\= e"),
    ("two\nlines\n\n# and  spaces ", r"two lines \# and spaces"),
    ("operator<float>", r"operator\<float\>"),
])
def test_md_text_escapes_every_markdown_construct(name, expected):
    assert shown(md_text(name)) == expected


@pytest.mark.parametrize("name", [
    "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>>(int)",
    "![x](http://attacker.invalid/p.png) [click](http://attacker.invalid) <img src=x onerror=alert(1)> **bold** "
    ":red[x] $x$",
    "µs ×3 → ok, ‘quoted’ and \\backslash\\",
])
def test_md_text_shows_the_text_itself(name):
    # what the reader sees: each backslash escape read as its character, the word joiners invisible
    assert re.sub(r"\\(.)", r"\1", md_text(name)).replace(WJ, "") == name


@pytest.mark.parametrize("name, expected", [
    ("aten::mm", "` aten::mm `"),
    ("![x](http://a.invalid/p.png) **b**", "` ![x](http://a.invalid/p.png) **b** `"),
    ("a `tick` b", "`` a `tick` b ``"),
    ("``two``", "``` ``two`` ```"),
    ("line\nbreak", "` line break `"),
    (":material/home:", "` :{wj}material/home: `"),
])
def test_md_code_is_a_literal_code_span(name, expected):
    assert shown(md_code(name)) == expected


def test_md_code_cuts_long_names():
    assert md_code("x" * 100, max_chars=10) == "` xxxxxxxxx… `"


BIDI = ["\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]


@pytest.mark.parametrize("char", BIDI, ids=[f"U+{ord(c):04X}" for c in BIDI])
def test_a_bidi_control_in_a_name_reorders_nothing_on_any_surface(char):
    """A name holding a right-to-left override showed everything after it reversed ("aten::add\u202e sm 0.1" reads
    "aten::add 1.0 ms") in Markdown, the HTML report and the charts; the terminal already showed it as an escape.
    Every surface now writes it as its \\uNNNN escape, a name stays readable, and no other character changes."""
    from profiling_core.present.web import html_text, vega_safe
    name = f"aten::add{char} sm 0.1"
    want = f"aten::add\\u{ord(char):04x} sm 0.1"
    for shown_text in (re.sub(r"\\(.)", r"\1", md_text(name)).replace(WJ, ""), md_code(name).strip("` "),
                       html_text(name), vega_safe({"label": name})["label"]):
        assert char not in shown_text and shown_text == want
