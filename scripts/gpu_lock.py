#!/usr/bin/env python3
"""On a GPU machine: the device lock is per GPU. Two processes, each a caller of its own, profile on GPU 0 at the
same time, one naming it by number (``CUDA_VISIBLE_DEVICES=0``) and one by its UUID (from NVML): they must
serialize (their workers' spans, from each run's meta.json, do not overlap; the later one waited for lock
``cuda0``), and each meta.json must name GPU index 0 with that GPU's UUID. With a second GPU, a third process on
GPU 1 runs beside them (its lock is ``cuda1``: its span overlaps theirs), and a sweep of 4 runs through
``executor="ray"`` (a local Ray instance: Ray gives each task one GPU through ``CUDA_VISIBLE_DEVICES``) runs on
both GPUs at once, each run alone on its GPU (its meta names the GPU index and the lock ``cuda<index>``).

Writes DIR/gpu_lock.json (``ok``: every check held; ``checks``: each one; ``runs``: what each process saw).

Usage (repo root, on the device machine): python3 scripts/gpu_lock.py --out DIR [--no-ray]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


CFG = dict(size=4096, dtype="bf16", device="cuda", warmup=20, active=40)


def span(m: dict) -> list[float]:
    """From the lock taken to the worker's result back, on the wall clock (started_at is the staging's end)."""
    start = datetime.fromisoformat(m["started_at"]).timestamp()
    return [start + m["timings"]["lock_wait_s"], start + m["timings"]["wall_s"] - m["overhead_s"]["staging_s"]]


def overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def ray_sweep(work: Path) -> dict:
    """Four CUDA runs through executor="ray" on this machine's GPUs: which GPU each ran on, and when."""
    from profiling_core import ExperimentConfig, RunStore
    from profiling_core.run import run_sweep
    res = run_sweep([ExperimentConfig(**CFG) for _ in range(4)], executor="ray", ray_address="local",
                    store=RunStore(work / "ray_store"), prestart=1)
    runs = [{"device_lock": r.meta.get("device_lock"), "index": (r.meta.get("device") or {}).get("index"),
             "visible_devices": (r.meta.get("device") or {}).get("visible_devices"), "span": span(r.meta)}
            for r in res.runs]
    same = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:] if a["index"] == b["index"]]
    other = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:] if a["index"] != b["index"]]
    return {"runs": runs, "errors": [str(e) for _c, e in res.errors], "checks": {
        "ray_every_run_landed": len(res.runs) == 4 and not res.errors,
        "ray_both_gpus_used": {r["index"] for r in runs} == {0, 1},
        "ray_lock_names_its_gpu": all(r["device_lock"] == f"cuda{r['index']}" for r in runs),
        "ray_one_run_per_gpu_at_a_time": not any(overlap(a["span"], b["span"]) for a, b in same),
        "ray_two_gpus_at_once": any(overlap(a["span"], b["span"]) for a, b in other)}}


def child(out: Path) -> int:
    """One caller: one CUDA run into a store of its own, behind the lock folder the parent set."""
    from profiling_core import ExperimentConfig, RunStore, run_experiment
    from profiling_core.run.lock import device_key
    statuses: list[str] = []
    key = device_key("cuda")
    cfg = ExperimentConfig(**CFG)
    run = run_experiment(cfg, store=RunStore(out.parent / (out.stem + "_store")), on_status=statuses.append)
    m = run.meta
    out.write_text(json.dumps({
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "key_in_caller": key,
        "device_lock": m.get("device_lock"), "device": m.get("device"),
        "span": span(m),
        "lock_wait_s": m["timings"]["lock_wait_s"],
        "waited_for": sorted({s.split("'")[1] for s in statuses if s.startswith("waiting for device lock '")}),
    }, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--child")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray sweep (on a machine of 2 GPUs or more)")
    a = ap.parse_args()
    if a.child:
        return child(Path(a.child))
    from profiling_core.run.host import nvml_gpus
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gpus = nvml_gpus()
    work = Path(tempfile.mkdtemp(prefix="gpu_lock-"))
    env = dict(os.environ, PROFILING_LOCK_DIR=str(work / "locks"))
    names = {"gpu0_by_index": "0", "gpu0_by_uuid": gpus[0]["uuid"] if gpus else "0"}
    if gpus and len(gpus) > 1:
        names["gpu1_by_index"] = "1"
    procs = {n: subprocess.Popen([sys.executable, __file__, "--child", str(work / f"{n}.json")],
                                 env={**env, "CUDA_VISIBLE_DEVICES": v}) for n, v in names.items()}
    rcs = {n: p.wait(timeout=540) for n, p in procs.items()}
    runs = {n: json.loads((work / f"{n}.json").read_text()) for n in names if rcs[n] == 0}
    checks = {"nvml_read": gpus is not None, "every_process_ran": all(rc == 0 for rc in rcs.values())}
    a0, b0 = runs.get("gpu0_by_index"), runs.get("gpu0_by_uuid")
    if a0 and b0:
        first, second = sorted((a0, b0), key=lambda r: r["span"][0])
        checks["gpu0_one_lock_however_named"] = a0["device_lock"] == b0["device_lock"] == "cuda0"
        checks["gpu0_runs_serialized"] = first["span"][1] <= second["span"][0]
        checks["gpu0_later_one_waited_for_cuda0"] = second["waited_for"] == ["cuda0"] and second["lock_wait_s"] > 0
        for n, r in (("by_index", a0), ("by_uuid", b0)):
            d = r["device"] or {}
            checks[f"gpu0_meta_index_0_{n}"] = d.get("index") == 0 and d.get("index_from") == "nvml"
            checks[f"gpu0_meta_uuid_{n}"] = bool(gpus) and d.get("uuid") == gpus[0]["uuid"]
    c1 = runs.get("gpu1_by_index")
    if c1 and a0 and b0:
        checks["gpu1_lock_is_cuda1"] = c1["device_lock"] == "cuda1" and (c1["device"] or {}).get("index") == 1
        checks["gpu1_ran_beside_gpu0"] = any(overlap(c1["span"], r["span"]) for r in (a0, b0))
    ray = None
    if gpus and len(gpus) > 1 and not a.no_ray:
        from profiling_core.run import ray_missing
        if ray_missing():
            checks["ray_installed"] = False
        else:
            ray = ray_sweep(work)
            checks.update(ray["checks"])
    result = {"ok": all(checks.values()), "checks": checks, "gpus": gpus, "returncodes": rcs, "runs": runs,
              "ray": ray}
    (out / "gpu_lock.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({"ok": result["ok"], "checks": checks}, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
