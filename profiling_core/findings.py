"""Findings: short statements, with their evidence, about what THIS trace shows for each study question.

Every sentence is built from the analyses of the trace in hand (no text fixed in advance): on an H200 there is
no occupancy query before the GEMM, on an A100 there may be one, on a CPU-only trace there is no GPU lane, and the
findings say so. ``question`` refers to the ten questions of the study (docs: STUDY.md).

    >>> from profiling_core import open_trace
    >>> from profiling_core.findings import findings
    >>> for f in findings(open_trace("trace.json")):      # doctest: +SKIP
    ...     print(f.question, f.title, "-", f.text)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pandas as pd

__all__ = ["Finding", "findings", "NO_GPU_TEXT"]

NO_GPU_TEXT = "This trace has no GPU lane (no kernel, memcpy or memset events)"
_MAX_LISTED = 6


@dataclass(frozen=True)
class Finding:
    """One statement about the trace, with the numbers and slice names it rests on."""

    id: str
    """Stable identifier, e.g. ``q6.launch_path``."""
    question: int
    """The study question (1..10) it answers."""
    title: str
    text: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.question <= 10:
            raise ValueError(f"question must be 1..10, got {self.question!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "title": self.title, "text": self.text,
                "evidence": self.evidence}


def _us(x: float) -> str:
    """A duration for a sentence: µs below 1 ms, ms above."""
    if x is None or pd.isna(x):
        return "n/a"
    return f"{x / 1000:.2f} ms" if abs(x) >= 1000 else f"{x:.1f} µs"


def _short(name: str, n: int = 60) -> str:
    name = str(name)
    return name if len(name) <= n else name[: n - 1] + "…"


def _num(x) -> Optional[float]:
    return None if x is None or pd.isna(x) else round(float(x), 3)


# --- one function per question; each returns a list of findings --------------------------------------------------

def _q1_table(r) -> list[Finding]:
    t = r.profiler_table
    if t.empty:
        return []
    self_cpu = float(t["self_cpu_us"].sum())
    top = t.sort_values("self_cpu_us", ascending=False).iloc[0]
    ev = {"self_cpu_total_us": _num(self_cpu), "top_self_cpu_row": str(top["name"]),
          "top_self_cpu_us": _num(top["self_cpu_us"]), "rows": int(len(t))}
    text = (f"The table has {len(t)} rows; self CPU time sums to {_us(self_cpu)} and the largest self CPU row is "
            f"{_short(top['name'])} ({_us(top['self_cpu_us'])}); total CPU time of a row includes its children.")
    out = [Finding("q1.table", 1, "Self vs total CPU time", text, ev)]
    if not r.has_gpu:
        out.append(Finding("q1.no_gpu", 1, "No device columns", NO_GPU_TEXT + ": the table has no CUDA columns to "
                           "read, only CPU time.", {"gpu_ops": 0}))
        return out
    dev_sum = float(t["self_device_us"].sum())
    busy = float(r.summary["gpu_busy_us"]) if r.summary.get("gpu_busy_scope") == "trace" else float(
        r.gpu_busy.set_index("scope").loc["trace", "busy_us"])
    ann = t[(t["lane"] == "gpu") & ~t["name"].isin(set(r.gpu_ops["name"]))]
    cpu_dev = t[(t["lane"] == "cpu") & (t["self_device_us"] > 0)]
    ev2 = {"sum_self_device_us": _num(dev_sum), "gpu_busy_us": _num(busy),
           "ratio": _num(dev_sum / busy) if busy > 0 else None,
           "gpu_annotation_rows": sorted(map(str, ann["name"])), "cpu_rows_with_device_time": sorted(
               map(str, cpu_dev["name"]))}
    text2 = (f"Summing self device time over all rows gives {_us(dev_sum)}, "
             f"{dev_sum / busy:.1f}× the {_us(busy)} the GPU was actually busy (union of kernel, memcpy and memset "
             f"intervals): ") if busy > 0 else f"Summing self device time over all rows gives {_us(dev_sum)}: "
    parts = []
    if len(cpu_dev):
        parts.append("the ops that launched GPU work (" + ", ".join(map(_short, cpu_dev["name"][:4])) +
                     ") carry their kernels' time")
    if len(ann):
        parts.append("the GPU-side annotation rows (" + ", ".join(map(_short, ann["name"][:4])) +
                     ") carry the time of everything under them")
    text2 += ("; ".join(parts) or "no row is counted twice") + "."
    out.append(Finding("q1.double_count", 1, "Summing Self CUDA double counts", text2, ev2))
    return out


def _q2_bound(r) -> list[Finding]:
    s = r.steps
    if s.empty:
        if not r.has_gpu:
            return [Finding("q2.bound", 2, "CPU only", NO_GPU_TEXT + " and no ProfilerStep: nothing to compare.",
                            {"steps": 0, "gpu_ops": 0})]
        frac = r.summary.get("gpu_busy_fraction")
        return [Finding("q2.bound", 2, "GPU busy share",
                        f"No ProfilerStep in this trace; over the whole trace the GPU was busy "
                        f"{_us(r.summary['gpu_busy_us'])}, {100 * (frac or 0):.1f}% of its span.",
                        {"steps": 0, "gpu_busy_us": _num(r.summary["gpu_busy_us"]), "gpu_busy_fraction": _num(frac)})]
    cpu_med = float(s["cpu_dur_us"].median())
    if not r.has_gpu:
        return [Finding("q2.bound", 2, "CPU only",
                        f"{NO_GPU_TEXT}: all {len(s)} steps ran on the CPU, median {_us(cpu_med)} per step.",
                        {"steps": int(len(s)), "cpu_step_median_us": _num(cpu_med), "gpu_ops": 0})]
    gpu_med = float(s["gpu_busy_us"].median())
    frac_med = float(s["gpu_busy_fraction"].median())
    bounds = r.cpu_vs_gpu["bound"].value_counts().to_dict()
    label = max(bounds, key=bounds.get)
    ev = {"steps": int(len(s)), "cpu_step_median_us": _num(cpu_med), "gpu_step_median_us": _num(gpu_med),
          "gpu_busy_fraction_median": _num(frac_med), "bound": label, "bound_counts": {k: int(v) for k, v in
                                                                                       bounds.items()},
          "gpu_busy_fraction": _num(r.summary.get("gpu_busy_fraction"))}
    rel = "more" if gpu_med > cpu_med else "less"
    text = (f"Per step the CPU spent a median {_us(cpu_med)} and launched {_us(gpu_med)} of GPU work ({rel} GPU "
            f"than CPU time); the GPU was busy {100 * frac_med:.1f}% of a step's wall time (median), so "
            f"{bounds[label]} of {len(s)} steps are {label}.")
    return [Finding("q2.bound", 2, label.capitalize(), text, ev)]


def _self_times(chain: pd.DataFrame) -> pd.DataFrame:
    cpu = chain[chain["lane"] == "cpu"]
    child = cpu.groupby("parent_id")["dur_us"].sum()
    out = cpu[["id", "name", "dur_us"]].copy()
    out["name"] = out["name"].astype(str).str.replace(r"^ProfilerStep#\d+$", "ProfilerStep*", regex=True)
    out["self_us"] = out["dur_us"] - out["id"].map(child).fillna(0.0)
    out["occurrence"] = out.groupby("name").cumcount()
    return out


def _q3_cold(r) -> list[Finding]:
    s = r.steps
    if len(s) < 2:
        return []
    first, rest = s.iloc[0], s.iloc[1:]
    rest_med = float(rest["cpu_dur_us"].median())
    ratio = float(first["cpu_dur_us"]) / rest_med if rest_med > 0 else None
    ev = {"first_step": int(first["step"]), "first_step_cpu_us": _num(first["cpu_dur_us"]),
          "other_steps_median_us": _num(rest_med), "ratio": _num(ratio)}
    text = (f"The first profiled step (ProfilerStep#{int(first['step'])}) took {_us(first['cpu_dur_us'])} on the "
            f"CPU against a median {_us(rest_med)} for the {len(rest)} others ({ratio:.1f}×).")
    ch = r.dispatch_chains
    if not ch.empty:
        by_step = {k: _self_times(g) for k, g in ch.groupby("step", sort=False)}
        f0 = by_step.get(int(first["step"]))
        others = [by_step[int(k)] for k in rest["step"] if int(k) in by_step]
        if f0 is not None and others:
            ref = pd.concat(others).groupby(["name", "occurrence"])["self_us"].median()
            f0 = f0.assign(ref=[ref.get((n, o), 0.0) for n, o in zip(f0["name"], f0["occurrence"])])
            f0["excess_us"] = f0["self_us"] - f0["ref"]
            worst = f0.sort_values("excess_us", ascending=False).iloc[0]
            ev.update({"largest_excess_slice": str(worst["name"]), "largest_excess_us": _num(worst["excess_us"]),
                       "largest_excess_self_us": _num(worst["self_us"]),
                       "largest_excess_usual_us": _num(worst["ref"])})
            text += (f" Most of the extra time is self time of {_short(worst['name'])}: {_us(worst['self_us'])} "
                     f"against {_us(worst['ref'])} in the other steps.")
    g = r.cold_start_gap.dropna(subset=["gap_us"])
    if len(g) >= 2:
        ev.update({"first_gap_us": _num(g["gap_us"].iloc[0]), "other_gaps_median_us": _num(
            g["gap_us"].iloc[1:].median()), "first_aten": str(g["first_aten"].iloc[0])})
        text += (f" From entering matmul_add to the first aten:: op ({g['first_aten'].iloc[0]}) took "
                 f"{_us(g['gap_us'].iloc[0])} in the first region against a median {_us(g['gap_us'].iloc[1:].median())}"
                 f" later.")
    return [Finding("q3.cold_start", 3, "First step vs the others", text, ev)]


def _q4_offset(r) -> list[Finding]:
    if not r.has_gpu:
        return [Finding("q4.offset", 4, "No GPU lane", NO_GPU_TEXT + ", so there is no CPU-to-GPU offset to read.",
                        {"gpu_ops": 0})]
    ll = r.launch_latency
    if ll.empty:
        return [Finding("q4.offset", 4, "No launch pairs", "The trace has GPU ops but no flow or correlation links "
                        "them to launch calls, so the queueing delay cannot be measured.",
                        {"gpu_ops": int(len(r.gpu_ops)), "pairs": 0})]
    lat = ll["latency_us"]
    ev = {"pairs": int(len(ll)), "median_us": _num(lat.median()), "min_us": _num(lat.min()),
          "max_us": _num(lat.max()), "first_us": _num(lat.iloc[0]), "last_us": _num(lat.iloc[-1]),
          "paired_by": sorted(set(ll["paired_by"]))}
    text = (f"Each GPU op started a median {_us(lat.median())} after its launch call began (min {_us(lat.min())}, "
            f"max {_us(lat.max())}, over {len(ll)} ops paired by {' and '.join(ev['paired_by'])}).")
    if len(ll) >= 3 and lat.iloc[-1] > 3 * max(lat.iloc[0], 1e-9):
        text += (f" The delay grows from {_us(lat.iloc[0])} for the first op to {_us(lat.iloc[-1])} for the last: the "
                 f"CPU launches faster than the GPU executes, so work queues up and the GPU lane drifts right.")
    ov = r.profiler_table[r.profiler_table["name"].astype(str).str.contains("Activity Buffer Request")]
    if len(ov):
        ev["activity_buffer_request_us"] = _num(ov["cpu_total_us"].sum())
        text += f" The profiler's own 'Activity Buffer Request' took {_us(ov['cpu_total_us'].sum())} on the CPU."
    return [Finding("q4.offset", 4, "CPU-to-GPU offset", text, ev)]


def _chain_paths(chain: pd.DataFrame) -> list[list[str]]:
    by_id = chain.set_index("id")
    paths = []
    for gid in chain.loc[chain["lane"] == "gpu", "id"]:
        names, cur = [], gid
        while cur is not None and not pd.isna(cur) and cur in by_id.index and len(names) < 50:
            names.append(str(by_id.at[cur, "name"]))
            cur = by_id.at[cur, "parent_id"]
        paths.append(names[::-1])
    return paths


def _q5_chain(r) -> list[Finding]:
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


def _q6_paths(r) -> list[Finding]:
    if not r.has_gpu:
        return [Finding("q6.launch_path", 6, "No GPU lane", NO_GPU_TEXT + ": no kernel was launched.",
                        {"gpu_ops": 0})]
    lp = r.launch_paths[r.launch_paths["category"] == "kernel"]
    if lp.empty:
        return []
    occ = lp[lp["occupancy_query_before"]]
    ev = {"kernels": {str(n): a for n, a in zip(lp["name"], lp["launch_apis"])},
          "occupancy_query_kernels": sorted(map(str, occ["name"])),
          "occupancy_queries": int(lp["occupancy_queries"].sum())}
    top = lp.sort_values("count", ascending=False, kind="stable").head(_MAX_LISTED)
    per = "; ".join(f"{_short(n, 48)} by {a} (from {p or 'no parent op'}, {c}×)" for n, a, p, c in
                    zip(top["name"], top["launch_apis"], top["parent_ops"], top["count"]))
    if len(lp) > len(top):
        per += f"; and {len(lp) - len(top)} more kernels"
    if occ.empty:
        text = f"No occupancy query (cudaOccupancy…) precedes any kernel launch in this trace. Launches: {per}."
    else:
        plain = lp[~lp["occupancy_query_before"]]
        text = (f"An occupancy query precedes the launch of {', '.join(map(_short, occ['name'][:_MAX_LISTED]))} "
                f"({int(occ['occupancy_queries'].sum())} launches): these are sized adaptively; "
                + (f"{len(plain)} other kernel name(s) launch without one. " if len(plain) else "")
                + f"Launches: {per}.")
    return [Finding("q6.launch_path", 6, "How kernels are launched", text, ev)]


def _q7_sync(r) -> list[Finding]:
    sw = r.sync_wait
    if sw.empty:
        return [Finding("q7.sync", 7, "No synchronize call", "No cudaDeviceSynchronize / cudaStreamSynchronize call "
                        "in this trace." + ("" if r.has_gpu else " " + NO_GPU_TEXT + "."), {"syncs": 0})]
    longest = sw.sort_values("dur_us", ascending=False).iloc[0]
    ev = {"syncs": int(len(sw)), "name": str(longest["name"]), "dur_us": _num(longest["dur_us"]),
          "gpu_busy_us": _num(longest["gpu_busy_us"]), "idle_pct": _num(longest["idle_pct"]),
          "gpu_ops": int(longest["gpu_ops"])}
    text = (f"The longest {longest['name']} took {_us(longest['dur_us'])}; the GPU was busy {_us(longest['gpu_busy_us'])}"
            f" of it ({longest['idle_pct']:.0f}% idle, {int(longest['gpu_ops'])} GPU op(s) overlapping). ")
    if not r.has_gpu:
        text += NO_GPU_TEXT + "."
    elif longest["idle_pct"] >= 50:
        text += ("The GPU had little or nothing left to run: most of the call is the synchronisation itself "
                 "(the profiler syncs at the end of its window), not waiting for GPU work.")
    else:
        text += "The CPU waited for GPU work it had queued earlier: the sync's length is the GPU's backlog."
    return [Finding("q7.sync", 7, "Why the sync is long", text, ev)]


def _q8_variance(r) -> list[Finding]:
    ks = r.kernel_stats
    if ks.empty:
        return [] if r.has_gpu else [Finding("q8.variance", 8, "No GPU lane", NO_GPU_TEXT + ": no kernel durations.",
                                             {"kernels": 0})]
    k = ks.iloc[0]
    ev = {"kernel": str(k["name"]), "count": int(k["count"]), "median_us": _num(k["median_us"]),
          "mean_us": _num(k["mean_us"]), "min_us": _num(k["min_us"]), "max_us": _num(k["max_us"]),
          "std_us": _num(k["std_us"]), "cv": _num(k["cv"])}
    spread = (k["max_us"] / k["min_us"] - 1) * 100 if k["min_us"] > 0 else float("nan")
    text = (f"{_short(k['name'])} (the largest total) ran {int(k['count'])}×: median {_us(k['median_us'])}, mean "
            f"{_us(k['mean_us'])}, min {_us(k['min_us'])}, max {_us(k['max_us'])} (max {spread:.1f}% above min, "
            f"CV {100 * (k['cv'] if pd.notna(k['cv']) else 0):.1f}%).")
    if int(k["count"]) >= 3:
        skew = (k["mean_us"] / k["median_us"] - 1) * 100 if k["median_us"] > 0 else 0.0
        ev["mean_above_median_pct"] = _num(skew)
        text += (f" The mean is {abs(skew):.1f}% {'above' if skew >= 0 else 'below'} the median"
                 + (": a few slow launches pull it up; read the median." if skew > 2 else "."))
    return [Finding("q8.variance", 8, "Same kernel, different times", text, ev)]


def _q9_compile(r) -> list[Finding]:
    cb = r.compile_breakdown
    if cb.empty:
        return []
    regions = int(cb["compiled_regions"].sum())
    ev = {"steps": int(len(cb)), "compiled_regions": regions,
          "compiled_regions_per_step": _num(regions / len(cb)),
          "kernel_launches_per_step": _num(cb["kernel_launches"].median()),
          "launches_per_step": _num(cb["launches"].median()),
          "kernels_per_step": _num(cb["kernels"].median()), "memcpy_dtod": int(cb["memcpy_dtod"].sum()),
          "memsets": int(cb["memsets"].sum()), "graph_launches": int(cb["graph_launches"].sum())}
    if regions == 0 and not r.has_gpu:
        return [Finding("q9.compile", 9, "Eager execution", "No torch.compile rows (TorchDynamo Cache Lookup, "
                        "Torch-Compiled Region) in this trace: it ran eagerly. " + NO_GPU_TEXT + ".", ev)]
    if regions == 0:
        text = (f"No torch.compile rows (TorchDynamo Cache Lookup, Torch-Compiled Region) in this trace: it ran "
                f"eagerly, with a median {ev['kernel_launches_per_step']:g} kernel launches and "
                f"{ev['kernels_per_step']:g} kernels per step.")
        return [Finding("q9.compile", 9, "Eager execution", text, ev)]
    hashes = sorted({h for v in cb["fx_graph_hash"].dropna() for h in str(v).split(",") if h})
    ev["fx_graph_hashes"] = hashes
    kernels = sorted(set(r.launch_paths.loc[r.launch_paths["category"] == "kernel", "name"].astype(str)))
    ev["kernel_names"] = kernels
    text = (f"torch.compile ran: {regions} Torch-Compiled Region slices over {len(cb)} steps, with "
            f"{len(hashes)} distinct CompiledFxGraph hash{'es' if len(hashes) != 1 else ''}"
            + (" (the same every step: a cache hit)" if len(hashes) == 1 and int(cb["fx_graph_calls"].sum()) > 1
               else "") + f". Per step (median): {ev['kernel_launches_per_step']:g} kernel launch(es), "
            f"{ev['kernels_per_step']:g} kernel(s)")
    if ev["memcpy_dtod"]:
        text += f", {ev['memcpy_dtod']} device-to-device copies in total"
    if ev["memsets"]:
        text += f", {ev['memsets']} memsets"
    if ev["graph_launches"]:
        text += f", {ev['graph_launches']} cudaGraphLaunch calls (CUDA graphs replayed)"
    text += ". Kernels: " + ", ".join(_short(k, 48) for k in kernels) + "."
    return [Finding("q9.compile", 9, "What torch.compile changed", text, ev)]


def _q10_cost(r) -> list[Finding]:
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


_RULES: tuple[Callable, ...] = (_q1_table, _q2_bound, _q3_cold, _q4_offset, _q5_chain, _q6_paths, _q7_sync,
                                _q8_variance, _q9_compile, _q10_cost)


def findings(report_or_session, config=None) -> list[Finding]:
    """Turn a trace's analyses into short findings, ordered by study question.

    Args:
        report_or_session: a :class:`profiling_core.analyses.Report`, or a trace session (analysed here).
        config: the ``ExperimentConfig`` of the run, if known (passed to ``analyze``).

    Returns:
        A list of :class:`Finding`, one or more per study question the trace can answer (questions that need
        data the trace lacks, e.g. a dispatch chain without steps, are left out; a missing GPU lane is said).
    """
    from .analyses import Report, analyze
    r = report_or_session if isinstance(report_or_session, Report) else analyze(report_or_session, config=config)
    out: list[Finding] = []
    for rule in _RULES:
        out.extend(rule(r))
    return out
