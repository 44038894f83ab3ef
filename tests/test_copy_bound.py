"""Who sets the pace where the CPU waits in a copy, or where the GPU's work is copies between host and device: the
bound rule (``analyses.steps.bound``) on loops run on an H200 (``scripts/verdict_cases/copies.py`` and
``host_copy_item.py``, by ``scripts/gpu_verdicts.py``), each figure checked against a plain scan of the trace's JSON."""
from __future__ import annotations

import json
from pathlib import Path
from statistics import median

import pytest

import verdict_traces as vt
from conftest import scan_trace
from test_analyses import _union
from profiling_core import analyze, diagnose, findings, open_trace
from profiling_core.analyses import GPU_BOUND_AT
from profiling_core.store import DevicePeaks

H200 = Path(__file__).parent / "data" / "h200_verdicts"
PEAKS = DevicePeaks.from_dict(json.loads((H200 / "peaks.json").read_text()))
_SYNCS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")


def run(path):
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return r, {f.id: f for f in findings(r)}, {d.rule: d for d in diagnose(s, r, None, PEAKS).diagnoses}


def scan(path) -> list[dict]:
    """Per ProfilerStep (its CPU slice), in time order, from the JSON alone: ``step`` (N), ``cpu`` (its duration),
    ``gpu`` (the union of the GPU ops whose launch call, same ``correlation``, starts in it), ``copies`` (the same for
    the ops named ``Memcpy HtoD``/``Memcpy DtoH``), ``others`` (the same for the other ops), ``in_syncs`` and ``in_pageable`` (over the synchronize calls, and
    over the calls that launched a copy named ``Pageable``, that start in it: the union of the GPU op intervals inside
    each call, summed): µs."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    gpu = [e for e in ev if str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset")]
    calls = {e["args"]["correlation"]: e for e in ev if str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver")
             and "correlation" in (e.get("args") or {})}
    launched = [(calls[g["args"]["correlation"]], g) for g in gpu if g.get("args", {}).get("correlation") in calls]
    iv = [(g["ts"], g["ts"] + g["dur"]) for g in gpu]

    def busy_in(c):
        b, e = c["ts"], c["ts"] + c["dur"]
        return _union([(max(b, x), min(e, y)) for x, y in iv if x < e and y > b])

    pageable = {id(c): c for c, g in launched if g["name"].startswith(("Memcpy HtoD", "Memcpy DtoH"))
                and "pageable" in g["name"].lower()}
    out = []
    for st in sorted((e for e in ev if str(e["name"]).startswith("ProfilerStep#")
                      and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"]):
        a, b = st["ts"], st["ts"] + st["dur"]
        mine = [g for c, g in launched if a <= c["ts"] < b]
        out.append({"step": int(st["name"].split("#")[1]), "cpu": st["dur"], "gpu": _union([(g["ts"], g["ts"] + g["dur"]) for g in mine]),
                    "copies": _union([(g["ts"], g["ts"] + g["dur"]) for g in mine
                                      if g["name"].startswith(("Memcpy HtoD", "Memcpy DtoH"))]),
                    "others": _union([(g["ts"], g["ts"] + g["dur"]) for g in mine
                                      if not g["name"].startswith(("Memcpy HtoD", "Memcpy DtoH"))]),
                    "in_syncs": sum(busy_in(c) for c in ev if c["name"] in _SYNCS and a <= c["ts"] < b),
                    "in_pageable": sum(busy_in(c) for c in pageable.values() if a <= c["ts"] < b)})
    return out


def steady(rows: list[dict], key: str) -> float:
    """The median of ``key`` over the steps after the first (the steady state's basis from 3 steps on)."""
    return median(x[key] for x in rows[1:])


def test_a_loop_waits_for_its_gpu_in_a_copy_to_pageable_memory_as_in_a_synchronize():
    """The same loop, 0.5 ms of the CPU's own work and eight 4096² GEMMs a step, reads its result back with .cpu()
    (a copy into pageable memory: its cudaMemcpyAsync waits for the GEMMs) or with .item() (a copy into pinned memory
    and a stream synchronize, which waits for them): the same verdict both ways, the GPU setting the pace, with the
    wait where the scan finds it. (Counted only in the synchronize, the .cpu() loop read overhead-bound, the GPU
    idle 37% of each step.)"""
    got = {}
    for case in ("readback_cpu", "readback_item"):
        path = H200 / f"{case}_eager.json"
        rows = scan(path)
        r, f, _d = run(path)
        ss = r.summary["steady_state"]
        wait = steady([{"w": x["in_syncs"] + x["in_pageable"]} for x in rows], "w")
        assert ss["sync_wait_us_per_step"] == pytest.approx(wait, rel=1e-6)
        assert ss["gpu_us_per_step"] >= GPU_BOUND_AT * (ss["cpu_us_per_step"] - wait)
        assert ss["bound"] == "compute-bound" and "compute-bound" in f["q2.bound"].text
        got[case] = (rows, f["q2.bound"].text)
    rows, text = got["readback_cpu"]
    assert steady(rows, "in_pageable") > 10 * steady(rows, "in_syncs")  # it waited in the copy, not in a sync
    assert "blocked in copies to or from pageable memory" in text
    rows, text = got["readback_item"]
    assert steady(rows, "in_pageable") == 0.0 and "blocked in synchronize calls while" in text
    # without the copy's wait the same loop would have read overhead-bound
    rows = got["readback_cpu"][0]
    cpu, gpu, syncs = steady(rows, "cpu"), steady(rows, "gpu"), steady(rows, "in_syncs")
    assert gpu < GPU_BOUND_AT * (cpu - syncs)


@pytest.mark.parametrize("case", ["stream_in_pinned", "stream_in_pageable", "copy_pageable"])
def test_a_step_whose_gpu_work_is_mostly_host_copies_is_copy_bound(case):
    """64 MiB copied in each step from pinned memory (queued, the CPU running ahead) or from pageable memory (the
    call holding the CPU through the copy), and 8 MiB from pageable memory beside a 1024² GEMM and an .item(): the
    GPU sets the pace and its copies keep it busy longer than all its other work (by scan), so the link does."""
    rows = scan(H200 / f"{case}_eager.json")
    r, f, _d = run(H200 / f"{case}_eager.json")
    ss = r.summary["steady_state"]
    assert ss["gpu_us_per_step"] == pytest.approx(steady(rows, "gpu"), abs=0.01)  # (the JSON: µs to 3 places)
    assert ss["copy_us_per_step"] == pytest.approx(steady(rows, "copies"), abs=0.01)
    assert ss["other_us_per_step"] == pytest.approx(steady(rows, "others"), abs=0.01)
    assert steady(rows, "copies") >= steady(rows, "others")
    assert ss["gpu_us_per_step"] >= GPU_BOUND_AT * (ss["cpu_us_per_step"] - ss["sync_wait_us_per_step"])
    assert ss["bound"] == "copy-bound" and set(r.cpu_vs_gpu["bound"]) == {"copy-bound"}
    q2 = f["q2.bound"]
    assert q2.title == "Copy-bound" and "compute-bound" not in q2.text and "overhead-bound" not in q2.text
    assert "keep it busy" in q2.text and "at least as long as all its other work" in q2.text
    assert ("pin the host memory" in q2.text) == ("pageable" in case)


def test_a_pinned_copy_the_gpu_waits_for_is_no_copy_bound_step():
    """The same 8 MiB step from pinned memory: the copy is still most of the GPU's work, but the GPU waits for the
    CPU (its work, by scan, is under the CPU's time): overhead-bound."""
    rows = scan(H200 / "copy_pinned_eager.json")
    assert steady(rows, "copies") >= steady(rows, "others")
    assert steady(rows, "gpu") < GPU_BOUND_AT * (steady(rows, "cpu") - steady(rows, "in_syncs"))
    r, f, _d = run(H200 / "copy_pinned_eager.json")
    assert r.summary["steady_state"]["bound"] == "overhead-bound" and f["q2.bound"].title == "Overhead-bound"


def test_a_copy_from_pageable_memory_is_no_floor_of_the_step():
    """What the sync rule says removing the blocking can win is not capped at the step's CPU time less its GPU work
    where that work is a copy from pageable memory: the same step from pinned memory (another run, the same machine)
    took less than the pageable copy alone."""
    pageable, pinned = scan(H200 / "copy_pageable_eager.json"), scan(H200 / "copy_pinned_eager.json")
    assert steady(pinned, "cpu") < steady(pageable, "copies")
    r, _f, d = run(H200 / "copy_pageable_eager.json")
    ss, x = r.summary["steady_state"], d["sync_in_step"]
    assert x.cost_us_per_step > ss["cpu_us_per_step"] - ss["gpu_us_per_step"]
    assert x.cost_us_per_step == pytest.approx(x.evidence["blocked_us_per_step"])
    assert x.evidence["pageable_copy_us_per_step"] == pytest.approx(steady(pageable, "copies"), rel=0.01)
    assert "pinned, still take their bytes at the link's rate" in x.cost_basis


def test_a_built_pageable_copy_step_is_copy_bound_and_its_pinned_twin_is_not(tmp_path):
    """The built pair (8 MiB copied, a 20 µs kernel, an .item()): pageable, the call holds the CPU for the whole
    650 µs copy, which is then most of the step's GPU work; pinned, the call returns at once and the GPU waits."""
    r, f, _d = run(vt.copy_bound(tmp_path / "pageable.json", pinned=False))
    assert r.summary["steady_state"]["bound"] == "copy-bound" and "pin the host memory" in f["q2.bound"].text
    r, f, _d = run(vt.copy_bound(tmp_path / "pinned.json", pinned=True))
    assert r.summary["steady_state"]["bound"] == "overhead-bound"


@pytest.mark.parametrize("copy_us,verdict", [(300.0, "compute-bound"), (700.0, "copy-bound")])
def test_a_copy_beside_compute_sets_the_pace_only_when_it_outlasts_it(tmp_path, copy_us, verdict):
    """Each step queues a 500 µs GEMM on one stream and a pinned host-to-device copy on another at the same time,
    then synchronizes: a 300 µs copy runs under the GEMM, which stays the longer work (the copy is 60% of the GPU's
    busy time all the same); a 700 µs copy outlasts it, and the link sets the pace."""
    t = vt.Trace()
    for n in range(4):
        def body(t):
            start = t.launch(vt.BF16_GEMM, 500.0)
            t.corr += 1
            t._x("cudaMemcpyAsync", t.t, 5.0, "cuda_runtime", correlation=t.corr)
            t._x("Memcpy HtoD (Pinned -> Device)", start, copy_us, "gpu_memcpy", pid=0, tid=9, correlation=t.corr,
                 device=0, stream=9, bytes=32 << 20)
            t.t += 5.0
            t.gpu_free = max(t.gpu_free, start + copy_us)
            t.sync()
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    rows = scan(path)
    assert steady(rows, "gpu") == pytest.approx(max(500.0, copy_us))
    assert (steady(rows, "copies") >= steady(rows, "others")) == (verdict == "copy-bound")
    r, f, _d = run(path)
    assert r.summary["steady_state"]["bound"] == verdict and f["q2.bound"].title == verdict.capitalize()


def test_a_pinned_copy_s_call_is_not_time_blocked_and_gets_no_advice_to_pin():
    """The pinned 8 MiB step: its copies' calls return at once (5.4 and 4.6 µs, no GPU work under them), so the time
    the CPU was blocked is its stream synchronize's alone, and the fix does not tell it to pin what is pinned."""
    path = H200 / "copy_pinned_eager.json"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    rows = scan(path)
    steps = sorted((e for e in ev if str(e["name"]).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"),
                   key=lambda e: e["ts"])[1:]
    syncs = [sum(c["dur"] for c in ev if c["name"] in _SYNCS and s["ts"] <= c["ts"] < s["ts"] + s["dur"])
             for s in steps]
    r, _f, d = run(path)
    x = d["sync_in_step"]
    assert steady(rows, "in_pageable") == 0.0
    assert x.evidence["blocked_us_per_step"] == pytest.approx(sum(syncs) / len(syncs), abs=0.01)
    assert "pin_memory" not in x.fix and "not those of pinned memory" not in x.cost_basis


def test_where_the_cpu_was_blocked_is_said_the_same_way_everywhere(tmp_path):
    """The .cpu() loop waited 943.5 µs a step in its copy to pageable memory and 9 µs in its stream sync: the summary
    line and Q2 say the copies; the copy of 4 bytes is no copy pinned memory would speed up."""
    import subprocess
    import sys
    path = H200 / "readback_cpu_eager.json"
    out = subprocess.run([sys.executable, "-m", "profiling_core", "analyze", str(path), "--engine", "sqlite"],
                         capture_output=True, text=True, check=True).stdout
    (line,) = [x for x in out.splitlines() if x.strip().startswith("steady state:")]
    assert "blocked in copies to or from pageable memory" in line
    r, f, d = run(path)
    assert "blocked in copies to or from pageable memory" in f["q2.bound"].text
    assert d["sync_in_step"].evidence["pageable_copy_us_per_step"] == 0.0  # (4 B: its time is its start-up)


def test_an_overhead_bound_step_that_was_blocked_says_its_idle_share_is_without_the_blocking():
    """The compiled pageable step: its CPU's own time (919 µs) exceeds its GPU work (792.5 µs), so the GPU would idle
    14% of a step without the blocking; as recorded it was busy under half of each window. Q2 says which is which."""
    r, f, _d = run(H200 / "copy_pageable_compile.json")
    ss, text = r.summary["steady_state"], f["q2.bound"].text
    assert ss["bound"] == "overhead-bound" and ss["busy_in_window"] < 0.5
    assert f"were the CPU not blocked, steps back to back would still leave it idle {100 * ss['gpu_idle_share']:.0f}%" \
        in text


def test_the_first_step_s_extra_time_is_read_over_all_calls_of_a_name():
    """The pageable 8 MiB step calls cudaMemcpyAsync twice (the 8 MiB copy, the .item()'s readback): question 3
    compares what the first step spent in all of them with the other steps (by scan: the calls' durations summed per
    step; a runtime call has no children), not one call with one call."""
    ev = [e for e in scan_trace(H200 / "copy_pageable_eager.json") if e.get("ph") == "X"]
    steps = sorted((e for e in ev if str(e["name"]).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"),
                   key=lambda e: e["ts"])
    per_step = [sum(c["dur"] for c in ev if c["name"] == "cudaMemcpyAsync" and s["ts"] <= c["ts"] < s["ts"] + s["dur"])
                for s in steps]
    assert all(sum(1 for c in ev if c["name"] == "cudaMemcpyAsync" and s["ts"] <= c["ts"] < s["ts"] + s["dur"]) == 2
               for s in steps)
    _r, f, _d = run(H200 / "copy_pageable_eager.json")
    ev3 = f["q3.cold_start"].evidence
    assert ev3["largest_excess_slice"] == "cudaMemcpyAsync"
    assert ev3["largest_excess_self_us"] == pytest.approx(per_step[0], abs=0.01)
    assert ev3["largest_excess_usual_us"] == pytest.approx(median(per_step[1:]), abs=0.01)


@pytest.mark.parametrize("name", ["stream_in_pageable_eager", "stream_in_pinned_eager", "readback_cpu_eager"])
def test_the_launch_calls_time_leaves_out_the_copies_waits_the_blocked_time_holds(name):
    """``steps.launch_call_us``, which the bound rule reads as where a full launch queue holds the CPU, is the time of
    the step's distinct calls that launched GPU work (a plain scan: runtime calls whose correlation a GPU op carries,
    starting in the step) less their waits on the GPU in copies to or from pageable memory, which the blocked time
    (``sync_wait_us``) already holds: none of it is counted twice."""
    path = H200 / f"{name}.json"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    ran = {e["args"]["correlation"] for e in ev if str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset")
           and "correlation" in (e.get("args") or {})}
    calls = [e for e in ev if str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver")
             and (e.get("args") or {}).get("correlation") in ran]
    by_scan = {x["step"]: x for x in scan(path)}
    r, _, _ = run(path)
    for row in r.steps.itertuples():
        st = next(e for e in ev if e["name"] == f"ProfilerStep#{int(row.step)}" and e.get("cat") != "gpu_user_annotation")
        total = sum(c["dur"] for c in calls if st["ts"] <= c["ts"] < st["ts"] + st["dur"])
        want = max(0.0, total - by_scan[int(row.step)]["in_pageable"])
        assert row.launch_call_us == pytest.approx(want, abs=0.01), (name, row.step)
        assert row.copy_wait_us == pytest.approx(by_scan[int(row.step)]["in_pageable"], abs=0.01)
