"""The workloads an experiment can profile: a registry of names, knobs, builders and per-step FLOPs / bytes.

Each :class:`Workload` has a name, a one-line description, its knobs (:class:`Knob`: name, kind, default, range or
choices, help), the knob a sweep varies (``size_knob``), a builder that makes the step function and its inputs on
the device, and — where they exist — the FLOPs and bytes of one step.  The worker (``profiling_core.run.loop``)
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
``WorkerError`` of kind ``script`` naming the file and what was wrong; so does a step function that raises.  "Raises"
means any ``BaseException``: ``KeyboardInterrupt``, ``SystemExit`` and a class of the script's own included.  The
file is the user's code and runs with the user's rights, as ``python file.py`` would; whatever processes it starts
are killed when the run ends, success included.

Training steps (``_train``): ``linear``, ``mlp``, ``transformer_block`` (prefill) and ``script`` have the train knobs
(``train``, ``optimizer``, ``impl``, ``autocast``, ``log_loss``); ``causal_lm`` has the same four after ``train``,
applying when its ``mode`` is ``train``.  With ``train`` on, each profiler step is forward +
loss, ``backward()``, ``optimizer.step()`` and ``zero_grad(set_to_none=True)``, each inside its
``record_function`` range (``_train.TRAIN_RANGES``: ``train::forward``, ``train::backward``, ``train::optimizer``,
``train::zero_grad``).  The built-in workloads' loss is the mean squared error against a fixed random target; a
script with ``train`` on returns ``(model, inputs)`` where ``model`` is a ``torch.nn.Module`` whose call
``model(*inputs)`` returns the loss (a scalar tensor)::

    def make_step(device, dtype):
        model = MyModel().to(device=device, dtype=dtype)           # trainable: do not freeze it
        x, y = torch.randn(8, 512, device=device, dtype=dtype), torch.randn(8, 10, device=device, dtype=dtype)

        class WithLoss(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, x, y):
                return torch.nn.functional.mse_loss(self.model(x), y)
        return WithLoss(), (x, y)

Any other model (a Hugging Face one, say) gets the same step from ``_train.train_step``.

Knobs are validated like the config's fields: a bad value raises ``ConfigError`` naming the knob
(``knobs.<name>``), the value and what is allowed.

This package does not import torch (builders receive it as an argument).

The modules: ``_base`` (:class:`Knob`, :class:`Knobs`, :class:`Workload`, the ``check_*`` helpers), ``_train`` (the
train knobs, the phase ranges' names and ``train_step``), one per workload
(``matmul_add``, ``linear``, ``mlp``, ``attention`` with :func:`sdpa_backend_from_names`, ``transformer_block``,
``script``), and this one, the registry: :data:`WORKLOADS`, :func:`get_workload`, :func:`workload_names`.  A workload
module imports ``_base`` (or a sibling whose helpers it shares), never this one.
"""
from __future__ import annotations

# The F401 waivers: names beyond __all__, importable from here as before the split (profiling_core.config takes some):
# the check_* helpers, matmul_add's knob ranges and bias shape, each workload object, the mlp's and block's widths.
from ..errors import ConfigError
from ._base import BATCH_RANGE, INT_TEXT, KNOB_KINDS, Knob, Knobs, Workload, check_bool, check_choice, check_int  # noqa: F401
from .attention import ATTENTION, SDPA_BACKENDS, sdpa_backend_from_names
from .causal_lm import CAUSAL_LM, LM_CACHES, LM_FAMILIES, LM_MODES, LM_RANGES, TRANSFORMERS_MISSING  # noqa: F401
from .linear import LINEAR
from .matmul_add import BIASES, MATMUL_ADD, SIZE_RANGE, matmul_add_bias_shape  # noqa: F401
from .mlp import MLP, mlp_hidden  # noqa: F401
from .script import SCRIPT, SCRIPT_FUNCTION
from .transformer_block import BLOCK_MODES, TRANSFORMER_BLOCK, block_hidden  # noqa: F401
from ._train import AUTOCASTS, OPTIMIZER_IMPLS, OPTIMIZERS, TRAIN_RANGES, Training, train_step

__all__ = ["Knob", "Knobs", "Workload", "WORKLOADS", "get_workload", "workload_names", "sdpa_backend_from_names",
           "KNOB_KINDS", "INT_TEXT", "SDPA_BACKENDS", "BLOCK_MODES", "SCRIPT_FUNCTION", "TRAIN_RANGES", "OPTIMIZERS",
           "OPTIMIZER_IMPLS", "AUTOCASTS", "train_step", "Training", "LM_FAMILIES", "LM_MODES", "LM_CACHES", "LM_RANGES"]


WORKLOADS: dict[str, Workload] = {w.name: w for w in (MATMUL_ADD, LINEAR, MLP, ATTENTION, TRANSFORMER_BLOCK,
                                                      CAUSAL_LM, SCRIPT)}
"""Every workload by name, in the order they are listed."""


def workload_names() -> list[str]:
    return list(WORKLOADS)


def get_workload(name: str) -> Workload:
    """The workload called ``name``; ConfigError listing the workloads otherwise."""
    try:
        return WORKLOADS[name]
    except (KeyError, TypeError):
        raise ConfigError("workload", name, "one of " + ", ".join(repr(n) for n in WORKLOADS)) from None
