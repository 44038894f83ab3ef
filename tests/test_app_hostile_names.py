"""AppTest: names from a trace, a file or a run are shown as text on every page, never as live Markdown or HTML; the
Perfetto button's script and each page's HTML report keep them as data (a string in the script, text in the report).

A kernel named like the one below, in a trace anyone can mail around, used to make every viewer's browser fetch the
image's URL, show a link, recolour text and typeset math; an upload's file name did the same in the sidebar. The
checks read what each element hands to Streamlit's Markdown (bodies, labels, help texts) as Streamlit 1.67 reads it
(see profiling_core/markdown.py): outside code spans, a backslash escape is a literal character, and a bare
http:// or www. link is live even when its punctuation is escaped.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest_app import H200, app, download, import_trace

HOSTILE = ("![x](http://attacker.invalid/p.png) [click](http://attacker.invalid) <img src=x onerror=alert(1)> "
           "**bold** :red[x] $x$ <!--<script> </script> \"' \u2028 \x1b[31m {{x}} `tick` ${x}")
SCRIPTY = "<!--<script> </script> \"' \u2028 \x1b[31m {{x}} `tick` ${x}"  # the part aimed at HTML, JS and terminals
FILE_NAME = "![x](attacker.invalid.png) <img src=x onerror=alert(1)> **bold** :red[x].json"  # no '/' in a file name
SEEN = "![x](http://attacker.invalid/p.png)"  # the part every (shortened) mention keeps
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"

# what a live construct of the hostile names looks like to the parser (escapes hidden) or to GFM's bare links
LIVE_MARKUP = {"image": "![", "link": "](", "html": "<img", "bold": "**bold**", "colour": ":red[", "math": "$x$",
               "comment": "<!--", "script": "<script"}
LIVE_LITERAL = {"bare link": re.compile(r"(?i)(https?://|www\.)attacker")}
NOT_MARKDOWN = {"Json", "Code", "Text", "IFrame", "VegaLiteChart", "Dataframe", "Html", "Arrow"}


def _read(md: str) -> tuple[str, str, str]:
    """(markup, literal, code) of a Markdown source: outside code spans ``markup`` has each backslash escape as
    ``\\0`` (what the parser sees) and ``literal`` has its character (what the reader and the bare-link finder see);
    ``code`` is the text of the code spans."""
    markup, literal, code, i = [], [], [], 0
    while i < len(md):
        c = md[i]
        if c == "\\" and i + 1 < len(md) and md[i + 1] in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~":
            markup.append("\0")
            literal.append(md[i + 1])
            i += 2
        elif c == "`":
            fence = re.match(r"`+", md[i:])[0]
            end = re.compile(rf"(?<!`){fence}(?!`)").search(md, i + len(fence))
            if end is None:  # no closing fence: the backticks are text
                markup.append(fence)
                literal.append(fence)
                i += len(fence)
            else:
                code.append(md[i + len(fence):end.start()])
                i = end.end()
        else:
            markup.append(c)
            literal.append(c)
            i += 1
    return "".join(markup), "".join(literal), " ".join(code)


def markdown_sources(at) -> list[tuple[str, str]]:
    """(element, text) of everything on the page (sidebar included) that Streamlit renders as Markdown."""
    out = []
    for node in at._tree:
        proto = getattr(node, "proto", None)
        if proto is None or type(proto).__name__ in NOT_MARKDOWN:
            continue
        for field, value in proto.ListFields():
            if field.name in ("body", "label", "help", "text") and isinstance(value, str):
                out.append((f"{type(node).__name__}.{field.name}", value))
    return out


def live_names(at) -> list[str]:
    """Each element whose Markdown makes a hostile name live, with what it would render."""
    bad = []
    for where, md in markdown_sources(at):
        markup, literal, _ = _read(md)
        if "attacker" not in md:
            continue
        hits = [k for k, s in LIVE_MARKUP.items() if s in markup] + [
            k for k, rx in LIVE_LITERAL.items() if rx.search(literal)]
        if hits:
            bad.append(f"{where}: {', '.join(hits)} in {md!r}")
    return bad


def shown_texts(at) -> list[str]:
    """The text each Markdown element shows the reader (escapes read, word joiners invisible)."""
    out = []
    for _, md in markdown_sources(at):
        _, literal, code = _read(md)
        out.append((literal + " " + code).replace("\u2060", ""))
    return out


def write_hostile_trace(folder: Path) -> Path:
    """An H200 trace whose GEMM kernel is called HOSTILE + its real name, in a file called FILE_NAME."""
    data = json.loads((H200 / "4096_bf16_warm_eager.json").read_text())
    for e in data["traceEvents"]:
        if e.get("name") == GEMM:
            e["name"] = f"{HOSTILE} {GEMM}"
    path = folder / FILE_NAME
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def hostile_run(runs_dir, tmp_path):
    """The hostile trace imported under the run name HOSTILE."""
    return import_trace(runs_dir, write_hostile_trace(tmp_path), HOSTILE)


# page -> where it names the run or the kernel (None: the app's frame, whose sidebar names the current run; AppTest
# runs a switched-to page without the frame)
PAGES = {None: "the sidebar's current run", "profile": "the heading and the findings",
         "variance": "the per-kernel lines", "dispatch": "the findings", "runs": "the compared runs' headings",
         "compile_vs_eager": None, "overhead": None, "trace_lab": None}
KERNEL_PAGES = {"profile", "variance", "dispatch"}  # they name the GEMM kernel and its launches


# page -> its report button's key (Overhead has none: the run has no matrix size to chart)
REPORTS = {"profile": "profile", "variance": "variance", "dispatch": "dispatch", "runs": "runs",
           "compile_vs_eager": "compile"}


def perfetto_scripts(at) -> list[str]:
    """The HTML of every st.iframe frame on the page (the Perfetto button's)."""
    return [node.proto.srcdoc for node in at._tree
            if type(getattr(node, "proto", None)).__name__ == "IFrame" and node.proto.srcdoc]


def assert_names_are_data_in_the_script(page_html: str, name: str) -> None:
    """The button's one script holds no ``</script`` or ``<!--`` (so the browser's tokenizer ends it at its own closing
    tag and runs it) and its META literal reads back, as JSON, to the run's name."""
    from test_export import _meta, _script_body
    assert page_html.count("<script") == 1
    body = _script_body(page_html)
    assert "</script" not in body.lower() and "<!--" not in body and "-->" not in body
    assert _meta(body)["title"] == name


def assert_names_are_text_in_the_report(report: str, names_shown: bool) -> None:
    """The report's markup has no script, image, comment or event handler; the names read back as its text (where
    ``names_shown``: the Profile report names the run and its kernels in full)."""
    from test_export import _parsed
    markup, text = _parsed(report)
    assert [m for m in markup if m[0] == "start" and m[1] in ("script", "img", "iframe", "object")] == []
    assert [m for m in markup if m[0] == "comment"] == []
    assert [m for m in markup if m[0] == "start" and any(a.lower().startswith("on") for a, _ in m[2])] == []
    assert "<!--<script>" not in report and "</script>" not in report and "<img" not in report
    if names_shown:
        assert "<img src=x onerror=alert(1)> **bold**" in text and "<!--<script> </script>" in text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p or "frame")
def test_hostile_names_are_shown_as_text(hostile_run, media, page):
    at = app(page)
    assert not at.exception, [e.value for e in at.exception]
    assert live_names(at) == []
    if page == "profile":
        [button] = perfetto_scripts(at)
        assert_names_are_data_in_the_script(button, HOSTILE)
    if page in REPORTS:
        assert_names_are_text_in_the_report(download(at, media, f"report_{REPORTS[page]}").decode(),
                                            names_shown=page == "profile")
    # and the names are still there for the reader
    shown = shown_texts(at)
    if PAGES[page]:
        assert any(SEEN in t for t in shown), f"no name shown in {PAGES[page]}"
    if page in KERNEL_PAGES:
        assert any(SEEN in t and "launch" in t for t in shown), "the kernel's name is not shown"


def test_a_hostile_upload_name_is_shown_as_text(runs_dir):
    at = app("trace_lab")
    broken = ("broken " + FILE_NAME, b"this is not json")
    at.get("file_uploader")[0].set_value((*broken, "application/json"))
    at.run()
    assert not at.exception
    assert any("Could not import" in e.value for e in at.error)
    assert live_names(at) == []
    assert any("Could not import broken ![x](attacker.invalid.png)" in t for t in shown_texts(at))

    good = (FILE_NAME, (H200 / "4096_bf16_warm_eager.json").read_bytes())
    at.get("file_uploader")[0].set_value((*good, "application/json"))
    at.run()
    assert not at.exception
    assert any("Imported as run" in s.value for s in at.success)
    assert live_names(at) == []
    frame = app()  # the sidebar of every page names the new current run, by the file's name
    assert live_names(frame) == []
    assert any("![x](attacker.invalid.png) <img src=x onerror=alert(1)> **bold** :red[x]" in t
               for t in shown_texts(frame))


def test_the_html_report_escapes_hostile_names(hostile_run, media):
    from profiling_core.present import html_text
    at = app("profile")
    report = download(at, media, "report_profile").decode()
    assert "&lt;img src=x onerror=alert(1)&gt;" in report  # the run's name, the kernel's in the findings
    assert html_text(SCRIPTY) in report
    assert "<img" not in report and "<script" not in report and "<!--" not in report


def _served_name(at, media, key: str) -> str:
    """The file name the download button ``key`` serves its file under."""
    [button] = [b for b in at.get("download_button") if b.proto.id.endswith(f"-{key}")]
    mgr = media.managers[-1]
    url = mgr.execute_deferred(button.proto.deferred_file_id) if button.proto.deferred_file_id else button.proto.url
    return mgr._storage.get_file(url.rsplit("/", 1)[-1]).filename


def test_the_profile_pages_own_downloads_have_safe_file_names(runs_dir, media):
    """A run name with a right-to-left override, a newline, a path and 300 more characters: the Profile page's
    Trace JSON, Table text and Meta JSON buttons served it as the file name as it was ("q\\u202egnp.exe /etc/x...",
    which a browser shows as "...exe.png"), where every chart's, table's and report's download takes the file-name-safe
    slug of its name (``safe_filename``)."""
    from profiling_core.present import safe_filename
    name = 'q\u202egnp.exe /etc/x:"*?|<>\nnl ' + "L" * 300
    import_trace(runs_dir, H200 / "4096_bf16_warm_eager.json", name)
    at = app("profile")
    slug = safe_filename(name)
    assert len(slug) <= 120 and "/" not in slug and "\u202e" not in slug and "\n" not in slug
    assert {k: _served_name(at, media, k) for k in ("dl_trace", "dl_table", "dl_meta")} == {
        "dl_trace": f"{slug}.trace.json", "dl_table": f"{slug}.txt", "dl_meta": f"{slug}.meta.json"}
