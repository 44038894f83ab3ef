"""``fp32_without_tf32``: fp32 GEMMs ran in full-fp32 FFMA kernels, not on the tensor cores, on a GPU that has TF32
ones (its compute capability, else the kernels' own arch); the cost bound is these GEMMs' time less the same FLOPs
at the measured tf32 peak."""
from __future__ import annotations

from typing import Optional

import pandas as pd

from ....analyses.categories import kernel_family, split_kernel_names
from ..base import Diagnosis, _ampere_or_later, _Ctx, _fmt_us, _in_steps, _per, _steps


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
    kern = k[k["name"].isin(simt_names)]
    per_step = float(_in_steps(c.report, kern)["dur_us"].sum()) / _steps(c.report)
    top = str(kern.groupby(kern["name"].astype(object))["dur_us"].sum().idxmax())
    r = c.roof
    rows = r[(r["kind"] == "gemm") & r["kernel"].map(lambda n: any(x in simt_names for x in split_kernel_names(str(n))))] \
        if not r.empty else r
    cost, basis, rate = None, "", ""
    tf = c.peaks.peak_tflops("tf32") if c.peaks is not None else None
    src = c.peaks.source if c.peaks is not None else "measured"
    if not rows.empty:
        row = rows.sort_values("time_us", ascending=False).iloc[0]
        rate = f" at {row['tflops']:,.1f} TFLOP/s"
        if row["fraction_of_peak"] is not None and pd.notna(row["fraction_of_peak"]):
            rate += f" ({row['fraction_of_peak']:.0%} of the {src} fp32 peak)"
        if tf:
            at_tf32 = float((rows["flops"] * rows["count"]).sum()) / _steps(c.report) / (tf * 1e6)
            cost = max(0.0, float((rows["time_us"] * rows["count"]).sum()) / _steps(c.report) - at_tf32)
            basis = (f"these GEMMs' time less the same FLOPs at the {src} tf32 peak ({tf:,.0f} TFLOP/s): what "
                     "TF32 could save at most")
    text = (f"fp32 GEMMs ran in full-fp32 FFMA kernels, not on the tensor cores: {top[:90]}{rate}, "
            f"{_fmt_us(per_step)} of such kernels {_per(c.report)}. This GPU has TF32 tensor cores"
            + (f" ({src} {tf:,.0f} TFLOP/s{' here' if src == 'measured' else ''})" if tf else "") + ", which torch leaves off for matmuls by default.")
    fix = ("torch.set_float32_matmul_precision('high') (or torch.backends.cuda.matmul.allow_tf32 = True): fp32 GEMMs "
           "then run on TF32 tensor cores (inputs rounded to a 10-bit mantissa, fp32 accumulation); in this app, the "
           "fp32 matmul precision knob. Or run the GEMM in bf16.")
    return Diagnosis("fp32_without_tf32", "fp32 GEMM without TF32", text, fix, cost, basis,
                     {"slice_ids": kern["id"].astype(int).tolist()[:50], "kernels": sorted(simt_names)[:10],
                      "kernel_us_per_step": per_step})
