"""ExperimentConfig: one profiling experiment of the study's workload, validated at construction.

The workload is ``torch.add(torch.matmul(x, w), b)`` inside ``record_function("matmul_add")``
(see ``profiling_core.workload``).  A config is frozen, serialises to JSON for the worker process
and back, and refuses bad values with a message naming the field, the value and what is allowed::

    >>> ExperimentConfig(size=0)
    Traceback (most recent call last):
    ...
    profiling_core.errors.ConfigError: size must be an integer from 1 to 65536, got 0

This module does not import torch.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from typing import Any, Optional

from .errors import ConfigError, DoesNotFitError

DTYPES = {"bf16": 2, "fp16": 2, "fp32": 4}
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DEVICES = ("auto", "cuda", "cpu")
BIASES = ("matrix", "vector")
MATMUL_PRECISIONS = ("highest", "high", "medium")
SIZE_RANGE = (1, 65536)
BATCH_RANGE = (1, 4096)
WARMUP_RANGE = (0, 10000)
WAIT_RANGE = (0, 1000)
ACTIVE_RANGE = (1, 1000)
REPEAT_RANGE = (1, 100)
MAX_ITERATIONS = 5000
TIMEOUT_RANGE = (1.0, 7200.0)
ROW_LIMIT_RANGE = (-1, 1000)
THREADS_RANGE = (1, 1024)


def _check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(name, value, f"an integer from {lo} to {hi}")
    return value


def _check_choice(name: str, value: Any, choices) -> str:
    if value not in choices:
        raise ConfigError(name, value, "one of " + ", ".join(repr(c) for c in choices))
    return value


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(name, value, "true or false")
    return value


@dataclass(frozen=True)
class ExperimentConfig:
    """What to run and how to profile it.  Every field has the study's default."""

    size: int = 64
    """Square matrix size n: x and w are (n, n); with a batch, (batch, n, n) as in the study (so torch.matmul
    dispatches aten::bmm; a 2-D w would be folded into aten::mm)."""
    dtype: str = "bf16"
    """Element type: bf16, fp16 or fp32."""
    batch: Optional[int] = None
    """None, or a leading batch dimension (turns aten::mm into aten::bmm)."""
    bias: str = "matrix"
    """The bias b's shape: ``matrix`` (the study's: the shape of x, "input, weight and bias are (64, 64)") or
    ``vector`` ((n,), broadcast over the rows). Under torch.compile this decides what Inductor makes of the add: with
    a matrix bias, ``addmm`` copies b into the output (a device-to-device memcpy) and runs the GEMM with beta = 1;
    with a vector bias the bias rides in the GEMM's epilogue and nothing is copied."""
    matmul_precision: str = "highest"
    """``torch.set_float32_matmul_precision`` for the run: ``highest`` (torch's default: fp32 GEMMs in full fp32),
    ``high`` (fp32 GEMMs may use TF32 tensor cores) or ``medium`` (also bf16-based). Only fp32 GEMMs change."""
    warmup: int = 0
    """Calls of the workload before profiling starts; 0 is a cold run."""
    compile: str = "off"
    """torch.compile mode, or 'off' for eager."""
    wait: int = 1
    """Profiler schedule: steps skipped before warm-up."""
    warmup_steps: int = 1
    """Profiler schedule: steps traced but discarded."""
    active: int = 3
    """Profiler schedule: steps recorded."""
    repeat: int = 1
    """Profiler schedule: how many wait/warm-up/active cycles."""
    device: str = "auto"
    """auto (cuda when available), cuda or cpu."""
    threads: Optional[int] = None
    """CPU threads torch uses in the run (``torch.set_num_threads``); None: torch's default (the machine's cores).
    On a CPU run the step time depends on it as much as on the size; recorded in meta.json."""
    record_shapes: bool = True
    with_flops: bool = False
    with_stack: bool = False
    profile_memory: bool = False
    timeout_s: float = 600.0
    """Wall-clock limit of the worker process; past it the worker is killed."""
    row_limit: int = -1
    """Rows of the profiler table (-1: all)."""

    def __post_init__(self) -> None:
        _check_int("size", self.size, *SIZE_RANGE)
        _check_choice("dtype", self.dtype, tuple(DTYPES))
        if self.batch is not None:
            _check_int("batch", self.batch, *BATCH_RANGE)
        _check_choice("bias", self.bias, BIASES)
        _check_choice("matmul_precision", self.matmul_precision, MATMUL_PRECISIONS)
        _check_int("warmup", self.warmup, *WARMUP_RANGE)
        _check_choice("compile", self.compile, COMPILE_MODES)
        _check_int("wait", self.wait, *WAIT_RANGE)
        _check_int("warmup_steps", self.warmup_steps, *WAIT_RANGE)
        _check_int("active", self.active, *ACTIVE_RANGE)
        _check_int("repeat", self.repeat, *REPEAT_RANGE)
        if self.iterations > MAX_ITERATIONS:
            raise ConfigError("schedule", self.iterations,
                              f"at most {MAX_ITERATIONS} iterations ((wait + warmup_steps + active) x repeat)")
        _check_choice("device", self.device, DEVICES)
        if self.threads is not None:
            _check_int("threads", self.threads, *THREADS_RANGE)
        for name in ("record_shapes", "with_flops", "with_stack", "profile_memory"):
            _check_bool(name, getattr(self, name))
        t = self.timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not TIMEOUT_RANGE[0] <= t <= TIMEOUT_RANGE[1]:
            raise ConfigError("timeout_s", t, f"a number of seconds from {TIMEOUT_RANGE[0]:g} to {TIMEOUT_RANGE[1]:g}")
        object.__setattr__(self, "timeout_s", float(t))
        _check_int("row_limit", self.row_limit, *ROW_LIMIT_RANGE)

    # --- derived -------------------------------------------------------------------------------
    @property
    def iterations(self) -> int:
        """Profiled loop iterations the schedule implies: (wait + warmup_steps + active) x repeat."""
        return (self.wait + self.warmup_steps + self.active) * self.repeat

    @property
    def recorded_steps(self) -> int:
        """ProfilerStep#N slices the trace will hold: active x repeat."""
        return self.active * self.repeat

    @property
    def is_warm(self) -> bool:
        return self.warmup > 0

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def name(self) -> str:
        """The study's artifact name:
        ``<size>_<dtype>_<cold|warm>_<eager|compile>[_<mode>][_b<batch>][_vbias][_mm-<precision>]`` (``_vbias``: a
        vector bias, the study's matrix bias has no suffix; ``_mm-high``/``_mm-medium``: a float32 matmul precision
        other than torch's default, named only for fp32 runs, the only ones it changes)."""
        parts = [str(self.size), self.dtype, "warm" if self.is_warm else "cold",
                 "eager" if self.compile == "off" else "compile"]
        if self.compile not in ("off", "default"):
            parts.append(self.compile)
        if self.batch is not None:
            parts.append(f"b{self.batch}")
        if self.bias == "vector":
            parts.append("vbias")
        if self.dtype == "fp32" and self.matmul_precision != "highest":
            parts.append(f"mm-{self.matmul_precision}")
        return "_".join(parts)

    def bias_shape(self) -> tuple:
        """The shape of b: that of x for a matrix bias, (n,) for a vector one."""
        if self.bias == "vector":
            return (self.size,)
        return (self.batch, self.size, self.size) if self.batch else (self.size, self.size)

    def gemm_flops(self) -> int:
        """Floating-point operations of one matmul: 2 * batch * n^3."""
        return 2 * (self.batch or 1) * self.size ** 3

    def tensor_bytes(self) -> int:
        """Bytes the workload holds at its peak: x, w, b, the matmul result and the sum."""
        n, e = self.size, self.element_bytes
        matrix = (self.batch or 1) * n * n
        return e * (4 * matrix + (matrix if self.bias == "matrix" else n))

    def check_fits(self, available_bytes: int, where: str) -> None:
        """Raise DoesNotFitError when the tensors need more than ``available_bytes`` (with 10 % slack)."""
        need = self.tensor_bytes()
        if need > 0.9 * available_bytes:
            raise DoesNotFitError(
                f"size {self.size}, batch {self.batch or 1}, {self.dtype} needs {need / 2**30:.2f} GiB of tensors "
                f"but {where} has {available_bytes / 2**30:.2f} GiB available; choose a smaller size or batch")

    # --- JSON --------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "ExperimentConfig":
        if not isinstance(data, dict):
            raise ConfigError("config", data, "a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError("config", unknown[0], "one of the fields " + ", ".join(sorted(known)))
        if "bias" not in data:
            # A config saved before the bias knob: the workload then made a vector bias without a batch and a
            # matrix one with a batch.
            data = {**data, "bias": "matrix" if data.get("batch") else "vector"}
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "ExperimentConfig":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError("config", text[:60], f"valid JSON ({exc.msg})") from None
        return cls.from_dict(data)

    def replace(self, **changes) -> "ExperimentConfig":
        return dataclasses.replace(self, **changes)


def field_names() -> list[str]:
    return [f.name for f in fields(ExperimentConfig)]
