"""Which GEMM dimension's alignment matters depends on how each operand is laid out in memory, not on M, K and N.

cuBLAS reads each operand along its contiguous dimension, its rows ``ld`` elements apart (the leading dimension):
K for a row-major ``x``, M for ``x.t()`` of a row-major tensor, N for a row-major weight, K for ``nn.Linear``'s
weight (stored N×K, used transposed). These cases hold M = 4095 (odd) under both layouts of the first operand, and a
language model's head over GPT-2's vocabulary (50,257, odd) trained forward and backward beside the same head padded
to 50,304 (a multiple of 64): its weight gradient ``dY.t() @ X`` has M = 50,257 as the leading dimension of a
transposed view.

``make_step``: (4095, 4096) @ (4096, 4096), row-major: M is no leading dimension.
``transposed_m``: the same shapes with the first operand a transposed view of a (4096, 4095) tensor: its leading
dimension is M = 4095.
``lm_head``: ``F.linear(x, w)`` with x (4096, 768) and w (50257, 768), then its backward (a gradient given).
``lm_head_padded``: the same with w (50304, 768).
``m1_k4095`` / ``m1_k4096``, ``m4_k4095``, ``n1``, ``linear_m1_k4095`` / ``linear_m1_k4096``: one row (a decode step)
with K odd or even, four rows with K odd, one column (N = 1), and ``F.linear`` of one token (its weight read
transposed) with K odd or even.
"""
import torch


def _product(device, dtype, a, b, fn=torch.matmul, transpose_a=False):
    """``fn`` over two seeded random operands of shapes ``a`` and ``b``; ``transpose_a``: the first is made as
    ``a`` reversed and passed as its transposed view."""
    torch.manual_seed(0)
    x = torch.randn(*(a[::-1] if transpose_a else a), device=device, dtype=dtype)
    return fn, (x.t() if transpose_a else x, torch.randn(*b, device=device, dtype=dtype))


def make_step(device, dtype):
    return _product(device, dtype, (4095, 4096), (4096, 4096))


def transposed_m(device, dtype):
    return _product(device, dtype, (4095, 4096), (4096, 4096), transpose_a=True)  # A's strides (1, 4095)


def _head(device, dtype, vocab):
    torch.manual_seed(0)
    x = torch.randn(4096, 768, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(vocab, 768, device=device, dtype=dtype, requires_grad=True)
    g = torch.randn(4096, vocab, device=device, dtype=dtype)

    def step(x, w, g):
        x.grad = w.grad = None
        torch.nn.functional.linear(x, w).backward(g)

    return step, (x, w, g)


def lm_head(device, dtype):
    return _head(device, dtype, 50257)


def lm_head_padded(device, dtype):
    return _head(device, dtype, 50304)


def m1_k4095(device, dtype):
    """(1, 4095) @ (4095, 4096): a single row (M = 1) whose K is odd, the second operand row-major (N = 4096)."""
    return _product(device, dtype, (1, 4095), (4095, 4096))


def m1_k4096(device, dtype):
    """(1, 4096) @ (4096, 4096): ``m1_k4095`` with K aligned, to compare."""
    return _product(device, dtype, (1, 4096), (4096, 4096))


def m4_k4095(device, dtype):
    """(4, 4095) @ (4095, 4096): four rows whose K (their leading dimension) is odd."""
    return _product(device, dtype, (4, 4095), (4095, 4096))


def n1(device, dtype):
    """(4096, 4096) @ (4096, 1) with ``torch.mm``: a single column (N = 1), K and M aligned."""
    return _product(device, dtype, (4096, 4096), (4096, 1), fn=torch.mm)


def linear_m1_k4095(device, dtype):
    """``F.linear`` of one token: x (1, 4095), the weight (4096, 4095) read transposed: its rows 4095 apart."""
    return _product(device, dtype, (1, 4095), (4096, 4095), fn=torch.nn.functional.linear)


def linear_m1_k4096(device, dtype):
    """``linear_m1_k4095`` with K aligned, to compare."""
    return _product(device, dtype, (1, 4096), (4096, 4096), fn=torch.nn.functional.linear)
