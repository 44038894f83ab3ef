#!/usr/bin/env python3
"""On a GPU machine: the runs issue 13's rules are judged on, and the device's peaks.

1. ``measure_peaks("cuda")`` (printed, and written to ``--out``/peaks.json);
2. runs through the app's runner (fresh worker per run, warm, 3 active steps), each trace and meta.json copied to
   ``--out`` as ``<run name>.json`` / ``.meta.json``, and one line per run from a plain JSON scan: the GEMM kernels
   that ran (name, count, mean µs) and the median step's GPU busy time:
   - fp32 at 4096 with TF32 off (torch's default) and on (matmul_precision high), eager and compiled;
   - bf16 and fp16 at sizes that are and are not multiples of 8 (4096, 4100, 4095), eager;
   - the launch-bound small size (64) eager, compile default and reduce-overhead;
   - the profiler's own overhead: 64 bf16 eager with and without record_shapes / with_stack / profile_memory.

Usage (repo root, on the device machine): python3 scripts/gpu_diagnose.py --out "$OUT" [--only NAME,...]
"""
from __future__ import annotations

import argparse
import collections
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiling_core import ExperimentConfig, RunStore, run_experiment  # noqa: E402

W = dict(warmup=10, active=3, device="cuda")
RUNS = {
    "fp32_tf32_off": dict(size=4096, dtype="fp32", **W),
    "fp32_tf32_on": dict(size=4096, dtype="fp32", matmul_precision="high", **W),
    "fp32_tf32_off_compile": dict(size=4096, dtype="fp32", compile="default", **W),
    "fp32_tf32_on_compile": dict(size=4096, dtype="fp32", compile="default", matmul_precision="high", **W),
    "bf16_4096": dict(size=4096, dtype="bf16", **W),
    "bf16_4100": dict(size=4100, dtype="bf16", **W),
    "bf16_4095": dict(size=4095, dtype="bf16", **W),
    "fp16_4096": dict(size=4096, dtype="fp16", **W),
    "fp16_4095": dict(size=4095, dtype="fp16", **W),
    "bf16_4095_compile": dict(size=4095, dtype="bf16", compile="default", **W),
    "bf16_64": dict(size=64, dtype="bf16", **W),
    "bf16_64_compile": dict(size=64, dtype="bf16", compile="default", **W),
    "bf16_64_ro": dict(size=64, dtype="bf16", compile="reduce-overhead", **W),
    "bf16_64_noshapes": dict(size=64, dtype="bf16", record_shapes=False, **W),
    "bf16_64_stack_memory": dict(size=64, dtype="bf16", with_stack=True, profile_memory=True, **W),
}


def scan(trace: Path) -> str:
    events = json.loads(trace.read_text())["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X"]
    steps = [e for e in xs if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "cpu_op"
             or str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    kernels = collections.defaultdict(list)
    for e in xs:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels[e["name"]].append(float(e.get("dur", 0)))
    cpu_step = statistics.median(float(e["dur"]) for e in steps) if steps else None
    lines = [f"  steps {len(steps)}, median CPU step {cpu_step} us"]
    for name, durs in sorted(kernels.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"  {len(durs):4d} x {statistics.mean(durs):10.2f} us  {name[:150]}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated run names (default: all), or 'peaks'")
    ap.add_argument("--no-peaks", action="store_true", help="skip measure_peaks (the CLI's calibrate does it)")
    ap.add_argument("--prestart", type=int, default=1, help="1: fork runs from the prestarted worker (the app's "
                                                            "way), 0: a fresh interpreter per run")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    only = [x for x in a.only.split(",") if x]
    if not a.no_peaks and (not only or "peaks" in only):
        from profiling_core.run.calibration import measure_peaks
        t0 = time.perf_counter()
        p = measure_peaks("cuda")
        (out / "peaks.json").write_text(json.dumps(p.to_dict(), indent=1))
        print(f"== peaks ({time.perf_counter() - t0:.1f} s): {p.device}, driver {p.driver}, torch {p.torch_version}"
              f"\n  GEMM TFLOP/s best {p.gemm_tflops}\n  median {p.gemm_tflops_median}"
              f"\n  copy GB/s best {p.bandwidth_gbs}, median {p.bandwidth_gbs_median}", flush=True)
    store = RunStore(tempfile.mkdtemp(prefix="diag-store-"))
    for label, kw in RUNS.items():
        if only and label not in only:
            continue
        cfg = ExperimentConfig(**kw)
        t0 = time.perf_counter()
        try:
            run = run_experiment(cfg, store=store, prestart=a.prestart)
        except Exception as e:  # noqa: BLE001 - report and go on with the next run
            print(f"== {label} ({cfg.name}) FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        shutil.copyfile(run.trace_path, out / f"{label}.json")
        shutil.copyfile(run.meta_path, out / f"{label}.meta.json")
        print(f"== {label} ({cfg.name}, {time.perf_counter() - t0:.1f} s, prestarted "
              f"{run.meta.get('prestarted')}, CUDA initialised before the run "
              f"{run.meta.get('cuda_initialized_before_run')})\n{scan(run.trace_path)}", flush=True)
    shutil.rmtree(store.root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
