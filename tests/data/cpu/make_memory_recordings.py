"""Make tests/data/cpu/memory_second_session.json.gz and memory_second_cycle.json.gz with the CPU build of torch (see
README.md): run ``python make_memory_recordings.py sessions`` and ``python make_memory_recordings.py cycles``, each in
a process of its own, then gzip the second file of each."""
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def sessions() -> None:
    """Two profiler sessions in one process: the first keeps 1 MiB a step (4 MiB), the second frees it in its first
    step and runs three more small steps."""
    torch.set_num_threads(1)
    model, x, keep = torch.nn.Linear(256, 256), torch.randn(64, 256), []
    for path, clear_first in (("memory_first_session.json", False), ("memory_second_session.json", True)):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as p:
            for i in range(4):
                if clear_first and i == 0:
                    keep.clear()
                model(x)
                if not clear_first:
                    keep.append(torch.empty(1 << 18))
                p.step()
        p.export_chrome_trace(path)


def cycles() -> None:
    """One profiler whose schedule repeats: two cycles of one warm-up step and three active ones, each step keeping
    1 MiB; each cycle is exported to a file of its own."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    x, keep, n = torch.randn(64, 256), [], [0]

    def ready(p):
        n[0] += 1
        p.export_chrome_trace(f"memory_{('first', 'second')[n[0] - 1]}_cycle.json")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=2), on_trace_ready=ready) as p:
        for _ in range(8):
            model(x)
            keep.append(torch.empty(1 << 18))
            p.step()


if __name__ == "__main__":
    {"sessions": sessions, "cycles": cycles}[sys.argv[1]]()
