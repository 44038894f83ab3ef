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


def _own_by_scan(path) -> float:
    """The step slices' own time (µs) by a plain scan: each step's recorded window (cut at the recording's end)
    less the time inside it of the CPU ops on its thread that start in its slice as written (their launch calls lie
    inside them)."""
    end, st = _scan(path)
    ev = [e for e in scan_trace(path) if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    own = 0.0
    for _name, ts, dur in st:
        w = ts + _recorded(end, ts, dur)
        own += (w - ts) - sum(max(0.0, min(w, e["ts"] + e["dur"]) - max(ts, e["ts"]))
                              for e in ev if ts <= e["ts"] < ts + dur)
    return own


@pytest.mark.parametrize("record_until,want", [(None, 12.0), (70.0, 6.0), (20.0, 2.0)])
def test_a_cut_steps_own_time_counts_its_children_inside_the_cut(tmp_path, record_until, want):
    """Three steps of 44 µs, each 2 µs, a 40 µs aten::mm, 2 µs (4 µs of own time). A recording that ends 70 µs
    after the first step's start holds step 1 (4 µs own) and 21 µs of step 2, of which its mm ran 19 (2 µs own); one
    that ends at 20 µs holds 20 µs of step 1, 18 of them in its mm (2 µs own). The steps' own time must not count
    the children's time past the cut (it went negative: 21 - 40 µs), in the table and in its SQL alike."""
    path = _steps_trace(tmp_path / "t.json", record_until=record_until)
    assert _own_by_scan(path) == pytest.approx(want, abs=0.001)
    s = open_trace(path)
    table = profiler_table(s).set_index("name")
    assert table.loc["ProfilerStep*", "self_cpu_us"] == pytest.approx(want, abs=0.001)
    sql = s.query(load_query("profiler_table"))
    assert sql.loc[sql["name"] == "ProfilerStep*", "self_cpu_ns"].astype("int64").sum() / 1000 == pytest.approx(
        want, abs=0.001)


def test_a_cut_step_on_a_spill_track_counts_its_children_inside_the_cut(tmp_path):
    """A step entered inside a Python frame and left after it (a spill slice: it cannot nest in the frame) whose mm
    also outlasts the frame, so it nests in the step on the spill track: the frame 0–30 µs, the step 2–46, its mm
    4–44, the recording's end at 20. The step's recorded window is 2–20, of which its mm ran 16: 2 µs own (it was
    18 - 40 µs)."""
    t = vt.Trace()
    base = t.t
    t._x("loop.py(1): run", base, 30.0, "python_function")
    t._x("ProfilerStep#1", base + 2, 44.0, "user_annotation")
    t._x("aten::mm", base + 4, 40.0, "cpu_op")
    t._x("PyTorch Profiler (0)", base, 20.0, "Trace", pid="Spans", tid="PyTorch Profiler")
    path = t.write(tmp_path / "t.json")
    s = open_trace(path)
    table = profiler_table(s).set_index("name")
    assert table.loc["ProfilerStep*", "self_cpu_us"] == pytest.approx(2.0, abs=0.001)
    sql = s.query(load_query("profiler_table")).set_index("name")
    assert (sql["self_cpu_ns"].astype("int64") / 1000).to_dict() == pytest.approx(
        table["self_cpu_us"].to_dict(), abs=0.001)
