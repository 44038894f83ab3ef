"""The study's SQL (profiling_core/queries, shown in the Trace lab as "the SQL that answers question N") gives the
analyses' numbers, on both engines' tables.

Each query runs on the mirror's SQLite tables and on trace_processor's recorded tables of the same trace (a replay
of what a real trace_processor printed, loaded into SQLite, with an ``extract_arg`` over its ``args`` rows: not the
engine itself; tests/tp_recorded.py). Its rows are matched with the rows of the analysis that answers the same
question (``analyze()`` on the mirror) by key columns; every query column the analysis also has is compared: the
same name exactly, ``X_ns`` against the analysis's ``X_us`` × 1000 (relative 1e-9).
"""
from __future__ import annotations

import math
from functools import lru_cache

import pandas as pd
import pytest
import tp_recorded

from profiling_core.analyses import analyze
from profiling_core.queries import load_query
from profiling_core.trace import open_trace

LOCAL = tp_recorded.local_recordings()
# Thread/process numbers: of string pids/tids ("stream 7" lanes of 2021 traces) trace_processor prints string-pool
# offsets, the mirror stable synthetic numbers (docs/SQL.md): compared as labels of the rows.
LABELS = {"device", "stream"}

# query -> (Report field, key columns, rows of the query that the analysis holds)
SPECS = {
    "steps": ("steps", ("slice_id",), None),
    "gpu_busy": ("gpu_busy", ("scope",), None),
    "kernels": ("gpu_ops", ("id",), None),
    "per_step_kernels": ("kernel_durations_by_step", ("step", "gpu_id"), lambda q: q[q["category"] == "kernel"]),
    "launch_latency": ("launch_latency", ("gpu_id", "launch_id"), None),
    "sync_wait": ("sync_wait", ("id",), None),
    "compile_breakdown": ("compile_breakdown", ("start_ns",), None),
    "dispatch_chain": ("dispatch_chains", ("step", "id"), None),
    "profiler_table": ("profiler_table", ("name", "lane"), None),
    "cold_start_gap": ("cold_start_gap", ("region_id",), None),
    "kernel_stats": ("kernel_stats", ("name",), None),
}


def _v(x):
    """A cell as a plain Python value (None for NULL/NaN/NA)."""
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return None
    if hasattr(x, "item"):
        return x.item()
    return x


def _rows(df: pd.DataFrame, keys) -> dict:
    out = {}
    for r in df.to_dict("records"):
        k = tuple(_v(r[c]) for c in keys)
        assert k not in out, f"key {k} twice"
        out[k] = {c: _v(v) for c, v in r.items()}
    return out


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


def compare(query: str, q: pd.DataFrame, report) -> tuple[int, list[str]]:
    """(values compared, differences) between one query's rows and its analysis's frame."""
    field, keys, only = SPECS[query]
    a = getattr(report, field)
    q = q if only is None else only(q)
    got, want = _rows(q, keys), _rows(a, keys)
    if set(got) != set(want):
        return 0, [f"{query}: rows {sorted(set(got) ^ set(want), key=str)[:5]} are in one of them only"]
    n, problems = 0, []
    labels: dict = {}
    for k, row in got.items():
        ref = want[k]
        for c, v in row.items():
            if c in keys:
                continue
            if c in LABELS and c in ref:
                labels.setdefault(c, set()).add((v, ref[c]))
                continue
            if c in ("fx_graph_hash", "backward_fx_graph_hash"):  # group_concat(DISTINCT ...): order left open
                same = set((v or "").split(",")) == set((ref[c] or "").split(","))
            elif c in ref:
                same = _close(v, ref[c]) if isinstance(v, float) or isinstance(ref[c], float) else v == ref[c]
            elif c.endswith("_ns") and c[:-3] + "_us" in ref:
                same = _close(None if v is None else v / 1000.0, ref[c[:-3] + "_us"])
            else:
                continue
            n += 1
            if not same:
                problems.append(f"{query} {k} {c}: {v!r} != {ref.get(c, ref.get(c[:-3] + '_us'))!r}")
    for c, pairs in labels.items():  # the same rows share a value on both sides
        n += 1
        if not len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs}):
            problems.append(f"{query} {c}: the values do not name the same rows: {sorted(pairs, key=str)[:4]}")
    return n, problems


@lru_cache(maxsize=None)
def _report(name: str):
    trace, _folder = LOCAL[name]
    with open_trace(trace, engine="sqlite") as s:
        return analyze(s)


@lru_cache(maxsize=None)
def _answers(name: str, engine: str) -> dict:
    trace, folder = LOCAL[name]
    if engine == "mirror":
        with open_trace(trace, engine="sqlite") as s:
            return {q: s.query(load_query(q)) for q in [*SPECS, "gemm_ops", "launch_path"]}
    rec = tp_recorded.RecordedTrace(folder)
    try:
        return {q: rec.query(load_query(q)) for q in [*SPECS, "gemm_ops", "launch_path"]}
    finally:
        rec.close()


ENGINES = ("mirror", "recorded trace_processor")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(LOCAL))
def test_study_queries_give_the_analyses_numbers(name, engine):
    answers, report = _answers(name, engine), _report(name)
    total, problems = 0, []
    for query in SPECS:
        n, p = compare(query, answers[query], report)
        total += n
        problems += p
    assert problems == []
    if not report.steps.empty:
        assert total > 0


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(LOCAL))
def test_gemm_and_launch_path_queries_give_the_analyses_numbers(name, engine):
    answers, report = _answers(name, engine), _report(name)
    # gemm_ops: the innermost GEMM ops with kernels; gemm_throughput times them by their kernels
    g = answers["gemm_ops"]
    g = g[(g["inner_gemms"] == 0) & g["kernel_ns"].notna()]
    t = report.gemm_throughput
    on_gpu = t[t["device"] == "gpu"].set_index("id")
    for r in g.itertuples(index=False):
        if r.id in on_gpu.index:
            assert _close(r.kernel_ns / 1000.0, on_gpu.loc[r.id, "time_us"]) and r.kernel_names == \
                on_gpu.loc[r.id, "kernel_names"], r.id
    # launch_path: one row per (GPU op name, category, API, parent op); launch_paths groups them per op
    lp = answers["launch_path"]
    by_op: dict = {}
    for r in lp.itertuples(index=False):
        d = by_op.setdefault((r.gpu_name, r.gpu_category), {"count": 0, "apis": set(), "occ": 0})
        d["count"] += int(r.count)
        d["apis"].add(r.launch_api)
        d["occ"] += int(r.with_occupancy_query)
    paths = report.launch_paths
    assert len(paths) == len(by_op)
    for r in paths.itertuples(index=False):
        d = by_op[(r.name, r.category)]
        assert (int(r.count), set(r.launch_apis.split(", ")), int(r.occupancy_queries)) == \
            (d["count"], d["apis"], d["occ"])


def test_the_comparison_can_fail():
    name = "64_bf16_cold_eager"
    q = _answers(name, "mirror")["steps"].copy()
    n, problems = compare("steps", q, _report(name))
    assert n > 20 and problems == []
    q.loc[0, "gpu_busy_ns"] += 5
    q.loc[1, "kernels"] += 1
    _n, problems = compare("steps", q, _report(name))
    assert len(problems) == 2 and "gpu_busy_ns" in problems[0] and "kernels" in problems[1]
