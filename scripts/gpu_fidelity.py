"""Fidelity of the profiler's kernel durations against CUDA events, and the profiler's own overhead.

    python scripts/gpu_fidelity.py --out DIR [--sizes 1024,2048,4096,8192]

For each size (bf16, warm): in ONE process,
  1. the app's own workload and profiler setup (profiling_core.run.loop.run_workload, schedule 0/0/20) writes a
     trace to DIR/fidelity_<size>/trace.json — the app later reads the GEMM kernel's median duration from it;
  2. the same GEMM (torch.matmul on tensors of the same shape) timed 50 times, each between two CUDA events
     (median; includes the wait for the launch when the GPU is idle), 20 queued back to back between two
     events (per GEMM; what the kernel itself takes), and by triton.testing.do_bench when triton is there
     (it flushes L2 between reps);
  3. the profiler's overhead: wall time per iteration of the study's step (matmul + add, synchronised) over
     50 iterations without the profiler, against 50 iterations inside torch.profiler.profile (CPU+CUDA,
     prof.step() each iteration).
Writes DIR/fidelity.json.  Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from profiling_core import ExperimentConfig  # noqa: E402
from profiling_core.run.loop import Phase, run_workload  # noqa: E402


def cuda_event_ms(fn, reps: int = 50) -> list[float]:
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return times


def step_wall_us(fn, reps: int, profiled: bool) -> list[float]:
    out = []
    if profiled:
        from torch.profiler import ProfilerActivity, profile
        ctx = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True)
    else:
        import contextlib
        ctx = contextlib.nullcontext()
    with ctx as prof:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            out.append((time.perf_counter() - t0) * 1e6)
            if profiled:
                prof.step()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default="1024,2048,4096,8192")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "sizes": {}}
    for n in [int(s) for s in a.sizes.split(",")]:
        cfg = ExperimentConfig(size=n, dtype="bf16", warmup=10, wait=0, warmup_steps=0, active=20, device="cuda")
        d = out / f"fidelity_{n}"
        d.mkdir(exist_ok=True)
        run_workload(cfg, d, Phase())
        x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for _ in range(10):
            torch.matmul(x, w)
        torch.cuda.synchronize()
        ev = cuda_event_ms(lambda: torch.matmul(x, w))
        row = {"cuda_event_median_us": statistics.median(ev) * 1000, "cuda_event_min_us": min(ev) * 1000,
               "cuda_event_max_us": max(ev) * 1000, "reps": len(ev)}
        # Back-to-back: 20 GEMMs queued between two events (no launch gap inside), per GEMM; median of 10.
        def queued():
            for _ in range(20):
                torch.matmul(x, w)
        q = [t / 20 for t in cuda_event_ms(queued, reps=10)]
        row["cuda_event_queued_median_us"] = statistics.median(q) * 1000
        # CUDA graph of 20 GEMMs replayed between two events: GPU time with no launch gaps at any size.
        g = torch.cuda.CUDAGraph()
        s_ = torch.cuda.Stream()
        s_.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s_):
            for _ in range(3):
                torch.matmul(x, w)
        torch.cuda.current_stream().wait_stream(s_)
        with torch.cuda.graph(g):
            for _ in range(20):
                torch.matmul(x, w)
        gr = [t / 20 for t in cuda_event_ms(g.replay, reps=10)]
        row["cuda_graph_median_us"] = statistics.median(gr) * 1000
        # The same GEMM instances two ways: CUDA events around each matmul inside a profiled loop of 20 steps;
        # the trace (events_trace.json) gives the kernel durations of exactly these instances.
        from torch.profiler import ProfilerActivity, profile, record_function
        evs = []
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                s0, e0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                with record_function("matmul_add"):
                    s0.record()
                    y = torch.matmul(x, w)
                    e0.record()
                    torch.add(y, b)
                evs.append((s0, e0))
                prof.step()
        torch.cuda.synchronize()
        prof.export_chrome_trace(str(d / "events_trace.json"))
        row["in_loop_event_us"] = [s0.elapsed_time(e0) * 1000 for s0, e0 in evs]
        row["in_loop_event_median_us"] = statistics.median(row["in_loop_event_us"])
        try:
            from triton.testing import do_bench
            row["do_bench_us"] = do_bench(lambda: torch.matmul(x, w), warmup=25, rep=100) * 1000
        except Exception as exc:  # noqa: BLE001 - optional
            row["do_bench_error"] = str(exc)
        step = lambda: torch.add(torch.matmul(x, w), b)  # noqa: E731
        plain = step_wall_us(step, 50, profiled=False)
        prof = step_wall_us(step, 50, profiled=True)
        row.update(step_wall_plain_median_us=statistics.median(plain), step_wall_profiled_median_us=statistics.median(prof),
                   profiler_overhead_us=statistics.median(prof) - statistics.median(plain))
        results["sizes"][str(n)] = row
        print(n, json.dumps(row), flush=True)
    (out / "fidelity.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
