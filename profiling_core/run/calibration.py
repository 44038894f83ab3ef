"""Calibration: what a dense GEMM and a device copy reach on this machine, measured in the worker.

:func:`measure_peaks` times, on the device the experiments use,

- a dense square GEMM (``torch.mm``) per dtype: bf16, fp16, tf32 and fp32 on a GPU (tf32 is fp32 with
  ``torch.backends.cuda.matmul.allow_tf32`` on; fp32 with it off), fp32, bf16 and fp16 on a CPU, on random data
  (zeros run measurably faster on a GPU: less power per multiply), at a size large enough to keep the device busy;
- device memory bandwidth: a large device-to-device ``copy_``, counting the bytes read and the bytes written.

On a GPU each figure is timed with CUDA events around ``repeats`` back-to-back calls after warm-up calls, over
several rounds, and the best round's rate is kept (a peak is what the device can reach; the median is stored beside
it). On a CPU the same with ``time.perf_counter`` and the thread count torch uses.

It runs in the worker like any experiment (a :class:`CalibrationJob`, so it takes the device lock and has the
worker's fault handling), via ``runner.calibrate()``; the result, a
``store.peaks.DevicePeaks``, is kept in the run store (``store.peaks.PeakBook``).
"""
from __future__ import annotations

import functools
import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Optional

from ..store.peaks import CPU_DTYPES, GPU_DTYPES, DevicePeaks
from .host import cpu_model, nvml_driver_version

_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32"}


def _timer(device: str):
    """(start, stop) -> seconds between them, after the device finished the work in between."""
    import torch
    if device == "cuda":
        def run(fn, n: int) -> float:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(n):
                fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b) / 1e3
        return run

    def run_cpu(fn, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return time.perf_counter() - t0
    return run_cpu


def _rounds(run, fn, repeats: int, rounds: int, warmup: int, round_s: Optional[float]) -> list[float]:
    """Seconds per call of each round. With ``round_s`` (a CPU), a round holds as many calls as fit in about that
    long (at most ``repeats``, at least one)."""
    for _ in range(warmup):
        fn()
    one = run(fn, 1)
    if round_s is not None:
        repeats = max(1, min(repeats, int(round_s / max(one, 1e-9))))
    return [run(fn, repeats) / repeats for _ in range(rounds)]


def measure_peaks(device: str = "cuda", *, gemm_size: Optional[int] = None, copy_bytes: Optional[int] = None,
                  dtypes: Optional[tuple[str, ...]] = None, repeats: int = 10, rounds: int = 5,
                  warmup: int = 3) -> DevicePeaks:
    """Time the dense GEMM per dtype and a device-to-device copy on ``device`` (``"cuda"`` or ``"cpu"``).

    On a GPU: an 8192³ GEMM (1.1 TFLOP per bf16 call) and a 2 GiB copy; ``warmup`` untimed calls, then ``rounds``
    rounds of ``repeats`` timed calls; the best round is the peak, the median round is kept beside it. On a CPU:
    a 1024³ GEMM, halved while one call takes longer than half a second (CPUs without fp16 or bf16 units are slow
    at those), rounds of about a quarter second, and a 256 MiB copy, which keeps a CPU calibration to seconds.
    ``gemm_size`` fixes the size on either.
    """
    import torch
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is available for a GPU calibration")
    on_gpu = device == "cuda"
    nbytes = int(copy_bytes or (2 << 30 if on_gpu else 256 << 20))
    dtypes = tuple(dtypes or (GPU_DTYPES if on_gpu else CPU_DTYPES))
    allowed = GPU_DTYPES if on_gpu else CPU_DTYPES
    bad = [d for d in dtypes if d not in allowed]
    if bad:
        raise ValueError(f"dtypes {bad} cannot be calibrated on {device}; allowed: {', '.join(allowed)}")
    run = _timer(device)
    round_s = None if on_gpu else 0.25
    best, median, sizes = {}, {}, {}
    tf32_was = torch.backends.cuda.matmul.allow_tf32
    gen = torch.Generator(device=device).manual_seed(0)
    try:
        for d in dtypes:
            dt = getattr(torch, _TORCH_DTYPES[d])
            if on_gpu:
                torch.backends.cuda.matmul.allow_tf32 = d == "tf32"
            n = int(gemm_size or (8192 if on_gpu else 1024))
            while True:
                a = torch.randn(n, n, device=device, dtype=dt, generator=gen)
                b = torch.randn(n, n, device=device, dtype=dt, generator=gen)
                out = torch.empty(n, n, device=device, dtype=dt)
                gemm = functools.partial(torch.mm, a, b, out=out)  # these tensors, not whatever the names hold later
                if on_gpu or gemm_size or n <= 256 or run(gemm, 1) <= 0.5:
                    break
                n //= 2
            per_call = _rounds(run, gemm, repeats, rounds, warmup, round_s)
            flops = 2.0 * n ** 3
            best[d] = round(flops / min(per_call) / 1e12, 4)
            median[d] = round(flops / statistics.median(per_call) / 1e12, 4)
            sizes[d] = n
            del a, b, out, gemm  # the device memory goes before the next dtype's tensors
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_was
    elems = nbytes // 4
    src = torch.rand(elems, device=device, generator=gen)
    dst = torch.empty_like(src)
    copy = functools.partial(dst.copy_, src)
    per_copy = _rounds(run, copy, repeats, rounds, warmup, round_s)
    moved = 2.0 * elems * 4  # read once, written once
    bw_best, bw_median = moved / min(per_copy) / 1e9, moved / statistics.median(per_copy) / 1e9
    del src, dst, copy
    if on_gpu:
        torch.cuda.empty_cache()
        name = torch.cuda.get_device_name()
        driver = nvml_driver_version()
        threads = None
    else:
        name, driver, threads = cpu_model(), None, torch.get_num_threads()
    shapes = ", ".join(f"{d} {n}" for d, n in sizes.items())
    timing = (f"CUDA events around {repeats} back-to-back calls per round after {warmup} warm-up calls"
              if on_gpu else f"time.perf_counter around rounds of about {round_s:g} s (at most {repeats} calls) "
                             f"after {warmup} warm-up calls; {threads} CPU threads")
    method = (f"torch.mm of two random square matrices per dtype (M = N = K: {shapes}"
              + ("; tf32 = fp32 with torch.backends.cuda.matmul.allow_tf32 on, fp32 with it off), and a "
                 "device-to-device copy_ of " if on_gpu else "), and a copy_ in the CPU's memory of ")
              + f"{nbytes / 2**20:,.0f} MiB counting bytes read + written; {timing}; {rounds} rounds, the best kept "
              f"(the median stored beside it)")
    return DevicePeaks(device=name, kind=device, driver=driver, torch_version=torch.__version__,
                       measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), method=method,
                       gemm_tflops=best, gemm_tflops_median=median, gemm_sizes=sizes,
                       bandwidth_gbs=round(bw_best, 1), bandwidth_gbs_median=round(bw_median, 1),
                       copy_bytes=elems * 4, threads=threads)


@dataclass(frozen=True)
class CalibrationJob:
    """A calibration as the worker runs it (``runner.calibrate``): what ``measure_peaks`` is given, on ``device``
    (``auto``: the GPU when there is one), within ``timeout_s``. Quacks like an ExperimentConfig where the worker
    needs one (``name``, ``timeout_s``, ``compile``, ``device``, ``to_json``)."""
    device: str = "auto"
    gemm_size: Optional[int] = None
    copy_bytes: Optional[int] = None
    repeats: int = 10
    rounds: int = 5
    warmup: int = 3
    timeout_s: float = 300.0
    compile = "off"

    def __post_init__(self) -> None:
        from ..errors import ConfigError
        if self.device not in ("auto", "cuda", "cpu"):
            raise ConfigError("device", self.device, "one of 'auto', 'cuda', 'cpu'")
        for name, lo, hi in (("gemm_size", 64, 32768), ("copy_bytes", 1 << 20, 64 << 30)):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi):
                raise ConfigError(name, v, f"an integer from {lo} to {hi}, or null")
        for name, lo, hi in (("repeats", 1, 1000), ("rounds", 1, 100), ("warmup", 0, 100)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ConfigError(name, v, f"an integer from {lo} to {hi}")
        t = self.timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 1 <= t <= 7200:
            raise ConfigError("timeout_s", t, "a number of seconds from 1 to 7200")

    @property
    def name(self) -> str:
        return f"calibration-{self.device}"

    def to_json(self) -> str:
        return json.dumps({"job": "calibrate", **asdict(self)})

    @classmethod
    def from_dict(cls, data: dict) -> "CalibrationJob":
        return cls(**{k: v for k, v in data.items() if k != "job"})

    def run(self, timer) -> dict:
        """(in the worker) measure and return ``{"peaks": ...}`` for result.json."""
        import torch

        from .loop import resolve_device
        device = resolve_device(torch, self.device)
        peaks = timer.run("calibrate_s", lambda: measure_peaks(
            device, gemm_size=self.gemm_size, copy_bytes=self.copy_bytes, repeats=self.repeats, rounds=self.rounds,
            warmup=self.warmup))
        return {"peaks": peaks.to_dict()}
