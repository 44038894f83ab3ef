#!/usr/bin/env python3
"""Benchmark trace loading: open_trace load time, query time and peak RSS on ~35 MB and ~100 MB traces.

The ~100 MB trace is built from HTA's trace_diff_control_a100/control.json.gz by repeating its events
with shifted pids (each copy is another "rank" in the same file), so it stays a valid Kineto trace.
It is written under a temporary directory and deleted afterwards. Each measurement runs in a fresh
child process; peak RSS is that child's ru_maxrss (resource.getrusage(RUSAGE_CHILDREN)).

Usage:
    python scripts/bench_trace.py [--sizes 35,100] [--analyses] [--hta-python /tmp/hta-venv/bin/python]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = "/work/shared/traces/third_party/hta/trace_diff_control_a100/control.json.gz"

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

CHILD = r'''
import json, resource, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
from profiling_core.trace import open_trace
s = open_trace({path!r}, engine="sqlite")
t1 = time.perf_counter()
out = {{"load_s": t1 - t0, "slices": s.load_stats.slices, "flows": s.load_stats.flows,
        "rss_after_load_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "queries": {{}}}}
for name, sql in {queries!r}.items():
    q0 = time.perf_counter()
    s.query(sql)
    out["queries"][name] = time.perf_counter() - q0
if {analyses!r}:
    try:
        import profiling_core.analyses as an
    except ImportError as e:
        out["analyses"] = "not available: %s" % e
    else:
        res = {{}}
        for fname in sorted(n for n in dir(an) if not n.startswith("_") and callable(getattr(an, n))):
            f = getattr(an, fname)
            a0 = time.perf_counter()
            try:
                f(s)
                res[fname] = time.perf_counter() - a0
            except TypeError:
                continue
            except Exception as e:  # report, do not stop the benchmark
                res[fname] = "error: %s" % (str(e)[:80],)
        out["analyses"] = res
s.close()
out["total_s"] = time.perf_counter() - t0
print(json.dumps(out))
'''

HTA_CHILD = r'''
import json, os, sys, time, shutil, tempfile
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
d = tempfile.mkdtemp()
shutil.copy({path!r}, os.path.join(d, "rank-0.json"))
ta = TraceAnalysis(trace_dir=d)
t2 = time.perf_counter()
ta.get_gpu_kernel_breakdown(visualize=False)
t3 = time.perf_counter()
ta.get_temporal_breakdown(visualize=False)
t4 = time.perf_counter()
shutil.rmtree(d)
print(json.dumps({{"import_s": t1 - t0, "load_s": t2 - t1, "kernel_breakdown_s": t3 - t2,
                  "temporal_breakdown_s": t4 - t3, "total_s": t4 - t0}}))
'''


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


def run_child(code: str, python: str = sys.executable) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"child failed ({p.returncode}): {p.stderr[-2000:]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far; run the biggest trace last.
    res["peak_rss_mib"] = max(before, after) / 1024
    res["wall_s"] = wall
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="35,100", help="trace sizes in MB, comma-separated (35 = control.json as is)")
    ap.add_argument("--analyses", action="store_true", help="also time profiling_core.analyses if it exists")
    ap.add_argument("--hta-python", help="a python with holistictraceanalysis installed, to time HTA the same way")
    ap.add_argument("--keep", help="directory to keep the generated traces in (default: a temp dir, deleted)")
    args = ap.parse_args(argv)
    sizes = sorted(float(s) for s in args.sizes.split(","))
    tmp = args.keep or tempfile.mkdtemp(prefix="bench-trace-")
    os.makedirs(tmp, exist_ok=True)
    rows = []
    try:
        for mb in sizes:
            path = os.path.join(tmp, f"bench_{int(mb)}mb.json")
            if not os.path.exists(path):
                real = make_trace(mb, path)
            else:
                real = os.path.getsize(path) / 1e6
            res = run_child(CHILD.format(root=ROOT, path=path, queries=QUERIES, analyses=args.analyses))
            rows.append(("profiling_core (sqlite mirror)", real, res))
            if args.hta_python:
                hres = run_child(HTA_CHILD.format(path=path), python=args.hta_python)
                rows.append(("HTA 0.5.0", real, hres))
    finally:
        if not args.keep:
            for n in os.listdir(tmp):
                os.unlink(os.path.join(tmp, n))
            os.rmdir(tmp)
    print(f"\nmachine: {os.cpu_count()} cores, python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}")
    print(f"{'engine':32} {'JSON MB':>8} {'load s':>8} {'total s':>8} {'peak RSS MiB':>13} {'RSS/JSON':>9}")
    for engine, mb, r in rows:
        print(f"{engine:32} {mb:8.1f} {r['load_s']:8.2f} {r['total_s']:8.2f} {r['peak_rss_mib']:13.0f} "
              f"{r['peak_rss_mib'] * 1.048576 / mb:9.2f}")
    for engine, mb, r in rows:
        if "queries" in r:
            print(f"\nqueries on {mb:.0f} MB ({r['slices']} slices, {r['flows']} flows):")
            for q, t in r["queries"].items():
                print(f"  {q:40} {t * 1000:8.1f} ms")
        if "analyses" in r:
            print(f"analyses on {mb:.0f} MB: {r['analyses']}")
        if "kernel_breakdown_s" in r:
            print(f"\nHTA on {mb:.0f} MB: import {r['import_s']:.2f} s, load {r['load_s']:.2f} s, kernel breakdown "
                  f"{r['kernel_breakdown_s']:.2f} s, temporal breakdown {r['temporal_breakdown_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
