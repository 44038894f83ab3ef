"""The workloads' vocabulary: :class:`Knob`, :class:`Knobs`, :class:`Workload` and the ``check_*`` helpers.

A workload module (``matmul_add``, ``linear`` ...) builds one :class:`Workload` from these; the registry of them all
is ``profiling_core.workloads.WORKLOADS``.  Knobs are validated like the config's fields (which use the ``check_*``
helpers too): a bad value raises ``ConfigError`` naming the knob (``knobs.<name>``), the value and what is allowed.

No torch here: builders receive it as an argument.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from ..errors import ConfigError

KNOB_KINDS = ("int", "float", "bool", "choice", "str")
INT_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)
"""An integer typed as text: ASCII digits only (``int()`` and ``str.isdigit`` also take ``²``, ``٣``, ``１``, ``1_0``)."""
FLOAT_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)
"""A number typed as text: ASCII decimal, with an optional exponent (``float()`` also takes ``٣``, ``1_0``, ``nan``)."""
BATCH_RANGE = (1, 4096)
"""The range of a batch knob (matmul_add's, attention's, the transformer block's)."""


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
        """A value typed as text (``--knob NAME=VALUE``, a sweep's values), checked: ``512``, ``0.5``,
        ``true``/``false``, a choice. Numbers are written in ASCII decimal (:data:`INT_TEXT`, :data:`FLOAT_TEXT`):
        ``2²``, ``٣``, ``1_000`` and, for an integer, ``1e3`` are refused with what is allowed."""
        field = field or self.name
        value: Any = text
        t = text.strip()
        if self.optional and t.lower() == "none":
            return None
        if self.kind in ("int", "float"):
            digits = self.allowed() + ", in the digits 0-9"
            if not (INT_TEXT if self.kind == "int" else FLOAT_TEXT).fullmatch(t):
                raise ConfigError(field, text, digits)
            try:
                value = int(t) if self.kind == "int" else float(t)
            except ValueError:  # over Python's 4,300 digits
                raise ConfigError(field, text, digits) from None
        elif self.kind == "bool":
            words = {"true": True, "1": True, "yes": True, "on": True,
                     "false": False, "0": False, "no": False, "off": False}
            if t.lower() not in words:
                raise ConfigError(field, text, self.allowed())
            value = words[t.lower()]
        try:
            return self.check(value, field)
        except ConfigError as exc:  # out of range: quote what was typed ('-01') when the number reads otherwise
            if t == str(value):
                raise
            raise ConfigError(exc.field, text, exc.allowed) from None

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
    """A run-name part: letters, digits, dots and dashes only, at most 40 characters, never '..' (a run of dots is
    one: a script ``my..model.py`` is ``my.model``), which a run id may not hold."""
    return re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9.-]+", "-", text)).strip("-.")[:40]


# --- workloads -------------------------------------------------------------------------------------------------------

class Workload:
    """A workload: its knobs and how to build, size and name one step of it."""

    def __init__(self, name: str, description: str, knobs: tuple[Knob, ...], size_knobs: tuple[str, ...],
                 build: Callable, *, flops: Optional[Callable] = None, bytes_: Optional[Callable] = None,
                 memory: Optional[Callable] = None, cross_check: Optional[Callable] = None,
                 normalize: Optional[Callable] = None, explain: Optional[Callable] = None,
                 name_parts: Optional[Callable] = None, name_suffix: Optional[Callable] = None,
                 check_dtype: Optional[Callable] = None, training=None, parameters: Callable | None = None,
                 kind: Callable | None = None, check_compile: Optional[Callable] = None) -> None:
        self.name = name
        self.description = description
        self.knobs = knobs
        self.size_knobs = size_knobs
        self._build, self._flops, self._bytes, self._memory = build, flops, bytes_, memory
        self._cross_check, self._normalize, self._explain = cross_check, normalize, explain
        self._name_parts, self._name_suffix, self._check_dtype = name_parts, name_suffix, check_dtype
        self.training = training
        """How the workload trains (``_train.Training``: its switch, the train knobs' names and dtype check, the
        memory a training step adds), or None for a workload that only runs forward."""
        self._parameters, self._kind, self._check_compile = parameters, kind, check_compile

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

    def size_axis_text(self) -> str:
        """Which knob a sweep varies, in words, from the size knobs' conditions: ``seq_len`` (attention),
        ``seq_len when mode is 'prefill', kv_len when mode is 'decode'`` (the transformer block), ``new_tokens when
        mode is 'decode', else seq_len`` (the causal LM); empty for a workload without one (a script)."""
        parts, rest = [], []
        for n in self.size_knobs:
            k = self.knob(n)
            (parts if k.when else rest).append(f"{n} when {k.when[0]} is {k.when[1]!r}" if k.when else n)
        if rest and parts:
            parts.append("else " + rest[0])
        return ", ".join(parts or rest[:1])

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
        """The knobs' part of a run name (see ``ExperimentConfig.name``): file-name safe. The train knobs' part
        (``Training.name_parts``) comes after the knobs' own tags, then the workload's own suffix."""
        suffix = list(self.training.name_parts(values)) if self.training is not None else []
        suffix += list(self._name_suffix(values)) if self._name_suffix is not None else []
        if self._name_parts is not None:
            return [_safe(p) for p in [*self._name_parts(values), *suffix] if _safe(p)]
        parts = []
        for k in self.knobs:
            v = values.get(k.name, k.default)
            if k.tag is None or v is None or not self._applies(k, values):
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
        return [p for p in [*parts, *(_safe(x) for x in suffix)] if p]

    def check_dtype(self, values: Mapping, dtype: str, prefix: Optional[str] = None) -> None:
        """ConfigError when these (checked) knob values cannot run in the run's ``dtype`` (``bf16``, ``fp16``,
        ``fp32``): a train step's autocast needs fp32.  The config calls it after :meth:`check_knobs`."""
        if self.training is not None:
            self.training.check_dtype(values, dtype, self.field_prefix if prefix is None else prefix)
        if self._check_dtype is not None:
            self._check_dtype(values, dtype, self.field_prefix if prefix is None else prefix)

    def check_compile(self, values: Mapping, compile: str, device: str) -> None:
        """ConfigError when these (checked) knob values cannot run under this torch.compile ``compile`` mode on
        ``device`` (``auto``, ``cuda``, ``cpu``): the config calls it after its own fields are checked."""
        if self._check_compile is not None:
            self._check_compile(values, compile, device, self.field_prefix)

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
        """Bytes of the tensors the workload holds at its peak (the guard before allocating); None where unknown.

        The parameters, inputs, caches and activations of the step, plus, for a training step, the gradients and
        the optimizer's state (:meth:`train_state_bytes`, by the one rule of ``_train.Training.state_bytes``)."""
        if not self._memory:
            return None
        return self._memory(values, element_bytes) + (self.train_state_bytes(values, element_bytes) or 0)

    def parameters(self, values: Mapping) -> tuple[int, int] | None:
        """(elements, tensors) of the parameters a step trains (``model.parameters()``); None where unknown."""
        return self._parameters(values) if self._parameters else None

    def train_state_bytes(self, values: Mapping, element_bytes: int) -> int | None:
        """The gradients' and the optimizer state's part of :meth:`memory_bytes`: 0 for a forward pass, None where
        the parameters are unknown (a script)."""
        if self.training is None or not self.training.on(values):
            return 0
        params = self.parameters(values)
        return None if params is None else self.training.state_bytes(values, params, element_bytes)

    def step_kind(self, values: Mapping) -> str:
        """What one profiler step of these knob values runs: ``train`` (a training step: forward, backward,
        optimizer), ``decode`` (token-by-token generation against a KV cache) or ``forward`` (one forward pass)."""
        if self.training is not None and self.training.on(values):
            return "train"
        return self._kind(values) if self._kind else "forward"

    def explain(self, exc: BaseException, values: Mapping, phase: str, kind: str) -> Optional[tuple[str, str]]:
        """A clearer (kind, message) for a failure of this workload's step, or None to keep the worker's own."""
        return self._explain(exc, values, phase, kind) if self._explain else None

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "size_knob": self.size_knob,
                "size_knobs": list(self.size_knobs), "knobs": [k.to_dict() for k in self.knobs]}
