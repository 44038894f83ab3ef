"""``cudagraphs_skipped``: a run compiled with a mode that replays CUDA graphs (``CUDA_GRAPH_MODES``: 'reduce-overhead',
'max-autotune') whose steps replay no CUDA graph (Inductor skipped them); needs the run's config."""
from __future__ import annotations

from typing import Optional

from ....analyses import compile_in_measured_steps
from ....config import config_field as _cfg
from ....workloads.causal_lm import CUDA_GRAPH_MODES
from ..base import Diagnosis, _Ctx, _fmt_n

TITLE = "CUDA graphs asked for but not used"


def graph_mode_asked(config) -> Optional[str]:
    """The run's torch.compile mode where it is one that replays CUDA graphs (``CUDA_GRAPH_MODES``), else None (no
    config, eager, or a mode without graphs)."""
    mode = _cfg(config, "compile")
    return mode if mode in CUDA_GRAPH_MODES else None


def graphs_skipped(c: _Ctx) -> Optional[str]:
    """The mode asked for (:func:`graph_mode_asked`) where this run on a GPU compiled its steps and no step launches
    a CUDA graph: Inductor skipped the graphs; else None."""
    mode = graph_mode_asked(c.config)
    if mode is None or not c.report.has_gpu:
        return None
    cb = c.report.compile_breakdown
    if cb.empty or not (cb["compiled_regions"] > 0).any() or int(cb["graph_launches"].sum()) > 0:
        return None
    return mode


def _rule_cudagraphs_skipped(c: _Ctx) -> Optional[Diagnosis]:
    """A run compiled with a mode that replays CUDA graphs on a GPU whose steps launch no CUDA graph
    (:func:`graphs_skipped`): Inductor skipped the graphs. Needs the run's config (an imported trace does not say
    which mode it asked for)."""
    mode = graphs_skipped(c)
    if mode is None:
        return None
    cb = compile_in_measured_steps(c.report)
    launches = float(cb["kernel_launches"].median())
    text = (f"This run asked torch.compile for mode='{mode}' (CUDA graphs), but no step replays one: no "
            f"cudaGraphLaunch in any step, {_fmt_n(launches)} kernel launches per step instead. Inductor skipped the "
            "CUDA graphs; it does so when the compiled graph mutates one of its inputs in place (a KV cache written by "
            "the step), has dynamic shapes, or holds CPU tensors. The trace does not say which.")
    fix = ("Run with TORCH_LOGS='perf_hints' to see why ('skipping cudagraphs due to ...'). For a KV cache written "
           "in place: allocate it once and mark it static (torch._dynamo.mark_static_address(cache)) or keep the "
           "write outside the compiled function; then compare the CPU time per step with the graphs on.")
    return Diagnosis("cudagraphs_skipped", TITLE, text, fix, None, "",
                     {"kernel_launches_per_step": launches, "graph_launches": 0})
