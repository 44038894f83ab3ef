"""A conv block (Conv2d 3x3 -> BatchNorm -> ReLU, twice) on a (32, 64, 56, 56) input.

``make_step``: NCHW (torch's default memory format); ``channels_last``: the same model and input in channels_last."""
import torch


def _build(device, dtype, channels_last):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(64, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
    ).to(device=device, dtype=dtype).eval().requires_grad_(False)
    x = torch.randn(32, 64, 56, 56, device=device, dtype=dtype)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, (x,)


def make_step(device, dtype):
    return _build(device, dtype, channels_last=False)


def channels_last(device, dtype):
    return _build(device, dtype, channels_last=True)
