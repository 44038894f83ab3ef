"""AppTest: Overhead vs compute sweeps sizes through its own form and charts them."""
from __future__ import annotations

import pytest

from conftest_app import DATA, app, download, errors_of, import_trace, H200


def test_overhead_renders_without_runs(runs_dir):
    at = app("overhead")
    assert not errors_of(at)
    assert any("No runs to chart" in i.value for i in at.info)


@pytest.mark.slow
def test_overhead_sweep_end_to_end(runs_dir, media):
    at = app("overhead")
    at.multiselect(key="sweep_sizes").set_value([64, 128])
    at.multiselect(key="sweep_modes").set_value(["off"])
    at.selectbox(key="sweep_dtype").set_value("fp32")
    at.selectbox(key="sweep_device").set_value("cpu")
    at.slider(key="sweep_active").set_value(2)
    assert at.number_input(key="sweep_repeats").value == 3  # on a CPU each point runs three times by default
    at.number_input(key="sweep_repeats").set_value(2)
    [go] = [b for b in at.button if b.label == "Run sweep"]
    go.click().run()
    assert not errors_of(at), errors_of(at)
    assert any("Done: 4 run(s)" in s.value for s in at.success)
    assert len(at.multiselect(key="overhead_chosen").value) == 4
    assert download(at, media, "png_overhead_main")[:4] == b"\x89PNG"
    assert "GPU busy fraction of the step" not in {h.value for h in at.header}  # a CPU run has none to draw
    import csv as _csv
    import io
    rows = list(_csv.DictReader(io.StringIO(download(at, media, "csv_overhead_main").decode())))
    assert [(r["size"], r["n"]) for r in rows] == [("64", "2"), ("128", "2")]  # a median of two runs per point
    for r in rows:
        assert float(r["cpu_us_per_step_min"]) <= float(r["cpu_us_per_step"]) <= float(r["cpu_us_per_step_max"])
    # CPU-only traces: the page says why the GPU curve is flat
    assert any("no GPU lane" in i.value for i in at.info)


def test_overhead_marks_the_crossover_on_gpu_traces(runs_dir):
    for n in ("64_bf16_cold_eager", "4096_bf16_warm_eager"):
        import_trace(runs_dir, H200 / f"{n}.json", n)
    at = app("overhead")
    assert not errors_of(at)
    # two runs measured, 64 and 4096: the crossing lies between them, and the page says the sizes between are unknown
    from profiling_core.present import md_text
    assert any(md_text("overtakes CPU time per step between n = 64 and n = 4,096") in s.value
               and md_text("the sizes between were not measured") in s.value for s in at.success), [
        s.value for s in at.success]
    assert "GPU busy fraction of the step" in {h.value for h in at.header}
    # question 2's verdicts on the two runs, beside the crossing: they agree with it here
    assert any(md_text("calls the step overhead-bound at n = 64; compute-bound at n = 4,096: it turns "
                       "compute-bound between n = 64 and n = 4,096.") in s.value for s in at.success)


def test_a_synchronizing_loop_gets_its_verdicts_where_the_curves_never_cross(runs_dir, media):
    """A loop that calls .item() every step holds its GPU work inside its CPU time: the curves never cross though
    question 2 turns compute-bound, so the page must not send the reader to "extend the sizes to find the
    crossover"; it says the verdicts, the wait that keeps the curves apart, and the report says it too."""
    from profiling_core.present import md_text
    import_trace(runs_dir, H200 / "64_bf16_cold_eager.json", "64_cold")  # (unbatched, as the .item() loop)
    import_trace(runs_dir, DATA / "h200_verdicts" / "readback_item_eager.json", "4096_item")
    at = app("overhead")
    assert not errors_of(at)
    [said] = [s.value for s in at.success]
    assert md_text("overhead-bound at n = 64; compute-bound at n = 4,096: it turns compute-bound between") in said
    assert md_text("the CPU time holds the time the CPU blocked waiting for the GPU") in said
    assert not any("extend the sizes" in c.value for c in at.caption)
    assert any("do not cross inside this sweep, though the verdict changes along it" in c.value for c in at.caption)
    assert "it turns compute-bound between n = 64 and n = 4,096" in download(at, media, "report_overhead").decode()


def test_a_cpu_sweep_gets_its_verdict_at_each_size(runs_dir, media):
    """A sweep recorded on the CPU had no verdict on this page. The study's matmul + add at n = 8, 64 and 512 on a
    2-core VM (its work ops take 22%, 40% and 96% of a step): question 2's CPU rule turns compute-bound between 64
    and 512, said under the chart and in the report, with each point's share in the table."""
    from profiling_core.present import md_text
    for n in (8, 64, 512):
        import_trace(runs_dir, DATA / "cpu" / "sweep" / f"{n}_fp32_warm_eager.json", f"{n}_cpu")
    at = app("overhead")
    assert not errors_of(at)
    assert any("no GPU lane" in i.value and "each size's verdict below the chart" in i.value for i in at.info)
    [said] = [s.value for s in at.success]
    assert md_text("Question 2's rule on a CPU (each run's work ops' own time against its step: compute-bound from "
                   "50% of the step) calls the step overhead-bound at n = 8 and n = 64; compute-bound at n = 512: it "
                   "turns compute-bound between n = 64 and n = 512.") in said
    [table] = [d.value for d in at.dataframe if "cpu_work_share" in d.value.columns]
    assert table["bound"].tolist() == ["overhead-bound", "overhead-bound", "compute-bound"]
    assert (table["cpu_work_share"] < 0.5).tolist() == [True, True, False]
    assert "it turns compute-bound between n = 64 and n = 512" in download(at, media, "report_overhead").decode()


@pytest.mark.slow
def test_a_sweep_of_another_workload_varies_its_size_knob(runs_dir):
    from profiling_core import RunStore
    at = app("overhead")
    at.selectbox(key="sweep_workload").set_value("mlp").run()
    at.text_input(key="sweep_values_mlp").set_value("8,16")
    at.number_input(key="sweep_mlp_d").set_value(64)
    at.selectbox(key="sweep_dtype").set_value("fp32")
    at.selectbox(key="sweep_device").set_value("cpu")
    at.slider(key="sweep_active").set_value(1)
    at.number_input(key="sweep_repeats").set_value(1)
    [go] = [b for b in at.button if b.label == "Run sweep"]
    go.click().run()
    assert not errors_of(at), errors_of(at)
    cfgs = [r.config for r in RunStore(runs_dir).list()]
    assert sorted((c.workload, c.workload_knobs["batch"], c.workload_knobs["d"]) for c in cfgs) == \
        [("mlp", 8, 64), ("mlp", 16, 64)]
    table = next(d.value for d in at.dataframe if "cpu_us_per_step" in d.value.columns)
    assert sorted(table["size"]) == [8, 16]  # charted along the MLP's batch


def test_a_script_has_no_size_knob_to_sweep(runs_dir):
    at = app("overhead")
    at.selectbox(key="sweep_workload").set_value("script").run()
    assert not errors_of(at)
    assert any("no size knob to sweep" in i.value for i in at.info)
    assert [b for b in at.button if b.label == "Run sweep"][0].disabled


@pytest.mark.parametrize("text,bad", [("128,2²", "2²"), ("٣", "٣"), ("64, 1e3", "1e3"), ("0", "0")])
def test_a_bad_sweep_value_is_said_under_its_box_on_every_rerun(runs_dir, text, bad):
    """``"2²".isdigit()`` is true, so the box took ``2²`` for a value and ``int()`` raised a ValueError on this and
    every later rerun; ``٣`` (an Arabic-Indic three) became a sweep of size 3."""
    from profiling_core import RunStore
    at = app("overhead")
    at.selectbox(key="sweep_workload").set_value("attention").run()
    at.text_input(key="sweep_values_attention").set_value(text)
    [go] = [b for b in at.button if b.label == "Run sweep"]
    go.click().run()
    quoted = repr(int(bad)) if bad.isascii() and bad.isdigit() else repr(bad)  # (0 is a number out of range)
    for _ in range(2):  # the click, then a plain rerun with the same text in the box
        assert not at.exception, [e.value for e in at.exception]
        shown = [e.value.replace("\\", "") for e in at.error]  # (as Markdown: its punctuation escaped)
        assert [t for t in shown if t.startswith("each value of seq_len must be an integer from 1 to 1048576")
                and t.endswith(f"got {quoted}")], shown
        at.run()
    assert RunStore(runs_dir).list() == []  # no sweep started


TINY_LM = {"layers": 1, "hidden": 32, "heads": 2, "vocab": 64}


def _lm_sweep(at, mode: str, values: str) -> None:
    at.selectbox(key="sweep_causal_lm_mode").set_value(mode)
    at.text_input(key="sweep_values_causal_lm").set_value(values)
    for k, v in TINY_LM.items():
        at.number_input(key=f"sweep_causal_lm_{k}").set_value(v)
    at.selectbox(key="sweep_dtype").set_value("fp32")
    at.selectbox(key="sweep_device").set_value("cpu")
    at.number_input(key="sweep_warmup").set_value(1)
    at.slider(key="sweep_active").set_value(1)
    at.number_input(key="sweep_repeats").set_value(1)
    [go] = [b for b in at.button if b.label == "Run sweep"]
    go.click().run()
    assert not errors_of(at), errors_of(at)


@pytest.mark.slow
def test_a_causal_lm_sweeps_new_tokens_in_decode_and_seq_len_in_prefill_and_charts_them_apart(runs_dir, media):
    """The causal LM has two sweep axes: new_tokens (decode) and seq_len (prefill, train). Two sweeps with the same
    values along each stay two curves on their own axes: a point of 2 new tokens is not one of a 2-token prompt."""
    import csv as _csv
    import io
    import json

    from profiling_core import RunStore
    pytest.importorskip("transformers")
    at = app("overhead")
    at.selectbox(key="sweep_workload").set_value("causal_lm").run()
    box = at.text_input(key="sweep_values_causal_lm")
    assert box.label == "Values of new_tokens / seq_len (comma-separated)"
    assert "new_tokens when mode is 'decode', else seq_len" in box.help and "kv_len" not in box.help
    _lm_sweep(at, "decode", "2,4")
    _lm_sweep(at, "prefill", "2,4")
    cfgs = sorted((c.workload_knobs["mode"], c.size_knob, c.workload_knobs[c.size_knob])
                  for c in (r.config for r in RunStore(runs_dir).list()))
    assert cfgs == [("decode", "new_tokens", 2), ("decode", "new_tokens", 4), ("prefill", "seq_len", 2),
                    ("prefill", "seq_len", 4)]
    at.multiselect(key="overhead_chosen").set_value([r.run_id for r in RunStore(runs_dir).list()]).run()
    assert not errors_of(at), errors_of(at)
    rows = list(_csv.DictReader(io.StringIO(download(at, media, "csv_overhead_main").decode())))
    assert sorted((r["axis"], r["size"], r["n"]) for r in rows) == [
        ("causal_lm new_tokens", "2", "1"), ("causal_lm new_tokens", "4", "1"), ("causal_lm seq_len", "2", "1"),
        ("causal_lm seq_len", "4", "1")]  # four points of one run each, not two points of two runs
    assert len({r["mode"] for r in rows}) == 2  # two curves
    (spec,) = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")
               if "CPU time vs GPU busy time per step" in c.proto.spec]
    x_title = spec["layer"][0]["encoding"]["x"]["title"]
    assert x_title == "new_tokens (causal_lm) / seq_len (causal_lm), each curve along its own"
    assert sorted(r["mode"] for r in rows) == (["eager · new_tokens (causal_lm) · decode"] * 2
                                               + ["eager · seq_len (causal_lm) · forward"] * 2)
    shown = " ".join(x.value for kind in ("success", "info", "caption", "warning") for x in at.get(kind))
    assert "n ≈" not in shown and "matrix size" not in shown


def test_runs_of_one_size_but_other_settings_are_points_of_their_own_curves(runs_dir):
    """Four H200 runs of size 64: cold, warm over 3 steps, warm over 10 steps, warm at batch 8. Their step times
    differ 3-4x for what they measured (a plain scan: their median ProfilerStep durations after the first), so the
    page never pools them into one point whose spread it calls noise: one curve per setting, named by what
    differs."""
    import statistics
    from test_h200_app_traces import cpu_steps
    from test_machines import copy_h200_run
    names = ["coldwarm_64_cold_eager", "coldwarm_64_warm_eager", "sweep_64_warm_eager", "spine_64_warm_eager_b8"]
    from conftest import steady
    # (each run's steps after the first, as every per-step figure reads them)
    medians = [statistics.median(float(e["dur"]) for e in steady(sorted(cpu_steps(n), key=lambda e: e["ts"])))
               for n in names]
    assert max(medians) > 2.5 * min(medians)  # what pooling them called noise
    ids = [copy_h200_run(runs_dir, n) for n in names]
    at = app("overhead")
    at.multiselect(key="overhead_chosen").set_value(ids).run()
    assert not errors_of(at)
    assert not [w.value for w in at.warning if "spread by more than" in w.value]
    [table] = [d.value for d in at.dataframe if {"n", "mode", "cpu_us_per_step"} <= set(d.value.columns)]
    assert list(table["n"]) == [1, 1, 1, 1]
    assert sorted(table["cpu_us_per_step"].round(2)) == sorted(round(m, 2) for m in medians)
    labels = " | ".join(table["mode"])
    assert all(x in labels for x in ("cold", "warm (10 calls)", "batch 8", "schedule 0/0/3×1", "schedule 0/0/10×1"))


def test_the_report_says_what_the_page_says_of_the_crossover(runs_dir, media):
    from profiling_core.present import md_text
    for n in ("64_bf16_cold_eager", "4096_bf16_warm_eager"):
        import_trace(runs_dir, H200 / f"{n}.json", n)
    at = app("overhead")
    assert not errors_of(at)
    [said] = [s.value for s in at.success if md_text("overtakes CPU time per step") in s.value]
    report = download(at, media, "report_overhead").decode()
    assert "overtakes CPU time per step between n = 64 and n = 4,096" in report
    assert "GEMM against its device&#x27;s peak" in report or "GEMM against its device's peak" in report
