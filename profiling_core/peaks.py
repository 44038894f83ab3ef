"""The device's measured peaks: what a GEMM and a copy reach on this machine, against which a run is judged.

A calibration (:func:`measure_peaks`) times, on the device the experiments use,

- a dense square GEMM (``torch.mm``) per dtype: bf16, fp16, tf32 and fp32 on a GPU (tf32 is fp32 with
  ``torch.backends.cuda.matmul.allow_tf32`` on; fp32 with it off), fp32, bf16 and fp16 on a CPU, on random data
  (zeros run measurably faster on a GPU: less power per multiply), at a size large enough to keep the device busy;
- device memory bandwidth: a large device-to-device ``copy_``, counting the bytes read and the bytes written.

On a GPU each figure is timed with CUDA events around ``repeats`` back-to-back calls after warm-up calls, over
several rounds, and the best round's rate is kept (a peak is what the device can reach; the median is stored beside
it). On a CPU the same with ``time.perf_counter`` and the thread count torch uses.

It runs in the worker like any experiment (so it takes the device lock and has the worker's fault handling), via
``calibrate()``; the result is stored once per (device name, driver, torch version) in the run store
(:class:`PeakBook`) with the date and the method. A vendor's datasheet number, where this module knows the device
(:data:`DATASHEETS`), is shown beside the measured one, never used instead of it.
"""
from __future__ import annotations

import json
import math
import os
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

GPU_DTYPES = ("bf16", "fp16", "tf32", "fp32")
CPU_DTYPES = ("fp32", "bf16", "fp16")

# Dense (no sparsity) rates of the SXM parts, from NVIDIA's datasheets: TFLOP/s per dtype, memory bandwidth in GB/s.
# Matched against torch's device name; the measured numbers are what the app judges by.
DATASHEETS: dict[str, dict[str, Any]] = {
    "H200": {"source": "NVIDIA H200 datasheet (SXM, dense)",
             "tflops": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}, "bandwidth_gbs": 4800.0},
    "H100 80GB HBM3": {"source": "NVIDIA H100 datasheet (SXM, dense)",
                       "tflops": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
                       "bandwidth_gbs": 3350.0},
    "A100-SXM4-80GB": {"source": "NVIDIA A100 datasheet (SXM 80GB, dense)",
                       "tflops": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
                       "bandwidth_gbs": 2039.0},
}


def datasheet_for(device_name: str) -> Optional[dict[str, Any]]:
    """The datasheet entry whose key is a word-bounded part of ``device_name`` (e.g. "NVIDIA H200"), or None."""
    for key, entry in DATASHEETS.items():
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", device_name or ""):
            return entry
    return None


@dataclass(frozen=True)
class DevicePeaks:
    """What one device reached in a calibration.

    Attributes:
        device: the device's name (torch's CUDA device name, or the CPU model).
        kind: ``"cuda"`` or ``"cpu"``.
        driver: the CUDA driver version (None on a CPU).
        torch_version: torch's version string.
        measured_at: when (ISO 8601, UTC).
        method: one paragraph saying how each figure was measured.
        gemm_tflops: {dtype: best TFLOP/s} of the dense GEMM.
        gemm_tflops_median: {dtype: median TFLOP/s over the rounds}.
        gemm_sizes: {dtype: the GEMM's M = N = K}.
        bandwidth_gbs: device memory bandwidth in GB/s (bytes read + written per second), best round.
        bandwidth_gbs_median: the median round.
        copy_bytes: the size of the copied tensor.
        threads: the CPU threads torch used (CPU only).
    """
    device: str
    kind: str
    driver: Optional[str]
    torch_version: str
    measured_at: str
    method: str
    gemm_tflops: dict[str, float]
    gemm_tflops_median: dict[str, float]
    gemm_sizes: dict[str, int]
    bandwidth_gbs: float
    bandwidth_gbs_median: float
    copy_bytes: int
    threads: Optional[int] = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The file name this calibration is stored under: device, driver and torch version, made safe."""
        raw = f"{self.device}__{self.driver or 'nodriver'}__{self.torch_version}"
        return re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._-")[:180] or "device"

    def peak_tflops(self, dtype: str) -> Optional[float]:
        return self.gemm_tflops.get(dtype)

    @property
    def ridge_flop_per_byte(self) -> dict[str, float]:
        """{dtype: arithmetic intensity (FLOP/byte) where the GEMM ceiling meets the bandwidth ceiling}."""
        return {d: t * 1e12 / (self.bandwidth_gbs * 1e9) for d, t in self.gemm_tflops.items()
                if self.bandwidth_gbs > 0}

    def datasheet(self) -> Optional[dict[str, Any]]:
        return datasheet_for(self.device) if self.kind == "cuda" else None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "DevicePeaks":
        """Read a stored calibration; raises ValueError naming the first field that is missing or of a wrong type."""
        if not isinstance(data, dict):
            raise ValueError(f"a calibration must be a JSON object, got {type(data).__name__}")
        want = {"device": str, "kind": str, "torch_version": str, "measured_at": str, "method": str,
                "gemm_tflops": dict, "gemm_tflops_median": dict, "gemm_sizes": dict, "bandwidth_gbs": (int, float),
                "bandwidth_gbs_median": (int, float), "copy_bytes": int}
        for name, typ in want.items():
            if name not in data:
                raise ValueError(f"calibration field {name!r} is missing")
            if not isinstance(data[name], typ) or isinstance(data[name], bool):
                raise ValueError(f"calibration field {name!r} has the wrong type ({type(data[name]).__name__})")
        for name in ("gemm_tflops", "gemm_tflops_median", "gemm_sizes"):
            for k, v in data[name].items():
                if not isinstance(k, str) or not isinstance(v, (int, float)) or isinstance(v, bool) \
                        or not math.isfinite(v) or v <= 0:
                    raise ValueError(f"calibration field {name!r} must map dtypes to positive numbers")
        if data["kind"] not in ("cuda", "cpu"):
            raise ValueError(f"calibration field 'kind' must be 'cuda' or 'cpu', got {data['kind']!r}")
        for name in ("driver",):
            if data.get(name) is not None and not isinstance(data[name], str):
                raise ValueError(f"calibration field {name!r} must be a string or null")
        threads = data.get("threads")
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool)):
            raise ValueError("calibration field 'threads' must be an integer or null")
        extra = data.get("extra") or {}
        if not isinstance(extra, dict):
            raise ValueError("calibration field 'extra' must be an object")
        return cls(device=data["device"], kind=data["kind"], driver=data.get("driver"),
                   torch_version=data["torch_version"], measured_at=data["measured_at"], method=data["method"],
                   gemm_tflops={k: float(v) for k, v in data["gemm_tflops"].items()},
                   gemm_tflops_median={k: float(v) for k, v in data["gemm_tflops_median"].items()},
                   gemm_sizes={k: int(v) for k, v in data["gemm_sizes"].items()}, bandwidth_gbs=float(data["bandwidth_gbs"]),
                   bandwidth_gbs_median=float(data["bandwidth_gbs_median"]), copy_bytes=data["copy_bytes"],
                   threads=threads, extra=extra)


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
                if on_gpu or gemm_size or n <= 256 or run(lambda: torch.mm(a, b, out=out), 1) <= 0.5:
                    break
                n //= 2
            per_call = _rounds(run, lambda: torch.mm(a, b, out=out), repeats, rounds, warmup, round_s)
            flops = 2.0 * n ** 3
            best[d] = round(flops / min(per_call) / 1e12, 4)
            median[d] = round(flops / statistics.median(per_call) / 1e12, 4)
            sizes[d] = n
            del a, b, out
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_was
    elems = nbytes // 4
    src = torch.rand(elems, device=device, generator=gen)
    dst = torch.empty_like(src)
    per_copy = _rounds(run, lambda: dst.copy_(src), repeats, rounds, warmup, round_s)
    moved = 2.0 * elems * 4  # read once, written once
    bw_best, bw_median = moved / min(per_copy) / 1e9, moved / statistics.median(per_copy) / 1e9
    del src, dst
    if on_gpu:
        torch.cuda.empty_cache()
        name = torch.cuda.get_device_name()
        driver = _cuda_driver()
        threads = None
    else:
        from .runner import cpu_model
        name, driver, threads = cpu_model(), None, torch.get_num_threads()
    shapes = ", ".join(f"{d} {n}" for d, n in sizes.items())
    timing = (f"CUDA events around {repeats} back-to-back calls per round after {warmup} warm-up calls"
              if on_gpu else f"time.perf_counter around rounds of about {round_s:g} s (at most {repeats} calls) "
                             f"after {warmup} warm-up calls; {threads} CPU threads")
    method = (f"torch.mm of two random square matrices per dtype (M = N = K: {shapes}; tf32 = fp32 with "
              f"torch.backends.cuda.matmul.allow_tf32 on, fp32 with it off), and a device-to-device copy_ of "
              f"{nbytes / 2**20:,.0f} MiB counting bytes read + written; {timing}; {rounds} rounds, the best kept "
              f"(the median stored beside it)")
    return DevicePeaks(device=name, kind=device, driver=driver, torch_version=torch.__version__,
                       measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), method=method,
                       gemm_tflops=best, gemm_tflops_median=median, gemm_sizes=sizes,
                       bandwidth_gbs=round(bw_best, 1), bandwidth_gbs_median=round(bw_median, 1),
                       copy_bytes=elems * 4, threads=threads)


def _cuda_driver() -> Optional[str]:
    """The NVIDIA driver version (from NVML through torch when it can, else the CUDA driver API's number)."""
    try:
        import ctypes
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() == 0:
            buf = ctypes.create_string_buffer(96)
            if lib.nvmlSystemGetDriverVersion(buf, 96) == 0:
                return buf.value.decode()
    except OSError:
        pass
    try:
        import ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return f"CUDA {v.value // 1000}.{v.value % 1000 // 10}"
    except OSError:
        pass
    return None


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
        from .errors import ConfigError
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

        from .workload import resolve_device
        device = resolve_device(torch, self.device)
        peaks = timer.run("calibrate_s", lambda: measure_peaks(
            device, gemm_size=self.gemm_size, copy_bytes=self.copy_bytes, repeats=self.repeats, rounds=self.rounds,
            warmup=self.warmup))
        return {"peaks": peaks.to_dict()}


class PeakBook:
    """The calibrations kept in a run store's ``.calibrations/`` folder, one JSON file per (device, driver, torch)."""

    MAX_BYTES = 1 << 20

    def __init__(self, root: os.PathLike | str) -> None:
        self.folder = Path(root) / ".calibrations"

    def save(self, peaks: DevicePeaks) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{peaks.key}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(peaks.to_dict(), indent=1))
        os.replace(tmp, path)
        return path

    def all(self) -> tuple[list[DevicePeaks], list[tuple[str, str]]]:
        """(calibrations newest first, [(file name, why it could not be read)]): each file read defensively
        (``store.read_json_object``), so one bad file is listed, never raised."""
        from .store import read_json_object
        good, bad = [], []
        if not self.folder.is_dir():
            return good, bad
        for p in sorted(self.folder.glob("*.json")):
            data, why = read_json_object(p, p.name, self.MAX_BYTES, 8)
            if why is None:
                try:
                    good.append(DevicePeaks.from_dict(data))
                    continue
                except ValueError as e:
                    why = str(e)
            bad.append((p.name, why[:200]))
        good.sort(key=lambda c: c.measured_at, reverse=True)
        return good, bad

    def find(self, device: str, driver: Optional[str] = None, torch_version: Optional[str] = None
             ) -> Optional[DevicePeaks]:
        """The newest calibration of ``device`` (and ``driver``/``torch_version`` where given), or None."""
        for c in self.all()[0]:
            if c.device == device and (driver is None or c.driver == driver) \
                    and (torch_version is None or c.torch_version == torch_version):
                return c
        return None
