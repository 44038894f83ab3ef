"""Both engines feed the analyses the same tables, so the analyses give the same answers.

The perfetto engine gets its tables from the extraction queries of ``profiling_core.trace._extract``. No
trace_processor binary can be had here or on CI, so these tests **replay trace_processor's output, not the engine**:
the tables a real ``trace_processor_shell`` (v58.2) printed for each trace (tests/data/tp_tables, and the shared
recordings of every shared trace when ``shared/`` is beside the repository) are loaded into SQLite
(tests/tp_recorded.py), the same extraction queries run over them, and every analysis on those tables must equal the
analysis on the mirror's own tables of the same trace file: counts, ids and names exactly, floats within a relative
1e-9 (both sides compute from the same integer nanoseconds, so in practice they are equal).

The engine itself (start the shell, send SQL, get frames) is exercised with ``PERFETTO_BIN`` only.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tp_recorded

from profiling_core.analyses import analyze
from profiling_core.trace import open_trace

LOCAL = tp_recorded.local_recordings()
SHARED = tp_recorded.shared_recordings()
BIN = os.environ.get("PERFETTO_BIN")

# Columns whose values are thread/process numbers: for string pids/tids ("stream 7" lanes of 2021 traces) they are
# trace_processor's string-pool offsets on one side and the mirror's stable synthetic numbers on the other
# (docs/SQL.md, "Synthetic pids and tids"): compared as labels (the same rows share a value on both sides).
LABELS = {"device", "stream"}

# Shared traces whose recorded tables differ from the mirror's in a way that reaches the analyses (docs/SQL.md; the
# tables themselves are compared in test_mirror_vs_recorded.py).
KNOWN = {
    name: "the mirror keeps the exact decimal nanoseconds of float-µs timestamps, trace_processor rounds them through "
          "a double (docs/SQL.md, known difference 'Timestamps')"
    for name in ("third_party_hta_nccl_2rank_rank0_a100__nccl_data",
                 "third_party_hta_ns_resolution_v100__rank-0.Apr_03_18_51_38.1102.pt.trace")}


def _norm(values) -> list:
    return [None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v for v in values]


def _same_labels(a: list, b: list) -> bool:
    """Whether a and b name the same partition of the rows (a bijection between their values)."""
    pairs = set(zip(a, b))
    return len(pairs) == len({x for x, _ in pairs}) == len({y for _, y in pairs})


def frame_differences(name: str, got: pd.DataFrame, want: pd.DataFrame) -> list[str]:
    """What differs between two frames of one analysis (empty when they agree)."""
    if list(got.columns) != list(want.columns):
        return [f"{name}: columns {list(got.columns)} != {list(want.columns)}"]
    if len(got) != len(want):
        return [f"{name}: {len(got)} rows != {len(want)}"]
    out = []
    for c in want.columns:
        a, b = _norm(got[c].astype(object).tolist()), _norm(want[c].astype(object).tolist())
        if c in LABELS:
            ok = _same_labels(a, b)
        elif all(isinstance(x, float) or x is None for x in a + b) and any(isinstance(x, float) for x in a + b):
            fa = np.array([np.nan if x is None else x for x in a], dtype=float)
            fb = np.array([np.nan if x is None else x for x in b], dtype=float)
            ok = bool(np.allclose(fa, fb, rtol=1e-9, atol=0.0, equal_nan=True))
        else:
            ok = a == b
        if not ok:
            bad = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y) if c not in LABELS else 0
            out.append(f"{name}.{c}: row {bad}: {a[bad]!r} != {b[bad]!r}")
    return out


def report_differences(got, want) -> list[str]:
    out = []
    for field in want.__dataclass_fields__:
        x, y = getattr(got, field), getattr(want, field)
        if isinstance(y, pd.DataFrame):
            out += frame_differences(field, x, y)
    # devices and the options the trace was recorded with come from the JSON's top level, read by our loader on both
    # engines (the perfetto session reads the file itself: trace_processor does not keep them), so a replay of
    # trace_processor's tables has none
    sa = {k: v for k, v in got.summary.items() if k not in ("engine", "devices", "recorded_with")}
    sb = {k: v for k, v in want.summary.items() if k not in ("engine", "devices", "recorded_with")}
    if sa != sb:
        out.append(f"summary: {sa} != {sb}")
    return out


def _check(trace: Path, folder: Path) -> list[str]:
    rec = tp_recorded.RecordedTrace(folder)
    try:
        replayed = analyze(rec)
    finally:
        rec.close()
    with open_trace(trace, engine="sqlite") as s:
        mirrored = analyze(s)
    return report_differences(replayed, mirrored)


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_extraction_queries_over_recorded_tables_give_the_mirrors_analyses(name):
    trace, folder = LOCAL[name]
    assert _check(trace, folder) == []


@pytest.mark.skipif(not SHARED, reason="shared/traces is not beside the repository")
@pytest.mark.parametrize("name", sorted(SHARED) or ["none"])
def test_same_on_every_shared_trace(name):
    trace, folder = SHARED[name]
    problems = _check(trace, folder)
    if name in KNOWN:
        assert problems, f"{name} now agrees: drop it from KNOWN and docs/SQL.md"
        pytest.xfail(KNOWN[name])
    assert problems == []


def test_the_comparison_can_fail():
    """The comparison sees a changed count, a changed name and a changed float."""
    trace, folder = LOCAL["64_bf16_cold_eager"]
    with open_trace(trace, engine="sqlite") as s:
        r = analyze(s)
    with open_trace(trace, engine="sqlite") as s:
        other = analyze(s)
    other.steps.loc[0, "kernels"] += 1
    other.gpu_ops.loc[0, "name"] = "x"
    other.launch_latency.loc[0, "latency_us"] *= 1 + 1e-6
    got = report_differences(other, r)
    assert sorted(g.split(":")[0] for g in got) == ["gpu_ops.name", "launch_latency.latency_us", "steps.kernels"]


def test_extracted_tables_hold_the_recorded_rows():
    """The extraction reads trace_processor's rows as they are: a hand check on the smallest H200 trace."""
    trace, folder = LOCAL["64_bf16_cold_eager"]
    rec = tp_recorded.RecordedTrace(folder)
    tb = rec.tables
    _, slices = tp_recorded.read_csv(folder, "slice")
    assert tb.slice_count == len(slices) == 34
    assert tb.ts.tolist() == [int(r[1]) for r in slices]
    assert tb.name.tolist() == [r[5] for r in slices]
    assert tb.parent_id.tolist() == [-1 if r[7] is None else int(r[7]) for r in slices]
    _, flows = tp_recorded.read_csv(folder, "flow")
    assert list(zip(tb.flow_out.tolist(), tb.flow_in.tolist())) == [(int(r[1]), int(r[2])) for r in flows]
    rec.close()


def test_extracted_args_are_the_recorded_values():
    """An arg set's array is put back together from trace_processor's ``args.Input Dims[i][j]`` rows: the first
    aten::addmm of the MI250 trace, against a plain scan of the JSON."""
    import gzip
    import json
    trace, folder = LOCAL["mi250_minitoy_train_ROCm6_2_kineto"]
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    first = min((e for e in events if e.get("ph") == "X" and e.get("name") == "aten::addmm"), key=lambda e: e["ts"])
    assert first["args"]["Input Dims"][:3] == [[128], [5, 128], [128, 128]]
    rec = tp_recorded.RecordedTrace(folder)
    tb = rec.tables
    row = next(i for i, n in enumerate(tb.name.tolist()) if n == "aten::addmm")
    asid = int(tb.arg_set_id[row])
    assert tb.args.get("Input Dims", [asid]) == {asid: [[128], [5, 128], [128, 128]]}  # trailing [] have no rows
    assert isinstance(tb.args.get("External id", [asid])[asid], int)
    rec.close()


needs_bin = pytest.mark.skipif(not (BIN and os.path.isfile(BIN)),
                               reason="set PERFETTO_BIN to a trace_processor_shell binary to run these")


@needs_bin
@pytest.mark.perfetto
@pytest.mark.parametrize("name", sorted(LOCAL))
def test_perfetto_engine_gives_the_mirrors_analyses(name):
    trace, _folder = LOCAL[name]
    with open_trace(trace, engine="perfetto", perfetto_bin=BIN) as p, open_trace(trace, engine="sqlite") as m:
        assert p.engine == "perfetto"
        assert report_differences(analyze(p), analyze(m)) == []


@needs_bin
@pytest.mark.perfetto
def test_auto_picks_a_reachable_binary(monkeypatch):
    monkeypatch.setenv("PERFETTO_BIN", BIN)
    trace, _folder = LOCAL["64_bf16_cold_eager"]
    with open_trace(trace) as s:
        assert s.engine == "perfetto" and s.engine_reason == f"perfetto: trace_processor at {BIN}"
