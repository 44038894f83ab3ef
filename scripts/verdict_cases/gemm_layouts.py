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
"""
import torch


def make_step(device, dtype):
    torch.manual_seed(0)
    a = torch.randn(4095, 4096, device=device, dtype=dtype)
    b = torch.randn(4096, 4096, device=device, dtype=dtype)
    return torch.matmul, (a, b)


def transposed_m(device, dtype):
    torch.manual_seed(0)
    a = torch.randn(4096, 4095, device=device, dtype=dtype).t()  # (4095, 4096), strides (1, 4095)
    b = torch.randn(4096, 4096, device=device, dtype=dtype)
    return torch.matmul, (a, b)


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
    torch.manual_seed(0)
    return torch.matmul, (torch.randn(1, 4095, device=device, dtype=dtype),
                          torch.randn(4095, 4096, device=device, dtype=dtype))


def n1(device, dtype):
    """(4096, 4096) @ (4096, 1) with ``torch.mm``: a single column (N = 1), K and M aligned."""
    torch.manual_seed(0)
    return torch.mm, (torch.randn(4096, 4096, device=device, dtype=dtype),
                      torch.randn(4096, 1, device=device, dtype=dtype))


def m1_k4096(device, dtype):
    """(1, 4096) @ (4096, 4096): ``m1_k4095`` with K aligned, to compare."""
    torch.manual_seed(0)
    return torch.matmul, (torch.randn(1, 4096, device=device, dtype=dtype),
                          torch.randn(4096, 4096, device=device, dtype=dtype))


def m4_k4095(device, dtype):
    """(4, 4095) @ (4095, 4096): four rows whose K (their leading dimension) is odd."""
    torch.manual_seed(0)
    return torch.matmul, (torch.randn(4, 4095, device=device, dtype=dtype),
                          torch.randn(4095, 4096, device=device, dtype=dtype))


def _linear_m1(device, dtype, k):
    torch.manual_seed(0)
    return torch.nn.functional.linear, (torch.randn(1, k, device=device, dtype=dtype),
                                        torch.randn(4096, k, device=device, dtype=dtype))


def linear_m1_k4095(device, dtype):
    """``F.linear`` of one token: x (1, 4095), the weight (4096, 4095) read transposed: its rows 4095 apart."""
    return _linear_m1(device, dtype, 4095)


def linear_m1_k4096(device, dtype):
    """``linear_m1_k4095`` with K aligned, to compare."""
    return _linear_m1(device, dtype, 4096)
