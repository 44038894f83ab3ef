"""Command line: ``python -m profiling_core {run,sweep,workloads,ls,show,rm,import,import-store,calibrate,analyze}``.

``run`` and ``sweep`` take ``--workload NAME`` (default matmul_add) and that workload's knobs as repeated
``--knob NAME=VALUE`` (``python -m profiling_core workloads`` lists them); matmul_add's knobs are also its own flags
``--size``, ``--batch`` and ``--bias``.

Human output by default; ``--json`` prints one JSON object.  Every failure exits non-zero with a one-line
reason on stderr and no traceback.  Every line of human output is printed through ``present.terminal.echo``: what
it shows from traces and from the store's files (run and device names, a calibration's text, the device lock's
holder) has its control characters shown as escapes.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Optional

from ..config import BIASES, COMPILE_MODES, DEVICES, DTYPES, MATMUL_PRECISIONS, ExperimentConfig
from ..errors import ProfilingError, RunStoreError
from ..present.terminal import echo, terminal_safe
from ..run.sweep import EXECUTORS
from ..run.worker import COMPILE_CACHES, PROCESS_KINDS
from ..store.runs import RunStore
from ..workloads import INT_TEXT, WORKLOADS, get_workload, workload_names
from ._dispatch import dispatch
from ._json import dumps


def _config_args(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    p.add_argument("--workload", choices=workload_names(), default="matmul_add", metavar="NAME",
                   help="what each step runs (default matmul_add, the study's): " + ", ".join(workload_names())
                        + "; list them with their knobs: python -m profiling_core workloads")
    p.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                   help="a knob of the workload, repeated for several (e.g. --knob seq_len=512 --knob causal=true)"
                        + ("; the sweep sets the workload's size knob itself" if sweep else ""))
    if not sweep:
        p.add_argument("--size", type=int, default=None, help="matmul_add: square matrix size n (default 64)")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    p.add_argument("--batch", type=int, default=None, help="matmul_add: leading batch dimension (aten::bmm)")
    p.add_argument("--bias", choices=BIASES, default="matrix",
                   help="matmul_add: b's shape: matrix (the study's, like x) or vector ((n,)); decides what "
                        "torch.compile fuses")
    p.add_argument("--matmul-precision", choices=MATMUL_PRECISIONS, default="highest",
                   help="torch.set_float32_matmul_precision: highest (default, full fp32), high (TF32), medium")
    p.add_argument("--warmup", type=int, nargs="?", const=10, default=0, metavar="N",
                   help="warm-up calls before profiling (flag alone: 10; default 0 = cold)")
    if not sweep:
        p.add_argument("--compile", nargs="?", const="default", default="off", choices=COMPILE_MODES,
                       metavar="MODE", help="torch.compile mode (flag alone: default); " + ", ".join(COMPILE_MODES))
    p.add_argument("--wait", type=int, default=1, help="schedule: wait steps (default 1)")
    p.add_argument("--warmup-steps", type=int, default=1, help="schedule: warm-up steps (default 1)")
    p.add_argument("--active", type=int, default=3, help="schedule: active steps (default 3)")
    p.add_argument("--repeat", type=int, default=1, help="schedule: cycles (default 1)")
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads torch uses (torch.set_num_threads; default: torch's, the machine's cores)")
    p.add_argument("--no-record-shapes", action="store_true", help="do not record input shapes")
    p.add_argument("--with-flops", action="store_true")
    p.add_argument("--with-stack", action="store_true")
    p.add_argument("--profile-memory", action="store_true")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before the worker is killed")
    p.add_argument("--no-wait", action="store_true", help="fail at once if the device is busy")


def _common_fields(a: argparse.Namespace) -> dict:
    return dict(dtype=a.dtype, batch=a.batch, bias=a.bias, matmul_precision=a.matmul_precision, warmup=a.warmup, wait=a.wait, warmup_steps=a.warmup_steps,
                active=a.active, repeat=a.repeat, device=a.device, threads=a.threads,
                record_shapes=not a.no_record_shapes,
                with_flops=a.with_flops, with_stack=a.with_stack, profile_memory=a.profile_memory,
                timeout_s=a.timeout)


def _knobs(a: argparse.Namespace) -> dict:
    """The ``--knob NAME=VALUE`` flags as the workload's checked knob values (ConfigError says what is wrong)."""
    return get_workload(a.workload).parse_knobs(a.knob)


def _store(a: argparse.Namespace) -> RunStore:
    store = RunStore(a.store)
    if store.root.exists() and not store.root.is_dir():  # (a file holds no runs: "no runs in it" would mislead)
        raise RunStoreError(f"the run store {store.root} is not a folder: give --store a folder (the first run or "
                            "import makes it) or leave it out for ./runs or $PROFILING_RUNS_DIR")
    return store


def _timing_line(meta: dict) -> str:
    t = meta.get("timings", {})
    keys = ["process_start_s", "torch_import_s", "device_init_s", "tensors_s", "warmup_s", "profile_s",
            "export_s", "wall_s"]
    return "  ".join(f"{k.removesuffix('_s')} {t[k]:.3f}s" for k in keys if isinstance(t.get(k), (int, float)))


def cmd_run(a: argparse.Namespace) -> int:
    from ..run.runner import run_experiment
    knobs = _knobs(a)
    for flag, given in (("size", a.size), ("batch", a.batch)):  # (the same field twice: which one ran would be a guess)
        if given is not None and flag in knobs and knobs[flag] != given:
            raise ProfilingError(f"--{flag} {given} and --knob {flag}={knobs[flag]} disagree: give the {flag} once")
    cfg = ExperimentConfig.for_workload(a.workload, knobs, size=64 if a.size is None else a.size, compile=a.compile,
                                        **_common_fields(a))
    status = None if a.json else (lambda m: echo(f"  … {m}", flush=True))
    run = run_experiment(cfg, store=_store(a), on_status=status, wait_for_device=not a.no_wait)
    if a.json:
        print(dumps({**run.to_dict(), "config": cfg.to_dict(), "timings": run.meta.get("timings"),
                     "device": run.meta.get("device")}))
    else:
        dev = run.meta.get("device", {})
        echo(f"run {run.run_id}  ({cfg.name} on {dev.get('type')} {dev.get('name') or ''})".rstrip(),
             f"  trace  {run.trace_path}", f"  table  {run.table_path}", f"  {_timing_line(run.meta)}")
    return 0


def _parse_list(text: str) -> list[str]:
    return [x for x in text.split(",") if x.strip()]


def _ints(text: str, flag: str) -> list[int]:
    """Comma-separated integers in ASCII digits (``int()`` alone also takes ``٣`` and ``1_0``); the config checks
    their range."""
    out = []
    for item in _parse_list(text):
        try:
            if not INT_TEXT.fullmatch(item.strip()):
                raise ValueError
            out.append(int(item))
        except ValueError:
            raise ProfilingError(f"each of {flag} must be an integer, in the digits 0-9, "
                                 f"got {item.strip()!r}") from None
    return out


def _some(values: list, flag: str, what: str) -> list:
    """``values``, or ProfilingError where the list ``flag`` gave names none (a sweep of nothing runs nothing)."""
    if not values:
        raise ProfilingError(f"{flag} must name at least one {what}, comma-separated")
    return values


def cmd_sweep(a: argparse.Namespace) -> int:
    from ..run.sweep import run_sweep, sweep_configs, sweep_values
    knobs = _knobs(a)
    sizes = _some(sweep_values(a.sizes, a.workload, knobs, field="each of --sizes"), "--sizes", "size")
    modes = _some(_parse_list(a.compile_modes), "--compile-modes", "compile mode")
    common = {**_common_fields(a), "workload": a.workload, "knobs": knobs}
    if a.warmups:
        warmups = _some(_ints(a.warmups, "--warmups"), "--warmups", "number of warm-up calls")
        configs = [c for w in warmups for c in sweep_configs(sizes, modes, **{**common, "warmup": w})]
    else:
        configs = sweep_configs(sizes, modes, **common)
    cancel = threading.Event()

    def progress(p):
        if a.json:
            return
        width = 30
        filled = int(width * p.fraction)
        bar = "#" * filled + "-" * (width - filled)
        print("\r" + terminal_safe(f"[{bar}] {p.done}/{p.total} {p.message}").ljust(99),
              end="" if p.current else "\n", file=sys.stderr, flush=True)  # the one line it redraws

    try:
        result = run_sweep(configs, store=_store(a), on_progress=progress, cancel_event=cancel,
                           prestart=0 if a.fresh_interpreter else 1, process=a.process,
                           compile_cache=a.compile_cache, executor=a.executor,
                           ray_address=a.ray_address, placement="per_device_type" if a.per_device_type else "spread",
                           max_retries=a.max_retries)
    except KeyboardInterrupt:
        cancel.set()
        echo("", "cancelled", file=sys.stderr)
        return 130
    if a.json:
        print(dumps({"runs": [r.to_dict() for r in result.runs],
                     "errors": [{"name": c.name, "error": str(e)} for c, e in result.errors],
                     "skipped": [c.name for c in result.skipped],
                     "cancelled": result.cancelled, "wall_s": round(result.wall_s, 3)}))
    else:
        echo(*[f"ok    {r.run_id}   {_timing_line(r.meta)}" for r in result.runs],
             *[f"FAIL  {c.name}: {e}" for c, e in result.errors],
             f"{len(result.runs)} ok, {len(result.errors)} failed"
             + (f", {len(result.skipped)} not run (cancelled)" if result.skipped else "") + f", {result.wall_s:.1f} s")
    return 0 if not result.errors and not result.cancelled else 1


def _knob_range(k) -> str:
    if k.range:
        lo, hi = k.range
        return (f"{lo}..{hi}" if k.kind == "int" else f"{lo:g}..{hi:g}") + (" or none" if k.optional else "")
    if k.choices:
        return "|".join(k.choices)
    return k.allowed()


def cmd_workloads(a: argparse.Namespace) -> int:
    if a.json:
        print(dumps({"workloads": [w.to_dict() for w in WORKLOADS.values()]}))
        return 0
    for w in WORKLOADS.values():
        axis = f"sweep axis: {' / '.join(w.size_knobs)}" if w.size_knobs else "no sweep axis"
        echo(f"{w.name}  ({axis})", f"  {w.description}")
        for k in w.knobs:
            default = "none" if k.default is None else str(k.default).lower() if k.kind == "bool" else str(k.default)
            when = f" (only when {k.when[0]} is {k.when[1]})" if k.when else ""
            echo(f"    {k.name:14s} {k.kind:6s} default {default:10s} {_knob_range(k):24s} {k.help}{when}")
    echo("", "Set knobs with --knob NAME=VALUE (repeated), e.g. python -m profiling_core run --workload attention "
          "--knob seq_len=512 --knob causal=false; matmul_add's are also --size, --batch and --bias.")
    return 0


def cmd_ls(a: argparse.Namespace) -> int:
    runs = _store(a).list()
    if a.json:
        print(dumps([{**r.to_dict(), "started_at": r.meta.get("started_at"),
                      "device": (r.meta.get("device") or {}).get("name")} for r in runs]))
        return 0
    if not runs:
        echo(f"no runs in {_store(a).root}")
    for r in runs:
        if r.problem is not None:
            echo(f"{r.run_id:60s} {r.status:8s} {r.problem}")
            continue
        dev = (r.meta.get("device") or {})
        echo(f"{r.run_id:60s} {r.status:8s} {dev.get('type') or r.meta.get('source', ''):6s} "
             f"{str(r.meta.get('started_at', ''))[:19]}")
    return 0


def cmd_show(a: argparse.Namespace) -> int:
    run = _store(a).load(a.run_id)
    if a.json:
        print(dumps({**run.to_dict(), "meta": run.meta}))
        return 0
    echo(*json.dumps(run.meta, indent=1, default=str).splitlines(), *run.table_text().splitlines())
    return 0


def cmd_rm(a: argparse.Namespace) -> int:
    store = _store(a)
    ids = list(dict.fromkeys(a.run_ids))  # (an id given twice is one run, deleted once)
    for rid in ids:  # every id first: a typo among them deletes none of the others
        store.load(rid)
    for rid in ids:
        store.delete(rid)
        if not a.json:
            echo(f"deleted {rid}")
    if a.json:
        print(dumps({"deleted": ids}))
    return 0


def cmd_import(a: argparse.Namespace) -> int:
    run = _store(a).import_trace(a.path, name=a.name)
    if a.json:
        print(dumps(run.to_dict()))
    else:
        echo(f"imported {a.path} as run {run.run_id}")
    return 0


def cmd_import_store(a: argparse.Namespace) -> int:
    result = _store(a).import_store(a.path)
    if a.json:
        print(dumps(result.to_dict()))
    else:
        echo(*[f"imported {r.meta['imported_from']['run_id']} as run {r.run_id}" for r in result.runs],
             *[f"skipped  {folder}: {why}" for folder, why in result.skipped],
             f"{len(result.runs)} imported, {len(result.skipped)} skipped, {result.calibrations} calibration(s) added "
             f"from {a.path}")
    return 0


def _peaks_lines(p) -> list[str]:
    """A calibration as lines for :func:`echo` (a schema-checked ``DevicePeaks``: each dtype has its median and size,
    every figure is a finite number)."""
    sheet = p.datasheet()
    lines = [f"{p.device}  ({p.kind}; driver {p.driver or '-'}; torch {p.torch_version}; measured {p.measured_at})"]
    for d, t in p.gemm_tflops.items():
        ds = f"   datasheet {sheet['tflops'][d]:,.1f}" if sheet and d in sheet["tflops"] else ""
        lines.append(f"  GEMM {d:5s} {t:>10,.3f} TFLOP/s (median {p.gemm_tflops_median[d]:,.3f}; "
                     f"{p.gemm_sizes[d]}^3){ds}")
    ds = f"   datasheet {sheet['bandwidth_gbs']:,.0f}" if sheet else ""
    lines.append(f"  memory  {p.bandwidth_gbs:>10,.1f} GB/s (median {p.bandwidth_gbs_median:,.1f}; copy of "
                 f"{p.copy_bytes / 2**20:,.0f} MiB){ds}")
    if sheet:
        lines.append(f"  datasheet: {sheet['source']}")
    return lines


def cmd_calibrate(a: argparse.Namespace) -> int:
    from ..run.calibration import CalibrationJob
    from ..store.peaks import PeakBook
    from ..run.runner import calibrate
    store = _store(a)
    if a.list:
        good, bad = PeakBook(store.root).all()
        if a.json:
            print(dumps({"calibrations": [p.to_dict() for p in good],
                         "unreadable": [{"file": f, "error": e} for f, e in bad]}))
            return 0
        if not good and not bad:
            echo(f"no calibrations in {store.root} (run: python -m profiling_core calibrate)")
        for p in good:
            echo(*_peaks_lines(p))
        for f, e in bad:
            echo(f"unreadable calibration {f}: {e}")
        return 0
    job = CalibrationJob(device=a.device, gemm_size=a.gemm_size, timeout_s=a.timeout)
    status = None if a.json else (lambda m: echo(f"  … {m}", flush=True))
    p = calibrate(job, store=store, on_status=status, wait_for_device=not a.no_wait)
    if a.json:
        print(dumps(p.to_dict()))
    else:
        echo(*_peaks_lines(p), f"  method: {p.method}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m profiling_core",
                                     description="Run torch.profiler experiments of the matmul+add study and "
                                                 "of other workloads, and read their traces.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--store", default=None, help="run store folder (default ./runs or $PROFILING_RUNS_DIR)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.set_defaults(func=func)
        return p

    _config_args(add("run", cmd_run, "profile one experiment in a fresh worker"))
    p = add("sweep", cmd_sweep, "profile a list of experiments (sizes x compile modes)")
    p.add_argument("--sizes", default="64,128,256,512,1024,2048,4096,8192",
                   help="values of the workload's size knob (matmul_add: n; see `workloads` for the others' axis)")
    p.add_argument("--compile-modes", default="off,default", help="comma list of: " + ", ".join(COMPILE_MODES))
    p.add_argument("--warmups", default=None, metavar="N,N",
                   help="several warm-up counts, e.g. 0,10 for cold and warm (overrides --warmup)")
    p.add_argument("--fresh-interpreter", action="store_true",
                   help="start each run in a new interpreter that imports torch itself (default: fork each run "
                        "from a prestarted worker that imported torch once and never touched CUDA)")
    p.add_argument("--process", choices=PROCESS_KINDS, default="fresh",
                   help="fresh (default): a new process per run; persistent: the warm eager runs share one process "
                        "kept for this device (its CUDA context too), with the settings a run may change set back "
                        "before each; cold and compiled runs and scripts still get a new process each")
    p.add_argument("--compile-cache", choices=COMPILE_CACHES, default="fresh",
                   help="fresh (default): each compiled run compiles from an empty cache of its own; shared: the "
                        "warm compiled runs share the store's compile cache (a graph compiled before is found "
                        "there, seconds less per run on a GPU); cold runs always compile from an empty cache")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="local (default): the runs one after the other on this machine; ray: each run a Ray task "
                        "on a cluster's node, its artifacts committed into this store (needs the ray extra)")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="the Ray cluster to use (default: start a local Ray and shut it down after)")
    p.add_argument("--per-device-type", action="store_true",
                   help="with --executor ray: run every config once on each device type the nodes declare "
                        "(custom resource device_type:<name>, e.g. device_type:NVIDIA_H200)")
    p.add_argument("--max-retries", type=int, default=1,
                   help="with --executor ray: times a run whose task died (worker killed, node lost) is retried")
    _config_args(p, sweep=True)
    add("workloads", cmd_workloads, "list the workloads and their knobs (defaults, ranges, choices)")
    add("ls", cmd_ls, "list runs")
    add("show", cmd_show, "show a run's meta and table").add_argument("run_id")
    add("rm", cmd_rm, "delete runs").add_argument("run_ids", nargs="+")
    p = add("calibrate", cmd_calibrate, "measure the device's GEMM and memory peaks (stored in the run store)")
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--gemm-size", type=int, default=None, help="GEMM size (default: 8192 on a GPU, ~1024 on a CPU)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before the worker is killed")
    p.add_argument("--no-wait", action="store_true", help="fail at once if the device is busy")
    p.add_argument("--list", action="store_true", help="list the stored calibrations instead of measuring")
    p = add("import", cmd_import, "import an external trace file as a run")
    p.add_argument("path")
    p.add_argument("--name", default=None)
    p = add("import-store", cmd_import_store, "import every run of another run store (a folder, or a .tar/.tar.gz "
                                              "of one: another machine's runs), keeping their meta (machine)")
    p.add_argument("path")
    try:
        from . import analyze as analyze_cli
    except ImportError:
        analyze_cli = None
    if analyze_cli is not None:
        analyze_cli.add_parser(sub)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    return dispatch(build_parser(), argv)
