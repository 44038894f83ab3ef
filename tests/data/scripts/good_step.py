"""A user's step for the `script` workload (tests): a small Conv1d + ReLU, built on the run's device and dtype."""
import torch


def make_step(device, dtype):
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(4, 8, kernel_size=3, device=device, dtype=dtype).requires_grad_(False)
    x = torch.randn(2, 4, 16, device=device, dtype=dtype)

    def step(x):
        return torch.relu(conv(x))

    return step, (x,)


def other_step(device, dtype):
    """Another function of the same file (the `function` knob picks it)."""
    x = torch.ones(8, 8, device=device, dtype=dtype)
    return torch.tanh, (x,)
