"""A step's window ends no later than the recording: a step slice written with an end past the profiler's own
``Trace`` slice is cut there, in the analyses and in the study's SQL alike (the queries' ``_recording.sql``)."""
from __future__ import annotations

from pathlib import Path

import pytest

import verdict_traces as vt
from conftest import scan_trace
from profiling_core import analyze, findings, open_trace
from profiling_core.queries import load_query
from profiling_core.analyses import profiler_table, steps

DATA = Path(__file__).parent / "data"
TRITON = DATA / "traces" / "triton_example.json.gz"


def _scan(path):
    """(end of the recording by the Trace slices or None, [(name, ts, dur)] of the CPU step slices), by a plain
    scan of the JSON, in µs."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    rec = [float(e["ts"]) + float(e["dur"]) for e in ev if e.get("cat") == "Trace"]
    st = [(e["name"], float(e["ts"]), float(e["dur"])) for e in ev
          if str(e.get("name")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"]
    return (max(rec) if rec else None), sorted(st, key=lambda s: s[1])


def _recorded(end, ts, dur):
    return dur if end is None else max(0.0, min(ts + dur, end) - ts)


def test_htas_triton_step_is_cut_at_the_recordings_end():
    """HTA's Triton example: a 355 ms recording whose one step slice claims 13.3 s; every figure reads the 1.67 ms
    the recording holds, and Q2 says the slice was cut and by how much."""
    end, st = _scan(TRITON)
    (name, ts, dur), = st
    assert dur > 13e6 and end - ts < 2000  # the trace as it is: the slice runs 13.3 s past a 355 ms recording
    s = open_trace(TRITON)
    got = steps(s)
    assert got["cpu_dur_us"].tolist() == pytest.approx([end - ts], abs=0.01)
    assert got["cut_us"].tolist() == pytest.approx([ts + dur - end], abs=0.01)
    sql = s.query(load_query("steps"))
    assert sql["cpu_dur_ns"].astype("int64").tolist() == [round((end - ts) * 1000)]
    table = profiler_table(s).set_index("name")
    assert table.loc["ProfilerStep*", "cpu_total_us"] == pytest.approx(end - ts, abs=0.01)
    by_sql = s.query(load_query("profiler_table"))
    step_rows = by_sql[by_sql["name"] == "ProfilerStep*"]
    assert step_rows["cpu_total_ns"].astype("int64").sum() == round((end - ts) * 1000)
    r = analyze(s)
    assert r.summary["cpu_step_median_us"] == pytest.approx(end - ts, abs=0.01)
    q2 = next(f for f in findings(r) if f.id == "q2.bound")
    assert "outlasts the recording" in q2.text and f"{(ts + dur - end) / 1000:.2f} ms" in q2.text
    assert q2.evidence["steps_cut_us"] == {name: pytest.approx(ts + dur - end, abs=0.01)}
    assert "13336" not in q2.text


def _steps_trace(path, *, record_until=None):
    """Three GPU steps; with ``record_until`` (µs after the first step's start), a Trace slice from the first
    step's start to there, as Kineto writes one per recording."""
    t = vt.Trace()
    first = t.t
    for n in range(3):
        t.step(n + 1, lambda t: t.cpu("aten::mm", 40, children=lambda t: t.launch("gemm", 20.0)))
    if record_until is not None:
        t._x("PyTorch Profiler (0)", first, record_until, "Trace", pid="Spans", tid="PyTorch Profiler")
    return t.write(path)


@pytest.mark.parametrize("record_until", [None, 10_000.0, 70.0, 20.0])
def test_steps_are_cut_only_past_the_recording(tmp_path, record_until):
    """No Trace slice, or one that holds every step: nothing is cut. One that ends inside step 2: step 2 keeps its
    recorded part and step 3, which starts after the end, keeps nothing; the SQL says the same."""
    path = _steps_trace(tmp_path / "t.json", record_until=record_until)
    end, st = _scan(path)
    want = [_recorded(end, ts, dur) for _nm, ts, dur in st]
    s = open_trace(path)
    got = steps(s)
    assert got["cpu_dur_us"].tolist() == pytest.approx(want, abs=0.001)
    assert got["cut_us"].tolist() == pytest.approx([d - w for (_n, _t, d), w in zip(st, want)], abs=0.001)
    sql = s.query(load_query("steps"))
    assert (sql["cpu_dur_ns"].astype("int64") / 1000).tolist() == pytest.approx(want, abs=0.001)
    if record_until in (None, 10_000.0):
        assert got["cut_us"].sum() == 0
    else:
        assert got["cut_us"].iloc[-1] == pytest.approx(st[-1][2]) and 0 < got["cpu_dur_us"].iloc[0] <= st[0][2]
