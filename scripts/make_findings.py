"""Regenerate the figures and tables of docs/FINDINGS.md from a folder of runs, through the library only.

    python scripts/make_findings.py RUNS_ROOT [--fidelity DIR] [--out docs/figures]

RUNS_ROOT is searched for run folders (``trace.json`` + ``meta.json``). A run's *set* is read from the folder
names above it (``sweep_runs.tar.gz`` -> ``sweep``, ``gpu3_cli_runs`` -> ``cli``) and its *machine* from a
``gpuN`` component; for each set the machine with the latest runs is used. ``--fidelity`` is a folder with
``fidelity.json`` and ``fidelity_<n>/{trace,events_trace}.json`` (scripts/gpu_fidelity.py).

Every number comes from ``profiling_core`` (``open_trace(engine="sqlite")``, ``analyses``, ``findings``); every
chart from ``profiling_core.present.charts`` rendered by ``profiling_core.present.export.chart_png``. Writes
``<out>/*.png``, ``<out>/tables.md`` (the tables the doc quotes) and ``<out>/findings.json`` (the findings text of each
run used).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402

from profiling_core import open_trace
from profiling_core.present import charts  # noqa: E402
from profiling_core.analyses import analyze, dispatch_chain, gpu_ops, kernel_stats  # noqa: E402
from profiling_core.present.export import chart_png  # noqa: E402
from profiling_core.explain.questions import findings  # noqa: E402

MODES = {"off": "eager", "default": "compile default", "reduce-overhead": "reduce-overhead"}
GEMM = re.compile(r"nvjet|gemm|cutlass|sm90_xmma|ampere_", re.I)


# --- discovery -----------------------------------------------------------------------------------------------------

def discover(root: Path) -> pd.DataFrame:
    rows = []
    for meta in sorted(root.rglob("meta.json")):
        d = meta.parent
        if not (d / "trace.json").exists():
            continue
        m = json.loads(meta.read_text())
        c = m["config"]
        parts = d.relative_to(root).parts[:-1]
        machine = next((p for p in parts if re.fullmatch(r"gpu\d+", p)), "")
        set_ = ""
        for p in parts:
            if "cli" in p:
                set_ = "cli"
            elif p.endswith("_runs") or p.endswith("_runs.tar.gz"):
                set_ = p.split("_runs")[0]
        rows.append({"run_id": m.get("run_id", d.name), "dir": str(d), "set": set_, "machine": machine,
                     "started_at": m.get("started_at", ""), "size": c["size"], "batch": c.get("batch"),
                     "warm": bool(c.get("warmup")), "mode": MODES.get(c.get("compile", "off"), c.get("compile")),
                     "schedule": f"{c['wait']}/{c['warmup_steps']}/{c['active']}", "dtype": c["dtype"],
                     "device": m.get("device", {}).get("name", ""), "torch": m.get("device", {}).get("torch", ""),
                     "trace_kb": round((d / "trace.json").stat().st_size / 1024)})
    df = pd.DataFrame(rows)
    # Per set, keep the machine whose runs are newest.
    latest = df.groupby(["set", "machine"])["started_at"].max().reset_index()
    keep = latest.sort_values("started_at").groupby("set").tail(1)
    return df.merge(keep[["set", "machine"]], on=["set", "machine"])


_REPORTS: dict[str, object] = {}


def report(run_dir: str):
    if run_dir not in _REPORTS:
        with open_trace(str(Path(run_dir) / "trace.json"), engine="sqlite") as tp:
            _REPORTS[run_dir] = analyze(tp)
    return _REPORTS[run_dir]


def pick(runs: pd.DataFrame, set_: str, size: int, mode: str = "eager", warm: bool = True, batch=None) -> pd.Series:
    r = runs[(runs["set"] == set_) & (runs["size"] == size) & (runs["mode"] == mode) & (runs["warm"] == warm)]
    r = r[r["batch"].isna()] if batch is None else r[r["batch"] == batch]
    if r.empty:
        raise SystemExit(f"no run in set {set_} for size {size} {mode} warm={warm} batch={batch}")
    return r.sort_values("started_at").iloc[-1]


def gemm_row(ks: pd.DataFrame) -> pd.Series:
    g = ks[ks["name"].astype(str).str.contains(GEMM)]
    return (g if len(g) else ks).sort_values("total_us", ascending=False).iloc[0]


def md_table(df: pd.DataFrame, floatfmt: str = "{:,.1f}") -> str:
    cols = list(df.columns)
    out = ["| " + " | ".join(map(str, cols)) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for vals in df.itertuples(index=False):
        cells = []
        for v in vals:
            cells.append(floatfmt.format(v) if isinstance(v, float) and not pd.isna(v) else ("" if v is None or (
                isinstance(v, float) and pd.isna(v)) else str(v)))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def save(chart, out: Path, name: str, scale: float = 1.0) -> None:
    png = chart_png(chart, scale=scale)
    (out / f"{name}.png").write_bytes(png)
    print(f"  {name}.png {len(png) // 1024} KB")


# --- per question --------------------------------------------------------------------------------------------------

def sweep_table(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, run in runs[runs["set"] == "sweep"].iterrows():
        r = report(run["dir"])
        s = r.steps
        k = gemm_row(r.kernel_stats)
        rows.append({"mode": run["mode"], "size": int(run["size"]),
                     "cpu_us_per_step": r.summary["cpu_step_median_us"],
                     "gpu_busy_us_per_step": r.summary["gpu_step_median_us"],
                     "gpu_busy_fraction": float(s["gpu_busy_fraction"].median()),
                     "launches_per_step": float(s["launches"].median()),
                     "kernels_per_step": float(s["kernels"].median()),
                     "gemm_median_us": float(k["median_us"]), "gemm_kernel": str(k["name"]),
                     "run_id": run["run_id"]})
    order = {"eager": 0, "compile default": 1, "reduce-overhead": 2}
    return pd.DataFrame(rows).sort_values(["mode", "size"], key=lambda c: c.map(order) if c.name == "mode" else c)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--fidelity", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs/figures"))
    ap.add_argument("--scale", type=float, default=1.0, help="PNG scale (1 keeps each figure small)")
    a = ap.parse_args()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    runs = discover(a.root)
    print(f"{len(runs)} runs used:", runs.groupby(["set", "machine"]).size().to_dict())
    tables: list[str] = ["# Tables for docs/FINDINGS.md", "",
                         f"Generated by `scripts/make_findings.py` from {len(runs)} runs "
                         f"({', '.join(f'{s}: {m}' for s, m in runs.groupby('set')['machine'].first().items())}).", ""]
    used: dict[str, dict] = {}

    def note(label: str, run: pd.Series) -> None:
        r = report(run["dir"])
        used[label] = {"run_id": run["run_id"], "set": run["set"], "machine": run["machine"],
                       "schedule": run["schedule"], "findings": [f.to_dict() for f in findings(r)],
                       "summary": {k: v for k, v in r.summary.items()}}

    # Q1: the table's double count (spine, 4096 warm eager).
    q1 = pick(runs, "spine", 4096)
    note("q1_4096_warm_eager", q1)
    r = report(q1["dir"])
    t = r.profiler_table
    dev = t[t["self_device_us"] > 0][["name", "lane", "self_device_us"]].copy()
    dev["row"] = dev["name"].astype(str).str.slice(0, 50) + " (" + dev["lane"] + ")"
    busy = pd.DataFrame({"row": ["GPU busy (union of GPU ops)", "sum of Self CUDA over rows"],
                         "self_device_us": [r.summary["gpu_busy_us"] if r.summary["gpu_busy_scope"] == "trace" else
                                            float(r.gpu_busy.set_index("scope").loc["trace", "busy_us"]),
                                            float(t["self_device_us"].sum())]})
    save(charts.grouped_bars(pd.concat([dev[["row", "self_device_us"]], busy]), category="row",
                             value="self_device_us", value_title="device time (µs)",
                             title="Q1: Self CUDA per table row vs GPU busy (4096², warm eager, 3 steps)"),
         out, "q1_self_cuda_double_count")
    tables += ["## Q1 profiler table (device rows), " + q1["run_id"], "",
               md_table(t[["name", "lane", "calls", "self_cpu_us", "cpu_total_us", "self_device_us",
                           "device_total_us"]].assign(name=lambda d: d["name"].astype(str).str.slice(0, 60))), ""]

    # Q2 (+ Q9/Q10): the sweep.
    sw = sweep_table(runs)
    save(charts.overhead_vs_compute(sw, title="Q2: CPU per step vs GPU busy per step, bf16 warm, H200"), out,
         "q2_sweep_cpu_vs_gpu")
    save(charts.gpu_busy_fraction(sw, title="Q2: GPU busy share of the step (median over 10 steps)"), out,
         "q2_busy_fraction")
    cross = charts.crossover_points(sw)
    tables += ["## Q2 sweep (median per step over 10 active steps; set sweep)", "",
               md_table(sw.drop(columns=["gemm_kernel"])), "", "Crossovers (log-log interpolation):", "",
               md_table(cross) if len(cross) else "none", "",
               "GEMM kernels by size: " + "; ".join(f"{s}: `{k}`" for s, k in
                                                    sw[sw["mode"] == "eager"][["size", "gemm_kernel"]].values), ""]
    for n in (64, 2048, 4096, 8192):
        note(f"q2_sweep_{n}_eager", pick(runs, "sweep", n))
    for n in (64, 4096):
        note(f"q9_sweep_{n}_default", pick(runs, "sweep", n, "compile default"))
        note(f"q10_sweep_{n}_reduce_overhead", pick(runs, "sweep", n, "reduce-overhead"))
    save(charts.grouped_bars(sw.assign(size=sw["size"].astype(str)), category="size", value="cpu_us_per_step",
                             group="mode", value_title="CPU µs per step (median)",
                             title="Q10: CPU time per step, eager vs compile vs reduce-overhead"), out,
         "q10_cpu_per_step")

    # Q3: cold vs warm (set coldwarm, schedule 0/0/3).
    cw = []
    for n in (64, 4096):
        for warm in (False, True):
            run = pick(runs, "coldwarm", n, warm=warm)
            note(f"q3_{n}_{'warm' if warm else 'cold'}", run)
            rr = report(run["dir"])
            for _, s in rr.steps.iterrows():
                cw.append({"label": f"{n}² {'warm' if warm else 'cold'}", "step": int(s["step"]),
                           "dur_us": float(s["cpu_dur_us"]), "run_id": run["run_id"]})
            g = rr.cold_start_gap
            if len(g):
                cw[-1]["first_gap_us"] = float(g["gap_us"].iloc[0])
    cwd = pd.DataFrame(cw)
    cwd["run_step"] = cwd["label"] + " #" + cwd["step"].astype(str)
    save(charts.grouped_bars(cwd, category="run_step", value="dur_us", value_title="CPU µs (symlog)", log=True,
                             title="Q3: each profiled step's CPU time, cold vs warm (schedule 0/0/3)"), out,
         "q3_cold_vs_warm")
    tables += ["## Q3 cold vs warm (CPU µs per profiled step)", "",
               md_table(cwd.pivot_table(index="label", columns="step", values="dur_us").reset_index()), ""]

    # Q4: launch latency over 20 steps (variance set, 4096).
    v4 = pick(runs, "variance", 4096)
    v8 = pick(runs, "variance", 8192)
    note("q8_4096_20steps", v4)
    note("q8_8192_20steps", v8)
    ll = report(v4["dir"]).launch_latency
    save(charts.launch_latency(ll.rename(columns={"gpu_name": "kernel", "launch_name": "launch"})
                               .assign(kernel=lambda d: d["kernel"].astype(str).str.slice(0, 48)),
                               title="Q4: GPU op start − launch call start, 4096² warm eager, 20 steps"), out,
         "q4_launch_latency")

    # Q5: the dispatch chain of batch 8 (spine).
    b8 = pick(runs, "spine", 64, batch=8)
    note("q5_64_b8", b8)
    b8_4096 = pick(runs, "spine", 4096, batch=8)
    note("q5_4096_b8", b8_4096)
    with open_trace(str(Path(b8["dir"]) / "trace.json"), engine="sqlite") as tp:
        ch = dispatch_chain(tp, step=int(report(b8["dir"]).steps["step"].iloc[-1]))
    save(charts.dispatch_flame(charts.flame_from_chain(ch), title="Q5: dispatch chain, batch 8 (aten::bmm), 64²"),
         out, "q5_dispatch_bmm")

    # Q6: timeline of one warm eager 4096 step, launch -> kernel links.
    q6 = pick(runs, "spine", 4096)
    with open_trace(str(Path(q6["dir"]) / "trace.json"), engine="sqlite") as tp:
        ch6 = dispatch_chain(tp, step=int(report(q6["dir"]).steps["step"].iloc[-1]))
    sl, links = charts.timeline_from_chain(ch6)
    sl["name"] = sl["name"].astype(str).str.slice(0, 40)
    save(charts.step_timeline(sl, links, title="Q6: one step, 4096² eager: cuLaunchKernelEx (GEMM), "
                                               "cudaLaunchKernel (add)"), out, "q6_step_timeline")
    lp = report(q6["dir"]).launch_paths
    tables += ["## Q6 launch paths, " + q6["run_id"], "",
               md_table(lp.assign(name=lp["name"].astype(str).str.slice(0, 60))), ""]
    ro = pick(runs, "spine", 4096, "reduce-overhead")
    lpro = report(ro["dir"]).launch_paths
    tables += ["## Q6/Q10 launch paths, reduce-overhead, " + ro["run_id"], "",
               md_table(lpro.assign(name=lpro["name"].astype(str).str.slice(0, 60))), ""]

    # Q7: what each profiler sync waited for.
    parts, srows = [], []
    for label, run in [("64² warm eager (spine)", pick(runs, "spine", 64)),
                       ("4096² warm eager (spine)", q6), ("8192² warm eager, 20 steps", v8)]:
        note(f"q7_{label.split()[0]}", run)
        sw_ = report(run["dir"]).sync_wait.sort_values("dur_us", ascending=False).iloc[0]
        parts += [{"label": label, "part": "GPU busy", "dur_us": float(sw_["gpu_busy_us"])},
                  {"label": label, "part": "GPU idle", "dur_us": float(sw_["dur_us"] - sw_["gpu_busy_us"])}]
        srows.append({"run": label, "call": sw_["name"], "dur_us": float(sw_["dur_us"]),
                      "gpu_busy_us": float(sw_["gpu_busy_us"]), "idle_pct": float(sw_["idle_pct"]),
                      "run_id": run["run_id"]})
    save(charts.sync_idle(pd.DataFrame(parts), title="Q7: the profiler's cudaDeviceSynchronize: GPU busy vs idle"),
         out, "q7_sync_idle")
    tables += ["## Q7 longest synchronize per run", "", md_table(pd.DataFrame(srows)), ""]

    # Q8: per-step GEMM duration over 20 steps, 4096 and 8192.
    d8, vrows = [], []
    for n, run in ((4096, v4), (8192, v8)):
        rr = report(run["dir"])
        k = gemm_row(rr.kernel_stats)
        kd = rr.kernel_durations_by_step
        kd = kd[kd["name"] == k["name"]]
        d8.append(pd.DataFrame({"step": kd["step"], "kernel": f"{n}²: " + str(k["name"]), "dur_us": kd["dur_us"]}))
        vrows.append({"size": n, "kernel": str(k["name"]), "count": int(k["count"]), "median_us": k["median_us"],
                      "mean_us": k["mean_us"], "min_us": k["min_us"], "max_us": k["max_us"],
                      "cv_pct": 100 * k["cv"], "run_id": run["run_id"]})
    save(charts.kernel_durations_by_step(pd.concat(d8), title="Q8: the GEMM's duration in each of 20 steps"), out,
         "q8_gemm_per_step")
    tables += ["## Q8 GEMM over 20 steps (set variance)", "", md_table(pd.DataFrame(vrows), "{:,.2f}"), ""]

    # Q9/Q10: eager vs compile default vs reduce-overhead on the spine (schedule 1/1/3).
    crow = []
    for n in (64, 4096):
        for mode in ("eager", "compile default", "reduce-overhead"):
            run = pick(runs, "spine", n, mode)
            note(f"q9_{n}_{mode.replace(' ', '_')}", run)
            rr = report(run["dir"])
            cb = rr.compile_breakdown
            crow.append({"size": n, "mode": mode, "cpu_us_per_step": float(cb["cpu_dur_us"].median()),
                         "launches_per_step": float(cb["launches"].median()),
                         "kernel_launches_per_step": float(cb["kernel_launches"].median()),
                         "kernels_per_step": float(cb["kernels"].median()),
                         "memcpy_dtod_per_step": float(cb["memcpy_dtod"].median()),
                         "memsets_per_step": float(cb["memsets"].median()),
                         "graph_launches_per_step": float(cb["graph_launches"].median()),
                         "compiled_region_us": float(cb["compiled_region_us"].median()),
                         "gpu_ops": ", ".join(sorted(set(rr.gpu_ops["name"].astype(str).str.slice(0, 50)))),
                         "launch_apis": ", ".join(rr.summary["launch_apis"]), "run_id": run["run_id"]})
    tables += ["## Q9/Q10 spine (schedule 1/1/3, warm), medians per step", "", md_table(pd.DataFrame(crow)), ""]

    # Fidelity.
    if a.fidelity:
        fj = json.loads((a.fidelity / "fidelity.json").read_text())
        frows, srows2, fchart = [], [], []
        for n, ref in fj["sizes"].items():
            with open_trace(str(a.fidelity / f"fidelity_{n}" / "trace.json"), engine="sqlite") as tp:
                k = gemm_row(kernel_stats(tp))
            with open_trace(str(a.fidelity / f"fidelity_{n}" / "events_trace.json"), engine="sqlite") as tp:
                ops = gpu_ops(tp)
                ke = gemm_row(kernel_stats(tp, ops=ops))
                g = ops[ops["name"] == ke["name"]].reset_index(drop=True)
                inst = g["dur_us"].astype(float).tolist()
                # The GPU span of what matmul put between the two events: cuBLAS's workspace memset (when there
                # is one, 1:1 with the GEMM) to the GEMM's end.
                ms = ops[ops["category"].astype(str).str.contains("memset")].reset_index(drop=True)
                first = ms["start_ns"] if len(ms) == len(g) else g["start_ns"]
                span = [((int(s) + d * 1000) - int(f)) / 1000 for s, d, f in zip(g["start_ns"], g["dur_us"], first)]
            ev = ref.get("in_loop_event_us", [])
            app = float(k["median_us"])

            def dev(x):
                return None if x is None else 100 * (app - x) / x
            frows.append({"size": int(n), "app_kernel_median_us": app,
                          "cuda_event_median_us": ref["cuda_event_median_us"],
                          "vs_event_pct": dev(ref["cuda_event_median_us"]),
                          "queued_us": ref.get("cuda_event_queued_median_us"),
                          "vs_queued_pct": dev(ref.get("cuda_event_queued_median_us")),
                          "cuda_graph_us": ref.get("cuda_graph_median_us"),
                          "vs_graph_pct": dev(ref.get("cuda_graph_median_us")),
                          "do_bench_us": ref.get("do_bench_us"), "vs_do_bench_pct": dev(ref.get("do_bench_us"))})
            srow = {"size": int(n)}
            if ev and len(inst) == len(ev):
                pairs = [(kk, ee) for kk, ee in zip(inst, ev)]
                diffs = [100 * (kk - ee) / ee for kk, ee in pairs]
                srow.update({"instances": len(pairs),
                               "kernel_median_us": statistics.median(inst),
                               "event_median_us": statistics.median(ev),
                               "median_diff_pct": statistics.median(diffs),
                               "within_3pct": sum(abs(x) <= 3 for x in diffs),
                               "gpu_span_median_us": statistics.median(span),
                               "span_median_diff_pct": statistics.median(
                                   [100 * (x - e) / e for x, e in zip(span, ev)]),
                               "span_within_3pct": sum(abs(100 * (x - e) / e) <= 3 for x, e in zip(span, ev)),
                             "first_kernel_us": inst[0], "first_event_us": ev[0]})
            srow.update(plain_step_us=ref.get("step_wall_plain_median_us"),
                        profiled_step_us=ref.get("step_wall_profiled_median_us"),
                        overhead_us=ref.get("profiler_overhead_us"))
            srows2.append(srow)
            for lab, val in (("app: kernel median (trace)", app),
                             ("CUDA events, one GEMM", ref["cuda_event_median_us"]),
                             ("CUDA events, 20 queued", ref.get("cuda_event_queued_median_us")),
                             ("CUDA graph replay", ref.get("cuda_graph_median_us")),
                             ("triton do_bench (L2 flushed)", ref.get("do_bench_us"))):
                if val is not None:
                    fchart.append({"size": f"{n}²", "source": lab, "dur_us": float(val)})
        tables += ["## Fidelity: app's GEMM kernel median (20 steps) vs references", "",
                   md_table(pd.DataFrame(frows)), "", "## Fidelity: same instances (events_trace.json vs "
                   "in_loop_event_us) and profiler overhead per step", "", md_table(pd.DataFrame(srows2)), ""]
        save(charts.grouped_bars(pd.DataFrame(fchart), category="size", value="dur_us", group="source", log=True,
                                 value_title="µs per GEMM (symlog)",
                                 title="Fidelity: the app's kernel duration vs CUDA-event references, bf16"), out,
             "fidelity_gemm")

    runs_tbl = runs[["set", "machine", "run_id", "size", "batch", "mode", "warm", "schedule", "trace_kb"]]
    tables += ["## Runs found", "", md_table(runs_tbl.sort_values(["set", "run_id"])), ""]
    (out / "tables.md").write_text("\n".join(tables))
    (out / "findings.json").write_text(json.dumps(used, indent=1, default=str))
    print(f"wrote {out}/tables.md and {out}/findings.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
