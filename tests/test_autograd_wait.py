"""A thread that called ``backward()`` waits while the autograd engine runs the backward on a thread of its own:
that wait is not its own CPU time (``cpu_own_times``, the GPU-starved finding's "Where the CPU time goes", Q1's
largest self CPU row). Checked against a plain scan of the events, on a real H200 training trace and on traces
built to break the rule (the backward on the calling thread, an engine thread of another process)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import scan_trace
from profiling_core import analyze, diagnose, findings, open_trace
from profiling_core.analyses import cpu_own_times

DATA = Path(__file__).parent / "data"
FN = "autograd::engine::evaluate_function:"


def _own_waits(events, name, engine=lambda e: e["name"].startswith(FN)):
    """By a plain scan: for each slice called ``name``, the µs of its own time (its window less its same-thread
    children's windows) that the ``engine`` slices (by default, those starting with FN) on other threads of its
    process cover."""
    xs = [e for e in events if e.get("ph") == "X"]
    out = []
    for b in (e for e in xs if e["name"] == name and e.get("cat") != "gpu_user_annotation"):
        lo, hi = float(b["ts"]), float(b["ts"]) + float(b["dur"])
        kids = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in xs
                if e is not b and e["pid"] == b["pid"] and e["tid"] == b["tid"] and lo <= float(e["ts"])
                and float(e["ts"]) + float(e["dur"]) <= hi]
        fns = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in xs if engine(e)
               and e["pid"] == b["pid"] and e["tid"] != b["tid"]]
        # sweep the window in µs steps of the union: own instants covered by some fn
        points = sorted({lo, hi, *(p for iv in kids + fns for p in iv if lo <= p <= hi)})
        got = 0.0
        for a, z in zip(points, points[1:]):
            mid = (a + z) / 2
            if any(k0 <= mid < k1 for k0, k1 in kids):
                continue
            if any(f0 <= mid < f1 for f0, f1 in fns):
                got += z - a
        out.append(got)
    return out


def _x(name, ts, dur, tid, pid=1, cat="cpu_op"):
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _trace(path, *, engine_tid=2, engine_pid=1):
    """One step: the main thread's ``train::backward`` (1000 µs, a 50 µs child op) while an engine thread runs
    three backward functions (100 µs each, one of them overlapping the child), and a data loader's thread of the
    same process runs an op of its own meanwhile (it waits for nothing)."""
    ev = [_x("ProfilerStep#1", 0, 1200, 1, cat="user_annotation"),
          _x("train::backward", 100, 1000, 1, cat="user_annotation"),
          _x("aten::ones_like", 150, 50, 1),
          _x("aten::copy_", 350, 500, 9)]
    for ts in (180, 400, 700):
        ev.append(_x(f"{FN} MmBackward0", ts, 100, engine_tid, pid=engine_pid))
        ev.append(_x("aten::mm", ts + 10, 80, engine_tid, pid=engine_pid))
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_the_wait_for_the_engines_thread_is_not_own_time(tmp_path):
    path = _trace(tmp_path / "t.json")
    (want,) = _own_waits(scan_trace(path), "train::backward")
    assert want == pytest.approx(80 + 100 + 100)  # 200..280 (after the child), 400..500, 700..800
    got = cpu_own_times(open_trace(path)).set_index("name")
    assert got.loc["train::backward", "wait_us"] == pytest.approx(want)
    assert got.loc["train::backward", "own_us"] == pytest.approx(1000 - 50 - want)
    assert got.loc["aten::mm", "wait_us"] == 0 and got.loc["aten::mm", "own_us"] == pytest.approx(3 * 80)
    assert got.loc["aten::copy_", "wait_us"] == 0 and got.loc["aten::copy_", "own_us"] == pytest.approx(500)


@pytest.mark.parametrize("where", ["same thread", "another process"])
def test_functions_on_the_calling_thread_or_in_another_process_are_not_a_wait(tmp_path, where):
    """On a CPU run the engine runs the functions on the calling thread (they are its children, not a wait); an
    engine thread of another process (merged ranks) is not what this thread waits for."""
    path = _trace(tmp_path / "t.json", **({"engine_tid": 1} if where == "same thread" else {"engine_pid": 2}))
    got = cpu_own_times(open_trace(path))
    assert (got["wait_us"] == 0).all()
    assert _own_waits(scan_trace(path), "train::backward") == [0.0]


def test_a_real_h200_training_step_names_its_wait_beside_its_own_time():
    """The H200 fused-Adam MLP (eager): the main thread's train::backward waits while the engine's thread runs the
    backward; the wait per step matches the scan, the GPU-starved finding lists it apart, and Q1 says it."""
    path = DATA / "h200_train" / "app" / "mlp_train_adam_fused_eager.json.gz"
    s = open_trace(path)
    r = analyze(s)
    own = r.cpu_own_times
    waits = _own_waits(scan_trace(path), "train::backward")
    bw = own[own["name"] == "train::backward"]
    assert bw["wait_us"].sum() == pytest.approx(sum(waits), abs=0.01)  # every backward lies in a step here
    assert (bw["wait_us"] > 0).all() and (bw["own_us"] >= 0).all()
    d = {x.rule: x for x in diagnose(s, r).diagnoses}
    top = {o["name"]: o for o in d["gpu_starved"].evidence["top_cpu_ops"]}
    assert top["train::backward"]["autograd_wait_us_per_step"] > top["train::backward"]["us_per_step"]
    assert "waiting for the autograd engine's thread" in d["gpu_starved"].text
    q1 = next(f for f in findings(r) if f.id == "q1.table")
    assert q1.evidence["top_self_cpu_row"] == "train::backward"
    assert q1.evidence["top_self_cpu_autograd_wait_us"] == pytest.approx(sum(waits), abs=0.01)


def test_a_2021_trace_s_backward_nodes_are_the_engine_s_work():
    """The 2021 format has no evaluate_function slices: its engine thread's top slices are the backward nodes
    (MmBackward, AccumulateGrad). Kineto's gpu_metrics example: the step's thread waits while they run, and Q1
    says how much of ProfilerStep*'s self time that was, as a scan over those nodes counts it."""
    import re
    path = DATA / "third_party" / "gpu_metrics_input.json"
    ev = scan_trace(path)
    node = re.compile(r"\w+Backward\d*|torch::autograd::AccumulateGrad")
    xs = [e for e in ev if e.get("ph") == "X"]
    tops = []  # the top slices of each thread, by a scan
    for tid in {e["tid"] for e in xs}:
        end = -1.0
        for e in sorted((e for e in xs if e["tid"] == tid), key=lambda e: (float(e["ts"]), -float(e["dur"]))):
            if float(e["ts"]) >= end:
                tops.append(id(e))
                end = float(e["ts"]) + float(e["dur"])
    top = set(tops)
    waits = _own_waits(ev, "ProfilerStep#2", engine=lambda e: id(e) in top and bool(node.fullmatch(e["name"])))
    assert waits and waits[0] > 1000  # the trace as it is: milliseconds of the step's own time
    q1 = next(f for f in findings(analyze(open_trace(path))) if f.id == "q1.table")
    assert q1.evidence["top_self_cpu_row"] == "ProfilerStep*"
    assert q1.evidence["top_self_cpu_autograd_wait_us"] == pytest.approx(sum(waits), abs=0.01)


@pytest.mark.parametrize("path", [DATA / "traces" / "worker0.1623143089861.pt.trace.json.gz",
                                  DATA / "third_party" / "gpu_metrics_input.json"], ids=lambda p: p.name)
def test_a_2021_step_waits_for_the_engine_exactly_while_its_backward_phase_runs(path):
    """One rule says which slices are the backward's work; the wait for the engine and the backward phase both read
    it. On a 2021 GPU trace the loop's thread runs nothing while the engine's thread runs the nodes, so each step
    slice's wait is its backward phase's CPU time, and both are what a scan finds: the instants of the step's own
    time that the engine thread's nodes cover (before, the wait found them and the phases had no backward)."""
    import re
    ev = scan_trace(path)
    node = re.compile(r"\w+Backward\d*|torch::autograd::AccumulateGrad")
    xs = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("Operator", "Runtime")]
    steps = [e for e in xs if re.fullmatch(r"ProfilerStep#\d+", e["name"])]
    r = analyze(open_trace(path))
    ch, ph = r.dispatch_chains, r.phases
    for st in steps:
        n = int(st["name"].split("#")[1])
        (want,) = _own_waits(xs, st["name"], engine=lambda e: bool(node.fullmatch(e["name"])))
        assert want > 1000  # milliseconds of backward per step
        (wait,) = ch[(ch["name"] == st["name"]) & (ch["lane"] == "cpu")]["wait_us"]
        assert wait == pytest.approx(want, abs=1e-3)
        (back,) = ph[(ph["step"] == n) & (ph["phase"] == "backward")]["cpu_us"]
        assert back == pytest.approx(want, abs=1e-3)


def test_a_range_that_could_not_nest_never_makes_a_wait_larger_than_own_time(tmp_path):
    """A ``record_function`` range entered inside a Python frame and left after it goes on a spill track, and takes its
    window out of the range around it (the profiler table's rule). The wait was read from windows alone, so it could
    exceed that own time: here ``## backward ##`` waited 400 µs of its 200 and ``my_range`` 300 of its 200 (own times
    of -200 and -100 µs). By hand, on the loop's thread: the step alone [0, 100] and [900, 1000]; the frame [100, 500];
    ``my_range`` [500, 700] (its window less the frame's part); ``## backward ##`` [700, 900]; the engine's thread runs
    the backward over [100, 900], so all of the last three is a wait."""
    x = lambda name, ts, dur, cat="user_annotation", tid=1: {  # noqa: E731
        "ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
    path = tmp_path / "spill.json"
    path.write_text(json.dumps({"traceEvents": [
        x("ProfilerStep#1", 0, 1000), x("## backward ##", 100, 800),
        x("train.py(10): backward", 100, 400, "python_function"), x("my_range", 400, 300),
        x(FN + " MmBackward0", 100, 800, "cpu_op", tid=2)]}))
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
    own = r.cpu_own_times.set_index("name")
    want = {"train.py(10): backward": 400.0, "my_range": 200.0, "## backward ##": 200.0}
    for name, us in want.items():
        assert own.loc[name, "wait_us"] == pytest.approx(us) and own.loc[name, "own_us"] == pytest.approx(0.0)
    table = r.profiler_table.set_index("name")["self_cpu_us"]
    assert {n: table[n] for n in want} == pytest.approx(want)
    assert (r.dispatch_chains["own_us"] >= 0).all()
