"""Question 10, what torch.compile costs on the CPU (``q10.compile_cost``): the compiled region, CompiledFxGraph,
Dynamo/AOT wrapping and cache lookup per step, eager or under reduce-overhead's CUDA graphs."""
from __future__ import annotations

from ...units import format_duration_us as _us
from .base import Finding, _num


def _q10_cost(r, config=None) -> list[Finding]:
    cb = r.compile_breakdown
    if cb.empty:
        return []
    cpu_med = float(cb["cpu_dur_us"].median())
    if int(cb["compiled_regions"].sum()) == 0:
        text = (f"Eager steps took a median {_us(cpu_med)} of CPU time; profile the same size with torch.compile to "
                f"compare the compiled path's CPU cost.")
        return [Finding("q10.compile_cost", 10, "CPU cost per step (eager)", text,
                        {"cpu_step_median_us": _num(cpu_med), "compiled": False})]
    region, fx = float(cb["compiled_region_us"].median()), float(cb["fx_graph_us"].median())
    lookup, prologue = float(cb["cache_lookup_us"].median()), float(cb["prologue_us"].median())
    ev = {"cpu_step_median_us": _num(cpu_med), "compiled_region_us": _num(region), "fx_graph_us": _num(fx),
          "cache_lookup_us": _num(lookup), "prologue_us": _num(prologue), "compiled": True,
          "wrapper_us": _num(region - fx)}
    text = (f"Compiled steps took a median {_us(cpu_med)} of CPU time: Torch-Compiled Region {_us(region)}, of which "
            f"CompiledFxGraph {_us(fx)} and {_us(region - fx)} of Dynamo/AOT wrapping (prologue {_us(prologue)}); "
            f"cache lookup {_us(lookup)} before it.")
    if int(cb["graph_launches"].sum()):
        text += " In this mode the GPU work is replayed from a CUDA graph (cudaGraphLaunch)."
    return [Finding("q10.compile_cost", 10, "CPU cost of torch.compile", text, ev)]
