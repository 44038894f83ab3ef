#!/usr/bin/env python3
"""Benchmark trace loading: open_trace load time, query time and peak RSS on ~35 MB and ~100 MB traces.

The ~100 MB trace is built from HTA's trace_diff_control_a100/control.json.gz by repeating its events
with shifted pids (each copy is another "rank" in the same file), so it stays a valid Kineto trace.
It is written under a temporary directory and deleted afterwards. Each measurement runs in a fresh
child process; wall = the child's whole life (interpreter start, imports, load, analyses); peak RSS = that
child's own ru_maxrss (os.wait4), so one run's peak never leaks into another's.

The mirror's load reads the JSON into in-memory columns and returns; its SQLite tables are then written by a
thread on the first query (``sql_tables="on_first_query"``, the default) or right after the load (``"background"``,
as the app opens traces); the analyses do not need them (they read the columns). The "load + SQL tables ready" row waits
for those tables (a ``select 1``); the analyses rows close the session when done, which stops a build still running
(in background mode it competes with them for the CPU until then).

Rows per trace: the mirror's load alone (open_trace), the mirror's load + every analysis
(profiling_core.analyses.analyze, pandas imported after the load), the same + profiling_core.findings, and
HTA 0.5.0 (TraceAnalysis load + get_gpu_kernel_breakdown + get_temporal_breakdown) when --hta-python is given.
A baseline child (python + sqlite3 + pandas imported, nothing else) gives the RSS that is not the trace's.

``--load-ab DIR`` times only the load (open_trace → columns) of the traces of ``--sizes``, with this tree and with the
profiling_core of the tree DIR, interleaved (old, new, new, old, ...) for ``--repeat`` rounds, and prints the medians
and the median of new / old per round.

``--pathological 25,50,100`` times instead the load of the shapes made against the streaming splitter
(tests/pathological_traces.py) at those sizes in MB, and of ~2 MB gzip bombs (2 GiB once inflated, refused at the
512 MiB cap); ``--old-root DIR`` runs each also with the profiling_core of another tree (e.g. a ``git archive`` of an
older commit) and prints old / new. Each run: a fresh process under an address-space limit (``--as-limit-gib``), its
wall time (killed past ``--timeout``) and its own peak RSS.

Usage:
    python scripts/bench_trace.py [--sizes 35,100] [--repeat 3] [--hta-python /tmp/hta-venv/bin/python]
    python scripts/bench_trace.py --sizes 35,100 --repeat 11 --load-ab DIR [--keep DIR]
    python scripts/bench_trace.py --pathological 25,50,100 [--shapes nested_args,...] [--old-root DIR]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.environ.get("BENCH_CONTROL_TRACE",  # another machine: a copy of it
                        "/work/shared/traces/third_party/hta/trace_diff_control_a100/control.json.gz")

QUERIES = {
    "count slices": "select count(*) from slice",
    "kernels by name": "select name, count(*) n, sum(dur) d from slice where category = 'kernel' "
                       "group by name order by d desc",
    "by category": "select category, count(*), sum(dur) from slice group by category",
    "launch->kernel flows": "select so.name, count(*) from flow f join slice so on so.id = f.slice_out "
                            "join slice si on si.id = f.slice_in group by 1",
    "threads": "select p.pid, t.tid, count(*) from slice s join thread_track tt on s.track_id = tt.id "
               "join thread t using(utid) left join process p using(upid) group by 1, 2",
    "extract_arg correlation (kernels)": "select count(extract_arg(arg_set_id, 'args.correlation')) "
                                         "from slice where category = 'kernel'",
    "args of one kernel": "select * from args where arg_set_id = "
                          "(select arg_set_id from slice where category = 'kernel' limit 1)",
}

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
from profiling_core.trace import open_trace
s = open_trace({path!r}, engine="sqlite", sql_tables={sql_tables!r})
t1 = time.perf_counter()
out = {{"load_s": t1 - t0, "slices": s.load_stats.slices, "flows": s.load_stats.flows,
        "rss_after_load_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}
if {analyses!r}:
    from profiling_core.analyses import analyze
    if {findings!r}:
        from profiling_core.explain import findings
    t2 = time.perf_counter()
    report = analyze(s)
    t3 = time.perf_counter()
    out.update(import_s=t2 - t1, analyze_s=t3 - t2)
    if {findings!r}:
        found = findings(report)
        out.update(findings_s=time.perf_counter() - t3, findings=len(found))
if {wait_sql!r}:
    q0 = time.perf_counter()
    s.query("select 1")  # the SQLite tables are written in the background after the load: wait until SQL can run
    out["sql_wait_s"] = time.perf_counter() - q0
    out["sql_ready_s"] = time.perf_counter() - t0
if {queries!r}:
    out["queries"] = {{}}
    for name, sql in {queries!r}.items():
        q0 = time.perf_counter()
        s.query(sql)
        out["queries"][name] = time.perf_counter() - q0
s.close()
out["total_s"] = time.perf_counter() - t0
print(json.dumps(out))
"""

BASELINE = r"""
import json, sqlite3, time
t0 = time.perf_counter()
import pandas
print(json.dumps({"total_s": time.perf_counter() - t0}))
"""

HTA_CHILD = r"""
import json, os, sys, time, shutil, tempfile, logging
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
d = tempfile.mkdtemp()
os.symlink({path!r}, os.path.join(d, "rank-0.json"))
ta = TraceAnalysis(trace_dir=d)
t2 = time.perf_counter()
kb = ta.get_gpu_kernel_breakdown(visualize=False)
t3 = time.perf_counter()
tb = ta.get_temporal_breakdown(visualize=False)
t4 = time.perf_counter()
shutil.rmtree(d)
print(json.dumps({{"import_s": t1 - t0, "load_s": t2 - t1, "kernel_breakdown_s": t3 - t2,
                  "temporal_breakdown_s": t4 - t3, "total_s": t4 - t0}}))
"""


def pathological(args) -> int:
    """The --pathological table (see the module docstring)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import pathological_traces as pt  # (only its names: the inputs are made in child processes)

    sizes = [int(x) for x in args.pathological.split(",")]
    shapes = sorted(pt.SHAPES) if args.shapes == "all" else args.shapes.split(",")
    roots = [("new", ROOT)] + ([("old", os.path.abspath(args.old_root))] if args.old_root else [])
    limit = int(args.as_limit_gib * (1 << 30))
    tmp = tempfile.mkdtemp(prefix="bench-patho-")
    rows = []
    try:
        cases = [(shape, mb) for shape in shapes for mb in sizes]
        cases += [(f"gzip bomb: {kind}", None) for kind in sorted(pt.BOMBS)]
        for shape, mb in cases:
            # Made in a child process: a child's peak RSS (ru_maxrss) starts at its parent's RSS when it is forked,
            # so this process must stay small (see make_trace).
            path = os.path.join(tmp, "bomb.json.gz" if mb is None else "shape.json")
            what = ["--make-bomb", shape.split(": ")[1]] if mb is None else ["--make-shape", shape, str(mb)]
            made = subprocess.run([sys.executable, os.path.abspath(__file__), *what, path], check=True,
                                  capture_output=True, text=True).stdout.split()
            size = os.path.getsize(path)
            label = f"{size / 1e6:.1f} MB gzip (2 GiB inflated)" if mb is None else f"{size / 1e6:.0f} MB ({made[0]} events)"
            got = {}
            for name, root in roots:
                r = pt.load_in_child(path, root, limit=limit, timeout=args.timeout)
                got[name] = {"result": r.get("error") or f"{r['events']} events", "load_s": r["wall_s"],
                             "peak_rss_mib": r["rss_mib"]}
                print(f"  {shape} {label} {name}: {got[name]}", flush=True)
            rows.append((shape, label, got))
            os.unlink(path)
    finally:
        for n in os.listdir(tmp):
            os.unlink(os.path.join(tmp, n))
        os.rmdir(tmp)
    print(f"\nmachine: {os.cpu_count()} cores ({_cpu_model()}), python {sys.version.split()[0]}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; one fresh process per cell, address space limited to "
          f"{args.as_limit_gib:g} GiB, killed after {args.timeout:.0f} s\n")
    head = "| input | size | new: load s | new: peak RSS MiB | result |"
    if args.old_root:
        head += " old: load s | old: peak RSS MiB | old result | old / new |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for shape, label, got in rows:
        new = got["new"]
        line = f"| {shape} | {label} | {_s(new)} | {new['peak_rss_mib']:.0f} | {new['result']} |"
        if args.old_root:
            old = got["old"]
            if old.get("load_s") and new.get("load_s") and old["result"] == new["result"]:
                ratio = f"{old['load_s'] / new['load_s']:.1f}×"
            elif old["result"].startswith("killed") and new.get("load_s"):
                ratio = f"> {args.timeout / new['load_s']:.0f}×"
            else:
                ratio = "–"
            line += f" {_s(old)} | {old['peak_rss_mib']:.0f} | {old['result']} | {ratio} |"
        print(line)
    return 0


def _s(r: dict) -> str:
    return "–" if r.get("load_s") is None else f"{r['load_s']:.2f}"


def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        return ""


def load_ab(args, paths: list) -> int:
    """The --load-ab table (see the module docstring)."""
    import statistics

    roots = {"old": os.path.abspath(args.load_ab), "new": ROOT}
    runs = {(p, k): [] for p in paths for k in roots}
    for r in range(args.repeat):
        for p in paths:
            for k in (("old", "new") if r % 2 == 0 else ("new", "old")):
                runs[(p, k)].append(run_child(CHILD.format(root=roots[k], path=p, queries=None, analyses=False,
                                                           findings=False, wait_sql=False, sql_tables="on_first_query")))
    print(f"\nmachine: {os.cpu_count()} cores ({_cpu_model()}), python {sys.version.split()[0]}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; {args.repeat} rounds of fresh processes, old and new interleaved\n")
    print("| JSON | old load s (median) | new load s (median) | new / old (median of rounds) | old peak RSS MiB | "
          "new peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for p in paths:
        old, new = runs[(p, "old")], runs[(p, "new")]
        ratio = statistics.median(b["load_s"] / a["load_s"] for a, b in zip(old, new))
        print(f"| {os.path.getsize(p) / 1e6:.1f} MB | {statistics.median(x['load_s'] for x in old):.3f} | "
              f"{statistics.median(x['load_s'] for x in new):.3f} | ×{ratio:.3f} | "
              f"{max(x['peak_rss_mib'] for x in old):.0f} | {max(x['peak_rss_mib'] for x in new):.0f} |")
    return 0


def make_trace(target_mb: float, out_path: str) -> float:
    """Write a valid Kineto trace of about ``target_mb`` MB built from control.json.gz; return its MB."""
    with gzip.open(SOURCE, "rb") as f:
        raw = f.read()
    copies = max(1, round(target_mb * 1e6 / len(raw)))
    if copies == 1:  # control.json exactly as HTA ships it
        with open(out_path, "wb") as f:
            f.write(raw)
        return len(raw) / 1e6
    doc = json.loads(raw)
    del raw
    events = doc["traceEvents"]
    out = []
    for k in range(copies):
        for e in events:
            if k:
                e = dict(e)
                pid = e.get("pid")
                if isinstance(pid, int):
                    e["pid"] = pid + 1000000 * k  # another rank, same timeline
                if "id" in e and isinstance(e["id"], int):
                    e["id"] = e["id"] + 10000000 * k
            out.append(e)
    doc = dict(doc)
    doc["traceEvents"] = out
    with open(out_path, "w") as f:
        json.dump(doc, f)
    return os.path.getsize(out_path) / 1e6


def _bench_trace(tmp: str, mb: float) -> str:
    """The bench trace of about ``mb`` MB in ``tmp`` (made if missing)."""
    path = os.path.join(tmp, f"bench_{int(mb)}mb.json")
    if not os.path.exists(path):
        # In a child process: a child's peak RSS (ru_maxrss) starts at its parent's RSS when it is forked, so
        # this process must stay small (building the trace here made every load row report ~191 MiB).
        subprocess.run([sys.executable, os.path.abspath(__file__), "--make-trace", str(mb), path], check=True)
    return path


def run_child(code: str, python: str = sys.executable) -> dict:
    """Run ``code`` in a fresh ``python``; its JSON result plus wall_s and its own peak RSS (os.wait4)."""
    t0 = time.perf_counter()
    p = subprocess.Popen([python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"child failed ({p.returncode}): {err.decode(errors='replace')[-2000:]}")
    res = json.loads(out.decode().strip().splitlines()[-1])
    res["peak_rss_mib"] = usage.ru_maxrss / 1024
    res["wall_s"] = wall
    return res


def best(runs: list[dict]) -> dict:
    """The run with the median wall time (its own peak RSS; the peak is the largest of the runs)."""
    runs = sorted(runs, key=lambda r: r["wall_s"])
    r = dict(runs[len(runs) // 2])
    r["peak_rss_mib"] = max(x["peak_rss_mib"] for x in runs)
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="35,100", help="trace sizes in MB, comma-separated (35 = control.json as is)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement (the median wall is shown)")
    ap.add_argument("--queries", action="store_true", help="also time a few single queries after the load")
    ap.add_argument("--hta-python", help="a python with holistictraceanalysis installed, to time HTA the same way")
    ap.add_argument("--keep", help="directory to keep the generated traces in (default: a temp dir, deleted)")
    ap.add_argument("--make-trace", nargs=2, metavar=("MB", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--load-ab", metavar="DIR", help="time only the load, this tree against the tree DIR")
    ap.add_argument("--pathological", help="time the pathological shapes at these sizes in MB instead (e.g. 25,50,100)")
    ap.add_argument("--shapes", default="all", help="with --pathological: shapes, comma-separated (default all)")
    ap.add_argument("--old-root", help="with --pathological: also run the profiling_core of this tree")
    ap.add_argument("--timeout", type=float, default=300, help="with --pathological: seconds before a run is killed")
    ap.add_argument("--as-limit-gib", type=float, default=8, help="with --pathological: address-space limit per run")
    ap.add_argument("--make-shape", nargs=3, metavar=("SHAPE", "MB", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--make-bomb", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.make_shape or args.make_bomb:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import pathological_traces as pt
        if args.make_bomb:
            pt.write_bomb(args.make_bomb[1], args.make_bomb[0], 2 << 30)
            return 0
        data, n = pt.SHAPES[args.make_shape[0]](int(args.make_shape[1]) * 1000 * 1000)
        with open(args.make_shape[2], "wb") as f:
            f.write(data)
        print(n)
        return 0
    if args.pathological:
        return pathological(args)
    if args.make_trace:
        make_trace(float(args.make_trace[0]), args.make_trace[1])
        return 0
    sizes = sorted(float(s) for s in args.sizes.split(","))
    tmp = args.keep or tempfile.mkdtemp(prefix="bench-trace-")
    os.makedirs(tmp, exist_ok=True)
    rows = []
    if args.load_ab:
        try:
            return load_ab(args, [_bench_trace(tmp, mb) for mb in sizes])
        finally:
            if not args.keep:
                for n in os.listdir(tmp):
                    os.unlink(os.path.join(tmp, n))
                os.rmdir(tmp)
    base = best([run_child(BASELINE) for _ in range(args.repeat)])
    try:
        for mb in sizes:
            path = _bench_trace(tmp, mb)
            real = os.path.getsize(path) / 1e6
            def child(analyses, findings=False, wait_sql=False, queries=None, sql_tables="on_first_query"):
                return best([run_child(CHILD.format(root=ROOT, path=path, queries=queries, analyses=analyses,
                                                    findings=findings, wait_sql=wait_sql, sql_tables=sql_tables))
                             for _ in range(args.repeat)])
            load = child(False)
            sql = child(False, wait_sql=True)
            ana = child(True)
            ana_bg = child(True, sql_tables="background")
            full = child(True, findings=True, wait_sql=bool(args.queries), queries=QUERIES if args.queries else None)
            hta = None
            if args.hta_python:
                hta = best([run_child(HTA_CHILD.format(path=path), python=args.hta_python)
                            for _ in range(max(1, args.repeat - 1))])
            rows.append((real, load, sql, ana, ana_bg, full, hta))
    finally:
        if not args.keep:
            for n in os.listdir(tmp):
                os.unlink(os.path.join(tmp, n))
            os.rmdir(tmp)
    model = _cpu_model()
    print(f"\nmachine: {os.cpu_count()} cores ({model}), python {sys.version.split()[0]}, "
          f"{time.strftime('%Y-%m-%d')}; each row: median wall of {args.repeat} fresh processes, largest peak RSS")
    print(f"baseline (python + sqlite3 + pandas imported): {base['peak_rss_mib']:.0f} MiB, {base['wall_s']:.2f} s\n")
    print("| JSON | engine | wall s | peak RSS MiB | above baseline MiB | RSS / JSON | speed-up vs HTA |")
    print("|---|---|---|---|---|---|---|")
    for mb, load, sql, ana, ana_bg, full, hta in rows:
        mib = mb * 1e6 / 2**20
        for name, r in (("mirror: load (open_trace → columns)", load), ("mirror: load + SQL tables ready", sql),
                        ("mirror: load + all analyses", ana),
                        ("mirror: load + all analyses (sql_tables=background: SQL tables written meanwhile)", ana_bg),
                        ("mirror: load + all analyses + findings", full),
                        ("HTA 0.5.0: load + kernel + temporal breakdown", hta)):
            if r is None:
                continue
            speed = f"{hta['wall_s'] / r['wall_s']:.1f}×" if hta else "–"
            print(f"| {mb:.1f} MB | {name} | {r['wall_s']:.2f} | {r['peak_rss_mib']:.0f} | "
                  f"{r['peak_rss_mib'] - base['peak_rss_mib']:.0f} | {r['peak_rss_mib'] / mib:.2f}× | {speed} |")
    for mb, load, sql, ana, ana_bg, full, hta in rows:
        print(f"\n{mb:.1f} MB ({full['slices']:,} slices, {full['flows']:,} flows): load {full['load_s']:.2f} s, "
              f"pandas+analyses import {full['import_s']:.2f} s, analyze {full['analyze_s']:.2f} s "
              f"(without findings: {ana['analyze_s']:.2f} s), "
              f"findings {full['findings_s']:.2f} s ({full['findings']} findings), "
              f"RSS after load {load['rss_after_load_mib']:.0f} MiB; SQL tables ready {sql['sql_ready_s']:.2f} s after "
              f"start (load {sql['load_s']:.2f} s + {sql['sql_wait_s']:.2f} s)")
        for q, t in (full.get("queries") or {}).items():
            print(f"  {q:40} {t * 1000:8.1f} ms")
        if hta:
            print(f"  HTA: import {hta['import_s']:.2f} s, load {hta['load_s']:.2f} s, kernel breakdown "
                  f"{hta['kernel_breakdown_s']:.2f} s, temporal breakdown {hta['temporal_breakdown_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
