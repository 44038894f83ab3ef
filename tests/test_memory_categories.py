"""torch's memory categories of a run (``memory_categories.json``): written by the worker for a run with
profile_memory, record_shapes and with_stack, read back as a frame, checked against a hand count of the model and
against the trace's own ``[memory]`` events; a run without the knobs, or whose categorisation fails, lands without
the file and says why; a damaged file is refused with its reason."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from profiling_core import ExperimentConfig, RunStore, run_experiment
from profiling_core.errors import RunStoreError
from profiling_core.store import (MEMORY_CATEGORIES, MEMORY_CATEGORIES_FILE, Run, memory_categories,
                                  memory_categories_note)
from profiling_core.store.memory import coalesce, document

# mlp with d=64 and hidden_ratio 2: Linear(64, 128) and Linear(128, 64), weights and biases in fp32, by hand
D, H = 64, 128
PARAM_TENSORS = 4
PARAM_BYTES = (D * H + H + H * D + D) * 4  # 66,304
# Adam keeps exp_avg and exp_avg_sq (each the size of its parameter) and a float32 scalar step per parameter tensor
ADAM_STATE_BYTES = 2 * PARAM_BYTES + PARAM_TENSORS * 4


def _train_config(**profiler) -> ExperimentConfig:
    cfg = ExperimentConfig.for_workload("mlp", {"train": True, "optimizer": "adam", "d": D, "batch": 8,
                                               "hidden_ratio": H / D})
    # one warm-up call: Adam's first step (which creates its state) runs before profiling, and so do the lazy imports
    # of a cold step, whose dropped code objects torch 2.13's Python tracer may name from freed memory (with_stack)
    return dataclasses.replace(cfg, dtype="fp32", device="cpu", warmup=1, wait=0, warmup_steps=0, active=3, **profiler)


def _trace(run) -> dict:
    return json.loads(run.trace_path.read_text())


def _step_starts_ns(trace: dict) -> list[int]:
    """The ProfilerStep slices' starts, ns on the trace clock, from a plain scan of the JSON."""
    return sorted(round(e["ts"] * 1000) for e in trace["traceEvents"]
                  if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))


def _at(frame, category: str, t_ns: int) -> int:
    """The bytes of ``category`` in force at ``t_ns`` (the last row at or before it; the first row before any)."""
    rows = frame[frame["category"] == category].sort_values("start_ns", kind="stable")
    before = rows[rows["start_ns"] <= t_ns]
    return int((before if len(before) else rows.head(1))["bytes"].iloc[-1])


@pytest.mark.slow
def test_a_training_run_keeps_torchs_memory_categories(tmp_path):
    run = run_experiment(_train_config(profile_memory=True, record_shapes=True, with_stack=True),
                         store=RunStore(tmp_path))
    assert (run.run_dir / MEMORY_CATEGORIES_FILE).is_file()
    kept = run.meta["memory_categories"]
    assert kept["file"] == MEMORY_CATEGORIES_FILE and kept["devices"] == ["cpu"]
    assert run.meta["timings"]["memory_categories_s"] > 0
    assert memory_categories_note(run) is None

    frame = memory_categories(run)
    assert list(frame.columns) == ["device", "start_ns", "category", "bytes"]
    assert set(frame["category"]) == set(MEMORY_CATEGORIES) and set(frame["device"]) == {"cpu"}
    held = frame.groupby("category")["bytes"].max()
    assert {"PARAMETER", "OPTIMIZER_STATE", "GRADIENT", "ACTIVATION", "INPUT"} <= set(held[held > 0].index)

    trace = _trace(run)
    starts = _step_starts_ns(trace)
    assert len(starts) == 3
    # the parameters, at the start of every step, are the model's own bytes
    assert [_at(frame, "PARAMETER", t) for t in starts] == [PARAM_BYTES] * 3
    # after Adam's first step (the warm-up call) its state is 2x the parameters (+ the step counters), all along:
    # memory alive before the cycle counts from its first instant
    state = frame[frame["category"] == "OPTIMIZER_STATE"]
    assert int(state["bytes"].iloc[0]) == ADAM_STATE_BYTES and set(state["bytes"]) == {ADAM_STATE_BYTES}
    # zero_grad(set_to_none=True) frees the gradients: none at the start of a step, the parameters' size inside it
    assert [_at(frame, "GRADIENT", t) for t in starts] == [0, 0, 0]
    assert held["GRADIENT"] == PARAM_BYTES

    # the times are on the trace's clock: the trace's own [memory] events fall on the frame's instants, to the ns
    mem = [round(e["ts"] * 1000) for e in trace["traceEvents"] if e.get("name") == "[memory]"]
    instants = set(frame["start_ns"])
    assert len(mem) > 100
    on = sum(t in instants for t in mem)
    assert on >= 0.95 * len(mem), (on, len(mem))  # 377 of 377 when this was written
    assert starts[0] - 1_000_000 <= frame["start_ns"].min() and frame["start_ns"].max() <= max(mem)


@pytest.mark.slow
def test_a_run_without_the_knobs_has_no_categories_and_says_why(tmp_path):
    cfg = dataclasses.replace(ExperimentConfig(size=64, dtype="fp32", device="cpu"), wait=0, warmup_steps=0, active=2,
                              profile_memory=True)  # with_stack off
    run = run_experiment(cfg, store=RunStore(tmp_path))
    assert not (run.run_dir / MEMORY_CATEGORIES_FILE).exists()
    assert run.meta["memory_categories"]["file"] is None
    why = memory_categories_note(run)
    assert "with_stack off" in why and "profile_memory, record_shapes, with_stack" in why
    assert memory_categories(run).empty
    assert list(memory_categories(run).columns) == ["device", "start_ns", "category", "bytes"]
    assert "memory_categories_s" not in run.meta["timings"] or run.meta["timings"]["memory_categories_s"] == 0


@pytest.mark.slow
def test_a_failing_memory_profiler_leaves_the_run_whole(tmp_path, monkeypatch):
    """torch's memory profiler raising (an op it cannot follow, its private API changed) costs the categories only:
    the trace and table are written and the facts say what torch said."""
    from profiling_core.run import loop

    def broken(prof):
        raise AssertionError("input_version is None for key <probe>")
        yield  # unreachable: a generator, as the real one

    monkeypatch.setattr(loop, "memory_events", broken)
    cfg = dataclasses.replace(_train_config(profile_memory=True, record_shapes=True, with_stack=True), active=1)
    facts = loop.run_workload(cfg, tmp_path, loop.Phase())
    assert (tmp_path / "trace.json").is_file() and (tmp_path / "table.txt").is_file()
    assert not (tmp_path / MEMORY_CATEGORIES_FILE).exists()
    assert facts["memory_categories"]["file"] is None
    assert facts["memory_categories"]["why"].startswith("torch's memory profiler failed on cycle 1 (torch ")
    assert "AssertionError: input_version is None for key <probe>" in facts["memory_categories"]["why"]


def test_a_run_without_the_file_says_why(tmp_path):
    def run_with(meta):
        d = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        d.mkdir()
        return Run(d.name, d, meta)

    plain = ExperimentConfig(size=64).to_dict()
    assert "profile_memory, with_stack off" in memory_categories_note(run_with({"config": plain}))
    assert "imported trace" in memory_categories_note(run_with({"config": None}))
    kept = {"config": {**plain, "profile_memory": True, "with_stack": True},
            "memory_categories": {"file": None, "why": "torch's memory profiler failed on cycle 1: boom"}}
    assert memory_categories_note(run_with(kept)) == "torch's memory profiler failed on cycle 1: boom"
    old = {"config": {**plain, "profile_memory": True, "with_stack": True}}  # recorded before the file was kept
    assert "recorded before" in memory_categories_note(run_with(old))


def _run_holding(tmp_path, content) -> Run:
    d = tmp_path / "run1"
    d.mkdir(exist_ok=True)
    p = d / MEMORY_CATEGORIES_FILE
    if callable(content):
        content(p)
    else:
        p.write_text(content if isinstance(content, str) else json.dumps(content))
    return Run("run1", d, {})


def _good() -> dict:
    return document([{"cpu": {"start_ns": [10, 20], "bytes": [[1, 0, 0, 0, 0, 0, 0, 0], [1, 2, 0, 0, 0, 0, 0, 0]]}}],
                    "test")


@pytest.mark.parametrize("content, why", [
    ("", "memory_categories.json is empty"),
    ("{", "memory_categories.json is not valid JSON"),
    ("[]", "memory_categories.json must hold a JSON object, got an array"),
    ({**_good(), "format": 2}, "format must be 1, got 2"),
    ({**_good(), "categories": ["PARAMETER"]}, "categories must be ['PARAMETER', 'OPTIMIZER_STATE'"),
    ({**_good(), "devices": {"cpu\x1b[31m": {"start_ns": [], "bytes": []}}},
     "named like cpu or cuda:0, got 'cpu\\x1b[31m'"),
    ({**_good(), "devices": {"cpu": {"start_ns": [1, 2], "bytes": [[0] * 8]}}}, "device cpu: 2 times but 1 rows"),
    ({**_good(), "devices": {"cpu": {"start_ns": [1], "bytes": [[0] * 7]}}},
     "row 0 has 7 numbers, one per category (8)"),
    ({**_good(), "devices": {"cpu": {"start_ns": [5, 1], "bytes": [[0] * 8] * 2}}}, "start_ns must not decrease"),
    ({**_good(), "devices": {"cpu": {"start_ns": ["1"], "bytes": [[0] * 8]}}}, "Expected `int`, got `str`"),
    ({**_good(), "devices": {"cpu": {"start_ns": [1.5], "bytes": [[0] * 8]}}}, "Expected `int`, got `float`"),
    (lambda p: p.mkdir(), "memory_categories.json is not a regular file: it is a directory"),
    (lambda p: os.mkfifo(p), "memory_categories.json is not a regular file: it is a pipe (FIFO)"),
    (lambda p: p.symlink_to("/dev/zero"), "memory_categories.json is not a regular file: it is a character device"),
])
def test_a_damaged_file_is_refused_with_its_reason(tmp_path, content, why):
    run = _run_holding(tmp_path, content)
    with pytest.raises(RunStoreError) as err:
        memory_categories(run)
    assert str(err.value).startswith("run run1: memory_categories.json")
    assert why in str(err.value), str(err.value)


def test_a_file_over_the_cap_is_refused_unread(tmp_path, monkeypatch):
    from profiling_core.store import memory as m
    monkeypatch.setattr(m, "MAX_BYTES", 1000)
    run = _run_holding(tmp_path, json.dumps(_good()) + " " * 2000)
    with pytest.raises(RunStoreError, match="is over 1,000 bytes"):
        memory_categories(run)


def test_a_good_file_reads_back_row_for_row(tmp_path):
    frame = memory_categories(_run_holding(tmp_path, _good()))
    assert len(frame) == 2 * len(MEMORY_CATEGORIES)
    got = {(t, c): b for t, c, b in zip(frame["start_ns"], frame["category"], frame["bytes"])}
    assert got[(10, "PARAMETER")] == 1 and got[(20, "OPTIMIZER_STATE")] == 2 and got[(20, "unknown")] == 0


def test_coalesce_puts_older_memory_at_the_first_instant_and_one_row_per_instant():
    base = 1_000
    events = [(-1, "cpu", "PARAMETER", 400),            # alive before the cycle
              (1_500, "cpu", "ACTIVATION", 64), (1_500, "cpu", None, 8),   # one instant, two events
              (1_700, "cpu", "ACTIVATION", -64), (1_900, "cuda:0", "GRADIENT", 32)]
    out = coalesce(events, base)
    cpu = out["cpu"]
    assert cpu["start_ns"] == [500, 700]
    idx = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
    assert cpu["bytes"][0][idx["PARAMETER"]] == 400 and cpu["bytes"][0][idx["ACTIVATION"]] == 64
    assert cpu["bytes"][0][idx["unknown"]] == 8 and cpu["bytes"][1][idx["ACTIVATION"]] == 0
    assert out["cuda:0"] == {"start_ns": [900], "bytes": [[0, 0, 0, 0, 0, 32, 0, 0]]}


_EVENT = hs.tuples(hs.one_of(hs.just(-1), hs.integers(0, 10_000)), hs.sampled_from(["cpu", "cuda:0"]),
                   hs.sampled_from([*MEMORY_CATEGORIES[:-1], None]), hs.integers(-2**40, 2**40))


@settings(max_examples=200, deadline=None)
@given(hs.lists(_EVENT, max_size=60), hs.integers(0, 5_000))
def test_coalesce_rows_add_up_to_the_events(events, base):
    """Whatever the events: per device one row per distinct instant, in time order, on the trace clock; each row is
    the sum of every delta up to its instant (a plain sum per category, computed here); older memory at the first."""
    events = sorted(events, key=lambda e: e[0])  # torch hands them in time order
    out = coalesce(events, base)
    for device in {d for _, d, _, _ in events}:
        evs = [e for e in events if e[1] == device]
        stamps = sorted({t for t, *_ in evs if t >= 0})
        if not stamps:
            assert device not in out
            continue
        rows = out[device]
        assert rows["start_ns"] == [t - base for t in stamps]
        for t, row in zip(stamps, rows["bytes"]):
            for i, c in enumerate(MEMORY_CATEGORIES):
                want = sum(dlt for tt, _, cat, dlt in evs if (cat or "unknown") == c and (tt < 0 or tt <= t))
                assert row[i] == want


@pytest.mark.slow
def test_a_freed_frame_name_fails_the_run_with_what_to_do(tmp_path, monkeypatch):
    """torch 2.13's Python tracer (with_stack) may name a function from freed memory, and its export then raises a
    bare UnicodeDecodeError (seen here on cold training runs): the run says what happened and what to
    change instead."""
    import torch.profiler

    from profiling_core.errors import WorkerError
    from profiling_core.run import loop

    def freed(self, path):
        raise UnicodeDecodeError("utf-8", b"\xc3", 0, 1, "unexpected end of data")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", freed)
    cfg = dataclasses.replace(_train_config(profile_memory=True, record_shapes=True, with_stack=True), active=1)
    with pytest.raises(WorkerError) as err:
        loop.run_workload(cfg, tmp_path, loop.Phase())
    assert err.value.kind == "export"
    assert "Run warm-up calls before the profiled steps (warmup of 1 or more), or profile without with_stack" \
        in err.value.message
    assert "'utf-8' codec can't decode byte 0xc3" in err.value.message
    with pytest.raises(UnicodeDecodeError):  # without with_stack it is not that bug: torch's error as it is
        loop.run_workload(dataclasses.replace(cfg, with_stack=False), tmp_path, loop.Phase())
