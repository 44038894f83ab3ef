"""Which threads' Python frames a ``with_stack`` run records, on the app's own code path (``run_experiment``): a
warm eager run in each kind of process (a fresh interpreter, a fork of the fork server, the persistent worker), a
cold eager run and a warm ``torch.compile`` run.  torch's Python tracer records the frames every thread of the
process holds when the profile starts, so a thread of the runner's own (its watch on the caller) would show in
every such run of a user's workload; the workload's thread is the one that ran the ``ProfilerStep#`` slices.

    python scripts/gpu_stack_threads.py --out DIR [--device auto] [--size 4096]

Needs only torch and this repository.  Prints, per run, the Python frames on the workload's thread and on any
other, the other threads' outermost frames, and the rows of torch's own table (``table.txt``) that name a thread's
bootstrap or the runner's watch; writes DIR/stack_threads.json.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profiling_core import ExperimentConfig, RunStore, run_experiment  # noqa: E402
from profiling_core.run import stop_persistent_workers  # noqa: E402

CASES = [  # label, config overrides, run_experiment's process arguments
    ("warm eager, fresh interpreter", {"warmup": 10}, {"prestart": 0, "process": "fresh"}),
    ("warm eager, fork of the fork server", {"warmup": 10}, {"prestart": 1, "process": "fresh"}),
    ("warm eager, persistent worker (1st run)", {"warmup": 10}, {"prestart": 1, "process": "persistent"}),
    ("warm eager, persistent worker (2nd run)", {"warmup": 10}, {"prestart": 1, "process": "persistent"}),
    ("cold eager, fork of the fork server", {"warmup": 0}, {"prestart": 1, "process": "fresh"}),
    ("warm compile default, fork of the fork server", {"warmup": 10, "compile": "default"},
     {"prestart": 1, "process": "fresh"}),
]


def frames_by_thread(trace: Path) -> dict:
    with (gzip.open(trace, "rt") if trace.suffix == ".gz" else open(trace)) as f:
        events = json.load(f)["traceEvents"]
    loop = {(e.get("pid"), e.get("tid")) for e in events
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")}
    frames = [e for e in events if e.get("cat") == "python_function"]
    per = Counter((e.get("pid"), e.get("tid")) for e in frames)
    others = {}
    for key in per:
        if key in loop:
            continue
        mine = sorted((e for e in frames if (e.get("pid"), e.get("tid")) == key), key=lambda e: (e["ts"], -e["dur"]))
        others[f"{key[0]}/{key[1]}"] = {"frames": per[key], "outermost": [e["name"] for e in mine[:4]],
                                        "longest_us": max(e["dur"] for e in mine)}
    return {"loop_threads": [f"{p}/{t}" for p, t in sorted(loop, key=str)],
            "frames_on_loop": sum(n for k, n in per.items() if k in loop), "other_threads": others}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--size", type=int, default=4096)
    args = ap.parse_args()
    out = Path(args.out)
    store = RunStore(out / "runs")
    results = []
    try:
        for label, over, how in CASES:
            cfg = ExperimentConfig(size=args.size, dtype="bf16", device=args.device, with_stack=True, **over)
            run = run_experiment(cfg, store=store, **how)
            meta = json.loads(run.meta_path.read_text())
            table = run.table_path.read_text().splitlines()
            row = {"label": label, "run_id": run.run_id, "process": meta.get("process"),
                   **frames_by_thread(run.trace_path),
                   "table_rows": [r.strip()[:100] for r in table if "threading.py" in r or "watch" in r]}
            results.append(row)
            print(f"{label}: {row['frames_on_loop']} frames on the steps' thread {row['loop_threads']}; "
                  f"other threads: {json.dumps(row['other_threads'])}; table rows: {row['table_rows']}", flush=True)
    finally:
        stop_persistent_workers()
    (out / "stack_threads.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
