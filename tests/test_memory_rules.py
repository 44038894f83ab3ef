"""The memory rules (profiling_core/explain/diagnosis/rules/memory_*.py, cudagraph_pools.py) on traces built to break
them, each with the verdict written beside it, on a GPU's and on a CPU's memory, with and without a run's config."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import verdict_traces as vt
from profiling_core import analyze, diagnose, findings, open_trace
from profiling_core.explain.diagnosis.rules.memory_fragmentation import MIN_GAP_BYTES, RESERVED_OVER_ALLOCATED_AT
from profiling_core.explain.diagnosis.rules.memory_peak import MIN_TRANSIENT_BYTES, PEAK_OVER_STEADY_AT
from profiling_core.units import human_bytes

MiB, GiB = vt.MiB, vt.GiB


def diagnosis(path, config=None, **kw):
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return {d.rule: d for d in diagnose(s, r, config, None, **kw).diagnoses}, {f.id: f for f in findings(r)}


def test_a_temporary_far_above_what_the_steps_keep_is_named_with_the_op_at_the_peak(tmp_path):
    device = "cuda:0"
    d, f = diagnosis(vt.memory_steps(tmp_path / "t.json", kept=100 * MiB, temp=GiB, kind=1))
    x = d["memory_peak"]
    assert x.evidence["device"] == device and x.evidence["excess_bytes"] == GiB
    assert x.evidence["steady_bytes"] == 100 * MiB and x.evidence["op"] == "aten::mul"
    assert f"{device} peaks at 1.1 GiB allocated in aten::mul (step 1), 1.0 GiB above the 100.0 MiB" in x.text
    assert "aten::mul 1.0 GiB in 1 block" in x.text and "torch.utils.checkpoint" in x.fix
    assert "q1.memory" in f and f"{device} peaks at 1.1 GiB allocated" in f["q1.memory"].text


@pytest.mark.parametrize("kept,counted", [
    (0, "counted from when the profiler began recording, in aten::mul (step 1): torch counts a CPU's memory only "
        "from when the profiler began recording it"),
    (100 * MiB, "counted from an earlier recording in this process, in aten::mul (step 1): torch counts a CPU's "
                "memory only while a profiler records it, and carries the count from one recording to the next"),
], ids=["as torch writes it", "totals from before"])
def test_on_the_cpu_the_peak_is_counted_from_the_window_and_not_called_far_above_the_steps(tmp_path, kept, counted):
    """torch counts a CPU's memory only from when the profiler began recording it: a real CPU run's totals start at
    0 with its inputs already allocated (tests/test_app_memory.py runs one), and a later recording in the same
    process opens with what the earlier ones left (the next test). Either way a CPU's level is counted from the
    window's start, so the steps' steady state is unknown: the 1 GiB temporary is said as such, and no rule claims
    it is far above what the steps keep (it said "1.0 GiB above the 0 B its steps keep")."""
    d, f = diagnosis(vt.memory_steps(tmp_path / "t.json", kept=kept, temp=GiB, kind=0))
    assert "memory_peak" not in d
    text = f["q1.memory"].text
    assert text.startswith(f"cpu peaks at {human_bytes(kept + GiB)} allocated {counted}")
    assert "what the process held, and so its own peak, the trace cannot know" in text


@pytest.mark.parametrize("name,opening", [("memory_second_session", 4_259_840), ("memory_second_cycle", 3_279_360)])
def test_a_later_recording_in_one_process_says_its_cpu_level_counts_from_an_earlier_one(name, opening):
    """Real CPU traces (tests/data/cpu/README.md): the second of two profiler sessions in one process, and a
    schedule's second cycle. torch's CPU reporter carried its count over: the first event's Total Allocated less its
    Bytes (a scan) is the earlier recording's last total, not 0. The texts said the peak (4.1 MiB in the session,
    at the window's opening, where its recording's net is -4.0 MiB) and the growth ("from 4.3 MiB left by step 5")
    were "counted from when the profiler began recording", "what the recording allocated less what it freed"."""
    import gzip
    from pathlib import Path

    from profiling_core.present import memory_section
    path = Path(__file__).parent / "data" / "cpu" / f"{name}.json.gz"
    mem = sorted((e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
                  if e["name"] == "[memory]"), key=lambda e: e["ts"])
    assert mem[0]["args"]["Total Allocated"] - mem[0]["args"]["Bytes"] == opening
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        d = {x.rule: x for x in diagnose(s, r, None, None).diagnoses}
    label = "counted from an earlier recording in this process"
    texts = [{f.id: f for f in findings(r)}["q1.memory"].text, *memory_section(r.memory, r.steps).sentences]
    if name == "memory_second_cycle":  # each step keeps 1 MiB (the recording's script)
        texts.append(d["memory_growth"].text)
    for text in texts:
        assert label in text and "counted from when the profiler began recording" not in text
        assert "what the recording allocated less what it freed" not in text


def test_without_totals_the_peak_is_counted_from_the_window_and_not_called_far_above_the_steps(tmp_path):
    """A 2021 trace (tests/data/traces/worker0...) has no totals: the level is a running sum from 0, and the rule
    said "2.6 GiB above the 0 B its steps keep" of it."""
    path = vt.memory_steps(tmp_path / "t.json", kept=0, temp=GiB)
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:
        if e["name"] == "[memory]":
            del e["args"]["Total Allocated"], e["args"]["Total Reserved"]
    path.write_text(json.dumps(doc))
    d, f = diagnosis(path)
    assert "memory_peak" not in d
    assert f["q1.memory"].text.startswith("cuda:0 peaks at 1.0 GiB allocated counted from the window's start, in "
                                          "aten::mul (step 1): the trace has no allocator totals")


@pytest.mark.parametrize("kept,temp", [
    (100 * MiB, MIN_TRANSIENT_BYTES - MiB),         # too small to matter
    (GiB, int(PEAK_OVER_STEADY_AT * GiB) - 8 * MiB),  # below the steady state: not far above it
])
def test_a_peak_near_the_steady_state_or_a_small_one_is_not_named(tmp_path, kept, temp):
    d, _ = diagnosis(vt.memory_steps(tmp_path / "t.json", kept=kept, temp=temp))
    assert "memory_peak" not in d


def test_memory_kept_by_every_step_is_named_with_the_op_and_steps_that_keep_it(tmp_path):
    d, f = diagnosis(vt.memory_steps(tmp_path / "t.json", temp=MiB, leak=4096, steps=5))
    x = d["memory_growth"]
    assert x.evidence["steps"] == [2, 3, 4, 5] and x.evidence["growth_bytes_per_step"] == [4096] * 4
    assert x.evidence["unfreed"] == [{"op": "leaky_op", "bytes": 5 * 4096, "blocks": 5, "steps": [1, 2, 3, 4, 5]}]
    assert "grows in every step: steps 2–5 each leave about 4.0 KiB more" in x.text
    # 16 KiB over 100 MiB kept: both levels read 100.0 MiB, so no "from 100.0 MiB to 100.0 MiB"
    assert "(16.0 KiB over 4 steps, on top of 100.0 MiB)" in x.text
    assert "leaky_op 20.0 KiB in 5 blocks (steps 1, 2, 3, 4, 5)" in x.text
    assert "left 20.0 KiB in 5 blocks never freed, the most from leaky_op" in f["q1.memory"].text


def test_a_cpus_growth_says_its_levels_count_from_when_profiling_began(tmp_path):
    """Each step keeps 4 KiB on the CPU: the levels the sentence names count from when the profiler began recording,
    as the peak's do (it said "from 4.0 KiB to 20.0 KiB" and no more)."""
    path = vt.memory_steps(tmp_path / "t.json", kept=0, temp=MiB, leak=4096, steps=5, kind=0)
    d, f = diagnosis(path)
    assert ("(16.0 KiB over 4 steps, from 4.0 KiB left by step 1 to 20.0 KiB left by step 5, counted from when the "
            "profiler began recording)") in d["memory_growth"].text
    assert "counted from when the profiler began recording" in f["q1.memory"].text
    # torch.cuda's memory history records the CUDA allocator only: on a CPU the fix points at the profiler's own
    # stacks (it named _record_memory_history, which records nothing of a CPU's blocks)
    fix = d["memory_growth"].fix
    assert "_record_memory_history() and its snapshot" not in fix
    assert "records only the CUDA allocator" in fix and "group_by_stack_n" in fix


def test_a_gpus_growth_points_at_the_cuda_allocators_history(tmp_path):
    """The same on the GPU (Device Type 1): the CUDA allocator's history names the stack of every block alive."""
    path = vt.memory_steps(tmp_path / "t.json", kept=0, temp=MiB, leak=4096, steps=5, kind=1)
    d, _f = diagnosis(path)
    assert "torch.cuda.memory._record_memory_history() and its snapshot" in d["memory_growth"].fix


def test_without_steps_the_peak_is_measured_against_what_the_window_keeps(tmp_path):
    """A trace without steps: 10 MiB from before the window, a 300 MiB temporary allocated and freed. The rule names
    no step (it said "300.0 MiB above the 10.0 MiB its steps keep")."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100, "dur": 100, "args": {}}]
    for ts, nbytes, total in ((150, 300 * MiB, 310 * MiB), (350, -300 * MiB, 10 * MiB)):
        ev.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                   "args": {"Bytes": nbytes, "Addr": 7, "Total Allocated": total, "Total Reserved": 512 * MiB,
                            "Device Type": 1, "Device Id": 0}})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    d, _ = diagnosis(path)
    x = d["memory_peak"]
    assert x.title == "Memory peaks far above what the window keeps" and "step" not in x.text
    assert x.text.startswith("cuda:0 peaks at 310.0 MiB allocated in aten::mm, 300.0 MiB above the 10.0 MiB the "
                             "window keeps (the higher of the levels at the window's start and end)")


def kept_between_steps(path, in_step: int, between: int, steps: int = 4):
    """Steps over 100 MiB from before the window: each allocates ``in_step`` bytes at a fresh address and keeps
    them to its end; between a step and the next, ``between`` bytes more are allocated (negative: that many of the
    step's freed). The totals are written beside each event."""
    ev, total = [], 100 * MiB

    def mem(ts, nbytes, addr):
        nonlocal total
        total += nbytes
        ev.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                   "args": {"Bytes": nbytes, "Addr": addr, "Total Allocated": total, "Total Reserved": GiB,
                            "Device Type": 1, "Device Id": 0}})
    for n in range(1, steps + 1):
        t0 = n * 1000
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": t0,
                   "dur": 800, "args": {}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": t0 + 10, "dur": 50,
                   "args": {}})
        mem(t0 + 20, in_step, 0x1000 + n)
        mem(t0 + 870, between, 0x1000 + n if between < 0 else 0x2000 + n)  # outside every step
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def step_start_levels(path) -> list[int]:
    """The level at each step's start, by a plain scan: the total after the last event before it."""
    evs = json.loads(path.read_text())["traceEvents"]
    mems = sorted((e for e in evs if e["name"] == "[memory]"), key=lambda e: e["ts"])
    starts = sorted(e["ts"] for e in evs if e["name"].startswith("ProfilerStep#"))
    return [([100 * MiB] + [m["args"]["Total Allocated"] for m in mems if m["ts"] < t])[-1] for t in starts]


def test_what_each_step_keeps_but_frees_before_the_next_is_no_growth(tmp_path):
    """Each step keeps 80 MiB to its end and frees it between steps: every step's net is +80 MiB, yet each begins
    at 100 MiB, and the window ends where it began (it said "steps 2–4 each leave about 80.0 MiB more allocated
    than they found (240.0 MiB over 3 steps, from 100.0 MiB to 180.0 MiB)")."""
    path = kept_between_steps(tmp_path / "t.json", 80 * MiB, -80 * MiB)
    assert step_start_levels(path) == [100 * MiB] * 4
    d, _ = diagnosis(path)
    assert "memory_growth" not in d


def test_growth_between_steps_counts_and_the_figures_add_up(tmp_path):
    """Each step keeps 4 MiB and 4 MiB more are kept between steps: the level a step leaves (the next one's start,
    the last one's end) rises by 8, 8, then 4 MiB, from 108 MiB to 128 MiB (it said "4.0 MiB ... (12.0 MiB over 3
    steps, from 108.0 MiB to 128.0 MiB)": 12 is not 128 - 108)."""
    path = kept_between_steps(tmp_path / "t.json", 4 * MiB, 4 * MiB)
    starts = step_start_levels(path)
    assert [b - a for a, b in zip(starts, starts[1:])] == [8 * MiB] * 3
    d, _ = diagnosis(path)
    x = d["memory_growth"]
    assert ("steps 2–4 each leave about 8.0 MiB more allocated than the step before (20.0 MiB over 3 steps, from "
            "108.0 MiB left by step 1 to 128.0 MiB left by step 4)") in x.text
    assert x.evidence["growth_bytes_per_step"] == [8 * MiB, 8 * MiB, 4 * MiB]
    assert x.evidence["growth_bytes"] == sum(x.evidence["growth_bytes_per_step"]) == 128 * MiB - 108 * MiB


def test_blocks_kept_at_the_top_level_are_named_as_such(tmp_path):
    """The 4 MiB kept between steps are allocated at the top level (no op around them), outside every step: the
    texts name them so (they said "nan 16.0 MiB in 4 blocks (steps )")."""
    path = kept_between_steps(tmp_path / "t.json", 4 * MiB, 4 * MiB)
    d, f = diagnosis(path)
    assert ("never freed: aten::empty 16.0 MiB in 4 blocks (steps 1, 2, 3, 4), top level 16.0 MiB in 4 blocks "
            "(outside every step).") in d["memory_growth"].text
    assert "live at the peak: aten::empty 16.0 MiB in 4 blocks, top level 16.0 MiB in 4 blocks." in \
        f["q1.memory"].text


@pytest.mark.parametrize("kw", [dict(first_step_state=8 * MiB), dict(), dict(leak=4096, steps=2)],
                         ids=["state built once", "nothing kept", "two steps"])
def test_state_built_once_or_nothing_kept_is_not_growth(tmp_path, kw):
    d, _ = diagnosis(vt.memory_steps(tmp_path / "t.json", temp=MiB, **kw))
    assert "memory_growth" not in d


def test_reserved_far_above_allocated_names_the_allocator_setting_and_tells_an_earlier_peak_apart(tmp_path):
    path = vt.memory_steps(tmp_path / "t.json", kept=100 * MiB, temp=400 * MiB, reserved=2 * GiB)
    d, _ = diagnosis(path)
    x = d["memory_fragmentation"]
    assert x.evidence["gap_at_peak_bytes"] == 2 * GiB - 500 * MiB and "expandable_segments:True" in x.fix
    assert "the trace alone cannot tell" in x.text
    d2, _ = diagnosis(path, process_peak_bytes=int(1.9 * GiB))  # the run's max_memory_allocated reaches it
    assert d2["memory_fragmentation"].evidence["earlier_peak"] and "peaked earlier at 1.9 GiB" in \
        d2["memory_fragmentation"].text
    d3, _ = diagnosis(path, process_peak_bytes=500 * MiB)
    assert "so fragmentation" in d3["memory_fragmentation"].text


@pytest.mark.parametrize("kw", [
    dict(reserved=int(RESERVED_OVER_ALLOCATED_AT * 500 * MiB) - 2 * MiB),  # below the ratio
    dict(kept=10 * MiB, temp=30 * MiB, reserved=40 * MiB + MIN_GAP_BYTES - 2 * MiB),  # a large ratio, a small gap
    dict(kind=0),                                                             # the CPU reserves nothing
], ids=["ratio", "gap", "cpu"])
def test_a_small_gap_or_the_cpu_is_not_fragmentation(tmp_path, kw):
    kw = {"kept": 100 * MiB, "temp": 400 * MiB, **kw}
    d, _ = diagnosis(vt.memory_steps(tmp_path / "t.json", **kw))
    assert "memory_fragmentation" not in d


def test_cuda_graph_replays_with_memory_events_name_the_private_pools(tmp_path):
    path = vt.memory_steps(tmp_path / "t.json", temp=MiB, graphs=True)
    d, _ = diagnosis(path, config={"compile": "reduce-overhead"})
    x = d["cudagraph_pools"]
    assert x.evidence["graph_launches"] == 4 and x.evidence["graph_launches_per_step"] == 1
    assert ("replays CUDA graphs (mode='reduce-overhead'): 4 cudaGraphLaunch calls in the trace (a median 1 per "
            "step)") in x.text
    assert "max-autotune-no-cudagraphs" in x.fix
    d2, _ = diagnosis(path)  # an imported trace: the launches alone say it
    assert "cudagraph_pools" in d2 and "mode=" not in d2["cudagraph_pools"].text


@pytest.mark.parametrize("kw", [dict(graphs=False), dict(graphs=True, with_memory=False)],
                         ids=["no graph", "no memory events"])
def test_no_graph_or_no_memory_events_names_no_pools(tmp_path, kw):
    d, _ = diagnosis(vt.memory_steps(tmp_path / "t.json", temp=MiB, **kw), config={"compile": "reduce-overhead"})
    assert "cudagraph_pools" not in d


def test_a_trace_without_memory_events_gets_no_memory_rule_and_a_finding_that_says_how_to_record_them(tmp_path):
    d, f = diagnosis(vt.memory_steps(tmp_path / "t.json", with_memory=False))
    assert not {"memory_peak", "memory_growth", "memory_fragmentation", "cudagraph_pools"} & set(d)
    assert f["q1.memory"].title == "No memory events" and "profile_memory=True" in f["q1.memory"].text


def test_a_gap_that_cuda_graphs_explain_is_not_called_fragmentation(tmp_path):
    path = vt.memory_steps(tmp_path / "t.json", kept=100 * MiB, temp=400 * MiB, reserved=2 * GiB, graphs=True)
    d, _ = diagnosis(path, process_peak_bytes=500 * MiB)
    assert "cudagraph_pools" in d and "memory_fragmentation" not in d


@pytest.mark.parametrize("value,earlier", [(int(1.9 * GiB), True), (True, False), (-1, False), ("2040109465", False),
                                           (1.9 * GiB, False), (None, False)],
                         ids=["bytes", "bool", "negative", "text", "float", "null"])
def test_a_runs_process_peak_is_read_from_its_meta_json_by_one_reader(tmp_path, capsys, value, earlier):
    """``Run.process_peak_bytes`` is what the CLI's ``analyze`` and the app's diagnosis pass to the rules: a whole
    number of bytes from 0, else nothing (the rule then says the trace alone cannot tell)."""
    from profiling_core import RunStore
    from profiling_core.cli import analyze as analyze_cli
    store = RunStore(tmp_path / "runs")
    run = store.import_trace(vt.memory_steps(tmp_path / "t.json", kept=100 * MiB, temp=400 * MiB, reserved=2 * GiB))
    meta = json.loads(run.meta_path.read_text())
    run.meta_path.write_text(json.dumps({**meta, "peak_device_memory_bytes": value}))
    assert store.load(run.run_id).process_peak_bytes == (value if earlier else None)
    assert analyze_cli.main([str(run.run_dir / "trace.json"), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    assert ("The process peaked earlier at 1.9 GiB (max_memory_allocated" in out) is earlier
    assert ("the trace alone cannot tell" in out) is not earlier


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hs.integers(0, 4 * GiB), hs.integers(MIN_TRANSIENT_BYTES, 8 * GiB), hs.integers(0, 64 * MiB),
       hs.integers(1, 5), hs.sampled_from(["cpu", "no totals"]))
def test_no_peak_counted_from_the_window_is_called_far_above_the_steps_or_given_a_start(tmp_path_factory, kept, temp,
                                                                                       leak, steps, how):
    """Whatever the sizes, a CPU's peak and a peak without totals are said with how they are counted, never judged
    against a steady state the trace cannot know, and never given a level the window began with."""
    from profiling_core.present import memory_section
    path = vt.memory_steps(tmp_path_factory.mktemp("m") / "t.json", kept=kept, temp=temp, leak=leak, steps=steps,
                           kind=0 if how == "cpu" else 1)
    if how == "no totals":
        doc = json.loads(path.read_text())
        for e in doc["traceEvents"]:
            if e["name"] == "[memory]":
                del e["args"]["Total Allocated"], e["args"]["Total Reserved"]
        path.write_text(json.dumps(doc))
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        d = {x.rule for x in diagnose(s, r, None, None).diagnoses}
    label = ("counted from the window's start" if how == "no totals" else
             "counted from when the profiler began recording" if kept == 0 else
             "counted from an earlier recording in this process")
    assert "memory_peak" not in d
    assert label in {f.id: f for f in findings(r)}["q1.memory"].text
    [sentence] = memory_section(r.memory, r.steps).sentences
    assert label in sentence and "began with" not in sentence


# --- raw events, built to break one claim each -----------------------------------------------------------------------

def _x(name, ts, dur, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}


def _mem(ts, nbytes, addr, total=None, reserved=None):
    a = {"Device Type": 1, "Device Id": 0, "Bytes": nbytes, "Addr": addr}
    if total is not None:
        a["Total Allocated"] = total
    if reserved is not None:
        a["Total Reserved"] = reserved
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": a}


def _write(path, events):
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "deviceProperties": [
        {"id": 0, "name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0}]}))
    return path


def test_a_peak_whose_event_gives_no_reserved_figure_says_none(tmp_path):
    """The peak's [memory] event has no Total Reserved (the one before it has): question 1 wrote "(nan GiB reserved
    by the allocator then)"; it now leaves the reserved figure out."""
    path = _write(tmp_path / "t.json", [
        _x("ProfilerStep#1", 0, 100, "user_annotation"), _x("aten::empty", 2, 2),
        _mem(3, 10 * MiB, 1, 10 * MiB, 64 * MiB), _x("aten::mul", 10, 10), _mem(12, 100 * MiB, 2, 110 * MiB)])
    _d, f = diagnosis(path)
    text = f["q1.memory"].text
    assert text.startswith("cuda:0 peaks at 110.0 MiB allocated, in aten::mul (step 1)") and "nan" not in text


def test_two_allocations_at_one_timestamp_are_both_the_op_s(tmp_path):
    """Two 100 MiB allocations inside aten::mul at the same timestamp: the loader nests the second instant under the
    first, and question 1 named "[memory]" as the op at the peak and among the ops that left blocks; both are
    aten::mul's (a scan: both instants lie inside its slice)."""
    ev = [_x("ProfilerStep#1", 0, 100, "user_annotation"), _x("aten::mul", 10, 10),
          _mem(12, 100 * MiB, 7, 100 * MiB, 256 * MiB), _mem(12, 100 * MiB, 8, 200 * MiB, 256 * MiB)]
    path = _write(tmp_path / "t.json", ev)
    assert all(10 <= e["ts"] < 20 for e in ev if e["name"] == "[memory]")
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
    m = r.memory
    assert set(m.timeline["op"]) == {"aten::mul"} and m.peaks["op"].tolist() == ["aten::mul"]
    own = m.by_op[m.by_op["op"] == "aten::mul"]
    assert int(own["self_alloc_bytes"].sum()) == 200 * MiB and "[memory]" not in set(m.by_op["op"])
    text = {f.id: f for f in findings(r)}["q1.memory"].text
    assert "[memory]" not in text and "aten::mul 200.0 MiB in 2 blocks" in text


@pytest.mark.parametrize("flat_step", [3, 5, None])
def test_growth_in_every_step_means_every_step(tmp_path, flat_step):
    """Five steps, each keeping 4 KiB more on the GPU, but for ``flat_step``, which allocates nothing (its level stays
    where the step before left it): the rule said "grows in every step: steps 2–5" over the steps with events alone,
    and, the flat step the last, "steps 2–4" (the steps after a device's last event were not read). With a step that
    kept nothing it says nothing; without one it names steps 2 to 5."""
    ev, level, t = [], 0, 0
    for n in range(1, 6):
        ev.append(_x(f"ProfilerStep#{n}", t, 100, "user_annotation"))
        if n != flat_step:
            level += 4096
            ev += [_x("leaky_op", t + 10, 10), _mem(t + 12, 4096, 1000 + n, level, 2 * MiB)]
        t += 200
    d, _f = diagnosis(_write(tmp_path / "t.json", ev))
    if flat_step is None:
        assert "grows in every step: steps 2–5 each leave about 4.0 KiB more" in d["memory_growth"].text
    else:
        assert "memory_growth" not in d


@pytest.mark.parametrize("process_peak", [100 * MiB, int(1.9 * GiB)])
def test_a_process_peak_of_one_device_says_nothing_of_another_s_reserve(tmp_path, process_peak):
    """The trace's memory is on two GPUs; cuda:1 holds 2 GiB reserved for a 1 GiB peak. The run's
    max_memory_allocated() is one device's (the process's current one): it said "the process's own peak does not
    reach it, so fragmentation" (100 MiB, below cuda:1's own 1 GiB peak in the window) or "the reserve is what that
    peak needed" (1.9 GiB) of cuda:1. With two GPUs in the trace it cannot say which device it measured."""
    path = _write(tmp_path / "t.json", [
        _x("ProfilerStep#1", 0, 100, "user_annotation"), _x("aten::mul", 10, 40),
        _mem(11, 100 * MiB, 1, 100 * MiB, 128 * MiB), _mem(12, -100 * MiB, 1, 0, 128 * MiB)]
        + [dict(e, args={**e["args"], "Device Id": 1}) for e in (_mem(13, GiB, 2, GiB, 2 * GiB),
                                                                  _mem(14, -GiB, 2, 0, 2 * GiB))])
    d, _f = diagnosis(path, process_peak_bytes=process_peak)
    x = d["memory_fragmentation"]
    assert x.evidence["device"] == "cuda:1" and x.evidence["process_peak_bytes"] is None
    assert "the trace alone cannot tell" in x.text and "so fragmentation" not in x.text


def test_a_peak_that_stays_allocated_is_not_called_temporaries(tmp_path):
    """Four steps each allocate and free 10 MiB over the 100 MiB the window opened with; step 4 also allocates 1 GiB
    in aten::cat and never frees it. The steps' median end level is 100 MiB, so the peak is 1 GiB above it, and the
    rule said "temporaries that live only around the peak make most of it" while question 1 said the window left
    the 1 GiB never freed. A scan: the 1 GiB block has no free."""
    ev, t, level = [_mem(1, 100 * MiB, 1, 100 * MiB, 2 * GiB)], 10, 100 * MiB
    for n in range(1, 5):
        ev += [_x(f"ProfilerStep#{n}", t, 100, "user_annotation"), _x("aten::mul", t + 10, 20),
               _mem(t + 12, 10 * MiB, 500 + n, level + 10 * MiB, 2 * GiB), _mem(t + 25, -10 * MiB, 500 + n, level,
                                                                               2 * GiB)]
        if n == 4:
            level += GiB
            ev += [_x("aten::cat", t + 40, 20), _mem(t + 42, GiB, 900, level, 2 * GiB)]
        t += 200
    path = _write(tmp_path / "t.json", ev)
    mem = [e for e in ev if e["name"] == "[memory]"]
    assert not [e for e in mem if e["args"]["Addr"] == 900 and e["args"]["Bytes"] < 0]
    d, f = diagnosis(path)
    x = d["memory_peak"]
    assert "temporaries" not in x.text and "most of it stays" in x.text and x.evidence["kept_bytes"] >= GiB
    assert "no temporary" in x.fix
    assert "never freed" in f["q1.memory"].text


def test_what_was_live_at_the_peak_adds_up_to_no_more_than_the_peak(tmp_path):
    """The window opens with 1 GiB allocated; the totals then fall by 1 GiB with no free event (freed where the
    profiler saw nothing) before a 2 GiB allocation makes the peak (2.0 GiB + 20 MiB, a scan of the totals). The
    rows live at the peak said 1 GiB more than the peak: the opening's 1 GiB was still counted as live."""
    path = _write(tmp_path / "t.json", [
        _x("ProfilerStep#1", 0, 100, "user_annotation"), _x("aten::mul", 10, 40),
        _mem(11, 10 * MiB, 1, GiB + 10 * MiB, 3 * GiB), _mem(12, 10 * MiB, 2, 20 * MiB, 3 * GiB),
        _mem(13, 2 * GiB, 3, 2 * GiB + 20 * MiB, 3 * GiB)])
    with open_trace(path, engine="sqlite") as s:
        m = analyze(s).memory
    peak = int(m.peaks["peak_allocated_bytes"].iat[0])
    assert peak == 2 * GiB + 20 * MiB and int(m.live_at_peak["bytes"].sum()) <= peak


def _steps_over(path, opening: int, extra_in_step: dict, temp: int = 16 * MiB, steps: int = 4):
    """``steps`` steps, each allocating ``temp`` in aten::mul and freeing it in aten::add, over ``opening`` bytes
    allocated before the window; ``extra_in_step`` {step: (op, bytes, addr, hidden)} adds, after the temporary's
    allocation, an event of ``bytes`` at ``addr`` (a free where negative), or with ``hidden`` no event at all: the
    totals of that step's events and the later ones rise by ``bytes``, as an allocation the profiler did not
    record."""
    ev, t, level, hidden = [], 10, opening, 0
    for n in range(1, steps + 1):
        ev += [_x(f"ProfilerStep#{n}", t, 100, "user_annotation"), _x("aten::mul", t + 10, 20)]
        op, nbytes, addr, unseen = extra_in_step.get(n, (None, 0, None, False))
        if unseen:
            hidden += nbytes
        level += temp
        ev.append(_mem(t + 12, temp, 500 + n, level + hidden, 4 * GiB))
        ev.append(_x("aten::add", t + 40, 20))
        level -= temp
        ev.append(_mem(t + 42, -temp, 500 + n, level + hidden, 4 * GiB))
        if op and not unseen:
            level += nbytes
            ev += [_x(op, t + 70, 10), _mem(t + 72, nbytes, addr, level + hidden, 4 * GiB)]
        t += 200
    return _write(path, ev)


def _scan(path):
    """(the [memory] events in time order, the highest total, the median of the steps' end totals), by a plain
    scan: a step's end total is that of its last event."""
    evs = json.loads(path.read_text())["traceEvents"]
    mem = sorted((e for e in evs if e["name"] == "[memory]"), key=lambda e: e["ts"])
    ends = sorted([m for m in mem if s["ts"] <= m["ts"] < s["ts"] + s["dur"]][-1]["args"]["Total Allocated"]
                  for s in evs if s["name"].startswith("ProfilerStep#"))
    return mem, max(m["args"]["Total Allocated"] for m in mem), (ends[len(ends) // 2 - 1] + ends[len(ends) // 2]) / 2


def test_a_peak_made_by_a_block_from_before_the_window_is_not_called_temporaries(tmp_path):
    """The window opens with 1 GiB + 100 MiB allocated; step 1 frees the 1 GiB (a cache cleared) just after its
    16 MiB temporary. The peak is 1 GiB + 116 MiB, 1 GiB + 16 MiB above the 100 MiB the steps end with, and the
    rule said "temporaries that live only around the peak make most of it" and named the 16 MiB temporary: 1 GiB of
    the excess is the block from before the window (a free whose address no event of the window allocated)."""
    path = _steps_over(tmp_path / "t.json", 100 * MiB + GiB, {1: ("cache_clear", -GiB, 99, False)})
    mem, peak, steady = _scan(path)
    before = -sum(m["args"]["Bytes"] for m in mem if m["args"]["Bytes"] < 0
                  and m["args"]["Addr"] not in {x["args"]["Addr"] for x in mem if x["args"]["Bytes"] > 0})
    assert (peak, steady, before) == (GiB + 116 * MiB, 100 * MiB, GiB) and before >= (peak - steady) / 2
    d, _f = diagnosis(path)
    assert "memory_peak" not in d


def test_a_peak_whose_level_never_comes_back_down_is_not_called_temporaries(tmp_path):
    """In step 4 the totals rise by 2 GiB with no event of their own (an allocation the profiler did not record) and
    stay there to the end: the peak is 2 GiB + 10 MiB above the 500 MiB the steps end with at the median, and the
    rule said "temporaries that live only around the peak make most of it" (no block of the window is kept, so its
    test of what stays saw nothing). A scan: after the peak the totals never fall below 2 GiB + 500 MiB."""
    path = _steps_over(tmp_path / "t.json", 500 * MiB, {4: (None, 2 * GiB, None, True)}, temp=10 * MiB)
    mem, peak, steady = _scan(path)
    at = [m["args"]["Total Allocated"] for m in mem].index(peak)
    low = min(m["args"]["Total Allocated"] for m in mem[at:])
    assert (peak, steady, low) == (2 * GiB + 510 * MiB, 500 * MiB, 2 * GiB + 500 * MiB)
    d, _f = diagnosis(path)
    x = d["memory_peak"]
    assert "temporaries that live only around the peak make most of it" not in x.text
    assert (f"{human_bytes(peak - steady)} above the {human_bytes(steady)} its steps keep (the median level at the "
            f"end of a step): most of it stays: after the peak the level never falls below {human_bytes(low)}, "
            f"{human_bytes(low - steady)} above the {human_bytes(steady)} its steps keep") in x.text
    assert "no temporary" in x.fix


def test_a_level_below_the_window_start_is_said_as_such(tmp_path):
    """A trace without totals: step 1 frees a 1 GiB block allocated before the window, and every step keeps 30 MiB.
    The levels, counted from 0 at the window's start, run below it: the rule said "from -994.0 MiB left by step 1
    to -904.0 MiB". A scan: the running sum of Bytes at each step's end."""
    ev, t = [], 0
    for n in range(1, 5):
        ev += [_x(f"ProfilerStep#{n}", t, 100, "user_annotation"), _x("leaky_op", t + 10, 10),
               _mem(t + 12, 30 * MiB, 500 + n)]
        if n == 1:
            ev += [_x("cache_clear", t + 40, 10), _mem(t + 42, -GiB, 99)]
        t += 200
    path = _write(tmp_path / "t.json", ev)
    ends = [e["ts"] + e["dur"] for e in ev if e["name"].startswith("ProfilerStep#")]
    sums = [sum(e["args"]["Bytes"] for e in ev if e["name"] == "[memory]" and e["ts"] < end) for end in ends]
    assert sums == [30 * MiB - GiB, 60 * MiB - GiB, 90 * MiB - GiB, 120 * MiB - GiB]
    d, _f = diagnosis(path)
    text = d["memory_growth"].text
    assert (f"from {human_bytes(GiB - 30 * MiB)} below the window's start left by step 1 to "
            f"{human_bytes(GiB - 120 * MiB)} below the window's start left by step 4") in text and "-9" not in text
