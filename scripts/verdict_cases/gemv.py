"""A decode-like GEMM: (4, 4096) @ (4096, 4096), M = 4 (a GEMV in all but name); ``unaligned``: N = 4095."""
import torch


def make_step(device, dtype):
    torch.manual_seed(0)
    x = torch.randn(4, 4096, device=device, dtype=dtype)
    w = torch.randn(4096, 4096, device=device, dtype=dtype)
    return torch.matmul, (x, w)


def unaligned(device, dtype):
    torch.manual_seed(0)
    x = torch.randn(4, 4096, device=device, dtype=dtype)
    w = torch.randn(4096, 4095, device=device, dtype=dtype)
    return torch.matmul, (x, w)
