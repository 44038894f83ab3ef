"""Issue 14's findings on real H200 runs of the new workloads (tests/data/h200_workloads, made by
scripts/gpu_workloads.py through the runner on 2026-12-01; docs/FINDINGS.md), checked against plain JSON scans."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import scan_trace

from profiling_core.analyses import analyze, triton_fusions
from profiling_core.config import ExperimentConfig
from profiling_core.explain.diagnosis import diagnose
from profiling_core.trace import open_trace

DATA = Path(__file__).parent / "data" / "h200_workloads"


def load(name: str):
    meta = json.loads((DATA / f"{name}.meta.json").read_text())
    return DATA / f"{name}.json", ExperimentConfig.from_dict(meta["config"])


def diagnosed(name: str):
    path, cfg = load(name)
    with open_trace(path, engine="sqlite") as s:
        return diagnose(s, config=cfg, compute_capability=9.0)


RULES = {"attention_eager": ["attention_backend"], "attention_fp32_eager": ["attention_backend"],
         "block_decode_ro": ["gpu_starved", "attention_backend", "cudagraphs_skipped"],
         "block_prefill_ro": ["attention_backend"], "mlp_compile": [], "mlp_eager": []}


@pytest.mark.parametrize("name", sorted(RULES))
def test_each_run_gets_the_rules_that_apply(name):
    assert [d.rule for d in diagnosed(name).diagnoses] == RULES[name]


def test_auto_attention_in_bf16_ran_cudnn_and_fp32_ran_efficient_with_its_reason():
    names = Counter(e.get("name") for e in scan_trace(DATA / "attention_eager.json"))
    assert names["aten::_scaled_dot_product_cudnn_attention"] == 3  # one a step
    x = next(d for d in diagnosed("attention_eager").diagnoses if d.rule == "attention_backend")
    assert x.evidence["backend"] == "cudnn" and x.fix.startswith("Nothing to change")
    names = Counter(e.get("name") for e in scan_trace(DATA / "attention_fp32_eager.json"))
    assert names["aten::_scaled_dot_product_efficient_attention"] == 3
    x = next(d for d in diagnosed("attention_fp32_eager").diagnoses if d.rule == "attention_backend")
    assert x.evidence["backend"] == "efficient"
    # the trace's own record of the types the attention ran in, before the run's dtype (an fp32 run under autocast
    # runs bf16 attention)
    assert x.evidence["reasons"] == ["flash attention takes only fp16/bf16 inputs and the trace records fp32 ones "
                                     "(aten::scaled_dot_product_attention's Input type: float)"]


def test_decode_under_reduce_overhead_launches_no_cuda_graph_and_prefill_does():
    def graph_launches(name):
        return sum(e.get("name") == "cudaGraphLaunch" for e in scan_trace(DATA / f"{name}.json"))
    assert graph_launches("block_decode_ro") == 0 and graph_launches("block_prefill_ro") == 3
    x = next(d for d in diagnosed("block_decode_ro").diagnoses if d.rule == "cudagraphs_skipped")
    assert "no cudaGraphLaunch in any step" in x.text and "perf_hints" in x.fix


def test_the_mlps_bias_and_gelu_fuse_under_compile():
    """Eager: the GEMMs carry the bias (cuBLAS epilogue) and GELU is its own kernel; compiled, GELU is one Triton
    kernel named after it."""
    eager = Counter(e["name"] for e in scan_trace(DATA / "mlp_eager.json") if e.get("cat") == "kernel")
    assert any("GeluCUDAKernelImpl" in n for n in eager) and not any(n.startswith("triton_") for n in eager)
    path, cfg = load("mlp_compile")
    with open_trace(path, engine="sqlite") as s:
        f = triton_fusions(s)
    assert f[["kernel", "fused_ops", "per_step"]].values.tolist() == [["triton_poi_fused_gelu_0", "gelu", 1.0]]


def test_attention_time_is_the_attention_category():
    path, cfg = load("attention_eager")
    kernel = [e for e in scan_trace(path) if e.get("cat") == "kernel" and "sdpa" in e["name"]]
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s, config=cfg)
    b = r.step_breakdown
    att = b[b["category"] == "attention"]
    assert att["time_us"].sum() == pytest.approx(sum(e["dur"] for e in kernel), rel=1e-6)


def test_a_run_that_asked_for_cuda_graphs_and_got_none_is_not_told_to_turn_them_on():
    """block_decode_ro asked torch.compile for mode='reduce-overhead' and its compiled steps replay no CUDA graph:
    gpu_starved must not advise that mode; it says the graphs were skipped and points to the finding that says why.
    Without the config the trace alone does not say the mode was asked for, and the advice stays."""
    path, cfg = load("block_decode_ro")
    meta = json.loads((DATA / "block_decode_ro.meta.json").read_text())
    assert meta["config"]["compile"] == "reduce-overhead"
    events = scan_trace(path)
    assert not any(e.get("name") == "cudaGraphLaunch" for e in events)
    regions = [e for e in events if str(e.get("name", "")).startswith("Torch-Compiled Region")]
    assert len(regions) == 3  # one compiled call a step: the steps ran compiled
    found = {d.rule: d for d in diagnosed("block_decode_ro").diagnoses}
    fix = found["gpu_starved"].fix
    assert "asked torch.compile for mode='reduce-overhead'" in fix and "no cudaGraphLaunch" in fix
    assert "replays it as a CUDA graph" not in fix  # (the old advice: turn on what the run already used)
    assert f"*{found['cudagraphs_skipped'].title}*" in fix
    with open_trace(path, engine="sqlite") as s:  # no config: nothing says the mode was asked for
        plain = next(d for d in diagnose(s, compute_capability=9.0).diagnoses if d.rule == "gpu_starved")
    assert "torch.compile(mode='reduce-overhead') replays it as a CUDA graph" in plain.fix


def test_max_autotune_asks_for_cuda_graphs_too():
    """mode='max-autotune' also replays CUDA graphs: the same run under that mode is told the graphs were skipped,
    by both rules, and not sent to reduce-overhead."""
    path, _cfg = load("block_decode_ro")
    meta = json.loads((DATA / "block_decode_ro.meta.json").read_text())
    cfg = ExperimentConfig.from_dict({**meta["config"], "compile": "max-autotune"})
    with open_trace(path, engine="sqlite") as s:
        found = {d.rule: d for d in diagnose(s, config=cfg, compute_capability=9.0).diagnoses}
    assert "mode='max-autotune' (CUDA graphs), but no step replays one" in found["cudagraphs_skipped"].text
    fix = found["gpu_starved"].fix
    assert "asked torch.compile for mode='max-autotune'" in fix and "reduce-overhead" not in fix


def test_fp32_attention_inputs_recorded_in_the_trace_are_the_reason_flash_did_not_run():
    """Without the run's config the trace alone says why flash did not run: every scaled_dot_product_attention call
    recorded float (fp32) query, key and value, and flash takes only fp16/bf16."""
    path, _cfg = load("attention_fp32_eager")
    calls = [e for e in scan_trace(path) if e.get("name") == "aten::scaled_dot_product_attention"
             and e.get("cat") == "cpu_op"]
    assert len(calls) == 3 and all(e["args"]["Input type"][:3] == ["float"] * 3 for e in calls)
    with open_trace(path, engine="sqlite") as s:
        x = next(d for d in diagnose(s, compute_capability=9.0).diagnoses if d.rule == "attention_backend")
    assert x.evidence["backend"] == "efficient"
    assert x.evidence["reasons"] == ["flash attention takes only fp16/bf16 inputs and the trace records fp32 ones "
                                     "(aten::scaled_dot_product_attention's Input type: float)"]
    assert "does not say" not in x.text


@pytest.mark.parametrize("types", [["c10::BFloat16"] * 3, None])
def test_bf16_or_unrecorded_attention_inputs_leave_the_reason_unsaid(tmp_path, types):
    """bf16 inputs that ran the efficient backend (something else ruled flash out), or no recorded types: the trace
    does not say why, and the text says so."""
    import verdict_traces as vt
    t = vt.Trace()
    for n in range(3):
        t.step(n + 1, lambda t: t.cpu(
            "aten::scaled_dot_product_attention", 40, dims=[[8, 16, 2048, 128]] * 3, types=types,
            children=lambda t: t.cpu("aten::_scaled_dot_product_efficient_attention", 30, types=types,
                                     children=lambda t: t.launch("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(...)",
                                                                 50.0))))
    with open_trace(t.write(tmp_path / "t.json"), engine="sqlite") as s:
        x = next(d for d in diagnose(s, compute_capability=9.0).diagnoses if d.rule == "attention_backend")
    assert x.evidence["backend"] == "efficient" and x.evidence["reasons"] == []
    assert "the trace does not say why flash was not chosen" in x.text
