"""The package's loader gives exactly what the oracle (tests/loader_oracle.py: the rules, one event and one slice at a
time) gives: the model's columns, the args rows handed to the writer, and the load stats (skip reasons in the order
they were first met).

Compared on generated traces and on every real trace in tests/data (and in shared/traces when it is beside the
repository). The generated ones are Kineto-like (long runs of X and flow events, nested CPU slices, GPU streams,
flows s/t/f with and without bp=e) with the odd things a loader must get right mixed in: overlapping slices (spill
tracks) with flows on them, threads made only of overlaps, bad or float/str timestamps, negative durations, odd
pids/tids (strings, lists, bools, out of range), new threads in the middle of a run, odd flow ids, empty or odd names
and args, B/E pairs and instants between X events, odd phases, entries that are not objects. Instants have a group of
their own: each scope with each odd value, among the other phases, at chunk boundaries and in chunks of any size. A
last group checks pieces with their own rules: the decoder's pieces, the slice order, flow key numbers, the
three-decimals reading.
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import loader_oracle
import pathological_traces
import msgspec
import numpy as np
import pytest

from profiling_core.trace import _collect, _decode, _nest
from profiling_core.trace._collect import Collector
from profiling_core.trace._decode import iter_batches, split_events, stream_typed
from profiling_core.trace import LoadStats
from profiling_core.trace._model import build

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"

# ---------------------------------------------------------------------------------------------------- generating


def _tree(rng: random.Random, t0: int, t1: int, depth: int, out: list, limit: int) -> None:
    """Properly nested slices filling [t0, t1): touching siblings, equal starts/ends, zero durations."""
    t = t0
    while t < t1 and len(out) < limit:
        s = t + rng.choice([0, 0, 0, 1, 3, 7])
        if s > t1:
            break
        e = min(t1, s + rng.choice([0, 0, 1, 2, 5, 10, 40, 200, 1000]))
        out.append((s, e - s))
        if depth < 6 and e - s > 2 and rng.random() < 0.6:
            _tree(rng, s + rng.choice([0, 0, 1]), e - rng.choice([0, 0, 1]), depth + 1, out, limit)
        t = e


_NAMES = ["aten::mm", "aten::add", "cudaLaunchKernel", "ProfilerStep#3", "void gemm<float>(...)", "nccl:all_reduce",
          "é kernel", "Memcpy HtoD"]
_CATS = ["cpu_op", "kernel", "cuda_runtime", "user_annotation", "gpu_memcpy"]


def kineto_like(seed: int, poison: tuple = ()) -> list:
    """A trace as a list of event dicts; ``poison`` names the odd things to mix in (see the module docstring)."""
    rng = random.Random(seed)
    base = rng.choice([0, 1000, 1661203462598738])
    pid = rng.choice([3113936, 7, 0])
    cpu = [(pid, pid), (pid, pid + 1)] + [(pid, pid + 2 + i) for i in range(rng.randint(0, 2))]
    gpu = [(rng.choice([0, 1]), 7 + i) for i in range(rng.randint(1, 3))]
    per_thread = {}
    for th in cpu + gpu:
        out: list = []
        if th in gpu:  # kernels one after the other
            t = 0
            for _ in range(rng.randint(40, 300)):
                t += rng.choice([0, 1, 2, 10])
                d = rng.choice([0, 1, 3, 20])
                out.append((t, d))
                t += d
        else:
            _tree(rng, 0, rng.choice([3000, 20000]), 0, out, rng.randint(40, 400))
        per_thread[th] = out
    if "overlap" in poison:  # partial overlaps on one CPU thread: spill tracks
        th = rng.choice(cpu)
        sl = per_thread[th]
        for _ in range(rng.randint(1, 6)):
            s, d = rng.choice(sl)
            per_thread[th].append((s + max(1, d // 2), d + rng.randint(1, 50)))
    if "overlap_all" in poison:  # a thread that is all overlaps
        per_thread[(pid, pid + 50)] = [(rng.randint(0, 500), rng.randint(1, 200)) for _ in range(rng.randint(40, 120))]
    evs: list = []
    slices_of: dict = {}
    for (p, t), sl in per_thread.items():
        for s, d in sl:
            e = {"ph": "X", "cat": rng.choice(_CATS), "name": rng.choice(_NAMES), "pid": p, "tid": t,
                 "ts": base + s, "dur": d}
            r = rng.random()
            if r < 0.7:
                e["args"] = {"External id": len(evs), "Input Dims": [[1, 2], []], "correlation": rng.randint(0, 99)}
            elif r < 0.8:
                e["args"] = rng.choice([{}, None, [], {"a": {"b": 1.5}}])
            evs.append(e)
            slices_of.setdefault((p, t), []).append((s, d))
    # flows: launches on CPU threads -> kernels on GPU streams, plus odd ones
    fid = rng.randint(0, 1000)
    for _ in range(rng.randint(20, 200)):
        src_th, dst_th = rng.choice(list(slices_of)), rng.choice(list(slices_of))
        s_src = rng.choice(slices_of[src_th])[0]
        s_dst = rng.choice(slices_of[dst_th])[0]
        fid += 1
        common = {"cat": rng.choice(["ac2g", "async_cpu_to_gpu", "fwdbwd"]), "name": rng.choice(["ac2g", "x", "fwd"])}
        start = {"ph": "s", "id": fid, "pid": src_th[0], "tid": src_th[1], "ts": base + s_src, **common}
        end = {"ph": "f", "id": fid, "pid": dst_th[0], "tid": dst_th[1], "ts": base + s_dst, **common}
        if rng.random() < 0.8:
            start["bp"] = "e"
            end["bp"] = "e"
        r = rng.random()
        if r < 0.1:  # a step in between
            mid = rng.choice(list(slices_of))
            evs.append({"ph": "t", "id": fid, "pid": mid[0], "tid": mid[1],
                        "ts": base + rng.choice(slices_of[mid])[0] + rng.choice([0, 1]), **common})
        elif r < 0.15:  # a second start with the same id
            evs.append(dict(start, ts=start["ts"] + rng.choice([0, 5])))
        elif r < 0.2:  # a second end
            evs.append(dict(end, ts=end["ts"] + rng.choice([0, 3])))
        elif r < 0.25:  # an end without a start
            evs.append(dict(end, id=fid + 100000))
        elif r < 0.3:  # between slices, or before the first one
            end["ts"] = base + rng.choice([-5, s_dst + 1, 10**6])
        evs += [start, end]
    if "pending" in poison:  # 'f' without bp=e, some after the thread's last slice
        for _ in range(rng.randint(1, 20)):
            th = rng.choice(list(slices_of))
            evs.append({"ph": "f", "id": rng.randint(0, 2000), "pid": th[0], "tid": th[1], "cat": "ac2g",
                        "name": "ac2g", "ts": base + rng.choice(slices_of[th])[0] + rng.choice([0, 1, 10**5])})
    if "flow_nothread" in poison:  # flows on a thread without slices
        for _ in range(3):
            evs.append({"ph": rng.choice("stf"), "id": fid, "pid": pid, "tid": 999, "ts": base + 5,
                        "bp": rng.choice(["e", None])})
    # order: as Kineto writes (roughly by thread), sorted by time, or shuffled in blocks
    r = rng.random()
    if r < 0.3:
        evs.sort(key=lambda e: e["ts"])
    elif r < 0.6:
        blocks = [evs[i:i + 50] for i in range(0, len(evs), 50)]
        rng.shuffle(blocks)
        evs = [e for b in blocks for e in b]
    _poison(rng, evs, poison, base)
    meta = [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": f"proc {p}"}}
            for p in sorted({p for p, _ in per_thread})]
    meta += [{"ph": "M", "name": "thread_name", "pid": p, "tid": t, "args": {"name": f"thread {t}"}}
             for p, t in per_thread if rng.random() < 0.5]
    return (meta + evs) if rng.random() < 0.3 else (evs + meta)


def _poison(rng: random.Random, evs: list, poison: tuple, base: int) -> None:
    def some(k=3):
        return [rng.randrange(len(evs)) for _ in range(k)]

    for what in sorted(poison, key=lambda w: w == "not_object"):  # (that one last: the others edit dicts)
        if what == "float_ts":  # floats (read as text by the decoder), sometimes every event
            for i in (range(len(evs)) if rng.random() < 0.5 else some(20)):
                if type(evs[i].get("ts")) is not int:
                    continue
                evs[i]["ts"] = evs[i]["ts"] + rng.choice([0.5, 0.123, 0.0005, 0.999])
                if type(evs[i].get("dur")) is int and rng.random() < 0.5:
                    evs[i]["dur"] = evs[i]["dur"] + 0.25
        elif what == "str_ts":
            for i in some():
                evs[i]["ts"] = rng.choice([str(evs[i]["ts"]), f"{evs[i]['ts']}.25", "1e3", "x", "", " 5"])
        elif what == "bad_ts":
            for i in some():
                evs[i]["ts"] = rng.choice([None, True, [1], 2**70, -(2**62), 2**62 // 1000 + 1, {"a": 1}])
        elif what == "bad_dur":
            for i in some():
                if evs[i]["ph"] == "X":
                    evs[i]["dur"] = rng.choice([-1, None, "x", True, 2**62, 2**62 // 1000, 1.5, "-0.0001"])
        elif what == "odd_ids":  # pids/tids: strings, None, lists, out of range, a new thread mid-run
            for i in some(4):
                evs[i][rng.choice(["pid", "tid"])] = rng.choice(["Spans", "stream 7", None, [1], 2**62, -1, 0,
                                                                 12345, True, 1.0])
        elif what == "odd_flow_ids":
            for e in evs:
                if e["ph"] in ("s", "t", "f") and rng.random() < 0.2:
                    big = e["id"] * 2**40 if type(e["id"]) is int else 2**80
                    e["id"] = rng.choice([-1, 2**63 + 5, 2**64 + 1, "0x1f", "zz", None, big])
        elif what == "odd_names":
            for i in some(6):
                evs[i][rng.choice(["name", "cat"])] = rng.choice(["", None, 3, ["a"], "é", "ProfilerStep#1"])
            for i in some(2):
                evs[i].pop(rng.choice(["name", "cat"]), None)
        elif what == "be":  # B/E pairs and instants between the X events
            for _ in range(rng.randint(1, 10)):
                i = rng.randrange(len(evs))
                e = evs[i]
                ts = e["ts"] if isinstance(e["ts"], int) else base
                evs.insert(i, {"ph": "B", "name": "b", "pid": e["pid"], "tid": e["tid"], "ts": ts, "args": {"k": 1}})
                evs.insert(i + rng.randint(1, 200), {"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": ts + 3})
                evs.insert(rng.randrange(len(evs)), {"ph": rng.choice(["i", "I", "R"]), "name": "inst", "pid": 1,
                                                     "tid": 1, "ts": ts, "s": rng.choice(["g", "p", "t", None, "x"])})
        elif what == "counters":  # C events among the others: several fields, odd values, odd args, shared names
            values = [1, -2.5, 0, 2**70, "3.25", " 7", "7 ", "0x1p4", "inf", "nan", "", "x", "1e", True, None, [1],
                      {"a": 1}, "1_0", "\u0000"]
            for _ in range(rng.randint(5, 60)):
                th = rng.choice([(e["pid"], e["tid"]) for e in evs[:50] if "pid" in e] + [(9, 9), ("Spans", 1)])
                args = {k: rng.choice(values) for k in rng.sample(["a", "b", "é", "", "a b"], rng.randint(1, 3))} \
                    if rng.random() < 0.6 else rng.choice([{"bytes": rng.randint(0, 10**9)}, {}, None, [1], "x"])
                e = {"ph": "C", "name": rng.choice(["mem", "", None, 5, "GPU 0"]), "pid": th[0], "tid": th[1],
                     "ts": base + rng.randint(0, 3000) if rng.random() < 0.8 else rng.choice([base, None, "x"])}
                if rng.random() < 0.3:
                    e["id"] = rng.choice(["0x1", "", 7, "a"])
                if args is not None:
                    e["args"] = args
                evs.insert(rng.randrange(len(evs) + 1), e)
        elif what == "odd_ph":
            for i in some(2):
                evs[i]["ph"] = rng.choice(["C", None, 5, ["X"], "", "b"])
        elif what == "not_object":
            evs.insert(rng.randrange(len(evs)), rng.choice([1, "x", None, []]))


POISONS = [(), ("overlap",), ("overlap", "pending"), ("overlap_all", "pending"), ("pending", "flow_nothread"),
           ("float_ts",), ("str_ts",), ("bad_ts",), ("bad_dur",), ("odd_ids",), ("odd_flow_ids",), ("odd_names",),
           ("be",), ("odd_ph",), ("not_object",), ("overlap", "float_ts", "odd_ids", "pending", "be"),
           ("overlap_all", "odd_flow_ids", "odd_names", "bad_dur"), ("counters",), ("counters", "odd_ids", "be")]


# -------------------------------------------------------------------------------------------------------- loading


def _decoded(chunks) -> list:
    """(file index of the first, events) batches as the mirror decodes them (_mirror._collect): streamed, or the whole
    document's events when it cannot stream."""
    out, n = [], 0
    try:
        for raws, events in stream_typed(chunks):
            if events is not None:
                out.append((n, events))
                n += len(events)
            else:
                out.extend(iter_batches(raws, base=n))
                n += len(raws)
        return out
    except _decode.NotStreamable:
        return list(iter_batches(split_events(b"".join(chunks.data), "x")))


class _Chunks:
    """An iterator over ``data`` in pieces of ``size`` that keeps the whole (for the NotStreamable fallback)."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data = [data]
        self.it = (data[i:i + size] for i in range(0, len(data), size))

    def __iter__(self):
        return self.it


def package(batches) -> dict:
    """Everything the package's loader produces from ``batches``, in the oracle's shape."""
    stats = LoadStats()
    c = Collector(stats)
    rows, n = [], 0
    for start, events in batches:
        c.run(start, events)
        rows += [(a, bytes(r)) for a, r in c.args]
        c.args = []
        n = start + len(events)
    stats.events = n
    m = build(c)
    out = {"args": rows, "skipped": dict(stats.skipped),  # how many of each reason (their order is not a rule)
           "counts": (stats.events, stats.slices, stats.flows, stats.spill_tracks, stats.counters),
           "processes": m.processes, "threads": m.threads, "tracks": m.tracks,
           "category": m.category.tolist(), "name": m.name.tolist(), "counter_tracks": m.counter_tracks,
           "counter_value": [v.hex() for v in m.counter_value.tolist()]}  # (exact, NaN included)
    for f in ("ts", "dur", "track_id", "depth", "parent_id", "arg_set_id", "flow_out", "flow_in", "flow_trace_id",
              "counter_ts", "counter_track_id"):
        out[f] = getattr(m, f).tolist()
    return out


def _same(batches, ordered: bool = False) -> dict:
    """The package's result, checked equal to the oracle's, key by key (``ordered``: the skip reasons in the order
    they were first met, too)."""
    got, want = package(batches), loader_oracle.load(batches)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == want[k], k
    if ordered:
        assert list(got["skipped"]) == list(want["skipped"])
    return got


def _check(evs, chunk: int = 1 << 14) -> dict:
    data = json.dumps({"traceEvents": evs} if isinstance(evs, list) else evs).encode()
    return _same(_decoded(_Chunks(data, chunk)))


# ------------------------------------------------------------------------------------------- generated traces


@pytest.mark.parametrize("poison", POISONS, ids=lambda p: "+".join(p) or "clean")
def test_generated_traces(poison):
    for seed in range(6):
        _check(kineto_like(seed * 31 + len(poison), poison))


def test_more_seeds():
    rng = random.Random(7)
    for seed in range(40):
        poison = tuple(rng.sample(sorted({p for ps in POISONS for p in ps}), rng.randint(0, 3)))
        _check(kineto_like(1000 + seed, poison), chunk=rng.choice([1 << 10, 1 << 14, 1 << 20]))


def test_spilled_thread_with_flows():
    """Hand-made: one thread nests well, the other has a spill (lane 1); flows bind on both, with the stale top rule,
    a waiting 'f', and a step."""
    x = [("A", 0, 100), ("B", 10, 20), ("C", 30, 5), ("D", 40, 80)]  # D overlaps A: spills onto lane 1
    x += [(f"n{i}", 200 + 10 * i, 10) for i in range(40)]              # padding, nested well
    evs = [{"ph": "X", "name": n, "pid": 1, "tid": 2, "ts": s, "dur": d} for n, s, d in x]
    evs += [{"ph": "X", "name": f"k{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 10 - i % 2} for i in range(60)]
    evs += [{"ph": "s", "id": 1, "pid": 1, "tid": 2, "ts": 45, "bp": "e", "cat": "c", "name": "n"},   # -> A (lane 0)
            {"ph": "f", "id": 1, "pid": 1, "tid": 1, "ts": 95, "bp": "e", "cat": "c", "name": "n"},   # -> k9 (stale)
            {"ph": "s", "id": 2, "pid": 1, "tid": 1, "ts": 33, "bp": "e", "cat": "c", "name": "n"},   # -> k3
            {"ph": "t", "id": 2, "pid": 1, "tid": 2, "ts": 31, "bp": "e", "cat": "c", "name": "n"},   # -> C
            {"ph": "f", "id": 2, "pid": 1, "tid": 2, "ts": 150, "cat": "c", "name": "n"}]             # waits: n0
    got = _check(evs)
    names = got["name"]
    pairs = [(names[a], names[b]) for a, b in zip(got["flow_out"], got["flow_in"])]
    # hand count: s(1)@45 on thread 2 binds the top of its own track, A (D sits on the spill track, as in
    # trace_processor; D's arrival at 40 closed C); f(1)@95 binds k9; s(2)@33 binds k3; t(2)@31 comes first (no
    # start: skipped); f(2)@150 waits for thread 2's next slice, n0, and links from k3
    assert pairs == [("A", "k9"), ("k3", "n0")], pairs
    assert dict(got["skipped"]) == {"flow_end_without_start": 1}
    assert got["counts"][3] == 1  # one spill track


def test_new_threads_mid_run_keep_first_seen_order():
    evs = []
    for i in range(300):
        pid = "Spans" if i == 150 else (1 if i < 200 else 2)
        evs.append({"ph": "X", "name": "k", "pid": pid, "tid": i // 100, "ts": i, "dur": 1})
        evs.append({"ph": "s", "id": i, "pid": 3 if i == 77 else 1, "tid": 0, "ts": i, "bp": "e"})
    evs.insert(100, {"ph": "M", "name": "thread_name", "pid": 9, "tid": 9, "args": {"name": "nine"}})
    evs.insert(400, {"ph": "i", "name": "i", "pid": 8, "tid": 1, "ts": 5, "s": "p"})
    got = _check(evs)
    assert [p[1] for p in got["processes"]][:4] == [0, 1, 9, 3], got["processes"]  # (the M names a thread first)


def test_bad_values_among_good_ones():
    """Each skip reason of X and flow events, in one run, with the threads of the skipped events made only by kept
    ones (a bool pid is the equal int's thread only once that exists)."""
    evs = [{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(500)]
    evs[250]["dur"] = -3
    evs[260]["ts"] = "12.5"
    evs[270]["ts"] = None
    evs[280]["dur"] = "x"
    evs[290]["ts"] = 2**62
    evs[300].update(pid=True, tid=5)   # before (1, 5) exists: not a thread
    evs[310].update(pid=1, tid=5)
    evs[320].update(pid=True, tid=5)   # (1, 5) now
    evs[330].update(pid=[1])
    evs += [{"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": i, "bp": "e"} for i in range(200)]
    evs[550]["id"] = "zz"
    evs[560]["ts"] = "?"
    got = _check(evs, chunk=1 << 20)
    assert got["skipped"] == {"X_negative_dur": 1, "X_missing_or_bad_ts": 1, "X_missing_or_bad_dur": 1,
                              "ts_out_of_range": 1, "bad_pid_or_tid": 2, "flow_invalid_id": 1,
                              "flow_missing_or_bad_ts": 1}, got["skipped"]  # ("12.5" is a good ts)
    assert [t[1] for t in got["threads"]] == [0, 1, 5]


# ------------------------------------------------------------------------------------------------------- instants
# An instant (ph i/I/R) is checked in this order: ts (any bad or out-of-range value: i_missing_or_bad_ts), pid/tid
# (bad_pid_or_tid), then its scope, which needs its thread: so an instant of a bad scope still makes its thread.

_ABSENT = object()
_I_SCOPES = ["g", "p", "t", None, _ABSENT, "x", "", "G", "tt", 5, True, ["g"], {"s": "g"}]
_I_TS = [7, "7.5", "7.0005", -3, "-0.001", 2**62 // 1000, -(2**62 // 1000), "4611686018427387.903",  # (in range)
         2**62 // 1000 + 1, -(2**62 // 1000) - 1, "4611686018427387.904", 2**70, "x", "", "nan", "inf", " 5", None,
         True, [1], {"a": 1}, _ABSENT]
_I_IDS = [1, 2, 0, -1, 2**32, 2**62, "Spans", "", None, _ABSENT, True, False, 1.5, [1], {"a": 1}]
_I_TEXT = ["n", "[No name]", "é", "", None, 3, 1.5, True, ["a"], {"a": 1}, _ABSENT]
_I_ARGS = [{"a": 1}, {}, None, [], "x", 0, {"a": {}}, _ABSENT]


def _instant(ph="i", s=_ABSENT, ts=5, pid=1, tid=1, name="n", cat="c", args=_ABSENT) -> dict:
    e = {"ph": ph, "s": s, "ts": ts, "pid": pid, "tid": tid, "name": name, "cat": cat, "args": args}
    return {k: v for k, v in e.items() if v is not _ABSENT}


def _every_instant() -> list:
    """Each scope with each ts, pid, tid, name, category and args value of the lists above (the others good), on
    threads of their own (tids by scope: the instants make them, or not), with X events on those threads after them."""
    evs = []
    for k, s in enumerate(_I_SCOPES):
        ph = "iIR"[k % 3]
        evs += [_instant(ph, s, ts=v, tid=100 + k) for v in _I_TS]
        evs += [_instant(ph, s, pid=v, tid=200 + k) for v in _I_IDS] + [_instant(ph, s, tid=v) for v in _I_IDS]
        evs += [_instant(ph, s, name=n, cat=c, tid=300 + k) for n in _I_TEXT for c in _I_TEXT[::3]]
        evs += [_instant(ph, s, args=a, tid=400 + k) for a in _I_ARGS]
        evs += [{"ph": "X", "pid": 1, "tid": t + k, "ts": 5, "dur": 1, "args": {"x": 1}} for t in (100, 200, 300, 400)]
    return evs


def _mixed(seed: int, n: int) -> list:
    """Every phase in a random order, instants most of all, with new threads first met on any of them."""
    rng = random.Random(seed)
    pool = [(1, 1)]
    evs = []
    for i in range(n):
        if rng.random() < 0.03:
            pool.append((rng.choice([1, 2, "Spans", 0, -1]), rng.choice([len(pool) + 1, "lane", 0, -5])))
        pid, tid = rng.choice(pool)
        ts = rng.randint(0, 1000)
        r = rng.random()
        if r < 0.45:
            def odd(values, good):
                return rng.choice(values) if rng.random() < 0.1 else good
            e = _instant(rng.choice("iiIR"), odd(_I_SCOPES, rng.choice(["t", "t", _ABSENT, "g", "p"])),
                         odd(_I_TS, ts), odd(_I_IDS, pid), odd(_I_IDS, tid), odd(_I_TEXT, "n"), odd(_I_TEXT, "c"),
                         rng.choice(_I_ARGS))
        elif r < 0.7:
            e = {"ph": "X", "pid": pid, "tid": tid, "ts": ts if rng.random() < 0.95 else rng.choice(_I_TS),
                 "dur": rng.choice([0, 3, 50, -1, "x"]) if rng.random() < 0.1 else rng.randint(0, 20),
                 "name": rng.choice(["k", "", None]), "args": rng.choice(_I_ARGS[:3])}
            e = {k: v for k, v in e.items() if v is not _ABSENT}
        elif r < 0.78:
            e = {"ph": rng.choice("stf"), "id": rng.choice([1, 2, "zz"]), "pid": pid, "tid": tid, "ts": ts,
                 "bp": rng.choice(["e", None])}
        elif r < 0.84:
            e = {"ph": "M", "name": rng.choice(["thread_name", "process_name"]), "pid": pid, "tid": tid,
                 "args": {"name": f"m{i}"}}
        elif r < 0.93:
            e = {"ph": rng.choice("BE"), "pid": pid, "tid": tid, "ts": ts, "name": "b", "args": {"b": i}}
        elif r < 0.98:
            e = {"ph": "C", "pid": pid, "tid": tid, "ts": ts, "name": "c", "args": {"v": i}}
        else:
            e = rng.choice([{"ph": "zz"}, {"ph": None}, 5])
        evs.append(e)
    return evs


def _batches(evs: list, size: int = _decode.BATCH) -> list:
    """The events as the whole-document reading gives them: batches of ``size`` from file index 0."""
    return list(iter_batches(split_events(json.dumps(evs).encode(), "x"), size=size))


def test_instants_every_scope_and_skip():
    """A hand count of each way an instant goes, then every scope with every odd value, against the oracle."""
    evs = [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "x"},
           _instant("i", "x", ts=1, tid=2),                            # makes thread (1, 2), then i_bad_scope
           _instant("I", "g", ts="x", tid=3),                          # i_missing_or_bad_ts (makes nothing)
           _instant("R", "g", ts=2, pid=[1], tid=3),                   # bad_pid_or_tid
           _instant("i", "p", ts=2**62 // 1000 + 1, tid=4),            # out of range: i_missing_or_bad_ts
           _instant("i", "x", ts="x", pid=[1]),                        # (ts first)
           _instant("i", "x", ts=2, pid=[1]),                          # (pid/tid before the scope)
           _instant("i", "p", ts=3, pid="Spans", tid=5, name=""),      # "Spans"'s track, name NULL
           _instant("i", "g", ts=4, pid=2, tid=6, cat=7),              # makes (2, 6); the global track, category NULL
           _instant("i", None, ts="5.5", name=3, args={"a": 1}),       # thread (1, 1): "[No name]", arg set 0
           _instant("I", "t", ts=6, args={}),                          # no arg set
           _instant("R", "p", ts=7, name="[No name]", args={"b": 2}),  # process 1's track, arg set 1
           {"ph": "X", "pid": 1, "tid": 2, "ts": 8, "dur": 1, "args": {"c": 3}}]  # arg set 2
    got = _same(_batches(evs), ordered=True)
    assert list(got["skipped"].items()) == [("i_bad_scope", 1), ("i_missing_or_bad_ts", 3), ("bad_pid_or_tid", 2)]
    spans = got["processes"][2][1]  # (the number of the string pid)
    assert [p[2] for p in got["processes"]] == [None, None, "Spans", None]
    assert [(t[1], t[3]) for t in got["threads"]] == [(0, 0), (1, 1), (2, 1), (spans, 2), (5, 2), (2, 3), (6, 3)]
    rows = sorted(zip(got["ts"], got["dur"], got["name"], got["category"], got["arg_set_id"]))
    assert rows == [(0, 10000, "x", None, -1), (3000, 0, None, "c", -1), (4000, 0, "n", None, -1),
                    (5500, 0, "[No name]", "c", 0), (6000, 0, "n", "c", -1), (7000, 0, "[No name]", "c", 1),
                    (8000, 1000, "[No name]", None, 2)]
    assert sorted(t[2] for t in got["tracks"]) == ["legacy_chrome_global_instants", "legacy_chrome_process_instants",
                                                   "legacy_chrome_process_instants", "thread_execution",
                                                   "thread_execution"]
    every = _every_instant()
    for size in (_decode.BATCH, 5, 64):
        _same(_batches(every, size), ordered=True)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 2048])
def test_instants_among_other_phases(chunk, monkeypatch):
    """Instants between X, flow, M, B/E, C and odd events, in chunks of every size (a chunk of one event, chunk
    boundaries everywhere): the threads they make, their slices and skips in file order among the others'."""
    monkeypatch.setattr(_collect, "_CHUNK", chunk)
    for seed in range(4):
        evs = _mixed(seed, 600 if chunk < 64 else 5000)
        _same(_batches(evs, random.Random(seed).choice([_decode.BATCH, 1000, 333])), ordered=True)
    _same(_batches(_every_instant()), ordered=True)


@pytest.mark.parametrize("off", range(-4, 5))
def test_instants_at_chunk_boundaries(off):
    """New threads first met on instants (of each scope, a bad one too), X, M, B/E and C events around the end of a
    chunk (the loader's own chunk size): made in file order, with the slices and skips in file order."""
    n = 2 * _collect._CHUNK + off - 6
    evs = [{"ph": "X", "pid": 1, "tid": 1, "ts": i, "dur": 1, "args": {"i": i}} for i in range(n)]
    evs += [_instant("i", "x", ts=1, tid=10),                          # makes (1, 10), skipped
            {"ph": "X", "pid": 1, "tid": 10, "ts": 1, "dur": 1},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 11, "args": {"name": "eleven"}},
            _instant("i", "t", ts=2, tid=11, args={"a": 1}),
            {"ph": "X", "pid": 1, "tid": 12, "ts": 2, "dur": 1, "args": {"x": 1}},
            _instant("I", None, ts=2, tid=12, args={"b": 1}),
            {"ph": "B", "pid": 1, "tid": 13, "ts": 3, "name": "b", "args": {"b": 1}},
            _instant("R", "p", ts=3, pid="P", tid=13, args={"p": 1}),
            {"ph": "E", "pid": 1, "tid": 13, "ts": 9},
            _instant("i", "g", ts=4, pid=7, tid=14, args={"g": 1}),
            {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "seven"}},
            {"ph": "C", "pid": 1, "tid": 15, "ts": 4, "name": "c", "args": {"v": 1}},
            _instant("i", "t", ts="x", tid=18),                        # (makes no thread)
            _instant("i", "t", ts=5, tid=[16]),
            {"ph": "X", "pid": 1, "tid": 16, "ts": 5, "dur": 1},
            _instant("i", "t", ts=5, tid=17, args={"c": 1})]
    got = _same(_batches(evs), ordered=True)
    p = got["processes"][2][1]  # (the number of the string pid)
    assert [t[1] for t in got["threads"]] == [0, 1, 10, 11, 12, 13, p, 13, 7, 14, 15, 16, 17]
    assert got["skipped"] == {"i_bad_scope": 1, "i_missing_or_bad_ts": 1, "bad_pid_or_tid": 1}


def test_empty_and_tiny_traces():
    for evs in ([], [{"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1}], [{"ph": "s", "id": 1, "ts": 1}],
                [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}}],
                [{"ph": "B", "ts": 1, "pid": 1, "tid": 1}, {"ph": "i", "ts": 1, "pid": 1, "tid": 1, "s": "g"}]):
        _check(evs)


def test_random_nesting():
    """Threads of nested slices with partial overlaps (few or many: spill tracks, threads of overlaps only), many
    equal timestamps, small and large threads, with flow events (s/t/f, with and without bp=e) on them."""
    rng = random.Random(3)
    for case in range(150):
        evs = []
        for tid in range(rng.choice([1, 1, 2, 3])):
            sl: list = []
            _tree(rng, 0, rng.choice([50, 500, 5000, 50000]), 0, sl, rng.choice([5, 40, 400, 3000]))
            if case % 3 == 0:  # partial overlaps
                for _ in range(rng.choice([1, 2, 3, 20, 100, 1000])):
                    s, d = rng.choice(sl)
                    sl.append((s + rng.randint(0, d), rng.randint(0, 100)))
            if case % 7 == 0:  # many equal timestamps
                sl = [(s // 50 * 50, d // 10 * 10) for s, d in sl]
            if rng.random() < 0.5:
                rng.shuffle(sl)
            evs += [{"ph": "X", "name": f"n{i}", "pid": 1, "tid": tid, "ts": s, "dur": d}
                    for i, (s, d) in enumerate(sl)]
            for i in range(rng.choice([0, 5, 50])):
                s, d = rng.choice(sl)
                evs.append({"ph": rng.choice("sstf"), "id": rng.randint(0, 20), "pid": 1, "tid": tid,
                            "ts": s + rng.choice([0, d // 2, d, d + 1]), "bp": rng.choice(["e", "e", None])})
        _check(evs)


@pytest.mark.parametrize("shape", sorted(pathological_traces.SHAPES))
def test_pathological_shapes(shape, monkeypatch):
    """The shapes made against the splitter (long elements, "}," in strings and at nested levels, escapes), cut into
    chunks of several sizes and split with small pieces: the same result as the oracle's, every event a slice."""
    monkeypatch.setattr(_decode, "_PIECE", 1 << 12)
    data, n = pathological_traces.SHAPES[shape](1 << 18, 1 << 14) if shape not in ("one_string", "nested_args") \
        else pathological_traces.SHAPES[shape](1 << 18)
    for chunk in (1000, 1 << 14, 1 << 20):
        got = _same(_decoded(_Chunks(data, chunk)))
        assert got["counts"][:2] == (n, n)


_ODD_TEXT = [b"a\\ud800b", b"\\udc00", b"\\ud83d\\ude00", b"\\\\ud800", b"\\ud800\\ud800", b"x\xffy", b"\xc3",
             b"\xed\xa0\x80", "é\u6f22".encode(), b"\\\"},"]


def test_text_that_is_not_unicode():
    """Lone surrogate escapes and bytes that are not UTF-8 in names, categories, pids, args and metadata: the loader
    and the oracle agree (both read them as U+FFFD)."""
    rng = random.Random(5)
    for case in range(40):
        evs = []
        for i in range(rng.randint(1, 60)):
            odd = rng.choice(_ODD_TEXT)
            field = rng.choice([b"name", b"cat", b"pid", b"args", b"M"])
            if field == b"M":
                evs.append(b'{"ph": "M", "name": "%s", "pid": 1, "tid": %d, "args": {"name": "%s"}}'
                           % (rng.choice([b"process_name", b"thread_name"]), i % 3, odd))
                continue
            e = {b"name": b'"n"', b"cat": b'"c"', b"pid": b"1", b"args": b'{"a": 1}'}
            e[field] = b'{"k": "%s"}' % odd if field == b"args" else b'"%s"' % odd
            evs.append(b'{"ph": "X", "name": %s, "cat": %s, "pid": %s, "tid": 1, "ts": %d, "dur": 1, "args": %s}'
                       % (e[b"name"], e[b"cat"], e[b"pid"], i, e[b"args"]))
        data = b'{"traceEvents": [' + b",".join(evs) + b"]}"
        for chunk in (100, 1 << 20):
            _same(_decoded(_Chunks(data, chunk)))


# ------------------------------------------------------------------------------------------------ real traces


def _real_traces() -> list:
    """Every trace in tests/data and in shared/traces (once per file name)."""
    found = {}
    for folder in (ROOT / "tests" / "data", SHARED):
        for p in sorted(folder.rglob("*.json*")) if folder.is_dir() else ():
            if p.name.endswith((".meta.json", "queries.json", "findings.json", "peaks.json", "facts.json")) or "tp_" in str(p.parent):
                continue
            found.setdefault(p.name, p)
    return list(found.values())


@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name.split(".json")[0])
def test_real_traces(path):
    chunks = _Chunks(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes(), 4 << 20)
    got = _same(_decoded(chunks))
    assert got["counts"][1] > 0


# -------------------------------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("piece", [64, 1000, 1 << 14])
def test_typed_pieces_decode_the_same_events(piece, monkeypatch):
    """stream_typed's smaller pieces: the same events, in the same order, as decoding the whole list."""
    monkeypatch.setattr(_decode, "_PIECE", piece)
    enc = msgspec.json.Encoder()
    for seed in range(8):
        evs = kineto_like(seed, POISONS[seed % len(POISONS)])
        at = random.Random(seed).randrange(len(evs))  # a lone surrogate (escaped by json.dumps) in one name
        evs[at:at] = [{"ph": "X", "name": "\ud800" + "}," * 50, "pid": 1, "tid": 1, "ts": 1, "dur": 1}]
        data = json.dumps({"traceEvents": evs, "x": "},{"}).encode()
        for chunk in (100, 4096, 1 << 16):
            got = [e for _, events in _decoded(_Chunks(data, chunk)) for e in events]
            want = [b for _, bb in iter_batches(split_events(data, "x")) for b in bb]
            assert len(got) == len(want)
            assert enc.encode(got) == enc.encode(want)


@pytest.mark.parametrize("tail", [']}', ' ]\n }\n', '], "x": [1, {"a": "]}\\"]"}], "y": "[["}',
                                  '], "deviceProperties": [{"id": 0, "n": [[], [{}]]}]}'])
def test_the_list_ends_where_its_brackets_balance(tail):
    """The streamed events end at the bracket that closes the list (brackets in strings and in the document after it
    do not count): the same events as decoding the whole document, for any chunk size."""
    evs = [{"ph": "X", "name": "]" * (i % 3) + "[{", "ts": i, "dur": 1, "args": {"a": [[i], {}]}} for i in range(50)]
    data = ('{"schemaVersion": 1, "traceEvents": ' + json.dumps(evs)[:-1] + tail).encode()
    want = [bytes(r) for r in split_events(data, "x")]
    for chunk in (7, 100, 1 << 20):
        got = [bytes(r) for raws in _decode.stream_events(data[i:i + chunk] for i in range(0, len(data), chunk))
               for r in raws]
        assert got == want, chunk
    close = len(data) - len(tail) + tail.index("]")  # (the tails are ASCII)
    with pytest.raises(_decode.NotStreamable):  # the list never closes
        list(_decode.stream_events(iter([data[:close]])))


# ------------------------------------------------------------------------------------------------------ the pieces


def test_slice_order():
    rng = np.random.default_rng(5)
    for case in range(200):
        n = int(rng.integers(0, 300))
        span = int(rng.choice([10, 10**6, 2**40, 2**61]))
        ts = rng.integers(-span // 2, span // 2, n).astype(np.int64) // int(rng.choice([1, 1000])) * 1000
        dur = rng.integers(0, int(rng.choice([1, 50, 2**30, 2**61])), n).astype(np.int64)
        idx = np.arange(n, dtype=np.int64) * 3
        if case % 4 == 0 and n > 1:  # B/E slices come out of file order
            idx = rng.permutation(idx)
        want = np.lexsort((idx, -dur, ts))
        assert _nest._slice_order(ts, dur, idx).tolist() == want.tolist(), case


def test_key_numbers():
    rng = np.random.default_rng(9)
    for case in range(100):
        n = int(rng.integers(1, 500))
        fid = rng.integers(0, int(rng.choice([5, 2**40, 2**63])), n, dtype=np.uint64)
        if case % 5 == 0:
            fid[::3] = np.uint64(2**64 - 1)
        text = rng.integers(0, int(rng.choice([3, 2**20, 2**40])), n).astype(np.int64)
        got = _nest._key_numbers(fid, text).tolist()
        first: dict = {}
        for a, b, g in zip(fid.tolist(), text.tolist(), got):  # same pair <-> same number
            assert first.setdefault((a, b), g) == g
        assert len(set(first.values())) == len(first) and sorted(set(got)) == list(range(len(first)))


def test_ns_of_decimals_is_to_ns():
    """The three-decimals fast reading gives to_ns's values, or None (never a different value)."""
    rng = random.Random(11)
    alphabet = "0123456789" * 3 + ".-,+ _eE\u0663x"
    hits = 0
    for case in range(3000):
        values = []
        for _ in range(rng.choice([1, 2, 5, 40])):
            r = rng.random()
            if r < 0.7:  # Kineto's form, sometimes with odd int parts
                v = f"{rng.choice(['', '-', ''])}{rng.choice(['', '0', '7', '000123', str(rng.randint(0, 10**16)), '9' * 19])}" \
                    f".{rng.randint(0, 999):03d}"
            else:
                v = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
            values.append(v)
        got = _decode.ns_of_decimals(values)
        want = [_decode.to_ns(v) for v in values]
        if got is not None:
            hits += 1
            assert got.dtype == np.int64 and got.tolist() == want, (values, got, want)
    assert hits > 300
