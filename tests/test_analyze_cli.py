"""The ``analyze`` subcommand: its JSON against independent scans, the human summary, and bad files."""
from __future__ import annotations

import argparse
import json
import re
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import scan_trace

from profiling_core.cli import analyze as analyze_cli

try:
    from test_analyses import DATA, H200, THIRD, _union, scan
except ImportError:  # tests/ made a package
    from tests.test_analyses import DATA, H200, THIRD, _union, scan

ROOT = Path(__file__).parents[1]
CPU_TRACE = DATA / "cpu" / "64_fp32_warm_eager.json"


def run_json(path, capsys, *extra) -> dict:
    assert analyze_cli.main([str(path), "--json", "--engine", "sqlite", *extra]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one object on one line
    return json.loads(out)


@pytest.mark.parametrize("name", H200)
def test_json_matches_a_scan(name, capsys):
    path = DATA / "h200" / f"{name}.json"
    sc = scan(path)
    got = run_json(path, capsys)
    assert got["engine"] == "sqlite"
    want = sc.step_rows()
    assert [s["step"] for s in got["steps"]] == [w["step"] for w in want]
    for g, w in zip(got["steps"], want):
        assert g["cpu_dur_us"] == pytest.approx(w["cpu_dur_us"], abs=0.002)
        assert g["gpu_busy_us"] == pytest.approx(w["gpu_busy_us"], abs=0.01)
        assert (g["kernels"], g["launches"]) == (w["kernels"], w["launches"])
    per: dict[str, list[float]] = {}
    for e in sc.gpu:
        if e["cat"] == "kernel":
            per.setdefault(e["name"], []).append(e["dur"])
    kernels = {k["name"]: k for k in got["kernels"]}
    assert set(kernels) == set(per)
    for n, d in per.items():
        assert kernels[n]["count"] == len(d)
        assert kernels[n]["median_us"] == pytest.approx(statistics.median(d), abs=0.002)
        assert kernels[n]["min_us"] == pytest.approx(min(d), abs=0.002)
        assert kernels[n]["max_us"] == pytest.approx(max(d), abs=0.002)
        assert kernels[n]["mean_us"] == pytest.approx(statistics.fmean(d), abs=0.002)
    first: dict = {}  # each launch call's first GPU op's wait (a CUDA graph's replay runs several, in order)
    for l, g in sc.pairs:
        first[id(l)] = min(first.get(id(l), float("inf")), g["ts"] - l["ts"])
    assert got["launch_latency_median_us"] == pytest.approx(statistics.median(first.values()), abs=0.003)
    assert set(got["launch_apis"]) == {l["name"] for l, _ in sc.pairs}
    regions = sum(1 for e in sc.xs if e["name"].startswith("Torch-Compiled Region"))
    assert got["compiled_regions_per_step"] == pytest.approx(regions / len(sc.steps))
    assert got["memcpy_dtod"] == sum(1 for e in sc.gpu if e["name"].startswith("Memcpy DtoD"))
    launched = [g for st in sc.steps for _, g in sc.in_step(st)]
    busy = _union((g["ts"], g["ts"] + g["dur"]) for g in launched)
    # over the steps' windows: each from its start to the later of its end and its GPU work's end, their union
    windows = [(st["ts"], max([st["ts"] + st["dur"]] + [g["ts"] + g["dur"] for _, g in sc.in_step(st)]))
               for st in sc.steps]
    assert got["gpu_busy_fraction"] == pytest.approx(busy / _union(windows), rel=1e-4)
    assert got["findings"] and all({"id", "text"} <= set(f) for f in got["findings"])


def test_json_hand_counts(capsys):
    got = run_json(DATA / "h200" / "64_bf16_warm_compile_ro.json", capsys)
    assert set(got["launch_apis"]) == {"cudaGraphLaunch", "cudaLaunchKernel"}
    assert got["compiled_regions_per_step"] == 1.0 and got["memcpy_dtod"] == 3
    got = run_json(DATA / "h200" / "4096_bf16_warm_compile.json", capsys)
    assert set(got["launch_apis"]) == {"cuLaunchKernelEx", "cudaMemcpyAsync", "cudaMemsetAsync"}
    assert [s["kernels"] for s in got["steps"]] == [1, 1, 1]


def test_json_cpu_only(capsys):
    got = run_json(CPU_TRACE, capsys)
    assert [s["step"] for s in got["steps"]] == [2, 3, 4]
    assert got["kernels"] == [] and got["launch_apis"] == [] and got["memcpy_dtod"] == 0
    assert got["gpu_busy_fraction"] is None and got["launch_latency_median_us"] is None
    assert all(s["kernels"] == 0 and s["gpu_busy_us"] == 0 for s in got["steps"])
    assert any("no GPU lane" in f["text"] for f in got["findings"])
    assert [g["op"] for g in got["gemm"]] == ["aten::mm"] * 3


def test_peak_tflops_gives_a_fraction(capsys):
    got = run_json(CPU_TRACE, capsys, "--peak-tflops", "2.0")
    assert all(g["fraction_of_peak"] == pytest.approx(g["tflops"] / 2.0) for g in got["gemm"])


@pytest.mark.parametrize("peak", ["-5", "0", "nan", "inf", "5e-324", "1e-300", "1e6"])
def test_a_peak_that_is_not_a_positive_number_is_refused(peak, capsys):
    """Not a number of TFLOP/s a device has: 5e-324 made every fraction of peak infinite ("inf%" in the text, null
    in the JSON), 1e-300 a percentage 300 digits long."""
    from profiling_core.cli import main
    assert main(["analyze", str(CPU_TRACE), "--peak-tflops", peak]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: peak_tflops must be a number of TFLOP/s above 0.000001 and at most 100,000")
    assert "Traceback" not in err


@pytest.mark.parametrize("path", THIRD, ids=lambda p: p.name)
def test_json_on_third_party_traces(path, capsys):
    got = run_json(path, capsys)
    assert len(got["steps"]) == len(scan(path).steps)
    json.dumps(got, allow_nan=False)  # strict JSON: no NaN


def test_human_output(capsys):
    assert analyze_cli.main([str(DATA / "h200" / "64_bf16_cold_eager.json"), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    assert "steps 3" in out and "findings:" in out and "Q6 " in out
    assert "nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT" in out
    # no calibration here: the heading says the datasheet, as every fraction below it does
    assert "what to change (against NVIDIA H200's datasheet peaks" in out and "peaks measured" not in out
    assert analyze_cli.main([str(CPU_TRACE), "--engine", "sqlite"]) == 0
    assert "(no GPU lane)" in capsys.readouterr().out


def _steady_line(path, capsys) -> str:
    assert analyze_cli.main([str(path), "--engine", "sqlite"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  steady state:")]
    return line


def test_a_compute_bound_headline_with_less_gpu_work_than_cpu_time_says_why(tmp_path, capsys):
    """"compute-bound" beside less GPU work than CPU time reads as a contradiction unless the line says which test of
    the bound rule held: a full launch queue (the GPU never idle with nothing launched: each kernel starts right
    after the one before, a plain scan), or each step compute-bound on its own figures (the H200 fp16 4096 run, as
    question 2 says step by step). A GPU with more work than the CPU's time needs no such clause."""
    import verdict_traces as vt
    path = vt.full_launch_queue(tmp_path / "q.json")
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = sorted((e for e in xs if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])[1:]
    kernels = sorted((e for e in xs if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    assert all(b["ts"] - (a["ts"] + a["dur"]) <= 1.0 for a, b in zip(kernels, kernels[1:]))  # never waiting
    gpu = [sum(k["dur"] for k in kernels if calls_in(xs, k, st)) for st in steps]
    assert all(g < st["dur"] for g, st in zip(gpu, steps))  # less GPU work than CPU time, step by step
    line = _steady_line(path, capsys)
    assert "compute-bound" in line and line.endswith(
        "yet the GPU never waited for a launch: it never sat idle with nothing launched for it (question 2)")
    line = _steady_line(DATA / "h200_diag" / "fp16_4096.json", capsys)
    assert line.endswith("each step compute-bound by the rule on its own figures, though their medians are not "
                         "(question 2)")
    line = _steady_line(vt.gpu_bound_with_drift(tmp_path / "d.json"), capsys)
    assert "compute-bound" in line and "question 2" not in line


def calls_in(xs, kernel, step) -> bool:
    """Whether ``kernel``'s launch call (paired by correlation) starts inside ``step``."""
    corr = kernel["args"]["correlation"]
    return any(e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == corr
               and step["ts"] <= e["ts"] < step["ts"] + step["dur"] for e in xs)


def test_the_wait_behind_unrecorded_work_is_not_idle(capsys):
    """The H200's fp32 attention run (GPU-bound, its queue growing): its first recorded kernel starts 2.25 ms after its
    launch call returned, with no GPU work recorded before it (a plain scan), so the GPU ran work queued before the
    recording that the trace does not hold. The first step's breakdown gives that wait its own category, not idle;
    the run's line reads the steady state's steps (the two after the first, as every per-step figure), in which the
    GPU ran the attention all along, and says what idle is."""
    path = DATA / "h200_verdicts" / "attn_hd100_fp32_eager.json"
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in xs if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]}
    kernels = [e for e in xs if e.get("cat") == "kernel"]
    first = min(kernels, key=lambda e: e["ts"])
    call = calls[first["args"]["correlation"]]
    wait = first["ts"] - (call["ts"] + call["dur"])
    assert wait > 2000
    steps = sorted((e for e in xs if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    assert analyze_cli.main([str(path), "--engine", "sqlite", "--json"]) == 0
    first = [r for r in json.loads(capsys.readouterr().out)["step_breakdown"] if r["step"] == 2]
    assert steps[0]["name"] == "ProfilerStep#2"
    assert {r["category"]: r["time_us"] for r in first}["unrecorded"] == pytest.approx(wait, abs=0.01)  # 2.25 ms
    assert analyze_cli.main([str(path), "--engine", "sqlite"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "GPU time by category" in x]
    assert "share of the steady state's steps' windows" in line
    assert line.endswith(": attention 99.96%, idle 0.04%")
    assert "idle: no GPU work the trace recorded, nor such a wait" in line


@pytest.mark.parametrize("content,why", [(None, "no such"), ('{"traceEvents": [', "JSON"), ("hello", "JSON")])
def test_bad_file_exits_nonzero_with_one_line(tmp_path, capsys, content, why):
    p = tmp_path / "bad.json"
    if content is not None:
        p.write_text(content)
    assert analyze_cli.main([str(p), "--engine", "sqlite"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert why.lower() in err.lower()


def test_add_parser_registers_analyze():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    analyze_cli.add_parser(sub)
    a = parser.parse_args(["analyze", "x.json", "--engine", "perfetto", "--json", "--peak-tflops", "989"])
    assert (a.path, a.engine, a.json, a.peak_tflops, a.func) == ("x.json", "perfetto", True, 989.0, analyze_cli.run)
    with pytest.raises(SystemExit):
        parser.parse_args(["analyze", "x.json", "--engine", "nope"])


_AS_PROGRAM = """
import json, os, runpy, sys
module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)  # what `python -m module args` runs
except SystemExit as e:
    rc = e.code
loaded = sorted(m for m, v in sys.modules.items() if v is not None)
print(json.dumps({"rc": rc, "modules": loaded, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}),
      file=sys.stderr)
"""


@pytest.mark.parametrize("argv,path", [
    (["profiling_core", "analyze"], DATA / "h200" / "4096_bf16_warm_compile.json"),
    (["profiling_core.cli.analyze"], CPU_TRACE),
    (["profiling_core", "analyze"], DATA / "third_party" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
], ids=["h200", "cpu", "rocm"])
def test_a_command_line_process_prints_what_the_library_computes_without_loading_pyarrow(argv, path, capsys):
    """An ``analyze`` process keeps pandas from loading pyarrow (text columns in Python strings): its output is the
    same bytes as the same command run here, where pandas has pyarrow (as in the app), and no pyarrow module is
    loaded in it when it ends (its ``sys.modules``, read as ``python -m`` finishes); nor the runner, its workers or
    the sweeps, which reading a trace has no use for."""
    pytest.importorskip("pyarrow")
    assert analyze_cli.main([str(path), "--json", "--engine", "sqlite"]) == 0
    here = capsys.readouterr().out
    assert "pyarrow" in sys.modules  # (the comparison is between the two storages)
    p = subprocess.run([sys.executable, "-c", _AS_PROGRAM, *argv, str(path), "--json", "--engine", "sqlite"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    end = json.loads(p.stderr.splitlines()[-1])
    assert end["rc"] == 0, p.stderr[-2000:]
    assert "pandas" in end["modules"] and not [m for m in end["modules"] if m.split(".")[0] == "pyarrow"]
    assert not {"profiling_core.run.runner", "profiling_core.run.worker", "profiling_core.run.sweep"} \
        & set(end["modules"])
    assert p.stdout == here


_THREADS_AFTER_NUMPY = """
import os, sys
from profiling_core.cli import starting_analyze
starting_analyze()
import numpy
print(os.environ.get("OPENBLAS_NUM_THREADS"), open("/proc/self/status").read().split("Threads:")[1].split()[0])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="counts threads in /proc; OpenBLAS starts its own only with two cores or more")
@pytest.mark.parametrize("setting,expected", [(None, ("1", 1)), ("2", ("2", 2))], ids=["unset", "user's own"])
def test_an_analyze_process_starts_numpy_without_blas_threads_unless_told(setting, expected):
    """numpy's OpenBLAS starts a thread per core at import, spinning on other cores for nothing (the analyses do no
    BLAS work): an analyze process imports numpy with one BLAS thread (the process's threads right after numpy's
    import, /proc), unless its environment sets how many, which is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if setting is not None:
        env["OPENBLAS_NUM_THREADS"] = setting
    p = subprocess.run([sys.executable, "-c", _THREADS_AFTER_NUMPY], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    value, threads = p.stdout.split()
    assert (value, int(threads)) == expected


@pytest.mark.parametrize("argv", [["profiling_core", "analyze"], ["profiling_core.cli.analyze"]])
def test_both_analyze_entry_points_start_as_an_analyze_process(argv):
    """``python -m profiling_core analyze`` and ``python -m profiling_core.cli.analyze`` both start with
    ``starting_analyze`` (the environment's BLAS setting, read when the process ends), where the user set none."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    p = subprocess.run([sys.executable, "-c", _AS_PROGRAM, *argv, str(DATA / "h200" / "64_bf16_cold_eager.json"),
                        "--json", "--engine", "sqlite"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    end = json.loads(p.stderr.splitlines()[-1])
    assert end["rc"] == 0 and end["blas_threads"] == "1", p.stderr[-2000:]


def test_main_with_arguments_leaves_the_collector_as_it_was(capsys):
    """Only the process's own command line (no argv) freezes the heap on its way out; a caller that passes argv
    (a test, a script) goes on, and its objects stay collectable."""
    import gc
    before = gc.get_freeze_count()
    from profiling_core.cli import main
    assert main(["analyze", str(CPU_TRACE), "--json", "--engine", "sqlite"]) == 0
    capsys.readouterr()
    assert gc.get_freeze_count() == before


@pytest.mark.parametrize("argv", [["-m", "profiling_core.cli.analyze"], ["-m", "profiling_core", "analyze"]])
def test_module_entry_points(argv):
    ok = subprocess.run([sys.executable, *argv, str(DATA / "h200" / "64_bf16_cold_eager.json"), "--json",
                         "--engine", "sqlite"],
                        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["steps"][0]["step"] == 2
    bad = subprocess.run([sys.executable, *argv, str(DATA / "nope.json"), "--engine", "sqlite"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_human_output_shows_control_characters_of_names_as_escapes(tmp_path, capsys):
    doc = json.loads((DATA / "h200" / "64_bf16_cold_eager.json").read_text())
    hostile = "\x1b]0;pwned\x07evil\x1b[2J\nFAKE finding"
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "kernel":
            ev["name"] = hostile
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    assert analyze_cli.main([str(path), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;pwned\\x07evil\\x1b[2J\\x0aFAKE finding" in out
    assert not any(line.startswith("FAKE") for line in out.splitlines())


def _h200_peaks(tmp_path) -> Path:
    from profiling_core.store.peaks import DevicePeaks
    tf = {"bf16": 800.0, "fp16": 760.0, "tf32": 400.0, "fp32": 50.0}
    p = DevicePeaks.from_dict({"device": "NVIDIA H200", "kind": "cuda", "driver": "580.159.04",
                               "torch_version": "2.11.0+cu130", "measured_at": "2026-12-01T12:08:00Z",
                               "method": "m", "gemm_tflops": tf, "gemm_tflops_median": tf,
                               "gemm_sizes": {k: 8192 for k in tf}, "bandwidth_gbs": 4000.0,
                               "bandwidth_gbs_median": 4000.0, "copy_bytes": 1 << 30})
    return p


def test_json_carries_the_peaks_the_roofline_and_the_diagnoses(tmp_path, capsys):
    peaks = _h200_peaks(tmp_path)
    f = tmp_path / "peaks.json"
    f.write_text(json.dumps(peaks.to_dict()))
    out = run_json(DATA / "h200_diag" / "bf16_4095.json", capsys, "--peaks", str(f))
    assert out["peaks"]["device"] == "NVIDIA H200" and out["peaks"]["gemm_tflops"]["bf16"] == 800.0
    (gemm,) = [r for r in out["roofline"] if r["kind"] == "gemm"]
    durs = [e["dur"] for e in scan_trace(DATA / "h200_diag" / "bf16_4095.json")
            if e.get("cat") == "kernel" and "gemm" in e["name"]]
    assert gemm["fraction_of_peak"] == pytest.approx(2 * 4095 ** 3 / statistics.mean(durs) / 1e6 / 800.0)
    assert [d["rule"] for d in out["diagnoses"]] == ["unaligned_gemm_dims"]
    assert out["diagnoses"][0]["cost_us_per_step"] > 0


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_a_store_run_is_judged_by_its_devices_calibration(tmp_path, capsys, name):
    """A run of the store, its trace as the store keeps it (``trace.json``, or ``trace.json.gz`` for a gzip import):
    its meta.json's config and device, and the store's calibration of that device."""
    import gzip
    from profiling_core.store.peaks import PeakBook
    run = tmp_path / "runs" / "20261201-120000-bf16_4095"
    run.mkdir(parents=True)
    raw = (DATA / "h200_diag" / "bf16_4095.json").read_bytes()
    run.joinpath(name).write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    meta = json.loads((DATA / "h200_diag" / "bf16_4095.meta.json").read_text())
    run.joinpath("meta.json").write_text(json.dumps({**meta, "name": "4095_bf16_warm_eager", "status": "ok"}))
    PeakBook(tmp_path / "runs").save(_h200_peaks(tmp_path))
    out = run_json(run / name, capsys)
    assert out["peaks"]["torch_version"] == "2.11.0+cu130"
    assert [r["flops_from"] for r in out["roofline"] if r["kind"] == "gemm"] == ["shapes"]
    assert [d["rule"] for d in out["diagnoses"]] == ["unaligned_gemm_dims"]


def test_a_bad_peaks_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "peaks.json"
    f.write_text('{"device": 1}')
    assert analyze_cli.main([str(DATA / "h200_diag" / "bf16_4095.json"), "--peaks", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "calibration field 'device' has the wrong type (int)" in err


@pytest.mark.parametrize("path", [DATA / "h200" / "4096_bf16_warm_compile.json",
                                  DATA / "traces" / "gaunernst_bert-small-uncased__1016001.json.gz"],
                         ids=lambda p: p.name)
def test_json_carries_the_breakdown_and_the_top_kernels(path, capsys):
    try:
        from test_breakdown import scan_breakdown, scan_launching_op
    except ImportError:  # tests/ made a package
        from tests.test_breakdown import scan_breakdown, scan_launching_op
    sc = scan(path)
    got = run_json(path, capsys)
    want = scan_breakdown(sc)
    rows = got["step_breakdown"]
    assert len(rows) == 10 * len(sc.steps)  # gemm, convolution, attention, elementwise, other, memcpy, memset,
    # communication, unrecorded and idle, zero rows included
    for r in rows:
        assert r["time_us"] == pytest.approx(want["time"][(r["step"], r["category"])], abs=0.01)
    assert sum(r["time_us"] for r in rows) == pytest.approx(sum(want["window"].values()), abs=0.01)
    assert list(got["time_by_category"]) == ["gemm", "convolution", "attention", "elementwise", "other", "memcpy",
                                             "memset", "communication", "unrecorded", "idle"]
    assert sum(got["time_by_category"].values()) == pytest.approx(1.0)
    top = {k["name"]: k for k in got["top_kernels"]}
    assert set(top) == {g["name"] for g in sc.gpu}
    for name, k in top.items():
        launches: dict = {}
        for launch, g in sc.pairs:
            if g["name"] == name:
                op = scan_launching_op(sc, launch)
                launches[op] = launches.get(op, 0) + 1
        assert {x["op"]: x["launches"] for x in k["cpu_ops"]} == launches


def test_human_output_has_the_time_by_category(capsys):
    assert analyze_cli.main([str(DATA / "traces" / "gaunernst_bert-small-uncased__1016001.json.gz"),
                             "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if "GPU time by category" in x]
    assert "gemm 4.5%" in line and "attention 0.8%" in line and "idle 93.0%" in line


def test_the_time_by_category_says_communication_is_what_nothing_else_overlapped(capsys):
    """HTA's two-rank NCCL trace: in its steady state (steps 5 and 6, those after the first) its all-reduce kernels ran
    7.8% of the steps' time by a plain scan, 1.3 points of it under compute on another stream. The line gives
    communication only the time nothing else ran (6.6%), and says so."""
    path = DATA / "third_party" / "nccl_data.json.gz"
    events = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
                    and e.get("cat") == "user_annotation"), key=lambda e: e["ts"])[1:]
    assert [e["name"] for e in steps] == ["ProfilerStep#5", "ProfilerStep#6"]
    nccl = sum(e["dur"] for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")
               and any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps))
    assert analyze_cli.main([str(path), "--engine", "sqlite"]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if "GPU time by category" in x]
    shown = float(re.search(r"communication ([0-9.]+)%", line).group(1))
    windows = sum(e["dur"] for e in steps)
    assert shown < 100 * nccl / windows - 1.0  # the exposed part, not all of it
    assert "communication is what nothing else overlapped" in line


QWEN = DATA / "traces" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def test_json_carries_each_devices_peak_memory_from_a_plain_scan(capsys):
    events = [e for e in scan_trace(QWEN) if e.get("name") == "[memory]"]
    got = run_json(QWEN, capsys)["memory"]
    assert got["events"] == len(events) == 2450 and got["note"] is None
    for dev, kind in (("cuda:0", 1), ("cpu", 0)):
        mine = [e["args"] for e in events if e["args"]["Device Type"] == kind]
        assert got["devices"][dev]["peak_allocated_bytes"] == max(a["Total Allocated"] for a in mine)
    assert got["devices"]["cuda:0"]["peak_reserved_bytes"] == max(
        e["args"]["Total Reserved"] for e in events if e["args"]["Device Type"] == 1) == 2_629_828_608
    assert got["devices"]["cpu"]["peak_reserved_bytes"] is None  # the CPU allocator reserves nothing (it writes 0)


def test_a_trace_without_memory_events_says_so_and_how_to_record_them(capsys):
    got = run_json(CPU_TRACE, capsys)["memory"]
    assert got["events"] == 0 and got["devices"] == {} and "profile_memory=True" in got["note"]
    assert analyze_cli.main([str(CPU_TRACE), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    assert "memory: This trace has no [memory] events" in out and "--profile-memory" in out


def test_human_output_has_a_memory_section(capsys):
    assert analyze_cli.main([str(QWEN), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    assert "memory (2,450 [memory] events):" in out
    assert "cuda:0: peak 1.9 GiB allocated, 2.4 GiB reserved, at aten::mul in step 6; 939.1 MiB already allocated" \
        in out  # 2,088,508,416 B, 2,629,828,608 B; 984,742,400 B before the window


def test_a_cpu_peak_and_a_peak_without_totals_say_how_they_are_counted(capsys):
    """torch counts a CPU's memory only from when the profiler began recording it (the Qwen trace's CPU "peaked at
    16 B" while the process held its tokenizer and model), and a 2021 trace has no totals at all: neither figure is
    the device's own peak, and the line said so of neither the CPU's."""
    assert analyze_cli.main([str(QWEN), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    assert ("    cpu: peak 16 B allocated (counted from when the profiler began recording: the device's own peak is "
            "not in the trace), at aten::empty in step 6") in out
    assert "    cuda:0: peak 1.9 GiB allocated, 2.4 GiB reserved" in out  # a GPU's totals are its allocator's
    old = QWEN.parent / "worker0.1623143089861.pt.trace.json.gz"
    assert analyze_cli.main([str(old), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    assert ("    cuda:0: peak 2.6 GiB allocated (counted from the window's start: the device's own peak is not in "
            "the trace) in step 5") in out
    assert "Memory peaks far above what the" not in out  # it said "2.6 GiB above the 0 B its steps keep"


def test_the_summary_says_which_steps_its_per_step_figures_rest_on(capsys):
    """HTA's MI250 trace: two steps, the second empty (nothing begins in its 49 µs window, a plain scan). The
    summary's medians are the first step's own CPU time; their line says the empty step is left out, and the
    steady-state line that it reads the same steps."""
    path = DATA / "third_party" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    events = scan_trace(path)
    steps = sorted((e for e in events if e.get("ph") == "X" and str(e["name"]).startswith("ProfilerStep#")
                    and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"])
    assert [sum(1 for e in events if e.get("ph") in ("X", "i") and s["ts"] <= e["ts"] < s["ts"] + s["dur"]) - 1
            for s in steps][1] == 0
    assert analyze_cli.main([str(path), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    assert (f"CPU per step (median of 1 step; step {steps[1]['name'].split('#')[1]}, the profiler's closing stub (no "
            f"op or launch call began in it), left out) {steps[0]['dur'] / 1000:.2f} ms") in out
    assert "of CPU per step (the same steps)" in out


@pytest.mark.parametrize("args", [["--help"], [], ["x", "--engine", "bad"], ["x", "--peak-tflops", "many"]],
                         ids=["help", "no path", "bad engine", "bad number"])
def test_an_analyze_process_parses_its_arguments_as_the_whole_command_line_does(args, capsys, monkeypatch):
    """``python -m profiling_core analyze ...`` parses with the analyze command's parser alone (the other commands'
    modules are not imported): its help, usage and argument errors are those of the whole command line's parser
    (``commands.build_parser``), and so is its exit status."""
    from profiling_core.cli.commands import build_parser
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps its help to the terminal's width: the same one here and there
    with pytest.raises(SystemExit) as whole:
        build_parser().parse_args(["analyze", *args])
    expected = capsys.readouterr()
    p = subprocess.run([sys.executable, "-m", "profiling_core", "analyze", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "COLUMNS": "100"})
    assert (p.returncode, p.stdout, p.stderr) == (whole.value.code, expected.out, expected.err)
    assert "usage: python -m profiling_core analyze" in p.stdout + p.stderr


def _merged_ranks(src: Path, out: Path, ranks: int = 2) -> Path:
    """``src``'s events written once per rank, each copy under its own pids (pid + 1,000,000 × k): ranks' traces
    merged into one file."""
    doc = json.loads(src.read_text())
    events = []
    for k in range(ranks):
        for e in doc["traceEvents"]:
            e = dict(e)
            if isinstance(e.get("pid"), int):
                e["pid"] += 1_000_000 * k
            events.append(e)
    out.write_text(json.dumps({**doc, "traceEvents": events}))
    return out


def test_a_trace_of_merged_ranks_says_its_per_step_figures_mix_them(tmp_path, capsys):
    """Two ranks' steps in one file: the summary names the processes that hold step slices (a plain scan of the
    JSON), question 2 says that every per-step figure mixes them; one rank's own trace says nothing of it."""
    from profiling_core import analyze, findings, open_trace
    from profiling_core.explain import merged_processes_text
    src = DATA / "h200" / "64_bf16_cold_eager.json"
    path = _merged_ranks(src, tmp_path / "merged.json")
    step_pids = lambda p: sorted({e["pid"] for e in scan_trace(p) if str(e.get("name", "")).startswith(  # noqa: E731
        "ProfilerStep#") and e.get("cat") != "gpu_user_annotation"})
    pids = step_pids(path)
    assert len(pids) == 2 and len(step_pids(src)) == 1
    note = merged_processes_text(pids)
    assert note.startswith(f"This trace holds the steps of 2 processes (pid {pids[0]}, {pids[1]}): ")
    for p, merged in ((path, True), (src, False)):
        with open_trace(p, engine="sqlite") as s:
            r = analyze(s)
        assert r.summary["step_processes"] == step_pids(p)
        q2 = next(f for f in findings(r) if f.id == "q2.bound")
        assert (note in q2.text) == merged
        # the steps' verdicts are counted once per step slice the figures read (each rank's step N is one), and the
        # GPUs named are those of the processes that hold the steps
        assert sum(q2.evidence["bound_counts"].values()) == len(q2.evidence["bound_basis_steps"])
        gpu_pids = sorted({e["pid"] for e in scan_trace(p) if e.get("cat") == "kernel"})
        assert ("GPU work ran on 2 GPUs of these 2 processes" in q2.text) == (merged and len(gpu_pids) == 2)
        assert "GPUs of this process" not in q2.text
    # the command line reads one rank of such a file (tests/test_ranks.py), and says which and what it left out
    assert analyze_cli.main([str(path), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    assert note not in out and f"  note: This file holds the steps of 2 processes (pid {pids[0]}, {pids[1]}): " in out
    assert analyze_cli.main([str(path), "--engine", "sqlite", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["step_processes"] == pids[:1] and doc["rank"]["processes"] == pids and doc["rank"]["pid"] == pids[0]


def test_each_rank_s_first_step_is_left_out_of_the_steady_state(tmp_path):
    """Two copies of the H200's cold 64² run as two ranks in one file: its first step took 187.5 µs against 63–69 µs
    for the others (a plain scan). The steady state left out only the file's first step slice, so the second rank's
    first stayed among the per-step figures (basis [2, 3, 3, 4, 4], CPU median 69.3 against the run's 66.3 µs).
    Each process's first is now left out: the medians are the run's own, and question 3 compares the first step
    with the other steps, not with the other rank's first."""
    from profiling_core import analyze, findings, open_trace
    src = DATA / "h200" / "64_bf16_cold_eager.json"
    path = _merged_ranks(src, tmp_path / "merged.json")
    steps = sorted((e for e in scan_trace(src) if str(e.get("name", "")).startswith("ProfilerStep#")
                    and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"])
    durs = [e["dur"] for e in steps]
    assert len(durs) == 3 and durs[0] > 2 * max(durs[1:])  # by the JSON: a first step far longer than the others
    reports = {}
    for p in (src, path):
        with open_trace(p, engine="sqlite") as s:
            reports[p] = analyze(s)
    one, two = reports[src].summary, reports[path].summary
    assert two["steady_state"]["first_steps"] == [2, 2] and one["steady_state"]["first_steps"] == [2]
    assert two["steady_state"]["basis_steps"] == [3, 3, 4, 4]
    assert two["cpu_step_median_us"] == pytest.approx(statistics.median(durs[1:]), abs=0.002)
    assert two["cpu_step_median_us"] == pytest.approx(one["cpu_step_median_us"])
    assert two["steady_state"]["bound"] == one["steady_state"]["bound"]
    f = {x.id: x for x in findings(reports[path])}
    assert "the 4 steps after each of the 2 processes' first" in f["q2.bound"].text
    q3 = f["q3.cold_start"]
    assert q3.evidence["other_steps_median_us"] == pytest.approx(statistics.median(durs[1:]), abs=0.002)
    assert "for the 4 others (" in q3.text and "the other process's first step left out of the others" in q3.text


def test_the_kernel_table_tells_apart_names_that_share_a_long_head(capsys):
    """The MI300X trace's Tensile GEMM kernels share their first ~300 characters and differ deep inside: each row of
    the five longest (by total time, a plain scan) must still read as its own kernel."""
    from collections import Counter
    path = DATA / "traces" / "trace.json.gz"
    total = Counter()
    for e in scan_trace(path):
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            total[e["name"]] += e["dur"]
    top = [n for n, _ in total.most_common(5)]
    assert len({n[:69] for n in top}) < len(top)  # (cut at the head, two rows would read the same)
    assert analyze_cli.main([str(path), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    rows = out.split("  kernels (by total time):\n")[1].split("\n")[:len(top)]
    shown = [row.split("  ")[-1] for row in rows]  # (the name follows the last two spaces)
    assert len(set(shown)) == len(top) and all(len(x) <= 70 for x in shown)


@pytest.mark.parametrize("path,timed", [
    (DATA / "h200_train" / "llm_train.json.gz", "by their GPU kernels' time"),
    (DATA / "cpu" / "64_fp32_warm_eager.json", "by their CPU time (no GPU in the trace)")], ids=lambda x: str(x)[-24:])
def test_the_gemm_line_says_whose_time_it_divides_by(capsys, path, timed):
    """The GEMM line's rate divides each op's FLOPs by its GPU kernels' time, or on a trace without a GPU lane (a plain
    scan: no kernel event) by the op's CPU time; it said "on gpu" / "on cpu"."""
    has_kernels = any(e.get("cat") == "kernel" for e in scan_trace(path))
    assert has_kernels == ("GPU kernels" in timed)
    assert analyze_cli.main([str(path), "--engine", "sqlite"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  GEMM: median")]
    assert re.fullmatch(r"  GEMM: median [\d.]+ TFLOP/s over \d+ op\(s\), " + re.escape(timed) + r"(, [\d.]+% of peak)?",
                        line), line


def test_analyze_json_shows_bidi_and_c1_controls_as_escapes(tmp_path):
    """``analyze --json`` printed names with raw U+202E and U+0085 (a terminal reorders or breaks lines at them),
    where every other --json command escapes them; µ stays as written. The JSON reads back the same names."""
    import subprocess
    import sys as _sys
    from verdict_traces import Trace
    t = Trace()
    name = "aten::mm\u202ex\u0085"
    for n in (1, 2):
        t.step(n, lambda t: t.cpu(name, 50, children=lambda t: t.launch("k\u202e", 10.0)))
    path = t.write(tmp_path / "t.json")
    out = subprocess.run([_sys.executable, "-m", "profiling_core", "analyze", str(path), "--json"],
                         capture_output=True, check=True).stdout
    assert "\u202e".encode() not in out and "\u0085".encode() not in out and "µ".encode() in out
    assert b"\\u202e" in out and b"\\u0085" in out
    assert name in json.dumps(json.loads(out), ensure_ascii=False)
