"""The speed-ups of the analyses change nothing: every Report table equals the snapshot taken from the code before.

The snapshot (tests/data/analyses_snapshot/report_tables.json, written by scripts/snapshot_analyses.py from the code
as it was before the analyses were made faster) holds, per trace and per Report DataFrame, the columns, dtypes, row
count and a SHA-256 of every value written exactly (floats via float.hex; None, NaN, pd.NA apart), and the summary.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from session_views import SqlOnly as _SqlOnly

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("snapshot_analyses", ROOT / "scripts" / "snapshot_analyses.py")
snap = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("snapshot_analyses", snap)
_spec.loader.exec_module(snap)

EXPECTED = json.loads(snap.SNAPSHOT.read_text())
PATHS = snap.trace_paths()


def test_snapshot_covers_every_test_trace():
    local = {k for k in PATHS if not k.startswith("shared:")}
    assert local <= set(EXPECTED), f"traces missing from the snapshot: {sorted(local - set(EXPECTED))}"
    assert len(local) >= 30


@pytest.mark.parametrize("key", sorted(PATHS))
def test_report_tables_identical(key):
    if key not in EXPECTED:
        pytest.skip(f"{key} not in the snapshot")
    got = snap.report_tables(PATHS[key])
    problems = snap.compare({key: EXPECTED[key]}, {key: got})
    assert not problems, "\n".join(problems)


# --- the numpy paths give exactly what the shipped SQL gives (every row, column and value, in order) ---------------
RAW = {  # query name -> (module, function computing the same frame from the shared pieces)
    "steps": ("steps", "_steps_raw"),
    "gpu_busy": ("steps", "_gpu_busy_raw"),
    "per_step_kernels": ("kernels", "_per_step_kernels_raw"),
    "launch_latency": ("launches", "_launch_latency_raw"),
    "gemm_ops": ("gemm", "_gemm_ops_raw"),
    "sync_wait": ("timing", "_sync_wait_raw"),
    "compile_breakdown": ("compile", "_compile_breakdown_raw"),
    "dispatch_chain": ("launches", "_dispatch_chain_raw"),
    "profiler_table": ("table", "_profiler_table_raw"),
    "kernels": ("_shared", None),  # Shared.gpu_ops_raw
}


def _same(sql_df, got):
    import pandas as pd
    assert list(got.columns) == list(sql_df.columns)
    assert len(got) == len(sql_df)
    for c in sql_df.columns:
        a = [None if (v is None or v is pd.NA or (isinstance(v, float) and v != v)) else v for v in sql_df[c].tolist()]
        b = [None if (v is None or v is pd.NA or (isinstance(v, float) and v != v)) else v for v in got[c].tolist()]
        assert a == b, f"column {c} differs"


@pytest.mark.parametrize("key", sorted(PATHS))
def test_numpy_paths_equal_the_sql(key):
    import importlib

    from profiling_core.analyses._shared import Shared
    from profiling_core.queries import load_query
    from profiling_core.trace import open_trace
    with open_trace(str(PATHS[key]), engine="sqlite") as s:
        sh = Shared(s)
        for query, (mod, fn) in RAW.items():
            got = sh.gpu_ops_raw if fn is None else getattr(
                importlib.import_module(f"profiling_core.analyses.{mod}"), fn)(sh)
            _same(s.query(load_query(query)), got)


@pytest.mark.parametrize("key", sorted(PATHS))
def test_launch_path_groups_equal_the_sql(key):
    """launch_path's groups and sums (row order among equal name/API/parent is not fixed by its ORDER BY)."""
    from profiling_core.analyses._shared import Shared
    from profiling_core.analyses.launches import _launch_path_raw
    from profiling_core.queries import load_query
    from profiling_core.trace import open_trace
    with open_trace(str(PATHS[key]), engine="sqlite") as s:
        want = s.query(load_query("launch_path"))
        got = _launch_path_raw(Shared(s))
    assert list(got.columns) == list(want.columns)
    assert sorted(map(tuple, got.astype(str).values.tolist())) == sorted(map(tuple, want.astype(str).values.tolist()))


@pytest.mark.parametrize("query", ["slice_tree", "launch_pairs", "step_slices", "thread_lanes", "kernels"])
def test_query_columns_equal_query(query):
    """TraceSession.query_columns (chunked, int columns as numpy, shared strings) gives query()'s values."""
    import numpy as np

    from profiling_core.queries import load_query
    from profiling_core.trace import open_trace
    for key in ("h200/4096_bf16_warm_eager_a20.json", "cpu/64_fp32_warm_eager.json",
                "traces/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"):
        with open_trace(str(PATHS[key]), engine="sqlite") as s:
            df = s.query(load_query(query))
            results = [s.query_columns(load_query(query)),
                       s._backend._b.query_columns(load_query(query), chunk=7)]  # many chunks, mixed columns
        for cols, data in results:
            assert cols == list(df.columns)
            for c, values in zip(cols, data):
                got = values.tolist() if isinstance(values, np.ndarray) else list(values)
                want = [None if (v is None or v != v) else v for v in df[c].astype(object).tolist()]
                assert got == want, (key, c)


@pytest.mark.parametrize("key", sorted(PATHS))
def test_shared_pieces_from_the_columns_equal_the_queries(key):
    """On the mirror the analyses read the slice/flow/thread columns in memory instead of running slice_tree,
    flow_links, thread_lanes and step_slices: each piece must equal what those queries give."""
    import numpy as np

    from profiling_core.analyses._shared import Shared
    from profiling_core.trace import open_trace
    with open_trace(str(PATHS[key]), engine="sqlite") as s:
        assert s.tables is not None
        cols, via_sql = Shared(s), Shared(_SqlOnly(s))
        a, b = cols.slices, via_sql.slices
        assert set(a) == set(b)
        for c in a:
            if isinstance(a[c], np.ndarray):
                assert a[c].dtype == b[c].dtype and np.array_equal(a[c], b[c]), c
            else:
                assert list(a[c]) == list(b[c]) if isinstance(a[c], list) else a[c] == b[c], c
        assert cols.lanes == via_sql.lanes
        _same(via_sql.step_slices, cols.step_slices)
        assert [str(t) for t in via_sql.step_slices.dtypes] == [str(t) for t in cols.step_slices.dtypes]
        pa, pb = cols.p, via_sql.p
        assert set(pa) == set(pb)
        for c in pa:
            assert pa[c].tolist() == pb[c].tolist(), c
