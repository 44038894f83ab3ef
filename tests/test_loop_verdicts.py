"""Verdicts about what a training loop does around its model, on real traces and on traces built to break them:

- a loop that waits for its batches: the DataLoader's range in each step (``steps.data_us``, the ``data`` phase),
  question 2's words for it, and the ``input_bound`` rule (an H200 training loop fed by a DataLoader in its own
  thread, one fed by two workers that fall behind; the same loop on a CPU; the 2021 ResNet-50 trace of PyTorch's
  own profiler tutorial);
- a step whose batch is built by plain Python: the GPU-starved finding sends the user to that Python, not to fewer
  launches;
- ``torch.cuda.empty_cache()`` in the loop: the allocator's driver calls in every step (``allocator_in_step``).

Every figure is checked against a plain scan of the JSON."""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

import verdict_traces as vt
from conftest import scan_trace
from test_analyses import _union
from test_copy_bound import scan as scan_steps
from profiling_core import analyze, diagnose, findings, open_trace
from profiling_core.analyses import DATA_WAIT_AT, phases_at
from profiling_core.store import DevicePeaks

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200_verdicts"
PEAKS = DevicePeaks.from_dict(json.loads((H200 / "peaks.json").read_text()))
LOADER, WORKERS, PYTHON = (H200 / f"input_{n}_eager.json" for n in ("loader", "workers", "python"))
CPU_LOADER = DATA / "cpu" / "input_bound_fp32_warm_eager.json"
CPU_STUDY = DATA / "cpu" / "64_fp32_warm_eager.json"
RESNET = DATA / "traces" / "worker0.1623143089861.pt.trace.json.gz"


def run(path):
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return r, {f.id: f for f in findings(r)}, {d.rule: d for d in diagnose(s, r, None, PEAKS).diagnoses}


def scan(path) -> dict[int, tuple[float, float]]:
    """{N: (the CPU slice ProfilerStep#N's duration, the µs of its window inside DataLoader ranges)} by a plain scan:
    the ranges named ``enumerate(DataLoader)#<class>.__next__`` on the step's own thread (not their
    gpu_user_annotation copies), clipped to the window (they never overlap one another: one loop hands out one batch
    at a time)."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation"]
    loads = [(e["pid"], e["tid"], float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ev
             if str(e["name"]).startswith("enumerate(DataLoader)#") and str(e["name"]).endswith(".__next__")]
    out = {}
    for e in ev:
        if str(e["name"]).startswith("ProfilerStep#"):
            b, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
            out[int(e["name"].split("#")[1])] = (end - b, sum(max(0.0, min(end, y) - max(b, x))
                                                              for pid, tid, x, y in loads
                                                              if (pid, tid) == (e["pid"], e["tid"])))
    return out


def steady(by_step: dict) -> list[int]:
    """The steady state's steps: those after the first when there are 3 or more (``analyses.basis_steps``)."""
    n = sorted(by_step)
    return n[1:] if len(n) >= 3 else n


@pytest.mark.parametrize("path", [LOADER, WORKERS, PYTHON, CPU_LOADER, CPU_STUDY, RESNET],
                         ids=lambda p: p.name)
def test_data_us_is_the_dataloader_time_in_each_step_window(path):
    r, _, _ = run(path)
    want = scan(path)
    got = dict(zip(r.steps["step"].astype(int), r.steps["data_us"].astype(float)))
    assert set(got) == set(want)
    for n, (_dur, data) in want.items():
        assert got[n] == pytest.approx(data, abs=0.002), n
    loaders = path in (LOADER, WORKERS, CPU_LOADER, RESNET)
    assert (max(got.values()) > 0) == loaders


def test_a_gpu_copy_of_the_range_and_a_window_edge_count_once(tmp_path):
    """Kineto repeats a range that launched GPU work as a gpu_user_annotation on the GPU lane: that copy is no wait
    of the loop. The built steps' ranges are 300, 700 and 20 µs; the first step's slice is then made to begin 100 µs
    later, 98 µs into its DataLoader range (which began 2 µs after the step): only the 202 µs inside it count."""
    path = vt.data_loader_steps(tmp_path / "t.json", [300.0, 700.0, 20.0], gpu_copy=True)
    doc = json.loads(path.read_text())
    (first,) = [e for e in doc["traceEvents"] if e["name"] == "ProfilerStep#1"]
    first["ts"] += 100.0
    first["dur"] -= 100.0
    path.write_text(json.dumps(doc))
    r, _, _ = run(path)
    assert r.steps["data_us"].tolist() == pytest.approx([202.0, 700.0, 20.0])
    assert [d for _, (_, d) in sorted(scan(path).items())] == pytest.approx([202.0, 700.0, 20.0])


@pytest.mark.parametrize("path", [CPU_LOADER, LOADER], ids=lambda p: p.name)
def test_the_data_phase_takes_the_batches_out_of_the_forward(path):
    """Before, a trace without train:: ranges read its forward as everything before the backward: the DataLoader's
    26 ms on the CPU counted as forward. Now each DataLoader instant is the data phase, whose time per step is the
    step's data_us, and the phases still sum to the step."""
    r, _, _ = run(path)
    want = scan(path)
    ph = r.phases
    for n, (dur, data) in want.items():
        mine = ph[ph["step"] == n].set_index("phase")["cpu_us"]
        assert mine["data"] == pytest.approx(data, abs=0.002)
        assert mine.sum() == pytest.approx(dur, abs=0.002)
        assert mine["forward"] < dur - data
    ev = scan_trace(path)
    mids = [e["ts"] + e["dur"] / 2 for e in ev if str(e.get("name", "")).startswith("enumerate(DataLoader)#")
            and e.get("cat") != "gpu_user_annotation"]
    with open_trace(path, engine="sqlite") as s:
        at = phases_at(s, [round(m * 1000) for m in mids])
    assert set(at) == {"data"}


def test_an_inference_loop_with_a_data_loader_has_no_training_phases_yet_its_wait_is_found(tmp_path):
    path = vt.data_loader_steps(tmp_path / "t.json", [400.0] * 4, train=False)
    r, f, d = run(path)
    assert not r.has_phases  # a DataLoader alone makes no training step
    assert r.steps["data_us"].tolist() == pytest.approx([400.0] * 4)
    assert "input_bound" in d and "400.0 µs per step on average" in d["input_bound"].text


def _share(path) -> tuple[float, float, dict]:
    """(the steady state's data µs per step, its share of their CPU time, {step: data µs}) by the scan."""
    want = scan(path)
    basis = steady(want)
    data = sum(want[n][1] for n in basis)
    return data / len(basis), data / sum(want[n][0] for n in basis), {n: want[n][1] for n in basis}


@pytest.mark.parametrize("path,fix", [(LOADER, "num_workers=0"), (CPU_LOADER, "num_workers=0"),
                                      (RESNET, "num_workers=0"), (WORKERS, "worker processes do not make")],
                         ids=lambda x: x.name if isinstance(x, Path) else "")
def test_a_loop_that_waits_for_its_batches_is_called_input_bound(path, fix):
    r, f, d = run(path)
    per, share, by_step = _share(path)
    assert share >= DATA_WAIT_AT
    x = d["input_bound"]
    assert x.evidence["data_share"] == pytest.approx(share, rel=1e-6)
    assert f"{share:.0%} of their CPU time" in x.text
    assert fix in x.fix
    if r.has_gpu:  # the time waited for the batches, and no more than the CPU time the GPU's own work leaves
        gpu = statistics.mean(float(g) for g in r.steps.set_index("step").loc[steady(by_step), "gpu_busy_us"])
        cpu = statistics.mean(scan(path)[n][0] for n in steady(by_step))
        assert x.cost_us_per_step == pytest.approx(min(per, cpu - gpu), rel=1e-6)
        assert f"{share:.0%} went to waiting for input" in f["q2.bound"].text
    else:
        assert x.cost_us_per_step == pytest.approx(per, rel=1e-6)


def test_the_workers_bursts_are_named_at_the_step_that_waited():
    """Two workers and a prefetch of 4 batches each: the loop waits for nothing for a while, then for a whole batch;
    a median step would say no wait at all."""
    _, _, d = run(WORKERS)
    _, _, by_step = _share(WORKERS)
    worst = max(by_step, key=by_step.get)
    assert by_step[worst] > 10 * min(by_step.values())
    assert d["input_bound"].evidence["burst_step"] == worst
    assert f"step {worst} waited" in d["input_bound"].text


@pytest.mark.parametrize("path", [PYTHON, CPU_STUDY], ids=lambda p: p.name)
def test_a_loop_without_a_data_loader_is_not_called_input_bound(path):
    _, f, d = run(path)
    assert "input_bound" not in d and "DataLoader" not in f["q2.bound"].text


def test_a_short_wait_beside_a_long_step_is_not_input_bound(tmp_path):
    """50 µs of DataLoader in a step of ~1 ms of GPU-launching work: 5%, under DATA_WAIT_AT."""
    path = vt.data_loader_steps(tmp_path / "t.json", [50.0] * 4, compute_us=400.0)
    _, share, _ = _share(path)
    assert share < DATA_WAIT_AT
    _, f, d = run(path)
    assert "input_bound" not in d and "waiting for input" not in f["q2.bound"].text


def test_q2_on_a_cpu_tells_the_batches_from_the_framework_overhead(tmp_path):
    """Before, the DataLoader's 64% of each CPU step was called framework overhead (Python, dispatch)."""
    _, f, _ = run(CPU_LOADER)
    q2 = f["q2.bound"]
    want = scan(CPU_LOADER)
    share = statistics.median(want[n][1] / want[n][0] for n in steady(want))  # (the steady state's steps)
    assert q2.title == "Input-bound" and q2.evidence["bound"] == "input-bound"
    assert q2.evidence["data_share_median"] == pytest.approx(share, abs=1e-3)
    assert f"{100 * share:.1f}%" in q2.text
    # the same DataLoader beside CPU math that takes most of the step: compute-bound, the batches still said
    path = vt.data_loader_steps(tmp_path / "t.json", [300.0] * 3, gpu=False, compute_us=2000.0)
    _, f, _ = run(path)
    assert f["q2.bound"].title == "Compute-bound" and "the DataLoader handing out" in f["q2.bound"].text
    # the collation's aten::stack inside the DataLoader is the input's work, not the step's math
    assert "aten::stack" not in f["q2.bound"].evidence["work_ops"]


def test_the_starved_gpu_is_sent_to_the_input_or_to_the_python_not_to_cuda_graphs():
    _, _, d = run(LOADER)
    fix = d["gpu_starved"].fix
    assert fix.startswith("The step's largest CPU cost is waiting for its batch") and "torch.compile(mode=" not in fix
    waits = [scan(LOADER)[n][1] for n in steady(scan(LOADER))]
    assert f"{statistics.mean(waits):,.1f} µs per step inside the DataLoader" in fix
    # the Python case: by a scan, each steady step's thread spent its time outside any ATen op or runtime call, less
    # at most what the autograd engine's thread was busy meanwhile (the loop's thread waiting for the backward)
    _, _, d = run(PYTHON)
    x = d["gpu_starved"]
    assert "torch.compile(mode=" not in x.fix
    ev = [e for e in scan_trace(PYTHON) if e.get("ph") == "X"]
    lo, hi = [], []
    for n in steady(scan(PYTHON)):
        (st,) = [e for e in ev if e["name"] == f"ProfilerStep#{n}" and e["cat"] != "gpu_user_annotation"]
        b, end = st["ts"], st["ts"] + st["dur"]
        clip = lambda es: [(max(b, e["ts"]), min(end, e["ts"] + e["dur"])) for e in es  # noqa: E731
                           if e["ts"] < end and e["ts"] + e["dur"] > b]
        mine = [e for e in ev if e["tid"] == st["tid"] and e["cat"] in ("cpu_op", "cuda_runtime", "cuda_driver")]
        engine = [e for e in ev if e["tid"] != st["tid"] and e["pid"] == st["pid"]
                  and e["name"].startswith("autograd::engine::evaluate_function:")]
        free = st["dur"] - _union(clip(mine))
        lo.append(free - _union(clip(engine)))
        hi.append(free)
    said = float(x.fix.split("its thread spent ")[1].split(" µs")[0].replace(",", ""))
    assert statistics.median(lo) - 0.1 <= said <= statistics.median(hi) + 0.1
    assert said >= 0.5 * x.evidence["cpu_step_us"]
    assert x.fix.startswith("Most of the step is Python that runs no op")
    # recorded without Python frames (no python_function event): it says how to find out
    assert not any(e.get("cat") == "python_function" for e in ev) and "profile once with with_stack=True" in x.fix


def _own_us(ev, e) -> float:
    """A slice's own time by a plain scan: its duration less its direct children's on its own (pid, tid) lane."""
    lane = [x for x in ev if (x["pid"], x["tid"]) == (e["pid"], e["tid"]) and x is not e
            and x["ts"] >= e["ts"] and x["ts"] + x["dur"] <= e["ts"] + e["dur"]]
    kids = [x for x in lane if not any(y is not x and y["ts"] <= x["ts"] and x["ts"] + x["dur"] <= y["ts"] + y["dur"]
                                       and y["dur"] > x["dur"] for y in lane)]
    return e["dur"] - sum(x["dur"] for x in kids)


def test_with_python_frames_the_starved_gpu_is_still_sent_to_the_input_first():
    """The two workers' loop again on the H200, recorded with with_stack=True: the Python frames under the
    DataLoader's range (a queue's get, a lock's acquire) hold its time, so the range's own time is small and no longer
    the largest CPU op, and the queue's feeder threads wait beside the step. The batch wait is still most of the step:
    the finding must send the user to the input first, by the wait's own measure, not to CUDA graphs (a first version
    read the largest op by own time and did)."""
    path = H200 / "stack_workers_eager.json.gz"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation"]
    by_step = scan(path)
    waits = [by_step[n][1] for n in steady(by_step)]
    assert sum(waits) / sum(by_step[n][0] for n in steady(by_step)) >= 0.5
    loads = [e for e in ev if str(e["name"]).endswith("DataLoaderIter.__next__")]
    assert loads and all(_own_us(ev, e) < 0.05 * e["dur"] for e in loads)  # the frames under it hold the time
    _, f, d = run(path)
    fix = d["gpu_starved"].fix
    assert fix.startswith("The step's largest CPU cost is waiting for its batch")
    assert f"{statistics.mean(waits):,.1f} µs per step inside the DataLoader" in fix
    assert "torch.compile(mode=" not in fix and "input_bound" in d


@pytest.mark.parametrize("call_us,sent", [(10.0, True), (40.0, False)])
def test_the_input_comes_first_where_its_wait_is_the_largest_cost(tmp_path, call_us, sent):
    """Each step: a DataLoader batch of 300 µs whose collate runs an op of 280 µs own time (the range's own time is
    not the largest op's), then ten ops of ``call_us`` + 5 µs, each launching a 2 µs kernel by a launch call of
    ``call_us``. The batches are over a fifth of the step either way (the input rule speaks); the starved finding
    sends the user to them first where their wait is the largest cost a fix names: more than the launch calls' 100 µs
    a step, not where these take 400 µs (then it says to cut the launches)."""
    t = vt.Trace()
    for n in range(4):
        def body(t):
            t.cpu(vt.WORKERS_NEXT, 300.0, cat="user_annotation", children=lambda t: t.cpu("aten::stack", 290.0))
            for k in range(10):
                t.cpu(f"aten::op{k}", call_us + 5.0, children=lambda t: t.launch(vt.BF16_GEMM, 2.0, call_us=call_us))
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    by_step = scan(path)
    waits = [by_step[n][1] for n in steady(by_step)]
    share = sum(waits) / sum(by_step[n][0] for n in steady(by_step))
    assert DATA_WAIT_AT <= share < 0.5 if not sent else share >= DATA_WAIT_AT
    _, _, d = run(path)
    assert "input_bound" in d
    fix = d["gpu_starved"].fix
    if sent:
        assert fix.startswith("The step's largest CPU cost is waiting for its batch")
        assert f"{statistics.mean(waits):,.1f} µs per step inside the DataLoader" in fix
    else:
        assert fix.startswith("Cut the launches") and "The step waits for its batch" not in fix


def test_the_python_finding_points_to_the_frames_a_trace_already_holds():
    """TraceLens' BERT-small trace was recorded with with_stack=True (1,385 python_function slices): the fix reads its
    Python frames rather than asking for a recording the trace already has."""
    path = DATA / "traces" / "gaunernst_bert-small-uncased__1016001.json.gz"
    frames = [e for e in scan_trace(path) if e.get("ph") == "X" and e.get("cat") == "python_function"]
    assert len(frames) == 1385
    with open_trace(path, engine="sqlite") as s:
        [x] = [x for x in diagnose(s).diagnoses if x.rule == "gpu_starved"]
    assert x.fix.startswith("Most of the step is Python that runs no op")
    assert "recorded its Python frames" in x.fix and "profile once with with_stack=True" not in x.fix


@pytest.mark.parametrize("path", [DATA / "third_party" / "gpu_metrics_input.json",
                                  DATA / "third_party" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                                  DATA / "h200_train" / "mlp_train_adam_foreach_bf16.json.gz"],
                         ids=lambda p: p.name)
def test_other_formats_ops_and_a_wait_for_the_backward_are_not_python(path):
    """The 2021 format names its ops ``Operator`` and its calls ``Runtime``; on a GPU the loop's thread waits inside
    ``train::backward`` while the autograd engine's thread runs the backward's ops. Neither is Python that runs no op:
    a first version of the measure called 12.7 of HTA's 13.4 ms step, and 2.0 of the bf16 MLP's 3.0 ms, Python."""
    _, _, d = run(path)
    assert "gpu_starved" in d and "Python that runs no op" not in d["gpu_starved"].fix


def test_a_step_slice_recorded_apart_from_the_loop_has_no_own_time_of_the_loop():
    """HTA's Triton example records ProfilerStep#1 under a process and thread of its own, none of the step's ops or
    launches with it (a plain scan says so): its whole window is that thread's 'own' time, which is not the loop's
    Python. The rule lists the ops' own times and no step-slice time beside them (a first version added the whole
    step, 1,673.2 µs, to ops that already filled 1,405.4 µs of it); a step slice on the loop's own thread keeps it."""
    path = DATA / "traces" / "triton_example.json.gz"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    (st,) = [e for e in ev if e["name"] == "ProfilerStep#1"]
    assert not [e for e in ev if (e["pid"], e["tid"]) == (st["pid"], st["tid"]) and e is not st]
    assert [e for e in ev if e["name"] == "cuLaunchKernel" and e["tid"] != st["tid"]]
    x = run(path)[2]["gpu_starved"]
    assert x.evidence["step_slice_own_us"] is None and "not listed" not in x.text
    y = run(PYTHON)[2]["gpu_starved"]
    assert y.evidence["step_slice_own_us"] > 0 and "not listed, the step slice's own time" in y.text


# --- the allocator in every step ------------------------------------------------------------------------------------

EMPTY, KEPT = H200 / "empty_cache_eager.json", H200 / "empty_cache_kept_eager.json"
ALLOCATOR = ("cudaMalloc", "cudaFree")


def _allocator_calls(path) -> dict[int, tuple[int, float]]:
    """{N: (cudaMalloc and cudaFree calls inside ProfilerStep#N's window, their µs)} by a plain scan."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    out = {}
    for st in ev:
        if str(st["name"]).startswith("ProfilerStep#") and st.get("cat") != "gpu_user_annotation":
            mine = [e for e in ev if e["name"] in ALLOCATOR and st["ts"] <= e["ts"] < st["ts"] + st["dur"]]
            out[int(st["name"].split("#")[1])] = (len(mine), sum(e["dur"] for e in mine))
    return out


def test_empty_cache_in_the_loop_is_found_and_costed_by_the_driver_calls():
    """The same H200 training step with and without torch.cuda.empty_cache() at its end: 3 cudaMalloc and 3 cudaFree
    in every step with it, none without; the rule's cost is those calls' time per steady step, by a scan, and the
    steps with the call are longer than without by at least that much."""
    calls = _allocator_calls(EMPTY)
    basis = steady(calls)
    assert all(calls[n][0] == 6 for n in calls)
    _, _, d = run(EMPTY)
    x = d["allocator_in_step"]
    per = statistics.mean(calls[n][1] for n in basis)
    assert x.cost_us_per_step == pytest.approx(per, abs=0.01)
    assert "cudaMalloc ×3, cudaFree ×3 per step" in x.text or "cudaFree ×3, cudaMalloc ×3 per step" in x.text
    assert "empty_cache()" in x.fix
    longer = statistics.mean(scan(EMPTY)[n][0] for n in basis) - statistics.mean(scan(KEPT)[n][0] for n in steady(scan(KEPT)))
    assert longer >= per
    assert all(n == 0 for n, _ in _allocator_calls(KEPT).values())
    assert "allocator_in_step" not in run(KEPT)[2]


def test_one_step_that_grew_the_cache_is_no_allocator_verdict():
    """This project's compiled static-cache decode on the H200 calls the driver's allocator three times in its first
    step and in its second, none in its third: of the steady state (the steps after the first), one step in two. No
    rule."""
    path = DATA / "h200_train" / "llm_decode_static_compile_ro.json.gz"
    calls = _allocator_calls(path)
    assert [calls[n][0] for n in sorted(calls)] == [3, 3, 0]
    assert "allocator_in_step" not in run(path)[2]


def _gemm_steps(extra, steps: int = 4) -> vt.Trace:
    """``steps`` steps of six 10 µs ops on the loop's thread, each launching a 100 µs kernel (a 5 µs call);
    ``extra(t, n, b)`` adds step ``n``'s other slices (``b``: the step's start)."""
    t = vt.Trace()
    for n in range(steps):
        def body(t, n=n):
            b = t.t
            for k in range(6):
                t.cpu(f"aten::op{k}", 10.0, children=lambda t: t.launch(vt.BF16_GEMM, 100.0, call_us=5.0))
            extra(t, n, b)
        t.step(n + 1, body)
    return t


def _call_beside(t, name: str, ts: float, dur: float) -> None:
    """A runtime call on a thread (tid 3) that holds no step slice and launches nothing."""
    t.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 3, "ts": ts, "dur": dur,
                     "args": {}})


@pytest.mark.parametrize("on_loop", [False, True])
def test_driver_calls_beside_the_step_are_not_its_cost(tmp_path, on_loop):
    """Each of 4 steps: the loop's thread launches six 100 µs kernels (60 µs of ops); a second thread that holds no
    step slice and launches nothing calls cudaFree twice (40 µs each) and cudaMalloc once (30 µs) in the step's
    window: another thread's time, no cost of the step's, so no verdict. With one cudaMalloc of 20 µs on the loop's
    thread too, the rule speaks of that call's 20 µs per step (by hand); the other thread's 3 calls, 110 µs, are
    named apart, and their frees count as blocks given back (the cache is the process's). Its cost is none: the
    step's 600 µs of kernels outlast its CPU time, so without the call the step is no shorter."""
    def extra(t, n, b):
        if on_loop:
            t.cpu("cudaMalloc", 20.0, cat="cuda_runtime")
        for k, (name, dur) in enumerate([("cudaFree", 40.0), ("cudaFree", 40.0), ("cudaMalloc", 30.0)]):
            _call_beside(t, name, b + 1.0 + 41.0 * k, dur)
        t.t = max(t.t, b + 130.0)
    r, _, d = run(_gemm_steps(extra).write(tmp_path / "t.json"))
    own = r.cpu_own_times
    mine = own[own["name"].isin(["cudaFree", "cudaMalloc"])]
    assert mine.groupby("name")["beside_calls"].sum().to_dict() == {"cudaFree": 8, "cudaMalloc": 4}
    if not on_loop:
        assert "allocator_in_step" not in d
        return
    x = d["allocator_in_step"]
    ss = r.summary["steady_state"]
    assert ss["gpu_us_per_step"] == pytest.approx(600.0) and ss["cpu_us_per_step"] < 600.0
    assert x.cost_us_per_step == 0.0 and "a step gets no shorter than its GPU work" in x.cost_basis
    assert x.evidence["calls_per_step"] == {"cudaMalloc": 1.0}
    assert x.evidence["frees"] and x.evidence["beside_calls_per_step"] == 3.0
    assert "cudaMalloc ×1 per step, 20.0 µs of CPU time per step" in x.text
    assert "made 3 more such calls per step, 110.0 µs, time that overlaps the step's" in x.text
    assert "that is torch.cuda.empty_cache() on a thread beside the step, or the allocator" in x.text
    assert "empty_cache()" in x.fix


# --- communication that no compute overlaps -------------------------------------------------------------------------

CONTROL = DATA / "big" / "control.json.gz"
NCCL = DATA / "third_party" / "nccl_data.json.gz"


def _union_in(iv, b, e) -> float:
    return _union([(max(b, x), min(e, y)) for x, y in iv if x < e and y > b])


def _exposed_by_scan(path) -> dict[int, tuple[float, float, float, dict]]:
    """{N: (window µs, GPU time of collectives alone in it, collectives' own time in it, {the collective its kernel
    names say (``AllReduce``, ``SendRecv``): its kernels' own time in it})} by a plain scan. A step's
    window runs from its CPU slice's start to the later of its end and the end of the GPU work its launch calls
    (paired by ``args.correlation``) queued, cut to start where the window before it ended; collectives are the GPU
    ops named ``nccl...``; alone means while no other GPU op (any stream) ran."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    gpu_cats = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
    gpu = [e for e in ev if str(e.get("cat", "")).lower() in gpu_cats]
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev
                 if str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "runtime")
                 and "correlation" in (e.get("args") or {})}
    steps = sorted((e for e in ev if str(e["name"]).startswith("ProfilerStep#") and e["cat"] != "gpu_user_annotation"),
                   key=lambda e: e["ts"])
    out, prev_end = {}, float("-inf")
    for st in steps:
        b, end = st["ts"], st["ts"] + st["dur"]
        mine = [g for g in gpu if b <= launch_ts.get((g.get("args") or {}).get("correlation"), float("inf")) < end]
        e = max([end] + [g["ts"] + g["dur"] for g in mine])
        b = max(b, prev_end)
        prev_end = e
        iv = lambda es: [(g["ts"], g["ts"] + g["dur"]) for g in es]  # noqa: E731
        comm = [g for g in gpu if str(g["name"]).lower().startswith("nccl")]
        other = [g for g in gpu if not str(g["name"]).lower().startswith("nccl")]
        alone = _union_in(iv(gpu), b, e) - _union_in(iv(other), b, e)
        kinds = {word: _union_in(iv([g for g in comm if re.search(rf"_{word}[_(]", str(g["name"]))]), b, e)
                 for word in ("AllReduce", "SendRecv")}
        out[int(st["name"].split("#")[1])] = (e - b, alone, _union_in(iv(comm), b, e), kinds)
    return out


def test_collectives_that_no_compute_overlaps_are_found_on_a_real_training_trace():
    """HTA's A100 control trace (a sharded-embedding model): its send/receive and all-reduce kernels run alone on the
    GPU a fifth of each steady step."""
    want = _exposed_by_scan(CONTROL)
    basis = steady(want)
    window = sum(want[n][0] for n in basis)
    alone = sum(want[n][1] for n in basis)
    comm = sum(want[n][2] for n in basis)
    _, _, d = run(CONTROL)
    x = d["exposed_communication"]
    assert alone / window >= 0.1
    # what overlapping them can save stops at the CPU's own time: the step less the time it was blocked on the GPU
    # (in syncs and in copies to pageable memory), by test_copy_bound's plain scan of the same steps
    rows = [x for x in scan_steps(CONTROL) if x["step"] in basis]
    cpu, gpu = statistics.median(x["cpu"] for x in rows), statistics.median(x["gpu"] for x in rows)
    own = cpu - statistics.median(x["in_syncs"] + x["in_pageable"] for x in rows)
    assert max(cpu, gpu) - own < alone / len(basis)
    assert x.cost_us_per_step == pytest.approx(max(cpu, gpu) - own, abs=1.0)
    assert "more than the step can lose" in x.cost_basis
    assert x.evidence["exposed_share"] == pytest.approx(alone / window, abs=1e-4)
    assert x.evidence["hidden_share"] == pytest.approx(1 - alone / comm, abs=1e-4)
    assert "send/receive" in x.text and x.fix.startswith("Point-to-point transfers")
    # each collective's time is read in the same steady windows as the exposed and overlapped time
    kinds = {k: sum(want[n][3][word] for n in basis) / len(basis)
             for word, k in (("SendRecv", "send/receive"), ("AllReduce", "all-reduce"))}
    assert x.evidence["collectives_us_per_step"] == pytest.approx(kinds, abs=0.01)
    assert sum(kinds.values()) == pytest.approx(comm / len(basis), abs=0.01)  # they never ran at the same time
    said = f"send/receive {kinds['send/receive']:,.1f} µs, all-reduce {kinds['all-reduce']:,.1f} µs per step."
    assert said in x.text
    # a mean over the steps, said as one (question 2 gives the median step's exposed collectives beside it)
    assert f"only collectives for {alone / len(basis):,.1f} µs per step on average," in x.text


def test_collectives_mostly_alone_but_a_small_share_of_the_step_are_not_a_verdict():
    """HTA's 2-GPU rank 0: its all-reduce kernels run with little compute beside them, but take 7% of the steady
    steps' windows (the GPU idles most of the step): under the rule's tenth."""
    want = _exposed_by_scan(NCCL)
    basis = steady(want)
    share = sum(want[n][1] for n in basis) / sum(want[n][0] for n in basis)
    assert 0.03 < share < 0.1
    assert "exposed_communication" not in run(NCCL)[2]


@pytest.mark.parametrize("overlapped", [True, False])
def test_an_all_reduce_beside_compute_is_hidden_and_after_it_is_exposed(tmp_path, overlapped):
    """Each step: a 400 µs GEMM, then a 300 µs all-reduce on a second stream, launched at the GEMM's start
    (overlapped: it runs under the GEMM) or after it has finished (exposed: 300 µs of every step)."""
    t = vt.Trace()
    for n in range(4):
        def body(t):
            start = t.launch(vt.BF16_GEMM, 400.0)
            if not overlapped:
                t.sync()
            t.corr += 1
            ts = t.t
            t._x("cudaLaunchKernel", ts, 5.0, "cuda_runtime", correlation=t.corr)
            k = max(ts + 3.0, start if overlapped else t.gpu_free)
            t._x("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", k, 300.0,
                 "kernel", pid=0, tid=8, correlation=t.corr, device=0, stream=8)
            t.t = ts + 5.0
            t.gpu_free = max(t.gpu_free, k + 300.0)
            t.sync()
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    want = _exposed_by_scan(path)
    _, _, d = run(path)
    if overlapped:
        assert all(a == pytest.approx(0.0) for _, a, _, _ in want.values())
        assert "exposed_communication" not in d
    else:
        assert all(a == pytest.approx(300.0) for _, a, _, _ in want.values())
        x = d["exposed_communication"]
        assert x.cost_us_per_step == pytest.approx(300.0) and "all-reduce" in x.text
        assert x.fix.startswith("DDP overlaps each gradient bucket's all-reduce")


def test_collectives_at_once_on_two_streams_are_each_counted_and_said_to_overlap(tmp_path):
    """Each step: a 400 µs GEMM, then an all-reduce and a send/receive of 300 µs each at the same time on two streams:
    300 µs of every step runs collectives alone; each kind has its own 300 µs, which add up to twice that union, and
    the text says why."""
    t = vt.Trace()
    for n in range(4):
        def body(t):
            t.launch(vt.BF16_GEMM, 400.0)
            t.sync()
            ts = t.t
            for stream, name in ((8, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long)"),
                                 (9, "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)")):
                t.corr += 1
                t._x("cudaLaunchKernel", t.t, 5.0, "cuda_runtime", correlation=t.corr)
                t._x(name, ts + 20.0, 300.0, "kernel", pid=0, tid=stream, correlation=t.corr, device=0, stream=stream)
                t.t += 5.0
            t.gpu_free = max(t.gpu_free, ts + 320.0)
            t.sync()
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    want = _exposed_by_scan(path)
    assert all(a == pytest.approx(300.0) and k == {"AllReduce": 300.0, "SendRecv": 300.0}
               for _, a, _, k in want.values())
    x = run(path)[2]["exposed_communication"]
    assert x.cost_us_per_step == pytest.approx(300.0)
    assert x.evidence["collectives_us_per_step"] == pytest.approx({"all-reduce": 300.0, "send/receive": 300.0})
    assert x.evidence["communication_us_per_step"] == pytest.approx(300.0)
    assert "they add up to more than the collectives' time above" in x.text


def test_a_thread_that_prefetches_batches_beside_the_step_keeps_nobody_waiting(tmp_path):
    """The same built steps, their DataLoader ranges moved to a second thread of the process (a prefetching thread:
    the loop takes ready batches from it): the loop's thread waits for nothing, so no data time and no rule."""
    path = vt.data_loader_steps(tmp_path / "t.json", [400.0] * 4)
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:
        if str(e["name"]).startswith("enumerate(DataLoader)#") or e["name"] == "aten::stack":
            e["tid"] = 2
    path.write_text(json.dumps(doc))
    r, f, d = run(path)
    assert r.steps["data_us"].tolist() == [0.0] * 4
    assert "input_bound" not in d and "waiting for input" not in f["q2.bound"].text
    assert (r.phases.loc[r.phases["phase"] == "data", "cpu_us"] == 0).all()
    # the starved finding lists the own times of the step's thread, which fit in the step, and names the
    # prefetching thread's 400 µs a step (the range and its stack) apart, as time beside the step
    text = d["gpu_starved"].text
    step_us = r.summary["steady_state"]["cpu_us_per_step"]
    where = text.split("Where the CPU time goes")[1].split(". ")[0]
    listed = [float(x.replace(",", "")) for x in re.findall(r" ([\d,.]+) µs", where)]
    assert sum(listed) <= step_us and "DataLoader" not in where and "more than the step" not in text
    assert ("spent 400.0 µs per step beside it, most in enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ "
            "(390.0 µs)") in text


def test_the_starved_finding_points_to_the_input_finding_only_where_there_is_one(tmp_path):
    """Each step: 150 µs in the DataLoader (its largest op by own time) beside ten other ops of 80 µs, each
    launching a 2 µs kernel: the GPU starves, but the batches are 15% of the step, under the input rule's fifth, so
    the starved finding must not send the user to an input finding that is not there."""
    t = vt.Trace()
    for n in range(4):
        def body(t):
            t.cpu(vt.SINGLE_NEXT, 150.0, cat="user_annotation", children=lambda t: t.cpu("aten::stack", 10.0))
            for k in range(10):
                t.cpu(f"aten::op{k}", 80.0, children=lambda t: t.launch(vt.BF16_GEMM, 2.0))
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    _, share, _ = _share(path)
    assert 0.1 < share < DATA_WAIT_AT
    _, _, d = run(path)
    assert "input_bound" not in d
    top = d["gpu_starved"].text.split("largest first): ")[1]
    assert top.startswith(vt.SINGLE_NEXT)  # the DataLoader is the largest CPU cost by own time...
    assert "The step waits for its batch" not in d["gpu_starved"].fix  # ...but no input finding to point to


def test_batches_made_while_a_gpu_bound_step_runs_keep_nobody_waiting(tmp_path):
    """400 µs of DataLoader a step beside a 3 ms forward kernel: the GPU sets the pace (compute-bound), the CPU makes
    the next batch while the queue drains, so the batches are no wait, though they are a fifth of the CPU time."""
    path = vt.data_loader_steps(tmp_path / "t.json", [400.0] * 5, kernel_us=3000.0)
    r, f, d = run(path)
    assert r.summary["steady_state"]["bound"] == "compute-bound"
    assert r.steps["data_us"].tolist() == pytest.approx([400.0] * 5)
    assert "input_bound" not in d


def test_an_optimizer_that_runs_one_step_in_four_is_costed_per_step_of_the_loop(tmp_path):
    """Gradient accumulation with the profiler stepped per micro-batch: a for-loop AdamW in steps 4 and 8 only. The
    rule reads the optimizer's figures in the steps that ran it, and its cost per step of the loop: by a scan, the
    optimizer ranges' time in the steady steps (2 to 8) over those 7 steps."""
    path = vt.training_step(tmp_path / "t.json", impl="for-loop", steps=8, optimizer_every=4, ranges=False)
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    opt = {int(s["name"].split("#")[1]): e["dur"] for s in ev if s["name"].startswith("ProfilerStep#")
           for e in ev if e["name"] == "Optimizer.step#AdamW.step" and s["ts"] <= e["ts"] < s["ts"] + s["dur"]}
    assert sorted(opt) == [4, 8]
    _, _, d = run(path)
    x = d["unfused_optimizer"]
    assert "ran in 2 of the 7 steady-state steps" in x.text
    # the step is GPU-paced (compute-bound) or not; by hand, the GPU time of an optimizer step is its 4 parameters x
    # 5 ops x one 2 us kernel, its CPU time the range's duration by the scan
    per = 40.0 if "GPU time" in x.cost_basis else statistics.median(opt.values())
    assert x.cost_us_per_step == pytest.approx(per * 2 / 7, rel=1e-6)


def test_batches_copied_from_pinned_memory_alone_are_no_sync_finding():
    """The two-worker loop copies its batches from pinned memory with non_blocking=True and synchronises nowhere (a
    scan finds no synchronising call in its steps): the sync finding told it to do just that. The loop fed from
    pageable memory keeps the finding."""
    ev = [e for e in scan_trace(WORKERS) if e.get("ph") == "X"]
    copies = {e["name"] for e in ev if str(e["name"]).startswith("Memcpy")}
    assert copies == {"Memcpy HtoD (Pinned -> Device)"}
    steps = [s for s in ev if str(s["name"]).startswith("ProfilerStep#") and s["cat"] != "gpu_user_annotation"]
    assert not [e for e in ev for s in steps if "Synchronize" in str(e["name"])
                and s["ts"] <= e["ts"] < s["ts"] + s["dur"]]  # (the profiler's own sync comes after the last step)
    assert "sync_in_step" not in run(WORKERS)[2]
    assert "pageable" in run(LOADER)[2]["sync_in_step"].text


def test_a_compute_bound_verdict_that_rests_on_exposed_collectives_says_so():
    """HTA's control trace reads compute-bound by 66.03 ms of GPU work against 63.99 ms of the CPU's own time; of that
    work the collectives ran alone a median 14.46 ms a step (by scan): without them the GPU would wait on the CPU,
    and Q2 says so."""
    want = _exposed_by_scan(CONTROL)
    basis = steady(want)
    alone = statistics.median(want[n][1] for n in basis)
    rows = [x for x in scan_steps(CONTROL) if x["step"] in basis]
    cpu, gpu = statistics.median(x["cpu"] for x in rows), statistics.median(x["gpu"] for x in rows)
    own = cpu - statistics.median(x["in_syncs"] + x["in_pageable"] for x in rows)
    assert gpu >= own > gpu - alone
    q2 = run(CONTROL)[1]["q2.bound"]
    assert q2.evidence["bound"] == "compute-bound"
    assert q2.evidence["exposed_collectives_us_per_step"] == pytest.approx(alone, abs=1.0)
    assert "collectives that no other GPU work overlaps: without them the GPU would have" in q2.text
    assert "would wait on the CPU, so overlapping them makes the step overhead-bound" in q2.text


def _unaligned_bf16_gemms(path) -> tuple[dict[tuple[int, int, int], float], int]:
    """({(M, K, N): GPU µs per step} of the bf16 aten::mm / aten::addmm a leading dimension of which is not a
    multiple of 8, the number of steps), by a plain scan: an operand's leading dimension is its recorded stride that
    is not 1 (its rows' distance), the result's is N; each op's kernels are those whose launch call (same
    correlation) starts inside the op on its thread, summed over the trace and divided by the ProfilerSteps."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = [e for e in ev if str(e["name"]).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"]
    calls = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})]
    kernels = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "kernel"}
    per: dict[tuple[int, int, int], float] = {}
    for op in ev:
        if op.get("cat") != "cpu_op" or op["name"] not in ("aten::mm", "aten::addmm"):
            continue
        at = 1 if op["name"] == "aten::addmm" else 0  # addmm's first input is the bias
        if op["args"]["Input type"][at] != "c10::BFloat16":
            continue
        (m, k), (_k, n) = op["args"]["Input Dims"][at:at + 2]
        lds = [max(st) if 1 in st else None for st in op["args"]["Input Strides"][at:at + 2]] + [n]
        assert None not in lds  # (every operand here has a unit stride)
        if all(ld % 8 == 0 for ld in lds):
            continue
        for c in calls:
            if ((c["pid"], c["tid"]) == (op["pid"], op["tid"]) and op["ts"] <= c["ts"] < op["ts"] + op["dur"]
                    and c["args"]["correlation"] in kernels):
                per[(m, k, n)] = per.get((m, k, n), 0.0) + kernels[c["args"]["correlation"]]["dur"]
    return {s: us / len(steps) for s, us in per.items()}, len(steps)


@pytest.mark.parametrize("path", [LOADER, WORKERS, PYTHON], ids=lambda p: p.name)
def test_the_unaligned_gemm_finding_names_every_shape_its_cost_counts(path):
    """The MLP's last layer (N = 10) is unaligned forward (64×2048×10), in its backward's input gradient
    (64×10×2048, K = 10) and in its weight gradient (10×64×2048: ``dY.t() @ X``, whose first operand is a transposed
    view with rows 10 apart, so M = 10 is its leading dimension): the cost counts all three, so the text names each,
    with its GPU time per step, most time first."""
    want, _steps = _unaligned_bf16_gemms(path)
    assert sorted(want) == [(10, 64, 2048), (64, 10, 2048), (64, 2048, 10)]
    assert all(us < 10 for us in want.values())  # (µs below 10 are written with two decimals)
    x = run(path)[2]["unaligned_gemm_dims"]
    assert x.text.startswith("A bf16 GEMM with M=64, K=2048, N=10: N is not a multiple of 8 and is the leading "
                             "dimension of the result")
    which = {(64, 2048, 10): "N", (64, 10, 2048): "K", (10, 64, 2048): "M"}
    named = "; ".join(f"M={m}, K={k}, N={n} ({which[(m, k, n)]} unaligned) {us:.2f} µs"
                      for (m, k, n), us in sorted(want.items(), key=lambda kv: -kv[1]))
    assert f"The cost counts 3 unaligned GEMM shapes, each by its GPU time per step, this one first: {named}." in x.text
    got = {(s["m"], s["k"], s["n"]): s["us_per_step"] for s in x.evidence["shapes"]}
    assert got == pytest.approx(want, abs=1e-6)
    # the time at stake: the shapes' time less their FLOPs at the memory roof (the same for all: one intensity)
    flops, nbytes = 2 * 64 * 2048 * 10, 2 * (64 * 2048 + 2048 * 10 + 64 * 10)
    roof = flops / nbytes * json.loads((H200 / "peaks.json").read_text())["bandwidth_gbs"] / 1e3  # TFLOP/s
    at_stake = sum(want.values()) - 3 * flops / (roof * 1e6)
    assert f"{at_stake:.1f} µs per step" in x.cost_basis and f"memory roof ({roof:.1f} TFLOP/s" in x.cost_basis
    assert "these 3 GEMM shapes' time less the same FLOPs at their memory roof" in x.cost_basis
    assert "this GEMM time" not in x.cost_basis


def test_a_capped_gpu_time_cost_says_first_what_its_figure_is():
    """input_loader's steps are overhead-bound: taking the unaligned GEMMs' time off the GPU (10.8 µs a step)
    shortens a step by no more than the CPU spent blocked while the GPU worked, 6.60 µs a step by a plain scan (its
    cudaStreamSynchronize and pageable cudaMemcpyAsync calls over GPU busy time, the mean of the two steady steps).
    The cost is that figure, and its basis describes it first, then the time at stake: the figure is not "the
    GEMMs' time less ..."."""
    ev = [e for e in scan_trace(LOADER) if e.get("ph") == "X"]
    steps = sorted((e for e in ev if str(e["name"]).startswith("ProfilerStep#")
                    and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"])
    busy = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]

    def blocked_in(st):
        lo, hi = st["ts"], st["ts"] + st["dur"]
        calls = [e for e in ev if e.get("cat") == "cuda_runtime" and lo <= e["ts"] < hi
                 and e["name"] in ("cudaStreamSynchronize", "cudaMemcpyAsync")]
        return sum(max(0.0, min(c["ts"] + c["dur"], b) - max(c["ts"], a)) for c in calls for a, b in busy)
    blocked = statistics.mean(blocked_in(st) for st in steps[1:])  # the two steady-state steps
    want, _n = _unaligned_bf16_gemms(LOADER)
    flops, nbytes = 2 * 64 * 2048 * 10, 2 * (64 * 2048 + 2048 * 10 + 64 * 10)
    roof = flops / nbytes * json.loads((H200 / "peaks.json").read_text())["bandwidth_gbs"] / 1e3
    at_stake = sum(want.values()) - len(want) * flops / (roof * 1e6)  # (the shapes have the same FLOPs and bytes)
    assert blocked < at_stake
    x = run(LOADER)[2]["unaligned_gemm_dims"]
    assert x.cost_us_per_step == pytest.approx(blocked, abs=0.01)
    assert x.cost_basis.startswith("the time the step's CPU spent blocked in synchronize calls and in copies to or "
                                   "from pageable memory (which wait for the GPU too) while the GPU "
                                   f"worked, {blocked:.2f} µs per step (measured)")
    assert (f"the time at stake, {at_stake:.1f} µs per step, is not on the critical path: these 3 GEMM shapes' "
            "time less the same FLOPs") in x.cost_basis


def test_threads_beside_the_step_are_not_its_cost(tmp_path):
    """Each step: on the loop's thread, ten ops of 25 µs each launching a 2 µs kernel (call 10 µs); on a second thread
    (an autograd engine's), one op of 60 µs launching a kernel; on a third (a DataLoader's pin-memory thread), an
    ``aten::pin_memory`` of 500 µs that launches nothing, and a lock wait of 300 µs on a fourth. The third and fourth
    threads run beside the step: by hand their 800 µs a step are ``beside_us``, and the GPU-starved finding lists
    where the step's threads spend their time without them, then names them apart."""
    t = vt.Trace()
    for n in range(4):
        def body(t):
            b = t.t
            for k in range(10):
                t.cpu(f"aten::op{k}", 25.0, children=lambda t: t.launch(vt.BF16_GEMM, 2.0, call_us=10.0))
            t.t, here = b + 20.0, t.t  # (the other threads' slices, inside the window)
            t.events.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0",
                             "pid": 1, "tid": 2, "ts": b + 20.0, "dur": 60.0, "args": {}})
            t.t = b + 30.0
            ev = len(t.events)
            t.launch(vt.BF16_GEMM, 2.0, call_us=10.0)
            for e in t.events[ev:]:
                if e["cat"] == "cuda_runtime":
                    e["tid"] = 2
            t.events.append({"ph": "X", "cat": "cpu_op", "name": "aten::pin_memory", "pid": 1, "tid": 3,
                             "ts": b + 10.0, "dur": 500.0, "args": {}})
            t.events.append({"ph": "X", "cat": "python_function", "name": "<built-in method acquire of lock>",
                             "pid": 1, "tid": 4, "ts": b + 5.0, "dur": 300.0, "args": {}})
            t.t = max(here, b + 520.0)
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    r, _, d = run(path)
    own = r.cpu_own_times
    steady_rows = own[own["step"] == 3].set_index("name")
    assert steady_rows.loc["aten::pin_memory", "beside_us"] == pytest.approx(500.0)
    assert steady_rows.loc["<built-in method acquire of lock>", "beside_us"] == pytest.approx(300.0)
    for name in ("aten::op0", "autograd::engine::evaluate_function: MmBackward0", "cudaLaunchKernel"):
        assert steady_rows.loc[name, "beside_us"] == 0
    x = d["gpu_starved"]
    where = x.text.split("Where the CPU time goes")[1].split(". ")[0]
    assert "aten::pin_memory" not in where and "acquire" not in where
    assert "cudaLaunchKernel" in where and "MmBackward0" in where
    assert x.evidence["beside_us_per_step"] == pytest.approx(800.0)
    assert "spent 800.0 µs per step beside it, most in aten::pin_memory (500.0 µs)" in x.text


def test_a_first_step_call_beside_the_step_is_no_part_of_its_extra(tmp_path):
    """Four steps of six ops launching 100 µs kernels; the first step alone also calls cudaFuncGetAttributes (100 µs)
    and does 300 µs more of host work on the loop's thread, while a thread that holds no step slice and launches
    nothing (a pin-memory thread) calls cudaHostAlloc for 420 µs in its window. Question 3 counts the step's own call
    as part of the first step's extra (by a plain scan of the step slices) and names the other thread's apart, where
    it took more than the whole extra."""
    def extra(t, n, b):
        if n == 0:
            t.cpu("cudaFuncGetAttributes", 100.0, cat="cuda_runtime")
            t.cpu("aten::to", 300.0)
            _call_beside(t, "cudaHostAlloc", b + 2.0, 420.0)
    path = _gemm_steps(extra).write(tmp_path / "t.json")
    durs = [float(e["dur"]) for e in json.loads(path.read_text())["traceEvents"]
            if str(e["name"]).startswith("ProfilerStep#")]
    extra = durs[0] - statistics.median(durs[1:])
    r, f, _ = run(path)
    q3 = f["q3.cold_start"]
    assert q3.evidence["extra_us"] == pytest.approx(extra) and extra < 420.0
    assert q3.evidence["first_step_only_calls"] == {"cudaFuncGetAttributes": 1}
    assert q3.evidence["first_step_only_calls_beside"] == {"cudaHostAlloc": 1}
    assert (f"the first step alone calls cudaFuncGetAttributes ×1 (100.0 µs), 100.0 µs in all: "
            f"{100 * 100.0 / extra:.0f}% of the {extra:.1f} µs extra") in q3.text
    assert ("launch nothing (a DataLoader's pin-memory thread, say) call cudaHostAlloc ×1 (420.0 µs) in the first"
            in q3.text)


def test_the_h200_cold_dataloader_run_names_the_pin_thread_s_first_step_calls_apart():
    """A cold two-worker DataLoader loop on the H200 (no warm-up, the schedule recording from the first step): its
    pin-memory thread, which holds no step slice and launches nothing, pins the first batches in the first step
    alone (cudaHostAlloc ×18, 4.45 ms: a plain scan of the JSON). Question 3 names those calls apart, as time beside
    the step and none of its extra, and counts the step's own first-step calls as a share of the extra."""
    path = DATA / "h200_verdicts" / "cold_workers_eager.json.gz"
    x = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = sorted((e for e in x if str(e["name"]).startswith("ProfilerStep#")
                    and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"])
    loop = {(e["pid"], e["tid"]) for e in steps}
    launching = {(e["pid"], e["tid"]) for e in x if e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and ("LaunchKernel" in e["name"] or e["name"].startswith(("cudaMemcpy", "cudaMemset")))}

    def beside(step):
        return [e for e in x if e.get("cat") == "cuda_runtime" and (e["pid"], e["tid"]) not in loop | launching
                and step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
    later = {e["name"] for st in steps[1:] for e in beside(st)}
    first = [e for e in beside(steps[0]) if e["name"] not in later]
    alloc = [e for e in first if e["name"] == "cudaHostAlloc"]
    assert len(alloc) == 18
    q3 = run(path)[1]["q3.cold_start"]
    assert q3.evidence["first_step_only_calls_beside"] == {n: sum(1 for e in first if e["name"] == n)
                                                           for n in {e["name"] for e in first}}
    assert (f"Threads that hold no step slice and launch nothing (a DataLoader's pin-memory thread, say) call "
            f"cudaHostAlloc ×18 ({sum(e['dur'] for e in alloc) / 1000:.2f} ms)") in q3.text
    assert "time that overlaps the step's, and none of its extra" in q3.text
    # the step's own first-step calls (0.3% of the extra) and its slower launches, together a part of the extra
    own = q3.evidence["first_step_only_calls_us"] / q3.evidence["extra_us"]
    both = own + q3.evidence["first_step_slower_calls_us"] / q3.evidence["extra_us"]
    assert 0 < own < 0.005 and round(100 * both) == 6 and " 6% of the 429.02 ms extra" in q3.text
    assert "This is a cold start" in q3.text and " 0% of the" not in q3.text


@pytest.mark.parametrize("call, cause", [("cudaMallocHost", "pinned host memory allocation (cudaHostAlloc)"),
                                         ("cudaMalloc", "workspace allocation (cudaMalloc)")])
def test_a_first_step_allocation_is_named_by_the_memory_it_allocates(tmp_path, call, cause):
    """The first of four steps alone calls ``call`` (200 µs) on the loop's thread: pinned host memory is no device
    workspace."""
    def extra(t, n, b):
        if n == 0:
            t.cpu(call, 200.0, cat="cuda_runtime")
    q3 = run(_gemm_steps(extra).write(tmp_path / "t.json"))[1]["q3.cold_start"]
    assert f"the first step alone calls {call} ×1 (200.0 µs)" in q3.text
    assert f"These point at {cause};" in q3.text


def test_with_python_frames_the_threads_beside_the_step_are_found_by_their_launches():
    """The two workers' loop on the H200 with with_stack=True: the pin-memory thread and the queues' feeder threads
    wait beside the step. A plain scan of each steady step's window sorts the threads: the step slice's and those
    with a launch call in the window run the step, the rest run beside it. Every name the analysis counts beside the
    step occurs on a thread beside it, every name it counts in the step on a thread of the step; the step's threads'
    own time is within the step's duration (the loop's thread waits while the engine's runs)."""
    path = H200 / "stack_workers_eager.json.gz"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation"]
    r, _, _ = run(path)
    own = r.cpu_own_times
    launches = ("cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync")
    for e in ev:
        if not str(e["name"]).startswith("ProfilerStep#"):
            continue
        n = int(e["name"].split("#")[1])
        if n not in steady(scan(path)):
            continue
        b, end = e["ts"], e["ts"] + e["dur"]
        inside = [x for x in ev if b <= x["ts"] < end and x is not e and x.get("cat") not in ("kernel", "gpu_memcpy",
                                                                                                "gpu_memset")]
        runs = {(e["pid"], e["tid"])} | {(x["pid"], x["tid"]) for x in inside if x["name"] in launches}
        mine = {x["name"] for x in inside if (x["pid"], x["tid"]) in runs}
        aside = {x["name"] for x in inside if (x["pid"], x["tid"]) not in runs}
        rows = own[own["step"] == n]
        assert rows["beside_us"].sum() > 0.3 * e["dur"]  # the feeder threads' waits: most of a step
        assert set(rows.loc[rows["beside_us"] > 0, "name"]) <= aside
        assert set(rows.loc[rows["own_us"] - rows["beside_us"] > 0, "name"]) <= mine
        assert (rows["own_us"] - rows["beside_us"]).sum() <= e["dur"]


@pytest.mark.parametrize("gpu1_us", [0.0, 1000.0, 2000.0])
def test_another_gpu_s_work_hides_none_of_this_gpu_s_collectives(tmp_path, gpu1_us):
    """One process drives two GPUs: GPU 0 runs a 1 ms GEMM, then a 2 ms all-reduce; GPU 1 runs a GEMM of
    ``gpu1_us`` during that all-reduce. The rule counted GPU 1's GEMM as hiding GPU 0's wait ("compute hid 50%",
    and no finding at all beside a 2 ms GEMM). By a plain scan per GPU: GPU 0's all-reduce runs alone on it."""
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    t = vt.Trace()
    for n in range(1, 6):
        def body(t):
            t.cpu("aten::mm", 20, dims=[[4096, 4096], [4096, 4096]], types=vt.BF16,
                  children=lambda t: t.launch(vt.BF16_GEMM, 1000.0))
            done0 = t.gpu_free
            t.cpu("nccl:all_reduce", 20, children=lambda t: t.launch(nccl, 2000.0))
            if gpu1_us:
                t.cpu("aten::mm", 20, dims=[[4096, 4096], [4096, 4096]], types=vt.BF16,
                      children=lambda t: t.launch(vt.BF16_GEMM, gpu1_us, device=1, after=done0))
            t.sync("cudaDeviceSynchronize")
        t.step(n, body)
    path = t.write(tmp_path / "t.json")
    ev = [e for e in scan_trace(path) if e.get("cat") == "kernel"]
    comm0 = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["pid"] == 0 and "nccl" in e["name"].lower()]
    other0 = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["pid"] == 0 and "nccl" not in e["name"].lower()]
    alone = [(e - s) - sum(max(0.0, min(e, y) - max(s, x)) for x, y in other0) for s, e in comm0]
    assert alone == [2000.0] * 5 and len({e["pid"] for e in ev}) == (2 if gpu1_us else 1)
    x = run(path)[2]["exposed_communication"]
    assert x.evidence["exposed_us_per_step"] == pytest.approx(2000.0)
    assert x.evidence["hidden_share"] == pytest.approx(0.0)
    assert ("device 0" in x.text) == bool(gpu1_us) and "its other work (compute, copies) hid 0%" in x.text


def _without_gpu_work_of(src: Path, step: str, out: Path) -> Path:
    """``src`` with the GPU ops launched inside the step slice named ``step`` dropped (kernels, copies and memsets whose
    correlation is one of its launch calls', and their flow events), as a trace whose GPU buffer filled up before the
    profiler stopped loses them: the step's launch calls stay, its GPU work is gone."""
    events = scan_trace(src)
    (win,) = [e for e in events
              if e.get("ph") == "X" and e.get("name") == step and e.get("cat") != "gpu_user_annotation"]
    a, b = win["ts"], win["ts"] + win["dur"]
    ids = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
           and a <= e["ts"] < b and "correlation" in (e.get("args") or {})}
    gpu = ("kernel", "gpu_memcpy", "gpu_memset")
    kept = [e for e in events if not ((e.get("cat") in gpu and (e.get("args") or {}).get("correlation") in ids)
                                      or (e.get("ph") in ("s", "f") and e.get("cat") == "ac2g" and e.get("id") in ids))]
    assert len(events) - len(kept) > 10  # (the step launched work, now gone)
    out.write_text(json.dumps({"traceEvents": kept}))
    return out


def test_the_rules_read_the_steps_question_2_reads_where_one_lost_its_gpu_work(tmp_path):
    """A training trace of three steps whose last step's GPU work is missing (its launch calls stay): question 2's
    steady state is then step 2 alone, as every per-step figure's. The sync rule gave the sync calls' time per step
    over steps 2 and 3 beside a text that named one step, and the optimizer rule counted two steady steps."""
    src = DATA / "h200_train" / "mlp_train_adam_forloop_fp32.json.gz"
    path = _without_gpu_work_of(src, "ProfilerStep#3", tmp_path / "lost.json")
    events = scan_trace(path)
    (s2,) = [e for e in events if e.get("name") == "ProfilerStep#2" and e.get("cat") == "user_annotation"]
    a, b = s2["ts"], s2["ts"] + s2["dur"]
    syncs = [e["dur"] for e in events if e.get("ph") == "X" and e.get("name") == "cudaDeviceSynchronize"
             and a <= e["ts"] and e["ts"] + e["dur"] <= b]
    assert len(syncs) >= 1
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        d = {x.rule: x for x in diagnose(s, r).diagnoses}
    q2 = next(f for f in findings(r) if f.id == "q2.bound")
    assert q2.evidence["bound_basis_steps"] == [2]
    assert d["sync_in_step"].evidence["sync_calls_us_per_step"] == pytest.approx(sum(syncs), abs=1e-3)
    assert d["unfused_optimizer"].evidence["steady_steps"] == 1


def test_a_step_that_accumulates_gradients_reads_every_micro_batch_s_forward():
    """A real CPU run (tests/data/cpu/make_step_recordings.py) whose steps each run 4 micro-batches (a
    ``micro_forward`` range of the loop's own naming around each forward and loss, then ``backward()``) before the
    optimizer's step. A forward read by position took only what came before the step's first backward: one micro-batch
    of four, the other three's forwards counted as "other". Each step's forward is now its 4 ranges (a plain scan)."""
    path = DATA / "cpu" / "steps_grad_accumulation.json.gz"
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = [e for e in xs if str(e["name"]).startswith("ProfilerStep#")]
    fwd = {int(s["name"].split("#")[1]): [e for e in xs if e["name"] == "micro_forward"
                                         and s["ts"] <= e["ts"] < s["ts"] + s["dur"]] for s in steps}
    assert {n: len(v) for n, v in fwd.items()} == {2: 4, 3: 4, 4: 4}
    with open_trace(path, engine="sqlite") as s:
        ph = analyze(s).phases
    for n, ranges in fwd.items():
        got = ph[(ph["step"] == n) & (ph["phase"] == "forward")]["cpu_us"].item()
        assert got == pytest.approx(sum(e["dur"] for e in ranges), rel=0.02)
