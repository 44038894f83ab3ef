"""``attention``: ``scaled_dot_product_attention`` on (batch, heads, seq_len, head_dim) q, k, v, causal or not.

The backend is ``auto`` (torch picks) or one forced through ``torch.nn.attention.sdpa_kernel`` (``flash``,
``efficient``, ``math``, ``cudnn``).  Which one ran is read from the trace: :func:`sdpa_backend_from_names`.
"""
from __future__ import annotations

from typing import Iterable, Optional

from ._base import BATCH_RANGE, Knob, Workload

SDPA_BACKENDS = ("auto", "flash", "efficient", "math", "cudnn")


def _sdpa_backend(torch, name: str):
    B = torch.nn.attention.SDPBackend
    return {"flash": B.FLASH_ATTENTION, "efficient": B.EFFICIENT_ATTENTION, "math": B.MATH,
            "cudnn": B.CUDNN_ATTENTION}[name]


def _attention_build(torch, v, device, dtype):
    import torch.nn.attention  # noqa: F401  (sdpa_kernel, SDPBackend)
    shape = (v["batch"], v["heads"], v["seq_len"], v["head_dim"])
    g = torch.Generator(device=device).manual_seed(0)
    q, k, w = (torch.randn(shape, device=device, dtype=dtype, generator=g) for _ in range(3))
    sdpa, causal = torch.nn.functional.scaled_dot_product_attention, v["causal"]
    if v["backend"] == "auto":
        def inner(q, k, v_):
            return sdpa(q, k, v_, is_causal=causal)
    else:
        backend, sdpa_kernel = _sdpa_backend(torch, v["backend"]), torch.nn.attention.sdpa_kernel

        def inner(q, k, v_):
            with sdpa_kernel(backend):
                return sdpa(q, k, v_, is_causal=causal)
    return inner, (q, k, w)


def _pairs(queries: int, keys: int, causal: bool) -> int:
    """Query-key pairs attention computes: all, or the causal lower triangle (query i sees keys 0..i)."""
    return queries * (queries + 1) // 2 if causal else queries * keys


def _attention_flops(v):
    return 4 * v["batch"] * v["heads"] * v["head_dim"] * _pairs(v["seq_len"], v["seq_len"], v["causal"])


def _attention_memory(v, e):
    qkvo = 4 * v["batch"] * v["heads"] * v["seq_len"] * v["head_dim"] * e
    # the math path materialises the (seq_len × seq_len) scores per head (in fp32 for half types)
    scores = v["batch"] * v["heads"] * v["seq_len"] ** 2 * 4 if v["backend"] == "math" else 0
    return qkvo + 2 * scores


_NO_BACKEND = ("No viable backend", "No available kernel")


def _attention_explain(exc, v, phase, kind):
    text = str(exc)
    if v["backend"] == "auto" or not any(s in text for s in _NO_BACKEND):
        return None
    said = text.strip().splitlines()[0].split(". ")[0].rstrip(".") if text.strip() else type(exc).__name__
    return ("workload",
            f"attention backend {v['backend']!r} cannot run this attention (head_dim {v['head_dim']}, "
            f"{'causal' if v['causal'] else 'not causal'}) with this device and dtype: torch said {said!r}. "
            f"On a GPU, torch's warnings in the worker log say why. Use backend 'auto' (torch picks one that runs) "
            f"or 'math' (runs everywhere)")


ATTENTION = Workload(
    "attention", "scaled_dot_product_attention on (batch, heads, seq_len, head_dim) q, k, v, with a chosen backend",
    (Knob("batch", "int", 4, "sequences", range=BATCH_RANGE, tag="b"),
     Knob("heads", "int", 8, "attention heads", range=(1, 1024), tag="h"),
     Knob("seq_len", "int", 256, "tokens per sequence (queries and keys)", range=(1, 1 << 20), tag="s"),
     Knob("head_dim", "int", 64, "features per head (flash and efficient support up to 256)", range=(1, 1024),
          tag="d"),
     Knob("causal", "bool", True, "a causal mask (query i sees keys 0..i)", tag="causal"),
     Knob("backend", "choice", "auto", "auto: torch picks; otherwise forced with torch.nn.attention.sdpa_kernel "
          "(a backend that cannot run the shape fails the run, saying so)", choices=SDPA_BACKENDS, tag="")),
    ("seq_len",), _attention_build, flops=_attention_flops,
    bytes_=lambda v, e: 4 * v["batch"] * v["heads"] * v["seq_len"] * v["head_dim"] * e,
    memory=_attention_memory, explain=_attention_explain)


# op names of each SDPA backend (the CPU op the dispatcher runs under aten::scaled_dot_product_attention)
_SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_flash_attention_forward": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_efficient_attention_forward": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_attention_math_for_mps": "math",
}
# GPU kernel names (for a trace whose CPU ops are missing, e.g. a CUDA-graph replay), as substrings
_SDPA_KERNELS = (("pytorch_flash", "flash"), ("flash_fwd", "flash"), ("fmha_cutlass", "efficient"),
                 ("efficient_attention", "efficient"), ("cudnn", "cudnn"))


def sdpa_backend_from_names(names: Iterable[str], counts: Iterable[int] | None = None) -> Optional[str]:
    """Which SDPA backend ran, from a trace's op and kernel names: ``flash``, ``efficient``, ``cudnn`` or ``math``;
    None when nothing says.

    The backend's own aten op decides (``aten::_scaled_dot_product_flash_attention[_for_cpu]``,
    ``…_efficient_attention``, ``…_cudnn_attention``, ``aten::_scaled_dot_product_attention_math``); without one (a
    compiled graph decomposes the math path into bmm and softmax, a CUDA-graph replay has no CPU ops), a flash,
    cutlass-fmha or cuDNN attention kernel's name, else ``aten::bmm`` with a softmax (op or kernel) means math.
    Several backends in one trace (a transformer's layers all use one): the most frequent (on a tie, the one named
    first). ``counts``, when given, says how many times each name occurs (a trace's distinct names with their counts,
    in order of first appearance: the same answer as the names one per slice, read once per distinct name)."""
    names = [str(n) for n in names]
    weights = [1] * len(names) if counts is None else [int(k) for k in counts]
    found: dict[str, int] = {}
    for n, k in zip(names, weights):
        b = _SDPA_OPS.get(n)
        if b:
            found[b] = found.get(b, 0) + k
    if not found:
        for n, k in zip(names, weights):
            low = n.lower()
            if not n.startswith("aten::") and ("attention" in low or "fmha" in low or "flash" in low
                                              or "sdpa" in low):
                b = next((b for s, b in _SDPA_KERNELS if s in low), None)
                if b:
                    found[b] = found.get(b, 0) + k
    if found:
        return max(found, key=lambda b: found[b])
    if "aten::bmm" in names and any("softmax" in n.lower() for n in names):
        return "math"
    return None
