"""Click-to-artifacts and click-to-analysis on the app's code path, plus the out-of-memory paths.

    python scripts/gpu_click.py --out DIR

With the fork server ready (as the app keeps it): time run_experiment (click → run folder on disk) and then
open_trace + analyze + findings (→ everything a page charts), for a warm eager run and a warm compile run, three
times each.  Then the OOM paths: a config the allocation guard refuses, and the same with the guard off
(PROFILING_CORE_SKIP_FIT_CHECK=1) so the CUDA allocator itself runs out.  Writes DIR/click.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profiling_core import ExperimentConfig, RunStore, WorkerError, open_trace, run_experiment  # noqa: E402
from profiling_core.run.worker import fork_server  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    store = RunStore(out / "store")
    pool = fork_server()
    pool.warm()
    from profiling_core.analyses import analyze
    from profiling_core.explain.questions import findings
    rows = []
    for label, cfg in [("warm eager 4096", ExperimentConfig(size=4096, warmup=10)),
                       ("warm compile 4096", ExperimentConfig(size=4096, warmup=10, compile="default"))]:
        for i in range(3):
            pool.wait_ready(120)
            t0 = time.perf_counter()
            run = run_experiment(cfg, store=store, prestart=1)
            t1 = time.perf_counter()
            with open_trace(run.trace_path, engine="sqlite") as tp:
                report = analyze(tp, config=run.config)
                fs = findings(report)
            t2 = time.perf_counter()
            row = {"label": label, "i": i, "click_to_artifacts_s": round(t1 - t0, 3),
                   "analysis_s": round(t2 - t1, 3), "click_to_analysis_s": round(t2 - t0, 3),
                   "timings": run.meta["timings"], "prestarted": run.meta["prestarted"], "findings": len(fs)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    pool.close()
    oom = {}
    big = ExperimentConfig(size=65536, batch=16, dtype="bf16", warmup=0, active=1, wait=0, warmup_steps=0)
    for label, env in [("guard", None), ("cuda_oom", "1")]:
        if env:
            os.environ["PROFILING_CORE_SKIP_FIT_CHECK"] = env
        try:
            run_experiment(big, store=store)
            oom[label] = "no error?!"
        except WorkerError as exc:
            oom[label] = {"kind": exc.kind, "message": exc.message[:300]}
        os.environ.pop("PROFILING_CORE_SKIP_FIT_CHECK", None)
        print(label, json.dumps(oom[label]), flush=True)
    ok_after = run_experiment(ExperimentConfig(size=64, warmup=5), store=store)
    oom["run_after_oom"] = ok_after.status
    oom["runs_in_store"] = [r.name for r in store.list()]
    (out / "click.json").write_text(json.dumps({"rows": rows, "oom": oom}, indent=1))
    print(json.dumps(oom), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
