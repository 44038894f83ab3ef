"""Question 5, the dispatch chain (``q5.chain``): the distinct paths from the outermost CPU op down to each GPU op in
one step."""
from __future__ import annotations

import pandas as pd

from .base import _MAX_LISTED, NO_GPU_TEXT, Finding, _short


def _missing(x) -> bool:
    """None, NaN or pd.NA (a parent id that ends the walk up)."""
    return x is None or x is pd.NA or (isinstance(x, float) and x != x)


def _chain_paths(chain: pd.DataFrame) -> list[list[str]]:
    """Per GPU op of the chain (in row order): the names from the outermost ancestor (at most 50 names, the
    nearest kept) down to the op. Parent links are read from dicts built once; the walk above each op's parent
    (shared by every op the same call launched) is computed once per parent."""
    if not chain["id"].is_unique:  # ambiguous ids: keep the row-by-row lookups' exact behaviour
        return _chain_paths_by_loc(chain)
    ids = chain["id"].tolist()
    name_of = dict(zip(ids, chain["name"].tolist()))
    parent_of = dict(zip(ids, chain["parent_id"].tolist()))
    above: dict = {}  # parent id -> names walked up from it (at most 49: the op's own name comes first)

    def walk_up(start) -> list[str]:
        names, cur = [], start
        while not _missing(cur) and cur in name_of and len(names) < 49:
            names.append(str(name_of[cur]))
            cur = parent_of[cur]
        return names

    paths = []
    gpu = chain["lane"] == "gpu"
    for gid in chain.loc[gpu, "id"].tolist():
        names = [str(name_of[gid])]
        parent = parent_of[gid]
        if not _missing(parent):
            if parent not in above:
                above[parent] = walk_up(parent)
            names += above[parent]
        paths.append(names[::-1])
    return paths


def _chain_paths_by_loc(chain: pd.DataFrame) -> list[list[str]]:
    by_id = chain.set_index("id")
    paths = []
    for gid in chain.loc[chain["lane"] == "gpu", "id"]:
        names, cur = [], gid
        while cur is not None and not pd.isna(cur) and cur in by_id.index and len(names) < 50:
            names.append(str(by_id.at[cur, "name"]))
            cur = by_id.at[cur, "parent_id"]
        paths.append(names[::-1])
    return paths


def _q5_chain(r, config=None) -> list[Finding]:
    ch = r.dispatch_chains
    if ch.empty:
        return []
    with_gpu = r.steps.loc[r.steps["gpu_ops"] > 0, "step"]
    step = int(with_gpu.iloc[-1] if len(with_gpu) else r.steps["step"].iloc[-1])
    chain = ch[ch["step"] == step]
    paths = list(dict.fromkeys(tuple(p) for p in _chain_paths(chain)))
    if not paths:
        cpu = chain[chain["lane"] == "cpu"].sort_values(["depth", "start_ns"])
        names = list(dict.fromkeys(cpu["name"].astype(str)))[:8]
        return [Finding("q5.chain", 5, "CPU-only dispatch",
                        f"{NO_GPU_TEXT if not r.has_gpu else 'No GPU op was launched in this step'}: "
                        f"ProfilerStep#{step} holds {len(cpu)} CPU slices ({', '.join(map(_short, names))}).",
                        {"step": step, "cpu_slices": int(len(cpu)), "names": names})]
    shown = paths[:_MAX_LISTED]
    text = f"In ProfilerStep#{step}: " + "; ".join(" → ".join(_short(n, 48) for n in p) for p in shown)
    text += f"; and {len(paths) - len(shown)} more distinct chains." if len(paths) > len(shown) else "."
    return [Finding("q5.chain", 5, "Dispatch chain", text, {"step": step, "paths": [list(p) for p in paths]})]
