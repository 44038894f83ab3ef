"""AppTest: the Profile form's workload selector, its knobs drawn from the registry, and a real run of one."""
from __future__ import annotations

import pytest

from conftest_app import app, errors_of, runs_dir  # noqa: F401
from profiling_core import md_text, workload_names


def test_the_form_defaults_to_the_studys_workload_with_its_own_knobs(runs_dir):
    at = app("profile")
    sel = at.selectbox(key="profile_form_workload")
    assert sel.options == workload_names() and sel.value == "matmul_add"
    assert at.select_slider(key="profile_form_size").value == 64  # the study's form, as before
    assert at.number_input(key="profile_form_batch").value == 0
    assert at.selectbox(key="profile_form_bias").value == "matrix"


def test_choosing_a_workload_shows_its_knobs(runs_dir):
    at = app("profile")
    at.selectbox(key="profile_form_workload").set_value("attention").run()
    assert not errors_of(at)
    assert at.number_input(key="profile_form_attention_seq_len").value == 256
    assert at.checkbox(key="profile_form_attention_causal").value is True
    assert at.selectbox(key="profile_form_attention_backend").options == ["auto", "flash", "efficient", "math",
                                                                          "cudnn"]
    assert not [w for w in at.select_slider if w.key == "profile_form_size"]  # matmul_add's size is not shown
    at.selectbox(key="profile_form_workload").set_value("script").run()
    assert at.text_input(key="profile_form_script_function").value == "make_step"
    assert any("make_step(device, dtype)" in c.value for c in at.caption)  # the contract, stated


def test_a_bad_knob_is_refused_in_the_form_and_nothing_runs(runs_dir):
    at = app("profile")
    at.selectbox(key="profile_form_workload").set_value("transformer_block").run()
    at.number_input(key="profile_form_transformer_block_heads").set_value(7)
    [btn] = [b for b in at.button if b.label == "Run profile"]
    btn.click().run()
    assert [e.value for e in at.error] == [md_text("knobs.heads must be a divisor of d_model 512, got 7")]
    assert not runs_dir.exists() or not [p for p in runs_dir.iterdir() if not p.name.startswith(".")]


def test_a_typed_script_path_is_shown_literally_in_the_error(runs_dir):
    at = app("profile")
    at.selectbox(key="profile_form_workload").set_value("script").run()
    at.text_input(key="profile_form_script_path").set_value("my_*model*.txt")
    [btn] = [b for b in at.button if b.label == "Run profile"]
    btn.click().run()
    assert [e.value for e in at.error] == [md_text("knobs.path must be a path to a .py file, got 'my_*model*.txt'")]


@pytest.mark.slow
def test_an_mlp_profiled_from_the_form_is_shown(runs_dir):
    at = app("profile")
    at.selectbox(key="profile_form_workload").set_value("mlp").run()
    at.number_input(key="profile_form_mlp_batch").set_value(4)
    at.number_input(key="profile_form_mlp_d").set_value(16)
    at.selectbox(key="profile_form_dtype").set_value("fp32")
    at.selectbox(key="profile_form_device").set_value("cpu")
    at.slider(key="profile_form_wait").set_value(0)
    at.slider(key="profile_form_wsteps").set_value(0)
    at.slider(key="profile_form_active").set_value(2)
    [btn] = [b for b in at.button if b.label == "Run profile"]
    btn.click().run()
    assert not errors_of(at), errors_of(at)
    assert at.subheader[0].value == r"mlp\_b4\_d16\_r4\_fp32\_cold\_eager"
    assert any("Self CPU time total" in c.value for c in at.code)
