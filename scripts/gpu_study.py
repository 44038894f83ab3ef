"""Run the study's experiments through the app's own code path (the library API) and time them.

    python scripts/gpu_study.py --out DIR [--sets spine,sweep,variance,coldwarm,batch,click] [--store DIR]

Sets:
  spine     issue 2's set: 64 and 4096, cold and warm, eager / compile default / reduce-overhead, batch 8
  sweep     sizes 64..8192, warm, eager / compile default / reduce-overhead, schedule 0/0/10
  variance  4096 and 8192, warm eager, schedule 0/0/20
  coldwarm  64 and 4096 cold vs warm eager, schedule 0/0/3
  click     click-to-artifacts: a warm eager run with the fork server ready (as the app keeps it), three times

Writes DIR/summary.json (per run: name, run_id, wall and phase timings, status) and DIR/runs.tar.gz (each run's
trace.json, table.txt and meta.json).  Prints a table.
"""
from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profiling_core import ExperimentConfig, RunStore, run_experiment  # noqa: E402
from profiling_core.errors import ProfilingError  # noqa: E402
from profiling_core.run.sweep import run_sweep  # noqa: E402
from profiling_core.run.worker import fork_server  # noqa: E402

SIZES = [64, 128, 256, 512, 1024, 2048, 4096, 8192]


def spine_set(sizes=(64, 4096), **common) -> list[ExperimentConfig]:
    """The study's 14 runs at ``sizes`` (``common``: other config fields, e.g. a CPU's device and dtype)."""
    out = []
    for size in sizes:
        for warm in (0, 10):
            for mode in ("off", "default", "reduce-overhead"):
                out.append(ExperimentConfig(size=size, warmup=warm, compile=mode, **common))
        out.append(ExperimentConfig(size=size, warmup=10, batch=8, **common))
    return out


def sweep_set() -> list[ExperimentConfig]:
    return [ExperimentConfig(size=s, warmup=10, compile=m, wait=0, warmup_steps=0, active=10)
            for m in ("off", "default", "reduce-overhead") for s in SIZES]


def variance_set() -> list[ExperimentConfig]:
    return [ExperimentConfig(size=s, warmup=10, wait=0, warmup_steps=0, active=20) for s in (4096, 8192)]


def coldwarm_set() -> list[ExperimentConfig]:
    return [ExperimentConfig(size=s, warmup=w, wait=0, warmup_steps=0, active=3) for s in (64, 4096) for w in (0, 10)]


SETS = {"spine": spine_set, "sweep": sweep_set, "variance": variance_set, "coldwarm": coldwarm_set}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--store", default=None)
    ap.add_argument("--sets", default="spine,sweep,variance,coldwarm,click")
    ap.add_argument("--prestart", type=int, default=0, help="1: fork runs from the prestarted worker (imports paid once)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    store = RunStore(a.store or out / "store")
    summary: dict = {"sets": {}}
    all_runs = []
    for name in a.sets.split(","):
        if name == "click":
            pool = fork_server()
            pool.warm()
            rows = []
            for i in range(3):
                # the fork server is ready, as it is when a user clicks after looking at a page
                pool.wait_ready(timeout=120)
                t0 = time.perf_counter()
                run = run_experiment(ExperimentConfig(size=4096, warmup=10), store=store, prestart=1)
                click = time.perf_counter() - t0
                rows.append({"name": run.name, "run_id": run.run_id, "click_to_artifacts_s": round(click, 3),
                             "timings": run.meta["timings"], "prestarted": run.meta.get("prestarted")})
                all_runs.append(run)
                print(f"click {i}: {click:.3f} s  {run.meta['timings']}", flush=True)
            pool.close()
            summary["sets"]["click"] = rows
            continue
        configs = SETS[name]()
        t0 = time.perf_counter()
        res = run_sweep(configs, store=store, prestart=a.prestart,
                        on_progress=lambda p: print(p.message, flush=True))
        wall = time.perf_counter() - t0
        rows = [{"name": r.name, "run_id": r.run_id, "timings": r.meta["timings"],
                 "device": r.meta.get("device", {}).get("name"),
                 "peak_device_memory_bytes": r.meta.get("peak_device_memory_bytes")} for r in res.runs]
        rows += [{"name": c.name, "error": str(e)} for c, e in res.errors]
        summary["sets"][name] = {"wall_s": round(wall, 3), "runs": rows}
        all_runs += res.runs
        print(f"== set {name}: {len(res.runs)} ok, {len(res.errors)} failed, {wall:.1f} s", flush=True)
        for c, e in res.errors:
            print(f"   FAIL {c.name}: {e}", flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        for r in all_runs:
            for f in ("trace.json", "table.txt", "meta.json"):
                p = r.run_dir / f
                if p.exists():
                    tar.add(p, arcname=f"{r.run_id}/{f}")
    print("rows:")
    for set_name, val in summary["sets"].items():
        runs = val if isinstance(val, list) else val["runs"]
        for row in runs:
            t = row.get("timings") or {}
            print(f"{set_name:9s} {row['name']:45s} " + " ".join(
                f"{k.removesuffix('_s')}={v:.2f}" for k, v in t.items() if isinstance(v, float)) +
                  (f" ERROR {row['error']}" if "error" in row else ""))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ProfilingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
