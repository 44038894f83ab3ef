"""``conv_layout``: cuDNN's layout transposes around the convolutions. Tensor-core convolutions run in NHWC; given
NCHW tensors (torch's default memory format), cuDNN transposes the input (and weights) to NHWC before each
convolution and the result back after it (``nchwToNhwcKernel`` / ``nhwcToNchwKernel``). channels_last removes them.
The cost is their GPU time per step when the GPU sets the pace (a compute- or copy-bound steady state; at most what
the step can lose before its CPU sets the pace, ``base._gpu_time_cost``), their launch calls' CPU time when the GPU
waits on the CPU (an overhead-bound one: the GPU's time is then not on the critical path), and their GPU time as an
upper bound when there is no verdict (a trace without steps)."""
from __future__ import annotations

from typing import Optional

from ....analyses import GPU_PACED, measured_steps
from ....units import format_share
from ...questions.base import _per_name, _short
from ..base import Diagnosis, _Ctx, _fmt_n, _fmt_us, _gpu_time_cost, _in_measured_steps, _in_steps, _steps

_TRANSPOSES = ("nchwtonhwc", "nhwctonchw")


def _rule_conv_layout(c: _Ctx) -> Optional[Diagnosis]:
    r = c.report
    ops = r.gpu_ops
    if ops.empty:
        return None
    k = _in_steps(r, ops[ops["category"] == "kernel"])
    lat = r.launch_latency
    if len(r.steps) and not lat.empty:  # the steady state's steps (after the first, from 3 on), as the bound's
        k = _in_measured_steps(r, k)
        n = max(1, len(set(measured_steps(r.steps)["step"].tolist())))
    else:
        n = _steps(r)
    tr = k[_per_name(k["name"], lambda t: t.str.lower().str.contains("|".join(_TRANSPOSES), na=False)).astype(bool)]
    if tr.empty:
        return None
    per_step, count = float(tr["dur_us"].sum()) / n, len(tr) / n
    gpu_total = float(k["dur_us"].sum()) / n
    launches = lat[lat["gpu_id"].isin(tr["id"])] if not lat.empty else lat
    launch_us = float(launches.drop_duplicates("launch_id")["launch_dur_us"].sum()) / n if len(launches) else 0.0
    ss = r.summary.get("steady_state") or {}
    unit = "per step" if len(r.steps) else "in the trace"
    if ss.get("bound") in GPU_PACED:
        # (the step gets no shorter than its CPU's own time: the one bound on GPU time saved)
        cost, basis = _gpu_time_cost(r, per_step, "the transposes' GPU time per step: the GPU sets the pace")
    elif ss.get("bound") == "overhead-bound":
        cost, basis = launch_us, ("the CPU time of the transposes' launch calls per step: the GPU waits on the CPU, "
                                  "so their GPU time is not on the critical path (it is when the GPU sets the pace)")
    else:  # no steps (or no GPU work in them): nothing says which side sets the pace
        cost, basis = per_step, (f"the transposes' GPU time {unit}: what channels_last saves at most (without a "
                                 "steady-state verdict, whether the GPU or the CPU sets the pace is not known)")
    every = ops[(ops["category"] == "kernel") & _per_name(ops["name"], lambda t: t.str.lower().str.contains(
        "|".join(_TRANSPOSES), na=False)).astype(bool)]  # (the whole trace's, as the convolutions counted beside them)
    transposed, convs = _transposed_convs(c, every["id"].astype(int).tolist())
    names = sorted({str(x) for x in tr["name"]}, key=lambda x: (len(x), x))  # (a set's order varies between runs)
    named = "; ".join(_short(x) for x in names[:2]) + (f"; and {len(names) - 2} more" if len(names) > 2 else "")
    text = (f"cuDNN transposes between NCHW and NHWC around the convolutions: {_fmt_n(count)} transpose kernel"
            f"{'s' if count != 1 else ''} {unit} ({named}), {_fmt_us(per_step)} of "
            f"GPU time {unit}, {format_share(per_step / gpu_total)} of all kernel time; "
            f"{format_share(len(tr) / max(1, len(k)))} of the kernels. "
            + (f"{transposed:,} of the trace's {convs:,} convolution calls (aten::convolution) launched them: their "
               "kernels work in NHWC "
               "and their tensors arrive in NCHW; the others ran kernels of their own layout."
               if 0 < transposed < convs else
               "The convolution kernels work in NHWC, and the tensors arrive in NCHW."))
    fix = ("Use channels_last: model = model.to(memory_format=torch.channels_last) and "
           "x = x.contiguous(memory_format=torch.channels_last) (or .to(memory_format=...)) once, outside the step; the "
           "convolutions then read and write NHWC directly. torch.compile does this layout choice itself for convs it "
           "compiles.")
    return Diagnosis("conv_layout", "Layout transposes around convolutions (use channels_last)", text, fix, cost,
                     basis, {"slice_ids": tr["id"].astype(int).tolist()[:50], "transposes_per_step": count,
                             "convolutions_transposed": transposed, "convolutions": convs,
                             "transpose_us_per_step": per_step, "launch_us_per_step": launch_us,
                             "kernel_share": per_step / gpu_total if gpu_total else None})



def _transposed_convs(c: _Ctx, transpose_ids: list) -> tuple[int, int]:
    """(convolution calls that launched one of these transposes, all convolution calls): each transpose's launch
    call walked up to its ``aten::convolution`` (the op cuDNN's transposes run under, inside ``cudnn_convolution``),
    against every ``aten::convolution`` in the trace. On HTA's V100 trace 15 of 530 calls transposed: the others ran
    NCHW kernels, so the layout is theirs, not all the convolutions'."""
    tb, lat = c.session.tables, c.report.launch_latency
    col = tb.name
    code = next((i for i, n in enumerate(col.uniq) if n == "aten::convolution"), None)
    if code is None or lat.empty:
        return 0, 0
    launch = dict(zip(lat["gpu_id"].astype(int), lat["launch_id"].astype(int)))
    hit = set()
    for g in transpose_ids:
        p = launch.get(int(g), -1)
        while p >= 0 and col.codes[p] != code:
            p = int(tb.parent_id[p])
        if p >= 0:
            hit.add(p)
    return len(hit), int((col.codes == code).sum())
