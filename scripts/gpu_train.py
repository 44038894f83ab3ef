#!/usr/bin/env python3
"""On a GPU machine: training steps and the causal LM through the app's own runner, as a user would run them.

Calibrates the device, then runs each case (warm: 5 calls, 3 active steps) and writes to ``--out``:
``<label>.json`` (the trace), ``<label>.meta.json``, ``<label>.analyze.json`` (``analyze --json`` against the
calibration) and ``peaks.json``. The cases: the MLP and the transformer block training with Adam foreach vs fused
under bf16 autocast, eager and compiled; the Llama-style causal LM in prefill, decode (dynamic vs static cache,
eager vs torch.compile reduce-overhead) and train.

Usage (repo root, on the device machine): python3 scripts/gpu_train.py --out DIR [--only LABEL,...]
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_workloads import calibrated_main  # noqa: E402 - the same run-and-keep loop
from profiling_core import ExperimentConfig  # noqa: E402

W = dict(warmup=5, active=3, device="cuda")
TRAIN = {"train": True, "autocast": "bf16"}
LM = {"layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 4, "vocab": 32000, "batch": 4, "seq_len": 128}


def runs() -> dict[str, ExperimentConfig]:
    out = {}
    for impl in ("foreach", "fused"):
        for m, mode in (("eager", "off"), ("compile", "default")):
            out[f"mlp_train_adam_{impl}_{m}"] = ExperimentConfig(
                workload="mlp", knobs={"batch": 2048, "d": 2048, **TRAIN, "optimizer": "adam", "impl": impl},
                dtype="fp32", compile=mode, **W)
            out[f"block_train_adam_{impl}_{m}"] = ExperimentConfig(
                workload="transformer_block", knobs={"batch": 8, "seq_len": 512, "d_model": 1024, "heads": 16,
                                                     **TRAIN, "optimizer": "adam", "impl": impl},
                dtype="fp32", compile=mode, **W)
    out["mlp_train_adam_forloop_fp32"] = ExperimentConfig(
        workload="mlp", knobs={"batch": 2048, "d": 2048, "train": True, "optimizer": "adam", "impl": "for-loop"},
        dtype="fp32", **W)
    out["lm_prefill"] = ExperimentConfig(workload="causal_lm", knobs={**LM, "mode": "prefill"}, dtype="bf16", **W)
    for cache in ("dynamic", "static"):
        out[f"lm_decode_{cache}_eager"] = ExperimentConfig(
            workload="causal_lm", knobs={**LM, "mode": "decode", "cache": cache, "new_tokens": 16}, dtype="bf16",
            **W)
    out["lm_decode_static_ro"] = ExperimentConfig(
        workload="causal_lm", knobs={**LM, "mode": "decode", "cache": "static", "new_tokens": 16}, dtype="bf16",
        compile="reduce-overhead", **W)
    out["lm_train"] = ExperimentConfig(workload="causal_lm", knobs={**LM, "mode": "train"}, dtype="bf16", **W)
    return out


def main() -> int:
    return calibrated_main(runs(), "train")


if __name__ == "__main__":
    sys.exit(main())
