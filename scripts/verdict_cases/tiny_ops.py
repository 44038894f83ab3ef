"""A step of a few tiny elementwise ops on a 1024-element tensor: compiled, one small Triton kernel per step."""
import torch


def make_step(device, dtype):
    x = torch.randn(1024, device=device, dtype=dtype)

    def step(x):
        return torch.relu(x * 2.0 + 1.0).sin()

    return step, (x,)
