"""``unaligned_gemm_dims``: a bf16/fp16 GEMM with M, K or N not a multiple of 8, so cuBLAS cannot use its
16-byte-aligned tensor-core kernels; the cost bound is its time less the same FLOPs at the measured peak."""
from __future__ import annotations

from typing import Optional

import pandas as pd

from ....analyses.categories import kernel_family
from ..base import Diagnosis, _Ctx, _steps


def _rule_unaligned_dims(c: _Ctx) -> Optional[Diagnosis]:
    r = c.roof
    g = r[(r["kind"] == "gemm") & r["dtype"].isin(["bf16", "fp16"])] if not r.empty else r
    g = g[g["m"].notna()] if not g.empty else g
    if g.empty:
        return None
    bad = g[g.apply(lambda x: any(int(v) % 8 for v in (x["m"], x["k"], x["n"])), axis=1)]
    if bad.empty:
        return None
    row = bad.sort_values("time_us", ascending=False).iloc[0]
    dims = f"M={int(row['m'])}, K={int(row['k'])}, N={int(row['n'])}"
    odd = [k for k in ("M", "K", "N") if int(row[k.lower()]) % 8]
    fams = [kernel_family(x) for x in str(row["kernel"]).split(",")]
    fam_txt = "; ".join(f"{x[:70]} (" + ", ".join(
        t for t in ((f"built for sm{f['arch']}" if f["arch"] else ""), (f"operand alignment {f['align']} element"
                    f"{'s' if (f['align'] or 0) > 1 else ''}" if f["align"] else "")) if t) + ")"
        for x, f in zip(str(row["kernel"]).split(","), fams))
    per_step = float((bad["time_us"] * bad["count"]).sum()) / _steps(c.report)
    cost, basis = None, ""
    peak = row["peak"]
    if peak and pd.notna(peak):
        ideal = float((bad["flops"] * bad["count"]).sum()) / _steps(c.report) / (peak * 1e6)
        cost, basis = max(0.0, per_step - ideal), (f"this GEMM time less the same FLOPs at the measured "
                                                   f"{row['dtype']} peak ({peak:,.0f} TFLOP/s): a bound, not a "
                                                   f"promise")
    frac = f" ({row['fraction_of_peak']:.0%} of the measured {row['dtype']} peak)" if row["fraction_of_peak"] else ""
    text = (f"A {row['dtype']} GEMM with {dims}: {', '.join(odd)} {'is' if len(odd) == 1 else 'are'} not "
            f"{'a multiple' if len(odd) == 1 else 'multiples'} of 8, so cuBLAS cannot use its "
            f"16-byte-aligned tensor-core kernels and ran {fam_txt} at {row['tflops']:,.1f} TFLOP/s{frac}.")
    fix = ("Pad the dimensions to a multiple of 8 (64 is better still: whole tiles), e.g. torch.nn.functional.pad "
           "of the inputs and a slice of the result, or choose sizes that are; torch.compile pads such GEMMs itself "
           "(torch._inductor.config.shape_padding, on by default).")
    return Diagnosis("unaligned_gemm_dims", "GEMM dimensions not multiples of 8", text, fix, cost, basis,
                     {"slice_ids": [i for lst in bad["slice_ids"] for i in lst][:50], "kernel": row["kernel"],
                      "m": int(row["m"]), "k": int(row["k"]), "n": int(row["n"]), "tflops": row["tflops"],
                      "fraction_of_peak": row["fraction_of_peak"]})
