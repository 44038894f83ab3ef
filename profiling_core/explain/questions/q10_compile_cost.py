"""Question 10, what torch.compile costs on the CPU (``q10.compile_cost``): the compiled region, CompiledFxGraph,
Dynamo/AOT wrapping and cache lookup per step, eager or under reduce-overhead's CUDA graphs.

An eager trace gets its steps' CPU time and the suggestion to profile the same work with torch.compile, but only
where the step's own thread ran a slice inside a step (``report.dispatch_chains``' CPU rows below the step slice):
a step whose thread ran none spent its window on other threads' slices (a collective's wait, a data loader), which
compiling the step's code does not touch, so no compile cost is suggested there."""
from __future__ import annotations

from ...config import config_field as _cfg
from ...units import format_duration_us as _us
from .base import (NO_STEPS_TEXT, STEPS_HOWTO, Finding, _app_run, _compile_rows, _compiler_every_step,
                   _eager_after_compiling, _left_out_text, _listed, _n, _num)


def _q10_cost(r, config=None) -> list[Finding]:
    from ...analyses import compile_in_measured_steps, compile_steps
    if r.steps.empty:
        return [_q10_without_steps(r)]
    if r.compile_breakdown.empty:
        return []
    cb = compile_in_measured_steps(r)  # per step: the steady state's steps
    cpu_med = float(cb["cpu_dur_us"].median())
    left = compile_steps(r.steps)
    gave_up = _eager_after_compiling(r, cb)
    if gave_up:  # no step shows what the compiled code costs a step
        return [Finding("q10.compile_cost", 10, "CPU cost per step (eager after compiling)",
                        f"No step shows the compiled code's cost per step: {gave_up} The eager steps took a median "
                        f"{_us(cpu_med)} of CPU time.", {"cpu_step_median_us": _num(cpu_med), "compiled": False,
                                                          "compile_steps": left})]
    if int(cb["compiled_regions"].sum()) == 0:
        return [_eager(r, config, set(cb["step"]), cpu_med)]
    # the split is one step's, so that its parts add up: the step whose compiled region took the median time (of an
    # even count, the lower of the two middle ones); a median of each part would take them from different steps (an
    # H200 training run: median region 1.49 ms less median graph 825 µs said 668 µs of wrapping, where the step of
    # that region spent 1.18 ms in its graph and 310 µs around it)
    compiled = cb[cb["compiled_regions"] > 0].sort_values(["compiled_region_us", "step"], kind="stable")
    cpu_med = float(compiled["cpu_dur_us"].median())  # ("compiled steps": those that ran compiled code)
    at = compiled.iloc[(len(compiled) - 1) // 2]
    # the forward's graph runs inside the compiled region; a training step's backward graph (inside
    # CompiledFunctionBackward, on the autograd engine's thread) runs outside it, so it is not part of the split,
    # unless the compiled code itself calls backward(): the region then waits while the engine runs the backward on
    # its thread (backward_wait_us), which is not wrapping either
    region = float(at["compiled_region_us"])
    fx = float(at["fx_graph_us"] - at["backward_fx_graph_us"])
    wait = float(at["backward_wait_us"])
    backward = float(at["backward_fx_graph_us"]) if wait > 0 else float(cb["backward_fx_graph_us"].median())
    lookup, prologue = float(at["cache_lookup_us"]), float(at["prologue_us"])
    ev = {"cpu_step_median_us": _num(cpu_med), "split_step": int(at["step"]), "compiled_region_us": _num(region),
          "fx_graph_us": _num(fx), "cache_lookup_us": _num(lookup), "prologue_us": _num(prologue), "compiled": True,
          "wrapper_us": _num(region - fx - wait)}
    if wait > 0:
        ev["backward_wait_us"] = _num(wait)
    which = f"in ProfilerStep#{int(at['step'])}" + (
        "" if len(compiled) == 1 else f" ({'the' if len(compiled) % 2 else 'a'} middle step by its region's time)")
    if left:
        ev["compile_steps"] = left
    every = _compiler_every_step(cb[cb["step"].isin(compiled["step"])].merge(
        r.steps[["step", "compile_us"]], on="step")) if len(r.steps) else ""
    head = (f"Compiled steps took a median {_us(cpu_med)} of CPU time{_left_out_text(r)}"
            + f"; {which}, Torch-Compiled Region {_us(region)}")
    if int(cb["fx_graph_calls"].sum()) == 0:  # the trace names no graph call: nothing to split off
        del ev["fx_graph_us"], ev["wrapper_us"]
        text = (f"{head}; the trace records no CompiledFxGraph call inside it, so the compiled graph's own time cannot "
                f"be told apart from Dynamo/AOT wrapping (prologue {_us(prologue)}); cache lookup {_us(lookup)} "
                "before it.")
    elif fx + wait > region:  # graph slices outside the regions: no split to make
        del ev["wrapper_us"]
        text = (f"{head}, but CompiledFxGraph {_us(fx)}: its graph calls are not all inside its compiled regions, so "
                f"Dynamo/AOT wrapping cannot be told apart (prologue {_us(prologue)}); cache lookup {_us(lookup)} "
                "before it.")
    else:
        text = (f"{head}, of which CompiledFxGraph {_us(fx)}"
                + (f", {_us(wait)} waiting for the backward (below)" if wait > 0 else "")
                + f" and {_us(region - fx - wait)} of Dynamo/AOT wrapping"
                + (" and the region's own call into the backward" if wait > 0 else "")
                + f" (prologue {_us(prologue)}); cache lookup {_us(lookup)} before it.")
    if wait > 0:  # the compiled code calls backward(): the backward runs inside the region's window
        ev["backward_fx_graph_us"] = _num(backward)
        text += (f" The compiled function runs the backward pass itself: for {_us(wait)} of its region the autograd "
                 "engine ran it on its own thread while the region waited"
                 + (f", the backward's compiled graph (CompiledFunctionBackward) {_us(backward)} of it"
                    if int(at["backward_fx_graph_calls"]) else "") + ".")
    elif int(cb["backward_fx_graph_calls"].sum()):
        ev["backward_fx_graph_us"] = _num(backward)
        text += (f" The backward's compiled graph (CompiledFunctionBackward, run by autograd) takes "
                 f"{_us(backward)} more per step.")
    if int(cb["graph_launches"].sum()):
        text += _graph_sentence(cb)
    return [Finding("q10.compile_cost", 10, "CPU cost of torch.compile", text + every, ev)]


def _graph_sentence(cb) -> str:
    """What the steps' CUDA-graph replays say of the compiled code's GPU work, over the steps ``cb`` holds (those
    question 10 reads: no step the compiler ran in, whose one-time launches are no mode's): all of it replayed from
    graphs (``graph_ops``; the copies of the graphs' inputs into their static buffers, ``graph_input_copies``,
    launched before each replay), part of it (the compiled code also launched kernels one by one,
    ``compiled_kernels``: a recompile, graphs skipped for a new shape), or none (the graphs are replayed by code
    outside it, ``torch.cuda.CUDAGraph.replay`` of the user's own)."""
    from ...analyses import STAGING_OP
    replayed, launched = float(cb["graph_ops"].median()), float(cb["compiled_kernels"].median())
    if replayed and not launched:
        return (f" In this mode the compiled code's GPU work is replayed from a CUDA graph (cudaGraphLaunch: a median "
                f"{_n(replayed, 'GPU op')} per step)"
                + (f", after its inputs are copied in ({STAGING_OP})" if float(cb["graph_input_copies"].median())
                   else "") + ".")
    if replayed:
        return (f" Part of the compiled code's GPU work is replayed from CUDA graphs (cudaGraphLaunch: a median "
                f"{_n(replayed, 'GPU op')} per step) and part launched kernel by kernel (a median "
                f"{_n(launched, 'kernel')} per step; question 9 lists the kernels).")
    return (" The CUDA graphs these steps replay (cudaGraphLaunch) are launched from outside the compiled code, which "
            "launches its own kernels one by one.")


def _q10_without_steps(r) -> Finding:
    """Question 10 on a trace without steps: no CPU cost per step to read; where torch.compile ran, what its rows took
    over the whole trace (the profiler table's totals)."""
    rows = _compile_rows(r)
    ev = {"steps": 0, "compiled": bool(rows["regions"] or rows["graph_calls"])}
    text = f"{NO_STEPS_TEXT}, so there is no CPU cost per step to read"
    if ev["compiled"]:
        ev.update(compiled_region_us=_num(rows["regions_us"]), fx_graph_us=_num(rows["graph_calls_us"]),
                  cache_lookup_us=_num(rows["lookups_us"]))
        text += (f". Over the whole trace (the profiler table's total CPU time): "
                 f"{_n(rows['regions'], 'Torch-Compiled Region slice')} {_us(rows['regions_us'])}, "
                 f"{_n(rows['graph_calls'], 'call')} of CompiledFxGraph {_us(rows['graph_calls_us'])}, "
                 f"{_n(rows['lookups'], 'cache lookup')} {_us(rows['lookups_us'])}")
    return Finding("q10.compile_cost", 10, "No steps", text + f". To read it per step, {STEPS_HOWTO}.", ev)


def _eager(r, config, steps: set, cpu_med: float) -> Finding:
    """Q10 on an eager trace (see the module docstring): the suggestion to compile where the steps' own thread ran a
    slice in ``steps``, else where their windows' time went."""
    ev = {"cpu_step_median_us": _num(cpu_med), "compiled": False}
    ch = r.dispatch_chains
    if ch.empty or ((ch["lane"] == "cpu") & (ch["depth"] > 0) & ch["step"].isin(steps)).any():
        return Finding("q10.compile_cost", 10, "CPU cost per step (eager)",
                       f"Eager steps took a median {_us(cpu_med)} of CPU time{_left_out_text(r)}; profile "
                       f"{_same_work(r, config)} with "
                       "torch.compile to compare the compiled path's CPU cost.", ev)
    own = r.cpu_own_times
    mine = own[own["step"].isin(steps)].sort_values("own_us", ascending=False, kind="stable") if len(own) else own
    names = list(dict.fromkeys(mine["name"].astype(str))) if len(mine) else []
    ev.update({"slices_on_step_thread": 0, "other_slices": names[:10]})
    where = (f": the slices in their windows are other threads' ({_listed(names)})" if names else
             ": no other slice starts in their windows either")
    return Finding("q10.compile_cost", 10, "Step time (nothing on the step's thread)",
                   f"The steps lasted a median {_us(cpu_med)}, but their own thread ran nothing inside them{where}. "
                   "That time is not the cost of eager ops on the step's thread, so torch.compile has nothing there "
                   "to cut.", ev)


def _same_work(r, config) -> str:
    """What to profile again under torch.compile: on a run of this app (``base._app_run``) the same size for the
    study's matmul_add (a trace that holds its regions, or a run of it: its matrix size is what the study varies), the
    same settings for any other workload (its sweep axis is one knob of several that set the work, an MLP's batch
    beside its width, so "the same size" would not say which) or a script, else the same program."""
    if not _app_run(r, config):
        return "the same program"
    return "the same size" if (_cfg(config, "workload") or "matmul_add") == "matmul_add" else "the same settings"
