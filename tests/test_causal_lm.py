"""The causal_lm workload (a Hugging Face Llama / GPT-2 built from its config with random weights): knobs refused
with exact messages, parameters and FLOPs by hand, a clear refusal without transformers; real CPU runs of a tiny
model in each mode checked by a plain scan of the trace JSON (one forward per prefill step, new_tokens decode::token
ranges per decode step, one optimizer step per train step, the model's own module names); and the two decode
verdicts on synthetic traces: launch-bound tokens, and recompiles across decode lengths."""
from __future__ import annotations

import json
import re
import sys
from collections import Counter

import pytest

import verdict_traces as vt
from conftest import scan_trace
from profiling_core import ConfigError, ExperimentConfig, WorkerError, diagnose, open_trace, run_experiment
from profiling_core.analyses import analyze
from profiling_core.workloads import get_workload

TINY = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 16}
FAST = {"dtype": "fp32", "device": "cpu", "wait": 0, "warmup_steps": 0, "active": 2, "warmup": 1}
STEPS = 2


def x_names(events) -> Counter:
    return Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation")


# --- knobs ----------------------------------------------------------------------------------------------------------

BAD = [
    ({"heads": 7}, "knobs.heads must be a divisor of hidden 512, got 7"),
    ({"hidden": 60, "heads": 4}, "knobs.heads must be a divisor of hidden 60 that leaves an even head size (llama's "
                                 "rotary embedding turns pairs of dimensions; 60 ÷ 4 = 15), got 4"),
    ({"kv_heads": 3}, "knobs.kv_heads must be a divisor of heads 8, got 3"),
    ({"family": "gpt2", "kv_heads": 2}, "knobs.kv_heads must be left at its default None when family is 'gpt2' (it "
                                        "applies only when family is 'llama'), got 2"),
    ({"new_tokens": 4}, "knobs.new_tokens must be left at its default 16 when mode is 'prefill' (it applies only "
                        "when mode is 'decode'), got 4"),
    ({"mode": "train", "cache": "static"}, "knobs.cache must be left at its default 'dynamic' when mode is 'train' "
                                           "(it applies only when mode is 'decode'), got 'static'"),
    ({"mode": "decode", "cache": "paged"}, "knobs.cache must be one of 'dynamic', 'static', got 'paged'"),
    ({"family": "mistral"}, "knobs.family must be one of 'llama', 'gpt2', got 'mistral'"),
    ({"mode": "generate"}, "knobs.mode must be one of 'prefill', 'decode', 'train', got 'generate'"),
    ({"vocab": 1}, "knobs.vocab must be an integer from 2 to 1048576, got 1"),
    ({"layers": 0}, "knobs.layers must be an integer from 1 to 256, got 0"),
    ({"intermediate": 2.5}, "knobs.intermediate must be an integer from 1 to 262144, got 2.5"),
]


@pytest.mark.parametrize("knobs,message", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_knobs_are_refused_saying_what_is_allowed(knobs, message):
    with pytest.raises(ConfigError) as info:
        ExperimentConfig(workload="causal_lm", knobs=knobs)
    assert str(info.value) == message


def test_knob_flags_parse_an_empty_optional_knob_and_names_leave_it_out():
    wl = get_workload("causal_lm")
    assert wl.parse_knobs(["kv_heads=none", "mode=decode", "cache=static"]) == \
        {"kv_heads": None, "mode": "decode", "cache": "static"}
    assert ExperimentConfig(workload="causal_lm").name == "causal_lm_llama_prefill_b1_s128_L4_d512_h8_v32000_bf16_" \
                                                          "cold_eager"
    assert ExperimentConfig(workload="causal_lm", knobs={"mode": "decode", "kv_heads": 2, "new_tokens": 8,
                                                         "cache": "static"}).name == \
        "causal_lm_llama_decode_b1_s128_n8_static_L4_d512_h8_kv2_v32000_bf16_cold_eager"
    assert ExperimentConfig(workload="causal_lm", knobs={"mode": "decode"}).size_knob == "new_tokens"
    assert ExperimentConfig(workload="causal_lm").size_knob == "seq_len"


def test_flops_by_hand():
    # llama, 2 layers, d 64, 4 heads (16 each), 2 kv heads (32 wide), MLP 128, vocab 256, 1 × 16 tokens
    v = {**TINY, "kv_heads": 2, "intermediate": 128}
    per_token = 2 * (2 * (64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 128) + 256 * 64)  # q, k, v, o, MLP; head
    attention = 2 * 4 * (16 * 17 // 2) * 64  # per layer QKᵀ and PV over the causal pairs, summed over the heads
    prefill = per_token * 16 + attention
    assert ExperimentConfig(workload="causal_lm", knobs=v).step_flops() == prefill
    assert ExperimentConfig(workload="causal_lm", knobs={**v, "mode": "train"}).step_flops() == 3 * prefill
    dec = ExperimentConfig(workload="causal_lm", knobs={**v, "mode": "decode", "new_tokens": 3})
    assert dec.step_flops() == prefill + 3 * per_token + sum(2 * 4 * (16 + t) * 64 for t in (1, 2, 3))


@pytest.mark.parametrize("knobs", [{**TINY, "kv_heads": 2, "intermediate": 100},
                                   {**TINY, "family": "gpt2", "intermediate": 100},
                                   {**TINY, "family": "gpt2", "mode": "decode", "new_tokens": 4}])
def test_the_parameter_count_by_hand_is_the_models(knobs):
    transformers = pytest.importorskip("transformers")
    from profiling_core.workloads.causal_lm import (
        _config,
        lm_parameter_tensors,
        lm_parameters,
    )
    v = get_workload("causal_lm").check_knobs(knobs)
    cls = transformers.GPT2LMHeadModel if v["family"] == "gpt2" else transformers.LlamaForCausalLM
    model = cls(_config(transformers, v))
    assert sum(p.numel() for p in model.parameters()) == lm_parameters(v)
    assert len(list(model.parameters())) == lm_parameter_tensors(v)  # (gpt2's tied head counts once)


def test_without_transformers_the_workload_refuses_saying_how_to_install_it(monkeypatch):
    import torch
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    wl = get_workload("causal_lm")
    with pytest.raises(WorkerError) as info:
        wl.build(torch, wl.check_knobs(TINY), "cpu", torch.float32)
    assert info.value.kind == "workload"
    assert info.value.message == "the causal_lm workload needs transformers: pip install -e '.[llm]'"


# --- real runs on the CPU ---------------------------------------------------------------------------------------------

def run_lm(store, **knobs):
    pytest.importorskip("transformers")
    run = run_experiment(ExperimentConfig(workload="causal_lm", knobs={**TINY, **knobs}, **FAST), store=store)
    events = scan_trace(run.trace_path)
    names = x_names(events)
    assert sorted(n for n in names if re.fullmatch(r"ProfilerStep#\d+", n)) == ["ProfilerStep#0", "ProfilerStep#1"]
    assert names["causal_lm"] == STEPS
    return events, names


LLAMA_LAYER = ["model.layers.{i}", "model.layers.{i}.self_attn", "model.layers.{i}.mlp",
               "model.layers.{i}.input_layernorm", "model.layers.{i}.post_attention_layernorm"]


def module_ranges(names: Counter, prefix: str) -> dict:
    return {n: c for n, c in names.items() if n == prefix.split(".")[0] or n.startswith(prefix)
            or n in ("lm_head",)}


@pytest.mark.slow
def test_a_prefill_step_is_one_forward_and_the_trace_names_the_models_modules(store):
    _events, names = run_lm(store)
    expected = {"model": STEPS, "model.embed_tokens": STEPS, "model.rotary_emb": STEPS, "model.norm": STEPS,
                "lm_head": STEPS, **{n.format(i=i): STEPS for i in range(2) for n in LLAMA_LAYER}}
    assert module_ranges(names, "model.") == expected  # one forward per step; q_proj and below get no range
    assert names["aten::scaled_dot_product_attention"] == 2 * STEPS  # one per layer per forward
    assert "decode::token" not in names and "train::forward" not in names


@pytest.mark.slow
def test_a_decode_step_generates_new_tokens_with_the_kv_cache(store):
    events, names = run_lm(store, mode="decode", new_tokens=4)
    assert names["decode::prefill"] == STEPS and names["decode::token"] == 4 * STEPS
    assert names["model"] == 5 * STEPS and names["model.layers.1.self_attn"] == 5 * STEPS  # prefill + 4 tokens
    tokens = [e for e in events if e.get("name") == "decode::token"]
    forwards = [e for e in events if e.get("name") == "model"]
    # each token range holds exactly one forward of the model
    assert all(sum(t["ts"] <= f["ts"] and f["ts"] + f["dur"] <= t["ts"] + t["dur"] for f in forwards) == 1
               for t in tokens)
    # the token's attention reads the cache: one query against 17, 18, 19, 20 positions
    dims = [e["args"]["Input Dims"] for e in events if e.get("name") == "aten::scaled_dot_product_attention"
            and any(t["ts"] <= e["ts"] < t["ts"] + t["dur"] for t in tokens)] if any(
        "Input Dims" in e.get("args", {}) for e in events) else None
    if dims:
        assert sorted({(d[0][2], d[1][2]) for d in dims}) == [(1, 17), (1, 18), (1, 19), (1, 20)]


@pytest.mark.slow
def test_a_static_cache_gpt2_decode_names_its_own_modules(store):
    _events, names = run_lm(store, family="gpt2", mode="decode", new_tokens=4, cache="static")
    assert names["decode::token"] == 4 * STEPS
    assert {n: names[n] for n in ("transformer", "transformer.h.0", "transformer.h.1.attn", "transformer.h.1.mlp",
                                  "transformer.ln_f", "lm_head")} == dict.fromkeys(
        ("transformer", "transformer.h.0", "transformer.h.1.attn", "transformer.h.1.mlp", "transformer.ln_f",
         "lm_head"), 5 * STEPS)
    assert "transformer.h.2" not in names and "model.layers.0" not in names


@pytest.mark.slow
def test_a_train_step_runs_forward_backward_and_one_optimizer_step(store):
    events, names = run_lm(store, mode="train")
    assert {n: names[n] for n in ("train::forward", "train::backward", "train::optimizer", "train::zero_grad")} == \
        dict.fromkeys(("train::forward", "train::backward", "train::optimizer", "train::zero_grad"), STEPS)
    assert names["Optimizer.step#AdamW.step"] == STEPS and names["Optimizer.zero_grad#AdamW.zero_grad"] == STEPS
    assert names["model"] == STEPS and names["model.layers.1"] == STEPS  # the forward, named; backward is not
    backward = [e for e in events if e.get("name") == "train::backward"]
    grads = [e for e in events if str(e.get("name", "")).startswith("autograd::engine::evaluate_function: ")]
    assert grads and all(any(b["ts"] <= g["ts"] < b["ts"] + b["dur"] for b in backward) for g in grads
                         if not g["name"].endswith("AccumulateGrad"))
    assert any("ScaledDotProduct" in g["name"] and "Backward" in g["name"] for g in grads)


# --- the decode verdicts, on synthetic traces ------------------------------------------------------------------------

def diagnose_trace(path, config=None):
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return {x.rule: x for x in diagnose(s, r, config).diagnoses}


def token_figures(events):
    """Median CPU time and GPU work per decode token of the steps after the first, by a plain scan: GPU ops paired
    with their launch call by correlation, the token owning the calls that start inside it."""
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    tokens = [t for t in events if t.get("name") == "decode::token" and any(
        s["ts"] <= t["ts"] < s["ts"] + s["dur"] for s in steps[1:])]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    gpu = [e for e in events if e.get("cat") == "kernel"]
    cpu, work, launches = [], [], []
    for t in tokens:
        mine = [k for k in gpu if t["ts"] <= calls[k["args"]["correlation"]]["ts"] < t["ts"] + t["dur"]]
        cpu.append(t["dur"])
        work.append(sum(k["dur"] for k in mine))  # the kernels do not overlap here: their union is their sum
        launches.append(len(mine))
    med = sorted(cpu)[len(cpu) // 2], sorted(work)[len(work) // 2], sorted(launches)[len(launches) // 2]
    return med, len(tokens) // (len(steps) - 1)


def test_launch_bound_decode_tokens_are_found_with_their_launches_and_the_cuda_graph_fix(tmp_path):
    path = vt.decode_tokens(tmp_path / "t.json", tokens=4, launches=30, kernel_us=2.0)
    (cpu, gpu, launches), per_step = token_figures(scan_trace(path))
    assert (cpu, gpu, launches, per_step) == (166.0, 60.0, 30, 4)  # 1 + 30 × 5 µs calls + 15 µs argmax; 30 × 2 µs
    x = diagnose_trace(path)["decode_launch_bound"]
    assert x.evidence["cpu_us_per_token"] == cpu and x.evidence["gpu_us_per_token"] == gpu
    assert x.evidence["launch_calls_per_token"] == launches and x.evidence["tokens_per_step"] == per_step
    assert x.evidence["gpu_idle_share"] == pytest.approx(1 - gpu / cpu)
    # the tokens' CPU time beyond their GPU work, 4 × 106 µs, is more than the step can lose: a step gets no shorter
    # than the GPU work it launches, 640 µs (the 400 µs prefill GEMM and 4 × 60 µs), and its CPU takes 690 µs
    steps = [e["dur"] for e in scan_trace(path) if str(e["name"]).startswith("ProfilerStep#")]
    assert (cpu - gpu) * per_step == 424.0 and sorted(steps)[len(steps) // 2] == 690.0
    assert x.cost_us_per_step == pytest.approx(690.0 - 640.0) and "no shorter than its GPU work" in x.cost_basis
    assert "the GPU idles 64% of each token" in x.text and "30 launch calls" in x.text
    assert "reduce-overhead" in x.fix and "StaticCache" in x.fix and "cache=static" not in x.fix  # (no app run)


def test_tokens_per_step_count_each_step_apart_however_large_its_number(tmp_path):
    """The same decode steps numbered from 2**53 + 1: as floats, steps 2**53 + 3 and 2**53 + 4 are one number, and
    their tokens would count as one step's 8. Each step holds its 4 tokens, by a plain scan."""
    path = vt.decode_tokens(tmp_path / "t.json", tokens=4, launches=30, kernel_us=2.0)
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{2**53 + int(e['name'].split('#')[1])}"
    path.write_text(json.dumps(doc))
    _, per_step = token_figures(scan_trace(path))
    assert per_step == 4
    assert diagnose_trace(path)["decode_launch_bound"].evidence["tokens_per_step"] == per_step


def test_decode_tokens_that_keep_the_gpu_busy_get_no_launch_verdict(tmp_path):
    assert "decode_launch_bound" not in diagnose_trace(vt.decode_tokens(tmp_path / "t.json", kernel_us=50.0))
    assert "decode_launch_bound" not in diagnose_trace(vt.decode_tokens(tmp_path / "g.json", graph=True))


def test_tokens_that_already_replay_a_graph_are_told_what_is_left(tmp_path):
    # 40 tokens a step, so that the CPU sets the step's pace (986 µs of CPU for 640 µs of GPU work); with 4 the
    # prefill's queued GEMM keeps the GPU busy through them (test_verdicts: no launch verdict then)
    x = diagnose_trace(vt.decode_tokens(tmp_path / "t.json", tokens=40, launches=3, graph=True))["decode_launch_bound"]
    assert x.evidence["graph_launches_per_token"] == 1 and x.evidence["launch_calls_per_token"] == 1
    assert "already replays a CUDA graph (1 cudaGraphLaunch per token)" in x.text and "Python" in x.fix


def test_recompiles_across_decode_lengths_name_the_dynamic_cache_and_the_static_fix(tmp_path):
    path = vt.decode_tokens(tmp_path / "t.json", tokens=4, regions="dynamic")
    events = scan_trace(path)
    ran = Counter(e["name"].removeprefix("Torch-Compiled Region: ") for e in events
                  if str(e.get("name", "")).startswith("Torch-Compiled Region: "))
    assert ran == {"0/0": 4, "0/1": 4, "0/2": 12}  # 4 steps: a prefill, a first token, 3 later tokens each
    x = diagnose_trace(path, config=ExperimentConfig(workload="causal_lm", knobs={"mode": "decode"}))["compile_breaks"]
    assert x.evidence["decode_token_variants"] == {"0": {"0/1": 4, "0/2": 12}}
    assert "ran 2 compiled variants of the same forward (0/1 in 4 tokens, 0/2 in 12 tokens)" in x.text
    assert "(this run's cache is dynamic)" in x.text
    assert "graph breaks" not in x.text  # one compiled region per token: five per step are five forwards
    assert x.fix.startswith("Give the decode loop a static KV cache") and "cache=static" in x.fix


def test_a_static_cache_one_variant_for_every_token_is_no_decode_recompile(tmp_path):
    x = diagnose_trace(vt.decode_tokens(tmp_path / "t.json", tokens=4, regions="static"))["compile_breaks"]
    assert x.evidence["decode_token_variants"] == {}  # the prefill's shapes differ from a token's; tokens agree
    assert "decode tokens" not in x.text and not x.fix.startswith("Give the decode loop")


# --- train knobs: the shared ones, checked the same way ---------------------------------------------------------------

LM_TRAIN_BAD = [
    ({"optimizer": "sgd"}, "knobs.optimizer must be left at its default 'adamw' when mode is 'prefill' (it applies "
                           "only when mode is 'train'), got 'sgd'"),
    ({"mode": "decode", "log_loss": True}, "knobs.log_loss must be left at its default False when mode is 'decode' "
                                           "(it applies only when mode is 'train'), got True"),
    ({"mode": "train", "optimizer": "lion"}, "knobs.optimizer must be one of 'sgd', 'adam', 'adamw', got 'lion'"),
    ({"mode": "train", "impl": "apex"}, "knobs.impl must be one of 'auto', 'for-loop', 'foreach', 'fused', got 'apex'"),
    ({"mode": "train", "autocast": "fp16"}, "knobs.autocast must be 'off' when dtype is 'bf16' (autocast runs an fp32 "
                                            "model's ops in lower precision: use dtype 'fp32' with it), got 'fp16'"),
    ({"mode": "train", "log_loss": "yes"}, "knobs.log_loss must be true or false, got 'yes'"),
    ({"module_ranges": "no"}, "knobs.module_ranges must be true or false, got 'no'"),
]


@pytest.mark.parametrize("knobs,message", LM_TRAIN_BAD, ids=[f"bad{i}" for i in range(len(LM_TRAIN_BAD))])
def test_bad_train_knobs_are_refused_with_the_nn_workloads_messages(knobs, message):
    with pytest.raises(ConfigError) as info:
        ExperimentConfig(workload="causal_lm", knobs=knobs)
    assert str(info.value) == message
    if "mode" in knobs and knobs["mode"] == "train":  # the nn workloads' train knobs say exactly the same
        mlp = {k: v for k, v in knobs.items() if k != "mode"}
        with pytest.raises(ConfigError) as same:
            ExperimentConfig(workload="mlp", knobs={**mlp, "train": True})
        assert str(same.value) == message


def test_a_causal_lm_has_no_train_switch_of_its_own():
    with pytest.raises(ConfigError) as info:
        ExperimentConfig(workload="causal_lm", knobs={"train": True})
    assert str(info.value).startswith("knobs must be one of causal_lm's knobs: family, mode, ")
    assert str(info.value).endswith(", got 'train'")


def test_train_and_module_range_knobs_name_the_run():
    base = "causal_lm_llama_train_b1_s128_L4_d512_h8_v32000"
    assert ExperimentConfig(workload="causal_lm", knobs={"mode": "train"}).name == f"{base}_adamw_bf16_cold_eager"
    cfg = ExperimentConfig(workload="causal_lm", dtype="fp32", knobs={
        "mode": "train", "optimizer": "sgd", "impl": "foreach", "autocast": "fp16", "log_loss": True})
    assert cfg.name == f"{base}_sgd_foreach_ac-fp16_item_fp32_cold_eager"
    assert ExperimentConfig.from_json(cfg.to_json()) == cfg
    assert ExperimentConfig(workload="causal_lm", knobs={"module_ranges": False}).name == \
        "causal_lm_llama_prefill_b1_s128_L4_d512_h8_v32000_no-module-ranges_bf16_cold_eager"
    names = {ExperimentConfig(workload="causal_lm", dtype="fp32", knobs={"mode": "train", **k}).name
             for k in ({}, {"optimizer": "sgd"}, {"optimizer": "adam"}, {"impl": "fused"}, {"autocast": "bf16"},
                       {"autocast": "fp16"}, {"log_loss": True}, {"module_ranges": False})}
    assert len(names) == 8  # every train knob and module_ranges tells its runs apart


def test_a_fused_optimizer_torch_cannot_build_fails_as_on_every_workload(monkeypatch):
    """A torch whose AdamW has no fused CPU kernel (torch 2.13 has one, older ones did not): causal_lm's train mode
    says what the nn workloads say, word for word."""
    import torch
    pytest.importorskip("transformers")
    real = torch.optim.AdamW

    def no_fused(params, **kw):
        if kw.get("fused"):
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported "
                               "devices: ['cuda', 'xpu'] but torch.float32 and cpu")
        return real(params, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", no_fused)
    said = []
    for wl, knobs in (("causal_lm", {**TINY, "mode": "train", "impl": "fused"}),
                      ("mlp", {"batch": 2, "d": 8, "train": True, "impl": "fused"})):
        w = get_workload(wl)
        with pytest.raises(WorkerError) as info:
            w.build(torch, w.check_knobs(knobs), "cpu", torch.float32)
        assert info.value.kind == "workload"
        said.append(info.value.message)
    assert said[0] == said[1]
    assert said[0].startswith("optimizer 'adamw' with impl 'fused' cannot run here: torch ")
    assert said[0].endswith("Use impl 'auto', 'foreach' or 'for-loop'") and "['cuda', 'xpu']" in said[0]


def test_the_train_knobs_apply_to_the_train_mode_only():
    from profiling_core.workloads import get_workload
    wl = get_workload("causal_lm")
    train = [k.name for k in wl.knobs if k.when == ("mode", "train")]
    assert train == ["optimizer", "impl", "autocast", "log_loss"]
    assert wl.applicable({"mode": "prefill", "optimizer": "sgd", "log_loss": True}) == {"mode": "prefill"}
    assert wl.applicable({"mode": "train", "optimizer": "sgd"}) == {"mode": "train", "optimizer": "sgd"}


LM_TRAIN_RUNS = {"sgd_item": {"optimizer": "sgd", "log_loss": True},
                 "adam_for_loop": {"optimizer": "adam", "impl": "for-loop"},
                 "adamw_bf16": {"optimizer": "adamw", "autocast": "bf16"}}
OPT_CLASS = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}


@pytest.mark.slow
@pytest.mark.parametrize("label", list(LM_TRAIN_RUNS))
def test_the_train_knobs_run_the_tiny_llm_for_real(store, label):
    knobs = LM_TRAIN_RUNS[label]
    events, names = run_lm(store, mode="train", **knobs)
    cls = OPT_CLASS[knobs["optimizer"]]
    steps = sorted((e for e in events if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", e["name"])),
                   key=lambda e: e["ts"])
    for s in steps:  # one optimizer step of the chosen class in each profiler step
        inside = Counter(e["name"] for e in events if e.get("ph") == "X" and s["ts"] <= e["ts"]
                         and e["ts"] + e["dur"] <= s["ts"] + s["dur"])
        assert inside[f"Optimizer.step#{cls}.step"] == 1 and inside["train::optimizer"] == 1
        assert inside[f"Optimizer.zero_grad#{cls}.zero_grad"] == 1
        (opt,) = [e for e in events if e.get("name") == "train::optimizer" and s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
        logged = [e for e in events if e.get("name") in ("aten::item", "aten::_local_scalar_dense")
                  and s["ts"] <= e["ts"] < s["ts"] + s["dur"]
                  and not opt["ts"] <= e["ts"] < opt["ts"] + opt["dur"]]  # (for-loop Adam reads each step count so)
        assert bool(logged) == bool(knobs.get("log_loss")), (label, len(logged))
        assert all(e["ts"] >= opt["ts"] + opt["dur"] for e in logged)  # the loss, read after the step
    assert not any(n.startswith("Optimizer.step#") and n != f"Optimizer.step#{cls}.step" for n in names)
    ops = {n for n in names if n.startswith("aten::")}
    if knobs.get("impl") == "for-loop":
        assert not any(n.startswith(("aten::_foreach_", "aten::_fused_")) for n in ops)
    if knobs.get("autocast") == "bf16":  # the forward's GEMMs ran in bf16: autocast's casts are in the trace
        assert "aten::_to_copy" in ops


@pytest.mark.slow
def test_module_ranges_off_leaves_the_plain_model_code(store):
    _events, names = run_lm(store, module_ranges=False)
    assert not [n for n in names if n == "model" or n.startswith("model.") or n == "lm_head"]
    assert names["aten::scaled_dot_product_attention"] == 2 * STEPS  # the same forward ran
    _events, on = run_lm(store)
    assert on["model.layers.0.self_attn"] == STEPS and on["lm_head"] == STEPS


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_a_dynamic_cache_under_cuda_graphs_is_refused_saying_the_static_cache_works(mode, device):
    # on an H200 (torch 2.11, transformers 5.17) this decode failed in its warm-up: "accessing tensor output of
    # CUDAGraphs that has been overwritten by a subsequent run"
    knobs = {**TINY, "mode": "decode", "cache": "dynamic"}
    with pytest.raises(ConfigError) as info:
        ExperimentConfig(workload="causal_lm", knobs=knobs, compile=mode, device=device)
    assert str(info.value) == (
        "compile must be off, default or max-autotune-no-cudagraphs with knobs.cache 'dynamic' on a GPU (a dynamic KV "
        "cache's tensors are CUDA graph outputs that the next token's replay overwrites; knobs.cache 'static' "
        f"decodes under CUDA graphs), got '{mode}'")
    for ok in ({"cache": "static"}, {"mode": "prefill", "cache": "dynamic"}):  # what runs
        ExperimentConfig(workload="causal_lm", knobs={**knobs, **ok} if ok.get("mode") != "prefill"
                         else {**TINY, "mode": "prefill"}, compile=mode, device=device)
    ExperimentConfig(workload="causal_lm", knobs=knobs, compile=mode, device="cpu")  # no graph on the CPU
    ExperimentConfig(workload="causal_lm", knobs=knobs, compile="default", device=device)
