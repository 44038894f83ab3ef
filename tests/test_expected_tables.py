"""Every analysis on three small traces against a readable expected table (the way perfetto's diff tests pair a small
input with its expected output): tests/data/expected/<trace>/<analysis>.csv.

The expected tables are plain CSV to read and review: integers, names and ids are compared exactly, floats to a
relative 1e-9, and NULL (empty cell) against None/NaN/NA; column dtypes are not pinned. They were checked when
written: the same numbers come from trace_processor's recorded tables of these traces (test_engines_agree.py), from
the study's SQL (test_study_queries.py), and from plain scans of the JSON and torch's own table
(test_analyses.py). After a deliberate change, rewrite them with ``python tests/test_expected_tables.py`` and review
the diff.
"""
from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "data" / "expected"
TRACES = {  # name -> trace file: the study's eager and CUDA-graph runs on an H200, and a CPU run
    "64_bf16_cold_eager": HERE / "data" / "traces" / "64_bf16_cold_eager.json",
    "64_bf16_warm_compile_ro": HERE / "data" / "traces" / "64_bf16_warm_compile_ro.json",
    "cpu_64_fp32_warm_eager": HERE / "data" / "cpu" / "64_fp32_warm_eager.json",
}
TABLES = ("steps", "cpu_vs_gpu", "gpu_busy", "gpu_ops", "kernel_stats", "kernel_durations_by_step",
          "launch_latency", "launch_paths", "dispatch_chains", "cold_start_gap", "sync_wait", "compile_breakdown",
          "gemm_throughput", "profiler_table")


def _report(name: str):
    from profiling_core.analyses import analyze
    from profiling_core.trace import open_trace
    with open_trace(TRACES[name], engine="sqlite") as s:
        return analyze(s)


def _cell(v) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return repr(v)
    if hasattr(v, "item"):
        return _cell(v.item())
    return str(v)


def write(name: str) -> None:
    r = _report(name)
    folder = EXPECTED / name
    folder.mkdir(parents=True, exist_ok=True)
    for t in TABLES:
        df = getattr(r, t)
        with open(folder / f"{t}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(df.columns)
            for row in df.astype(object).itertuples(index=False):
                w.writerow([_cell(v) for v in row])


def _same(got: str, want: str) -> bool:
    if got == want:
        return True
    try:
        return math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=0.0)
    except ValueError:
        return False


@pytest.fixture(scope="module")
def reports():
    return {name: _report(name) for name in TRACES}


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("name", sorted(TRACES))
def test_analysis_equals_expected_table(reports, name, table):
    with open(EXPECTED / name / f"{table}.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    df = getattr(reports[name], table)
    assert list(df.columns) == rows[0]
    got = [[_cell(v) for v in row] for row in df.astype(object).itertuples(index=False)]
    want = rows[1:]
    assert len(got) == len(want), f"{len(got)} rows, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        bad = [(c, a, b) for c, a, b in zip(rows[0], g, w) if not _same(a, b)]
        assert not bad, f"row {i}: (column, got, expected) {bad}"


def test_expected_tables_say_what_the_study_says():
    """A few values read off the expected tables by hand, as the study states them: the cold eager H200 run's
    steps launch one GEMM and one add kernel each; the CUDA-graph run launches its step with one cudaGraphLaunch;
    the CPU run has no GPU lane."""
    def table(name, t):
        return pd.read_csv(EXPECTED / name / f"{t}.csv")
    steps = table("64_bf16_cold_eager", "steps")
    assert steps["kernels"].tolist() == [2, 2, 2] and steps["launches"].tolist() == [2, 2, 2]
    paths = table("64_bf16_warm_compile_ro", "launch_paths")
    assert "cudaGraphLaunch" in set(paths["launch_apis"])
    assert table("cpu_64_fp32_warm_eager", "gpu_ops").empty


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    for n in TRACES:
        write(n)
        print(f"wrote {EXPECTED / n}")
