"""``compile_breaks``: torch.compile's recompiled frames, graph breaks (more than one compiled region per step),
several compiled graphs, or CUDA-graph input staging copies that cost more than the GEMMs.

Recompiles across decode lengths: where the ``decode::token`` ranges of a trace run more than one compiled variant
of the same frame (``Torch-Compiled Region: 0/1`` in the first token, ``0/2`` in the later ones), the per-token
forward was compiled for shapes that changed from token to token: a dynamic KV cache grows one position per token,
so Dynamo recompiles for the new length, then once more with the length marked dynamic (automatic dynamic shapes).
The finding names the variants and the fix: a static KV cache, whose shapes are the same for every token."""
from __future__ import annotations

from collections import Counter
from typing import Optional

import numpy as np

from ....analyses import (GRAPH_LAUNCHES, annotation_ranges, compile_in_measured_steps, gpu_op_category,
                          measured_steps, staging_pairs)
from ....analyses._shared import shared_for
from ....config import config_field as _cfg
from ..base import Diagnosis, _Ctx, _fmt_n, _fmt_us, _in_this_app, _multi_tensor_kernels, _steps
from .decode_launch_bound import TOKEN_RANGE

_REGION = "Torch-Compiled Region: "


def _regions_in(c: _Ctx, names: list, windows) -> tuple[np.ndarray, np.ndarray, int]:
    """The compiled regions whose start lies in one of ``windows`` (a frame with ``start_ns`` and ``cpu_dur_us``:
    steps, decode tokens): (their rows, each one's window in start order, the number of windows)."""
    rows = np.array([i for i, n in enumerate(names) if isinstance(n, str) and n.startswith(_REGION)], dtype=np.int64)
    if windows.empty or not len(rows):
        return rows[:0], rows[:0], len(windows)
    b = windows["start_ns"].astype("int64").to_numpy()
    e = b + np.rint(windows["cpu_dur_us"].to_numpy(dtype=float) * 1000.0).astype(np.int64)
    order = np.argsort(b, kind="stable")
    b, e = b[order], e[order]
    ts = np.asarray(c.session.tables.ts)[rows]
    k = np.searchsorted(b, ts, side="right") - 1
    inside = (k >= 0) & (ts < e[np.maximum(k, 0)])
    return rows[inside], k[inside], len(b)


def _frames(names: list, rows) -> list[str]:
    """The compiled frames (the ``N`` of ``Torch-Compiled Region: N/M``) of these region rows."""
    return sorted({names[i].removeprefix(_REGION).split("/", 1)[0] for i in rows.tolist()})


def _token_regions(c: _Ctx, names: list) -> tuple[Optional[float], dict[str, dict[str, int]], list[str]]:
    """For the compiled regions inside ``decode::token`` ranges: the median number per token (None without token
    ranges), {frame: {"frame/recompile": tokens that ran it}} for the frames that ran more than one variant
    there, and the frames that ran there."""
    tokens = annotation_ranges(c.session, TOKEN_RANGE, shared=c.shared)
    rows, k, n = _regions_in(c, names, tokens)
    if tokens.empty or not any(isinstance(x, str) and x.startswith(_REGION) for x in names):
        return None, {}, []
    per_token = float(np.median(np.bincount(k, minlength=n)))
    ran = Counter(names[i].removeprefix(_REGION) for i in rows.tolist())
    by_frame: dict[str, dict[str, int]] = {}
    for variant, m in sorted(ran.items()):
        by_frame.setdefault(variant.split("/", 1)[0], {})[variant] = m
    return per_token, {f: v for f, v in by_frame.items() if len(v) > 1}, _frames(names, rows)


def _staging_copies(c: _Ctx):
    """The GPU ops that copy inputs into CUDA graphs' static buffers, in a trace that replays graphs
    (``cudaGraphLaunch``): the ``multi_tensor_apply`` kernels of ``analyses.staging_pairs`` (launched by
    ``analyses.STAGING_OP`` inside torch.compile's code). The user's own foreach ops (an optimizer's ``_foreach_add_``,
    ``clip_grad_norm_``'s ``_foreach_norm`` and ``_foreach_mul_``) run the same kernels and copy nothing in."""
    ops, lat = c.report.gpu_ops, c.report.launch_latency
    if ops.empty or lat.empty or not lat["launch_name"].isin(GRAPH_LAUNCHES).any():
        return ops.iloc[:0]
    k, _phase = _multi_tensor_kernels(c)
    if not len(k):
        return k
    sh = shared_for(c.session, c.shared)
    copying = set(sh.p["gpu_id"][staging_pairs(sh)].tolist())
    return k[k["id"].astype(int).isin(copying)]


def _staging_and_gemms(c: _Ctx):
    """(staging copies, GEMM kernels, steps) over the steps every per-step figure reads (``analyses.measured_steps``)
    where the trace has steps: the :func:`_staging_copies` and the GPU ops of category ``gemm`` (a CUDA graph's
    replayed GEMM included, which no CPU op sizes) whose launch lies in one of them, the compiler's own launches left
    out. Both sides over the same steps: a cold reduce-overhead run's graph replays its GEMM in the step it measures,
    while its copies also ran in the recording step, and the roofline's GEMM rows hold only the ops it can size."""
    r = c.report
    staging = _staging_copies(c)
    ops, lat = r.gpu_ops, r.launch_latency
    pairs = list(zip(ops["name"], ops["category"]))
    kinds = {p: gpu_op_category(*p) for p in set(pairs)}  # (once per distinct name and category)
    gemms = ops[[kinds[p] == "gemm" for p in pairs]] if len(ops) else ops
    if r.steps.empty or lat.empty:
        return staging, gemms, _steps(r)
    steps = set(measured_steps(r.steps)["step"].astype(int))
    launched = lat[lat["step"].notna() & ~lat["compiler"].astype(bool)].drop_duplicates("gpu_id")
    kept = set(launched.loc[launched["step"].astype(int).isin(steps), "gpu_id"].astype(int))
    return (staging[staging["id"].astype(int).isin(kept)], gemms[gemms["id"].astype(int).isin(kept)],
            max(1, len(steps)))


def _rule_compile(c: _Ctx) -> Optional[Diagnosis]:
    cb = c.report.compile_breakdown
    if cb.empty or not (cb["compiled_regions"] > 0).any():
        return None
    tb = c.session.tables
    names = tb.name.tolist()
    regions = sorted({n for n in names if isinstance(n, str) and n.startswith("Torch-Compiled Region: ")})
    recompiled = [n for n in regions if not n.endswith("/0")]
    per_step = float(compile_in_measured_steps(c.report)["compiled_regions"].median())
    hashes, backward = set(), set()
    for h in cb["fx_graph_hash"].dropna():
        hashes.update(str(h).split(","))
    for h in cb["backward_fx_graph_hash"].dropna():  # a forward's backward graph is the same compiled function
        backward.update(str(h).split(","))
    hashes -= backward
    parts, fixes = [], []  # (a fix for each kind of part that fired, and only for those)
    if recompiled:  # (a frame recompiled twice has two such regions, 1/1 and 1/2: one frame)
        frames_again = {x.split(": ", 1)[1].split("/")[0] for x in recompiled}
        parts.append(f"{len(frames_again)} recompiled frame{'s' if len(frames_again) > 1 else ''} "
                     f"({', '.join(x.split(': ', 1)[1] for x in recompiled[:4])}: frame/recompile count)")
    per_token, decode, token_frames = _token_regions(c, names)
    breaks = False
    # several frames in a step (or a token): graph breaks (or several compiled functions); one frame called often is
    # neither (a compiled layer called once per layer); frames that ran only outside them (a warm-up) are no step's
    if per_token is not None:  # a decode step calls the compiled forward once per token: count per token
        if per_token > 1 and len(token_frames) > 1:
            breaks = True
            parts.append(f"{_fmt_n(per_token)} compiled regions per decode token from {len(token_frames)} compiled "
                         "frames (graph breaks split the forward)")
    elif per_step > 1 and len(frames := _frames(names, _regions_in(c, names, c.report.steps)[0])) > 1:
        breaks = True
        parts.append(f"{_fmt_n(per_step)} compiled regions per step from {len(frames)} compiled frames (graph breaks "
                     "split the compiled code, or the step calls several compiled functions)")
    if len(hashes) > 1:
        parts.append(f"{len(hashes)} distinct compiled graphs")
    # the fix names only what fired: several graphs may come of either a graph break or a recompile
    hunt = [w for w, on in (("graph breaks", breaks or len(hashes) > 1),
                            ("recompiles", bool(recompiled) or len(hashes) > 1)) if on]
    if hunt:
        fixes.append(f"Find the {' and '.join(hunt)} with TORCH_LOGS='{','.join(w.replace(' ', '_') for w in hunt)}' "
                     "(or torch._dynamo.explain)"
                     + ("; mark dynamic sizes (torch._dynamo.mark_dynamic) or compile with dynamic=True"
                        if "recompiles" in hunt else "") + ".")
    staging, gemms, n_steps = _staging_and_gemms(c)
    stage_us, math_us = float(staging["dur_us"].sum()), float(gemms["dur_us"].sum())
    if len(staging) and math_us and stage_us > math_us:
        fixes.append("Under mode='reduce-overhead' each replay first copies every input that is not a parameter or "
                     "buffer into the CUDA graph's static buffers: keep such an input in one tensor that every call "
                     "reuses and mark it with torch._dynamo.mark_static_address, so the graph reads it in place and "
                     "nothing is copied in.")
        per = len(staging) / n_steps  # (the kernels, like their time, per step: the 2 of two steps are 1 a step)
        parts.append(f"CUDA-graph input staging copies ({_fmt_n(per)} multi_tensor_apply kernel"
                     f"{'' if per == 1 else 's'} a step, {_fmt_us(stage_us / n_steps)} per step) cost more than the "
                     f"GEMMs ({_fmt_us(math_us / n_steps)} per step)")
    decode = decode if recompiled else {}
    if decode:
        knobs = _cfg(c.config, "knobs") or {}
        said = "; ".join(", ".join(f"{v} in {n} token{'s' if n != 1 else ''}" for v, n in vs.items())
                         for vs in decode.values())
        parts.append(f"the decode tokens ({TOKEN_RANGE}) ran {sum(len(v) for v in decode.values())} compiled "
                     f"variants of the same forward ({said}): its shapes changed from token to token, as a dynamic "
                     "KV cache's do (it grows one position per token), so Dynamo recompiled for the new length and "
                     "again with the length marked dynamic"
                     + (" (this run's cache is dynamic)" if knobs.get("cache") == "dynamic" else ""))
    if not parts:
        return None
    text = "torch.compile in this trace: " + "; ".join(parts) + "."
    fix = " ".join(fixes)
    if decode:
        fix = ("Give the decode loop a static KV cache (transformers' StaticCache, or generate(..., "
               "cache_implementation='static')): it is allocated once at its full "
               "length, so every token's forward has the same shapes, one compiled graph serves them all, and "
               "torch.compile(model.forward, mode='reduce-overhead') can replay it as a CUDA graph."
               + _in_this_app(c, "the causal_lm workload's cache=static") + " " + fix)
    return Diagnosis("compile_breaks", "Recompiles, graph breaks or staging copies", text, fix, None,
                     "", {"regions": regions[:20], "fx_graphs": sorted(hashes)[:20],
                          "decode_token_variants": decode})
