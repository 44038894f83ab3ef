#!/usr/bin/env python3
"""On a GPU machine: the study's workload with a matrix and a vector bias, eager and compiled, at 4096² bf16, warm.

For each of the four runs it copies the trace and meta.json to ``--out`` as ``<run name>.json`` /
``<run name>.meta.json`` and prints what question 9 turns on: per profiled step, the GPU ops (name, count) and the
runtime calls that launched them, read from the trace with a plain JSON scan (no trace engine needed there).

Usage (repo root, on the device machine): python3 scripts/gpu_bias.py --out "$OUT"
"""
from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiling_core import ExperimentConfig, RunStore, run_experiment  # noqa: E402

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def summary(trace: Path) -> str:
    events = json.loads(trace.read_text())["traceEvents"]
    steps = sum(1 for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                and e.get("cat") != "gpu_user_annotation")
    gpu = collections.Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS)
    runtime = collections.Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"
                                  and ("Launch" in e["name"] or "Memcpy" in e["name"]))
    lines = [f"  {steps} steps; GPU ops:"] + [f"    {n // max(steps, 1)}/step  {name[:110]}" for name, n in gpu.items()]
    lines += [f"  launch/copy calls: {dict(runtime)}"]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--device", default="cuda", help="cuda (the point of it), or cpu to try the script")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    store = RunStore(tempfile.mkdtemp(prefix="bias-store-"))
    for compile_mode in ("off", "default"):
        for bias in ("matrix", "vector"):
            cfg = ExperimentConfig(size=a.size, dtype="bf16", warmup=10, compile=compile_mode, bias=bias,
                                   device=a.device)
            run = run_experiment(cfg, store=store)
            shutil.copyfile(run.trace_path, out / f"{cfg.name}.json")
            shutil.copyfile(run.meta_path, out / f"{cfg.name}.meta.json")
            print(f"== {cfg.name} (bias {bias}, shape {cfg.bias_shape()})\n{summary(run.trace_path)}", flush=True)
    shutil.rmtree(store.root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
