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
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from ..analyses import Report, analyze, gemm_dims, launch_ops
from ..analyses.categories import is_gemm_kernel, kernel_family
from ..config import DTYPES, config_field as _cfg
from ..store.peaks import DevicePeaks

__all__ = ["Diagnosis", "diagnose", "roofline", "kernel_family", "RULES"]

_TORCH_DTYPES = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "double": "fp64"}
_ESIZE = {**DTYPES, "fp64": 8, "tf32": 4}  # bytes per element: the run dtypes and what else a trace records
_ELEMENTWISE = ("aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::sub", "aten::div", "aten::relu",
                "aten::gelu", "aten::silu", "aten::sigmoid", "aten::tanh", "aten::copy_")


@dataclass(frozen=True)
class Diagnosis:
    """One thing to change, found in the trace."""

    rule: str
    """The rule's id, e.g. ``fp32_without_tf32``."""
    title: str
    text: str
    """What is wrong, with the numbers it rests on."""
    fix: str
    """The PyTorch change that addresses it."""
    cost_us_per_step: Optional[float] = None
    """What it costs per step, measured or bounded as ``cost_basis`` says; None where it cannot be measured."""
    cost_basis: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    """Slice ids (``slice_ids``) and the numbers used."""

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "title": self.title, "text": self.text, "fix": self.fix,
                "cost_us_per_step": self.cost_us_per_step, "cost_basis": self.cost_basis, "evidence": self.evidence}


def _study_matmul(config) -> Optional[tuple[int, int]]:
    """(batch, n) of the study's one matmul per step when the config is a matmul_add run's (an ``ExperimentConfig``
    or its meta.json dict, where no ``workload`` means matmul_add); None for any other workload, whose GEMMs only
    their recorded shapes size."""
    if config is None or (_cfg(config, "workload") or "matmul_add") != "matmul_add":
        return None
    n = _cfg(config, "size")
    return (_cfg(config, "batch") or 1, n) if isinstance(n, int) else None


def _args_of(session, name: str, ids) -> dict[int, Any]:
    tb = session.tables
    asids = {int(i): int(tb.arg_set_id[int(i)]) for i in ids}
    values = tb.args.get(name, {a for a in asids.values() if a >= 0})
    return {i: values.get(a) for i, a in asids.items() if a >= 0 and a in values}


def _steps(report: Report) -> int:
    return max(1, len(report.steps))


def _per(report: Report) -> str:
    """How a per-step figure reads: "per step", or "in the trace" for a trace without ProfilerStep slices (the
    figures are then whole-trace totals)."""
    return "per step" if len(report.steps) else "in the trace"


def roofline(report: Report, session, config=None, peaks: Optional[DevicePeaks] = None) -> pd.DataFrame:
    """One row per GEMM op and per elementwise/copy GPU op group, against ``peaks``.

    Columns: ``kind`` (``gemm``, ``elementwise``, ``copy``), ``op`` (the CPU op, or the kernel for a GEMM that had
    no CPU op of its own, e.g. replayed from a CUDA graph), ``kernel``, ``dtype``, ``m``/``k``/``n``/``batch`` (GEMMs
    with known shapes), ``count``, ``time_us`` (mean per call), ``flops``, ``bytes``, ``intensity`` (FLOP/byte),
    ``tflops``, ``gbs``, ``peak`` (the ceiling it is judged by: TFLOP/s of its dtype for a GEMM, GB/s for the rest),
    ``fraction_of_peak``, ``flops_from``, ``slice_ids``.

    GEMM FLOPs are 2·M·K·N per product (times the batch); bytes are each operand read once and the result written
    once (the least a GEMM can move). Elementwise bytes are the inputs read and the broadcast output written, and
    their FLOPs one per output element; a memcpy's bytes are what the trace records for it (read and written for a
    device-to-device copy). An elementwise op can pass the measured bandwidth (fraction above 1) when an input is
    still in L2 (the GEMM's result just written, for the study's add): the copy that measured it streams from HBM. A GEMM's dtype comes from its recorded ``Input type``, else
    the config; an fp32 GEMM whose kernel names say ``tf32`` is judged against the tf32 peak.
    """
    cols = ["kind", "op", "kernel", "dtype", "batch", "m", "k", "n", "count", "time_us", "flops", "bytes",
            "intensity", "tflops", "gbs", "peak", "fraction_of_peak", "flops_from", "slice_ids"]
    rows: list[dict] = []
    g = report.gemm_throughput
    cfg_dtype = _cfg(config, "dtype")
    if not g.empty:
        g = g[g["device"] == "gpu"] if (g["device"] == "gpu").any() else g
        ids = g["id"].tolist()
        dims = _args_of(session, "Input Dims", ids)
        types = _args_of(session, "Input type", ids)
        groups: dict[tuple, dict] = {}
        for rec in g.itertuples(index=False):
            t = types.get(rec.id)
            dtype = _TORCH_DTYPES.get(t[0]) if isinstance(t, list) and t and isinstance(t[0], str) else cfg_dtype
            # What ran: the recorded shapes (torch.compile may have padded them), else the config's workload.
            d, src = gemm_dims(rec.op, dims.get(rec.id)), "shapes"
            study = _study_matmul(config) if d is None else None
            if study is not None:
                batch, n = study
                d, src = (batch, n, n, n), "config"
            flops = 2 * math.prod(d) if d is not None else int(rec.flops)
            names = rec.kernel_names or ""
            if dtype == "fp32" and "tf32" in names.lower():
                dtype = "tf32"
            grp = groups.setdefault((rec.op, names, dtype, d, flops, src), {"ids": [], "time": []})
            grp["ids"].append(int(rec.id))
            grp["time"].append(float(rec.time_us))
        for (op, names, dtype, d, flops, src), grp in groups.items():
            rows.append(_gemm_row(op, names, dtype, d, flops, grp["ids"], grp["time"], src, peaks))
    rows += _graph_gemms(report, config, peaks, have_cpu_gemm=not g.empty)
    rows += _memory_rows(report, session, peaks)
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    return pd.DataFrame(rows)[cols]


def _gemm_row(op, kernel, dtype, d, flops, ids, times, src, peaks) -> dict:
    batch, m, k, n = d if d is not None else (None, None, None, None)
    e = _ESIZE.get(dtype or "", None)
    nbytes = (batch or 1) * (m * k + k * n + m * n) * e if d is not None and e else None
    t = float(np.mean(times))
    tflops = flops / t / 1e6 if t > 0 else float("nan")
    peak = peaks.peak_tflops(dtype) if peaks is not None and dtype else None
    return {"kind": "gemm", "op": op, "kernel": kernel, "dtype": dtype, "batch": batch, "m": m, "k": k, "n": n,
            "count": len(ids), "time_us": t, "flops": flops, "bytes": nbytes,
            "intensity": flops / nbytes if nbytes else None, "tflops": tflops,
            "gbs": nbytes / t / 1e3 if nbytes and t > 0 else None, "peak": peak,
            "fraction_of_peak": tflops / peak if peak else None, "flops_from": src, "slice_ids": ids}


def _graph_gemms(report: Report, config, peaks, have_cpu_gemm: bool) -> list[dict]:
    """GEMM kernels no CPU GEMM op launched (replayed from a CUDA graph, or a Triton template), with FLOPs from the
    run's config (one GEMM per step: the study's workload); none without a matmul_add config."""
    study = _study_matmul(config)
    if have_cpu_gemm or study is None or report.gpu_ops.empty:
        return []
    ops = report.gpu_ops
    k = ops[(ops["category"] == "kernel") & ops["name"].map(is_gemm_kernel)]
    if k.empty:
        return []
    per_step = len(k) / _steps(report)
    if abs(per_step - 1) > 1e-9:  # the config says one GEMM per step; any other count cannot be matched to it
        return []
    (batch, n), dtype = study, _cfg(config, "dtype")
    rows = []
    for name, grp in k.groupby(k["name"].astype(object), sort=False):
        dt = "tf32" if dtype == "fp32" and "tf32" in name.lower() else dtype
        rows.append(_gemm_row(f"kernel {name}", name, dt, (batch, n, n, n), 2 * batch * n ** 3,
                              grp["id"].astype(int).tolist(), grp["dur_us"].astype(float).tolist(), "config", peaks))
    return rows


def _memory_rows(report: Report, session, peaks) -> list[dict]:
    """Copies (bytes from the trace) and the elementwise kernels their CPU op's shapes size."""
    out = []
    ops = report.gpu_ops
    if ops.empty:
        return out
    bw = peaks.bandwidth_gbs if peaks is not None else None
    cp = ops[ops["category"] == "gpu_memcpy"]
    if not cp.empty:
        nb = _args_of(session, "bytes", cp["id"].tolist())
        for name, grp in cp.groupby(cp["name"].astype(object), sort=False):
            b = [nb.get(int(i)) for i in grp["id"]]
            if any(not isinstance(x, int) for x in b):
                continue
            t = float(grp["dur_us"].mean())
            moved = 2.0 * float(np.mean(b)) if "DtoD" in name else float(np.mean(b))  # DtoD: read and written
            gbs = moved / t / 1e3 if t > 0 else None
            peak = bw if "DtoD" in name else None
            out.append({"kind": "copy", "op": name, "kernel": name, "dtype": None, "batch": None, "m": None,
                        "k": None, "n": None, "count": len(grp), "time_us": t, "flops": 0, "bytes": moved,
                        "intensity": 0.0, "tflops": None, "gbs": gbs, "peak": peak,
                        "fraction_of_peak": gbs / peak if peak and gbs else None, "flops_from": None,
                        "slice_ids": grp["id"].astype(int).tolist()})
    lat = report.launch_latency
    if lat.empty:
        return out
    kern = lat[(lat["gpu_category"] == "kernel") & ~lat["gpu_name"].map(is_gemm_kernel)]
    if kern.empty:
        return out
    lids = kern["launch_id"].to_numpy(dtype=np.int64)
    parents = {int(lid): int(op) for lid, op in zip(lids, launch_ops(session, lids)) if op >= 0}
    dims = _args_of(session, "Input Dims", set(parents.values()))
    types = _args_of(session, "Input type", set(parents.values()))
    groups: dict[tuple, list] = {}
    for rec in kern.itertuples(index=False):
        op_id = parents.get(int(rec.launch_id))
        if op_id is None:
            continue
        op = session.tables.name[[op_id]][0]
        if op not in _ELEMENTWISE:
            continue
        sized = _elementwise_bytes(dims.get(op_id), types.get(op_id))
        if sized is None:
            continue
        groups.setdefault((op, rec.gpu_name, *sized), []).append((int(rec.gpu_id), float(rec.gpu_dur_us)))
    for (op, name, nbytes, elems), items in groups.items():
        t = float(np.mean([d for _, d in items]))
        gbs = nbytes / t / 1e3 if t > 0 else None
        out.append({"kind": "elementwise", "op": op, "kernel": name, "dtype": None, "batch": None, "m": None,
                    "k": None, "n": None, "count": len(items), "time_us": t, "flops": elems, "bytes": nbytes,
                    "intensity": elems / nbytes, "tflops": elems / t / 1e6 if t > 0 else None, "gbs": gbs,
                    "peak": bw,
                    "fraction_of_peak": gbs / bw if bw and gbs else None, "flops_from": None,
                    "slice_ids": [i for i, _ in items]})
    return out


def _elementwise_bytes(dims, types) -> Optional[tuple[float, int]]:
    """(bytes, output elements): inputs read once and the broadcast output written once, from recorded shapes and
    types (tensor inputs only); an elementwise op does one operation per output element."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    shapes, sizes = [], []
    for d, t in zip(dims, types):
        e = _ESIZE.get(_TORCH_DTYPES.get(t, ""))
        if isinstance(d, list) and d and e:
            shapes.append(tuple(d))
            sizes.append(e)
    if not shapes:
        return None
    try:
        out = np.broadcast_shapes(*shapes)
    except ValueError:
        return None
    return float(sum(math.prod(s) * e for s, e in zip(shapes, sizes)) + math.prod(out) * max(sizes)), math.prod(out)


# --- the rules ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Ctx:
    report: Report
    session: Any
    config: Any
    peaks: Optional[DevicePeaks]
    roof: pd.DataFrame
    compute_capability: Optional[float]


def _fmt_us(x: float) -> str:
    return f"{x:,.1f} µs" if x >= 10 else f"{x:,.2f} µs"


def _rule_fp32_without_tf32(c: _Ctx) -> Optional[Diagnosis]:
    ops = c.report.gpu_ops
    if ops.empty:
        return None
    k = ops[ops["category"] == "kernel"]
    simt_names = {n for n in pd.unique(k["name"].astype(object)) if kernel_family(str(n))["math"] == "fp32-simt"}
    if not simt_names:
        return None
    archs = [kernel_family(str(n))["arch"] for n in simt_names]
    cc = c.compute_capability
    has_tf32 = (cc is not None and cc >= 8.0) or (cc is None and any(a is not None and a >= 80 for a in archs))
    if not has_tf32:
        return None  # a GPU without TF32 (or one this cannot tell): nothing to change
    kern = k[k["name"].isin(simt_names)]
    per_step = float(kern["dur_us"].sum()) / _steps(c.report)
    top = str(kern.groupby(kern["name"].astype(object))["dur_us"].sum().idxmax())
    r = c.roof
    rows = r[(r["kind"] == "gemm") & r["kernel"].map(lambda n: any(x in simt_names for x in str(n).split(",")))] \
        if not r.empty else r
    cost, basis, rate = None, "", ""
    tf = c.peaks.peak_tflops("tf32") if c.peaks is not None else None
    if not rows.empty:
        row = rows.sort_values("time_us", ascending=False).iloc[0]
        rate = f" at {row['tflops']:,.1f} TFLOP/s"
        if row["fraction_of_peak"] is not None and pd.notna(row["fraction_of_peak"]):
            rate += f" ({row['fraction_of_peak']:.0%} of the measured fp32 peak)"
        if tf:
            at_tf32 = float((rows["flops"] * rows["count"]).sum()) / _steps(c.report) / (tf * 1e6)
            cost = max(0.0, float((rows["time_us"] * rows["count"]).sum()) / _steps(c.report) - at_tf32)
            basis = (f"these GEMMs' time less the same FLOPs at the measured tf32 peak ({tf:,.0f} TFLOP/s): what "
                     "TF32 could save at most")
    text = (f"fp32 GEMMs ran in full-fp32 FFMA kernels, not on the tensor cores: {top[:90]}{rate}, "
            f"{_fmt_us(per_step)} of such kernels {_per(c.report)}. This GPU has TF32 tensor cores"
            + (f" (measured {tf:,.0f} TFLOP/s here)" if tf else "") + ", which torch leaves off for matmuls by default.")
    fix = ("torch.set_float32_matmul_precision('high') (or torch.backends.cuda.matmul.allow_tf32 = True): fp32 GEMMs "
           "then run on TF32 tensor cores (inputs rounded to a 10-bit mantissa, fp32 accumulation); in this app, the "
           "fp32 matmul precision knob. Or run the GEMM in bf16.")
    return Diagnosis("fp32_without_tf32", "fp32 GEMM without TF32", text, fix, cost, basis,
                     {"slice_ids": kern["id"].astype(int).tolist()[:50], "kernels": sorted(simt_names)[:10],
                      "kernel_us_per_step": per_step})


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


LAUNCH_BOUND_BUSY_BELOW = 0.5
"""GPU busy share of the steps below which the GPU counts as waiting on the CPU."""
SHORT_KERNEL_US = 10.0
"""Median kernel time below which the kernels count as tiny (a launch call costs a few µs)."""
MIN_OPS_PER_STEP = 2
LAUNCHES_DOMINATE = 0.25
"""Share of the step the launch calls must take (their count times their median duration, so that one call that
blocked does not count as launch cost) for the rule to recommend fewer launches first."""
_LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "hipLaunchKernel",
                 "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync",
                 "cudaMemsetAsync")


def _rule_launch_bound(c: _Ctx) -> Optional[Diagnosis]:
    """The GPU waits on the CPU: busy < 50 % of the steps, tiny kernels (median < 10 µs), at least two GPU ops per
    step. The launch calls' own time is measured; the gain of one graph launch in their place is estimated from
    their count and median duration; the most any change on the CPU side can save is the step less the GPU's
    busy time."""
    r = c.report
    s = r.summary
    if not s.get("has_gpu") or not s.get("steps") or s.get("gpu_busy_fraction") is None:
        return None
    busy = float(s["gpu_busy_fraction"])
    st = r.steps
    per_step_ops = float(st["gpu_ops"].median())
    ks = r.gpu_ops[r.gpu_ops["category"] == "kernel"]["dur_us"]
    if busy >= LAUNCH_BOUND_BUSY_BELOW or ks.empty or float(ks.median()) >= SHORT_KERNEL_US \
            or per_step_ops < MIN_OPS_PER_STEP:
        return None
    cpu = float(st["cpu_dur_us"].median())
    gpu = float(st["gpu_busy_us"].median())
    lat = r.launch_latency
    calls = lat[lat["launch_name"].isin(_LAUNCH_CALLS) & lat["step"].notna()].drop_duplicates("launch_id") \
        if not lat.empty else lat
    n_calls = len(calls) / _steps(r)
    call_us = float(calls["launch_dur_us"].median()) if len(calls) else None
    calls_us = float(calls["launch_dur_us"].sum()) / _steps(r) if len(calls) else 0.0
    graphs = int((calls["launch_name"] == "cudaGraphLaunch").sum()) if len(calls) else 0
    text = (f"The GPU waits on the CPU: it is busy {busy:.0%} of each step, {_fmt_us(gpu)} of work in a "
            f"{_fmt_us(cpu)} step (medians), {per_step_ops:g} GPU ops per step with a median kernel of "
            f"{_fmt_us(float(ks.median()))}.")
    if call_us is not None:
        text += (f" The {n_calls:g} launch calls per step take {_fmt_us(calls_us)} in all (median "
                 f"{_fmt_us(call_us)} each, {n_calls * call_us / cpu:.0%} of the step at that median); the rest of the step is other CPU work (Python, the dispatcher, "
                 "the profiler, whatever else the step does).")
    if graphs:
        text += f" The step already replays a CUDA graph ({graphs / _steps(r):g} cudaGraphLaunch per step)."
    gain = max(0.0, (n_calls - 1) * call_us) if call_us is not None and not graphs else None
    if call_us is not None and n_calls * call_us >= LAUNCHES_DOMINATE * cpu and not graphs:
        fix = ("Cut the launches: torch.compile fuses kernels (mode='default'), and mode='reduce-overhead' replays "
               f"the step as one CUDA graph (about {_fmt_us(gain)} per step less in launch calls, from "
               f"{n_calls:g} calls of {_fmt_us(call_us)}); or give each launch more work (a larger batch). Measure "
               "it: graph replay has its own per-call cost (input copies, checks).")
    else:
        fix = ("Give each step more GPU work (a larger batch or size per call), and find what the CPU does between "
               "the launches (the profiler table's CPU self time, sorted): fewer launches alone save only the launch "
               "calls' share" + (f" (about {_fmt_us(gain)} per step with one graph launch)" if gain else "") + ".")
    return Diagnosis("launch_bound", "The GPU waits on the CPU (launch-bound steps)", text, fix, max(0.0, cpu - gpu),
                     "step time less GPU busy time: the most that any change on the CPU side can save per step",
                     {"gpu_busy_fraction": busy, "cpu_step_us": cpu, "gpu_busy_us": gpu,
                      "gpu_ops_per_step": per_step_ops, "launch_calls_per_step": n_calls, "launch_call_us": call_us,
                      "launch_calls_us_per_step": calls_us, "graph_launch_gain_us": gain,
                      "slice_ids": st["slice_id"].astype(int).tolist()[:50]})


_SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
               "cuStreamSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize", "hipStreamSynchronize",
               "hipMemcpy", "hipMemcpyWithStream")  # the blocking copies of both runtimes included
_SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero")


def _rule_sync_in_step(c: _Ctx) -> Optional[Diagnosis]:
    """Synchronising calls and ops (``.item()``, stream/device syncs, blocking ``cudaMemcpy``) and host↔device
    copies whose launch lies inside a ProfilerStep."""
    r, tb = c.report, c.session.tables
    if r.steps.empty:
        return None
    names = np.array(tb.name.tolist(), dtype=object)
    cats = np.array(tb.category.tolist(), dtype=object)
    idx = np.flatnonzero(np.isin(names, list(_SYNC_CALLS) + list(_SYNC_OPS)) & (cats != "gpu_user_annotation"))
    starts = r.steps["start_ns"].to_numpy(dtype=np.int64)
    ends = starts + np.round(r.steps["cpu_dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64)
    inside = np.zeros(len(idx), dtype=bool)
    for a, b in zip(starts, ends):
        inside |= (tb.ts[idx] >= a) & (tb.ts[idx] + tb.dur[idx] <= b)
    idx = idx[inside]
    lat = r.launch_latency
    copies = lat[lat["step"].notna() & lat["gpu_name"].astype(str).str.contains("HtoD|DtoH", na=False)] \
        if not lat.empty else lat
    copy_kinds = {k: int(copies["gpu_name"].astype(str).str.contains(k).sum()) for k in ("HtoD", "DtoH")}
    if len(idx) == 0 and not any(copy_kinds.values()):
        return None
    n = _steps(r)
    calls = [i for i in idx if names[i] in _SYNC_CALLS]
    blocked = float(tb.dur[calls].sum()) / 1000 / n if calls else 0.0
    parts = []
    if len(idx):
        what = ", ".join(f"{x} ×{(names[idx] == x).sum() / n:g}" for x in dict.fromkeys(names[idx].tolist()))
        parts.append(f"the CPU waits for the GPU: {what} per step"
                     + (f", {_fmt_us(blocked)} blocked in synchronising calls per step" if calls else ""))
    for k, count in copy_kinds.items():
        if count:
            parts.append(f"{count / n:g} {'host-to-device' if k == 'HtoD' else 'device-to-host'} "
                         f"cop{'y' if count == n else 'ies'} per step")
    text = ("Inside each step: " + "; ".join(parts) + ". A synchronising call returns only when the GPU has caught "
            "up, so nothing further is queued meanwhile and the GPU runs dry after it; a copy from pageable host "
            "memory synchronises too.")
    fix = ("Keep values on the GPU inside the step: avoid .item(), .cpu(), .tolist(), printing tensors and "
           "data-dependent shapes (nonzero, boolean masks) in the hot loop; log every N steps. Move inputs to the "
           "device once, or with tensor.pin_memory() and .to(device, non_blocking=True) ahead of the step; bring a "
           "value back with a non_blocking copy and an event when it must come back.")
    return Diagnosis("sync_in_step", "Host-device synchronisation or copies inside the step", text, fix,
                     blocked if calls else None, "time the CPU spent in synchronising calls per step (measured)",
                     {"slice_ids": [int(i) for i in idx][:50] + copies["launch_id"].astype(int).tolist()[:50],
                      "blocked_us_per_step": blocked, "copies_in_steps": copy_kinds})


def _rule_cudagraphs_skipped(c: _Ctx) -> Optional[Diagnosis]:
    """A run compiled with mode='reduce-overhead' on a GPU whose steps launch no CUDA graph: Inductor skipped the
    graphs. Needs the run's config (an imported trace does not say which mode it asked for)."""
    if _cfg(c.config, "compile") != "reduce-overhead" or not c.report.has_gpu:
        return None
    cb = c.report.compile_breakdown
    if cb.empty or not (cb["compiled_regions"] > 0).any() or int(cb["graph_launches"].sum()) > 0:
        return None
    launches = float(cb["kernel_launches"].median())
    text = (f"This run asked torch.compile for mode='reduce-overhead' (CUDA graphs), but no step replays one: no "
            f"cudaGraphLaunch in any step, {launches:g} kernel launches per step instead. Inductor skipped the CUDA "
            "graphs; it does so when the compiled graph mutates one of its inputs in place (a KV cache written by "
            "the step), has dynamic shapes, or holds CPU tensors. The trace does not say which.")
    fix = ("Run with TORCH_LOGS='perf_hints' to see why ('skipping cudagraphs due to ...'). For a KV cache written "
           "in place: allocate it once and mark it static (torch._dynamo.mark_static_address(cache)) or keep the "
           "write outside the compiled function; then compare the CPU time per step with the graphs on.")
    return Diagnosis("cudagraphs_skipped", "CUDA graphs asked for but not used", text, fix, None, "",
                     {"kernel_launches_per_step": launches, "graph_launches": 0})


def _rule_compile(c: _Ctx) -> Optional[Diagnosis]:
    cb = c.report.compile_breakdown
    if cb.empty or not (cb["compiled_regions"] > 0).any():
        return None
    tb = c.session.tables
    names = tb.name.tolist()
    regions = sorted({n for n in names if isinstance(n, str) and n.startswith("Torch-Compiled Region: ")})
    recompiled = [n for n in regions if not n.endswith("/0")]
    per_step = float(cb["compiled_regions"].median())
    hashes = set()
    for h in cb["fx_graph_hash"].dropna():
        hashes.update(str(h).split(","))
    parts = []
    if recompiled:
        parts.append(f"{len(recompiled)} recompiled frame{'s' if len(recompiled) > 1 else ''} "
                     f"({', '.join(x.split(': ', 1)[1] for x in recompiled[:4])}: frame/recompile count)")
    if per_step > 1:
        parts.append(f"{per_step:g} compiled regions per step (graph breaks split the step)")
    if len(hashes) > 1:
        parts.append(f"{len(hashes)} distinct compiled graphs")
    staging = c.report.gpu_ops[c.report.gpu_ops["name"].astype(str).str.contains("multi_tensor_apply", na=False)]
    math_us = float(c.roof.loc[c.roof["kind"] == "gemm", "time_us"].mul(
        c.roof.loc[c.roof["kind"] == "gemm", "count"]).sum()) if not c.roof.empty else 0.0
    stage_us = float(staging["dur_us"].sum())
    if len(staging) and math_us and stage_us > math_us:
        parts.append(f"CUDA-graph input staging copies ({len(staging)} multi_tensor_apply kernels, "
                     f"{_fmt_us(stage_us / _steps(c.report))} per step) cost more than the GEMMs "
                     f"({_fmt_us(math_us / _steps(c.report))} per step)")
    if not parts:
        return None
    text = "torch.compile in this trace: " + "; ".join(parts) + "."
    fix = ("Find graph breaks and recompiles with TORCH_LOGS='graph_breaks,recompiles' (or torch._dynamo.explain); "
           "mark dynamic sizes (torch._dynamo.mark_dynamic) or compile with dynamic=True; under reduce-overhead, "
           "keep inputs in the same static buffers between calls so nothing is copied in.")
    return Diagnosis("compile_breaks", "Recompiles, graph breaks or staging copies", text, fix, None,
                     "", {"regions": regions[:20], "fx_graphs": sorted(hashes)[:20]})


def _rule_profiler_overhead(c: _Ctx) -> Optional[Diagnosis]:
    on = [k for k in ("with_stack", "profile_memory") if _cfg(c.config, k)]
    if not on:
        return None
    tb = c.session.tables
    mem = sum(1 for n in tb.name.tolist() if n == "[memory]")
    text = (f"This run was profiled with {' and '.join(on)}: the profiler then records a Python stack and/or every "
            f"allocation for each op ({mem:,} [memory] events here), which adds CPU time to every op. The CPU-side "
            "times of this trace (step time, launch latency, op durations) include that cost; GPU kernel times do "
            "not.")
    fix = ("Profile timing with record_shapes only (or nothing extra), and make a second run with with_stack / "
           "profile_memory when you need stacks or memory; compare the two runs' CPU step times.")
    return Diagnosis("profiler_overhead", "The profiler's own overhead", text, fix, None,
                     "not measurable from one trace: compare with a run without these options",
                     {"options": on, "memory_events": mem})


def _rule_attention_backend(c: _Ctx) -> Optional[Diagnosis]:
    """Which SDPA backend ran (``workloads.sdpa_backend_from_names``) and, where it is neither flash nor cuDNN on a
    GPU (the fused ones), the reasons the run's own settings give why flash could not run; silent in a trace without
    attention."""
    from ..workloads import sdpa_backend_from_names
    names = [n for n in c.session.tables.name.tolist() if isinstance(n, str)]
    backend = sdpa_backend_from_names(names)
    if backend is None:
        return None
    ops = sorted({n for n in names if n.startswith("aten::") and ("scaled_dot_product" in n
                                                                   or "attention_forward" in n)})
    on_gpu = c.report.has_gpu
    knobs = {}
    workload = _cfg(c.config, "workload")
    if workload in ("attention", "transformer_block"):
        knobs = dict(_cfg(c.config, "knobs") or {})
    dtype = _cfg(c.config, "dtype")
    text = f"Attention ran the {backend} backend of scaled_dot_product_attention ({', '.join(ops[:4]) or 'its kernels'})"
    why = []
    forced = knobs.get("backend")
    if forced and forced != "auto":
        why.append(f"the run forced backend={forced}")
    good = ("flash", "cudnn")  # cuDNN's SDPA is a flash-style fused kernel: torch prefers it on Hopper
    if on_gpu and backend not in good:
        if dtype == "fp32":
            why.append("flash attention takes only fp16/bf16 inputs and this run is fp32")
        hd = knobs.get("head_dim") or (knobs.get("d_model") // knobs["heads"] if knobs.get("d_model")
                                       and knobs.get("heads") else None)
        if hd and hd > 256:
            why.append(f"flash supports head_dim up to 256 and this run's is {hd}")
        if hd and hd % 8:
            why.append(f"flash needs head_dim a multiple of 8 and this run's is {hd}")
        cc = c.compute_capability
        if cc is not None and cc < 8.0:
            why.append(f"flash needs compute capability 8.0 and this GPU has {cc:g}")
    text += (": " + "; ".join(why) + "." if why else
             "." if backend in good or not on_gpu else
             "; the trace does not say why flash was not chosen: force it (torch.nn.attention.sdpa_kernel("
             "SDPBackend.FLASH_ATTENTION)) and torch's warning names the reason.")
    if backend in good:
        fix = "Nothing to change for the backend (flash and cuDNN are the fused, memory-efficient ones)."
    elif not on_gpu:
        fix = ("On a CPU torch's own choice (backend auto) runs its flash CPU kernel: drop the forced backend."
               if forced and forced != "auto" else "Nothing to change for the backend.")
    else:
        fix = ("Let flash run: fp16 or bf16 inputs (autocast or .to(torch.bfloat16)), head_dim a multiple of 8 and at "
               "most 256, no explicit attention mask where is_causal=True does; force it with "
               "torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) to see the reason torch gives when it "
               "cannot.")
    return Diagnosis("attention_backend", f"Attention backend: {backend}", text, fix, None, "",
                     {"backend": backend, "ops": ops[:10], "reasons": why})


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
