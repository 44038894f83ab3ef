"""The memory rules (profiling_core/explain/diagnosis/rules/memory_*.py, cudagraph_pools.py) on traces built to break
them, each with the verdict written beside it, on a GPU's and on a CPU's memory, with and without a run's config."""
from __future__ import annotations

import pytest

import verdict_traces as vt
from profiling_core import analyze, diagnose, findings, open_trace
from profiling_core.explain.diagnosis.rules.memory_fragmentation import MIN_GAP_BYTES, RESERVED_OVER_ALLOCATED_AT
from profiling_core.explain.diagnosis.rules.memory_peak import MIN_TRANSIENT_BYTES, PEAK_OVER_STEADY_AT

MiB, GiB = vt.MiB, vt.GiB


def diagnosis(path, config=None, **kw):
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return {d.rule: d for d in diagnose(s, r, config, None, **kw).diagnoses}, {f.id: f for f in findings(r)}


@pytest.mark.parametrize("kind,device", [(1, "cuda:0"), (0, "cpu")])
def test_a_temporary_far_above_what_the_steps_keep_is_named_with_the_op_at_the_peak(tmp_path, kind, device):
    d, f = diagnosis(vt.memory_steps(tmp_path / "t.json", kept=100 * MiB, temp=GiB, kind=kind))
    x = d["memory_peak"]
    assert x.evidence["device"] == device and x.evidence["excess_bytes"] == GiB
    assert x.evidence["steady_bytes"] == 100 * MiB and x.evidence["op"] == "aten::mul"
    assert f"{device} peaks at 1.1 GiB allocated in aten::mul (step 1), 1.0 GiB above the 100.0 MiB" in x.text
    assert "aten::mul 1.0 GiB in 1 block" in x.text and "torch.utils.checkpoint" in x.fix
    assert "q1.memory" in f and f"{device} peaks at 1.1 GiB allocated" in f["q1.memory"].text


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
