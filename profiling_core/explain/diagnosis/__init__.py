"""Diagnosis: each GEMM and each memory-bound GPU op against the device's peaks, and the anti-patterns a
performance engineer would name, each with its evidence and the PyTorch change that addresses it.

``roofline(report, session, config, peaks)`` gives one row per GPU op group: GEMMs (FLOPs from recorded shapes or the
run's config, time from their kernels) judged against min(their dtype's compute peak, intensity × bandwidth), with
the roof that bounds them; elementwise ops and copies with the bytes they move against the bandwidth. The peaks are
a calibration of the device (``measured``) or, where there is none, the vendor's datasheet (``datasheet``).

``diagnose(...)`` runs the rules (:data:`RULES`). Each rule is a small pure function of the report, the roofline, the
run's config and the peaks that returns a :class:`Diagnosis` or None, and says nothing where it does not apply or
cannot decide. Kernel names are read by stated rules (:func:`kernel_family`), never guessed from a library's
incidental naming beyond them; the rules live in ``profiling_core.analyses.categories``, shared with the
breakdown of a step's time by category.

Layout: ``roofline`` (:func:`roofline`), ``rules/`` (one module per rule, named after its id), ``base``
(:class:`Diagnosis` and what the rules share); this module holds :data:`RULES`, their order, and :func:`diagnose`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import pandas as pd

from ...analyses import Report, analyze
from ...analyses._shared import shared_for
from ...analyses.categories import is_gemm_kernel, kernel_family
from ...store.peaks import DevicePeaks
from .base import Diagnosis, _Ctx
from .roofline import roofline
from .rules.allocator_in_step import _rule_allocator_in_step
from .rules.attention_backend import _rule_attention_backend
from .rules.conv_layout import _rule_conv_layout
from .rules.cpu_contention import _rule_cpu_contention
from .rules.compile_breaks import _rule_compile
from .rules.cudagraph_pools import _rule_cudagraph_pools
from .rules.cudagraphs_skipped import _rule_cudagraphs_skipped
from .rules.fp32_training import _rule_fp32_training
from .rules.decode_launch_bound import _rule_decode_launch_bound
from .rules.exposed_communication import _rule_exposed_communication
from .rules.fp32_without_tf32 import _rule_fp32_without_tf32
from .rules.gpu_starved import GPU_IDLE_AT, LAUNCHES_DOMINATE, _rule_gpu_starved
from .rules.input_bound import _rule_input_bound
from .rules.memory_fragmentation import _rule_memory_fragmentation
from .rules.memory_growth import _rule_memory_growth
from .rules.memory_peak import _rule_memory_peak
from .rules.profiler_overhead import _rule_profiler_overhead
from .rules.sync_in_step import _rule_sync_in_step
from .rules.unaligned_gemm_dims import _rule_unaligned_dims
from .rules.unfused_optimizer import _rule_unfused_optimizer

__all__ = ["Diagnosis", "DiagnosisReport", "diagnose", "roofline", "kernel_family", "is_gemm_kernel", "RULES",
           "GPU_IDLE_AT", "LAUNCHES_DOMINATE"]


RULES: tuple[Callable[[_Ctx], Optional[Diagnosis]], ...] = (
    _rule_fp32_without_tf32, _rule_unaligned_dims, _rule_input_bound, _rule_gpu_starved, _rule_decode_launch_bound,
    _rule_sync_in_step, _rule_allocator_in_step, _rule_exposed_communication,
    _rule_compile,
    _rule_profiler_overhead, _rule_attention_backend, _rule_cudagraphs_skipped, _rule_conv_layout,
    _rule_cpu_contention, _rule_unfused_optimizer, _rule_fp32_training, _rule_memory_peak, _rule_memory_growth,
    _rule_memory_fragmentation, _rule_cudagraph_pools)


@dataclass(frozen=True)
class DiagnosisReport:
    roofline: pd.DataFrame
    diagnoses: list[Diagnosis]
    peaks: Optional[DevicePeaks]
    cost_unit: str = "per step"
    """What a diagnosis's ``cost_us_per_step`` is per: ``"per step"``, or ``"in the trace"`` for a trace without
    ProfilerSteps (its rules then count the whole trace as one step)."""

    def to_dict(self) -> dict:
        roof = self.roofline.astype(object).where(self.roofline.notna(), None)
        return {"peaks": self.peaks.to_dict() if self.peaks else None,
                "roofline": roof.to_dict(orient="records"),
                "diagnoses": [d.to_dict() for d in self.diagnoses], "cost_unit": self.cost_unit}


def diagnose(session, report: Optional[Report] = None, config=None, peaks: Optional[DevicePeaks] = None,
             compute_capability: Optional[float] = None,
             process_peak_bytes: Optional[int] = None) -> DiagnosisReport:
    """The roofline rows and every rule's finding for one trace.

    Args:
        session: the trace's session.
        report: ``analyze(session, config)`` if already computed.
        config: the run's ``ExperimentConfig`` (or its dict) when known.
        peaks: the device's measured peaks (``PeakBook.find``). Without them, the datasheet peaks of the first GPU
            the trace names (``session.devices``, :meth:`DevicePeaks.from_datasheet`), labelled ``datasheet`` in every
            text and in ``DiagnosisReport.peaks.source`` — only for a trace that ran GPU work (``report.has_gpu``):
            Kineto names the host's GPUs in a CPU-only run's trace too, and a CPU's GEMM is not judged by a GPU's
            peak; without either, no fraction of peak and no cost bound.
        compute_capability: the GPU's (e.g. 9.0, from meta.json); else read from kernel names where they say.
        process_peak_bytes: the run's ``peak_device_memory_bytes`` (meta.json: ``torch.cuda.max_memory_allocated()``
            of the whole process) when known; the memory rules tell an earlier peak from fragmentation by it.

    A trace that recorded no work (``report.summary["work"]`` 0) gets no rule's finding.
    """
    report = report if report is not None else analyze(session, config=config)
    if peaks is None and report.has_gpu:  # a CPU run on a GPU host names the GPU too: its GEMMs did not run there
        names = [d.get("name") for d in (getattr(session, "devices", None) or []) if d.get("name")]
        peaks = DevicePeaks.from_datasheet(names[0]) if names else None
    shared = shared_for(session, report._shared)  # what analyze computed, where the report is its own
    roof = roofline(report, session, config, peaks, shared=shared)
    ctx = _Ctx(report, session, config, peaks, roof, compute_capability, process_peak_bytes, shared)
    # a trace of the profiler's own slices alone holds nothing a rule can judge (``analyses.NO_WORK_TEXT``)
    found = [d for rule in RULES if (d := rule(ctx)) is not None] if report.summary.get("work", 1) else []
    return DiagnosisReport(roof, found, peaks, "per step" if len(report.steps) else "in the trace")
