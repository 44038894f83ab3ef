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


@pytest.mark.parametrize("kept", [0, 100 * MiB], ids=["as torch writes it", "totals from before"])
def test_on_the_cpu_the_peak_is_counted_from_the_window_and_not_called_far_above_the_steps(tmp_path, kept):
    """torch counts a CPU's memory only from when the profiler began recording it: a real CPU run's totals start at
    0 with its inputs already allocated (tests/test_app_memory.py runs one). Whatever a trace writes, a CPU's level
    is counted from the window's start, so the steps' steady state is unknown: the 1 GiB temporary is said as such,
    and no rule claims it is far above what the steps keep (it said "1.0 GiB above the 0 B its steps keep")."""
    d, f = diagnosis(vt.memory_steps(tmp_path / "t.json", kept=kept, temp=GiB, kind=0))
    assert "memory_peak" not in d
    text = f["q1.memory"].text
    assert text.startswith(f"cpu peaks at {human_bytes(kept + GiB)} allocated counted from when the profiler "
                           "began recording, in aten::mul (step 1): torch counts a CPU's memory only from when the "
                           "profiler began recording it")
    assert "what the process held, and so its own peak, the trace cannot know" in text


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
    assert x.evidence["steps"] == [2, 3, 4, 5] and x.evidence["net_bytes_per_step"] == [4096] * 4
    assert x.evidence["unfreed"] == [{"op": "leaky_op", "bytes": 5 * 4096, "blocks": 5, "steps": [1, 2, 3, 4, 5]}]
    assert "grows in every step: steps 2–5 each leave about 4.0 KiB more" in x.text
    # 16 KiB over 100 MiB kept: both levels read 100.0 MiB, so no "from 100.0 MiB to 100.0 MiB"
    assert "(16.0 KiB over 4 steps, on top of 100.0 MiB)" in x.text
    assert "leaky_op 20.0 KiB in 5 blocks (steps 1, 2, 3, 4, 5)" in x.text
    assert "left 20.0 KiB in 5 blocks never freed, the most from leaky_op" in f["q1.memory"].text


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
    assert "replays CUDA graphs (mode='reduce-overhead'): 4 cudaGraphLaunch calls (1 per step)" in x.text
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
    label = "counted from when the profiler began recording" if how == "cpu" else "counted from the window's start"
    assert "memory_peak" not in d
    assert label in {f.id: f for f in findings(r)}["q1.memory"].text
    [sentence] = memory_section(r.memory, r.steps).sentences
    assert label in sentence and "began with" not in sentence
