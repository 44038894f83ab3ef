"""torch.compile's compiler at work inside the recorded steps: a cold compiled run compiles in its first step (on a
CPU, and under max-autotune on an H100, where it also benchmarks candidate GEMMs on the GPU), a cold
reduce-overhead run records its CUDA graph in the second. Every figure here is checked against a plain scan of the
trace's JSON: the compiler's ranges are the events named ``… (dynamo_timed)``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import scan_trace
from profiling_core import analyze, diagnose, findings, open_trace
from profiling_core.analyses import basis_steps

DATA = Path(__file__).parent / "data"
CPU_COLD = DATA / "cpu" / "compile_cold.json.gz"  # 64² fp32 matmul + add, compile default, no warm-up, 0/0/3
AT_64 = DATA / "h100" / "autotune_64_cold_ma.json.gz"  # 64² bf16, max-autotune, no warm-up, 0/0/3
AT_4096 = DATA / "h100" / "autotune_4096_cold_manc.json.gz"  # 4096² bf16, max-autotune-no-cudagraphs, cold
WARM_64 = DATA / "h100" / "autotune_64_warm_manc.json.gz"  # 64², max-autotune-no-cudagraphs, 10 warm-up calls
COLD_DEFAULT = DATA / "h100" / "cold_64_compile.json.gz"  # 64² bf16, compile default, no warm-up, 0/0/3
COLD_RO = DATA / "h100" / "cold_64_ro.json.gz"  # 64² bf16, reduce-overhead, no warm-up, 0/0/3
_REGION = ("Torch-Compiled Region", "## Call CompiledFxGraph")


def config_of(path: Path) -> dict:
    return json.loads(Path(str(path).replace(".json.gz", ".meta.json")).read_text())["config"]


def run(path, with_config=True):
    cfg = config_of(path) if with_config else None
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s, config=cfg)
        return r, {f.id: f for f in findings(r, config=cfg)}, diagnose(s, r, cfg, None)


def scan(path):
    """From the JSON alone: the step slices in time order, the compiler's ranges merged per thread, and each
    CPU event's (tid, ts, dur, name)."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = sorted((e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")
                    and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"])
    ranges: dict = {}
    for e in ev:
        if str(e.get("name", "")).endswith(" (dynamo_timed)"):
            ranges.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    merged = {}
    for tid, xs in ranges.items():
        out = []
        for b, e in sorted(xs):
            if out and b <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([b, e])
        merged[tid] = out
    return ev, steps, merged


def inside(merged, tid, ts) -> bool:
    return any(b <= ts < e for b, e in merged.get(tid, ()))


def compile_us_by_scan(steps, merged) -> list[float]:
    """Per step: the µs of its window that the compiler's ranges (of the step's thread: one process here) cover."""
    out = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        out.append(sum(max(0.0, min(e, hi) - max(b, lo)) for xs in merged.values() for b, e in xs))
    return out


@pytest.mark.parametrize("path", [CPU_COLD, AT_64, AT_4096, WARM_64, COLD_DEFAULT, COLD_RO],
                         ids=lambda p: p.name.split(".")[0])
def test_each_steps_compile_time_is_the_time_its_window_spends_in_the_compilers_ranges(path):
    r, _f, _d = run(path)
    _ev, steps, merged = scan(path)
    assert r.steps["compile_us"].tolist() == pytest.approx(compile_us_by_scan(steps, merged), abs=0.01)
    if path is WARM_64:  # compiled in the warm-up: nothing of the compiler in the recorded steps
        assert not merged and (r.steps["compile_us"] == 0).all()
    else:  # the first step compiled: nearly all of it (the JSON: over 97% of its window; 94–95% on the default and
        # reduce-overhead runs, whose first step also sets up CUDA outside the compiler)
        assert r.steps["compile_us"].iloc[0] > (0.9 if path in (COLD_DEFAULT, COLD_RO) else 0.97) * steps[0]["dur"]


def test_a_step_that_records_a_cuda_graph_is_no_step_of_the_steady_state():
    """max-autotune (CUDA graphs) cold: step 0 compiles, step 1 records the graph (`CUDAGraphNode.record` and the
    syncs around it, 16.7 ms), step 2 replays it (0.38 ms). The steady state is step 2, both compiling steps left out
    as the compiler's; the sync rule, which read step 1's synchronisations as the loop's, is silent; the GPU-starved
    rule quotes step 2's time."""
    r, f, d = run(AT_64)
    _ev, steps, merged = scan(AT_64)
    assert [round(s["dur"]) for s in steps] == [3547855, 16670, 381]
    comp = compile_us_by_scan(steps, merged)
    assert comp[1] > 1000  # the recording, from the JSON
    assert basis_steps(r.steps)["step"].tolist() == [2]
    ss = r.summary["steady_state"]
    # the steps the compiler ran in are left out, the first (step 0, its compile) among them
    compiled = [int(s["name"].split("#")[1]) for s, us in zip(steps, comp) if us > 0]
    assert compiled == [0, 1]
    assert ss["compile_steps"] == compiled and ss["cpu_us_per_step"] == pytest.approx(steps[2]["dur"], abs=0.01)
    q2 = f["q2.bound"]
    assert "steps 0, 1 left out, as torch.compile's compiler ran in them" in q2.text
    assert "380.7 µs of CPU time" in q2.text
    got = {x.rule: x for x in d.diagnoses}
    assert "sync_in_step" not in got
    assert "380.7 µs of CPU time" in got["gpu_starved"].text


def launches_by_compiler(path, step, cats=("kernel", "gpu_memcpy", "gpu_memset")) -> dict:
    """From the JSON: per GPU op name (of ``cats``), the ops launched in ``step``'s window by a runtime call (paired by
    correlation) that starts inside the compiler's ranges on its thread and outside every compiled region."""
    ev, _steps, merged = scan(path)
    regions: dict = {}
    for e in ev:
        if str(e.get("name", "")).startswith(_REGION):
            regions.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    lo, hi = step["ts"], step["ts"] + step["dur"]
    out: dict = {}
    for e in ev:
        if e.get("cat") not in cats:
            continue
        c = calls.get(e.get("args", {}).get("correlation"))
        if c is None or not lo <= c["ts"] < hi or not inside(merged, c["tid"], c["ts"]):
            continue
        if any(b <= c["ts"] < x for b, x in regions.get(c["tid"], ())):
            continue
        out[e["name"]] = out.get(e["name"], 0) + 1
    return out


@pytest.mark.parametrize("path", [AT_64, AT_4096], ids=["64_ma", "4096_manc"])
def test_the_gpu_work_the_compiler_launched_while_it_compiled_is_counted_as_its_own(path):
    r, f, _d = run(path)
    _ev, steps, _m = scan(path)
    want = launches_by_compiler(path, steps[0])
    cl = r.compiler_launches
    got = cl[cl["step"] == 0].groupby("name")["count"].sum().to_dict()
    assert got == want
    # max-autotune's benchmarks: Triton's candidates (triton_mm) and cuBLAS's, by the hundred
    assert want["triton_mm"] > 1000
    q3 = f["q3.cold_start"].text
    assert f"launched {sum(want.values()):,} GPU ops of its own" in q3 and "triton_mm" in q3
    # question 9: every kernel is the compiled code's, the compiler's or eager code's, each once
    ev9 = f["q9.compile"].evidence
    kernels = [e for e in scan_trace(path) if e.get("cat") == "kernel"]
    assert ev9["kernel_launches"] == len(kernels)
    assert ev9["kernel_launches_from_compiler"] == sum(launches_by_compiler(path, steps[0], ("kernel",)).values()) \
        + sum(cl.loc[(cl["step"] != 0) & (cl["category"] == "kernel"), "count"])
    assert "by its compiler while it compiled" in f["q9.compile"].text


@pytest.mark.parametrize("path", [CPU_COLD, AT_64, AT_4096], ids=["cpu", "64_ma", "4096_manc"])
@pytest.mark.parametrize("with_config", [True, False], ids=["config", "trace"])
def test_question_3_names_the_compile_as_the_first_steps_cost(path, with_config):
    r, f, _d = run(path, with_config)
    _ev, steps, merged = scan(path)
    q3 = f["q3.cold_start"]
    comp = compile_us_by_scan(steps, merged)[0]
    extra = steps[0]["dur"] - sorted(s["dur"] for s in steps[1:])[len(steps[1:]) // 2 - (len(steps[1:]) % 2 == 0)]
    assert q3.evidence["compile_us"] == pytest.approx(comp, abs=0.01)
    assert "This is a cold start" in q3.text and "torch.compile compiled in this step" in q3.text
    assert "nothing in the trace names the extra's cause" not in q3.text
    assert comp > 0.9 * extra
    # the calls the compiler made are not listed as the step's own cold start
    for name in q3.evidence["first_step_only_calls"]:
        assert name != "cudaDeviceSynchronize"


def test_gemm_ops_inside_the_compiler_are_not_the_workloads():
    """The CPU run's aten::mm/addmm ops inside the compiler's ranges ran on fake tensors while it traced; the GEMM
    figures are the three the steps ran (one per step), and on the H100 the 4096² run's three, not the 106 cuBLAS
    benchmarks of max-autotune."""
    for path, n in ((CPU_COLD, 3), (AT_4096, 3)):
        r, _f, _d = run(path)
        ev, _steps, merged = scan(path)
        gemms = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm")]
        # the innermost (an addmm that calls itself again through a dispatch mode counts once, as the inner one)
        gemms = [e for e in gemms if not any(o is not e and o["tid"] == e["tid"] and e["ts"] <= o["ts"]
                                             and o["ts"] + o["dur"] <= e["ts"] + e["dur"] for o in gemms)]
        theirs = [e for e in gemms if inside(merged, e["tid"], e["ts"])]
        assert len(gemms) - len(theirs) == n and len(theirs) > 0
        assert len(r.gemm_throughput) == n
    g = r.gemm_throughput  # (the 4096² run: every op timed by its kernels)
    assert (g["device"] == "gpu").all() and g["tflops"].min() > 500


def test_question_8_reads_a_kernel_of_the_workload_not_a_benchmark():
    for path in (AT_64, AT_4096):
        _r, f, _d = run(path)
        q8 = f["q8.variance"]
        assert q8.evidence["kernel"] not in ("triton_mm",) and "FillFunctor" not in q8.evidence["kernel"]
        assert "that only torch.compile's compiler launched while it compiled" in q8.text
    # the 4096² GEMM's kernel is also the one cuBLAS's benchmarks ran: the figures say so
    _r, f, _d = run(AT_4096)
    kernels = [e for e in scan_trace(AT_4096) if e.get("cat") == "kernel" and e["name"] == f["q8.variance"].evidence[
        "kernel"]]
    assert f["q8.variance"].evidence["count"] == len(kernels) == 109
    assert "106 of its 109 launches were torch.compile's compiler's" in f["q8.variance"].text


def test_the_cpu_run_reads_the_steps_after_the_compile():
    """A cold compiled run on a CPU: step 0 compiled (1.1 s); question 2 reads the other two, and the work ops it
    names are the steps' (the compiled graph's call, aten::addmm), not the compiler's fake-tensor ops."""
    r, f, _d = run(CPU_COLD)
    _ev, steps, _m = scan(CPU_COLD)
    q2 = f["q2.bound"]
    assert "step 0 left out, as torch.compile's compiler ran in it" in q2.text
    assert q2.evidence["cpu_step_median_us"] == pytest.approx((steps[1]["dur"] + steps[2]["dur"]) / 2, abs=0.01)
    assert set(q2.evidence["work_ops"]) <= {"aten::addmm", "aten::copy_", "aten::add"} | {
        n for n in q2.evidence["work_ops"] if n.startswith("## Call CompiledFxGraph")}


def test_of_two_steps_one_that_compiled_the_other_is_the_steady_state(tmp_path):
    """The 4096² cold run cut after its second step: two steps, the first compiling. The steady state is the other
    one alone (before, the median of two steps was their mean, 2.1 s, for a step of 294 µs)."""
    import gzip
    doc = json.loads(gzip.decompress(AT_4096.read_bytes()))
    cut = next(e["ts"] for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#2"
               and e.get("cat") != "gpu_user_annotation")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e.get("ph") == "X" and e.get("ts", 0) >= cut)]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(doc))
    r, f, _d = run(path, with_config=False)
    _ev, steps, _m = scan(path)
    assert len(steps) == 2
    ss = r.summary["steady_state"]
    assert ss["basis_steps"] == [1] and ss["compile_steps"] == [0]
    assert ss["cpu_us_per_step"] == pytest.approx(steps[1]["dur"], abs=0.01)
    assert "In steady state (step 1; step 0 left out, as torch.compile's compiler ran in it" in f["q2.bound"].text


@pytest.mark.parametrize("path", [CPU_COLD, AT_64, AT_4096, COLD_DEFAULT, COLD_RO],
                         ids=["cpu", "64_ma", "4096_manc", "64_default", "64_ro"])
def test_questions_9_and_10_read_the_steps_without_the_compile(path):
    """Their per-step figures leave out the steps in which the compiler ran, as question 2's steady state does: the
    same CPU time per step in both (before, question 10 gave the 64² run's 16.67 ms recording step as its
    median)."""
    _r, f, _d = run(path)
    _ev, steps, merged = scan(path)
    comp = [k for k, us in enumerate(compile_us_by_scan(steps, merged)) if us > 0]
    plain = sorted(s["dur"] for k, s in enumerate(steps) if k not in comp)
    median = (plain[(len(plain) - 1) // 2] + plain[len(plain) // 2]) / 2
    q10 = f["q10.compile_cost"]
    assert q10.evidence["compile_steps"] == comp == f["q9.compile"].evidence["compile_steps"]
    assert q10.evidence["cpu_step_median_us"] == pytest.approx(median, abs=0.01)
    if "cpu_us_per_step" in f["q2.bound"].evidence:
        assert f["q2.bound"].evidence["cpu_us_per_step"] == pytest.approx(median, abs=0.01)
    else:  # (the CPU's question 2)
        assert f["q2.bound"].evidence["cpu_step_median_us"] == pytest.approx(median, abs=0.01)
    assert f"step{'s' if len(comp) > 1 else ''} {', '.join(map(str, comp))} left out" in q10.text


def test_the_summarys_per_step_medians_leave_the_compile_steps_out():
    """The Profile and Trace lab pages' per-step metrics, the Runs and Overhead pages' points (``step_summary``) and
    the command line's line: the 64² cold max-autotune run's "CPU per step (median) 16.67 ms" was its recording step
    (the JSON: 3.55 s, 16.67 ms, 0.38 ms); they read the step that ran no compiler, as question 2 does."""
    from profiling_core.present import step_summary
    from profiling_core.store import Run
    r, f, _d = run(AT_64)
    _ev, steps, _m = scan(AT_64)
    assert r.summary["measured_steps"] == [2]
    assert r.summary["cpu_step_median_us"] == pytest.approx(steps[2]["dur"], abs=0.01)
    assert r.summary["gpu_step_median_us"] == pytest.approx(f["q2.bound"].evidence["gpu_us_per_step"])
    row = step_summary(Run("r", AT_64.parent, json.loads(AT_64.with_name("autotune_64_cold_ma.meta.json")
                                                         .read_text())), r)
    assert row["cpu_us_per_step"] == pytest.approx(steps[2]["dur"], abs=0.01)
    # its compiled regions per step: those of the step it reads (the summary summed every step's regions, 3, over
    # the one step it reads: "compiled regions per step 3")
    ev, _steps, _m = scan(AT_64)
    lo, hi = steps[2]["ts"], steps[2]["ts"] + steps[2]["dur"]
    regions = [e for e in ev if str(e["name"]).startswith("Torch-Compiled Region") and lo <= e["ts"] < hi]
    assert len(regions) == 1 and r.summary["compiled_regions_per_step"] == 1


def test_a_warm_runs_step_has_one_median_in_the_summary_and_the_questions():
    """The H200's warm 64² eager run of the cold-vs-warm pair: steps of 3,305.6, 246.4 and 129.4 µs (the JSON), the
    first holding the profiler's start-up. Question 2's steady state read the two after the first (187.9 µs), the
    summary and question 10 all three (246.4 µs): one step, two medians. All read the steady state's steps now."""
    path = DATA / "h200_app" / "coldwarm_64_warm_eager.json"
    _ev, steps, _m = scan(path)
    assert len(steps) == 3
    steady = (steps[1]["dur"] + steps[2]["dur"]) / 2
    r, f, _d = run(path, with_config=False)
    assert r.summary["cpu_step_median_us"] == pytest.approx(steady, abs=0.01)
    assert f["q2.bound"].evidence["cpu_us_per_step"] == pytest.approx(steady, abs=0.01)
    assert f["q10.compile_cost"].evidence["cpu_step_median_us"] == pytest.approx(steady, abs=0.01)
    assert "(the 2 steps after the first; the first may carry start-up effects" in f["q10.compile_cost"].text


CASES = DATA / "cpu" / "compile_cases"  # CPU recordings of recompiles (make_compile_recordings.py there)


def _steps_us(path) -> list[float]:
    return [s["dur"] for s in scan(path)[1]]


def test_question_3_compares_the_first_step_with_the_steps_that_did_not_compile():
    """A warm loop whose shape changes at step 2 recompiles there (194 ms of a step): question 3 read it as the other
    steps' noise ("the steps' own noise is larger than the difference") and said nothing of the first step."""
    path = CASES / "recompile_mid.json.gz"
    _r, f, _d = run(path, with_config=False)
    _ev, steps, merged = scan(path)
    comp = compile_us_by_scan(steps, merged)
    assert [k for k, us in enumerate(comp) if us > 0] == [2] and comp[2] > 0.9 * steps[2]["dur"]
    others = sorted(s["dur"] for k, s in enumerate(steps) if k not in (0, 2))
    q3 = f["q3.cold_start"]
    assert q3.evidence["other_steps_median_us"] == pytest.approx((others[1] + others[2]) / 2, abs=0.01)
    assert "(step 2 left out, as torch.compile's compiler ran in it" in q3.text and "noise" not in q3.text
    # a cold run that compiles again later: "the later steps ran the code it compiled" was not so
    _r, f, _d = run(CASES / "cold_then_recompile.json.gz", with_config=False)
    assert "the compiler ran again in step 2." in f["q3.cold_start"].text


def test_a_frame_dynamo_gave_up_on_is_not_said_to_have_run_eagerly_all_along():
    """dynamic=False and a new shape every step: steps 0–6 each compile and run the compiled code, in step 7 Dynamo
    tries once more and gives up (the JSON: a compiler range, no compiled region), and steps 8–11 run eagerly behind
    its cache lookup. Questions 9 and 10 said "No torch.compile rows … it ran eagerly"."""
    path = CASES / "recompile_static_every.json.gz"
    _r, f, _d = run(path, with_config=False)
    ev, steps, merged = scan(path)
    comp = compile_us_by_scan(steps, merged)
    assert [k for k, us in enumerate(comp) if us > 0] == list(range(8))
    assert [k for k, st in enumerate(steps) if any(e["name"].startswith("Torch-Compiled Region")
                                                    and st["ts"] <= e["ts"] < st["ts"] + st["dur"] for e in ev)] \
        == list(range(7))
    late = [e for e in ev if e["name"] == "TorchDynamo Cache Lookup" and e["ts"] >= steps[8]["ts"]]
    assert len(late) == 4 and not any(e["name"].startswith("Torch-Compiled Region") and e["ts"] >= steps[8]["ts"]
                                      for e in ev)
    for q in ("q9.compile", "q10.compile_cost"):
        text = f[q].text
        assert "ran no compiled region, only Dynamo's cache lookup (4 TorchDynamo Cache Lookups)" in text
        assert "No torch.compile rows" not in text
        assert ("torch.compile ran compiled code only in steps 0, 1, 2, 3, 4, 5, 6, each of which also ran its "
                "compiler") in text and "; in step 7 its compiler ran, but no compiled code; the other 4 steps" in text
    # question 2's GEMM rate is the eager steps' calls (the first call of each new graph left out with its step)
    mm = [e for e in ev if e["name"] == "aten::mm" and e["ts"] >= steps[8]["ts"]]
    rates = sorted(2 * d[0][0] * d[0][1] * d[1][1] / e["dur"] / 1e3 for e in mm for d in [e["args"]["Input Dims"]])
    assert len(rates) == 4
    assert f["q2.bound"].evidence["gemm_gflops_median"] == pytest.approx((rates[1] + rates[2]) / 2, abs=0.01)


def test_steps_that_all_compile_are_said_to_be_compiling():
    """Every recorded step recompiles (the limit raised): question 2 called 99.9% of each step framework overhead
    and pointed the GEMMs' 0.47 GFLOP/s at stalled CPU ops; the steps are compiling."""
    path = CASES / "recompile_all.json.gz"
    _r, f, d = run(path, with_config=False)
    _ev, steps, merged = scan(path)
    comp = compile_us_by_scan(steps, merged)
    assert all(us > 0 for us in comp)
    c = sorted(comp[1:])  # (the steady state's steps: the 5 after the first)
    said = f"a median {c[2] / 1000:.2f} ms a step"
    for q in ("q2.bound", "q10.compile_cost"):
        assert "torch.compile's compiler ran in every step (it compiled again each time)" in f[q].text
        assert said in f[q].text
    assert "CPU ops stalled" not in f["q2.bound"].text and "Each is the first call of a graph" in f["q2.bound"].text


def test_the_compilers_syncs_lazy_loading_and_copies_are_not_the_steps():
    """On the H100's cold max-autotune runs: question 7 read the autotuner's synchronisations as the step's own,
    question 3 blamed lazy module loading that happened while the compiler loaded its candidates, question 9 said
    aten::addmm copied the bias in steps that ran a Triton template, and its benchmark kernels had no category."""
    from profiling_core.analyses import gpu_op_category
    _r, f, _d = run(AT_64)
    ev, steps, merged = scan(AT_64)
    syncs = [e for e in ev if e["name"] in ("cudaDeviceSynchronize", "cudaStreamSynchronize")]
    theirs = [e for e in syncs if inside(merged, e["tid"], e["ts"])]
    q7 = f["q7.sync"]
    assert q7.evidence["compiler_syncs"] == len(theirs) > 100
    assert q7.evidence["dur_us"] == pytest.approx(max(e["dur"] for e in syncs if e not in theirs), abs=0.01)
    assert "The 106 device-to-device copies aten::addmm launched were all the compiler's" in f["q9.compile"].text
    _r, f, _d = run(AT_4096)
    ev, steps, merged = scan(AT_4096)
    lazy = [e for e in ev if e["name"] in ("Lazy Function Loading", "Runtime Triggered Module Loading")]
    # (Kineto writes them on a thread of their own: they lie inside the compiler's ranges by time)
    assert lazy and all(any(b <= e["ts"] < x for xs in merged.values() for b, x in xs) for e in lazy)
    assert "lazy module loading" not in f["q3.cold_start"].text
    assert gpu_op_category("triton_mm", "kernel") == "gemm" == gpu_op_category("triton_bmm", "kernel")


def test_question_4_reads_the_steps_launches_not_the_compilers():
    """The 4096² cold run's 4,951 launch pairs are the compiler's benchmarks but for 9: question 4's "median 968.4
    µs" was theirs. The workload's, from the JSON (each op against its launch call by correlation): 17.3 µs."""
    _r, f, _d = run(AT_4096)
    ev, _steps, merged = scan(AT_4096)
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    waits = sorted(g["ts"] - c["ts"] for g in ev if g.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                   for c in [calls.get(g.get("args", {}).get("correlation"))]
                   if c is not None and not inside(merged, c["tid"], c["ts"]))
    q4 = f["q4.offset"]
    assert len(waits) == q4.evidence["pairs"] == 9
    assert q4.evidence["median_us"] == pytest.approx(waits[4], abs=0.01)
    assert q4.evidence["compiler_pairs"] == 4942
    assert "4,942 GPU ops launched inside torch.compile's compiler ranges" in q4.text


def test_a_recompile_in_a_warm_runs_first_step_is_no_cold_start():
    """Compiled at 64 rows before the recording and called with 96 rows from the first recorded step: the region is
    ``Torch-Compiled Region: 0/1``, the frame's second compile. Question 3, with no config to ask, called it a cold
    start."""
    path = CASES / "warm_recompile_first.json.gz"
    ev, steps, merged = scan(path)
    regions = {e["name"] for e in ev if e["name"].startswith("Torch-Compiled Region")}
    assert regions == {"Torch-Compiled Region: 0/1"} and compile_us_by_scan(steps, merged)[0] > 0
    _r, f, _d = run(path, with_config=False)
    q3 = f["q3.cold_start"]
    assert "This is no cold start (from the trace: its compiled region, Torch-Compiled Region: 0/1," in q3.text
    assert q3.evidence["cold_start"] is False and "torch.compile compiled in this step" in q3.text


def test_the_roofline_judges_the_steps_copies_not_the_benchmarks():
    """The 4096² cold run's 109 copies of the bias (32 MiB): 106 were launched by the autotuner's cuBLAS runs inside
    the compiler's ranges, 3 by the steps' addmm (the JSON, by correlation). The roofline's copy row averaged all 109."""
    s = open_trace(AT_4096, engine="sqlite")
    r = analyze(s)
    rows = diagnose(s, r, None, None).roofline
    ev, _steps, merged = scan(AT_4096)
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in
             e.get("args", {})}
    dtod = [g for g in ev if str(g.get("name", "")).startswith("Memcpy DtoD")]
    mine = [g for g in dtod if not inside(merged, calls[g["args"]["correlation"]]["tid"],
                                          calls[g["args"]["correlation"]]["ts"])]
    bias = [g for g in dtod if g["args"]["bytes"] == 4096 * 4096 * 2]  # (the roofline's row: a kind and a size)
    assert len(bias) == 109 and len(mine) == 3 and all(g in bias for g in mine)
    [copy] = rows[rows["kind"] == "copy"].to_dict("records")
    assert copy["count"] == 3 and copy["time_us"] == pytest.approx(sum(g["dur"] for g in mine) / 3, abs=1e-3)


def test_the_for_loop_optimizers_cost_is_the_steady_states():
    """A warm training loop whose step 1 recompiles (a new batch size): the optimizer took 364.2, 564.8 and 403.4 µs
    in steps 0–2 (its ``Optimizer.step#Adam.step`` ranges, from the JSON). The for-loop rule gave 484.1 µs, the mean
    of steps 1 and 2; the steady state is step 2 alone."""
    path = CASES / "tr3_recompile_step1.json.gz"
    ev, steps, merged = scan(path)
    opt = [e["dur"] for s in steps for e in ev if e["name"].startswith("Optimizer.step#")
           and s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
    assert [k for k, us in enumerate(compile_us_by_scan(steps, merged)) if us > 0] == [1]
    _r, _f, d = run(path, with_config=False)
    [x] = [x for x in d.diagnoses if x.rule == "unfused_optimizer"]
    assert f"{opt[2]:.1f} µs of CPU time per step" in x.text and f"{(opt[1] + opt[2]) / 2:.1f} µs" not in x.text


def test_question_10_reads_the_replays_of_the_steps_it_measures():
    """The cold max-autotune run compiles in step 0 (where the compiled code's first call, CUDA graph trees' warm-up,
    runs its kernels one by one), records its graph in step 1 and replays it in step 2. Question 10 read the
    launches of all three: "part replayed (3 GPU ops), part launched kernel by kernel (7 kernels)"; the step it
    measures launches one graph and one copy of its input, nothing else (the JSON: every GPU op of step 2 by the
    call that launched it)."""
    _r, f, _d = run(AT_64)
    ev, steps, _merged = scan(AT_64)
    calls = {e["args"]["correlation"]: e["name"] for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    lo, hi = steps[2]["ts"], steps[2]["ts"] + steps[2]["dur"]
    launched = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and lo <= e["ts"] < hi}
    by_call: dict = {}
    for e in ev:
        c = e.get("args", {}).get("correlation")
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and c in launched:
            by_call[calls[c]] = by_call.get(calls[c], 0) + 1
    assert by_call == {"cudaGraphLaunch": 1, "cudaLaunchKernel": 1}
    q10 = f["q10.compile_cost"].text
    assert ("the compiled code's GPU work is replayed from a CUDA graph (cudaGraphLaunch: a median 1 GPU op per step), "
            "after its inputs are copied in (aten::_foreach_copy_)") in q10
    assert "kernel by kernel" not in q10


@pytest.mark.parametrize("with_config", [True, False], ids=["config", "trace"])
def test_a_cpu_trace_does_not_say_a_slow_first_step_was_no_cold_start(with_config):
    """The CPU's cold eager run: its first step took 31× the others (the JSON), and a CPU trace has no runtime call
    that a cold start makes. Without the run's config question 3 said "The trace shows no cold start"; it now says
    that a CPU trace cannot tell, and its evidence says neither yes nor no. With the config (no warm-up) it is a cold
    start."""
    path = DATA / "cpu" / "eager_cold.json.gz"
    _r, f, _d = run(path, with_config=with_config)
    _ev, steps, _merged = scan(path)
    assert steps[0]["dur"] > 10 * sorted(s["dur"] for s in steps[1:])[0]
    q3 = f["q3.cold_start"]
    assert "no cold start" not in q3.text and "CUDA" not in q3.text
    if with_config:
        assert q3.evidence["cold_start"] is True and "No warm-up (the run's config has no warm-up)" in q3.text
    else:
        assert q3.evidence["cold_start"] is None and "A CPU trace cannot tell a cold start" in q3.text


def test_a_default_compiles_copies_are_not_called_benchmarks():
    """A cold default compile on the H100: inside the compiler's ranges its first step launches 48 copies (the JSON:
    their launch calls sit in compiler ranges; 24 of them under ``_recursive_joint_graph_passes``, its pattern
    passes moving tensors to the GPU). Question 3 glossed them "under max-autotune, its benchmarks of candidate
    kernels", which a default compile runs none of; it says so only where the trace holds an autotuning range."""
    path = COLD_DEFAULT
    ev, steps, merged = scan(path)
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    lo, hi = steps[0]["ts"], steps[0]["ts"] + steps[0]["dur"]
    ours = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and (c := calls.get(e.get("args", {}).get("correlation"))) is not None
            and lo <= c["ts"] < hi and inside(merged, c["tid"], c["ts"])]
    assert len(ours) == 48 and all(e["cat"] == "gpu_memcpy" for e in ours)
    assert not any("autotun" in str(e["name"]) for e in ev if str(e["name"]).endswith(" (dynamo_timed)"))
    _r, f, _d = run(path)
    q3 = f["q3.cold_start"].text
    assert "in them it launched 48 GPU ops of its own (" in q3 and "benchmark" not in q3
    _r, f, _d = run(AT_64)  # (max-autotune: addmm_template_autotuning's benchmarks)
    assert "; under max-autotune, its benchmarks of candidate kernels)" in f["q3.cold_start"].text


def test_staging_copies_are_weighed_against_the_gemms_of_the_same_steps():
    """The cold reduce-overhead run on the H100: the step the per-step figures read (step 2) replays the GEMM from its
    CUDA graph and copies one input in before it (the JSON: each kernel by its launch call's step). The rule said
    the staging copies "cost more than the GEMMs (0.73 µs per step)": it summed the copies of steps 1 and 2 against
    the one GEMM the roofline could size (step 0's, spread over three steps)."""
    ev, steps, _m = scan(COLD_RO)
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    lo, hi = steps[2]["ts"], steps[2]["ts"] + steps[2]["dur"]
    mine = [e for e in ev if e.get("cat") == "kernel" and (c := calls.get(e["args"].get("correlation")))
            and lo <= c["ts"] < hi]
    gemm = sum(e["dur"] for e in mine if e["name"].startswith("nvjet"))
    copy = sum(e["dur"] for e in mine if "multi_tensor_apply" in e["name"])
    assert 0 < copy < gemm
    _r, _f, d = run(COLD_RO)
    assert not any("staging copies" in x.text for x in d.diagnoses)


@pytest.mark.parametrize("path", [COLD_RO, AT_64])
def test_a_sync_inside_the_compiled_graphs_call_is_not_the_steps_own_code(path):
    """The cold CUDA-graph runs' longest synchronising call outside the compiler's ranges sits in step 1, under the
    compiled graph's call (``## Call CompiledFxGraph``) of the step that recorded the CUDA graph: question 7 said it was
    "made by the step's own code", as of a ``.item()`` in the loop. It says where it was made, and that the step is one
    the per-step figures leave out. A sync of the loop's own code (the BERT trace's, a plain scan: under no compiled
    call) is still the step's own."""
    ev, steps, merged = scan(path)
    syncs = [e for e in ev if e["name"] == "cudaDeviceSynchronize" and not inside(merged, e["tid"], e["ts"])]
    longest = max(syncs, key=lambda e: e["dur"])
    around = [e["name"] for e in ev if e["tid"] == longest["tid"] and e is not longest
              and e["ts"] <= longest["ts"] and longest["ts"] + longest["dur"] <= e["ts"] + e["dur"]]
    assert any(n.startswith("## Call CompiledFxGraph") for n in around)
    (step,) = [s for s in steps if s["ts"] <= longest["ts"] < s["ts"] + s["dur"]]
    assert step["name"] == "ProfilerStep#1" and compile_us_by_scan([step], merged)[0] > 0  # (it recorded a graph)
    _r, f, _d = run(path)
    q7 = f["q7.sync"]
    assert q7.evidence["dur_us"] == pytest.approx(longest["dur"], abs=0.01) and q7.evidence["in_compiled_call"]
    assert "made by the step's own code" not in q7.text
    assert ("a call inside step 1, made inside a call of the torch.compile'd graph" in q7.text
            and "step 1 left out, as torch.compile's compiler ran in it" in q7.text)
    bert = DATA / "traces" / "gaunernst_bert-small-uncased__1016001.json.gz"
    with open_trace(bert, engine="sqlite") as s:
        q7 = next(x for x in findings(analyze(s)) if x.id == "q7.sync")
    assert "made by the step's own code" in q7.text and "in_compiled_call" not in q7.evidence


def test_the_roofline_finds_the_gemm_a_cold_max_autotune_run_replays():
    """The cold max-autotune run's steady step replays a CUDA graph holding Inductor's Triton template GEMM
    (``triton_tem_fused_addmm_0``): no CPU op recorded its shapes, so its FLOPs come from the run's config (the
    study's one GEMM per step). The roofline counted every GEMM kernel of the trace against that one per step,
    the first step's 1,696 ``triton_mm`` and 106 cuBLAS benchmark runs among them, and left the run without a GEMM
    row (the Overhead page's GEMM-against-peak table skipped it). The JSON: step 2 launched one GEMM kernel; the
    template ran 3 times in the trace."""
    ev, steps, _merged = scan(AT_64)
    lo, hi = steps[2]["ts"], steps[2]["ts"] + steps[2]["dur"]
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    in_step = [k for k in kernels if lo <= calls[k["args"]["correlation"]]["ts"] < hi
               and ("gemm" in k["name"].lower() or "_mm" in k["name"] or "addmm" in k["name"])]
    assert [k["name"] for k in in_step] == ["triton_tem_fused_addmm_0"]
    assert sum(k["name"].startswith("triton_mm") for k in kernels) == 1696
    tem = [k["dur"] for k in kernels if k["name"] == "triton_tem_fused_addmm_0"]
    _r, _f, d = run(AT_64)
    [g] = d.roofline[d.roofline["kind"] == "gemm"].to_dict("records")
    assert len(tem) == 3
    assert (g["kernel"], g["flops_from"], g["flops"], g["count"]) == ("triton_tem_fused_addmm_0", "config",
                                                                       2 * 64 ** 3, 3)
    assert g["time_us"] == pytest.approx(sum(tem) / 3, abs=1e-3)
    assert g["tflops"] == pytest.approx(2 * 64 ** 3 / (sum(tem) / 3) / 1e6, rel=1e-6)
    _r, _f, d = run(AT_64, with_config=False)  # without the config nothing says the template's shapes
    assert (d.roofline["kind"] == "gemm").sum() == 0
