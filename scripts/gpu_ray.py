#!/usr/bin/env python3
"""On a GPU machine: the same sweep through the local executor and through ``executor="ray"`` (a local Ray on
this one node and its GPU), interleaved, and what each run says.

The sweep: matmul_add 256, 1024, 4096 and 8192, bf16, warm (10 calls), eager and torch.compile default (8 runs).
Each executor runs it ``--rounds`` times into its own store, alternating which goes first. Per run, from a plain
scan of its trace: the GEMM kernel's median (µs) and the median CPU step (µs); from the app: the findings' ids and
the diagnoses' rules (``analyze`` + ``diagnose`` against the run's own device, no calibration). Prints the sweep
walls, the per-run overhead of the Ray path (its wall less the local one's, per run) and whether both executors
said the same things; writes DIR/ray.json.

Usage (repo root, on the device machine): python3 scripts/gpu_ray.py --out DIR [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiling_core import ExperimentConfig, RunStore, analyze, diagnose, findings, open_trace  # noqa: E402
from profiling_core.run import run_sweep  # noqa: E402


def configs() -> list[ExperimentConfig]:
    return [ExperimentConfig(size=n, dtype="bf16", compile=m, warmup=10, device="cuda")
            for n in (256, 1024, 4096, 8192) for m in ("off", "default")]


def scan(trace: Path) -> dict:
    events = json.loads(trace.read_text())["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X"]
    steps = [e["dur"] for e in xs if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation"]
    gemm = [e["dur"] for e in xs if e.get("cat") == "kernel" and ("gemm" in e["name"].lower()
                                                                 or "nvjet" in e["name"].lower())]
    return {"gemm_median_us": statistics.median(gemm) if gemm else None,
            "cpu_step_median_us": statistics.median(steps) if steps else None}


def said(run) -> dict:
    with open_trace(run.trace_path, engine="sqlite") as s:
        r = analyze(s, config=run.config)
        d = diagnose(s, r, run.config)
        return {"findings": sorted(f.id for f in findings(r, run.config)), "rules": [x.rule for x in d.diagnoses]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import ray
    ray.init(num_cpus=4, num_gpus=1, include_dashboard=False)  # one node, one GPU (connected once, reused)
    record: dict = {"rounds": [], "runs": {}}
    for k in range(a.rounds):
        order = ("local", "ray") if k % 2 == 0 else ("ray", "local")
        for ex in order:
            store = RunStore(tempfile.mkdtemp(prefix=f"{ex}-"))
            t0 = time.perf_counter()
            res = run_sweep(configs(), store=store, prestart=1, executor=ex)
            wall = time.perf_counter() - t0
            record["rounds"].append({"round": k, "executor": ex, "wall_s": wall, "runs": len(res.runs),
                                     "errors": [f"{c.name}: {e}"[:300] for c, e in res.errors]})
            print(f"round {k} {ex:5s} {wall:7.2f} s  {len(res.runs)} runs, {len(res.errors)} errors", flush=True)
            for run in res.runs:
                meta = json.loads(Path(run.meta_path).read_text())
                row = {**scan(run.trace_path), **said(run), "node": meta.get("node")}
                record["runs"].setdefault(run.config.name, {}).setdefault(ex, []).append(row)
    ray.shutdown()
    walls = {ex: statistics.median(r["wall_s"] for r in record["rounds"] if r["executor"] == ex)
             for ex in ("local", "ray")}
    n = len(configs())
    print(f"\nsweep of {n} runs, median wall: local {walls['local']:.2f} s, ray {walls['ray']:.2f} s; "
          f"the Ray path's overhead per run {(walls['ray'] - walls['local']) / n * 1000:.0f} ms")
    same = True
    print(f"{'config':42s} {'gemm µs local/ray':>22s} {'cpu step µs local/ray':>26s}  same findings and rules")
    for name, by in record["runs"].items():
        lo, ra = by.get("local", []), by.get("ray", [])
        if not lo or not ra:
            print(f"{name:42s} missing on one executor"); same = False
            continue
        g = [statistics.median([x["gemm_median_us"] for x in v if x["gemm_median_us"]] or [float("nan")])
             for v in (lo, ra)]
        c = [statistics.median(x["cpu_step_median_us"] for x in v) for v in (lo, ra)]
        ok = {json.dumps([x["findings"], x["rules"]]) for x in lo + ra}
        same &= len(ok) == 1
        print(f"{name:42s} {g[0]:10.1f} / {g[1]:9.1f} {c[0]:12.1f} / {c[1]:11.1f}  {len(ok) == 1} "
              + ("" if len(ok) == 1 else str(sorted(ok))[:300]))
    record.update(walls=walls, same_findings_and_rules=same, node=record["runs"] and next(iter(
        next(iter(record["runs"].values())).get("ray", [{}]))).get("node"))
    (out / "ray.json").write_text(json.dumps(record, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
