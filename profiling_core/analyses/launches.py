"""How work reaches the GPU: launch latency, launch paths, the dispatch chain (study questions 4, 5 and 6)."""
from __future__ import annotations

from typing import Optional

import pandas as pd

import numpy as np

from ._common import ints, nullable_int, us
from .compile import compiled_pairs, compiler_pairs
from ._shared import _RUNTIME_CATS, Coded, IntsOrNull, Shared, frame, frame_cols, shared_for, take_rows
from .table import _cpu_own_ns, autograd_wait

__all__ = ["launch_latency", "launch_paths", "launch_ops", "dispatch_chain", "dispatch_chains"]


def _launch_latency_raw(sh: Shared) -> pd.DataFrame:
    """Each launch pair whose GPU op is on a GPU lane (a thread track), in (GPU op ts, id) order, with ns columns."""
    cols = ["gpu_id", "gpu_name", "gpu_category", "gpu_start_ns", "gpu_dur_ns", "stream", "launch_id", "launch_name",
            "launch_start_ns", "launch_dur_ns", "latency_ns", "paired_by", "step", "occupancy_query_before", "compiler"]
    p = sh.p
    if len(p["gpu_id"]) == 0:
        return frame([], cols)
    keep, stream = sh.gpu_lane(p["gpu_id"])
    # the step of a launch: the first step (time order) whose window holds it
    at = sh.pair_step
    step = IntsOrNull(at, at < 0) if (at >= 0).any() else np.full(len(p["gpu_id"]), None, dtype=object)
    idx = np.flatnonzero(keep)
    idx = idx[np.lexsort((p["gpu_id"][idx], p["gpu_ts"][idx]))]  # ORDER BY g.ts, g.id (then launch_id)
    return frame_cols({
        "gpu_id": p["gpu_id"][idx], "gpu_name": sh.pair_codes("gpu_name").take(idx),
        "gpu_category": sh.pair_codes("gpu_category").take(idx),
        "gpu_start_ns": p["gpu_ts"][idx], "gpu_dur_ns": p["gpu_dur"][idx], "stream": take_rows(stream, idx),
        "launch_id": p["launch_id"][idx], "launch_name": sh.pair_codes("launch_name").take(idx),
        "launch_start_ns": p["launch_ts"][idx], "launch_dur_ns": p["launch_dur"][idx],
        "latency_ns": p["gpu_ts"][idx] - p["launch_ts"][idx], "paired_by": sh.pair_codes("paired_by").take(idx),
        "step": take_rows(step, idx), "occupancy_query_before": sh.cached("occupancy_sized", _sized_by_query)[idx],
        "compiler": compiler_pairs(sh)[idx]})


def launch_latency(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per GPU op (kernel, memcpy, memset): the call that launched it and the delay until the GPU started it.

    Launch call and GPU op are paired by the trace's flow events (``ac2g``); ops without a flow are paired by
    ``args.correlation`` (2021-era traces whose ``async`` flows trace_processor does not import).

    Args:
        session: a trace session.

    Returns:
        DataFrame in GPU time order: ``gpu_id``, ``gpu_name``, ``gpu_category``, ``stream``, ``launch_id``,
        ``launch_name``, ``launch_start_ns``, ``gpu_start_ns``, ``launch_dur_us``, ``gpu_dur_us``, ``latency_us``
        (GPU op start − launch call start), ``paired_by`` (``flow`` or ``correlation``), ``step`` (the step whose
        window holds the launch, or NA), ``occupancy_query_before`` (an occupancy query sized the launch: the rule of
        :func:`launch_paths`), ``compiler`` (torch.compile's compiler launched it while it worked:
        :func:`~profiling_core.analyses.compile.compiler_pairs`, its benchmarks under max-autotune). Empty on
        CPU-only traces.
    """
    df = _launch_latency_raw(shared_for(session, shared))
    df = ints(df, "gpu_id", "launch_id")
    df = nullable_int(df, "stream", "launch_start_ns", "gpu_start_ns", "step")
    for c in ("gpu_name", "gpu_category", "launch_name", "paired_by"):
        df[c] = df[c].astype("object")
    df = us(df, {"launch_dur_ns": "launch_dur_us", "gpu_dur_ns": "gpu_dur_us", "latency_ns": "latency_us"})
    return df[["gpu_id", "gpu_name", "gpu_category", "stream", "launch_id", "launch_name", "launch_start_ns",
               "gpu_start_ns", "launch_dur_us", "gpu_dur_us", "latency_us", "paired_by", "step",
               "occupancy_query_before", "compiler"]]


def launch_ops(session, launch_ids, shared: Shared | None = None) -> np.ndarray:
    """The CPU op behind each launch call: the innermost ``aten::`` op enclosing it on its thread (its nearest
    ``aten::`` ancestor).

    Args:
        session: a trace session.
        launch_ids: slice ids of launch calls (e.g. ``launch_latency``'s ``launch_id``).

    Returns:
        An int64 array, one entry per launch id: the slice id of that op, -1 where no ``aten::`` op encloses the
        call (a CUDA graph replay, a Triton kernel launched from compiled code).
    """
    sh = shared_for(session, shared)
    rows = sh.pos(np.asarray(launch_ids, dtype=np.int64))
    op = sh.aten_op_of(rows)
    return np.where(op >= 0, sh.slices["id"][np.maximum(op, 0)], -1).astype(np.int64)


OCCUPANCY_PREFIXES = ("cudaOccupancy", "hipOccupancy", "cuOccupancy")
"""The names of occupancy queries (``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` and kin)."""


def _sized_by_query(sh: Shared) -> np.ndarray:
    """Per launch pair: whether an occupancy query sized its launch. A query sizes the kernel launch that follows it
    under the same parent op: a kernel's launch call counts when a query under its parent (``Shared.p``'s
    ``launch_parent``) started after the previous kernel launch call under that parent (or there is none) and no
    later than it. (cuBLAS queries before the GEMM it launches, at times with a memset of its workspace between;
    the kernels launched after that GEMM under the same op, a split-K reduction, were not sized by it.) Copies and
    memsets are sized by nothing. A query's op is its nearest ancestor that is not a runtime call: a zero-length
    query written at the microsecond of a zero-length ``cudaPeekAtLastError`` is nested in that call."""
    p, t = sh.p, sh.slices
    n = len(p["gpu_id"])
    out = np.zeros(n, dtype=bool)
    occ = np.flatnonzero(sh.name_mask(lambda x: isinstance(x, str) and x.startswith(OCCUPANCY_PREFIXES))
                         & (t["parent"] >= 0))
    has = (p["launch_parent"] >= 0) & (p["gpu_category"] == "kernel")
    if not len(occ) or not has.any():
        return out
    calls, first = np.unique(p["launch_id"][has], return_index=True)  # each launch call once
    c_par = p["launch_parent"][has][first]
    q_par = t["ppos"][occ]
    runtime = sh.cat_mask(lambda c: isinstance(c, str) and c.lower() in _RUNTIME_CATS)
    up = np.flatnonzero(runtime[q_par])
    while len(up):  # climb past the runtime calls a query is nested in
        q_par[up] = t["ppos"][q_par[up]]
        up = up[q_par[up] >= 0]
        up = up[runtime[q_par[up]]]
    keep = q_par >= 0
    occ, q_par = occ[keep], q_par[keep]
    # the queries and the launch calls, by parent, then start (a query at a call's own start before it), then row
    row = np.concatenate([occ, calls])
    par = np.concatenate([q_par, c_par])
    ts = np.concatenate([t["ts"][occ], t["ts"][calls]])
    kind = np.concatenate([np.zeros(len(occ), dtype=np.int64), np.ones(len(calls), dtype=np.int64)])
    order = np.lexsort((row, kind, ts, par))
    row, par, ts, kind = row[order], par[order], ts[order], kind[order]
    pos = np.arange(len(row))
    last_q = np.maximum.accumulate(np.where(kind == 0, pos, -1))  # the latest query at or before each event
    prev_c = np.r_[-1, np.maximum.accumulate(np.where(kind == 1, pos, -1))[:-1]]  # the latest call before it
    is_call = kind == 1
    q_ok = (last_q >= 0) & (par[np.maximum(last_q, 0)] == par)  # a query under the same parent
    c_in = (prev_c >= 0) & (par[np.maximum(prev_c, 0)] == par)  # a previous call under the same parent
    sized = is_call & q_ok & (~c_in | (last_q > prev_c))
    sized_rows = row[sized]
    out[has] = np.isin(p["launch_id"][has], sized_rows)
    return out


def _launch_path_raw(sh: Shared) -> pd.DataFrame:
    """What ``launch_path.sql`` returns (same groups and sums; row order by name, API, parent op), from the shared
    launch pairs and slice tree.

    Vectorised: each pair's parent op name and whether an occupancy query sized its launch (:func:`_sized_by_query`);
    the groups are the distinct (GPU op name,
    category, API, parent op) in order of first appearance (codes from ``pd.factorize``), as a dict would hold them."""
    cols = ["gpu_name", "gpu_category", "launch_api", "parent_op", "count", "with_occupancy_query", "from_compiled"]
    p = sh.p
    n = len(p["gpu_id"])
    if n == 0:
        return frame([], cols)
    t = sh.slices
    par = p["launch_parent"]
    has = par >= 0
    prow = sh.pos(par[has])
    before = sh.cached("occupancy_sized", _sized_by_query)
    # the parent op's name ("" without a parent or for a NULL name) as codes into the slice names: "" has one code
    uniq = t["name_uniq"]  # the distinct names, then None (code -1)
    labels = np.empty(len(uniq) + 1, dtype=object)
    labels[:len(uniq)] = uniq
    labels[len(uniq)] = ""
    empty = next((j for j, u in enumerate(uniq) if u == ""), len(uniq))  # the code of ""
    pcode = np.full(n, empty, dtype=np.int64)
    pc = t["name_codes"][prow]
    pcode[has] = np.where(pc < 0, empty, pc)
    pname = Coded(pcode, labels)
    keys = (sh.pair_codes("gpu_name"), sh.pair_codes("gpu_category"), sh.pair_codes("launch_name"), pname)
    g = np.zeros(n, dtype=np.int64)
    for col in keys:  # one code per distinct tuple, in order of first appearance (distinct values: distinct codes)
        g, _ = pd.factorize(g * (len(col.uniq) + 2) + (col.codes + 1))
    first = np.unique(g, return_index=True)[1]
    count = np.bincount(g)
    with_occ = np.bincount(g[before], minlength=len(count))
    compiled = compiled_pairs(sh)
    from_compiled = np.bincount(g[compiled], minlength=len(count))
    vals = [col.values()[first].tolist() for col in keys]
    rows = [(*k, int(a), int(b), int(c)) for *k, a, b, c in zip(*vals, count.tolist(), with_occ.tolist(),
                                                                  from_compiled.tolist())]
    rows.sort(key=lambda r: (r[0] is not None, r[0] or "", r[2] is not None, r[2] or "", r[3]))
    return frame(rows, cols)


def launch_paths(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per GPU op name: which API call(s) launched it, from which CPU op, and whether an occupancy query preceded.

    An occupancy query is a ``cudaOccupancy*`` / ``cuOccupancy*`` / ``hipOccupancy*`` call under the same parent op
    as a kernel's launch call, started after the previous kernel launch call under that op and no later than this
    one: it sizes the kernel launch that follows it (the A100 pattern of the study; cuBLAS 13 on an H200 launches GEMMs with
    ``cuLaunchKernelEx`` and no such query).

    Args:
        session: a trace session.

    Returns:
        DataFrame with ``name``, ``category``, ``launch_apis`` (distinct API names joined by ``", "``),
        ``parent_ops`` (distinct parent op names joined by ``", "``), ``count`` (launches of that op),
        ``occupancy_queries`` (launches preceded by an occupancy query), ``occupancy_query_before`` (bool) and
        ``from_compiled`` (launches made from torch.compile's code: a call under a compiled region, a compiled graph's
        call or a compiled backward, :func:`~profiling_core.analyses.compile.ran_compiled`), sorted by name.
        Empty on CPU-only traces.
    """
    df = _launch_path_raw(shared_for(session, shared))
    cols = ["name", "category", "launch_apis", "parent_ops", "count", "occupancy_queries", "occupancy_query_before",
            "from_compiled"]
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    df = ints(df, "count", "with_occupancy_query", "from_compiled")
    # one row per (name, category) group, in pandas' group order (sorted; groups with a missing key left out)
    gb = df.groupby(["gpu_name", "gpu_category"], sort=True)
    which = gb.ngroup().fillna(-1).astype("int64").to_numpy()  # NaN: a row of no group
    apis, parents = df["launch_api"].astype(str).tolist(), df["parent_op"].astype(str).tolist()
    counts, occs, comp = df["count"].tolist(), df["with_occupancy_query"].tolist(), df["from_compiled"].tolist()
    members: list[list[int]] = [[] for _ in range(gb.ngroups)]
    for j, w in enumerate(which.tolist()):
        if w >= 0:
            members[w].append(j)
    rows = []
    for (name, cat), js in zip(gb.size().index.tolist(), members):
        occ = int(sum(occs[j] for j in js))
        rows.append({
            "name": name, "category": cat,
            "launch_apis": ", ".join(sorted({apis[j] for j in js})),
            "parent_ops": ", ".join(sorted(p for p in {parents[j] for j in js} if p)),
            "count": int(sum(counts[j] for j in js)), "occupancy_queries": occ, "occupancy_query_before": occ > 0,
            "from_compiled": int(sum(comp[j] for j in js)),
        })
    return pd.DataFrame(rows, columns=cols)


def _dispatch_cpu(sh: Shared) -> dict | None:
    """The rows of ``dispatch_cpu.sql`` (CPU half of the dispatch chain) from the shared slice tree, same order, as
    arrays: ``row`` (of ``slices``), ``step`` (N), ``step_slice`` (the id of the step slice whose window holds the
    row), ``depth`` (below the step), ``parent`` (-1 for NULL: the step itself, or no parent); None without steps on
    a thread.

    Each step's slices are a range of its thread's slices sorted by start (``searchsorted``), then those ending by
    the step's end; all steps' rows are then ordered by (step, ts, depth, track_id, id) with one stable lexsort."""
    steps = [r for r in sh.steps_list if r[6] is not None]
    if not steps:
        return None
    t = sh.slices
    ts_, dur_, id_ = t["ts"], t["dur"], t["id"]
    lanes = {}
    for u in {r[6] for r in steps}:
        idx = np.flatnonzero(t["utid"] == u)
        idx = idx[np.lexsort((id_[idx], t["track_id"][idx], ts_[idx]))]
        lanes[u] = (idx, ts_[idx])
    sel, k = [], []
    for j, (_sid, _step, _nm, ts, dur, _sdepth, utid) in enumerate(steps):
        idx, lts = lanes[utid]
        lo = int(np.searchsorted(lts, ts, side="left"))
        hi = int(np.searchsorted(lts, ts + dur, side="right"))
        s = idx[lo:hi]
        s = s[ts_[s] + dur_[s] <= ts + dur]
        sel.append(s)
        k.append(np.full(len(s), j, dtype=np.int64))
    rows, k = np.concatenate(sel), np.concatenate(k)
    step_n = np.array([r[1] for r in steps], dtype=np.int64)[k]
    depth = t["depth"][rows] - np.array([r[5] for r in steps], dtype=np.int64)[k]
    step_slice = np.array([r[0] for r in steps], dtype=np.int64)[k]
    parent = np.where(id_[rows] == step_slice, -1, t["parent"][rows])
    order = np.lexsort((id_[rows], t["track_id"][rows], depth, ts_[rows], step_n))  # stable: ties keep step order
    return {"row": rows[order], "step": step_n[order], "step_slice": step_slice[order], "depth": depth[order],
            "parent": parent[order]}


def _dispatch_chain_cols(sh: Shared) -> dict | None:
    """The columns of ``dispatch_chain.sql``'s rows as arrays (None without CPU rows): the CPU rows from
    ``dispatch_cpu``, each launch's GPU ops from the pairs.

    GPU rows follow their launch's CPU row (in gpu_id order); then one stable sort by (step, lane, start, depth)."""
    c = _dispatch_cpu(sh)
    if c is None or len(c["row"]) == 0:
        return None
    t, p = sh.slices, sh.p
    rows = c["row"]
    cid = t["id"][rows]
    w, g = sh.launch_pairs_of(cid)  # the GPU ops of each CPU row that launched some
    nc, ng = len(rows), len(g)
    step = np.concatenate([c["step"], c["step"][w]])
    step_slice = np.concatenate([c["step_slice"], c["step_slice"][w]])
    start = np.concatenate([t["ts"][rows], p["gpu_ts"][g]])
    depth = np.concatenate([c["depth"], c["depth"][w] + 1])
    lane = np.concatenate([np.zeros(nc, dtype=np.int64), np.ones(ng, dtype=np.int64)])
    order = np.lexsort((depth, start, lane, step))  # ORDER BY step, lane, start, depth (stable on ties)
    parent = np.concatenate([c["parent"], cid[w]])[order]
    every = np.concatenate([rows, sh.pos(p["gpu_id"][g])])[order]  # GPU rows: the GPU op's own slice (name, category)
    return {
        "step": step[order], "step_slice_id": step_slice[order],
        "id": np.concatenate([cid, p["gpu_id"][g]])[order],
        "parent_id": IntsOrNull(parent, parent < 0), "depth": depth[order],
        "name": sh.name_codes_at(every), "category": sh.category_codes_at(every),
        "start_ns": start[order], "dur_ns": np.concatenate([t["dur"][rows], p["gpu_dur"][g]])[order],
        "lane": np.array(["cpu", "gpu"], dtype=object)[lane[order]]}


def dispatch_chains(session, shared: Shared | None = None) -> pd.DataFrame:
    """The dispatch tree of every step (see :func:`dispatch_chain`), all steps in one frame with a ``step`` column,
    ``wait_us``: of a CPU slice's own time, what passed while the autograd engine ran the backward on another
    thread (``table.autograd_wait``: a wait, counted on the engine's thread), 0 for GPU rows, and ``own_us``: a CPU
    slice's own time less that wait, by the profiler table's rule (``table._cpu_own_ns``: its duration less its
    children's, or, for a slice that could not nest among its thread's Python frames, less the frames and ops below
    the frames around it), as ``cpu_own_times`` counts it; a GPU row's duration."""
    sh = shared_for(session, shared)
    cols = _dispatch_chain_cols(sh)
    names = ["step", "step_slice_id", "id", "parent_id", "depth", "name", "category", "lane", "start_ns", "dur_us",
             "wait_us", "own_us"]
    if cols is None:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in names})
    # One row per slice of every step (83k on a 93 MB trace): built once from the arrays with its final dtypes.
    cols["start_ns"] = IntsOrNull(cols["start_ns"], np.zeros(len(cols["start_ns"]), dtype=bool))
    cols["dur_us"] = cols.pop("dur_ns").astype("float64") / 1000.0
    ids = np.asarray(cols["id"], dtype=np.int64)  # (the slices' ids are their rows)
    cpu = cols["lane"] == "cpu"
    wait = np.where(cpu, autograd_wait(sh)[ids], 0)
    cols["wait_us"] = wait / 1000.0
    own = _cpu_own_ns(sh)[1][ids]
    cols["own_us"] = np.where(cpu, (own - wait) / 1000.0, cols["dur_us"])
    return frame_cols({c: cols[c] for c in names})


def dispatch_chain(session, step: Optional[int] = None, chains: pd.DataFrame | None = None) -> pd.DataFrame:
    """The slice tree of one step: the CPU slices inside it on its thread, then the GPU ops its launches produced.

    Typical eager chain: ProfilerStep#N → matmul_add → aten::matmul → aten::mm → cuLaunchKernelEx → GEMM kernel.

    Args:
        session: a trace session.
        step: the N of ``ProfilerStep#N``; None takes the first step in time order.
        chains: the result of :func:`dispatch_chains` when already computed.

    Returns:
        DataFrame with ``step``, ``step_slice_id`` (the id of the ProfilerStep slice whose window, on its thread,
        holds the row: where ranks' traces were merged into one file, each rank's step N is a slice of its own, and
        the chain of N holds both), ``id``, ``parent_id`` (NA for the step itself; a GPU op's parent is its launch
        call), ``depth`` (0 for the step), ``name``, ``category``, ``lane`` (``cpu`` or ``gpu``), ``start_ns``,
        ``dur_us``; CPU rows in time order, then GPU rows. Empty when the trace has no steps.

    Raises:
        ValueError: ``step`` is not a step of this trace (the message lists the steps).
    """
    df = dispatch_chains(session) if chains is None else chains
    if df.empty:
        return df.copy()
    known = list(dict.fromkeys(df.sort_values("start_ns")["step"].tolist()))
    if step is None:
        step = known[0]
    if step not in known:
        raise ValueError(f"no ProfilerStep#{step} in this trace; steps: {', '.join(map(str, known))}")
    return df[df["step"] == step].reset_index(drop=True)


def chain_subtree(chain: pd.DataFrame, name: str, occurrence: int = 0) -> pd.DataFrame:
    """The part of one step's :func:`dispatch_chain` under an op: the ``occurrence``-th slice (time order, from 0)
    named ``name``, everything nested in it on the CPU, and the GPU ops its launches produced, with ``depth``
    re-counted from that op (0).

    Raises:
        ValueError: no such slice in the chain (the message says how many there are).
    """
    cpu = chain[chain["lane"] == "cpu"].sort_values(["start_ns", "depth"], kind="stable")
    hits = cpu[cpu["name"] == name]
    if occurrence < 0 or occurrence >= len(hits):
        raise ValueError(f"the chain holds {len(hits)} slice(s) named {name!r}; asked for number {occurrence}")
    root = hits.iloc[occurrence]
    keep = {int(root["id"])}
    parents = dict(zip(chain["id"].astype(int), chain["parent_id"]))
    for i in chain["id"].astype(int).tolist():  # walk each row's ancestors: kept if root is among them
        p, path = parents.get(i), [i]
        while p is not None and not pd.isna(p) and int(p) not in keep:
            path.append(int(p))
            p = parents.get(int(p))
        if p is not None and not pd.isna(p) and int(p) in keep:
            keep.update(path)
    out = chain[chain["id"].astype(int).isin(keep)].copy()
    out["depth"] = out["depth"] - int(root["depth"])
    return out
