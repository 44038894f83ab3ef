"""A step that makes temporaries it frees and keeps one tensor per call in a list (a cache that grows).

Each call: a 4-chunk product through a (4 n × n) temporary that is freed at the end of the call, and one
n × n result appended to ``KEPT`` and never freed, so the allocated memory grows by n² elements every step.
"""
import torch

N = 2048
KEPT: list = []


def make_step(device, dtype):
    x = torch.randn(N, N, device=device, dtype=dtype)
    w = torch.randn(N, N, device=device, dtype=dtype)

    def step(x, w):
        tmp = torch.cat([x @ w for _ in range(4)])  # 4 N x N products and a 4N x N concatenation, all temporaries
        KEPT.append(tmp[:N].clone())                # kept across steps
        return tmp.sum()

    return step, (x, w)
