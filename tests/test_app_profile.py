"""AppTest: the Profile page runs a real (tiny, CPU) profile through its own controls."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest_app import FAST_PROFILE, app, download, errors_of
from profiling_core.present import md_text


def fill_profile_form(at, prefix: str = "profile_form", **values):
    v = {**FAST_PROFILE, **values}
    at.select_slider(key=f"{prefix}_size").set_value(v["size"])
    at.selectbox(key=f"{prefix}_dtype").set_value(v["dtype"])
    at.selectbox(key=f"{prefix}_device").set_value(v["device"])
    at.slider(key=f"{prefix}_wait").set_value(v["wait"])
    at.slider(key=f"{prefix}_wsteps").set_value(v["warmup_steps"])
    at.slider(key=f"{prefix}_active").set_value(v["active"])
    return at


def submit(at, label: str):
    [btn] = [b for b in at.button if b.label == label]
    return btn.click().run()


def test_profile_page_renders_without_runs(runs_dir):
    at = app("profile")
    assert not errors_of(at)
    assert any("No run yet" in i.value for i in at.info)


@pytest.mark.slow
def test_profile_end_to_end_with_exports(runs_dir, media):
    at = app("profile")
    fill_profile_form(at)
    submit(at, "Run profile")
    assert not errors_of(at), errors_of(at)
    runs = list(runs_dir.iterdir())
    assert [p.name for p in runs if not p.name.startswith(".")], "no run was saved"
    assert at.subheader[0].value == md_text("64_fp32_cold_eager") == r"64\_fp32\_cold\_eager"  # shown as it is
    code = [c.value for c in at.code]
    assert any("Self CPU time total" in c for c in code)
    assert download(at, media, "png_profile_timeline")[:8] == b"\x89PNG\r\n\x1a\n"
    assert download(at, media, "svg_profile_timeline").lstrip().startswith(b"<svg")
    assert download(at, media, "csv_profile_timeline").startswith(b"lane,name,start_us,end_us")
    assert download(at, media, "dl_trace").lstrip().startswith(b"{")
    report = download(at, media, "report_profile").decode()
    assert "<svg" in report and "Self CPU time total" in report  # torch's own table in the report


def test_display_slider_does_not_rerun_the_profile(seed_run, runs_dir):
    at = app("profile")
    assert not errors_of(at)
    before = sorted(p.name for p in runs_dir.iterdir())
    steps = at.select_slider(key="profile_step")
    steps.set_value(steps.options[-1]).run()
    assert not errors_of(at)
    assert sorted(p.name for p in runs_dir.iterdir()) == before


def test_the_step_timeline_draws_the_step_the_slider_names(runs_dir):
    """Moving the step slider redraws the timeline with that step: its ProfilerStep slice (a plain scan of the
    trace: name, duration) and the kernels launched inside it, each step's own and none of the first step's."""
    import json as _json
    from conftest_app import H200, chart_specs, import_trace
    path = H200 / "4096_bf16_warm_eager_a20.json"
    ev = [e for e in _json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = {e["name"]: e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")}
    import_trace(runs_dir, path, "a20")
    at = app("profile")
    slider = at.select_slider(key="profile_step")
    drawn = {}
    for value in (slider.options[0], slider.options[-1], slider.options[0]):
        at.select_slider(key="profile_step").set_value(value).run()
        assert not errors_of(at)
        [spec] = [s for s in chart_specs(at) if "ProfilerStep#" in _json.dumps(s.get("title"))]
        rows = [r for d in spec["datasets"].values() for r in d if "name" in r and "end_us" in r]  # (the slices)
        [top] = [r for r in rows if r["lane"] == "CPU" and r["depth"] == 0]
        name = f"ProfilerStep#{value}"
        assert top["name"] == name and f"{name}:" in _json.dumps(spec["title"])
        assert top["end_us"] - top["start_us"] == pytest.approx(steps[name]["dur"], abs=0.01)
        drawn.setdefault(value, []).append(sorted((r["name"], round(r["start_us"], 3)) for r in rows))
    first, last = slider.options[0], slider.options[-1]
    assert drawn[first][0] == drawn[first][1] != drawn[last][0]


def _bound_metric_and_q2(runs_dir, path: Path):
    """The Profile page's bound metric for the trace at ``path`` (imported as the store's one run), and question 2's
    finding on that trace."""
    from conftest_app import import_trace
    from profiling_core import open_trace
    from profiling_core.explain.questions import findings
    import_trace(runs_dir, path, path.stem)
    at = app("profile")
    assert not errors_of(at)
    [m] = [m for m in at.metric if m.label.startswith("Bound, steady state")]
    with open_trace(path, engine="sqlite") as s:
        return m, next(f for f in findings(s) if f.id == "q2.bound")


def test_the_steady_state_metric_is_the_verdict_the_finding_states(runs_dir):
    """One rule: the Profile page's steady-state metric is question 2's verdict."""
    from conftest_app import H200
    m, q2 = _bound_metric_and_q2(runs_dir, H200 / "4096_bf16_warm_eager_a20.json")
    assert m.value == "compute" and q2.evidence["bound"] == "compute-bound" and "compute-bound" in q2.text
    assert m.label == "Bound, steady state"


def test_a_cpu_runs_metric_is_the_verdict_its_finding_states(runs_dir):
    """A CPU-only run (this app's compiled MLP on a 2-core VM): the metric reads question 2's CPU verdict, which the
    finding below it states, not "no GPU" beside a "Compute-bound" finding."""
    m, q2 = _bound_metric_and_q2(runs_dir, Path(__file__).parent / "data" / "cpu" / "mlp_bf16_warm_compile.json")
    assert q2.evidence["bound"] == "compute-bound" and m.value == "compute"
    assert m.label == "Bound, steady state (CPU rule)"  # (the value one word, whole in a quarter of the page)


@pytest.mark.parametrize("name", ["benchmark_result_2869224_1695835535_trace.json.gz", "inference_rank_1.json.gz"])
def test_a_gpu_trace_without_steps_has_no_bound_and_is_not_said_to_have_no_gpu(runs_dir, name):
    """Two third-party GPU traces without ProfilerStep slices (a plain scan: 79 and 4 kernels on the GPU lane, no
    step): the metric read "no GPU" while question 2 below it says the GPU was busy 66.14 ms (30 µs). Without steps
    there is no steady state to judge: the metric says n/a, as the per-step metrics beside it, and question 2 gives
    no verdict either."""
    from conftest import scan_trace
    path = Path(__file__).parent / "data" / "third_party" / name
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    assert [e for e in xs if str(e.get("cat", "")).lower() == "kernel"]
    assert not [e for e in xs if str(e.get("name")).startswith("ProfilerStep#")]
    m, q2 = _bound_metric_and_q2(runs_dir, path)
    assert m.value == "n/a" and m.label == "Bound, steady state"
    assert "the GPU was busy" in q2.text and "bound" not in q2.evidence


def test_a_copy_bound_run_shows_its_verdict_on_the_profile_page(runs_dir):
    """The H200 step that streams 64 MiB from pinned memory each step: the page's metric reads copy, and every page
    section renders."""
    from conftest_app import import_trace
    import_trace(runs_dir, Path(__file__).parent / "data" / "h200_verdicts" / "stream_in_pinned_eager.json", "stream")
    at = app("profile")
    assert not errors_of(at)
    [m] = [m for m in at.metric if m.label == "Bound, steady state"]
    assert m.value == "copy" and "copy-bound" in m.help



def test_profile_shows_the_breakdown_and_the_top_kernels(runs_dir, media):
    """The breakdown by category per step and the top-kernels table of an H200 run, as the analyses give them."""
    from conftest_app import H200, import_trace
    from profiling_core import open_trace
    from profiling_core.analyses import category_totals, step_breakdown, steps, top_kernels
    path = H200 / "4096_bf16_warm_eager_a20.json"
    import_trace(runs_dir, path, "a20")
    at = app("profile")
    assert not errors_of(at)
    assert "Where the GPU time goes" in [h.value for h in at.header]
    with open_trace(path, engine="sqlite") as s:
        totals = category_totals(step_breakdown(s), steps(s))
        top = top_kernels(s, n=None)
    frames = [d.value for d in at.dataframe]
    [shown] = [f for f in frames if list(f.columns) == ["category", "per_step_us", "share", "time_us",
                                                        "overlapped_us"]]
    assert shown["category"].tolist() == totals["category"].tolist()
    assert shown["per_step_us"].tolist() == pytest.approx(totals["per_step_us"].tolist())
    [kern] = [f for f in frames if "cpu_ops" in f.columns]
    assert kern["name"].tolist() == top["name"].tolist()[:len(kern)]
    assert kern["cpu_ops"].iloc[0] == "aten::mm ×20"  # the GEMM of each of the 20 steps, launched by aten::mm
    assert kern["category"].iloc[0] == "gemm"
    csv = download(at, media, "csv_profile_breakdown").decode()
    assert csv.startswith("step,category,time_us,share,busy_us,overlapped_us,window_us")
    assert csv.count("\n") == 20 * 10 + 1  # 20 steps × 10 categories (8 of GPU ops, unrecorded, idle) + the header
    at.radio(key="profile_breakdown_view").set_value("share of the step").run()
    assert not errors_of(at)
    at.number_input(key="profile_top_n").set_value(1).run()
    [kern] = [d.value for d in at.dataframe if "cpu_ops" in d.value.columns]
    assert len(kern) == 1


def test_profile_breakdown_on_a_cpu_run(seed_run):
    at = app("profile")
    assert not errors_of(at)
    assert "Where the GPU time goes" not in [h.value for h in at.header]  # no GPU lane: nothing to break down


def test_the_profile_metrics_leave_an_empty_step_out_and_say_so(runs_dir):
    """HTA's MI250 trace: its second step is the profiler's closing stub (a plain scan: nothing begins in its
    window). The CPU-per-step metric is the first step's own time, not the mean of the two, and a caption says which
    step is left out."""
    from conftest import DATA, scan_trace
    from conftest_app import import_trace
    path = DATA / "traces" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    events = scan_trace(path)
    steps = sorted((e for e in events if e.get("ph") == "X" and str(e["name"]).startswith("ProfilerStep#")
                    and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"])
    assert not [e for e in events if e.get("ph") in ("X", "i") and e is not steps[1]
                and steps[1]["ts"] <= e["ts"] < steps[1]["ts"] + steps[1]["dur"]]
    import_trace(runs_dir, path, name="train")
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    [m] = [m for m in at.metric if m.label == "CPU per step (median)"]
    assert m.value == f"{steps[0]['dur'] / 1000:.2f} ms"
    assert any("Step 2, the profiler's closing stub" in c.value and "leave it out" in c.value for c in at.caption)
    at = app("trace_lab")  # the other page with a CPU-per-step metric
    assert not errors_of(at), errors_of(at)
    [m] = [m for m in at.metric if m.label == "CPU per step (median)"]
    assert m.value == f"{steps[0]['dur'] / 1000:.2f} ms"
    assert any("Step 2, the profiler's closing stub" in c.value for c in at.caption)


def test_profile_shows_a_training_traces_phases_and_not_a_forward_ones(runs_dir):
    from conftest import DATA
    from conftest_app import CPU_TRACE, import_trace
    import_trace(runs_dir, DATA / "traces" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", name="train")
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    assert "Forward, backward, optimizer" in [h.value for h in at.header]
    view = at.radio(key="profile_phase_view")
    assert view.options == ["CPU µs", "share of the step", "GPU µs"]
    view.set_value("GPU µs").run()
    assert not errors_of(at), errors_of(at)
    import_trace(runs_dir, CPU_TRACE, name="64_fp32_warm_eager")
    at = app("profile")
    assert "Forward, backward, optimizer" not in [h.value for h in at.header]


def test_a_run_of_merged_ranks_links_to_reading_one_rank(runs_dir, tmp_path):
    """The Profile page of a file that merged two ranks says that its per-step figures mix them, and links to the
    Trace lab, which imports one rank as a run of its own (tests/test_app_trace_lab.py); one rank's run has neither."""
    import verdict_traces as vt
    from conftest_app import H200, import_trace
    one = vt.as_ranks(H200 / "4096_bf16_warm_eager.json", tmp_path / "one.json", ranks=1)
    two = vt.as_ranks(one, tmp_path / "two.json")
    for path, merged in ((one, False), (two, True)):
        import_trace(runs_dir, path, name=path.stem)  # (the newest run: the one the page shows)
        at = app("profile")
        assert not errors_of(at), errors_of(at)
        assert at.subheader[0].value == path.stem
        assert any("holds the steps of 2 processes" in w.value for w in at.warning) == merged
        links = [(p.proto.page, p.proto.label) for p in at.get("page_link")]
        assert (("trace_lab", "Read one rank on its own: the Trace lab imports it as a run →") in links) == merged
