"""A training step for any model: the ``train`` knobs and :func:`train_step`, which every workload's train mode uses.

Each profiler step of a workload with ``train`` on runs, in this order and each inside its own
``torch.profiler.record_function`` range (:data:`TRAIN_RANGES`, the one place the names are stated)::

    train::forward     the model's forward and the loss (under torch.autocast when ``autocast`` is bf16 or fp16)
    train::backward    loss.backward() (``scaler.scale(loss).backward()`` under fp16 autocast)
    train::optimizer   optimizer.step() (``scaler.step(optimizer); scaler.update()`` under fp16 autocast)
    train::zero_grad   optimizer.zero_grad(set_to_none=True)

and, with ``log_loss`` on, ``loss.item()`` after them (the loss logged every step: a host sync on a GPU).

The knobs (:data:`TRAIN_KNOBS`, added to ``linear``, ``mlp``, ``transformer_block`` and ``script``; ``causal_lm``
has the same four after ``train``, switched by its ``mode`` = ``train``: one :class:`Training` per switch, so every
workload checks, names and sizes them the same way):

- ``train`` (bool, default false): profile a training step instead of a forward pass;
- ``optimizer``: ``sgd`` (momentum 0.9), ``adam`` or ``adamw``, learning rate 1e-3;
- ``impl``: the optimizer's implementation: ``auto`` (torch's default: ``foreach`` on CUDA, the for-loop on a CPU),
  ``for-loop`` (``foreach=False``: a few ops per parameter), ``foreach`` (``foreach=True``: one multi-tensor op per
  update term) or ``fused`` (``fused=True``: one fused kernel for all parameters). torch 2.13 offers ``fused`` for
  SGD, Adam and AdamW on CUDA and on the CPU alike, in fp32, bf16 and fp16, so no combination of these knobs is
  refused in advance; a torch that cannot build the optimizer fails the run with a ``workload`` error quoting torch;
- ``autocast``: ``off``, ``bf16`` or ``fp16`` (``torch.autocast`` around the forward and loss; fp16 adds a
  ``torch.amp.GradScaler``). Autocast runs an fp32 model's ops in lower precision, so it needs dtype ``fp32``: any
  other dtype is refused by the config (:meth:`Training.check_dtype`);
- ``log_loss`` (bool): call ``loss.item()`` every step, as a loop that logs its loss does.

The other train knobs apply only when ``train`` is true (else they stay at their defaults). The memory a training
step holds beyond a forward pass (gradients, optimizer state) is :meth:`Training.state_bytes`, the one rule every
workload's ``memory_bytes`` adds. This module does not import torch: :func:`train_step` receives it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Optional

from ..errors import ConfigError, WorkerError
from ._base import Knob

__all__ = ["TRAIN_RANGES", "TRAIN_KNOBS", "OPTIMIZERS", "OPTIMIZER_IMPLS", "AUTOCASTS", "TrainStep", "train_step",
           "Training", "TRAINING", "TRAIN_SWITCH", "forward_or_train"]

TRAIN_RANGES: dict[str, str] = {"forward": "train::forward", "backward": "train::backward",
                                "optimizer": "train::optimizer", "zero_grad": "train::zero_grad"}
"""The ``record_function`` range of each phase of a training step (phase -> range name); the analyses of phases
(``profiling_core.analyses.phases``) read these names."""

OPTIMIZERS = ("sgd", "adam", "adamw")
OPTIMIZER_IMPLS = ("auto", "for-loop", "foreach", "fused")
AUTOCASTS = ("off", "bf16", "fp16")
LEARNING_RATE = 1e-3

TRAIN_SWITCH = ("train", True)
"""What turns training on in the nn workloads: their ``train`` knob, true."""

_TRAIN_SWITCH_KNOB = Knob("train", "bool", False, "profile a training step (forward, loss, backward, optimizer step, "
                          "zero_grad) instead of a forward pass", tag=None)


class Training:
    """How a workload trains: the knob value that turns training on (``switch``: the nn workloads' own ``train``
    knob, :data:`TRAIN_SWITCH`; causal_lm's ``("mode", "train")``) and, from it, the train knobs, the run name's part,
    the dtype check and the memory a training step holds beyond a forward pass, the same for every workload.

    A workload hands its :class:`Training` to ``Workload(training=...)``, which uses it for its run names, its dtype
    check and :meth:`~profiling_core.workloads.Workload.memory_bytes`."""

    def __init__(self, switch: tuple = TRAIN_SWITCH) -> None:
        self.switch = tuple(switch)
        how = (Knob("optimizer", "choice", "adamw", "the optimizer of the training step (learning rate 1e-3)",
                    choices=OPTIMIZERS, when=self.switch),
               Knob("impl", "choice", "auto", "the optimizer's implementation: auto (torch's default), for-loop "
                    "(foreach=False), foreach (foreach=True) or fused (fused=True)", choices=OPTIMIZER_IMPLS,
                    when=self.switch),
               Knob("autocast", "choice", "off", "torch.autocast around forward and loss: off, bf16, or fp16 with a "
                    "GradScaler (needs dtype fp32)", choices=AUTOCASTS, when=self.switch),
               Knob("log_loss", "bool", False, "call loss.item() every step, as a loop that logs its loss does",
                    when=self.switch))
        self._own_switch = self.switch == TRAIN_SWITCH
        self.knobs: tuple[Knob, ...] = ((_TRAIN_SWITCH_KNOB,) if self._own_switch else ()) + how
        """The train knobs, in the order a workload lists them (after its own): ``train`` itself where it is the
        switch, then ``optimizer``, ``impl``, ``autocast``, ``log_loss``, each applying only when the switch is on."""

    def __repr__(self) -> str:
        return f"Training({self.switch!r})"

    def on(self, values: Mapping) -> bool:
        """Whether these knob values make each step a training step."""
        return values.get(self.switch[0]) == self.switch[1]

    def step_knobs(self, values: Mapping) -> dict:
        """The train knobs' values as :func:`train_step` reads them (``train`` true when the switch is on)."""
        return {"train": self.on(values), **{k.name: values.get(k.name, k.default) for k in self.knobs
                                             if k.name != "train"}}

    def name_parts(self, values: Mapping) -> list[str]:
        """The train knobs' part of a run name: ``[train_]<optimizer>[_<impl>][_ac-<autocast>][_item]`` (``train``
        where the switch is the ``train`` knob, which shows nowhere else in the name; ``impl`` and ``autocast`` only
        when not their defaults); nothing for a forward pass."""
        if not self.on(values):
            return []
        parts = (["train"] if self._own_switch else []) + [values["optimizer"]]
        if values["impl"] != "auto":
            parts.append(values["impl"])
        if values["autocast"] != "off":
            parts.append("ac-" + values["autocast"])
        if values["log_loss"]:
            parts.append("item")
        return parts

    def check_dtype(self, values: Mapping, dtype: str, prefix: str = "knobs.") -> None:
        """ConfigError when ``autocast`` is on and the run's dtype is not fp32 (autocast lowers an fp32 model's ops;
        a model already in bf16 or fp16 gains nothing, and a GradScaler refuses fp16 gradients)."""
        ac = values.get("autocast", "off")
        if self.on(values) and ac != "off" and dtype != "fp32":
            raise ConfigError(prefix + "autocast", ac, f"'off' when dtype is {dtype!r} (autocast runs an fp32 "
                              "model's ops in lower precision: use dtype 'fp32' with it)")

    def state_bytes(self, values: Mapping, parameters: tuple[int, int], element_bytes: int) -> int:
        """Bytes a training step holds beyond its parameters and activations; 0 for a forward pass.

        The rule, stated once (``parameters`` = (elements, tensors) of the trained parameters; ``e`` the run's
        element size: the parameters are in the run's dtype, and so are their gradients and the optimizer's
        buffers):

        - gradients: one per parameter element, ``elements × e`` (each ``p.grad`` has its parameter's dtype);
        - optimizer state (``optimizer.state``, filled by the first ``step()``):

          * ``sgd``: one momentum buffer per element (its momentum is 0.9), ``elements × e``; SGD without momentum
            would hold none;
          * ``adam`` and ``adamw``: ``exp_avg`` and ``exp_avg_sq`` per element, ``2 × elements × e``, plus each
            parameter tensor's ``step``, a 0-d fp32 tensor: ``4 × tensors``.

        Not counted: the GradScaler's few scalars under fp16 autocast, autocast's low-precision copies of the
        weights during the forward (at most the weights' size), the allocator's rounding. The tests check the rule
        against the bytes of every ``p.grad`` and every tensor of ``optimizer.state`` after a real step: exact.
        """
        if not self.on(values):
            return 0
        n, tensors = parameters
        e = element_bytes
        state = n * e if values["optimizer"] == "sgd" else 2 * n * e + 4 * tensors
        return n * e + state


TRAINING = Training()
"""The nn workloads' training (``linear``, ``mlp``, ``transformer_block``, ``script``), switched by their ``train``
knob."""
TRAIN_KNOBS: tuple[Knob, ...] = TRAINING.knobs
"""The nn workloads' train knobs, in the order a workload lists them (after its own)."""


def _optimizer(torch, params: list, name: str, impl: str):
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    kw: dict[str, Any] = {"lr": LEARNING_RATE}
    if name == "sgd":
        kw["momentum"] = 0.9
    if impl == "for-loop":
        kw["foreach"] = False
    elif impl == "foreach":
        kw["foreach"] = True
    elif impl == "fused":
        kw["fused"] = True
    try:
        return cls(params, **kw)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise WorkerError("workload", f"optimizer {name!r} with impl {impl!r} cannot run here: torch "
                          f"{torch.__version__} said {str(exc)[:300]!r}. Use impl 'auto', 'foreach' or "
                          "'for-loop'") from exc


class TrainStep:
    """One training step, called once per profiler step as ``step(*inputs)`` (what ``Workload.build`` returns as its
    step function). Returns the loss (a detached tensor)."""

    def __init__(self, torch, forward: Callable, loss_fn: Optional[Callable], params: list, knobs: Mapping,
                 device: str) -> None:
        self.torch, self.forward, self.loss_fn, self.device = torch, forward, loss_fn, device
        self.knobs = dict(knobs)
        self.optimizer = _optimizer(torch, params, knobs["optimizer"], knobs["impl"])
        ac = knobs["autocast"]
        self.autocast = None if ac == "off" else {"bf16": torch.bfloat16, "fp16": torch.float16}[ac]
        self.scaler = torch.amp.GradScaler(device) if ac == "fp16" else None

    def compile_with(self, compile: Callable) -> "TrainStep":
        """This step with its forward compiled (``compile(forward)``, ``torch.compile`` with the run's mode, as
        ``run.loop.compile_step`` hands it; the backward then runs AOTAutograd's compiled graph); the optimizer,
        zero_grad and the ranges stay eager, so the phases stay readable."""
        self.forward = compile(self.forward)
        return self

    def _loss(self, inputs):
        out = self.forward(*inputs)
        loss = out if self.loss_fn is None else self.loss_fn(out)
        t = self.torch
        if not (isinstance(loss, t.Tensor) and loss.numel() == 1 and loss.dtype.is_floating_point):
            got = (f"a tensor of shape {tuple(loss.shape)} and dtype {loss.dtype}" if isinstance(loss, t.Tensor)
                   else f"a {type(loss).__name__}")
            raise TypeError(f"a training step needs a scalar floating-point loss; the forward returned {got}")
        return loss

    def __call__(self, *inputs):
        from torch.profiler import record_function
        t, opt, scaler = self.torch, self.optimizer, self.scaler
        with record_function(TRAIN_RANGES["forward"]):
            if self.autocast is not None:
                with t.autocast(self.device, dtype=self.autocast):
                    loss = self._loss(inputs)
            else:
                loss = self._loss(inputs)
        with record_function(TRAIN_RANGES["backward"]):
            (scaler.scale(loss) if scaler is not None else loss).backward()
        with record_function(TRAIN_RANGES["optimizer"]):
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
        with record_function(TRAIN_RANGES["zero_grad"]):
            opt.zero_grad(set_to_none=True)
        if self.knobs["log_loss"]:
            loss.item()
        return loss.detach()


def train_step(torch, forward: Callable, params, knobs: Mapping, device: str,
               loss_fn: Optional[Callable] = None) -> TrainStep:
    """A :class:`TrainStep`: what a workload's builder returns as its step function when ``knobs["train"]`` is on.

    Args:
        torch: the torch module (this package does not import it).
        forward: ``forward(*inputs)``, the model's forward on one batch (each profiler step calls the step with the
            same ``inputs``, as the forward workloads do).
        params: the parameters to train (``model.parameters()``); they must require grad.
        knobs: the workload's checked knob values, holding the train knobs (:data:`TRAIN_KNOBS`: ``optimizer``,
            ``impl``, ``autocast``, ``log_loss``).
        device: ``"cpu"`` or ``"cuda"`` (autocast's and the GradScaler's device type).
        loss_fn: ``loss_fn(output) -> scalar loss``; None when ``forward`` returns the loss itself (a Hugging Face
            model called with ``labels``, a script's step function).

    Raises ``WorkerError`` of kind ``workload`` when torch cannot build the optimizer as asked; the step raises
    TypeError when the loss is not a scalar floating-point tensor.
    """
    return TrainStep(torch, forward, loss_fn, [p for p in params], knobs, device)


def forward_or_train(torch, v: Mapping, device: str, module, forward: Callable, inputs: tuple, out_shape: tuple):
    """What a built-in workload's builder returns: ``(forward, inputs)`` with ``module`` frozen (no autograd graph)
    for a forward pass; for ``train``, ``(train_step(...), inputs)`` whose loss is the mean squared error of the
    output (in fp32) against a fixed random target of ``out_shape`` (seeded, made once)."""
    if not v.get("train"):
        module.requires_grad_(False)
        return forward, inputs
    g = torch.Generator(device=device).manual_seed(1)
    target = torch.randn(out_shape, device=device, dtype=torch.float32, generator=g)
    mse = torch.nn.functional.mse_loss
    return train_step(torch, forward, module.parameters(), v, device, loss_fn=lambda y: mse(y.float(), target)), inputs
