"""The analyses' pieces computed from the mirror's in-memory columns (no SQL, so no wait for the SQLite tables the
mirror writes in the background) give exactly what their shipped queries give: ``sync_calls``, ``compile_cpu``,
``cold_start_gap``, ``gemm_slices`` and ``gemm_shapes`` (the latter from the args database's raw JSON). Where the
columns cannot tell (ties a query breaks arbitrarily, unusual args JSON) they answer None and the query runs; the
same functions on a session without columns (``tables`` None, as perfetto) take the query path.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from session_views import SqlOnly as _SqlOnly

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("snapshot_analyses", ROOT / "scripts" / "snapshot_analyses.py")
snap = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("snapshot_analyses", snap)
_spec.loader.exec_module(snap)

PATHS = snap.trace_paths()


def _norm(values) -> list:
    out = []
    for v in values:
        if v is None or (isinstance(v, float) and v != v) or v.__class__.__name__ == "NAType":
            out.append(None)
        elif isinstance(v, np.integer):
            out.append(int(v))
        else:
            out.append(v)
    return out


def _rows(df) -> list[tuple]:
    return list(zip(*(_norm(df[c].astype(object).tolist()) for c in df.columns))) if len(df) else []


@pytest.mark.parametrize("key", sorted(PATHS))
def test_column_pieces_equal_their_queries(key):
    from profiling_core.analyses import compile as comp
    from profiling_core.analyses import gemm, timing
    from profiling_core.analyses._shared import Shared
    from profiling_core.queries import load_query
    from profiling_core.trace import open_trace
    with open_trace(str(PATHS[key]), engine="sqlite") as s:
        sh = Shared(s)
        q = lambda name: s.query(load_query(name))  # noqa: E731

        assert [tuple(_norm(r)) for r in timing._sync_calls(sh)] == _rows(q("sync_calls"))

        cpu = comp._compile_cpu_rows(sh)
        if cpu is not None:
            assert [tuple(_norm(r)) for r in cpu] == _rows(q("compile_cpu"))

        cold = timing._cold_start_rows(sh)
        if cold is not None:
            assert [tuple(_norm(r)) for r in cold] == _rows(q("cold_start_gap"))

        gm = gemm._gemm_slices(sh)
        want = q("gemm_slices")
        assert list(gm) == list(want.columns)
        got = list(zip(*(_norm(gm[c].tolist()) for c in want.columns))) if len(gm["id"]) else []
        assert got == _rows(want)

        ops = dict(zip(gm["id"].tolist(), gm["arg_set_id"].tolist()))
        from_args = gemm._dims_from_args(s, ops)
        from_sql = gemm._dims_by_op(s)
        assert from_args is not None  # the test traces' args are all usual
        assert from_args == {k: v for k, v in from_sql.items() if k in ops}

        # without columns the same functions answer from the queries
        bare = Shared(_SqlOnly(s))
        assert comp._compile_cpu_rows(bare) is None and timing._cold_start_rows(bare) is None
        assert gemm._dims_from_args(bare.session, ops) is None
        gb = gemm._gemm_slices(bare)
        assert all(_norm(gb[c].tolist()) == _norm(gm[c].tolist()) for c in gm)
        assert [tuple(_norm(r)) for r in timing._sync_calls(bare)] == _rows(q("sync_calls"))


# --- gemm_shapes from the raw args JSON: unusual arg sets go to the query -------------------------------------------
_USUAL = ['[[2,3],[3,4]]', '[[2,3],[3,4],[]]', '[[true,3],[3,false]]', '[[[1,2]],[[3]]]', '[[2.0,3],[3,4]]',
          '[[2,3],[3,4],[5]]', '[[[1],[2]],[[3],[4]]]', '[[2,"x"],[null,4]]', '[[2,3],{"a":[1]}]', '[]', '5', 'null',
          '[[1,2,3,4,5,6,7,8,9,10,11],[11,2]]', '[[-0,3],[3,4]]', '[[1],[2],[3],[4],[5],[6],[7],[8],[9],[10],[11,12]]',
          '[[], [2, 3], [], []]', '[[9223372036854775807,1],[1,2]]']
_UNUSUAL = ['"Input Dims": [[2,3],[3,4]], "Input Dims": [[7,7],[7,7]]',  # a duplicate key
            '"Input\\u0020Dims": [[2,3],[3,4]]',  # an escape
            '"Input Dims[0]": [[9]], "Input Dims": [[2,3],[3,4]]',  # another key with the same flat key
            '"In[1]put Dims": [[9,9]]',
            '"Input Dims": [[99999999999999999999,1],[1,2]]']  # beyond int64: SQLite's atom is a REAL


def _gemm_trace(tmp_path, args: list[str]) -> str:
    ev = ['{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}']
    for i, a in enumerate(args):
        ev.append('{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": %d, "dur": 5, '
                  '"args": {%s}}' % (10 * i, a))
    p = tmp_path / "gemm_args.json"
    p.write_text('{"traceEvents": [' + ",\n".join(ev) + "]}")
    return str(p)


def test_input_dims_from_raw_args_equal_gemm_shapes(tmp_path):
    from profiling_core.analyses import gemm
    from profiling_core.trace import open_trace
    args = [f'"External id": {i}, "Input Dims": {d}, "Input type": ["float"]' for i, d in enumerate(_USUAL)]
    args.append('"External id": 99')  # no dims at all
    with open_trace(_gemm_trace(tmp_path, args), engine="sqlite") as s:
        gm = gemm._gemm_slices(gemm.Shared(s))
        ops = dict(zip(gm["id"].tolist(), gm["arg_set_id"].tolist()))
        assert len(ops) == len(args)
        got = gemm._dims_from_args(s, ops)
        assert got is not None
        assert got == gemm._dims_by_op(s)
        assert len(got) >= 10


@pytest.mark.parametrize("unusual", _UNUSUAL)
def test_unusual_args_go_to_the_query(tmp_path, unusual):
    from profiling_core.analyses import gemm
    from profiling_core.trace import open_trace
    try:
        with open_trace(_gemm_trace(tmp_path, ['"Input Dims": [[2,3],[3,4]]', unusual]), engine="sqlite") as s:
            gm = gemm._gemm_slices(gemm.Shared(s))
            ops = dict(zip(gm["id"].tolist(), gm["arg_set_id"].tolist()))
            if len(ops) < 2:
                pytest.skip("the loader left the event out")
            assert gemm._dims_from_args(s, ops) is None
            assert gemm._dims_by_op(s, ops) == gemm._dims_by_op(s)  # the query's answer
    except Exception as e:  # noqa: BLE001
        if type(e).__name__ in ("TraceFormatError", "TraceError"):
            pytest.skip(f"the loader refuses it: {e}")
        raise


def test_input_dims_rows_keys_sorted_as_sql():
    """Keys in SQLite's BINARY order ([10] before [2]); a later equal (i, j) wins, as in the query's order."""
    import msgspec

    from profiling_core.analyses import gemm
    raw = json.dumps({"Input Dims": [[[1]], [[2]], [[3]], [[4]], [[5]], [[6]], [[7]], [[8]], [[9]], [[10]], [[11]]]})
    rows = gemm._input_dims_rows(raw.encode(), msgspec.json.Decoder().decode)
    assert [k for k, _ in rows] == sorted(k for k, _ in rows)
    assert rows[1][0] == "args.Input Dims[10][0][0]"


@pytest.mark.parametrize("key", sorted(PATHS))
def test_analyze_without_columns_is_the_same(key):
    """analyze() on the same session without its columns (every piece from its query, as on perfetto) gives the
    same Report: the column paths and their query fallbacks agree table by table."""
    from profiling_core.analyses import analyze
    from profiling_core.trace import open_trace
    with open_trace(str(PATHS[key]), engine="sqlite") as s:
        a, b = analyze(s), analyze(_SqlOnly(s))
    for f in a.__dataclass_fields__:
        va, vb = getattr(a, f), getattr(b, f)
        if hasattr(va, "columns"):
            assert snap.digest(va) == snap.digest(vb), f
        else:
            assert va == vb, f


def test_gemm_throughput_with_config_and_peak_without_columns_is_the_same():
    from profiling_core.analyses import gemm_throughput
    from profiling_core.config import ExperimentConfig
    from profiling_core.trace import open_trace
    for key in ("h200/4096_bf16_warm_eager.json", "cpu/64_fp32_warm_eager.json",
                "traces/gaunernst_bert-small-uncased__1016001.json.gz"):
        with open_trace(str(PATHS[key]), engine="sqlite") as s:
            for cfg, peak in ((ExperimentConfig(size=4096, batch=2), 989.0), (None, 500.0), (None, None)):
                a = gemm_throughput(s, peak_tflops=peak, config=cfg)
                b = gemm_throughput(_SqlOnly(s), peak_tflops=peak, config=cfg)
                assert snap.digest(a) == snap.digest(b), (key, cfg, peak)
                assert len(a) > 0 or cfg is None, (key, cfg, peak)
