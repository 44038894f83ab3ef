#!/usr/bin/env python3
"""On a GPU machine: one sweep on the GPU and on the CPU of the same host (two machines, by the store's rule), then
the comparison of machines, and the import of one store into another, checked against plain scans of the traces.

The sweep: matmul_add 256 and 1024, bf16, warm (3 calls), eager, schedule 0/0/5, each config ``REPEATS`` times,
once with ``device="cuda"`` into store A and once with ``device="cpu"`` into store B. Store B is then packed as a
.tar.gz and imported into A (``RunStore.import_store``), so the CPU runs take part as another machine's would. For each
config matched across the two machines, over every run of it: the comparison's rows (each machine's run count, the
median over its runs of their median CPU and GPU busy time per step with min and max, the GEMM's TFLOP/s, its roof and
fraction, the peak's source) beside the median of plain JSON scans of its traces' ProfilerStep durations, the gaps
between the machines and their verdicts, and the findings and rules that differ. Writes DIR/compare_machines.json and
prints a line per check; exits 1 when one fails.

Usage (repo root, on the device machine): python3 scripts/gpu_compare_machines.py --out DIR
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiling_core import ExperimentConfig, RunStore, analyze, diagnose, findings, open_trace  # noqa: E402
from profiling_core.present import machine_comparison  # noqa: E402
from profiling_core.run import run_sweep  # noqa: E402
from profiling_core.store import PeakBook, match_configs  # noqa: E402


REPEATS = 2  # runs of each config on each device: each machine's row is their median, with its spread


def plain_cpu_step_median(path: Path) -> float:
    evs = json.loads(path.read_text())["traceEvents"]
    return statistics.median(e["dur"] for e in evs if e.get("ph") == "X"
                             and str(e.get("name", "")).startswith("ProfilerStep#"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    checks, result = [], {"configs": []}
    with tempfile.TemporaryDirectory() as tmp:
        gpu_store, cpu_store = RunStore(Path(tmp) / "gpu"), RunStore(Path(tmp) / "cpu")
        common = dict(dtype="bf16", warmup=3, compile="off", wait=0, warmup_steps=0, active=5)
        for store, device in ((gpu_store, "cuda"), (cpu_store, "cpu")):
            configs = [ExperimentConfig(size=n, device=device, **common) for n in (256, 1024) for _ in range(REPEATS)]
            res = run_sweep(configs, store=store)
            checks.append((f"{device} sweep: {len(configs)} runs, no errors",
                           len(res.runs) == len(configs) and not res.errors, [str(e) for _c, e in res.errors]))
        archive = Path(tmp) / "cpu.tgz"
        with tarfile.open(archive, "w:gz") as tf:
            tf.add(cpu_store.root, arcname="runs")
        imp = gpu_store.import_store(archive)
        checks.append((f"import of the CPU store's tarball: {2 * REPEATS} runs, none skipped",
                       len(imp.runs) == 2 * REPEATS and not imp.skipped, imp.to_dict()["skipped"]))
        matches = match_configs(gpu_store.list())
        checks.append(("2 configs matched across 2 machines", len(matches) == 2 and
                       all(len(m.machines) == 2 for m in matches), [m.name for m in matches]))
        for m in matches:
            items = []
            for _machine, runs in m.machines:
                for run in runs:
                    with open_trace(run.trace_path) as tp:
                        rep = analyze(tp, config=run.config)
                        items.append((run, rep, diagnose(tp, rep, run.config, PeakBook(gpu_store.root).for_run(run)),
                                      findings(rep, config=run.config)))
            cmp = machine_comparison(items)
            rows = cmp.table.astype(object).where(cmp.table.notna(), None).to_dict(orient="records")
            for row, (_machine, runs) in zip(rows, m.machines):
                plain = [plain_cpu_step_median(r.trace_path) for r in runs]
                row["plain_cpu_us_per_step"] = statistics.median(plain)
                checks.append((f"{m.name} on {row['machine']}: {len(runs)} runs, CPU per step equals the median "
                               "of the plain scans, min and max theirs",
                               row["n"] == len(runs) == REPEATS
                               and abs(row["cpu_us_per_step"] - row["plain_cpu_us_per_step"]) < 0.05
                               and abs(row["cpu_us_per_step_min"] - min(plain)) < 0.05
                               and abs(row["cpu_us_per_step_max"] - max(plain)) < 0.05,
                               [row["n"], row["cpu_us_per_step"], plain]))
            gpu = [r for r in rows if (r["gpu_busy_us_per_step"] or 0) > 0]
            cpu = [r for r in rows if not (r["gpu_busy_us_per_step"] or 0) > 0]
            checks.append((f"{m.name}: one machine has GPU time, judged against its own peak",
                           len(gpu) == 1 and gpu[0]["peak_source"] in ("measured", "datasheet"),
                           [(r["machine"], r["peak_source"], r["compute_peak"]) for r in rows]))
            # the CPU's trace names the host's GPU too: its GEMM must not be judged by the GPU's peak
            checks.append((f"{m.name}: the CPU machine is not judged by the GPU's peak",
                           len(cpu) == 1 and cpu[0]["compute_peak"] != gpu[0]["compute_peak"] if gpu else False,
                           [(r["machine"], r["peak_source"], r["compute_peak"]) for r in cpu]))
            gaps = cmp.gaps.to_dict(orient="records")
            checks.append((f"{m.name}: a gap is called a difference only beyond both machines' spreads",
                           all((g["verdict"] == "differs") == (g["gap"] > g["spread_a"] and g["gap"] > g["spread_b"])
                               for g in gaps), gaps))
            result["configs"].append({"config": m.name, "rows": rows, "gaps": gaps,
                                      "differences": cmp.differences.to_dict(orient="records")})
    result["checks"] = [{"check": c, "ok": bool(ok), "detail": d} for c, ok, d in checks]
    (out / "compare_machines.json").write_text(json.dumps(result, indent=1, default=str))
    for c, ok, d in checks:
        print(("ok    " if ok else "FAIL  ") + c + ("" if ok else f": {d}"))
    return 0 if all(ok for _c, ok, _d in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
