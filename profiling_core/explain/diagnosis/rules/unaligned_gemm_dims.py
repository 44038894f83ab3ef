"""``unaligned_gemm_dims``: a bf16/fp16 GEMM whose leading dimensions are not multiples of 8, so cuBLAS cannot use its
16-byte-aligned tensor-core kernels.

The rule: for ``x @ w`` with row-major operands (torch's default), A is M×K with leading dimension K, B is K×N with
leading dimension N and the result M×N with leading dimension N (``nn.Linear``'s transposed weight has K too), so K and
N are the dimensions whose alignment matters; M (the rows, e.g. the batch of a decode step) does not. The kernel that
ran is the evidence (:func:`kernel_family`: its operand alignment, the SM generation it was built for). The cost bound
is the time of every unaligned GEMM less the same FLOPs at each one's roof (the roofline's ceiling for its
intensity), on the critical path only where the GPU sets the pace (``base._gpu_time_cost``). The text describes the
GEMM shape with the most time per step and, where the cost counts more than one shape, names each with its time per
step (each is padded on its own).

The fix: pad K and N to a multiple of 8. torch.compile's Inductor pads such GEMMs where it judges that padding pays
(``torch._inductor.config.shape_padding``); where a GEMM ran under torch.compile all the same, unpadded
(``analyses.ran_compiled``: its op lies in a compiled region or a compiled graph's call), the fix says so and names
the padding to do by hand instead of sending the user to torch.compile."""
from __future__ import annotations

from typing import Optional

import pandas as pd

from ....analyses import ran_compiled
from ....analyses.categories import kernel_family, split_kernel_names
from ...questions.base import _short
from ..base import Diagnosis, _Ctx, _fmt_us, _gpu_time_cost, _steps

ALIGN_ELEMENTS = 8
"""16 bytes of bf16/fp16: the alignment cuBLAS's vectorised tensor-core kernels need of each leading dimension."""
_PAD_BY_HAND = ("e.g. torch.nn.functional.pad of the inputs and a slice of the result, or choose sizes that are (a "
                "vocabulary padded to a multiple of 64)")
LISTED = 6
"""Unaligned GEMM shapes the text names one by one; the rest are counted together."""
_SHAPE = ["dtype", "batch", "m", "k", "n"]


def _dims(row) -> str:
    b = row["batch"]
    return (f"M={int(row['m'])}, K={int(row['k'])}, N={int(row['n'])}"
            + (f" (a batch of {int(b)})" if b is not None and b == b and int(b) > 1 else ""))


def _odd(row) -> list[str]:
    return [d for d in ("K", "N") if int(row[d.lower()]) % ALIGN_ELEMENTS]


def _shapes(bad: pd.DataFrame, steps: int) -> pd.DataFrame:
    """One row per unaligned GEMM shape (dtype, batch, M, K, N: each is padded on its own) with its GPU time per
    step (``us_per_step``, every roofline row of that shape: one op or kernel or another), most time first."""
    b = bad.assign(_us=bad["time_us"] * bad["count"] / steps, batch=bad["batch"].fillna(1))
    out = b.groupby(_SHAPE, sort=False, dropna=False)["_us"].sum().rename("us_per_step").reset_index()
    return out.sort_values("us_per_step", ascending=False, kind="stable").reset_index(drop=True)


def _padding(row) -> str:
    """The padding a GEMM row needs by hand: each of its unaligned leading dimensions (K, N) up to the next multiple
    of ``ALIGN_ELEMENTS``."""
    return ", ".join(f"{d} from {v} to {-(-v // ALIGN_ELEMENTS) * ALIGN_ELEMENTS}"
                     for d in ("K", "N") if (v := int(row[d.lower()])) % ALIGN_ELEMENTS)


def _fix(c: _Ctx, bad: pd.DataFrame) -> str:
    """Pad K and N; torch.compile pads such GEMMs itself, unless one of them already ran under it
    (:func:`~profiling_core.analyses.ran_compiled`) unpadded: then the padding to do by hand, shape by shape."""
    ids = [[int(i) for i in lst] for lst in bad["slice_ids"]]
    flat = ran_compiled(c.session, [i for lst in ids for i in lst], shared=c.shared).tolist()
    compiled, at = [], 0
    for (_i, row), lst in zip(bad.iterrows(), ids):
        if any(flat[at:at + len(lst)]):
            compiled.append(row)
        at += len(lst)
    if not compiled:
        return ("Pad K and N to a multiple of 8 (64 is better still: whole tiles), " + _PAD_BY_HAND + "; "
                "torch.compile pads such GEMMs itself (torch._inductor.config.shape_padding, on by default).")
    shapes = list(dict.fromkeys((_dims(r), _padding(r)) for r in compiled))
    alone = len(shapes) == 1 and len(compiled) == len(bad)
    which = ("This GEMM" if alone else
             "The GEMM" + ("s" if len(shapes) > 1 else "") + " with " + "; ".join(d for d, _p in shapes))
    pads = "; ".join(p if len(shapes) == 1 else f"{d}: {p}" for d, p in shapes)
    text = (f"{which} ran under torch.compile (inside a compiled region) and unpadded: Inductor's shape padding "
            f"(torch._inductor.config.shape_padding) did not pad {'it' if len(shapes) == 1 else 'them'} here, so "
            f"pad by hand to a multiple of 8 ({pads}; 64 is better still: whole tiles), " + _PAD_BY_HAND + ".")
    if len(compiled) < len(bad):
        text += (" The other unaligned GEMMs ran eagerly: pad their K and N the same way, or compile them "
                 "(Inductor pads such GEMMs where it judges that padding pays).")
    return text


def _rule_unaligned_dims(c: _Ctx) -> Optional[Diagnosis]:
    r = c.roof
    g = r[(r["kind"] == "gemm") & r["dtype"].isin(["bf16", "fp16"])] if not r.empty else r
    g = g[g["m"].notna()] if not g.empty else g
    if g.empty:
        return None
    bad = g[g.apply(lambda x: any(int(v) % ALIGN_ELEMENTS for v in (x["k"], x["n"])), axis=1)]
    if bad.empty:
        return None
    steps = _steps(c.report)
    shapes = _shapes(bad, steps)
    top = shapes.iloc[0]  # the shape with the most time per step; its row with the most time describes it
    mine = bad[(bad["dtype"] == top["dtype"]) & (bad["batch"].fillna(1) == top["batch"])
               & (bad["m"] == top["m"]) & (bad["k"] == top["k"]) & (bad["n"] == top["n"])]
    row = mine.loc[(mine["time_us"] * mine["count"]).idxmax()]
    dims = f"M={int(row['m'])}, K={int(row['k'])}, N={int(row['n'])}"
    odd = _odd(row)
    fams = [kernel_family(x) for x in split_kernel_names(str(row["kernel"]))]
    fam_txt = "; ".join(f"{_short(x, 70)} (" + ", ".join(
        t for t in ((f"built for sm{f['arch']}" if f["arch"] else ""), (f"operand alignment {f['align']} element"
                    f"{'s' if (f['align'] or 0) > 1 else ''}" if f["align"] else "")) if t) + ")"
        for x, f in zip(split_kernel_names(str(row["kernel"])), fams))
    fam_txt = fam_txt.replace(" ()", "")
    per_step = float((bad["time_us"] * bad["count"]).sum()) / steps
    cost, basis = None, ""
    peak, src = row["peak"], c.peaks.source if c.peaks is not None else "measured"
    roof = row.get("roof") or "compute"
    if bad["peak"].map(lambda v: v is not None and v == v and v > 0).all():
        work = (bad["flops"] * bad["count"]).groupby(bad["peak"]).sum()  # each GEMM's FLOPs at its own roof
        ideal = sum(float(f) / steps / (float(p) * 1e6) for p, f in work.items())
        roofs = list(dict.fromkeys((x["roof"] or "compute", f"{x['peak']:,.1f} TFLOP/s")
                                   for _i, x in bad.sort_values("peak").iterrows()))
        what = (f"this GEMM time less the same FLOPs at its {roof} roof ({peak:,.1f} TFLOP/s, from the {src} peaks)"
                if len(shapes) == 1 else
                f"these {len(shapes)} GEMM shapes' time less the same FLOPs at "
                + (f"their {roofs[0][0]} roof ({roofs[0][1]}" if len(roofs) == 1 else
                   "each one's roof (" + "; ".join(f"{r} {p}" for r, p in roofs)) + f", from the {src} peaks)")
        cost, basis = _gpu_time_cost(c.report, max(0.0, per_step - ideal), what + ": a bound, not a promise")
    frac = (f" ({row['fraction_of_peak']:.0%} of its {roof} roof, {src})"
            if row["fraction_of_peak"] is not None and pd.notna(row["fraction_of_peak"]) else "")
    text = (f"A {row['dtype']} GEMM with {dims}: {' and '.join(odd)} "
            f"{'is' if len(odd) == 1 else 'are'} not {'a multiple' if len(odd) == 1 else 'multiples'} of "
            f"{ALIGN_ELEMENTS}, and K and N are the leading dimensions of row-major operands, so cuBLAS cannot use its "
            f"16-byte-aligned tensor-core kernels; it ran {fam_txt} at {row['tflops']:,.1f} TFLOP/s{frac}.")
    if len(shapes) > 1:
        named = [f"{_dims(x)} ({' and '.join(_odd(x))} unaligned) {_fmt_us(float(x['us_per_step']))}"
                 for _i, x in shapes.head(LISTED).iterrows()]
        rest = shapes.iloc[LISTED:]
        if len(rest):
            named.append(f"and {len(rest)} more, {_fmt_us(float(rest['us_per_step'].sum()))} together")
        text += (f" The cost counts {len(shapes)} unaligned GEMM shapes, each by its GPU time per step, this one "
                 f"first: " + "; ".join(named) + ".")
    fix = _fix(c, bad)
    return Diagnosis("unaligned_gemm_dims", "GEMM dimensions not multiples of 8", text, fix, cost, basis,
                     {"slice_ids": [i for lst in bad["slice_ids"] for i in lst][:50], "kernel": row["kernel"],
                      "m": int(row["m"]), "k": int(row["k"]), "n": int(row["n"]), "unaligned": odd,
                      "tflops": row["tflops"], "fraction_of_peak": row["fraction_of_peak"], "roof": roof,
                      "shapes": [{"dtype": x["dtype"], "batch": int(x["batch"]), "m": int(x["m"]), "k": int(x["k"]),
                                  "n": int(x["n"]), "unaligned": _odd(x), "us_per_step": float(x["us_per_step"])}
                                 for _i, x in shapes.iterrows()]})
