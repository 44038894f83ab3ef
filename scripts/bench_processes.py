#!/usr/bin/env python3
"""Benchmark whole processes: ``analyze T --json`` on both engines beside traceinsight, on the largest real traces.

Each cell is one fresh process, timed from outside: its wall time and its own peak RSS (``os.wait4``). Rounds are
interleaved (every process of every trace once per round, the order rotated each round), so a noisy machine slows
all of them alike; read the ratios of one run, not absolutes across runs. The table gives min and median wall, the
median CPU time (user + system, the process's threads together: on a shared machine it moves less than the wall)
and the median peak RSS of the rounds.

The processes, per trace:

- ``sqlite``: ``python -m profiling_core analyze T --engine sqlite --json`` (the offline mirror), as a user runs it.
- ``perfetto (stand-in shell)``: the same command on the perfetto engine, as it runs: perfetto's own client starts
  a trace_processor HTTP server, sends it the file and reads its answers. No ``trace_processor_shell`` can run here,
  so the server is a stand-in (``tests/fake_tp_shell.py``) that answers each SQL text with the bytes a real
  trace_processor v58.2 would send (a ``QueryResult`` protobuf, in batches of at most 50,000 cells), computed before
  the rounds over the tables it recorded for that trace (``/work/shared/traces/tp_tables``), and that takes as long
  to load the file as the shell did: its measured load + 3 queries on control.json (``SHELL``), in proportion to the
  file's size. Its SQL costs nothing, so the row is the command's own time beside a load of the shell's length. Only
  traces with a recording get this row.
- ``traceinsight``: traceinsight 0.6.1 (Meta's HTA, ``hta`` package) in its own venv (``--ti-python``): import,
  ``TraceAnalysis`` load, ``get_gpu_kernel_breakdown`` and ``get_temporal_breakdown``.
- ``sqlite, traceinsight's work``: this library doing what the traceinsight process does, through its public API,
  started as an ``analyze`` process starts (no pyarrow, one BLAS thread) with its imports done while the trace loads:
  ``open_trace`` on the mirror, then the per-kernel table (``kernel_stats``), the GPU time by category of kernel
  (``step_breakdown`` → ``category_totals``) and the busy and idle time of the GPU (``gpu_busy``), printed as JSON.
  The ``analyze`` row does this and some twenty analyses more, the findings and the diagnosis; this row says what
  the loader and the tables cost beside traceinsight's for the same questions.

Traces: the three largest real traces of different shapes in ``/work/shared/traces`` (HTA's A100 control trace,
integer µs; the 2021 ResNet-50 V100 trace of the ``Operator``/``Kernel`` era with correlation fallback; HTA's
V100 trace with nanosecond float timestamps), and, with ``--ranks N``, one extra row: the control trace with its
events repeated N times as N ranks of one file (``bench_trace.make_trace``: pid + 1,000,000·k, flow ids +
10,000,000·k), written with ``json.dump``.

Outputs: ``--save-outputs DIR`` keeps the ``--json`` output of each engine on each trace (from the first round);
``--check-outputs DIR`` compares this run's outputs with those byte for byte and fails on any difference (run it with
the tree before a change, then after). ``--profile T`` prints instead where one ``analyze --json`` process's time goes
(imports, load, tables, each analysis, findings, diagnosis, JSON: wall and CPU time of each, in a process started as
an ``analyze`` process starts) and cProfile's top entries; ``--importtime`` adds
``python -X importtime``'s largest imports.

Bytecode caching is on for the children (``PYTHONPYCACHEPREFIX`` in a temporary folder, written by a warm-up run), as
for an installed package; a first run that compiles every module is not what a user pays twice.

``--before-root DIR`` also times both engines of another tree (a ``git archive`` of the commit before a change) in
the same interleaved rounds, and checks that its outputs are the same bytes as this tree's (each tree's perfetto
answers are recorded with that tree, as its SQL may differ).

Usage:
    python scripts/bench_processes.py [--rounds 5] [--before-root DIR] [--ranks 2] [--ti-python /work/venv-ti/bin/python]
        [--save-outputs DIR | --check-outputs DIR] [--only control,resnet50] [--shared DIR]
    python scripts/bench_processes.py --profile /path/to/trace.json [--engine sqlite] [--importtime]
"""
from __future__ import annotations

import argparse
import cProfile
import gzip
import io
import json
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(os.path.dirname(ROOT)), "shared", "traces")
if not os.path.isdir(SHARED):
    SHARED = "/work/shared/traces"
TRACES = {  # name: (trace file, its recorded trace_processor tables)
    "control": ("third_party/hta/trace_diff_control_a100/control.json.gz",
                "tp_tables/third_party_hta_trace_diff_control_a100__control"),
    "resnet50": ("third_party/kineto/resnet50_v100_2021jun/worker0.1623143089861.pt.trace.json.gz",
                 "tp_tables/third_party_kineto_resnet50_v100_2021jun__worker0.1623143089861.pt.trace"),
    "ns_v100": ("third_party/hta/ns_resolution_v100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                "tp_tables/third_party_hta_ns_resolution_v100__rank-0.Apr_03_18_51_38.1102.pt.trace"),
}
# trace_processor_shell v58.2 (load + 3 queries), measured on a quiet 16-core machine: the reference figures
SHELL = {"control": (0.53, 115), "control_x2": (0.64, 165)}
CONTROL_MIB = 33.2  # control.json's size, decompressed

TI_CHILD = r"""
import logging, os, shutil, sys, tempfile
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp()
os.symlink({path!r}, os.path.join(d, "rank-0.json"))
ta = TraceAnalysis(trace_dir=d)
ta.get_gpu_kernel_breakdown(visualize=False)
ta.get_temporal_breakdown(visualize=False)
shutil.rmtree(d)
"""

SAME_WORK_CHILD = r"""
import json
from profiling_core.cli._process import starting_analyze
starting_analyze()
from profiling_core.trace import open_trace
def imports():
    global A
    from profiling_core import analyses as A
s = open_trace({path!r}, engine="sqlite", while_loading=imports)
out = {{"kernels": A.kernel_stats(s).to_dict("records"),
        "by_category": A.category_totals(A.step_breakdown(s)).to_dict("records"),
        "busy": A.gpu_busy(s).to_dict("records")}}
s.close()
print(json.dumps(out, default=str))
"""

# --- the perfetto engine against a stand-in trace_processor serving recorded answers ---------------------------

def fake_shell(folder: str) -> str:
    """The stand-in trace_processor_shell (``tests/fake_tp_shell.py``) as an executable in ``folder``."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from fake_tp_shell import shell_command
    return shell_command(folder)[0]


def shell_load_s(mib: float) -> float:
    """The load the stand-in takes for a trace of ``mib`` MiB: the shell's own figure on control.json (load + 3
    queries, ``SHELL``), in proportion to the file's size."""
    return SHELL["control"][0] * mib / CONTROL_MIB


def perfetto_env(shell: str, answers: str, load_s: float) -> dict:
    return {"PERFETTO_BIN": shell, "FAKE_TP_ANSWERS": answers, "FAKE_TP_LOAD_S": f"{load_s:.3f}"}


def record(trace: str, folder: str, out: str, env: dict, shell: str) -> None:
    """Run ``analyze trace --engine perfetto --json`` once, the stand-in answering over trace_processor's recorded
    tables ``folder`` and keeping every answer's bytes in ``out`` (msgpack {sql: bytes}) for the timed runs."""
    subprocess.run([sys.executable, "-m", "profiling_core", "analyze", trace, "--engine", "perfetto", "--json"],
                   check=True, stdout=subprocess.DEVNULL, cwd=env.get("PYTHONPATH", ROOT),
                   env={**env, "PERFETTO_BIN": shell, "FAKE_TP_TABLES": folder, "FAKE_TP_RECORD": out})


# --- whole processes ---------------------------------------------------------------------------------------------

def run_process(argv: list, env: dict, stdout_path: str | None = None, cwd: str = ROOT) -> dict:
    """Run ``argv`` in ``cwd``; its wall time, its own CPU time (user + system) and peak RSS (os.wait4), its stdout
    kept in ``stdout_path``. (``python -m`` puts ``cwd`` before PYTHONPATH on sys.path: a process of another tree
    runs in that tree's folder.)"""
    with open(stdout_path or os.devnull, "wb") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env, cwd=cwd)
        err = p.stderr.read()
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise RuntimeError(f"{argv[:4]} failed ({rc}): {err.decode(errors='replace')[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def child_env(pycache: str) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = pycache
    env["PYTHONPATH"] = ROOT
    return env


def _gunzip(src: str, dst: str) -> None:
    with gzip.open(src, "rb") as f, open(dst, "wb") as g:
        shutil.copyfileobj(f, g, 1 << 22)


def prepare(args, tmp: str, roots: list) -> list[dict]:
    """The bench traces (decompressed: trace_processor reads them as they are, and so do we) and, for those with a
    recording, the answers the stand-in trace_processor serves: recorded for each tree in ``roots`` (its own SQL)."""
    names = args.only.split(",") if args.only else list(TRACES)
    cases = []
    env = child_env(os.path.join(tmp, "pyc"))
    shell = fake_shell(tmp)
    for name in names:
        src, rec = TRACES[name]
        path = os.path.join(tmp, f"{name}.json")
        _gunzip(os.path.join(SHARED, src), path)
        answers = {}
        for k, root in enumerate(roots):
            answers[root] = os.path.join(tmp, f"{name}.{k}.answers")
            record(path, os.path.join(SHARED, rec), answers[root], {**env, "PYTHONPATH": root}, shell)
        cases.append({"name": name, "path": path, "answers": answers, "shell": shell})
    if args.ranks > 1 and "control" in names:
        path = os.path.join(tmp, f"control_x{args.ranks}.json")
        size = 34.83 * args.ranks  # control.json's MB, so make_trace makes `ranks` copies
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_trace.py"), "--make-trace", str(size),
                        path], check=True,
                       env={**env, "BENCH_CONTROL_TRACE": os.path.join(SHARED, TRACES["control"][0])})
        cases.append({"name": f"control_x{args.ranks}", "path": path, "answers": None})
    for c in cases:
        c["mib"] = os.path.getsize(c["path"]) / 2**20
        # Counted in a child: a child's peak RSS (ru_maxrss) starts at its parent's RSS when it is forked, so this
        # process must never hold a trace.
        count = "import json, sys; print(len(json.load(open(sys.argv[1]))['traceEvents']))"
        c["events"] = int(subprocess.run([sys.executable, "-c", count, c["path"]], check=True, capture_output=True,
                                         text=True).stdout)
    return cases


def processes(case: dict, ti_python: str | None, before: str | None) -> list[tuple[str, list, str | None, dict]]:
    """(label, argv, the tree on PYTHONPATH, more environment) of each process to time on ``case``; with ``before``
    (another tree, e.g. a ``git archive`` of an older commit) its two engines too, labelled ``... before``."""
    py = sys.executable
    out = []
    for tag, root in [("", ROOT)] + ([(" before", before)] if before else []):
        for engine in ("sqlite", "perfetto") if case["answers"] else ("sqlite",):
            more = {} if engine == "sqlite" else perfetto_env(case["shell"], case["answers"][root],
                                                               shell_load_s(case["mib"]))
            out.append((f"{engine}{tag}", [py, "-m", "profiling_core", "analyze", case["path"], "--engine", engine,
                                           "--json"], root, more))
    out.append(("sqlite, traceinsight's work", [py, "-c", SAME_WORK_CHILD.format(path=case["path"])], ROOT, {}))
    if ti_python:
        out.append(("traceinsight", [ti_python, "-c", TI_CHILD.format(path=case["path"])], None, {}))
    return out


def bench(args) -> int:
    tmp = tempfile.mkdtemp(prefix="bench-proc-")
    try:
        before = os.path.abspath(args.before_root) if args.before_root else None
        cases = prepare(args, tmp, [ROOT] + ([before] if before else []))
        env = child_env(os.path.join(tmp, "pyc"))

        def env_of(root):
            e = {k: v for k, v in env.items() if k != "PYTHONPATH"}
            return e if root is None else {**e, "PYTHONPATH": root,
                                           "PYTHONPYCACHEPREFIX": os.path.join(tmp, "pyc", str(hash(root)))}
        before = os.path.abspath(args.before_root) if args.before_root else None
        plan = [(c, label, argv, {**env_of(root), **more}, root or ROOT) for c in cases for label, argv, root, more in
                processes(c, args.ti_python, before)]
        for c, label, argv, e, cwd in plan:  # warm-up: bytecode written, files in the page cache
            run_process(argv, e, cwd=cwd)
        results: dict = {(c["name"], label): [] for c, label, _, _, _ in plan}
        outputs = os.path.join(tmp, "outputs")
        os.makedirs(outputs)
        results[("", "empty interpreter")] = []
        for r in range(args.rounds):
            k = r % len(plan)
            # the host's own pace: an interpreter that does nothing (hosts of one kind differ several times over here)
            results[("", "empty interpreter")].append(run_process([sys.executable, "-c", "pass"], env_of(None)))
            for c, label, argv, e, cwd in plan[k:] + plan[:k]:
                keep = os.path.join(outputs, f"{c['name']}.{re.sub(r'[^A-Za-z0-9.-]+', '_', label)}.json") \
                    if r == 0 and label != "traceinsight" else None
                results[(c["name"], label)].append(run_process(argv, e, keep, cwd))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        report(args, cases, results)
        return check_outputs(args, outputs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_outputs(args, outputs: str) -> int:
    if args.save_outputs:
        os.makedirs(args.save_outputs, exist_ok=True)
        for n in sorted(os.listdir(outputs)):
            shutil.copy(os.path.join(outputs, n), os.path.join(args.save_outputs, n))
        print(f"\noutputs saved in {args.save_outputs}")
    if args.before_root:  # the same command on both trees: the outputs must be the same bytes
        for n in sorted(x for x in os.listdir(outputs) if "_before" in x):
            with open(os.path.join(outputs, n), "rb") as a, open(os.path.join(outputs, n.replace("_before", "")),
                                                                  "rb") as b:
                same = a.read() == b.read()
            print(f"{n.replace('_before', '')}: {'identical' if same else 'DIFFERS'} before and after")
            if not same:
                return 1
    if not args.check_outputs:
        return 0
    bad = []
    for n in sorted(x for x in os.listdir(outputs) if "_before" not in x):
        ref = os.path.join(args.check_outputs, n)
        if not os.path.exists(ref):
            bad.append(f"{n}: no saved output to compare with")
            continue
        with open(ref, "rb") as a, open(os.path.join(outputs, n), "rb") as b:
            if a.read() != b.read():
                bad.append(f"{n}: differs from {ref}")
    print("\noutputs: " + ("identical to " + args.check_outputs if not bad else "; ".join(bad)))
    return 1 if bad else 0


def report(args, cases: list, results: dict) -> None:
    print(f"\nmachine: {os.cpu_count()} cores ({_cpu_model()}), python {sys.version.split()[0]}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; {args.rounds} interleaved rounds of fresh processes")
    empty = [x["wall_s"] for x in results.get(("", "empty interpreter"), [])]
    if empty:
        print(f"an empty interpreter (python -c pass), once a round: min {min(empty):.3f} s, median "
              f"{statistics.median(empty):.3f} s")
    print()
    print("| trace | process | wall min s | wall median s | CPU median s | peak RSS median MiB "
          "| traceinsight / this (wall, median) | traceinsight / this (CPU, median) | this / shell (min) "
          "| RSS / shell |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in cases:
        ti = results.get((c["name"], "traceinsight"))
        for label in ("sqlite", "sqlite before", "perfetto", "perfetto before", "sqlite, traceinsight's work",
                      "traceinsight"):
            runs = results.get((c["name"], label))
            if not runs:
                continue
            walls = [x["wall_s"] for x in runs]
            rss = statistics.median(x["rss_mib"] for x in runs)
            vs_ti = vs_ti_cpu = "–"
            if ti and label != "traceinsight":  # per round: the same round's traceinsight over this
                vs_ti = f"{statistics.median(t['wall_s'] / x['wall_s'] for t, x in zip(ti, runs)):.1f}×"
                vs_ti_cpu = f"{statistics.median(t['cpu_s'] / x['cpu_s'] for t, x in zip(ti, runs)):.1f}×"
            cpu = statistics.median(x["cpu_s"] for x in runs)
            shell = SHELL.get(c["name"])
            vs_shell = f"{min(walls) / shell[0]:.2f}×" if shell and label != "traceinsight" else "–"
            rss_shell = f"{rss / shell[1]:.2f}×" if shell and label != "traceinsight" else "–"
            name = f"{c['name']} ({c['mib']:.0f} MiB, {c['events'] / 1000:.0f}k events)"
            print(f"| {name} | {label.replace('perfetto', 'perfetto (stand-in shell)')} | {min(walls):.2f} | "
                  f"{statistics.median(walls):.2f} | {cpu:.2f} | {rss:.0f} | {vs_ti} | {vs_ti_cpu} | {vs_shell} | "
                  f"{rss_shell} |")


def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        return ""


# --- where one process's time goes -------------------------------------------------------------------------------

def _as_analyze_process() -> None:
    """What an ``analyze`` process does before it imports numpy and pandas (an older tree: what it has of it)."""
    try:
        from profiling_core.cli import starting_analyze
    except ImportError:
        try:
            from profiling_core.cli import text_in_python_objects as starting_analyze
        except ImportError:
            return
    starting_analyze()


def profile(args) -> int:
    """Phases of one ``analyze --json`` run in this process (after the imports), then cProfile's top entries. On the
    perfetto engine the stand-in trace_processor serves the answers (recorded first, as for the timed rows) and takes
    no time to load, so the figures are the engine's Python side: ``open_trace`` is starting the server and sending
    it the file, ``session.tables`` the extraction queries and their hand-over, and the args reader's queries run
    inside the analyses."""
    _as_analyze_process()
    if args.engine == "perfetto":
        stem = os.path.basename(args.profile).split(".json")[0]  # a bench trace's name, or its file's
        folder = next((rec for name, (src, rec) in TRACES.items()
                       if stem in (name, os.path.basename(src).split(".json")[0])), None)
        if folder is None:
            raise SystemExit(f"no recording for {args.profile}: the perfetto profile runs on " + ", ".join(TRACES))
        d = tempfile.mkdtemp(prefix="bench-rec-")
        shell, answers = fake_shell(d), os.path.join(d, "answers")
        record(args.profile, os.path.join(SHARED, folder), answers, child_env(d), shell)
        os.environ.update(perfetto_env(shell, answers, 0.0))  # (no load time: the Python side alone)
    clock = lambda: (time.perf_counter(), time.process_time())  # noqa: E731 - wall, and CPU (all threads)
    c0 = clock()
    from profiling_core.analyses import analyze as _analyze_imported  # noqa: F401 - timed: the imports
    from profiling_core.analyses import report as rep
    from profiling_core.cli.analyze import build_json
    from profiling_core.explain.diagnosis import diagnose
    from profiling_core.explain.questions import findings
    from profiling_core.trace import open_trace
    c1 = clock()
    phases = [(f"imports (profiling_core, numpy, pandas{', pyarrow' if sys.modules.get('pyarrow') else ''})",
               c1[0] - c0[0], c1[1] - c0[1])]
    analyses: list = []

    def timed(name, fn):
        def run(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                analyses.append((name, time.perf_counter() - t))
        return run
    for name in ("profiler_table", "steps", "step_breakdown", "top_kernels", "dispatch_chains",
                 "kernel_durations_by_step", "launch_latency", "gemm_throughput", "launch_paths", "gpu_busy",
                 "compile_breakdown", "gpu_ops", "kernel_stats", "sync_wait", "cold_start_gap", "cpu_vs_gpu",
                 "phases", "_summary", "Shared"):
        setattr(rep, name, timed(name, getattr(rep, name)))

    def once():
        analyses.clear()
        marks = [clock()]
        s = open_trace(args.profile, engine=args.engine)
        marks.append(clock())
        s.tables  # noqa: B018 - perfetto: the extraction queries
        marks.append(clock())
        s.devices  # noqa: B018 - perfetto: deviceProperties, read from the file
        marks.append(clock())
        r = rep.analyze(s)
        marks.append(clock())
        f = findings(r)
        marks.append(clock())
        d = diagnose(s, r)
        marks.append(clock())
        json.dumps(build_json(r, f, d), ensure_ascii=False)
        marks.append(clock())
        s.close()
        names = ("open_trace (decode, tables)", "session.tables", "session.devices", "analyze", "findings", "diagnose",
                 "JSON output")
        return [(n, b[0] - a[0], b[1] - a[1]) for n, a, b in zip(names, marks, marks[1:])]
    phases += once()
    print(f"{args.profile} ({args.engine}):\n\n| phase | wall s | CPU s |\n|---|---|---|")
    for name, t, cpu in phases:
        print(f"| {name} | {t:.3f} | {cpu:.3f} |")
    print("\n| analysis (inside analyze) | s |\n|---|---|")
    for name, t in sorted(analyses, key=lambda x: -x[1]):
        print(f"| {name} | {t:.3f} |")
    pr = cProfile.Profile()
    pr.enable()
    once()
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(args.top)
    print("\ncProfile, by own time (a second run, same process):\n" + buf.getvalue())
    if args.importtime:
        p = subprocess.run(check=False, args=[sys.executable, "-X", "importtime", "-m", "profiling_core", "analyze", args.profile,
                            "--engine", args.engine, "--json"], capture_output=True, text=True,
                           env=child_env(tempfile.mkdtemp(prefix="bench-pyc-")))
        rows = []
        for line in p.stderr.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[1].strip().isdigit():
                rows.append((int(parts[1]), parts[2].rstrip()))
        print("python -X importtime, largest cumulative imports (µs; compiled, no .pyc cache):")
        for us, name in sorted(rows, reverse=True)[:args.top]:
            print(f"  {us:>9}  {name}")
    return 0


def main(argv=None) -> int:
    global SHARED
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=2, help="the extra row: control.json as this many ranks (1: none)")
    ap.add_argument("--only", help="trace names, comma-separated: " + ",".join(TRACES))
    ap.add_argument("--ti-python", default="/work/venv-ti/bin/python" if os.path.exists(
        "/work/venv-ti/bin/python") else None, help="python of a venv with traceinsight 0.6.1")
    ap.add_argument("--save-outputs", metavar="DIR")
    ap.add_argument("--check-outputs", metavar="DIR")
    ap.add_argument("--before-root", metavar="DIR", help="also time both engines of this tree (rows '... before'); "
                                                          "their outputs must equal this tree's")
    ap.add_argument("--profile", metavar="TRACE")
    ap.add_argument("--engine", default="sqlite", choices=("sqlite", "perfetto"), help="with --profile (perfetto: "
                    "a stand-in trace_processor serving recorded answers, for traces with a recording)")
    ap.add_argument("--importtime", action="store_true")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--shared", metavar="DIR", help="the shared traces folder (default: ../shared/traces beside "
                    f"the repository, else /work/shared/traces; now {SHARED}): on another machine, a copy of "
                    "the files TRACES names")
    args = ap.parse_args(argv)
    if args.shared:
        SHARED = os.path.abspath(args.shared)  # (a tree timed "before" runs in its own folder)
    if args.profile:
        return profile(args)
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
