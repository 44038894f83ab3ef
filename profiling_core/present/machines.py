"""The same config side by side across machines: per-step time, the GEMM against each device's own peak, and the
findings and diagnoses that differ, over every run each machine made of it.

Plain data in: the runs of the config (``profiling_core.store.match_configs`` finds them, all of each machine's), each
with its :class:`~profiling_core.analyses.Report`, its :class:`~profiling_core.explain.DiagnosisReport` (judged
against THAT run's device: ``PeakBook.for_run(run)``, else the datasheet of the GPU its trace names) and its findings.
Nothing is measured here: a run's per-step figures are :func:`~profiling_core.present.summaries.step_summary`'s, its
GEMM's :func:`~profiling_core.present.summaries.gemm_vs_peak`'s (the roofline's row of the run's GEMM with the most
time), its verdicts the findings' and the rules' own. A machine's figure is the median of its runs with their min–max
spread (:func:`profiling_core.run.sweep_points`, as every page that compares repeated runs), and two machines are
said to differ on a figure only when the gap between their medians exceeds the run-to-run spread (max − min) of each
(:attr:`MachineComparison.gaps`). A verdict that some runs of a machine give and others do not is :data:`VARIES` on
that machine, not a difference between machines; a verdict two machines never share is called a difference only
when each ran the config twice or more (with one run, its run-to-run variation is unknown: :data:`ONE_RUN_DIFFERS`,
as :data:`ONE_RUN` for a gap). Machine labels and everything else from the runs are plain text: escape them where
they are rendered.

    >>> from profiling_core import RunStore, analyze, diagnose, findings, open_trace
    >>> from profiling_core.store import PeakBook, match_configs
    >>> store = RunStore()
    >>> match = match_configs(store.list())[0]                                      # doctest: +SKIP
    >>> items = []
    >>> for _machine, runs in match.machines:                                       # doctest: +SKIP
    ...     for run in runs:
    ...         tp = open_trace(run.trace_path); rep = analyze(tp, run.config)
    ...         items.append((run, rep, diagnose(tp, rep, run.config, PeakBook(store.root).for_run(run)),
    ...                       findings(rep)))
    >>> machine_comparison(items).table                                             # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Iterable, Sequence

import pandas as pd

from ..run import sweep_points
from ..store.machines import group_by_machine, machine_of
from .summaries import gemm_vs_peak, step_summary

if TYPE_CHECKING:
    from ..analyses import Report
    from ..explain import DiagnosisReport, Finding
    from ..store import Run

__all__ = ["MACHINE_COMPARISON_COLUMNS", "MACHINE_RUNS_COLUMNS", "MACHINE_GAPS_COLUMNS", "MACHINES_COLUMNS",
           "ABSENT", "DIFFERS", "TOO_NOISY", "ONE_RUN", "ONE_RUN_DIFFERS", "VARIES", "GAP_VALUES",
           "MachineComparison", "machine_comparison", "machines_table", "machine_labels"]

MEDIANS = ("steps", "cpu_us_per_step", "gpu_busy_us_per_step", "gpu_busy_fraction", "tflops", "peak", "compute_peak",
           "fraction_of_peak")
"""The figures of each run a machine's row gives the median of (``sweep_points``)."""
GAP_VALUES = ("cpu_us_per_step", "gpu_busy_us_per_step", "tflops", "fraction_of_peak")
"""The figures :attr:`MachineComparison.gaps` compares between machines."""
_AGREED = ("bound", "gemm_dtype", "gemm_kernel", "roof", "peak_source")
MACHINE_RUNS_COLUMNS = ["machine", "run_id", "run", "steps", "cpu_us_per_step", "gpu_busy_us_per_step",
                        "gpu_busy_fraction", "bound", "gemm_dtype", "gemm_kernel", "tflops", "peak", "roof",
                        "compute_peak", "fraction_of_peak", "peak_source"]
"""The columns of :attr:`MachineComparison.runs`, one row per run."""
MACHINE_COMPARISON_COLUMNS = ["machine", "device", "host", "run", "n", "run_ids", "steps",
                              *[f"{v}{s}" for v in ("cpu_us_per_step", "gpu_busy_us_per_step")
                                for s in ("", "_min", "_max", "_spread_pct")],
                              "gpu_busy_fraction", "bound", "gemm_dtype", "gemm_kernel",
                              "tflops", "tflops_min", "tflops_max", "tflops_spread_pct", "peak", "roof",
                              "compute_peak", "fraction_of_peak", "fraction_of_peak_min", "fraction_of_peak_max",
                              "peak_source"]
"""The columns of :attr:`MachineComparison.table`, one row per machine."""
MACHINE_GAPS_COLUMNS = ["value", "machine_a", "machine_b", "a", "b", "ratio", "gap", "spread_a", "spread_b", "n_a",
                        "n_b", "verdict"]
"""The columns of :attr:`MachineComparison.gaps`, one row per figure and pair of machines."""
MACHINES_COLUMNS = ["machine", "device", "kind", "host", "runs", "newest"]
"""The columns of :func:`machines_table`."""
ABSENT = "—"
"""A finding or diagnosis a machine's run does not have, in :attr:`MachineComparison.differences`."""
DIFFERS = "differs"
"""Two machines differ: medians further apart than each one's run-to-run spread; a verdict two machines, each with two
runs or more, never share."""
TOO_NOISY = "too noisy to tell"
"""The gap between two machines' medians is within one of their run-to-run spreads."""
ONE_RUN = "one run: spread unknown"
"""A machine ran the config once: its run-to-run spread is not known, so no gap is called a difference."""
ONE_RUN_DIFFERS = "one run: differs between the runs, spread unknown"
"""A verdict two machines never share where one of them ran the config once: the runs differ, but with one run its
run-to-run variation is unknown, so that cannot be told from a difference between the machines."""
VARIES = "varies between runs"
"""A verdict some runs of a machine give and others do not (and every two machines share one)."""


@dataclass(frozen=True)
class MachineComparison:
    """One config across machines, over all the runs given.

    Attributes:
        table: :data:`MACHINE_COMPARISON_COLUMNS`, one row per machine in the order of its first run: ``n``, its
            runs, ``run_ids`` (comma-separated, in the order given), and the median over its runs of each run's
            median step (CPU time and GPU busy time, ``step_summary``) and of its GEMM's achieved TFLOP/s and
            fraction of peak, each with its ``_min`` and ``_max`` over the runs and (CPU, GPU, TFLOP/s)
            ``_spread_pct`` ((max − min) / median × 100; NaN for one run); the GEMM's roof (``peak``), its dtype's
            compute peak ON THAT DEVICE (``compute_peak``) and whether it was ``measured`` or from the ``datasheet``
            (None: no peak known for the device, so no fraction). ``bound`` (the question-2 finding's verdict),
            ``gemm_dtype``, ``gemm_kernel``, ``roof`` and ``peak_source`` are the runs' common value, or
            :data:`VARIES` with each value's count where the runs disagree. A run without a GEMM of known FLOPs
            counts as NaN there.
        runs: :data:`MACHINE_RUNS_COLUMNS`, one row per run in the order given: the figures the table's medians are
            of.
        gaps: :data:`MACHINE_GAPS_COLUMNS`, for each of :data:`GAP_VALUES` and each pair of machines (a, b) with
            both medians known and not both zero: the medians, ``ratio`` (b / a), ``gap`` (|b − a|), each machine's
            spread (max − min of its runs) and run count, and ``verdict``: :data:`DIFFERS` when the gap exceeds both
            spreads, :data:`TOO_NOISY` when it does not, :data:`ONE_RUN` when a machine has one run.
        differences: ``kind`` (``finding`` or ``diagnosis``), ``id`` (the finding's id, the rule's id), one column
            per machine (its label) with its verdict there: a finding's title (``Compute-bound``, ``No GPU lane``),
            a rule's title, :data:`ABSENT`, or where the machine's runs disagree ``varies between runs: <verdict>
            (k of n); ...``; and ``verdict``: :data:`DIFFERS` when two machines with two runs or more each share no
            verdict on it (no run of one gives what a run of the other gives), else :data:`ONE_RUN_DIFFERS` when two
            machines share none but one of them has a single run, else :data:`VARIES`. Only the ids whose verdicts
            are not the same on every run; findings first, in their questions' order, then the rules in their
            order.
    """

    table: pd.DataFrame
    runs: pd.DataFrame
    gaps: pd.DataFrame
    differences: pd.DataFrame


def machine_labels(runs: Sequence[Run]) -> list[str]:
    """Each run's machine label (``machine_of(run).label``): runs of one machine share it; where two machines share
    a label (hostile or odd names), the second and later get `` · 2``, `` · 3`` (a label names one column)."""
    by_key: dict[str, str] = {}
    used: set[str] = set()
    out = []
    for run in runs:
        m = machine_of(run)
        if m.key not in by_key:
            label, i = m.label, 1
            while label in used:
                i += 1
                label = f"{m.label} · {i}"
            by_key[m.key] = label
            used.add(label)
        out.append(by_key[m.key])
    return out


def _verdicts(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """{id: its titles joined by " / " in their order} (an id that appears twice keeps both titles)."""
    out: dict[str, list[str]] = {}
    for ident, title in pairs:
        out.setdefault(str(ident), [])
        if str(title) not in out[str(ident)]:
            out[str(ident)].append(str(title))
    return {k: " / ".join(v) for k, v in out.items()}


def _agreed(values: Sequence) -> object:
    """The runs' one value (None where every run has none); where they disagree, :data:`VARIES` and each value's
    count of the runs, in the order first seen."""
    seen: dict[object, int] = {}
    for v in values:
        v = None if v is None or (isinstance(v, float) and v != v) else v
        seen[v] = seen.get(v, 0) + 1
    if len(seen) <= 1:
        return next(iter(seen), None)
    return f"{VARIES}: " + "; ".join(f"{ABSENT if v is None else v} ({k} of {len(values)})" for v, k in seen.items())


def _run_row(label: str, run: Run, rep: Report, diag: DiagnosisReport, found: Sequence[Finding]) -> dict:
    s = step_summary(run, rep)
    g = gemm_vs_peak([(run, rep, diag)])
    q2 = next((f for f in found if f.id == "q2.bound"), None)
    row = {"machine": label, "run_id": run.run_id, "run": run.name, "steps": s["steps"],
           "cpu_us_per_step": s["cpu_us_per_step"], "gpu_busy_us_per_step": s["gpu_busy_us_per_step"],
           "gpu_busy_fraction": s["gpu_busy_fraction"],
           "bound": (q2.evidence.get("bound") if q2 is not None else None)}
    if len(g):
        top = g.iloc[0]
        row.update(gemm_dtype=top["dtype"], gemm_kernel=top["kernel"], tflops=top["tflops"], peak=top["peak"],
                   roof=top["roof"], compute_peak=top["compute_peak"], fraction_of_peak=top["fraction_of_peak"],
                   peak_source=top["peak_source"])
    return row


def _gaps(points: pd.DataFrame, counts: dict) -> pd.DataFrame:
    """Each pair of machines' gap in each of :data:`GAP_VALUES`, judged against their spreads; ``counts``: (machine,
    value) → how many of its runs have that value (a run without a GEMM of known FLOPs has no TFLOP/s): one value is
    one run, however many runs the machine has."""
    rows = []
    by = {r["machine"]: r for _, r in points.iterrows()}
    for value in GAP_VALUES:
        for a, b in combinations(list(by), 2):
            ra, rb = by[a], by[b]
            ma, mb = ra[value], rb[value]
            if pd.isna(ma) or pd.isna(mb) or (ma == 0 and mb == 0):
                continue
            sa, sb = ra[f"{value}_max"] - ra[f"{value}_min"], rb[f"{value}_max"] - rb[f"{value}_min"]
            gap = abs(mb - ma)
            na, nb = counts[(a, value)], counts[(b, value)]
            verdict = ONE_RUN if min(na, nb) < 2 else DIFFERS if gap > sa and gap > sb else TOO_NOISY
            rows.append({"value": value, "machine_a": a, "machine_b": b, "a": ma, "b": mb,
                         "ratio": (mb / ma) if ma else float("nan"), "gap": gap, "spread_a": sa, "spread_b": sb,
                         "n_a": na, "n_b": nb, "verdict": verdict})
    return pd.DataFrame(rows, columns=MACHINE_GAPS_COLUMNS)


def _differences(labels: list[str], items: list, order: list[str]) -> pd.DataFrame:
    found_v = [_verdicts((f.id, f.title) for f in found) for _r, _p, _d, found in items]
    rule_v = [_verdicts((d.rule, d.title) for d in diag.diagnoses) for _r, _p, diag, _f in items]
    rows = []
    for kind, per in (("finding", found_v), ("diagnosis", rule_v)):
        ids: dict[str, None] = {}
        for v in per:
            ids.update(dict.fromkeys(v))
        for ident in ids:
            got = [v.get(ident, ABSENT) for v in per]
            if len(set(got)) == 1:
                continue
            by_machine = {m: [g for g, lab in zip(got, labels) if lab == m] for m in order}
            apart = [min(len(x), len(y)) for x, y in combinations(by_machine.values(), 2) if not set(x) & set(y)]
            verdict = VARIES if not apart else DIFFERS if max(apart) >= 2 else ONE_RUN_DIFFERS
            rows.append({"kind": kind, "id": ident, **{m: _agreed(v) for m, v in by_machine.items()},
                         "verdict": verdict})
    return pd.DataFrame(rows, columns=["kind", "id", *order, "verdict"])


def machine_comparison(items: Iterable[tuple[Run, Report, DiagnosisReport, Sequence[Finding]]]
                       ) -> MachineComparison:
    """The comparison of (run, its report, its diagnosis, its findings), every run of the config on each machine
    (see :class:`MachineComparison`): the runs of one machine (``store.machine_of``) make one row, their figures its
    median and spread. ValueError for no runs."""
    items = list(items)
    if not items:
        raise ValueError("machine_comparison needs at least one run")
    labels = machine_labels([run for run, *_ in items])
    order = list(dict.fromkeys(labels))
    runs = pd.DataFrame([_run_row(lab, *item) for lab, item in zip(labels, items)], columns=MACHINE_RUNS_COLUMNS)
    for c in MEDIANS:
        runs[c] = pd.to_numeric(runs[c], errors="coerce")
    points = sweep_points(runs, keys=("machine",), values=MEDIANS).set_index("machine").loc[order].reset_index()
    first = {lab: run for lab, (run, *_r) in reversed(list(zip(labels, items)))}
    per = runs.groupby("machine", sort=False)
    table = points.assign(
        device=[machine_of(first[m]).device for m in order], host=[machine_of(first[m]).host for m in order],
        run=[first[m].name for m in order],
        run_ids=[", ".join(per.get_group(m)["run_id"]) for m in order],
        **{c: [_agreed(list(per.get_group(m)[c])) for m in order] for c in _AGREED})
    table = table[MACHINE_COMPARISON_COLUMNS]
    counts = {(m, v): int(per.get_group(m)[v].notna().sum()) for m in order for v in GAP_VALUES}
    return MachineComparison(table, runs, _gaps(points, counts), _differences(labels, items, order))


def machines_table(runs: Iterable[Run]) -> pd.DataFrame:
    """The machines of the runs (``store.group_by_machine``: corrupt runs left out, the unknown machine last):
    :data:`MACHINES_COLUMNS`, its label, device, device type, host, how many runs and when the newest started."""
    rows = []
    for m, group in group_by_machine(runs):
        newest = max((str(r.meta.get("started_at", "")) for r in group), default="")
        rows.append({"machine": m.label, "device": m.device, "kind": m.kind, "host": m.host, "runs": len(group),
                     "newest": newest[:19].replace("T", " ")})
    return pd.DataFrame(rows, columns=MACHINES_COLUMNS)
