"""The Python frames of threads that ran no Python code while a profile recorded (``with_stack=True``): torch writes
them on thread 0, open from the recording's start to its stop, and the trace's readers put thread 0 on the
process's main thread, where they nest by time alone with that thread's slices (around them, inside them, or on a
track of their own when they end a nanosecond later). The profiler table counts each such frame on its own thread,
as torch's own table does: its self time is its wait.

Expected values come from a plain scan of the JSON: each (pid, tid) lane nested by time on its own, and the frames
of thread 0 by the caller links torch writes with them (``Python id`` / ``Python parent id``); and from torch's own
``key_averages`` of the same recording. The Python table and ``profiler_table.sql`` must both give them."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import record_on_cpu

from profiling_core.analyses import profiler_table
from profiling_core.queries import load_query
from profiling_core.trace import open_trace

DATA = Path(__file__).parent / "data"


def _trace(idle_ts, idle_end, *, idle_threads=1, ids=True):
    """A main thread (pid 7, tid 7) whose two frames held from the start run two profiler steps of a frame around
    an op each, and idle threads' frames written on thread 0 of the same process from ``idle_ts`` to
    ``idle_end`` µs: where they start and end decides how the readers nest them with the main thread's slices."""
    ev = []

    def x(name, cat, tid, ts, end, me=None, up=None):
        e = {"ph": "X", "name": name, "cat": cat, "pid": 7, "tid": tid, "ts": ts, "dur": round(end - ts, 3)}
        if cat == "python_function" and ids:
            e["args"] = {"Python id": me, "Python parent id": up}
        ev.append(e)

    stacks = [["threading.py(1): _bootstrap", "monitor.py(2): run", "threading.py(3): wait"],
              ["server.py(9): serve", "selectors.py(9): select"]][:idle_threads]
    me = 0
    for k, stack in enumerate(stacks):
        up = None
        for depth, name in enumerate(stack):
            me += 1
            x(name, "python_function", 0, idle_ts + k * 0.5 + depth, idle_end, me, up)
            up = me
    x("runpy(1): main", "python_function", 7, 100, 1000, 10, None)
    x("loop.py(2): run", "python_function", 7, 101, 1000, 11, 10)
    x("ProfilerStep#1", "user_annotation", 7, 150, 600)
    x("loop.py(3): step", "python_function", 7, 200, 300, 12, 11)
    x("aten::mm", "cpu_op", 7, 210, 250)
    x("ProfilerStep#2", "user_annotation", 7, 600, 900)
    x("loop.py(3): step", "python_function", 7, 620, 700, 13, 11)
    x("aten::mm", "cpu_op", 7, 630, 680)
    return {"traceEvents": ev}


def _scan(events):
    """Self µs per row name by a plain scan: each (pid, tid) lane nested by time on its own (a slice's self time is
    its duration less its children's), and the Python frames of thread 0 by their caller links."""
    lanes = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") != "Trace":
            lanes[(e["pid"], e["tid"])].append(e)
    own = defaultdict(float)
    for (_pid, tid), es in lanes.items():
        if tid == 0 and all(e["cat"] == "python_function" for e in es):
            callees = defaultdict(float)
            for e in es:
                callees[e["args"]["Python parent id"]] += e["dur"]
            for e in es:
                own[e["name"]] += e["dur"] - callees[e["args"]["Python id"]]
            continue
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack, children = [], defaultdict(float)
        for e in es:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                children[id(stack[-1])] += e["dur"]
            stack.append(e)
        for e in es:
            own["ProfilerStep*" if e["name"].startswith("ProfilerStep#") else e["name"]] += e["dur"] - children[id(e)]
    return own


def _tables(path):
    with open_trace(str(path), engine="sqlite") as s:
        got = profiler_table(s)
        sql = s.query(load_query("profiler_table"))
    cpu = got[got["lane"] == "cpu"].set_index("name")
    return cpu, sql[sql["lane"] == "cpu"].set_index("name")


LAYOUTS = {  # idle frames' start and end (µs) against the main thread's 100..1000
    "around the main thread's frames": (90, 1000.001),
    "ending a nanosecond before them": (90, 999.999),   # the main thread's held frames spill to a track of their own
    "inside them": (110, 1000),
    "starting inside, ending after": (110, 1000.001),   # the idle frames spill
}


@pytest.mark.parametrize("idle_threads", [1, 2])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_idle_threads_frames_count_on_their_own_thread(tmp_path, layout, idle_threads):
    trace = _trace(*LAYOUTS[layout], idle_threads=idle_threads)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    want = _scan(trace["traceEvents"])
    got, sql = _tables(path)
    assert set(got.index) == set(want)
    for name, us in want.items():
        assert got.loc[name, "self_cpu_us"] == pytest.approx(us, abs=1e-6), name
        assert sql.loc[name, "self_cpu_ns"] / 1000 == pytest.approx(us, abs=1e-6), name
    # the waits by hand: the innermost idle frame holds its whole window less nothing
    assert got.loc["threading.py(3): wait", "self_cpu_us"] == pytest.approx(LAYOUTS[layout][1] - LAYOUTS[layout][0] - 2)
    assert got.loc["loop.py(2): run", "self_cpu_us"] == pytest.approx(49 + 100)  # 101..150 and 900..1000


def test_without_python_ids_the_frames_stay_where_the_readers_nest_them(tmp_path):
    """No caller links (an older torch): nothing tells the threads apart, so the frames of thread 0 are the main
    thread's slices as nested; every instant of that lane is some row's own time, once."""
    trace = _trace(90, 1000.001, ids=False)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    got, sql = _tables(path)
    assert got["self_cpu_us"].sum() == pytest.approx(1000.001 - 90)  # the merged lane's span: one union
    assert got.loc["threading.py(3): wait", "self_cpu_us"] == pytest.approx(1000.001 - 92 - 900)
    assert (sql["self_cpu_ns"] / 1000).sum() == pytest.approx(got["self_cpu_us"].sum())


def test_caller_links_in_a_cycle_or_to_nowhere_leave_the_frames_nested(tmp_path):
    """Links that make no tree (a frame its own caller's caller, ids missing from the open frames) are not taken
    for an idle thread: the table is the readers' nesting, with each instant counted once."""
    trace = _trace(90, 1000.001)
    for e in trace["traceEvents"]:
        if e["tid"] == 0:
            e["args"] = {"Python id": e["args"]["Python id"], "Python parent id": 3 if e["args"]["Python id"] == 1
                         else e["args"]["Python parent id"]}  # 1 -> 3 -> 2 -> 1
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    got, sql = _tables(path)
    assert got["self_cpu_us"].sum() == pytest.approx(1000.001 - 90)
    assert (sql["self_cpu_ns"] / 1000).sum() == pytest.approx(got["self_cpu_us"].sum())


_IDLE_SETUP = """
gate = threading.Event()
for _ in range({n}):  # threads that wait all along: torch writes their frames on thread 0
    threading.Thread(target=gate.wait, daemon=True).start()
"""

_WORK = """
def work(x):
    for _ in range(3):
        x = torch.relu(x @ x)
    return x
"""


@pytest.mark.parametrize("idle_threads", [1, 2])
def test_the_table_of_a_recording_with_idle_threads_is_torchs_own(tmp_path, idle_threads):
    """A real recording on the CPU with threads waiting all along: every row of torch's own table (``key_averages``)
    is ours, with its calls, total and self CPU time, the idle threads' waits included; the self times add up to
    torch's."""
    trace, want = record_on_cpu(tmp_path, _WORK, steps=4,
                                setup="import threading\n" + _IDLE_SETUP.format(n=idle_threads))
    events = json.loads(trace.read_text())["traceEvents"]
    zero = [e for e in events if e.get("cat") == "python_function" and e.get("tid") == 0]
    # each idle thread's stack is on thread 0; torch links them into one chain (the second thread's outermost frame
    # gets the first's innermost as its caller), in its own table too
    bootstraps = [e for e in zero if e["name"].startswith("threading.py") and e["name"].endswith(": _bootstrap")]
    assert len(bootstraps) == idle_threads
    assert sum(e["args"]["Python parent id"] is None for e in zero) == 1
    got, sql = _tables(trace)
    assert set(got.index) == set(want)
    for name, (calls, total, self_us) in want.items():
        assert got.loc[name, "calls"] == calls, name
        assert got.loc[name, "cpu_total_us"] == pytest.approx(total, abs=1.0), name
        assert got.loc[name, "self_cpu_us"] == pytest.approx(self_us, abs=1.0), name
        assert sql.loc[name, "self_cpu_ns"] / 1000 == pytest.approx(got.loc[name, "self_cpu_us"], abs=1e-3), name
    inner = [e for e in zero if not any(c["args"]["Python parent id"] == e["args"]["Python id"] for c in zero)]
    assert len(inner) == 1 and got.loc[inner[0]["name"], "self_cpu_us"] >= inner[0]["dur"] - 1.0  # its whole wait
    assert got["self_cpu_us"].sum() == pytest.approx(sum(v[2] for v in want.values()), abs=1.0 * len(want))


def test_an_h200_run_with_its_runners_watch_thread():
    """An H200 run of this app from before the runner's watch thread held no Python frame: the watch's frames are
    thread 0's, around the main thread's whole stack. Its innermost frame's self time is its duration (a plain scan)
    and no frame of that thread holds the GPU time of the kernels below the main thread's frames: the main thread's
    outermost frame holds them all."""
    path = DATA / "h200_diag" / "bf16_64_stack_memory.json"
    events = json.loads(path.read_text())["traceEvents"]
    zero = {e["name"]: e for e in events if e.get("cat") == "python_function" and e.get("tid") == 0}
    watch = next(n for n in zero if n.endswith(": watch"))
    got, sql = _tables(path)
    assert got.loc[watch, "self_cpu_us"] == pytest.approx(zero[watch]["dur"], abs=1e-3)
    assert (got.loc[list(zero), "device_total_us"] == 0).all()
    main = next(e for e in events if e.get("cat") == "python_function" and e.get("tid") != 0
                and e["args"].get("Python parent id") is None)
    kernels = sum(e["dur"] for e in events if e.get("cat") == "kernel")  # (all launched inside the main stack)
    assert got.loc[main["name"], "device_total_us"] == pytest.approx(kernels, abs=1e-3)
    for name in zero:
        assert sql.loc[name, "self_cpu_ns"] / 1000 == pytest.approx(got.loc[name, "self_cpu_us"], abs=1e-3)
        assert sql.loc[name, "device_total_ns"] == 0


def test_q1_says_how_much_self_time_is_idle_threads_frames(tmp_path):
    """Q1's reading of the table names the self time that is idle threads' frames: in the H200 fixture, the watch
    thread's whole stack, by a plain scan the sum over its frames of duration less callees (its outermost frame's
    duration); a recording without such frames says nothing of them."""
    from profiling_core.analyses import analyze
    from profiling_core.explain.questions import findings
    path = DATA / "h200_diag" / "bf16_64_stack_memory.json"
    events = json.loads(path.read_text())["traceEvents"]
    zero = [e for e in events if e.get("cat") == "python_function" and e.get("tid") == 0]
    outer = next(e for e in zero if e["args"]["Python parent id"] is None)
    with open_trace(str(path), engine="sqlite") as s:
        q1 = next(f for f in findings(analyze(s)) if f.id == "q1.table")
    assert q1.evidence["idle_thread_self_us"] == pytest.approx(outer["dur"], abs=1e-3)
    assert set(q1.evidence["idle_thread_rows"]) == {e["name"] for e in zero}
    assert "threads that ran no Python code while the profile recorded" in q1.text
    assert "1.55 ms of the self CPU time" in q1.text
    trace = _trace(90, 1000.001, ids=False)
    (tmp_path / "t.json").write_text(json.dumps(trace))
    with open_trace(str(tmp_path / "t.json"), engine="sqlite") as s:
        q1 = next(f for f in findings(analyze(s)) if f.id == "q1.table")
    assert "idle_thread_self_us" not in q1.evidence and "ran no Python code" not in q1.text


def test_an_h200_compiled_run_after_the_watch_fix():
    """An H200 run of 2026-12-05 (``torch.compile`` default, with_stack, forked from the prestarted worker): the
    runner's watch holds no frame now, so thread 0 holds only Inductor's own waiting threads (tqdm's monitor, the
    compile workers' reader), linked into one chain; Q1 counts their outermost frame's duration (a plain scan) as
    idle threads' self time and names each of their frames, and none of the loop thread's."""
    from profiling_core.analyses import analyze
    from profiling_core.explain.questions import findings
    path = DATA / "h200_verdicts" / "stack_mm_compile.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    frames = [e for e in events if e.get("cat") == "python_function"]
    zero = [e for e in frames if e.get("tid") == 0]
    assert not any("run/worker.py" in e["name"] for e in zero)  # (its frames are the loop thread's stack alone)
    assert {e["name"] for e in zero if e["name"].startswith(("tqdm/", "torch/_inductor/compile_worker/"))}
    (outer,) = [e for e in zero if e["args"]["Python parent id"] is None]
    with open_trace(str(path), engine="sqlite") as s:
        q1 = next(f for f in findings(analyze(s)) if f.id == "q1.table")
    assert q1.evidence["idle_thread_self_us"] == pytest.approx(outer["dur"], abs=1e-3)
    assert set(q1.evidence["idle_thread_rows"]) == {e["name"] for e in zero}
    assert f"{outer['dur'] / 1000:.2f} ms of the self CPU time" in q1.text


_RANGE_WORK = """
def work(x):
    with record_function("region"):  # entered inside a frame and left outside it: a spill slice
        for _ in range(3):
            x = torch.relu(x @ x)
    total = 0
    for i in range(20000):  # Python that runs no op
        total += i
    return x
"""


@pytest.mark.parametrize("end_delta", [0.001, -0.001], ids=["ending after the stack", "ending before it"])
def test_an_idle_stack_beside_a_real_recording_leaves_its_rows(tmp_path, end_delta):
    """A real CPU recording with a range on a spill track, and an idle thread's stack written on thread 0 from
    before its outermost frame until a nanosecond after (the readers nest the whole stack inside it) or before its
    end (the main thread's stack at the stop goes to a track of its own, its later slices under the idle frames):
    the idle frames count their wait (a plain scan: each frame's duration less its callee's), no row goes
    negative, the SQL gives the same rows; nested inside, the main thread's rows are those of the recording
    alone. (Beside it, the rows of the main thread's frames open at the stop can move by tens of µs between the
    frames and ranges around them: the first-track rule reads the tracks the readers made.)"""
    trace, _table = record_on_cpu(tmp_path, _RANGE_WORK, steps=4, schedule="wait=1, warmup=1, active=2")
    base = json.loads(trace.read_text())
    frames = [e for e in base["traceEvents"] if e.get("cat") == "python_function"]
    root = min((e for e in frames if e["args"]["Python parent id"] is None), key=lambda e: e["ts"])
    alone, _ = _tables(trace)
    top = max(e["args"]["Python id"] for e in frames)
    end = root["ts"] + root["dur"] + end_delta
    idle = []
    for depth, name in enumerate(["threading.py(1): _bootstrap", "monitor.py(2): run", "threading.py(3): wait"]):
        ts = round(root["ts"] - 5 + depth, 3)
        idle.append({"ph": "X", "cat": "python_function", "name": name, "pid": root["pid"], "tid": 0, "ts": ts,
                     "dur": round(end - ts, 3), "args": {"Python id": top + 1 + depth,
                                                         "Python parent id": top + depth if depth else None}})
    path = tmp_path / "with_idle.json"
    path.write_text(json.dumps({**base, "traceEvents": base["traceEvents"] + idle}))
    got, sql = _tables(path)
    for e, inner in zip(idle, idle[1:] + [None]):
        assert got.loc[e["name"], "self_cpu_us"] == pytest.approx(e["dur"] - (inner["dur"] if inner else 0), abs=1e-6)
    assert (got["self_cpu_us"] >= 0).all()
    assert ((sql["self_cpu_ns"] / 1000) - got["self_cpu_us"]).abs().max() < 1e-6
    if end_delta > 0:
        rows = got.drop(index=[e["name"] for e in idle])
        assert ((rows["self_cpu_us"] - alone["self_cpu_us"]).abs() < 1e-6).all()


@pytest.mark.parametrize("name", ["Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                  "gaunernst_bert-small-uncased__1016001.json.gz"])
def test_a_trace_of_process_0_keeps_thread_0_and_q1_names_its_idle_stack(name):
    """TraceLens' H100 traces have process id 0, so the readers keep torch's thread 0 as a thread of its own: the
    tqdm monitor's stack there is alone on it, one tree. It is still an idle thread's (every frame open at the stop,
    no call that returned): its rows keep their self times (a plain scan: each frame's duration less its callee's,
    the innermost `wait` about half the recording), and Q1 says that time is no time of the thread that ran the
    steps."""
    from profiling_core.analyses import analyze
    from profiling_core.explain.questions import findings
    path = DATA / "traces" / name
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if isinstance(e, dict)]
    zero = [e for e in events if e.get("cat") == "python_function" and e.get("tid") == 0]
    assert zero and {e["pid"] for e in zero} == {0}
    callees = defaultdict(float)
    for e in zero:
        callees[e["args"]["Python parent id"]] += e["dur"]
    outer = next(e for e in zero if e["args"]["Python parent id"] is None)
    with open_trace(str(path), engine="sqlite") as s:
        r = analyze(s)
        sql = s.query(load_query("profiler_table"))
    table = r.profiler_table.set_index("name")
    for e in zero:
        assert table.loc[e["name"], "self_cpu_us"] == pytest.approx(e["dur"] - callees[e["args"]["Python id"]],
                                                                   abs=1e-3)
    assert ((sql.set_index("name")["self_cpu_ns"] / 1000) - table["self_cpu_us"]).abs().max() < 1e-6
    q1 = next(f for f in findings(r) if f.id == "q1.table")
    assert q1.evidence["idle_thread_self_us"] == pytest.approx(outer["dur"], abs=1e-3)
    assert q1.evidence["top_self_cpu_row"] in q1.evidence["idle_thread_rows"]


def test_ranges_left_out_of_order_take_their_window_from_the_op_around_them_once(tmp_path):
    """An op (200 µs) with a 20 µs child, and three ranges each entered inside the one before and left after it
    (out of order, so none nests: each goes on a spill track of its own), over [1115, 1287). The op's own time is its
    duration less its child and less the ranges' window outside that child, counted once: 200 − 20 − (172 − 15) =
    23 µs by hand. Each range took it out again (the op's own time came out −288 µs); the SQL table states the same
    rule and gives the same."""
    def x(name, ts, dur, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}
    ev = [x("ProfilerStep#0", 1000, 1000, "user_annotation"), x("aten::outer_op", 1100, 200), x("aten::f", 1110, 20),
          x("range_a", 1115, 170, "user_annotation"), x("range_b", 1116, 170, "user_annotation"),
          x("range_c", 1117, 170, "user_annotation")]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    cpu, sql = _tables(path)
    assert cpu.loc["aten::outer_op", "self_cpu_us"] == pytest.approx(23.0)
    assert sql.loc["aten::outer_op", "self_cpu_ns"] == 23_000
    assert (cpu["self_cpu_us"] >= 0).all() and (sql["self_cpu_ns"] >= 0).all()
