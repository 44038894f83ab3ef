"""Traces that load but are odd (hand-edited, merged, written by other tools): every analysis still answers, and
answers as the study's SQL does. The cases are what ``scripts/fuzz_analyses.py`` found; the last test runs it."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import scan_trace
from test_study_queries import SPECS, compare

from profiling_core.analyses import analyze, kernel_configs
from profiling_core.analyses._shared import step_number
from profiling_core.explain.diagnosis import diagnose
from profiling_core.explain.questions import findings
from profiling_core.queries import load_query
from profiling_core.trace import open_trace

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
EAGER = DATA / "traces" / "64_bf16_warm_eager_b8.json"  # an H200 eager run: 3 steps, kernels, launches


def _steps_of(evs: list) -> list[dict]:
    return [e for e in evs if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
            and e.get("cat") != "gpu_user_annotation"]


def _edited(tmp_path, src: Path, edit, name: str = "edited.json") -> Path:
    doc = json.loads(src.read_text())
    edit(doc["traceEvents"])
    out = tmp_path / name
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("tail", ["7", "x", "", "-3", " 12", "\t5", "+5", "00012", "12abc", "+-7", "- 7", "0x10",
                                  "\u0661", "\u00a07", "99999999999999999999", "-99999999999999999999",
                                  pytest.param("9" * 5000, id="5000 digits")])
def test_a_step_number_is_what_sqlite_reads_from_the_name(tail):
    """The study's SQL numbers a step ``CAST(substr(name, 14) AS INT)``; SQLite itself is the reference."""
    name = "ProfilerStep#" + tail
    (want,) = sqlite3.connect(":memory:").execute("SELECT CAST(substr(?, 14) AS INT)", (name,)).fetchone()
    assert step_number(name) == want


@pytest.mark.parametrize("tail", ["x", "99999999999999999999"])
def test_a_step_without_a_plain_number_is_numbered_alike_by_every_analysis_and_the_sql(tmp_path, tail):
    """A step slice named ``ProfilerStep#x`` had no number in the analyses (the dispatch chains raised TypeError, the
    launches and cold-start gaps gave None where the SQL gives 0), and one whose number is past int64 raised
    OverflowError. Each analysis now numbers it as its query does, and its rows are those of a plain scan."""
    def rename(evs):
        _steps_of(evs)[1]["name"] = "ProfilerStep#" + tail
    path = _edited(tmp_path, EAGER, rename)
    evs = scan_trace(path)
    step = _steps_of(evs)[1]
    inside = [e for e in evs if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) == (step["pid"], step["tid"])
              and step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"]]
    number = 0 if tail == "x" else 2 ** 63 - 1
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        for q in SPECS:
            n, problems = compare(q, s.query(load_query(q)), r)
            assert n and not problems, problems[:3]
    assert int(r.steps["step"].iloc[1]) == number
    chain = r.dispatch_chains
    assert (chain[chain["category"].isna() | (chain["category"] != "kernel")]["step"] == number).sum() \
        >= len(inside) > 1
    assert number in set(r.launch_latency["step"].dropna().astype("int64"))
    assert any(f.question == 5 for f in findings(r))


def test_a_kernel_whose_grid_holds_a_list_is_a_launch_configuration_of_its_own(tmp_path):
    """A ``grid`` written as a nested list (another tool's trace, or an edited one) made kernel_configs raise
    TypeError (unhashable). It is a configuration of its own, shown with its inner list in parentheses; the counts are
    a plain scan's."""
    def nest(evs):
        ks = [e for e in evs if e.get("cat") == "kernel" and isinstance(e.get("args", {}).get("grid"), list)]
        for e in ks[:2]:
            g = e["args"]["grid"]
            e["args"]["grid"] = [[g[0], g[1]], g[2]]
    path = _edited(tmp_path, EAGER, nest)
    kernels = [e for e in scan_trace(path) if e.get("cat") == "kernel"]
    want: dict = {}
    for e in kernels:
        g, b = e["args"].get("grid"), e["args"].get("block")
        text = "×".join(f"({'×'.join(map(str, x))})" if isinstance(x, list) else str(x) for x in g)
        key = (e["name"], text, "×".join(map(str, b)))
        want[key] = want.get(key, 0) + 1
    assert sum(1 for k in want if k[1].startswith("(")) >= 1
    with open_trace(path, engine="sqlite") as s:
        got = kernel_configs(s)
    assert {(r.name, r.grid, r.block): int(r.count) for r in got.itertuples()} == want


def test_a_grid_that_is_no_whole_numbers_is_no_launch_configuration(tmp_path):
    """A ``grid`` or ``block`` written as a string (``"nan"``), a fraction, true, an empty list, a negative number or
    one beyond int64 (an edited trace; the analyses' fuzzer wrote them) is no launch configuration: those kernels
    count where the trace records none, shown as not recorded, never as the odd value; the counts are a plain scan's,
    each odd value read as none."""
    odd = ["nan", 2.5, True, [], [-1, 1, 1], [10 ** 400, 1, 1]]

    def spoil(evs):
        ks = [e for e in evs if e.get("cat") == "kernel" and isinstance(e.get("args", {}).get("grid"), list)]
        for k, e in enumerate(ks):  # (every odd value, on a grid and on a block)
            e["args"]["grid" if k % 2 == 0 else "block"] = odd[k % len(odd)]
    path = _edited(tmp_path, EAGER, spoil)
    whole = lambda v: isinstance(v, list) and v and all(type(x) is int and 0 <= x < 2 ** 63 for x in v)  # noqa: E731
    want: dict = {}
    for e in (e for e in scan_trace(path) if e.get("cat") == "kernel"):
        g, b = e["args"].get("grid"), e["args"].get("block")
        key = (e["name"], "×".join(map(str, g)) if whole(g) else None, "×".join(map(str, b)) if whole(b) else None)
        want[key] = want.get(key, 0) + 1
    assert sum(n for k, n in want.items() if None in k[1:]) == sum(want.values()) >= len(odd)
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        got = kernel_configs(s)
    assert {(x.name, x.grid, x.block): int(x.count) for x in got.itertuples()} == want
    q8 = next(f for f in findings(r) if f.question == 8)
    assert "nan" not in q8.text and "2.5" not in q8.text and "True" not in q8.text and "-1×" not in q8.text
    assert "0" * 20 not in q8.text


def _gemm_steps(dims: list, copies: list) -> list[dict]:
    """One step per entry: an aten::mm of those ``Input Dims`` launching a GEMM kernel, and a copy (name, ``bytes``)
    (each GPU op paired to its launch by correlation)."""
    evs, t = [], 0
    for n, (d, (copy, b)) in enumerate(zip(dims, copies), start=1):
        c = 10 * n
        evs += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": t,
                 "dur": 100, "args": {}},
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 1, "dur": 50,
                 "args": {"Input Dims": d, "Input type": ["float", "float"], "Input Strides": [[4, 1], [8, 1]]}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 2,
                 "dur": 5, "args": {"correlation": c}},
                {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_f32f32", "pid": 0, "tid": 7, "ts": t + 8,
                 "dur": 30, "args": {"correlation": c, "device": 0, "stream": 7}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": t + 60,
                 "dur": 2, "args": {"correlation": c + 1}},
                {"ph": "X", "cat": "gpu_memcpy", "name": copy, "pid": 0, "tid": 7,
                 "ts": t + 61, "dur": 2, "args": {"bytes": b, "correlation": c + 1, "device": 0, "stream": 7}}]
        t += 100
    return evs


def test_a_size_no_tensor_can_have_is_no_shape_and_no_copy_size(tmp_path):
    """A GEMM's Input Dims or a copy's bytes of 400 digits (an edited trace: beyond int64, where torch holds sizes)
    made the GEMM rows and the roofline raise OverflowError (FLOPs no float holds), and the whole analysis with them;
    a negative size made negative FLOPs. Such shapes are no shapes and such bytes no size: those ops have no FLOPs,
    and a copy of such bytes leaves its kind of copy without a roofline row (its rows are the means of the copies of
    each size the name ran). What counts is a plain scan's: sizes from 0 to below 2**63."""
    huge = 10 ** 400
    dims = [[[64, 4], [4, 8]], [[huge, 4], [4, 8]], [[64, -4], [-4, 8]], [[64, 4], [4, 8]]]
    dtod, htod = "Memcpy DtoD (Device -> Device)", "Memcpy HtoD (Pageable -> Device)"
    copies = [(dtod, 4096), (htod, huge), (dtod, 4096), (htod, -4096)]
    path = tmp_path / "sizes.json"
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
                                "traceEvents": _gemm_steps(dims, copies)}))
    evs = scan_trace(path)
    size = lambda v: type(v) is int and 0 <= v < 2 ** 63  # noqa: E731
    shaped = [e["ts"] for e in evs if e["name"] == "aten::mm" and all(size(x) for d in e["args"]["Input Dims"]
                                                                     for x in d)]
    by_name: dict = {}
    for e in (e for e in evs if e.get("cat") == "gpu_memcpy"):
        by_name.setdefault(e["name"], []).append(e["args"]["bytes"])
    sized = {name: len(b) for name, b in by_name.items() if all(map(size, b))}
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        findings(r)
        d = diagnose(s, r)
    assert [t // 1000 for t in r.gemm_throughput["start_ns"]] == shaped == [1, 301]
    assert r.gemm_throughput["flops"].tolist() == [2 * 64 * 4 * 8] * 2
    rows = {row["op"]: row["count"] for row in d.roofline.to_dict("records") if row["kind"] == "copy"}
    assert rows == sized == {dtod: 2}


def test_steps_that_took_no_time_compare_without_a_ratio(tmp_path):
    """Steps whose slices last 0 µs (an edited trace; a step cut at the recording's end is cut to 0 too): question 3
    divided by their median and raised TypeError. It now gives the figures and no ratio."""
    def zero(evs):
        for e in _steps_of(evs):
            e["dur"] = 0
    path = _edited(tmp_path, EAGER, zero)
    with open_trace(path, engine="sqlite") as s:
        (q3,) = [f for f in findings(analyze(s)) if f.question == 3]
    assert q3.evidence["ratio"] is None
    assert "against a median 0.0 µs for the 2 others." in q3.text and "×" not in q3.text.split("others")[0]


@pytest.mark.slow
def test_fuzzed_odd_traces_pass_every_stage():
    """scripts/fuzz_analyses.py, seeded: 200 real traces of tests/data made odd, each through analyze, findings,
    diagnose, the --json object and the text summary: nothing raised, nothing hung."""
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_analyses.py"), "-n", "200", "--seed", "11",
                        "--timeout", "120"], capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "fuzzed 200 cases" in p.stdout and ": 0 distinct failure(s)" in p.stdout


def test_elementwise_ops_whose_recorded_shapes_are_not_shapes_are_left_out_of_the_roofline(tmp_path):
    """The roofline sizes an elementwise op by its ``Input Dims`` and ``Input type``; a type written as a list raised
    TypeError (unhashable) and took the whole diagnosis down. An op whose shapes or types are not those of tensors
    (a list for a type, text or a list inside a shape) is not sized; the others are, as before."""
    src = DATA / "h200_diag" / "bf16_4096.json"  # the bias add: 3 aten::add ops with shapes, one per step
    from profiling_core.explain.diagnosis import diagnose

    def odd(evs):
        adds = [e for e in evs if e.get("name") == "aten::add"]
        adds[0]["args"]["Input type"] = [["c10::BFloat16"], "c10::BFloat16", "Scalar"]
        adds[1]["args"]["Input Dims"] = [["x", 4096], [4096, 4096], []]
    adds = [e for e in scan_trace(src) if e.get("name") == "aten::add"]
    assert len(adds) == 3
    with open_trace(src, engine="sqlite") as s:
        before = diagnose(s).roofline
    with open_trace(_edited(tmp_path, src, odd), engine="sqlite") as s:
        after = diagnose(s).roofline
    def adds_of(roof):
        return roof[(roof["kind"] == "elementwise") & (roof["op"] == "aten::add")]
    assert adds_of(before)["count"].sum() == 3
    (row,) = adds_of(after).to_dict("records")
    assert row["count"] == 1
    assert row["bytes"] == 3 * 4096 * 4096 * 2  # two bf16 inputs read, one output written


def test_gpu_ops_that_start_before_their_launch_are_named_and_read_as_no_queue(tmp_path, capsys):
    """A GPU op cannot start before the call that launched it; where a trace says one did (its clocks not aligned, or
    an edited file), question 4 printed a negative delay ("min -500.0 µs") and read the queue's growth from such
    delays. It now says how many ops started before their call, by how much, and reads no growth from them."""
    def early(evs):
        launches = {e["args"]["correlation"]: e for e in evs if e.get("cat") == "cuda_runtime"
                    and isinstance(e.get("args", {}).get("correlation"), int)}
        k = [e for e in evs if e.get("cat") == "kernel" and e["args"].get("correlation") in launches][1]
        k["ts"] = launches[k["args"]["correlation"]]["ts"] - 500
    path = _edited(tmp_path, EAGER, early)
    evs = scan_trace(path)
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in evs if e.get("cat") == "cuda_runtime"
                 and isinstance(e.get("args", {}).get("correlation"), int)}
    before = [e["ts"] - launch_ts[e["args"]["correlation"]] for e in evs
              if e.get("cat") == "kernel" and e["args"].get("correlation") in launch_ts
              and e["ts"] < launch_ts[e["args"]["correlation"]]]
    assert len(before) == 1
    with open_trace(path, engine="sqlite") as s:
        (q4,) = [f for f in findings(analyze(s)) if f.question == 4]
    assert q4.evidence["started_before_launch"] == 1
    assert q4.evidence["min_us"] == pytest.approx(min(before), abs=0.001)
    assert "(min 500.0 µs before its call, max " in q4.text
    assert "1 of the" in q4.text and "started before their launch call began" in q4.text
    assert "queue grew" not in q4.text and "queue grows" not in q4.text and "-" not in q4.text.split("(")[1][:20]
    from profiling_core.cli.analyze import main
    assert main([str(path), "--engine", "sqlite"]) == 0  # the summary's median (one op of 5 early: not the median)
    line = next(x for x in capsys.readouterr().out.splitlines() if "launch call → GPU start" in x)
    assert "before its call" not in line and " -" not in line


def test_a_median_launch_delay_below_0_is_said_so_in_the_summary(tmp_path, capsys):
    """The command line's summary printed "launch call → GPU start (median, queueing included) -61.6 µs"."""
    def all_early(evs):
        launches = {e["args"]["correlation"]: e for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")
                    and isinstance(e.get("args", {}).get("correlation"), int)}
        for k in evs:
            if k.get("cat") == "kernel" and k["args"].get("correlation") in launches:
                k["ts"] = launches[k["args"]["correlation"]]["ts"] - 40
    path = _edited(tmp_path, EAGER, all_early)
    from profiling_core.cli.analyze import main
    assert main([str(path), "--engine", "sqlite"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "launch call → GPU start" in x)
    assert "(median, queueing included) 40.0 µs before its call (the trace's GPU and CPU times disagree)" in line


def _kernels_of_whole_us(tmp_path, durs: list[int]) -> Path:
    """A trace with whole-µs times (as older Kineto and other tools write them): one step launching one kernel name
    once per duration in ``durs`` (a launch of 0 µs is one shorter than 1 µs)."""
    evs = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
            "dur": 1000}]
    for i, d in enumerate(durs):
        evs += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10 + 100 * i,
                 "dur": 5, "args": {"correlation": i + 1}},
                {"ph": "X", "cat": "kernel", "name": "void fill_kernel<float>()", "pid": 0, "tid": 7,
                 "ts": 20 + 100 * i, "dur": d, "args": {"correlation": i + 1}}]
    path = tmp_path / "whole_us.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    return path


def test_a_kernel_whose_launches_last_0_us_has_no_percentage_of_them(tmp_path):
    """A launch recorded as 0 µs: question 8 said "max nan% above min"; and over a median of 0 µs the skew verdict
    (here and on the Kernel variance page) read the mean as equal to the median, however far above it lay."""
    from profiling_core.explain import skew_text
    with open_trace(_kernels_of_whole_us(tmp_path, [0, 2, 2, 3]), engine="sqlite") as s:
        (q8,) = [f for f in findings(analyze(s)) if f.question == 8]
    assert "(the shortest launch recorded as 0 µs, CV" in q8.text and "nan" not in q8.text
    with open_trace(_kernels_of_whole_us(tmp_path, [0, 0, 0, 0, 4, 8]), engine="sqlite") as s:
        (q8,) = [f for f in findings(analyze(s)) if f.question == 8]
    assert q8.evidence["median_us"] == 0 and q8.evidence["mean_us"] == pytest.approx(2.0)
    assert q8.evidence["mean_above_median_pct"] is None
    assert "The mean is 2.0 µs where the median is 0 µs (at least half the launches recorded as 0 µs)" in q8.text
    assert skew_text(0.0, 0.0) == "equals the median (0 µs)"
    assert skew_text(3.0, 2.0).startswith("is 50.0% above the median")


def test_a_step_numbered_past_a_million_is_written_whole(tmp_path):
    """torch.profiler numbers steps by the calls to ``prof.step()``, so a long training run profiled late has steps
    past 1,000,000; the memory peak's step was formatted with ``:g``, which writes 1,000,002 as "1e+06"."""
    src = DATA / "h200_memory" / "eager.json"  # its peak is in aten::add of step 2

    def renumber(evs):
        for e in evs:
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{1_000_000 + int(e['name'][13:])}"
    path = _edited(tmp_path, src, renumber)
    with open_trace(path, engine="sqlite") as s:
        texts = [f.text for f in findings(analyze(s))]
    assert any("in aten::add (step 1000002)" in t for t in texts)
    assert not any("e+06" in t for t in texts)


def test_a_step_whose_first_gpu_op_starts_before_it_gives_no_queue_growth(tmp_path):
    """Question 2 reads a growing queue from the delay of each basis step's first GPU op after the step began; where
    the first of them started before its step (the trace's clocks disagree) it said "the queue grew: … 60.0 µs after
    its step began, against -50.0 µs in step 2". Four steps of 100 µs, each launching a 300 µs kernel that starts
    60 µs in (step 2's, 50 µs before the step): compute-bound, the GPU busy 40% of a step's window."""
    evs = []
    for k in range(1, 5):
        t = 1000 * k
        start = t - 50 if k == 2 else t + 60
        evs += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1, "ts": t,
                 "dur": 100},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 10,
                 "dur": 5, "args": {"correlation": k}},
                {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": start, "dur": 300,
                 "args": {"correlation": k}}]
    path = tmp_path / "early_step.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    with open_trace(path, engine="sqlite") as s:
        (q2,) = [f for f in findings(analyze(s)) if f.question == 2]
    assert q2.title == "Compute-bound"
    assert "Inside each step's own CPU window the GPU was busy only 40.0%" in q2.text
    assert "queue grew" not in q2.text and "-50.0 µs" not in q2.text


def test_a_blocking_call_that_outlasts_its_step_blocks_it_no_longer_than_the_step(tmp_path):
    """The time a step spent blocked counts the GPU's busy time inside the synchronizing calls that start in it; one
    that runs past the step's end (an edited trace: the step's own thread cannot leave the step while it waits) made
    a 100 µs step wait 570 µs, and question 2 then wrote "0.00× the CPU's own -470.0 µs". A step's wait is now at
    most its duration. (On a thread beside the step, which holds no step and launches nothing, the call would block
    that thread, not the step: tests/test_verdicts.py.)"""
    evs = []
    for k in range(1, 4):
        t = 1000 * k
        evs += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1, "ts": t,
                 "dur": 100},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 10,
                 "dur": 5, "args": {"correlation": k}},
                {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": t + 20, "dur": 600,
                 "args": {"correlation": k}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": t + 50,
                 "dur": 570}]
    path = tmp_path / "long_sync.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
    assert (r.steps["sync_wait_us"] <= r.steps["cpu_dur_us"]).all()
    assert r.steps["sync_wait_us"].tolist() == [100.0, 100.0, 100.0]
    (q2,) = [f for f in findings(r) if f.question == 2]
    assert "-" not in q2.text.split("CPU's own")[-1][:12] and "0.00×" not in q2.text
    assert "launched 600.0 µs of GPU work (all of the CPU's time was that wait: it had none of its own)" in q2.text


def test_a_gemm_whose_kernel_took_0_us_has_no_rate(tmp_path):
    """A trace of whole µs writes a short kernel as 0 µs. A GEMM op that launched such kernels was timed by its CPU
    op's 40 µs instead and judged against the GPU's memory roof ("10 of 4,800 GB/s"): its rate is unknown."""
    sys.path.insert(0, str(ROOT / "tests"))
    from verdict_traces import BF16, Trace
    t = Trace()
    for n in range(4):
        t.step(n + 1, lambda t: t.cpu("aten::mm", 40, dims=[[256, 256], [256, 256]], types=BF16,
                                      children=lambda t: t.launch("nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT", 0.0)))
    path = t.write(tmp_path / "zero_us.json")
    kernels = [e for e in scan_trace(path) if e.get("cat") == "kernel"]
    assert len(kernels) == 4 and {e["dur"] for e in kernels} == {0.0}
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        d = diagnose(s, r)
    g = r.gemm_throughput
    assert g["device"].tolist() == ["gpu"] * 4 and g["time_us"].tolist() == [0.0] * 4
    assert g["tflops"].isna().all()
    row = d.roofline[d.roofline["op"] == "aten::mm"].iloc[0]
    assert row["judged"] is None and row["gbs"] is None
    said = " ".join([f.text for f in findings(r)] + [x.text + " " + x.cost_basis for x in d.diagnoses])
    assert "GB/s" not in said and "TFLOP/s" not in said
