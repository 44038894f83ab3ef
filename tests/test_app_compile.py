"""AppTest: Compile vs eager runs through its form and compares compiled traces."""
from __future__ import annotations

import pytest

from conftest_app import app, download, errors_of, import_trace, H200
from profiling_core.present import md_text


@pytest.mark.slow
def test_compile_page_runs_eager_and_compiled_through_its_form(runs_dir, media):
    at = app("compile_vs_eager")
    assert not errors_of(at)
    at.multiselect(key="compile_modes").set_value(["default"])
    at.selectbox(key="compile_dtype").set_value("fp32")
    at.selectbox(key="compile_device").set_value("cpu")
    at.slider(key="compile_active").set_value(2)
    assert at.number_input(key="compile_reps").value == 3  # three runs of each mode on a CPU by default
    at.number_input(key="compile_reps").set_value(2)
    [go] = [b for b in at.button if b.label == "Run eager + compiled"]
    go.click().run()
    assert not errors_of(at), errors_of(at)
    assert any("Done: 4 run(s)" in s.value for s in at.success)
    import csv as _csv
    import io
    cpu_rows = list(_csv.DictReader(io.StringIO(download(at, media, "csv_compile_cpu").decode())))
    assert [r["run"] for r in cpu_rows] == ["eager (median of 2)", "default (median of 2)"]
    for r in cpu_rows:
        assert float(r["lo"]) <= float(r["cpu_us"]) <= float(r["hi"])
    delta = [d.value for d in at.dataframe if "metric" in d.value.columns][0].set_index("metric")
    compiled = [c for c in delta.columns if c.startswith("default") and not c.startswith("Δ")][0]
    assert delta.loc["compiled region (µs)", "eager"] == 0
    assert delta.loc["compiled region (µs)", compiled] > 0  # Torch-Compiled Region rows, on the CPU too
    payoff = [d.value for d in at.dataframe if "pays off after" in d.value.columns][0]
    assert len(payoff) == 1 and payoff["one-time compile (s)"].iloc[0] > 0.1  # Inductor compiled in the warm-up
    assert payoff["compiled from"].iloc[0] == "an empty cache"  # the page's runs never share a compile cache
    after = payoff["pays off after"].iloc[0]
    # the two runs of each mode: within 20% of each other a verdict, else "unclear" with the warning that says why
    spread = [float(r["hi"]) - float(r["lo"]) > 0.2 * float(r["cpu_us"]) for r in cpu_rows]
    warned = any(md_text("spread by more than 20%") in w.value for w in at.warning)
    if any(spread):
        assert after.startswith("unclear: the runs of") and warned
    else:
        assert (after.endswith(" steps") or after.startswith("never")) and not warned
    assert download(at, media, "png_compile_cpu")[:4] == b"\x89PNG"
    assert download(at, media, "csv_compile_delta").startswith(b"metric,")
    assert b"<svg" in download(at, media, "report_compile")


def test_compile_vs_eager_on_h200_traces(runs_dir, media):
    eager = import_trace(runs_dir, H200 / "4096_bf16_warm_eager.json", "4096_bf16_warm_eager")
    comp = import_trace(runs_dir, H200 / "4096_bf16_warm_compile.json", "4096_bf16_warm_compile")
    ro = import_trace(runs_dir, H200 / "64_bf16_warm_compile_ro.json", "64_bf16_warm_compile_ro")
    at = app("compile_vs_eager")
    at.multiselect(key="compile_chosen").set_value([eager, comp, ro]).run()
    assert not errors_of(at)
    delta = at.dataframe[-1].value if "metric" in at.dataframe[-1].value else at.dataframe[0].value
    tables = [d.value for d in at.dataframe if "metric" in d.value.columns]
    delta = tables[0].set_index("metric")
    assert delta.loc["launches per step", "eager"] >= 2
    compiled_cols = [c for c in delta.columns if c.startswith("compile") and not c.startswith("Δ")]
    assert any(delta.loc["memcpy DtoD per step", c] >= 1 for c in compiled_cols)
    assert any(delta.loc["cudaGraphLaunch per step", c] >= 1 for c in compiled_cols)
    assert download(at, media, "svg_compile_region").lstrip().startswith(b"<svg")
