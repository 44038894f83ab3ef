"""AppTest: Kernel variance profiles many steps and shows each kernel's distribution."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from conftest import scan_trace

from conftest_app import app, download, errors_of, import_trace, H200
from profiling_core.units import format_duration_us
from profiling_core import open_trace
from profiling_core.present import md_code, md_text
from profiling_core.explain.questions import findings
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


def _kernel_durations_from_json(path, kernel: str) -> list[float]:
    """Every launch of ``kernel`` in the trace, in µs, read with a plain JSON scan (not profiling_core)."""
    return [float(e["dur"]) for e in scan_trace(path)
            if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel" and e.get("name") == kernel]


def test_variance_shows_the_library_statistics_and_the_findings_verdict(runs_dir):
    path = H200 / "4096_bf16_warm_eager_a20.json"
    rid = import_trace(runs_dir, path, "4096_bf16_warm_eager_a20")
    at = app("variance")
    at.selectbox(key="variance_run").set_value(rid).run()
    assert not errors_of(at)
    stats = at.dataframe[0].value
    gemm = stats[stats["kernel"].str.startswith("nvjet")].iloc[0]
    launches = _kernel_durations_from_json(path, gemm["kernel"])
    assert gemm["count"] == len(launches) == 20
    assert gemm["median_us"] == pytest.approx(statistics.median(launches), abs=1e-3)
    assert gemm["mean_us"] == pytest.approx(statistics.fmean(launches), abs=1e-3)
    assert gemm["std_us"] == pytest.approx(statistics.pstdev(launches), abs=1e-3)  # population std, as the finding
    [q8] = [f for f in findings(open_trace(str(path))) if f.id == "q8.variance"]
    assert q8.evidence["kernel"] == gemm["kernel"] and q8.evidence["std_us"] == pytest.approx(gemm["std_us"], abs=1e-3)
    line = next(m.value for m in at.markdown if gemm["kernel"][:40] in m.value)
    assert f"median {format_duration_us(gemm['median_us'])}" in line
    # the page and the question-8 finding give the same skew verdict (one threshold)
    assert ("a few slow launches pull it up" in line) == ("a few slow launches pull it up" in q8.text)


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


def test_any_kernel_of_the_trace_can_be_studied(runs_dir):
    path = H200 / "4096_bf16_warm_eager_a20.json"
    rid = import_trace(runs_dir, path, "a20")
    at = app("variance")
    at.selectbox(key="variance_run").set_value(rid).run()
    add = next(k for k in at.multiselect(key="variance_kernels").options if "CUDAFunctor_add" in k)
    at.multiselect(key="variance_kernels").set_value([add]).run()
    assert not errors_of(at)
    stats = next(d.value for d in at.dataframe if "median_us" in d.value.columns)
    durs = _kernel_durations_from_json(path, add)
    assert stats["kernel"].tolist() == [add] and stats["count"].tolist() == [len(durs)]
    assert stats["median_us"].iloc[0] == pytest.approx(statistics.median(durs), abs=1e-3)


def _launches_by_config(path, kernel: str) -> dict:
    """{(grid, block): [µs, ...]} of every launch of ``kernel``, by a plain JSON scan."""
    out: dict = {}
    for e in scan_trace(path):
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel" and e.get("name") == kernel:
            key = ("×".join(map(str, e["args"]["grid"])), "×".join(map(str, e["args"]["block"])))
            out.setdefault(key, []).append(float(e["dur"]))
    return out


def test_a_kernel_launched_in_two_configurations_is_read_per_configuration(runs_dir):
    """The H200 fused-Adam MLP: its largest kernel, multi_tensor_apply, runs in two grids (the parameters' chunks),
    so its spread over all launches (CV 26%) is work, not noise. Q8 and the page give each grid's own statistics,
    which a plain scan of the JSON confirms, and the same skew verdict."""
    path = Path(__file__).parent / "data" / "h200_train" / "mlp_train_adam_fused_bf16.json.gz"
    [q8] = [f for f in findings(open_trace(str(path))) if f.id == "q8.variance"]
    kernel = q8.evidence["kernel"]
    want = _launches_by_config(path, kernel)
    assert len(want) == 2 and q8.evidence["cv"] > 0.2  # the trace as it is
    got = {(c["grid"], c["block"]): c for c in q8.evidence["configs"]}
    assert set(got) == set(want)
    for key, durs in want.items():
        assert got[key]["count"] == len(durs)
        assert got[key]["median_us"] == pytest.approx(statistics.median(durs), abs=1e-3)
        assert got[key]["cv"] == pytest.approx(statistics.pstdev(durs) / statistics.fmean(durs), abs=5e-4)
        assert f"grid {key[0]}, block {key[1]} ×{len(durs)}: median {format_duration_us(statistics.median(durs))}" \
            in q8.text
    assert "partly work, not noise" in q8.text
    rid = import_trace(runs_dir, path, "fused_adam")
    at = app("variance")
    at.selectbox(key="variance_run").set_value(rid).run()
    assert not errors_of(at)
    text = "\n".join(m.value for m in at.markdown)
    assert "in 2 launch configurations" in text
    for key, durs in want.items():
        line = next(m.value for m in at.markdown if f"grid {md_code(key[0])}," in m.value)
        assert f"median {format_duration_us(statistics.median(durs))}" in line and f"over {len(durs)} launches" in line
        assert ("a few slow launches pull it up" in line) == (
            statistics.fmean(durs) / statistics.median(durs) - 1 > 0.02)


def test_two_runs_of_other_settings_are_said_to_compare_by_spread_not_time(runs_dir, media):
    """The H200's cold 64 run and its batch-8 run both launch an nvjet GEMM of one name, in grids 4x2x1 and 4x16x1
    (a plain scan of their kernels' args): the page says they measured different settings. Two runs of one setting
    (the 4096 eager run with 10 and with 20 active steps, as imported traces) get no such note."""
    from test_h200_app_traces import xs
    from test_machines import copy_h200_run
    grids = {n: {tuple(k["args"]["grid"]) for k in xs(n, "kernel") if k["name"].startswith("nvjet")}
             for n in ("coldwarm_64_cold_eager", "spine_64_warm_eager_b8")}
    assert grids["coldwarm_64_cold_eager"] != grids["spine_64_warm_eager_b8"]
    a, b = copy_h200_run(runs_dir, "coldwarm_64_cold_eager"), copy_h200_run(runs_dir, "spine_64_warm_eager_b8")
    at = app("variance")
    at.selectbox(key="variance_run").set_value(a)
    at.selectbox(key="variance_other").set_value(b).run()
    assert not errors_of(at)
    [note] = [c.value for c in at.caption if "measured different settings" in c.value]
    assert all(md_text(x) in note for x in ("A: bias vector · cold", "B: bias matrix · batch 8",
                                            "compare their spreads, not their times"))
    report = download(at, media, "report_variance").decode()  # names both runs it draws, and says the same
    assert a in report and b in report and "compare their spreads, not their times" in report
    c = import_trace(runs_dir, H200 / "4096_bf16_warm_eager_a20.json", "4096_bf16_warm_eager_a20")
    d = import_trace(runs_dir, H200 / "4096_bf16_warm_eager.json", "4096_bf16_warm_eager")
    same = app("variance")
    same.selectbox(key="variance_run").set_value(c)
    same.selectbox(key="variance_other").set_value(d).run()
    assert not [x.value for x in same.caption if "measured different settings" in x.value]


def test_a_kernel_whose_median_launch_is_0_us_is_not_said_to_equal_its_mean(runs_dir, tmp_path):
    """A trace with whole-µs times records short launches as 0 µs; the page turned a median of 0 µs into a skew of
    0% ("the mean equals the median") where the mean was 2 µs."""
    from test_odd_traces import _kernels_of_whole_us
    import_trace(runs_dir, _kernels_of_whole_us(tmp_path, [0, 0, 0, 0, 4, 8]), "whole_us")
    at = app("variance")
    assert not errors_of(at), errors_of(at)
    (line,) = [m.value for m in at.markdown if "fill_kernel" in m.value and "launches" in m.value]
    assert "over 6 launches; the mean is 2.0 µs where the median is 0 µs" in line
    assert "equals" not in line


def test_the_kernels_only_the_compiler_launched_are_not_the_largest_shown(runs_dir):
    """An H100's cold max-autotune run: its largest kernels by total time are the compiler's benchmarks (a fill
    between candidates ×3,502, ``triton_mm`` ×1,696), which question 8 leaves out; the page showed them first."""
    path = Path(__file__).parent / "data" / "h100" / "autotune_64_cold_ma.json.gz"
    rid = import_trace(runs_dir, path, "autotune_64_cold_ma")
    at = app("variance")
    at.selectbox(key="variance_run").set_value(rid).run()
    assert not errors_of(at), errors_of(at)
    shown = set(at.dataframe[0].value["kernel"])
    names = {e["name"] for e in scan_trace(path) if e.get("cat") == "kernel"}
    assert "triton_mm" in names and "triton_mm" not in shown
    assert "triton_tem_fused_addmm_0" in shown  # the kernel the steps run, which question 8 reads
    assert any("only torch.compile's compiler launched" in c.value for c in at.caption)


@pytest.mark.parametrize("path", [H200 / "4096_bf16_warm_eager_a20.json",
                                  H200.parent / "h200_app" / "sweep_8192_warm_eager.json"])
def test_the_statistics_table_keeps_a_small_cv_s_figures(runs_dir, media, path):
    """The table and its CSV rounded every figure to 3 decimals: the H200 GEMM's CV of 0.00815 read 0.008, the 8192
    run's 0.0012 read 0.001, where the HTML report writes six significant figures. Each kernel's CV, from a plain
    scan of its launches (population std / mean), reads the same to six figures in the table, its CSV and the table's
    display format."""
    import csv
    import io
    import json
    rid = import_trace(runs_dir, path, path.stem)
    at = app("variance")
    at.selectbox(key="variance_run").set_value(rid).run()
    assert not errors_of(at), errors_of(at)
    table = at.dataframe[0]
    rows = list(csv.DictReader(io.StringIO(download(at, media, "csv_variance_stats").decode())))
    assert len(rows) == len(table.value) >= 1
    for shown, row in zip(table.value.itertuples(), rows):
        durs = _kernel_durations_from_json(path, shown.kernel)
        cv = statistics.pstdev(durs) / statistics.fmean(durs)
        assert 0 < cv < 0.02  # small spreads, as the traces have them
        assert shown.cv == pytest.approx(cv, rel=1e-5) and float(row["cv"]) == pytest.approx(cv, rel=1e-5)
    assert json.loads(table.proto.columns)["cv"]["type_config"]["format"] == "%.6g"


def _launches_by_gemm_shape(path, kernel: str) -> dict:
    """{"M×K×N": [µs, ...]} of every launch of ``kernel`` whose launch call lies in an ``aten::mm`` or ``aten::addmm``
    on its thread (the innermost), by that op's recorded ``Input Dims`` (addmm's bias first): a plain JSON scan."""
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in xs if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in (e.get("args") or {})}
    mms = [e for e in xs if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm")]
    out: dict = {}
    for k in xs:
        if k.get("cat") == "kernel" and k["name"] == kernel:
            c = calls[k["args"]["correlation"]]
            op = min((o for o in mms if o["tid"] == c["tid"] and o["ts"] <= c["ts"] <= o["ts"] + o["dur"]),
                     key=lambda o: o["dur"])
            (m, kk), (_, n) = op["args"]["Input Dims"][-2:]
            out.setdefault(f"{m}×{kk}×{n}", []).append(float(k["dur"]))
    return out


TRAIN = Path(__file__).parent / "data" / "h200_train"


@pytest.mark.parametrize("path,kernel,shapes", [
    (TRAIN / "llm_prefill.json.gz", "nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT", 2),
    (TRAIN / "app" / "block_train_adam_fused_eager.json.gz", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 4)])
def test_a_gemm_kernel_of_several_shapes_is_read_per_shape(runs_dir, path, kernel, shapes):
    """The H200 llama prefill's largest GEMM kernel runs two shapes (a plain scan: 24 launches of 512×1024×1024 near
    5.1 µs, 12 of 512×4096×1024 near 10.1 µs); over all 36 its mean is 31% above its median, and the page said "a few
    slow launches pull it up" where question 8 on the page reads the spread as shape, not noise. The fused-Adam block's
    NNT GEMM runs four shapes in two grids, and the page read the grid of three shapes as skewed (mean 9% below its
    median). The page now reads each shape's own launches, with the scan's counts and medians, and each its verdict."""
    want = _launches_by_gemm_shape(path, kernel)
    assert len(want) == shapes and sum(map(len, want.values())) == len(_kernel_durations_from_json(path, kernel))
    rid = import_trace(runs_dir, path, path.name.split(".")[0])
    at = app("variance")
    at.selectbox(key="variance_run").set_value(rid).run()
    if kernel not in at.multiselect(key="variance_kernels").value:
        at.multiselect(key="variance_kernels").set_value([kernel]).run()
    assert not errors_of(at), errors_of(at)
    lines = [m.value for m in at.markdown]
    (head,) = [x for x in lines if x.startswith(f"- {md_code(kernel)}:")]
    assert f"in {shapes} GEMM shapes" in head and "shape, not noise" in head and "pull it" not in head
    for shape, durs in want.items():
        (line,) = [x for x in lines if x.lstrip().startswith(f"- {md_code(shape)} (")]
        assert f"median {format_duration_us(statistics.median(durs))}" in line and f"over {len(durs)} launches" in line
        assert ("pull it" in line) == (abs(statistics.fmean(durs) / statistics.median(durs) - 1) > 0.02)
    q8 = [f for f in findings(open_trace(str(path))) if f.id == "q8.variance" and f.evidence["kernel"] == kernel]
    for f in q8:  # (the prefill's kernel is the one question 8 reads: the same shapes, the same reading)
        assert {g["shape"]: g["count"] for g in f.evidence["shapes"]} == {k: len(v) for k, v in want.items()}
        assert "shape, not noise" in f.text


THIRD_PARTY = Path(__file__).parent / "data" / "third_party"


@pytest.mark.parametrize("name", ["benchmark_result_2869224_1695835535_trace.json.gz", "inference_rank_1.json.gz"])
def test_a_gpu_trace_without_steps_is_read_from_its_kernels(runs_dir, name):
    """Two third-party GPU traces without ProfilerStep slices (a plain scan: 79 and 4 kernels, no step): the page
    said "This trace has no GPU kernels (recorded on the CPU)… Run on a CUDA device" and showed nothing. It says
    the trace has no steps, and gives each largest kernel's statistics over all its launches, as a scan counts
    them."""
    path = THIRD_PARTY / name
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    kernels = [e for e in xs if str(e.get("cat", "")).lower() == "kernel"]
    assert kernels and not [e for e in xs if str(e.get("name")).startswith("ProfilerStep#")]
    import_trace(runs_dir, path, name.split(".")[0])
    at = app("variance")
    assert not errors_of(at), errors_of(at)
    said = " ".join(x.value for x in [*at.info, *at.warning])
    assert "no GPU kernels" not in said and "recorded on the CPU" not in said and "no ProfilerStep slices" in said
    stats = at.dataframe[0].value
    assert len(stats) >= 1
    for row in stats.itertuples():
        durs = _kernel_durations_from_json(path, row.kernel)
        assert row.count == len(durs) and row.median_us == pytest.approx(statistics.median(durs), abs=1e-3)
