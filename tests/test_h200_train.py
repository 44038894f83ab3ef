"""Training steps and the causal LM as the app ran them on an H200 (``scripts/gpu_train.py``, tests/data/h200_train/app),
checked against a plain scan of each trace's JSON: the phases, the optimizer's kernels, the training rules."""
from __future__ import annotations

import json
from pathlib import Path
from statistics import median

import pytest

from conftest import scan_trace, steady
from profiling_core import analyze, diagnose, open_trace
from profiling_core.store import DevicePeaks

APP = Path(__file__).parent / "data" / "h200_train" / "app"
PEAKS = DevicePeaks.from_dict(json.loads((APP / "peaks.json").read_text()))
TRAIN = sorted(p.name.removesuffix(".json.gz") for p in APP.glob("*_train_*.json.gz"))


def cpu_ranges(events, name):
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op")
            and str(e.get("name", "")).startswith(name)]


def steps(events):
    return sorted((e for e in cpu_ranges(events, "ProfilerStep#")), key=lambda e: e["ts"])


def inside(e, outer):
    return outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"]


def kernels_launched_in(events, outer):
    """GPU kernels whose launch call (the same ``correlation``) started inside ``outer``."""
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    return [k for k in events if k.get("cat") == "kernel" and (c := calls.get(k.get("args", {}).get("correlation")))
            and outer["ts"] <= c["ts"] < outer["ts"] + outer["dur"]]


def run(label):
    meta = json.loads((APP / f"{label}.meta.json").read_text())
    with open_trace(APP / f"{label}.json.gz", engine="sqlite") as s:
        r = analyze(s)
        return r, {d.rule: d for d in diagnose(s, r, meta["config"], PEAKS).diagnoses}


@pytest.mark.parametrize("label", TRAIN)
def test_each_profiled_step_is_one_training_step_and_its_phases_sum_to_it(label):
    events = scan_trace(APP / f"{label}.json.gz")
    r, _ = run(label)
    for st in steps(events):
        k = int(st["name"].split("#")[1])
        opt_steps = [e for e in cpu_ranges(events, "Optimizer.step#") if inside(e, st)]
        assert len({(e["ts"], e["dur"]) for e in opt_steps}) == 1  # one optimizer step per profiler step
        got = r.phases[r.phases["step"] == k].set_index("phase")
        assert abs(got["cpu_us"].sum() - st["dur"]) < 0.01  # the phases and "other" tile the step
        for phase in ("forward", "backward", "optimizer", "zero_grad"):
            (rng,) = [e for e in cpu_ranges(events, f"train::{phase}") if inside(e, st)]
            assert got.loc[phase, "cpu_us"] == pytest.approx(rng["dur"], abs=0.01)
            assert got.loc[phase, "kernels"] == len(kernels_launched_in(events, rng))


def test_a_for_loop_adam_is_named_and_costed_by_its_gpu_time_in_a_compute_bound_step():
    label = "mlp_train_adam_forloop_fp32"
    events = scan_trace(APP / f"{label}.json.gz")
    r, found = run(label)
    assert r.summary["steady_state"]["bound"] == "compute-bound"  # fp32 GEMMs: 7.5 ms of GPU per 2.4 ms of CPU
    x = found["unfused_optimizer"]
    per_step = []
    for st in steps(events)[1:]:  # the steps after the first
        (rng,) = [e for e in cpu_ranges(events, "train::optimizer") if inside(e, st)]
        ks = kernels_launched_in(events, rng)
        per_step.append((len(ks), sum(k["dur"] for k in ks)))
    assert x.evidence["kernels_per_step"] == median(n for n, _ in per_step)
    assert x.cost_us_per_step == pytest.approx(median(us for _, us in per_step), rel=1e-6)  # the GPU sets the pace
    assert "GPU time" in x.cost_basis and "fused=True" in x.fix


@pytest.mark.parametrize("label", ["mlp_train_adam_fused_eager", "mlp_train_adam_foreach_eager"])
def test_fused_and_foreach_optimizers_are_not_called_unfused(label):
    events = scan_trace(APP / f"{label}.json.gz")
    _, found = run(label)
    assert "unfused_optimizer" not in found
    impl = "_fused_adam" if "fused" in label else "_foreach_"
    assert any(impl in e["name"] for e in cpu_ranges(events, "aten::"))


def test_compiled_static_cache_decode_replays_one_graph_per_token_and_says_what_is_left():
    label = "lm_decode_static_ro"
    events = scan_trace(APP / f"{label}.json.gz")
    _, found = run(label)
    tokens = cpu_ranges(events, "decode::token")
    graphs = [e for e in events if e.get("name") == "cudaGraphLaunch"]
    per_token = [sum(1 for g in graphs if inside(g, t)) for t in tokens]
    assert len(tokens) == 16 * len(steps(events)) and median(per_token) == 1
    x = found["decode_launch_bound"]
    assert "already replays a CUDA graph (1 cudaGraphLaunch per token)" in x.text
    assert "compile_breaks" not in found


def test_analyze_json_carries_the_phases_a_scan_finds(capsys):
    from profiling_core.cli import analyze as analyze_cli
    label = "mlp_train_adam_fused_eager"
    assert analyze_cli.main([str(APP / f"{label}.json.gz"), "--json", "--engine", "sqlite"]) == 0
    out = json.loads(capsys.readouterr().out)
    events = scan_trace(APP / f"{label}.json.gz")
    for st in steps(events):
        k = int(st["name"].split("#")[1])
        (rng,) = [e for e in cpu_ranges(events, "train::optimizer") if inside(e, st)]
        (row,) = [p for p in out["phases"] if p["step"] == k and p["phase"] == "optimizer"]
        assert row["cpu_us"] == pytest.approx(rng["dur"], abs=0.01)
        assert row["kernels"] == len(kernels_launched_in(events, rng)) == 3  # fused Adam: 3 kernels a step
    assert set(out["train_phases"]) == {"forward", "backward", "optimizer", "zero_grad", "other"}


def test_adams_step_counter_read_on_the_cpu_is_not_a_device_sync():
    label = "mlp_train_adam_foreach_eager"
    events = scan_trace(APP / f"{label}.json.gz")
    items = [e for e in cpu_ranges(events, "aten::item") if e["name"] == "aten::item"]
    runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    assert items and not any(inside(r, i) for i in items for r in runtime)  # no copy back, no sync inside them
    _, found = run(label)
    assert "sync_in_step" not in found


def test_a_foreach_optimizers_kernels_under_compile_are_not_graph_staging_copies():
    label = "mlp_train_adam_foreach_compile"  # mode="default": no CUDA graph to stage inputs into
    events = scan_trace(APP / f"{label}.json.gz")
    assert any("multi_tensor_apply" in e["name"] for e in events if e.get("cat") == "kernel")
    assert not any(e.get("name") == "cudaGraphLaunch" for e in events)
    _, found = run(label)
    assert "compile_breaks" not in found


def test_a_bf16_model_with_one_fp32_product_is_not_told_to_autocast():
    # the Llama trains under bf16 autocast; its rotary frequencies stay an fp32 product on purpose
    path = APP.parent / "llm_train.json.gz"
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        d = diagnose(s, r, None, PEAKS)
    g = d.roofline[d.roofline["kind"] == "gemm"]
    t = g["time_us"] * g["count"]
    assert 0 < t[g["dtype"].isin(["fp32", "tf32"])].sum() < 0.5 * t.sum()
    assert "fp32_training" not in {x.rule for x in d.diagnoses}


def test_per_step_gemm_time_counts_only_what_the_steps_launched():
    # a warm-up call's GEMM, launched before the profiler recorded, runs while the first step runs
    label = "mlp_train_adam_forloop_fp32"
    events = scan_trace(APP / f"{label}.json.gz")
    gemms = [e for e in events if e.get("cat") == "kernel" and "gemm" in e["name"].lower()]
    st = steps(events)
    launched = [k for s in st for k in kernels_launched_in(events, s) if "gemm" in k["name"].lower()]
    assert len(gemms) == len(launched) + 1
    _, found = run(label)
    per_step = sum(k["dur"] for k in launched) / len(st)
    assert found["fp32_without_tf32"].evidence["kernel_us_per_step"] == pytest.approx(per_step)
    assert found["fp32_training"].evidence["fp32_gemm_us_per_step"] == pytest.approx(per_step, rel=1e-3)


def test_a_loss_logged_every_step_is_the_sync_after_the_optimizer_and_the_grad_scaler_is_not():
    label = "mlp_train_log_loss"  # fused Adam, bf16 autocast, loss.item() after zero_grad
    events = scan_trace(APP / f"{label}.json.gz")
    st = steps(events)
    syncs = [e for e in events if e.get("name") == "cudaStreamSynchronize"]
    items = [e for e in cpu_ranges(events, "aten::item") if e["name"] == "aten::item"]
    zero = cpu_ranges(events, "train::zero_grad")
    assert len(items) == len(st) == len(syncs)
    for s in st:  # one .item() per step, after zero_grad, with its stream sync inside it
        (i,) = [x for x in items if inside(x, s)]
        (z,) = [x for x in zero if inside(x, s)]
        assert i["ts"] >= z["ts"] + z["dur"] and any(inside(y, i) for y in syncs)
    _, found = run(label)
    x = found["sync_in_step"]
    assert "aten::item ×1" in x.text and "after the optimizer, outside every phase" in x.text
    assert "every N steps" in x.fix
    # fp16 autocast: the GradScaler hands found_inf to the fused Adam on the device, so nothing syncs in the step
    label = "mlp_train_fp16_scaler"
    events = scan_trace(APP / f"{label}.json.gz")
    assert not [e for e in cpu_ranges(events, "aten::item") if e["name"] == "aten::item"]
    opt = cpu_ranges(events, "train::optimizer")
    amp = [e for e in cpu_ranges(events, "aten::_amp_") if e.get("cat") == "cpu_op"]
    assert amp and all(any(inside(a, o) for o in opt) for a in amp)  # unscale and scale update: the optimizer's
    r, found = run(label)
    assert "sync_in_step" not in found and "fp32_training" not in found
    for s in steps(events):  # fused Adam's kernels and the scaler's unscale and update ones
        (o,) = [x for x in opt if inside(x, s)]
        k = int(s["name"].split("#")[1])
        got = r.phases[(r.phases["step"] == k) & (r.phases["phase"] == "optimizer")]["kernels"].item()
        assert got == len(kernels_launched_in(events, o)) > 3


def test_a_grad_scaler_with_an_optimizer_that_is_not_fused_syncs_in_the_optimizer_phase():
    label = "lm_train_sgd_fp16_log"  # the Llama, SGD (foreach), fp16 autocast with a GradScaler, loss.item() each step
    events = scan_trace(APP / f"{label}.json.gz")
    items = [e for e in cpu_ranges(events, "aten::item") if e["name"] == "aten::item"]
    syncs = [e for e in events if e.get("name") == "cudaStreamSynchronize"]
    opt, step_rng = cpu_ranges(events, "train::optimizer"), cpu_ranges(events, "Optimizer.step#")
    st = steps(events)
    in_opt = [i for i in items if any(inside(i, o) for o in opt)]
    assert len(in_opt) == len(st) and not any(inside(i, o) for i in in_opt for o in step_rng)
    assert all(any(inside(y, i) for y in syncs) for i in in_opt)  # scaler.step reads found_inf back
    _, found = run(label)
    x = found["sync_in_step"]
    assert x.evidence["grad_scaler_per_step"] == 1 and x.evidence["logged_per_step"] == 1
    assert "the GradScaler reading found_inf back" in x.text and "fused=True" in x.fix
    assert "device-to-host copies per step of 4 B to pinned memory" in x.text
    _, found = run("mlp_train_fp16_scaler")  # fused Adam: found_inf stays on the device
    assert "sync_in_step" not in found


@pytest.mark.parametrize("label", [t for t in TRAIN if t.endswith("_compile")])
def test_a_compiled_training_steps_backward_graph_is_its_own_part_of_the_compile_cost(label):
    """The backward's FX graph (inside CompiledFunctionBackward, on the autograd engine's thread) counts with its step,
    apart from the forward's region: the region's split (graph + wrapping) stays the forward's, the backward's time is
    said on its own, and a forward with its backward is one compiled function, not "2 distinct compiled graphs"."""
    from profiling_core.explain import findings
    events = scan_trace(APP / f"{label}.json.gz")
    xs = [e for e in events if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation"]
    backward = [e for e in xs if e["name"] == "CompiledFunctionBackward"]
    per_step = []
    for st in steady(sorted(steps(events), key=lambda e: e["ts"])):  # (the steps after the first)
        fx = [e for e in xs if e["name"].startswith("## Call CompiledFxGraph") and st["ts"] <= e["ts"] <
              st["ts"] + st["dur"] and any(b["tid"] == e["tid"] and inside(e, b) for b in backward)]
        assert len(fx) == 1 and fx[0]["tid"] != st["tid"]  # run by the autograd engine's thread
        per_step.append(fx[0]["dur"])
    r, found = run(label)
    (q10,) = [f for f in findings(r) if f.id == "q10.compile_cost"]
    assert q10.evidence["backward_fx_graph_us"] == pytest.approx(median(per_step), abs=0.01)
    assert q10.evidence["wrapper_us"] > q10.evidence["prologue_us"] > 0
    (q9,) = [f for f in findings(r) if f.id == "q9.compile"]
    assert "1 distinct CompiledFxGraph hash (the same every step: a cache hit) and 1 backward graph" in q9.text
    assert "compile_breaks" not in found
