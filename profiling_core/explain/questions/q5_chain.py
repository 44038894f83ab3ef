"""Question 5, the dispatch chain (``q5.chain``): the distinct paths from the outermost CPU op down to each GPU op in
one step."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from ...analyses import working_steps
from .base import _MAX_LISTED, NO_GPU_TEXT, NO_STEPS_TEXT, STEPS_HOWTO, Finding, _listed, _n, _short


def _missing(x) -> bool:
    """None, NaN or pd.NA (a parent id that ends the walk up)."""
    return x is None or x is pd.NA or (isinstance(x, float) and x != x)


def _chain_paths(chain: pd.DataFrame) -> list[list[str]]:
    """Per GPU op row of the chain (in row order): the names of the CPU slices around its launch call, outermost first
    (at most 50 names, the nearest kept), down to the op. Around it are the call's ancestors (walking up from the
    row's own parent) and the chain's other slices that enclose the call in time, from trees of their own: a range
    that cannot nest among its thread's slices (under ``with_stack=True`` the step slice and a ``record_function``
    range, entered inside a Python frame and left outside it) lies on a track of its own, outside the call's parent
    chain, and still holds the call. Outermost first is by start, then by the later end, then by depth (a slice and its
    child can start and end at the same microsecond). A slice's name and parent
    are those of its first row: a kernel paired with two launch calls has two rows, one under each (each row keeps
    its own parent). The path above each parent (shared by every op the same call launched) is computed once per
    parent."""
    first = chain.drop_duplicates("id")
    ids = first["id"].tolist()
    name_of = dict(zip(ids, first["name"].tolist()))
    parent_of = dict(zip(ids, first["parent_id"].tolist()))
    start = first["start_ns"].astype("float64").to_numpy()
    end = start + first["dur_us"].astype("float64").to_numpy() * 1000.0
    span = {i: (b, e, d) for i, b, e, d in zip(ids, start.tolist(), end.tolist(), first["depth"].tolist())}
    root_of: dict = {}

    def root(i):  # the top of a slice's parent chain within the chain
        path = []
        while i not in root_of and not _missing(parent_of.get(i)) and parent_of[i] in name_of and i not in path:
            path.append(i)
            i = parent_of[i]
        r = root_of.get(i, i)
        for j in path + [i]:
            root_of[j] = r
        return r
    cpu = first["lane"].to_numpy() == "cpu"
    tree: dict = {}  # a CPU slice's root -> the number of its tree (its own tree is compared as a number)
    trees = np.array([tree.setdefault(root(i), len(tree)) if c else -1 for i, c in zip(ids, cpu.tolist())],
                     dtype=np.int64)
    several = len(tree) > 1
    id_arr = np.array(ids, dtype=object)
    above: dict = {}  # parent id -> the names around it, outermost first (at most 49: the op's own name comes last)

    def around(start_id) -> list[str]:
        up, cur, seen = [], start_id, set()
        while not _missing(cur) and cur in name_of and cur not in seen:
            seen.add(cur)
            up.append(cur)
            cur = parent_of[cur]
        if several:  # the slices of other trees that hold the call
            b, e, _d = span[start_id]
            held = id_arr[cpu & (trees != tree.get(root(start_id), -1)) & (start <= b) & (end >= e)].tolist()
            up += [i for i in held if i not in seen]
        path = sorted(up, key=lambda i: (span[i][0], -span[i][1], span[i][2]))
        return [str(name_of[i]) for i in path[-49:]]

    paths = []
    gpu = chain[chain["lane"] == "gpu"]
    for gid, parent in zip(gpu["id"].tolist(), gpu["parent_id"].tolist()):
        names = []
        if not _missing(parent) and parent in name_of:
            if parent not in above:
                above[parent] = around(parent)
            names = list(above[parent])
        paths.append(names + [str(name_of[gid])])
    return paths


def _chain_texts(paths: list, widths=(48, 120, None)) -> list[str]:
    """Each chain as ``a → b → …``, its names cut to the first of ``widths``; chains that the cut makes read alike
    (``triton_poi_fused_copy_permute_slice_unbind_view_1`` and ``_2``, both cut before their number) get the next,
    longer cut, down to their whole names: distinct chains never read the same."""
    out = [None] * len(paths)
    todo = list(range(len(paths)))
    for w in widths:
        texts = {i: " → ".join(_short(n, w) if w else str(n) for n in paths[i]) for i in todo}
        seen = Counter(texts.values())
        for i in todo:
            out[i] = texts[i]
        todo = [i for i in todo if seen[texts[i]] > 1]
        if not todo:
            break
    return out


def _q5_chain(r, config=None) -> list[Finding]:
    ch = r.dispatch_chains
    if r.steps.empty:
        return [Finding("q5.chain", 5, "No steps",
                        (f"{NO_GPU_TEXT} and no ProfilerStep slices: no chain from a step down to a GPU op to follow."
                         if not r.has_gpu else
                         f"{NO_STEPS_TEXT}, and question 5 follows the chain inside a step, from its ProfilerStep "
                         f"slice down to each GPU op it launched: to see it, {STEPS_HOWTO}. Question 6 names each "
                         "kernel's launch call and the op that made it, over the whole trace."), {"steps": 0})]
    if ch.empty:
        return []
    work = working_steps(r.steps)  # (an empty step, the profiler's closing stub say, holds no chain to follow)
    work = work if len(work) else r.steps
    with_gpu = work.loc[work["gpu_ops"] > 0, "step"]
    step = int(with_gpu.iloc[-1] if len(with_gpu) else work["step"].iloc[-1])
    chain = ch[ch["step"] == step]
    of = r.steps[r.steps["step"] == step]
    where, pid = "", None
    if len(of) > 1:  # one slice per rank (ranks' traces merged into one file): the chain of the first, on its own
        chain = chain[chain["step_slice_id"] == int(of["slice_id"].iloc[0])]
        pid = of["pid"].iloc[0] if "pid" in of else None
        pid = None if pid is None or pd.isna(pid) else int(pid)
        where = f" of pid {pid}" if pid is not None else ""
    paths = list(dict.fromkeys(tuple(p) for p in _chain_paths(chain)))
    if not paths:
        # (the profiler's [memory] instants are no slices of work: they are left out of the counts)
        # (the step's own slice, the chain's root, is not one of the slices it holds)
        cpu = chain[(chain["lane"] == "cpu") & (chain["name"] != "[memory]") & chain["parent_id"].notna()]
        cpu = cpu.sort_values(["depth", "start_ns"])
        names = list(dict.fromkeys(cpu["name"].astype(str)))[:8]
        launched = int(r.steps.loc[r.steps["step"] == step, "gpu_ops"].max()) if len(r.steps) else 0
        if not r.has_gpu:
            why = NO_GPU_TEXT
        elif launched:  # launched from a thread whose calls do not nest under the step's slice
            why = (f"ProfilerStep#{step} launched {launched} GPU op{'s' if launched != 1 else ''} ("
                   + ("their launch calls fall" if launched != 1 else "its launch call falls")
                   + " in its window), but from slices that do not sit inside the step's own slice (on another "
                   "thread, or a track of its own), so no chain from the step down to a launch can be drawn")
        else:
            why = "No GPU op was launched in this step"
        own = r.cpu_own_times  # every thread's slices in the step's window (the step slices left out)
        mine = own[(own["step"] == step) & (own["name"] != "[memory]")] if len(own) else own
        in_chain = cpu["name"].astype(str).value_counts()
        extra = {n: int(c) - int(in_chain.get(n, 0)) for n, c in zip(mine["name"].astype(str), mine["calls"])}
        extra = {n: c for n, c in extra.items() if c > 0}  # (in the window, not in the step's own slice)
        others = sum(extra.values())
        elsewhere = (f"; {_n(others, 'more CPU slice' if len(cpu) else 'CPU slice')} start in its window outside "
                     "its own slice (on other threads or tracks, or on its thread past its end)"
                     f" ({_listed(extra)})" if others > 0 else "")
        return [Finding("q5.chain", 5, "CPU-only dispatch" if not launched else "Dispatch outside the step's slice",
                        f"{why}: ProfilerStep#{step}'s own slice holds "
                        + (f"{_n(len(cpu), 'CPU slice')} below it ({', '.join(map(_short, names))})" if len(cpu)
                           else "no CPU slice below it") + f"{elsewhere}.",
                        {"step": step, "cpu_slices": int(len(cpu)), "names": names, "gpu_ops_launched": launched,
                         "cpu_slices_elsewhere": others})]
    shown = paths[:_MAX_LISTED]
    text = f"In ProfilerStep#{step}{where}: " + "; ".join(_chain_texts(shown))
    more = len(paths) - len(shown)
    text += f"; and {more} more distinct chain{'s' if more > 1 else ''}." if more > 0 else "."
    ev = {"step": step, "paths": [list(p) for p in paths]}
    if pid is not None:
        ev["pid"] = pid
    return [Finding("q5.chain", 5, "Dispatch chain", text, ev)]
