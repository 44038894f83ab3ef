"""``unaligned_gemm_dims``: a bf16/fp16 GEMM a leading dimension of which is not a multiple of 8, so cuBLAS cannot
use its 16-byte-aligned tensor-core kernels.

The rule: cuBLAS reads each matrix of a GEMM (A, M×K; B, K×N; the result C, M×N) along its contiguous dimension, its
rows ``ld`` elements apart; each ``ld`` must be a multiple of 8 elements (16 bytes). Which extent that is depends on
the layout, read from the op's recorded ``Input Strides`` (:func:`~profiling_core.analyses.gemm_leading_dims`): K for
a row-major A, M for a transposed one (``x.t()``, or the weight gradient ``dY.t() @ X`` that autograd makes), N for a
row-major B, K for ``nn.Linear``'s weight (stored N×K), N for the result. So M counts only where A is read
transposed: on an H200, (4095×4096) @ (4096×4096) ran a 16-byte-aligned kernel at 808 TFLOP/s with A row-major and
an ``align1`` kernel at 153 TFLOP/s with A a transposed view (``scripts/verdict_cases/gemm_layouts.py``). A matrix
of one column is a vector with no leading dimension to align ((4096×4096) @ (4096×1) ran a Hopper GEMM kernel at 81%
of its memory roof); one of one row keeps its row length (a decode step's (1×4095) @ (4095×4096) ran cuBLAS's gemv
kernel at 63% of its memory roof, K = 4096 a Hopper kernel at 84%). Without recorded strides every operand is taken
as row-major, torch's default (K and N, and the text says so). A GEMM known only from the run's config (replayed
from a CUDA graph: no CPU op recorded its shapes) is judged only in an eager run: a compiled run's Inductor may have
padded it (on the H200 it ran the study's 4095² GEMM as 4096² under ``compile="default"``, as its recorded shapes
say, and under ``reduce-overhead`` the replay ran a Triton padding copy and an aligned Hopper kernel).

The kernel that ran is the evidence (:func:`kernel_family`: its operand alignment, the SM generation it was built
for); a GEMM that launched none ran on the CPU, where neither cuBLAS nor its alignment applies, and is not judged.
The cost bound is the time of every unaligned GEMM less the same FLOPs at each one's roof (the roofline's ceiling for
its intensity), on the critical path only where the GPU sets the pace (``base._gpu_time_cost``). The text
describes the GEMM shape with the most time per step and, where the cost counts more than one shape, names each with
its time per step (each is padded on its own).

The fix: pad the unaligned extents to a multiple of 8 (a transposed view whose other extent is aligned can be made
contiguous instead, where the user's code makes it). torch.compile's Inductor pads such GEMMs where it judges that
padding pays (``torch._inductor.config.shape_padding``), GEMM by GEMM, by timing the padded GEMM against the unpadded
one: on the H200 it padded a language model's head of 50,257 rows to 50,264, forward and backward; on an H100 the
same head's M=50257 GEMM stayed unpadded (docs/FINDINGS.md). So the eager fix says that it can, not that it will;
where a GEMM ran under torch.compile all the same, unpadded
(``analyses.ran_compiled``: its op lies in a compiled region or a compiled graph's call), the fix says so and names
the padding to do by hand instead of sending the user to torch.compile."""
from __future__ import annotations

from typing import Optional

import pandas as pd

from ....analyses import ran_compiled
from ....analyses.categories import kernel_family, split_kernel_names
from ....config import config_field as _cfg
from ...questions.base import _short
from ..base import Diagnosis, _Ctx, _fmt_us, _gemm_rows_in_steps, _gpu_time_cost, _steps

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


def _up(v: int) -> int:
    return -(-v // ALIGN_ELEMENTS) * ALIGN_ELEMENTS


def _matrices(row) -> list[dict]:
    """The row's matrices as cuBLAS reads them (``leading_dims``: operand, layout, dim, ld), or, where the trace
    recorded no strides, as if each were row-major (layout None): A's rows span K, B's and the result's N; a matrix
    of one column is a vector either way (ld None)."""
    lds = row.get("leading_dims")
    if isinstance(lds, list) and lds:
        return lds
    k, n = int(row["k"]), int(row["n"])
    return [{"operand": o, "layout": None, "dim": d, "ld": None if cols == 1 else cols}
            for o, d, cols in (("A", "K", k), ("B", "N", n), ("C", "N", n))]


def _unaligned(row) -> list[dict]:
    """The row's matrices whose leading dimension is not a multiple of ``ALIGN_ELEMENTS`` (a vector has none), each
    with ``wide``: its rows lie further apart than the extent they span (a view of a wider tensor; padding that
    extent does not help)."""
    ext = {"M": int(row["m"]), "K": int(row["k"]), "N": int(row["n"])}
    return [{**x, "wide": int(x["ld"]) != ext[x["dim"]]} for x in _matrices(row)
            if x["ld"] is not None and int(x["ld"]) % ALIGN_ELEMENTS]


def _odd(row) -> list[str]:
    """The extents (M, K, N) whose padding the row needs: those an unaligned leading dimension spans."""
    got = {x["dim"] for x in _unaligned(row) if not x["wide"]}
    return [d for d in ("M", "K", "N") if d in got]


def _label(row) -> str:
    """What is unaligned in a row, in a few words: its extents ("K and N"), or a view's rows ("the first operand's
    rows")."""
    wide = [f"{_WHO[x['operand']]}'s rows" for x in _unaligned(row) if x["wide"]]
    return " and ".join(_odd(row) + wide)


_WHO = {"A": "the first operand", "B": "the second operand", "C": "the result"}
_LAYOUT = {"transposed": " (read transposed: a view whose rows are contiguous, such as x.t())",
           "copied": " (which torch first copies to a contiguous tensor)"}


def _why(row) -> str:
    """Which extents are not multiples of 8 and whose leading dimension each is, e.g. "M is not a multiple of 8 and
    is the leading dimension of the first operand (read transposed ...)"."""
    bad = _unaligned(row)
    odd = _odd(row)
    whose = []
    for d in odd:
        who = [_WHO[x["operand"]] + _LAYOUT.get(x["layout"], "") for x in bad if x["dim"] == d and not x["wide"]]
        whose.append(" and of ".join(who) if len(who) < 3 else ", of ".join(who[:-1]) + " and of " + who[-1])
    parts = []
    if len(odd) == 1:
        parts.append(f"{odd[0]} is not a multiple of {ALIGN_ELEMENTS} and is the leading dimension of {whose[0]}")
    elif odd:
        parts.append(" and ".join([", ".join(odd[:-1]), odd[-1]]) + f" are not multiples of {ALIGN_ELEMENTS}: "
                     + ", ".join(f"{d} is the leading dimension of {w}" if i == 0 else f"{d} of {w}"
                                 for i, (d, w) in enumerate(zip(odd, whose))))
    for x in bad:
        if x["wide"]:
            parts.append(f"{_WHO[x['operand']]}'s rows are {int(x['ld'])} elements apart (a view of a wider tensor), "
                         f"not a multiple of {ALIGN_ELEMENTS}")
    text = "; ".join(parts)
    if all(x["layout"] is None for x in _matrices(row)):
        text += " (the trace recorded no Input Strides, so the operands are taken as row-major, torch's default)"
    return text


def _padding(row) -> str:
    """The padding a GEMM row needs by hand: each unaligned extent up to the next multiple of ``ALIGN_ELEMENTS``
    (or, for a transposed view whose other extent is aligned, a contiguous copy); a view of a wider tensor, that
    tensor's rows."""
    ext = {"M": int(row["m"]), "K": int(row["k"]), "N": int(row["n"])}
    out = [f"{d} from {ext[d]} to {_up(ext[d])}" for d in _odd(row)]
    other = {"A": "K", "B": "N"}
    for x in _unaligned(row):
        o = other.get(x["operand"])
        if x["layout"] == "transposed" and not x["wide"] and o and ext[o] % ALIGN_ELEMENTS == 0:
            out.append(f"or, where your code makes {_WHO[x['operand']]}'s transposed view, a contiguous copy of it, "
                       f"whose rows span {o}={ext[o]}")
        if x["wide"]:
            out.append(f"{_WHO[x['operand']]}'s rows from {int(x['ld'])} to {_up(int(x['ld']))} elements apart "
                       "(pad the tensor it is a view of, or make it contiguous)")
    return ", ".join(out)


def _shapes(bad: pd.DataFrame, steps: int) -> pd.DataFrame:
    """One row per unaligned GEMM shape (dtype, batch, M, K, N and the extents to pad: each is padded on its own)
    with its GPU time per step (``us_per_step``, every roofline row of that shape: one op or kernel or another),
    most time first; ``row`` is the shape's roofline row with the most time."""
    b = bad.assign(_us=bad["time_us"] * bad["count"] / steps, batch=bad["batch"].fillna(1),
                   _odd=[" and ".join(_odd(r)) + "|" + _padding(r) for _i, r in bad.iterrows()],
                   _total=bad["time_us"] * bad["count"])
    keys = _SHAPE + ["_odd"]
    out = b.groupby(keys, sort=False, dropna=False)["_us"].sum().rename("us_per_step").reset_index()
    top = b.sort_values("_total", ascending=False, kind="stable").drop_duplicates(keys)
    out = out.merge(top[keys].assign(row=list(top.index)), on=keys, how="left")
    return out.sort_values("us_per_step", ascending=False, kind="stable").reset_index(drop=True)


def _fix(c: _Ctx, bad: pd.DataFrame, shapes: pd.DataFrame) -> str:
    """The padding of each unaligned shape, and that torch.compile can pad such GEMMs itself, unless one of them
    already ran under it (:func:`~profiling_core.analyses.ran_compiled`) unpadded: then the padding to do by hand,
    shape by shape."""
    ids = [[int(i) for i in lst] for lst in bad["slice_ids"]]
    flat = ran_compiled(c.session, [i for lst in ids for i in lst], shared=c.shared).tolist()
    compiled, at = [], 0
    for (_i, row), lst in zip(bad.iterrows(), ids):
        if any(flat[at:at + len(lst)]):
            compiled.append(row)
        at += len(lst)
    if not compiled:
        every = list(dict.fromkeys((_dims(bad.loc[x["row"]]), _padding(bad.loc[x["row"]]))
                                   for _i, x in shapes.iterrows()))
        pads = "; ".join(p if len(every) == 1 else f"{d}: {p}" for d, p in every)
        return (f"Pad to a multiple of 8 ({pads}; 64 is better still: whole tiles), " + _PAD_BY_HAND + "; "
                "torch.compile can pad such GEMMs itself (torch._inductor.config.shape_padding, on by default): it "
                "pads each one where its own timing finds the padded GEMM faster, so read a compiled run's GEMMs "
                "again (this finding names any it left unpadded).")
    shapes = list(dict.fromkeys((_dims(r), _padding(r)) for r in compiled))
    alone = len(shapes) == 1 and len(compiled) == len(bad)
    which = ("This GEMM" if alone else
             "The GEMM" + ("s" if len(shapes) > 1 else "") + " with " + "; ".join(d for d, _p in shapes))
    pads = "; ".join(p if len(shapes) == 1 else f"{d}: {p}" for d, p in shapes)
    text = (f"{which} ran under torch.compile (inside a compiled region) and unpadded: Inductor's shape padding "
            f"(torch._inductor.config.shape_padding) did not pad {'it' if len(shapes) == 1 else 'them'} here, so "
            f"pad by hand to a multiple of 8 ({pads}; 64 is better still: whole tiles), " + _PAD_BY_HAND + ".")
    if len(compiled) < len(bad):
        text += (" The other unaligned GEMMs ran eagerly: pad them the same way, or compile them "
                 "(Inductor pads such GEMMs where it judges that padding pays).")
    return text


def _rule_unaligned_dims(c: _Ctx) -> Optional[Diagnosis]:
    r = c.roof
    g = r[(r["kind"] == "gemm") & r["dtype"].isin(["bf16", "fp16"])] if not r.empty else r
    # a GEMM that launched no GPU kernel ran on the CPU (no cuBLAS, no kernel to cite): not this rule's
    g = g[g["m"].notna() & (g["kernel"].fillna("").astype(str) != "")] if not g.empty else g
    if not g.empty and (_cfg(c.config, "compile") or "off") != "off":
        g = g[g["flops_from"] != "config"]  # a compiled run's shapes that ran are unknown: Inductor may have padded
    if g.empty:
        return None
    bad = _gemm_rows_in_steps(c, g.loc[[bool(_unaligned(x)) for _i, x in g.iterrows()]])
    if bad.empty:
        return None
    steps = _steps(c.report)
    shapes = _shapes(bad, steps)
    row = bad.loc[shapes.iloc[0]["row"]]  # the shape with the most time per step, by its row with the most time
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
    text = (f"A {row['dtype']} GEMM with {dims}: {_why(row)}, so cuBLAS cannot use its 16-byte-aligned tensor-core "
            f"kernels; it ran {fam_txt} at {row['tflops']:,.1f} TFLOP/s{frac}.")
    if len(shapes) > 1:
        named = [f"{_dims(x)} ({_label(bad.loc[x['row']])} unaligned) {_fmt_us(float(x['us_per_step']))}"
                 for _i, x in shapes.head(LISTED).iterrows()]
        rest = shapes.iloc[LISTED:]
        if len(rest):
            named.append(f"and {len(rest)} more, {_fmt_us(float(rest['us_per_step'].sum()))} together")
        text += (f" The cost counts {len(shapes)} unaligned GEMM shapes, each by its GPU time per step, this one "
                 f"first: " + "; ".join(named) + ".")
    fix = _fix(c, bad, shapes)
    return Diagnosis("unaligned_gemm_dims", "GEMM dimensions not multiples of 8", text, fix, cost, basis,
                     {"slice_ids": [i for lst in bad["slice_ids"] for i in lst][:50], "kernel": row["kernel"],
                      "m": int(row["m"]), "k": int(row["k"]), "n": int(row["n"]), "unaligned": odd,
                      "leading_dims": _matrices(row), "tflops": row["tflops"],
                      "fraction_of_peak": row["fraction_of_peak"], "roof": roof,
                      "shapes": [{"dtype": x["dtype"], "batch": int(x["batch"]), "m": int(x["m"]), "k": int(x["k"]),
                                  "n": int(x["n"]), "unaligned": _odd(bad.loc[x["row"]]),
                                  "us_per_step": float(x["us_per_step"])} for _i, x in shapes.iterrows()]})
