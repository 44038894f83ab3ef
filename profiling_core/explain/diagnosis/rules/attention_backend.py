"""``attention_backend``: which scaled_dot_product_attention backend ran and, where it is not a fused one on a GPU,
the reasons why flash could not run: the run's own settings (a forced backend, fp32), and what the trace itself
records of the attention ops: inputs of a type flash does not take (flash takes fp16 and bf16; the recorded ``Input
type`` of query, key and value) and a head_dim above 256 (the last dimension of the recorded query, else the run's
config). Without any, the text says the trace does not say why.

What holds on an H200 (torch 2.11, ``scripts/gpu_verdicts.py``'s ``attn_*`` cases): flash ran a head_dim of 100 (it
pads to a multiple of 8 itself: not a multiple of 8 is no reason), refused 264 (the efficient backend ran it);
an fp32 run of head_dim 100 ran the efficient backend."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ....config import config_field as _cfg
from ..base import Diagnosis, _Ctx, _args_of
from ..roofline import _TORCH_DTYPES

FLASH_INPUT_TYPES = ("c10::BFloat16", "c10::Half")
"""The recorded ``Input type`` of the query, key and value that flash attention takes (bf16, fp16)."""
FLASH_MAX_HEAD_DIM = 256
"""The largest head_dim flash attention runs (torch's ``check_head_dim_size_flash``)."""


def _forward_calls(c: _Ctx, ops: list[str]) -> np.ndarray:
    """The slice ids of every call of the forward ops among ``ops`` (backward ops, whose first input is the
    gradient, left out)."""
    fwd = [o for o in ops if not o.endswith("_backward")]
    col = c.session.tables.name
    codes = [i for i, n in enumerate(col.uniq) if n in fwd]
    return np.flatnonzero(np.isin(col.codes, codes)) if codes else np.zeros(0, dtype=np.int64)


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
        if dtype == "fp32":
            why.append("flash attention takes only fp16/bf16 inputs and this run is fp32")
        else:  # the trace's own record: query, key and value of a type flash does not take
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
    if backend in good:
        fix = (f"Nothing to change for the backend ({'cuDNN' if backend == 'cudnn' else 'flash'} attention is a fused, "
               "memory-efficient kernel).")
    elif not on_gpu:
        fix = ("On a CPU torch's own choice (backend auto) runs its flash CPU kernel: drop the forced backend."
               if forced and forced != "auto" else "Nothing to change for the backend.")
    else:
        fix = ("Let flash run: fp16 or bf16 inputs (autocast or .to(torch.bfloat16)), head_dim at most 256, no "
               "explicit attention mask where is_causal=True does; force it with "
               "torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) to see the reason torch gives when it "
               "cannot.")
    ev = {"backend": backend, "ops": ops[:10], "reasons": why}
    if on_gpu and backend not in good and dims:
        ev["head_dims"] = dims
    if recorded:
        ev["input_types"] = recorded
    return Diagnosis("attention_backend", f"Attention backend: {backend}", text, fix, None, "", ev)
