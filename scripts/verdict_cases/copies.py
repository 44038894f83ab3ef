"""Steps whose host-device copies decide who sets the pace.

``readback_cpu``: 0.5 ms of the CPU's own work (a busy loop: a batch prepared on the host, the same time every
step), then eight 4096² GEMMs on the GPU, then the
result's sum read back with ``.cpu()``: a copy into pageable memory, whose ``cudaMemcpyAsync`` holds the CPU until the
GEMMs ahead of it have run. ``readback_item``: the same step reading it back with ``.item()`` (a copy into pinned
memory and a stream synchronize). The two loops are the same; only the call the CPU waits in differs.

``stream_in_pinned``: each step copies 64 MiB from pinned host memory (``non_blocking=True``) and sums it: the copy
engine's work, queued without a wait. ``stream_in_pageable``: the same 64 MiB from pageable memory, whose copy holds
the CPU until its bytes are staged."""
import time

import torch


def _readback(device, dtype, how):
    torch.manual_seed(0)
    a = torch.randn(4096, 4096, device=device, dtype=dtype)
    w = torch.randn(4096, 4096, device=device, dtype=dtype)

    def step(a, w):
        t = time.perf_counter()
        while time.perf_counter() - t < 5e-4:  # the host's own work in the step
            pass
        x = a
        for _ in range(8):
            x = x @ w
        s = x.float().sum()
        return s.cpu() if how == "cpu" else s.item()

    return step, (a, w)


def readback_cpu(device, dtype):
    return _readback(device, dtype, "cpu")


def readback_item(device, dtype):
    return _readback(device, dtype, "item")


def _stream_in(device, dtype, pin):
    torch.manual_seed(0)
    host = torch.randn(16 << 20, dtype=torch.float32)  # 64 MiB
    if pin and device == "cuda":
        host = host.pin_memory()

    def step(host):
        return host.to(device, non_blocking=pin).sum()

    return step, (host,)


def stream_in_pinned(device, dtype):
    return _stream_in(device, dtype, pin=True)


def stream_in_pageable(device, dtype):
    return _stream_in(device, dtype, pin=False)
