"""AppTest: Runs (history, open, compare, delete)."""
from __future__ import annotations

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
