"""What torch.compile adds per step on the CPU and changes on the GPU (study questions 9 and 10)."""
from __future__ import annotations

import math
import re
from collections import deque
from typing import Iterable, Optional

import pandas as pd

import numpy as np

from ._common import ints, nullable_int, us
from ._shared import COMPILED_GRAPH_CALL, Shared, covered_ns, frame, shared_for
from .table import cpu_slices_by_step, engine_work_beside

__all__ = ["compile_breakdown", "compile_in_measured_steps", "compile_payoff",
           "compiler_launches", "compiler_only_kernels", "outside_compiler", "STAGING_OP", "staging_pairs",
           "triton_fusions",
           "fused_ops", "ran_compiled", "COMPILED_GRAPH_CALL",
           "GRAPH_LAUNCHES"]

STAGING_OP = "aten::_foreach_copy_"
"""The op through which CUDA graphs' replays copy their inputs into the graphs' static buffers: on every
reduce-overhead trace here (the H200's ``h200_memory/ro`` and ``train_ro``, its decode and sweep runs, the H100's
``mm4095_ro``) each input copy is a ``multi_tensor_apply`` kernel that this op launched inside the compiled code (a
``Torch-Compiled Region``, or ``CompiledFunctionBackward`` for the backward's graph), before the graph's replay."""

_COUNTS = ("step", "cache_lookups", "compiled_regions", "prologues", "fx_graph_calls", "backward_fx_graph_calls",
           "graph_launches", "kernels", "memcpys", "memcpy_dtod", "memcpy_htod", "memcpy_dtoh", "memsets", "launches",
           "kernel_launches", "graph_ops", "graph_input_copies", "compiled_kernels")


_CPU_COLS = ["step_id", "step", "start_ns", "cpu_dur_ns", "cache_lookups", "cache_lookup_ns", "compiled_regions",
             "compiled_region_ns", "prologues", "prologue_ns", "fx_graph_calls", "fx_graph_ns", "fx_graph_hash",
             "backward_fx_graph_calls", "backward_fx_graph_ns", "backward_fx_graph_hash", "graph_launches",
             "backward_wait_ns"]
GRAPH_LAUNCHES = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")
"""The calls that replay a captured graph: the CUDA runtime's, ROCm's and the driver API's."""


def _kind(name) -> int:
    """compile_breakdown.sql's row kinds: 1 cache lookup, 2 compiled region, 3 prologue, 4 FX graph call, 5 graph
    launch."""
    if not isinstance(name, str):
        return 0
    if name == "TorchDynamo Cache Lookup":
        return 1
    if name.startswith("Torch-Compiled Region"):  # GLOB 'Torch-Compiled Region*'
        return 2
    if name == "AOTDispatcher Runtime Wrapper Prologue":
        return 3
    if name.startswith(COMPILED_GRAPH_CALL):  # GLOB '## Call CompiledFxGraph *'
        return 4
    return 5 if name in GRAPH_LAUNCHES else 0


_BACKWARD = "CompiledFunctionBackward"
"""The autograd node that runs a compiled function's backward graph (on the autograd engine's thread in training)."""


def ran_compiled(session, ids, shared: Shared | None = None) -> np.ndarray:
    """Whether each of these slices (ids; -1 for none: False) is or lies under (its parent chain) torch.compile's code:
    a ``Torch-Compiled Region``, a call of a compiled graph (:data:`COMPILED_GRAPH_CALL`), or a
    ``CompiledFunctionBackward`` (a compiled function's backward graph, which autograd runs outside the region, on its
    engine's thread in training). An op there ran as the compiled code ran it (an Inductor graph's extern GEMM with
    the shapes it recorded); a launch call there launched compiled code's kernels, a CUDA graph's replay
    (``cudaGraphLaunch`` under reduce-overhead) included; any other is eager code's."""
    sh = shared_for(session, shared)
    ids = np.asarray(list(ids), dtype=np.int64)
    rows = np.full(len(ids), -1, dtype=np.int64)
    rows[ids >= 0] = sh.pos(ids[ids >= 0])
    mark = sh.name_mask(lambda u: _kind(u) in (2, 4) or u == _BACKWARD)
    hit = np.zeros(len(rows), dtype=bool)
    on = rows >= 0
    hit[on] = mark[rows[on]] | sh.under(rows[on], mark)
    return hit


def compiled_pairs(sh: Shared) -> np.ndarray:
    """Boolean over the launch pairs (``Shared.p``): the launch call sits in torch.compile's code (its enclosing slice
    :func:`ran_compiled`): the compiled code launched the GPU op, a CUDA graph's replay included. Once per trace."""
    def build(sh):
        par = sh.p["launch_parent"]
        has = par >= 0
        out = np.zeros(len(par), dtype=bool)
        out[has] = ran_compiled(sh.session, par[has], shared=sh)
        return out
    return sh.cached("compile.compiled_pairs", build)


def staging_pairs(sh: Shared) -> np.ndarray:
    """Boolean over the launch pairs (``Shared.p``): a copy of a CUDA graph's input into its static buffers, i.e. a
    GPU op that :data:`STAGING_OP` launched inside torch.compile's code (:func:`compiled_pairs`); the user's own
    foreach ops (an optimizer's, ``clip_grad_norm_``'s) run the same kernels outside it and copy nothing in. Once per
    trace."""
    def build(sh):
        par = sh.p["launch_parent"]
        out = np.zeros(len(par), dtype=bool)
        out[par >= 0] = sh.name_mask(lambda x: x == STAGING_OP)[sh.pos(par[par >= 0])]
        return out & compiled_pairs(sh)
    return sh.cached("compile.staging_pairs", build)


def compiler_pairs(sh: Shared) -> np.ndarray:
    """Boolean over the launch pairs (``Shared.p``): the GPU op was launched from torch.compile's compiler at work
    (``Shared.compiler_work``: its launch call, or the slice the call sits in, is the compiler's), outside the
    compiled code (a CUDA graph's recording inside a compiled graph's call is the compiled code's, as
    ``launch_paths``' ``from_compiled`` counts it). Once per trace."""
    def build(sh):
        work = sh.compiler_work
        p = sh.p
        if not work.any():
            return np.zeros(len(p["launch_id"]), dtype=bool)
        par = p["launch_parent"]
        hit = work[p["launch_id"]] | ((par >= 0) & work[np.maximum(par, 0)])
        hit[hit] &= ~ran_compiled(sh.session, par[hit], shared=sh)
        return hit
    return sh.cached("compile.compiler_pairs", build)


def compiler_launches(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per step and GPU op name, the ops launched from torch.compile's compiler at work (``Shared.compiler_work``: a
    launch call inside one of its ranges, or in an op inside one): max-autotune's benchmarks of GEMM candidates and
    what runs between them. They are the compiler's, neither the compiled code's nor the eager code's; a launch
    that also lies in compiled code (a CUDA graph's recording inside a compiled graph's call) is the compiled code's,
    as ``launch_paths``' ``from_compiled`` counts it, so that each launch is counted once.

    Returns:
        DataFrame ``step`` (the first step whose window holds the launch call; NA outside every step), ``name``,
        ``category`` (lower case), ``op`` (the innermost ``aten::`` op around the launch call, as ``top_kernels``
        names it; "" for none), ``count``, ``total_us`` (their summed durations), by step, most launched first;
        empty where the trace holds no compiler range.
    """
    sh = shared_for(session, shared)
    cols = ["step", "name", "category", "op", "count", "total_us"]
    hit = compiler_pairs(sh)
    if not hit.any():
        return frame([], cols)
    p = sh.p
    step = sh.pair_step  # (the first step whose window holds the launch call, as launch_latency's)
    op = sh.aten_op_of(p["launch_id"][hit])  # (as top_kernels names a launch's op: its innermost aten:: op)
    df = pd.DataFrame({"step": step[hit], "name": pd.Series(p["gpu_name"][hit], dtype=object),
                       "category": pd.Series(p["gpu_category"][hit], dtype=object),
                       "op": pd.Series(np.where(op >= 0, sh.names_at(np.maximum(op, 0)), ""), dtype=object),
                       "dur": p["gpu_dur"][hit].astype(np.float64) / 1000.0})
    g = df.groupby(["step", "name", "category", "op"], sort=False)["dur"].agg(["size", "sum"]).reset_index()
    g.columns = cols
    g = g.sort_values(["step", "count", "name"], ascending=[True, False, True], kind="stable").reset_index(drop=True)
    g["step"] = g["step"].astype("Int64").where(g["step"] >= 0)
    return g


def compiler_only_kernels(report) -> list[str]:
    """The kernel names whose every launch torch.compile's compiler made while it compiled (``report``'s
    ``compiler_launches`` against its ``kernel_stats``): under max-autotune, its benchmarks of candidates
    (``triton_mm``) and what runs between them, which no step of the workload runs. Question 8 and the Kernel
    variance page read the other kernels first."""
    cl, ks = report.compiler_launches, report.kernel_stats
    if cl.empty or ks.empty:
        return []
    ours = cl[cl["category"] == "kernel"].groupby("name")["count"].sum()
    return [str(n) for n, c in zip(ks["name"], ks["count"]) if ours.get(n, 0) >= c]


def outside_compiler(rows: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The rows of ``launch_latency`` or ``sync_wait`` that are not torch.compile's compiler's own (their ``compiler``
    flag: made while it compiled, benchmarked candidates under max-autotune or recorded a CUDA graph), and how many
    of its own were left out. Only where some rows are the compiler's and some are not: where all are (a trace of
    compiling alone) or none, every row, and 0. Questions 4 and 7 and the Dispatch page read the rows so."""
    theirs = rows["compiler"].astype(bool)
    if theirs.any() and not theirs.all():
        return rows[~theirs], int(theirs.sum())
    return rows, 0


def _compile_cpu_rows(sh: Shared) -> list[tuple]:
    """Per step on a thread, in (ts, id) order: its torch.compile CPU rows, the CPU slices of any thread that belong
    to it (:func:`~profiling_core.analyses.table.cpu_slices_by_step`: the backward's compiled graph runs on the
    autograd engine's thread), as counts and summed ns per kind, and the FX graph hashes called, in order of first
    call ((ts, id) order), joined by ","; the same for the FX graph calls inside a ``CompiledFunctionBackward``
    (the backward's graphs)."""
    steps = [r for r in sh.steps_list if r[6] is not None]
    if not steps:
        return []
    t = sh.slices
    kind_of = np.array([_kind(u) for u in t["name_uniq"]], dtype=np.int8)
    rows, j = cpu_slices_by_step(sh, steps)
    k = kind_of[t["name_codes"][rows]]
    rows, j, k = rows[k > 0], j[k > 0], k[k > 0].astype(np.int64)
    bwd = np.zeros(len(rows), dtype=bool)
    bwd[k == 4] = sh.under(rows[k == 4], sh.name_mask(lambda u: u == _BACKWARD))
    rows, j, k = np.concatenate([rows, rows[bwd]]), np.concatenate([j, j[bwd]]), np.concatenate([k, np.full(
        int(bwd.sum()), 6, dtype=np.int64)])  # kind 6: an FX graph call of a backward (also counted as kind 4)
    n = np.bincount(j * 7 + k, minlength=7 * len(steps)).reshape(len(steps), 7).tolist()
    # a region's time counts once: a compiled region nested in another (compiled code calling a compiled function)
    # lies inside the outer one's time already
    dur = t["dur"][rows].astype(np.float64)
    nested = np.zeros(len(rows), dtype=bool)
    nested[k == 2] = sh.under(rows[k == 2], sh.name_mask(lambda u: _kind(u) == 2))
    dur[nested] = 0.0
    ns = np.bincount(j * 7 + k, weights=dur, minlength=7 * len(steps)).reshape(len(steps), 7).astype(np.int64).tolist()

    def hashes(kind: int) -> list:
        fx, fj = rows[k == kind], j[k == kind]
        order = np.lexsort((fx, t["ts"][fx], fj))  # per step, in (ts, id) order
        out: list[dict] = [{} for _ in steps]
        for nm, jj in zip(sh.names_at(fx[order]).tolist(), fj[order].tolist()):
            out[jj].setdefault(nm[24:].replace("##", "").strip(" "), None)
        return [",".join(h) if h else None for h in out]
    fx_hash, bwd_hash = hashes(4), hashes(6)
    outer = (k == 2) & ~nested
    wait = _backward_wait(sh, rows[outer], j[outer], len(steps))
    return [(step_id, step, ts, dur, n[i][1], ns[i][1], n[i][2], ns[i][2], n[i][3], ns[i][3], n[i][4], ns[i][4],
             fx_hash[i], n[i][6], ns[i][6], bwd_hash[i], n[i][5], int(wait[i]))
            for i, (step_id, step, _nm, ts, dur, _depth, _utid) in enumerate(steps)]


def _backward_wait(sh: Shared, regions: np.ndarray, step_of: np.ndarray, n_steps: int) -> np.ndarray:
    """Per step, the ns of its compiled regions' windows (``regions``: rows of ``sh.slices``; ``step_of``: each one's
    step index) during which the autograd engine ran backward functions (``Shared.backward_work``) on another thread
    of the region's process: a compiled function that calls ``backward()`` waits inside its region while the engine
    runs the backward there, its compiled graph among it (that graph's time is the step's, counted once)."""
    out = np.zeros(n_steps, dtype=np.int64)
    if not len(regions) or not sh.backward_work.any():
        return out
    t = sh.slices
    for u in sorted(set(t["utid"][regions].tolist())):
        on = t["utid"][regions] == u
        s, e = engine_work_beside(sh, u)
        if len(s):
            mine = regions[on]
            np.add.at(out, step_of[on], covered_ns(t["ts"][mine], t["ts"][mine] + t["dur"][mine], s, e))
    return out


def _compile_breakdown_raw(sh: Shared) -> pd.DataFrame:
    """What ``compile_breakdown.sql`` returns: its CPU half from :func:`_compile_cpu_rows`, its GPU half from the
    shared pairs (distinct GPU op and launch ids of the step's pairs)."""
    cols = ["step", "start_ns", "cpu_dur_ns", "cache_lookups", "cache_lookup_ns", "compiled_regions",
            "compiled_region_ns", "prologues", "prologue_ns", "fx_graph_calls", "fx_graph_ns", "fx_graph_hash",
            "backward_fx_graph_calls", "backward_fx_graph_ns", "backward_fx_graph_hash",
            "graph_launches", "backward_wait_ns", "kernels", "memcpys", "memcpy_dtod", "memcpy_htod", "memcpy_dtoh",
            "memsets", "launches", "kernel_launches", "graph_ops", "graph_input_copies", "compiled_kernels"]
    cpu = frame(_compile_cpu_rows(sh), _CPU_COLS)
    if cpu.empty:
        return frame([], cols)
    c = dict(sh.step_counts)
    # the compiled code's GPU ops by how it launched them: replayed from a CUDA graph, copied into a graph's static
    # inputs (STAGING_OP), or launched kernel by kernel
    p = sh.p
    mine = compiled_pairs(sh)
    graph = sh.name_mask(lambda x: x in GRAPH_LAUNCHES)[p["launch_id"]]
    staging = staging_pairs(sh)
    c["graph_ops"] = sh.step_gpu_ops(mine & graph)
    c["graph_input_copies"] = sh.step_gpu_ops(staging)
    c["compiled_kernels"] = sh.step_gpu_ops(mine & ~graph & ~staging & (p["gpu_category"] == "kernel"))
    where = {r[0]: j for j, r in enumerate(sh.steps_list)}  # step slice id -> steps_list index (same window)
    out = []
    for r in cpu.itertuples(index=False):
        j = where[int(r.step_id)]
        out.append((r.step, r.start_ns, r.cpu_dur_ns, r.cache_lookups, r.cache_lookup_ns, r.compiled_regions,
                    r.compiled_region_ns, r.prologues, r.prologue_ns, r.fx_graph_calls, r.fx_graph_ns,
                    r.fx_graph_hash, r.backward_fx_graph_calls, r.backward_fx_graph_ns, r.backward_fx_graph_hash,
                    r.graph_launches, r.backward_wait_ns,
                    *(int(c[x][j]) for x in ("kernels", "memcpys", "memcpy_dtod", "memcpy_htod", "memcpy_dtoh",
                                             "memsets", "launches", "kernel_launches", "graph_ops",
                                             "graph_input_copies", "compiled_kernels"))))
    return frame(out, cols)


def compile_in_measured_steps(report) -> pd.DataFrame:
    """``report.compile_breakdown``'s rows of the steps every per-step figure reads (``steps.measured_steps``: the
    steady state's): the per-step figures of questions 9 and 10 and of the compile rules rest on these. An empty step
    the profiler closed right after it began counts as no step (two steps of 30 launches and three empty ones: 30
    launches per step, not the median 0); a step in which torch.compile's compiler ran (the first call's compile, a
    CUDA graph's recording) is left out where a step without it remains (``steps.compile_steps`` names them): its
    compile is no per-step cost (a cold max-autotune run's median step was its 16.67 ms recording, against 0.38 ms
    for the step that replays the graph); and the first of 3 or more steps, whose start-up effects question 3
    reads."""
    from .steps import measured_steps
    cb = report.compile_breakdown
    if not len(cb):
        return cb
    return cb[cb["step"].isin(measured_steps(report.steps)["step"])]


def compile_breakdown(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per step: torch.compile's CPU rows and the GPU work the step launched.

    A CPU row counts with the first step (time order) whose window holds its start, on whatever thread it ran
    (:func:`~profiling_core.analyses.table.cpu_slices_by_step`): a training step's backward runs its compiled graph
    (``CompiledFunctionBackward``, its ``## Call CompiledFxGraph`` and, under reduce-overhead, its
    ``cudaGraphLaunch``) on the autograd engine's thread, and those rows are the step's.

    Args:
        session: a trace session.

    Returns:
        DataFrame in step order with ``step``, ``start_ns``, ``cpu_dur_us``; counts and total µs of
        ``TorchDynamo Cache Lookup`` (``cache_lookups``, ``cache_lookup_us``), ``Torch-Compiled Region``
        (``compiled_regions``, every region slice; ``compiled_region_us``, the outermost ones' time: a region nested
        in another lies inside its time), ``AOTDispatcher Runtime Wrapper Prologue`` (``prologues``,
        ``prologue_us``), ``## Call CompiledFxGraph <hash>`` (``fx_graph_calls``, ``fx_graph_us``,
        ``fx_graph_hash``: the hash(es) called in that step, comma-separated in order of first call, NA in eager
        steps), of them those inside a ``CompiledFunctionBackward`` (the backward's graphs:
        ``backward_fx_graph_calls``, ``backward_fx_graph_us``, ``backward_fx_graph_hash``, NA without any);
        ``backward_wait_us``: the part of the compiled regions' windows in which the autograd engine ran the
        backward on another thread (a compiled function that calls ``backward()`` waits for it inside its region);
        ``graph_launches`` (cudaGraphLaunch calls); GPU ops launched in the step: ``kernels``, ``memcpys``,
        ``memcpy_dtod``, ``memcpy_htod``, ``memcpy_dtoh``, ``memsets``; ``launches`` (calls that launched GPU
        work) and ``kernel_launches``; of the GPU ops, those torch.compile's code launched (:func:`compiled_pairs`)
        by how: ``graph_ops`` (replayed from a CUDA graph: a graph launch call), ``graph_input_copies`` (launched by
        :data:`STAGING_OP`, which copies a graph's inputs into its static buffers) and ``compiled_kernels`` (the
        other kernels, launched one by one). All zeros for an eager trace; empty without steps.
    """
    df = _compile_breakdown_raw(shared_for(session, shared))
    df = ints(df, *_COUNTS)
    df = nullable_int(df, "start_ns")
    df = us(df, {"cpu_dur_ns": "cpu_dur_us", "cache_lookup_ns": "cache_lookup_us",
                 "compiled_region_ns": "compiled_region_us", "prologue_ns": "prologue_us",
                 "fx_graph_ns": "fx_graph_us", "backward_fx_graph_ns": "backward_fx_graph_us",
                 "backward_wait_ns": "backward_wait_us"})
    for c in ("fx_graph_hash", "backward_fx_graph_hash"):
        df[c] = df[c].astype("object").where(df[c].notna(), None)
    return df[["step", "start_ns", "cpu_dur_us", "cache_lookups", "cache_lookup_us", "compiled_regions",
               "compiled_region_us", "prologues", "prologue_us", "fx_graph_calls", "fx_graph_us", "fx_graph_hash",
               "backward_fx_graph_calls", "backward_fx_graph_us", "backward_fx_graph_hash", "backward_wait_us",
               "graph_launches", "kernels", "memcpys", "memcpy_dtod", "memcpy_htod", "memcpy_dtoh", "memsets",
               "launches", "kernel_launches", "graph_ops", "graph_input_copies", "compiled_kernels"]]


def compile_payoff(eager_warmup_s: float, compiled_warmup_s: float, eager_step_us: float,
                   compiled_step_us: float, warmup_calls: Optional[int] = None,
                   traced_compile_s: Optional[float] = None) -> dict:
    """What torch.compile costs once against what it saves per step, on the CPU, from an eager and a compiled run
    of the same workload with the same number of warm-up calls.

    The compile happens in the compiled run's first warm-up call, so its one-time cost is the compiled run's warm-up
    time minus the eager run's (the same calls, eagerly). It pays off after ``ceil(cost / saving)`` steps when the
    compiled step is cheaper on the CPU, and never otherwise. Runs without warm-up calls (``warmup_calls`` 0: cold
    runs) compiled in their profiled steps, not in a warm-up: their warm-up times hold no compile. Their compile
    is then the time their recorded steps spent inside torch.compile's compiler ranges (``traced_compile_s``, the
    sum of ``steps.compile_us``), where the trace holds it; where it does not (the schedule did not record the
    step that compiled), nothing is said of its cost (``measured`` False), not a cost of 0 s paid back after 0
    steps. Nor is it where the compiled
    run's warm-up took no longer than the eager one's: a compile, even one served from a warm cache, costs time, so
    a difference of 0 s or less says the runs' noise is larger than the compile, not that it cost nothing (or
    less than nothing).

    Args:
        eager_warmup_s, compiled_warmup_s: the runs' ``warmup_s`` timings (meta.json), seconds.
        eager_step_us, compiled_step_us: their median CPU time per profiled step, µs.
        warmup_calls: the runs' number of warm-up calls (their config's ``warmup``), where known.
        traced_compile_s: the compiled run's time in the compiler's ranges in its recorded steps, s, where known.

    Returns:
        ``compile_s`` (one-time cost, s; None where not measured), ``saving_us_per_step`` (eager − compiled;
        negative: compiled costs more), ``payoff_steps`` (steps after which compiling has paid for itself; None:
        never, or not measured), ``measured`` (False where neither the warm-up nor the trace held the compile, or
        its cost is lost in the noise), ``source`` (``"warm-up"`` or ``"trace"`` where measured, else None), ``why``
        (where not measured: ``"no warm-up"`` or ``"no slower"``; else None).
    """
    saving = float(eager_step_us) - float(compiled_step_us)
    source = "warm-up"
    if warmup_calls is not None and int(warmup_calls) == 0:
        if not (traced_compile_s is not None and traced_compile_s > 0):
            return {"compile_s": None, "saving_us_per_step": saving, "payoff_steps": None, "measured": False,
                    "source": None, "why": "no warm-up"}
        compile_s, source = float(traced_compile_s), "trace"
    else:
        compile_s = float(compiled_warmup_s) - float(eager_warmup_s)
    if not compile_s > 0:
        return {"compile_s": None, "saving_us_per_step": saving, "payoff_steps": None, "measured": False,
                "source": None, "why": "no slower"}
    if saving > 0:
        steps = max(0, math.ceil(round(compile_s * 1e6 / saving, 6)))  # (rounded: 500.0000000000004 is 500)
    else:
        steps = None
    return {"compile_s": compile_s, "saving_us_per_step": saving, "payoff_steps": steps, "measured": True,
            "source": source, "why": None}


_TRITON = re.compile(r"^triton_(poi|red|per|tem|for)_fused_(.+?)(?:_\d+)?$")
_TRITON_KINDS = {"poi": "pointwise", "red": "reduction", "per": "persistent reduction", "tem": "template",
                 "for": "foreach"}
# aten op names with underscores that Inductor writes into kernel names (beside the trace's own ops)
_MULTIWORD = ("_unsafe_view", "native_layer_norm", "layer_norm", "native_dropout", "_softmax", "_log_softmax",
              "scaled_dot_product_attention", "native_batch_norm", "native_group_norm", "index_put", "_to_copy",
              "embedding_dense_backward", "constant_pad_nd", "slice_scatter", "select_scatter", "as_strided",
              "new_zeros", "new_empty", "full_like", "zeros_like", "ones_like", "rand_like", "index_select",
              "gelu_backward", "threshold_backward", "silu_backward", "sigmoid_backward", "tanh_backward")


def fused_ops(kernel: str, known: Iterable[str] = ()) -> Optional[tuple[str, list[str]]]:
    """(kind, ops) of an Inductor Triton kernel name, None for any other name.

    Inductor names a kernel ``triton_<kind>_fused_<op>_<op>..._<n>``: the origin ops joined by ``_``. Op names hold
    underscores too, so the words are joined back into names of ``known`` (e.g. the eager run's aten ops, without
    ``aten::``) and a fixed list of common multi-word ops. The rule: read the words left to right; at each word, the
    longest run of two or more words from there that joins (with ``_``) into one of those names is one op, and a word
    that starts no such run is one op by itself. (A word is what lies between underscores; an empty one marks an op
    name that starts with ``_``: ``fused__unsafe_view_0`` is ``_unsafe_view``.)

    Linear in the words and in the names' total length, however long a kernel or op name is: the longest name
    starting at each word comes from one pass over the words from the end (:func:`_longest_names`)."""
    m = _TRITON.match(kernel or "")
    if m is None:
        return None
    names = {tuple(_words(k.removeprefix("aten::"))) for k in known if isinstance(k, str)}
    names |= {tuple(_words(k)) for k in _MULTIWORD}
    words = _words(m.group(2))
    longest = _longest_names(words, [n for n in names if len(n) > 1])
    ops, i = [], 0
    while i < len(words):
        j = i + (longest[i] or 1)
        ops.append("_".join(words[i:j]))
        i = j
    return _TRITON_KINDS[m.group(1)], ops


def _words(name: str) -> list[str]:
    """``name`` split at underscores, an empty word joined to the next (``a__b``: ``a``, ``_b``)."""
    words: list[str] = []
    for w in name.split("_"):
        if words and words[-1] == "":
            words[-1] = "_" + w
        else:
            words.append(w)
    return words


def _longest_names(words: list[str], names: Iterable[tuple[str, ...]]) -> list[int]:
    """For each position of ``words``, the length (in words) of the longest of ``names`` that starts there; 0 where
    none does. An Aho-Corasick automaton over the names reversed, run over the words from the last: at each word its
    state is the longest reversed name prefix that ends there, and the longest whole name is on its fallback chain
    (kept per state, so each word costs O(1) amortised)."""
    goto: list[dict[str, int]] = [{}]
    depth, ends = [0], [False]
    for name in names:
        s = 0
        for w in reversed(name):
            t = goto[s].get(w)
            if t is None:
                t = len(goto)
                goto[s][w] = t
                goto.append({})
                depth.append(depth[s] + 1)
                ends.append(False)
            s = t
        ends[s] = True
    fail, best = [0] * len(goto), [0] * len(goto)
    queue = deque(goto[0].values())
    while queue:  # breadth first: a state's fallback is shallower, so its best is known
        s = queue.popleft()
        best[s] = depth[s] if ends[s] else best[fail[s]]
        for w, t in goto[s].items():
            f = fail[s]
            while f and w not in goto[f]:
                f = fail[f]
            fail[t] = goto[f][w] if s and w in goto[f] else 0
            queue.append(t)
    out, s = [0] * len(words), 0
    for i in range(len(words) - 1, -1, -1):
        w = words[i]
        while s and w not in goto[s]:
            s = fail[s]
        s = goto[s].get(w, 0)
        out[i] = best[s]
    return out


def triton_fusions(session, known_ops: Iterable[str] = (), shared: Shared | None = None) -> pd.DataFrame:
    """The Triton kernels torch.compile made, and which aten ops each replaced (:func:`fused_ops`).

    Args:
        session: a trace session (of the compiled run).
        known_ops: op names to join kernel-name words into, e.g. the eager run's aten ops; the compiled trace's own
            aten ops are always used.

    Returns:
        One row per Triton kernel name, by total time: ``kernel``, ``kind`` (pointwise, reduction, persistent
        reduction, template, foreach), ``fused_ops`` (the ops joined by " + "), ``n_ops``, ``count``, ``per_step``
        (count ÷ steps, or the count without steps), ``mean_us``, ``total_us``. Empty without Triton kernels.
    """
    sh = shared_for(session, shared)
    cols = ["kernel", "kind", "fused_ops", "n_ops", "count", "per_step", "mean_us", "total_us"]
    ops = sh.gpu_ops_raw
    k = ops[ops["category"] == "kernel"]
    if k.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    own = [n for n in sh.tables.name.uniq if isinstance(n, str) and n.startswith("aten::")]
    vocab = [*known_ops, *own]
    n_steps = len(sh.steps_list) or 1
    rows = []
    for name, grp in k.groupby(k["name"].astype(object), sort=False):
        got = fused_ops(str(name), vocab)
        if got is None:
            continue
        durs = grp["dur_ns"].astype(float) / 1000
        rows.append({"kernel": str(name), "kind": got[0], "fused_ops": " + ".join(got[1]), "n_ops": len(got[1]),
                     "count": len(grp), "per_step": len(grp) / n_steps, "mean_us": float(durs.mean()),
                     "total_us": float(durs.sum())})
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    return pd.DataFrame(rows).sort_values(["total_us", "kernel"], ascending=[False, True]).reset_index(drop=True)
