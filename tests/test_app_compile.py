"""AppTest: Compile vs eager runs through its form and compares compiled traces."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest_app import app, download, errors_of, import_trace, H200
from conftest import steady
from profiling_core.present import md_text


CPU = Path(__file__).parent / "data" / "cpu"


def cpu_runs(runs_dir: Path, *names: str) -> list[str]:
    """The CPU runs of tests/data/cpu named (``<name>.json`` or ``.json.gz`` with ``<name>.meta.json``) as run
    folders of the store at ``runs_dir``; their run ids."""
    ids = []
    for name in names:
        meta = json.loads((CPU / f"{name}.meta.json").read_text())
        d = runs_dir / meta["run_id"]
        d.mkdir(parents=True)
        packed = CPU / f"{name}.json.gz"
        (d / "trace.json").write_bytes(gzip.decompress(packed.read_bytes()) if packed.exists()
                                       else (CPU / f"{name}.json").read_bytes())
        (d / "meta.json").write_text(json.dumps(meta))
        ids.append(meta["run_id"])
    return ids


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
    from test_machines import copy_h200_run
    eager, comp, ro = (copy_h200_run(runs_dir, f"sweep_4096_warm_{m}") for m in ("eager", "compile", "reduce-overhead"))
    at = app("compile_vs_eager")
    at.multiselect(key="compile_chosen").set_value([eager, comp, ro]).run()
    assert not errors_of(at)
    assert not [w.value for w in at.warning if "Left out" in w.value]  # one setting, three modes
    delta = at.dataframe[-1].value if "metric" in at.dataframe[-1].value else at.dataframe[0].value
    tables = [d.value for d in at.dataframe if "metric" in d.value.columns]
    delta = tables[0].set_index("metric")
    assert delta.loc["launches per step", "eager"] >= 2
    compiled_cols = [c for c in delta.columns if c != "eager" and not c.startswith("Δ")]
    assert [delta.loc["kernels per step", c] for c in compiled_cols] == [1, 3]  # as a plain scan of the two traces counts
    assert [delta.loc["cudaGraphLaunch per step", c] for c in compiled_cols] == [0, 1]
    assert download(at, media, "svg_compile_region").lstrip().startswith(b"<svg")
    # the GEMM table's mean per call is over every call, the steps the per-step figures leave out included: said
    assert any(c.value.startswith("µs per call: the mean over every call of the GEMM in the trace") for c in at.caption)


def test_runs_of_another_setting_are_left_out_not_pooled_into_the_baseline(runs_dir):
    """The 4096 eager run is the baseline; a 64 eager run and a CPU trace chosen with it measured other settings:
    they are left out and named, and the baseline's figures are the 4096 run's own (a plain scan: the median of its
    ProfilerStep durations after the first; 3 launches a step), not a median pooled with them."""
    import statistics
    from test_h200_app_traces import cpu_steps, xs
    from test_machines import copy_h200_run
    from conftest_app import CPU_TRACE
    e4096, e64, c4096 = (copy_h200_run(runs_dir, n) for n in ("sweep_4096_warm_eager", "sweep_64_warm_eager",
                                                               "sweep_4096_warm_compile"))
    cpu = import_trace(runs_dir, CPU_TRACE, "64_fp32_warm_eager")
    at = app("compile_vs_eager")
    at.multiselect(key="compile_chosen").set_value([e4096, e64, c4096, cpu]).run()
    assert not errors_of(at)
    [left] = [w.value for w in at.warning if "Left out" in w.value]
    assert all(md_text(x) in left for x in ("2 of the chosen runs", "64_bf16_warm_eager (size 64; the baseline: size "
                                            "4096)", "64_fp32_warm_eager (unknown machine (no GPU work)"))
    delta = [d.value for d in at.dataframe if "metric" in d.value.columns][0].set_index("metric")
    steps = steady(sorted(cpu_steps("sweep_4096_warm_eager"), key=lambda e: e["ts"]))  # (the steps after the first)
    assert delta.loc["CPU per step (µs)", "eager"] == pytest.approx(statistics.median(float(e["dur"]) for e in steps),
                                                                    abs=0.01)
    ran = {g["args"]["correlation"] for g in xs("sweep_4096_warm_eager", "kernel", "gpu_memcpy", "gpu_memset")}
    launches = [sum(1 for c in xs("sweep_4096_warm_eager", "cuda_runtime", "cuda_driver")  # calls that launched work
                    if c["args"].get("correlation") in ran and s["ts"] <= c["ts"] < s["ts"] + s["dur"]) for s in steps]
    assert delta.loc["launches per step", "eager"] == statistics.median(launches) == 3
    # (and the page says which steps its per-step figures read)
    assert any("Each run's per-step figures read its steady state" in c.value for c in at.caption)


def test_the_report_holds_the_pages_findings_and_gemm_table(runs_dir, media):
    from test_machines import copy_h200_run
    ids = [copy_h200_run(runs_dir, f"sweep_4096_warm_{m}") for m in ("eager", "compile")]
    at = app("compile_vs_eager")
    at.multiselect(key="compile_chosen").set_value(ids).run()
    assert not errors_of(at)
    report = download(at, media, "report_compile").decode()
    assert "What the findings say, run by run" in report and "4096_bf16_warm_compile (default): " in report
    assert "CompiledFxGraph" in report and "<h3>GEMM</h3>" in report


def test_two_cpu_runs_show_no_gpu_counts(runs_dir):
    """This app's MLP on a CPU, eager and compiled (one setting, two modes): the page says there is nothing to count
    on a GPU, and its table of deltas holds no launch, kernel or copy row of zeros beside that."""
    ids = cpu_runs(runs_dir, "mlp_bf16_warm_eager", "mlp_bf16_warm_compile")
    at = app("compile_vs_eager")
    at.multiselect(key="compile_chosen").set_value(ids).run()
    assert not errors_of(at)
    assert not [w.value for w in at.warning if "Left out" in w.value]
    assert any("No GPU lane in these traces" in i.value for i in at.info)
    delta = [d.value for d in at.dataframe if "metric" in d.value.columns][0].set_index("metric")
    assert "CPU per step (µs)" in delta.index
    assert not {"launches per step", "kernels per step", "memsets per step"} & set(delta.index)


def test_an_eager_trace_without_steps_gets_no_kernel_count_per_step(runs_dir, tmp_path):
    """Beside a compiled run's Triton kernels the page quotes the eager run's kernels per step; an eager trace with no
    ProfilerStep has none, and the caption said "Eager: nan kernels per step"."""
    import json
    doc = json.loads((H200 / "64_bf16_cold_eager.json").read_text())  # (unbatched, as the compiled run)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    (tmp_path / "no_steps.json").write_text(json.dumps(doc))
    eager = import_trace(runs_dir, tmp_path / "no_steps.json", "eager_no_steps")
    comp = import_trace(runs_dir, H200.parent / "h200_diag" / "bf16_4095_compile.json", "compiled")  # Triton kernels
    at = app("compile_vs_eager")
    at.multiselect(key="compile_chosen").set_value([eager, comp]).run()
    assert not errors_of(at), errors_of(at)
    captions = [c.value for c in at.caption if "kernel count per step" in c.value or "kernels per step" in c.value]
    assert captions and all("nan" not in c for c in captions)
    assert any(c.startswith("The eager run has no ProfilerStep, so it has no kernel count per step") for c in captions)


def test_runs_without_warm_up_calls_are_not_said_to_pay_off_after_0_steps(runs_dir):
    """Cold runs (0 warm-up calls) compile in their profiled steps: their warm-up times (5 and 6 µs of nothing)
    hold no compile. The page said "one-time compile -0.0 s, pays off after 0 steps" for a compile of 1.6 s."""
    import json
    from test_machines import copy_h200_run, meta
    made = []
    for name, warm_s in (("sweep_4096_warm_eager", 6e-06), ("sweep_4096_warm_compile", 5e-06)):
        m = meta(name)
        made.append(copy_h200_run(runs_dir, name, config={**m["config"], "warmup": 0},
                                  timings={**m["timings"], "warmup_s": warm_s}))
    assert all(json.loads((runs_dir / r / "meta.json").read_text())["config"]["warmup"] == 0 for r in made)
    at = app("compile_vs_eager")
    at.multiselect(key="compile_chosen").set_value(made).run()
    assert not errors_of(at), errors_of(at)
    payoff = [d.value for d in at.dataframe if "pays off after" in d.value.columns][0]
    assert len(payoff) == 1
    row = payoff.iloc[0]
    assert row["pays off after"].startswith("not measured") and " steps" not in row["pays off after"].split(":")[0]
    assert row["one-time compile (s)"] is None or row["one-time compile (s)"] != row["one-time compile (s)"]


def test_a_cold_compiled_run_is_charged_the_compile_its_trace_holds(runs_dir):
    """A cold compiled run (no warm-up call, recorded from its first step) compiles in its first recorded step: its
    one-time cost is the time its steps spent inside torch.compile's compiler ranges, from the trace (the CPU runs
    of tests/data/cpu: 1.11 s, by a scan of the JSON), where the page said "not measured"."""
    from conftest import scan_trace
    data = CPU
    made = cpu_runs(runs_dir, "eager_cold", "compile_cold")
    ev = scan_trace(data / "compile_cold.json.gz")
    ranges = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if str(e.get("name", "")).endswith(" (dynamo_timed)"))
    union, end = 0.0, float("-inf")
    for b, e in ranges:  # (one thread: their union)
        union += max(0.0, e - max(b, end))
        end = max(end, e)
    at = app("compile_vs_eager")
    at.multiselect(key="compile_chosen").set_value(made).run()
    assert not errors_of(at), errors_of(at)
    payoff = [d.value for d in at.dataframe if "pays off after" in d.value.columns][0]
    row = payoff.iloc[0]
    assert row["one-time compile (s)"] == round(union / 1e6, 2) and union > 1e6
    assert row["compiled from"] == ("an empty cache, in its recorded steps: their time inside torch.compile's "
                                    "compiler ranges")
    # both runs are read over the same steps, 1 and 2: the compiled run compiled in step 0, where the eager run had
    # its cold start (its step 0 in the eager median made the compiled step look 225 µs dearer, not 239 µs)
    delta = [d.value for d in at.dataframe if "metric" in d.value.columns][0].set_index("metric")
    for name, col in (("eager_cold", "eager"), ("compile_cold", [c for c in delta.columns if c.startswith("default")
                                                                 and not c.startswith("Δ")][0])):
        steps = sorted((e for e in scan_trace(data / f"{name}.json.gz") if str(e.get("name", "")).startswith(
            "ProfilerStep#") and e.get("ph") == "X"), key=lambda e: e["ts"])
        assert delta.loc["CPU per step (µs)", col] == pytest.approx((steps[1]["dur"] + steps[2]["dur"]) / 2, abs=0.01)
    assert any("Step 0 is left out of every run's per-step figures" in c.value for c in at.caption)
