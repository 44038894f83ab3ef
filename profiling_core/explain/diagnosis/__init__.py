"""Diagnosis: each GEMM and each memory-bound GPU op against the device's measured peaks, and the anti-patterns a
performance engineer would name, each with its evidence and the PyTorch change that addresses it.

``roofline(report, session, config, peaks)`` gives one row per GPU op group: GEMMs (FLOPs from recorded shapes or the
run's config, time from their kernels) with achieved TFLOP/s and the fraction of the measured peak of their dtype;
elementwise ops and copies with the bytes they move and the fraction of the measured bandwidth.

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
from ...analyses.categories import is_gemm_kernel, kernel_family
from ...store.peaks import DevicePeaks
from .base import Diagnosis, _Ctx
from .roofline import roofline
from .rules.attention_backend import _rule_attention_backend
from .rules.compile_breaks import _rule_compile
from .rules.cudagraphs_skipped import _rule_cudagraphs_skipped
from .rules.fp32_without_tf32 import _rule_fp32_without_tf32
from .rules.launch_bound import (LAUNCH_BOUND_BUSY_BELOW, LAUNCHES_DOMINATE, MIN_OPS_PER_STEP, SHORT_KERNEL_US,
                                 _rule_launch_bound)
from .rules.profiler_overhead import _rule_profiler_overhead
from .rules.sync_in_step import _rule_sync_in_step
from .rules.unaligned_gemm_dims import _rule_unaligned_dims

__all__ = ["Diagnosis", "DiagnosisReport", "diagnose", "roofline", "kernel_family", "is_gemm_kernel", "RULES",
           "LAUNCH_BOUND_BUSY_BELOW", "SHORT_KERNEL_US", "MIN_OPS_PER_STEP", "LAUNCHES_DOMINATE"]


RULES: tuple[Callable[[_Ctx], Optional[Diagnosis]], ...] = (
    _rule_fp32_without_tf32, _rule_unaligned_dims, _rule_launch_bound, _rule_sync_in_step, _rule_compile,
    _rule_profiler_overhead, _rule_attention_backend, _rule_cudagraphs_skipped)


@dataclass(frozen=True)
class DiagnosisReport:
    roofline: pd.DataFrame
    diagnoses: list[Diagnosis]
    peaks: Optional[DevicePeaks]

    def to_dict(self) -> dict:
        roof = self.roofline.astype(object).where(self.roofline.notna(), None)
        return {"peaks": self.peaks.to_dict() if self.peaks else None,
                "roofline": roof.to_dict(orient="records"),
                "diagnoses": [d.to_dict() for d in self.diagnoses]}


def diagnose(session, report: Optional[Report] = None, config=None, peaks: Optional[DevicePeaks] = None,
             compute_capability: Optional[float] = None) -> DiagnosisReport:
    """The roofline rows and every rule's finding for one trace.

    Args:
        session: the trace's session.
        report: ``analyze(session, config)`` if already computed.
        config: the run's ``ExperimentConfig`` (or its dict) when known.
        peaks: the device's measured peaks (``PeakBook.find``); without them no fraction of peak and no cost bound.
        compute_capability: the GPU's (e.g. 9.0, from meta.json); else read from kernel names where they say.
    """
    report = report if report is not None else analyze(session, config=config if not isinstance(config, dict)
                                                        else None)
    roof = roofline(report, session, config, peaks)
    ctx = _Ctx(report, session, config, peaks, roof, compute_capability)
    found = [d for rule in RULES if (d := rule(ctx)) is not None]
    return DiagnosisReport(roof, found, peaks)
