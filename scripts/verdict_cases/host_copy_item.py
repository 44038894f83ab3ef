"""A step that copies an 8 MiB host tensor to the GPU each step and reads a scalar back (`.item()`).

``make_step``: the host tensor is pageable; ``pinned``: the same from pinned memory (``non_blocking=True``)."""
import torch


def _build(device, dtype, pin):
    torch.manual_seed(0)
    host = torch.randn(2 << 20, dtype=torch.float32)  # 8 MiB
    if pin and device == "cuda":
        host = host.pin_memory()
    w = torch.randn(1024, 1024, device=device, dtype=dtype)

    def step(host, w):
        x = host.to(device, non_blocking=pin).to(dtype)
        y = (x[: 1024 * 1024].view(1024, 1024) @ w).sum()
        return y.item()

    return step, (host, w)


def make_step(device, dtype):
    return _build(device, dtype, pin=False)


def pinned(device, dtype):
    return _build(device, dtype, pin=True)
