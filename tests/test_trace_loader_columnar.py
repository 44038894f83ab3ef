"""The loader's fast paths give exactly what its per-event / per-slice paths give.

``_build._Collector.run`` takes long runs of X / flow events column by column (``_run_fast``), falling back to the
per-event rules (``_run_events``) for anything else; ``_Nester.run_fast`` nests each thread's lane 0 with arrays,
placing only spilled slices one at a time (``_place``), walks small or spill-heavy threads (``_walk``), then binds
the flows with arrays; ``_decode.stream_typed`` decodes small pieces, ``ns_of_decimals`` reads "1234.567" times. Here
every generated trace is loaded with the fast paths off (``_FAST_COLLECT`` / ``_FAST_NEST`` False: the original
loops, which give the expected values) and on, and everything the loader produces is compared: the model's columns,
the args rows handed to the writer, and the load stats (skip reasons in the order they were first met).

The traces are Kineto-like (long runs of X and flow events, nested CPU slices, GPU streams, flows s/t/f with and
without bp=e) with things mixed in that the fast paths must hand back: overlapping slices (spill tracks) with flows on
them, bad or float/str timestamps, negative durations, odd pids/tids (strings, lists, out of range), new threads in
the middle of a run, odd flow ids, empty or odd names and args, B/E pairs and instants between X events.
"""
from __future__ import annotations

import json
import random

import msgspec
import numpy as np
import pytest

from profiling_core.trace import _build, _decode
from profiling_core.trace._decode import iter_batches, split_events, stream_typed

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
        elif what == "odd_ph":
            for i in some(2):
                evs[i]["ph"] = rng.choice(["C", None, 5, ["X"], "", "b"])
        elif what == "not_object":
            evs.insert(rng.randrange(len(evs)), rng.choice([1, "x", None, []]))


POISONS = [(), ("overlap",), ("overlap", "pending"), ("overlap_all", "pending"), ("pending", "flow_nothread"),
           ("float_ts",), ("str_ts",), ("bad_ts",), ("bad_dur",), ("odd_ids",), ("odd_flow_ids",), ("odd_names",),
           ("be",), ("odd_ph",), ("not_object",), ("overlap", "float_ts", "odd_ids", "pending", "be"),
           ("overlap_all", "odd_flow_ids", "odd_names", "bad_dur")]

# -------------------------------------------------------------------------------------------------------- loading


def _decoded(data: bytes, chunk: int):
    """stream_typed's batches as _mirror._collect reads them, or the whole document's when it cannot stream."""
    chunks = (data[i:i + chunk] for i in range(0, len(data), chunk))
    try:
        return list(stream_typed(chunks))
    except _decode.NotStreamable:
        return [(split_events(data, "x"), None)]


def load(batches, fast_collect: bool, fast_nest: bool, monkeypatch) -> dict:
    """Everything the loader produces from ``batches`` (the output of _decoded), with the given paths."""
    monkeypatch.setattr(_build, "_FAST_COLLECT", fast_collect)
    monkeypatch.setattr(_build, "_FAST_NEST", fast_nest)
    stats = _build.LoadStats()
    c = _build.new_collector(stats)
    rows, n = [], 0
    for raws, events in batches:
        for start, batch in ([(n, events)] if events is not None else iter_batches(raws, base=n)):
            c.run(start, batch)
            rows.append([(a, bytes(r)) for a, r in c.args])
            c.args = []
        n += len(events) if events is not None else len(raws)
    stats.events = n
    m = _build.build(c)
    out = {"args": [r for batch in rows for r in batch], "skipped": list(stats.skipped.items()),
           "counts": (stats.events, stats.slices, stats.flows, stats.spill_tracks)}
    for f in m.__dataclass_fields__:
        v = getattr(m, f)
        if isinstance(v, np.ndarray):
            assert v.dtype == np.int64, f
            v = v.tolist()
        if f != "stats":  # (the LoadStats above)
            out[f] = v
    return out


def _check(evs, monkeypatch, chunk: int = 1 << 14) -> dict:
    data = json.dumps({"traceEvents": evs} if isinstance(evs, list) else evs).encode()
    batches = _decoded(data, chunk)
    want = load(batches, False, False, monkeypatch)
    for fc, fn in ((True, False), (False, True), (True, True)):
        got = load(batches, fc, fn, monkeypatch)
        for k in want:
            assert got[k] == want[k], (k, fc, fn)
    return want


@pytest.fixture
def paths(monkeypatch):
    """Counts how often each fast path ran and how often it handed back."""
    seen = {"fast_run": 0, "fast_run_back": 0, "place": 0, "place_spills": 0, "place_back": 0, "walk": 0}
    run_fast, place, walk = _build._Collector._run_fast, _build._place, _build._walk

    def counted_run_fast(self, *a):
        ok = run_fast(self, *a)
        seen["fast_run" if ok else "fast_run_back"] += 1
        return ok

    def counted_place(*a):
        r = place(*a)
        seen["place_back" if r is None else "place_spills" if len(r[4]) > 1 else "place"] += 1
        return r

    def counted_walk(*a):
        seen["walk"] += 1
        return walk(*a)

    monkeypatch.setattr(_build._Collector, "_run_fast", counted_run_fast)
    monkeypatch.setattr(_build, "_place", counted_place)
    monkeypatch.setattr(_build, "_walk", counted_walk)
    return seen


@pytest.mark.parametrize("poison", POISONS, ids=lambda p: "+".join(p) or "clean")
def test_fast_paths_equal_slow_paths(poison, monkeypatch, paths):
    for seed in range(6):
        _check(kineto_like(seed * 31 + len(poison), poison), monkeypatch)
    if not poison:  # a clean trace: everything the fast way
        assert paths["fast_run"] and not paths["fast_run_back"] and paths["place"]
        assert not paths["place_spills"] and not paths["place_back"]
    if "overlap_all" in poison or "overlap" in poison:
        assert paths["place"] and (paths["place_spills"] or paths["place_back"])
    if poison in (("bad_ts",), ("bad_dur",), ("odd_ids",)):
        assert paths["fast_run_back"] and paths["fast_run"]


def test_spilled_thread_with_flows_in_a_clean_trace(monkeypatch, paths):
    """Hand-made: one thread nests well, the other has a spill (placed on lane 1 by _place); flows bind on both, with
    the stale top rule, a waiting 'f', and a step."""
    x = [("A", 0, 100), ("B", 10, 20), ("C", 30, 5), ("D", 40, 80)]  # D overlaps A: spills onto lane 1
    x += [(f"n{i}", 200 + 10 * i, 10) for i in range(40)]              # padding, nested well
    evs = [{"ph": "X", "name": n, "pid": 1, "tid": 2, "ts": s, "dur": d} for n, s, d in x]
    evs += [{"ph": "X", "name": f"k{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 10 - i % 2} for i in range(60)]
    evs += [{"ph": "s", "id": 1, "pid": 1, "tid": 2, "ts": 45, "bp": "e", "cat": "c", "name": "n"},   # -> A (lane 0)
            {"ph": "f", "id": 1, "pid": 1, "tid": 1, "ts": 95, "bp": "e", "cat": "c", "name": "n"},   # -> k9 (stale)
            {"ph": "s", "id": 2, "pid": 1, "tid": 1, "ts": 33, "bp": "e", "cat": "c", "name": "n"},   # -> k3
            {"ph": "t", "id": 2, "pid": 1, "tid": 2, "ts": 31, "bp": "e", "cat": "c", "name": "n"},   # -> C
            {"ph": "f", "id": 2, "pid": 1, "tid": 2, "ts": 150, "cat": "c", "name": "n"}]             # waits: n0
    want = _check(evs, monkeypatch)
    assert paths["place"] and paths["place_spills"]
    names = want["name"]
    pairs = [(names[a], names[b]) for a, b in zip(want["flow_out"], want["flow_in"])]
    # hand count: s(1)@45 on thread 2 binds the top of its own track, A (D sits on the spill track, as in
    # trace_processor; D's arrival at 40 closed C); f(1)@95 binds k9; s(2)@33 binds k3; t(2)@31 comes first (no
    # start: skipped); f(2)@150 waits for thread 2's next slice, n0, and links from k3
    assert pairs == [("A", "k9"), ("k3", "n0")], pairs
    assert dict(want["skipped"]) == {"flow_end_without_start": 1}
    assert want["counts"][3] == 1  # one spill track


def test_new_thread_mid_run_keeps_first_seen_order(monkeypatch, paths):
    evs = []
    for i in range(300):
        pid = "Spans" if i == 150 else (1 if i < 200 else 2)
        evs.append({"ph": "X", "name": "k", "pid": pid, "tid": i // 100, "ts": i, "dur": 1})
        evs.append({"ph": "s", "id": i, "pid": 3 if i == 77 else 1, "tid": 0, "ts": i, "bp": "e"})
    _check(evs, monkeypatch)
    assert paths["fast_run"] and not paths["fast_run_back"]


def test_run_with_a_bad_event_goes_back_to_the_event_path(monkeypatch, paths):
    evs = [{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(500)]
    evs[250]["dur"] = -3
    evs[260]["ts"] = "12.5"
    want = _check(evs, monkeypatch, chunk=1 << 20)
    assert paths["fast_run_back"] == 2  # once for each load with _FAST_COLLECT on
    assert dict(want["skipped"]) == {"X_negative_dur": 1}


def test_empty_and_tiny_traces(monkeypatch):
    for evs in ([], [{"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1}], [{"ph": "s", "id": 1, "ts": 1}],
                [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}}]):
        _check(evs, monkeypatch)


def test_more_seeds(monkeypatch):
    rng = random.Random(7)
    for seed in range(40):
        poison = tuple(rng.sample(sorted({p for ps in POISONS for p in ps}), rng.randint(0, 3)))
        _check(kineto_like(1000 + seed, poison), monkeypatch, chunk=rng.choice([1 << 10, 1 << 14, 1 << 20]))


# -------------------------------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("piece", [64, 1000, 1 << 14])
def test_typed_pieces_decode_the_same_events(piece, monkeypatch):
    """stream_typed's smaller pieces: the same events, in the same order, as decoding the whole list."""
    monkeypatch.setattr(_decode, "_PIECE", piece)
    enc = msgspec.json.Encoder()
    for seed in range(8):
        evs = kineto_like(seed, POISONS[seed % len(POISONS)])
        data = json.dumps({"traceEvents": evs, "x": "},{"}).encode()
        for chunk in (100, 4096, 1 << 16):
            got = [e for raws, events in _decoded(data, chunk)
                   for e in (events if events is not None else [b for _, bb in iter_batches(raws) for b in bb])]
            want = [b for _, bb in iter_batches(split_events(data, "x")) for b in bb]
            assert len(got) == len(want)
            assert enc.encode(got) == enc.encode(want)


# ------------------------------------------------------------------------------------------------------ the pieces


def test_place_agrees_with_walk():
    """_place gives _walk's lanes, depths, parents, flow tops and lane starts, or hands back (None)."""
    rng = random.Random(3)
    seen = {"one lane": 0, "spills": 0, "back": 0}
    for case in range(600):
        sl: list = []
        _tree(rng, 0, rng.choice([50, 500, 5000]), 0, sl, rng.randint(1, 400))
        if case % 3 == 0:  # partial overlaps
            for _ in range(rng.choice([1, 2, 3, 20, 100])):
                s, d = rng.choice(sl)
                sl.append((s + rng.randint(0, d), rng.randint(0, 100)))
        if case % 7 == 0:  # many equal timestamps
            sl = [(s // 50 * 50, d // 10 * 10) for s, d in sl]
        sl.sort(key=lambda x: (x[0], -x[1]))  # the slice order (ties: file order)
        sids = sorted(rng.sample(range(3 * len(sl) + 5), len(sl)))  # other threads' slices in between
        starts = np.array([s for s, _ in sl], np.int64)
        ends = np.array([s + d for s, d in sl], np.int64)
        f_nsb = sorted(rng.randint(0, 3 * len(sl) + 6) for _ in range(rng.randint(0, 60)))
        want = _build._walk(sids, starts.tolist(), ends.tolist(), f_nsb)
        got = _build._place(np.array(sids, np.int64), starts, ends, np.array(f_nsb, np.int64))
        if got is None:
            seen["back"] += 1
            continue
        seen["spills" if len(want[4]) > 1 else "one lane"] += 1
        assert [np.asarray(x).tolist() for x in got] == [list(x) for x in want], case
    assert min(seen.values()) > 20, seen


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
        assert _build._slice_order(ts, dur, idx).tolist() == want.tolist(), case


def test_key_numbers():
    rng = np.random.default_rng(9)
    for case in range(100):
        n = int(rng.integers(1, 500))
        fid = rng.integers(0, int(rng.choice([5, 2**40, 2**63])), n, dtype=np.uint64)
        if case % 5 == 0:
            fid[::3] = np.uint64(2**64 - 1)
        text = rng.integers(0, int(rng.choice([3, 2**20, 2**40])), n).astype(np.int64)
        got = _build._key_numbers(fid, text).tolist()
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
