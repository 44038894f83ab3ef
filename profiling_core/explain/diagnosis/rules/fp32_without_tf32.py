"""``fp32_without_tf32``: fp32 GEMMs ran in full-fp32 FFMA kernels, not on the tensor cores, on a GPU that has TF32
ones (its compute capability, else the kernels' own arch).

Only GEMMs that TF32 could speed up count: where the roofline knows a GEMM's shapes and the device's peaks, one held
by the memory roof at the fp32 peak (a thin product, e.g. a rotary embedding's K = 1 outer product in an LLM's
decode) moves the same bytes on tensor cores and is left out; when every such GEMM is, the rule does not fire. The
GEMM time the text gives and the cost counts is the roofline's (as ``fp32_training``'s): every kernel these GEMM ops
launched, the FFMA kernels and any other (cuBLAS's split-K reduction), since TF32 replaces the op's kernels, not one
of them; the text says how much of it the FFMA kernels took where that differs. Where the roofline has no such GEMM
(no recorded shapes) the text gives the FFMA kernels' time and there is no cost. The cost bound is these GEMMs' time
less their floor at TF32: the larger of the same FLOPs at the tf32 peak and their bytes at the measured bandwidth,
on the critical path only where the GPU sets the pace (``base._gpu_time_cost``).
A trace in which an fp32 GEMM ran on TF32 tensor cores had TF32 on: the rule does not fire there (:func:`_tf32_on`),
nor for a run whose config set TF32 on (``matmul_precision`` ``high`` or ``medium``): whatever made cuBLAS pick FFMA
kernels there, the fix would be one the run already made."""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from ....analyses.categories import kernel_family, split_kernel_names
from ....config import config_field as _cfg
from ...questions.base import _per_name, _short
from ..base import (Diagnosis, _ampere_or_later, _Ctx, _fmt_us, _gemm_rows_in_steps, _gpu_time_cost, _in_steps,
                    _in_this_app, _per, _steps)


def _tf32_on(roof: pd.DataFrame) -> bool:
    """True when an fp32 GEMM of the roofline (recorded fp32 inputs) ran on TF32 tensor cores: the roofline's dtype
    ``tf32`` (``analyses.categories.ran_tf32``). TF32 was then on for matmuls in this run (``allow_tf32`` is one switch
    for all of them), so turning it on changes nothing for the GEMMs cuBLAS still ran in FFMA kernels (it picks
    kernels by shape)."""
    return not roof.empty and bool(((roof["kind"] == "gemm") & (roof["dtype"] == "tf32")).any())


def _rule_fp32_without_tf32(c: _Ctx) -> Optional[Diagnosis]:
    ops = c.report.gpu_ops
    if ops.empty:
        return None
    k = ops[ops["category"] == "kernel"]
    simt_names = {n for n in pd.unique(k["name"].astype(object)) if kernel_family(str(n))["math"] == "fp32-simt"}
    if not simt_names:
        return None
    if not _ampere_or_later(c, simt_names):
        return None  # a GPU without TF32 (or one this cannot tell): nothing to change
    r = c.roof
    if _tf32_on(r) or _cfg(c.config, "matmul_precision") in ("high", "medium"):
        # TF32 was on (an fp32 GEMM ran on the tensor cores, or the run set it on): cuBLAS chose FFMA for these; the
        # fix is moot
        return None
    simt = _per_name(r["kernel"], lambda u: u.map(lambda n: any(x in simt_names for x in split_kernel_names(n)))) \
        if not r.empty else None  # (decided once per distinct kernel text)
    rows = r[(r["kind"] == "gemm") & simt.astype(bool)] if not r.empty else r
    if not rows.empty and (rows["roof"] == "memory").any():
        rows = rows[rows["roof"] != "memory"]  # the memory roof holds them: tensor cores would change nothing
        if rows.empty:
            return None
        simt_names &= {x for n in rows["kernel"] for x in split_kernel_names(str(n))}
    rows = _gemm_rows_in_steps(c, rows)  # (the calls the steps made: the figures below are per step)
    kern = k[k["name"].isin(simt_names)]
    per_step = float(_in_steps(c.report, kern)["dur_us"].sum()) / _steps(c.report)
    top = str(kern.groupby(kern["name"].astype(object))["dur_us"].sum().idxmax())
    cost, basis, rate, gemm_us = None, "", "", None
    tf = c.peaks.peak_tflops("tf32") if c.peaks is not None else None
    src = c.peaks.source if c.peaks is not None else "measured"
    if not rows.empty:
        gemm_us = float((rows["time_us"] * rows["count"]).sum()) / _steps(c.report)  # (fp32_training's basis)
        # the GEMM with the most time a step names the kernel and gives its rate (one row: the two agree)
        row = rows.iloc[int(np.argmax((rows["time_us"] * rows["count"]).to_numpy(dtype=float)))]
        top = next((x for x in split_kernel_names(str(row["kernel"])) if x in simt_names), top)
        rate = f" at {row['tflops']:,.1f} TFLOP/s"
        if row["fraction_of_peak"] is not None and pd.notna(row["fraction_of_peak"]):
            rate += f" ({row['fraction_of_peak']:.0%} of the {src} fp32 peak)"
        if tf:
            floor = rows["flops"].astype(float) / (tf * 1e6)
            bw = c.peaks.bandwidth_gbs if c.peaks is not None else None
            if bw:
                floor = np.maximum(floor, pd.to_numeric(rows["bytes"], errors="coerce").fillna(0.0) / (bw * 1e3))
            cost, basis = _gpu_time_cost(
                c.report, max(0.0, float(((rows["time_us"] - floor) * rows["count"]).sum()) / _steps(c.report)),
                f"these GEMMs' time ({_fmt_us(gemm_us)} per step, every kernel they launched) less their floor at "
                f"TF32 (the same FLOPs at the {src} tf32 peak, {tf:,.0f} TFLOP/s, or their bytes at the measured "
                "bandwidth, whichever is longer): what TF32 could save at most")
    others = len(simt_names) - 1
    text = (f"fp32 GEMMs ran in full-fp32 FFMA kernels, not on the tensor cores: {_short(top, 90)}{rate}"
            + (f" and {others} other such kernel{'s' if others > 1 else ''}" if others else "") + ", "
            + (f"{_fmt_us(per_step)} of such kernels {_per(c.report)}" if gemm_us is None
               or _fmt_us(gemm_us) == _fmt_us(per_step) else _gemm_time(gemm_us, per_step, rows, simt_names, c))
            + ". This GPU has TF32 tensor cores"
            + (f" ({src} {tf:,.0f} TFLOP/s{' here' if src == 'measured' else ''})" if tf else "") + ", which torch leaves off for matmuls by default.")
    fix = ("torch.set_float32_matmul_precision('high') (or torch.backends.cuda.matmul.allow_tf32 = True): fp32 GEMMs "
           "then run on TF32 tensor cores (inputs rounded to a 10-bit mantissa, fp32 accumulation). Or run the GEMM "
           "in bf16." + _in_this_app(c, "the fp32 matmul precision knob"))
    return Diagnosis("fp32_without_tf32", "fp32 GEMM without TF32", text, fix, cost, basis,
                     {"slice_ids": kern["id"].astype(int).tolist()[:50], "kernels": sorted(simt_names)[:10],
                      "kernel_us_per_step": per_step, "gemm_us_per_step": gemm_us})


def _gemm_time(gemm_us: float, ffma_us: float, rows: pd.DataFrame, simt_names: set, c: _Ctx) -> str:
    """The GEMMs' time per step (every kernel their ops launched, ``gemm_us``) with the FFMA kernels' part of it
    (``ffma_us``, all of them in the steps) and the other kernels' names, where the two differ."""
    rest = sorted({_kernel_stem(x) for n in rows["kernel"].astype(str) for x in split_kernel_names(n)
                   if x not in simt_names})
    if gemm_us > ffma_us:
        return (f"{_fmt_us(gemm_us)} of GEMM time {_per(c.report)} in these GEMMs: {_fmt_us(ffma_us)} in the FFMA "
                f"kernels and {_fmt_us(gemm_us - ffma_us)} in the other kernel{'s' if len(rest) != 1 else ''} they "
                f"launched ({', '.join(rest[:3]) or 'unnamed'})")
    return (f"{_fmt_us(ffma_us)} of such kernels {_per(c.report)}, {_fmt_us(gemm_us)} of it in GEMMs whose shapes "
            "the trace records and that the compute roof holds (the time the cost counts; the rest ran GEMMs without "
            "recorded shapes, or ones the memory roof holds, which TF32 would not speed up)")


def _kernel_stem(name: str) -> str:
    """A kernel's name without its return type, namespaces, template and argument lists
    (``void cublasLt::splitKreduce_kernel<32, ...>(...)`` → ``splitKreduce_kernel``)."""
    base = name.removeprefix("void ").split("<", 1)[0].split("(", 1)[0].strip()
    return base.rsplit("::", 1)[-1] or _short(name, 40)
