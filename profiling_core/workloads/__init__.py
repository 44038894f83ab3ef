"""The workloads an experiment can profile: a registry of names, knobs, builders and per-step FLOPs / bytes.

Each :class:`Workload` has a name, a one-line description, its knobs (:class:`Knob`: name, kind, default, range or
choices, help), the knob a sweep varies (``size_knob``), a builder that makes the step function and its inputs on
the device, and — where they exist — the FLOPs and bytes of one step.  The worker (``profiling_core.workload``)
runs every workload the same way: it builds ``(step, inputs)``, wraps ``torch.compile(step)`` when asked, and calls
it inside ``record_function(<workload name>)`` once per profiler step, so the trace shows a slice named after the
workload around each step (``matmul_add`` as in the study, ``linear``, ``mlp`` ...).

The workloads:

- ``matmul_add``: the study's ``torch.add(torch.matmul(x, w), b)``.  Its knobs are ``ExperimentConfig``'s own fields
  ``size``, ``batch`` and ``bias`` (unchanged names, defaults and run names).
- ``linear``: ``nn.Linear(in_features, out_features, bias=True)`` on a ``(batch, in_features)`` input
  (``aten::linear`` → ``aten::addmm``).
- ``mlp``: ``Linear(d, r·d) → GELU → Linear(r·d, d)`` on ``(batch, d)``; under torch.compile the bias and the
  activation fuse.
- ``attention``: ``scaled_dot_product_attention`` on (batch, heads, seq_len, head_dim) q, k, v, causal or not, with a
  backend: ``auto`` (torch picks) or one forced through ``torch.nn.attention.sdpa_kernel`` (``flash``,
  ``efficient``, ``math``, ``cudnn``).  Which one ran is read from the trace: :func:`sdpa_backend_from_names`.
- ``transformer_block``: one pre-norm decoder block in plain torch (LayerNorm → QKV projection → causal SDPA →
  output projection → residual → LayerNorm → MLP with GELU → residual).  ``prefill``: batch × seq_len tokens;
  ``decode``: one new token per sequence attending to a preallocated KV cache of kv_len positions (its K/V are
  written into the cache's last position, then the token attends to all kv_len).
- ``script``: the user's own Python file (below).

The script contract: a Python file (knob ``path``) defines a function (knob ``function``, default ``make_step``)::

    def make_step(device: str, dtype: torch.dtype):
        '''device is "cpu" or "cuda"; dtype the run's torch dtype.  Build the model and inputs on the device.'''
        model = MyModel().to(device=device, dtype=dtype).eval().requires_grad_(False)
        x = torch.randn(8, 512, device=device, dtype=dtype)
        return model, (x,)          # (step function, its inputs): each profiler step calls step(*inputs)

The worker imports the file (in the worker process, never in the app), calls the function once before warm-up and
profiling, then calls ``step(*inputs)`` once per step, inside ``record_function("script")``.  A missing file, a
missing function, a function that raises, or one that does not return ``(callable, tuple)`` fails the run with a
``WorkerError`` of kind ``script`` naming the file and what was wrong; so does a step function that raises.  The
file is the user's code and runs with the user's rights, as ``python file.py`` would.

Knobs are validated like the config's fields: a bad value raises ``ConfigError`` naming the knob
(``knobs.<name>``), the value and what is allowed.

This module does not import torch (builders receive it as an argument).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from ..errors import ConfigError, WorkerError

KNOB_KINDS = ("int", "float", "bool", "choice", "str")
SIZE_RANGE = (1, 65536)
BATCH_RANGE = (1, 4096)
BIASES = ("matrix", "vector")
SDPA_BACKENDS = ("auto", "flash", "efficient", "math", "cudnn")
BLOCK_MODES = ("prefill", "decode")
SCRIPT_FUNCTION = "make_step"

__all__ = ["Knob", "Knobs", "Workload", "WORKLOADS", "get_workload", "workload_names", "sdpa_backend_from_names",
           "KNOB_KINDS", "SDPA_BACKENDS", "BLOCK_MODES", "SCRIPT_FUNCTION"]


# --- validation helpers (the config's fields use them too) ---------------------------------------------------------

def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(name, value, f"an integer from {lo} to {hi}")
    return value


def check_choice(name: str, value: Any, choices) -> str:
    if value not in choices:
        raise ConfigError(name, value, "one of " + ", ".join(repr(c) for c in choices))
    return value


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(name, value, "true or false")
    return value


# --- knobs -----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Knob:
    """One knob of a workload."""

    name: str
    kind: str
    """``int``, ``float``, ``bool``, ``choice`` or ``str``."""
    default: Any
    help: str
    range: Optional[tuple] = None
    """(lo, hi), inclusive, for ``int`` and ``float``."""
    choices: Optional[tuple] = None
    """The allowed values of a ``choice``."""
    optional: bool = False
    """None is allowed too (matmul_add's ``batch``: no batch dimension)."""
    tag: Optional[str] = None
    """How the knob shows in run names: ``<tag><value>`` for numbers, the tag when a bool is true, the value for a
    choice; None: not in the name."""
    when: Optional[tuple] = None
    """(other knob, value): the knob applies only when that knob has that value (else it stays at its default)."""
    pattern: Optional[str] = None
    """For ``str``: a regular expression the whole value must match, described by ``pattern_text``."""
    pattern_text: str = "a non-empty string"

    def allowed(self) -> str:
        """What the knob accepts, as the error messages say it."""
        if self.kind == "int":
            return f"an integer from {self.range[0]} to {self.range[1]}"
        if self.kind == "float":
            return f"a number from {self.range[0]:g} to {self.range[1]:g}"
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        return self.pattern_text

    def check(self, value: Any, field: Optional[str] = None) -> Any:
        """The value in its canonical form (a float knob's 4 is 4.0); ConfigError(field, value, allowed) if bad."""
        field = field or self.name
        if value is None and self.optional:
            return None
        if self.kind == "int":
            return check_int(field, value, *self.range)
        if self.kind == "float":
            lo, hi = self.range
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                raise ConfigError(field, value, self.allowed())
            return float(value)
        if self.kind == "bool":
            return check_bool(field, value)
        if self.kind == "choice":
            return check_choice(field, value, self.choices)
        if not isinstance(value, str) or not value or len(value) > 4096 or (
                self.pattern is not None and not re.fullmatch(self.pattern, value)):
            raise ConfigError(field, value, self.allowed())
        return value

    def parse(self, text: str, field: Optional[str] = None) -> Any:
        """A value typed as text (``--knob NAME=VALUE``), checked: ``512``, ``0.5``, ``true``/``false``, a choice."""
        field = field or self.name
        value: Any = text
        t = text.strip()
        if self.optional and t.lower() == "none":
            return None
        if self.kind == "int":
            try:
                value = int(t)
            except ValueError:
                raise ConfigError(field, text, self.allowed()) from None
        elif self.kind == "float":
            try:
                value = float(t)
            except ValueError:
                raise ConfigError(field, text, self.allowed()) from None
        elif self.kind == "bool":
            words = {"true": True, "1": True, "yes": True, "on": True,
                     "false": False, "0": False, "no": False, "off": False}
            if t.lower() not in words:
                raise ConfigError(field, text, self.allowed())
            value = words[t.lower()]
        return self.check(value, field)

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "default": self.default,
                "range": list(self.range) if self.range else None,
                "choices": list(self.choices) if self.choices else None,
                "optional": self.optional, "applies_when": list(self.when) if self.when else None,
                "allowed": self.allowed(), "help": self.help}


class Knobs(Mapping):
    """A workload's knob values: a read-only, hashable mapping (``ExperimentConfig.knobs``), so the config stays
    frozen and hashable; ``dict(knobs)`` is its JSON form."""

    __slots__ = ("_items", "_dict")

    def __init__(self, items: Mapping | Iterable = ()) -> None:
        d = dict(items)
        object.__setattr__(self, "_dict", d)
        object.__setattr__(self, "_items", tuple(d.items()))

    def __setattr__(self, name, value):
        raise AttributeError("Knobs is read-only")

    def __getitem__(self, key):
        return self._dict[key]

    def __iter__(self):
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._dict)

    def __hash__(self) -> int:
        return hash(frozenset(self._items))

    def __repr__(self) -> str:
        return f"Knobs({self._dict!r})"

    def __reduce__(self):
        return (Knobs, (self._items,))

    def __deepcopy__(self, memo):
        return self


def _safe(text: str) -> str:
    """A run-name part: letters, digits, dots and dashes only, at most 40 characters."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-.")[:40]


# --- workloads -------------------------------------------------------------------------------------------------------

class Workload:
    """A workload: its knobs and how to build, size and name one step of it."""

    def __init__(self, name: str, description: str, knobs: tuple[Knob, ...], size_knobs: tuple[str, ...],
                 build: Callable, *, flops: Optional[Callable] = None, bytes_: Optional[Callable] = None,
                 memory: Optional[Callable] = None, cross_check: Optional[Callable] = None,
                 normalize: Optional[Callable] = None, explain: Optional[Callable] = None,
                 name_parts: Optional[Callable] = None) -> None:
        self.name = name
        self.description = description
        self.knobs = knobs
        self.size_knobs = size_knobs
        self._build, self._flops, self._bytes, self._memory = build, flops, bytes_, memory
        self._cross_check, self._normalize, self._explain = cross_check, normalize, explain
        self._name_parts = name_parts

    def __repr__(self) -> str:
        return f"Workload({self.name!r})"

    @property
    def size_knob(self) -> Optional[str]:
        """The natural sweep axis (matrix size, batch, sequence length ...; None for a script); see
        :meth:`size_knob_for`."""
        return self.size_knobs[0] if self.size_knobs else None

    def size_knob_for(self, values: Mapping) -> Optional[str]:
        """The sweep axis for these knob values: the first of ``size_knobs`` that applies (the transformer block
        sweeps seq_len in prefill and kv_len in decode); None for a workload without one (a script)."""
        full = {**self.defaults(), **values}
        return next((n for n in self.size_knobs if self._applies(self.knob(n), full)), self.size_knob)

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise ConfigError("knobs", name, self._names_text())

    def _names_text(self) -> str:
        return f"one of {self.name}'s knobs: " + ", ".join(k.name for k in self.knobs)

    def defaults(self) -> dict:
        return {k.name: k.default for k in self.knobs}

    @staticmethod
    def _applies(knob: Knob, values: Mapping) -> bool:
        return knob.when is None or values.get(knob.when[0]) == knob.when[1]

    def applicable(self, values: Mapping) -> dict:
        """``values`` without the knobs that do not apply to them (a form shows every knob; a decode block has no
        seq_len): what to pass to the config."""
        full = {**self.defaults(), **values}
        return {k: v for k, v in values.items() if self._applies(self.knob(k), full)}

    @property
    def field_prefix(self) -> str:
        """How errors name a knob: ``knobs.<name>`` (its place in the config), or the bare name for matmul_add,
        whose knobs are the config's own fields."""
        return "" if self.name == "matmul_add" else "knobs."

    def check_knobs(self, values: Mapping, prefix: Optional[str] = None) -> dict:
        """Every knob's value, checked and in canonical form, defaults filled in, in the knobs' order.  Raises
        ConfigError for an unknown knob (naming the allowed ones), a bad value (its range or choices), or a knob
        set where it does not apply."""
        prefix = self.field_prefix if prefix is None else prefix
        if not isinstance(values, Mapping):
            raise ConfigError("knobs", values, f"a mapping of knob names to values ({self._names_text()})")
        for name in values:
            self.knob(name)
        out = {k.name: k.check(values[k.name], prefix + k.name) if k.name in values else k.default
               for k in self.knobs}
        for k in self.knobs:
            if not self._applies(k, out) and out[k.name] != k.default:
                raise ConfigError(prefix + k.name, out[k.name],
                                  f"left at its default {k.default!r} when {k.when[0]} is {out[k.when[0]]!r} "
                                  f"(it applies only when {k.when[0]} is {k.when[1]!r})")
        if self._normalize is not None:
            out = self._normalize(out)
        if self._cross_check is not None:
            self._cross_check(out, prefix)
        return out

    def parse_knobs(self, texts: Iterable[str], flag: str = "--knob") -> dict:
        """``NAME=VALUE`` texts (the CLI's ``--knob``) as checked values; ConfigError for a malformed one, an unknown
        name, a name given twice or a bad value."""
        out: dict = {}
        for text in texts:
            name, eq, raw = text.partition("=")
            name = name.strip()
            if not eq or not name:
                raise ConfigError(flag, text, f"NAME=VALUE with NAME {self._names_text()}")
            knob = self.knob(name)
            if name in out:
                raise ConfigError(flag, text, f"given once per knob ({name} was given twice)")
            out[name] = knob.parse(raw, self.field_prefix + name)
        return out

    def name_parts(self, values: Mapping) -> list[str]:
        """The knobs' part of a run name (see ``ExperimentConfig.name``): file-name safe."""
        if self._name_parts is not None:
            return [_safe(p) for p in self._name_parts(values) if _safe(p)]
        parts = []
        for k in self.knobs:
            v = values.get(k.name, k.default)
            if k.tag is None or not self._applies(k, values):
                continue
            if k.kind == "bool":
                if v:
                    parts.append(k.tag)
            elif k.kind == "float":
                parts.append(f"{k.tag}{v:g}")
            elif k.kind == "str":
                parts.append(k.tag + _safe(str(v)))
            else:
                parts.append(f"{k.tag}{v}")
        return [p for p in parts if p]

    def build(self, torch, values: Mapping, device: str, dtype):
        """``(step, inputs)`` on ``device`` in ``dtype``: each profiler step calls ``step(*inputs)``."""
        return self._build(torch, values, device, dtype)

    def flops(self, values: Mapping) -> Optional[int]:
        """FLOPs of one step's matrix products (2·M·K·N each, attention's QKᵀ and PV included; elementwise work is
        not counted); None where unknown (a script)."""
        return self._flops(values) if self._flops else None

    def bytes(self, values: Mapping, element_bytes: int) -> Optional[int]:
        """The least one step moves: every input, weight and cache read once and the output written once; None
        where unknown."""
        return self._bytes(values, element_bytes) if self._bytes else None

    def memory_bytes(self, values: Mapping, element_bytes: int) -> Optional[int]:
        """Bytes of the tensors the workload holds at its peak (the guard before allocating); None where unknown."""
        return self._memory(values, element_bytes) if self._memory else None

    def explain(self, exc: BaseException, values: Mapping, phase: str, kind: str) -> Optional[tuple[str, str]]:
        """A clearer (kind, message) for a failure of this workload's step, or None to keep the worker's own."""
        return self._explain(exc, values, phase, kind) if self._explain else None

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "size_knob": self.size_knob,
                "size_knobs": list(self.size_knobs), "knobs": [k.to_dict() for k in self.knobs]}


# --- matmul_add ------------------------------------------------------------------------------------------------------

def matmul_add_bias_shape(v: Mapping) -> tuple:
    """The shape of b: that of x for a matrix bias, (n,) for a vector one."""
    n, batch = v["size"], v["batch"]
    if v["bias"] == "vector":
        return (n,)
    return (batch, n, n) if batch else (n, n)


def _matmul_add_build(torch, v, device, dtype):
    n = v["size"]
    shape = (v["batch"], n, n) if v["batch"] else (n, n)
    g = torch.Generator(device=device).manual_seed(0)
    # As the study: x, w and b are (n, n), or all (batch, n, n); with bias "vector", b is (n,).
    x = torch.randn(shape, device=device, dtype=dtype, generator=g)
    w = torch.randn(shape, device=device, dtype=dtype, generator=g)
    b = torch.randn(matmul_add_bias_shape(v), device=device, dtype=dtype, generator=g)

    def inner(x, w, b):
        return torch.add(torch.matmul(x, w), b)

    return inner, (x, w, b)


def _matmul_add_memory(v, e):
    n = v["size"]
    matrix = (v["batch"] or 1) * n * n
    return e * (4 * matrix + (matrix if v["bias"] == "matrix" else n))  # x, w, b, the product and the sum


def _matmul_add_bytes(v, e):
    n = v["size"]
    matrix = (v["batch"] or 1) * n * n
    return e * (3 * matrix + (matrix if v["bias"] == "matrix" else n))  # x, w, b read; the sum written


MATMUL_ADD = Workload(
    "matmul_add", "the study's torch.add(torch.matmul(x, w), b) on (n, n) or (batch, n, n) matrices",
    (Knob("size", "int", 64, "square matrix size n: x and w are (n, n), or (batch, n, n)", range=SIZE_RANGE),
     Knob("batch", "int", None, "a leading batch dimension (turns aten::mm into aten::bmm); none by default",
          range=BATCH_RANGE, optional=True),
     Knob("bias", "choice", "matrix", "b's shape: matrix (like x, the study's) or vector ((n,)); decides what "
          "torch.compile fuses", choices=BIASES)),
    ("size",), _matmul_add_build,
    flops=lambda v: 2 * (v["batch"] or 1) * v["size"] ** 3, bytes_=_matmul_add_bytes, memory=_matmul_add_memory)


# --- linear and mlp --------------------------------------------------------------------------------------------------

_FEATURES = (1, 65536)
_ROWS = (1, 1 << 20)


def _input(torch, shape, device, dtype):
    g = torch.Generator(device=device).manual_seed(0)
    return torch.randn(shape, device=device, dtype=dtype, generator=g)


def _linear_build(torch, v, device, dtype):
    torch.manual_seed(0)  # the layer's initial weights
    layer = torch.nn.Linear(v["in_features"], v["out_features"], bias=True, device=device, dtype=dtype)
    layer.requires_grad_(False)  # forward only, as matmul_add: no autograd graph
    x = _input(torch, (v["batch"], v["in_features"]), device, dtype)

    def inner(x):
        return layer(x)

    return inner, (x,)


def _linear_weights(v):
    return v["in_features"] * v["out_features"] + v["out_features"]


LINEAR = Workload(
    "linear", "nn.Linear(in_features, out_features, bias=True) on a (batch, in_features) input "
    "(aten::linear → aten::addmm)",
    (Knob("batch", "int", 64, "rows of the input", range=_ROWS, tag="b"),
     Knob("in_features", "int", 1024, "input features (the weight is out × in)", range=_FEATURES, tag="in"),
     Knob("out_features", "int", 1024, "output features", range=_FEATURES, tag="out")),
    ("batch",), _linear_build,
    flops=lambda v: 2 * v["batch"] * v["in_features"] * v["out_features"],
    bytes_=lambda v, e: e * (v["batch"] * v["in_features"] + _linear_weights(v) + v["batch"] * v["out_features"]),
    memory=lambda v, e: e * (v["batch"] * v["in_features"] + _linear_weights(v) + v["batch"] * v["out_features"]))


def mlp_hidden(v: Mapping) -> int:
    """The MLP's hidden width: round(hidden_ratio × d), at least 1."""
    return max(1, round(v["hidden_ratio"] * v["d"]))


def _mlp_build(torch, v, device, dtype):
    d, h = v["d"], mlp_hidden(v)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(d, h, device=device, dtype=dtype), torch.nn.GELU(),
                              torch.nn.Linear(h, d, device=device, dtype=dtype))
    mlp.requires_grad_(False)
    x = _input(torch, (v["batch"], d), device, dtype)

    def inner(x):
        return mlp(x)

    return inner, (x,)


def _mlp_weights(v):
    d, h = v["d"], mlp_hidden(v)
    return 2 * d * h + h + d


MLP = Workload(
    "mlp", "Linear(d, r·d) → GELU → Linear(r·d, d) on a (batch, d) input; torch.compile fuses bias and GELU",
    (Knob("batch", "int", 64, "rows of the input", range=_ROWS, tag="b"),
     Knob("d", "int", 1024, "model width: input and output features", range=_FEATURES, tag="d"),
     Knob("hidden_ratio", "float", 4.0, "hidden width ÷ d (the hidden layer is round(ratio·d) wide)",
          range=(0.0625, 64.0), tag="r")),
    ("batch",), _mlp_build,
    flops=lambda v: 4 * v["batch"] * v["d"] * mlp_hidden(v),
    bytes_=lambda v, e: e * (2 * v["batch"] * v["d"] + _mlp_weights(v)),
    memory=lambda v, e: e * (2 * v["batch"] * v["d"] + _mlp_weights(v) + 2 * v["batch"] * mlp_hidden(v)))


# --- attention -------------------------------------------------------------------------------------------------------

def _sdpa_backend(torch, name: str):
    B = torch.nn.attention.SDPBackend
    return {"flash": B.FLASH_ATTENTION, "efficient": B.EFFICIENT_ATTENTION, "math": B.MATH,
            "cudnn": B.CUDNN_ATTENTION}[name]


def _attention_build(torch, v, device, dtype):
    import torch.nn.attention  # noqa: F401  (sdpa_kernel, SDPBackend)
    shape = (v["batch"], v["heads"], v["seq_len"], v["head_dim"])
    g = torch.Generator(device=device).manual_seed(0)
    q, k, w = (torch.randn(shape, device=device, dtype=dtype, generator=g) for _ in range(3))
    sdpa, causal = torch.nn.functional.scaled_dot_product_attention, v["causal"]
    if v["backend"] == "auto":
        def inner(q, k, v_):
            return sdpa(q, k, v_, is_causal=causal)
    else:
        backend, sdpa_kernel = _sdpa_backend(torch, v["backend"]), torch.nn.attention.sdpa_kernel

        def inner(q, k, v_):
            with sdpa_kernel(backend):
                return sdpa(q, k, v_, is_causal=causal)
    return inner, (q, k, w)


def _pairs(queries: int, keys: int, causal: bool) -> int:
    """Query-key pairs attention computes: all, or the causal lower triangle (query i sees keys 0..i)."""
    return queries * (queries + 1) // 2 if causal else queries * keys


def _attention_flops(v):
    return 4 * v["batch"] * v["heads"] * v["head_dim"] * _pairs(v["seq_len"], v["seq_len"], v["causal"])


def _attention_memory(v, e):
    qkvo = 4 * v["batch"] * v["heads"] * v["seq_len"] * v["head_dim"] * e
    # the math path materialises the (seq_len × seq_len) scores per head (in fp32 for half types)
    scores = v["batch"] * v["heads"] * v["seq_len"] ** 2 * 4 if v["backend"] == "math" else 0
    return qkvo + 2 * scores


_NO_BACKEND = ("No viable backend", "No available kernel")


def _attention_explain(exc, v, phase, kind):
    text = str(exc)
    if v["backend"] == "auto" or not any(s in text for s in _NO_BACKEND):
        return None
    said = text.strip().splitlines()[0].split(". ")[0].rstrip(".") if text.strip() else type(exc).__name__
    return ("workload",
            f"attention backend {v['backend']!r} cannot run this attention (head_dim {v['head_dim']}, "
            f"{'causal' if v['causal'] else 'not causal'}) with this device and dtype: torch said {said!r}. "
            f"On a GPU, torch's warnings in the worker log say why. Use backend 'auto' (torch picks one that runs) "
            f"or 'math' (runs everywhere)")


ATTENTION = Workload(
    "attention", "scaled_dot_product_attention on (batch, heads, seq_len, head_dim) q, k, v, with a chosen backend",
    (Knob("batch", "int", 4, "sequences", range=BATCH_RANGE, tag="b"),
     Knob("heads", "int", 8, "attention heads", range=(1, 1024), tag="h"),
     Knob("seq_len", "int", 256, "tokens per sequence (queries and keys)", range=(1, 1 << 20), tag="s"),
     Knob("head_dim", "int", 64, "features per head (flash and efficient support up to 256)", range=(1, 1024),
          tag="d"),
     Knob("causal", "bool", True, "a causal mask (query i sees keys 0..i)", tag="causal"),
     Knob("backend", "choice", "auto", "auto: torch picks; otherwise forced with torch.nn.attention.sdpa_kernel "
          "(a backend that cannot run the shape fails the run, saying so)", choices=SDPA_BACKENDS, tag="")),
    ("seq_len",), _attention_build, flops=_attention_flops,
    bytes_=lambda v, e: 4 * v["batch"] * v["heads"] * v["seq_len"] * v["head_dim"] * e,
    memory=_attention_memory, explain=_attention_explain)


# op names of each SDPA backend (the CPU op the dispatcher runs under aten::scaled_dot_product_attention)
_SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_flash_attention_forward": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_efficient_attention_forward": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_attention_math_for_mps": "math",
}
# GPU kernel names (for a trace whose CPU ops are missing, e.g. a CUDA-graph replay), as substrings
_SDPA_KERNELS = (("pytorch_flash", "flash"), ("flash_fwd", "flash"), ("fmha_cutlass", "efficient"),
                 ("efficient_attention", "efficient"), ("cudnn", "cudnn"))


def sdpa_backend_from_names(names: Iterable[str]) -> Optional[str]:
    """Which SDPA backend ran, from a trace's op and kernel names: ``flash``, ``efficient``, ``cudnn`` or ``math``;
    None when nothing says.

    The backend's own aten op decides (``aten::_scaled_dot_product_flash_attention[_for_cpu]``,
    ``…_efficient_attention``, ``…_cudnn_attention``, ``aten::_scaled_dot_product_attention_math``); without one (a
    compiled graph decomposes the math path into bmm and softmax, a CUDA-graph replay has no CPU ops), a flash,
    cutlass-fmha or cuDNN attention kernel's name, else ``aten::bmm`` with a softmax (op or kernel) means math.
    Several backends in one trace (a transformer's layers all use one): the most frequent."""
    names = [str(n) for n in names]
    found: dict[str, int] = {}
    for n in names:
        b = _SDPA_OPS.get(n)
        if b:
            found[b] = found.get(b, 0) + 1
    if not found:
        for n in names:
            low = n.lower()
            if not n.startswith("aten::") and ("attention" in low or "fmha" in low or "flash" in low
                                              or "sdpa" in low):
                b = next((b for s, b in _SDPA_KERNELS if s in low), None)
                if b:
                    found[b] = found.get(b, 0) + 1
    if found:
        return max(found, key=lambda b: found[b])
    if "aten::bmm" in names and any("softmax" in n.lower() for n in names):
        return "math"
    return None


# --- transformer block -----------------------------------------------------------------------------------------------

def block_hidden(v: Mapping) -> int:
    return max(1, round(v["mlp_ratio"] * v["d_model"]))


def _block_build(torch, v, device, dtype):
    nn, F = torch.nn, torch.nn.functional
    d, H, B = v["d_model"], v["heads"], v["batch"]
    hd, h = d // H, block_hidden(v)
    decode = v["mode"] == "decode"
    S = 1 if decode else v["seq_len"]
    kw = dict(device=device, dtype=dtype)

    class Block(nn.Module):
        """Pre-norm decoder block: x + proj(attn(ln1(x))), then + fc2(gelu(fc1(ln2(x))))."""

        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d, **kw), nn.LayerNorm(d, **kw)
            self.qkv, self.proj = nn.Linear(d, 3 * d, **kw), nn.Linear(d, d, **kw)
            self.fc1, self.fc2 = nn.Linear(d, h, **kw), nn.Linear(h, d, **kw)

        def heads(self, x):
            # (B, S, d) → q, k, v of (B, H, S, hd)
            return self.qkv(self.ln1(x)).view(B, S, 3, H, hd).permute(2, 0, 3, 1, 4).unbind(0)

        def finish(self, x, a):
            x = x + self.proj(a.transpose(1, 2).reshape(B, S, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

        def prefill(self, x):
            q, k, w = self.heads(x)
            return self.finish(x, F.scaled_dot_product_attention(q, k, w, is_causal=True))

        def decode(self, x, k_cache, v_cache):
            q, k, w = self.heads(x)
            # the new token's K/V go into the cache's last position, then it attends to all kv_len positions
            k_cache[:, :, -1:].copy_(k)
            v_cache[:, :, -1:].copy_(w)
            return self.finish(x, F.scaled_dot_product_attention(q, k_cache, v_cache))

    torch.manual_seed(0)
    block = Block().requires_grad_(False)
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn((B, S, d), generator=g, **kw)
    if not decode:
        def inner(x):
            return block.prefill(x)
        return inner, (x,)
    cache = (B, H, v["kv_len"], hd)
    k_cache = torch.randn(cache, generator=g, **kw)
    v_cache = torch.randn(cache, generator=g, **kw)

    def inner(x, k_cache, v_cache):
        return block.decode(x, k_cache, v_cache)

    return inner, (x, k_cache, v_cache)


def _block_tokens(v):
    return v["batch"] * (1 if v["mode"] == "decode" else v["seq_len"])


def _block_weights(v):
    d, h = v["d_model"], block_hidden(v)
    return 4 * d * d + 4 * d + 2 * d * h + h + d + 4 * d  # qkv, proj (+ biases), fc1, fc2 (+ biases), 2 LayerNorms


def _block_flops(v):
    d, h, T = v["d_model"], block_hidden(v), _block_tokens(v)
    proj = 2 * T * (3 * d * d + d * d + 2 * d * h)
    if v["mode"] == "decode":
        pairs = v["batch"] * v["kv_len"]
    else:
        pairs = v["batch"] * _pairs(v["seq_len"], v["seq_len"], True)
    return proj + 4 * pairs * d  # QKᵀ and PV: 2·head_dim each per pair, summed over heads = 4·d


def _block_cache(v):
    return 2 * v["batch"] * v["kv_len"] * v["d_model"] if v["mode"] == "decode" else 0


def _block_bytes(v, e):
    return e * (_block_weights(v) + 2 * _block_tokens(v) * v["d_model"] + _block_cache(v))


def _block_memory(v, e):
    T, d, h = _block_tokens(v), v["d_model"], block_hidden(v)
    acts = T * (8 * d + h)  # x, ln, qkv (3d), attention out, residuals ... a generous count of what is alive
    return e * (_block_weights(v) + acts + _block_cache(v))


def _block_cross_check(v, prefix):
    if v["d_model"] % v["heads"]:
        raise ConfigError(prefix + "heads", v["heads"], f"a divisor of d_model {v['d_model']}")


TRANSFORMER_BLOCK = Workload(
    "transformer_block", "one pre-norm decoder block in torch (LayerNorm, QKV projection, causal SDPA, output "
    "projection, GELU MLP), prefill or decode with a KV cache",
    (Knob("mode", "choice", "prefill", "prefill: batch × seq_len tokens at once; decode: one new token per "
          "sequence attending to a KV cache of kv_len positions", choices=BLOCK_MODES, tag=""),
     Knob("batch", "int", 4, "sequences", range=BATCH_RANGE, tag="b"),
     Knob("seq_len", "int", 128, "tokens per sequence", range=(1, 1 << 20), tag="s",
          when=("mode", "prefill")),
     Knob("kv_len", "int", 1024, "positions in the KV cache, the new token's included",
          range=(1, 1 << 20), tag="kv", when=("mode", "decode")),
     Knob("d_model", "int", 512, "model width", range=(1, 65536), tag="d"),
     Knob("heads", "int", 8, "attention heads (must divide d_model)", range=(1, 1024), tag="h"),
     Knob("mlp_ratio", "float", 4.0, "MLP hidden width ÷ d_model", range=(0.0625, 64.0), tag="r")),
    ("seq_len", "kv_len"), _block_build, flops=_block_flops, bytes_=_block_bytes, memory=_block_memory,
    cross_check=_block_cross_check)


# --- the user's script -----------------------------------------------------------------------------------------------

def _script_normalize(v):
    return {**v, "path": os.path.abspath(os.path.expanduser(v["path"]))}


def _describe(value) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} item{'s' if len(value) != 1 else ''}"
    return f"a {type(value).__name__}"


def _script_build(torch, v, device, dtype):
    import importlib.util
    path, fname = v["path"], v["function"]
    where = f"script {path}"
    if not os.path.isfile(path):
        raise WorkerError("script", f"{where}: no such file" if not os.path.exists(path) else f"{where}: not a file")
    spec = importlib.util.spec_from_file_location("profiling_user_script", path)
    if spec is None or spec.loader is None:
        raise WorkerError("script", f"{where}: Python cannot load it as a module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code: say what it raised
        raise WorkerError("script", f"{where} raised {type(exc).__name__} while loading: {exc}") from exc
    contract = f"def {fname}(device, dtype) -> (step_fn, inputs)"
    make = getattr(module, fname, None)
    if make is None:
        defined = sorted(n for n, o in vars(module).items()
                         if callable(o) and not n.startswith("_") and getattr(o, "__module__", None) == module.__name__)
        has = f"it defines {', '.join(defined)}" if defined else "it defines no function"
        raise WorkerError("script", f"{where} has no function {fname!r} ({has}); the contract: {contract}")
    if not callable(make):
        raise WorkerError("script", f"{where}: {fname} is {_describe(make)}, not a function; the contract: {contract}")
    try:
        result = make(device, dtype)
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        raise WorkerError("script", f"{where}: {fname}(device={device!r}, dtype={dtype}) raised "
                          f"{type(exc).__name__}: {exc}") from exc
    if not (isinstance(result, tuple) and len(result) == 2):
        raise WorkerError("script", f"{where}: {fname} must return (step_fn, inputs), a function and a tuple of its "
                          f"arguments; it returned {_describe(result)}")
    step, inputs = result
    if not callable(step):
        raise WorkerError("script", f"{where}: {fname} returned (step_fn, inputs) whose step_fn is "
                          f"{_describe(step)}, not callable")
    if not isinstance(inputs, (tuple, list)):
        raise WorkerError("script", f"{where}: {fname} returned (step_fn, inputs) whose inputs is {_describe(inputs)},"
                          f" not a tuple of step_fn's arguments")
    return step, tuple(inputs)


def _script_explain(exc, v, phase, kind):
    if kind != "error":  # an out-of-memory, a compile failure ... keeps its own kind
        return None
    return "script", (f"script {v['path']}: its step function raised {type(exc).__name__} during "
                      f"{phase.removesuffix('_s')}: {exc}")


SCRIPT = Workload(
    "script", "your own Python file: a function make_step(device, dtype) returning (step_fn, inputs)",
    (Knob("path", "str", "step.py", "the Python file (a relative path is taken from the current folder)",
          pattern=r"(?s).*\S.*\.py", pattern_text="a path to a .py file"),
     Knob("function", "str", SCRIPT_FUNCTION, "the function to call: (device, dtype) -> (step_fn, inputs)",
          pattern=r"[A-Za-z_][A-Za-z0-9_]*", pattern_text="a Python function name")),
    (), _script_build, normalize=_script_normalize, explain=_script_explain,
    name_parts=lambda v: [os.path.basename(v["path"]).removesuffix(".py")]
    + ([v["function"]] if v["function"] != SCRIPT_FUNCTION else []))


WORKLOADS: dict[str, Workload] = {w.name: w for w in (MATMUL_ADD, LINEAR, MLP, ATTENTION, TRANSFORMER_BLOCK,
                                                      SCRIPT)}
"""Every workload by name, in the order they are listed."""


def workload_names() -> list[str]:
    return list(WORKLOADS)


def get_workload(name: str) -> Workload:
    """The workload called ``name``; ConfigError listing the workloads otherwise."""
    try:
        return WORKLOADS[name]
    except (KeyError, TypeError):
        raise ConfigError("workload", name, "one of " + ", ".join(repr(n) for n in WORKLOADS)) from None
