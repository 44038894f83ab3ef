"""AppTest: Kernel variance profiles many steps and shows each kernel's distribution."""
from __future__ import annotations

import pytest

from conftest_app import app, download, errors_of, import_trace, H200, media, runs_dir  # noqa: F401
from test_app_profile import fill_profile_form, submit


@pytest.mark.slow
def test_variance_end_to_end_on_cpu(runs_dir, media):
    at = app("variance")
    assert not errors_of(at)
    assert at.slider(key="variance_form_active").value == 20  # the page's default
    fill_profile_form(at, prefix="variance_form", active=4)
    submit(at, "Run 20-step profile")
    assert not errors_of(at), errors_of(at)
    assert any("no GPU kernels" in i.value for i in at.info)
    csv = download(at, media, "csv_variance_steps").decode()
    assert csv.startswith("step,kernel,dur_us") and "aten::mm" in csv
    assert download(at, media, "png_variance_spread")[:4] == b"\x89PNG"
    assert download(at, media, "svg_variance_steps").lstrip().startswith(b"<svg")


def test_variance_compares_two_gpu_runs(runs_dir):
    a = import_trace(runs_dir, H200 / "4096_bf16_warm_eager_a20.json", "4096_bf16_warm_eager_a20")
    b = import_trace(runs_dir, H200 / "4096_bf16_warm_eager.json", "4096_bf16_warm_eager")
    at = app("variance")
    at.selectbox(key="variance_run").set_value(a)
    at.selectbox(key="variance_other").set_value(b).run()
    assert not errors_of(at)
    stats = at.dataframe[0].value
    gemm = stats[stats["kernel"].str.startswith("nvjet")].iloc[0]
    assert gemm["count"] == 20 and gemm["min_us"] <= gemm["median_us"] <= gemm["max_us"]
