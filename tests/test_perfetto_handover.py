"""The perfetto engine's hand-over: the extraction queries' results as perfetto's own ``QueryResultIterator`` holds
them (trace_processor's answer encoded as the protobuf it sends, ``tp_recorded.ProtoTraceProcessor``) become the same
tables as a plain read of the recorded CSV files, and the args reader fetches only the arg sets it is asked for.

No trace_processor binary runs here: the rows are those a real trace_processor v58.2 printed (tests/data/tp_tables).
"""
from __future__ import annotations

import json
import re

import pytest
import tp_recorded

from profiling_core.trace import TraceSession
from profiling_core.trace import _extract
from profiling_core.trace._perfetto import PerfettoBackend

LOCAL = tp_recorded.local_recordings()


def _session(trace, folder):
    started = []

    def start():
        started.append(tp_recorded.ProtoTraceProcessor(folder))
        return started[-1]
    s = TraceSession(str(trace), "perfetto", "a replay through perfetto's own result objects", PerfettoBackend(start))
    return s, started


def _in_list(sql: str) -> list:
    return re.search(r"arg_set_id IN \(([^)]*)\)", sql).group(1).split(",")


def _int(v, null=None):
    return null if v is None else int(v)


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_the_tables_hold_the_recorded_rows_as_perfetto_hands_them_over(name):
    trace, folder = LOCAL[name]
    s, _ = _session(trace, folder)
    tb = s.tables
    _, sl = tp_recorded.read_csv(folder, "slice")  # id, ts, dur, track_id, category, name, depth, parent_id, arg_set_id
    sl.sort(key=lambda r: int(r[0]))
    assert [int(r[0]) for r in sl] == list(range(len(sl))) and tb.slice_count == len(sl)
    assert tb.ts.tolist() == [int(r[1]) for r in sl]
    assert tb.dur.tolist() == [int(r[2]) for r in sl]
    assert tb.track_id.tolist() == [int(r[3]) for r in sl]
    assert tb.category.tolist() == [r[4] for r in sl]
    assert tb.name.tolist() == [r[5] for r in sl]
    assert tb.depth.tolist() == [int(r[6]) for r in sl]
    assert tb.parent_id.tolist() == [_int(r[7], -1) for r in sl]
    assert tb.arg_set_id.tolist() == [_int(r[8], -1) for r in sl]
    _, fl = tp_recorded.read_csv(folder, "flow")
    fl.sort(key=lambda r: int(r[0]))
    assert list(zip(tb.flow_out.tolist(), tb.flow_in.tolist())) == [(int(r[1]), int(r[2])) for r in fl]
    _, th = tp_recorded.read_csv(folder, "thread")
    assert tb.threads == sorted((int(u), _int(tid), nm, _int(up), _int(main) or 0) for u, tid, nm, up, main in th)
    _, pr = tp_recorded.read_csv(folder, "process")
    assert tb.processes == sorted((int(u), _int(pid), nm) for u, pid, nm in pr)
    _, tt = tp_recorded.read_csv(folder, "thread_track")
    for tid, utid, _name in tt:
        assert tb.track_utid[int(tid)] == int(utid)
    s.close()


def test_slice_ids_that_are_not_0_to_n_minus_1_are_refused():
    trace, folder = LOCAL["64_bf16_cold_eager"]
    tp = tp_recorded.ProtoTraceProcessor(folder)
    tp.recording.conn.execute("DELETE FROM slice WHERE id = 3")  # ids 0..n with a gap: not 0..n-1
    s = TraceSession(str(trace), "perfetto", "a replay with a slice id missing", PerfettoBackend(lambda: tp))
    with pytest.raises(ValueError, match="slice ids are not 0..n-1"):
        s.tables  # noqa: B018
    s.close()


def test_args_are_fetched_for_the_arg_sets_asked_for_only(monkeypatch):
    """Each event's args as written in the JSON (a plain scan), asked in overlapping halves and in statements of at
    most 7 arg sets: every arg set asked is sent once per argument name, and no other."""
    monkeypatch.setattr(_extract, "ARGS_PER_QUERY", 7)
    trace, folder = LOCAL["64_bf16_cold_eager"]
    doc = json.loads(trace.read_text())
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("args")]
    by_key = {(e["name"], round(e["ts"] * 1000)): e["args"] for e in xs}
    s, started = _session(trace, folder)
    tb = s.tables
    names = tb.name.tolist()
    rows = [i for i in range(tb.slice_count) if tb.arg_set_id[i] >= 0]
    assert len(rows) == len(xs) > 14
    first, second = rows[:len(rows) * 2 // 3], rows[len(rows) // 3:]
    for key in ("Input Dims", "External id", "Sequence number"):
        got = {}
        for part in (first, second):
            got.update(tb.args.get(key, [-1] + tb.arg_set_id[part].tolist()))
        for i in rows:
            assert got.get(int(tb.arg_set_id[i])) == by_key[(names[i], int(tb.ts[i]))].get(key), (key, names[i])
        sent = [q for q in started[0].sent if f"'args.{key}'" in q]
        ids = [int(a) for q in sent for a in _in_list(q)]
        assert sorted(ids) == sorted(int(tb.arg_set_id[i]) for i in rows)  # each once, none that was not asked
        assert max(len(_in_list(q)) for q in sent) <= 7
    assert tb.args.get("Input Dims", []) == {} and tb.args.get("Input Dims", [10**9]) == {}
    s.close()


def test_argument_names_outside_the_allowed_letters_are_refused():
    with pytest.raises(ValueError, match="letters, digits"):
        _extract.args_query("x') OR 1=1 --", [1])
