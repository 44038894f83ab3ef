"""Warm runs, click to artifacts: a new process per run (fresh interpreter, fork of the fork server) against the
persistent worker, on the app's own code path (``run_experiment`` / ``run_sweep``), interleaved.

    python scripts/gpu_warm.py --out DIR [--device auto] [--size 4096] [--rounds 7] [--fresh-rounds 2]
                               [--sets click,set] [--set-repeats 2] [--set-sizes 64,4096]

Needs only torch and this repository.  ``click``: a warm eager run (``--size``, 10 warm-up calls, the default
schedule) ``--rounds`` times per kind, the kinds' order rotated every round; the fork server is ready and the
persistent worker has run once before the timed rounds (as in an app that has been used), and that first
persistent run is reported on its own.  ``set``: the study's 14 runs (64 and 4096, cold and warm, eager / compile
default / reduce-overhead, + batch 8: ``gpu_study.spine_set``; ``--set-sizes`` for others) through ``run_sweep`` with new processes and with
the persistent worker, alternating which goes first; the cold runs' times are compared too (they must not change:
cold runs always get a new process). ``--set-kinds`` may add ``shared``: the persistent worker and the
warm compiled runs sharing the store's compile cache (``compile_cache="shared"``), emptied before each set.  Prints a table; writes DIR/warm.json (every run's ``overhead_s``, ``timings``
and ``process``).  On a machine without a GPU, ``--device cpu --size 64 --set-sizes 64,256`` measures the same on the CPU.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_study import spine_set  # noqa: E402

from profiling_core import ExperimentConfig, RunStore, run_experiment  # noqa: E402
from profiling_core.run import environment_info, run_sweep, stop_persistent_workers  # noqa: E402
from profiling_core.run.worker import fork_server  # noqa: E402

KINDS = {"fresh": {"prestart": 0, "process": "fresh"},        # a new interpreter per run
         "forked": {"prestart": 1, "process": "fresh"},       # a fork of the fork server per run (the app today)
         "persistent": {"prestart": 1, "process": "persistent"},
         # + the warm compiled runs share the store's compile cache, which the set starts without (emptied first):
         # it holds only what this set's own cold runs added, so each warm compiled run finds its cold twin's graph
         "shared": {"prestart": 1, "process": "persistent", "compile_cache": "shared"}}


def _kernels(run) -> dict:
    """The profiled steps' device kernels, from a plain scan of the trace: kernel µs per step and the longest
    kernel's name (the same config must run the same kernels in whichever process ran it)."""
    import gzip
    path = run.trace_path
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    steps = sum(1 for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    if not kernels or not steps:
        return {}
    longest = max(kernels, key=lambda e: e.get("dur", 0))
    return {"us_per_step": round(sum(e.get("dur", 0) for e in kernels) / steps, 3), "per_step": len(kernels) / steps,
            "longest": str(longest.get("name"))[:80]}


def _session_others(sid: int) -> list[int]:
    """The live processes of session ``sid`` other than its leader (a persistent worker between runs: none)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != sid:
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[3]) == sid:
                out.append(int(entry.name))
    return out


def _row(run, click_s: float, kernels: bool = False) -> dict:
    m = run.meta
    row = {"name": run.name, "run_id": run.run_id, "click_to_artifacts_s": round(click_s, 4),
           "process": m.get("process"), "timings": m.get("timings"), "overhead_s": m.get("overhead_s"),
           "cuda_initialized_before_run": m.get("cuda_initialized_before_run"), "compile_cache": m.get("compile_cache")}
    if kernels:
        row["kernels"] = _kernels(run)
    return row


def _stats(xs: list[float]) -> dict:
    return {"n": len(xs), "median": round(statistics.median(xs), 4), "min": round(min(xs), 4),
            "max": round(max(xs), 4)} if xs else {"n": 0}


def _stage_medians(rows: list[dict]) -> dict:
    keys = sorted({k for r in rows for k in (r.get("overhead_s") or {})})
    return {k: round(statistics.median((r["overhead_s"] or {}).get(k) or 0.0 for r in rows), 4) for k in keys}


def click(store: RunStore, cfg: ExperimentConfig, rounds: int, fresh_rounds: int) -> dict:
    pool = fork_server()
    pool.warm()
    pool.wait_ready(300)
    t0 = time.perf_counter()
    first = run_experiment(cfg, store=store, **KINDS["persistent"])  # starts the worker: not a warm click
    out = {"persistent_first": _row(first, time.perf_counter() - t0), "rows": {k: [] for k in KINDS}}
    order = list(KINDS)
    for i in range(rounds):
        kinds = order[i % len(order):] + order[:i % len(order)]
        for kind in kinds:
            if kind == "fresh" and i >= fresh_rounds:
                continue
            pool.wait_ready(300)
            t0 = time.perf_counter()
            run = run_experiment(cfg, store=store, **KINDS[kind])
            row = _row(run, time.perf_counter() - t0)
            out["rows"][kind].append(row)
            print(f"click round {i} {kind:10s} {row['click_to_artifacts_s']:.3f} s  process {row['process']}",
                  flush=True)
    return out


def run_set(store: RunStore, repeats: int, kinds: list[str], configs: list[ExperimentConfig]) -> dict:
    out = {k: [] for k in kinds}
    for i in range(repeats):
        for kind in (kinds if i % 2 == 0 else kinds[::-1]):
            stop_persistent_workers()  # each set starts as an app's first sweep would: no persistent worker yet
            fork_server().wait_ready(300)
            shutil.rmtree(store.root / ".compile-cache", ignore_errors=True)
            t0 = time.perf_counter()
            res = run_sweep(configs, store=store, **KINDS[kind])
            wall = time.perf_counter() - t0
            rows = [_row(r, r.meta["overhead_s"]["total_s"], kernels=True) for r in res.runs]
            pids = {r["process"]["pid"] for r in rows if (r["process"] or {}).get("kind") == "persistent"}
            left = {pid: _session_others(pid) for pid in pids}  # what the runs left running in the worker's session
            out[kind].append({"wall_s": round(wall, 3), "runs": rows, "left_in_persistent_session": left,
                              "errors": [{"name": c.name, "error": str(e)} for c, e in res.errors]})
            print(f"set {i} {kind:10s} {wall:.2f} s  {len(res.runs)} ok, {len(res.errors)} failed, left in the "
                  f"persistent worker's session: {left}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--dtype", default=None, help="default: bf16 on a GPU, fp32 on a CPU")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads of the runs (a loaded CPU: 1 keeps thread-pool waits out of the figures)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--fresh-rounds", type=int, default=2, help="rounds that also time a fresh interpreter")
    ap.add_argument("--sets", default="click,set")
    ap.add_argument("--set-repeats", type=int, default=2)
    ap.add_argument("--set-kinds", default="forked,persistent")
    ap.add_argument("--set-sizes", default="64,4096", help="the set's two sizes (a CPU: smaller, e.g. 64,256)")
    a = ap.parse_args()
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    store = RunStore(out_dir / "store")
    env = environment_info()
    on_gpu = a.device == "cuda" or (a.device == "auto" and env.get("cuda_available"))
    cfg = ExperimentConfig(size=a.size, dtype=a.dtype or ("bf16" if on_gpu else "fp32"), warmup=10, device=a.device,
                           threads=a.threads)
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": {**env, "platform": platform.platform()}, "config": cfg.to_dict()}
    sets = a.sets.split(",")
    if "click" in sets:
        result["click"] = click(store, cfg, a.rounds, a.fresh_rounds)
    if "set" in sets:
        configs = spine_set([int(x) for x in a.set_sizes.split(",")], device=cfg.device, dtype=cfg.dtype,
                            threads=a.threads)
        result["set"] = run_set(store, a.set_repeats, a.set_kinds.split(","), configs)
    stop_persistent_workers()
    fork_server().close()

    print(f"\n{env.get('device_name')} · torch {env.get('torch')} · {env.get('cpu_cores')} cores · {cfg.name}")
    if "click" in result:
        c = result["click"]
        print(f"first persistent run (starts the worker): {c['persistent_first']['click_to_artifacts_s']:.3f} s")
        print(f"{'warm click → artifacts':26s} {'n':>3s} {'median':>8s} {'min':>8s} {'max':>8s}")
        summary = {}
        for kind, rows in c["rows"].items():
            st = _stats([r["click_to_artifacts_s"] for r in rows])
            summary[kind] = {**st, "stages": _stage_medians(rows)}
            if st["n"]:
                print(f"{kind:26s} {st['n']:3d} {st['median']:8.3f} {st['min']:8.3f} {st['max']:8.3f}")
        stages = sorted({k for s in summary.values() for k in s.get("stages", {})})
        print("median seconds per stage (overhead_s):")
        print(f"{'stage':16s}" + "".join(f"{k:>12s}" for k in summary))
        for k in stages:
            print(f"{k:16s}" + "".join(f"{summary[kind]['stages'].get(k, 0):12.4f}" for kind in summary))
        c["summary"] = summary
    if "set" in result:
        print(f"\n{'the 14-run set':26s} {'walls (s)':>24s}  cold runs' median total (s)")
        for kind, reps in result["set"].items():
            colds = [r["overhead_s"]["total_s"] for rep in reps for r in rep["runs"] if "_cold_" in r["name"]]
            warms = [r["overhead_s"]["total_s"] for rep in reps for r in rep["runs"] if "_warm_" in r["name"]]
            walls = ", ".join(f"{rep['wall_s']:.2f}" for rep in reps)
            print(f"{kind:26s} {walls:>24s}  cold {statistics.median(colds) if colds else float('nan'):.3f}"
                  f"  warm {statistics.median(warms) if warms else float('nan'):.3f}")
        kinds = list(result["set"])
        print("\nper run: total s (process kind, compiled runs before it) · kernel µs per step, kernels per step")
        print(f"{'run':34s}" + "".join(f"{k:>44s}" for k in kinds))
        names = [r["name"] for r in result["set"][kinds[0]][0]["runs"]]
        for name in names:
            cells = []
            for kind in kinds:
                rows = [r for rep in result["set"][kind] for r in rep["runs"] if r["name"] == name]
                cells.append("; ".join(
                    f"{r['overhead_s']['total_s']:.2f} ({r['process']['kind'][:4]},"
                    f"{r['process'].get('compiled_runs_before', '-')}) "
                    f"{r['kernels'].get('us_per_step', float('nan')):.1f}/{r['kernels'].get('per_step', 0):g}"
                    for r in rows))
            print(f"{name[:34]:34s}" + "".join(f"{c:>44s}" for c in cells))
    (out_dir / "warm.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"\nwrote {out_dir / 'warm.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
