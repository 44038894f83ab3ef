"""``linear``: ``nn.Linear(in_features, out_features, bias=True)`` on a ``(batch, in_features)`` input
(``aten::linear`` → ``aten::addmm``)."""
from __future__ import annotations

from ._base import Knob, Workload
from ._train import TRAIN_KNOBS, TRAINING, forward_or_train

_FEATURES = (1, 65536)
_ROWS = (1, 1 << 20)


def _input(torch, shape, device, dtype):
    g = torch.Generator(device=device).manual_seed(0)
    return torch.randn(shape, device=device, dtype=dtype, generator=g)


def _linear_build(torch, v, device, dtype):
    torch.manual_seed(0)  # the layer's initial weights
    layer = torch.nn.Linear(v["in_features"], v["out_features"], bias=True, device=device, dtype=dtype)
    x = _input(torch, (v["batch"], v["in_features"]), device, dtype)

    def inner(x):
        return layer(x)

    # a forward pass freezes the layer (no autograd graph, as matmul_add); train: a training step of it
    return forward_or_train(torch, v, device, layer, inner, (x,), (v["batch"], v["out_features"]))


def _linear_weights(v):
    return v["in_features"] * v["out_features"] + v["out_features"]


LINEAR = Workload(
    "linear", "nn.Linear(in_features, out_features, bias=True) on a (batch, in_features) input "
    "(aten::linear → aten::addmm)",
    (Knob("batch", "int", 64, "rows of the input", range=_ROWS, tag="b"),
     Knob("in_features", "int", 1024, "input features (the weight is out × in)", range=_FEATURES, tag="in"),
     Knob("out_features", "int", 1024, "output features", range=_FEATURES, tag="out"), *TRAIN_KNOBS),
    ("batch",), _linear_build, training=TRAINING, parameters=lambda v: (_linear_weights(v), 2),
    flops=lambda v: 2 * v["batch"] * v["in_features"] * v["out_features"],
    bytes_=lambda v, e: e * (v["batch"] * v["in_features"] + _linear_weights(v) + v["batch"] * v["out_features"]),
    memory=lambda v, e: e * (v["batch"] * v["in_features"] + _linear_weights(v) + v["batch"] * v["out_features"]))
