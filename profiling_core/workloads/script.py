"""``script``: the user's own Python file, loaded and checked against the script contract.

The contract (``profiling_core.workloads``' docstring says it in full): the file (knob ``path``) defines a function
(knob ``function``, default ``make_step``) ``(device, dtype) -> (step_fn, inputs)``; anything else fails the run with
a ``WorkerError`` of kind ``script`` naming the file and what was wrong.  Whatever the user's code raises, from
importing the file, from the function or from the step, ``BaseException`` included (``KeyboardInterrupt``,
``SystemExit``, a class of its own), is reported so.  With ``train`` on (the train knobs of ``_train``), step_fn must
be a ``torch.nn.Module`` whose call returns the loss, a scalar tensor: each profiler step is then a training step of
it (forward and loss, backward, optimizer step, zero_grad).
"""
from __future__ import annotations

import os

from ..errors import WorkerError
from ._base import Knob, Workload
from ._train import TRAIN_KNOBS, TRAINING, train_step

SCRIPT_FUNCTION = "make_step"


def _script_normalize(v):
    return {**v, "path": os.path.abspath(os.path.expanduser(v["path"]))}


def _describe(value) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} item{'s' if len(value) != 1 else ''}"
    return f"a {type(value).__name__}"


def _said(exc: BaseException) -> str:
    """``": <message>"`` of what the user's code raised, or nothing when it said nothing (a bare KeyboardInterrupt)."""
    text = str(exc)
    return f": {text}" if text else ""


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
    except BaseException as exc:  # noqa: BLE001 - the user's code (KeyboardInterrupt, SystemExit, its own): say it
        raise WorkerError("script", f"{where} raised {type(exc).__name__} while loading{_said(exc)}") from exc
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
    except BaseException as exc:  # noqa: BLE001 - the user's code
        raise WorkerError("script", f"{where}: {fname}(device={device!r}, dtype={dtype}) raised "
                          f"{type(exc).__name__}{_said(exc)}") from exc
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
    if not v["train"]:
        return step, tuple(inputs)
    if not callable(getattr(step, "parameters", None)):
        raise WorkerError("script", f"{where}: with train on, {fname} must return (model, inputs) with model a "
                          f"torch.nn.Module whose call returns the loss; its step_fn is {_describe(step)}")
    params = [p for p in step.parameters() if p.requires_grad]
    if not params:
        raise WorkerError("script", f"{where}: with train on, the model {fname} returned has no parameter that "
                          "requires grad: nothing to train")
    return train_step(torch, step, params, v, device), tuple(inputs)


def _script_explain(exc, v, phase, kind):
    if kind != "error":  # an out-of-memory, a compile failure ... keeps its own kind
        return None
    return "script", (f"script {v['path']}: its step function raised {type(exc).__name__} during "
                      f"{phase.removesuffix('_s')}{_said(exc)}")


SCRIPT = Workload(
    "script", "your own Python file: a function make_step(device, dtype) returning (step_fn, inputs)",
    (Knob("path", "str", "step.py", "the Python file (a relative path is taken from the current folder)",
          pattern=r"(?s).*\S.*\.py", pattern_text="a path to a .py file"),
     Knob("function", "str", SCRIPT_FUNCTION, "the function to call: (device, dtype) -> (step_fn, inputs)",
          pattern=r"[A-Za-z_][A-Za-z0-9_]*", pattern_text="a Python function name"), *TRAIN_KNOBS),
    (), _script_build, normalize=_script_normalize, explain=_script_explain, training=TRAINING,
    name_parts=lambda v: [os.path.basename(v["path"]).removesuffix(".py")]
    + ([v["function"]] if v["function"] != SCRIPT_FUNCTION else []))
