"""A training step of a small MLP whose batch comes from a ``torch.utils.data.DataLoader`` whose samples cost CPU
time to make (a numpy transform per sample): the GPU waits for the input, not for launches.

``make_step``: the batch is made in the loop's own thread (``num_workers=0``): the DataLoader's ``__next__`` is most
of the step. ``workers``: the same dataset, two worker processes and pinned batches: the workers make the next
batches while the GPU runs (``workers8``: eight). ``python_outside_ops``: no DataLoader; the batch is made by Python code in the step that
no profiled op covers (a per-sample loop, then one ``torch.tensor``): the step slice's own time is most of the step.
"""
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

SAMPLES = 1 << 20  # more than any run asks for: the iterator never ends
BATCH = 64
FEATURES = 1024


class _Noisy(Dataset):
    """Sample ``i``: a seeded vector through a few numpy passes (a stand-in for decoding and augmenting an image)."""

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        x = rng.standard_normal(FEATURES * 16).astype(np.float32)
        for _ in range(4):
            x = np.tanh(np.convolve(x, np.ones(9, dtype=np.float32) / 9, mode="same"))
        return torch.from_numpy(x[:FEATURES].copy()), int(i % 10)


def _model(device, dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 10)).to(device=device, dtype=dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    return model, opt


def _train(model, opt, x, y, device, dtype, non_blocking):
    x = x.to(device, non_blocking=non_blocking).to(dtype)
    y = y.to(device, non_blocking=non_blocking)
    loss = torch.nn.functional.cross_entropy(model(x).float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def _loader_step(device, dtype, workers):
    model, opt = _model(device, dtype)
    pin = workers > 0 and device == "cuda"
    loader = DataLoader(_Noisy(), batch_size=BATCH, num_workers=workers, pin_memory=pin,
                        persistent_workers=workers > 0, prefetch_factor=4 if workers else None)
    it = iter(loader)

    def step(model, opt):
        x, y = next(it)
        return _train(model, opt, x, y, device, dtype, non_blocking=pin)

    return step, (model, opt)


def make_step(device, dtype):
    return _loader_step(device, dtype, workers=0)


def workers(device, dtype):
    return _loader_step(device, dtype, workers=2)


def workers8(device, dtype):
    return _loader_step(device, dtype, workers=8)


def python_outside_ops(device, dtype):
    model, opt = _model(device, dtype)
    count = [0]

    def step(model, opt):
        rows = []
        for k in range(BATCH):  # per-sample Python: no profiled op covers it
            i = count[0] = count[0] + 1
            rows.append([((i * 31 + j * 17) % 97) / 97.0 for j in range(FEATURES)])
        x = torch.tensor(rows)
        y = torch.tensor([i % 10 for i in range(BATCH)])
        return _train(model, opt, x, y, device, dtype, non_blocking=False)

    return step, (model, opt)
