"""The workload registry: knobs validated with exact messages, names, JSON, FLOPs by hand; every workload run for
real on the CPU in a worker, its trace checked by a plain JSON scan; the script workload's contract."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DATA, ROOT, scan_trace
from profiling_core import ConfigError, ExperimentConfig, WorkerError, run_experiment
from profiling_core.workloads import get_workload, sdpa_backend_from_names, workload_names
from profiling_core.run.sweep import sweep_configs

SCRIPTS = DATA / "scripts"
ATTN_KNOBS = "batch, heads, seq_len, head_dim, causal, backend"


def x_names(events) -> Counter:
    return Counter(e["name"] for e in events if e.get("ph") == "X")


# --- the registry, without torch ---------------------------------------------------------------------------------

def test_the_registry_and_the_config_import_without_torch():
    code = ("import sys, profiling_core, profiling_core.workloads as w\n"
            "c = profiling_core.ExperimentConfig(workload='attention')\n"
            "print(w.workload_names(), c.name, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ,
                         PYTHONPATH=str(ROOT)), check=True).stdout
    assert out.strip() == ("['matmul_add', 'linear', 'mlp', 'attention', 'transformer_block', 'causal_lm', 'script'] "
                           "attention_b4_h8_s256_d64_causal_auto_bf16_cold_eager False")


BAD = [
    (dict(workload="conv"), "workload must be one of 'matmul_add', 'linear', 'mlp', 'attention', 'transformer_block', "
                            "'causal_lm', 'script', got 'conv'"),
    (dict(workload="attention", knobs={"seqlen": 8}),
     f"knobs must be one of attention's knobs: {ATTN_KNOBS}, got 'seqlen'"),
    (dict(workload="attention", knobs={"seq_len": 0}), "knobs.seq_len must be an integer from 1 to 1048576, got 0"),
    (dict(workload="attention", knobs={"heads": True}), "knobs.heads must be an integer from 1 to 1024, got True"),
    (dict(workload="attention", knobs={"causal": 1}), "knobs.causal must be true or false, got 1"),
    (dict(workload="attention", knobs={"backend": "xformers"}),
     "knobs.backend must be one of 'auto', 'flash', 'efficient', 'math', 'cudnn', got 'xformers'"),
    (dict(workload="mlp", knobs={"hidden_ratio": "4"}), "knobs.hidden_ratio must be a number from 0.0625 to 64, "
                                                        "got '4'"),
    (dict(workload="mlp", knobs={"hidden_ratio": float("nan")}), "knobs.hidden_ratio must be a number from 0.0625 "
                                                                 "to 64, got nan"),
    (dict(workload="linear", knobs={"in_features": 0}), "knobs.in_features must be an integer from 1 to 65536, got 0"),
    (dict(workload="transformer_block", knobs={"heads": 7}), "knobs.heads must be a divisor of d_model 512, got 7"),
    (dict(workload="transformer_block", knobs={"mode": "decode", "seq_len": 64}),
     "knobs.seq_len must be left at its default 128 when mode is 'decode' (it applies only when mode is 'prefill'), "
     "got 64"),
    (dict(workload="transformer_block", knobs={"kv_len": 64}),
     "knobs.kv_len must be left at its default 1024 when mode is 'prefill' (it applies only when mode is 'decode'), "
     "got 64"),
    (dict(workload="script", knobs={"path": "model.txt"}), "knobs.path must be a path to a .py file, got 'model.txt'"),
    (dict(workload="script", knobs={"function": "make step"}),
     "knobs.function must be a Python function name, got 'make step'"),
    (dict(workload="linear", size=128), "size must be left at its default 64 for workload 'linear' (size, batch and "
                                        "bias are matmul_add's; linear's knobs are batch, in_features, out_features, train, "
                                        "optimizer, impl, autocast, log_loss), "
                                        "got 128"),
    (dict(workload="attention", batch=8), "batch must be left at its default None for workload 'attention' (size, "
                                          f"batch and bias are matmul_add's; attention's knobs are {ATTN_KNOBS}), "
                                          "got 8"),
    (dict(knobs={"size": 128}), "knobs must be empty for workload 'matmul_add' (its knobs are the fields size, batch "
                                "and bias), got {'size': 128}"),
    (dict(workload="linear", knobs=[("batch", 2)]), "knobs must be a mapping of knob names to values (one of "
                                                    "linear's knobs: batch, in_features, out_features, train, "
                                                    "optimizer, impl, autocast, log_loss), "
                                                    "got [('batch', 2)]"),
]


@pytest.mark.parametrize("kwargs,message", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_workloads_and_knobs_say_what_is_allowed(kwargs, message):
    with pytest.raises(ConfigError) as info:
        ExperimentConfig(**kwargs)
    assert str(info.value) == message
    assert info.value.field == message.split(" ")[0]


@pytest.mark.parametrize("kwargs,name", [
    (dict(), "64_bf16_cold_eager"),  # the study's names are unchanged
    (dict(size=4096, warmup=10, compile="default", batch=8, bias="vector"), "4096_bf16_warm_compile_b8_vbias"),
    (dict(workload="linear", knobs={"batch": 32}), "linear_b32_in1024_out1024_bf16_cold_eager"),
    (dict(workload="mlp", knobs={"hidden_ratio": 2.5}, warmup=5, compile="reduce-overhead"),
     "mlp_b64_d1024_r2.5_bf16_warm_compile_reduce-overhead"),
    (dict(workload="attention", knobs={"causal": False, "backend": "flash"}, dtype="fp16"),
     "attention_b4_h8_s256_d64_flash_fp16_cold_eager"),
    (dict(workload="transformer_block"), "transformer_block_prefill_b4_s128_d512_h8_r4_bf16_cold_eager"),
    (dict(workload="transformer_block", knobs={"mode": "decode", "kv_len": 4096}, warmup=3),
     "transformer_block_decode_b4_kv4096_d512_h8_r4_bf16_warm_eager"),
    (dict(workload="script", knobs={"path": "/tmp/my model.py", "function": "build"}, dtype="fp32",
          matmul_precision="high"), "script_my-model_build_fp32_cold_eager_mm-high"),
    # a script's file name with dots in a row: never '..' in a run name (a run id may not hold it)
    (dict(workload="script", knobs={"path": "/tmp/my..model.py"}), "script_my.model_bf16_cold_eager"),
])
def test_run_names(kwargs, name):
    assert ExperimentConfig(**kwargs).name == name


def test_knobs_are_complete_canonical_hashable_and_round_trip_through_json():
    c = ExperimentConfig(workload="mlp", knobs={"hidden_ratio": 2}, dtype="fp32", device="cpu", warmup=3)
    train_off = {"train": False, "optimizer": "adamw", "impl": "auto", "autocast": "off", "log_loss": False}
    assert c.knobs == {"batch": 64, "d": 1024, "hidden_ratio": 2.0, **train_off}  # defaults filled in, 2 as 2.0
    assert c == ExperimentConfig(workload="mlp", knobs={"batch": 64, "d": 1024, "hidden_ratio": 2.0}, dtype="fp32",
                                 device="cpu", warmup=3)
    data = json.loads(c.to_json())
    assert data["workload"] == "mlp" and data["knobs"] == {"batch": 64, "d": 1024, "hidden_ratio": 2.0, **train_off}
    for cfg in [c] + [ExperimentConfig(workload=w) for w in workload_names()]:
        back = ExperimentConfig.from_json(cfg.to_json())
        assert back == cfg and hash(back) == hash(cfg) and back.name == cfg.name
    with pytest.raises(TypeError):
        c.knobs["d"] = 4  # read-only
    assert {c: 1}[ExperimentConfig.from_dict(c.to_dict())] == 1


def test_matmul_add_configs_keep_their_json_and_old_configs_load_as_matmul_add():
    c = ExperimentConfig(size=4096, batch=8, warmup=10)
    assert sorted(c.to_dict()) == sorted(
        ["size", "dtype", "batch", "bias", "matmul_precision", "warmup", "compile", "wait", "warmup_steps", "active",
         "repeat", "device", "threads", "record_shapes", "with_flops", "with_stack", "profile_memory", "timeout_s",
         "row_limit"])  # no workload, no knobs: the JSON of configs made before workloads existed
    old = json.loads((DATA / "h200_bias" / "4096_bf16_warm_compile.meta.json").read_text())["config"]
    cfg = ExperimentConfig.from_dict(old)
    assert cfg.workload == "matmul_add" and cfg.knobs == {}
    assert {k: v for k, v in cfg.to_dict().items() if k in old} == old and set(cfg.to_dict()) - set(old) == \
        {"matmul_precision", "threads"}  # this run predates those two knobs; nothing else is added
    assert cfg.workload_knobs == {"size": 4096, "batch": None, "bias": "matrix"}


def test_for_workload_puts_matmul_add_knobs_in_its_fields():
    assert ExperimentConfig.for_workload("matmul_add", {"size": 128, "batch": 2}, dtype="fp32") == \
        ExperimentConfig(size=128, batch=2, dtype="fp32")
    assert ExperimentConfig.for_workload("linear", {"batch": 2}).knobs["batch"] == 2
    with pytest.raises(ConfigError, match=r"^knobs must be one of matmul_add's knobs: size, batch, bias, "
                                          r"got 'seq_len'$"):
        ExperimentConfig.for_workload("matmul_add", {"seq_len": 4})


def test_flops_bytes_and_memory_by_hand():
    lin = ExperimentConfig(workload="linear", knobs={"batch": 8, "in_features": 16, "out_features": 32},
                           dtype="fp32")
    assert lin.step_flops() == 2 * 8 * 16 * 32
    assert lin.step_bytes() == 4 * (8 * 16 + 16 * 32 + 32 + 8 * 32)  # x, W, b read; y written
    assert lin.gemm_flops() is None  # not the study's matmul: the analyses size its GEMM from recorded shapes
    mlp = ExperimentConfig(workload="mlp", knobs={"batch": 8, "d": 16, "hidden_ratio": 4.0})
    assert mlp.step_flops() == 2 * 8 * 16 * 64 * 2
    att = dict(batch=2, heads=4, seq_len=10, head_dim=8)
    full = ExperimentConfig(workload="attention", knobs={**att, "causal": False})
    causal = ExperimentConfig(workload="attention", knobs=att)
    assert full.step_flops() == 2 * 4 * 2 * (10 * 10) * 8 * 2  # QKᵀ and PV over every query-key pair
    assert causal.step_flops() == 2 * 4 * 2 * (10 * 11 // 2) * 8 * 2  # the lower triangle, diagonal included
    dec = ExperimentConfig(workload="transformer_block",
                           knobs={"mode": "decode", "batch": 2, "kv_len": 100, "d_model": 64, "heads": 4})
    projections = 2 * 2 * (3 * 64 * 64 + 64 * 64 + 2 * 64 * 256)  # 2 tokens through qkv, proj, fc1, fc2
    assert dec.step_flops() == projections + 2 * 2 * 100 * 64 * 2  # + each token against 100 cached positions
    assert dec.size_knob == "kv_len" and ExperimentConfig(workload="transformer_block").size_knob == "seq_len"
    assert ExperimentConfig(size=64, batch=2).gemm_flops() == 2 * 2 * 64 ** 3  # the study's, as before
    script = ExperimentConfig(workload="script", knobs={"path": str(SCRIPTS / "good_step.py")})
    assert script.step_flops() is None and script.tensor_bytes() is None
    script.check_fits(1, "a tiny machine")  # unknown needs: not refused


def test_a_workload_too_big_for_the_machine_is_refused_with_its_knobs():
    from profiling_core import DoesNotFitError
    cfg = ExperimentConfig(workload="linear", knobs={"batch": 1 << 20, "in_features": 65536, "out_features": 1})
    with pytest.raises(DoesNotFitError, match=r"^linear \(batch 1048576, in_features 65536, out_features 1\), bf16 "
                                              r"needs 128.00 GiB of tensors but here has 1.00 GiB available; choose a "
                                              r"smaller batch, in_features or out_features$"):
        cfg.check_fits(2 ** 30, "here")


@pytest.mark.parametrize("texts,message", [
    (["seq_len=abc"], "knobs.seq_len must be an integer from 1 to 1048576, in the digits 0-9, got 'abc'"),
    (["seq_len"], f"--knob must be NAME=VALUE with NAME one of attention's knobs: {ATTN_KNOBS}, got 'seq_len'"),
    (["seqlen=3"], f"knobs must be one of attention's knobs: {ATTN_KNOBS}, got 'seqlen'"),
    (["causal=maybe"], "knobs.causal must be true or false, got 'maybe'"),
    (["seq_len=1", "seq_len=2"], "--knob must be given once per knob (seq_len was given twice), got 'seq_len=2'"),
])
def test_knob_flags_are_parsed_and_refused_exactly(texts, message):
    with pytest.raises(ConfigError) as info:
        get_workload("attention").parse_knobs(texts)
    assert str(info.value) == message


def test_knob_flags_parse_each_kind():
    assert get_workload("attention").parse_knobs(["seq_len=512", "causal=false", "backend=math"]) == \
        {"seq_len": 512, "causal": False, "backend": "math"}
    assert get_workload("mlp").parse_knobs(["hidden_ratio=2.5"]) == {"hidden_ratio": 2.5}
    assert get_workload("matmul_add").parse_knobs(["batch=none", "size=32"]) == {"batch": None, "size": 32}
    with pytest.raises(ConfigError, match=r"^size must be an integer from 1 to 65536, got 0$"):
        get_workload("matmul_add").parse_knobs(["size=0"])  # matmul_add's knobs are fields: named as such


def test_a_sweep_varies_the_workloads_size_knob():
    assert [c.name for c in sweep_configs([64, 128], ["off"])] == ["64_bf16_cold_eager", "128_bf16_cold_eager"]
    lin = sweep_configs([1, 2], ["off", "default"], workload="linear", knobs={"in_features": 8}, dtype="fp32")
    assert [(c.knobs["batch"], c.knobs["in_features"], c.compile) for c in lin] == \
        [(1, 8, "off"), (1, 8, "default"), (2, 8, "off"), (2, 8, "default")]
    dec = sweep_configs([256, 512], workload="transformer_block", knobs={"mode": "decode"})
    assert [c.knobs["kv_len"] for c in dec] == [256, 512]
    with pytest.raises(ConfigError, match="workload must be a workload with a size knob to sweep"):
        sweep_configs([1], workload="script", knobs={"path": "x.py"})


# text that int() or str.isdigit() takes for a number but a person did not type as one: superscripts, other scripts'
# digits, full-width digits, underscores, exponents, hex
NOT_ASCII_INTEGERS = ["2²", "²", "٣", "१२", "１２", "1_000", "1e3", "0x10", "1.0", "½", "Ⅻ", "𝟙𝟚"]


@pytest.mark.parametrize("text", NOT_ASCII_INTEGERS)
def test_an_integer_knob_typed_as_text_takes_only_ascii_digits(text):
    """``int("٣")`` is 3 and ``"2²".isdigit()`` is true: the Overhead page's box took ``2²`` for a value, then raised
    a ValueError on every rerun; ``--knob seq_len=٣`` ran a sequence of 3."""
    with pytest.raises(ConfigError) as info:
        get_workload("attention").parse_knobs([f"seq_len={text}"])
    assert str(info.value) == f"knobs.seq_len must be an integer from 1 to 1048576, in the digits 0-9, got {text!r}"


@pytest.mark.parametrize("text", ["٣", "1_0", "nan", "inf", "0x1", "1e", "²"])
def test_a_number_knob_typed_as_text_takes_only_ascii_decimals(text):
    with pytest.raises(ConfigError, match=r"^knobs\.hidden_ratio must be a number from 0.0625 to 64, in the digits "
                                          r"0-9, got "):
        get_workload("mlp").parse_knobs([f"hidden_ratio={text}"])
    assert get_workload("mlp").parse_knobs(["hidden_ratio=2.5e0"]) == {"hidden_ratio": 2.5}


def test_sweep_values_read_comma_separated_integers_in_the_axis_range():
    from profiling_core.run import sweep_values
    assert sweep_values(" 64, 128,,256 ,") == [64, 128, 256]  # the order given; empty items and spaces ignored
    assert sweep_values("") == []
    assert sweep_values("8,4096", "linear") == [8, 4096]
    assert sweep_values("1,2", "transformer_block", {"mode": "decode"}) == [1, 2]  # kv_len
    for text in NOT_ASCII_INTEGERS:
        with pytest.raises(ConfigError) as info:
            sweep_values(f"128, {text}", "attention")
        assert str(info.value) == (f"each value of seq_len must be an integer from 1 to 1048576, in the digits 0-9, "
                                   f"got {text!r}")
    with pytest.raises(ConfigError, match=r"^each value of size must be an integer from 1 to 65536, got 70000$"):
        sweep_values("64,70000")
    with pytest.raises(ConfigError, match=r"^each value of kv_len must be an integer from 1 to 1048576, got 0$"):
        sweep_values("0", "transformer_block", {"mode": "decode"})
    with pytest.raises(ConfigError, match=r"^--sizes must be an integer from 1 to 65536, in the digits 0-9, got "
                                          r"'9{5000}'$"):
        sweep_values("9" * 5000, field="--sizes")  # past int()'s 4,300 digits: refused, not a ValueError
    with pytest.raises(ConfigError, match="workload must be a workload with a size knob to sweep"):
        sweep_values("1", "script")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789, +-_.eEx²³¹٣१１２𝟙 \t½")), max_size=20))
def test_sweep_values_of_any_text_are_ascii_integers_in_range_or_a_config_error(text):
    from profiling_core.run import sweep_values
    try:
        got = sweep_values(text, "attention")
    except ConfigError as exc:
        assert exc.field == "each value of seq_len" and str(exc.value).strip() in text
        return
    items = [t.strip() for t in text.split(",") if t.strip()]
    assert all(re.fullmatch(r"[+-]?[0-9]+", t) for t in items)  # only ASCII decimal integers got through
    assert got == [int(t) for t in items] and all(1 <= v <= 1 << 20 for v in got)


def test_applicable_leaves_out_the_knobs_the_mode_does_not_use():
    block = get_workload("transformer_block")
    assert block.applicable({"mode": "decode", "seq_len": 512, "kv_len": 64}) == {"mode": "decode", "kv_len": 64}
    assert block.applicable({"mode": "prefill", "seq_len": 512, "kv_len": 64}) == {"mode": "prefill", "seq_len": 512}


# --- which attention backend ran ----------------------------------------------------------------------------------

@pytest.mark.parametrize("names,backend", [
    (["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
      "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
      "cutlass::bfloat16_t>>(pytorch_flash::Flash_fwd_params)"], "flash"),
    (["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_efficient_attention",
      "aten::_efficient_attention_forward", "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::"
      "AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"],
     "efficient"),
    (["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention"], "cudnn"),
    (["void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
      "cutlass::bfloat16_t>>(pytorch_flash::Flash_fwd_params)"], "flash"),  # a CUDA-graph replay: kernels only
    (["aten::bmm", "triton_per_fused__safe_softmax_0", "aten::bmm"], "math"),  # compiled math path, decomposed
    (["aten::addmm", "aten::gelu"], None),
])
def test_the_sdpa_backend_is_read_from_op_and_kernel_names(names, backend):
    assert sdpa_backend_from_names(names) == backend


# --- real runs on the CPU ----------------------------------------------------------------------------------------

FAST = dict(dtype="fp32", device="cpu", wait=0, warmup_steps=0, active=2)
SMALL = {
    "linear": ({"batch": 4, "in_features": 16, "out_features": 8}, {"aten::linear": 2, "aten::addmm": 2}),
    "mlp": ({"batch": 4, "d": 16}, {"aten::linear": 4, "aten::addmm": 4, "aten::gelu": 2}),
    "attention": ({"batch": 1, "heads": 2, "seq_len": 8, "head_dim": 8},
                  {"aten::scaled_dot_product_attention": 2, "aten::_scaled_dot_product_flash_attention_for_cpu": 2}),
    "transformer_block": ({"batch": 2, "seq_len": 8, "d_model": 32, "heads": 4},
                          {"aten::layer_norm": 4, "aten::linear": 8, "aten::scaled_dot_product_attention": 2,
                           "aten::gelu": 2}),
    "script": ({"path": str(SCRIPTS / "good_step.py")}, {"aten::conv1d": 2, "aten::relu": 2}),
}


@pytest.mark.slow
@pytest.mark.parametrize("workload", list(SMALL))
def test_each_workload_runs_for_real_and_its_trace_shows_it(store, workload):
    knobs, ops = SMALL[workload]
    cfg = ExperimentConfig(workload=workload, knobs=knobs, warmup=1, **FAST)
    run = run_experiment(cfg, store=store)
    names = x_names(scan_trace(run.trace_path))
    assert sorted(n for n in names if re.fullmatch(r"ProfilerStep#\d+", n)) == ["ProfilerStep#0", "ProfilerStep#1"]
    assert names[workload] == 2  # record_function(<workload>) around each step
    assert {op: names[op] for op in ops} == ops
    assert "matmul_add" not in names
    assert run.meta["config"] == cfg.to_dict() and run.meta["name"] == cfg.name


@pytest.mark.slow
def test_a_script_whose_file_name_holds_two_dots_in_a_row_is_profiled(store, tmp_path):
    """``my..step.py`` could not be profiled: its run name kept the '..' that the store's run-id check refuses, and
    the run failed with an error about run ids. It runs, and its trace holds the script's steps."""
    script = tmp_path / "my..step.py"
    script.write_text((SCRIPTS / "good_step.py").read_text())
    run = run_experiment(ExperimentConfig(workload="script", knobs={"path": str(script)}, **FAST), store=store)
    names = x_names(scan_trace(run.trace_path))
    assert names["script"] == 2 and names["aten::conv1d"] == 2
    assert ".." not in run.run_id and store.load(run.run_id).meta["name"] == run.meta["name"]


@pytest.mark.slow
def test_a_decode_step_writes_its_kv_into_the_cache_and_attends_to_all_of_it(store):
    cfg = ExperimentConfig(workload="transformer_block",
                           knobs={"mode": "decode", "batch": 2, "kv_len": 16, "d_model": 32, "heads": 4}, **FAST)
    events = scan_trace(run_experiment(cfg, store=store).trace_path)
    sdpa = [e for e in events if e.get("ph") == "X" and e["name"] == "aten::scaled_dot_product_attention"]
    assert len(sdpa) == 2
    assert sdpa[0]["args"]["Input Dims"][:3] == [[2, 4, 1, 8], [2, 4, 16, 8], [2, 4, 16, 8]]  # 1 query, 16 keys
    assert x_names(events)["aten::copy_"] >= 4  # the new K and V copied into the cache, each step


@pytest.mark.slow
def test_the_backend_that_ran_is_read_from_a_real_cpu_trace(store):
    def ran(backend):
        cfg = ExperimentConfig(workload="attention", knobs={"batch": 1, "heads": 2, "seq_len": 8, "head_dim": 8,
                                                            "backend": backend}, **FAST)
        names = x_names(scan_trace(run_experiment(cfg, store=store).trace_path))
        return sdpa_backend_from_names(names), names
    math_ran, names = ran("math")
    assert math_ran == "math" and names["aten::_scaled_dot_product_attention_math"] == 2
    assert ran("flash")[0] == "flash" and ran("auto")[0] == "flash"  # on a CPU, auto picks the flash kernel


@pytest.mark.slow
def test_a_backend_the_cpu_lacks_fails_saying_so(store):
    cfg = ExperimentConfig(workload="attention", knobs={"batch": 1, "heads": 2, "seq_len": 8, "head_dim": 8,
                                                        "backend": "efficient"}, **FAST)
    with pytest.raises(WorkerError) as info:
        run_experiment(cfg, store=store)
    assert info.value.kind == "workload"
    assert info.value.message.startswith(
        "attention backend 'efficient' cannot run this attention (head_dim 8, causal) with this device and dtype: "
        "torch said 'No viable backend for scaled_dot_product_attention was found'.")
    assert "Use backend 'auto' (torch picks one that runs) or 'math' (runs everywhere)" in info.value.message
    assert store.list() == []


@pytest.mark.slow
@pytest.mark.parametrize("knobs,message", [
    ({"path": "no_such_file.py"}, "script {dir}/no_such_file.py: no such file"),
    ({"path": "no_function.py"}, "script {dir}/no_function.py has no function 'make_step' (it defines build); the "
                                 "contract: def make_step(device, dtype) -> (step_fn, inputs)"),
    ({"path": "good_step.py", "function": "missing"}, "script {dir}/good_step.py has no function 'missing' (it "
                                                      "defines make_step, other_step); the contract: def "
                                                      "missing(device, dtype) -> (step_fn, inputs)"),
    ({"path": "raises.py"}, "script {dir}/raises.py: make_step(device='cpu', dtype=torch.float32) raised ValueError: "
                            "the model needs a checkpoint that is not here"),
    ({"path": "wrong_return.py"}, "script {dir}/wrong_return.py: make_step must return (step_fn, inputs), a function "
                                  "and a tuple of its arguments; it returned a Linear"),
    ({"path": "broken_import.py"}, "script {dir}/broken_import.py raised ImportError while loading: no module named "
                                   "'my_private_lib'"),
    ({"path": "step_raises.py"}, "script {dir}/step_raises.py: its step function raised ZeroDivisionError during "
                                 "profile: the step divided by zero"),
], ids=["missing-file", "missing-function", "other-missing-function", "raises", "wrong-return", "import-fails",
        "step-raises"])
def test_a_bad_script_fails_cleanly_naming_the_file(store, knobs, message):
    cfg = ExperimentConfig(workload="script", knobs={**knobs, "path": str(SCRIPTS / knobs["path"])}, **FAST)
    with pytest.raises(WorkerError) as info:
        run_experiment(cfg, store=store)
    assert info.value.kind == "script"
    assert info.value.message == message.format(dir=SCRIPTS)
    assert store.list() == [] and not list((store.root / ".staging").iterdir())


_RAISES = {  # what a script raises: the statement, its class's name, and what its message adds
    "KeyboardInterrupt": ("raise KeyboardInterrupt", "KeyboardInterrupt", ""),
    "SystemExit": ("raise SystemExit(3)", "SystemExit", ": 3"),
    "own BaseException": ("raise type('ScriptAbort', (BaseException,), {})('the script gave up')", "ScriptAbort",
                          ": the script gave up"),
}
_WHERE = {  # where it raises: the script's text with RAISE in place, and the message naming the file
    "import": ("RAISE\n", "script {path} raised {name} while loading{said}"),
    "make_step": ("def make_step(device, dtype):\n    RAISE\n",
                  "script {path}: make_step(device='cpu', dtype=torch.float32) raised {name}{said}"),
    "step": ("def make_step(device, dtype):\n    def step():\n        RAISE\n    return step, ()\n",
             "script {path}: its step function raised {name} during profile{said}"),
}


@pytest.mark.slow
@pytest.mark.parametrize("what", list(_RAISES))
@pytest.mark.parametrize("where", list(_WHERE))
def test_a_script_raising_a_base_exception_is_a_script_error_naming_the_file(store, tmp_path, where, what):
    """KeyboardInterrupt, SystemExit and a script's own BaseException subclass, raised while importing the file, by
    make_step or by the step, are script errors naming the file, like any other exception of the user's code."""
    statement, name, said = _RAISES[what]
    text, message = _WHERE[where]
    path = tmp_path / f"raises_{where}.py"
    path.write_text(text.replace("RAISE", statement))
    cfg = ExperimentConfig(workload="script", knobs={"path": str(path)}, **FAST)
    with pytest.raises(WorkerError) as info:
        run_experiment(cfg, store=store, prestart=1)
    assert (info.value.kind, info.value.message) == ("script", message.format(path=path, name=name, said=said))
    assert store.list() == [] and not list((store.root / ".staging").iterdir())


@pytest.mark.slow
def test_a_scripts_other_function_runs_and_is_named(store):
    cfg = ExperimentConfig(workload="script", knobs={"path": str(SCRIPTS / "good_step.py"), "function": "other_step"},
                           **FAST)
    run = run_experiment(cfg, store=store)
    assert run.meta["name"] == "script_good-step_other-step_fp32_cold_eager"
    names = x_names(scan_trace(run.trace_path))
    assert names["script"] == 2 and names["aten::tanh"] == 2


@pytest.mark.slow
def test_mlp_under_torch_compile_fuses_into_fewer_ops(store):
    cfg = ExperimentConfig(workload="mlp", knobs={"batch": 4, "d": 16}, warmup=1, compile="default", **FAST)
    names = x_names(scan_trace(run_experiment(cfg, store=store).trace_path))
    assert names["mlp"] == 2
    assert sum(v for k, v in names.items() if k.startswith("Torch-Compiled Region")) == 2
    assert "aten::gelu" not in names  # the GELU is in Inductor's generated kernel now, not an aten op


@pytest.mark.slow
def test_analyses_size_another_workloads_gemms_from_its_shapes(store):
    """A linear run's config is not the study's matmul: its GEMM's FLOPs come from the recorded shapes."""
    from profiling_core import open_trace
    from profiling_core.analyses import analyze
    from profiling_core.explain.diagnosis import diagnose
    cfg = ExperimentConfig(workload="linear", knobs={"batch": 4, "in_features": 16, "out_features": 8}, **FAST)
    run = run_experiment(cfg, store=store)
    with open_trace(run.trace_path, engine="sqlite") as s:
        g = analyze(s, config=run.config).gemm_throughput
        roof = diagnose(s, config=run.config).roofline
    assert list(g["op"]) == ["aten::addmm"] * 2 and set(g["flops_from"]) == {"shapes"}
    assert set(g["flops"]) == {2 * 4 * 16 * 8}
    gemm = roof[roof["kind"] == "gemm"]
    assert list(gemm[["m", "k", "n", "flops_from"]].itertuples(index=False, name=None)) == [(4, 16, 8, "shapes")]


# --- the command line ---------------------------------------------------------------------------------------------

def cli(*args):
    return subprocess.run([sys.executable, "-m", "profiling_core", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)


def test_the_workloads_command_lists_each_workload_with_its_knobs():
    p = cli("workloads")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert [ln.split()[0] for ln in lines if ln and not ln.startswith(" ")][:len(workload_names())] == workload_names()
    assert "attention  (sweep axis: seq_len)" in lines
    assert any(re.fullmatch(r"\s+seq_len\s+int\s+default 256\s+1\.\.1048576\s+tokens per sequence .*", ln)
               for ln in lines)
    assert any(re.fullmatch(r"\s+backend\s+choice\s+default auto\s+auto\|flash\|efficient\|math\|cudnn .*", ln)
               for ln in lines)
    data = json.loads(cli("workloads", "--json").stdout)
    att = next(w for w in data["workloads"] if w["name"] == "attention")
    assert att["size_knob"] == "seq_len"
    assert {k["name"]: k["default"] for k in att["knobs"]} == {"batch": 4, "heads": 8, "seq_len": 256, "head_dim": 64,
                                                               "causal": True, "backend": "auto"}
    kv = next(k for w in data["workloads"] for k in w["knobs"] if w["name"] == "transformer_block"
              and k["name"] == "kv_len")
    assert kv["applies_when"] == ["mode", "decode"] and kv["range"] == [1, 1048576]


@pytest.mark.parametrize("args,message", [
    (["--workload", "attention", "--knob", "seq_len=0"], "knobs.seq_len must be an integer from 1 to 1048576, got 0"),
    (["--workload", "attention", "--knob", "seq_len"],
     f"--knob must be NAME=VALUE with NAME one of attention's knobs: {ATTN_KNOBS}, got 'seq_len'"),
    (["--workload", "linear", "--batch", "4"], "batch must be left at its default None for workload 'linear'"),
    (["--workload", "attention", "--knob", "seq_len=٣"],
     "knobs.seq_len must be an integer from 1 to 1048576, in the digits 0-9, got '٣'"),
])
def test_bad_knob_flags_exit_with_one_line(args, message):
    p = cli("run", *args)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.startswith(f"error: {message}") and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.parametrize("args,message", [
    (["--sizes", "64,٣"], "each of --sizes must be an integer from 1 to 65536, in the digits 0-9, got '٣'"),
    (["--sizes", "2²"], "each of --sizes must be an integer from 1 to 65536, in the digits 0-9, got '2²'"),
    (["--workload", "attention", "--sizes", "1e3"],
     "each of --sizes must be an integer from 1 to 1048576, in the digits 0-9, got '1e3'"),
    (["--sizes", "64", "--warmups", "0,١"], "each of --warmups must be an integer, in the digits 0-9, got '١'"),
])
def test_bad_sweep_values_exit_with_one_line_before_any_run(tmp_path, args, message):
    """``int()`` took ``٣`` for 3 (a sweep of size 3 ran) and ``2²`` raised a traceback."""
    p = cli("sweep", *args, "--compile-modes", "off", "--device", "cpu", "--store", str(tmp_path / "runs"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr == f"error: {message}\n"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_the_cli_runs_a_workload_with_its_knobs(tmp_path):
    p = cli("run", "--workload", "attention", "--knob", "seq_len=8", "--knob", "head_dim=8", "--knob", "heads=2",
            "--knob", "batch=1", "--knob", "causal=false", "--dtype", "fp32", "--device", "cpu", "--wait", "0",
            "--warmup-steps", "0", "--active", "1", "--json", "--store", str(tmp_path / "runs"))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["config"]["workload"] == "attention" and out["config"]["knobs"]["causal"] is False
    names = x_names(scan_trace(out["trace_path"]))
    assert names["attention"] == 1 and names["aten::scaled_dot_product_attention"] == 1
    attn = [e for e in scan_trace(out["trace_path"]) if e.get("name") == "aten::scaled_dot_product_attention"]
    assert attn[0]["args"]["Input Dims"][0] == [1, 2, 8, 8]
    assert Path(out["trace_path"]).exists()


# --- a non-matmul_add config is never read as the study's matmul --------------------------------------------------

def test_a_cuda_graph_gemm_is_not_sized_from_another_workloads_config():
    """The study's CUDA-graph replay has no CPU GEMM op; only a matmul_add config may size its kernel (n = size)."""
    from profiling_core.explain.diagnosis import diagnose
    from profiling_core.trace import open_trace
    trace = DATA / "h200_diag" / "bf16_64_ro.json"
    study = ExperimentConfig.from_dict(json.loads((DATA / "h200_diag" / "bf16_64_ro.meta.json").read_text())["config"])
    other = ExperimentConfig(workload="linear", dtype="bf16", compile="reduce-overhead", warmup=study.warmup)
    with open_trace(trace, engine="sqlite") as s:
        mine, theirs = diagnose(s, config=study).roofline, diagnose(s, config=other).roofline
        as_dict = diagnose(s, config=other.to_dict()).roofline  # a meta.json config, as the CLI passes it
    assert list(mine.loc[mine["kind"] == "gemm", "flops"]) == [2 * 64 ** 3]
    assert theirs[theirs["kind"] == "gemm"].empty and as_dict[as_dict["kind"] == "gemm"].empty


def test_the_compile_finding_states_no_bias_shape_for_another_workload():
    """q9 names the study's bias shape from a matmul_add config; another workload's config has no such bias."""
    from profiling_core.analyses import analyze
    from profiling_core.explain.questions import findings
    from profiling_core.trace import open_trace
    base = DATA / "h200_bias" / "4096_bf16_warm_compile"
    study = ExperimentConfig.from_dict(json.loads(base.with_suffix(".meta.json").read_text())["config"])
    other = ExperimentConfig(workload="linear", dtype="bf16", compile="default", warmup=study.warmup)
    with open_trace(base.with_suffix(".json"), engine="sqlite") as s:
        q9 = {c.workload: next(f for f in findings(analyze(s, config=c), c) if f.id == "q9.compile")
              for c in (study, other)}
    assert q9["matmul_add"].evidence["bias"] == "matrix" and "bias (4096, 4096)" in q9["matmul_add"].text
    assert "bias" not in q9["linear"].evidence and "None" not in q9["linear"].text
    assert "copies the bias into the output" in q9["linear"].text  # what the trace shows, without a shape


def test_every_workload_says_what_its_step_runs_and_which_knob_its_sweeps_vary():
    """Over every workload and every value of its mode and train switches: the step's kind (what the Runs page
    compares) and the sweep axis the Overhead page's help text names for it."""
    import itertools

    from profiling_core.workloads import WORKLOADS
    for wl in WORKLOADS.values():
        names = {k.name for k in wl.knobs}
        modes = list(wl.knob("mode").choices) if "mode" in names else [None]
        trains = [False, True] if "train" in names else [None]
        text = wl.size_axis_text()
        for mode, train in itertools.product(modes, trains):
            knobs = {k: v for k, v in (("mode", mode), ("train", train)) if v is not None}
            if wl.name == "script":
                knobs["path"] = "x.py"
            try:
                v = wl.check_knobs(knobs)
            except ConfigError:
                assert wl.name == "transformer_block" and mode == "decode" and train  # decode does not train
                continue
            want = "train" if train or mode == "train" else "decode" if mode == "decode" else "forward"
            assert wl.step_kind(v) == want, (wl.name, knobs)
            axis = wl.size_knob_for(v)
            if axis is None:
                assert text == "" and wl.name == "script"
                continue
            when = wl.knob(axis).when
            assert (f"{axis} when {when[0]} is {when[1]!r}" if when else axis) in text, (wl.name, knobs, text)
