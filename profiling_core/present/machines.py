"""The same config side by side across machines: per-step time, the GEMM against each device's own peak, and the
findings and diagnoses that differ.

Plain data in: for each machine one run of the config (``profiling_core.store.match_configs`` finds them), with its
:class:`~profiling_core.analyses.Report`, its :class:`~profiling_core.explain.DiagnosisReport` (judged against THAT
run's device: ``PeakBook.for_run(run)``, else the datasheet of the GPU its trace names) and its findings. Nothing is
measured here: the per-step figures are :func:`~profiling_core.present.summaries.step_summary`'s, the GEMM's are
:func:`~profiling_core.present.summaries.gemm_vs_peak`'s (the roofline's row of the run's GEMM with the most time),
the verdicts are the findings' and the rules' own. Machine labels and everything else from the runs are plain text:
escape them where they are rendered.

    >>> from profiling_core import RunStore, analyze, diagnose, findings, open_trace
    >>> from profiling_core.store import PeakBook, match_configs
    >>> store = RunStore()
    >>> match = match_configs(store.list())[0]                                      # doctest: +SKIP
    >>> items = []
    >>> for run in match.newest:                                                    # doctest: +SKIP
    ...     tp = open_trace(run.trace_path); rep = analyze(tp, run.config)
    ...     items.append((run, rep, diagnose(tp, rep, run.config, PeakBook(store.root).for_run(run)),
    ...                   findings(rep)))
    >>> machine_comparison(items).table                                             # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import pandas as pd

from ..store.machines import group_by_machine, machine_of
from .summaries import gemm_vs_peak, step_summary

if TYPE_CHECKING:
    from ..analyses import Report
    from ..explain import DiagnosisReport, Finding
    from ..store import Run

__all__ = ["MACHINE_COMPARISON_COLUMNS", "MACHINES_COLUMNS", "ABSENT", "MachineComparison", "machine_comparison",
           "machines_table", "machine_labels"]

MACHINE_COMPARISON_COLUMNS = ["machine", "device", "host", "run", "run_id", "steps", "cpu_us_per_step",
                              "gpu_busy_us_per_step", "gpu_busy_fraction", "bound", "gemm_dtype", "gemm_kernel",
                              "tflops", "peak", "roof", "compute_peak", "fraction_of_peak", "peak_source"]
"""The columns of :attr:`MachineComparison.table`, one row per machine."""
MACHINES_COLUMNS = ["machine", "device", "kind", "host", "runs", "newest"]
"""The columns of :func:`machines_table`."""
ABSENT = "—"
"""A finding or diagnosis a machine's run does not have, in :attr:`MachineComparison.differences`."""


@dataclass(frozen=True)
class MachineComparison:
    """One config across machines.

    Attributes:
        table: :data:`MACHINE_COMPARISON_COLUMNS`, one row per machine in the order given: the median step's CPU
            time and GPU busy time (``step_summary``), the steady state's bound (the question-2 finding's verdict),
            and the run's GEMM (``gemm_vs_peak``): its achieved TFLOP/s, the roof it is judged by, its dtype's compute
            peak ON THAT DEVICE, the fraction of that roof, and whether the peak was ``measured`` or from the
            ``datasheet`` (None: no peak known for the device, so no fraction). A run without a GEMM of known FLOPs
            has NaN there.
        differences: ``kind`` (``finding`` or ``diagnosis``), ``id`` (the finding's id, the rule's id) and one column
            per machine (its label) with the verdict there: a finding's title (``Compute-bound``, ``No GPU lane``),
            a rule's title, or :data:`ABSENT`. Only the ids whose verdicts are not the same on every machine;
            findings first, in their questions' order, then the rules in their order.
    """

    table: pd.DataFrame
    differences: pd.DataFrame


def machine_labels(runs: Sequence[Run]) -> list[str]:
    """Each run's machine label (``machine_of(run).label``); where two runs share one, the second and later get
    `` · <the run id's last four characters>`` (a label names one column)."""
    labels, seen = [], set()
    for run in runs:
        label = machine_of(run).label
        if label in seen:
            label = f"{label} · {run.run_id[-4:]}"
        seen.add(label)
        labels.append(label)
    return labels


def _verdicts(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """{id: its titles joined by " / " in their order} (an id that appears twice keeps both titles)."""
    out: dict[str, list[str]] = {}
    for ident, title in pairs:
        out.setdefault(str(ident), [])
        if str(title) not in out[str(ident)]:
            out[str(ident)].append(str(title))
    return {k: " / ".join(v) for k, v in out.items()}


def machine_comparison(items: Iterable[tuple[Run, Report, DiagnosisReport, Sequence[Finding]]]
                       ) -> MachineComparison:
    """The comparison of (run, its report, its diagnosis, its findings), one per machine (see
    :class:`MachineComparison`). Runs of one machine may be passed, each is then its own column
    (:func:`machine_labels`)."""
    items = list(items)
    labels = machine_labels([run for run, *_ in items])
    rows = []
    for label, (run, rep, diag, found) in zip(labels, items):
        m = machine_of(run)
        s = step_summary(run, rep)
        g = gemm_vs_peak([(run, rep, diag)])
        q2 = next((f for f in found if f.id == "q2.bound"), None)
        row = {"machine": label, "device": m.device, "host": m.host, "run": run.name, "run_id": run.run_id,
               "steps": s["steps"], "cpu_us_per_step": s["cpu_us_per_step"],
               "gpu_busy_us_per_step": s["gpu_busy_us_per_step"], "gpu_busy_fraction": s["gpu_busy_fraction"],
               "bound": (q2.evidence.get("bound") if q2 is not None else None)}
        if len(g):
            top = g.iloc[0]
            row.update(gemm_dtype=top["dtype"], gemm_kernel=top["kernel"], tflops=top["tflops"], peak=top["peak"],
                       roof=top["roof"], compute_peak=top["compute_peak"], fraction_of_peak=top["fraction_of_peak"],
                       peak_source=top["peak_source"])
        rows.append(row)
    table = pd.DataFrame(rows, columns=MACHINE_COMPARISON_COLUMNS)
    for c in ("tflops", "peak", "compute_peak", "fraction_of_peak"):
        table[c] = pd.to_numeric(table[c], errors="coerce")

    found_v = [_verdicts((f.id, f.title) for f in found) for _r, _p, _d, found in items]
    rule_v = [_verdicts((d.rule, d.title) for d in diag.diagnoses) for _r, _p, diag, _f in items]
    diff_rows = []
    for kind, per in (("finding", found_v), ("diagnosis", rule_v)):
        order: dict[str, None] = {}
        for v in per:
            order.update(dict.fromkeys(v))
        for ident in order:
            got = [v.get(ident, ABSENT) for v in per]
            if len(set(got)) > 1:
                diff_rows.append({"kind": kind, "id": ident, **dict(zip(labels, got))})
    differences = pd.DataFrame(diff_rows, columns=["kind", "id", *labels])
    return MachineComparison(table, differences)


def machines_table(runs: Iterable[Run]) -> pd.DataFrame:
    """The machines of the runs (``store.group_by_machine``: corrupt runs left out, the unknown machine last):
    :data:`MACHINES_COLUMNS`, its label, device, device type, host, how many runs and when the newest started."""
    rows = []
    for m, group in group_by_machine(runs):
        newest = max((str(r.meta.get("started_at", "")) for r in group), default="")
        rows.append({"machine": m.label, "device": m.device, "kind": m.kind, "host": m.host, "runs": len(group),
                     "newest": newest[:19].replace("T", " ")})
    return pd.DataFrame(rows, columns=MACHINES_COLUMNS)
