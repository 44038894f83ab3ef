"""A flow that its timestamp binds to the wrong kernel: each GPU op is paired with the call whose args.correlation
is its own, on both paths (the analyses' launch pairs and the launch_latency SQL).

Kineto writes a launch flow's end at its kernel's start, and the reader binds it to the slice enclosing that time on
the GPU lane. cuBLAS' splitKreduce kernel starts 0.13 µs before its nvjet GEMM ends on the same stream (H200, the
Llama trained with SGD in fp16): one of its flows then ends on the GEMM, which had two launches and the reduce none.
The expected pairs here come from a plain scan of the JSON (call and GPU op of equal correlation)."""
from __future__ import annotations

import bisect
import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import scan_trace

from profiling_core.analyses import analyze
from profiling_core.queries import load_query
from profiling_core.trace import open_trace

DATA = Path(__file__).parent / "data"
SGD = DATA / "h200_train" / "app" / "lm_train_sgd_fp16_log.json.gz"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _scan_pairs(path):
    """{(GPU op name, start µs): (launching call's name, start µs)} by equal args.correlation, from the JSON."""
    events = scan_trace(path)
    calls = {e["args"]["correlation"]: e for e in events if e.get("ph") == "X"
             and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    assert all("correlation" in e.get("args", {}) for e in ops)
    return {(e["name"], e["ts"]): (calls[e["args"]["correlation"]]["name"], calls[e["args"]["correlation"]]["ts"])
            for e in ops}


def _match(expected, name, ts_us):
    """The scan's key of the GPU op ``name`` starting within 0.005 µs of ``ts_us`` (float µs against integer ns)."""
    starts = sorted(t for n, t in expected if n == name)
    i = bisect.bisect_left(starts, ts_us - 0.005)
    assert i < len(starts) and abs(starts[i] - ts_us) < 0.005, (name, ts_us)
    return name, starts[i]


def _check(expected, rows):
    """Every GPU op paired once, with the call of its own correlation."""
    seen = Counter()
    for gpu_name, gpu_ns, launch_name, launch_ns in rows:
        key = _match(expected, gpu_name, gpu_ns / 1000)
        seen[key] += 1
        want_name, want_ts = expected[key]
        assert (launch_name, round(launch_ns / 1000, 3)) == (want_name, round(want_ts, 3)), key
    assert set(seen) == set(expected) and max(seen.values()) == 1


def test_the_h200_trace_really_has_a_flow_bound_to_the_kernel_ahead():
    """(What the fix is for, seen in the trace itself: a reduce kernel whose flow's end lies inside the GEMM ahead of
    it on the same stream.)"""
    events = scan_trace(SGD)
    ops = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"), key=lambda e: e["ts"])
    by_stream: dict = {}
    for e in ops:
        by_stream.setdefault((e["pid"], e["tid"]), []).append(e)
    overlapping = [(a, b) for es in by_stream.values() for a, b in zip(es, es[1:]) if b["ts"] < a["ts"] + a["dur"]]
    assert len(overlapping) == 3
    assert all(a["name"].startswith("nvjet") and "splitKreduce" in b["name"] for a, b in overlapping)


def test_each_gpu_op_of_the_h200_trace_is_paired_with_the_call_of_its_own_correlation():
    expected = _scan_pairs(SGD)
    assert len(expected) == 2088
    with open_trace(str(SGD), engine="sqlite") as s:
        lat = analyze(s).launch_latency
        sql = s.query(load_query("launch_latency"))
    for df in (lat, sql):
        assert len(df) == 2088
        _check(expected, df[["gpu_name", "gpu_start_ns", "launch_name", "launch_start_ns"]].itertuples(index=False))
    # the reduce kernels are paired (by correlation where their flow went astray), and Q4's count says so
    assert (sql["gpu_name"].str.contains("splitKreduce")).sum() == sum(
        "splitKreduce" in n for n, _ in expected)


def _written(tmp_path, trace: dict):
    """``trace`` written as a JSON file in ``tmp_path``; its path."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    return path


def _cpu(cat: str, name: str, ts: float, dur: float, args: dict | None = None) -> dict:
    """A slice on the CPU thread (pid 1, tid 1)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            **({"args": args} if args is not None else {})}


def _kernel(name: str, ts: float, dur: float, args: dict) -> dict:
    """A kernel on stream 7 of device 0."""
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def _flow(flow_id: int, start: float, end: float, cat: str = "ac2g", name: str = "ac2g", bp_start: bool = False
          ) -> list[dict]:
    """A launch flow from the CPU thread at ``start`` to stream 7 at ``end`` (Kineto's ``s`` and ``f`` events)."""
    return [{"ph": "s", "cat": cat, "name": name, "id": flow_id, "pid": 1, "tid": 1, "ts": start,
             **({"bp": "e"} if bp_start else {})},
            {"ph": "f", "cat": cat, "name": name, "id": flow_id, "pid": 0, "tid": 7, "ts": end, "bp": "e"}]


def _two_kernels(correlation: bool) -> dict:
    """A GEMM and a reduce kernel on one stream, the reduce starting 0.13 µs before the GEMM ends, each launched by
    its own call and flow (ids as Kineto writes them: the correlation)."""
    def args(c, **more):
        return {"correlation": c, **more} if correlation else more
    return {"traceEvents": [
        _cpu("cpu_op", "aten::mm", 0, 50),
        _cpu("cuda_runtime", "cudaLaunchKernel", 10, 5, args(1)),
        _cpu("cuda_runtime", "cudaLaunchKernel", 20, 5, args(2)),
        _kernel("gemm", 100, 48.0, args(1, stream=7, device=0)),
        _kernel("reduce", 147.87, 3, args(2, stream=7, device=0)),
        *_flow(1, 10, 100), *_flow(2, 20, 147.87),
    ]}


@pytest.mark.parametrize("correlation,expected", [
    (True, [("gemm", 10_000, "flow"), ("reduce", 20_000, "correlation")]),
    # without correlation ids nothing says the second flow is not the GEMM's: it is kept as bound
    (False, [("gemm", 10_000, "flow"), ("gemm", 20_000, "flow")]),
], ids=["with correlation", "without"])
def test_a_flow_bound_to_the_kernel_ahead_goes_to_the_kernel_of_its_correlation(tmp_path, correlation, expected):
    path = _written(tmp_path, _two_kernels(correlation))
    with open_trace(str(path), engine="sqlite") as s:
        assert sorted(s.tables.flow_in.tolist()) == [3, 3]  # both flows end on the GEMM (row 3): the case itself
        lat = analyze(s).launch_latency
        sql = s.query(load_query("launch_latency"))
    for df in (lat, sql):
        got = sorted(df[["gpu_name", "launch_start_ns", "paired_by"]].itertuples(index=False, name=None))
        assert got == expected


def _start_tied(correlation: bool) -> dict:
    """A launch call that starts in the very microsecond of a zero-length cudaFuncSetAttribute call written before
    it, its flow's start at that microsecond (whole-µs timestamps, as HTA's A100 control trace has, 67 times): the
    reader binds the flow to the first of the two."""
    def args(c):
        return {"correlation": c} if correlation else {}
    return {"traceEvents": [
        _cpu("cpu_op", "aten::mul", 0, 50),
        _cpu("cuda_runtime", "cudaFuncSetAttribute", 10, 0, args(7)),
        _cpu("cuda_runtime", "cudaLaunchKernel", 10, 5, args(8)),
        _kernel("mul_kernel", 30, 4, {**args(8), "stream": 7, "device": 0}),
        *_flow(8, 10, 30, cat="async_cpu_to_gpu", name="async_gpu", bp_start=True),
    ]}


@pytest.mark.parametrize("correlation,expected", [
    (True, [("mul_kernel", "cudaLaunchKernel", "correlation")]),
    (False, []),  # a call that launches nothing is no launch, and no correlation says which call was
], ids=["with correlation", "without"])
def test_a_flow_bound_to_a_call_that_launches_nothing_goes_to_the_call_of_its_correlation(tmp_path, correlation,
                                                                                          expected):
    path = _written(tmp_path, _start_tied(correlation))
    with open_trace(str(path), engine="sqlite") as s:
        flows = list(zip(s.tables.flow_out.tolist(), s.tables.flow_in.tolist()))
        assert [(s.tables.name.uniq[s.tables.name.codes[a]]) for a, _b in flows] == ["cudaFuncSetAttribute"]
        r = analyze(s)
        sql = s.query(load_query("launch_latency"))
    for df in (r.launch_latency, sql):
        got = sorted(df[["gpu_name", "launch_name", "paired_by"]].itertuples(index=False, name=None))
        assert got == expected
    assert r.summary["launch_apis"] == sorted({launch for _g, launch, _p in expected})


def test_a_gpu_op_paired_by_correlation_is_paired_with_launch_calls_only(tmp_path):
    """Correlation ids are written by the profiler per call, but nothing in a file stops two calls from sharing one
    (traces merged by hand, ids that wrapped): of the runtime calls whose ``args.correlation`` equals a GPU op's,
    only one that can launch work (its name names a launch, copy or memset) is the op's launch, on both paths."""
    trace = {"traceEvents": [
        _cpu("cpu_op", "aten::mul", 0, 50),
        _cpu("cuda_runtime", "cudaEventQuery", 5, 1, {"correlation": 8}),
        _cpu("cuda_runtime", "cudaLaunchKernel", 10, 5, {"correlation": 8}),
        _kernel("mul_kernel", 30, 4, {"correlation": 8, "stream": 7, "device": 0}),
    ]}
    path = _written(tmp_path, trace)
    with open_trace(str(path), engine="sqlite") as s:
        lat = analyze(s).launch_latency
        sql = s.query(load_query("launch_latency"))
    for df in (lat, sql):
        got = sorted(df[["gpu_name", "launch_name", "paired_by"]].itertuples(index=False, name=None))
        assert got == [("mul_kernel", "cudaLaunchKernel", "correlation")]


def test_a_launch_call_that_could_not_nest_sits_in_the_op_that_encloses_it(tmp_path):
    """A launch call that starts 1 µs before the call above it ends (HTA's A100 control trace, five times) cannot
    nest: the reader puts it at depth 0 on another track of its thread, without a parent. It still sits in the op
    that encloses it in time: its kernel's device time is that op's, and the occupancy query made in that op before
    it sized it, on both paths (the analyses and the SQL)."""
    trace = {"traceEvents": [
        _cpu("cpu_op", "aten::mm", 0, 40),
        _cpu("cuda_runtime", "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 20, 0, {"correlation": 5}),
        _cpu("cuda_runtime", "cudaPointerGetAttributes", 25, 3, {"correlation": 6}),
        _cpu("cuda_runtime", "cudaLaunchKernel", 27, 8, {"correlation": 7}),
        _kernel("gemm", 50, 10, {"correlation": 7, "stream": 7, "device": 0}),
        *_flow(7, 27, 50),
    ]}
    path = _written(tmp_path, trace)
    with open_trace(str(path), engine="sqlite") as s:
        launch = s.query("SELECT parent_id, depth FROM slice WHERE name = 'cudaLaunchKernel'")
        assert launch["parent_id"].isna().all() and launch["depth"].tolist() == [0]  # the case itself
        r = analyze(s)
        paths_sql = s.query(load_query("launch_path"))
        table_sql = s.query(load_query("profiler_table"))
    assert r.launch_paths[["name", "parent_ops", "occupancy_queries"]].values.tolist() == [["gemm", "aten::mm", 1]]
    assert paths_sql[["gpu_name", "parent_op", "with_occupancy_query"]].values.tolist() == [["gemm", "aten::mm", 1]]
    for table, column, scale in ((r.profiler_table, "self_device_us", 1), (table_sql, "self_device_ns", 1000)):
        row = table[(table["name"] == "aten::mm") & (table["lane"] == "cpu")]
        assert row[column].tolist() == [10 * scale]
