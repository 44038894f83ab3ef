"""ExperimentConfig: one profiling experiment, validated at construction.

The workload is the study's ``torch.add(torch.matmul(x, w), b)`` inside ``record_function("matmul_add")`` by
default, or another of ``profiling_core.workloads`` (``workload`` plus its ``knobs``).  A config is frozen,
serialises to JSON for the worker process and back, and refuses bad values with a message naming the field, the
value and what is allowed::

    >>> ExperimentConfig(size=0)
    Traceback (most recent call last):
    ...
    profiling_core.errors.ConfigError: size must be an integer from 1 to 65536, got 0
    >>> ExperimentConfig(workload="attention", knobs={"seq_len": 0})
    Traceback (most recent call last):
    ...
    profiling_core.errors.ConfigError: knobs.seq_len must be an integer from 1 to 1048576, got 0

matmul_add's knobs are the config's own fields ``size``, ``batch`` and ``bias`` (as before the registry); the other
workloads' knobs are in ``knobs``, and those three fields stay at their defaults for them.

This module does not import torch.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

from .errors import ConfigError, DoesNotFitError
from .workloads import (BATCH_RANGE, BIASES, MATMUL_ADD, SIZE_RANGE, Knobs, check_bool as _check_bool,  # noqa: F401
                        check_choice as _check_choice, check_int as _check_int, get_workload, matmul_add_bias_shape)
# (SIZE_RANGE, BATCH_RANGE and BIASES are matmul_add's knob ranges, defined with its knobs; kept importable from here)

__all__ = ["ExperimentConfig", "DTYPES", "COMPILE_MODES", "DEVICES", "BIASES", "MATMUL_PRECISIONS", "as_config",
           "config_field", "field_names"]

TFLOPS_LIMITS = (1e-6, 1e5)
"""A peak of TFLOP/s is a number above the first and at most the second (a calibration's, or one a user gives):
far above what any device reaches (an H200: ~990 dense bf16 TFLOP/s), far from what breaks the arithmetic done
with it (a fraction of a peak of 5e-324 TFLOP/s is infinite)."""
GBS_LIMITS = (1e-6, 1e6)
"""A bandwidth in GB/s is a number above the first and at most the second (an H200: ~4,800 GB/s)."""

DTYPES = {"bf16": 2, "fp16": 2, "fp32": 4}
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DEVICES = ("auto", "cuda", "cpu")
MATMUL_PRECISIONS = ("highest", "high", "medium")
WARMUP_RANGE = (0, 10000)
WAIT_RANGE = (0, 1000)
ACTIVE_RANGE = (1, 1000)
REPEAT_RANGE = (1, 100)
SPREAD_WARN_PCT = 20.0
"""Repeated measurements that spread by more than this share of their median (max − min) are noise, not a result: a
sweep point's runs (``run.sweep_points``), a trace's steps after the first (question 3)."""
MAX_ITERATIONS = 5000
TIMEOUT_RANGE = (1.0, 7200.0)
ROW_LIMIT_RANGE = (-1, 1000)
THREADS_RANGE = (1, 1024)

_MATMUL_FIELDS = ("size", "batch", "bias")
"""matmul_add's knobs, which are the config's own fields."""


@dataclass(frozen=True)
class ExperimentConfig:
    """What to run and how to profile it.  Every field has the study's default.

    ``knobs`` is a read-only mapping (``workloads.Knobs``: hashable, so the config stays frozen and hashable); pass
    a dict.  It holds every knob of ``workload`` (the defaults filled in, values in canonical form) and is empty for
    matmul_add, whose knobs are ``size``, ``batch`` and ``bias``; ``workload_knobs`` gives either as a dict.  In
    JSON (``to_dict``) it is a plain object; a matmul_add config leaves ``workload`` and ``knobs`` out, so its JSON
    is what it was before workloads existed, and a config without them loads as matmul_add."""

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
    workload: str = "matmul_add"
    """What each step runs: one of ``profiling_core.workloads.workload_names()``."""
    knobs: Mapping[str, Any] = dataclasses.field(default_factory=Knobs)
    """The workload's knobs (see the class docstring); empty for matmul_add."""

    def __post_init__(self) -> None:
        wl = get_workload(self.workload)
        given = {} if self.knobs is None else self.knobs
        if wl is MATMUL_ADD:
            for name in _MATMUL_FIELDS:
                MATMUL_ADD.knob(name).check(getattr(self, name))
            if not isinstance(given, Mapping) or len(given):
                raise ConfigError("knobs", given if not isinstance(given, Knobs) else dict(given),
                                  "empty for workload 'matmul_add' (its knobs are the fields size, batch and bias)")
            object.__setattr__(self, "knobs", Knobs())
        else:
            for name in _MATMUL_FIELDS:
                default = MATMUL_ADD.knob(name).default
                if getattr(self, name) != default:
                    raise ConfigError(name, getattr(self, name),
                                      f"left at its default {default!r} for workload {wl.name!r} (size, batch and "
                                      f"bias are matmul_add's; {wl.name}'s knobs are "
                                      + ", ".join(k.name for k in wl.knobs) + ")")
            object.__setattr__(self, "knobs", Knobs(wl.check_knobs(given)))
        _check_choice("dtype", self.dtype, tuple(DTYPES))
        wl.check_dtype(self.knobs, self.dtype)
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
        wl.check_compile(self.knobs, self.compile, self.device)
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
    def is_matmul_add(self) -> bool:
        """Whether this is the study's workload (whose size, batch and bias fields are its knobs)."""
        return self.workload == "matmul_add"

    @property
    def workload_knobs(self) -> dict:
        """The workload's knob values as a dict: ``size``/``batch``/``bias`` for matmul_add, ``knobs`` otherwise."""
        if self.is_matmul_add:
            return {name: getattr(self, name) for name in _MATMUL_FIELDS}
        return dict(self.knobs)

    @property
    def size_knob(self) -> Optional[str]:
        """The knob a sweep of this workload varies (``size`` for matmul_add; None for a script)."""
        return get_workload(self.workload).size_knob_for(self.workload_knobs)

    @property
    def name(self) -> str:
        """The run's artifact name.  matmul_add, the study's:
        ``<size>_<dtype>_<cold|warm>_<eager|compile>[_<mode>][_b<batch>][_vbias][_mm-<precision>]`` (``_vbias``: a
        vector bias, the study's matrix bias has no suffix; ``_mm-high``/``_mm-medium``: a float32 matmul precision
        other than torch's default, named only for fp32 runs, the only ones it changes).  Another workload:
        ``<workload>_<its knobs>_<dtype>_<cold|warm>_<eager|compile>[_<mode>][_mm-<precision>]``, e.g.
        ``attention_b4_h8_s256_d64_causal_auto_bf16_cold_eager`` (the knobs as ``Knob.tag`` says: ``b4`` for batch
        4, the value of a choice, a bool's tag when it is true)."""
        tail = [self.dtype, "warm" if self.is_warm else "cold", "eager" if self.compile == "off" else "compile"]
        if self.compile not in ("off", "default"):
            tail.append(self.compile)
        if self.is_matmul_add:
            parts = [str(self.size), *tail]
            if self.batch is not None:
                parts.append(f"b{self.batch}")
            if self.bias == "vector":
                parts.append("vbias")
        else:
            parts = [self.workload, *get_workload(self.workload).name_parts(self.knobs), *tail]
        if self.dtype == "fp32" and self.matmul_precision != "highest":
            parts.append(f"mm-{self.matmul_precision}")
        return "_".join(parts)

    def bias_shape(self) -> Optional[tuple]:
        """matmul_add's b: the shape of x for a matrix bias, (n,) for a vector one; None for other workloads."""
        return matmul_add_bias_shape(self.workload_knobs) if self.is_matmul_add else None

    def gemm_flops(self) -> Optional[int]:
        """Floating-point operations of the study's one matmul: 2 * batch * n^3.  None for other workloads: their
        GEMMs are several and of several shapes, so their FLOPs come from the trace's recorded shapes."""
        return get_workload("matmul_add").flops(self.workload_knobs) if self.is_matmul_add else None

    def step_flops(self) -> Optional[int]:
        """FLOPs of one step's matrix products (``Workload.flops``); None where unknown (a script)."""
        return get_workload(self.workload).flops(self.workload_knobs)

    def step_bytes(self) -> Optional[int]:
        """The least one step moves (``Workload.bytes``); None where unknown (a script)."""
        return get_workload(self.workload).bytes(self.workload_knobs, self.element_bytes)

    def tensor_bytes(self) -> Optional[int]:
        """Bytes the workload holds at its peak (matmul_add: x, w, b, the matmul result and the sum); None where
        unknown (a script)."""
        return get_workload(self.workload).memory_bytes(self.workload_knobs, self.element_bytes)

    def check_fits(self, available_bytes: int, where: str) -> None:
        """Raise DoesNotFitError when the tensors need more than ``available_bytes`` (with 10 % slack); a workload
        whose needs are unknown (a script) is not checked."""
        need = self.tensor_bytes()
        if need is None or need <= 0.9 * available_bytes:
            return
        have = f"needs {need / 2**30:.2f} GiB of tensors but {where} has {available_bytes / 2**30:.2f} GiB available"
        if self.is_matmul_add:
            raise DoesNotFitError(f"size {self.size}, batch {self.batch or 1}, {self.dtype} {have}; "
                                  "choose a smaller size or batch")
        wl = get_workload(self.workload)
        applied = wl.applicable(self.knobs)
        if not applied.get("train", True):  # a forward pass: the train knobs (all at their defaults) say nothing
            applied = {k: v for k, v in applied.items() if k != "train"}
        knobs = ", ".join(f"{k} {v}" for k, v in applied.items())
        sizes = [k.name for k in wl.knobs if k.kind in ("int", "float") and k.name in applied]
        raise DoesNotFitError(f"{self.workload} ({knobs}), {self.dtype} {have}; choose a smaller "
                              + (", ".join(sizes[:-1]) + " or " + sizes[-1] if len(sizes) > 1 else sizes[0]))

    # --- JSON --------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Every field as JSON-ready values; ``knobs`` a plain dict.  matmul_add leaves out ``workload`` and
        ``knobs``: its dict (and JSON, and run names) are exactly those of configs made before workloads existed."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.is_matmul_add:
            del d["workload"], d["knobs"]
        else:
            d["knobs"] = dict(self.knobs)
        return d

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
        if "bias" not in data and data.get("workload", "matmul_add") == "matmul_add":
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

    @classmethod
    def for_workload(cls, workload: str = "matmul_add", knobs: Optional[Mapping[str, Any]] = None,
                     **fields_) -> "ExperimentConfig":
        """A config of ``workload`` with these knob values, the same way for every workload: matmul_add's knobs
        (``size``, ``batch``, ``bias``) go to its fields, the others' to ``knobs``; ``fields_`` are the other fields
        (``dtype``, ``compile``, ``warmup`` ...).  A knob given in both ``knobs`` and ``fields_`` takes the knob."""
        knobs = dict(knobs or {})
        if workload == "matmul_add":
            for name in knobs:
                MATMUL_ADD.knob(name)  # an unknown knob: ConfigError naming matmul_add's knobs
            return cls(**{**fields_, **knobs})
        return cls(workload=workload, knobs=knobs, **fields_)


def as_config(config) -> Optional[ExperimentConfig]:
    """A run's config as an ``ExperimentConfig``: itself, or its dict (as meta.json holds it) read by
    :meth:`ExperimentConfig.from_dict` (which knows what older runs ran with); None stays None. Raises ConfigError for
    a dict it cannot read and for anything else."""
    if config is None or isinstance(config, ExperimentConfig):
        return config
    if isinstance(config, Mapping):
        return ExperimentConfig.from_dict(dict(config))
    raise ConfigError("config", type(config).__name__,
                      "an ExperimentConfig, a dict of its fields (as meta.json holds it) or None")


def config_field(config, key: str):
    """A field of a run's config, given as an ``ExperimentConfig`` or as its dict (as meta.json holds it); None when
    the config or the field is unknown."""
    if config is None:
        return None
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


def field_names() -> list[str]:
    return [f.name for f in fields(ExperimentConfig)]
