"""Make tests/data/cpu/64_fp32_warm_eager.json with the CPU build of torch (see README.md)."""
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def fn(x, w, b):
    with record_function("matmul_add"):
        return torch.add(torch.matmul(x, w), b)


def main(out: str = "64_fp32_warm_eager.json", n: int = 64) -> None:
    torch.manual_seed(0)
    x, w, b = torch.randn(n, n), torch.randn(n, n), torch.randn(n)
    for _ in range(10):  # warm-up outside the profiler
        fn(x, w, b)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=1, warmup=1, active=3)) as prof:
        for _ in range(5):
            fn(x, w, b)
            prof.step()
    prof.export_chrome_trace(out)
    with open(out.replace(".json", ".txt"), "w") as f:
        f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=-1) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
