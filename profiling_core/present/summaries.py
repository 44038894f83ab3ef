"""Tables and labels for people about runs: the runs list, a run's configuration on one line, its mode and size, its
median step, the device calibrations, and each run's GEMM against its device's measured peak.

Plain data in (a :class:`~profiling_core.store.Run` and its meta.json, its :class:`~profiling_core.analyses.Report`,
its :class:`~profiling_core.explain.DiagnosisReport`, a calibration's :class:`~profiling_core.store.DevicePeaks`),
DataFrames, dicts and text out. The app's pages show them through thin cached wrappers; a notebook or a script calls
them directly::

    >>> from profiling_core import RunStore, analyze, open_trace
    >>> from profiling_core.present import runs_table, step_summary
    >>> runs, corrupt = runs_table(RunStore().list())                       # doctest: +SKIP
    >>> run = RunStore().load(runs["run_id"].iloc[0])                       # doctest: +SKIP
    >>> step_summary(run, analyze(open_trace(run.trace_path), run.config))  # doctest: +SKIP

:func:`config_summary` is Streamlit Markdown, every name in it escaped (``present.markdown``); the rest is plain.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

import pandas as pd

from ..store.machines import comparable_config, machine_of
from ..units import format_duration_us, format_share, human_bytes
from ..workloads import get_workload
from .markdown import md_code, md_text
from .terminal import terminal_safe

if TYPE_CHECKING:
    from ..analyses import Report
    from ..explain import DiagnosisReport
    from ..store import DevicePeaks, Run

__all__ = ["RUNS_COLUMNS", "runs_table", "run_labels", "newest_run", "store_size_text", "config_summary",
           "mode_label", "run_size", "STEP_SUMMARY_COLUMNS", "step_summary", "step_summaries", "peaks_frame",
           "GEMM_VS_PEAK_COLUMNS", "gemm_vs_peak", "comparison_warnings", "STEP_KINDS", "step_kind",
           "different_work", "run_size_axis", "size_axis_title", "crossover_sentence", "sweep_bounds",
           "bound_sentence", "PHASE_SUMMARY_COLUMNS", "phase_summary"]

RUNS_COLUMNS = ["run_id", "name", "source", "status", "started_at", "workload", "size", "dtype", "compile", "warmup",
                "active", "device", "machine", "wall_s"]
"""The columns of :func:`runs_table`'s readable runs."""


def runs_table(runs: Iterable[Run]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs as two tables, in the order given (``RunStore.list()``: newest first).

    Returns:
        (readable runs: :data:`RUNS_COLUMNS`, one row each, ``started_at`` as ``YYYY-MM-DD HH:MM:SS``, ``size`` only
        for matmul_add, ``workload`` empty for an imported trace, ``machine`` the label of
        ``store.machine_of(run)`` (``unknown machine`` for an imported trace); runs whose meta.json cannot be used:
        ``run_id`` and ``problem``, why).
    """
    rows, corrupt = [], []
    for run in runs:
        if run.problem is not None:
            corrupt.append({"run_id": run.run_id, "problem": run.problem})
            continue
        cfg = run.meta.get("config") or {}
        device = run.meta.get("device") or {}
        rows.append({
            "run_id": run.run_id, "name": run.name, "source": run.meta.get("source", ""),
            "status": run.status, "started_at": str(run.meta.get("started_at", ""))[:19].replace("T", " "),
            "workload": cfg.get("workload") or ("matmul_add" if cfg else ""),
            "size": cfg.get("size") if not cfg.get("workload") or cfg.get("workload") == "matmul_add" else None,
            "dtype": cfg.get("dtype"), "compile": cfg.get("compile"),
            "warmup": cfg.get("warmup"), "active": cfg.get("active"),
            "device": device.get("name") or device.get("type") or cfg.get("device") or "",
            "machine": machine_of(run).label,
            "wall_s": (run.meta.get("timings") or {}).get("wall_s"),
        })
    return pd.DataFrame(rows, columns=RUNS_COLUMNS), pd.DataFrame(corrupt, columns=["run_id", "problem"])


def run_labels(runs: pd.DataFrame) -> dict[str, str]:
    """{run id: ``name  ·  started at  ·  the id's last four characters``} for :func:`runs_table`'s runs (a run
    picker's labels: two runs of one name tell apart by their time and id)."""
    return {r.run_id: f"{r.name}  ·  {r.started_at}  ·  {r.run_id[-4:]}" for r in runs.itertuples()}


def _newest_of(runs: pd.DataFrame, warm: bool) -> Optional[str]:
    for _, r in runs.iterrows():
        if pd.notna(r["warmup"]):
            if (r["warmup"] > 0) == warm:
                return r["run_id"]
        elif ("_warm_" in str(r["name"])) == warm:
            return r["run_id"]
    return None


def newest_run(runs: pd.DataFrame, *, warm: bool, like: Optional[str] = None,
               settings: Optional[dict] = None) -> Optional[str]:
    """The newest of :func:`runs_table`'s ``runs`` (newest first) profiled warm (warm-up calls > 0) or cold; an
    imported trace counts as warm when its name says ``_warm_``.

    Args:
        like: a run id: only other runs like it are candidates (a cold/warm comparison compares like with like):
            the same setting but for warm-up and schedule where ``settings`` gives each run's (``{run id:
            setting_parts(run, besides=("warm-up", "schedule"))}``: the same machine, workload, dtype, knobs and
            mode), else the same workload, size and dtype; none is offered when no other run is like it.

    Returns:
        The run id, or None when no run is profiled so.
    """
    if like is not None:
        ref = runs[runs["run_id"] == like]
        if not len(ref):
            return None
        same = runs[runs["run_id"] != like]
        if settings is not None:
            same = same.loc[[settings.get(r) == settings.get(like) for r in same["run_id"]]]
        else:
            for col in ("workload", "size", "dtype"):
                if col in runs.columns:
                    v = ref[col].iloc[0]
                    same = same[same[col].isna()] if pd.isna(v) else same[same[col] == v]
        runs = same
    return _newest_of(runs, warm)


def store_size_text(n_runs: int, size_bytes: float) -> str:
    """How much a run store holds, for people: ``"3 runs, 1.2 MiB"``."""
    return f"{n_runs} run{'s' if n_runs != 1 else ''}, {human_bytes(size_bytes)}"


def config_summary(run: Run) -> str:
    """The run's configuration on one line of Streamlit Markdown (names escaped): its name, what it ran, warm or cold,
    eager or the compile mode, the profiler's schedule, the device (and a CPU's threads); for an imported trace, the
    file it came from."""
    cfg = run.config
    dev = (run.meta.get("device") or {})
    where = dev.get("name") or dev.get("type") or ""
    if cfg is None:
        return f"imported trace {md_code(run.meta.get('original_filename', run.name), 120)}"
    sched = f"schedule {cfg.wait}/{cfg.warmup_steps}/{cfg.active}×{cfg.repeat}"
    threads = f" · {dev['cpu_threads']} CPU threads" if dev.get("type") == "cpu" and dev.get("cpu_threads") else ""
    if cfg.is_matmul_add:
        what = (f"{cfg.size}² {cfg.dtype}{' · batch ' + str(cfg.batch) if cfg.batch else ''} · {cfg.bias} bias")
    else:
        what = (f"{md_text(cfg.workload)} · {cfg.dtype} · "
                + ", ".join(f"{md_text(k)} {md_text(str(v))}" for k, v in cfg.workload_knobs.items()))
    return (f"{md_code(cfg.name)} · {what} · "
            f"{'warm (' + str(cfg.warmup) + ' calls)' if cfg.warmup else 'cold'} · "
            f"{'eager' if cfg.compile == 'off' else 'compile ' + cfg.compile} · {sched} · {md_code(where)}{threads}")


def mode_label(run: Run, report: Optional[Report] = None) -> str:
    """``eager``, or the torch.compile mode (``default``, ``reduce-overhead``, ...) from the run's config.

    An imported trace has no config: its mode is read from ``report``'s compiled regions (``compile``, or
    ``compile (CUDA graphs)`` when a compiled graph is replayed with a graph launch: a trace that replays graphs
    with no compiled region is ``eager``, its graphs captured by hand; per step, or over the whole trace where it has
    no steps), which it then needs.
    """
    cfg = run.config
    if cfg is not None:
        return "eager" if cfg.compile == "off" else cfg.compile
    if report is None:
        raise ValueError(f"run {run.run_id} has no config: its mode is read from its report, pass it")
    from ..analyses import GRAPH_LAUNCHES
    cb = report.compile_breakdown
    if len(cb):
        regions, graphs = cb["compiled_regions"].sum() > 0, cb["graph_launches"].sum() > 0
    else:  # (no steps: the whole trace's rows, which the profiler table holds)
        t = report.profiler_table
        names = t.loc[t["lane"] == "cpu", "name"].astype(str) if len(t) else pd.Series([], dtype=str)
        regions, graphs = names.str.startswith("Torch-Compiled Region").any(), names.isin(GRAPH_LAUNCHES).any()
    if not regions:
        return "eager"
    return "compile (CUDA graphs)" if graphs else "compile"


_SETTING_NAMED = ("workload", "knobs", "size", "batch", "bias", "dtype", "matmul_precision", "warmup", "compile",
                  "wait", "warmup_steps", "active", "repeat")
"""The config fields :func:`setting_parts` names in parts of their own (matmul_add's size, batch and bias as its
knobs, as every workload's)."""


def setting_parts(run: Run, report: Optional[Report] = None, besides: Iterable[str] = ()) -> dict[str, str]:
    """What a run measured, part by part, as plain text (escape it where it is rendered): two runs are repeats of
    one setting, or points of one curve, only where every part but those ``besides`` names is the same.

    Parts, as the dict's keys in this order: ``where`` (the machine, :func:`~profiling_core.store.machine_of`, and
    whether the trace holds GPU work: a CPU-only trace of a GPU host is another measurement), ``workload``,
    ``dtype``, ``knob <name>`` for each knob of the workload that has a value and applies to the others' values (a
    decode block's ``seq_len`` does not; the size knob is left out when ``besides`` holds ``size``), ``precision``
    (``torch.set_float32_matmul_precision`` when not ``highest``),
    ``warm-up`` (``cold``, or ``warm`` with its calls), ``schedule`` (the profiler's wait/warmup/active×repeat:
    which steps are recorded, so whether the first recorded one carries start-up effects), ``mode``
    (:func:`mode_label`; left out when ``besides`` holds ``mode``), and ``option <name>`` for every other field that
    :func:`~profiling_core.store.machines.comparable_config` compares (CPU threads, the profiler's options): the
    config's parts are that function's fields, so a setting is a comparable config on one machine. An imported trace
    has no config: its parts are ``where`` (from ``report``: GPU work or not, and the GPUs the trace names),
    ``workload`` ``imported trace``, its size where its name gives one (:func:`run_size`), whether its steps' GEMMs are batched (``knob gemm``, from
    ``report``: ``aten::bmm`` is other work than ``aten::mm`` at one size, whatever the mode) and its mode; what else
    it ran is unknown."""
    besides = set(besides)
    cfg = run.config
    gpu = report.has_gpu if report is not None else (run.meta.get("device") or {}).get("type") == "cuda"
    parts = {"where": f"{machine_of(run).label}{'' if gpu else ' (no GPU work)'}"}
    if cfg is None and gpu and report is not None:  # (an imported trace names its GPUs: an H100's is no H200's)
        names = sorted({str(d.get("name")) for d in report.summary.get("devices") or [] if d.get("name")})
        if names:
            parts["where"] += f" ({', '.join(names)})"
    if cfg is None:
        parts["workload"] = "imported trace"
        size = run_size(run)  # (from a name like 64_bf16_warm_eager, as the sweep pages read it)
        if size is not None and "size" not in besides:
            parts["knob size"] = f"size {size}"
        gemm = _step_gemm_kind(report) if report is not None else ""
        if gemm:  # (what its steps ran: a batched GEMM, aten::bmm, is other work than aten::mm at the same size)
            parts["knob gemm"] = gemm
    else:
        parts.update({"workload": cfg.workload, "dtype": cfg.dtype})
        knobs = get_workload(cfg.workload).applicable(cfg.workload_knobs)  # (a decode block has no seq_len)
        parts.update({f"knob {k}": f"{k} {v}" for k, v in knobs.items()
                      if v is not None and not ("size" in besides and k == cfg.size_knob)})
        parts.update({"precision": "" if cfg.matmul_precision == "highest" else f"matmul {cfg.matmul_precision}",
                      "warm-up": f"warm ({cfg.warmup} calls)" if cfg.warmup else "cold",
                      "schedule": f"schedule {cfg.wait}/{cfg.warmup_steps}/{cfg.active}×{cfg.repeat}"})
    if "mode" not in besides and (cfg is not None or report is not None):
        parts["mode"] = mode_label(run, report)
    if cfg is not None:  # every other field the store compares configs by
        parts.update({f"option {k}": f"{k} {v}" for k, v in (comparable_config(run) or {}).items()
                      if k not in _SETTING_NAMED})
    return {k: v for k, v in parts.items() if k not in besides and v != ""}


_BATCHED_GEMMS = ("aten::bmm", "aten::baddbmm")


def _step_gemm_kind(report: Report) -> str:
    """"batched GEMM" where the steady state's steps ran a batched GEMM op (``aten::bmm``, ``aten::baddbmm``) on the
    threads that run them (``cpu_own_times``, less the calls beside the steps and inside torch.compile's compiler),
    else "unbatched GEMM" where they ran another of ``analyses.GEMM_OPS``, else "" (no GEMM, or no steps). Not the
    op itself: torch.compile turns mm + add into addmm, which is no other setting. A trace without steps is read
    whole (its profiler table's CPU rows)."""
    from ..analyses import GEMM_OPS, measured_steps
    own, table = report.cpu_own_times, report.profiler_table
    if len(report.steps) and not own.empty:
        basis = set(measured_steps(report.steps)["step"].tolist())
        ran = own[own["step"].isin(basis) & (own["calls"] - own["beside_calls"] - own["compile_calls"] > 0)]
        names = ran["name"]
    else:
        names = table.loc[table["lane"] == "cpu", "name"] if len(table) else table.get("name", [])
    ops = set(pd.Series(names, dtype=object).astype(str)) & set(GEMM_OPS)
    return "batched GEMM" if ops & set(_BATCHED_GEMMS) else "unbatched GEMM" if ops else ""


def setting_labels(parts: Iterable[dict[str, str]]) -> list[str]:
    """One label per run of :func:`setting_parts` dicts, naming only the parts in which the runs differ (``warm (10
    calls)`` against ``cold``; ``batch 8`` where one run has a batch the others have not); "" for every run when all
    are alike, "—" for a run that has none of the differing parts."""
    parts = list(parts)
    order = ("where", "workload", "dtype", "knob", "precision", "warm-up", "schedule", "mode", "option")
    keys = sorted((k for k in dict.fromkeys(k for p in parts for k in p) if len({p.get(k, "") for p in parts}) > 1),
                  key=lambda k: order.index(k.split(" ")[0]) if k.split(" ")[0] in order else len(order))
    return [(" · ".join(p[k] for k in keys if p.get(k)) or "—") if keys else "" for p in parts]


def chain_lines(chain: pd.DataFrame, max_rows: int | None = None) -> list[str]:
    """One step's dispatch chain (:func:`~profiling_core.analyses.dispatch_chain`, or a part of it,
    :func:`~profiling_core.analyses.chain_subtree`) as indented lines of plain text, in tree order: each slice under its
    parent, siblings in time order, each GPU op right under the call that launched it (``name  [category or GPU,
    µs]``, the name's control characters as visible escapes, so each slice is one line). A row whose parent is not in
    ``chain`` starts a tree of its own. With ``max_rows``, the first that many
    rows, then one line saying how many more there are."""
    ids = chain["id"].astype("int64").tolist()
    present = set(ids)
    kids: dict = {}
    roots = []
    rows = sorted(chain.itertuples(index=False), key=lambda r: (int(r.start_ns) if pd.notna(r.start_ns) else 0,
                                                               r.lane != "cpu"))
    for r in rows:
        p = r.parent_id
        if pd.notna(p) and int(p) in present and int(p) != int(r.id):
            kids.setdefault(int(p), []).append(r)
        else:
            roots.append(r)
    lines: list[str] = []
    total = len(ids)
    stack = [(r, 0) for r in reversed(roots)]
    while stack and (max_rows is None or len(lines) < max_rows):
        r, d = stack.pop()
        where = "GPU" if r.lane == "gpu" else r.category
        # (a name's control characters shown as escapes: a newline in a name would start a line of its own)
        name = terminal_safe(str(r.name)[:90])
        lines.append(f"{'   ' * d}{'└─ ' if d else ''}{name}  [{where}, {r.dur_us:,.1f} µs]")
        stack.extend((k, d + 1) for k in reversed(kids.get(int(r.id), ())))
    if len(lines) < total:
        lines.append(f"… and {total - len(lines):,} more rows: start the chain at one op above to read its part, or "
                     "take the chart's CSV for all of them")
    return lines


STEP_KINDS = {"forward": "a forward pass", "decode": "a decode (a prefill, then one forward per new token against a "
               "KV cache)", "train": "a training step (forward, loss, backward, optimizer step, zero_grad)"}
"""What one profiler step runs (``Workload.step_kind``), in words."""


def step_kind(run: Run, report: Report | None = None) -> str:
    """What one profiler step of the run runs: ``forward``, ``decode`` or ``train`` (``Workload.step_kind`` of its
    config). An imported trace has no config: ``train`` when ``report`` finds training phases in it (the
    profiler's own backward and optimizer annotations), else ``forward``."""
    cfg = run.config
    if cfg is not None:
        return get_workload(cfg.workload).step_kind(cfg.workload_knobs)
    if report is None:
        raise ValueError(f"run {run.run_id} has no config: what its steps run is read from its report, pass it")
    return "train" if report.has_phases else "forward"


def different_work(items: Iterable[tuple[str, Run, Report]]) -> str | None:
    """What must be said where runs whose steps run different work are compared (a forward pass against a
    training step, a prefill against a decode), as plain text; None when every run's step runs the same kind of
    work. ``items``: (label, run, its report), e.g. ``("A", run_a, report_a)``."""
    kinds = [(label, step_kind(run, rep)) for label, run, rep in items]
    if len({k for _l, k in kinds}) < 2:
        return None
    (first, k0), *rest = kinds
    others = " and ".join(f"{label} {STEP_KINDS[k]}" for label, k in rest)
    return (f"{first} runs {STEP_KINDS[k0]} per step and {others}: their per-step times measure different work, "
            "not the same work done faster or slower. Compare them phase by phase, or against a run of the same "
            "kind.")


PHASE_SUMMARY_COLUMNS = ["run", "phase", "cpu_us", "gpu_us", "kernels"]
"""The columns of :func:`phase_summary`."""


def phase_summary(items: Iterable[tuple[str, Report]]) -> pd.DataFrame:
    """Each training run's median step by phase (``Report.summary["train_phases"]``: data, forward, backward,
    optimizer, zero_grad, other), one row per (run, phase) in the phases' order: :data:`PHASE_SUMMARY_COLUMNS`. ``items``:
    (label, report); a run without phases (a forward pass) has no rows."""
    rows = [{"run": label, "phase": ph, **figures} for label, rep in items
            for ph, figures in (rep.summary.get("train_phases") or {}).items()]
    return pd.DataFrame(rows, columns=PHASE_SUMMARY_COLUMNS)


def run_size_axis(run: Run) -> str | None:
    """The axis :func:`run_size` is measured along: ``"<workload> <knob>"`` (``matmul_add size``, ``causal_lm
    new_tokens``, ``causal_lm seq_len``); an imported trace named like a matmul_add run (``64_fp32_warm_eager``) is
    ``matmul_add size``; None where the run has no size."""
    cfg = run.config
    if cfg is not None:
        return f"{cfg.workload} {cfg.size_knob}" if cfg.size_knob and run_size(run) is not None else None
    return "matmul_add size" if run_size(run) is not None else None


def size_axis_title(axis: str | None) -> tuple[str, str]:
    """(axis title, the size's symbol in a sentence) of a :func:`run_size_axis`: matmul_add's is ``matrix size n
    (n×n)`` and ``n``; another's names its knob and workload (``new_tokens (causal_lm)``, ``new_tokens``)."""
    if not axis or axis == "matmul_add size":
        return "matrix size n (n×n)", "n"
    workload, _, knob = axis.partition(" ")
    return f"{knob} ({workload})", knob


def crossover_sentence(point, axis: str | None) -> str:
    """What a crossing of the size sweep's two curves says (a row of ``charts.crossover_points``: ``below``,
    ``above``, ``size``, ``value_us``, ``overtakes``), along the sweep's ``axis`` (:func:`size_axis_title`'s symbol):
    between which measured sizes GPU busy time per step overtakes (or falls below) CPU time per step, where the
    log-log interpolation puts it, and that it says nothing of the sizes between where they lie far apart."""
    sym = size_axis_title(axis)[1]
    return (f"GPU busy time per step "
            f"{'overtakes CPU time per step' if point['overtakes'] else 'falls below CPU time per step'} between "
            f"{sym} = {point['below']:,.0f} and {sym} = {point['above']:,.0f}, near {sym} ≈ {point['size']:,.0f} by "
            f"log-log interpolation (~{format_duration_us(point['value_us'])} per step)"
            + ("; the sizes between were not measured, and the curves may cross anywhere among them: run "
               "some to place it." if point["above"] > 2 * point["below"] else "."))


def sweep_bounds(runs: pd.DataFrame, keys=("size", "mode")) -> pd.DataFrame:
    """Question 2's verdict at each point of a sweep: per ``keys`` of ``runs`` (rows of :func:`step_summaries`), the
    ``bound`` its runs share, or ``mixed (…)`` with their counts where they differ; None where none of its runs has
    one (no GPU lane, no steps)."""
    def one(b: pd.Series):
        counts = b.dropna().value_counts()
        if counts.empty:
            return None
        if len(counts) == 1:
            return str(counts.index[0])
        return "mixed (" + ", ".join(f"{int(n)} {k}" for k, n in counts.items()) + ")"
    if runs is None or len(runs) == 0:
        return pd.DataFrame(columns=[*keys, "bound"])
    return runs.groupby(list(keys), sort=True, dropna=False)["bound"].agg(one).rename("bound").reset_index()


def _sizes_text(sym: str, sizes: list) -> str:
    return (f"{sym} = {sizes[0]:,.0f}" if len(sizes) == 1 else f"{sym} = {sizes[0]:,.0f} and {sym} = {sizes[1]:,.0f}"
            if len(sizes) == 2 else f"the {len(sizes)} sizes from {sym} = {sizes[0]:,.0f} to {sym} = {sizes[-1]:,.0f}")


def bound_sentence(curve: pd.DataFrame, axis: str | None) -> str | None:
    """What question 2's rule (``analyses.steps.bound``, one run at a time) says along one curve of a size sweep:
    its verdict at each measured size (``curve``: rows of one curve, ``size`` and :func:`sweep_bounds`' ``bound``),
    between which sizes it changes, and, at each size where the two curves read otherwise (GPU busy time per step at
    least the CPU time per step, or not, against the rule's GPU-paced verdict, or not), why: the rule takes the
    time the CPU blocked waiting for the GPU (``cpu_us_per_step`` less ``cpu_own_us_per_step``) out of the CPU's
    time, so a loop that synchronizes every step can be compute-bound with its GPU curve below its CPU curve; any
    other reason is question 2's to give on that run. On a curve of CPU runs (no GPU lane: NaN GPU busy time) the
    rule is the CPU's (``explain.cpu_bound``), and its evidence at each size the share of a step in work ops
    (``cpu_work_share``, where the curve has it). None where no size of the curve has a verdict."""
    from ..analyses.steps import CPU_MATH_BOUND_AT, GPU_PACED
    sym = size_axis_title(axis)[1]
    rows = curve.dropna(subset=["bound"]).sort_values("size")
    rows = rows[rows["bound"] != "no-gpu"]
    if rows.empty:
        return None
    groups: list[tuple[str, list]] = []
    for size, b in zip(rows["size"].tolist(), rows["bound"].tolist()):
        if groups and groups[-1][0] == b:
            groups[-1][1].append(size)
        else:
            groups.append((b, [size]))
    on_cpu = "gpu_busy_us_per_step" not in rows or bool(rows["gpu_busy_us_per_step"].isna().all())
    rule = (f"Question 2's rule on a CPU (each run's work ops' own time against its step: compute-bound from "
            f"{100 * CPU_MATH_BOUND_AT:.0f}% of the step)" if on_cpu
            else "Question 2's rule (each run's GPU work per step against the CPU's own time)")
    said = (f"{rule} calls the step "
            + (f"{groups[0][0]} at every size of this curve ({_sizes_text(sym, groups[0][1])})"
               if len(groups) == 1 and len(groups[0][1]) > 1
               else "; ".join(f"{b} at {_sizes_text(sym, sz)}" for b, sz in groups)))
    turns = [f"{b} between {sym} = {prev[-1]:,.0f} and {sym} = {sz[0]:,.0f}"
             for (_, prev), (b, sz) in zip(groups, groups[1:])]
    said += (f": it turns {' and back '.join(turns)}." if turns else ".")
    if on_cpu:
        shares = rows.dropna(subset=["cpu_work_share"]) if "cpu_work_share" in rows else rows.iloc[:0]
        if len(shares):
            said += (" The work ops took " + ", ".join(f"{format_share(x, 1)} of a step at {sym} = {z:,.0f}" for z, x
                                                       in zip(shares["size"], shares["cpu_work_share"])) + ".")
        return said
    waits, others = [], []
    for _, r in rows.iterrows():
        if str(r["bound"]).startswith("mixed") or pd.isna(r["gpu_busy_us_per_step"]):
            continue
        paced, crossed = r["bound"] in GPU_PACED, r["gpu_busy_us_per_step"] >= r["cpu_us_per_step"]
        if paced == crossed:
            continue
        wait = r["cpu_us_per_step"] - r["cpu_own_us_per_step"]
        if paced and wait > 0:
            waits.append(f"at {sym} = {r['size']:,.0f}, {format_duration_us(wait)} of the step's "
                         f"{format_duration_us(r['cpu_us_per_step'])} of CPU time, leaving "
                         f"{format_duration_us(r['cpu_own_us_per_step'])} of the CPU's own against "
                         f"{format_duration_us(r['gpu_busy_us_per_step'])} of GPU work")
        else:
            others.append(f"{sym} = {r['size']:,.0f}")
    if waits:
        said += (" Where the GPU busy curve stays under the CPU curve yet the rule finds the GPU setting the pace, "
                 "the CPU time holds the time the CPU blocked waiting for the GPU (in synchronize calls and in "
                 "copies to or from pageable memory), which the GPU's pace sets: " + "; ".join(waits) + ".")
    if others:
        said += (f" At {' and '.join(others)} the curves read otherwise than the rule: question 2 on "
                 f"{'that run' if len(others) == 1 else 'those runs'} says why.")
    return said


def run_size(run: Run) -> Optional[int]:
    """The run's size along its workload's sweep axis (``size`` for matmul_add, e.g. ``seq_len`` for attention;
    None for a script); for an imported trace, the leading number of its name (``64_fp32_warm_eager``: 64)."""
    cfg = run.config
    if cfg is not None:
        knob = cfg.size_knob
        value = cfg.workload_knobs.get(knob) if knob else None
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    head = run.name.split("_", 1)[0]
    return int(head) if head.isdecimal() else None  # (isdigit() also takes "²", which int() refuses)


STEP_SUMMARY_COLUMNS = ["run_id", "name", "machine", "axis", "size", "step", "mode", "steps", "cpu_us_per_step",
                        "cpu_own_us_per_step", "cpu_work_share", "gpu_busy_us_per_step", "gpu_busy_fraction",
                        "launches_per_step", "gpu_ops_per_step", "has_gpu", "bound"]
"""The keys of :func:`step_summary`, the columns of :func:`step_summaries`."""


def step_summary(run: Run, report: Report) -> dict:
    """One run's median step: CPU µs, GPU busy µs (of the ops it launched), the share of its wall time the GPU was
    busy (question 2's ``busy_in_window``: running recorded work, or a first op waiting behind work queued before the
    recording), launches and GPU ops; with the run's name, its machine's label (``store.machine_of``), size
    (:func:`run_size`) and its axis (:func:`run_size_axis`), what a step runs (:func:`step_kind`) and mode
    (:func:`mode_label`). The medians are over the steady state's steps, as the report's summary and every per-step
    figure take them (``analyses.measured_steps``: an empty step is no step of the loop, the first of 3 or more carries
    start-up effects, a compile is no step's cost). NaN medians when the trace has no ProfilerStep,
    and NaN GPU figures (busy, share, launches, GPU ops) when it has no GPU lane: nothing was there to count, which a
    0 would not say. ``bound`` is question 2's verdict on the same steps: with a GPU lane, ``analyses.steady_state``'s,
    with ``cpu_own_us_per_step``, the CPU time per step less the time it blocked waiting for the GPU, which the
    verdict weighs the GPU work against; without one, the CPU's rule (``explain.cpu_bound``), with
    ``cpu_work_share``, the median share of a step in the ops that do the work, which that verdict reads. None, and
    NaN, where a run has no steps (or, on a CPU, no work op in them)."""
    from ..analyses import measured_steps, steady_state
    st_ = measured_steps(report.steps) if len(report.steps) else report.steps
    med = (lambda c: float(st_[c].median())) if len(st_) else (lambda c: float("nan"))
    gpu = med if report.has_gpu else (lambda c: float("nan"))
    ss = (report.summary.get("steady_state") or steady_state(report.steps)) if report.has_gpu and len(st_) else {}
    own, share = ss.get("cpu_own_us_per_step"), None
    if not report.has_gpu and len(st_):
        from ..explain import cpu_bound
        ss = cpu_bound(report)
        share = ss["cpu_work_share"]
    return {"run_id": run.run_id, "name": run.name, "machine": machine_of(run).label, "axis": run_size_axis(run),
            "size": run_size(run), "step": step_kind(run, report), "mode": mode_label(run, report),
            "steps": len(report.steps), "cpu_us_per_step": med("cpu_dur_us"),
            "cpu_own_us_per_step": float(own) if own is not None else float("nan"),
            "cpu_work_share": float(share) if share is not None else float("nan"),
            "gpu_busy_us_per_step": gpu("gpu_busy_us"),
            # (question 2's figure: the GPU busy with recorded work, or a first op waiting behind work queued
            # before the recording; the steps' own column counts only the first)
            "gpu_busy_fraction": (float(ss["busy_in_window"]) if report.has_gpu and ss.get("busy_in_window") is not None
                                  else gpu("gpu_busy_fraction")), "launches_per_step": gpu("launches"),
            "gpu_ops_per_step": gpu("gpu_ops"), "has_gpu": report.has_gpu, "bound": ss.get("bound")}


def step_summaries(items: Iterable[tuple[Run, Report]]) -> pd.DataFrame:
    """:func:`step_summary` of each (run, its report), one row each in the order given."""
    return pd.DataFrame([step_summary(run, rep) for run, rep in items], columns=STEP_SUMMARY_COLUMNS)


def peaks_frame(peaks: Iterable[DevicePeaks]) -> pd.DataFrame:
    """One row per (calibration, GEMM dtype or memory): the measured best and median, its unit, and the vendor's
    datasheet figure beside where it is known (never used instead)."""
    rows = []
    for p in peaks:
        sheet = p.datasheet() or {}
        for d, t in p.gemm_tflops.items():
            rows.append({"device": p.device, "torch": p.torch_version, "measured": p.measured_at[:16],
                         "what": f"GEMM {d} ({p.gemm_sizes.get(d)}³)", "measured best": t,
                         "median": p.gemm_tflops_median.get(d), "unit": "TFLOP/s",
                         "datasheet": (sheet.get("tflops") or {}).get(d)})
        rows.append({"device": p.device, "torch": p.torch_version, "measured": p.measured_at[:16],
                     "what": f"memory (copy of {p.copy_bytes / 2**20:,.0f} MiB)", "measured best": p.bandwidth_gbs,
                     "median": p.bandwidth_gbs_median, "unit": "GB/s", "datasheet": sheet.get("bandwidth_gbs")})
    return pd.DataFrame(rows, columns=["device", "torch", "measured", "what", "measured best", "median", "unit",
                                       "datasheet"])


GEMM_VS_PEAK_COLUMNS = ["run", "run_id", "machine", "size", "mode", "dtype", "kernel", "shape", "µs per call", "tflops",
                        "peak", "roof",
                        "compute_peak", "fraction_of_peak", "peak_source"]
"""The columns of :func:`gemm_vs_peak`."""


def gemm_vs_peak(items: Iterable[tuple[Run, Optional[Report], DiagnosisReport]]) -> pd.DataFrame:
    """Per (run, its report, its diagnosis): its GEMM, the GEMM row of the diagnosis's roofline with the most total
    time (µs per call × calls), against its device's peaks: :data:`GEMM_VS_PEAK_COLUMNS` (run name, id, its machine's
    label (``store.machine_of``), size, mode, dtype, kernel, ``shape`` (:func:`_gemm_shape`: which GEMM it is,
    since two runs' largest can differ), µs per call, achieved TFLOP/s, ``peak``: the roof it is judged by (min of
    the dtype's compute peak and intensity × bandwidth), ``roof``: which one, ``compute_peak``: the dtype's peak, the fraction of ``peak``,
    ``peak_source``: ``measured`` or ``datasheet``, ``DevicePeaks.source``, None without peaks). Runs without a GEMM of
    known FLOPs are left out. The report is read only for an imported trace's mode (:func:`mode_label`): None will
    do for a run with a config."""
    rows = []
    for run, rep, diag in items:
        roof = diag.roofline
        g = roof[roof["kind"] == "gemm"] if len(roof) else roof
        if g.empty:
            continue
        top = g.assign(total=g["time_us"] * g["count"]).sort_values("total", ascending=False).iloc[0]
        rows.append({"run": run.name, "run_id": run.run_id, "machine": machine_of(run).label, "size": run_size(run), "mode": mode_label(run, rep),
                     "dtype": top["dtype"], "kernel": top["kernel"], "shape": _gemm_shape(top),
                     "µs per call": float(top["time_us"]),
                     "tflops": float(top["tflops"]), "peak": top["peak"], "roof": top.get("roof"),
                     "compute_peak": top.get("compute_peak", top["peak"]),
                     "fraction_of_peak": top["fraction_of_peak"],
                     "peak_source": diag.peaks.source if diag.peaks is not None else None})
    return pd.DataFrame(rows, columns=GEMM_VS_PEAK_COLUMNS)


def _gemm_shape(row) -> Optional[str]:
    """A roofline GEMM row's shape (``analyses.gemm_shape_text``); None without recorded shapes. Two runs' GEMM rows
    compare only where these agree."""
    from ..analyses import gemm_shape_text
    m, k, n, b = (row.get(c) for c in ("m", "k", "n", "batch"))
    return None if any(v is None or v != v for v in (m, k, n)) else gemm_shape_text(b, m, k, n)


def _whole(v):
    """``v``, an integer where it is a whole float (a size read from a column that also holds NaN: 64, not 64.0)."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def comparison_warnings(points: pd.DataFrame, labels: Iterable[str], value: str = "cpu_us_per_step",
                        runs: Iterable["Run"] = ()) -> list[str]:
    """What must be said wherever runs are compared, as plain text (escape it where it is rendered): one sentence
    naming every point whose runs spread by more than ``run.SPREAD_WARN_PCT`` of their median (``points``: rows of
    :func:`~profiling_core.run.sweep_points` with ``<value>_spread_pct``; ``labels``: the key columns that name a
    point), and one per run whose machine was busy as it started (:func:`~profiling_core.run.machine_busy`)."""
    from ..run import SPREAD_WARN_PCT, machine_busy
    out = []
    col = f"{value}_spread_pct"
    labels = list(labels)
    if len(points) and col in points.columns:
        noisy = points[pd.to_numeric(points[col], errors="coerce") > SPREAD_WARN_PCT]
        if len(noisy):
            named = "; ".join(", ".join(f"{c} {_whole(r[c])}" for c in labels) + f" (n={int(r['n'])}: {r[col]:.0f}%)"
                              for _, r in noisy.sort_values(col, ascending=False).iterrows())
            out.append(f"The runs of {len(noisy)} point{'s' if len(noisy) != 1 else ''} spread by more than "
                       f"{SPREAD_WARN_PCT:.0f}% of their median CPU time per step (max − min): {named}. Read them as "
                       "noise, not a result: repeat them on a quieter machine, or with more runs of each point.")
    busy = [(run.name, msg) for run in runs if (msg := machine_busy(run.meta)) is not None]
    for name, msg in busy:
        out.append(f"{name}: {msg}")
    return out
