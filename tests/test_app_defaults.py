"""AppTest: the same defaults and words on every page (issue 11, item 7)."""
from __future__ import annotations

import pytest

from conftest_app import app, errors_of

DTYPE_KEYS = {"profile": "profile_form_dtype", "variance": "variance_form_dtype", "overhead": "sweep_dtype",
              "compile_vs_eager": "compile_dtype", "dispatch": "cw_dtype"}


@pytest.mark.parametrize("page", sorted(DTYPE_KEYS))
def test_dtype_defaults_to_fp32_on_a_cpu_machine_with_the_reason(runs_dir, page):
    from pages import _ui as ui
    at = app(page)
    assert not errors_of(at)
    box = at.selectbox(key=DTYPE_KEYS[page])
    assert box.value == "fp32"  # this machine has no GPU (CI neither)
    assert "bf16 on a GPU" in box.help and "fp32 on a CPU" in box.help
    if page != "dispatch":  # (its cold/warm pair sets the warm-up itself)
        calls = [n for n in at.number_input if n.label == ui.WARMUP_CALLS_LABEL]
        assert calls, "the warm-up calls control is named the same on every page that has one"


def test_the_two_warm_ups_are_told_apart(runs_dir):
    from pages import _ui as ui
    at = app("profile")
    sched = at.slider(key="profile_form_wsteps")
    calls = at.number_input(key="profile_form_warmup")
    assert sched.label == ui.SCHEDULE_WARMUP_LABEL and "not the warm-up calls" in sched.help
    assert calls.label == ui.WARMUP_CALLS_LABEL and "not the schedule's warm-up steps" in calls.help


@pytest.mark.slow
def test_cold_vs_warm_defaults_compare_like_with_like(runs_dir):
    from profiling_core import ExperimentConfig, RunStore, run_experiment
    store = RunStore(runs_dir)
    base = dict(dtype="fp32", device="cpu", wait=0, warmup_steps=0, active=1)
    run_experiment(ExperimentConfig(size=32, warmup=2, **base), store=store)      # warm, size 32
    cold = run_experiment(ExperimentConfig(size=32, **base), store=store)        # cold, size 32
    run_experiment(ExperimentConfig(size=48, warmup=2, **base), store=store)      # warm, size 48: the newest warm
    at = app("dispatch")
    assert not errors_of(at)
    assert at.selectbox(key="cw_cold").value == cold.run_id
    warm = at.selectbox(key="cw_warm").value
    assert store.load(warm).config.size == 32  # not the newer 48² warm run
