"""The shipped SQL: loader, descriptions, trace_processor-only tables, and every query run on the mirror.

Independent expectations: the real trace_processor's answers (tests/data/h200/tp_golden, CSV) and plain JSON
scans. With ``PERFETTO_BIN`` set, every query also runs on the perfetto engine and must give the same frame.
"""
from __future__ import annotations

import csv
import gzip
import json
import os
import re
from functools import lru_cache
from pathlib import Path

import pytest

from profiling_core.errors import QueryError
from profiling_core.queries import list_queries, load_query, query_names
from profiling_core.trace import open_trace

DATA = Path(__file__).parent / "data"
H200 = sorted((DATA / "h200").glob("*.json"))
TRACES = H200 + [DATA / "cpu" / "64_fp32_warm_eager.json"] + sorted(
    p for p in (DATA / "third_party").iterdir() if ".json" in p.name)
GOLDEN = DATA / "h200" / "tp_golden"
QUERY_DIR = Path(__file__).parents[1] / "profiling_core" / "queries"

# trace_processor tables and functions the queries may use (docs: tp_golden/SCHEMA.txt)
TP_TABLES = {"slice", "thread_track", "thread", "process", "track", "flow", "args"}
EXPECTED = {"steps", "kernel_stats", "per_step_kernels", "gpu_busy", "launch_latency", "launch_path",
            "dispatch_chain", "cold_start_gap", "sync_wait", "compile_breakdown", "profiler_table"}


@lru_cache(maxsize=None)
def session(path: Path):
    return open_trace(str(path), engine="sqlite")


def _golden(name: str, query: str) -> list[dict]:
    with open(GOLDEN / name / f"{query}.csv", newline="") as f:
        return list(csv.DictReader(f))


# --- the loader ---------------------------------------------------------------------------------------------------

def test_every_study_query_is_shipped():
    assert EXPECTED <= set(query_names())
    assert any(n.startswith("example_") for n in query_names())


def test_list_queries_gives_the_leading_comment():
    listed = list_queries()
    assert list(listed) == query_names()
    for name, desc in listed.items():
        first = (QUERY_DIR / f"{name}.sql").read_text().splitlines()[0]
        assert first == f"-- {desc}", name
        assert desc and not desc.endswith(("(", ",", " and", " its")), f"{name}: cut-off description"


def test_load_query_by_name_and_file_name():
    assert load_query("kernels") == load_query("kernels.sql") == (QUERY_DIR / "kernels.sql").read_text()
    assert load_query("steps") == load_query("steps.sql")


def test_includes_expand_to_the_fragment_text():
    raw = (QUERY_DIR / "steps.sql").read_text()
    pairing = (QUERY_DIR / "_launch_pairing.sql").read_text()
    correlation = (QUERY_DIR / "_launch_correlation.sql").read_text()
    recording = (QUERY_DIR / "_recording.sql").read_text()
    launch_step = (QUERY_DIR / "_launch_step.sql").read_text()
    assert "-- @include launch_pairing\n" in raw and "-- @include launch_correlation\n" in pairing
    assert "-- @include recording\n" in raw and "-- @include launch_step\n" in raw
    expected = raw.replace("-- @include launch_pairing\n",
                           pairing.replace("-- @include launch_correlation\n", correlation))
    expected = expected.replace("-- @include recording\n", recording)
    expected = expected.replace("-- @include launch_step\n", launch_step)
    assert load_query("steps") == expected
    assert "_launch_pairing" not in query_names()
    for name in query_names():
        assert "-- @include" not in load_query(name)


@pytest.mark.parametrize("bad", ["nope", "", "../steps", "steps.txt", None, 3])
def test_unknown_query_lists_the_known_ones(bad):
    with pytest.raises(QueryError) as exc:
        load_query(bad)
    msg = str(exc.value)
    assert repr(bad) in msg
    for name in ("steps", "profiler_table", "sync_wait"):
        assert name in msg


@pytest.mark.parametrize("name", query_names())
def test_queries_use_only_trace_processor_tables(name):
    sql = re.sub(r"--[^\n]*", "", load_query(name))
    ctes = set(re.findall(r"(\w+)\s*(?:\([\w\s,]*\))?\s+AS\s*\(", sql, flags=re.I))
    used = set(re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", sql, flags=re.I))
    unknown = used - ctes - TP_TABLES
    assert not unknown, f"{name} reads {sorted(unknown)}"
    assert "PRAGMA" not in sql.upper() and "sqlite_master" not in sql


# --- every query on every trace -------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_every_query_runs_on_the_mirror(path):
    s = session(path)
    for name in query_names():
        df = s.query(load_query(name))
        assert df is not None, name


# --- against the real trace_processor and plain scans ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()))
def test_steps_sql_matches_trace_processor(name):
    want = [r for r in _golden(name, "steps")]
    got = session(DATA / "h200" / f"{name}.json").query(load_query("steps"))
    assert got["name"].tolist() == [r["name"] for r in want]
    assert got["start_ns"].astype("int64").tolist() == [int(r["ts"]) for r in want]
    assert got["cpu_dur_ns"].astype("int64").tolist() == [int(r["dur"]) for r in want]


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()))
def test_kernel_stats_sql_matches_trace_processor(name):
    want = {r["name"]: (int(r["n"]), int(r["d"])) for r in _golden(name, "kernels")}
    got = session(DATA / "h200" / f"{name}.json").query(load_query("kernel_stats"))
    assert {n: (int(c), int(t)) for n, c, t in zip(got["name"], got["count"], got["total_ns"])} == want


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()))
def test_launch_latency_sql_pairs_match_trace_processor_flows(name):
    want = {(r["src"], r["dst"]): int(r["n"]) for r in _golden(name, "flow_pairs")}
    got = session(DATA / "h200" / f"{name}.json").query(load_query("launch_latency"))
    pairs = got.groupby(["launch_name", "gpu_name"]).size().to_dict()
    assert {k: int(v) for k, v in pairs.items()} == want


def _events(path: Path) -> list[dict]:
    op = gzip.open if path.name.endswith(".gz") else open
    with op(path, "rt") as f:
        d = json.load(f)
    return [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("ph") == "X"]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_kernel_stats_sql_matches_a_scan(path):
    per: dict[str, list[float]] = {}
    for e in _events(path):
        if str(e.get("cat", "")).lower() == "kernel":
            per.setdefault(e["name"], []).append(float(e["dur"]))
    got = session(path).query(load_query("kernel_stats")).set_index("name")
    assert set(got.index) == set(per)
    for name, d in per.items():
        assert int(got.loc[name, "count"]) == len(d)
        assert int(got.loc[name, "min_ns"]) == pytest.approx(min(d) * 1000, abs=1)
        assert int(got.loc[name, "max_ns"]) == pytest.approx(max(d) * 1000, abs=1)


def test_gemm_shapes_sql_reads_flattened_input_dims():
    got = session(DATA / "cpu" / "64_fp32_warm_eager.json").query(load_query("gemm_shapes"))
    mm = got[got["name"] == "aten::mm"]
    assert len(mm) == 3 * 4  # three aten::mm, two 64x64 inputs each
    assert set(mm["int_value"].astype(int)) == {64}


def test_example_queries_answer_on_an_h200_trace():
    s = session(DATA / "h200" / "64_bf16_cold_eager.json")
    for name in [n for n in query_names() if n.startswith("example_")]:
        assert len(s.query(load_query(name))) > 0, name


# --- both engines, when a trace_processor binary is available -----------------------------------------------------

@pytest.mark.perfetto
@pytest.mark.skipif(not os.environ.get("PERFETTO_BIN"), reason="needs a trace_processor_shell binary (PERFETTO_BIN)")
@pytest.mark.parametrize("path", H200, ids=lambda p: p.name)
def test_queries_agree_across_engines(path):
    import pandas as pd
    lite, tp = session(path), open_trace(str(path), engine="perfetto")
    for name in query_names():
        a = lite.query(load_query(name)).reset_index(drop=True)
        b = tp.query(load_query(name)).reset_index(drop=True)
        if name in ("dispatch_chain", "example_kernel_args"):  # ids / arg ordering are engine-specific
            assert len(a) == len(b), name
            continue
        drop = [c for c in a.columns if c.endswith("id")]
        pd.testing.assert_frame_equal(a.drop(columns=drop), b.drop(columns=drop), check_dtype=False, obj=name)
