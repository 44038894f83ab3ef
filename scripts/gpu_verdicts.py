#!/usr/bin/env python3
"""On a GPU machine: the cases where a verdict shaped on matmul + add can go wrong (issue 19), eager and compiled.

Calibrates the device first (so the store holds its peaks), then profiles each case warm (10 calls, 3 active
steps, forked from the prestarted worker) and writes to ``--out``: ``<label>.json`` (the trace), ``<label>.meta.json``
and ``<label>.analyze.json`` (what ``python -m profiling_core analyze --json`` says of it, against the calibration),
plus ``peaks.json``. The cases' own code is in ``scripts/verdict_cases/``.

Usage (repo root, on the device machine): python3 scripts/gpu_verdicts.py --out DIR [--only LABEL,...]
[--skip LABEL,...] [--with-stack] [--traces-only] (``gpu_workloads._options``: each case recorded with
``with_stack=True`` beside it; the traces alone, read elsewhere).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_workloads import calibrated_main  # noqa: E402 - the same run-and-keep loop
from profiling_core import ExperimentConfig  # noqa: E402

CASES = ROOT / "scripts" / "verdict_cases"
W = dict(warmup=10, active=3, device="cuda", dtype="bf16")
ATTN = {"batch": 8, "heads": 16, "seq_len": 2048, "causal": True}


def script(name: str, function: str = "make_step") -> dict:
    return {"path": str(CASES / f"{name}.py"), "function": function}


def runs() -> dict[str, ExperimentConfig]:
    cases = {
        "mlp_fp32": dict(workload="mlp", knobs={"batch": 4096, "d": 4096}, dtype="fp32"),
        "copy_pageable": dict(workload="script", knobs=script("host_copy_item")),
        "copy_pinned": dict(workload="script", knobs=script("host_copy_item", "pinned")),
        "tiny_ops": dict(workload="script", knobs=script("tiny_ops")),
        "conv_nchw": dict(workload="script", knobs=script("conv_block")),
        "conv_cl": dict(workload="script", knobs=script("conv_block", "channels_last")),
        "decode": dict(workload="transformer_block",
                       knobs={"mode": "decode", "batch": 4, "kv_len": 2048, "d_model": 1024, "heads": 16}),
        "gemv_m4": dict(workload="script", knobs=script("gemv")),
        "gemv_m4_n4095": dict(workload="script", knobs=script("gemv", "unaligned")),
        "input_loader": dict(workload="script", knobs=script("input_bound")),
        "input_workers": dict(workload="script", knobs=script("input_bound", "workers"), modes=("eager",)),
        "input_workers8": dict(workload="script", knobs=script("input_bound", "workers8"), modes=("eager",)),
        # the same three loops over 20 profiled steps: a DataLoader's workers wait in bursts
        "input_loader_a20": dict(workload="script", knobs=script("input_bound"), modes=("eager",), run={"active": 20}),
        "input_workers_a20": dict(workload="script", knobs=script("input_bound", "workers"), modes=("eager",),
                                  run={"active": 20}),
        "input_workers8_a20": dict(workload="script", knobs=script("input_bound", "workers8"), modes=("eager",),
                                   run={"active": 20}),
        "input_python": dict(workload="script", knobs=script("input_bound", "python_outside_ops"),
                             modes=("eager",)),
        "empty_cache": dict(workload="script", knobs=script("empty_cache"), modes=("eager",)),
        "empty_cache_kept": dict(workload="script", knobs=script("empty_cache", "kept"), modes=("eager",)),
        # who sets the pace where the CPU waits in a copy, or the copies are the GPU's work
        "readback_cpu": dict(workload="script", knobs=script("copies", "readback_cpu"), modes=("eager",)),
        "readback_item": dict(workload="script", knobs=script("copies", "readback_item"), modes=("eager",)),
        "stream_in_pinned": dict(workload="script", knobs=script("copies", "stream_in_pinned"), modes=("eager",)),
        "stream_in_pageable": dict(workload="script", knobs=script("copies", "stream_in_pageable"),
                                   modes=("eager",)),
        # which dimension's alignment matters: the operands' layout (the leading dimension of each)
        "gemm_m4095": dict(workload="script", knobs=script("gemm_layouts"), modes=("eager",)),
        "gemm_m4095_t": dict(workload="script", knobs=script("gemm_layouts", "transposed_m"), modes=("eager",)),
        "lm_head_50257": dict(workload="script", knobs=script("gemm_layouts", "lm_head")),
        "lm_head_50304": dict(workload="script", knobs=script("gemm_layouts", "lm_head_padded")),
        "gemm_m1_k4095": dict(workload="script", knobs=script("gemm_layouts", "m1_k4095"), modes=("eager",)),
        "gemm_n1": dict(workload="script", knobs=script("gemm_layouts", "n1"), modes=("eager",)),
        "gemm_m1_k4096": dict(workload="script", knobs=script("gemm_layouts", "m1_k4096"), modes=("eager",)),
        "gemm_m4_k4095": dict(workload="script", knobs=script("gemm_layouts", "m4_k4095"), modes=("eager",)),
        "linear_m1_k4095": dict(workload="script", knobs=script("gemm_layouts", "linear_m1_k4095"), modes=("eager",)),
        "linear_m1_k4096": dict(workload="script", knobs=script("gemm_layouts", "linear_m1_k4096"), modes=("eager",)),
        # flash attention and head_dim: not a multiple of 8, above 256; an fp32 run beside them; flash forced
        "attn_hd100": dict(workload="attention", knobs={**ATTN, "head_dim": 100}, modes=("eager",)),
        "attn_hd264": dict(workload="attention", knobs={**ATTN, "head_dim": 264}, modes=("eager",)),
        # multiples of 8 that are no power of two: does scaled_dot_product_attention pad them (attention_backend)?
        "attn_hd104": dict(workload="attention", knobs={**ATTN, "head_dim": 104}, modes=("eager",)),
        "attn_hd96": dict(workload="attention", knobs={**ATTN, "head_dim": 96}, modes=("eager",)),
        "attn_hd100_fp32": dict(workload="attention", knobs={**ATTN, "head_dim": 100}, modes=("eager",),
                                dtype="fp32"),
        "attn_hd100_flash": dict(workload="attention", knobs={**ATTN, "head_dim": 100, "backend": "flash"},
                                 modes=("eager",)),
        "attn_mask": dict(workload="script", knobs=script("attention_mask"), modes=("eager",)),
        "attn_mask_additive": dict(workload="script", knobs=script("attention_mask", "additive"), modes=("eager",)),
        # the study's GEMM at an odd size, compiled: CUDA graphs replay it without a CPU op of its shapes
        "mm4095_ro": dict(workload="matmul_add", knobs={}, modes=("ro",), run={"size": 4095}),
        # with_stack where the process has other Python threads: a DataLoader's pin-memory thread (which runs ops
        # of its own), Inductor's progress-bar monitor; torch writes their frames on thread 0
        "stack_workers": dict(workload="script", knobs=script("input_bound", "workers"), modes=("eager",),
                              run={"with_stack": True}),
        "stack_mm": dict(workload="matmul_add", knobs={}, run={"size": 4096, "with_stack": True}),
        # cold, and the schedule records from the loop's first step: the pin-memory thread's first pinned
        # allocations land in the recorded first step, beside the step's own thread (question 3 names them apart)
        "cold_workers": dict(workload="script", knobs=script("input_bound", "workers"), modes=("eager",),
                             run={"warmup": 0, "wait": 0, "warmup_steps": 0, "active": 5}),
        # fp32 models under bf16 autocast: the op recorded with the caller's inputs and again with the cast ones
        "autocast_conv": dict(workload="script", knobs=script("autocast"), modes=("eager",), dtype="fp32"),
        "autocast_mm": dict(workload="script", knobs=script("autocast", "mm"), modes=("eager",), dtype="fp32"),
        "autocast_attn_hd264": dict(workload="script", knobs=script("autocast", "attention_hd264"),
                                    modes=("eager",), dtype="fp32"),
        # max-autotune: Inductor benchmarks GEMM candidates (Triton templates beside cuBLAS) in the first call, and
        # may pick a Triton template kernel for the GEMM; cold, the benchmarks run inside the recorded first step
        "mm64_at": dict(workload="matmul_add", knobs={}, modes=("ma", "manc"), run={"size": 64}),
        "mm4096_at": dict(workload="matmul_add", knobs={}, modes=("ma", "manc"), run={"size": 4096}),
        "mm64_at_cold": dict(workload="matmul_add", knobs={}, modes=("ma", "manc"),
                             run={"size": 64, "warmup": 0, "wait": 0, "warmup_steps": 0}),
        "mm4096_at_cold": dict(workload="matmul_add", knobs={}, modes=("ma", "manc"),
                               run={"size": 4096, "warmup": 0, "wait": 0, "warmup_steps": 0}),
        "mlp_at": dict(workload="mlp", knobs={"batch": 4096, "d": 2048}, modes=("ma", "manc")),
        # the study's cold compiled runs: compiled in the recorded first step (schedule 0/0/3), or in the
        # unrecorded first step of the post's schedule (1/1/3)
        "mm64_cold": dict(workload="matmul_add", knobs={}, modes=("compile", "ro"),
                          run={"size": 64, "warmup": 0, "wait": 0, "warmup_steps": 0}),
        "mm4096_cold": dict(workload="matmul_add", knobs={}, modes=("compile", "ro"),
                            run={"size": 4096, "warmup": 0, "wait": 0, "warmup_steps": 0}),
        "mm64_cold_post": dict(workload="matmul_add", knobs={}, modes=("compile", "ro"), run={"size": 64, "warmup": 0}),
        "mm4096_cold_post": dict(workload="matmul_add", knobs={}, modes=("compile", "ro"),
                                 run={"size": 4096, "warmup": 0}),
    }
    out = {}
    for label, c in cases.items():
        for m, mode in (("eager", "off"), ("compile", "default"), ("ro", "reduce-overhead"), ("ma", "max-autotune"),
                        ("manc", "max-autotune-no-cudagraphs")):
            if m not in c.get("modes", ("eager", "compile")):
                continue
            out[f"{label}_{m}"] = ExperimentConfig(workload=c["workload"], knobs=c["knobs"], compile=mode,
                                                   **{**W, **({"dtype": c["dtype"]} if "dtype" in c else {}),
                                                      **c.get("run", {})})
    return out


def main() -> int:
    return calibrated_main(runs(), "verdict")


if __name__ == "__main__":
    sys.exit(main())
