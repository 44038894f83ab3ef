"""AppTest: Runs (history, open, compare, delete)."""
from __future__ import annotations

import pytest

from conftest_app import app, download, errors_of, import_trace, H200, media, runs_dir, seed_run  # noqa: F401


def test_runs_compare_and_delete(seed_run, runs_dir, media):
    other = import_trace(runs_dir, H200 / "64_bf16_cold_eager.json", "64_bf16_cold_eager")
    at = app("runs")
    assert not errors_of(at)
    assert set(at.dataframe[0].value["run_id"]) == {seed_run, other}
    at.selectbox(key="runs_a").set_value(seed_run)
    at.selectbox(key="runs_b").set_value(other).run()
    assert not errors_of(at)
    assert download(at, media, "png_runs_steps")[:4] == b"\x89PNG"
    assert download(at, media, "csv_runs_kernels").startswith(b"name,")
    at.selectbox(key="runs_delete").set_value(other)
    at.checkbox(key="runs_delete_sure").check()
    [go] = [b for b in at.button if b.label == "Delete"]
    go.click().run()
    assert not errors_of(at)
    assert not (runs_dir / other).exists() and (runs_dir / seed_run).exists()


def test_open_switches_to_profile(seed_run):
    at = app("runs")
    [go] = [b for b in at.button if b.label == "Open on the Profile page"]
    go.click().run()
    assert not errors_of(at)
    assert at.title[0].value == "Profile"
    assert at.session_state["current_run_id"] == seed_run


def test_runs_compare_breakdowns_side_by_side(runs_dir, media):
    """Both runs' GPU time by category, in the same category order, next to each other."""
    from profiling_core import open_trace
    from profiling_core.analyses import category_totals, step_breakdown
    eager = import_trace(runs_dir, H200 / "4096_bf16_warm_eager.json", "eager")
    comp = import_trace(runs_dir, H200 / "4096_bf16_warm_compile.json", "compile")
    at = app("runs")
    at.selectbox(key="runs_a").set_value(eager)
    at.selectbox(key="runs_b").set_value(comp).run()
    assert not errors_of(at)
    assert "Where the GPU time goes" in [h.value for h in at.subheader]
    tables = [d.value for d in at.dataframe if list(d.value.columns) == ["category", "per_step_us", "share",
                                                                          "overlapped_us"]]
    assert len(tables) == 2
    for shown, name in zip(tables, ("4096_bf16_warm_eager", "4096_bf16_warm_compile")):
        with open_trace(H200 / f"{name}.json", engine="sqlite") as s:
            want = category_totals(step_breakdown(s))
        assert shown["category"].tolist() == want["category"].tolist()  # same rows, same order in both
        assert shown["per_step_us"].tolist() == pytest.approx(want["per_step_us"].tolist())
    memcpy = [t.set_index("category").loc["memcpy", "per_step_us"] for t in tables]
    assert memcpy[0] == 0 and memcpy[1] > 10  # compile copies the bias (DtoD) before its addmm; eager does not
    csv = download(at, media, "csv_runs_breakdown").decode()
    assert csv.startswith("bar,category,time_us,share,overlapped_us,per_step_us")
