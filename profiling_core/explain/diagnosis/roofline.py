"""The roofline: each GEMM, convolution, fused attention and memory-bound GPU op (elementwise ops, copies) against
the device's peaks, one row per op group (:func:`roofline`).

The rule, for every op with FLOPs and bytes: its ceiling is min(compute peak of its dtype, intensity × memory
bandwidth), the lower of the two roofs of the roofline model; ``roof`` says which one bounds it (``compute`` or
``memory``) and ``fraction_of_peak`` is its achieved rate over that ceiling. A GEMM below the ridge (a GEMV-like
decode GEMM with M = 4 has ~4 FLOP/byte in bf16, the H200's ridge is ~190) is judged by the bandwidth it reaches,
not by the tensor cores it cannot use; so is attention in decode (one query token against the KV cache: ~1 FLOP/byte);
elementwise ops and copies are judged by GB/s."""
from __future__ import annotations

import json
import math
from typing import Optional

import numpy as np
import pandas as pd

from ...analyses import Report, gemm_dims, gemm_leading_dims, is_shapes, launch_ops, measured_steps
from ...analyses._common import is_size
from ...analyses._shared import shared_for
from ...analyses.categories import gpu_op_category, is_gemm_kernel, ran_tf32
from ...config import DTYPES, config_field as _cfg
from ...store.peaks import DevicePeaks
from ..questions.base import _per_name
from .base import _args_each, _args_of, _in_measured_steps, _steps


_ESIZE = {**DTYPES, "fp64": 8, "tf32": 4, "fp8": 1, "int8": 1}  # bytes per element of _TORCH_DTYPES' dtypes
_GEMM_RESULT_BYTES = {"aten::_int_mm": 4}
"""Bytes per element of the result of a GEMM op whose result is not of its inputs' type: ``_int_mm`` (int8 inputs,
an int32 result); ``_scaled_mm`` writes its ``out_dtype`` (:func:`_scaled_mm_out_bytes`)."""
_SCALAR_TYPE_BYTES = {5: 2, 6: 4, 7: 8, 15: 2, 23: 1, 24: 1, 25: 1, 26: 1}
"""Bytes per element of the dtypes an op's ``Concrete Inputs`` record as a ScalarType code (c10's enum: 5 Half,
6 Float, 7 Double, 15 BFloat16, 23-26 the Float8 types; the H200's Llama trace records ``aten::to(..., dtype)`` as
"15" for bf16 and "6" for fp32)."""
_TENSOR_TYPES = {"bool": "bool", "unsigned char": "uint8", "signed char": "int8", "short int": "int16",
                 "short": "int16", "int": "int32", "long int": "int64", "long": "int64", "unsigned short": "uint16",
                 "unsigned int": "uint32", "unsigned long": "uint64", "c10::Half": "float16",
                 "c10::BFloat16": "bfloat16", "float": "float32", "double": "float64",
                 "c10::complex<c10::Half>": "complex32", "c10::complex<float>": "complex64",
                 "c10::complex<double>": "complex128", "c10::Float8_e4m3fn": "float8_e4m3fn",
                 "c10::Float8_e5m2": "float8_e5m2", "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
                 "c10::Float8_e5m2fnuz": "float8_e5m2fnuz", "c10::Float8_e8m0fnu": "float8_e8m0fnu"}
"""The torch dtype (its name in ``torch``) of each tensor type torch's profiler records in ``Input type``: C++ type
names, as the compiler spells them (``long int`` on recent builds, ``long`` in older traces)."""
_TORCH_DTYPES = {c: run for c, d in _TENSOR_TYPES.items() if (run := {
    "float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64", "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8", "int8": "int8"}.get(d))}
"""The dtype a GEMM, convolution or attention op computes in, by its first recorded ``Input type``
(:data:`_TENSOR_TYPES`' torch dtype, named as the peaks name it: ``store.peaks``' bf16, fp16, tf32, fp32), and
fp64, fp8 (``_scaled_mm``'s e4m3 / e5m2 inputs) and int8 (``_int_mm``), for which the peaks hold no figure: such a
row is shown unjudged (:func:`_judged`)."""
_DTYPE_BYTES = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "uint32": 4,
                "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "complex32": 4, "complex64": 8,
                "complex128": 16, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
                "float8_e8m0fnu": 1}
"""Bytes per element of those dtypes."""
_CATEGORY = {"bool": 0, "uint8": 1, "int8": 1, "int16": 1, "int32": 1, "int64": 1, "float16": 2, "bfloat16": 2,
             "float32": 2, "float64": 2, "complex32": 3, "complex64": 3, "complex128": 3}
"""Type promotion's categories: bool < integer < floating < complex; torch promotes no other dtype (the fp8 types,
uint16/32/64) with another."""
_COMPLEX_PARTS = {"complex32": "float16", "complex64": "float32", "complex128": "float64"}
_COMPLEX_OF = {"float16": "complex32", "bfloat16": "complex64", "float32": "complex64", "float64": "complex128"}
_INT_TO_FLOAT = ("aten::div", "aten::sigmoid", "aten::tanh")
"""Out-of-place ops whose result is floating for integer or bool inputs (true division, and the unary functions
torch computes in the default dtype): the default dtype, fp32. ``div`` with a ``rounding_mode`` keeps the promoted
type."""
_UNARY = ("aten::relu", "aten::gelu", "aten::silu", "aten::sigmoid", "aten::tanh")
"""Elementwise ops of one operand (``self``); the others' operands are their first two inputs (``add``'s third,
``alpha``, and ``div``'s ``rounding_mode`` are no operands)."""
_ELEMENTWISE = ("aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::sub", "aten::div", "aten::relu",
                "aten::gelu", "aten::silu", "aten::sigmoid", "aten::tanh", "aten::copy_")
_OVERWRITES = ("aten::copy_",)
"""In-place ops that write ``self`` without reading it."""


def _study_matmul(config) -> Optional[tuple[int, int]]:
    """(batch, n) of the study's one matmul per step when the config is a matmul_add run's (an ``ExperimentConfig``
    or its meta.json dict, where no ``workload`` means matmul_add); None for any other workload, whose GEMMs only
    their recorded shapes size."""
    if config is None or (_cfg(config, "workload") or "matmul_add") != "matmul_add":
        return None
    n = _cfg(config, "size")
    return (_cfg(config, "batch") or 1, n) if isinstance(n, int) else None


def roofline(report: Report, session, config=None, peaks: Optional[DevicePeaks] = None,
             shared=None) -> pd.DataFrame:
    """One row per GEMM op and per convolution, attention, elementwise and copy GPU op group, against ``peaks``.

    Columns: ``kind`` (``gemm``, ``conv``, ``attention``, ``elementwise``, ``copy``), ``op`` (the CPU op, or the kernel for a GEMM that had
    no CPU op of its own, e.g. replayed from a CUDA graph), ``kernel``, ``dtype``, ``m``/``k``/``n``/``batch`` (GEMMs
    with known shapes), ``count``, ``time_us`` (mean per call), ``flops``, ``bytes``, ``intensity`` (FLOP/byte),
    ``tflops``, ``gbs``, ``peak`` (the ceiling it is judged by: for a GEMM min(TFLOP/s of its dtype, intensity × the
    bandwidth) in TFLOP/s, GB/s for the rest), ``peak_unit`` (that unit, as text: ``TFLOP/s`` or ``GB/s``; None
    without a peak: the rows of one table hold both), ``roof`` (``compute`` or ``memory``: which ceiling that is),
    ``compute_peak`` (a GEMM's dtype peak, TFLOP/s), ``fraction_of_peak`` (achieved / ``peak``), ``flops_from``,
    ``leading_dims`` (a GEMM's operands as cuBLAS reads them, from its recorded ``Input Strides``:
    :func:`~profiling_core.analyses.gemm_leading_dims`; None where the trace recorded none), ``slice_ids``.

    GEMM FLOPs are 2·M·K·N per product (times the batch); bytes are each operand read once and the result written
    once (the least a GEMM can move). A convolution (``aten::convolution`` with recorded shapes and its stride,
    padding, dilation and groups in ``Concrete Inputs``) has 2·N·K·Hₒ·Wₒ·(C/g)·R·S FLOPs and moves its input, weights
    and output once; its time is that of the convolution kernels launched inside it (not cuDNN's layout transposes,
    which the ``conv_layout`` rule counts). A fused attention (``aten::scaled_dot_product_attention`` that launched a
flash / memory-efficient / cuDNN kernel) is sized by :func:`_attention_shape` and timed by those kernels. Elementwise bytes are the inputs read and the output written
    (:func:`_elementwise_bytes`), and their FLOPs one per output element; a memcpy's bytes are what the trace records for it (read and written for a
    device-to-device copy). An elementwise op can pass the measured bandwidth (fraction above 1) when an input is
    still in L2 (the GEMM's result just written, for the study's add): the copy that measured it streams from HBM;
    ``judged`` then says so. A GEMM's dtype comes from its recorded ``Input type`` (:data:`_TORCH_DTYPES`), else
    the config; an fp32 GEMM whose kernels ran on TF32 tensor cores (:func:`_tf32_if_ran`) is judged against the
    tf32 peak. ``shared``: the
    session's ``analyses.Shared`` when the caller holds one (``diagnose`` does).
    """
    cols = ["kind", "op", "kernel", "dtype", "batch", "m", "k", "n", "count", "time_us", "flops", "bytes",
            "intensity", "tflops", "gbs", "peak", "peak_unit", "roof", "compute_peak", "fraction_of_peak", "judged",
            "flops_from", "leading_dims", "slice_ids"]
    rows: list[dict] = []
    g = report.gemm_throughput
    cfg_dtype = _cfg(config, "dtype")
    if not g.empty:
        g = g[g["device"] == "gpu"] if (g["device"] == "gpu").any() else g
        ids = g["id"].tolist()
        dims, strides, types, concrete = _args_each(
            session, ("Input Dims", "Input Strides", "Input type", "Concrete Inputs"), ids)
        groups: dict[tuple, dict] = {}
        for rec in g.itertuples(index=False):
            t = types.get(rec.id)
            dtype = _TORCH_DTYPES.get(t[0]) if isinstance(t, list) and t and isinstance(t[0], str) else cfg_dtype
            # What ran: the recorded shapes (torch.compile may have padded them), else the config's workload.
            d, src = gemm_dims(rec.op, dims.get(rec.id)), "shapes"
            lds = gemm_leading_dims(rec.op, dims.get(rec.id), strides.get(rec.id)) if d is not None else None
            study = _study_matmul(config) if d is None else None
            if study is not None:
                batch, n = study
                d, src = (batch, n, n, n), "config"
            flops = 2 * math.prod(d) if d is not None else int(rec.flops)
            names = rec.kernel_names or ""
            dtype = _tf32_if_ran(dtype, names)
            key = tuple(tuple(x.items()) for x in lds) if lds is not None else None
            out_e = _GEMM_RESULT_BYTES.get(rec.op) or _scaled_mm_out_bytes(rec.op, concrete.get(rec.id))
            grp = groups.setdefault((rec.op, names, dtype, d, flops, src, key, out_e), {"ids": [], "time": []})
            grp["ids"].append(int(rec.id))
            grp["time"].append(float(rec.time_us))
        for (op, names, dtype, d, flops, src, key, out_e), grp in groups.items():
            row = _gemm_row(op, names, dtype, d, flops, grp["ids"], grp["time"], src, peaks, out_e=out_e)
            row["leading_dims"] = [dict(x) for x in key] if key is not None else None
            rows.append(row)
    rows += _graph_gemms(report, config, peaks, have_cpu_gemm=not g.empty)
    rows += _conv_rows(report, session, peaks, shared)
    rows += _attention_rows(report, session, peaks, shared)
    rows += _memory_rows(report, session, peaks, shared)
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    for r in rows:
        r["judged"] = _judged(r, peaks)
    return pd.DataFrame([{"leading_dims": None, **r} for r in rows])[cols]


def _tf32_if_ran(dtype: Optional[str], kernel_names: str) -> Optional[str]:
    """``tf32`` for an fp32 op whose kernels ran on TF32 tensor cores (``analyses.categories.ran_tf32``), else
    ``dtype``."""
    return "tf32" if dtype == "fp32" and ran_tf32(kernel_names) else dtype


def _scaled_mm_out_bytes(op: str, concrete) -> Optional[int]:
    """Bytes per element of an ``aten::_scaled_mm`` call's result: its ``out_dtype`` (argument 6 of ``_scaled_mm(self,
    mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)``, recorded as a ScalarType code:
    :data:`_SCALAR_TYPE_BYTES`); None for another op, or where none is recorded (the result then has ``self``'s
    type)."""
    if op != "aten::_scaled_mm" or not isinstance(concrete, list) or len(concrete) < 7:
        return None
    code = concrete[6]
    return _SCALAR_TYPE_BYTES.get(int(code)) if isinstance(code, str) and code.isdigit() else None


def _judged(row: dict, peaks: Optional[DevicePeaks] = None) -> Optional[str]:
    """The row's verdict in the unit of the roof that bounds it: GB/s against the bandwidth under the memory roof
    (for a GEMM or attention there, intensity × bandwidth over intensity: the same fraction), TFLOP/s against the
    dtype's peak under the compute roof; the achieved rate alone where there is no peak, saying so where the peaks
    hold none for the row's dtype (fp8, int8, fp64: never judged against another dtype's peak). A rate above its
    roof says what gave way: bytes served by the L2 cache under the memory roof; under the compute roof, a peak
    measured on one GEMM shape (the peaks' source ``"measured"``), or else the datasheet's peak or the work counted
    from the op's recorded shapes."""
    source = peaks.source if peaks is not None else None
    gbs, tflops, peak, frac = row.get("gbs"), row.get("tflops"), row.get("peak"), row.get("fraction_of_peak")
    over = frac is not None and frac == frac and frac > 1  # (a roof is a ceiling: above it, say what gave way)
    if tflops is not None and tflops != tflops:  # (timed at 0 µs: a trace of whole µs recorded a short kernel so)
        return None
    if row.get("roof") == "memory" and gbs is not None:
        # A FLOP-counted row's memory roof is in TFLOP/s (intensity × bandwidth); the others' is the bandwidth.
        bw = peak / row["intensity"] * 1e3 if row.get("compute_peak") is not None else peak
        return (f"{gbs:,.0f} of {bw:,.0f} GB/s (memory-bound"
                + ("; above that bandwidth: part of its bytes were read from or written to the GPU's L2 cache, not "
                   "its memory" if over else "") + ")")
    if row.get("roof") == "compute" and tflops is not None:
        return (f"{_tflops_text(tflops)} of {peak:,.4g} TFLOP/s (compute-bound"
                + (("; above that peak: the peak was measured on one GEMM shape, and this shape runs faster"
                    if source == "measured" else
                    "; above that peak: the peak or the work counted from its recorded shapes does not hold for it")
                   if over else "") + ")")
    dtype = row.get("dtype")
    unjudged = (f" (not judged: the {source} peaks hold no {dtype} figure)"
                if peaks is not None and dtype and row.get("compute_peak") is None and row.get("flops") else "")
    if gbs is not None and not unjudged:
        return f"{gbs:,.0f} GB/s"
    return f"{_tflops_text(tflops)} TFLOP/s{unjudged}" if tflops is not None and tflops == tflops else None


def _tflops_text(v: float) -> str:
    """A rate in TFLOP/s to three significant digits, whole numbers from 100 up (an fp8 GEMM's 1,100, not 1.1e+03)."""
    return f"{v:,.0f}" if v >= 100 else f"{v:,.3g}"


def _gemm_row(op, kernel, dtype, d, flops, ids, times, src, peaks, nbytes=None, kind="gemm", out_e=None) -> dict:
    """A row of FLOP-counted work (a GEMM, or a convolution with its ``nbytes`` given) against its roof; ``out_e``:
    bytes per element of a GEMM's result where they are not its inputs' (:data:`_GEMM_RESULT_BYTES`)."""
    batch, m, k, n = d if d is not None else (None, None, None, None)
    e = _ESIZE.get(dtype or "", None)
    if nbytes is None:
        nbytes = (batch or 1) * ((m * k + k * n) * e + m * n * (out_e or e)) if d is not None and e else None
    t = float(np.mean(times))
    tflops = flops / t / 1e6 if t > 0 else float("nan")
    compute = peaks.peak_tflops(dtype) if peaks is not None and dtype else None
    intensity = flops / nbytes if nbytes else None
    memory = intensity * peaks.bandwidth_gbs / 1e3 if intensity and peaks is not None and peaks.bandwidth_gbs \
        else None  # TFLOP/s the bandwidth allows at this intensity
    if compute and memory and memory < compute:
        peak, roof = memory, "memory"
    else:
        peak, roof = compute, ("compute" if compute else None)
    return {"kind": kind, "op": op, "kernel": kernel, "dtype": dtype, "batch": batch, "m": m, "k": k, "n": n,
            "count": len(ids), "time_us": t, "flops": flops, "bytes": nbytes, "intensity": intensity,
            "tflops": tflops, "gbs": nbytes / t / 1e3 if nbytes and t > 0 else None, "peak": peak,
            "peak_unit": "TFLOP/s" if peak else None, "roof": roof, "compute_peak": compute,
            "fraction_of_peak": tflops / peak if peak else None, "flops_from": src, "slice_ids": ids}


def _graph_gemms(report: Report, config, peaks, have_cpu_gemm: bool) -> list[dict]:
    """GEMM kernels no CPU GEMM op launched (replayed from a CUDA graph, or a Triton template), with FLOPs from the
    run's config (one GEMM per step: the study's workload); none without a matmul_add config. Where the trace has
    steps and launch pairs, the steady state's steps (``analyses.measured_steps``) must have launched one such kernel
    each, and the rows are the kernels of their names, every call in the trace as the roofline counts them: a cold
    max-autotune run's first step benchmarks hundreds of GEMM candidates, none of them the step's GEMM."""
    study = _study_matmul(config)
    if have_cpu_gemm or study is None or report.gpu_ops.empty:
        return []
    ops = report.gpu_ops
    k = ops[(ops["category"] == "kernel") & ops["name"].map(is_gemm_kernel)]
    steps = measured_steps(report.steps)
    if len(k) and len(steps) and not report.launch_latency.empty:
        ran = _in_measured_steps(report, k)
        k, per_step = k[k["name"].isin(set(ran["name"]))], len(ran) / len(steps)
    else:
        per_step = len(k) / _steps(report)
    if k.empty:
        return []
    if abs(per_step - 1) > 1e-9:  # the config says one GEMM per step; any other count cannot be matched to it
        return []
    (batch, n), dtype = study, _cfg(config, "dtype")
    rows = []
    for name, grp in k.groupby(k["name"].astype(object), sort=False):
        rows.append(_gemm_row(f"kernel {name}", name, _tf32_if_ran(dtype, name), (batch, n, n, n), 2 * batch * n ** 3,
                              grp["id"].astype(int).tolist(), grp["dur_us"].astype(float).tolist(), "config", peaks))
    return rows


def _conv_out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def _conv_shape(dims, concrete) -> Optional[tuple[int, int, int, int, int]]:
    """(FLOPs, input, weight and output elements, out channels) of a forward ``aten::convolution`` from its recorded
    ``Input Dims`` ([N, C, *spatial], [K, C/g, *kernel]) and ``Concrete Inputs`` (stride, padding, dilation,
    transposed, output padding, groups as the schema orders them); None for a transposed convolution or a shape it
    cannot read."""
    if not is_shapes(dims) or len(dims) < 2 or not isinstance(concrete, list) or len(concrete) < 9:
        return None
    x, w = dims[0], dims[1]
    try:
        stride, pad, dil = (json.loads(concrete[i]) for i in (3, 4, 5))
        transposed, groups = concrete[6], int(concrete[8])
    except (ValueError, TypeError):
        return None
    ok = (isinstance(x, list) and isinstance(w, list) and len(x) == len(w) >= 3 and transposed == "False"
          and all(isinstance(v, list) and len(v) == len(x) - 2 for v in (stride, pad, dil)) and groups >= 1)
    if not ok or not all(isinstance(v, int) and v > 0 for v in (*x, *w)):
        return None
    out_sp = [_conv_out(s, k, st, p, d) for s, k, st, p, d in zip(x[2:], w[2:], stride, pad, dil)]
    if any(o <= 0 for o in out_sp):
        return None
    n, k_out = x[0], w[0]
    flops = 2 * n * k_out * math.prod(out_sp) * math.prod(w[1:])
    return flops, math.prod(x), math.prod(w), n * k_out * math.prod(out_sp), k_out


def _ops_and_kernels(report: Report, session, op_names: tuple[str, ...], category: str, shared=None):
    """(slice ids of the CPU ops named ``op_names``, their recorded ``Input Dims``, ``Input type`` and ``Concrete
    Inputs``, and for each op the kernels of ``category`` launched inside its time window on its own thread (as
    ``analyses.gemm_throughput`` times a GEMM: another thread's launches at the same time are another op's): their
    GPU durations (µs) and names); None when the trace has no such op or no such kernel."""
    lat = report.launch_latency
    if lat.empty:
        return None
    tb = session.tables
    codes = [i for i, v in enumerate(tb.name.uniq) if v in op_names]
    ids = np.flatnonzero(np.isin(tb.name.codes, codes)) if codes else np.array([], dtype=np.int64)
    if not len(ids):
        return None
    mine_k = lat[_per_name(lat["gpu_name"], lambda u: u.map(lambda n: gpu_op_category(n, "kernel") == category))
                 .astype(bool)]  # (decided once per distinct kernel name)
    if mine_k.empty:
        return None
    starts = mine_k["launch_start_ns"].to_numpy(dtype=np.int64)
    sh = shared_for(session, shared)
    utid = sh.slices["utid"]  # per slice row: its thread
    launch_utid = utid[sh.pos(mine_k["launch_id"].to_numpy(dtype=np.int64))]
    args = _args_each(session, ("Input Dims", "Input type", "Concrete Inputs"), ids)
    # Each op's kernels: those launched in [ts, ts + dur), found by binary search on the sorted launch starts (a scan
    # of every kernel per op was quadratic, and a frame per op cost milliseconds each), kept in the frame's row order:
    # (their GPU durations, their names).
    order = np.argsort(starts, kind="stable")
    lo = np.searchsorted(starts[order], tb.ts[ids], side="left")
    hi = np.searchsorted(starts[order], tb.ts[ids] + tb.dur[ids], side="left")
    dur = mine_k["gpu_dur_us"].to_numpy(dtype=np.float64)
    names = mine_k["gpu_name"].to_numpy(dtype=object)
    inside = {}
    for i, a, b in zip(ids.tolist(), lo.tolist(), hi.tolist()):
        rows = np.sort(order[a:b])
        rows = rows[launch_utid[rows] == utid[i]]
        inside[i] = (dur[rows], names[rows].tolist())
    return ids.tolist(), *args, inside


def _dtype_of(types) -> Optional[str]:
    """The run dtype name of an op's first recorded input type (``c10::BFloat16`` -> ``bf16``)."""
    return _TORCH_DTYPES.get(types[0]) if isinstance(types, list) and types and isinstance(types[0], str) else None


def _conv_rows(report: Report, session, peaks, shared=None) -> list[dict]:
    """One row per convolution shape: FLOPs and bytes from the recorded shapes, time from the convolution kernels its
    op launched (``analyses.categories``' ``convolution`` rule). A call that only calls the op again (:func:`recalls`:
    autocast's wrapper, whose inputs are not the cast ones) has no row: the call inside it holds the same kernels."""
    found = _ops_and_kernels(report, session, ("aten::convolution",), "convolution", shared)
    if found is None:
        return []
    ids, dims, types, concrete, inside = found
    wrappers = recalls(session.tables, ids)
    groups: dict[tuple, dict] = {}
    for i in ids:
        if i in wrappers:
            continue
        shape = _conv_shape(dims.get(i), concrete.get(i))
        dtype = _dtype_of(types.get(i))
        e = _ESIZE.get(dtype or "")
        durs, kernels = inside[i]
        if shape is None or e is None or not kernels:
            continue
        flops, xe, we, oe, _k = shape
        dtype = _tf32_if_ran(dtype, ",".join(str(n) for n in kernels))  # (cuDNN ran it on TF32 cores)
        key = (dtype, tuple(map(tuple, dims[i][:2])), flops, (xe + we + oe) * e)
        grp = groups.setdefault(key, {"ids": [], "time": [], "kernels": set()})
        grp["ids"].append(i)
        grp["time"].append(float(np.nansum(durs)))  # (what the Series' sum gives: NaN counts as 0)
        grp["kernels"].update(str(n) for n in kernels)
    return [_gemm_row(f"aten::convolution {list(xd)} * {list(wd)}", ",".join(sorted(grp["kernels"])), dtype, None,
                      flops, grp["ids"], grp["time"], "shapes", peaks, nbytes=nbytes, kind="conv")
            for (dtype, (xd, wd), flops, nbytes), grp in groups.items()]


# The attention ops a trace records, with the positions of ``is_causal`` and the mask in their schema: the public
# op (eager) and the backends it dispatches to, which torch.compile's graphs call directly.
_ATTENTION_OPS = {"aten::scaled_dot_product_attention": (5, 3),
                  "aten::_scaled_dot_product_flash_attention": (4, None),
                  "aten::_scaled_dot_product_efficient_attention": (6, 3),
                  "aten::_scaled_dot_product_cudnn_attention": (6, 3)}


def _attention_shape(dims, types, concrete, causal_at: int = 5, mask_at: Optional[int] = 3
                     ) -> Optional[tuple[int, float]]:
    """(FLOPs, bytes) of one attention op from its recorded inputs: query [..., Lq, D], key [..., Lk, D] and value
    [..., Lk, Dv] (batch and head dims broadcast, and the query's heads may be a multiple of K/V's: grouped-query
    attention, ``enable_gqa``; K/V with fewer heads are read once), an optional
    mask (argument ``mask_at``), and ``is_causal`` (argument ``causal_at``, in ``Concrete Inputs``).

    FLOPs are 2·Lq·Lk·D for Q·Kᵀ and 2·Lq·Lk·Dv for the weights times V, per batch and head, over the (query, key)
    pairs the mask keeps: all of them, or for ``is_causal`` the lower triangle torch aligns to the top left
    (Σᵢ min(i + 1, Lk) pairs; a fused kernel skips the masked blocks). Softmax's few FLOPs per score are not counted.
    Bytes: Q, K, V and the mask read once, the output [..., Lq, Dv] written once: the least attention can move, so a
    decode step (Lq = 1) has about 1 FLOP/byte and is judged by the bandwidth it reaches."""
    if not is_shapes(dims) or len(dims) < 3 or not isinstance(types, list) or len(types) < 3:
        return None
    q, k, v = dims[:3]
    if not all(isinstance(x, list) and len(x) >= 2 and all(isinstance(n, int) and n > 0 for n in x)
               for x in (q, k, v)):
        return None
    e = _ESIZE.get(_TORCH_DTYPES.get(types[0], "") if isinstance(types[0], str) else "")
    if e is None or k[-2] != v[-2] or q[-1] != k[-1]:
        return None
    heads = _query_heads(q[:-2], k[:-2], v[:-2])
    if heads is None:
        return None
    lq, lk, d, dv = q[-2], k[-2], q[-1], v[-1]
    causal = isinstance(concrete, list) and len(concrete) > causal_at and concrete[causal_at] == "True"
    pairs = (lq * (lq + 1) // 2 if lq <= lk else lk * (lk + 1) // 2 + (lq - lk) * lk) if causal else lq * lk
    flops = 2 * heads * pairs * (d + dv)
    nbytes = (math.prod(q) + math.prod(k) + math.prod(v) + heads * lq * dv) * e
    mask = dims[mask_at] if mask_at is not None and len(dims) > mask_at else None
    if isinstance(mask, list) and mask and all(isinstance(n, int) and n > 0 for n in mask):
        mt = types[mask_at] if len(types) > mask_at and isinstance(types[mask_at], str) else ""
        me = _ESIZE.get(_TORCH_DTYPES.get(mt, ""), 1)  # a bool mask: a byte per element
        nbytes += math.prod(mask) * me
    return flops, float(nbytes)


def _query_heads(qb: list, kb: list, vb: list) -> Optional[int]:
    """The (batch × head) count attention computes over: the query's leading dims broadcast against the key's and
    value's, where the head dim (the last of them) may also be grouped (``enable_gqa``: the query's heads a multiple of
    the key's and value's, each K/V head serving a group); None where they fit neither."""
    try:
        return math.prod(np.broadcast_shapes(tuple(qb), tuple(kb), tuple(vb)))
    except ValueError:
        pass
    if not qb or len(qb) != len(kb) or len(kb) != len(vb) or kb[-1] != vb[-1] or qb[-1] % kb[-1]:
        return None
    try:
        return math.prod(np.broadcast_shapes(tuple(qb[:-1]), tuple(kb[:-1]), tuple(vb[:-1]))) * qb[-1]
    except ValueError:
        return None


def recalls(tb, ids) -> dict[int, int]:
    """{slice id: the call of the same op directly inside it} over ``ids`` (slice ids of CPU ops): an op that calls
    itself again at once is a dispatch wrapper, and the inner call is the one that ran. Autocast works this way: an op
    on its lists (``linear``, ``scaled_dot_product_attention``, the GEMMs, the convolutions...) records the inputs as
    the caller passed them, casts them (``aten::to`` beside the inner call) and calls the op again with the cast ones.
    On the H200's Llama training step under bf16 autocast (``tests/data/h200_train/llm_train``) each
    ``aten::scaled_dot_product_attention`` records fp32 query, key and value and holds one that records bf16, under
    which cuDNN's bf16 flash kernel ran; each fp32 ``aten::linear`` holds a bf16 one. So the types an op computed in
    are those of the innermost call of such a chain (:func:`ran_as`)."""
    codes = tb.name.codes
    ids = np.asarray(ids, dtype=np.int64)
    par = tb.parent_id[ids]
    same = par >= 0
    same[same] = codes[par[same]] == codes[ids[same]]
    return dict(zip(par[same].tolist(), ids[same].tolist()))


def autocast_casts(session) -> dict[str, int]:
    """{op name: calls} of the ops the trace shows autocast casting: a call (:func:`recalls`) with an fp32 input that
    its inner call has as bf16 or fp16 (the H100's conv block under autocast: the second conv2d's activation is bf16
    already, its weight fp32 cast to bf16). Empty where autocast was off (or the trace records no types): it is how
    a trace says that autocast was on, and around which ops."""
    tb = session.tables
    inner = recalls(tb, np.flatnonzero(tb.parent_id >= 0))
    if not inner:
        return {}
    types = _args_each(session, ("Input type",), set(inner) | set(inner.values()))[0]
    out: dict[str, int] = {}
    for outer, i in inner.items():
        a, b = types.get(outer), types.get(i)
        if isinstance(a, list) and isinstance(b, list) and any(
                x == "float" and _TORCH_DTYPES.get(y) in ("bf16", "fp16") for x, y in zip(a, b)):
            name = tb.name.uniq[tb.name.codes[outer]]
            out[name] = out.get(name, 0) + 1
    return out


def ran_as(i: int, inner: dict[int, int]) -> int:
    """The call that ran for op call ``i``: the innermost of the chain of same-op calls :func:`recalls` found."""
    while i in inner:
        i = inner[i]
    return i


def _attention_rows(report: Report, session, peaks, shared=None) -> list[dict]:
    """One row per attention shape: the outermost attention op (:data:`_ATTENTION_OPS`: the public op, or the backend
    a compiled graph calls) with its FLOPs and bytes from the recorded shapes and types (:func:`_attention_shape`) of
    the call that ran (:func:`ran_as`: under autocast, the call with the cast inputs) and its time from the fused
    attention kernels launched inside it (``analyses.categories``' ``attention`` rule). An op that ran the math backend
    launched GEMMs and softmax instead, which the GEMM rows judge, so it has no attention row."""
    found = _ops_and_kernels(report, session, tuple(_ATTENTION_OPS), "attention", shared)
    if found is None:
        return []
    ids, dims, types, concrete, inside = found
    tb, chosen = session.tables, set(ids)
    inner = recalls(tb, ids)
    groups: dict[tuple, dict] = {}
    for i in ids:
        p = int(tb.parent_id[i])
        while p >= 0 and p not in chosen:  # the backend op inside the public one is the same attention
            p = int(tb.parent_id[p])
        if p >= 0:
            continue
        r = ran_as(i, inner)  # (same op as i: the same schema, the same shapes)
        shape = _attention_shape(dims.get(r), types.get(r), concrete.get(r), *_ATTENTION_OPS[tb.name[[i]][0]])
        durs, kernels = inside[i]
        if shape is None or not kernels:
            continue
        key = (tb.name[[i]][0], _dtype_of(types.get(r)), json.dumps(dims[r][:3]), *shape)
        grp = groups.setdefault(key, {"ids": [], "time": [], "kernels": set()})
        grp["ids"].append(i)
        grp["time"].append(float(np.nansum(durs)))  # (what the Series' sum gives: NaN counts as 0)
        grp["kernels"].update(str(n) for n in kernels)
    return [_gemm_row(f"{op} {dims}", ",".join(sorted(grp["kernels"])), dtype, None,
                      flops, grp["ids"], grp["time"], "shapes", peaks, nbytes=nbytes, kind="attention")
            for (op, dtype, dims, flops, nbytes), grp in groups.items()]


def _memory_rows(report: Report, session, peaks, shared=None) -> list[dict]:
    """Copies (bytes from the trace) and the elementwise kernels their CPU op's shapes size; not those torch.compile's
    compiler launched while it worked (``launch_latency``'s ``compiler``)."""
    out = []
    ops = report.gpu_ops
    if ops.empty:
        return out
    bw = peaks.bandwidth_gbs if peaks is not None else None
    cp = ops[ops["category"] == "gpu_memcpy"]
    lat = report.launch_latency
    # (what torch.compile's compiler launched while it worked, its benchmarks' copies under max-autotune, is no work
    # of the workload's: the GEMM rows leave its ops out the same way, analyses.gemm)
    theirs = lat.loc[lat["compiler"].astype(bool), "gpu_id"] if "compiler" in lat else lat.iloc[:0]
    if len(theirs):
        cp = cp[~cp["id"].isin(theirs)]
        lat = lat[~lat["compiler"].astype(bool)]
    if not cp.empty:
        nb = _args_of(session, "bytes", cp["id"].tolist())
        # one row per kind of copy and size, as a GEMM's per shape: a 4 KiB copy and a 1 GiB one run at rates a
        # thousand times apart, and their mean is no copy's
        b_all = [nb.get(int(i)) for i in cp["id"]]
        sized = np.array([is_size(b) for b in b_all], dtype=bool)  # (a number of bytes torch could have copied)
        bad = set(cp.loc[~sized, "name"].astype(object))  # (a name with any such copy keeps no row: its mean is none)
        cp = cp.assign(_bytes=[b if ok else -1 for b, ok in zip(b_all, sized)])
        for (name, size), grp in cp.groupby([cp["name"].astype(object), "_bytes"], sort=False):
            if name in bad:
                continue
            t = float(grp["dur_us"].mean())
            moved = 2 * int(size) if "DtoD" in name else int(size)  # DtoD: read and written
            gbs = moved / t / 1e3 if t > 0 else None
            peak = bw if "DtoD" in name else None
            out.append({"kind": "copy", "op": name, "kernel": name, "dtype": None, "batch": None, "m": None,
                        "k": None, "n": None, "count": len(grp), "time_us": t, "flops": 0, "bytes": moved,
                        "intensity": 0.0, "tflops": None, "gbs": gbs, "peak": peak,
                        "peak_unit": "GB/s" if peak else None, "roof": "memory" if peak else None,
                        "compute_peak": None,
                        "fraction_of_peak": gbs / peak if peak and gbs else None, "flops_from": None,
                        "slice_ids": grp["id"].astype(int).tolist()})
    if lat.empty:
        return out
    kern = lat[(lat["gpu_category"] == "kernel") & ~lat["gpu_name"].map(is_gemm_kernel)]
    if kern.empty:
        return out
    # The CPU op of each launch, and of those only the elementwise ones (by name code, once per distinct name): their
    # recorded shapes are read, not those of every op that launched a kernel.
    tb = session.tables
    op_ids = launch_ops(session, kern["launch_id"].to_numpy(dtype=np.int64), shared=shared)
    codes = [c for c, v in enumerate(tb.name.uniq) if v in _ELEMENTWISE]
    rows = np.flatnonzero(op_ids >= 0)
    rows = rows[np.isin(tb.name.codes[op_ids[rows]], codes)]
    if not len(rows):
        return out
    chosen = op_ids[rows]
    dims, types, concrete = _args_each(session, ("Input Dims", "Input type", "Concrete Inputs"), set(chosen.tolist()))
    groups: dict[tuple, list] = {}
    sizes: dict[str, tuple[float, int] | None] = {}  # by the recorded shapes and types: each distinct one once
    for op_id, op, name, gpu_id, dur in zip(chosen.tolist(), tb.name[chosen].tolist(),
                                            kern["gpu_name"].to_numpy(dtype=object)[rows].tolist(),
                                            kern["gpu_id"].to_numpy()[rows].tolist(),
                                            kern["gpu_dur_us"].to_numpy()[rows].tolist()):
        d, t, c = dims.get(op_id), types.get(op_id), concrete.get(op_id)
        key = op + repr((d, t, c))
        sized = sizes[key] if key in sizes else sizes.setdefault(key, _elementwise_bytes(d, t, op, c))
        if sized is None:
            continue
        groups.setdefault((op, name, *sized), []).append((int(gpu_id), float(dur)))
    for (op, name, nbytes, elems), items in groups.items():
        t = float(np.mean([d for _, d in items]))
        gbs = nbytes / t / 1e3 if t > 0 else None
        out.append({"kind": "elementwise", "op": op, "kernel": name, "dtype": None, "batch": None, "m": None,
                    "k": None, "n": None, "count": len(items), "time_us": t, "flops": elems, "bytes": nbytes,
                    "intensity": elems / nbytes, "tflops": elems / t / 1e6 if t > 0 else None, "gbs": gbs,
                    "peak": bw, "peak_unit": "GB/s" if bw else None, "roof": "memory" if bw else None,
                    "compute_peak": None,
                    "fraction_of_peak": gbs / bw if bw and gbs else None, "flops_from": None,
                    "slice_ids": [i for i, _ in items]})
    return out


def _elementwise_bytes(dims, types, op: str = "", concrete=None) -> Optional[tuple[float, int]]:
    """(bytes, output elements) of elementwise op ``op`` from its recorded shapes and types (tensor inputs only): its
    inputs read once and its output written once; an elementwise op does one operation per output element. The
    output of an out-of-place op is the inputs' broadcast shape in the type torch's type promotion gives its operands
    (:func:`_result_type`, then :data:`_INT_TO_FLOAT`: a bf16 tensor times an int64 one writes bf16, bf16 plus fp16
    writes fp32); that of an in-place op (``add_``) is ``self``, its first input, in its own type, and ``copy_``
    writes ``self`` without reading it (``x.to(torch.bfloat16)`` of 8 MiB of fp32 reads 8 MiB and writes 4). (None
    of :data:`_ELEMENTWISE` compares: a comparison would write bool.)"""
    if not is_shapes(dims) or not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        return None  # (not what torch records: a shape that is not a list of integers, a type that is not text)
    shapes, sizes, first = [], [], None
    for i, (d, t) in enumerate(zip(dims, types)):
        if not d:  # (a Scalar, or a tensor of no dimension: no bytes worth counting)
            continue
        e = _DTYPE_BYTES.get(_TENSOR_TYPES.get(t, ""))
        if not e:  # a tensor of a type whose size is not known: its bytes cannot be counted, nor left out
            return None
        first = i if first is None else first
        shapes.append(tuple(d))
        sizes.append(e)
    if not shapes:
        return None
    if op.endswith("_"):
        if first != 0:  # (``self`` is the first input: without its shape there is no output to size)
            return None
        out, out_size = shapes[0], sizes[0]
        if op in _OVERWRITES:
            shapes, sizes = shapes[1:], sizes[1:]
    else:
        try:
            out = np.broadcast_shapes(*shapes)
        except ValueError:
            return None
        n = 1 if op in _UNARY else 2
        con = concrete if isinstance(concrete, list) else []
        result = _result_type([(types[i], dims[i] if i < len(dims) else [], con[i] if i < len(con) else None)
                               for i in range(min(n, len(types)))])
        rounding = op == "aten::div" and len(con) > 2 and con[2] in ("trunc", "floor")
        if result is not None and op in _INT_TO_FLOAT and _CATEGORY.get(result, 2) < 2 and not rounding:
            result = "float32"
        out_size = _DTYPE_BYTES.get(result or "")
        if out_size is None:
            return None
    return float(sum(math.prod(s) * e for s, e in zip(shapes, sizes)) + math.prod(out) * out_size), math.prod(out)


def _promote_types(a: Optional[str], b: Optional[str]) -> Optional[str]:
    """``torch.promote_types`` of two dtypes (torch's names; None: no operand yet, which leaves the other): the same
    type; bool gives way to any other; of two integers the wider (uint8 with int8: int16, which holds both); an
    integer to a floating or complex type; of two floating types the wider, bf16 with fp16: fp32 (neither holds the
    other); a complex type with a floating one: the complex type of their promoted parts. None where torch promotes
    no such pair (:data:`_CATEGORY`)."""
    if a is None or b is None or a == b:
        return b if a is None else a
    ca, cb = _CATEGORY.get(a), _CATEGORY.get(b)
    if ca is None or cb is None:
        return None
    if ca != cb:
        (lo, clo), (hi, chi) = sorted(((a, ca), (b, cb)), key=lambda x: x[1])
        if chi == 3 and clo == 2:
            return _COMPLEX_OF[_promote_types(_COMPLEX_PARTS[hi], lo)]
        return hi
    if ca == 3:
        return _COMPLEX_OF[_promote_types(_COMPLEX_PARTS[a], _COMPLEX_PARTS[b])]
    if {a, b} in ({"uint8", "int8"}, {"float16", "bfloat16"}):
        return "int16" if ca == 1 else "float32"
    return max(a, b, key=lambda x: _DTYPE_BYTES[x])


def _scalar_type(text) -> Optional[str]:
    """The dtype torch gives a Python number passed as an operand (a ``Scalar`` whose value ``Concrete Inputs``
    records as text: ``True``, ``1024``, ``-0.5``, ``2.``): bool, int64, or for a float the default dtype, fp32; None
    for another text or none."""
    if text in ("True", "False"):
        return "bool"
    try:
        int(text)
        return "int64"
    except (TypeError, ValueError):
        pass
    try:
        float(text)
        return "float32"
    except (TypeError, ValueError):
        return None


def _result_type(operands: list) -> Optional[str]:
    """``torch.result_type`` of an op's operands, each (recorded type, shape, ``Concrete Inputs`` text): dimensioned
    tensors, zero-dim tensors and Python numbers (``Scalar``) are promoted each among their own
    (:func:`_promote_types`), and a class of lower priority (zero-dim below dimensioned, numbers below zero-dim) counts
    only where its category is higher: then, a floating type promotes with the higher class's integer type (an int64
    tensor times a zero-dim fp64 tensor gives fp64, times 0.5 the number's fp32), and a complex type with a floating one
    gives the complex type of the floating one; a bf16 tensor times a zero-dim fp64 one stays bf16. A number whose type
    the trace does not say (no ``Concrete Inputs``) matters only where the tensors are integer or bool: there the result
    is None (unknown), as where torch promotes no such pair. The rule is ATen's ``result_type`` (``ResultTypeState``:
    ``update_result_type_state`` and ``combine_categories``)."""
    got: dict[str, Optional[str]] = {"dim": None, "zero": None, "wrapped": None}
    unknown = False
    for t, shape, text in operands:
        if t == "Scalar":
            cls, dt = "wrapped", _scalar_type(text)
            unknown |= dt is None
        else:
            cls, dt = ("dim" if shape else "zero"), _TENSOR_TYPES.get(t)  # (None: no operand, e.g. a string)
        if dt is not None:
            if got[cls] is not None and _promote_types(got[cls], dt) is None:
                return None
            got[cls] = _promote_types(got[cls], dt)
    result = _combine(got["dim"], _combine(got["zero"], got["wrapped"]))
    return None if result is None or (unknown and _CATEGORY.get(result, 0) < 2) else result


def _combine(higher: Optional[str], lower: Optional[str]) -> Optional[str]:
    """ATen's ``combine_categories``: the result of a class of operands (``higher``) and the lower-priority ones'."""
    ch, cl = _CATEGORY.get(higher or "", -1), _CATEGORY.get(lower or "", -1)
    if ch == 3:
        return higher
    if cl == 3:
        return _COMPLEX_OF[higher] if ch == 2 else lower
    if ch == 2:
        return higher
    if higher == "bool" or cl == 2:
        return _promote_types(higher, lower)
    return higher if higher is not None else lower
