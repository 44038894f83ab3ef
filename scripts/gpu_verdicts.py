#!/usr/bin/env python3
"""On a GPU machine: the cases where a verdict shaped on matmul + add can go wrong (issue 19), eager and compiled.

Calibrates the device first (so the store holds its peaks), then profiles each case warm (10 calls, 3 active
steps, forked from the prestarted worker) and writes to ``--out``: ``<label>.json`` (the trace), ``<label>.meta.json``
and ``<label>.analyze.json`` (what ``python -m profiling_core analyze --json`` says of it, against the calibration),
plus ``peaks.json``. The cases' own code is in ``scripts/verdict_cases/``.

Usage (repo root, on the device machine): python3 scripts/gpu_verdicts.py --out DIR [--only LABEL,...]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_workloads import run_each  # noqa: E402 - the same run-and-keep loop
from profiling_core import ExperimentConfig, RunStore, calibrate  # noqa: E402

CASES = ROOT / "scripts" / "verdict_cases"
W = dict(warmup=10, active=3, device="cuda", dtype="bf16")


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
    }
    out = {}
    for label, c in cases.items():
        for m, mode in (("eager", "off"), ("compile", "default")):
            out[f"{label}_{m}"] = ExperimentConfig(workload=c["workload"], knobs=c["knobs"], compile=mode,
                                                   **{**W, **({"dtype": c["dtype"]} if "dtype" in c else {})})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    only = {x for x in a.only.split(",") if x}
    store = RunStore(tempfile.mkdtemp(prefix="verdict-store-"))
    t0 = time.perf_counter()
    peaks = calibrate(store=store)
    (out / "peaks.json").write_text(json.dumps(peaks.to_dict(), indent=1))
    print(f"== calibration {time.perf_counter() - t0:.1f} s: {peaks.gemm_tflops} {peaks.bandwidth_gbs} GB/s", flush=True)
    for label, run, took in run_each(runs(), store, out, only):
        res = subprocess.run([sys.executable, "-m", "profiling_core", "analyze", str(run.trace_path), "--json",
                              "--engine", "sqlite"], capture_output=True, text=True)
        (out / f"{label}.analyze.json").write_text(res.stdout or res.stderr)
        print(f"== {label} ({took:.1f} s, analyze rc {res.returncode})", flush=True)
    shutil.rmtree(store.root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
