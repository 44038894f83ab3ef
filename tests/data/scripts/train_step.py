"""A user's training step for the `script` workload with train on (tests): a module whose call returns the loss."""
import torch


class WithLoss(torch.nn.Module):
    def __init__(self, device, dtype):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16, device=device, dtype=dtype), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 4, device=device, dtype=dtype))

    def forward(self, x, y):
        return torch.nn.functional.mse_loss(self.net(x), y)


def make_step(device, dtype):
    torch.manual_seed(0)
    x = torch.randn(4, 8, device=device, dtype=dtype)
    y = torch.randn(4, 4, device=device, dtype=dtype)
    return WithLoss(device, dtype), (x, y)


def frozen_step(device, dtype):
    """A forward-only step: a plain function, which train cannot train."""
    return torch.tanh, (torch.ones(2, 2, device=device, dtype=dtype),)
