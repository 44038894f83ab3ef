"""AppTest: the Profile form's workload selector, its knobs drawn from the registry, and a real run of one."""
from __future__ import annotations

import pytest

from conftest_app import app, errors_of
from profiling_core.present import md_text
from profiling_core.workloads import workload_names


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


def test_the_causal_lm_form_offers_its_knobs_and_an_empty_optional_knob_means_none(runs_dir):
    from profiling_core.workloads import get_workload
    at = app("profile")
    at.selectbox(key="profile_form_workload").set_value("causal_lm").run()
    assert not errors_of(at)
    keys = {w.key for kind in (at.selectbox, at.number_input, at.checkbox) for w in kind if w.key}
    assert {f"profile_form_causal_lm_{k.name}" for k in get_workload("causal_lm").knobs} <= keys
    assert at.selectbox(key="profile_form_causal_lm_family").options == ["llama", "gpt2"]
    assert at.selectbox(key="profile_form_causal_lm_mode").options == ["prefill", "decode", "train"]
    assert at.selectbox(key="profile_form_causal_lm_cache").options == ["dynamic", "static"]
    assert at.number_input(key="profile_form_causal_lm_kv_heads").value is None  # empty: as many as heads
    at.number_input(key="profile_form_causal_lm_kv_heads").set_value(3)
    [btn] = [b for b in at.button if b.label == "Run profile"]
    btn.click().run()
    assert [e.value for e in at.error] == [md_text("knobs.kv_heads must be a divisor of heads 8, got 3")]
    assert not runs_dir.exists() or not [p for p in runs_dir.iterdir() if not p.name.startswith(".")]


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


@pytest.fixture(scope="module")
def every_workload_store(tmp_path_factory):
    """One real CPU run of each workload (small), in one store shared by the page tests below."""
    from test_workloads import FAST, SMALL

    from profiling_core import ExperimentConfig, RunStore, run_experiment
    root = tmp_path_factory.mktemp("workloads") / "runs"
    store = RunStore(root)
    ids = {w: run_experiment(ExperimentConfig(workload=w, knobs=k, warmup=1, **FAST), store=store).run_id
           for w, (k, _ops) in SMALL.items()}
    return root, ids


@pytest.mark.slow
@pytest.mark.parametrize("page", [None, "profile", "overhead", "variance", "compile_vs_eager", "dispatch", "runs",
                                  "trace_lab"])
def test_every_page_works_with_runs_of_every_workload(every_workload_store, monkeypatch, page):
    root, ids = every_workload_store
    monkeypatch.setenv("PROFILING_RUNS_DIR", str(root))
    at = app(page)
    assert not errors_of(at), errors_of(at)
    if page == "profile":  # the newest run is on show; make each the current run in turn
        from pages._ui import CURRENT_RUN
        for w, rid in ids.items():
            at.session_state[CURRENT_RUN] = rid
            at.run()
            assert not errors_of(at), (w, errors_of(at))
            summary = " ".join(m.value for m in at.markdown)
            assert md_text(w) in summary, w


@pytest.mark.slow
def test_the_sweep_axis_of_each_workload_is_its_size_knob(every_workload_store, monkeypatch):
    """The Overhead page places each run at its workload's size knob (batch, seq_len, ...); a script has none."""
    root, ids = every_workload_store
    monkeypatch.setenv("PROFILING_RUNS_DIR", str(root))
    from profiling_core import RunStore
    want = set()
    for rid in ids.values():
        cfg = RunStore(root).load(rid).config
        if cfg.size_knob:
            want.add(cfg.workload_knobs[cfg.size_knob])
    at = app("overhead")
    assert not errors_of(at)
    table = next(d.value for d in at.dataframe if "cpu_us_per_step" in d.value.columns)
    assert set(table["size"]) == want


def test_the_train_knobs_show_where_they_apply_in_the_form(runs_dir):
    """causal_lm's train knobs are the nn workloads' own, labelled with the mode they need; module_ranges applies
    to every mode; a workload that cannot train shows none."""
    at = app("profile")
    at.selectbox(key="profile_form_workload").set_value("causal_lm").run()
    assert not errors_of(at)
    labels = {w.key.removeprefix("profile_form_causal_lm_"): w.label for kind in (at.selectbox, at.checkbox)
              for w in kind if w.key and w.key.startswith("profile_form_causal_lm_")}
    assert {k: labels[k] for k in ("optimizer", "impl", "autocast", "log_loss")} == {
        "optimizer": "optimizer (mode train only)", "impl": "impl (mode train only)",
        "autocast": "autocast (mode train only)", "log_loss": "log_loss (mode train only)"}
    assert labels["module_ranges"] == "module_ranges" and "train" not in labels
    assert at.checkbox(key="profile_form_causal_lm_module_ranges").value is True
    assert "record_function range per module" in at.checkbox(key="profile_form_causal_lm_module_ranges").help
    assert at.selectbox(key="profile_form_causal_lm_optimizer").options == ["sgd", "adam", "adamw"]
    at.selectbox(key="profile_form_workload").set_value("mlp").run()
    assert at.selectbox(key="profile_form_mlp_optimizer").label == "optimizer (train True only)"
    at.selectbox(key="profile_form_workload").set_value("attention").run()
    assert not [w for w in at.selectbox if w.key and w.key.endswith(("_optimizer", "_impl", "_autocast"))]
