"""``python -m profiling_core analyze PATH [--engine E] [--json] [--process PID] [--peaks FILE] [--peak-tflops X]``.

Opens a Chrome/Kineto trace, runs every analysis once and prints a readable summary, or with ``--json`` one JSON
object (``engine``, ``steps``, ``kernels``, ``launch_latency_median_us``, ``launch_apis``,
``compiled_regions_per_step``, ``memcpy_dtod``, ``gpu_busy_fraction``, ``steady_state`` (the bound rule's verdict
and evidence), ``queue_growth`` (whether the launch queue grew, and the figures it rests on), ``devices``,
``recorded_with`` (the torch.profiler options the trace says it was recorded with),
``rank`` (null, or where the file merged several ranks' traces, the rank read: ``pid``, ``steps``, ``gpus``, and
``processes``, every pid that holds steps in the file), ``ranks_read_whole`` (null, or why such a file was read
whole: ranks whose GPUs share a lane, a pipe), ``step_processes`` (the pids holding step slices of what was
read), ``step_devices`` (per GPU that ran the steps' work: its
own median ``busy_us`` and ``busy_fraction`` of a step; several where one process drove several GPUs, which the
summary then notes), ``gemm``, ``time_by_category``, ``memory`` (``events``,
``skipped_events``, per device in ``devices`` its ``peak_allocated_bytes`` and ``peak_reserved_bytes`` (null without
a reserved figure) and where the peak happened; ``note``, when the trace has no ``[memory]`` events, says how to
record them), ``step_breakdown`` rows, ``top_kernels`` rows with their ``cpu_ops`` (``op``, ``launches``),
``findings``, and the diagnosis: ``peaks`` used, ``roofline`` rows, ``diagnoses``, ``cost_unit``: what their costs
are per). A file that cannot be read exits with status 2 and a one-line reason on stderr. Standalone: ``python -m
profiling_core.cli.analyze``.

A file that merged several ranks' traces (the steps of several processes, each step number once per rank) is read
one rank at a time, as that rank's own trace would hold it (``analyses.write_rank``): by default the first process
by pid, ``--process PID`` another; the summary says which and what was left out. Read whole, every per-step figure
would mix the ranks' steps and GPU work. Such a file is read whole where its ranks cannot be read apart (their GPUs
share a lane's pid: ``analyses.unparted``), where the pids the file writes do not say which events are whose (text
pids a reader numbered otherwise: ``analyses.write_rank`` refuses), or where it comes through a pipe, which cannot be
read twice; the summary then says so, and that its per-step figures mix the ranks.

A trace inside the run store (``runs/RUN/trace.json``) is analysed with its run's config and device from
``meta.json``, and judged against the newest calibration of that device in the store (``calibrate``); ``--peaks``
names a calibration file instead.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Optional

from ..errors import ProfilingError
from ..present.terminal import echo
from ..units import cut_apart, format_count, format_duration_us, format_rate, format_share, human_bytes
from ._json import clean as _clean, escaped

__all__ = ["add_parser", "command_parser", "run", "build_json", "main"]

ENGINES = ("auto", "perfetto", "sqlite")
DESCRIPTION = "Analyse a Chrome/Kineto trace: steps, kernels, launches, compile rows and findings per study question."


def _configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("path", help="a Chrome/Kineto trace (.json or .json.gz)")
    p.add_argument("--engine", choices=ENGINES, default="auto", help="SQL engine (default auto)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    p.add_argument("--peak-tflops", type=float, default=None, metavar="X",
                   help="a peak TFLOP/s you set for the 'gemm' rows' fraction of peak (the diagnosis uses --peaks)")
    p.add_argument("--process", default=None, metavar="PID",
                   help="of a file that merged several ranks' traces, the rank to read: the process that holds its "
                        "steps (default: the first, by pid); the other ranks' events are left out")
    p.add_argument("--peaks", default=None, metavar="FILE",
                   help="a calibration JSON (the store's .calibrations/*.json) to judge GEMMs and copies against; "
                        "default: the newest calibration of the run's device, for a trace in the run store")
    p.set_defaults(func=run)
    return p


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``analyze`` subcommand on an ``argparse`` subparsers object; returns its parser."""
    return _configure(subparsers.add_parser("analyze", help="analyse a trace: steps, kernels, launches, findings",
                                            description=DESCRIPTION))


def command_parser() -> argparse.ArgumentParser:
    """``python -m profiling_core``'s parser with the ``analyze`` subcommand alone: what an ``analyze`` process
    parses its command line with (``cli.main``), the same arguments, usage and errors as the whole command line's
    (``commands.build_parser``) without importing the other commands (the runner, the store, the sweeps: ~50 ms of
    a process whose load of the trace waits for its imports to fork)."""
    parser = argparse.ArgumentParser(prog="python -m profiling_core")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def _records(df, cols: list[str]) -> list[dict]:
    return [{c: _clean(v) for c, v in zip(cols, row)} for row in df[cols].itertuples(index=False, name=None)]


def build_json(report, found, diagnosis=None, rank: Optional[dict] = None, whole: str = "") -> dict:
    """The ``--json`` object for a :class:`~profiling_core.analyses.Report`, its findings and its diagnosis
    (a :class:`~profiling_core.explain.DiagnosisReport`, if given); ``rank``: the rank the report reads, where it was
    read out of a file that merged several ranks' traces (an entry of ``analyses.ranks`` with ``processes``);
    ``whole``: why such a file was read whole instead (``ranks_read_whole``)."""
    s = report.summary
    extra = _clean(diagnosis.to_dict()) if diagnosis is not None else {"peaks": None, "roofline": [], "diagnoses": []}
    return {**extra,
        "engine": report.engine,
        "rank": _clean(rank),
        "ranks_read_whole": whole or None,
        "steps": _records(report.steps, ["step", "cpu_dur_us", "gpu_busy_us", "kernels", "launches",
                                         "gpu_busy_fraction"]),
        "kernels": _records(report.kernel_stats, ["name", "count", "median_us", "mean_us", "min_us", "max_us",
                                                  "std_us"]),
        "launch_latency_median_us": _clean(s["launch_latency_median_us"]),
        "launch_apis": list(s["launch_apis"]),
        "compiled_regions_per_step": _clean(s["compiled_regions_per_step"]),
        "memcpy_dtod": int(s["memcpy_dtod"]),
        "gpu_busy_fraction": _clean(s["gpu_busy_fraction"]),
        "gpu_busy_us": _clean(s["gpu_busy_us"]),
        "steady_state": _clean(s.get("steady_state")),
        "queue_growth": _clean(s.get("queue_growth")),
        "train_phases": _clean(s.get("train_phases") or {}),
        "phases": _records(report.phases, ["step", "phase", "cpu_us", "share", "gpu_us", "gpu_ops", "kernels"]),
        "devices": _clean(s.get("devices") or []),
        "recorded_with": _clean(s.get("recorded_with") or []),
        "step_processes": _clean(s.get("step_processes") or []),
        "step_devices": _clean(s.get("step_devices") or []),
        "has_gpu": bool(s["has_gpu"]),
        "gemm": _records(report.gemm_throughput, ["op", "device", "time_us", "flops", "tflops",
                                                  "fraction_of_peak"]),
        "time_by_category": _clean(s["time_by_category"]),
        "memory": _clean(s.get("memory") or {}),
        "step_breakdown": _records(report.step_breakdown, ["step", "category", "time_us", "share", "busy_us",
                                                           "overlapped_us", "window_us"]),
        "top_kernels": [{**r, "cpu_ops": [{"op": op, "launches": n} for op, n in r["cpu_ops"]]}
                        for r in _records(report.top_kernels, ["name", "category", "count", "per_step", "total_us",
                                                               "mean_us", "share", "cpu_ops"])],
        "findings": [{"id": f.id, "question": f.question, "text": f.text, "evidence": _clean(f.evidence)}
                     for f in found],
    }


def _human(path: str, report, found, diagnosis=None, rank: Optional[dict] = None, whole: str = "") -> list[str]:
    s = report.summary
    lines = [f"{path}  (engine {report.engine})",
             f"  steps {s['steps']}   GPU ops {s['gpu_ops']}   kernels {s['kernels']}" +
             ("" if s["has_gpu"] else "   (no GPU lane)")]
    if rank is not None:
        from ..explain import rank_text
        lines.append("  note: " + rank_text(rank) + " --process PID reads another.")
    pids = s.get("step_processes") or []
    if len(pids) > 1:
        from ..explain import merged_processes_text
        lines.append("  note: " + merged_processes_text(pids) + (f" It is read whole: {whole}." if whole else ""))
    gpus = s.get("step_devices") or []
    if len(gpus) > 1:
        from ..explain import devices_text
        lines.append("  note: " + devices_text(gpus, len(pids)))
    work = s.get("work", 1)
    if not work:  # (the profiler's own slices alone: no per-step figure or memory line stands for any work)
        from ..analyses import NO_WORK_TEXT
        lines.append("  note: " + NO_WORK_TEXT)
    ss = s.get("steady_state") or {}
    if s["steps"] and work:  # (the medians of the steady state's steps, which every per-step figure reads)
        n = len(s.get("measured_steps") or [])
        empty, idle = ss.get("empty_steps") or [], ss.get("steps_without_gpu") or []
        basis = ("" if ss.get("basis") != "after_first" else ", those after the first"
                 if len(ss.get("first_steps") or []) <= 1 else ", those after each process's first")
        if empty:
            from ..explain import empty_steps_text
            basis += f"; {empty_steps_text(ss)}, left out"
        for left, why in (((ss.get("compile_steps") or []), "ran torch.compile's compiler"),
                          (idle, "launched no GPU work")):
            if left:
                basis += f"; step{'s' if len(left) > 1 else ''} {', '.join(map(str, left))} {why}, left out"
        lines.append(f"  CPU per step (median of {n} step{'s' if n != 1 else ''}{basis}) "
                     f"{format_duration_us(s['cpu_step_median_us'])}"
                     + (f"   GPU work launched per step (median) {format_duration_us(s['gpu_step_median_us'])}"
                        if s["has_gpu"] else ""))
    if ss.get("bound") in ("compute-bound", "copy-bound", "overhead-bound"):
        from ..explain import blocked_in
        wait = ss.get("sync_wait_us_per_step") or 0.0
        lines.append(f"  steady state: {ss['bound']}: {format_duration_us(ss['gpu_us_per_step'])} of GPU work launched "
                     f"per {format_duration_us(ss['cpu_us_per_step'])} of CPU per step"
                     + (f", {format_duration_us(wait)} of it blocked in {blocked_in(report.steps, ss)} while the GPU "
                        "worked" if wait > 0 else "")
                     + (f", {format_duration_us(ss['copy_us_per_step'])} of the GPU work copies between host and "
                        "device" if ss["bound"] == "copy-bound" else "")
                     + " (the same steps)" + (_compute_bound_why(ss) if ss["bound"] == "compute-bound"
                                        and ss["gpu_us_per_step"] < ss["cpu_us_per_step"] - wait else ""))
    if s["has_gpu"]:
        frac = s["gpu_busy_fraction"]
        # gpu_busy's scope: with steps, the work the steps launched (not what ran in their window from before them)
        what, window = (("GPU busy with the work the steps launched", "of their window")
                        if s.get("gpu_busy_scope") == "steps" else
                        ("GPU busy", "of the span from its first event to its last"))
        lines.append(f"  {what} {format_duration_us(s['gpu_busy_us'])}"
                     + (f" ({format_share(frac, 1)} {window})" if frac is not None else ""))
        lat = s["launch_latency_median_us"]
        if lat is None or lat >= 0:
            shown = format_duration_us(lat)
        else:  # (question 4's words for it)
            from ..explain import offset_text
            shown = f"{offset_text(lat)} (the trace's GPU and CPU times disagree)"
        lines.append(f"  launch call → GPU start (median, queueing included) {shown}   launch APIs: "
                     + (", ".join(s["launch_apis"]) or "none"))
    if s["compiled_regions_per_step"]:
        lines.append(f"  compiled regions per step {format_count(s['compiled_regions_per_step'])}"
                     + (f"   memcpy DtoD {s['memcpy_dtod']}" if s["has_gpu"] else ""))
    shares = s.get("time_by_category") or {}
    if s["has_gpu"] and shares:
        lines.append("  GPU time by category (share of the steady state's steps' windows, whatever launched the work; "
                     "where streams "
                     "overlap, an instant counts once, for the first category listed: communication is what nothing "
                     "else overlapped; unrecorded: a GPU's first recorded op waiting, after its launch call "
                     "returned (or, launched before the recording, after the recording began), behind work the "
                     "trace does not hold (queued before the recording began); idle: no GPU work the trace "
                     "recorded, nor such a wait): "
                     + ", ".join(f"{c} {format_share(v, 1)}" for c, v in shares.items() if v > 0))
    ph = report.summary.get("train_phases") or {}
    if ph:  # a training step: where each phase's time goes (medians of the steady state's steps)
        lines.append("  training phases (per step, median of the same steps): " + ", ".join(
            f"{name} {format_duration_us(v['cpu_us'])} CPU"
            + (f" / {format_duration_us(v['gpu_us'])} GPU, {format_count(v['kernels'])} "
               f"kernel{'s' if v['kernels'] != 1 else ''}"
               if s["has_gpu"] else "") for name, v in ph.items()))
    if work:
        lines.extend(_memory_lines(s.get("memory") or {}))
    ks = report.kernel_stats.head(5)
    if len(ks):
        lines.append("  kernels (by total time):")
        for r, name in zip(ks.itertuples(index=False), cut_apart([str(x) for x in ks["name"]], 70)):
            lines.append(f"    {r.count:>5}×  median {format_duration_us(r.median_us):>10}  min "
                         f"{format_duration_us(r.min_us):>10}  max {format_duration_us(r.max_us):>10}  {name}")
    if len(report.gemm_throughput):
        g = report.gemm_throughput
        on_cpu = int((g["device"] != "gpu").sum())  # (an op that launched no kernel is timed by its CPU time)
        timed = ("their GPU kernels' time" if not on_cpu else
                 ("their CPU time (no GPU in the trace)" if not s["has_gpu"] else "their CPU time (they launched no "
                  "GPU kernel)") if on_cpu == len(g) else
                 f"their GPU kernels' time ({on_cpu} that launched none: by their CPU time)")
        lines.append(f"  GEMM: median {format_rate(g['tflops'].median())} TFLOP/s over {len(g)} op(s), by {timed}"
                     + (f", {100 * g['fraction_of_peak'].median():.1f}% of peak" if g["fraction_of_peak"].notna().any()
                        else ""))
    lines.append("  findings:")
    for f in found:
        lines.append(f"    Q{f.question} {f.title}: {f.text}")
    if diagnosis is not None:
        p = diagnosis.peaks
        against = ("" if p is None else f" (against {p.device}'s datasheet peaks: no calibration of it here)"
                   if p.source == "datasheet" else f" (against {p.device}'s peaks measured {p.measured_at[:10]})")
        lines.append("  what to change" + (against or " (no calibration of this device: no fraction of peak)") + ":")
        for d in diagnosis.diagnoses:
            unit = "/step" if diagnosis.cost_unit == "per step" else " in the trace"
            cost = (f" [{format_duration_us(d.cost_us_per_step)}{unit}: {d.cost_basis}]" if d.cost_us_per_step is not None
                    else "")
            lines.append(f"    {d.title}: {d.text}{cost}")
            lines.append(f"      fix: {d.fix}")
        if not diagnosis.diagnoses:
            lines.append("    nothing the rules recognise")
    return lines  # printed by echo: each line is one line, whatever a kernel is named


def _memory_lines(mem: dict) -> list[str]:
    """The memory section: per device its peak allocated (and reserved) bytes, where it happened and what was
    allocated before the window; or why there is none and how to record it."""
    from ..analyses.memory import RELATIVE_BASES
    if not mem.get("devices"):
        return [f"  memory: {mem.get('note') or 'no [memory] events'}"]
    out = [f"  memory ({mem['events']:,} [memory] events):"]
    for dev, d in mem["devices"].items():
        line = f"    {dev}: peak {human_bytes(d['peak_allocated_bytes'])} allocated"
        if d["basis"] in RELATIVE_BASES:
            line += f" ({RELATIVE_BASES[d['basis']][0]}: the device's own peak is not in the trace)"
        if d.get("peak_reserved_bytes") is not None:
            line += f", {human_bytes(d['peak_reserved_bytes'])} reserved"
        if d.get("op"):
            line += f", at {d['op'] if len(d['op']) <= 60 else d['op'][:59] + '…'}"
        if d.get("step") is not None:
            line += f" in step {format_count(d['step'])}"
        if d["basis"] == "total" and d["first_allocated_bytes"]:
            line += f"; {human_bytes(d['first_allocated_bytes'])} already allocated when the window opened"
        out.append(line)
    return out


def run(args: argparse.Namespace) -> int:
    """Run the ``analyze`` subcommand; returns the exit status (0, or 2 when the trace cannot be read).

    The analyses' imports (pandas, most of a process's start) and the run's context are done while the trace loads
    (``open_trace``'s ``while_loading``)."""
    from ..trace import open_trace
    from ..trace._source import is_stream
    ctx: dict = {}

    def meanwhile() -> None:
        from ..analyses import Shared, analyze, ranks, step_processes, unparted, write_rank
        from ..explain.diagnosis import diagnose
        from ..explain.questions import findings
        ctx.update(analyze=analyze, diagnose=diagnose, findings=findings, Shared=Shared, step_processes=step_processes,
                   ranks=ranks, unparted=unparted, write_rank=write_rank)
        ctx["context"] = _run_context(args.path, args.peaks)

    rank, whole = None, ""
    try:
        with tempfile.TemporaryDirectory(prefix="profiling_core-rank-") as tmp:
            session = open_trace(args.path, engine=args.engine, while_loading=meanwhile)
            config, device, peaks, process_peak = ctx["context"]
            shared = ctx["Shared"](session)
            pids = ctx["step_processes"](session, shared)
            if len(pids) > 1 or (args.process is not None and not _is_pid(args.process, pids)):
                pid = pids[0] if args.process is None else _pid(args.process)
                if args.process is None or _is_pid(args.process, pids):  # (else write_rank says which pids hold steps)
                    whole = ctx["unparted"](ctx["ranks"](session, shared))
                    if not whole and is_stream(args.path):
                        whole = (f"{args.path} is a pipe or a device, which cannot be read a second time: save the "
                                 "trace to a file to read one rank")
                if whole and args.process is not None:
                    raise ValueError(f"cannot read process {args.process} on its own: {whole}")
                if not whole:
                    dst = os.path.join(tmp, "rank.json")
                    try:
                        rank = {**ctx["write_rank"](session, pid, dst, shared=shared), "processes": pids}
                    except ValueError as exc:  # (the file's pids do not say which events are whose)
                        if args.process is not None:
                            raise
                        whole = str(exc)
                    else:
                        session.close()
                        session = open_trace(dst, engine=session.engine)
                        shared = ctx["Shared"](session)
            report = ctx["analyze"](session, config=config, peak_tflops=args.peak_tflops, shared=shared)
            found = ctx["findings"](report, config)
            cc = device.get("compute_capability") if isinstance(device, dict) else None
            diagnosis = ctx["diagnose"](session, report, config, peaks,
                                        compute_capability=float(cc) if isinstance(cc, str) and _is_number(cc)
                                        else None, process_peak_bytes=process_peak)
            session.close()
    except (ProfilingError, OSError, ValueError) as exc:
        echo("error: " + " ".join(str(exc).split())[:500], file=sys.stderr)
        return 2
    finally:
        close = getattr(locals().get("session"), "close", None)
        if callable(close):
            close()
    if args.json:
        print(escaped(json.dumps(build_json(report, found, diagnosis, rank, whole), ensure_ascii=False)))
    else:
        echo(*_human(args.path, report, found, diagnosis, rank, whole))
    return 0


def _pid(text: str):
    """A ``--process`` value as a trace's pid: an integer where it reads as one, else the text itself."""
    t = text.strip()
    return int(t) if t.lstrip("+-").isdigit() and t.isascii() else text


def _is_pid(text: str, pids: list) -> bool:
    from ..trace import same_pid
    want = _pid(text)
    return any(same_pid(p, want) for p in pids)


def _compute_bound_why(ss: dict) -> str:
    """Why a steady state with less GPU work than CPU time is compute-bound, in question 2's terms (the bound rule's
    other test): every step is, on its own figures, where their medians are not; or the GPU never sat idle with nothing
    launched for it (a full launch queue: the CPU's time follows the GPU's)."""
    if ss.get("bound_of_every_step"):
        return ", each step compute-bound by the rule on its own figures, though their medians are not (question 2)"
    starved = ss.get("starved_share") or 0.0
    return (", yet the GPU never waited for a launch: it "
            + ("never sat idle with nothing launched for it" if starved < 0.0005 else
               f"sat idle with nothing launched for it only {format_share(starved, 1)} of the step") + " (question 2)")


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _run_context(path: str, peaks_file: Optional[str]):
    """(config, device facts, peaks, the process's peak device memory) for a trace: from its run's meta.json when it
    sits in a run store folder (``peak_device_memory_bytes``), and the calibration ``peaks_file`` or else the store's
    newest calibration of that device (None where unknown)."""
    from pathlib import Path

    from ..store.files import read_json_object
    from ..store.peaks import DevicePeaks, PeakBook
    from ..store.runs import TRACE_FILE, TRACE_GZ_FILE, RunStore
    config, device, peaks, store_root, process_peak = None, {}, None, None, None
    trace = Path(path)
    if trace.name in (TRACE_FILE, TRACE_GZ_FILE) and (trace.parent / "meta.json").is_file():
        store_root = trace.parent.parent
        try:
            run = RunStore(store_root).load(trace.parent.name)
            config, device = run.config, run.meta.get("device") if isinstance(run.meta.get("device"), dict) else {}
            process_peak = run.process_peak_bytes
        except (ProfilingError, OSError, ValueError, TypeError, KeyError):
            config, device = None, {}
    if peaks_file is not None:  # read as the store reads its calibrations: a FIFO or /dev/zero is refused unread
        data, why = read_json_object(Path(peaks_file), f"--peaks {peaks_file}", PeakBook.MAX_BYTES,
                                     PeakBook.MAX_DEPTH)
        if why is not None:
            raise ValueError(why)
        try:
            peaks = DevicePeaks.from_dict(data)
        except ValueError as e:
            raise ValueError(f"--peaks {peaks_file}: {e}") from None
    elif store_root is not None and device.get("name"):
        peaks = PeakBook(store_root).find(device["name"], torch_version=device.get("torch"))
    return config, device, peaks, process_peak


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point of ``python -m profiling_core.cli.analyze``."""
    parser = _configure(argparse.ArgumentParser(prog="python -m profiling_core.cli.analyze",
                                                description=DESCRIPTION))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    from ._process import leaving, starting_analyze
    starting_analyze()
    rc = main()
    leaving()
    sys.exit(rc)
