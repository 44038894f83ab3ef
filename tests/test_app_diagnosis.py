"""AppTest: the diagnosis on the Profile page and the device's peaks on Home (issue 13)."""
from __future__ import annotations

import json

import pytest
from conftest_app import DATA, app, chart_specs, errors_of, import_trace

from profiling_core.present import md_text

DIAG = DATA / "h200_diag"


def seed_h200_run(runs_dir, name: str) -> str:
    """An H200 run of tests/data/h200_diag in the store as the runner would have left it: its trace, and meta.json
    with its config and device (import_trace, then the run's recorded config and device written in)."""
    rid = import_trace(runs_dir, DIAG / f"{name}.json", name)
    meta_path = runs_dir / rid / "meta.json"
    meta = json.loads(meta_path.read_text())
    recorded = json.loads((DIAG / f"{name}.meta.json").read_text())
    meta.update(config=recorded["config"], device=recorded["device"], source="experiment")
    meta_path.write_text(json.dumps(meta))
    return rid


def save_h200_peaks(runs_dir):
    from profiling_core.store import DevicePeaks, PeakBook
    p = DevicePeaks.from_dict(json.loads((DIAG / "peaks.json").read_text()))
    PeakBook(runs_dir).save(p)
    return p


def _texts(at) -> str:
    """The page's Markdown and captions; names and statements in them are escaped (md_text), so a test looks for
    md_text(what it expects)."""
    return " ".join([m.value for m in at.markdown] + [c.value for c in at.caption])


def test_profile_says_what_to_change_against_the_measured_peak(runs_dir):
    p = save_h200_peaks(runs_dir)
    seed_h200_run(runs_dir, "bf16_4095")
    at = app("profile")
    assert not errors_of(at)
    text = _texts(at)
    for needle in ("GEMM dimensions not multiples of 8", "K and N are not multiples of 8",
                   "19% of its compute roof, measured", "torch._inductor.config.shape_padding", "2026-12-01"):
        assert md_text(needle) in text, needle
    roof = next(d.value for d in at.dataframe if "fraction_of_peak" in d.value.columns)
    gemm = roof[roof["kind"] == "gemm"].iloc[0]
    assert gemm["peak"] == p.gemm_tflops["bf16"] and 0.18 < gemm["fraction_of_peak"] < 0.2


def test_profile_without_a_calibration_judges_by_the_datasheet_and_says_so(runs_dir):
    seed_h200_run(runs_dir, "fp32_tf32_off")  # its trace names the NVIDIA H200: a GPU the datasheets know
    at = app("profile")
    assert not errors_of(at)
    text = _texts(at)
    assert md_text("No calibration of NVIDIA H200 in the store: fractions are of the vendor's datasheet") in text
    assert md_text("fp32 GEMM without TF32") in text and md_text("of the datasheet fp32 peak") in text


def test_an_aligned_run_gets_no_rule(runs_dir):
    save_h200_peaks(runs_dir)
    seed_h200_run(runs_dir, "bf16_4096")
    at = app("profile")
    assert not errors_of(at)
    assert any("None of the rules applies" in s.value for s in at.success)


def test_home_shows_the_measured_peaks_beside_the_datasheet(runs_dir):
    p = save_h200_peaks(runs_dir)
    (runs_dir / ".calibrations" / "broken.json").write_text("{")
    at = app()
    assert not errors_of(at)
    table = next(d.value for d in at.dataframe if "datasheet" in d.value.columns)
    bf16 = table[table["what"].str.startswith("GEMM bf16")].iloc[0]
    assert bf16["measured best"] == p.gemm_tflops["bf16"] and bf16["datasheet"] == 989.4
    mem = table[table["unit"] == "GB/s"].iloc[0]
    assert mem["measured best"] == p.bandwidth_gbs and mem["datasheet"] == 4800.0
    assert any(md_text("broken.json") in w.value for w in at.warning)  # listed, not raised


@pytest.mark.slow
def test_home_calibrates_this_cpu_in_a_worker(runs_dir):
    at = app()
    at.selectbox(key="calibrate_device").set_value("cpu").run()
    at.button(key="calibrate_go").click().run(timeout=180)
    assert not errors_of(at)
    from profiling_core.store import PeakBook
    (p,) = PeakBook(runs_dir).all()[0]
    assert p.kind == "cpu"
    table = next(d.value for d in at.dataframe if "datasheet" in d.value.columns)
    assert set(table["what"].str.split(" ").str[1]) >= {"fp32", "bf16", "fp16"}


def test_the_sweep_page_shows_each_gemm_against_the_peak(runs_dir):
    p = save_h200_peaks(runs_dir)
    for name in ("bf16_4096", "bf16_4100", "bf16_4095"):
        seed_h200_run(runs_dir, name)
    at = app("overhead")
    assert not errors_of(at)
    table = next(d.value for d in at.dataframe if "fraction_of_peak" in d.value.columns)
    by_size = table.set_index("size")
    assert list(by_size.loc[[4096, 4100, 4095], "peak"]) == [p.gemm_tflops["bf16"]] * 3
    assert by_size.loc[4096, "fraction_of_peak"] > 0.95 > 0.3 > by_size.loc[4100, "fraction_of_peak"] \
        > by_size.loc[4095, "fraction_of_peak"] > 0.15
    (spec,) = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart") if "with the device's peak" in c.proto.spec]
    assert set(table["peak_source"]) == {"measured"}  # a calibration of this device: the rule says measured
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["line", "rule", "text"]  # the points, the peak


def test_the_compile_page_shows_eager_and_compiled_gemms_against_the_peak(runs_dir):
    save_h200_peaks(runs_dir)
    seed_h200_run(runs_dir, "fp32_tf32_off")
    seed_h200_run(runs_dir, "fp32_tf32_off_compile")
    at = app("compile_vs_eager")
    assert not errors_of(at)
    table = next(d.value for d in at.dataframe if "fraction_of_peak" in d.value.columns)
    assert sorted(table["mode"]) == ["default", "eager"] and set(table["dtype"]) == {"fp32"}
    assert table["fraction_of_peak"].between(0.95, 1.05).all()  # full-fp32 FFMA, at the fp32 peak


def test_the_profile_report_says_what_the_page_says(runs_dir, media):
    """The page's headline figures, what its fractions of peak are of, and every rule's cost are in the report (it
    left out all three)."""
    from conftest_app import download
    seed_h200_run(runs_dir, "bf16_4095")
    at = app("profile")
    assert not errors_of(at)
    report = download(at, media, "report_profile").decode()
    metrics = {m.label: m.value for m in at.metric}
    assert f"Profiled steps: {metrics['Profiled steps']}." in report
    import html
    assert html.escape(f"CPU per step (median over the steady state's steps): {metrics['CPU per step (median)']}") \
        in report
    assert f"Bound, steady state: {metrics['Bound, steady state']}" in report
    costs = [c.value for c in at.caption if c.value.startswith("Cost")]
    assert costs and all(c.replace("\\", "") in report for c in costs)
    assert "No calibration of NVIDIA H200 in the store" in report


def test_the_roofline_chart_is_drawn_from_the_table_and_hashed_as_it_is(runs_dir):
    """The roofline chart's points are the rows of the table above it, and its data is hashed for the chart cache
    as it is: a GEMM with recorded strides has a ``leading_dims`` column of lists in the diagnosis, which Streamlit's
    hash of a DataFrame cannot read, so it logged a warning and pickled the frame on every rerun."""
    import logging
    warned = []

    class Catch(logging.Handler):
        def emit(self, record):
            warned.append(record.getMessage())

    seed_h200_run(runs_dir, "bf16_4095")
    log = logging.getLogger("streamlit.runtime.caching.hashing")
    handler = Catch(level=logging.WARNING)
    log.addHandler(handler)
    try:
        at = app("profile")
    finally:
        log.removeHandler(handler)
    assert not errors_of(at)
    assert not [w for w in warned if "hashing method failed" in w], warned
    table = next(d.value for d in at.dataframe if "fraction_of_peak" in d.value.columns)
    roof = next(s for s in chart_specs(at) if "Roofline" in json.dumps(s.get("title", "")))
    points = [v for d in roof["datasets"].values() for v in d if "label" in v]
    want = table[(table["intensity"] > 0) & (table["tflops"] > 0)]
    assert sorted(p["label"] for p in points) == sorted(want["kernel"].astype(str).str.slice(0, 80))
