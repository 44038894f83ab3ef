"""Verdicts on traces recorded with ``with_stack=True``: the profiler records a Python stack for each op, which adds
CPU time to every op and none to the GPU's work, so question 2's overhead-bound verdict on such a trace may be the
recording's (``q2_bound.stack_note``). Checked on an H100 and an H200 run recorded both ways (the same GPU work
within 2%, 2.7 and 2.6 times the CPU time per step with stacks) and on traces built to sit on either side of the
note's threshold; every figure against a plain scan of the JSON."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

import verdict_traces as vt
from conftest import scan_trace
from profiling_core import ExperimentConfig, analyze, findings, open_trace

H100 = Path(__file__).parent / "data" / "h100"
H200 = Path(__file__).parent / "data" / "h200_stack"
CPU = Path(__file__).parent / "data" / "cpu" / "64_fp32_warm_eager.json"
NOTE = "This trace recorded a Python stack for each op (with_stack=True)"


def q2(path, config=None):
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return r, next(f for f in findings(r, config=config) if f.id == "q2.bound")


def steady_scan(path) -> tuple[float, float]:
    """(median CPU µs, median GPU µs) of the steps after the first, by a plain scan: each ``ProfilerStep#N``
    slice's duration, and the GPU ops (kernels, copies, memsets) whose ``correlation`` is that of a runtime call
    inside its window (one after the other on one stream here: their durations add up)."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = sorted((e for e in ev if str(e["name"]).startswith("ProfilerStep#")
                    and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"])[1:]
    kernels = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.setdefault(e["args"]["correlation"], []).append(float(e["dur"]))
    cpu, gpu = [], []
    for s in steps:
        calls = [e for e in ev if e.get("cat") == "cuda_runtime" and s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
        cpu.append(float(s["dur"]))
        gpu.append(sum(sum(kernels.get(c["args"].get("correlation"), [])) for c in calls))
    return statistics.median(cpu), statistics.median(gpu)


@pytest.mark.parametrize("folder,name", [(H100, "mm4095_ro_ro"), (H200, "attn_hd100_flash_eager")])
def test_a_gpu_run_with_stacks_is_told_its_verdict_may_be_the_recordings(folder, name):
    """The same run recorded without and with stacks, on an H100 (a compiled matmul, reduce-overhead) and on an H200
    (flash attention, eager): the GPU work is the same, the CPU time per step more than twice as long, and the
    verdict turns from compute-bound to overhead-bound. Question 2 says so on the stack trace, with the CPU time per
    step at which that GPU work is compute-bound (the GPU work itself: these steps block in no call), and says
    nothing of it on the plain one."""
    plain, stack = folder / f"{name}.json.gz", folder / f"{name}_stack.json.gz"
    (cpu_a, gpu_a), (cpu_b, gpu_b) = steady_scan(plain), steady_scan(stack)
    assert gpu_b == pytest.approx(gpu_a, rel=0.02) and cpu_b > 2 * cpu_a and gpu_a > cpu_a and gpu_b < cpu_b
    _, fa = q2(plain)
    _, fb = q2(stack)
    assert fa.title == "Compute-bound" and NOTE not in fa.text
    assert fb.title == "Overhead-bound"
    assert (f"{NOTE}, which adds CPU time to every op and none to the GPU's work, so this verdict may be the "
            f"recording's: the same GPU work makes the steps compute-bound at {gpu_b:,.1f} µs of CPU time per step "
            "or less.") in fb.text
    assert fb.evidence["compute_bound_at_cpu_us"] == pytest.approx(gpu_b, rel=1e-3)


def test_a_step_blocked_in_copies_counts_its_wait_toward_the_line():
    """Pageable copies on the H100 with stacks: the steps block in the copies, and the bound rule takes that wait out
    of the CPU time, so the CPU time at which the same GPU work paces the steps is the GPU work plus the wait; the
    copies outlast the rest of the GPU's work, so copy-bound."""
    path = H100 / "copy_pageable_eager_stack.json.gz"
    r, f = q2(path)
    ss = r.summary["steady_state"]
    assert f.title == "Overhead-bound" and ss["copy_us_per_step"] >= ss["other_us_per_step"] > 0
    at = ss["gpu_us_per_step"] + ss["sync_wait_us_per_step"]
    assert ss["sync_wait_us_per_step"] > 0 and at < ss["cpu_us_per_step"]
    assert (f"the same GPU work makes the steps copy-bound at {at / 1000:.3g} ms of CPU time per step or less, its "
            "blocked time included.") in f.text


def _steps(path: Path, gpu_us: float, cpu_us: float, stack: bool, wait: bool = False) -> Path:
    """Four steps, each: one op launching a kernel of ``gpu_us``, then CPU work up to ``cpu_us`` in all (with
    ``wait``, a cudaStreamSynchronize first, after 50 µs: the step then blocks until the kernel ends); the document
    says ``with_stack`` when ``stack``."""
    t = vt.Trace()
    for n in range(4):
        def body(t):
            b = t.t
            t.cpu("aten::mm", 20.0, children=lambda t: t.launch(vt.BF16_GEMM, gpu_us, call_us=5.0))
            if wait:
                t.cpu("aten::relu", 50.0)
                t.sync()
            t.cpu("aten::add", max(1.0, cpu_us - (t.t - b) - 4.0))
        t.step(n + 1, body)
    path = t.write(path)
    doc = json.loads(path.read_text())
    if stack:
        doc["with_stack"] = 1
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("gpu_us,noted", [(300.0, True), (150.0, True), (100.0, False)])
def test_the_note_speaks_only_near_the_line(tmp_path, gpu_us, noted):
    """Steps of 500 µs of CPU time launching ``gpu_us`` of GPU work, recorded with stacks: overhead-bound all three.
    At 300 and 150 µs of GPU work (0.6 and 0.3 of the CPU time) the recording's cost could be what keeps them from
    compute-bound; at 100 µs (0.2, below the quarter the note reads from) the steps would stay overhead-bound with
    four times less CPU time, so nothing is said. The same steps without stacks: never."""
    for stack in (True, False):
        path = _steps(tmp_path / f"t{stack}.json", gpu_us, 500.0, stack)
        cpu, gpu = steady_scan(path)
        assert gpu == pytest.approx(gpu_us) and cpu == pytest.approx(500.0, abs=1.0)
        r, f = q2(path)
        assert f.title == "Overhead-bound"
        assert (NOTE in f.text) == (stack and noted)
        if stack and noted:
            assert f"compute-bound at {gpu_us:,.1f} µs of CPU time per step or less." in f.text


def test_the_line_counts_the_wait_the_rule_counts(tmp_path):
    """A step that launches 300 µs of GPU work, then blocks in a synchronize until it ends, then works on: the wait
    by a plain scan is what the bound rule takes out, so the steps are compute-bound at up to the GPU work plus that
    wait, and overhead-bound above it (the rule itself, at both figures)."""
    from profiling_core.analyses.steps import bound
    path = _steps(tmp_path / "t.json", 300.0, 700.0, True, wait=True)
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    kernel_ends = sorted(float(e["ts"]) + float(e["dur"]) for e in ev if e.get("cat") == "kernel")
    syncs = sorted(float(e["ts"]) for e in ev if e["name"] == "cudaStreamSynchronize")
    wait = statistics.median([end - ts for ts, end in zip(syncs, kernel_ends)][1:])  # (blocked while the GPU worked)
    r, f = q2(path)
    ss = r.summary["steady_state"]
    assert ss["sync_wait_us_per_step"] == pytest.approx(wait, abs=0.01)
    at = 300.0 + wait
    assert f.title == "Overhead-bound" and at < ss["cpu_us_per_step"]
    assert f"compute-bound at {at:,.1f} µs of CPU time per step or less, its blocked time included." in f.text
    kw = dict(gpu_us=300.0, sync_wait_us=wait, gpu_ops=1, copy_us=0.0, other_us=300.0)
    assert bound(cpu_us=at, **kw) == "compute-bound" and bound(cpu_us=at + 1.0, **kw) == "overhead-bound"


def test_on_a_cpu_the_note_names_the_overhead(tmp_path):
    """A CPU run's overhead-bound verdict, the document marked with_stack, or the run's config saying so: the note,
    without a GPU line; the same trace unmarked: none."""
    r, f = q2(CPU)
    assert f.title == "Overhead-bound" and NOTE not in f.text
    doc = json.loads(CPU.read_text())
    doc["with_stack"] = 1
    marked = tmp_path / "t.json"
    marked.write_text(json.dumps(doc))
    want = (f"{NOTE}, which adds CPU time to every op and its dispatch: part of the overhead here may be the "
            "recording's. Read the bound from a run without with_stack")
    assert want in q2(marked)[1].text
    assert want in q2(CPU, ExperimentConfig(device="cpu", with_stack=True))[1].text


@pytest.mark.parametrize("name", ["stack_workers_eager.json.gz", "input_workers_eager.json"])
def test_a_training_step_recorded_with_stacks_keeps_its_forward(name):
    """The same H200 training loop recorded with and without Python stacks. With stacks, the Python frames opened
    before each step hold its ops, so the step slice parents none of them: the forward read by position found no
    slice (0 µs, no kernels) and its 40 ATen ops went to ``other``. By a plain scan: the step's thread's outermost
    slices that are no Python frame, start in the step and end before its first backward range, less the
    DataLoader's batch and the optimizer's ranges."""
    path = Path(__file__).parent / "data" / "h200_verdicts" / name
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    want = {}
    for s in (e for e in xs if e["name"].startswith("ProfilerStep#")):
        b, e_ = s["ts"], s["ts"] + s["dur"]
        bw = min(e["ts"] for e in xs if e["name"].startswith("autograd::engine::evaluate_function")
                 and b <= e["ts"] < e_)
        mine = sorted((e for e in xs if (e["pid"], e["tid"]) == (s["pid"], s["tid"]) and e is not s
                       and e.get("cat") != "python_function" and b <= e["ts"] and e["ts"] + e["dur"] <= bw),
                      key=lambda e: (e["ts"], -e["dur"]))
        top, end = [], -1.0
        for e in mine:
            if e["ts"] >= end:
                top.append(e)
                end = e["ts"] + e["dur"]
        fwd = [e for e in top if not e["name"].startswith(("enumerate(DataLoader)#", "Optimizer."))]
        want[int(s["name"].split("#")[1])] = sum(e["dur"] for e in fwd)
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
    ph = r.phases[r.phases["phase"] == "forward"]
    got = dict(zip(ph["step"].astype(int), ph["cpu_us"].astype(float)))
    assert set(got) == set(want) and all(v > 500 for v in want.values())
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=0.01), k
