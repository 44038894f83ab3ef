"""Question 3, why the first profiled step is long (``q3.cold_start``): the first step against the others, the slice
that grew, and whether it is a cold start (the run's warm-up, else the calls only the first step makes) or the
profiler's own start-up."""
from __future__ import annotations

import pandas as pd

from ...analyses import GEMM_OPS, first_steps, steady_state, working_steps
from ...analyses.steps import without_compile_steps
from ...analyses._shared import COMPILER_RANGE
from ...config import SPREAD_WARN_PCT, config_field as _cfg
from ...units import format_duration_us as _us
from ...units import format_share
from .base import (NO_STEPS_TEXT, STEPS_HOWTO, Finding, _compile_steps_text, _first_step_only_calls,
                   empty_steps_text, _first_step_slower_calls, _is_cold, _lazy_loading, _num, _self_times_by_slice,
                   _short, _table_rows)


FIRST_STEP_SLOWER_PCT = 5.0
"""A first profiled step counts as slower than the others (question 3) when it took more than this many percent above
their median; within it, the difference is noise and no cost is explained."""


_PROFILER_STARTUP = ("Activity Buffer Request",)

UNNAMED_CALL = "INVALID"
"""The name Kineto gives a CUDA runtime call whose callback id is not in its table of names."""


def _call_name(name) -> str:
    """A runtime call's name as the texts print it: Kineto's :data:`UNNAMED_CALL` said to be one."""
    return f"{name} (calls the profiler could not name)" if name == UNNAMED_CALL else str(name)


def _calls_text(calls: pd.DataFrame, count: str, us: str) -> str:
    """The first four calls of a first-step-only frame as text (``cudaMalloc ×3 (45.0 µs)``), and how many more."""
    listed = ", ".join(f"{_call_name(n)} ×{int(c)} ({_us(u)})"
                       for n, c, u in calls[["name", count, us]].head(4).itertuples(index=False))
    return listed + (f" and {len(calls) - 4} more" if len(calls) > 4 else "")


def _first_step_extra_ops(r, first_step: int) -> pd.DataFrame:
    """The ATen ops the first step calls more often than a later step does, on the threads that run the steps
    (``cpu_own_times``' calls less those beside the steps and inside torch.compile's compiler): ``name``, ``calls``
    (the first step's) and ``usual`` (the median over the later working steps), most extra calls first. One-time work
    that runs inside the loop's first iteration (an optimizer creating its state, a cache filled on first use)
    shows here, on a CPU as on a GPU, where no runtime call marks it."""
    cols = ["name", "calls", "usual"]
    own = r.cpu_own_times
    later = [int(k) for k in working_steps(r.steps)["step"] if int(k) != first_step]
    if own.empty or not later:
        return pd.DataFrame(columns=cols)
    ops = own[own["name"].astype(str).str.startswith("aten::") & own["step"].isin([first_step, *later])]
    n = (ops["calls"] - ops["beside_calls"] - ops["compile_calls"]).astype("int64")
    per = pd.DataFrame({"step": ops["step"], "name": ops["name"].astype(str), "n": n}).pivot_table(
        index="name", columns="step", values="n", aggfunc="sum", fill_value=0)
    per = per.reindex(columns=[first_step, *later], fill_value=0)
    out = pd.DataFrame({"name": per.index, "calls": per[first_step].to_numpy(),
                        "usual": per[later].median(axis=1).to_numpy()})
    out = out[out["calls"] > out["usual"]]
    return out.assign(_d=out["calls"] - out["usual"]).sort_values(["_d", "name"], ascending=[False, True],
                                                                   kind="stable")[cols].reset_index(drop=True)


def _cold_start_causes(only: pd.DataFrame, lazy: pd.DataFrame, slice_name: str) -> str:
    """What the calls found point at (workspace, library heuristics, lazy loading), only for those present."""
    names = " ".join(only["name"])
    causes = []
    if any("Malloc" in n and "Host" not in n for n in only["name"].astype(str)):
        causes.append("workspace allocation (cudaMalloc)")
    if "HostAlloc" in names or "MallocHost" in names:
        causes.append("pinned host memory allocation (cudaHostAlloc)")
    if "Occupancy" in names or "FuncSetAttribute" in names or "DeviceGetAttribute" in names:
        lib = f"the GEMM library's (cuBLAS, under {slice_name})" if slice_name in GEMM_OPS else "a library's"
        causes.append(f"{lib} set-up and kernel heuristics (attribute and occupancy queries)")
    if len(lazy):
        causes.append("lazy module loading (" + ", ".join(sorted(map(str, lazy["name"]))) + ")")
    return ", ".join(causes)


def _q3_cold(r, config=None) -> list[Finding]:
    s = working_steps(r.steps)  # an empty step is no step of the loop to compare the first with
    if r.steps.empty:
        return [Finding("q3.cold_start", 3, "No steps to compare",
                        f"{NO_STEPS_TEXT}, so it has no first step to compare with later ones: to see one, "
                        f"{STEPS_HOWTO}.", {"steps": 0, "first_step_slower": None})]
    if len(s) < 2:
        empty = r.steps[~r.steps.index.isin(s.index)]
        if len(s) != 1:
            return []
        first = s.iloc[0]
        if empty.empty:
            return [Finding("q3.cold_start", 3, "First step vs the others",
                            f"Only one step was profiled: ProfilerStep#{int(first['step'])}, "
                            f"{_us(first['cpu_dur_us'])} on the CPU. There is no later step to compare the first "
                            "with: profile more active steps (the schedule's active count).",
                            {"first_step": int(first["step"]), "first_step_cpu_us": _num(first["cpu_dur_us"]),
                             "first_step_slower": None})]
        ss = r.summary.get("steady_state") or steady_state(r.steps)
        names = ", ".join(f"ProfilerStep#{int(k)} {_us(d)}" for k, d in zip(empty["step"], empty["cpu_dur_us"]))
        text = (f"Only one profiled step did any work: ProfilerStep#{int(first['step'])}, "
                f"{_us(first['cpu_dur_us'])} on the CPU. The other{'s' if len(empty) > 1 else ''} ({names}): "
                f"{empty_steps_text(ss)}. There is no later step to compare the first with: profile more active "
                "steps (the schedule's active count).")
        return [Finding("q3.cold_start", 3, "First step vs the others", text,
                        {"first_step": int(first["step"]), "first_step_cpu_us": _num(first["cpu_dur_us"]),
                         "empty_steps": [int(k) for k in empty["step"]], "first_step_slower": None})]
    # the others: the later steps in which torch.compile's compiler did not run (a recompile in step 2 is no noise
    # of the loop's), where one remains
    # (and, where ranks' traces were merged into one file, not another process's first step: each is its loop's
    # first, analyses.first_steps)
    firsts = first_steps(s)
    others = s.iloc[1:][~s.index[1:].isin(firsts.index)]
    first, (rest, recompiled) = s.iloc[0], without_compile_steps(others)
    first_step = int(first["step"])
    rest_med = float(rest["cpu_dur_us"].median())
    ratio = float(first["cpu_dur_us"]) / rest_med if rest_med > 0 else None
    extra = float(first["cpu_dur_us"]) - rest_med
    slower = extra > FIRST_STEP_SLOWER_PCT / 100 * rest_med
    ev = {"first_step": first_step, "first_step_cpu_us": _num(first["cpu_dur_us"]),
          "other_steps_median_us": _num(rest_med), "ratio": _num(ratio), "extra_us": _num(extra),
          "first_step_slower": bool(slower)}
    if recompiled:
        ev["compile_steps"] = recompiled
    notes = [f"{ratio:.{2 if ratio < 10 else 1}f}×"] if ratio is not None else []
    if len(firsts) > 1:
        notes.append(("the other process's first step" if len(firsts) == 2 else
                      f"the first steps of the other {len(firsts) - 1} processes") + " left out of the others")
    text = (f"The first profiled step (ProfilerStep#{first_step}) took {_us(first['cpu_dur_us'])} on the "
            f"CPU against a median {_us(rest_med)} for the {len(rest)} others"
            + (f" ({_compile_steps_text(recompiled)})" if recompiled else "")
            + (f" ({'; '.join(notes)})" if notes else "") + ".")
    later = rest[rest["step"] != first_step]["cpu_dur_us"]  # (another rank's slice of the first step is not later)
    lo, hi = (float(later.min()), float(later.max())) if len(later) else (0.0, 0.0)
    spread = (hi - lo) / rest_med * 100 if rest_med > 0 else 0.0
    if len(later) >= 2 and (spread > SPREAD_WARN_PCT or slower) and lo <= float(first["cpu_dur_us"]) <= hi:
        # inside the others' own range, and that range is wide (or wide enough to hold a first step above the 5% of
        # the rule: a later step took longer): the steps' noise, not the first step, decides
        ev.update(others_spread_pct=_num(spread), others_min_us=_num(lo), others_max_us=_num(hi), first_step_slower=None)
        text += (f" The others themselves range from {_us(lo)} to {_us(hi)} ({spread:.0f}% of their median) and the "
                 "first step lies inside that range: the steps' own noise is larger than the difference, so this "
                 "window says nothing about a first-step cost. Run it again on a quiet machine (or with more steps) "
                 "before reading it.")
        return [Finding("q3.cold_start", 3, "First step vs the others", text, ev)]
    if not slower:
        faster = extra < -FIRST_STEP_SLOWER_PCT / 100 * rest_med
        cold = _is_cold(r, config)
        mine = _first_step_only_calls(r, first_step)
        mine = mine[mine["calls"] > 0]
        text += (f" It was {'faster than' if faster else 'within ' + f'{FIRST_STEP_SLOWER_PCT:g}% of'} the others: "
                 f"this window shows no first-step cost to explain"
                 # (a cold start the trace shows in the first step did not fall before it: its cost was covered)
                 + ((f" (it alone calls {_calls_text(mine, 'calls', 'us')}, cold-start work that the rest of the step, "
                     "quicker than the later steps', more than made up for)." if faster else
                     f" (it alone calls {_calls_text(mine, 'calls', 'us')}: cold-start work too small to set it "
                     "apart).") if cold and len(mine) else
                    (" (the run's cold-start work fell before the recorded steps)." if _not_held_before(r, first_step)
                     else " (no call in it is missing from the later steps: the cold start left no mark here)."
                     ) if cold else "."))
        # (on a CPU, without the run's warm-up, the trace cannot tell: see _q3_cause)
        ev["cold_start"] = cold if cold or r.has_gpu or _cfg(config, "warmup") is not None else None
        return [Finding("q3.cold_start", 3, "First step vs the others", text, ev)]
    ch = r.dispatch_chains
    worst, n_others = None, 0
    if not ch.empty:
        # each step slice on its own: with several ranks in one trace a number names one step slice per rank, and
        # the chains of a number hold them all (the first step's figures then summed both ranks' calls)
        first_slice = int(first["slice_id"])
        rest_slices = [k for k in map(int, rest["slice_id"]) if k != first_slice]
        by_slice = _self_times_by_slice(ch, {first_slice, *rest_slices})
        f0 = by_slice.get(first_slice)
        others = [by_slice[k] for k in rest_slices if k in by_slice]
        if f0 is not None and others:
            # each name's self time summed over the step (all its calls), against the median of those sums over the
            # other steps (0 where a step did not call it): what a step spent in it, as the steps' own figures count
            f0 = f0.groupby("name", sort=False)["self_us"].sum().to_frame()
            ref = pd.concat([g.groupby("name")["self_us"].sum() for g in others], axis=1).fillna(0.0).median(axis=1)
            f0["ref"] = ref.reindex(f0.index).fillna(0.0).to_numpy(dtype=float)
            f0["excess_us"] = f0["self_us"] - f0["ref"]
            worst = f0.sort_values("excess_us", ascending=False, kind="stable").reset_index().iloc[0]
            n_others = len(others)
            ev.update({"largest_excess_slice": str(worst["name"]), "largest_excess_us": _num(worst["excess_us"]),
                       "largest_excess_self_us": _num(worst["self_us"]),
                       "largest_excess_usual_us": _num(worst["ref"])})
    cause, startup = _q3_cause(r, config, first_step, extra, ev)
    if worst is not None and worst["excess_us"] > 0:
        # the figures are the slices' own time: the profiler table's self time less a wait for the autograd
        # engine's thread (``cpu_own_times``), which question 1's self time keeps: named so where the two differ
        own = r.cpu_own_times
        waited = bool(len(own) and "wait_us" in own and (own.loc[own["name"].astype(str) == str(worst["name"]),
                                                                "wait_us"] > 0).any())
        what_of = (f"own time of {_short(worst['name'])} (its self time less its wait for the autograd engine's "
                   "thread)" if waited else f"self time of {_short(worst['name'])}")
        # "most" only for more than half the extra: the slice with the largest excess may hold less; and "the
        # largest" only where the profiler's start-up, which the cause names as a part of the extra, is not larger
        if worst["excess_us"] > extra * 1.0005:  # a part larger than the whole: other slices were faster
            text += (f" One slice alone holds more than all of the extra time: the {what_of} was "
                     f"{_us(worst['excess_us'])} longer than usual "
                     f"({_us(worst['self_us'])} against {_us(worst['ref'])} in the other steps), and other "
                     "slices ran faster.")
        else:
            share = ("Besides the profiler's own start-up (below), the largest part" if startup > worst["excess_us"]
                     else "Most" if worst["excess_us"] > extra / 2 else "The largest part")
            text += (f" {share} of the extra time ({_us(worst['excess_us'])} of {_us(extra)}) shows as "
                     f"{what_of}: {_us(worst['self_us'])} in the first step against "
                     f"{'a median ' if n_others > 1 else ''}{_us(worst['ref'])} in the other steps (all its "
                     "calls in a step).")
    g = r.cold_start_gap.dropna(subset=["gap_us"])
    if len(g) >= 2:
        ev.update({"first_gap_us": _num(g["gap_us"].iloc[0]), "other_gaps_median_us": _num(
            g["gap_us"].iloc[1:].median()), "first_aten": str(g["first_aten"].iloc[0])})
        text += (f" From entering matmul_add to the first aten:: op ({g['first_aten'].iloc[0]}) took "
                 f"{_us(g['gap_us'].iloc[0])} in the first region against a median {_us(g['gap_us'].iloc[1:].median())}"
                 f" later.")
    text += cause
    return [Finding("q3.cold_start", 3, "First step vs the others", text, ev)]


def _not_held_before(r, first_step: int) -> int:
    """How many of the schedule's steps before the first recorded one this trace does not hold (steps are numbered
    from 0; a trace whose steps are out of time order can hold lower numbers after it). They ran the loop's code
    before this window, unrecorded or recorded in another trace (an earlier cycle of a schedule with ``repeat``,
    which ``tensorboard_trace_handler`` writes to a file of its own)."""
    held = {int(k) for k in r.steps["step"].dropna()} if "step" in r.steps else set()
    return max(0, first_step - len({k for k in held if 0 <= k < first_step}))


_GRAPH_RECORDING = "CUDAGraphNode."
"""How CUDA graph trees name their ranges among the compiler's (``CUDAGraphNode.record (dynamo_timed)``: a graph's
capture, in the first replayed call of a reduce-overhead run)."""


def _compiled_in(r, first_step: int, extra: float, ev: dict) -> str:
    """What torch.compile's compiler did in the first step (``steps``' ``compile_us``; the GPU ops it launched,
    ``compiler_launches``), as a sentence; "" where it did not run there."""
    row = r.steps[r.steps["step"] == first_step]
    comp = float(row["compile_us"].iloc[0]) if len(row) and "compile_us" in row else 0.0
    if not comp > 0:
        return ""
    ev["compile_us"] = _num(comp)
    own = r.cpu_own_times
    ranges = own.loc[(own["step"] == first_step) & own["name"].astype(str).str.endswith(COMPILER_RANGE), "name"]
    # CUDA graph trees' recording (reduce-overhead, max-autotune) is the compiler's too, but compiles nothing
    recorded = len(ranges) > 0 and ranges.astype(str).str.startswith(_GRAPH_RECORDING).all()
    ev["compile_work"] = "cuda_graph_recording" if recorded else "compile"
    # max-autotune's benchmarks run in ranges of their own (``addmm_template_autotuning (dynamo_timed)``); a default
    # compile also launches copies (its pattern passes moving constants to the GPU), which are no benchmarks
    autotuned = ranges.astype(str).str.contains("autotun", case=False).any()
    share = f", {format_share(comp / extra)} of the {_us(extra)} extra" if 0 < comp <= extra * 1.0005 else ""
    text = (f" torch.compile recorded a CUDA graph in this step: its compiler's ranges "
            f"({', '.join(sorted(set(ranges)))}) took {_us(comp)}{share}" if recorded else
            f" torch.compile compiled in this step: its compiler's ranges (named '…{COMPILER_RANGE}') took "
            f"{_us(comp)}{share}")
    cl = r.compiler_launches
    cl = cl[cl["step"] == first_step] if len(cl) else cl
    if len(cl):
        n = int(cl["count"].sum())
        ev["compiler_gpu_ops"] = n
        cl = cl.groupby("name", sort=False)["count"].sum().sort_values(ascending=False, kind="stable")  # (per name)
        listed = ", ".join(f"{_short(nm)} ×{int(c):,}" for nm, c in zip(cl.index[:3], cl.iloc[:3]))
        text += (f", and in them it launched {n:,} GPU op{'s' if n != 1 else ''} of its own ({listed}"
                 + (f" and {len(cl) - 3} more" if len(cl) > 3 else "")
                 + ("; under max-autotune, its benchmarks of candidate kernels" if autotuned else "") + ")")
    later = r.steps[(r.steps["step"] != first_step) & (r.steps["compile_us"] > 0)]["step"].tolist()
    if later:  # (they compiled again: a recompile, or a graph recorded later)
        return text + (f"; the compiler ran again in step{'s' if len(later) > 1 else ''} "
                       f"{', '.join(map(str, later))}.")
    return text + ("; the later steps replayed the graph." if recorded else
                   "; the later steps ran the code it compiled.")


def _recompiled(r, first_step: int) -> str | None:
    """Where the first step's only compiled regions are later compiles of their frames (``Torch-Compiled Region:
    F/N`` with N > 0: torch.compile numbers a frame's compiles from 0), the first of them; else None (a region
    ``F/0`` is a frame's first compile)."""
    own = r.cpu_own_times
    names = own.loc[own["step"] == first_step, "name"].astype(str)
    regions = [n for n in names if n.startswith("Torch-Compiled Region: ")]
    counts = [n.rsplit("/", 1)[-1] for n in regions]
    if not regions or not all(c.isdigit() for c in counts) or any(int(c) == 0 for c in counts):
        return None
    return sorted(regions)[0]


def _q3_cause(r, config, first_step: int, extra: float, ev: dict) -> tuple[str, float]:
    """Cold start or the profiler's own start-up: from the config's warm-up when known, else from the trace; and the
    µs of the profiler's start-up the text gives as a part of the extra (0 where it gives none)."""
    only = _first_step_only_calls(r, first_step)
    unrec = _not_held_before(r, first_step)
    lazy = _lazy_loading(r)
    startup = _table_rows(r, _PROFILER_STARTUP)
    startup_us = float(startup["cpu_total_us"].sum()) if len(startup) else 0.0
    warmup = _cfg(config, "warmup")
    cold = _is_cold(r, config)
    ev.update({"cold_start": cold, "cold_start_basis": "config" if warmup is not None else "trace",
               "config_warmup": warmup,
               "first_step_only_calls": {n: int(c) for n, c in zip(only["name"], only["calls"]) if c > 0},
               "first_step_only_calls_us": _num(only["us"].sum()) if len(only) else 0.0,
               "first_step_only_calls_beside": {n: int(c) for n, c in zip(only["name"], only["beside_calls"])
                                                if c > 0},
               "first_step_only_calls_beside_us": _num(only["beside_us"].sum()) if len(only) else 0.0,
               "lazy_loading_slices": sorted(map(str, lazy["name"])), "profiler_startup_us": _num(startup_us)})
    why = (f"the run's config has {'no' if warmup == 0 else f'{warmup} iterations of'} warm-up"
           if warmup is not None else None)
    comp = _compiled_in(r, first_step, extra, ev)
    again = _recompiled(r, first_step) if comp and warmup is None else None
    if again:  # the trace says the frame had been compiled before: a recompile, whatever else the step did first
        ev.update(cold_start=False, recompiled_region=again)
        return (f" This is no cold start (from the trace: its compiled region, {again}, is a later compile of a "
                f"frame compiled before the recording), but{comp}"), 0.0
    if comp and not cold:  # a warm run whose first recorded step compiled again
        return f" This is not a cold start ({why}), but{comp}", 0.0
    if cold and (len(only) or len(lazy) or comp):
        mine = only[only["calls"] > 0]
        aside = only[only["beside_calls"] > 0].sort_values("beside_us", ascending=False, kind="stable")
        basis = ("from the trace" if comp and not (len(mine) or len(lazy))  # (the sentence after it says what)
                 else "from the trace: the first step does work no later step repeats")
        out = f" This is a cold start ({why or basis}):" + comp
        if len(mine):
            calls_us = float(mine["us"].sum())
            later = [int(k) for k in working_steps(r.steps)["step"] if int(k) != first_step]
            slow = _first_step_slower_calls(r, first_step, later)
            slow_us = float(slow["excess_us"].sum()) if len(slow) else 0.0
            ev["first_step_slower_calls_us"] = _num(slow_us)
            both = calls_us + slow_us
            share = (f": {format_share(both / extra)} of the {_us(extra)} extra; the rest is work outside these "
                     "calls" if 0 < both <= extra * 1.0005 else
                     f": more than all of the {_us(extra)} extra: the first step's other work ran faster than the "
                     "later steps'" if extra > 0 else "")
            listed = ", ".join(f"{_call_name(n)} {_us(u)} against {_us(m)}"
                               for n, u, m in slow[["name", "us", "usual"]].head(3).itertuples(index=False))
            out += ((" Outside the compiler's ranges," if comp else "")
                    + f" the first step alone calls {_calls_text(mine, 'calls', 'us')}, {_us(calls_us)} in all"
                    + (f", and the calls every step makes took {_us(slow_us)} more in it than in a later step "
                       f"({listed}{' and more' if len(slow) > 3 else ''}: a median over the later steps)"
                       if slow_us > 0 else "") + f"{share}.")
        if len(aside):
            out += (" Threads that hold no step slice and launch nothing (a DataLoader's pin-memory thread, say) call "
                    f"{_calls_text(aside, 'beside_calls', 'beside_us')} in the first step alone: time that overlaps "
                    "the step's, and none of its extra.")
        causes = _cold_start_causes(mine, lazy, str(ev.get("largest_excess_slice", "")))
        if causes:
            out += f" These point at {causes}; warm-up before profiling moves that cost out of the profile."
        return out, 0.0
    extra_ops = _first_step_extra_ops(r, first_step) if cold and unrec <= 0 else pd.DataFrame()
    if len(extra_ops):
        ev["first_step_extra_ops"] = {n: [int(c), _num(u)] for n, c, u in extra_ops.itertuples(index=False)}
        listed = ", ".join(f"{n} ×{int(c)} against {_num(u):g}"
                           for n, c, u in extra_ops.head(4).itertuples(index=False))
        more = f" and {len(extra_ops) - 4} more" if len(extra_ops) > 4 else ""
        return (f" No warm-up ({why}), and the first step does work no later step repeats: it calls ATen ops more "
                f"often than a later step does ({listed}{more}; a median over the later steps), one-time work inside "
                "the loop's first iteration, such as an optimizer creating its state or a cache filled on first use"
                + ("" if r.has_gpu else ", which on a CPU makes no runtime call of its own")
                + "; warm-up before profiling moves it out of the profile."), 0.0
    if cold:
        return (f" No warm-up ({why}), but no call in the first step is missing from the later ones: "
                + (f"the {unrec} schedule step(s) before ProfilerStep#{first_step}, not in this trace, already ran "
                   f"the function, so the cold start fell outside this window; nothing in the trace names the extra's "
                   f"cause (the profiler's first recorded step, or other work on the machine: run it again to tell)."
                   if unrec > 0 else
                   ("the cold-start work does not show as CUDA calls here" if r.has_gpu else
                    "on a CPU the cold-start work runs inside the ops and makes no call of its own")
                   + "; the extra is the process's first profiled call.")), 0.0
    if why is None and not r.has_gpu:
        # on a CPU a process's first call sets itself up inside its ops (a BLAS's threads and buffers, a oneDNN
        # primitive, the allocator's first blocks), a CPU trace has no runtime calls: nothing could mark it
        ev["cold_start"] = None
        out = (" A CPU trace cannot tell a cold start: the set-up of a process's first call (a BLAS library's threads "
               "and buffers, the allocator's first blocks) runs inside its ops and makes no call of its own that the "
               "profiler records, so it shows only as slower ops"
               + (f" (and the {unrec} schedule step(s) before ProfilerStep#{first_step} are not in this trace)"
                  if unrec > 0 else ""))
        if startup_us <= 0 and unrec > 0:  # (those steps ran the function: the first recorded is no first call)
            return out + ("; nothing in the trace names the extra's cause (no profiler start-up slice shows either). "
                          "Those schedule steps already ran the function, so this is not its first call: it may be "
                          "the profiler's first recorded step or other work on the machine; running it again tells."
                          ), 0.0
        if startup_us <= 0:
            return out + ("; nothing in the trace names the extra's cause (no profiler start-up slice shows either). "
                          "It may be the process's first call of the workload, the profiler's first recorded step or "
                          "other work on the machine: the run's warm-up tells the first (none: a cold start), running "
                          "it again the last."), 0.0
    elif why is not None:
        out = f" This is not a cold start ({why})"
    else:  # the trace alone: what its window shows, and where a cold start would not show
        out = (" The trace shows no cold start (no call in the first step is missing from the later ones"
               + (f"; the {unrec} schedule step(s) before ProfilerStep#{first_step} are not in this trace, and a "
                  "cold start there would not show" if unrec > 0 else "") + ")")
    if startup_us > 0:
        share = startup_us / extra if extra > 0 else None
        names = " and ".join(map(str, sorted(set(startup["name"]))))
        if share is not None and share < 0.5:  # a part of it, said as a part
            return out + (f": part of the extra is the profiler's own start-up — its {names} took "
                          f"{_us(startup_us)}, {format_share(share)} of the {_us(extra)} extra."), startup_us
        return out + (f": the extra is the profiler's own start-up — its {names} took {_us(startup_us)}"
                      + ((f", {format_share(share)} of the {_us(extra)} extra" if share <= 1.0005 else
                          f", more than all of the {_us(extra)} extra")
                         if share is not None else "")
                      + "."), startup_us
    return out + ("; nothing in the trace names the extra's cause (no profiler start-up slice shows either). It may be the "
                  "profiler's first recorded step"
                  + (f" (ProfilerStep#{first_step} is the first step it records, after {unrec} schedule step(s) "
                     "not in this trace)" if unrec > 0 and why is not None else "")
                  + " or other work on the machine: run it again to tell."), 0.0
