"""Question 6, which kernels are launched how (``q6.launch_path``): each kernel's launch API and parent op, and the
occupancy queries before launches (per launch, the post's pattern, or once in a cold process). The post is named only
on a run of this app (``base._app_run``): another program's trace is not the study's workload."""
from __future__ import annotations

import pandas as pd

from ...analyses.launches import OCCUPANCY_PREFIXES
from ...units import cut_apart
from .base import _MAX_LISTED, NO_GPU_TEXT, Finding, _app_run, _is_cold, _n


def _occupancy_steps(r) -> dict[str, list[int]]:
    """Per GPU op name: the step of each of its launches that an occupancy query sized (``launch_latency``'s
    ``occupancy_query_before``, the rule ``launch_paths`` counts by), in time order."""
    ll = r.launch_latency
    if ll.empty or "occupancy_query_before" not in ll:
        return {}
    sized = ll[ll["occupancy_query_before"].astype(bool) & ll["step"].notna()].sort_values("launch_start_ns",
                                                                                           kind="stable")
    out: dict[str, list[int]] = {}
    for name, step in zip(sized["gpu_name"].astype(str).tolist(), sized["step"].tolist()):
        out.setdefault(name, []).append(int(step))
    return out


def _first_launch_queried(r) -> dict[str, bool]:
    """Per GPU op name: whether an occupancy query sized its first launch (``launch_latency``, in launch order)."""
    ll = r.launch_latency
    if ll.empty or "occupancy_query_before" not in ll:
        return {}
    first = ll.sort_values("launch_start_ns", kind="stable").drop_duplicates("gpu_name")
    return dict(zip(first["gpu_name"].astype(str), first["occupancy_query_before"].astype(bool)))


def _occupancy_clause(who: str, n_launch: int, n_query: int, steps_with: list[int], first_step) -> str:
    """``X, before every one of its 3 launches`` or ``X, only before the first of its 3 launches, in …`` (``who``: the
    kernel's name as shown)."""
    if n_query >= n_launch:
        return f"{who}, before " + ("its only launch" if n_launch == 1 else f"every one of its {n_launch} launches")
    steps = sorted(set(steps_with))
    where = ""
    if steps:
        where = ", in " + (f"the first profiled step (ProfilerStep#{steps[0]})" if steps == [first_step]
                           else "ProfilerStep#" + ", #".join(map(str, steps)))
    which = "the first" if n_query == 1 and steps == [first_step] else f"{n_query}"
    return f"{who}, only before {which} of its {_n(n_launch, 'launch', 'launches')}{where}"


def _occupancy_text(occ: pd.DataFrame, steps_of: dict, first_step, cold: bool, app: bool, once: bool) -> str:
    """The occupancy-query sentences: kernels queried before every launch (sized launch by launch: on a run of this
    app, ``app``, said to be the post's pattern) apart from kernels queried before only some launches: a one-time
    query on the op's first call where each such kernel was queried once, before its first launch (``once``,
    :func:`occupancy_pattern`'s), else only that not every launch is preceded by one."""
    every_row = list(zip(occ["name"].astype(str), occ["count"].astype(int), occ["occupancy_queries"].astype(int)))
    rows = every_row[:_MAX_LISTED]
    left = len({n for n, _c, _q in every_row} - {n for n, _c, _q in rows})
    every = [r for r in rows if r[2] >= r[1]]
    some = [r for r in rows if r[2] < r[1]]
    shown = dict(zip([n for n, _c, _q in rows], cut_apart([n for n, _c, _q in rows], 60)))
    parts = []
    if every:
        parts.append("; ".join(_occupancy_clause(shown[n], c, q, steps_of.get(n, []), first_step) for n, c, q in every)
                     + ": sized adaptively launch by launch"
                     + (" (the per-launch pattern of the study's post)" if app else ""))
    if some:
        parts.append("; ".join(_occupancy_clause(shown[n], c, q, steps_of.get(n, []), first_step) for n, c, q in some)
                     + (": a one-time query on the op's first call" + (" in a cold process" if cold else "")
                        + ", not a per-launch pattern" if once else ": not every launch is preceded by one"))
    return ("An occupancy query precedes the launch of " + ". And of ".join(parts)
            + (f". And of {_n(left, 'more kernel name')}, not listed" if left else "") + ". ")


def _kernel_launches(r) -> tuple[pd.DataFrame, int]:
    """The kernels' rows of ``launch_paths`` and how many occupancy queries the trace holds on the CPU (the
    profiler table's calls of :data:`OCCUPANCY_PREFIXES`), tied to a launch or not."""
    lp = r.launch_paths[r.launch_paths["category"] == "kernel"]
    tb = r.profiler_table
    queries = int(tb.loc[(tb["lane"] == "cpu") & tb["name"].astype(str).str.startswith(OCCUPANCY_PREFIXES),
                         "calls"].sum()) if len(tb) else 0
    return lp, queries


def occupancy_pattern(r, config=None) -> dict:
    """What question 6 says of the occupancy queries before kernel launches, as one verdict (the Dispatch page states
    it too): ``pattern`` is

    - ``"per_launch"``: some kernel was queried before every one of its launches (sized launch by launch; on a run of
      this app, ``study``, the pattern of the study's post);
    - ``"first_launch_only"``: none was, and each queried kernel was queried once, before its first launch: a
      one-time query on the op's first call, not a per-launch pattern;
    - ``"some_launches"``: none was, and not every launch of the queried kernels is preceded by one;
    - ``"unreadable"``: the trace holds ``queries`` occupancy queries, none under an op that launched a kernel, so
      which launch each one sizes cannot be read from it;
    - ``"none"``: no occupancy query in the trace.

    ``every``: the kernels queried before every launch; ``some``: those queried before only some; ``once``: each of
    ``some`` was queried once, before its first launch (``launch_latency``'s order)."""
    lp, queries = _kernel_launches(r)
    occ = lp[lp["occupancy_query_before"].astype(bool)] if len(lp) else lp
    rows = list(zip(occ["name"].astype(str), occ["count"].astype(int), occ["occupancy_queries"].astype(int)))
    every = [n for n, c, q in rows if q >= c]
    some = [n for n, c, q in rows if q < c]
    first = _first_launch_queried(r) if some else {}
    once = bool(some) and all(q == 1 and first.get(n, False) for n, c, q in rows if q < c)
    pattern = ("per_launch" if every else "first_launch_only" if once else "some_launches" if some
               else "unreadable" if queries else "none")
    return {"pattern": pattern, "every": every, "some": some, "once": once, "queries": queries,
            "study": _app_run(r, config)}


def _hip(lp: pd.DataFrame) -> bool:
    """True when the kernels were launched through HIP (an AMD GPU's trace): its calls are named hip…."""
    apis = " ".join(str(a) for a in pd.unique(lp["launch_apis"].astype(str)))
    return "hip" in apis and "cuda" not in apis and "cuLaunch" not in apis


def _q6_paths(r, config=None) -> list[Finding]:
    if not r.has_gpu:
        return [Finding("q6.launch_path", 6, "No GPU lane", NO_GPU_TEXT + ": no kernel was launched.",
                        {"gpu_ops": 0})]
    lp, queries = _kernel_launches(r)
    if lp.empty:
        return []
    pat = occupancy_pattern(r, config)
    occ = lp[lp["occupancy_query_before"]]
    ev = {"kernels": {str(n): a for n, a in zip(lp["name"], lp["launch_apis"])},
          "occupancy_query_kernels": sorted(map(str, occ["name"])),
          "occupancy_queries": int(lp["occupancy_queries"].sum())}
    top = lp.sort_values("count", ascending=False, kind="stable").head(_MAX_LISTED)
    per = "; ".join(f"{n} by {a} (from {p or 'no parent op'}, {c}×)" for n, a, p, c in
                    zip(cut_apart([str(x) for x in top["name"]], 48), top["launch_apis"], top["parent_ops"],
                        top["count"]))
    if len(lp) > len(top):
        per += f"; and {len(lp) - len(top)} more kernel{'s' if len(lp) - len(top) > 1 else ''}"
    ev["occupancy_queries_in_trace"] = queries
    if pat["pattern"] == "unreadable":
        text = (f"This trace holds {queries} occupancy quer{'y' if queries == 1 else 'ies'} "
                f"({'hipOccupancy' if _hip(lp) else 'cudaOccupancy'}…), none "
                "under an op that launched a kernel (a query is tied to a launch through the op both sit in), so "
                f"which launch each one sizes cannot be read from it. Launches: {per}.")
    elif pat["pattern"] == "none":
        text = (f"No occupancy query ({'hipOccupancy' if _hip(lp) else 'cudaOccupancy'}…) precedes any kernel launch "
                f"in this trace. Launches: {per}.")
    else:
        steps_of = _occupancy_steps(r)
        first_step = int(r.steps["step"].iloc[0]) if not r.steps.empty else None
        ev["occupancy_query_launches"] = {str(n): {"launches": int(c), "with_query": int(q),
                                                   "steps": sorted(set(steps_of.get(str(n), [])))}
                                          for n, c, q in zip(occ["name"], occ["count"], occ["occupancy_queries"])}
        plain = set(lp.loc[~lp["occupancy_query_before"], "name"].astype(str)) - set(occ["name"].astype(str))
        text = (_occupancy_text(occ, steps_of, first_step, _is_cold(r, config), pat["study"], pat["once"])
                + (f"{_n(len(plain), 'other kernel name')} launch{'es' if len(plain) == 1 else ''} without one. "
                   if plain else "")
                + f"Launches: {per}.")
    text += _unpaired_text(r, lp, ev)
    return [Finding("q6.launch_path", 6, "How kernels are launched", text, ev)]


def _unpaired_text(r, lp: pd.DataFrame, ev: dict) -> str:
    """The sentence that says which kernel runs the counts above leave out: those whose launch call the trace does not
    hold (queued before the recording began, or launched by a call it did not record), which the kernel table
    (``kernel_stats``, every kernel on the GPU lane) counts; "" when there are none."""
    ks = r.kernel_stats
    if ks.empty:
        return ""
    paired = dict(zip(lp["name"].astype(str), lp["count"].astype(int)))
    runs = {str(n): int(c) for n, c in zip(ks["name"], ks["count"])}
    more = {n: c - paired.get(n, 0) for n, c in runs.items() if c > paired.get(n, 0)}
    if not more:
        return ""
    ev["kernel_runs_without_launch_call"] = sum(more.values())
    listed = list(more)[:3]
    names = "; ".join(f"{shown} {runs[n]}× in the table, {paired.get(n, 0)}× here"
                      for n, shown in zip(listed, cut_apart(listed, 48))) + (
        f"; and {_n(len(more) - len(listed), 'more kernel name')}" if len(more) > len(listed) else "")
    return (f" These counts are of launches whose launch call the trace holds; {_n(sum(more.values()), 'kernel run')} "
            f"on the GPU lane {'have' if sum(more.values()) != 1 else 'has'} none in it (queued before the recording "
            f"began, or launched by a call it did not record), so the kernel table counts "
            f"{'them' if sum(more.values()) != 1 else 'it'} and this list does not: {names}.")
