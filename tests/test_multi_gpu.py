"""One process, several GPUs (``nn.DataParallel``, a model split across devices as ``device_map="auto"`` splits one):
every per-step GPU figure is the time at least one GPU was busy, so each GPU's own busy time is measured beside it
and the texts say what the figures count. Expected values come from a plain scan of each trace's JSON."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import verdict_traces as vt
from conftest import scan_trace
from profiling_core import analyze, diagnose, findings, open_trace
from profiling_core.explain import devices_text

from test_analyses import _union
from test_verdicts import H200_PEAKS, steps_of

ROOT = Path(__file__).resolve().parent.parent


def run(path):
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return r, {f.id: f for f in findings(r)}, {d.rule: d for d in diagnose(s, r, None, H200_PEAKS).diagnoses}


def per_device_by_scan(path: Path) -> dict[int, list[tuple[float, float]]]:
    """{device: [(busy µs, share of the step), ...] per step after the first}: the union of the device's kernel
    intervals (its events' pid) clipped to each ProfilerStep window, from the JSON alone."""
    events = json.loads(Path(path).read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    out: dict[int, list] = {}
    for a, b in steps_of(events)[1:]:
        for dev in sorted({k["pid"] for k in kernels}):
            busy = _union([(max(k["ts"], a), min(k["ts"] + k["dur"], b)) for k in kernels
                           if k["pid"] == dev and k["ts"] < b and k["ts"] + k["dur"] > a])
            out.setdefault(dev, []).append((busy, busy / (b - a)))
    return out


def test_a_model_split_over_two_gpus_says_each_gpu_idles_half_the_step(tmp_path):
    path = vt.two_gpu_pipeline(tmp_path / "t.json")
    r, f, d = run(path)
    scan = per_device_by_scan(path)
    got = {g["device"]: g for g in r.summary["step_devices"]}
    assert sorted(got) == [0, 1]
    for dev, rows in scan.items():
        assert got[dev]["busy_in_step_us"] == pytest.approx(statistics.median(x for x, _ in rows))
        assert got[dev]["busy_fraction"] == pytest.approx(statistics.median(s for _, s in rows))
        assert got[dev]["busy_us"] == pytest.approx(4000.0)  # 4 GEMMs of 1 ms launched on each GPU per step
        assert 0.45 < got[dev]["busy_fraction"] < 0.55  # each GPU idles half of the step...
    union = float(r.steps["gpu_busy_fraction"].iloc[1:].median())
    assert union > 0.95  # ... while the union over both is busy nearly all of it
    q2 = f["q2.bound"]
    assert q2.evidence["step_devices"] == r.summary["step_devices"]
    assert "2 GPUs of this process" in q2.text and "at least one of them was busy" in q2.text
    for dev in (0, 1):
        share = 100 * statistics.median(s for _, s in scan[dev])
        assert f"device {dev} 4.00 ms launched, busy {share:.1f}% of the step's window" in q2.text


def test_a_cpu_paced_step_on_two_gpus_says_neither_runs_the_step_s_work(tmp_path):
    path = vt.two_gpu_cpu_paced(tmp_path / "t.json")
    r, f, d = run(path)
    scan = per_device_by_scan(path)
    assert [g["device"] for g in r.summary["step_devices"]] == [0, 1]
    for g in r.summary["step_devices"]:
        assert g["busy_in_step_us"] == pytest.approx(statistics.median(x for x, _ in scan[g["device"]]))
        assert g["busy_us"] == pytest.approx(300.0)  # 3 kernels of 100 µs launched on each GPU per step
    # each GPU's figure is at most the union's, and their sum at least the union's, measured either way
    union = r.steps.iloc[1:]
    for col, key in (("gpu_busy_us", "busy_us"), ("gpu_busy_in_step_us", "busy_in_step_us")):
        u = float(union[col].median())
        assert all(g[key] <= u + 1e-6 for g in r.summary["step_devices"])
        assert sum(g[key] for g in r.summary["step_devices"]) >= u - 1e-6
    starved = d["gpu_starved"]
    assert "none of its 2 GPUs runs work the step launched for" in starved.text and "the GPU idles" not in starved.text
    assert "idle at once" not in starved.text
    assert "2 GPUs of this process" in f["q2.bound"].text


def test_one_gpu_keeps_its_texts_and_its_busy_time_is_the_steps(tmp_path):
    path = vt.cpu_paced(tmp_path / "t.json", kernel_us=100.0, cpu_us=400.0)  # the one-GPU twin of the case above
    r, f, d = run(path)
    scan = per_device_by_scan(path)
    assert list(scan) == [0]
    [g] = r.summary["step_devices"]
    assert g["device"] == 0 and g["busy_in_step_us"] == pytest.approx(statistics.median(x for x, _ in scan[0]))
    basis = r.steps[r.steps["step"].isin(r.summary["steady_state"]["basis_steps"])]
    assert g["busy_in_step_us"] == pytest.approx(float(basis["gpu_busy_in_step_us"].median()))
    assert g["busy_us"] == pytest.approx(float(basis["gpu_busy_us"].median()))
    assert "GPUs of this process" not in f["q2.bound"].text and "step_devices" not in f["q2.bound"].evidence
    assert "the GPU idles" in d["gpu_starved"].text


def test_a_cpu_only_trace_names_no_gpu(tmp_path):
    path = vt.cpu_steps(tmp_path / "t.json", [[("aten::add", 30.0)]] * 3)
    r, f, _d = run(path)
    assert r.summary["step_devices"] == [] and r.device_busy.empty


def test_the_text_names_eight_gpus_and_counts_the_rest():
    gpus = [{"device": k, "busy_us": 1000.0 + k, "busy_in_step_us": 900.0, "busy_fraction": 0.5} for k in range(10)]
    text = devices_text(gpus)
    assert text.startswith("The steps' GPU work ran on 10 GPUs of this process")
    assert "device 7 1.01 ms launched, busy 50.0% of the step's window; and 2 more." in text
    assert "device 8" not in text


def test_analyze_cli_notes_the_gpus_and_writes_them_in_json(tmp_path):
    path = vt.two_gpu_pipeline(tmp_path / "t.json")
    def cli(*extra):
        return subprocess.run([sys.executable, "-m", "profiling_core", "analyze", str(path), *extra], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=True).stdout
    human, doc = cli(), json.loads(cli("--json"))
    assert [g["device"] for g in doc["step_devices"]] == [0, 1]
    note = [ln for ln in human.splitlines() if ln.startswith("  note: The steps' GPU work ran on 2 GPUs")]
    assert len(note) == 1 and "device 1 4.00 ms" in note[0]


def test_merged_ranks_pair_each_gpu_op_with_its_own_process_s_call(tmp_path):
    """Two ranks' traces merged into one file (the second 300 µs later): their correlation ids repeat, so each
    rank's kernels were paired with the other rank's calls too, and "24 of the 96 GPU ops started before their
    launch call began". By a plain scan: each kernel has one launch call of its own rank, 3 µs before it."""
    one = vt.cpu_paced(tmp_path / "one.json")
    two = vt.as_ranks(one, tmp_path / "two.json", shift_us=300.0)
    ev = [e for e in scan_trace(two) if e.get("ph") == "X"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    calls = [e for e in ev if e.get("cat") == "cuda_runtime"]
    own = [[c for c in calls if c["args"]["correlation"] == k["args"]["correlation"]
            and c["pid"] // 100000 == k["pid"] // 100000] for k in kernels]
    assert all(len(c) == 1 for c in own)
    waits = sorted(k["ts"] - c[0]["ts"] for k, c in zip(kernels, own))
    from test_study_queries import compare
    from profiling_core.queries import load_query
    with open_trace(two, engine="sqlite") as s:
        r = analyze(s)
        # the study's SQL pairs them by the same rule (its launch_pairing fragment)
        q = s.query(load_query("launch_latency"))
        n, problems = compare("launch_latency", q, r)
        assert n and not problems, problems[:3]
    lat = r.launch_latency
    assert len(lat) == len(kernels) and lat["gpu_id"].is_unique
    assert sorted(lat["latency_us"].round(3)) == pytest.approx(waits)
    q4 = next(f for f in findings(r) if f.id == "q4.offset")
    assert "started before their launch call" not in q4.text


def _own_waits(path: Path) -> list[float]:
    """Each GPU op's wait after the call of its own rank (pid // 100000) with its correlation id, from the JSON."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    ops = [e for e in ev if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    calls = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
             and any(k in e["name"].lower() for k in ("launch", "memset", "memcpy"))]
    waits = []
    for g in ops:
        (c,) = [c for c in calls if c["args"]["correlation"] == g["args"]["correlation"]
                and c["pid"] // 100000 == g["pid"] // 100000]
        waits.append(g["ts"] - c["ts"])
    return sorted(waits)


H200 = ROOT / "tests" / "data" / "h200"


def test_ranks_merged_in_step_pair_each_op_with_its_own_rank_s_call(tmp_path):
    """The H200's warm 4096² run and a copy of it 7 µs later as a second rank: their correlation and flow ids
    repeat, and the reader binds each repeated flow to the first rank's call, so both ranks' ops were the first
    rank's: question 4 took its 9 calls for CUDA graph replays of 2 ops each, question 5 threaded both ranks'
    slices into one chain, question 7 counted the other GPU's ops in a sync, and each step slice counted both
    ranks' launches in its window. Every op starts more than 7 µs after its call, so both ranks' calls precede it:
    the GPU's place in each correlation id's group decides. By a plain scan, each op has one call of its own rank,
    and each step slice its own rank's launches; the answers read as those of the single run."""
    one = vt.as_ranks(H200 / "4096_bf16_warm_eager.json", tmp_path / "one.json", ranks=1)
    two = vt.as_ranks(one, tmp_path / "two.json")
    waits = _own_waits(two)
    assert min(waits) > 7.0  # (what makes the first rule unable to tell the ranks apart)
    r1, f1, _ = run(one)
    r2, f2, _ = run(two)
    lat = r2.launch_latency
    assert lat["gpu_id"].is_unique and lat["launch_id"].is_unique and len(lat) == len(waits) == 18
    assert sorted(lat["latency_us"]) == pytest.approx(waits, abs=0.002)  # (the trace's times are in ns)
    assert "graph" not in f2["q4.offset"].text and "over 18 ops" in f2["q4.offset"].text
    assert f2["q5.chain"].evidence["paths"] == f1["q5.chain"].evidence["paths"]
    assert f2["q5.chain"].evidence["pid"] == r2.steps["pid"].iloc[0]
    assert f2["q5.chain"].text.startswith(f"In ProfilerStep#4 of pid {f2['q5.chain'].evidence['pid']}: ")
    for k in ("gpu_ops", "gpu_busy_us", "idle_pct"):
        assert f2["q7.sync"].evidence.get(k) == f1["q7.sync"].evidence.get(k), k
    # question 3 reads the first rank's first step against the others one step slice at a time, as in one run
    for k in ("largest_excess_slice", "largest_excess_us", "largest_excess_self_us", "largest_excess_usual_us"):
        assert f2["q3.cold_start"].evidence[k] == f1["q3.cold_start"].evidence[k], k
    # each step slice counts its own rank's launches (both ranks' steps overlap in time), by a plain scan
    ev = [e for e in scan_trace(two) if e.get("ph") == "X"]
    calls = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and any(k in e["name"].lower() for k in ("launch", "memset", "memcpy"))]
    step_ev = [e for e in ev if str(e["name"]).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"]
    by_scan = sorted((e["pid"], e["ts"], sum(1 for c in calls if c["pid"] == e["pid"]
                                              and e["ts"] <= c["ts"] < e["ts"] + e["dur"])) for e in step_ev)
    got = sorted(zip(r2.steps["pid"], r2.steps["start_ns"] / 1000.0, r2.steps["launches"]))
    assert [(p, n) for p, _t, n in got] == [(p, n) for p, _t, n in by_scan]
    assert [t for _p, t, _n in got] == pytest.approx([t for _p, t, _n in by_scan], abs=0.001)
    for k in ("kernel_launches_per_step", "kernels_per_step"):
        assert f2["q9.compile"].evidence[k] == f1["q9.compile"].evidence[k], k
    assert r2.summary["gpu_step_median_us"] == pytest.approx(r1.summary["gpu_step_median_us"])
    (own,) = r1.summary["step_devices"]
    assert [d["busy_us"] for d in r2.summary["step_devices"]] == pytest.approx([own["busy_us"]] * 2)
    _same_in_sql(two, ("launch_latency", "dispatch_chain", "steps", "gpu_busy", "compile_breakdown", "sync_wait"))


def _same_in_sql(path: Path, queries) -> None:
    """The study's SQL (its launch_pairing fragment) pairs the trace's ops and calls as the analyses do."""
    from test_study_queries import compare
    from profiling_core.queries import load_query
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        for name in queries:
            n, problems = compare(name, s.query(load_query(name)), r)
            assert n and not problems, (name, problems[:3])


def test_a_graph_replay_of_merged_ranks_stays_with_its_launch(tmp_path):
    """The H200's reduce-overhead run (a CUDA graph's replay: one cudaGraphLaunch, several kernels) as two ranks 7 µs
    apart: each replay's kernels stay with their own rank's launch, which still runs several ops."""
    one = vt.as_ranks(H200 / "64_bf16_warm_compile_ro.json", tmp_path / "one.json", ranks=1)
    two = vt.as_ranks(one, tmp_path / "two.json")
    r1, f1, _ = run(one)
    r2, f2, _ = run(two)
    assert sorted(r2.launch_latency["latency_us"]) == pytest.approx(_own_waits(two), abs=0.002)
    per_call = r2.launch_latency.groupby("launch_id").size()
    assert sorted(per_call) == sorted(list(r1.launch_latency.groupby("launch_id").size()) * 2)
    assert ("graph" in f1["q4.offset"].text) == ("graph" in f2["q4.offset"].text)
    _same_in_sql(two, ("launch_latency", "dispatch_chain"))
