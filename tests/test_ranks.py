"""One rank of a file that merged several ranks' traces, read as its own trace (``analyses.ranks``, ``write_rank``,
``trace.write_without_processes``, ``analyze --process``, the Trace lab's import of a rank).

Read whole, such a file's per-step figures mix the ranks: on two copies of the H200's compiled decode loop (16
``decode::token`` ranges per step, CUDA graphs replayed), question 9 said the compiled graph ran "in 2 of the 4
steps", the sync rule "inside 2 of the 4 steps", the starved rule took the other rank's main thread for threads
"beside" the step and its fix blamed a recompile, and the decode rule counted 32 tokens per step. The oracles here
are plain scans of the JSON and the single run's own answers."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

import verdict_traces as vt
from conftest import scan_trace
from profiling_core import analyze, open_trace
from profiling_core.analyses import ranks, step_processes, unparted, write_rank
from profiling_core.trace import write_without_processes

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
DECODE = DATA / "h200_train" / "llm_decode_static_compile_ro.json.gz"
H200 = DATA / "h200"


def _step_pids(events) -> list:
    return sorted({e["pid"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
                   and e.get("cat") != "gpu_user_annotation" and e.get("ph") == "X"})


def _kernel_pids(events) -> list:
    return sorted({e["pid"] for e in events if e.get("cat") == "kernel"})


@pytest.fixture(scope="module")
def decode_two(tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks")
    (d / "src.json").write_bytes(gzip.decompress(DECODE.read_bytes()))
    one = vt.as_ranks(d / "src.json", d / "one.json", ranks=1)
    return one, vt.as_ranks(one, d / "two.json")


def test_what_is_written_is_the_file_less_those_processes_events(tmp_path):
    """By a plain scan: every event whose pid is one of those given goes, metadata included; every other event stays
    as it was and where it was (the profiler's own ``Spans``/``Traces`` events, the global instants with pid "", the
    GPU lanes that ran nothing), and so do the document's other members."""
    src = H200 / "4096_bf16_warm_eager.json"
    doc = json.loads(src.read_text())
    events = doc["traceEvents"]
    drop = [_step_pids(events)[0], 0]
    assert any(e.get("pid") == "Spans" for e in events) and any(e.get("pid") == "" for e in events)
    n = write_without_processes(src, tmp_path / "out.json", drop)
    out = json.loads((tmp_path / "out.json").read_text())
    kept = [e for e in events if e.get("pid") not in drop]
    assert out["traceEvents"] == kept and n == len(kept) < len(events)
    assert {k: v for k, v in out.items() if k != "traceEvents"} == {k: v for k, v in doc.items() if k != "traceEvents"}
    assert not any(e.get("pid") in drop for e in out["traceEvents"])
    # a pid is a JSON value: the text "0" is not the GPU's 0, and a process no event has is refused, naming it (what
    # would be left out is not what was asked for); nothing to drop leaves the file as it was
    with pytest.raises(ValueError, match=f"no event has the pid of processes '0', '{drop[0]}': what to leave out"):
        write_without_processes(src, tmp_path / "none.json", ["0", str(drop[0])])
    assert not (tmp_path / "none.json").exists()
    write_without_processes(src, tmp_path / "same.json", [])
    assert json.loads((tmp_path / "same.json").read_text()) == doc
    # a gzip is read as the loader reads it; a bare list of events stays a list
    (tmp_path / "src.json.gz").write_bytes(gzip.compress(src.read_bytes()))
    write_without_processes(tmp_path / "src.json.gz", tmp_path / "from_gz.json", drop)
    assert (tmp_path / "from_gz.json").read_bytes() == (tmp_path / "out.json").read_bytes()
    (tmp_path / "list.json").write_text(json.dumps(events))
    write_without_processes(tmp_path / "list.json", tmp_path / "list_out.json", drop)
    assert json.loads((tmp_path / "list_out.json").read_text()) == kept


def test_a_pid_goes_only_where_it_is_the_same_integer_or_text(tmp_path):
    """A pid is compared as the JSON value it is: true, 1.0, "1", [1] and {"pid": 1} are not the integer 1, and a
    pid that is a list or an object belongs to no process (those events stay); the integer 1 goes wherever it comes,
    however many events carry it. A tuple is one process written as any of its values."""
    pids = [1, True, 1.0, "1", [1], {"pid": 1}, None, 2, 1, "Spans", 1, False, 0, "x"]
    events = [{"name": f"e{k}", "ph": "X", "ts": k, "dur": 1, "pid": pid, "tid": 1} for k, pid in enumerate(pids)]
    events.append({"name": "no pid", "ph": "i", "ts": 99, "s": "g"})
    (tmp_path / "odd.json").write_text(json.dumps({"traceEvents": events, "schemaVersion": 1}))
    for drop, gone in (([1], {0, 8, 10}), (["1", 0], {3, 12}), ([2, "Spans"], {7, 9}), ([(1.0, "x")], {13})):
        n = write_without_processes(tmp_path / "odd.json", tmp_path / "out.json", drop)
        out = json.loads((tmp_path / "out.json").read_text())
        assert out["traceEvents"] == [e for k, e in enumerate(events) if k not in gone], drop
        assert n == len(events) - len(gone) and out["schemaVersion"] == 1
    # a document the loader reads whole, not streamed (the key twice: the last one holds, as the loader reads it)
    twice = b'{"traceEvents": [], "schemaVersion": 1, "traceEvents": ' + json.dumps(events).encode() + b"}"
    (tmp_path / "twice.json").write_bytes(twice)
    assert write_without_processes(tmp_path / "twice.json", tmp_path / "out.json", [1]) == len(events) - 3
    assert json.loads((tmp_path / "out.json").read_text()) == {
        "traceEvents": [e for k, e in enumerate(events) if k not in {0, 8, 10}], "schemaVersion": 1}
    # text that is not Unicode (a byte that is no UTF-8, a lone surrogate) does not hide an event's pid
    bad = twice.replace(b'"name": "e8"', b'"name": "e8\xff"').replace(b'"name": "e10"', b'"name": "e10\\ud800"')
    (tmp_path / "bad_text.json").write_bytes(bad.replace(b'"traceEvents": [], ', b""))
    assert write_without_processes(tmp_path / "bad_text.json", tmp_path / "out.json", [1]) == len(events) - 3
    assert b"e8" not in (tmp_path / "out.json").read_bytes() and b"e10" not in (tmp_path / "out.json").read_bytes()
    # a value that is no pid (1.0, true, null) names no process, though events carry such values
    with pytest.raises(ValueError, match=r"no event has the pid of processes 1\.0, True: what to leave out"):
        write_without_processes(tmp_path / "odd.json", tmp_path / "out.json", [1.0, True])


def test_two_pids_name_one_process_where_they_are_one_integer_or_one_text():
    import numpy as np
    from profiling_core.trace import same_pid
    assert same_pid(445, 445) and same_pid(445, np.int64(445)) and same_pid(np.int32(0), 0) and same_pid("0", "0")
    for a, b in ((1, "1"), (1, True), (True, True), (1, 1.0), (1.0, 1.0), (None, None), (0, None), ([1], [1]), (1, 2)):
        assert not same_pid(a, b) and not same_pid(b, a), (a, b)


def test_a_file_that_is_no_trace_is_refused_with_its_reason(tmp_path):
    from profiling_core.errors import TraceFormatError
    for text, reason in ((b"{not json", "is not valid JSON"), (b'{"traceEvents": 3}', "'traceEvents' must be a list"),
                         (b"3", "top level must be a JSON object")):
        (tmp_path / "bad.json").write_bytes(text)
        with pytest.raises(TraceFormatError, match=reason):
            write_without_processes(tmp_path / "bad.json", tmp_path / "out.json", [1])
        assert not (tmp_path / "out.json").exists()


def test_each_rank_is_its_process_and_the_gpu_its_calls_launched_on(decode_two):
    """By a plain scan: the processes that hold step slices and, for each, the pid of the GPU lane under which its
    copy of the kernels sits (the second rank's pids are the first's + 100000)."""
    one, two = decode_two
    ev1, ev2 = scan_trace(one), scan_trace(two)
    (p,), (g,) = _step_pids(ev1), _kernel_pids(ev1)
    assert _step_pids(ev2) == [p, p + 100000] and _kernel_pids(ev2) == [g, g + 100000]
    steps = sum(1 for e in ev1 if e.get("pid") == p and str(e.get("name", "")).startswith("ProfilerStep#")
                and e.get("ph") == "X")
    with open_trace(two, engine="sqlite") as s:
        calls = ranks(s)[0]["launch_calls"]
        assert ranks(s) == [{"pid": p, "steps": steps, "launch_calls": calls, "gpus": [g], "unowned_launchers": []},
                            {"pid": p + 100000, "steps": steps, "launch_calls": calls, "gpus": [g + 100000],
                             "unowned_launchers": []}]
        assert step_processes(s) == [p, p + 100000]
    # its launch calls, by a plain scan: the runtime calls with a correlation id that launch kernels, copy or set
    assert calls == sum(1 for e in ev1 if e.get("pid") == p and e.get("cat") in ("cuda_runtime", "cuda_driver")
                        and "correlation" in (e.get("args") or {})
                        and any(k in e["name"].lower() for k in ("launch", "memcpy", "memset")))
    with open_trace(one, engine="sqlite") as s:
        assert ranks(s) == [{"pid": p, "steps": steps, "launch_calls": calls, "gpus": [g], "unowned_launchers": []}]


def test_a_rank_read_on_its_own_answers_as_its_own_run(decode_two, tmp_path):
    """The second rank of the merged decode loop, written out and analysed, prints every line the single run prints
    (the file's name aside), where the whole file's answers disagree with them; its file holds exactly that rank's
    events and those of no process (a plain scan)."""
    one, two = decode_two
    with open_trace(two, engine="sqlite") as s:
        (p, p2) = step_processes(s)
        rank = write_rank(s, p2, tmp_path / "rank.json")
        with pytest.raises(ValueError, match=rf"process 7 holds no step slice in this trace; the processes that hold "
                                             rf"steps: {p}, {p2}"):
            write_rank(s, 7, tmp_path / "none.json")
    assert not (tmp_path / "none.json").exists()
    assert rank["pid"] == p2
    ev = scan_trace(tmp_path / "rank.json")
    assert {e.get("pid") for e in ev if isinstance(e.get("pid"), int) and e.get("ph") != "M"} == {p2, 100000}
    assert [e for e in ev if e.get("pid") in (p2, 100000)] == \
        [e for e in scan_trace(two) if e.get("pid") in (p2, 100000)]
    lines = {}
    for name, path in (("one", one), ("rank", tmp_path / "rank.json"), ("two", two)):
        lines[name] = _cli(path).stdout.splitlines()[1:]  # (the first line names the file)
    assert lines["rank"] == lines["one"]
    assert lines["two"] != lines["one"]  # (read whole it mixes them: what this module exists for)


def test_the_command_line_reads_the_first_rank_and_names_the_others(decode_two):
    one, two = decode_two
    single = _cli(one).stdout.splitlines()[1:]
    with open_trace(two, engine="sqlite") as s:
        (p, p2), every = step_processes(s), ranks(s)
    out = _cli(two).stdout.splitlines()
    note = (f"  note: This file holds the steps of 2 processes (pid {p}, {p2}): ranks' traces merged into one file. "
            f"Everything here reads one rank, as its own trace would hold it: process {p} "
            f"({every[0]['steps']} step slices) and the GPU lane its calls launched work on (pid 0); the other "
            "ranks' events are left out. --process PID reads another.")
    assert out[2] == note and [x for x in out[1:] if x != note] == single
    second = _cli(two, "--process", str(p2)).stdout.splitlines()
    assert second[2] == note.replace(f"process {p} ", f"process {p2} ").replace("(pid 0)", "(pid 100000)")
    assert second[1:2] + second[3:] == single
    doc = json.loads(_cli(two, "--json").stdout)
    assert doc["rank"] == {**every[0], "processes": [p, p2], "unowned_events_placed": True}
    assert doc["step_processes"] == [p]
    assert json.loads(_cli(one, "--json").stdout)["rank"] is None


@pytest.mark.parametrize("args,reason", [
    (["--process", "7"], "error: process 7 holds no step slice in this trace; the processes that hold steps: "),
    (["--process", "abc"], "error: process 'abc' holds no step slice in this trace; the processes that hold steps: "),
], ids=["unknown-pid", "text"])
def test_a_process_that_holds_no_step_is_refused_naming_those_that_do(args, reason):
    p = _cli(H200 / "4096_bf16_warm_eager.json", *args, check=False)
    pid = _step_pids(scan_trace(H200 / "4096_bf16_warm_eager.json"))[0]
    assert p.returncode == 2 and p.stdout == "" and p.stderr == f"{reason}{pid}\n"
    ok = _cli(H200 / "4096_bf16_warm_eager.json", "--process", str(pid))  # (its own process: the whole file)
    assert ok.stdout == _cli(H200 / "4096_bf16_warm_eager.json").stdout


def test_a_merged_trace_piped_in_is_read_whole_and_says_so(decode_two):
    """A pipe cannot be read a second time: the file is read whole, with the note that its per-step figures mix the
    ranks and why it is read whole; asking for one rank of it is refused with the reason."""
    _one, two = decode_two
    data = Path(two).read_bytes()
    whole = subprocess.run([sys.executable, "-m", "profiling_core", "analyze", "/dev/stdin", "--engine", "sqlite"],
                           input=data, cwd=ROOT, capture_output=True, timeout=300)
    assert whole.returncode == 0 and b"Every per-step figure here mixes their steps" in whole.stdout
    assert (b"It is read whole: /dev/stdin is a pipe or a device, which cannot be read a second time: save the trace "
            b"to a file to read one rank.") in whole.stdout
    p = _step_pids(scan_trace(two))[1]
    for pid, reason in ((p, f"cannot read process {p} on its own: /dev/stdin is a pipe or a device"),
                        (1, "process 1 holds no step slice in this trace")):  # (the pid's own fault first)
        one = subprocess.run([sys.executable, "-m", "profiling_core", "analyze", "/dev/stdin", "--engine", "sqlite",
                              "--process", str(pid)], input=data, cwd=ROOT, capture_output=True, timeout=300)
        assert one.returncode == 2 and one.stderr.startswith(f"error: {reason}".encode()), one.stderr


def _cli(path, *args, check=True):
    p = subprocess.run([sys.executable, "-m", "profiling_core", "analyze", str(path), "--engine", "sqlite", *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_the_perfetto_engine_reads_a_rank_as_the_mirror_does(decode_two, tmp_path):
    """`analyze` on the perfetto engine (auto's choice wherever trace_processor runs) reads a merged file's first
    rank as on the mirror: it asks trace_processor's tables for the ranks, writes the rank (its processes as
    trace_processor names them) and has a second trace_processor load that file. No trace_processor runs here: the
    stand-in server answers from the mirror's tables of whichever file it was sent (``record_from_mirror``), so this
    tests the engine's side of the path between the two traces, not trace_processor's reading of them."""
    import hashlib
    import os

    import tp_recorded
    from fake_tp_shell import shell_command
    _one, two = decode_two
    rank = tmp_path / "rank.json"
    with open_trace(two, engine="sqlite") as s:
        write_rank(s, ranks(s)[0]["pid"], rank)
    recordings = tmp_path / "recordings"
    shas = [hashlib.sha256(t.read_bytes()).hexdigest() for t in (two, rank)]
    for t, sha in zip((two, rank), shas):
        tp_recorded.record_from_mirror(t, recordings / sha)
    log = tmp_path / "log.jsonl"
    exe, env = shell_command(tmp_path, FAKE_TP_TABLES_BY_SHA=recordings, FAKE_TP_LOG=log)
    p = subprocess.run([sys.executable, "-m", "profiling_core", "analyze", str(two), "--engine", "perfetto"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, **env, "PERFETTO_BIN": exe})
    assert p.returncode == 0, p.stderr
    got, want = p.stdout.splitlines(), _cli(two).stdout.splitlines()
    assert got[0].endswith("(engine perfetto)") and got[1:] == want[1:]
    assert "Everything here reads one rank" in got[2]
    assert [json.loads(line)["sha256"] for line in log.read_text().splitlines()] == shas  # (the file, then its rank)


def test_the_report_of_one_process_is_the_same_with_a_shared_handed_over():
    """``analyze(session, shared=...)`` (what the command line does after asking for the step processes) gives what
    ``analyze(session)`` gives."""
    from profiling_core.analyses import Shared
    with open_trace(H200 / "4096_bf16_warm_eager.json", engine="sqlite") as s:
        a = analyze(s)
        sh = Shared(s)
        step_processes(s, sh)
        b = analyze(s, shared=sh)
    assert a.summary == b.summary
    for name in ("steps", "kernel_stats", "launch_latency"):
        assert getattr(a, name).equals(getattr(b, name)), name


def _a20_ranks(tmp_path, interleave: bool = False) -> tuple[Path, list]:
    """The H200's warm 4096² run of 20 steps as two ranks (the second's pids + 100000, its GPU lane pid 1, 7 µs
    later), each with its profiler's own events as Kineto writes them: its overhead event on pid -1 (Activity Buffer
    Request) and its recording span on pid "Spans", which no rank's pid names. Joined one after the other, or with
    their events interleaved one by one. Returns the merged file and each rank's own events."""
    doc = json.loads((H200 / "4096_bf16_warm_eager_a20.json").read_text())
    gpu = set(_kernel_pids(doc["traceEvents"]))

    def rank(k: int) -> list:
        def pid(p):
            return p if not isinstance(p, int) or p < 0 else (k if p in gpu else p + 100000 * k)
        return [dict(e, pid=pid(e["pid"]), **({"ts": e["ts"] + 7.0 * k} if "ts" in e else {})) if "pid" in e else e
                for e in doc["traceEvents"]]
    own = [rank(0), rank(1)]
    events = ([e for pair in zip(*own) for e in pair] if interleave else own[0] + own[1])
    path = tmp_path / ("interleaved.json" if interleave else "joined.json")
    path.write_text(json.dumps({**doc, "traceEvents": events}))
    for k in (0, 1):
        (tmp_path / f"rank{k}.json").write_text(json.dumps({**doc, "traceEvents": own[k]}))
    return path, own


def test_each_ranks_profiler_events_go_with_it_where_the_file_joins_the_ranks(tmp_path):
    """Each rank's trace holds its profiler's own events under pids no rank has (pid -1: Activity Buffer Request;
    "Spans": its recording span). All stayed in every rank's file: a rank read alone counted both ranks' Activity
    Buffer Requests (question 1's table one row more, question 4 a start-up twice as long) and took the later
    rank's recording end for its own. Where the file joins the ranks one after the other, each such event goes
    with the rank whose events came before it: each rank's file holds its own (a plain scan) and reads as its own
    trace does."""
    path, own = _a20_ranks(tmp_path)
    unowned = [[e for e in events if e.get("pid") in (-1, "Spans")] for events in own]
    assert [len(u) for u in unowned] == [3, 3]
    with open_trace(path, engine="sqlite") as s:
        every = ranks(s)
        for k, r in enumerate(every):
            got = write_rank(s, r["pid"], tmp_path / f"alone{k}.json")
            assert got["unowned_events_placed"] is True
            kept = scan_trace(tmp_path / f"alone{k}.json")
            assert [e for e in kept if e.get("pid") in (-1, "Spans")] == unowned[k]
    for k, r in enumerate(every):
        alone = _cli(tmp_path / f"rank{k}.json").stdout.splitlines()[1:]
        got = _cli(path, "--process", str(r["pid"])).stdout.splitlines()
        assert [x for x in got[1:] if not x.startswith("  note: This file holds")] == alone


def test_ranks_interleaved_in_the_file_keep_every_ranks_profiler_events_and_say_so(tmp_path):
    """The same ranks with their events interleaved one by one (a merge sorted by time does the like): no place in
    the file says whose the profiler's own events are, so each rank's file keeps both ranks' (a plain scan) and
    the note says so."""
    path, own = _a20_ranks(tmp_path, interleave=True)
    with open_trace(path, engine="sqlite") as s:
        r = ranks(s)[0]
        got = write_rank(s, r["pid"], tmp_path / "alone.json")
    assert got["unowned_events_placed"] is False
    kept = scan_trace(tmp_path / "alone.json")
    assert sum(1 for e in kept if e.get("pid") == "Spans" and e.get("ph") == "X") == 2
    out = _cli(path).stdout
    assert "stay for every rank: the ranks' events interleave in the file" in out
    assert json.loads(_cli(path, "--json").stdout)["rank"]["unowned_events_placed"] is False


def test_an_op_launched_before_the_recording_is_no_other_ranks(tmp_path):
    """Rank 0's first GPU op (a memset) was launched before the recording: its call and its flow's start are not in
    the file, its flow's end and correlation id (1069) are, and rank 1's call of the same id is. The pairing gave
    the op to rank 1's call, so rank 1 "launched work" on rank 0's GPU and both ranks were refused as sharing a lane.
    The op now stays unpaired, as in rank 0's own trace; each rank reads as its own trace does, and the study's SQL
    pairs as the analyses do."""
    from test_multi_gpu import _same_in_sql
    doc = json.loads((H200 / "4096_bf16_warm_eager.json").read_text())
    gpu = set(_kernel_pids(doc["traceEvents"]))
    first = min((e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memset")), key=lambda e: e["ts"])
    corr = first["args"]["correlation"]

    def rank(k: int) -> list:
        out = []
        for e in doc["traceEvents"]:
            if k == 0 and ((e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") == corr)
                           or (e.get("ph") == "s" and e.get("id") == corr)):
                continue  # (launched before the recording)
            p = e.get("pid")
            p = p if not isinstance(p, int) or p < 0 else (k if p in gpu else p + 100000 * k)
            out.append(dict(e, pid=p, **({"ts": e["ts"] + 150.0 * k} if "ts" in e else {})) if "pid" in e else e)
        return out
    path = tmp_path / "before.json"
    path.write_text(json.dumps({**doc, "traceEvents": rank(0) + rank(1)}))
    (tmp_path / "rank0.json").write_text(json.dumps({**doc, "traceEvents": rank(0)}))
    assert first["cat"] == "gpu_memset" and any(e.get("ph") == "f" and e.get("id") == corr for e in rank(0))
    with open_trace(path, engine="sqlite") as s:
        every = ranks(s)
        assert [(r["pid"], r["gpus"]) for r in every] == [(every[0]["pid"], [0]), (every[0]["pid"] + 100000, [1])]
        assert unparted(every) == ""
        p = every[0]["pid"]
    alone = _cli(tmp_path / "rank0.json").stdout.splitlines()[1:]
    got = _cli(path, "--process", str(p)).stdout.splitlines()
    assert [x for x in got[1:] if not x.startswith("  note: This file holds")] == alone
    _same_in_sql(path, ("launch_latency", "sync_wait"))


def _shared_lane(tmp_path) -> Path:
    """The H200's warm 4096² run and a copy 7 µs later as a second process whose GPU ops stay under the first's GPU
    pid: two nodes' device 0 merged into one file."""
    doc = json.loads((H200 / "4096_bf16_warm_eager.json").read_text())
    gpus = set(_kernel_pids(doc["traceEvents"]))
    copy = [dict(e, pid=e["pid"] if e["pid"] in gpus else e["pid"] + 100000, **({"ts": e["ts"] + 7.0} if "ts" in e
                                                                              else {}))
            for e in doc["traceEvents"] if isinstance(e.get("pid"), int)]
    path = tmp_path / "shared_lane.json"
    path.write_text(json.dumps({**doc, "traceEvents": doc["traceEvents"] + copy}))
    return path


def test_ranks_whose_gpus_share_a_lane_are_read_whole_and_say_why(tmp_path):
    """One GPU lane holds both ranks' ops: no rule by process parts them, so a rank read alone would either count
    the other's ops (18 where the run has 9, a plain scan) or have no GPU at all (and read as a CPU run). The
    command line reads the file whole and says why; asking for one rank is refused with the reason."""
    from profiling_core.analyses import unparted
    path = _shared_lane(tmp_path)
    ev = scan_trace(path)
    (p, p2), (g,) = _step_pids(ev), _kernel_pids(ev)
    with open_trace(path, engine="sqlite") as s:
        every = ranks(s)
        assert [(r["pid"], r["gpus"]) for r in every] == [(p, [g]), (p2, [])]
        assert every[1]["launch_calls"] == every[0]["launch_calls"] > 0
        why = unparted(every)
        assert why == (f"process {p2} launches GPU work but no GPU lane holds its ops apart from another rank's (GPU "
                       f"lane {g}): ranks whose GPUs share a pid, as two nodes' device 0 merged into one file do, "
                       "cannot be read apart")
        with pytest.raises(ValueError, match=f"cannot read process {p} on its own: process {p2} launches"):
            write_rank(s, p, tmp_path / "rank.json")
    out = _cli(path).stdout
    assert f"It is read whole: {why}." in out and "Every per-step figure here mixes their steps" in out
    assert json.loads(_cli(path, "--json").stdout)["ranks_read_whole"] == why
    bad = _cli(path, "--process", str(p2), check=False)
    assert bad.returncode == 2 and bad.stderr == f"error: cannot read process {p2} on its own: {why}\n"
    # a CPU rank beside a GPU one (its calls launch nothing) is no reason to refuse; one lane that two ranks' calls
    # launched ops on is
    assert unparted([{**every[0]}, {**every[1], "launch_calls": 0}]) == ""
    assert unparted([{**every[0]}, {**every[1], "gpus": [g]}]) == (
        f"GPU lane {g} ran ops that calls of several ranks launched: ranks whose GPUs share a pid, as two nodes' "
        "device 0 merged into one file do, cannot be read apart")


def test_ranks_beside_a_process_that_launches_without_steps_are_read_whole_and_say_why(tmp_path):
    """HTA's triton example writes its step slice under another pid than its launch calls (a plain scan: the step's
    pid launches nothing). Two such runs merged: each rank's step process launches nothing, so the launching
    processes and their GPU lanes were no rank's and stayed in every rank's file (each "rank" read 18 GPU ops where
    its run has 9, on "2 GPUs of this process"). Which rank a launching process belongs to no pid says: the file is
    read whole, saying why, and asking for a rank is refused."""
    from profiling_core.analyses import unparted
    doc = json.loads((H200 / "4096_bf16_warm_eager.json").read_text())
    (cpu,) = _step_pids(doc["traceEvents"])

    def rank(k: int) -> list:
        out = []
        for e in doc["traceEvents"]:
            if not isinstance(e.get("pid"), int):
                continue
            f = dict(e, pid=e["pid"] + 100000 * k, **({"ts": e["ts"] + 7.0 * k} if "ts" in e else {}))
            if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X":
                f["pid"] += 50000  # the step slice under a pid of its own
            out.append(f)
        return out
    path = tmp_path / "steps_apart.json"
    path.write_text(json.dumps({**doc, "traceEvents": rank(0) + rank(1)}))
    ev = scan_trace(path)
    steppers = _step_pids(ev)
    launchers = sorted({e["pid"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                        and str(e.get("name", "")).startswith(("cudaLaunch", "cuLaunch", "cudaMemsetAsync"))})
    assert steppers == [cpu + 50000, cpu + 150000] and launchers == [cpu, cpu + 100000]
    with open_trace(path, engine="sqlite") as s:
        every = ranks(s)
        assert [(r["pid"], r["launch_calls"], r["gpus"], r["unowned_launchers"]) for r in every] == [
            (cpu + 50000, 0, [], launchers), (cpu + 150000, 0, [], launchers)]
        why = unparted(every)
        assert why == (f"processes {cpu}, {cpu + 100000} launch GPU work but hold no step slice, so no pid says "
                       "which rank they belong to: ranks whose work a process without steps launches cannot be read "
                       "apart")
        with pytest.raises(ValueError, match=f"cannot read process {cpu + 50000} on its own: processes {cpu}, "):
            write_rank(s, cpu + 50000, tmp_path / "rank.json")
    got = json.loads(_cli(path, "--json").stdout)
    assert got["ranks_read_whole"] == why and got["rank"] is None
    # one such run alone is one rank: read as the run it is
    (tmp_path / "one.json").write_text(json.dumps({**doc, "traceEvents": rank(0)}))
    with open_trace(tmp_path / "one.json", engine="sqlite") as s:
        assert unparted(ranks(s)) == ""


def test_a_gpu_lane_with_another_ranks_pid_is_read_whole_and_says_why(tmp_path):
    """Ranks renumbered 0, 1... beside GPUs written as their device index: rank A (pid 5) drives the GPU written
    under pid 1, rank B is pid 1 and drives the GPU under pid 0. One pid then holds B's threads and A's GPU ops, so
    leaving B out takes A's GPU with it (A read alone had no GPU op) and leaving A out took B's steps (B read alone
    had 0 steps). The file is read whole, saying why; asking for either rank is refused."""
    from profiling_core.analyses import unparted
    doc = json.loads((H200 / "4096_bf16_warm_eager.json").read_text())
    (cpu,), (gpu,) = _step_pids(doc["traceEvents"]), _kernel_pids(doc["traceEvents"])

    def moved(pids: dict, shift: float) -> list:
        return [dict(e, pid=pids[e["pid"]], **({"ts": e["ts"] + shift} if "ts" in e else {}))
                for e in doc["traceEvents"] if e.get("pid") in pids]
    events = moved({cpu: 5, gpu: 1}, 0.0) + moved({cpu: 1, gpu: 0}, 7.0)
    path = tmp_path / "renumbered.json"
    path.write_text(json.dumps({**doc, "traceEvents": events}))
    ev = scan_trace(path)
    assert _step_pids(ev) == [1, 5] and _kernel_pids(ev) == [0, 1]  # pid 1: B's steps and A's kernels
    with open_trace(path, engine="sqlite") as s:
        every = ranks(s)
        assert [(r["pid"], r["gpus"]) for r in every] == [(1, [0]), (5, [1])]
        why = unparted(every)
        assert why == ("GPU lane 1, which ran ops that process 5's calls launched, has the pid of another rank's "
                       "process: ranks whose GPU lanes and processes share pids cannot be read apart")
        for pid in (1, 5):
            with pytest.raises(ValueError, match=f"cannot read process {pid} on its own: GPU lane 1"):
                write_rank(s, pid, tmp_path / "rank.json")
    got = json.loads(_cli(path, "--json").stdout)
    assert got["ranks_read_whole"] == why and got["rank"] is None
    assert len(got["steps"]) == 6  # both ranks' 3 steps: the whole file, as the note says
    bad = _cli(path, "--process", "5", check=False)
    assert bad.returncode == 2 and bad.stderr == f"error: cannot read process 5 on its own: {why}\n"


def _text_ranks(tmp_path, a: str, b: str) -> Path:
    """The H200's warm 4096² run as two ranks whose processes the file writes as texts ``a`` and ``b`` (GPU lanes 0
    and 1; b's events 7 µs later), their ``process_name`` metadata kept ("python3" for both, as Kineto writes)."""
    doc = json.loads((H200 / "4096_bf16_warm_eager.json").read_text())
    (cpu,), (gpu,) = _step_pids(doc["traceEvents"]), _kernel_pids(doc["traceEvents"])

    def moved(pids: dict, shift: float) -> list:
        return [dict(e, pid=pids[e["pid"]], **({"ts": e["ts"] + shift} if "ts" in e else {}))
                for e in doc["traceEvents"] if e.get("pid") in pids]
    path = tmp_path / f"{a}_{b}.json"
    path.write_text(json.dumps({**doc, "traceEvents": moved({cpu: a, gpu: 0}, 0.0) + moved({cpu: b, gpu: 1}, 7.0)}))
    (tmp_path / f"{b}.json").write_text(json.dumps({**doc, "traceEvents": moved({cpu: b, gpu: 1}, 7.0)}))
    return path


def test_ranks_written_with_text_pids_are_read_each_as_its_own_run(tmp_path):
    """Processes written as texts ("rank0", "rank1") are numbered by the reader, and renamed by their process_name
    metadata, so no pid the tables hold is written in the file: the rank's file is left out by the text the reader
    numbered. Each rank read alone prints what its own trace prints; before, leaving out by the number left out
    nothing, and "one rank" read both (6 steps)."""
    path = _text_ranks(tmp_path, "rank0", "rank1")
    with open_trace(path, engine="sqlite") as s:
        every = ranks(s)
        names = {pid: name for _u, pid, name in s.tables.processes}
        assert [names[r["pid"]] for r in every] == ["python3", "python3"]
        (one,) = [r for r in every if r["gpus"] == [1]]  # (rank1: the ranks come in the order of their numbers)
        write_rank(s, one["pid"], tmp_path / "rank1_alone.json")
    kept = scan_trace(tmp_path / "rank1_alone.json")
    assert {e.get("pid") for e in kept} - {"Spans", "Traces", ""} == {"rank1", 1}
    assert [e for e in kept if e.get("pid") in ("rank1", 1)] == [
        e for e in scan_trace(tmp_path / "rank1.json") if e.get("pid") in ("rank1", 1)]
    alone = _cli(tmp_path / "rank1.json").stdout.splitlines()[1:]
    got = _cli(path, "--process", str(one["pid"])).stdout.splitlines()
    assert "Everything here reads one rank" in got[2] and got[1] == alone[0] == "  steps 3   GPU ops 9   kernels 6"
    assert [line for line in got[1:] if not line.startswith("  note: This file holds")] == alone


def test_text_pids_the_reader_numbers_alike_are_read_whole_and_say_why(tmp_path):
    """Two texts whose crc32 agree in the 30 bits the reader keeps ("rank-3985819", "rank-4420602") get the number
    and the number after it: the file cannot say which of their events carry which, so the ranks are read whole,
    with the reason, and asking for either is refused."""
    a, b = "rank-3985819", "rank-4420602"
    path = _text_ranks(tmp_path, a, b)
    with open_trace(path, engine="sqlite") as s:
        pa, pb = [r["pid"] for r in ranks(s)]
        assert pb == pa + 1
        for pid in (pa, pb):
            with pytest.raises(ValueError, match="cannot be told apart"):
                write_rank(s, pid, tmp_path / "rank.json")
            assert not (tmp_path / "rank.json").exists()
    got = json.loads(_cli(path, "--json").stdout)
    assert got["rank"] is None and len(got["steps"]) == 6 and "cannot be told apart" in got["ranks_read_whole"]
    bad = _cli(path, "--process", str(pb), check=False)
    assert bad.returncode == 2 and "share the number a reader gives them" in bad.stderr
