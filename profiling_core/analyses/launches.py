"""How work reaches the GPU: launch latency, launch paths, the dispatch chain (study questions 4, 5 and 6)."""
from __future__ import annotations

from typing import Optional

import pandas as pd

import numpy as np

from ._common import ints, nullable_int, us
from ._shared import Shared, frame, shared_for

__all__ = ["launch_latency", "launch_paths", "dispatch_chain", "dispatch_chains"]


def _launch_latency_raw(sh: Shared) -> pd.DataFrame:
    """What ``launch_latency.sql`` returns, from the shared pairs (GPU ops on thread tracks only, as its join)."""
    cols = ["gpu_id", "gpu_name", "gpu_category", "gpu_start_ns", "gpu_dur_ns", "stream", "launch_id", "launch_name",
            "launch_start_ns", "launch_dur_ns", "latency_ns", "paired_by", "step"]
    p = sh.p
    if len(p["gpu_id"]) == 0:
        return frame([], cols)
    stream_of = sh.stream_of
    keep = np.fromiter((g in stream_of for g in p["gpu_id"].tolist()), dtype=bool, count=len(p["gpu_id"]))
    # the step of a launch: the first step (time order) whose window holds it
    step = np.full(len(p["gpu_id"]), None, dtype=object)
    i, k = sh.pair_steps
    if len(i):
        order = np.lexsort((k, i))
        i, k = i[order], k[order]
        first = np.ones(len(i), dtype=bool)
        first[1:] = i[1:] != i[:-1]
        step[i[first]] = np.array([r[1] for r in sh.steps_list], dtype=object)[k[first]]
    idx = np.flatnonzero(keep)
    idx = idx[np.lexsort((p["gpu_id"][idx], p["gpu_ts"][idx]))]  # ORDER BY g.ts, g.id (then launch_id)
    gid = p["gpu_id"][idx].tolist()
    rows = list(zip(gid, p["gpu_name"][idx].tolist(), p["gpu_category"][idx].tolist(), p["gpu_ts"][idx].tolist(),
                    p["gpu_dur"][idx].tolist(), [stream_of[g] for g in gid], p["launch_id"][idx].tolist(),
                    p["launch_name"][idx].tolist(), p["launch_ts"][idx].tolist(), p["launch_dur"][idx].tolist(),
                    (p["gpu_ts"][idx] - p["launch_ts"][idx]).tolist(), p["paired_by"][idx].tolist(),
                    step[idx].tolist()))
    return frame(rows, cols)


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
        window holds the launch, or NA). Empty on CPU-only traces.
    """
    df = _launch_latency_raw(shared_for(session, shared))
    df = ints(df, "gpu_id", "launch_id")
    df = nullable_int(df, "stream", "launch_start_ns", "gpu_start_ns", "step")
    for c in ("gpu_name", "gpu_category", "launch_name", "paired_by"):
        df[c] = df[c].astype("object")
    df = us(df, {"launch_dur_ns": "launch_dur_us", "gpu_dur_ns": "gpu_dur_us", "latency_ns": "latency_us"})
    return df[["gpu_id", "gpu_name", "gpu_category", "stream", "launch_id", "launch_name", "launch_start_ns",
               "gpu_start_ns", "launch_dur_us", "gpu_dur_us", "latency_us", "paired_by", "step"]]


def _launch_path_raw(sh: Shared) -> pd.DataFrame:
    """What ``launch_path.sql`` returns (same groups and sums; row order by name, API, parent op), from the shared
    launch pairs and slice tree."""
    cols = ["gpu_name", "gpu_category", "launch_api", "parent_op", "count", "with_occupancy_query"]
    p = sh.p
    if len(p["gpu_id"]) == 0:
        return frame([], cols)
    t = sh.slices
    names = t["name"]
    # the earliest occupancy query under each parent
    first_occ: dict = {}
    occ = np.flatnonzero(sh.name_mask(lambda x: isinstance(x, str) and x.startswith(
        ("cudaOccupancy", "hipOccupancy", "cuOccupancy"))) & (t["parent"] >= 0))
    for par, ts in zip(t["parent"][occ].tolist(), t["ts"][occ].tolist()):
        if par not in first_occ or ts < first_occ[par]:
            first_occ[par] = ts
    groups: dict = {}
    pars = [None if (v is None or v != v) else int(v) for v in p["launch_parent_id"].tolist()]
    known = [v for v in pars if v is not None]
    pname_of = dict(zip(known, (names[i] for i in sh.pos(np.array(known, dtype=np.int64)).tolist())))
    for gname, gcat, api, par, lts in zip(p["gpu_name"].tolist(), p["gpu_category"].tolist(),
                                          p["launch_name"].tolist(), pars, p["launch_ts"].tolist()):
        if par is None:
            pname, before = "", 0
        else:
            pn = pname_of[par]
            pname = "" if pn is None else pn
            f = first_occ.get(par)
            before = int(f is not None and f <= lts)
        g = groups.setdefault((gname, gcat, api, pname), [0, 0])
        g[0] += 1
        g[1] += before
    rows = [(*k, v[0], v[1]) for k, v in groups.items()]
    rows.sort(key=lambda r: (r[0] is not None, r[0] or "", r[2] is not None, r[2] or "", r[3]))
    return frame(rows, cols)


def launch_paths(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per GPU op name: which API call(s) launched it, from which CPU op, and whether an occupancy query preceded.

    An occupancy query is a ``cudaOccupancy*`` / ``cuOccupancy*`` / ``hipOccupancy*`` call that starts before the
    launch call under the same parent op (the A100 pattern of the study; cuBLAS 13 on an H200 launches GEMMs with
    ``cuLaunchKernelEx`` and no such query).

    Args:
        session: a trace session.

    Returns:
        DataFrame with ``name``, ``category``, ``launch_apis`` (distinct API names joined by ``", "``),
        ``parent_ops`` (distinct parent op names joined by ``", "``), ``count`` (launches of that op),
        ``occupancy_queries`` (launches preceded by an occupancy query) and ``occupancy_query_before`` (bool),
        sorted by name. Empty on CPU-only traces.
    """
    df = _launch_path_raw(shared_for(session, shared))
    cols = ["name", "category", "launch_apis", "parent_ops", "count", "occupancy_queries", "occupancy_query_before"]
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    df = ints(df, "count", "with_occupancy_query")
    rows = []
    for (name, cat), g in df.groupby(["gpu_name", "gpu_category"], sort=True):
        occ = int(g["with_occupancy_query"].sum())
        rows.append({
            "name": name, "category": cat,
            "launch_apis": ", ".join(sorted(set(g["launch_api"].astype(str)))),
            "parent_ops": ", ".join(sorted(p for p in set(g["parent_op"].astype(str)) if p)),
            "count": int(g["count"].sum()), "occupancy_queries": occ, "occupancy_query_before": occ > 0,
        })
    return pd.DataFrame(rows, columns=cols)


def _dispatch_cpu_rows(sh: Shared) -> list[tuple]:
    """The rows of ``dispatch_cpu.sql`` (CPU half of the dispatch chain) from the shared slice tree, same order."""
    steps = [r for r in sh.steps_list if r[6] is not None]
    if not steps:
        return []
    t = sh.slices
    lanes = {}
    for u in {r[6] for r in steps}:
        idx = np.flatnonzero(t["utid"] == u)
        idx = idx[np.lexsort((t["id"][idx], t["track_id"][idx], t["ts"][idx]))]
        lanes[u] = (idx, t["ts"][idx])
    name, cat, depth, parent = t["name"], t["category"], t["depth"], t["parent"]
    ts_, dur_, id_ = t["ts"], t["dur"], t["id"]
    out = []
    for step_id, step, _nm, ts, dur, sdepth, utid in steps:
        idx, lts = lanes[utid]
        lo, hi = np.searchsorted(lts, (ts, ts + dur), side="left")
        hi = int(np.searchsorted(lts, ts + dur, side="right"))
        sel = idx[lo:hi]
        sel = sel[ts_[sel] + dur_[sel] <= ts + dur]
        track = t["track_id"]
        for i in sel.tolist():
            sid = int(id_[i])
            par = None if sid == step_id or parent[i] < 0 else int(parent[i])
            out.append(((step, int(ts_[i]), int(depth[i]) - sdepth, int(track[i]), sid),
                        (step, sid, par, int(depth[i]) - sdepth, name[i], cat[i], int(ts_[i]), int(dur_[i]), "cpu")))
    out.sort(key=lambda kr: kr[0])  # ORDER BY step, ts, depth, track_id, id
    return [r for _k, r in out]


def _dispatch_chain_raw(sh: Shared) -> pd.DataFrame:
    """What ``dispatch_chain.sql`` returns: the CPU rows from ``dispatch_cpu``, each launch's GPU ops from the pairs."""
    cols = ["step", "id", "parent_id", "depth", "name", "category", "start_ns", "dur_ns", "lane"]
    rows = _dispatch_cpu_rows(sh)
    if not rows:
        return frame([], cols)
    p, by_launch = sh.p, sh.by_launch
    gpu = []
    for r in rows:
        idx = by_launch.get(r[1])
        if idx is None:
            continue
        for i in idx.tolist():
            gpu.append((r[0], int(p["gpu_id"][i]), r[1], r[3] + 1, p["gpu_name"][i],
                        p["gpu_category_raw"][i], int(p["gpu_ts"][i]), int(p["gpu_dur"][i]), "gpu"))
    rows.extend(gpu)
    rows.sort(key=lambda r: (r[0], r[8], r[6], r[3]))  # ORDER BY step, lane, start, depth (stable on ties)
    return frame(rows, cols)


def dispatch_chains(session, shared: Shared | None = None) -> pd.DataFrame:
    """The dispatch tree of every step (see :func:`dispatch_chain`), all steps in one frame with a ``step`` column."""
    df = _dispatch_chain_raw(shared_for(session, shared))
    df = ints(df, "step", "id", "depth")
    df = nullable_int(df, "parent_id", "start_ns")
    for c in ("name", "category", "lane"):
        df[c] = df[c].astype("object")
    df = us(df, {"dur_ns": "dur_us"})
    return df[["step", "id", "parent_id", "depth", "name", "category", "lane", "start_ns", "dur_us"]]


def dispatch_chain(session, step: Optional[int] = None, chains: pd.DataFrame | None = None) -> pd.DataFrame:
    """The slice tree of one step: the CPU slices inside it on its thread, then the GPU ops its launches produced.

    Typical eager chain: ProfilerStep#N → matmul_add → aten::matmul → aten::mm → cuLaunchKernelEx → GEMM kernel.

    Args:
        session: a trace session.
        step: the N of ``ProfilerStep#N``; None takes the first step in time order.
        chains: the result of :func:`dispatch_chains` when already computed.

    Returns:
        DataFrame with ``step``, ``id``, ``parent_id`` (NA for the step itself; a GPU op's parent is its launch
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
