"""Where the memory goes (profiling_core.analyses.memory), checked against sources that do not use it: traces built
here event by event with the answer written beside them, plain scans of the JSON of three real third-party traces,
real CPU runs through the runner, and torch's own key_averages() of the same profiler object."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DATA, ROOT, scan_trace
from profiling_core import ExperimentConfig, analyze, findings, open_trace, run_experiment
from profiling_core.analyses import (BEFORE_WINDOW, NO_MEMORY_TEXT, live_at_peak, memory_by_op, memory_churn,
                                     memory_peaks, memory_report, memory_timeline, unfreed)
from profiling_core.present import memory_section

TRACES = DATA / "traces"
BERT = TRACES / "gaunernst_bert-small-uncased__1016001.json.gz"
QWEN = TRACES / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
RESNET = TRACES / "worker0.1623143089861.pt.trace.json.gz"


# --- traces built event by event ------------------------------------------------------------------------------------

def op(name, ts, dur, cat="cpu_op", pid=1, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def step(n, ts, dur, pid=1):
    return op(f"ProfilerStep#{n}", ts, dur, cat="user_annotation", pid=pid)


def mem(ts, nbytes, addr=None, total=None, reserved=None, kind=1, index=0, pid=1, tid=1, **extra):
    args = {"Bytes": nbytes, "Device Type": kind, "Device Id": index, **extra}
    if addr is not None:
        args["Addr"] = addr
    if total is not None:
        args["Total Allocated"] = total
    if reserved is not None:
        args["Total Reserved"] = reserved
    if kind is None:
        del args["Device Type"]
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": pid, "tid": tid, "ts": ts,
            "args": args}


def write(tmp_path, events, name="t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return p


def report_of(path):
    with open_trace(path, engine="sqlite") as s:
        return memory_report(s)


def rows(df, cols):
    return [tuple(None if (isinstance(v, float) and math.isnan(v)) or v is pd.NA else v for v in r)
            for r in df[cols].itertuples(index=False, name=None)]


def test_a_block_allocated_before_the_window_is_reported_by_what_can_be_known(tmp_path):
    """1,000 bytes were allocated when the window opened: a 400-byte block at address 9 (freed in the window, after
    the peak) and 600 bytes never freed in it. The window allocates 100 and 50 bytes and frees the 100."""
    path = write(tmp_path, [
        step(1, 0, 100),
        op("aten::empty", 5, 10), mem(10, 100, addr=1, total=1100, reserved=2048),
        op("aten::mul", 15, 10), mem(20, 50, addr=2, total=1150, reserved=2048),
        op("aten::add", 25, 20), mem(30, -400, addr=9, total=750, reserved=2048), mem(40, -100, addr=1, total=650,
                                                                                     reserved=2048)])
    r = report_of(path)
    pk = r.peaks.iloc[0]
    assert (pk["device"], pk["peak_allocated_bytes"], pk["peak_ns"], pk["op"], pk["step"]) == (
        "cuda:0", 1150, 20_000, "aten::mul", 1.0)
    assert (pk["first_allocated_bytes"], pk["last_allocated_bytes"]) == (1000, 650)
    assert (pk["gap_at_peak_bytes"], pk["gap_max_bytes"]) == (2048 - 1150, 2048 - 650)
    assert rows(r.live_at_peak, ["op", "origin", "bytes", "blocks"]) == [
        (None, BEFORE_WINDOW, 600, None),     # never freed in the window: its blocks cannot be counted
        (None, BEFORE_WINDOW, 400, 1),        # freed after the peak: known by its free
        ("aten::empty", "window", 100, 1),
        ("aten::mul", "window", 50, 1)]
    assert r.live_at_peak["bytes"].sum() == 1150
    assert rows(r.unfreed, ["op", "device", "bytes", "blocks", "steps"]) == [("aten::mul", "cuda:0", 50, 1, [1])]
    assert rows(r.churn, ["step", "alloc_bytes", "freed_bytes", "net_bytes", "start_allocated_bytes",
                          "end_allocated_bytes", "peak_allocated_bytes"]) == [(1, 150, 500, -350, 1000, 650, 1150)]


MiB = 2**20


def plain_levels(path) -> tuple[int, list[int]]:
    """(the level before the first [memory] event, the totals after each), by a plain scan of the JSON."""
    evs = sorted((e for e in scan_trace(path) if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    totals = [e["args"]["Total Allocated"] for e in evs]
    return totals[0] - evs[0]["args"]["Bytes"], totals


def explained(path) -> tuple[str, dict]:
    """(the q1.memory finding's text, {rule: diagnosis})."""
    from profiling_core import diagnose, findings
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return (next(f.text for f in findings(r) if f.id == "q1.memory"),
                {d.rule: d for d in diagnose(s, r).diagnoses})


def test_the_level_the_window_opened_with_is_its_peak_when_no_event_rises_above_it(tmp_path):
    """The window opens with 1 GiB allocated; its first event frees 512 MiB allocated before it, then each step
    allocates and frees 100 MiB: no event's total passes 612 MiB, yet 1 GiB was allocated at the opening (it said
    "peaks at 612.0 MiB ...; 1.0 GiB of it was allocated before the profiler's window")."""
    ev, total = [], 1024 * MiB
    for n in (1, 2):
        t0 = n * 1000
        ev.append(step(n, t0, 900))
        if n == 1:
            total -= 512 * MiB
            ev.append(mem(t0 + 8, -512 * MiB, addr=9, total=total, reserved=2048 * MiB))
        ev.append(op("aten::mm", t0 + 100, 100))
        total += 100 * MiB
        ev.append(mem(t0 + 150, 100 * MiB, addr=1, total=total, reserved=2048 * MiB))
        total -= 100 * MiB
        ev.append(mem(t0 + 350, -100 * MiB, addr=1, total=total, reserved=2048 * MiB))
    path = write(tmp_path, ev)
    opening, totals = plain_levels(path)
    assert (opening, max(totals)) == (1024 * MiB, 612 * MiB)
    r = report_of(path)
    pk = r.peaks.iloc[0]
    assert pk["peak_allocated_bytes"] == max(opening, *totals) == 1024 * MiB
    assert pk["at_opening"] and pk["op"] is None and pd.isna(pk["step"])
    assert r.live_at_peak["bytes"].sum() == 1024 * MiB and set(r.live_at_peak["origin"]) == {BEFORE_WINDOW}
    # a step's peak is never below the level it began with
    assert rows(r.churn, ["step", "start_allocated_bytes", "peak_allocated_bytes"]) == [
        (1, 1024 * MiB, 1024 * MiB), (2, 512 * MiB, 612 * MiB)]
    text, rules = explained(path)
    assert text.startswith("cuda:0 peaks at 1.0 GiB allocated (2.0 GiB reserved by the allocator then), when the "
                           "window opened (before its first event); 1.0 GiB of it was allocated before the "
                           "profiler's window")
    assert "memory_peak" not in rules  # what rose above the steps' level was allocated before the window
    assert memory_section(r).sentences == [
        "cuda:0 peaked at 1.0 GiB allocated (2.0 GiB reserved at most), when the window opened (before its first "
        "event). The window began with 1.0 GiB allocated and ended with 512.0 MiB."]


def test_what_the_peak_holds_from_before_the_window_is_what_is_still_live_then(tmp_path):
    """1 GiB at the opening, 512 MiB of it freed, then a 600 MiB allocation makes the peak (1,112 MiB): 512 MiB from
    before the window is still live there, not the 1 GiB the window opened with."""
    path = write(tmp_path, [step(1, 0, 100), mem(10, -512 * MiB, addr=9, total=512 * MiB),
                            op("aten::mm", 20, 10), mem(25, 600 * MiB, addr=1, total=1112 * MiB),
                            mem(40, -600 * MiB, addr=1, total=512 * MiB)])
    r = report_of(path)
    assert r.peaks.iloc[0]["peak_allocated_bytes"] == max(plain_levels(path)[1]) == 1112 * MiB
    before = r.live_at_peak[r.live_at_peak["origin"] == BEFORE_WINDOW]
    assert before["bytes"].sum() == 512 * MiB
    assert "cuda:0 peaks at 1.1 GiB allocated, in aten::mm (step 1); 512.0 MiB of it was allocated before the " \
           "profiler's window" in explained(path)[0]


def test_allocations_never_freed_across_steps_are_grouped_by_op_with_their_steps(tmp_path):
    ev = []
    for n in range(1, 4):
        t0 = n * 100
        ev += [step(n, t0, 90), op("leaky", t0 + 5, 20), mem(t0 + 10, 64, addr=1000 + n, total=64 * n + 256),
               op("aten::relu", t0 + 30, 20), mem(t0 + 35, 256, addr=7, total=64 * n + 256),
               mem(t0 + 40, -256, addr=7, total=64 * n)]
    r = report_of(write(tmp_path, [mem(50, 0, addr=3, total=0)] + ev))  # 0 bytes: neither allocates nor frees
    assert rows(r.unfreed, ["op", "bytes", "blocks", "steps"]) == [("leaky", 192, 3, [1, 2, 3])]
    assert rows(r.churn, ["step", "alloc_bytes", "freed_bytes", "net_bytes", "end_allocated_bytes"]) == [
        (1, 320, 256, 64, 64), (2, 320, 256, 64, 128), (3, 320, 256, 64, 192)]
    by = r.by_op.set_index("op")
    assert (by.loc["leaky", "self_alloc_bytes"], by.loc["leaky", "self_net_bytes"]) == (192, 192)
    assert (by.loc["aten::relu", "self_alloc_bytes"], by.loc["aten::relu", "self_freed_bytes"],
            by.loc["aten::relu", "self_net_bytes"]) == (768, 768, 0)
    assert by.loc["ProfilerStep*", "total_net_bytes"] == 192  # the three steps merged, as torch's table does


def test_a_step_number_past_two_to_the_53_is_named_exactly_as_the_steps_name_it(tmp_path):
    """Steps numbered 2**53 + 1 and 2**53 + 3 (odd, so a float would round them to their even neighbours): the memory
    timeline, the peak, the unfreed blocks, the churn, the summary (which the command line prints) and question 1 name
    them by the number the trace wrote, as the steps table does."""
    big = 2**53 + 1
    ev = []
    for k, n in enumerate((big, big + 2)):
        t0 = 100 + 100 * k
        ev += [step(n, t0, 90), op("leaky", t0 + 5, 20), mem(t0 + 10, 64 * (k + 1), addr=1000 + k, total=64 + 64 * k)]
    path = write(tmp_path, ev)
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        m = memory_report(s)
    assert r.steps["step"].tolist() == [big, big + 2]
    assert m.timeline["step"].tolist() == [big, big + 2]
    assert int(m.peaks.iloc[0]["step"]) == big + 2
    assert rows(m.unfreed, ["op", "steps"]) == [("leaky", [big, big + 2])]
    assert m.churn["step"].tolist() == [big, big + 2]
    assert m.summary["devices"]["cuda:0"]["step"] == big + 2
    q1 = next(f for f in findings(r) if f.id == "q1.memory")
    assert f"(step {big + 2})" in q1.text and q1.evidence["devices"]["cuda:0"]["step"] == big + 2


def test_several_devices_are_measured_apart_and_named_as_torch_names_them(tmp_path):
    path = write(tmp_path, [
        mem(1, 100, addr=1, total=100, reserved=1024), mem(2, 10, addr=1, total=10, kind=0, index=-1, reserved=0),
        mem(3, 500, addr=1, total=500, index=1, reserved=2048), mem(4, -100, addr=1, total=0, reserved=1024),
        mem(5, 8, addr=2, total=8, kind=13), mem(6, 4, kind=99, index=2), mem(7, 4, kind=None),
        mem(8, 2, kind=1, index=-1)])
    r = report_of(path)
    assert rows(r.peaks, ["device", "peak_allocated_bytes", "peak_reserved_bytes", "basis"]) == [
        ("cpu", 10, None, "since_profiling"),  # the CPU reserves nothing, and counts only what profiling saw
        ("cuda", 2, None, "running_sum"),
        ("cuda:0", 100, 1024.0, "total"), ("cuda:1", 500, 2048.0, "total"), ("mps:0", 8, None, "total"),
        ("device_type_99:2", 4, None, "running_sum"), ("unknown", 4, None, "running_sum")]
    # the same address on two devices is two blocks: the CPU's and cuda:1's stay open
    assert sorted(rows(r.unfreed, ["device", "bytes"])) == [("cpu", 10), ("cuda:1", 500), ("mps:0", 8)]
    assert list(live_at_peak_of(path, "cuda:1")["device"]) == ["cuda:1"]


def test_two_processes_on_the_same_device_are_measured_apart_and_named_with_their_pid(tmp_path):
    """Two ranks merged into one file, both on cuda:0: rank 1 over 100 MiB, rank 2 over 900 MiB, each allocating
    and freeing 50 MiB at the same address per step. Keyed by device alone their totals interleaved: "began with
    100.0 MiB ... ended with 900.0 MiB: memory grew", and one rank's free closed the other's block."""
    ev = []
    for pid, base in ((1, 100 * MiB), (2, 900 * MiB)):
        for n in (1, 2):
            t0 = n * 1000 + pid
            ev += [step(n, t0, 900, pid=pid), op("aten::mm", t0 + 100, 100, pid=pid),
                   mem(t0 + 150, 50 * MiB, addr=9, total=base + 50 * MiB, pid=pid),
                   mem(t0 + 350, -50 * MiB, addr=9, total=base, pid=pid)]
    ev.append(mem(5000, 8 * MiB, addr=3, total=8 * MiB, kind=0, index=-1, pid=1))  # the CPU: one process's
    path = write(tmp_path, ev)
    plain = defaultdict(list)  # (pid, device) -> totals, by a plain scan
    for e in sorted((e for e in scan_trace(path) if e.get("name") == "[memory]"), key=lambda e: e["ts"]):
        plain[e["pid"], e["args"]["Device Type"]].append((e["args"]["Bytes"], e["args"]["Total Allocated"]))
    r = report_of(path)
    assert rows(r.peaks, ["device", "peak_allocated_bytes", "first_allocated_bytes", "last_allocated_bytes"]) == [
        ("cpu", 8 * MiB, 0, 8 * MiB),
        *[(f"cuda:0 (pid {pid})", max(t for _, t in plain[pid, 1]), plain[pid, 1][0][1] - plain[pid, 1][0][0],
           plain[pid, 1][-1][1]) for pid in (1, 2)]]
    assert rows(r.churn[r.churn["device"] == "cuda:0 (pid 2)"], ["step", "start_allocated_bytes",
                                                                  "end_allocated_bytes", "peak_allocated_bytes"]) == [
        (1, 900 * MiB, 900 * MiB, 950 * MiB), (2, 900 * MiB, 900 * MiB, 950 * MiB)]
    assert r.unfreed["device"].tolist() == ["cpu"]  # each rank's free closes its own block
    assert r.live_at_peak.groupby("device")["bytes"].sum().to_dict() == {
        "cpu": 8 * MiB, "cuda:0 (pid 1)": 150 * MiB, "cuda:0 (pid 2)": 950 * MiB}
    said = {t.split(" peaked")[0]: t for t in memory_section(r).sentences}
    assert list(said) == ["cuda:0 (pid 2)", "cpu", "cuda:0 (pid 1)"]  # the highest accelerator first
    for pid, base in ((1, "100.0 MiB"), (2, "900.0 MiB")):
        assert f"The window began with {base} allocated and ended with {base}: what" in said[f"cuda:0 (pid {pid})"]


def live_at_peak_of(path, device):
    with open_trace(path, engine="sqlite") as s:
        return live_at_peak(s, device=device)


def test_a_negative_or_missing_total_is_no_total_and_the_level_is_carried_by_the_bytes(tmp_path):
    path = write(tmp_path, [
        mem(1, 40, addr=1),                       # before the first total: carried back from it
        mem(2, 100, addr=2, total=140),
        mem(3, 50, addr=3),                       # missing
        mem(4, -100, addr=2, total=-5),           # negative
        mem(5, 10, addr=4, total="90"),           # text
        mem(6, 1, addr=5, total=float("1e300")),  # absurd
        mem(7, -40, addr=1, total=61)])
    r = report_of(path)
    tl = r.timeline
    assert tl["allocated_bytes"].isna().tolist() == [True, False, True, True, True, True, False]
    assert tl["level_bytes"].tolist() == [40, 140, 190, 90, 100, 101, 61]
    assert r.peaks.iloc[0][["peak_allocated_bytes", "first_allocated_bytes"]].tolist() == [190, 0]


def test_a_reused_address_opens_a_new_block_and_an_allocation_over_an_open_one_closes_it(tmp_path):
    path = write(tmp_path, [
        op("first", 0, 10), mem(1, 100, addr=1, total=100), mem(2, -100, addr=1, total=0),
        op("second", 10, 10), mem(11, 200, addr=1, total=200),
        op("third", 20, 10), mem(21, 10, addr=5, total=210), mem(22, 20, addr=5, total=230)])
    r = report_of(path)
    assert sorted(rows(r.unfreed, ["op", "bytes", "blocks"])) == [("second", 200, 1), ("third", 20, 1)]
    assert r.timeline["op"].tolist() == ["first", "first", "second", "third", "third"]


def test_events_without_a_number_of_bytes_are_left_out_and_counted(tmp_path):
    path = write(tmp_path, [mem(1, 100, addr=1, total=100), mem(2, "100", addr=2), mem(3, None, addr=3),
                            mem(4, True, addr=4), mem(5, 2 ** 70, addr=5),
                            {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 6}])
    scanned = [e.get("args", {}).get("Bytes") for e in scan_trace(path)]
    numbers = [b for b in scanned if type(b) in (int, float) and abs(b) < 2 ** 44]  # a plain scan: bool is no number
    r = report_of(path)
    # text, null, a JSON true (it counted as a 1-byte allocation), 2^70 and no Bytes at all are left out
    assert r.timeline["bytes"].tolist() == numbers == [100]
    assert r.summary["skipped_events"] == len(scanned) - len(numbers) == 5


def test_a_number_beyond_a_floats_range_is_no_size_and_no_total(tmp_path):
    """JSON integers of 400 digits (an edited or corrupted trace) as Bytes and as totals: the event with such Bytes
    is left out and counted, such a total is none. Reading them as floats raised OverflowError, and the whole
    analysis with it."""
    huge = 10 ** 400
    path = write(tmp_path, [mem(1, 100, addr=1, total=100), mem(2, huge, addr=2, total=200),
                            mem(3, 50, addr=3, total=huge, reserved=huge), mem(4, -100, addr=1, total=50)])
    scanned = [e["args"] for e in scan_trace(path)]
    kept = [a for a in scanned if abs(a["Bytes"]) < 2 ** 44]  # a plain scan
    r = report_of(path)
    assert r.timeline["bytes"].tolist() == [a["Bytes"] for a in kept] == [100, 50, -100]
    assert r.summary["skipped_events"] == len(scanned) - len(kept) == 1
    assert r.timeline["allocated_bytes"].isna().tolist() == [False, True, False]
    assert r.timeline["reserved_bytes"].isna().all()


def test_without_totals_the_level_is_the_running_sum_from_the_window_start(tmp_path):
    path = write(tmp_path, [step(1, 0, 50), mem(1, 30), mem(2, 70), mem(3, -30), step(2, 50, 50), mem(51, -70),
                            mem(52, 5)])
    r = report_of(path)
    assert r.timeline["level_bytes"].tolist() == [30, 100, 70, 0, 5]
    pk = r.peaks.iloc[0]
    assert (pk["basis"], pk["peak_allocated_bytes"], pk["first_allocated_bytes"], pk["has_addresses"]) == (
        "running_sum", 100, 0, False)
    assert r.live_at_peak.empty and r.unfreed.empty  # no addresses: no block can be followed
    assert rows(r.churn, ["step", "net_bytes", "start_allocated_bytes", "end_allocated_bytes"]) == [
        (1, 70, 0, 70), (2, -65, 70, 5)]


def test_an_op_counts_its_own_events_and_the_events_nested_under_it(tmp_path):
    path = write(tmp_path, [
        mem(1, 7, addr=99, total=7),                           # top level: torch's [memory] row
        op("outer", 10, 100), mem(12, 100, addr=1, total=107),
        op("aten::empty", 20, 10), mem(25, 64, addr=2, total=171),
        op("outer", 40, 30), mem(45, 16, addr=3, total=187),   # outer inside outer: counts for both
        mem(90, -100, addr=1, total=87)])
    with open_trace(path, engine="sqlite") as s:
        by = memory_by_op(s)
    got = {r[0]: r[1:] for r in rows(by, ["op", "self_alloc_bytes", "self_freed_bytes", "self_net_bytes",
                                          "total_net_bytes"])}
    assert got == {"outer": (116, 100, 16, 80 + 16), "aten::empty": (64, 0, 64, 64), None: (7, 0, 7, 7)}
    with open_trace(path, engine="sqlite") as s:
        tl, pk = memory_timeline(s), memory_peaks(s)
    assert tl["op"].tolist() == [None, "outer", "aten::empty", "outer", "outer"]
    assert pk.iloc[0]["call_chain"] == "outer > outer" and pk.iloc[0]["op"] == "outer"


def test_a_trace_without_memory_events_says_so_and_how_to_record_them():
    for path in (TRACES / "trace.json.gz", TRACES / "64_bf16_cold_eager.json",
                 TRACES / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"):
        assert not any(e.get("name") == "[memory]" for e in scan_trace(path))  # a plain scan: none to find
        with open_trace(path, engine="sqlite") as s:
            r = analyze(s)
        assert not r.memory.has_events and r.summary["memory"]["devices"] == {}
        assert r.summary["memory"]["note"] == NO_MEMORY_TEXT
        for df in (r.memory.timeline, r.memory.peaks, r.memory.live_at_peak, r.memory.by_op, r.memory.unfreed,
                   r.memory.churn):
            assert df.empty
        assert list(r.memory.peaks.columns[:9]) == ["device", "peak_allocated_bytes", "peak_reserved_bytes",
                                                    "peak_ns", "step", "op", "call_chain", "first_allocated_bytes",
                                                    "last_allocated_bytes"]
    assert "profile_memory=True" in NO_MEMORY_TEXT and "--profile-memory" in NO_MEMORY_TEXT


# --- real third-party traces, against a plain scan of their JSON ----------------------------------------------------

def plain_memory(events) -> dict:
    """Per device (named by hand: type 0 "cpu", type 1 "cuda:<id>"): the events in time order as (ts, bytes, total),
    by a plain scan of the JSON's events."""
    out = defaultdict(list)
    for e in sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: float(e["ts"])):
        a = e["args"]
        out["cpu" if a["Device Type"] == 0 else f"cuda:{a['Device Id']}"].append(
            (float(e["ts"]), a["Bytes"], a.get("Total Allocated")))
    return out


def recorded_ops(path) -> dict | None:
    """{slice id: the name of its parent, None at the top level} of every [memory] slice, from the tables a real
    trace_processor printed for this trace (tests/data/tp_tables), None when there are none."""
    import csv
    import gzip
    folder = DATA / "tp_tables" / path.name.split(".json")[0]
    if not folder.is_dir():
        return None
    with gzip.open(folder / "slice.csv.gz", "rt", newline="") as f:
        sl = list(csv.DictReader(f))
    name = {r["id"]: r["name"] for r in sl}
    return {int(r["id"]): None if r["parent_id"] == "[NULL]" else name[r["parent_id"]] for r in sl
            if r["name"] == "[memory]"}


@pytest.mark.parametrize("path", [BERT, QWEN, RESNET], ids=["bert", "qwen", "resnet"])
def test_real_traces_agree_with_a_plain_scan(path):
    events = scan_trace(path)
    plain = plain_memory(events)
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
    m = r.memory
    assert len(m.timeline) == sum(len(v) for v in plain.values()) == {BERT: 236, QWEN: 2450, RESNET: 12838}[path]
    assert sorted(m.summary["devices"]) == sorted(plain)
    for dev, evs in plain.items():
        pk = m.peaks.set_index("device").loc[dev]
        b = [x[1] for x in evs]
        totals = [x[2] for x in evs]
        assert pk["alloc_bytes"] == sum(x for x in b if x > 0) and pk["freed_bytes"] == -sum(x for x in b if x < 0)
        if totals[0] is None:  # 2021: no totals, the running sum from 0
            run = np.cumsum(b)
            assert pk["basis"] == "running_sum" and pk["peak_allocated_bytes"] == run.max()
            assert pk["last_allocated_bytes"] == run[-1]
        else:
            # the CPU's totals count only what profiling saw (the module's rule); a GPU's are its allocator's
            assert pk["basis"] == ("since_profiling" if dev == "cpu" else "total")
            assert pk["peak_allocated_bytes"] == max(totals)
            assert pk["first_allocated_bytes"] == totals[0] - b[0] and pk["last_allocated_bytes"] == totals[-1]
            # what was live at the peak adds up to it
            assert m.live_at_peak.loc[m.live_at_peak["device"] == dev, "bytes"].sum() == max(totals)
        # each event's op is its parent in trace_processor's own tables; the ops' own figures add up to them
        tl = m.timeline[m.timeline["device"] == dev]
        by = m.by_op[m.by_op["device"] == dev]
        assert by["self_alloc_bytes"].sum() == pk["alloc_bytes"] and by["self_freed_bytes"].sum() == pk["freed_bytes"]
        ops = recorded_ops(path)
        if ops is None:  # 2021: the events have an integer tid, the ops a string one: no event is inside an op
            assert tl["op"].isna().all() and not any(isinstance(e.get("tid"), int) for e in events
                                                     if e.get("ph") == "X" and e.get("cat") == "Operator")
            continue
        assert tl["op"].tolist() == [ops[i] for i in tl["slice_id"]]
        hand = defaultdict(int)
        for i, nb in zip(tl["slice_id"], [x[1] for x in evs]):
            name = ops[i]
            hand[name if name is None or not name.startswith("ProfilerStep#") else "ProfilerStep*"] += nb
        assert {k: v for k, v in zip(by["op"], by["self_net_bytes"]) if k in hand} == dict(hand)
        assert (by.loc[~by["op"].isin(list(hand)), "self_events"] == 0).all()


def test_the_qwen_trace_s_weights_are_live_from_before_the_window():
    """Qwen 0.5B in bf16 holds ~0.98 GB of weights (464M parameters x 2 bytes), allocated before the profiler
    started: they show as the 'before the window' share of the peak."""
    r = report_of(QWEN)
    pk = r.peaks.set_index("device").loc["cuda:0"]
    before = r.live_at_peak[(r.live_at_peak["device"] == "cuda:0") & (r.live_at_peak["origin"] == BEFORE_WINDOW)]
    assert pk["first_allocated_bytes"] == 984_742_400 and before["bytes"].sum() == 984_742_400
    assert pk["peak_reserved_bytes"] == 2_629_828_608 and pk["gap_at_peak_bytes"] == 2_629_828_608 - 2_088_508_416


# --- properties -----------------------------------------------------------------------------------------------------

_event = st.tuples(st.integers(0, 3), st.integers(-300, 300), st.sampled_from([0, 1]), st.booleans())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_event, min_size=1, max_size=40))
def test_any_sequence_of_events_keeps_the_figures_consistent(tmp_path_factory, seq):
    """Whatever the events (frees of unknown blocks, reused and open addresses, two devices, totals on some events
    only), the level equals the total wherever an event has one, the peak is the highest level (the one the window
    opened with included), each op's own
    figures add up to the device's, and what was live at a peak is positive."""
    evs, level = [], defaultdict(int)
    for k, (addr, nb, kind, with_total) in enumerate(seq):
        level[kind] += nb
        evs.append(mem(10 + k, nb, addr=addr, total=1000 + level[kind] if with_total else None, kind=kind))
    r = report_of(write(tmp_path_factory.mktemp("m"), [op("outer", 0, 1000)] + evs))
    tl = r.timeline
    has = tl["allocated_bytes"].notna()
    assert (tl.loc[has, "level_bytes"] == tl.loc[has, "allocated_bytes"]).all()
    for pk in r.peaks.to_dict(orient="records"):
        d = tl[tl["device"] == pk["device"]]
        opening = d["level_bytes"].iloc[0] - d["bytes"].iloc[0]
        assert pk["peak_allocated_bytes"] == max(opening, d["level_bytes"].max())
        by = r.by_op[r.by_op["device"] == pk["device"]].set_index("op")
        assert by["self_alloc_bytes"].sum() == pk["alloc_bytes"] and by["self_freed_bytes"].sum() == pk["freed_bytes"]
        assert by.loc["outer", "total_net_bytes"] == d["bytes"].sum()
    assert (r.live_at_peak["bytes"] > 0).all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["alloc", "free", "free_before"]), st.integers(1, 500)), min_size=1,
                max_size=40), st.integers(0, 5))
def test_what_was_live_at_the_peak_adds_up_to_it(tmp_path_factory, program, n_before):
    """A consistent program (allocations at fresh addresses, frees of open blocks or of blocks from before the
    window, totals on every event): what was live at the peak adds up to the peak, and the unfreed blocks to what
    the window left behind."""
    before = {10_000 + k: 100 + k for k in range(n_before)}  # blocks allocated before the window
    total = sum(before.values()) + 50  # and 50 bytes of blocks the window never frees
    open_, evs, fresh = {}, [], 1
    for k, (what, nb) in enumerate(program):
        if what == "alloc" or (what == "free" and not open_) or (what == "free_before" and not before):
            open_[fresh] = nb
            total += nb
            evs.append(mem(10 + k, nb, addr=fresh, total=total))
            fresh += 1
        elif what == "free":
            a, b = open_.popitem()
            total -= b
            evs.append(mem(10 + k, -b, addr=a, total=total))
        else:
            a, b = before.popitem()
            total -= b
            evs.append(mem(10 + k, -b, addr=a, total=total))
    r = report_of(write(tmp_path_factory.mktemp("m"), evs))
    pk = r.peaks.iloc[0]
    assert r.live_at_peak["bytes"].sum() == pk["peak_allocated_bytes"]
    assert r.unfreed["bytes"].sum() == sum(open_.values())


# --- real runs --------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_cpu_run_with_profile_memory_agrees_with_a_hand_sum_of_its_events(store):
    cfg = ExperimentConfig.for_workload("mlp", {"train": True, "batch": 8, "d": 64}, device="cpu", dtype="fp32",
                                        profile_memory=True, warmup=1, wait=0, warmup_steps=0, active=3)
    run = run_experiment(cfg, store=store)
    assert run.meta.get("peak_device_memory_bytes") is None  # a CPU run: torch has no such figure
    events = scan_trace(run.trace_path)
    mems = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"),
                   key=lambda e: e["ts"])
    assert mems and len(steps) == 3
    with open_trace(run.trace_path, engine="sqlite") as s:
        r = analyze(s, config=run.config)
    m = r.memory
    assert len(m.timeline) == len(mems) and set(m.timeline["device"]) == {"cpu"}
    pk = m.peaks.iloc[0]
    assert pk["peak_allocated_bytes"] == max(e["args"]["Total Allocated"] for e in mems)
    assert pk["last_allocated_bytes"] == mems[-1]["args"]["Total Allocated"]
    for row in m.churn.itertuples():
        st_ = next(e for e in steps if e["name"] == f"ProfilerStep#{row.step}")
        inside = [e["args"]["Bytes"] for e in mems if st_["ts"] <= e["ts"] < st_["ts"] + st_["dur"]]
        assert (row.alloc_bytes, row.freed_bytes) == (sum(b for b in inside if b > 0), -sum(b for b in inside if b < 0))
    assert len(m.churn) == 3


_KEY_AVERAGES = r"""
import json, sys, torch
from torch.profiler import profile, ProfilerActivity, record_function, schedule
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 64), torch.randn(32, 8)
keep = []
def ready(prof):
    prof.export_chrome_trace(sys.argv[1])
    json.dump({e.key: [e.self_cpu_memory_usage, e.cpu_memory_usage, e.self_device_memory_usage,
                       e.device_memory_usage] for e in prof.key_averages()}, open(sys.argv[2], "w"))
with profile(activities=[ProfilerActivity.CPU], profile_memory=True, on_trace_ready=ready,
             schedule=schedule(wait=0, warmup=1, active=3, repeat=1)) as prof:
    for i in range(4):
        with record_function("train_step"):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            keep.append(torch.empty(256))
        prof.step()
"""


@pytest.mark.slow
def test_per_op_figures_are_torch_s_own_key_averages_memory_columns(tmp_path):
    trace, table = tmp_path / "trace.json", tmp_path / "ka.json"
    subprocess.run([sys.executable, "-c", _KEY_AVERAGES, str(trace), str(table)], check=True, timeout=300,
                   capture_output=True, cwd=ROOT)
    ka = json.loads(table.read_text())
    with open_trace(trace, engine="sqlite") as s:
        by = memory_by_op(s)
        ch = memory_churn(s)
    ours = {("[memory]" if r.op is None else r.op): (r.self_net_bytes, r.total_net_bytes)
            for r in by[by["device"] == "cpu"].itertuples()}
    theirs = {k: (v[0], v[1]) for k, v in ka.items() if v[0] or v[1]}
    assert theirs and len(theirs) >= 5, theirs
    assert {k: v for k, v in ours.items() if v != (0, 0)} == theirs
    assert all(v[2] == v[3] == 0 for v in ka.values())  # a CPU run: no device memory, and none here
    assert set(by["device"]) == {"cpu"}
    # the 256-float tensor kept every step: 1,024 bytes each step left behind, made by aten::empty
    with open_trace(trace, engine="sqlite") as s:
        u = unfreed(s)
    assert ch["step"].tolist() == [1, 2, 3] and (ch["net_bytes"] >= 1024).all()
    kept = u[u["op"] == "aten::empty"]
    assert (int(kept["bytes"].sum()), int(kept["blocks"].sum()), kept["steps"].iloc[0]) == (3 * 1024, 3, [1, 2, 3])


def test_memory_events_are_never_taken_for_launch_calls():
    """The 2021 trace's flows start on the memory events' lane (integer tid beside the calls' string tid), so
    trace_processor binds each to a [memory] event: the kernels are paired with their calls by correlation instead,
    as a plain scan pairs them."""
    events = scan_trace(RESNET)
    calls = {e["args"]["correlation"]: e["name"] for e in events
             if e.get("cat") == "Runtime" and "correlation" in e.get("args", {})}
    want = {calls[e["args"]["correlation"]] for e in events if e.get("cat") in ("Kernel", "Memcpy", "Memset")
            and e.get("args", {}).get("correlation") in calls}
    with open_trace(RESNET, engine="sqlite") as s:
        r = analyze(s)
    assert set(r.summary["launch_apis"]) == want == {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync"}
    lat = r.launch_latency
    assert len(lat) == sum(1 for e in events if e.get("cat") in ("Kernel", "Memcpy", "Memset")
                           and e.get("args", {}).get("correlation") in calls)


# --- real GPU runs (an H200, torch 2.11; tests/data/h200_memory, made with profile_memory=True) ----------------------

H200_MEMORY = DATA / "h200_memory"


@pytest.mark.parametrize("name", ["eager", "train"])
def test_the_trace_s_peak_is_the_run_s_max_memory_allocated(name):
    """matmul_add 4096 bf16 and an MLP training step (fp32, AdamW), each after 3 warm-up calls: the profiled steps
    repeat the warm-up's allocations, so the window holds the process's peak (PEAK_MATCH_TOLERANCE), and never more
    than it (the same allocator's counter)."""
    from profiling_core.analyses import PEAK_MATCH_TOLERANCE
    meta = json.loads((H200_MEMORY / f"{name}.meta.json").read_text())
    config = ExperimentConfig.from_dict(meta["config"])
    torch_peak = meta["peak_device_memory_bytes"]
    plain = max(e["args"]["Total Allocated"] for e in scan_trace(H200_MEMORY / f"{name}.json")
                if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1)
    with open_trace(H200_MEMORY / f"{name}.json", engine="sqlite") as s:
        r = analyze(s, config=config)
    got = r.summary["memory"]["devices"]["cuda:0"]["peak_allocated_bytes"]
    assert got == plain <= torch_peak and got >= (1 - PEAK_MATCH_TOLERANCE) * torch_peak
    assert {"eager": 201_326_592, "train": 745_742_336}[name] == got  # equal to the byte, here


def test_a_trace_that_says_it_recorded_memory_is_not_told_to_record_it():
    """torch writes ``"profile_memory": 1`` at the top of a trace recorded with it; without the run's config (an
    imported trace) the reading is the same as with it: memory was recorded and the steps made no event, so the note
    does not ask for profile_memory=True, and the profiler's overhead is said."""
    from profiling_core import diagnose
    from profiling_core.analyses import NO_MEMORY_TEXT, NOTHING_RECORDED_TEXT
    from profiling_core.explain.questions import findings
    doc = json.loads((H200_MEMORY / "ro.json").read_text())
    assert doc["profile_memory"] == 1 and not any(e.get("name") == "[memory]" for e in doc["traceEvents"])
    with open_trace(H200_MEMORY / "ro.json", engine="sqlite") as s:
        r = analyze(s)
        d = {x.rule: x for x in diagnose(s, r).diagnoses}
    assert r.summary["memory"]["note"] == NOTHING_RECORDED_TEXT != NO_MEMORY_TEXT
    assert {f.id: f for f in findings(r)}["q1.memory"].text == NOTHING_RECORDED_TEXT
    assert d["profiler_overhead"].evidence["options"] == ["profile_memory"]
    assert d["cudagraph_pools"].evidence["memory_events"] == 0


def test_a_cuda_graph_run_that_recorded_memory_and_saw_no_event_says_why(tmp_path):
    """mode='reduce-overhead': every profiled step replays its CUDA graph, which allocates from the graph's pool:
    profile_memory was on, and the trace has no [memory] event."""
    from profiling_core.analyses import NOTHING_RECORDED_TEXT
    from profiling_core import diagnose
    from profiling_core.explain.questions import findings
    meta = json.loads((H200_MEMORY / "ro.meta.json").read_text())
    config = ExperimentConfig.from_dict(meta["config"])
    events = scan_trace(H200_MEMORY / "ro.json")
    assert meta["config"]["profile_memory"] and not any(e.get("name") == "[memory]" for e in events)
    graphs = sum(1 for e in events if e.get("name") == "cudaGraphLaunch")
    with open_trace(H200_MEMORY / "ro.json", engine="sqlite") as s:
        r = analyze(s, config=config)
        d = {x.rule: x for x in diagnose(s, r, config, None,
                                         process_peak_bytes=meta["peak_device_memory_bytes"]).diagnoses}
    assert r.summary["memory"]["note"] == NOTHING_RECORDED_TEXT
    assert {f.id: f for f in findings(r, config)}["q1.memory"].text == NOTHING_RECORDED_TEXT
    x = d["cudagraph_pools"]
    assert x.evidence["graph_launches"] == graphs == 3 and x.evidence["memory_events"] == 0
    assert "the process's own peak was 46.0 MiB" in x.text  # 48,235,520 B
    # without the config and without the trace's own "profile_memory": 1, nothing says memory was recorded
    doc = json.loads((H200_MEMORY / "ro.json").read_text())
    del doc["profile_memory"]
    (tmp_path / "ro.json").write_text(json.dumps(doc))
    with open_trace(tmp_path / "ro.json", engine="sqlite") as s:
        assert analyze(s).summary["memory"]["note"] == NO_MEMORY_TEXT


def _h200(name):
    from profiling_core import diagnose
    meta = json.loads((H200_MEMORY / f"{name}.meta.json").read_text())
    config = ExperimentConfig.from_dict(meta["config"])
    with open_trace(H200_MEMORY / f"{name}.json", engine="sqlite") as s:
        r = analyze(s, config=config)
        d = diagnose(s, r, config, None, process_peak_bytes=meta["peak_device_memory_bytes"])
    return scan_trace(H200_MEMORY / f"{name}.json"), r, {x.rule: x for x in d.diagnoses}


def test_a_training_step_under_reduce_overhead_holds_graph_pools_not_fragmentation():
    """An MLP training step (Adam fused, bf16 autocast) under mode='reduce-overhead': the forward's graph is launched
    from the main thread, the backward's from the autograd thread; the allocator reserves about twice what the
    window's tensors use, and the process peaked below the reserve: the gap is the graphs' private pools."""
    events, r, d = _h200("train_ro")
    mem = [e["args"] for e in events if e.get("name") == "[memory]"]
    peak, reserved = max(a["Total Allocated"] for a in mem), max(a["Total Reserved"] for a in mem)
    launches = [e for e in events if e.get("name") == "cudaGraphLaunch"]
    assert len({e["tid"] for e in launches}) == 2 and reserved > 1.9 * peak
    assert d["cudagraph_pools"].evidence["graph_launches"] == len(launches) == 6
    assert d["cudagraph_pools"].evidence["peak_allocated_bytes"] == peak
    assert "memory_fragmentation" not in d


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune", None])
def test_the_graph_pools_finding_names_the_mode_the_run_asked_for(mode):
    """Both torch.compile modes that replay CUDA graphs are named as the run's; without a config none is."""
    from profiling_core import diagnose
    meta = json.loads((H200_MEMORY / "train_ro.meta.json").read_text())
    config = None if mode is None else ExperimentConfig.from_dict({**meta["config"], "compile": mode})
    with open_trace(H200_MEMORY / "train_ro.json", engine="sqlite") as s:
        x = {d.rule: d for d in diagnose(s, config=config).diagnoses}["cudagraph_pools"]
    assert x.text.startswith("This run replays CUDA graphs" + (f" (mode='{mode}')" if mode else "") + ": 6 ")


def test_a_cache_that_keeps_a_tensor_per_step_is_memory_growth_by_a_plain_count():
    """scripts/memory_cases/temporaries_and_cache.py: each call keeps one 2048 x 2048 bf16 tensor (8 MiB)."""
    events, r, d = _h200("script_cache")
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X"
                   and str(e.get("name")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation")
    mem = [e for e in events if e.get("name") == "[memory]"]
    net = [sum(e["args"]["Bytes"] for e in mem if a <= e["ts"] <= b) for a, b in steps]
    assert net == [8 * 2**20] * 3
    x = d["memory_growth"]
    assert "about 8.0 MiB more allocated" in x.text
    live = {}
    for e in sorted(mem, key=lambda e: e["ts"]):
        if e["args"]["Bytes"] > 0:
            live[e["args"]["Addr"]] = e["args"]["Bytes"]
        else:
            live.pop(e["args"]["Addr"], None)
    assert r.memory.unfreed["bytes"].sum() == sum(live.values()) == 3 * 8 * 2**20


def _table_rows(path) -> dict:
    """torch's printed table (table.txt): {name: (CUDA Mem, Self CUDA Mem) in bytes} for names that have one row."""
    import collections
    import re
    lines = Path(path).read_text().splitlines()
    names = re.split(r"\s{2,}", lines[1].strip())
    unit = {"B": 1, "KB": 2**10, "Kb": 2**10, "MB": 2**20, "Mb": 2**20, "GB": 2**30, "Gb": 2**30}

    def size(text):
        value, u = text.split()
        return float(value) * unit[u]
    rows = []
    for line in lines[3:]:
        if line.startswith("-") or not line.strip():
            break
        f = re.split(r"\s{2,}", line.strip())
        if len(f) == len(names) and "..." not in f[0]:
            rows.append((f[0], size(f[names.index("CUDA Mem")]), size(f[names.index("Self CUDA Mem")])))
    count = collections.Counter(r[0] for r in rows)
    return {n: (t, s) for n, t, s in rows if count[n] == 1}


def test_per_op_gpu_memory_is_the_profiler_tables_but_where_torch_counts_by_time_or_merges_a_redispatch():
    """An MLP training step on the H200 (Adam fused, bf16 autocast): torch's own table against memory_by_op. Every
    row agrees to the printed precision except where torch's rule differs (memory.py's docstring): a total by
    time window on any thread (the model's range and the step hold the autograd thread's backward), and
    aten::mse_loss, whose redispatch to itself torch's table merges into one row."""
    path = H200_MEMORY / "train_fused.json.gz"
    table = _table_rows(H200_MEMORY / "train_fused.table.txt")
    events = scan_trace(path)
    mem = [e for e in events if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]

    def window(name, any_thread):  # a plain scan: the events in each slice's time window, summed over its slices
        return sum(m["args"]["Bytes"] for e in ops if (e["name"] == name or (name == "ProfilerStep*" and
                   e["name"].startswith("ProfilerStep#"))) for m in mem
                   if e["ts"] <= m["ts"] <= e["ts"] + e["dur"] and (any_thread or m["tid"] == e["tid"]))
    with open_trace(path, engine="sqlite") as s:
        by_op = memory_by_op(s)
    by_op = by_op[by_op["device"] == "cuda:0"].set_index("op")
    differ = []
    for name, (total, self_) in table.items():
        got = by_op.loc[name] if name in by_op.index else None
        got_total = float(got["total_net_bytes"]) if got is not None else 0.0
        got_self = float(got["self_net_bytes"]) if got is not None else 0.0
        if abs(got_total - total) > 0.006 * max(2**20, abs(total)) or \
                abs(got_self - self_) > 0.006 * max(2**20, abs(self_)):
            differ.append(name)
    assert len(table) >= 50 and sorted(differ) == ["ProfilerStep*", "aten::mse_loss", "mlp"]
    for name in ("ProfilerStep*", "mlp"):  # torch: the window on any thread; here: what nests under it
        assert table[name][0] == pytest.approx(window(name, True), abs=0.01 * 2**20)
        assert float(by_op.loc[name, "total_net_bytes"]) == window(name, False)
    assert float(by_op.loc["aten::mse_loss", "total_net_bytes"]) == 2 * table["aten::mse_loss"][0]


def test_the_ops_live_at_the_peak_past_the_listed_ones_are_counted(tmp_path):
    """Five ops each leave one block open at the peak (by hand: 500 + 400 + 300 + 200 + 100 bytes); the text names
    the largest three and counts the other two and their bytes, so that the named ones and the rest add up to what
    the window allocated and held at the peak."""
    from profiling_core import findings
    ev, total = [step(1, 0, 1000)], 0
    for k, nbytes in enumerate([500, 400, 300, 200, 100]):
        total += nbytes
        ev += [op(f"op{k}", 10 + 100 * k, 50), mem(20 + 100 * k, nbytes, addr=100 + k, total=total)]
    with open_trace(write(tmp_path, ev), engine="sqlite") as s:
        [q1] = [f for f in findings(analyze(s)) if f.id == "q1.memory"]
    assert "live at the peak: op0 500 B in 1 block, op1 400 B in 1 block, op2 300 B in 1 block, and 300 B from 2 " \
           "more ops" in q1.text


def test_analysing_a_trace_again_holds_no_more_memory_than_the_first_time():
    """Each analysis's working state lives only as long as its results: analysing the same trace five times leaves
    the process holding what it held after the first (a cache of the memory events keyed by that state once kept
    every analysis's launch pairs and steps alive for the process's life: ~5 MiB a call on a 33 MiB trace)."""
    import gc
    import tracemalloc

    from profiling_core import diagnose
    session = open_trace(DATA / "h200_memory" / "script_cache.json", engine="sqlite")
    try:
        analyze(session)  # (imports, regex caches and other one-time state: paid before counting)
        tracemalloc.start()
        held = []
        try:
            for _ in range(5):
                r = analyze(session)
                d = diagnose(session, r)
                del r, d
                gc.collect()
                held.append(tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
    finally:
        session.close()
    assert held[-1] - held[0] < 64 * 1024, [h - held[0] for h in held]


def test_sizes_near_an_int64_s_range_are_no_sizes(tmp_path):
    """Seventeen allocations of 2⁵⁹ bytes, no totals: their running sum wrapped around an int64 (17 × 2⁵⁹ > 2⁶³), and
    the device's level went negative (question 1 said the window left "-7,516,201,984.0 GiB" never freed). A size of
    16 TiB or more is no device's: such events are left out and counted."""
    path = write(tmp_path, [mem(k, 2 ** 59, addr=k) for k in range(1, 18)] + [mem(20, 100, addr=20)])
    r = report_of(path)
    assert r.timeline["bytes"].tolist() == [100] and r.summary["skipped_events"] == 17
    assert (r.peaks["peak_allocated_bytes"] >= 0).all()


def test_each_rank_s_events_take_the_step_of_their_own_process(tmp_path):
    """Two ranks merged into one file: rank 0's step 1 spans 0–200 µs, rank 1's 7–50 µs. Rank 0's event at 100 µs
    read as outside every step (the latest window to start, rank 1's, had ended), and an event of rank 1 between
    its steps took rank 0's step by time. Each event takes the step of its own process whose window holds it, by a
    hand count of the windows below; an event of a third process without steps takes whichever window holds it."""
    evs = [step(1, 0, 200, pid=1), step(2, 210, 100, pid=1), step(1, 7, 43, pid=2), step(2, 120, 100, pid=2),
           mem(100, 1024, addr=1, total=1024, pid=1),     # rank 0, inside its step 1
           mem(60, 2048, addr=2, total=2048, pid=2),      # rank 1, between its steps (inside rank 0's step 1)
           mem(150, 4096, addr=3, total=6144, pid=2),     # rank 1, inside its step 2 (and rank 0's step 1)
           mem(250, -1024, addr=1, total=0, pid=1),       # rank 0, inside its step 2 (and rank 1's step 2)
           mem(30, 512, addr=4, total=512, pid=3)]        # a process without steps, inside both ranks' step 1
    r = report_of(write(tmp_path, evs))
    got = {(int(a), int(b)): (None if s is pd.NA else int(s))
           for a, b, s in zip(r.timeline["start_ns"], r.timeline["bytes"], r.timeline["step"])}
    assert got == {(100_000, 1024): 1, (60_000, 2048): None, (150_000, 4096): 2, (250_000, -1024): 2,
                   (30_000, 512): 1}
