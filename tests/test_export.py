"""Export: PNG/SVG through vl-convert (offline), CSV, and the one-file HTML report."""
from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

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
    assert "a<\\/script>b" in html and "</script>b" not in html  # the title cannot close the script


def test_report_includes_torchs_table_as_text():
    from profiling_core.present.export import ReportSection, html_report
    table = "Name      Self CPU %\naten::mm  <b>57.5%</b>\n"
    page = html_report("r", [ReportSection("Profiler table", preformatted=table)])
    assert "<pre" in page and "aten::mm  &lt;b&gt;57.5%&lt;/b&gt;" in page  # as it is, escaped
