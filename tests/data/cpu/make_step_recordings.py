"""Record the two CPU traces of the profiler's steps kept here (torch's CPU build; run from anywhere):

- ``steps_sleeping.json.gz``: ``schedule(wait=1, warmup=1, active=4)``; the loop's iterations 3 and 4 only sleep 10 ms
  in Python, the others run a 128² matmul and an add.
- ``steps_loader_stub.json.gz``: a DataLoader of 5 batches, ``schedule(wait=1, warmup=1, active=4)``: the loop ends
  while the profiler records, so ``profile``'s exit closes one last step that holds only the ``__next__`` that raised
  StopIteration (the profiler's closing stub).
- ``steps_double_step.json.gz``: ``schedule(wait=1, warmup=1, active=9)``, exported by ``on_trace_ready``; each of
  6 iterations trains an MLP (Linear 256→512, ReLU, Linear 512→256, SGD) and then calls ``prof.step()`` twice, so
  every other recorded step holds nothing but the time between the two calls.
- ``steps_exported_after_cycle.json.gz``: ``schedule(wait=1, warmup=1, active=2)`` over 6 iterations, exported with
  ``export_chrome_trace`` after the loop: the cycle's events were handed on and cleared, and the file holds only the
  profiler's own slices.
- ``steps_grad_accumulation.json.gz``: ``schedule(wait=1, warmup=1, active=3)``, exported by ``on_trace_ready``; each
  step accumulates gradients over 4 micro-batches (a ``micro_forward`` range around each forward and loss, then
  ``backward()``), then steps SGD and zeroes the gradients.
"""
import gzip
import shutil
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader, TensorDataset

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)


def keep(prof, name):
    raw = OUT / name
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as f, gzip.open(f"{raw}.gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    raw.unlink()


torch.set_num_threads(1)
x, w = torch.randn(128, 128), torch.randn(128, 128)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=4)) as prof:
    for i in range(6):
        if i in (3, 4):
            time.sleep(0.01)
        else:
            y = x @ w + x
        prof.step()
keep(prof, "steps_sleeping.json")

w = torch.randn(256, 256)
loader = DataLoader(TensorDataset(torch.randn(40, 256)), batch_size=8, num_workers=0)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=4)) as prof:
    for (b,) in loader:
        for _ in range(20):
            y = (b @ w).relu() @ w.t()
        prof.step()
keep(prof, "steps_loader_stub.json")

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=9),
             on_trace_ready=lambda p: keep(p, "steps_double_step.json")) as prof:
    for i in range(6):
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step()
        prof.step()

x = torch.randn(64, 64)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2)) as prof:
    for i in range(6):
        y = x @ x
        prof.step()
keep(prof, "steps_exported_after_cycle.json")

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 128)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
             on_trace_ready=lambda p: keep(p, "steps_grad_accumulation.json")) as prof:
    for i in range(5):
        for micro in range(4):
            with record_function("micro_forward"):
                loss = model(x).pow(2).mean() / 4
            loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step()
