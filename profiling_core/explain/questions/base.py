"""What every question module shares: the :class:`Finding` a question returns, the no-GPU sentence, the number
and name formatting, and the few readings of the trace more than one question rests on (a step's self times, the
runtime calls only the first step makes, whether the profile holds a cold start).

The questions themselves live one module per study question (``q1_table`` … ``q10_compile_cost``, named after
their findings' ids); ``profiling_core.explain.questions.findings`` runs them in order.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from ...analyses._shared import factorize
from ...analyses.compile import COMPILED_GRAPH_CALL
from ...config import config_field as _cfg
from ...units import cut_apart, format_count, format_share
from ...units import format_duration_us as _us


NO_GPU_TEXT = "This trace has no GPU lane (no kernel, memcpy or memset events)"
_MAX_LISTED = 6
NO_STEPS_TEXT = "This trace has no ProfilerStep slices"
STEPS_HOWTO = ("profile with a schedule (torch.profiler.schedule) and call prof.step() at the end of each iteration, "
               "which makes each iteration a ProfilerStep#N slice")
"""What a trace without steps lacks, and how to record one with them: the questions that compare or count steps
say so rather than nothing."""


def _compile_rows(r) -> dict:
    """torch.compile's rows of the profiler table (its CPU rows: a graph call's GPU-side annotation is another row),
    over the whole trace, for questions 9 and 10 on a trace without steps: ``regions``, ``graph_calls``,
    ``lookups`` (calls), their CPU time (``*_us``, the table's total) and ``hashes`` (the graphs' distinct hashes)."""
    t = r.profiler_table
    cpu = t[t["lane"] == "cpu"] if len(t) else t
    names = cpu["name"].astype(str) if len(cpu) else pd.Series([], dtype=object)
    out = {}
    for key, mask in (("regions", names.str.startswith("Torch-Compiled Region")),
                      ("graph_calls", names.str.startswith(COMPILED_GRAPH_CALL)),
                      ("lookups", names == "TorchDynamo Cache Lookup")):
        out[key] = int(cpu.loc[mask, "calls"].sum()) if len(cpu) else 0
        out[key + "_us"] = float(cpu.loc[mask, "cpu_total_us"].sum()) if len(cpu) else 0.0
    graphs = names[names.str.startswith(COMPILED_GRAPH_CALL)] if len(cpu) else names
    out["hashes"] = sorted({n[len(COMPILED_GRAPH_CALL):].strip(" #") for n in graphs})
    return out


@dataclass(frozen=True)
class Finding:
    """One statement about the trace, with the numbers and slice names it rests on."""

    id: str
    """Stable identifier, e.g. ``q6.launch_path``."""
    question: int
    """The study question (1..10) it answers."""
    title: str
    text: str
    """Plain text, not Markdown: it quotes the trace's names as they are, so whoever renders it escapes it
    (the app: ``profiling_core.present.md_text``; the HTML report: ``profiling_core.present.html_text``)."""
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.question <= 10:
            raise ValueError(f"question must be 1..10, got {self.question!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "title": self.title, "text": self.text,
                "evidence": self.evidence}


def _short(name: str, n: int = 60) -> str:
    name = str(name)
    return name if len(name) <= n else name[: n - 1] + "…"


def _listed(names, n: int = 3) -> str:
    """The first ``n`` of ``names``, shortened, then how many more: ``a, b, c and 2 more``."""
    names = [str(x) for x in names]
    return ", ".join(cut_apart(names[:n], 60)) + (f" and {len(names) - n} more" if len(names) > n else "")


def _app_run(r, config) -> bool:
    """Whether the trace is a run of this app: its config is known (a run of the store), or it holds the study's
    ``matmul_add`` regions (``report.cold_start_gap``: the ``record_function`` the study's workload opens). A trace
    another program wrote is neither: sentences that name the study, its post or this app's settings are for app
    runs only."""
    return config is not None or not r.cold_start_gap.empty


def _num(x) -> Optional[float]:
    return None if x is None or pd.isna(x) else round(float(x), 3)


def _n(count, word: str, plural: Optional[str] = None) -> str:
    """``1 launch``, ``3 launches``; a median such as 1.5 keeps the plural (the count as ``units.format_count``
    writes it: whole, never in exponent form)."""
    return f"{format_count(count)} {word if count == 1 else (plural or word + 's')}"


def _ordinal(i: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(i, f"{i}th")


def _per_name(col: pd.Series, fn) -> np.ndarray:
    """``fn(col.astype(str))`` as an object array, computed once per distinct value and taken back to every row: a
    dispatch-chain column has 80k+ rows of a few hundred names on a large trace, and the per-row text copies
    cost tens of MiB."""
    codes, uniq = factorize(col, use_na_sentinel=False)  # a missing value is one more distinct value
    return fn(pd.Series(uniq, dtype=object).astype(str)).to_numpy(dtype=object)[codes]


ELSEWHERE = "on another thread or process than the step's slice"
"""Where a slice in a step's window sits when the step's slice does not hold it (:func:`_on_step_thread` false): the
step's code may still have caused it (the autograd engine's thread runs a GPU step's backward), or another program
(a second rank in the file): the trace does not say, so the texts say where it was, not whose it was."""


def _on_step_thread(r, steps, ids) -> np.ndarray:
    """Boolean per (step, slice id) pair: whether the slice lies inside that step's slice on the step's thread (a CPU
    row of the step's dispatch chain, ``report.dispatch_chains``). The one test of "the step's own slice holds it"
    for every text that places a slice in a step."""
    ch = r.dispatch_chains
    steps, ids = np.asarray(steps, dtype=np.int64), np.asarray(ids, dtype=np.int64)
    if ch.empty or not len(ids):
        return np.zeros(len(ids), dtype=bool)
    cpu = ch[ch["lane"] == "cpu"]
    own = pd.MultiIndex.from_arrays([cpu["step"].astype("int64"), cpu["id"].astype("int64")])
    return np.asarray(pd.MultiIndex.from_arrays([steps, ids]).isin(own), dtype=bool)


_STEP_SLICE = re.compile(r"ProfilerStep#[0-9]+")


def _step_star(name: str) -> str:
    """``ProfilerStep#N`` (N: ASCII digits, nothing after them) as ``ProfilerStep*``; any other name as it is. (Python's
    ``re`` on each name, whichever storage pandas gives the text column.)"""
    return "ProfilerStep*" if _STEP_SLICE.fullmatch(name) else name


def _self_times_by_step(ch: pd.DataFrame, steps) -> dict:
    """``{step: CPU slices of that step's chain}`` for the given steps (id, name with ProfilerStep#N as
    ProfilerStep*, start_ns, dur_us, self_us: the chains' ``own_us``, the slice's own time by the profiler table's
    rule less its wait for the autograd engine's thread, as ``cpu_own_times`` counts it). A step number names one
    step slice per rank where ranks' traces were merged into one file: its entry then holds them all
    (:func:`_self_times_by_slice` keeps them apart)."""
    keep = (ch["lane"] == "cpu") & ch["step"].isin(list(steps))
    out = _self_rows(ch, keep)
    return {k: g.drop(columns="step") for k, g in out.groupby("step", sort=False)}


def _self_times_by_slice(ch: pd.DataFrame, slice_ids) -> dict:
    """``{step slice id: CPU slices of that step slice's chain}``, as :func:`_self_times_by_step` gives them for a
    step number: one entry per step slice (``steps.slice_id``, the chains' ``step_slice_id``), so two ranks' step N
    in one file are two steps."""
    cpu = ch[ch["lane"] == "cpu"]
    keep = cpu["step_slice_id"].isin([int(x) for x in slice_ids])
    out = _self_rows(cpu, keep).assign(top=cpu.loc[keep, "step_slice_id"])
    return {int(k): g.drop(columns=["step", "top"]) for k, g in out.groupby("top", sort=False)}


def _self_rows(ch: pd.DataFrame, keep) -> pd.DataFrame:
    out = ch.loc[keep, ["step", "id", "name", "start_ns", "dur_us", "own_us"]].rename(columns={"own_us": "self_us"})
    out["name"] = _per_name(out["name"], lambda t: t.map(_step_star, na_action="ignore"))
    return out


# ATen ops that only make or reshape tensor metadata (no arithmetic, no data moved): on a CPU their own time is
# framework overhead, not the workload's math
_NO_WORK = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::view", "aten::reshape", "aten::_reshape_alias",
    "aten::as_strided", "aten::t", "aten::transpose", "aten::expand", "aten::permute", "aten::unsqueeze",
    "aten::squeeze", "aten::slice", "aten::select", "aten::split", "aten::chunk", "aten::narrow", "aten::detach",
    "aten::alias", "aten::lift_fresh", "aten::_unsafe_view", "aten::resolve_conj", "aten::resolve_neg",
    "aten::contiguous", "aten::numpy_T", "aten::result_type", "aten::broadcast_tensors", "aten::set_",
    "aten::resize_", "aten::to", "aten::dropout",
    # in-place and composite views: they change or split the metadata, and move no data either
    "aten::t_", "aten::transpose_", "aten::as_strided_", "aten::squeeze_", "aten::unsqueeze_", "aten::detach_",
    "aten::unbind", "aten::flatten", "aten::unflatten", "aten::movedim", "aten::moveaxis", "aten::swapaxes",
    "aten::swapdims", "aten::view_as", "aten::expand_as", "aten::reshape_as", "aten::split_with_sizes",
    "aten::tensor_split", "aten::unsafe_split", "aten::diagonal", "aten::real", "aten::imag", "aten::view_as_real",
    "aten::view_as_complex", "aten::unfold", "aten::indices", "aten::values",
    # composite ops whose own time is dispatch: the op they call does the work
    "aten::matmul", "aten::linear", "aten::layer_norm", "aten::scaled_dot_product_attention", "aten::conv1d",
    "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution", "aten::batch_norm",
    "aten::_batch_norm_impl_index", "aten::softmax", "aten::group_norm", "aten::embedding", "aten::einsum",
})

def _work_ops(g) -> "object":
    """The CPU slices of one step that do the workload's work: ATen ops that are neither metadata-only nor composite
    wrappers (:data:`_NO_WORK`), and the calls of torch.compile'd graphs (``analyses.compile.COMPILED_GRAPH_CALL``:
    on a CPU the code Inductor generated runs inside them, with no ATen op around it); their own time (children
    excluded) is the work."""
    return g[_per_name(g["name"], lambda t: (t.str.startswith("aten::") & ~t.isin(_NO_WORK))
                       | t.str.startswith(COMPILED_GRAPH_CALL)).astype(bool)]


_CALL_CATEGORIES = ("cuda_runtime", "cuda_driver", "runtime", "driver")
_LAZY_LOADING = ("Lazy Function Loading", "Runtime Triggered Module Loading")


def _first_step_only_calls(r, first_step: int) -> pd.DataFrame:
    """Runtime/driver calls made in the first step, on any thread (``report.cpu_own_times``: the autograd engine's
    thread too), under names that no later step calls: name, calls and us (their own time, waits included) on the
    threads that run the step, beside_calls and beside_us on the threads beside it (no step slice, no launch call in
    its window: a DataLoader's pin-memory thread pinning its first batches), whose time overlaps the step's and is
    none of it; the step's threads' time first. Calls inside torch.compile's compiler ranges count in neither:
    they are the compiler's (``compiled_in_step`` says what it did)."""
    cols = ["name", "calls", "us", "beside_calls", "beside_us"]
    own = r.cpu_own_times
    if own.empty or "category" not in own:
        return pd.DataFrame(columns=cols)
    calls = own[own["category"].isin(_CALL_CATEGORIES)]
    later = set(calls.loc[calls["step"] != first_step, "name"])
    first = calls[(calls["step"] == first_step) & ~calls["name"].isin(later)]
    beside, aside = first["beside_calls"], first["beside_us"]
    out = pd.DataFrame({"name": first["name"].astype(object),
                        "calls": (first["calls"] - beside - first["compile_calls"]).astype("int64"),
                        "us": _step_threads_us(first),
                        "beside_calls": beside.astype("int64"), "beside_us": aside.astype(float)})
    return out.sort_values(["us", "beside_us"], ascending=False, kind="stable").reset_index(drop=True)[cols]


def _step_threads_us(calls: pd.DataFrame) -> pd.Series:
    """The time of these ``cpu_own_times`` rows on the threads that run the steps, outside torch.compile's compiler
    ranges: their own time less that of the threads beside the steps and of the compiler's calls, waits
    included."""
    return (calls["own_us"] - calls["beside_us"] - calls["compile_us"] + calls["wait_us"]).astype(float)


def _first_step_slower_calls(r, first_step: int, later: list) -> pd.DataFrame:
    """Runtime/driver calls that the ``later`` steps make too and that took longer in the first step, on the threads
    that run the steps (as :func:`_first_step_only_calls` counts them): name, us (the first step's), usual (the median
    over ``later``, 0 for a step without the call) and excess_us, the largest excess first. The first launches of a
    cold process load their kernels inside ``cudaLaunchKernel`` (the H200's cold DataLoader run: 22.6 ms in its first
    step against a median 143 µs later), work no first-step-only call shows."""
    cols = ["name", "us", "usual", "excess_us"]
    own = r.cpu_own_times
    if own.empty or "category" not in own or not later:
        return pd.DataFrame(columns=cols)
    calls = own[own["category"].isin(_CALL_CATEGORIES)]
    per = pd.DataFrame({"step": calls["step"], "name": calls["name"].astype(object), "us": _step_threads_us(calls)})
    per = per.groupby(["name", "step"], sort=False)["us"].sum().unstack("step", fill_value=0.0)
    if first_step not in per.columns:
        return pd.DataFrame(columns=cols)
    rest = per.reindex(columns=later, fill_value=0.0)
    out = pd.DataFrame({"name": per.index, "us": per[first_step].to_numpy(),
                        "usual": rest.median(axis=1).to_numpy()})
    out = out[(rest.max(axis=1).to_numpy() > 0)]  # (a call the later steps make too)
    out["excess_us"] = out["us"] - out["usual"]
    return out[out["excess_us"] > 0].sort_values("excess_us", ascending=False, kind="stable").reset_index(
        drop=True)[cols]


def _table_rows(r, names) -> pd.DataFrame:
    t = r.profiler_table
    return t[(t["lane"] == "cpu") & t["name"].astype(str).isin(names)] if not t.empty else t


def _lazy_loading(r) -> pd.DataFrame:
    """The profiler table's lazy-loading rows (:data:`_LAZY_LOADING`) with a call outside torch.compile's compiler
    ranges: those all made while the compiler worked (loading the kernels it benchmarked) are the compiler's."""
    lazy = _table_rows(r, _LAZY_LOADING)
    own = r.cpu_own_times
    if lazy.empty or own.empty:
        return lazy
    theirs = own.groupby("name")["compile_calls"].sum()
    return lazy[lazy["calls"].to_numpy() > lazy["name"].map(theirs).fillna(0).to_numpy()]


def _compile_steps_text(steps: list) -> str:
    """"step 1 left out, as torch.compile's compiler ran in it: ..." (``analyses.basis_steps``,
    ``analyses.compile_in_measured_steps``)."""
    many = len(steps) > 1
    return (f"step{'s' if many else ''} {', '.join(map(str, steps))} left out, as torch.compile's compiler ran in "
            f"{'them' if many else 'it'}: compiling or recording a CUDA graph, one-time work like a first step's")


def _all_steps(n: int) -> str:
    return "the only step" if n == 1 else "both steps" if n == 2 else f"all {n} steps"


def empty_steps_text(ss: dict) -> str:
    """The empty steps of ``ss`` (``analyses.steady_state``'s dict: ``empty_steps``, ``closing_stubs``), named with
    why they are no step of the loop (``analyses.working_steps``): "step 5, the profiler's closing stub (no op or
    launch call began in it)", or, where some lie between steps of the loop, "steps 3, 5 and 7, empty (no op or
    launch call began in them, each shorter than every step in which one did: ``profile.step()`` called again with
    no iteration in between)"."""
    stubs = ss.get("empty_steps") or []
    many = len(stubs) > 1
    names = f"step{'s' if many else ''} {', '.join(map(str, stubs))}"
    if ss.get("closing_stubs", True):
        return (f"{names}, the profiler's closing stub{'s' if many else ''} (no op or launch call began in "
                f"{'them' if many else 'it'})")
    return (f"{names}, empty (no op or launch call began in {'them' if many else 'it'}, "
            f"{'each' if many else 'it is'} shorter than every step in which one did: profile.step() called again "
            "with no iteration in between)")


def _basis_text(ss: dict, n_steps: int) -> str:
    """Which of a run's ``n_steps`` working steps its per-step figures read (``ss``: ``analyses.steady_state``'s
    dict; ``analyses.measured_steps``) and which they leave out, and why: "the 2 steps after the first; the first may
    carry start-up effects …; step 3 left out, as torch.compile's compiler ran in it …"."""
    comp = ss.get("compile_steps") or []
    if ss["basis"] == "after_first":
        k = len(ss.get("first_steps") or []) or 1
        text = (f"the {n_steps - 1} steps after the first; the first may carry start-up effects, and question 3 "
                "compares it with them" if k == 1 else
                f"the {n_steps - k} steps after each of the {k} processes' first; a first step may carry start-up "
                "effects, and question 3 compares the first with the others")
    elif comp:  # (two steps, one of which compiled: the other alone)
        kept = ss.get("basis_steps") or []
        text = f"step{'s' if len(kept) > 1 else ''} {', '.join(map(str, kept))}"
    else:
        text = _all_steps(n_steps)
    if comp:
        text += "; " + _compile_steps_text(comp)
    empty = ss.get("empty_steps") or []
    if empty and ss["basis"] != "after_first":
        text = "the only step with work in it" if n_steps == 1 else f"all {n_steps} steps with work in them"
    if empty:  # no step of the loop: the figures leave it out (analyses.working_steps)
        text += "; " + empty_steps_text(ss) + ", left out"
    idle = ss.get("steps_without_gpu") or []
    if idle:  # the figures are those of the steps that launched GPU work
        text += (f"; of them, the {len(ss['basis_steps'])} that launched GPU work, as step"
                 f"{'s' if len(idle) > 1 else ''} {', '.join(map(str, idle))} launched none")
    return text


def _left_out_text(r) -> str:
    """:func:`_basis_text` of report ``r``'s steps in parentheses, to follow a per-step figure, where its steps leave
    any out; "" where they read every step."""
    from ...analyses import steady_state, working_steps
    ss = r.summary.get("steady_state") or steady_state(r.steps)
    if ss.get("basis") != "after_first" and not any(ss.get(k) for k in ("compile_steps", "empty_steps",
                                                                         "steps_without_gpu")):
        return ""
    return f" ({_basis_text(ss, len(working_steps(r.steps)))})"


def _compiler_every_step(steps) -> str:
    """Where torch.compile's compiler ran in every one of ``steps`` (the measured steps: ``analyses.measured_steps``
    keeps them all then), a sentence that says how much of a step it took; "" otherwise."""
    if not len(steps) or "compile_us" not in steps or not (steps["compile_us"] > 0).all():
        return ""
    share = float((steps["compile_us"] / steps["cpu_dur_us"]).median())
    return (f" torch.compile's compiler ran in every step (it compiled again each time): a median "
            f"{_us(float(steps['compile_us'].median()))} a step, {format_share(share)} of it, which is compiling, not "
            "the loop's own cost.")


def _eager_after_compiling(r, cb) -> str:
    """Where the compiled regions all lie in steps the per-step figures leave out (``cb``: ``compile_breakdown``'s
    rows of the steps they read, ``analyses.compile_in_measured_steps``) and the steps they read ran none, what
    happened, as a sentence; "" otherwise. Steps that compiled and ran compiled code, then none after: Dynamo gave up
    on the frame; compiled code only in the first step (left out as the first): the steps read ran eagerly."""
    from ...analyses import compile_steps, working_steps
    if not len(cb) or int(cb["compiled_regions"].sum()) > 0:
        return ""
    allcb = r.compile_breakdown
    out = set(working_steps(r.steps)["step"]) - set(cb["step"])
    ran = sorted(int(k) for k in allcb.loc[allcb["step"].isin(out) & (allcb["compiled_regions"] > 0), "step"])
    if not ran:
        return ""
    comp = set(compile_steps(r.steps))
    lookups = int(cb["cache_lookups"].sum())
    gave_up = all(k in comp for k in ran)
    tried = sorted(k for k in comp if k in out and k not in ran)  # (the compiler's last try, which gave up)
    many = len(ran) > 1
    return (f"torch.compile ran compiled code only in step{'s' if many else ''} {', '.join(map(str, ran))}, "
            + ("each of which also ran its compiler (it compiled or recompiled there)" if gave_up else
               f"which the per-step figures leave out{_left_out_text(r)}")
            + (f"; in step{'s' if len(tried) > 1 else ''} {', '.join(map(str, tried))} its compiler ran, but no "
               "compiled code" if tried else "")
            + f"; the other {_n(len(cb), 'step')} ran no compiled region"
            + (f", only Dynamo's cache lookup ({_n(lookups, 'TorchDynamo Cache Lookup')})" if lookups else "")
            + (", and then the code eagerly: Dynamo gave up compiling the frame (its recompile limit, "
               "torch._dynamo.config.recompile_limit, or code it cannot compile)." if gave_up else
               ": the steps the per-step figures read ran eagerly."))


def _is_cold(r, config) -> bool:
    """Whether the profile holds the process's first run of the workload: the config's warm-up when known, else
    the trace (runtime calls only the first step makes, lazy-loading slices, or torch.compile compiling in the first
    step)."""
    warmup = _cfg(config, "warmup")
    if warmup is not None:
        return warmup == 0
    if r.steps.empty:
        return bool(len(_table_rows(r, _LAZY_LOADING)))
    return bool(len(_first_step_only_calls(r, int(r.steps["step"].iloc[0]))) or len(_lazy_loading(r))
                or r.steps["compile_us"].iloc[0] > 0)
