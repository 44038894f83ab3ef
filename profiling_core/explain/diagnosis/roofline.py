"""The roofline: each GEMM and each memory-bound GPU op (elementwise ops, copies) against the device's peaks, one
row per op group (:func:`roofline`).

The rule, for every op with FLOPs and bytes: its ceiling is min(compute peak of its dtype, intensity × memory
bandwidth), the lower of the two roofs of the roofline model; ``roof`` says which one bounds it (``compute`` or
``memory``) and ``fraction_of_peak`` is its achieved rate over that ceiling. A GEMM below the ridge (a GEMV-like
decode GEMM with M = 4 has ~4 FLOP/byte in bf16, the H200's ridge is ~190) is judged by the bandwidth it reaches,
not by the tensor cores it cannot use; elementwise ops and copies are judged by GB/s."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from ...analyses import Report, gemm_dims, launch_ops
from ...analyses.categories import gpu_op_category, is_gemm_kernel
from ...config import DTYPES, config_field as _cfg
from ...store.peaks import DevicePeaks
from .base import _args_of, _steps


_TORCH_DTYPES = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "double": "fp64"}
_ESIZE = {**DTYPES, "fp64": 8, "tf32": 4}  # bytes per element: the run dtypes and what else a trace records
_ELEMENTWISE = ("aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::sub", "aten::div", "aten::relu",
                "aten::gelu", "aten::silu", "aten::sigmoid", "aten::tanh", "aten::copy_")


def _study_matmul(config) -> Optional[tuple[int, int]]:
    """(batch, n) of the study's one matmul per step when the config is a matmul_add run's (an ``ExperimentConfig``
    or its meta.json dict, where no ``workload`` means matmul_add); None for any other workload, whose GEMMs only
    their recorded shapes size."""
    if config is None or (_cfg(config, "workload") or "matmul_add") != "matmul_add":
        return None
    n = _cfg(config, "size")
    return (_cfg(config, "batch") or 1, n) if isinstance(n, int) else None


def roofline(report: Report, session, config=None, peaks: Optional[DevicePeaks] = None) -> pd.DataFrame:
    """One row per GEMM op and per convolution, elementwise and copy GPU op group, against ``peaks``.

    Columns: ``kind`` (``gemm``, ``conv``, ``elementwise``, ``copy``), ``op`` (the CPU op, or the kernel for a GEMM that had
    no CPU op of its own, e.g. replayed from a CUDA graph), ``kernel``, ``dtype``, ``m``/``k``/``n``/``batch`` (GEMMs
    with known shapes), ``count``, ``time_us`` (mean per call), ``flops``, ``bytes``, ``intensity`` (FLOP/byte),
    ``tflops``, ``gbs``, ``peak`` (the ceiling it is judged by: for a GEMM min(TFLOP/s of its dtype, intensity × the
    bandwidth) in TFLOP/s, GB/s for the rest), ``roof`` (``compute`` or ``memory``: which ceiling that is),
    ``compute_peak`` (a GEMM's dtype peak, TFLOP/s), ``fraction_of_peak`` (achieved / ``peak``), ``flops_from``,
    ``slice_ids``.

    GEMM FLOPs are 2·M·K·N per product (times the batch); bytes are each operand read once and the result written
    once (the least a GEMM can move). A convolution (``aten::convolution`` with recorded shapes and its stride,
    padding, dilation and groups in ``Concrete Inputs``) has 2·N·K·Hₒ·Wₒ·(C/g)·R·S FLOPs and moves its input, weights
    and output once; its time is that of the convolution kernels launched inside it (not cuDNN's layout transposes,
    which the ``conv_layout`` rule counts). Elementwise bytes are the inputs read and the broadcast output written, and
    their FLOPs one per output element; a memcpy's bytes are what the trace records for it (read and written for a
    device-to-device copy). An elementwise op can pass the measured bandwidth (fraction above 1) when an input is
    still in L2 (the GEMM's result just written, for the study's add): the copy that measured it streams from HBM. A GEMM's dtype comes from its recorded ``Input type``, else
    the config; an fp32 GEMM whose kernel names say ``tf32`` is judged against the tf32 peak.
    """
    cols = ["kind", "op", "kernel", "dtype", "batch", "m", "k", "n", "count", "time_us", "flops", "bytes",
            "intensity", "tflops", "gbs", "peak", "roof", "compute_peak", "fraction_of_peak", "flops_from",
            "slice_ids"]
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
    rows += _conv_rows(report, session, peaks)
    rows += _memory_rows(report, session, peaks)
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    return pd.DataFrame(rows)[cols]


def _gemm_row(op, kernel, dtype, d, flops, ids, times, src, peaks, nbytes=None, kind="gemm") -> dict:
    """A row of FLOP-counted work (a GEMM, or a convolution with its ``nbytes`` given) against its roof."""
    batch, m, k, n = d if d is not None else (None, None, None, None)
    e = _ESIZE.get(dtype or "", None)
    if nbytes is None:
        nbytes = (batch or 1) * (m * k + k * n + m * n) * e if d is not None and e else None
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
            "tflops": tflops, "gbs": nbytes / t / 1e3 if nbytes and t > 0 else None, "peak": peak, "roof": roof,
            "compute_peak": compute, "fraction_of_peak": tflops / peak if peak else None, "flops_from": src,
            "slice_ids": ids}


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


def _conv_out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def _conv_shape(dims, concrete) -> Optional[tuple[int, int, int, int, int]]:
    """(FLOPs, input, weight and output elements, out channels) of a forward ``aten::convolution`` from its recorded
    ``Input Dims`` ([N, C, *spatial], [K, C/g, *kernel]) and ``Concrete Inputs`` (stride, padding, dilation,
    transposed, output padding, groups as the schema orders them); None for a transposed convolution or a shape it
    cannot read."""
    import json as _json
    if not isinstance(dims, list) or len(dims) < 2 or not isinstance(concrete, list) or len(concrete) < 9:
        return None
    x, w = dims[0], dims[1]
    try:
        stride, pad, dil = (_json.loads(concrete[i]) for i in (3, 4, 5))
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


def _conv_rows(report: Report, session, peaks) -> list[dict]:
    """One row per convolution shape: FLOPs and bytes from the recorded shapes, time from the convolution kernels its
    op launched (``analyses.categories``' ``convolution`` rule)."""
    lat = report.launch_latency
    if lat.empty:
        return []
    tb = session.tables
    codes = [i for i, v in enumerate(tb.name.uniq) if v == "aten::convolution"]
    if not codes:
        return []
    ids = np.flatnonzero(np.isin(tb.name.codes, codes))
    if not len(ids):
        return []
    dims = _args_of(session, "Input Dims", ids)
    types = _args_of(session, "Input type", ids)
    concrete = _args_of(session, "Concrete Inputs", ids)
    conv_k = lat[lat["gpu_name"].map(lambda n: gpu_op_category(n, "kernel") == "convolution")]
    if conv_k.empty:
        return []
    starts = conv_k["launch_start_ns"].to_numpy(dtype=np.int64)
    groups: dict[tuple, dict] = {}
    for i in ids.tolist():
        shape = _conv_shape(dims.get(i), concrete.get(i))
        t = types.get(i)
        dtype = _TORCH_DTYPES.get(t[0]) if isinstance(t, list) and t and isinstance(t[0], str) else None
        e = _ESIZE.get(dtype or "")
        if shape is None or e is None:
            continue
        a, b = int(tb.ts[i]), int(tb.ts[i] + tb.dur[i])
        mine = conv_k[(starts >= a) & (starts < b)]
        if mine.empty:
            continue
        flops, xe, we, oe, _k = shape
        key = (dtype, tuple(map(tuple, dims[i][:2])), flops, (xe + we + oe) * e)
        grp = groups.setdefault(key, {"ids": [], "time": [], "kernels": set()})
        grp["ids"].append(i)
        grp["time"].append(float(mine["gpu_dur_us"].sum()))
        grp["kernels"].update(str(n) for n in mine["gpu_name"])
    return [_gemm_row(f"aten::convolution {list(xd)} * {list(wd)}", ",".join(sorted(grp["kernels"])), dtype, None,
                      flops, grp["ids"], grp["time"], "shapes", peaks, nbytes=nbytes, kind="conv")
            for (dtype, (xd, wd), flops, nbytes), grp in groups.items()]


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
                        "roof": "memory" if peak else None, "compute_peak": None,
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
                    "peak": bw, "roof": "memory" if bw else None, "compute_peak": None,
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
