"""``attention_backend``: which scaled_dot_product_attention backend ran and, where it is not a fused one on a GPU,
the reasons why flash could not run: the run's own settings (a forced backend, fp32), and what the trace itself
records of the attention ops: inputs of a type flash does not take (flash takes fp16 and bf16; the recorded ``Input
type`` of query, key and value) and a head_dim above 256 (the last dimension of the recorded query, else the run's
config). Without any, the text says the trace does not say why.

What holds on an H200 (torch 2.11, ``scripts/gpu_verdicts.py``'s ``attn_*`` cases): flash ran a head_dim of 100 (it
pads to a multiple of 8 itself: not a multiple of 8 is no reason), refused 264 (the efficient backend ran it);
an fp32 run of head_dim 100 ran the efficient backend.

That padding is not free, and the rule measures it wherever it shows: the kernels that ``aten::pad`` (or
``aten::constant_pad_nd``) launched inside ``aten::scaled_dot_product_attention``, a fill and a copy per padded input.
On the H200's bf16 head_dim-100 case they took 258 µs of the 783 µs of GPU work the attention launched per
steady-state step (the flash kernel ~525 µs); the same case at head_dim 128 (``h200_workloads/attention_eager``)
launched none, nor did the transformer blocks' head_dim of 64; on an H100, head_dim 100 padded the same way (285 of
821 µs) and 104 and 96, multiples of 8 that are no powers of two, padded nothing (``tests/data/h100``)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ....analyses import measured_steps
from ....config import config_field as _cfg
from ....units import format_share
from ..base import Diagnosis, _Ctx, _args_of, _fmt_n, _fmt_us, _gpu_time_cost
from ..roofline import _TORCH_DTYPES, recalls

FLASH_INPUT_TYPES = ("c10::BFloat16", "c10::Half")
"""The recorded ``Input type`` of the query, key and value that flash attention takes (bf16, fp16)."""
FLASH_MAX_HEAD_DIM = 256
"""The largest head_dim flash attention runs (torch's ``check_head_dim_size_flash``)."""


def _forward_calls(c: _Ctx, ops: list[str]) -> np.ndarray:
    """The slice ids of every call of the forward ops among ``ops`` that ran (backward ops, whose first input is the
    gradient, left out, and so are calls that only call the same op again, ``roofline.recalls``: autocast records its
    inputs before casting them)."""
    fwd = [o for o in ops if not o.endswith("_backward")]
    col = c.session.tables.name
    codes = [i for i, n in enumerate(col.uniq) if n in fwd]
    ids = np.flatnonzero(np.isin(col.codes, codes)) if codes else np.zeros(0, dtype=np.int64)
    wrappers = recalls(c.session.tables, ids)
    return ids[~np.isin(ids, list(wrappers))] if wrappers else ids


def _recorded_input_types(c: _Ctx, ops: list[str]) -> dict[str, list[str]]:
    """{forward attention op: the distinct recorded ``Input type`` of its query, key and value (its first three
    inputs)} over every call of ``ops`` in the trace (backward ops, whose first input is the gradient, left out);
    an op without recorded types is absent."""
    ids = _forward_calls(c, ops)
    if not len(ids):
        return {}
    col = c.session.tables.name
    got = _args_of(c.session, "Input type", ids.tolist())
    out: dict[str, set] = {}
    for i in ids.tolist():
        t = got.get(i)
        if isinstance(t, list):
            out.setdefault(col.uniq[col.codes[i]], set()).update(x for x in t[:3] if isinstance(x, str) and x)
    return {op: sorted(ts) for op, ts in out.items() if ts}


def _recorded_head_dims(c: _Ctx, ops: list[str]) -> list[int]:
    """The distinct head_dims the forward attention ops of ``ops`` record: the last dimension of each call's query
    (its first recorded ``Input Dims`` shape, of 3 or more dimensions), smallest first."""
    ids = _forward_calls(c, ops)
    if not len(ids):
        return []
    got = _args_of(c.session, "Input Dims", ids.tolist())
    return sorted({int(d[0][-1]) for d in got.values() if isinstance(d, list) and d and isinstance(d[0], list)
                   and len(d[0]) >= 3 and isinstance(d[0][-1], int)})


SDPA = "aten::scaled_dot_product_attention"
PAD_OPS = ("aten::pad", "aten::constant_pad_nd")
"""The ops through which scaled_dot_product_attention pads its inputs' last dimension for a fused kernel."""


def _sdpa_padding(c: _Ctx) -> Optional[dict]:
    """What padding the attention's inputs cost the steady-state steps (``analyses.measured_steps``): of the GPU ops
    whose launch call (``launch_latency``) lies inside an :data:`SDPA` call, those launched from inside one of its
    :data:`PAD_OPS` (``pad_us``, ``pad_ops``: per step), beside all of them (``sdpa_us``); None where none was
    padded."""
    col, tb = c.session.tables.name, c.session.tables
    codes = {n: i for i, n in enumerate(col.uniq) if n == SDPA or n in PAD_OPS}
    lat = c.report.launch_latency
    if SDPA not in codes or len(codes) < 2 or lat.empty or c.report.steps.empty:
        return None
    steps = measured_steps(c.report.steps)["step"].tolist()
    rows = lat[lat["step"].isin(steps)].drop_duplicates("gpu_id")
    sdpa, pads = codes[SDPA], {v for k, v in codes.items() if k != SDPA}
    pad_us = sdpa_us = 0.0
    pad_ops = 0
    for launch, dur in zip(rows["launch_id"].astype(int).tolist(), rows["gpu_dur_us"].astype(float).tolist()):
        p, padded = int(tb.parent_id[launch]), False
        while p >= 0:  # (up to the attention call around the launch, if any)
            code = int(col.codes[p])
            if code == sdpa:
                sdpa_us += dur
                pad_us += dur if padded else 0.0
                pad_ops += padded
                break
            padded = padded or code in pads
            p = int(tb.parent_id[p])
    if pad_ops == 0:
        return None
    n = max(1, len(steps))
    return {"pad_us": pad_us / n, "pad_ops": pad_ops / n, "sdpa_us": sdpa_us / n}


def _rule_attention_backend(c: _Ctx) -> Optional[Diagnosis]:
    """Which SDPA backend ran (``workloads.sdpa_backend_from_names``) and, where it is neither flash nor cuDNN on a
    GPU (the fused ones), the reasons the run's own settings give why flash could not run; silent in a trace without
    attention."""
    from ....workloads import sdpa_backend_from_names
    col = c.session.tables.name  # the distinct names (in order of first appearance) with how often each occurs
    counts = np.bincount(col.codes[col.codes >= 0], minlength=len(col.uniq)).tolist()
    seen = [(n, k) for n, k in zip(col.uniq, counts) if k and isinstance(n, str)]
    names = [n for n, _k in seen]
    backend = sdpa_backend_from_names(names, [k for _n, k in seen])
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
    recorded = _recorded_input_types(c, ops) if on_gpu and backend not in good else {}
    if on_gpu and backend not in good:
        # the trace's own record of the types that ran first (query, key and value of a type flash does not take):
        # the run's dtype is its tensors', which autocast casts (the app's autocast knob, or the user's own)
        if dtype == "fp32" and not recorded and knobs.get("autocast", "off") == "off":
            why.append("flash attention takes only fp16/bf16 inputs and this run is fp32")
        else:
            odd = {op: [t for t in ts if t not in FLASH_INPUT_TYPES] for op, ts in recorded.items()}
            op = next((o for o in sorted(odd, key=lambda o: (o != "aten::scaled_dot_product_attention", o))
                       if odd[o]), None)
            if op is not None:
                names = sorted({_TORCH_DTYPES.get(t, t) for t in odd[op]})
                why.append(f"flash attention takes only fp16/bf16 inputs and the trace records {' and '.join(names)} "
                           f"ones ({op}'s Input type: {', '.join(odd[op])})")
        dims = _recorded_head_dims(c, ops)
        over = [d for d in dims if d > FLASH_MAX_HEAD_DIM]
        hd = knobs.get("head_dim") or (knobs.get("d_model") // knobs["heads"] if knobs.get("d_model")
                                       and knobs.get("heads") else None)
        if over:
            why.append(f"flash supports head_dim up to {FLASH_MAX_HEAD_DIM} and the trace records "
                       + " and ".join(str(d) for d in over) + " (the last dimension of the attention's query)")
        elif not dims and hd and hd > FLASH_MAX_HEAD_DIM:
            why.append(f"flash supports head_dim up to {FLASH_MAX_HEAD_DIM} and this run's is {hd}")
        cc = c.compute_capability
        if cc is not None and cc < 8.0:
            why.append(f"flash needs compute capability 8.0 and this GPU has {cc:g}")
    text += (": " + "; ".join(why) + "." if why else
             "." if backend in good or not on_gpu else
             "; the trace does not say why flash was not chosen: force it (torch.nn.attention.sdpa_kernel("
             "SDPBackend.FLASH_ATTENTION)) and torch's warning names the reason.")
    pad = _sdpa_padding(c) if on_gpu else None
    cost, basis = None, ""
    if pad is not None:
        dims = [d for d in _recorded_head_dims(c, ops) if d % 8]
        text += (" Around its kernel, scaled_dot_product_attention padded its inputs' last dimension"
                 + (f" (head_dim {' and '.join(map(str, dims))})" if dims else "")
                 + f" to a multiple of 8 ({' → '.join(o for o in PAD_OPS if o in col.uniq)}): "
                 f"{_fmt_n(pad['pad_ops'])} GPU op{'s' if pad['pad_ops'] != 1 else ''} per step, "
                 f"{_fmt_us(pad['pad_us'])} of GPU time per step, {format_share(pad['pad_us'] / pad['sdpa_us'])} of "
                 f"the {_fmt_us(pad['sdpa_us'])} the attention's GPU ops took (steady-state steps).")
        cost, basis = _gpu_time_cost(c.report, pad["pad_us"], "the GPU time of the padding's ops per steady-state "
                                     "step, which a head_dim that is a multiple of 8 does without")
    pad_fix = (" The padding around it is worth removing: with a head_dim that is a multiple of 8 (a model's d_model / "
               "heads) scaled_dot_product_attention pads nothing, and its copies of the query, key and value go."
               if pad is not None else "")
    if backend in good:
        fix = (f"Nothing to change for the backend ({'cuDNN' if backend == 'cudnn' else 'flash'} attention is a fused, "
               "memory-efficient kernel)." + pad_fix)
    elif not on_gpu:
        fix = ("On a CPU torch's own choice (backend auto) runs its flash CPU kernel: drop the forced backend."
               if forced and forced != "auto" else "Nothing to change for the backend.")
    else:  # the changes the reasons found call for; all of flash's conditions where the trace says none
        wants = [w for w, hit in (
            ("fp16 or bf16 inputs (autocast or .to(torch.bfloat16))", any(x.startswith("flash attention takes")
                                                                         for x in why)),
            (f"a head_dim of at most {FLASH_MAX_HEAD_DIM} (more heads of a smaller one)",
             any(x.startswith("flash supports head_dim") for x in why)),
            ("backend auto (or flash) instead of the forced one", bool(forced and forced != "auto"))) if hit]
        fix = ("Let flash run: " + ("; ".join(wants) if wants else
                                    f"fp16 or bf16 inputs (autocast or .to(torch.bfloat16)), head_dim at most "
                                    f"{FLASH_MAX_HEAD_DIM}, no explicit attention mask where is_causal=True does")
               + "; force it with torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) to see the reason torch "
               "gives when it cannot.")
    ev = {"backend": backend, "ops": ops[:10], "reasons": why}
    if on_gpu and backend not in good and dims:
        ev["head_dims"] = dims
    if recorded:
        ev["input_types"] = recorded
    if pad is not None:
        ev.update(padding_us_per_step=pad["pad_us"], padding_ops_per_step=pad["pad_ops"],
                  attention_gpu_us_per_step=pad["sdpa_us"])
        if backend not in good:
            fix += pad_fix
    return Diagnosis("attention_backend", f"Attention backend: {backend}", text, fix, cost, basis, ev)
