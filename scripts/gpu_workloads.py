#!/usr/bin/env python3
"""On a GPU machine: issue 14's runs. Each workload × eager / compile default / reduce-overhead, warm (10 calls),
3 active steps, and a size sweep of the transformer block in prefill (seq_len) and decode (kv_len), eager and
reduce-overhead; every run forked from the prestarted worker, as the app does.

Each trace and meta.json is copied to ``--out`` as ``<label>.json`` / ``.meta.json``; one line per run from a plain
JSON scan: median CPU step, kernels per step, the top three kernels by time.

Usage (repo root, on the device machine): python3 scripts/gpu_workloads.py --out DIR [--only LABEL,...]
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

MODES = {"eager": "off", "compile": "default", "ro": "reduce-overhead"}
W = dict(warmup=10, active=3, device="cuda", dtype="bf16")
WORKLOADS = {
    "linear": {"batch": 4096, "in_features": 4096, "out_features": 4096},
    "mlp": {"batch": 4096, "d": 2048},
    "attention": {"batch": 8, "heads": 16, "seq_len": 2048, "head_dim": 128},
    "block_prefill": {"mode": "prefill", "batch": 8, "seq_len": 512, "d_model": 1024, "heads": 16},
    "block_decode": {"mode": "decode", "batch": 8, "kv_len": 2048, "d_model": 1024, "heads": 16},
}


def runs() -> dict[str, ExperimentConfig]:
    out = {}
    for label, knobs in WORKLOADS.items():
        workload = "transformer_block" if label.startswith("block") else label
        for m, mode in MODES.items():
            out[f"{label}_{m}"] = ExperimentConfig(workload=workload, knobs=knobs, compile=mode, **W)
    out["attention_math_eager"] = ExperimentConfig(workload="attention",
                                                   knobs={**WORKLOADS["attention"], "backend": "math"}, **W)
    out["attention_fp32_eager"] = ExperimentConfig(workload="attention", knobs=WORKLOADS["attention"],
                                                   **{**W, "dtype": "fp32"})
    for seq in (128, 512, 2048):
        for m in ("eager", "ro"):
            out[f"sweep_prefill_{seq}_{m}"] = ExperimentConfig(
                workload="transformer_block", knobs={**WORKLOADS["block_prefill"], "seq_len": seq},
                compile=MODES[m], **W)
    for kv in (256, 2048, 8192):
        for m in ("eager", "ro"):
            out[f"sweep_decode_{kv}_{m}"] = ExperimentConfig(
                workload="transformer_block", knobs={**WORKLOADS["block_decode"], "kv_len": kv},
                compile=MODES[m], **W)
    return out


def scan(trace: Path) -> str:
    events = json.loads(trace.read_text())["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X"]
    steps = [e for e in xs if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"]
    gpu = collections.defaultdict(list)
    for e in xs:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu[e["name"]].append(float(e.get("dur", 0)))
    n = max(1, len(steps))
    cpu = statistics.median(float(e["dur"]) for e in steps) if steps else float("nan")
    busy = sum(sum(v) for v in gpu.values()) / n
    top = sorted(gpu.items(), key=lambda kv: -sum(kv[1]))[:3]
    lines = [f"  CPU step {cpu:,.1f} us, GPU op time {busy:,.1f} us/step, GPU ops {sum(map(len, gpu.values())) / n:g}"
             "/step"]
    lines += [f"  {len(d) / n:5g}/step x {statistics.mean(d):9.2f} us  {name[:120]}" for name, d in top]
    return "\n".join(lines)


def run_each(configs: dict, store: RunStore, out: Path):
    """Each config (``{label: config}``, as :func:`_cases` picks them) through the runner, forked from the prestarted
    worker as the app does; its trace and meta.json copied to ``out`` as ``<label>.json`` /
    ``<label>.meta.json`` (and its table and memory categories, where it has them, as ``.table.txt`` /
    ``.memory_categories.json``). Yields (label, run, seconds) per run that landed; a failed run is printed and skipped."""
    for label, cfg in configs.items():
        t0 = time.perf_counter()
        try:
            run = run_experiment(cfg, store=store, prestart=1)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"== {label} ({cfg.name}) FAILED: {type(e).__name__}: {str(e)[:600]}", flush=True)
            continue
        shutil.copyfile(run.trace_path, out / f"{label}.json")
        shutil.copyfile(run.meta_path, out / f"{label}.meta.json")
        for extra, suffix in ((run.table_path, ".table.txt"),
                              (Path(run.run_dir) / "memory_categories.json", ".memory_categories.json")):
            if Path(extra).exists():
                shutil.copyfile(extra, out / f"{label}{suffix}")
        yield label, run, time.perf_counter() - t0


def _options() -> argparse.Namespace:
    """The scripts' options, parsed once: ``out`` (``--out DIR``, made), ``only`` (``--only LABEL,...``; empty:
    every case) and ``skip`` (``--skip LABEL,...``) as sets, ``with_stack`` (``--with-stack``: every case recorded
    with ``with_stack=True`` too, labelled ``<label>_stack``: a verdict must hold where Python frames take the ops'
    time), ``traces_only`` (``--traces-only``: no calibration, no ``analyze``; the traces are read elsewhere)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--only", default="")
    ap.add_argument("--skip", default="")
    ap.add_argument("--with-stack", action="store_true")
    ap.add_argument("--traces-only", action="store_true")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    a.only, a.skip = ({x for x in v.split(",") if x} for v in (a.only, a.skip))
    return a


def _cases(runs: dict, a: argparse.Namespace) -> dict:
    """The runs ``--only`` names (all when it names none) less those ``--skip`` names, each also with
    ``with_stack=True`` (``<label>_stack``) under ``--with-stack``."""
    out = {}
    for label, cfg in runs.items():
        if label in a.skip or (a.only and label not in a.only):
            continue
        out[label] = cfg
        if a.with_stack and not cfg.with_stack:
            out[f"{label}_stack"] = ExperimentConfig.from_dict({**cfg.to_dict(), "with_stack": True})
    return out


def calibrated_main(runs: dict, prefix: str) -> int:
    """The main of a GPU script that judges its runs against the device: ``--out DIR [--only LABEL,...]``;
    calibrates into a fresh store (``peaks.json``), runs each config (:func:`run_each`) and writes
    ``<label>.analyze.json``, what ``analyze --json`` says of it against that calibration."""
    import subprocess

    from profiling_core import calibrate
    a = _options()
    out, runs = a.out, _cases(runs, a)
    store = RunStore(tempfile.mkdtemp(prefix=f"{prefix}-store-"))
    t0 = time.perf_counter()
    if not a.traces_only:
        peaks = calibrate(store=store)
        (out / "peaks.json").write_text(json.dumps(peaks.to_dict(), indent=1))
        print(f"== calibration {time.perf_counter() - t0:.1f} s: {peaks.gemm_tflops} {peaks.bandwidth_gbs} GB/s",
              flush=True)
    for label, run, took in run_each(runs, store, out):
        if a.traces_only:
            print(f"== {label} ({took:.1f} s)", flush=True)
            continue
        res = subprocess.run([sys.executable, "-m", "profiling_core", "analyze", str(run.trace_path), "--json",
                              "--engine", "sqlite", "--peaks", str(out / "peaks.json")], capture_output=True, text=True)
        (out / f"{label}.analyze.json").write_text(res.stdout or res.stderr)
        print(f"== {label} ({took:.1f} s, analyze rc {res.returncode})", flush=True)
    shutil.rmtree(store.root, ignore_errors=True)
    return 0


def main() -> int:
    a = _options()
    store = RunStore(tempfile.mkdtemp(prefix="wl-store-"))
    for label, run, took in run_each(_cases(runs(), a), store, a.out):
        print(f"== {label} ({run.config.name}, {took:.1f} s)\n{scan(run.trace_path)}", flush=True)
    shutil.rmtree(store.root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
