"""``matmul_add``: the study's ``torch.add(torch.matmul(x, w), b)``.

Its knobs are ``ExperimentConfig``'s own fields ``size``, ``batch`` and ``bias`` (unchanged names, defaults and run
names).
"""
from __future__ import annotations

from collections.abc import Mapping

from ._base import BATCH_RANGE, Knob, Workload

SIZE_RANGE = (1, 65536)
BIASES = ("matrix", "vector")


def matmul_add_bias_shape(v: Mapping) -> tuple:
    """The shape of b: that of x for a matrix bias, (n,) for a vector one."""
    n, batch = v["size"], v["batch"]
    if v["bias"] == "vector":
        return (n,)
    return (batch, n, n) if batch else (n, n)


def _matmul_add_build(torch, v, device, dtype):
    n = v["size"]
    shape = (v["batch"], n, n) if v["batch"] else (n, n)
    g = torch.Generator(device=device).manual_seed(0)
    # As the study: x, w and b are (n, n), or all (batch, n, n); with bias "vector", b is (n,).
    x = torch.randn(shape, device=device, dtype=dtype, generator=g)
    w = torch.randn(shape, device=device, dtype=dtype, generator=g)
    b = torch.randn(matmul_add_bias_shape(v), device=device, dtype=dtype, generator=g)

    def inner(x, w, b):
        return torch.add(torch.matmul(x, w), b)

    return inner, (x, w, b)


def _matmul_add_memory(v, e):
    n = v["size"]
    matrix = (v["batch"] or 1) * n * n
    return e * (4 * matrix + (matrix if v["bias"] == "matrix" else n))  # x, w, b, the product and the sum


def _matmul_add_bytes(v, e):
    n = v["size"]
    matrix = (v["batch"] or 1) * n * n
    return e * (3 * matrix + (matrix if v["bias"] == "matrix" else n))  # x, w, b read; the sum written


MATMUL_ADD = Workload(
    "matmul_add", "the study's torch.add(torch.matmul(x, w), b) on (n, n) or (batch, n, n) matrices",
    (Knob("size", "int", 64, "square matrix size n: x and w are (n, n), or (batch, n, n)", range=SIZE_RANGE),
     Knob("batch", "int", None, "a leading batch dimension (turns aten::mm into aten::bmm); none by default",
          range=BATCH_RANGE, optional=True),
     Knob("bias", "choice", "matrix", "b's shape: matrix (like x, the study's) or vector ((n,)); decides what "
          "torch.compile fuses", choices=BIASES)),
    ("size",), _matmul_add_build,
    flops=lambda v: 2 * (v["batch"] or 1) * v["size"] ** 3, bytes_=_matmul_add_bytes, memory=_matmul_add_memory)
