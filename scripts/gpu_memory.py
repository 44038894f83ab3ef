#!/usr/bin/env python3
"""On a GPU machine: runs with profile_memory through the app's own runner, and torch's own memory figures.

Through the runner (forked from the prestarted worker, as the app does; warm: 5 calls, 3 active steps), each with
profile_memory: matmul_add at 1024/4096/8192 eager, compile and reduce-overhead; the transformer block in decode at
kv_len 256/2048/8192; the causal LM decoding 16 and 64 tokens with the dynamic cache; an MLP training step (Adam
fused, bf16 autocast); a script that keeps a tensor per step (scripts/memory_cases). Copies ``<label>.json``,
``.meta.json`` (``peak_device_memory_bytes``) and ``.table.txt`` (the profiler's table, memory columns included).

``cat_*``: training steps with profile_memory, record_shapes and with_stack, which keep torch's memory categories
(``.memory_categories.json``).

Then torch alone (no runner), for the MLP training step: profile_memory + record_shapes + with_stack, the
``key_averages`` memory columns per op, ``max_memory_allocated`` over the profiled window only, and
``export_memory_timeline`` (raw categories) as ``torch_mlp_train.*``.

Also the training leftovers: MLP log_loss, fp16 autocast (GradScaler), the causal LM's dynamic-cache decode
compiled (default and reduce-overhead), without profile_memory.

Usage (repo root, on the device machine): python3 scripts/gpu_memory.py --out DIR [--only LABEL,...]
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_workloads import _cases, _options, run_each  # noqa: E402
from profiling_core import ExperimentConfig, RunStore  # noqa: E402

W = dict(warmup=5, active=3, device="cuda")
M = dict(W, profile_memory=True)
MODES = {"eager": "off", "compile": "default", "ro": "reduce-overhead"}
LM = {"layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 4, "vocab": 32000, "batch": 4, "seq_len": 128}
MLP_TRAIN = {"batch": 2048, "d": 2048, "train": True, "optimizer": "adam", "impl": "fused", "autocast": "bf16"}


def runs() -> dict[str, ExperimentConfig]:
    out = {}
    for n in (1024, 4096, 8192):
        for m, mode in MODES.items():
            out[f"mem_mm_{n}_{m}"] = ExperimentConfig(size=n, dtype="bf16", compile=mode, **M)
    for kv in (256, 2048, 8192):
        out[f"mem_block_decode_{kv}"] = ExperimentConfig(
            workload="transformer_block", knobs={"mode": "decode", "batch": 8, "kv_len": kv, "d_model": 1024,
                                                 "heads": 16}, dtype="bf16", **M)
    for nt in (16, 64):
        out[f"mem_lm_decode_dyn_{nt}"] = ExperimentConfig(
            workload="causal_lm", knobs={**LM, "mode": "decode", "cache": "dynamic", "new_tokens": nt},
            dtype="bf16", **M)
    out["mem_mlp_train"] = ExperimentConfig(workload="mlp", knobs=MLP_TRAIN, dtype="fp32", **M)
    out["mem_mlp_train_ro"] = ExperimentConfig(workload="mlp", knobs=MLP_TRAIN, dtype="fp32",
                                               compile="reduce-overhead", **M)
    out["mem_script_cache"] = ExperimentConfig(
        workload="script", knobs={"path": str(ROOT / "scripts/memory_cases/temporaries_and_cache.py")},
        dtype="bf16", **M)
    # torch's memory categories (profile_memory + record_shapes + with_stack; memory_categories.json)
    C = dict(M, record_shapes=True, with_stack=True)
    out["cat_mlp_train"] = ExperimentConfig(workload="mlp", knobs=MLP_TRAIN, dtype="fp32", **C)
    out["cat_block_train"] = ExperimentConfig(
        workload="transformer_block", knobs={"batch": 8, "seq_len": 512, "d_model": 1024, "heads": 16, "train": True,
                                             "optimizer": "adamw", "impl": "fused", "autocast": "bf16"},
        dtype="fp32", **C)
    # the causal LM's training knobs (with profile_memory: the fit check's estimate against the process's peak)
    for label, kn in (("lm_train_adamw_fused_bf16", {"optimizer": "adamw", "impl": "fused", "autocast": "bf16"}),
                      ("lm_train_sgd_fp16_log", {"optimizer": "sgd", "autocast": "fp16", "log_loss": True})):
        out[label] = ExperimentConfig(workload="causal_lm", knobs={**LM, "mode": "train", **kn}, dtype="fp32", **M)
    # the training leftovers (no profile_memory)
    out["mlp_train_log_loss"] = ExperimentConfig(workload="mlp", knobs={**MLP_TRAIN, "log_loss": True},
                                                 dtype="fp32", **W)
    out["mlp_train_fp16_scaler"] = ExperimentConfig(workload="mlp", knobs={**MLP_TRAIN, "autocast": "fp16"},
                                                    dtype="fp32", **W)
    for m in ("compile",):  # reduce-overhead with a dynamic cache is refused (CUDA graph outputs overwritten)
        out[f"lm_decode_dynamic_{m}"] = ExperimentConfig(
            workload="causal_lm", knobs={**LM, "mode": "decode", "cache": "dynamic", "new_tokens": 16},
            dtype="bf16", compile=MODES[m], **W)
    return out


def torch_alone(out: Path) -> None:
    """The MLP training step under torch.profiler alone: torch's own memory figures, as an oracle."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule
    d, b = 2048, 2048
    model = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)).cuda()
    opt = torch.optim.Adam(model.parameters(), fused=True)
    x = torch.randn(b, d, device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=schedule(wait=0, warmup=1, active=3),
                 profile_memory=True, record_shapes=True, with_stack=True) as prof:
        for _ in range(4):
            step()
            prof.step()
    torch.cuda.synchronize()
    facts = {"allocated_before_bytes": before, "max_allocated_in_window_bytes": torch.cuda.max_memory_allocated(),
             "allocated_after_bytes": torch.cuda.memory_allocated(),
             "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
             "optimizer_state_bytes": sum(t.numel() * t.element_size() for s in opt.state.values()
                                          for t in s.values() if torch.is_tensor(t)),
             "ops": {}}
    for e in prof.key_averages():
        if e.self_device_memory_usage or e.device_memory_usage or e.self_cpu_memory_usage:
            facts["ops"][e.key] = {"count": e.count, "self_device_memory_usage": e.self_device_memory_usage,
                                   "device_memory_usage": e.device_memory_usage,
                                   "self_cpu_memory_usage": e.self_cpu_memory_usage,
                                   "cpu_memory_usage": e.cpu_memory_usage}
    prof.export_chrome_trace(str(out / "torch_mlp_train.json"))
    try:
        prof.export_memory_timeline(str(out / "torch_mlp_train.timeline.raw.json"), device="cuda:0")
    except Exception as e:  # noqa: BLE001 - record why
        facts["timeline_error"] = f"{type(e).__name__}: {e}"
    (out / "torch_mlp_train.facts.json").write_text(json.dumps(facts, indent=1))
    print("== torch alone:", {k: v for k, v in facts.items() if k != "ops"}, flush=True)


def main() -> int:
    a = _options()
    out, only = a.out, a.only
    store = RunStore(tempfile.mkdtemp(prefix="mem-store-"))
    for label, run, took in run_each(_cases(runs(), a), store, out):
        meta = json.loads(Path(run.meta_path).read_text())
        print(f"== {label} ({took:.1f} s) peak {meta.get('peak_device_memory_bytes')}", flush=True)
    if not only or "torch_alone" in only:
        torch_alone(out)
    shutil.rmtree(store.root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
