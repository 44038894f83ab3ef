"""GPU work that a trace holds no launch call for: work queued before the profiler began recording, which a trace
taken from a running loop starts with (TraceLens' H100 Qwen trace: its one step waits 13.4 ms in
cudaDeviceSynchronize for 509 such ops). No step counts it as its GPU work, so where a step was blocked on it, or
the GPU ran it inside a step's window, question 2 says so beside the figures it would otherwise leave unexplained
(the GPU busy 91.8% of an overhead-bound step). Every figure is checked against a plain scan of the JSON."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import verdict_traces as vt
from conftest import scan_trace
from test_analyses import _union
from profiling_core import analyze, findings, open_trace

QWEN = Path(__file__).parent / "data" / "traces" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
SYNCS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")


def scan(path) -> dict[int, dict]:
    """Per ProfilerStep#N (the CPU slice): its window, the µs in which the GPU ran ops whose correlation no runtime
    call carries (clipped to the window), and of that the µs inside the synchronize calls that start in it."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    launched = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in (e.get("args") or {})}
    early = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ev
             if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
             and (e.get("args") or {}).get("correlation") not in launched]

    def inside(b, e):
        return _union([(max(x, b), min(y, e)) for x, y in early if x < e and y > b])

    out = {}
    for s in ev:
        if s.get("cat") == "user_annotation" and str(s["name"]).startswith("ProfilerStep#"):
            b, e = float(s["ts"]), float(s["ts"]) + float(s["dur"])
            waits = sum(inside(float(c["ts"]), float(c["ts"]) + float(c["dur"])) for c in ev
                        if c["name"] in SYNCS and b <= float(c["ts"]) < e)
            out[int(s["name"].split("#")[1])] = {"window": e - b, "in_step": inside(b, e), "in_waits": waits}
    return out


def us_of(text: str) -> float:
    value, unit = text.split()
    return float(value.replace(",", "")) * {"µs": 1.0, "ms": 1e3, "s": 1e6}[unit]


def q2(path) -> tuple:
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return r, next(f for f in findings(r) if f.id == "q2.bound")


@pytest.mark.parametrize("path", [QWEN], ids=["qwen_h100"])
def test_the_steps_count_the_work_queued_before_the_recording_as_a_plain_scan_does(path):
    r, _ = q2(path)
    by_scan = scan(path)
    assert set(by_scan) == set(r.steps["step"])
    for row in r.steps.itertuples():
        want = by_scan[int(row.step)]
        assert row.unlaunched_in_step_us == pytest.approx(want["in_step"], abs=0.01)
        assert row.unlaunched_wait_us == pytest.approx(want["in_waits"], abs=0.01)
        assert row.unlaunched_wait_us <= row.sync_wait_us


def test_a_one_step_trace_that_waits_on_earlier_work_says_so_with_its_figures():
    r, f = q2(QWEN)
    want = scan(QWEN)[6]
    assert want["in_waits"] == pytest.approx(13379.03, abs=0.01)  # the 509 ops queued before the recording began
    m = re.search(r"; ([\d.,]+ [µm]?s) of it on work launched before the profiler began recording, whose launch calls "
                  r"the trace does not hold and no step counts as its GPU work\)", f.text)
    assert m, f.text
    assert us_of(m.group(1)) == pytest.approx(want["in_waits"], abs=5.0)
    share = re.search(r"the GPU was busy ([\d.]+)% \(([\d.]+)% of the window on that earlier work\)", f.text)
    assert share, f.text
    assert float(share.group(2)) == pytest.approx(100 * want["in_step"] / want["window"], abs=0.05)
    assert f.evidence["unlaunched_wait_us_per_step"] == pytest.approx(want["in_waits"], abs=0.01)


def test_a_step_blocked_on_earlier_work_built_to_break_it(tmp_path):
    path = vt.earlier_work(tmp_path / "early.json", earlier_us=5000.0, sync=True)
    want = scan(path)[1]
    assert want["in_waits"] > 4000  # the step waited for the earlier kernel in its synchronize call
    r, f = q2(path)
    m = re.search(r"; ([\d.,]+ [µm]?s) of it on work launched before the profiler began recording", f.text)
    assert m, f.text
    assert us_of(m.group(1)) == pytest.approx(want["in_waits"], abs=5.0)
    assert "of the window on that earlier work" in f.text or f.label != "overhead-bound"


def test_earlier_work_beside_a_step_that_never_waits_is_named_where_its_busy_share_is_said(tmp_path):
    path = vt.earlier_work(tmp_path / "beside.json", earlier_us=150.0, sync=False, kernels=8, kernel_us=10.0)
    want = scan(path)[1]
    assert want["in_waits"] == 0 and want["in_step"] > 0
    r, f = q2(path)
    assert r.summary["steady_state"]["bound"] == "overhead-bound", f.text
    assert "blocked" not in f.text and "that earlier work" not in f.text
    share = re.search(r"was busy ([\d.]+)% \(([\d.]+)% of the window on work launched before the profiler began "
                      r"recording, whose launch calls the trace does not hold\)", f.text)
    assert share, f.text
    assert float(share.group(2)) == pytest.approx(100 * want["in_step"] / want["window"], abs=0.05)


def test_a_gpu_busy_with_earlier_work_is_no_full_queue_of_the_steps_own(tmp_path):
    """Built to break the rule's other test: a 404 µs step that launches 8 kernels of 10 µs behind 400 µs of work
    queued before the recording. The GPU never waits for a launch (it runs the earlier work, then the step's), yet
    the step's own work is a fifth of its CPU time and its launch calls are quick: overhead-bound. The same step
    whose launch queue is full (each call held until a slot frees) is compute-bound: its launch calls took the CPU's
    time beyond its GPU work."""
    path = vt.earlier_work(tmp_path / "quick.json", earlier_us=400.0, sync=False, kernels=8, kernel_us=10.0)
    r, f = q2(path)
    [row] = r.cpu_vs_gpu.itertuples()
    assert row.gpu_starved_share <= 0.01 and row.gpu_to_cpu < 0.25  # never starved, a fifth of the CPU's time
    assert r.summary["steady_state"]["bound"] == "overhead-bound", f.text
    full = vt.earlier_work(tmp_path / "full.json", earlier_us=400.0, sync=False, kernels=8, kernel_us=60.0,
                           full_queue=True)
    r2, f2 = q2(full)
    [row2] = r2.cpu_vs_gpu.itertuples()
    ev = [e for e in scan_trace(full) if e.get("ph") == "X"]
    [step] = [e for e in ev if str(e["name"]).startswith("ProfilerStep#")]
    calls = sum(float(e["dur"]) for e in ev if e["name"] == "cudaLaunchKernel")
    own = [e for e in ev if e.get("cat") == "kernel" and e["name"] == "vectorized_elementwise_kernel"]
    assert row2.gpu_to_cpu < 1 and calls >= float(step["dur"]) - sum(float(e["dur"]) for e in own)
    assert r2.summary["steady_state"]["bound"] == "compute-bound", f2.text
    m = re.search(r"the step's launch calls took ([\d.,]+ [µm]?s) of its CPU time", f2.text)
    assert m and us_of(m.group(1)) == pytest.approx(calls, abs=0.1), f2.text


def test_a_step_that_waits_only_on_its_own_work_says_nothing_of_earlier_work(tmp_path):
    path = vt.gpu_bound_synced(tmp_path / "own.json")
    assert all(v["in_step"] == 0 for v in scan(path).values())
    r, f = q2(path)
    assert "before the profiler began recording" not in f.text
    assert (r.steps["unlaunched_in_step_us"] == 0).all() and (r.steps["unlaunched_wait_us"] == 0).all()


@pytest.mark.parametrize("path", [Path(__file__).parent / "data" / "h100" / "sdpa_fp32_plain_0.json.gz",
                                  Path(__file__).parent / "data" / "h200_verdicts" / "attn_hd100_fp32_eager.json"],
                         ids=lambda p: p.name)
def test_a_wait_behind_unrecorded_work_is_busy_time_in_question_2(path):
    """An fp32 attention loop on an H100 and on an H200 whose first recorded kernel waited behind the warm-up step's
    kernel, which the trace does not hold (a plain scan: from its launch call's end to its start). The steady-state
    steps' CPU windows lie inside that wait, so the GPU was busy through them: question 2 says busy 100%, all of it on
    that work, where it said "busy only 0.0%", and still that the step's own work runs after its window."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"
             and "correlation" in (e.get("args") or {})}
    first = min((e for e in ev if e.get("cat") == "kernel"), key=lambda e: float(e["ts"]))
    call = calls[first["args"]["correlation"]]
    wait = (float(call["ts"]) + float(call["dur"]), float(first["ts"]))
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: float(e["ts"]))[1:]  # the steady state: the steps after the first
    assert all(wait[0] <= float(s["ts"]) and float(s["ts"]) + float(s["dur"]) <= wait[1] for s in steps)
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
    f = {x.id: x for x in findings(r)}["q2.bound"]
    assert f.evidence["busy_in_window"] == 1.0 and f.evidence["unrecorded_in_window"] == 1.0
    assert ("Inside each step's own CPU window the GPU was busy 100.0% (100.0% of the window on work the trace does "
            "not hold, queued before the recording began, which the GPU's first recorded op waited behind): the work a "
            "step launches runs after that window") in f.text
    st = r.steps.set_index("step")
    for s_ in steps:
        n = int(s_["name"].split("#")[1])
        assert st.loc[n, "unrecorded_in_step_us"] == pytest.approx(float(s_["dur"]), abs=0.002)
