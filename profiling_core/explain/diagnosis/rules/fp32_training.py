"""``fp32_training``: a training step (the trace has a backward phase, ``analyses.phases``) whose GEMMs ran in fp32
or TF32 on a GPU with bf16 tensor cores (Ampere or later), where ``torch.autocast`` would run them in bf16.

The GEMMs and their dtypes are the roofline's (recorded ``Input type``, TF32 where the kernel's name says so). The rule
speaks when the fp32/TF32 GEMMs take at least :data:`FP32_SHARE_AT` of the step's GEMM time: a bf16 model that keeps
one small product in fp32 on purpose (a Llama's rotary frequencies) is already autocast's result. The cost bound is
their time per step less the same FLOPs at the bf16 peak (measured, else the datasheet's), on the critical path only
where the GPU sets the pace (``base._gpu_time_cost``)."""
from __future__ import annotations

from typing import Optional

from ....units import format_share
from ..roofline import autocast_casts
from ..base import Diagnosis, _ampere_or_later, _Ctx, _fmt_us, _gemm_rows_in_steps, _gpu_time_cost, _in_this_app, _steps


FP32_SHARE_AT = 0.5
"""Share of the step's GEMM time in fp32/TF32 GEMMs from which the step counts as trained in fp32."""


def _rule_fp32_training(c: _Ctx) -> Optional[Diagnosis]:
    r, roof = c.report, c.roof
    if not r.has_phases or not r.has_gpu or roof.empty:
        return None
    ph = r.phases
    if not (ph[ph["phase"] == "backward"]["cpu_us"] > 0).any():
        return None  # phases without a backward: not a training step
    g = _gemm_rows_in_steps(c, roof[roof["kind"] == "gemm"])  # (the calls the steps made: per step below)
    fp32 = g[g["dtype"].isin(["fp32", "tf32"])]
    if fp32.empty or not _ampere_or_later(c, fp32["kernel"].astype(str).tolist()):
        return None
    n = _steps(r)
    t32 = float((fp32["time_us"] * fp32["count"]).sum()) / n
    tall = float((g["time_us"] * g["count"]).sum()) / n
    if tall <= 0 or t32 < FP32_SHARE_AT * tall:
        return None
    bf = c.peaks.peak_tflops("bf16") if c.peaks is not None else None
    src = c.peaks.source if c.peaks is not None else "measured"
    cost, basis = None, ""
    if bf:
        at_bf16 = float((fp32["flops"] * fp32["count"]).sum()) / n / (bf * 1e6)
        cost, basis = _gpu_time_cost(r, max(0.0, t32 - at_bf16),
                                     f"these GEMMs' time less the same FLOPs at the {src} bf16 peak ({bf:,.0f} "
                                     "TFLOP/s): what autocast could save at most")
    kinds = sorted(set(fp32["dtype"].astype(str)))
    tf = c.peaks.peak_tflops("tf32") if c.peaks is not None else None
    rate = (f" ({src} peaks: bf16 {bf:,.0f}, tf32 {tf:,.0f} TFLOP/s, {bf / tf:.1f}×)" if bf and tf
            else f" ({src} bf16 peak {bf:,.0f} TFLOP/s)" if bf else "")
    text = (f"This training step runs its GEMMs in {' and '.join(kinds)}: {_fmt_us(t32)} of GEMM time per step"
            + (f" ({format_share(t32 / tall)} of the GEMMs')" if tall > 0 else "")
            + ", forward and backward, on a GPU whose "
            f"tensor cores run bf16 faster than TF32 and fp32{rate}. The weights can stay fp32 (the optimizer's "
            "master copy) while the matmuls run in bf16.")
    casts = autocast_casts(c.session)  # (autocast already on around some ops: these GEMMs ran outside it)
    if casts:
        ops = sorted(set(fp32["op"].astype(str)))
        text += (f" Autocast is on for part of the step ({_listed_casts(casts)} recorded with fp32 inputs ran again "
                 f"with cast ones), but these GEMMs ran outside it ({', '.join(ops[:4])}"
                 + (f" and {len(ops) - 4} more" if len(ops) > 4 else "") + ").")
        fix = ("Autocast is already on around part of the step: run these GEMMs under it too (an "
               "autocast(enabled=False) region, or code outside the autocast block, keeps them in fp32), unless they "
               "stay in fp32 on purpose (a loss or an output layer kept in fp32 for accuracy), in which case their "
               "cost is the price of that choice.")
    else:
        fix = ("Wrap the forward and the loss in torch.autocast('cuda', dtype=torch.bfloat16) (backward then follows "
               "the forward's dtypes; parameters and optimizer state stay fp32). For fp16, add torch.amp.GradScaler."
               + _in_this_app(c, "the autocast knob, with dtype fp32", knob="autocast"))
    return Diagnosis("fp32_training", "fp32 training where autocast would do", text, fix, cost, basis,
                     {"slice_ids": [int(i) for ids in fp32["slice_ids"] for i in (ids or [])][:50],
                      "fp32_gemm_us_per_step": t32, "gemm_us_per_step": tall, "dtypes": kinds,
                      "autocast_casts": casts})


def _listed_casts(casts: dict[str, int]) -> str:
    """"12 aten::linear calls and 4 aten::scaled_dot_product_attention calls", the most first."""
    return " and ".join(f"{n:,} {op} call{'s' if n != 1 else ''}"
                        for op, n in sorted(casts.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
