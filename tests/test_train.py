"""Training steps: the train knobs refused with exact messages; real CPU runs of each workload's training step
checked by a plain scan of the trace JSON; the phases (forward, backward, optimizer, zero_grad, other) summing to
each step and matching a plain scan, on the app's ranges and on a real imported trace's own annotations; and the
training rules on synthetic traces."""
from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import verdict_traces as vt
from conftest import DATA, scan_trace
from test_analyses import _union  # the suite's one plain union of intervals

from profiling_core import (
    ConfigError,
    ExperimentConfig,
    WorkerError,
    analyze,
    diagnose,
    open_trace,
    run_experiment,
)
from profiling_core.analyses import PHASES, SUM_TOLERANCE_US, phases
from profiling_core.present import charts
from profiling_core.workloads import TRAIN_RANGES

SCRIPTS = DATA / "scripts"
FAST = dict(dtype="fp32", device="cpu", wait=0, warmup_steps=0, active=2)


# --- knobs ----------------------------------------------------------------------------------------------------------

BAD = [
    (dict(workload="mlp", knobs={"train": True, "optimizer": "lion"}),
     "knobs.optimizer must be one of 'sgd', 'adam', 'adamw', got 'lion'"),
    (dict(workload="linear", knobs={"train": True, "impl": "apex"}),
     "knobs.impl must be one of 'auto', 'for-loop', 'foreach', 'fused', got 'apex'"),
    (dict(workload="linear", knobs={"train": True, "autocast": "fp8"}),
     "knobs.autocast must be one of 'off', 'bf16', 'fp16', got 'fp8'"),
    (dict(workload="mlp", knobs={"train": "yes"}), "knobs.train must be true or false, got 'yes'"),
    (dict(workload="mlp", knobs={"optimizer": "sgd"}),
     "knobs.optimizer must be left at its default 'adamw' when train is False (it applies only when train is True), "
     "got 'sgd'"),
    (dict(workload="mlp", knobs={"train": True, "autocast": "fp16"}),
     "knobs.autocast must be 'off' when dtype is 'bf16' (autocast runs an fp32 model's ops in lower precision: use "
     "dtype 'fp32' with it), got 'fp16'"),
    (dict(workload="transformer_block", knobs={"train": True, "mode": "decode"}),
     "knobs.train must be false when mode is 'decode' (decode is inference against a KV cache; train a prefill "
     "block), got True"),
    (dict(workload="attention", knobs={"train": True}),
     "knobs must be one of attention's knobs: batch, heads, seq_len, head_dim, causal, backend, got 'train'"),
]


@pytest.mark.parametrize("kwargs,message", BAD)
def test_bad_train_knobs_are_refused_with_exact_messages(kwargs, message):
    with pytest.raises(ConfigError) as info:
        ExperimentConfig(**kwargs)
    assert str(info.value) == message


def test_train_knobs_name_the_run_and_leave_forward_runs_as_they_were():
    assert ExperimentConfig(workload="mlp").name == "mlp_b64_d1024_r4_bf16_cold_eager"
    cfg = ExperimentConfig(workload="mlp", knobs={"train": True, "optimizer": "sgd", "impl": "fused",
                                                  "autocast": "bf16", "log_loss": True}, dtype="fp32")
    assert cfg.name == "mlp_b64_d1024_r4_train_sgd_fused_ac-bf16_item_fp32_cold_eager"
    assert ExperimentConfig.from_json(cfg.to_json()) == cfg
    assert ExperimentConfig(workload="linear", knobs={"train": True}).name == \
        "linear_b64_in1024_out1024_train_adamw_bf16_cold_eager"


# --- real CPU runs --------------------------------------------------------------------------------------------------

SMALL = {
    "linear": {"batch": 4, "in_features": 16, "out_features": 8},
    "mlp": {"batch": 4, "d": 16},
    "transformer_block": {"batch": 1, "seq_len": 8, "d_model": 16, "heads": 2},
    "script": {"path": str(SCRIPTS / "train_step.py")},
}
OPTIM = {"linear": ("sgd", "for-loop", "SGD"), "mlp": ("adam", "foreach", "Adam"),
         "transformer_block": ("adamw", "fused", "AdamW"), "script": ("adamw", "auto", "AdamW")}


@pytest.fixture(scope="module")
def train_runs(tmp_path_factory):
    from profiling_core import RunStore
    store = RunStore(tmp_path_factory.mktemp("train") / "runs")
    out = {}
    for wl, knobs in SMALL.items():
        opt, impl, _cls = OPTIM[wl]
        cfg = ExperimentConfig(workload=wl, knobs={**knobs, "train": True, "optimizer": opt, "impl": impl,
                                                   "log_loss": wl == "mlp"}, **FAST)
        out[wl] = run_experiment(cfg, store=store)
    return out


def _steps(events):
    return [e for e in events if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", e["name"])
            and e.get("cat") != "gpu_user_annotation"]


def _inside(events, step, pred):
    a, b = step["ts"], step["ts"] + step["dur"]
    return [e for e in events if e.get("ph") == "X" and pred(e["name"]) and a <= e["ts"] and e["ts"] + e["dur"] <= b
            and e.get("cat") != "gpu_user_annotation"]


@pytest.mark.slow
@pytest.mark.parametrize("workload", list(SMALL))
def test_each_training_step_runs_for_real_with_one_optimizer_step_per_profiler_step(train_runs, workload):
    events = scan_trace(train_runs[workload].trace_path)
    steps = _steps(events)
    assert len(steps) == 2
    _opt, impl, cls = OPTIM[workload]
    for s in steps:
        ranges = {n: _inside(events, s, lambda x, n=n: x == n) for n in TRAIN_RANGES.values()}
        assert {n: len(r) for n, r in ranges.items()} == {n: 1 for n in TRAIN_RANGES.values()}
        order = [ranges[TRAIN_RANGES[p]][0]["ts"] for p in ("forward", "backward", "optimizer", "zero_grad")]
        assert order == sorted(order)
        assert len(_inside(events, s, lambda x: x == f"Optimizer.step#{cls}.step")) == 1
        assert len(_inside(events, s, lambda x: x == f"Optimizer.zero_grad#{cls}.zero_grad")) == 1
        assert _inside(events, s, lambda x: x.startswith("autograd::engine::evaluate_function: "))
        names = Counter(e["name"] for e in _inside(events, s, lambda x: x.startswith("aten::")))
        if impl == "fused":
            assert names["aten::_fused_adamw_"] == 1
        elif impl == "foreach":
            assert any(n.startswith("aten::_foreach_") for n in names)
        else:
            assert not any(n.startswith(("aten::_foreach_", "aten::_fused_")) for n in names)
        assert names["aten::item"] >= (1 if workload == "mlp" else 0)


@pytest.mark.slow
@pytest.mark.parametrize("workload", list(SMALL))
def test_the_phases_of_a_real_run_sum_to_each_step_and_match_a_plain_scan(train_runs, workload):
    path = train_runs[workload].trace_path
    events = scan_trace(path)
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
    df = r.phases
    assert r.has_phases and list(df["phase"].unique()) == list(PHASES)
    for st in _steps(events):
        n = int(st["name"].split("#")[1])
        got = df[df["step"] == n].set_index("phase")["cpu_us"]
        assert abs(got.sum() - st["dur"]) <= SUM_TOLERANCE_US  # the phases, other included, are the step
        for phase, name in TRAIN_RANGES.items():
            (rng,) = _inside(events, st, lambda x, name=name: x == name)
            assert got[phase] == pytest.approx(rng["dur"], abs=SUM_TOLERANCE_US)
        assert got["other"] == pytest.approx(st["dur"] - sum(got[p] for p in TRAIN_RANGES), abs=2e-3)
        assert got["other"] >= 0
    assert set(df["source"]) == {"record_function", ""}


@pytest.mark.slow
def test_a_script_without_a_module_cannot_train(tmp_path):
    from profiling_core import RunStore
    cfg = ExperimentConfig(workload="script", knobs={"path": str(SCRIPTS / "train_step.py"), "function": "frozen_step",
                                                     "train": True}, **FAST)
    with pytest.raises(WorkerError) as info:
        run_experiment(cfg, store=RunStore(tmp_path / "runs"))
    assert info.value.kind == "script"
    assert info.value.message.endswith("with train on, frozen_step must return (model, inputs) with model a "
                                       "torch.nn.Module whose call returns the loss; its step_fn is a "
                                       "builtin_function_or_method")


# --- an imported trace: the profiler's own annotations ------------------------------------------------------------

def test_an_imported_training_trace_gets_its_phases_from_the_profilers_annotations():
    path = DATA / "traces" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    events = scan_trace(path)
    with open_trace(path, engine="sqlite") as s:
        df = phases(s)
    st = [e for e in _steps(events) if e["name"] == "ProfilerStep#1"][0]
    got = df[df["step"] == 1].set_index("phase")
    back = _inside(events, st, lambda x: x.startswith("autograd::engine::evaluate_function: "))
    (opt,) = _inside(events, st, lambda x: x == "Optimizer.step#SGD.step")
    assert got.loc["backward", "cpu_us"] == pytest.approx(_union([(e["ts"], e["ts"] + e["dur"]) for e in back]),
                                                          abs=1e-3)
    assert got.loc["optimizer", "cpu_us"] == pytest.approx(opt["dur"], abs=1e-3)
    assert got.loc["forward", "cpu_us"] > 0 and got.loc["forward", "source"] == "position"
    assert got.loc["backward", "source"] == "profiler"
    assert abs(got["cpu_us"].sum() - st["dur"]) <= SUM_TOLERANCE_US
    assert got["kernels"].sum() == sum(1 for e in events if e.get("cat") == "kernel"
                                       and any(x.get("args", {}).get("correlation") == e["args"].get("correlation")
                                               and st["ts"] <= x["ts"] < st["ts"] + st["dur"]
                                               for x in events if x.get("cat") == "cuda_runtime"))


RESNET_2021 = DATA / "traces" / "worker0.1623143089861.pt.trace.json.gz"
NODE = re.compile(r"\w+Backward\d*|torch::autograd::AccumulateGrad")
"""A backward node's own name, as the 2021 format records it (written here apart from the library's)."""


def _outermost(xs):
    """The slices of ``xs`` (one thread's) that lie inside no other slice of ``xs``, by a plain sweep."""
    out, end = [], float("-inf")
    for e in sorted(xs, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end:
            out.append(e)
            end = e["ts"] + e["dur"]
    return out


def test_a_2021_training_trace_s_backward_is_its_backward_nodes():
    """The 2021 format has no ``evaluate_function`` slices: the autograd engine's thread records the backward nodes
    themselves at its top (``CudnnConvolutionBackward``, ``torch::autograd::AccumulateGrad``), which Q1's wait for
    the engine already read. The phases read the same slices: on Kineto's ResNet-50 V100 sample each step's backward
    is the union of its 339 top-level nodes (about 28 ms of CPU; before, no step had a backward, nor a forward, and
    ``other`` held 80 ms), its forward what the loop's thread ran before the first of them, and the GPU work those
    nodes launched is the backward's. A plain scan of the JSON gives each figure."""
    events = scan_trace(RESNET_2021)
    cpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("Operator", "Runtime")]
    threads = {(e["pid"], e["tid"]) for e in cpu}
    nodes = [e for th in threads for e in _outermost([x for x in cpu if (x["pid"], x["tid"]) == th])
             if NODE.fullmatch(e["name"])]
    steps = _steps(events)
    loop = {(st["pid"], st["tid"]) for st in steps}
    assert len(nodes) == 2034 and len({(e["pid"], e["tid"]) for e in nodes}) == 1
    assert not {(e["pid"], e["tid"]) for e in nodes} & loop  # the engine's own thread, not the loop's
    kernel_of = {e["args"]["correlation"]: e for e in events if e.get("cat") == "Kernel"}
    launches = [e for e in cpu if e.get("cat") == "Runtime" and e["args"].get("correlation") in kernel_of]
    with open_trace(RESNET_2021, engine="sqlite") as s:
        r = analyze(s)
    df = r.phases
    for st in steps:
        lo, hi = st["ts"], st["ts"] + st["dur"]
        got = df[df["step"] == int(st["name"].split("#")[1])].set_index("phase")
        mine = [(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in nodes
                if e["ts"] < hi and e["ts"] + e["dur"] > lo]
        assert len(mine) == 339
        (loader,) = _inside(events, st, lambda x: x.startswith("enumerate(DataLoader)#"))
        (opt,) = _inside(events, st, lambda x: x == "Optimizer.step#SGD.step")
        (zero,) = _inside(events, st, lambda x: x == "Optimizer.zero_grad#SGD.zero_grad")
        assert all(b >= loader["ts"] + loader["dur"] for b, _ in mine)  # no instant is both data and backward
        back = _union(mine)
        assert 27_000 < back < 30_000
        assert got.loc["backward", "cpu_us"] == pytest.approx(back, abs=1e-3)
        assert got.loc["backward", "source"] == "profiler"
        # the forward by position: the step's children on the loop's thread that end before the first node begins
        # and mark no phase (none of them holds that instant: the loop's thread waits in no slice meanwhile)
        first = min(b for b, _ in mine)
        kids = _outermost([e for e in cpu if (e["pid"], e["tid"]) == (st["pid"], st["tid"]) and e is not st
                           and lo <= e["ts"] and e["ts"] + e["dur"] <= hi])
        assert not any(e["ts"] < first < e["ts"] + e["dur"] for e in kids)
        fwd = _union([(e["ts"], e["ts"] + e["dur"]) for e in kids if e["ts"] + e["dur"] <= first
                      and e not in (loader, zero)])
        assert got.loc["forward", "cpu_us"] == pytest.approx(fwd, abs=1e-3) and fwd > 30_000
        assert got.loc["forward", "source"] == "position"
        assert got.loc["data", "cpu_us"] == pytest.approx(loader["dur"], abs=1e-3)
        assert got.loc["optimizer", "cpu_us"] == pytest.approx(opt["dur"], abs=1e-3)
        assert got.loc["zero_grad", "cpu_us"] == pytest.approx(zero["dur"], abs=1e-3)
        assert got.loc["other", "cpu_us"] == pytest.approx(st["dur"] - back - fwd - loader["dur"] - opt["dur"]
                                                           - zero["dur"], abs=2e-3)
        assert abs(got["cpu_us"].sum() - st["dur"]) <= SUM_TOLERANCE_US
        # the kernels the nodes' launch calls (on the engine's thread, inside a node) launched are the backward's
        k = sum(1 for e in launches if lo <= e["ts"] < hi and any(b <= e["ts"] < z for b, z in mine))
        assert got.loc["backward", "kernels"] == k == 521
    assert {"forward", "backward"} <= set(r.summary["train_phases"])


def test_a_2021_cpu_run_s_backward_nodes_under_the_step_are_its_backward(tmp_path):
    """On a CPU the engine runs the backward on the thread that called it: in the 2021 format its nodes lie under
    the step, not at the top of a thread of their own. They are the backward all the same (one node inside another,
    a reentrant backward, counts once), and no wait: the thread ran them itself. Built by hand: a 1000 µs step with
    a 190 µs forward op, zero_grad (40), the loss's gradient seed (10), nodes covering 100 + 80 + 40 µs and the
    optimizer (200)."""
    def x(name, ts, dur):
        return {"ph": "X", "name": name, "cat": "Operator", "pid": 7, "tid": 7, "ts": ts, "dur": dur, "args": {}}
    ev = [x("ProfilerStep#1", 0, 1000), x("aten::linear", 10, 190), x("Optimizer.zero_grad#SGD.zero_grad", 210, 40),
          x("aten::ones_like", 260, 10), x("MmBackward", 300, 100), x("aten::mm", 310, 80),
          x("AddBackward0", 420, 80), x("ReluBackward1", 430, 50), x("torch::autograd::AccumulateGrad", 520, 40),
          x("aten::add_", 525, 30), x("Optimizer.step#SGD.step", 600, 200)]
    path = tmp_path / "cpu2021.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    events = scan_trace(path)
    (st,) = _steps(events)
    kids = _outermost([e for e in events if e is not st])  # the step's children: one thread here
    back = [(e["ts"], e["ts"] + e["dur"]) for e in kids if NODE.fullmatch(e["name"])]
    assert _union(back) == 220
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
    got = r.phases.set_index("phase")
    assert got["cpu_us"].to_dict() == {"data": 0.0, "forward": 200.0, "backward": 220.0, "optimizer": 200.0,
                                       "zero_grad": 40.0, "other": 340.0}
    assert got.loc["backward", "source"] == "profiler" and got.loc["forward", "source"] == "position"
    assert (r.cpu_own_times["wait_us"] == 0).all()


def test_a_forward_only_trace_has_no_phases_and_no_phase_chart():
    with open_trace(DATA / "traces" / "4096_bf16_warm_eager.json", engine="sqlite") as s:
        r = analyze(s)
    assert not r.has_phases and r.phases.empty and r.summary["train_phases"] == {}
    assert "no training phases" in str(charts.phase_bars(r.phases).to_dict())


# --- synthetic traces: phases and the training rules ------------------------------------------------------------

def run(path, config=None):
    from test_verdicts import H200_PEAKS
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return r, {d.rule: d for d in diagnose(s, r, config, H200_PEAKS).diagnoses}


@pytest.mark.parametrize("ranges", [True, False])
@pytest.mark.parametrize("impl,kernels", [("for-loop", 20), ("foreach", 3), ("fused", 1)])
def test_the_phases_count_each_phases_kernels_by_hand(tmp_path, ranges, impl, kernels):
    path = vt.training_step(tmp_path / "t.json", impl=impl, ranges=ranges)
    r, _ = run(path)
    events = scan_trace(path)
    for st in _steps(events):
        got = r.phases[r.phases["step"] == int(st["name"].split("#")[1])].set_index("phase")
        assert got["kernels"].to_dict() == {"data": 0, "forward": 1, "backward": 2, "optimizer": kernels,
                                            "zero_grad": 0, "other": 0}
        assert got.loc["backward", "gpu_us"] == 80.0 and got.loc["forward", "gpu_us"] == 20.0
        assert abs(got["cpu_us"].sum() - st["dur"]) <= SUM_TOLERANCE_US
        (opt,) = _inside(events, st, lambda x: x == ("train::optimizer" if ranges else "Optimizer.step#AdamW.step"))
        assert got.loc["optimizer", "cpu_us"] == pytest.approx(opt["dur"])
    bars = charts.phase_bars(r.phases).to_dict()
    assert bars["encoding"]["color"]["scale"]["domain"] == list(PHASES)


@pytest.mark.parametrize("impl", ["for-loop", "foreach", "fused"])
def test_a_for_loop_optimizer_is_named_with_its_kernels_per_step(tmp_path, impl):
    _, found = run(vt.training_step(tmp_path / "t.json", impl=impl))
    if impl != "for-loop":
        assert "unfused_optimizer" not in found
        return
    x = found["unfused_optimizer"]
    assert x.evidence["kernels_per_step"] == 20 and x.evidence["aten_ops_per_step"] == 20
    assert x.evidence["gpu_us_per_step"] == 40.0 and x.evidence["optimizer"] == "AdamW"
    assert "fused=True" in x.fix and "foreach=True" in x.fix
    assert "(AdamW) ran its for-loop implementation: 20 ATen ops per step" in x.text


def test_logging_the_loss_every_step_is_named_as_such(tmp_path):
    _, found = run(vt.training_step(tmp_path / "t.json", log_loss=True))
    x = found["sync_in_step"]
    assert x.evidence["logged_per_step"] == 1 and x.evidence["sync_ops_by_phase"] == {"other": 1}
    assert "logging the loss with .item()" in x.text and x.fix.startswith("Log the loss every N steps")
    _, quiet = run(vt.training_step(tmp_path / "q.json"))
    assert "sync_in_step" not in quiet


@pytest.mark.parametrize("types,kernel,fires", [(vt.FP32, vt.SGEMM, True), (vt.FP32, vt.TF32_GEMM, True),
                                                (vt.BF16, vt.BF16_GEMM, False)])
def test_fp32_training_on_a_bf16_gpu_names_autocast(tmp_path, types, kernel, fires):
    r, found = run(vt.training_step(tmp_path / "t.json", types=types, kernel=kernel))
    assert ("fp32_training" in found) == fires
    if fires:
        x = found["fp32_training"]
        assert x.evidence["fp32_gemm_us_per_step"] == 100.0  # 20 forward + 2 × 40 backward, by hand
        assert "torch.autocast('cuda', dtype=torch.bfloat16)" in x.fix
        # the built step's CPU sets its pace (126 µs of CPU for 106 µs of GPU work): the GEMMs' time autocast would
        # save is not on the critical path, and the step waits in no synchronising call
        ss = r.summary["steady_state"]
        assert ss["bound"] == "overhead-bound" and not ss["sync_wait_us_per_step"]
        assert x.cost_us_per_step == 0.0 and "is not on the critical path" in x.cost_basis
    _, fwd = run(vt.training_step(tmp_path / "f.json", types=types, kernel=kernel, backward=False))
    assert "fp32_training" not in fwd  # no backward: not a training step


# --- the fit check counts what training holds ----------------------------------------------------------------------

MEMORY_CASES = [(wl, opt) for wl in ("linear", "mlp", "transformer_block") for opt in ("sgd", "adam", "adamw")] + [
    ("causal_lm", "sgd"), ("causal_lm", "adamw"), ("causal_lm_gpt2", "adam")]
LM_SMALL = {"layers": 2, "hidden": 32, "heads": 2, "vocab": 64, "seq_len": 8}


def _torch_held_bytes(torch, wl_name, knobs):
    """Bytes of every p.grad and every tensor in optimizer.state after one real training step on the CPU, read
    from torch: the step is run once (it fills the optimizer's state and ends with zero_grad(set_to_none=True)),
    then the same forward and loss are run again with backward() to make the gradients."""
    from profiling_core.workloads import get_workload
    wl = get_workload(wl_name)
    step, inputs = wl.build(torch, wl.check_knobs(knobs), "cpu", torch.float32)
    step(*inputs)
    out = step.forward(*inputs)
    (out if step.loss_fn is None else step.loss_fn(out)).backward()
    params = [p for g in step.optimizer.param_groups for p in g["params"]]
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    state = sum(t.numel() * t.element_size() for s in step.optimizer.state.values() for t in s.values()
                if isinstance(t, torch.Tensor))
    return grads, state, params


@pytest.mark.parametrize("case,optimizer", MEMORY_CASES)
def test_the_memory_of_a_training_step_counts_gradients_and_optimizer_state_as_torch_holds_them(case, optimizer):
    import torch

    from profiling_core.workloads import get_workload
    wl_name = "causal_lm" if case.startswith("causal_lm") else case
    if wl_name == "causal_lm":
        pytest.importorskip("transformers")
        knobs = {**LM_SMALL, "family": "gpt2" if case.endswith("gpt2") else "llama", "mode": "train",
                 "optimizer": optimizer}
    else:
        knobs = {**SMALL[wl_name], "train": True, "optimizer": optimizer}
    grads, state, params = _torch_held_bytes(torch, wl_name, knobs)
    wl = get_workload(wl_name)
    v = wl.check_knobs(knobs)
    n = sum(p.numel() for p in params)
    assert grads == 4 * n  # one fp32 gradient per parameter
    assert state == {"sgd": 4 * n, "adam": 8 * n + 4 * len(params), "adamw": 8 * n + 4 * len(params)}[optimizer]
    assert wl.train_state_bytes(v, 4) == grads + state  # the formula's gradient and optimizer-state part: exact
    if wl_name != "causal_lm":  # parameters and activations as for a forward pass, plus what training holds
        fwd = wl.check_knobs({k: x for k, x in knobs.items() if k not in ("train", "optimizer")})
        assert wl.memory_bytes(v, 4) == wl.memory_bytes(fwd, 4) + grads + state
    else:
        assert wl.memory_bytes(v, 4) >= 4 * n + grads + state


def test_a_forward_pass_holds_no_gradients_and_the_fit_check_says_so():
    from profiling_core.errors import DoesNotFitError
    from profiling_core.workloads import get_workload
    wl = get_workload("mlp")
    assert wl.train_state_bytes(wl.check_knobs({}), 4) == 0
    cfg = ExperimentConfig(workload="mlp", knobs={"d": 4096, "train": True, "optimizer": "adam"}, dtype="fp32")
    fwd = ExperimentConfig(workload="mlp", knobs={"d": 4096}, dtype="fp32")
    weights = 4 * (2 * 4096 * 16384 + 16384 + 4096)
    assert cfg.tensor_bytes() - fwd.tensor_bytes() == 3 * weights + 4 * 4  # grads, exp_avg, exp_avg_sq; 4 steps
    fwd.check_fits(int(fwd.tensor_bytes() / 0.9) + 1, "here")  # fits as a forward pass
    with pytest.raises(DoesNotFitError):  # but its training step holds four times the weights
        cfg.check_fits(int(fwd.tensor_bytes() / 0.9) + 1, "here")
