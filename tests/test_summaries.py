"""Tables and labels about runs (profiling_core.present.summaries) and the run facts the diagnosis needs
(``PeakBook.for_run``, ``Run.compute_capability``), on the real H200 runs of tests/data/h200_app.

Every expected value is written by hand from the runs' meta.json (read here as plain JSON) or computed here from a
plain JSON scan of the trace (the scans of ``test_h200_app_traces``), never copied from the code under test.
"""
from __future__ import annotations

import json
import math
import shutil
import statistics
from functools import lru_cache

import pandas as pd
import pytest

from conftest import DATA, steady
from profiling_core import ExperimentConfig, RunStore, analyze, diagnose, open_trace
from profiling_core.explain import DiagnosisReport
from profiling_core.present import (GEMM_VS_PEAK_COLUMNS, RUNS_COLUMNS, STEP_SUMMARY_COLUMNS, config_summary,
                                    gemm_vs_peak, mode_label, newest_run, peaks_frame, run_labels, run_size,
                                    runs_table, step_summaries, step_summary, store_size_text)
from profiling_core.store import DevicePeaks, PeakBook, Run
from test_h200_app_traces import DATA as APP, NAMES, cpu_steps, events, gemm_name, gpu_ops_plain, launch_of, meta, \
    step_of, union_us, xs

CPU_TRACE = DATA / "cpu" / "64_fp32_warm_eager.json"
TOL = 0.05  # µs: the library keeps integer ns, the JSON has fractional µs


# --- a store of the H200 runs, an imported trace and a corrupt run -----------------------------------------------

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("summaries") / "runs"
    for name in NAMES:
        d = root / meta(name)["run_id"]
        d.mkdir(parents=True)
        shutil.copyfile(APP / f"{name}.json", d / "trace.json")
        shutil.copyfile(APP / f"{name}.txt", d / "table.txt")
        shutil.copyfile(APP / f"{name}.meta.json", d / "meta.json")
    s = RunStore(root)
    s.import_trace(CPU_TRACE, name="64_fp32_warm_eager")
    bad = root / "20261129-120000-64_bf16_warm_eager-dead"
    bad.mkdir()
    (bad / "meta.json").write_text("{ not json")
    return s


def run_of(store: RunStore, name: str) -> Run:
    return store.load(meta(name)["run_id"])


def imported(store: RunStore) -> Run:
    return next(r for r in store.list() if r.meta.get("source") == "import")


@lru_cache(maxsize=None)
def report_of(path: str, config_json: str = ""):
    config = ExperimentConfig.from_json(config_json) if config_json else None
    with open_trace(path, engine="sqlite") as tp:
        return analyze(tp, config=config)


def report(run: Run):
    return report_of(str(run.trace_path), run.config.to_json() if run.config else "")


def peaks(bf16: float = 800.0) -> DevicePeaks:
    return DevicePeaks(device="NVIDIA H200", kind="cuda", driver="580.159.04", torch_version="2.11.0+cu130",
                       measured_at="2026-11-29T13:05:12.345678+00:00", method="by hand",
                       gemm_tflops={"bf16": bf16, "fp32": 51.25}, gemm_tflops_median={"bf16": 748.0, "fp32": 50.0},
                       gemm_sizes={"bf16": 8192, "fp32": 4096}, bandwidth_gbs=4210.0, bandwidth_gbs_median=4105.5,
                       copy_bytes=2 << 30)


# --- the runs list -------------------------------------------------------------------------------------------------

def test_the_runs_table_has_a_row_per_readable_run_from_its_meta(store):
    readable, corrupt = runs_table(store.list())
    assert list(readable.columns) == RUNS_COLUMNS
    metas = [json.loads((APP / f"{n}.meta.json").read_text()) for n in NAMES]
    by_time = [m["run_id"] for m in sorted(metas, key=lambda m: m["started_at"], reverse=True)]
    assert list(readable["run_id"]) == [imported(store).run_id] + by_time  # newest first: the import was made now
    rows = readable.set_index("run_id")
    for m in metas:
        r = rows.loc[m["run_id"]]
        assert (r["name"], r["source"], r["status"], r["workload"]) == (m["name"], "experiment", "ok", "matmul_add")
        assert r["started_at"] == m["started_at"][:10] + " " + m["started_at"][11:19]
        assert (r["size"], r["dtype"], r["compile"]) == (m["config"]["size"], "bf16", m["config"]["compile"])
        assert (r["warmup"], r["active"]) == (m["config"]["warmup"], m["config"]["active"])
        assert (r["device"], r["wall_s"]) == ("NVIDIA H200", m["timings"]["wall_s"])
    imp = rows.loc[imported(store).run_id]
    assert (imp["name"], imp["source"], imp["workload"], imp["device"]) == ("64_fp32_warm_eager", "import", "", "")
    assert pd.isna(imp["size"]) and pd.isna(imp["warmup"]) and pd.isna(imp["wall_s"])
    assert list(corrupt["run_id"]) == ["20261129-120000-64_bf16_warm_eager-dead"]
    assert "meta.json" in corrupt["problem"].iloc[0]


def test_no_runs_give_empty_tables_with_their_columns():
    readable, corrupt = runs_table([])
    assert readable.empty and list(readable.columns) == RUNS_COLUMNS
    assert corrupt.empty and list(corrupt.columns) == ["run_id", "problem"]


def test_a_runs_label_is_its_name_its_start_and_the_end_of_its_id(store):
    labels = run_labels(runs_table(store.list())[0])
    assert labels["20261129-131151-64_bf16_warm_eager-b568"] == "64_bf16_warm_eager  ·  2026-11-29 13:11:51  ·  b568"
    assert labels["20261129-131737-64_bf16_warm_eager_b8-671f"] == \
        "64_bf16_warm_eager_b8  ·  2026-11-29 13:17:37  ·  671f"
    assert len(labels) == len(NAMES) + 1  # the corrupt run has no label


RUNS = pd.DataFrame([  # newest first
    {"run_id": "f", "name": "attention_s64_fp32_warm_eager", "workload": "attention", "size": 64, "dtype": "fp32",
     "warmup": 10},
    {"run_id": "e", "name": "128_fp32_warm_eager", "workload": "matmul_add", "size": 128, "dtype": "fp32",
     "warmup": 3},
    {"run_id": "d", "name": "64_fp32_cold_eager", "workload": "matmul_add", "size": 64, "dtype": "fp32", "warmup": 0},
    {"run_id": "c", "name": "64_bf16_warm_eager", "workload": "matmul_add", "size": 64, "dtype": "bf16", "warmup": 10},
    {"run_id": "b", "name": "64_fp32_warm_eager", "workload": "matmul_add", "size": 64, "dtype": "fp32", "warmup": 10},
    {"run_id": "a", "name": "my_warm_trace", "workload": None, "size": None, "dtype": None, "warmup": None},  # imported
])


@pytest.mark.parametrize("warm,like,want", [
    (True, None, "f"),    # the newest warm run
    (False, None, "d"),   # the newest cold one
    (True, "d", "b"),     # warm like the cold 64² fp32 matmul_add: not the newer 128² one, the bf16 one or attention
    (False, "e", None),   # no other cold 128² fp32 run: nothing unlike it is offered instead
    (True, "a", None),    # an imported trace with no size: no other run is like it, and not itself
])
def test_the_newest_warm_or_cold_run_compares_like_with_like(warm, like, want):
    assert newest_run(RUNS, warm=warm, like=like) == want


def test_an_imported_trace_is_warm_when_its_name_says_so():
    runs = RUNS[RUNS["run_id"] == "a"]
    assert newest_run(runs, warm=True) == "a" and newest_run(runs, warm=False) is None
    assert newest_run(RUNS.iloc[0:0], warm=True) is None


@pytest.mark.parametrize("n,size,text", [(0, 0, "0 runs, 0 B"), (1, 512, "1 run, 512 B"),
                                         (3, 1536, "3 runs, 1.5 KiB"), (12, 5 * 2**30, "12 runs, 5.0 GiB")])
def test_the_stores_size_reads_as_runs_and_bytes(n, size, text):
    assert store_size_text(n, size) == text


# --- one run's configuration, mode and size ------------------------------------------------------------------------

# These runs were made before the bias knob: such a config reads as the vector bias the workload then made without a
# batch, a matrix one with it (ExperimentConfig.from_dict), so the config's own name says _vbias.
@pytest.mark.parametrize("name,text", [
    ("coldwarm_64_warm_eager", "` 64_bf16_warm_eager_vbias ` · 64² bf16 · vector bias · warm (10 calls) · eager · "
                               "schedule 0/0/3×1 · ` NVIDIA H200 `"),
    ("coldwarm_64_cold_eager", "` 64_bf16_cold_eager_vbias ` · 64² bf16 · vector bias · cold · eager · "
                               "schedule 0/0/3×1 · ` NVIDIA H200 `"),
    ("spine_64_warm_eager_b8", "` 64_bf16_warm_eager_b8 ` · 64² bf16 · batch 8 · matrix bias · warm (10 calls) · "
                               "eager · schedule 1/1/3×1 · ` NVIDIA H200 `"),
    ("sweep_4096_warm_reduce-overhead", "` 4096_bf16_warm_compile_reduce-overhead_vbias ` · 4096² bf16 · vector "
                                        "bias · warm (10 calls) · compile reduce-overhead · schedule 0/0/10×1 · "
                                        "` NVIDIA H200 `"),
])
def test_a_runs_configuration_on_one_line(store, name, text):
    assert config_summary(run_of(store, name)) == text


def test_a_cpu_run_of_another_workload_names_its_knobs_escaped_and_its_threads(tmp_path):
    cfg = ExperimentConfig.for_workload("attention", {"seq_len": 128}, dtype="fp32", device="cpu")
    run = Run("20261201-000000-attention-0001", tmp_path,
              {"name": cfg.name, "status": "ok", "config": cfg.to_dict(), "device": {"type": "cpu", "cpu_threads": 4}})
    assert config_summary(run) == (
        "` attention_b4_h8_s128_d64_causal_auto_fp32_cold_eager ` · attention · fp32 · batch 4, heads 8, "
        "seq\\_len 128, head\\_dim 64, causal True, backend auto · cold · eager · schedule 1/1/3×1 · ` cpu ` · "
        "4 CPU threads")
    assert run_size(run) == 128  # attention's sweep axis is seq_len
    assert mode_label(run) == "eager"  # from the config: no report needed


def test_an_imported_trace_is_named_by_its_file(store):
    assert config_summary(imported(store)) == "imported trace ` 64_fp32_warm_eager.json `"


@pytest.mark.parametrize("name", NAMES)
def test_mode_and_size_of_a_run_come_from_its_config(store, name):
    m = meta(name)["config"]
    run = run_of(store, name)
    assert mode_label(run) == {"off": "eager", "default": "default",
                               "reduce-overhead": "reduce-overhead"}[m["compile"]]
    assert run_size(run) == m["size"]


@pytest.mark.parametrize("name,want", [("sweep_4096_warm_eager", "eager"), ("sweep_4096_warm_compile", "compile"),
                                       ("sweep_4096_warm_reduce-overhead", "compile (CUDA graphs)")])
def test_an_imported_traces_mode_is_read_from_its_compiled_regions(tmp_path, name, want):
    run = RunStore(tmp_path / "runs").import_trace(APP / f"{name}.json", name="4096_imported")
    names = {e.get("name", "") for e in events(name)}
    regions = any(n.startswith("Torch-Compiled Region") for n in names)
    assert (regions, "cudaGraphLaunch" in names) == {"eager": (False, False), "compile": (True, False),
                                                     "compile (CUDA graphs)": (True, True)}[want]
    assert mode_label(run, report(run)) == want
    assert run_size(run) == 4096  # the leading number of its name
    with pytest.raises(ValueError, match="pass it"):
        mode_label(run)


@pytest.mark.parametrize("name,size", [("trace", None), ("sweep_64_warm_eager", None), ("8192_x", 8192)])
def test_an_imported_traces_size_is_the_leading_number_of_its_name(tmp_path, name, size):
    assert run_size(Run("20261201-000000-x-0001", tmp_path, {"name": name, "config": None})) == size


# --- the median step -----------------------------------------------------------------------------------------------

def plain_step_medians(name: str) -> dict:
    """Per step, by hand: CPU time, the union of the GPU ops launched in it, that of every GPU op clipped to its
    window over its time, its launch calls and its GPU ops; their medians over the steady state's steps (after the
    first, from 3 on); and the count of all steps."""
    every = cpu_steps(name)
    steps = steady(every)
    launched = {s["name"]: [] for s in steps}
    launches = {s["name"]: set() for s in steps}
    for op in gpu_ops_plain(name):
        la = launch_of(name, op)
        s = step_of(name, la["ts"]) if la else None
        if s is not None and s["name"] in launched:
            launched[s["name"]].append((op["ts"], op["ts"] + op["dur"]))
            launches[s["name"]].add(la["args"]["correlation"])
    frac = []
    for s in steps:
        a, b = s["ts"], s["ts"] + s["dur"]
        frac.append(union_us((max(a, o["ts"]), min(b, o["ts"] + o["dur"])) for o in gpu_ops_plain(name)
                             if o["ts"] < b and o["ts"] + o["dur"] > a) / s["dur"])
    return {"steps": len(every), "cpu": statistics.median(s["dur"] for s in steps),
            "busy": statistics.median(union_us(v) for v in launched.values()), "fraction": statistics.median(frac),
            "launches": statistics.median(len(v) for v in launches.values()),
            "gpu_ops": statistics.median(len(v) for v in launched.values())}


@pytest.mark.parametrize("name", NAMES)
def test_the_median_step_of_a_run_against_a_plain_scan(store, name):
    run = run_of(store, name)
    s = step_summary(run, report(run))
    want = plain_step_medians(name)
    assert list(s) == STEP_SUMMARY_COLUMNS
    assert (s["run_id"], s["name"], s["size"]) == (meta(name)["run_id"], meta(name)["name"], meta(name)["config"]["size"])
    assert s["steps"] == want["steps"] == meta(name)["config"]["active"] and s["has_gpu"] is True
    assert s["cpu_us_per_step"] == pytest.approx(want["cpu"], abs=TOL)
    assert s["gpu_busy_us_per_step"] == pytest.approx(want["busy"], abs=TOL)
    assert s["gpu_busy_fraction"] == pytest.approx(want["fraction"], abs=1e-4)
    assert (s["launches_per_step"], s["gpu_ops_per_step"]) == (want["launches"], want["gpu_ops"])


def test_a_cpu_trace_has_no_gpu_work_per_step(store):
    run = imported(store)
    evs = json.loads(CPU_TRACE.read_text())["traceEvents"]
    steps = [e for e in evs if e.get("ph") == "X" and e.get("cat") == "user_annotation"
             and e["name"].startswith("ProfilerStep#")]
    s = step_summary(run, report(run))
    assert (s["size"], s["mode"], s["steps"], s["has_gpu"]) == (64, "eager", len(steps), False)
    steps.sort(key=lambda e: e["ts"])
    assert s["cpu_us_per_step"] == pytest.approx(statistics.median(e["dur"] for e in steady(steps)), abs=TOL)
    # no GPU lane (the scan finds no kernel, memcpy or memset): nothing to count, not a count of 0
    assert not any(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in evs)
    gpu = (s["gpu_busy_us_per_step"], s["gpu_busy_fraction"], s["launches_per_step"], s["gpu_ops_per_step"])
    assert all(v != v for v in gpu)


def test_step_summaries_are_one_row_per_run_in_order(store):
    runs = [run_of(store, "sweep_8192_warm_eager"), imported(store), run_of(store, "sweep_64_warm_eager")]
    table = step_summaries((r, report(r)) for r in runs)
    assert list(table.columns) == STEP_SUMMARY_COLUMNS
    assert list(table["run_id"]) == [r.run_id for r in runs] and list(table["size"]) == [8192, 64, 64]
    assert list(table["has_gpu"]) == [True, False, True]
    assert list(step_summaries([]).columns) == STEP_SUMMARY_COLUMNS


def test_a_trace_without_steps_has_nan_medians(tmp_path):
    trace = tmp_path / "no_steps.json"
    evs = [e for e in json.loads(CPU_TRACE.read_text())["traceEvents"]
           if not str(e.get("name", "")).startswith("ProfilerStep#")]
    trace.write_text(json.dumps({"traceEvents": evs}))
    run = RunStore(tmp_path / "runs").import_trace(trace, name="no_steps")
    s = step_summary(run, report(run))
    assert s["steps"] == 0 and math.isnan(s["cpu_us_per_step"]) and math.isnan(s["gpu_busy_fraction"])
    assert s["size"] is None


# --- calibrations and the GEMM against the peak ----------------------------------------------------------------

def test_the_peaks_table_puts_the_datasheet_beside_what_was_measured():
    cpu = DevicePeaks(device="AMD EPYC", kind="cpu", driver=None, torch_version="2.13.0+cpu",
                      measured_at="2026-12-01T10:00:00+00:00", method="by hand", gemm_tflops={"fp32": 0.5},
                      gemm_tflops_median={"fp32": 0.25}, gemm_sizes={"fp32": 1024}, bandwidth_gbs=20.0,
                      bandwidth_gbs_median=18.0, copy_bytes=16 << 20, threads=2)
    t = peaks_frame([peaks(), cpu])
    assert list(t.columns) == ["device", "torch", "measured", "what", "measured best", "median", "unit", "datasheet"]
    assert t.drop(columns="datasheet").to_dict(orient="records") == [
        {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "measured": "2026-11-29T13:05", "what": "GEMM bf16 (8192³)",
         "measured best": 800.0, "median": 748.0, "unit": "TFLOP/s"},
        {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "measured": "2026-11-29T13:05", "what": "GEMM fp32 (4096³)",
         "measured best": 51.25, "median": 50.0, "unit": "TFLOP/s"},
        {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "measured": "2026-11-29T13:05",
         "what": "memory (copy of 2,048 MiB)", "measured best": 4210.0, "median": 4105.5, "unit": "GB/s"},
        {"device": "AMD EPYC", "torch": "2.13.0+cpu", "measured": "2026-12-01T10:00", "what": "GEMM fp32 (1024³)",
         "measured best": 0.5, "median": 0.25, "unit": "TFLOP/s"},
        {"device": "AMD EPYC", "torch": "2.13.0+cpu", "measured": "2026-12-01T10:00", "what": "memory (copy of 16 MiB)",
         "measured best": 20.0, "median": 18.0, "unit": "GB/s"},
    ]
    # NVIDIA's H200 datasheet (SXM, dense): 989.4 TFLOP/s bf16, 66.9 fp32, 4.8 TB/s; a CPU has none
    assert t["datasheet"].tolist() == pytest.approx([989.4, 66.9, 4800.0, math.nan, math.nan], nan_ok=True)
    assert peaks_frame([]).empty


def diagnosis_of(run: Run, p: DevicePeaks) -> DiagnosisReport:
    with open_trace(str(run.trace_path), engine="sqlite") as tp:
        return diagnose(tp, report(run), run.config, p, compute_capability=run.compute_capability)


@pytest.mark.parametrize("name,n", [("sweep_4096_warm_eager", 4096), ("sweep_8192_warm_eager", 8192),
                                    ("sweep_64_warm_eager", 64)])
def test_a_runs_gemm_against_the_peak_by_hand(store, name, n):
    run = run_of(store, name)
    g = gemm_name(name)
    durs = [e["dur"] for e in xs(name, "kernel") if e["name"] == g]  # one GEMM kernel per aten::mm
    us = statistics.fmean(durs)
    tflops = 2 * n ** 3 / us / 1e6
    [row] = gemm_vs_peak([(run, report(run), diagnosis_of(run, peaks(800.0)))]).to_dict(orient="records")
    assert (row["run"], row["run_id"], row["size"], row["mode"]) == (meta(name)["name"], run.run_id, n, "eager")
    assert (row["dtype"], row["kernel"]) == ("bf16", g)
    assert row["µs per call"] == pytest.approx(us, abs=TOL)
    assert row["tflops"] == pytest.approx(tflops, rel=1e-3)
    # the roof, by hand: bf16 operands read and the result written once, 2 bytes each, at the calibration's 4210 GB/s
    memory_roof = 2 * n ** 3 / (3 * n * n * 2) * 4210.0 / 1e3
    roof = min(800.0, memory_roof)
    assert row["compute_peak"] == 800.0 and row["roof"] == ("memory" if memory_roof < 800.0 else "compute")
    assert row["peak"] == pytest.approx(roof) and row["fraction_of_peak"] == pytest.approx(tflops / roof, rel=1e-3)


def test_the_gemm_with_the_most_total_time_is_the_runs_and_runs_without_one_are_left_out(store):
    cols = ["kind", "op", "kernel", "dtype", "batch", "m", "k", "n", "count", "time_us", "tflops", "peak", "roof",
            "compute_peak", "fraction_of_peak"]
    roof = pd.DataFrame([  # (the shape says which GEMM it is: two runs' largest can differ)
        ["gemm", "aten::mm", "k_short_many", "bf16", None, 32, 1024, 256, 10, 30.0, 500.0, 800.0, "compute", 800.0,
         0.625],  # 300 µs
        ["gemm", "aten::addmm", "k_long_few", "fp32", None, 32, 256, 1024, 2, 100.0, 40.0, 51.25, "compute", 51.25,
         0.78],   # 200 µs
        ["copy", "aten::copy_", "memcpy", None, None, None, None, None, 50, 90.0, None, 4210.0, "memory", None,
         0.5],  # no GEMM, however long
    ], columns=cols)
    a, b = run_of(store, "coldwarm_64_cold_eager"), run_of(store, "coldwarm_64_warm_eager")
    nothing = DiagnosisReport(pd.DataFrame(columns=cols), [], None)
    only_copy = DiagnosisReport(roof[roof["kind"] == "copy"], [], None)
    t = gemm_vs_peak([(a, None, DiagnosisReport(roof, [], None)), (b, None, nothing), (b, None, only_copy)])
    assert list(t.columns) == GEMM_VS_PEAK_COLUMNS
    assert t.to_dict(orient="records") == [
        {"run": "64_bf16_cold_eager", "run_id": a.run_id, "machine": "NVIDIA H200 on vm", "size": 64,
         "mode": "eager", "dtype": "bf16", "kernel": "k_short_many", "shape": "32×1024×256", "µs per call": 30.0,
         "tflops": 500.0, "peak": 800.0, "roof": "compute",
         "compute_peak": 800.0, "fraction_of_peak": 0.625, "peak_source": None}]
    assert gemm_vs_peak([]).empty


# --- the run facts the diagnosis needs (profiling_core.store) -------------------------------------------------

@pytest.mark.parametrize("device,cc", [({"compute_capability": "9.0"}, 9.0), ({"compute_capability": 8.6}, 8.6),
                                       ({"compute_capability": "n/a"}, None), ({}, None), ("cuda", None)])
def test_a_runs_compute_capability_is_read_from_its_device_facts(tmp_path, device, cc):
    assert Run("20261201-000000-x-0001", tmp_path, {"device": device}).compute_capability == cc
    assert Run("20261201-000000-x-0001", tmp_path, {}).compute_capability is None


def test_the_h200_runs_say_their_compute_capability(store):
    assert {run_of(store, n).compute_capability for n in NAMES} == {9.0}
    assert imported(store).compute_capability is None


def test_a_runs_peaks_are_the_newest_calibration_of_its_device_and_torch(tmp_path, store):
    book = PeakBook(tmp_path)
    older = peaks(700.0)
    newer = DevicePeaks(**{**older.to_dict(), "torch_version": "2.12.0+cu130", "measured_at": "2026-11-30T00:00:00",
                           "gemm_tflops": {"bf16": 810.0}})
    other = DevicePeaks(**{**older.to_dict(), "device": "NVIDIA A100-SXM4-80GB", "measured_at": "2026-12-01T00:00:00"})
    for p in (older, newer, other):
        book.save(p)
    run = run_of(store, "sweep_64_warm_eager")  # torch 2.11.0+cu130 on an NVIDIA H200
    assert book.for_run(run) == older  # its own torch's, though another torch's is newer
    any_torch = Run(run.run_id, run.run_dir, {**run.meta, "device": {"name": "NVIDIA H200"}})
    assert book.for_run(any_torch) == newer
    assert book.for_run(imported(store)) is None  # no device facts
    assert book.for_run(Run(run.run_id, run.run_dir, {"device": {"name": "NVIDIA B200"}})) is None
    assert book.for_run(Run(run.run_id, run.run_dir, {"device": {"name": 7}})) is None


def test_an_imported_training_trace_is_a_training_step_and_its_comparison_with_a_forward_one_says_so(tmp_path):
    """An imported trace has no config: what its steps run is read from the profiler's own annotations (the MI250
    training loop's backward and Optimizer.step), and a comparison with a forward trace names the difference."""
    from profiling_core.present import different_work, phase_summary, run_size_axis, step_kind
    st = RunStore(tmp_path / "runs")
    train = st.import_trace(DATA / "traces" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", name="minitoy")
    fwd = st.import_trace(CPU_TRACE, name="64_fp32_warm_eager")
    rt, rf = report(train), report(fwd)
    assert (step_kind(train, rt), step_kind(fwd, rf)) == ("train", "forward")
    assert (run_size_axis(train), run_size_axis(fwd)) == (None, "matmul_add size")  # the name's leading number
    said = different_work([("A", fwd, rf), ("B", train, rt)])
    assert said.startswith("A runs a forward pass per step and B a training step (forward, loss, backward, "
                           "optimizer step, zero_grad): their per-step times measure different work")
    assert different_work([("A", fwd, rf), ("B", fwd, rf)]) is None
    table = phase_summary([("A", rf), ("B", rt)])
    assert table["run"].unique().tolist() == ["B"]
    # (no zero_grad: the MI250 loop marks none, and a phase the trace never marks is not reported as zero)
    assert table["phase"].tolist() == ["forward", "backward", "optimizer", "other"]
    with pytest.raises(ValueError, match="has no config"):
        step_kind(train)


def test_a_setting_label_names_only_what_differs_between_runs():
    from profiling_core.present import setting_labels, setting_parts
    from test_machines import run_with
    from test_h200_app_traces import meta
    cold, warm, b8 = (run_with(meta(n)) for n in ("coldwarm_64_cold_eager", "coldwarm_64_warm_eager",
                                                  "spine_64_warm_eager_b8"))
    parts = [setting_parts(r, besides=("size", "mode")) for r in (cold, warm, b8)]
    assert parts[0]["warm-up"] == "cold" and parts[1]["warm-up"] == "warm (10 calls)"
    assert setting_labels(parts[:2]) == ["cold", "warm (10 calls)"]  # the same schedule, dtype, size: not named
    assert setting_labels(parts) == ["bias vector · cold · schedule 0/0/3×1",
                                     "bias vector · warm (10 calls) · schedule 0/0/3×1",
                                     "bias matrix · batch 8 · warm (10 calls) · schedule 1/1/3×1"]
    assert setting_labels([parts[1], parts[1]]) == ["", ""]
    assert "knob size" in setting_parts(cold) and "knob size" not in parts[0]


def test_a_warm_run_like_a_cold_one_shares_its_setting_but_for_warm_up_and_schedule():
    """The H200's cold 64 run: of the warm runs of size 64, the batch-8 one is newer but measures another setting;
    the one offered is the warm run of the same batch, bias and dtype (its schedule differs, as a cold run's must)."""
    from profiling_core.present import runs_table, setting_parts
    from test_machines import run_with
    from test_h200_app_traces import meta
    names = ["spine_64_warm_eager_b8", "coldwarm_64_warm_eager", "coldwarm_64_cold_eager"]  # newest first
    runs = {n: run_with(dict(meta(n), run_id=n)) for n in names}
    for n, r in runs.items():
        r.run_id = n
    table, _ = runs_table(runs.values())
    settings = {n: setting_parts(r, besides=("warm-up", "schedule")) for n, r in runs.items()}
    assert newest_run(table, warm=True, like="coldwarm_64_cold_eager") == "spine_64_warm_eager_b8"  # size and dtype
    assert newest_run(table, warm=True, like="coldwarm_64_cold_eager", settings=settings) == "coldwarm_64_warm_eager"


def test_a_chain_is_written_in_tree_order_each_kernel_under_the_call_that_launched_it():
    """Every line's parent in the text (the nearest line above it indented less) is its parent in a plain scan of
    the trace: the enclosing slice on the same thread, or for a GPU op the runtime call with its correlation; a
    training step's kernels are in the first lines, not after all its CPU rows."""
    import gzip
    from profiling_core.analyses import dispatch_chain
    from profiling_core.present import chain_lines
    for path, cap in ((DATA / "h200_app" / "sweep_64_warm_eager.json", None),
                      (DATA / "h200_train" / "app" / "lm_train_sgd_fp16_log.json.gz", 400)):
        raw = path.read_bytes()
        ev = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["traceEvents"]
        xs = [e for e in ev if e.get("ph") == "X"]
        launch = {e["args"]["correlation"]: e["name"] for e in xs if e.get("cat") in ("cuda_runtime", "cuda_driver")
                  and "correlation" in (e.get("args") or {})}
        gpu = {e["name"][:90]: launch.get(e["args"].get("correlation")) for e in xs
               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
        with open_trace(path, engine="sqlite") as s:
            chain = dispatch_chain(s)
        lines = chain_lines(chain, cap)
        stack: list[tuple[int, str]] = []
        gpu_lines = 0
        for line in lines:
            if line.startswith("… and"):
                continue
            body = line.lstrip(" └─")
            depth = (len(line) - len(line.lstrip(" "))) // 3
            name, where = body.rsplit("  [", 1)
            while stack and stack[-1][0] >= depth:
                stack.pop()
            if where.startswith("GPU"):
                gpu_lines += 1
                assert stack and stack[-1][1] == gpu[name], (path.name, line, stack[-1:])
            stack.append((depth, name))
        assert gpu_lines > 0, path.name
        assert len([x for x in lines if not x.startswith("…")]) == (len(chain) if cap is None else min(cap, len(chain)))


def test_a_spread_warning_names_a_size_as_a_whole_number():
    """A sweep's size column holds NaN for a run without one, so pandas reads its sizes as floats: the warning still
    names size 64, not 64.0."""
    from profiling_core.present import comparison_warnings
    points = pd.DataFrame({"size": [64.0, float("nan")], "mode": ["eager", "eager"], "n": [2, 1],
                           "cpu_us_per_step_spread_pct": [120.0, float("nan")]})
    [w] = comparison_warnings(points, ["size", "mode"])
    assert "size 64, mode eager (n=2: 120%)" in w


# --- names and traces built to break the summaries ------------------------------------------------------------------

def _imported(tmp_path, doc: dict, name: str = "64_fp32_warm_eager"):
    (tmp_path / "t.json").write_text(json.dumps(doc))
    run = RunStore(tmp_path / "runs").import_trace(tmp_path / "t.json", name=name)
    with open_trace(run.trace_path, engine="sqlite") as s:
        return run, analyze(s)


@pytest.mark.parametrize("name,size", [("²_fp32_warm_eager", None), ("①_x", None), ("٦٤_fp32_warm_eager", 64),
                                       ("64_fp32_warm_eager", 64)])
def test_a_run_name_of_any_digits_gives_a_size_or_none(tmp_path, name, size):
    """str.isdigit() takes "²" and "①", which int() refuses: a run named so raised ValueError out of every comparison
    page. A name's leading decimal number is its size (Arabic-Indic digits too); anything else gives none."""
    from profiling_core.present import run_size, step_summary
    run, rep = _imported(tmp_path, json.loads(CPU_TRACE.read_text()), name)
    assert run_size(run) == size and step_summary(run, rep)["size"] == size


def test_a_summary_s_median_step_leaves_out_an_empty_step_as_the_report_does(tmp_path):
    """An empty ProfilerStep after the CPU trace's three: the report's median CPU step leaves it out (it is no step of
    the loop; of the three, it reads those after the first), and the Runs page's summary took it in."""
    from profiling_core.present import step_summary
    doc = json.loads(CPU_TRACE.read_text())
    ev = doc["traceEvents"]
    steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    end = max(e["ts"] + e.get("dur", 0) for e in ev if isinstance(e.get("ts"), (int, float)))
    steps.sort(key=lambda e: e["ts"])
    ev.append({**steps[-1], "name": "ProfilerStep#99", "ts": end + 10, "dur": 1.0, "args": {}})
    run, rep = _imported(tmp_path, doc)
    s = step_summary(run, rep)
    assert s["cpu_us_per_step"] == pytest.approx(statistics.median(e["dur"] for e in steady(steps)))
    assert s["cpu_us_per_step"] == pytest.approx(rep.summary["cpu_step_median_us"]) and s["steps"] == 4


def test_a_graph_replayed_without_torch_compile_is_eager(tmp_path):
    """An imported trace that replays a CUDA graph in each step (torch.cuda.CUDAGraph.replay) and holds no compiled
    region: its mode is eager, not "compile (CUDA graphs)"."""
    from profiling_core.present import mode_label
    doc = json.loads(CPU_TRACE.read_text())
    for i, s in enumerate([e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]):
        doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": s["pid"],
                                   "tid": s["tid"], "ts": s["ts"] + 1.0, "dur": 2.0, "args": {"correlation": 900 + i}})
    run, rep = _imported(tmp_path, doc)
    assert int(rep.compile_breakdown["graph_launches"].sum()) == 3
    assert int(rep.compile_breakdown["compiled_regions"].sum()) == 0 and mode_label(run, rep) == "eager"


def test_a_name_with_a_newline_stays_on_its_line_of_the_chain():
    """An op named "my_op\\nProfilerStep#9  [...]" printed a second, unindented line that read as a step of its own."""
    from profiling_core.present import chain_lines
    chain = pd.DataFrame([
        {"id": 1, "parent_id": None, "name": "ProfilerStep#2", "start_ns": 0, "lane": "cpu",
         "category": "user_annotation", "dur_us": 10.0},
        {"id": 2, "parent_id": 1, "name": "my_op\nProfilerStep#9  [user_annotation, 0.0 µs]", "start_ns": 1,
         "lane": "cpu", "category": "cpu_op", "dur_us": 5.0},
        {"id": 3, "parent_id": 2, "name": "kernel", "start_ns": 2, "lane": "gpu", "category": "kernel", "dur_us": 1.0}])
    lines = chain_lines(chain)
    assert len(lines) == 3 and all("\n" not in x for x in lines)
    assert lines[1].startswith("   └─ my_op\\x0aProfilerStep#9")


def test_a_compiled_trace_without_steps_is_compiled(tmp_path):
    """The H200 sweep's compiled run with its ProfilerStep slices taken out (a profile without a schedule): its 10
    Torch-Compiled Region slices (a scan) are still there, and its mode read "eager" because the per-step compile
    breakdown is empty without steps."""
    from profiling_core.present import mode_label
    doc = json.loads((APP / "sweep_4096_warm_compile.json").read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    assert sum(str(e.get("name", "")).startswith("Torch-Compiled Region") for e in doc["traceEvents"]) == 10
    run, rep = _imported(tmp_path, doc, "sweep_4096_warm_compile")
    assert rep.steps.empty and mode_label(run, rep) == "compile"


def test_the_crossover_sentence_says_where_the_curves_cross_and_what_it_leaves_unmeasured():
    """The Overhead page's sentence, built where a notebook can build it too: measured sizes on either side, the
    interpolated size, and, where the sizes lie more than 2× apart, that those between were not measured."""
    from profiling_core.present import crossover_sentence
    far = {"below": 64, "above": 4096, "size": 812.4, "value_us": 40.0, "overtakes": True}
    said = crossover_sentence(far, "matmul_add size")
    assert said.startswith("GPU busy time per step overtakes CPU time per step between n = 64 and n = 4,096, near "
                           "n ≈ 812 by log-log interpolation (~40.0 µs per step); the sizes between were not measured")
    near = {"below": 2048, "above": 4096, "size": 3000.0, "value_us": 900.0, "overtakes": False}
    said = crossover_sentence(near, "attention seq_len")
    assert "falls below CPU time per step between seq_len = 2,048 and seq_len = 4,096" in said
    assert said.endswith("(~900.0 µs per step).")
    # the curves' crossing alone says no verdict: question 2's rule, run by run, does (bound_sentence)
    assert "bound" not in crossover_sentence(far, "matmul_add size") + said


# --- question 2's verdict along a sweep ----------------------------------------------------------------------------

def _curve(tmp_path, traces: dict):
    """Each trace imported under its name (its size the name's leading number), the runs' step summaries, and the
    sweep's points with question 2's verdict at each (as the Overhead page builds them)."""
    from profiling_core.present import sweep_bounds
    from profiling_core.run import sweep_points
    store = RunStore(tmp_path / "runs")
    runs = [store.import_trace(path, name=name) for name, path in traces.items()]
    per_run = step_summaries((r, report(r)) for r in runs)
    keys = ("size", "mode")
    pts = sweep_points(per_run, keys=keys, values=("cpu_us_per_step", "cpu_own_us_per_step", "gpu_busy_us_per_step"))
    return per_run, pts.merge(sweep_bounds(per_run, keys), on=list(keys))


def test_a_synchronizing_loop_is_compute_bound_where_its_curves_never_cross(tmp_path):
    """A loop that reads its result back with .item() every step (eight 4096² GEMMs, 0.5 ms of the CPU's own work:
    H200) waits for its GPU inside the step, so its CPU time per step holds all its GPU work and the two curves never
    cross, while question 2 finds the GPU setting the pace. The sweep's sentence said "extend the sizes to find the
    crossover"; it now gives question 2's verdict at each size, where it turns, and the wait that keeps the curves
    apart, all by the plain scan of the two traces."""
    from profiling_core.analyses import GPU_BOUND_AT
    from profiling_core.present import bound_sentence, charts
    from profiling_core.units import format_duration_us
    from test_copy_bound import scan
    small, big = DATA / "h200" / "64_bf16_warm_eager_b8.json", DATA / "h200_verdicts" / "readback_item_eager.json"
    per_run, pts = _curve(tmp_path, {"64_b8": small, "4096_item": big})
    rows = {n: scan(p) for n, p in ((64, small), (4096, big))}
    med = {n: {k: statistics.median(x[k] for x in r[1:]) for k in ("cpu", "gpu", "in_syncs")} for n, r in rows.items()}
    # by the scan: the GPU curve under the CPU curve at both sizes, the small step's GPU idle, the big one's GPU work
    # at least the CPU time less the wait in the .item()'s synchronize
    assert all(m["gpu"] < m["cpu"] for m in med.values())
    assert med[64]["gpu"] < GPU_BOUND_AT * (med[64]["cpu"] - med[64]["in_syncs"])
    assert med[4096]["gpu"] >= GPU_BOUND_AT * (med[4096]["cpu"] - med[4096]["in_syncs"])
    assert charts.crossover_points(pts).empty
    by = per_run.set_index("size")
    assert (by.loc[64, "bound"], by.loc[4096, "bound"]) == ("overhead-bound", "compute-bound")
    assert by.loc[4096, "cpu_own_us_per_step"] == pytest.approx(med[4096]["cpu"] - med[4096]["in_syncs"], abs=TOL)
    said = bound_sentence(pts, None)
    assert said.startswith("Question 2's rule (each run's GPU work per step against the CPU's own time) calls the "
                           "step overhead-bound at n = 64; compute-bound at n = 4,096: it turns compute-bound "
                           "between n = 64 and n = 4,096.")
    wait = med[4096]["cpu"] - med[4096]["in_syncs"]
    assert (f"at n = 4,096, {format_duration_us(med[4096]['in_syncs'])} of the step's "
            f"{format_duration_us(med[4096]['cpu'])} of CPU time, leaving {format_duration_us(wait)} of the CPU's own "
            f"against {format_duration_us(med[4096]['gpu'])} of GPU work.") in said


def test_question_2_s_verdict_along_a_sweep_is_each_run_s_own(tmp_path):
    """Each point's verdict is question 2's on that run (its finding's evidence), the point's runs agreeing or said
    as mixed; a full launch queue (the H200's fp16 4096² GEMMs: the GPU never waits for a launch, its busy time
    just under the CPU's) is compute-bound with its curves uncrossed and no wait to show, and the sentence sends
    the reader to question 2 on that run; a CPU run has no verdict to give."""
    from profiling_core.explain import findings
    from profiling_core.present import bound_sentence
    from test_copy_bound import scan
    queue = DATA / "h200_diag" / "fp16_4096.json"
    per_run, pts = _curve(tmp_path, {"4096_q": queue, "4096_again": queue, "64_cpu": CPU_TRACE})
    rows = scan(queue)
    cpu, gpu = (statistics.median(x[k] for x in rows[1:]) for k in ("cpu", "gpu"))
    assert gpu < cpu and statistics.median(x["in_syncs"] for x in rows[1:]) == 0.0
    f = {x.id: x for x in findings(report_of(str(queue)))}
    assert f["q2.bound"].evidence["bound"] == "compute-bound"
    cpu = {x.id: x for x in findings(report_of(str(CPU_TRACE)))}["q2.bound"].evidence
    assert per_run["bound"].tolist() == ["compute-bound", "compute-bound", cpu["bound"]]  # (the CPU's rule)
    assert per_run["cpu_work_share"].iloc[2] == pytest.approx(cpu["cpu_work_share_median"], abs=1e-3)
    assert per_run["cpu_work_share"].iloc[:2].isna().all() and per_run["cpu_own_us_per_step"].iloc[2] != 0
    pts = pts[pts["size"] == 4096]  # (the page draws CPU runs as a curve of their own)
    said = bound_sentence(pts, None)
    assert said.startswith("Question 2's rule (each run's GPU work per step against the CPU's own time) calls the "
                           "step compute-bound at n = 4,096.")
    assert said.endswith("At n = 4,096 the curves read otherwise than the rule: question 2 on that run says why.")
    mixed = pts.assign(bound=["mixed (1 compute-bound, 1 overhead-bound)" if s == 4096 else b
                              for s, b in zip(pts["size"], pts["bound"])])
    assert "calls the step mixed (1 compute-bound, 1 overhead-bound) at n = 4,096." in bound_sentence(mixed, None)
    two = pd.concat([pts, pts.assign(size=8192)], ignore_index=True)
    assert "compute-bound at every size of this curve (n = 4,096 and n = 8,192)." in bound_sentence(two, None)
    assert bound_sentence(pts.assign(bound=None), None) is None


CPU_SWEEP = DATA / "cpu" / "sweep"


def _work_shares(path) -> list[float]:
    """Each steady-state step's share in the ops that do the work, by a plain scan of a CPU trace of the study's
    matmul + add: the own time of each ``aten::mm`` and ``aten::add`` (its duration less the ops nested in it on its
    thread: ``aten::mm``'s ``aten::resolve_conj``) over the step's duration, for the steps after the first."""
    ev = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])[1:]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    shares = []
    for st in steps:
        work = 0.0
        for w in ops:
            if w["name"] in ("aten::mm", "aten::add") and st["ts"] <= w["ts"] < st["ts"] + st["dur"]:
                inner = sum(o["dur"] for o in ops if o is not w and o["tid"] == w["tid"]
                            and w["ts"] <= o["ts"] and o["ts"] + o["dur"] <= w["ts"] + w["dur"])
                work += w["dur"] - inner
        shares.append(work / st["dur"])
    return shares


def test_a_cpu_sweep_gets_question_2_s_cpu_verdict_at_each_size(tmp_path):
    """The Overhead page gave a sweep recorded on the CPU no verdict at all (the CPU rule lived in question 2's
    finding alone). The study's matmul + add on a 2-core VM at n = 8, 64 and 512, one thread, 10 warm-up calls, 5
    recorded steps: by a plain scan its work ops take well under half of each step at 8 and 64 and nearly all of it
    at 512, so the rule (compute-bound from half the step) turns between 64 and 512; each point's verdict and share
    are the scan's, and the sentence says them."""
    from profiling_core.analyses import CPU_MATH_BOUND_AT
    from profiling_core.present import bound_sentence
    traces = {f"{n}_cpu": CPU_SWEEP / f"{n}_fp32_warm_eager.json" for n in (8, 64, 512)}
    per_run, _ = _curve(tmp_path, traces)
    from profiling_core.run import sweep_points
    pts = sweep_points(per_run, keys=("size", "mode"), values=("cpu_us_per_step", "cpu_own_us_per_step",
                                                               "cpu_work_share", "gpu_busy_us_per_step"))
    from profiling_core.present import sweep_bounds
    pts = pts.merge(sweep_bounds(per_run, ("size", "mode")), on=["size", "mode"])
    by = per_run.set_index("size")
    for n, path in zip((8, 64, 512), traces.values()):
        shares = _work_shares(path)
        assert len(shares) == 4
        want = "compute-bound" if statistics.median(shares) >= CPU_MATH_BOUND_AT else "overhead-bound"
        assert by.loc[n, "bound"] == want
        assert by.loc[n, "cpu_work_share"] == pytest.approx(statistics.median(shares), abs=0.002)
        assert not by.loc[n, "has_gpu"] and pd.isna(by.loc[n, "gpu_busy_us_per_step"])
    assert [by.loc[n, "bound"] for n in (8, 64, 512)] == ["overhead-bound", "overhead-bound", "compute-bound"]
    said = bound_sentence(pts, None)
    assert said.startswith("Question 2's rule on a CPU (each run's work ops' own time against its step: compute-bound "
                           "from 50% of the step) calls the step overhead-bound at n = 8 and n = 64; compute-bound at "
                           "n = 512: it turns compute-bound between n = 64 and n = 512.")
    shares = {n: statistics.median(_work_shares(p)) for n, p in zip((8, 64, 512), traces.values())}
    assert said.endswith(f" The work ops took {100 * shares[8]:.1f}% of a step at n = 8, {100 * shares[64]:.1f}% of a "
                         f"step at n = 64, {100 * shares[512]:.1f}% of a step at n = 512.")
    assert "GPU" not in said


def test_a_steps_gpu_busy_share_counts_the_work_queued_before_the_recording():
    """The H200's 4096² fp32 run: every recorded GPU op starts after the last step ends (a plain scan), the GPU busy
    all along with work launched before the recording. Question 2 says it was busy 100% of each step's window; the
    Overhead and Runs pages' share (``step_summary``) said 0%. It is now question 2's figure."""
    from conftest import scan_trace
    from profiling_core import findings
    path = DATA / "h200_diag" / "fp32_tf32_off.json"
    ev = scan_trace(path)
    steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
             and e.get("cat") != "gpu_user_annotation"]
    ops = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert max(e["ts"] + e["dur"] for e in steps) < min(e["ts"] for e in ops)
    with open_trace(path, engine="sqlite") as s:
        rep = analyze(s)
    q2 = {f.id: f for f in findings(rep)}["q2.bound"]
    assert q2.evidence["busy_in_window"] == 1.0 and "busy 100.0%" in q2.text
    row = step_summary(Run("r", path.parent, json.loads(path.with_name("fp32_tf32_off.meta.json").read_text())), rep)
    assert row["gpu_busy_fraction"] == q2.evidence["busy_in_window"]


def test_imported_traces_of_a_batched_and_a_plain_gemm_are_two_settings(tmp_path):
    """Two imported H200 traces at size 64, one batch 8 (its steps run aten::bmm) and one plain (aten::mm; a plain
    scan of each step's ops): the sweep pages took them for repeats of one setting, as an imported trace's parts
    were its size and mode alone. Its parts now say whether its steps' GEMMs are batched (not the op: compiled code
    runs addmm where eager runs mm); two imports of one trace still share a setting."""
    from conftest import scan_trace
    from profiling_core.present import setting_labels, setting_parts
    h200 = DATA / "h200"
    for name, op in (("64_bf16_warm_eager_b8", "aten::bmm"), ("64_bf16_cold_eager", "aten::mm")):
        ev = scan_trace(h200 / f"{name}.json")
        steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
                 and e.get("cat") != "gpu_user_annotation"]
        gemms = {e["name"] for e in ev if e.get("ph") == "X" and e["name"] in ("aten::mm", "aten::bmm")
                 and any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)}
        assert gemms == {op}
    s = RunStore(tmp_path / "runs")
    runs = [s.import_trace(h200 / f"{n}.json", name=n)
            for n in ("64_bf16_warm_eager_b8", "64_bf16_cold_eager", "64_bf16_cold_eager")]
    parts = [setting_parts(r, report(r), besides=("size",)) for r in runs]
    assert setting_labels(parts[:2]) == ["batched GEMM", "unbatched GEMM"]
    assert parts[1] == parts[2]


def test_a_setting_names_only_the_knobs_that_apply_to_it():
    """A decode block has no prompt length and a forward pass no optimizer: the config still holds their defaults
    (seq_len 128, optimizer adamw), and the setting named them ("transformer_block · mode decode · … seq_len 128")."""
    from profiling_core import ExperimentConfig
    from profiling_core.present import setting_parts
    from test_machines import run_with
    from test_h200_app_traces import meta
    cfg = ExperimentConfig.for_workload("transformer_block", {"mode": "decode", "kv_len": 64}, device="cpu")
    assert cfg.workload_knobs["seq_len"] == 128 and cfg.workload_knobs["optimizer"] == "adamw"  # (the defaults)
    parts = setting_parts(run_with(dict(meta("coldwarm_64_cold_eager"), config=cfg.to_dict())))
    assert parts["knob kv_len"] == "kv_len 64" and parts["knob mode"] == "mode decode"
    assert "knob seq_len" not in parts and "knob optimizer" not in parts and "knob log_loss" not in parts


def test_imported_traces_of_two_gpus_are_two_settings(tmp_path):
    """An H200 trace and an H100 trace imported (no meta: an unknown machine each) at sizes 64 and 4095 were one
    curve on the Overhead page, with a crossover between the two GPUs. Their traces name their GPUs
    (``deviceProperties``, a plain scan); the setting's ``where`` says it."""
    import gzip
    from profiling_core import analyze, open_trace
    from profiling_core.present import setting_parts
    from profiling_core.store import RunStore
    store = RunStore(tmp_path)
    out = {}
    for name, path in (("64_bf16_warm_eager", DATA / "h200" / "64_bf16_warm_compile_ro.json"),
                       ("4095_bf16_warm_eager", DATA / "h100" / "mm4095_ro_ro.json.gz")):
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        gpu = {d["name"] for d in doc["deviceProperties"]}
        run = store.import_trace(path, name=name)
        with open_trace(str(path), engine="sqlite") as s:
            out[name] = (gpu, setting_parts(run, analyze(s), besides=("size",))["where"])
    assert out["64_bf16_warm_eager"][0] == {"NVIDIA H200"}
    assert out["4095_bf16_warm_eager"][0] == {"NVIDIA H100 80GB HBM3"}
    assert out["64_bf16_warm_eager"][1].endswith("(NVIDIA H200)")
    assert out["4095_bf16_warm_eager"][1].endswith("(NVIDIA H100 80GB HBM3)")
