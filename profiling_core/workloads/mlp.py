"""``mlp``: ``Linear(d, r·d) → GELU → Linear(r·d, d)`` on ``(batch, d)``; under torch.compile the bias and the
activation fuse."""
from __future__ import annotations

from collections.abc import Mapping

from ._base import Knob, Workload
from ._train import TRAIN_KNOBS, TRAINING, forward_or_train
from .linear import _FEATURES, _ROWS, _input


def mlp_hidden(v: Mapping) -> int:
    """The MLP's hidden width: round(hidden_ratio × d), at least 1."""
    return max(1, round(v["hidden_ratio"] * v["d"]))


def _mlp_build(torch, v, device, dtype):
    d, h = v["d"], mlp_hidden(v)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(d, h, device=device, dtype=dtype), torch.nn.GELU(),
                              torch.nn.Linear(h, d, device=device, dtype=dtype))
    x = _input(torch, (v["batch"], d), device, dtype)

    def inner(x):
        return mlp(x)

    return forward_or_train(torch, v, device, mlp, inner, (x,), (v["batch"], d))


def _mlp_weights(v):
    d, h = v["d"], mlp_hidden(v)
    return 2 * d * h + h + d


MLP = Workload(
    "mlp", "Linear(d, r·d) → GELU → Linear(r·d, d) on a (batch, d) input; torch.compile fuses bias and GELU",
    (Knob("batch", "int", 64, "rows of the input", range=_ROWS, tag="b"),
     Knob("d", "int", 1024, "model width: input and output features", range=_FEATURES, tag="d"),
     Knob("hidden_ratio", "float", 4.0, "hidden width ÷ d (the hidden layer is round(ratio·d) wide)",
          range=(0.0625, 64.0), tag="r"), *TRAIN_KNOBS),
    ("batch",), _mlp_build, training=TRAINING, parameters=lambda v: (_mlp_weights(v), 4),
    flops=lambda v: 4 * v["batch"] * v["d"] * mlp_hidden(v),
    bytes_=lambda v, e: e * (2 * v["batch"] * v["d"] + _mlp_weights(v)),
    memory=lambda v, e: e * (2 * v["batch"] * v["d"] + _mlp_weights(v) + 2 * v["batch"] * mlp_hidden(v)))
