"""AppTest: Runs (history, open, compare, delete)."""
from __future__ import annotations

import pytest

from profiling_core.present import md_text

from conftest_app import app, download, errors_of, import_trace, DATA, H200


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


def _compared(runs_dir, a: tuple, b: tuple):
    """The Runs page comparing two H200 traces, each (file stem, run name) imported as a run: A and B set, run."""
    first, second = (import_trace(runs_dir, H200 / f"{stem}.json", name) for stem, name in (a, b))
    at = app("runs")
    at.selectbox(key="runs_a").set_value(first)
    at.selectbox(key="runs_b").set_value(second).run()
    assert not errors_of(at), errors_of(at)
    return at


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
    from profiling_core.analyses import category_totals, step_breakdown, steps
    at = _compared(runs_dir, ("4096_bf16_warm_eager", "eager"), ("4096_bf16_warm_compile", "compile"))
    assert "Where the GPU time goes" in [h.value for h in at.subheader]
    tables = [d.value for d in at.dataframe if list(d.value.columns) == ["category", "per_step_us", "share",
                                                                          "overlapped_us"]]
    assert len(tables) == 2
    for shown, name in zip(tables, ("4096_bf16_warm_eager", "4096_bf16_warm_compile")):
        with open_trace(H200 / f"{name}.json", engine="sqlite") as s:
            want = category_totals(step_breakdown(s), steps(s))
        assert shown["category"].tolist() == want["category"].tolist()  # same rows, same order in both
        assert shown["per_step_us"].tolist() == pytest.approx(want["per_step_us"].tolist())
    memcpy = [t.set_index("category").loc["memcpy", "per_step_us"] for t in tables]
    assert memcpy[0] == 0 and memcpy[1] > 10  # compile copies the bias (DtoD) before its addmm; eager does not
    csv = download(at, media, "csv_runs_breakdown").decode()
    assert csv.startswith("bar,category,time_us,share,overlapped_us,per_step_us")


def test_two_cpu_runs_get_no_gpu_section(seed_run, runs_dir):
    from conftest_app import DATA
    other = import_trace(runs_dir, DATA / "cpu" / "64_fp32_warm_eager.json", "cpu_import")
    at = app("runs")
    at.selectbox(key="runs_a").set_value(seed_run)
    at.selectbox(key="runs_b").set_value(other).run()
    assert not errors_of(at)
    subheaders = [h.value for h in at.subheader]
    assert "Where the GPU time goes" not in subheaders and "Kernels" not in subheaders
    assert "CPU ops" in subheaders


def test_kernels_that_share_a_long_prefix_stay_two_bars(runs_dir, media, tmp_path):
    import csv
    import io
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    import verdict_traces as vt
    prefix = "void split_embedding_backward_codegen_sgd_unweighted_exact_kernel_cta_per_row_"  # 78 characters
    t = vt.Trace()
    for n in range(3):
        t.step(n + 1, lambda t: (t.launch(prefix + "1<float>(...)", 10.0), t.launch(prefix + "2<float>(...)", 30.0)))
    a = import_trace(runs_dir, t.write(tmp_path / "a.json"), "a")
    b = import_trace(runs_dir, t.write(tmp_path / "b.json"), "b")
    at = app("runs")
    at.selectbox(key="runs_a").set_value(a)
    at.selectbox(key="runs_b").set_value(b).run()
    assert not errors_of(at)
    rows = list(csv.DictReader(io.StringIO(download(at, media, "csv_runs_kernels").decode())))
    assert {r["kernel"] for r in rows} == {prefix + "1<float>(...)", prefix + "2<float>(...)"}
    assert sorted(float(r["median_us"]) for r in rows) == [10.0, 10.0, 30.0, 30.0]


def test_a_run_from_a_busy_machine_is_named_where_it_is_compared(seed_run, runs_dir, media):
    import json
    other = import_trace(runs_dir, H200 / "64_bf16_cold_eager.json", "64_bf16_cold_eager")
    meta = runs_dir / seed_run / "meta.json"
    m = json.loads(meta.read_text())
    m["machine_load"] = {"cores": 2, "load_1min_before": 7.5, "load_1min_after": 8.0}
    meta.write_text(json.dumps(m))
    at = app("runs")
    at.selectbox(key="runs_a").set_value(seed_run)
    at.selectbox(key="runs_b").set_value(other).run()
    assert not errors_of(at)
    (w,) = [w.value for w in at.warning if "busy" in w.value]
    assert md_text("1-minute load average 7.5 on 2 cores") in w
    assert "1-minute load average 7.5 on 2 cores" in download(at, media, "report_runs").decode()


@pytest.fixture(scope="module")
def forward_and_train_runs(tmp_path_factory):
    """Two real CPU runs of one small MLP: a forward pass, and a training step (forward, backward, AdamW)."""
    from profiling_core import ExperimentConfig, RunStore, run_experiment
    root = tmp_path_factory.mktemp("fwd_train") / "runs"
    store = RunStore(root)
    fast = {"dtype": "fp32", "device": "cpu", "wait": 0, "warmup_steps": 0, "active": 3, "warmup": 1}
    fwd = run_experiment(ExperimentConfig(workload="mlp", knobs={"batch": 4, "d": 16}, **fast), store=store)
    train = run_experiment(ExperimentConfig(workload="mlp", knobs={"batch": 4, "d": 16, "train": True}, **fast),
                           store=store)
    return root, fwd.run_id, train.run_id


@pytest.mark.slow
def test_comparing_a_forward_run_with_a_training_run_says_they_run_different_work(forward_and_train_runs,
                                                                                   monkeypatch, media):
    root, fwd, train = forward_and_train_runs
    monkeypatch.setenv("PROFILING_RUNS_DIR", str(root))
    at = app("runs")
    at.selectbox(key="runs_a").set_value(fwd)
    at.selectbox(key="runs_b").set_value(train).run()
    assert not errors_of(at), errors_of(at)
    said = [w.value for w in at.warning if "forward" in w.value]
    assert len(said) == 1
    assert md_text("A runs a forward pass per step and B a training step (forward, loss, backward, optimizer step, "
                   "zero_grad)") in said[0]
    assert "different work" in said[0]
    (summary,) = [d.value for d in at.dataframe if "cpu_us_per_step" in d.value.columns]
    assert summary["step"].tolist() == ["forward", "train"]
    assert "Training phases" in [h.value for h in at.subheader]
    (phases,) = [d.value for d in at.dataframe if "phase" in d.value.columns]
    assert phases["phase"].tolist() == ["forward", "backward", "optimizer", "zero_grad", "other"]
    assert (phases["cpu_us"] > 0).sum() >= 4 and phases["run"].nunique() == 1  # only B has phases
    assert any("no training phases" in c.value for c in at.caption)  # A's, said
    report = download(at, media, "report_runs").decode()
    assert "different work" in report and "Training phases" in report
    at.selectbox(key="runs_b").set_value(fwd).run()  # the same kind of step on both sides: nothing to say
    assert not [w.value for w in at.warning if "different work" in w.value]


def test_comparing_runs_of_different_settings_says_which_parts_differ(runs_dir):
    """Two H200 runs of the study, 4096² warm and 64² cold: the page set their kernels' medians side by side (the
    same name at another size is another amount of work) and said nothing; it now names the parts that differ, as
    the Kernel variance page does (``setting_parts``). Two imports of one setting get no such note."""
    again = import_trace(runs_dir, H200 / "4096_bf16_warm_eager.json", "4096_bf16_warm_eager again")
    at = _compared(runs_dir, ("4096_bf16_warm_eager", "4096_bf16_warm_eager"), ("64_bf16_cold_eager",
                                                                                   "64_bf16_cold_eager"))
    [note] = [c.value for c in at.caption if c.value.startswith("A and B measured different settings")]
    assert "size 4096" in note and "size 64" in note, note
    at.selectbox(key="runs_b").set_value(again).run()
    assert not errors_of(at)
    assert not [c.value for c in at.caption if c.value.startswith("A and B measured different settings")]


def test_a_run_whose_trace_is_lost_can_still_be_deleted_here(runs_dir):
    """The store's only run lost its trace: Compare two runs (A and B that run) stopped the page at its error box,
    which says "delete it on the Runs page", before the page's import and delete forms were drawn. The forms now
    follow the error box, and deleting the run works."""
    rid = import_trace(runs_dir, H200 / "4096_bf16_warm_eager.json", "lost")
    (runs_dir / rid / "trace.json").unlink()
    at = app("runs")
    assert not at.exception, [e.value for e in at.exception]
    assert len([e for e in at.error if "Cannot read the trace of run" in e.value]) == 1
    headers = [h.value for h in at.header]
    assert headers[-3:] == ["Compare two runs", "Import another machine's runs", "Delete a run"]
    at.selectbox(key="runs_delete").set_value(rid)
    at.checkbox(key="runs_delete_sure").check()
    [go] = [b for b in at.button if b.label == "Delete"]
    go.click().run()
    assert not at.exception and not (runs_dir / rid).exists()
    at = app("runs")
    assert not errors_of(at), errors_of(at)
    assert any(i.value.startswith("No runs yet") for i in at.info)


def test_a_cpu_run_beside_a_gpu_run_is_not_said_to_have_no_steps(runs_dir):
    """A CPU run (3 ProfilerStep slices, no GPU lane: a plain scan) compared with an H200 run: under "Where the GPU
    time goes" its column said "No ProfilerStep slices in this trace"."""
    from conftest import scan_trace
    cpu = DATA / "cpu" / "64_fp32_warm_eager.json"
    xs = [e for e in scan_trace(cpu) if e.get("ph") == "X"]
    assert sum(1 for e in xs if str(e["name"]).startswith("ProfilerStep#")) == 3
    assert not any(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in xs)
    first = import_trace(runs_dir, cpu, "cpu")
    second = import_trace(runs_dir, H200 / "4096_bf16_warm_eager.json", "gpu")
    at = app("runs")
    at.selectbox(key="runs_a").set_value(first)
    at.selectbox(key="runs_b").set_value(second).run()
    assert not errors_of(at), errors_of(at)
    captions = [c.value for c in at.caption]
    assert "No GPU work in this trace: it ran on the CPU." in captions
    assert "No ProfilerStep slices in this trace." not in captions
