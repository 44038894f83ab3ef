"""Analyses against independent expectations: a plain json.load scan of each trace (loops, no SQL, no code under
test), the profiler tables torch itself wrote next to the H200 traces, and hand counts read off the JSON.

The scan pairs launch calls with GPU ops by ``args.correlation`` (the analyses use the flow table first), takes
``ts``/``dur`` as the JSON's float µs (the engines store integer ns), and so agrees only to ~1 ns per event.
"""
from __future__ import annotations

import gzip
import json
import re
import statistics
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import record_on_cpu
from hypothesis import given, settings
from hypothesis import strategies as hst

from profiling_core.analyses import (analyze, cold_start_gap, compile_breakdown, cpu_vs_gpu, dispatch_chain,
                                     gemm_flops_from_dims, gemm_throughput, gpu_busy, kernel_durations_by_step,
                                     kernel_stats, launch_latency, launch_paths, profiler_table, steps, sync_wait)
from profiling_core.config import ExperimentConfig
from profiling_core.queries import load_query
from profiling_core.trace import open_trace

DATA = Path(__file__).parent / "data"
H200 = sorted(p.stem for p in (DATA / "h200").glob("*.json"))
CPU_TRACE = DATA / "cpu" / "64_fp32_warm_eager.json"
THIRD = sorted(p for p in (DATA / "third_party").iterdir() if ".json" in p.name)
RESNET_2021 = DATA / "traces" / "worker0.1623143089861.pt.trace.json.gz"
ALL = [DATA / "h200" / f"{n}.json" for n in H200] + [CPU_TRACE] + THIRD

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
NS = 0.0011  # µs: the engines round each ts and dur to whole ns


# --- the independent scan -----------------------------------------------------------------------------------------

def _load(path: Path) -> list[dict]:
    op = gzip.open if path.name.endswith(".gz") else open
    with op(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def _union(intervals) -> float:
    total, end = 0.0, None
    for b, e in sorted(intervals):
        if end is None or b > end:
            total += e - b
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


class Scan:
    """Everything the tests need, computed from the raw events with loops."""

    def __init__(self, path: Path):
        ev = _load(path)
        self.xs = [e for e in ev if e.get("ph") == "X"]
        for e in self.xs:
            e["ts"], e["dur"] = float(e["ts"]), float(e.get("dur", 0))
        cat = lambda e: str(e.get("cat") or "").lower()  # noqa: E731
        self.gpu = sorted((e for e in self.xs if cat(e) in GPU_CATS), key=lambda e: e["ts"])
        self.steps = sorted((e for e in self.xs if str(e.get("name", "")).startswith("ProfilerStep#")
                             and e.get("cat") != "gpu_user_annotation"), key=lambda e: e["ts"])
        by_corr: dict = {}
        for e in self.xs:
            if cat(e) in LAUNCH_CATS and "correlation" in (e.get("args") or {}):
                by_corr.setdefault(e["args"]["correlation"], e)
        self.pairs = []  # (launch event, gpu event)
        for g in self.gpu:
            c = (g.get("args") or {}).get("correlation")
            if c in by_corr:
                self.pairs.append((by_corr[c], g))

    def in_step(self, st):
        return [(l, g) for l, g in self.pairs if st["ts"] <= l["ts"] < st["ts"] + st["dur"]]

    def step_rows(self):
        rows = []
        for st in self.steps:
            ps = self.in_step(st)
            rows.append({"step": int(st["name"].split("#")[1]), "cpu_dur_us": st["dur"],
                         "kernels": sum(1 for _, g in ps if g["cat"].lower() == "kernel"),
                         "launches": len({id(l) for l, _ in ps}),
                         "gpu_busy_us": _union((g["ts"], g["ts"] + g["dur"]) for _, g in ps), "n_ops": len(ps)})
        return rows

    def named(self, name, tid=None):
        return [e for e in self.xs if e.get("name") == name and (tid is None or e.get("tid") == tid)]


@lru_cache(maxsize=None)
def scan(path) -> Scan:
    return Scan(Path(path))


@lru_cache(maxsize=None)
def session(path):
    return open_trace(str(path), engine="sqlite")


@lru_cache(maxsize=None)
def report(path):
    return analyze(session(path))


def h200(name: str) -> Path:
    return DATA / "h200" / f"{name}.json"


# --- steps, GPU busy, CPU vs GPU ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_steps_match_the_scan(path):
    got = steps(session(path))
    want = scan(path).step_rows()
    assert got["step"].tolist() == [w["step"] for w in want]
    assert got["start_ns"].is_monotonic_increasing
    for (_, g), w in zip(got.iterrows(), want):
        assert g["cpu_dur_us"] == pytest.approx(w["cpu_dur_us"], abs=NS)
        assert g["kernels"] == w["kernels"]
        assert g["launches"] == w["launches"]
        assert g["gpu_busy_us"] == pytest.approx(w["gpu_busy_us"], abs=NS * (1 + w["n_ops"]))
        assert 0.0 <= g["gpu_busy_fraction"] <= 1.0


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_steps_count_the_slices_that_began_in_them(path):
    """``slices``: the events that make slices (complete, begin, instant) beginning in the step's window on any
    thread or lane, the step's own not counted (a plain scan; the window as the step's duration, cut at the
    recording's end like the step)."""
    from conftest import scan_trace
    events = [e for e in scan_trace(path) if isinstance(e, dict) and e.get("ph") in ("X", "B", "i", "I")]
    got = steps(session(path))
    for g in got.itertuples():
        lo, hi = g.start_ns / 1000, g.start_ns / 1000 + g.cpu_dur_us
        want = sum(1 for e in events if lo - NS <= float(e["ts"]) < hi - NS) - 1
        assert g.slices == want, g.name


def test_steps_hand_counts_h200():
    # read off the JSON: 3 steps, each with one GEMM (cuLaunchKernelEx) and one add (cudaLaunchKernel)
    s = steps(session(h200("64_bf16_cold_eager")))
    assert s["step"].tolist() == [2, 3, 4]
    assert s["kernels"].tolist() == [2, 2, 2] and s["launches"].tolist() == [2, 2, 2]
    assert s["cpu_dur_us"].tolist() == pytest.approx([187.518, 69.256, 63.311], abs=NS)
    assert s["gpu_busy_us"].tolist() == pytest.approx([1.92 + 0.864] * 3, abs=3 * NS)
    # a20: 20 steps numbered 0..19; compile: memcpy + memset + GEMM launched per step
    assert steps(session(h200("4096_bf16_warm_eager_a20")))["step"].tolist() == list(range(20))
    c = steps(session(h200("4096_bf16_warm_compile")))
    assert c["kernels"].tolist() == [1, 1, 1] and c["launches"].tolist() == [3, 3, 3]


def test_gpu_user_annotation_step_not_counted_twice():
    path = DATA / "third_party" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    raw = [e for e in scan(path).xs if e.get("name") == "ProfilerStep#1"]
    assert {e["cat"] for e in raw} == {"user_annotation", "gpu_user_annotation"}
    s = steps(session(path))
    assert s["step"].tolist() == [1, 2]
    assert s["cpu_dur_us"].iloc[0] == pytest.approx(9288.291, abs=NS)


@pytest.mark.parametrize("name", H200)
def test_gpu_busy_is_a_union_not_a_sum(name):
    sc = scan(h200(name))
    g = gpu_busy(session(h200(name))).set_index("scope")
    want = _union((e["ts"], e["ts"] + e["dur"]) for e in sc.gpu)
    assert g.loc["trace", "busy_us"] == pytest.approx(want, abs=NS * len(sc.gpu))
    assert g.loc["trace", "gpu_ops"] == len(sc.gpu)
    launched = [x for st in sc.steps for x in sc.in_step(st)]
    b = _union((gg["ts"], gg["ts"] + gg["dur"]) for _, gg in launched)
    # the steps' window: each step from its start to the later of its end and its ops' end, their union
    windows = [(st["ts"], max([st["ts"] + st["dur"]] + [gg["ts"] + gg["dur"] for _, gg in sc.in_step(st)]))
               for st in sc.steps]
    assert g.loc["steps", "busy_fraction"] == pytest.approx(b / _union(windows), rel=1e-4)


def test_steps_busy_share_does_not_count_the_gap_between_repeat_cycles(tmp_path):
    """Two recorded steps 10 ms apart (repeat > 1: the profiler did not record the steps between its cycles), each
    launching a 50 µs kernel in a 100 µs step: busy 100 µs over the steps' 200 µs, not over the 10.1 ms span."""
    import json as _json
    ev = []
    for i, t in enumerate((1000.0, 11000.0)):
        ev += [{"ph": "X", "name": f"ProfilerStep#{i}", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": t,
                "dur": 100.0},
               {"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": 1, "tid": 1, "ts": t + 10,
                "dur": 5.0, "args": {"correlation": i + 1}},
               {"ph": "X", "name": "k", "cat": "kernel", "pid": 0, "tid": 7, "ts": t + 20, "dur": 50.0,
                "args": {"correlation": i + 1}}]
    path = tmp_path / "cycles.json"
    path.write_text(_json.dumps({"traceEvents": ev}))
    with open_trace(path, engine="sqlite") as s:
        g = gpu_busy(s).set_index("scope")
    assert g.loc["steps", "busy_us"] == pytest.approx(100.0)
    assert g.loc["steps", "window_us"] == pytest.approx(200.0)
    assert g.loc["steps", "busy_fraction"] == pytest.approx(0.5)


def test_cpu_vs_gpu_bound():
    small = cpu_vs_gpu(session(h200("64_bf16_cold_eager")))
    assert set(small["bound"]) == {"overhead-bound"}
    big = cpu_vs_gpu(session(h200("4096_bf16_warm_eager_a20")))
    # steady state: CPU ~60 µs per step against ~190 µs of GPU work per step
    assert (big["bound"].iloc[2:] == "compute-bound").all()
    assert (big["gpu_to_cpu"].iloc[2:] > 1).all()
    cpu = cpu_vs_gpu(session(CPU_TRACE))
    assert set(cpu["bound"]) == {"no-gpu"}


# --- kernels ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [h200(n) for n in H200] + THIRD, ids=lambda p: p.name)
def test_kernel_stats_match_the_scan(path):
    durs: dict[str, list[float]] = {}
    for e in scan(path).gpu:
        if e["cat"].lower() == "kernel":
            durs.setdefault(e["name"], []).append(e["dur"])
    got = kernel_stats(session(path)).set_index("name")
    assert set(got.index) == set(durs)
    for name, d in durs.items():
        r = got.loc[name]
        assert r["count"] == len(d)
        assert r["median_us"] == pytest.approx(statistics.median(d), abs=NS)
        assert r["mean_us"] == pytest.approx(statistics.fmean(d), abs=NS)
        assert r["min_us"] == pytest.approx(min(d), abs=NS) and r["max_us"] == pytest.approx(max(d), abs=NS)
        assert r["std_us"] == pytest.approx(statistics.pstdev(d), abs=10 * NS)


def test_kernel_variance_h200_a20():
    ks = kernel_stats(session(h200("4096_bf16_warm_eager_a20"))).iloc[0]
    # STUDY.md, measured on the H200: median 169.4 µs, min 168.6, max 175.2 over 20 steps
    assert ks["name"] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT" and ks["count"] == 20
    assert (round(ks["median_us"], 1), round(ks["min_us"], 1), round(ks["max_us"], 1)) == (169.4, 168.6, 175.2)
    by_step = kernel_durations_by_step(session(h200("4096_bf16_warm_eager_a20")))
    gemm = by_step[by_step["name"] == ks["name"]]
    assert gemm["step"].tolist() == list(range(20))
    assert (gemm["occurrence"] == 0).all()
    assert gemm["dur_us"].iloc[0] == pytest.approx(175.199, abs=NS)  # step 0, read off the JSON


@pytest.mark.parametrize("path", [DATA / "h200" / "4096_bf16_warm_eager_a20.json",
                                  DATA / "third_party" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"],
                         ids=lambda p: p.name)
def test_per_event_names_are_one_shared_str_per_name(path):
    """Frames with a row per GPU op / launch / slice hold each distinct name once (object column of shared str), so
    that a 77k-row kernel table does not copy a 250-character kernel name into every row."""
    r = analyze(session(path))
    scan = Scan(path)
    kernel_names = {g["name"] for g in scan.gpu if str(g.get("cat")).lower() == "kernel"}
    frames = {"gpu_ops": ["name", "category"], "kernel_durations_by_step": ["name", "launch_name"],
              "launch_latency": ["gpu_name", "launch_name", "paired_by"], "dispatch_chains": ["name", "category"]}
    for table, cols in frames.items():
        df = getattr(r, table)
        assert len(df) > 0, table
        for c in cols:
            values = [v for v in df[c].tolist() if isinstance(v, str)]
            assert df[c].dtype == object, (table, c, df[c].dtype)
            assert len({id(v) for v in values}) == len(set(values)), (table, c)  # one object per distinct name
    assert set(r.kernel_durations_by_step["name"]) <= kernel_names  # and they are the trace's kernel names
    if "h200" in path.parts:  # GEMM rows need FLOPs: the study's config gives them (one GEMM per call)
        from profiling_core import ExperimentConfig
        g = analyze(session(path), config=ExperimentConfig(size=4096, warmup=10)).gemm_throughput
        assert len(g) > 1
        for c in ("op", "device", "flops_from", "kernel_names"):
            values = [v for v in g[c].tolist() if isinstance(v, str)]
            assert g[c].dtype == object and len({id(v) for v in values}) == len(set(values)), c


@pytest.mark.parametrize("name,want", [
    ("ProfilerStep#12", "ProfilerStep*"), ("ProfilerStep#0", "ProfilerStep*"),
    ("ProfilerStep#", "ProfilerStep#"), ("ProfilerStep#3x", "ProfilerStep#3x"),
    ("ProfilerStep#3\n", "ProfilerStep#3\n"),  # (Python's "$" would match before the newline: not a step slice)
    ("ProfilerStep#\u0663", "ProfilerStep#\u0663"),  # an Arabic-Indic digit: "\\d" in Python, not a step number
    ("aten::mm", "aten::mm"),
])
def test_step_slices_read_as_one_name_whatever_pandas_stores_text_in(name, want):
    """The first-step comparison names every ProfilerStep#N slice ProfilerStep* (N: ASCII digits and nothing after),
    by Python on each name, so a process whose pandas has pyarrow (the app) and one that has not (``analyze``) agree
    on every name."""
    from profiling_core.explain.questions.base import _step_star
    assert _step_star(name) == want


def test_cpu_trace_has_no_gpu_results():
    s = session(CPU_TRACE)
    assert kernel_stats(s).empty and launch_latency(s).empty and launch_paths(s).empty
    assert kernel_durations_by_step(s).empty
    g = gpu_busy(s)
    assert g["gpu_ops"].tolist() == [0, 0] and g["busy_us"].tolist() == [0.0, 0.0]
    lanes = s.query("select count(*) as n from slice where lower(category) in ('kernel','gpu_memcpy','gpu_memset')")
    assert int(lanes["n"].iloc[0]) == 0
    assert report(CPU_TRACE).summary["gpu_busy_fraction"] is None


# --- launches -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [h200(n) for n in H200] + THIRD + [RESNET_2021], ids=lambda p: p.name)
def test_launch_latency_matches_the_scan(path):
    """Both paths: the analyses' launch pairs and the launch_latency SQL (on the 2021 ResNet-50 trace the reader
    binds every flow to a [memory] event: the pairs come from args.correlation)."""
    sc = scan(path)
    want = sorted(g["ts"] - l["ts"] for l, g in sc.pairs)
    s = session(path)
    for got in (launch_latency(s), s.query(load_query("launch_latency"))):
        if "latency_us" not in got:
            got = got.assign(latency_us=got["latency_ns"] / 1000)
        assert len(got) == len(want)
        assert sorted(got["latency_us"]) == pytest.approx(want, abs=2 * NS)
        assert set(got["launch_name"]) == {l["name"] for l, _ in sc.pairs}


def test_launch_latency_falls_back_to_correlation_on_2021_traces():
    got = launch_latency(session(DATA / "third_party" / "gpu_metrics_input.json"))
    assert len(got) == 32 and set(got["paired_by"]) == {"correlation"}
    assert set(launch_latency(session(h200("64_bf16_cold_eager")))["paired_by"]) == {"flow"}


def _parent_op(sc: Scan, launch: dict):
    best = None
    for e in sc.xs:
        if (e.get("tid") == launch.get("tid") and e.get("pid") == launch.get("pid") and e is not launch
                and str(e.get("cat")).lower() not in LAUNCH_CATS
                and e["ts"] <= launch["ts"] and launch["ts"] + launch["dur"] <= e["ts"] + e["dur"]):
            if best is None or e["dur"] < best["dur"]:
                best = e
    return best


@pytest.mark.parametrize("path", [h200(n) for n in H200] + [DATA / "third_party" / "gpu_metrics_input.json"],
                         ids=lambda p: p.name)
def test_launch_paths_match_the_scan(path):
    sc = scan(path)
    apis: dict[str, set] = {}
    occ: dict[str, int] = {}
    for l, g in sc.pairs:
        if g["cat"].lower() != "kernel":
            continue
        apis.setdefault(g["name"], set()).add(l["name"])
        parent = _parent_op(sc, l)
        hit = parent is not None and any(
            e["name"].startswith(("cudaOccupancy", "cuOccupancy", "hipOccupancy")) and e.get("tid") == l.get("tid")
            and parent["ts"] <= e["ts"] <= l["ts"] and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"]
            for e in sc.xs)
        occ[g["name"]] = occ.get(g["name"], 0) + int(hit)
    got = launch_paths(session(path))
    got = got[got["category"] == "kernel"].set_index("name")
    assert set(got.index) == set(apis)
    for name in apis:
        assert set(got.loc[name, "launch_apis"].split(", ")) == apis[name]
        assert got.loc[name, "occupancy_queries"] == occ[name]


COMPILED_CODE = ("Torch-Compiled Region", "## Call CompiledFxGraph ")


@pytest.mark.parametrize("path", [
    # reduce-overhead: the GEMM replayed by a cudaGraphLaunch inside the compiled region
    h200("64_bf16_warm_compile_ro"),
    # an LLM's eager prefill and its compiled decode in one step
    DATA / "h200_train" / "llm_decode_static_compile_ro.json.gz",
    # a compiled training step: the backward's graph runs on the autograd engine's thread, outside the region
    DATA / "h200_train" / "mlp_train_adamw_fused_bf16_compile.json.gz",
    h200("64_bf16_cold_eager"),
], ids=lambda p: p.name)
def test_launch_paths_count_the_launches_made_from_compiled_code(path):
    """``from_compiled``: per GPU op name, the launches whose call lies inside (by time, on its thread) a compiled
    region, a compiled graph's call or a CompiledFunctionBackward; the mirror and the SQL against a scan."""
    sc = scan(path)
    marks: dict = {}
    for e in sc.xs:
        if str(e.get("name", "")).startswith(COMPILED_CODE) or e.get("name") == "CompiledFunctionBackward":
            marks.setdefault((e.get("pid"), e.get("tid")), []).append((e["ts"], e["ts"] + e["dur"]))
    want: dict = {}
    for l, g in sc.pairs:
        inside = any(a <= l["ts"] and l["ts"] + l["dur"] <= b for a, b in marks.get((l.get("pid"), l.get("tid")), ()))
        want[g["name"]] = want.get(g["name"], 0) + int(inside)
    s = session(path)
    got = launch_paths(s).set_index("name")["from_compiled"]
    assert {n: int(v) for n, v in got.items()} == want
    sql = s.query(load_query("launch_path")).groupby("gpu_name")["from_compiled"].sum()
    assert {n: int(v) for n, v in sql.items()} == want
    total = int(launch_paths(s)["count"].sum())
    if "eager" in path.name:
        assert not any(want.values())
    elif path.name.startswith("64_bf16_warm_compile_ro"):
        assert sum(want.values()) == total
    else:  # an eager prefill beside the compiled decode; an eager optimizer after the compiled forward and backward
        assert 0 < sum(want.values()) < total


def test_launch_paths_h200_pattern():
    lp = launch_paths(session(h200("64_bf16_cold_eager"))).set_index("name")
    assert lp.loc["nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT", "launch_apis"] == "cuLaunchKernelEx"
    assert not lp["occupancy_query_before"].any()
    ro = launch_paths(session(h200("64_bf16_warm_compile_ro"))).set_index("name")
    assert ro.loc["nvjet_sm90_tst_64x8_64x16_1x4_h_badd_NNT", "launch_apis"] == "cudaGraphLaunch"
    # the 2021 A100-era sample queries occupancy before its GEMMs (cudaOccupancyMaxActiveBlocksPerMultiprocessor)
    old = launch_paths(session(DATA / "third_party" / "gpu_metrics_input.json")).set_index("name")
    assert old.loc["volta_sgemm_128x32_nt", "occupancy_query_before"]


@pytest.mark.parametrize("name,mm", [("64_bf16_cold_eager", "aten::mm"), ("64_bf16_warm_eager_b8", "aten::bmm")])
def test_dispatch_chain_eager(name, mm):
    ch = dispatch_chain(session(h200(name)), step=4)
    by_id = ch.set_index("id")

    def path_to(gpu_name):
        cur, out = int(ch.loc[ch["name"] == gpu_name, "id"].iloc[0]), []
        while cur is not None:
            out.append(by_id.at[cur, "name"])
            parent = by_id.at[cur, "parent_id"]
            cur = None if pd.isna(parent) else int(parent)
        return out[::-1]

    gemm = [n for n in ch["name"] if n.startswith("nvjet")][0]
    assert path_to(gemm) == ["ProfilerStep#4", "matmul_add", "aten::matmul", mm, "cuLaunchKernelEx", gemm]
    add = [n for n in ch["name"] if "elementwise_kernel" in n][0]
    assert path_to(add) == ["ProfilerStep#4", "matmul_add", "aten::add", "cudaLaunchKernel", add]
    assert ch.loc[ch["lane"] == "gpu", "depth"].tolist() == [5, 4]
    assert dispatch_chain(session(h200(name)))["step"].iloc[0] == 2  # default: the first step
    with pytest.raises(ValueError, match="steps: 2, 3, 4"):
        dispatch_chain(session(h200(name)), step=99)


# --- timing: cold start, sync ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [h200(n) for n in H200] + [CPU_TRACE], ids=lambda p: p.name)
def test_cold_start_gap_matches_the_scan(path):
    sc = scan(path)
    regions = [e for e in sc.named("matmul_add") if e["cat"] != "gpu_user_annotation"]
    want = []
    for r in sorted(regions, key=lambda e: e["ts"]):
        inner = [e for e in sc.xs if e.get("tid") == r.get("tid") and e.get("pid") == r.get("pid")
                 and e["name"].startswith("aten::") and r["ts"] <= e["ts"]
                 and e["ts"] + e["dur"] <= r["ts"] + r["dur"]]
        want.append(min(e["ts"] for e in inner) - r["ts"])
    got = cold_start_gap(session(path))
    assert got["gap_us"].tolist() == pytest.approx(want, abs=2 * NS)


def test_cold_start_first_step_h200_a20():
    s = steps(session(h200("4096_bf16_warm_eager_a20")))
    # read off the JSON: ProfilerStep#0 923.587 µs (aten::mm's cudaMemsetAsync alone 347.865 µs), later ~60 µs
    assert s["cpu_dur_us"].iloc[0] == pytest.approx(923.587, abs=NS)
    assert s["cpu_dur_us"].iloc[1:].median() < 100


@pytest.mark.parametrize("name", H200)
def test_sync_wait_matches_the_scan(name):
    sc = scan(h200(name))
    syncs = sc.named("cudaDeviceSynchronize")
    got = sync_wait(session(h200(name)))
    assert len(got) == len(syncs) == 1
    y = syncs[0]
    busy = _union((max(g["ts"], y["ts"]), min(g["ts"] + g["dur"], y["ts"] + y["dur"])) for g in sc.gpu
                  if g["ts"] < y["ts"] + y["dur"] and g["ts"] + g["dur"] > y["ts"])
    assert got["dur_us"].iloc[0] == pytest.approx(y["dur"], abs=NS)
    assert got["gpu_busy_us"].iloc[0] == pytest.approx(busy, abs=10 * NS)
    assert got["idle_pct"].iloc[0] == pytest.approx(100 * (1 - busy / y["dur"]), abs=0.01)


# --- torch.compile --------------------------------------------------------------------------------------------------

# the study's runs and the training steps under torch.compile, whose backward runs on the autograd engine's thread
COMPILE_SCAN = [h200(n) for n in H200] + [DATA / "h200_memory" / "train_ro.json"] + sorted(
    (DATA / "h200_train" / "app").glob("*_compile.json.gz"))
_COMPILE_KINDS = {"cache_lookups": lambda n: n == "TorchDynamo Cache Lookup",
                  "compiled_regions": lambda n: n.startswith("Torch-Compiled Region"),
                  "prologues": lambda n: n == "AOTDispatcher Runtime Wrapper Prologue",
                  "fx_graph_calls": lambda n: n.startswith("## Call CompiledFxGraph "),
                  "graph_launches": lambda n: n == "cudaGraphLaunch"}


def _compile_scan(sc: Scan, st: dict) -> dict:
    """A step's torch.compile CPU rows by a plain scan: the slices of any thread of the step's process (not the GPU's
    ``gpu_user_annotation`` copies) that start inside its window; counts per kind, and the FX graph hashes in order
    of first call."""
    inside = sorted((e for e in sc.xs if e.get("pid") == st["pid"] and e.get("cat") != "gpu_user_annotation"
                     and st["ts"] <= e["ts"] < st["ts"] + st["dur"]), key=lambda e: e["ts"])
    out = {k: sum(1 for e in inside if f(e["name"])) for k, f in _COMPILE_KINDS.items()}
    out["cache_lookup_us"] = sum(e["dur"] for e in inside if _COMPILE_KINDS["cache_lookups"](e["name"]))
    out["fx_graph_hash"] = list(dict.fromkeys(e["name"].split()[3] for e in inside
                                              if _COMPILE_KINDS["fx_graph_calls"](e["name"])))
    backward = [b for b in inside if b["name"] == "CompiledFunctionBackward"]
    out["backward_fx_graph_calls"] = sum(1 for e in inside if _COMPILE_KINDS["fx_graph_calls"](e["name"]) and any(
        b["tid"] == e["tid"] and b["ts"] <= e["ts"] and e["ts"] + e["dur"] <= b["ts"] + b["dur"] for b in backward))
    return out


@pytest.mark.parametrize("path", COMPILE_SCAN, ids=lambda p: p.name)
def test_compile_breakdown_matches_the_scan_on_every_thread(path):
    sc = scan(path)
    with open_trace(path, engine="sqlite") as s:
        got = compile_breakdown(s)
        sql = s.query(load_query("compile_breakdown"))
    assert len(got) == len(sql) == len(sc.steps)
    for (_, g), (_, q), st in zip(got.iterrows(), sql.iterrows(), sc.steps):
        want = _compile_scan(sc, st)
        for k in [*_COMPILE_KINDS, "backward_fx_graph_calls"]:
            assert g[k] == q[k] == want[k], (st["name"], k)
        assert g["cache_lookup_us"] == pytest.approx(want["cache_lookup_us"], abs=2 * NS)
        assert q["cache_lookup_ns"] / 1000 == pytest.approx(want["cache_lookup_us"], abs=2 * NS)
        assert (g["fx_graph_hash"] or "").split(",") == (",".join(want["fx_graph_hash"])).split(",")
        assert set((q["fx_graph_hash"] or "").split(",")) == set((",".join(want["fx_graph_hash"])).split(","))
        ops = [gg for _, gg in sc.in_step(st)]
        assert g["memcpy_dtod"] == sum(1 for o in ops if o["name"].startswith("Memcpy DtoD"))
        assert g["memsets"] == sum(1 for o in ops if o["cat"] == "gpu_memset")
        assert g["kernels"] == sum(1 for o in ops if o["cat"] == "kernel")


def test_a_compiled_training_steps_backward_graph_counts_with_its_step():
    """Read off train_ro.json (an MLP training step under reduce-overhead): each ProfilerStep replays two CUDA graphs,
    the forward's on the main thread (tid 915) and the backward's on the autograd engine's (tid 940), and calls two
    FX graphs, the backward's (fa3depxm…) inside CompiledFunctionBackward; the GPU's ``gpu_user_annotation`` copies
    of the FX graph calls (pid 0) are not CPU rows."""
    with open_trace(DATA / "h200_memory" / "train_ro.json", engine="sqlite") as s:
        for c in (compile_breakdown(s), s.query(load_query("compile_breakdown"))):
            assert c["graph_launches"].tolist() == [2, 2, 2]
            assert c["fx_graph_calls"].tolist() == [2, 2, 2]
            assert c["cache_lookups"].tolist() == c["compiled_regions"].tolist() == [1, 1, 1]
            assert c["backward_fx_graph_calls"].tolist() == [1, 1, 1]
            assert set(c["backward_fx_graph_hash"]) == {"fa3depxm4pnh7ho33tduse2lfnv2ljno5gm4ioc5dlghyxlzqmbn"}


def _two_thread_trace(rows) -> dict:
    """Two steps on thread 1 of process 7 (0-100 and 100-200 µs) and ``rows``: (name, tid, ts[, dur]), 1 µs unless
    given; thread 2 is the autograd engine's; a GPU copy of each FX graph call on the device's stream (pid 0,
    gpu_user_annotation)."""
    ev = [{"ph": "M", "name": "thread_name", "pid": 7, "tid": 2, "args": {"name": "pt_autograd_0"}}]
    ev += [{"ph": "X", "name": f"ProfilerStep#{k + 1}", "cat": "user_annotation", "pid": 7, "tid": 1,
            "ts": 1000.0 + 100 * k, "dur": 100.0} for k in range(2)]
    for name, tid, ts, *dur in rows:
        cat = "cuda_runtime" if name == "cudaGraphLaunch" else "user_annotation" if name.startswith("##") else "cpu_op"
        ev.append({"ph": "X", "name": name, "cat": cat, "pid": 7, "tid": tid, "ts": 1000.0 + ts,
                   "dur": float(dur[0]) if dur else 1.0})
        if name.startswith("##"):
            ev.append({"ph": "X", "name": name, "cat": "gpu_user_annotation", "pid": 0, "tid": 7,
                       "ts": 1000.0 + ts + 0.5, "dur": 1.0})
    return {"traceEvents": ev}


def test_compile_rows_on_a_second_thread_count_with_the_step_whose_window_holds_them(tmp_path):
    rows = [("TorchDynamo Cache Lookup", 1, 10), ("## Call CompiledFxGraph fwd", 1, 20), ("cudaGraphLaunch", 1, 30),
            ("CompiledFunctionBackward", 2, 59, 20),  # step 1's backward, thread 2
            ("## Call CompiledFxGraph bwd", 2, 60), ("cudaGraphLaunch", 2, 70),
            ("cudaGraphLaunch", 2, 150),  # thread 2, inside step 2
            ("cudaGraphLaunch", 2, 250)]  # after the last step: no step's
    path = tmp_path / "two_threads.json"
    path.write_text(json.dumps(_two_thread_trace(rows)))
    with open_trace(path, engine="sqlite") as s:
        py, sql = compile_breakdown(s), s.query(load_query("compile_breakdown"))
    for c in (py, sql):
        assert c["step"].tolist() == [1, 2]
        assert c["graph_launches"].tolist() == [2, 1]
        assert c["fx_graph_calls"].tolist() == [2, 0]
        assert c["cache_lookups"].tolist() == [1, 0]
        assert c["backward_fx_graph_calls"].tolist() == [1, 0]
        assert c["backward_fx_graph_hash"].iloc[0] == "bwd" and pd.isna(c["backward_fx_graph_hash"].iloc[1])
    assert py["fx_graph_hash"].tolist() == ["fwd,bwd", None]
    assert set(sql["fx_graph_hash"].iloc[0].split(",")) == {"fwd", "bwd"} and pd.isna(sql["fx_graph_hash"].iloc[1])


_KIND_NAMES = ["TorchDynamo Cache Lookup", "Torch-Compiled Region: 0/0", "AOTDispatcher Runtime Wrapper Prologue",
               "## Call CompiledFxGraph h", "cudaGraphLaunch", "aten::mm"]


@settings(max_examples=25, deadline=None)
@given(rows=hst.lists(hst.tuples(hst.sampled_from(_KIND_NAMES), hst.sampled_from([1, 2, 3]),
                                 hst.integers(min_value=-20, max_value=220)), max_size=12))
def test_compile_rows_on_any_thread_by_a_hand_count(rows, tmp_path_factory):
    path = tmp_path_factory.mktemp("threads") / "t.json"
    path.write_text(json.dumps(_two_thread_trace(rows)))
    want = [{k: sum(1 for n, _t, ts in rows if f(n) and 100 * j <= ts < 100 * (j + 1))
             for k, f in _COMPILE_KINDS.items()} for j in range(2)]
    with open_trace(path, engine="sqlite") as s:
        py, sql = compile_breakdown(s), s.query(load_query("compile_breakdown"))
    for c in (py, sql):
        assert [{k: int(r[k]) for k in _COMPILE_KINDS} for _, r in c.iterrows()] == want


def test_compile_breakdown_hand_counts():
    c = compile_breakdown(session(h200("4096_bf16_warm_compile")))
    assert c["fx_graph_hash"].tolist() == ["fdglgmd3lpajgitslcjwivmbiarou7wpb27vlq7abgsnrkbk2rq5"] * 3
    assert c[["memcpy_dtod", "memsets", "kernel_launches", "launches"]].values.tolist() == [[1, 1, 1, 3]] * 3
    assert c["cache_lookup_us"].tolist() == pytest.approx([22.43, 19.082, 18.734], abs=NS)
    ro = compile_breakdown(session(h200("64_bf16_warm_compile_ro")))
    assert ro["graph_launches"].tolist() == [1, 1, 1]
    eager = compile_breakdown(session(h200("4096_bf16_warm_eager")))
    assert eager["compiled_regions"].sum() == 0 and eager["fx_graph_hash"].isna().all()


# --- GEMM throughput ------------------------------------------------------------------------------------------------

def test_gemm_throughput_from_recorded_shapes_on_cpu():
    sc = scan(CPU_TRACE)
    mms = sorted(sc.named("aten::mm"), key=lambda e: e["ts"])
    dims = mms[0]["args"]["Input Dims"]
    assert dims == [[64, 64], [64, 64]]
    got = gemm_throughput(session(CPU_TRACE), peak_tflops=1.0)
    assert got["op"].tolist() == ["aten::mm"] * 3 and set(got["device"]) == {"cpu"}
    want = [2 * 64 ** 3 / (e["dur"] * 1e-6) / 1e12 for e in mms]
    assert got["tflops"].tolist() == pytest.approx(want, rel=1e-4)
    assert got["fraction_of_peak"].tolist() == pytest.approx(want, rel=1e-4)


def test_gemm_throughput_from_config_on_h200():
    cfg = ExperimentConfig(size=4096, warmup=10)
    got = gemm_throughput(session(h200("4096_bf16_warm_eager")), peak_tflops=989.0, config=cfg)
    ks = [e for e in scan(h200("4096_bf16_warm_eager")).gpu if e["name"].startswith("nvjet")]
    want = [2 * 4096 ** 3 / (k["dur"] * 1e-6) / 1e12 for k in ks]
    assert got["device"].tolist() == ["gpu"] * 3
    assert got["tflops"].tolist() == pytest.approx(want, rel=1e-4)
    assert 0.5 < got["fraction_of_peak"].median() < 1.0
    # without a config or recorded shapes (record_shapes was off on the H200) there is nothing to compute
    assert gemm_throughput(session(h200("4096_bf16_warm_eager"))).empty


@pytest.mark.parametrize("op,dims,flops", [
    ("aten::mm", [[64, 32], [32, 16]], 2 * 64 * 32 * 16),
    ("aten::bmm", [[8, 64, 64], [8, 64, 64]], 2 * 8 * 64 ** 3),
    ("aten::addmm", [[16], [64, 32], [32, 16], [], []], 2 * 64 * 32 * 16),
    ("aten::matmul", [[8, 64, 64], [64, 64]], 2 * 8 * 64 ** 3),
    ("aten::linear", [[4, 32], [16, 32], [16]], 2 * 4 * 32 * 16),
    ("aten::mm", [[64, 32], [31, 16]], None),
])
def test_gemm_flops_from_dims(op, dims, flops):
    assert gemm_flops_from_dims(op, dims) == flops


# --- the profiler table against torch's own .txt ------------------------------------------------------------------

_UNIT = {"us": 1.0, "ms": 1000.0, "s": 1e6}


def _t(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    return float(m.group(1)) * _UNIT[m.group(2)]


def parse_table(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    header = next(l for l in lines if "Self CPU %" in l)
    cuda = "Self CUDA" in header
    rows = []
    for line in lines:
        if line.startswith("-") or not line.strip() or "Self CPU %" in line or line.startswith("Self "):
            continue
        width = header.index("Name") + len("Name")  # the name column is right-aligned up to "Name"
        name, rest = line[:width].strip(), line[width:].split()
        if not rest or not rest[-1].isdigit():
            continue
        row = {"name": name, "self_cpu_us": _t(rest[1]), "cpu_total_us": _t(rest[3]), "calls": int(rest[-1])}
        if cuda:
            row.update(self_device_us=_t(rest[5]), device_total_us=_t(rest[7]))
        rows.append(row)
    return rows


def _match(table, row):
    lane = "gpu" if row["cpu_total_us"] == 0 and row.get("self_device_us", 0) > 0 else "cpu"
    cand = table[table["lane"] == lane]
    if row["name"].endswith("..."):
        return cand[cand["name"].str.startswith(row["name"][:-3])]
    return cand[cand["name"] == row["name"]]


# torch's own table nests the profiler's "Activity Buffer Request" (a pid -1, tid 0 slice in the JSON, 358.783 µs)
# inside the first aten::mm; the own-time rule does too (``analyses.table._host_utid``), so every self CPU time
# matches. torch also counts that call's GPU work (175.967 µs) as the slice's own and a second time in the CUDA totals
# of everything above it, which the trace alone cannot reproduce: for those rows the device times are not compared.
_TORCH_ONLY = {"4096_bf16_warm_eager_a20": {"Activity Buffer Request", "aten::mm", "aten::matmul", "ProfilerStep*",
                                            "matmul_add"}}


@pytest.mark.parametrize("path", [h200(n) for n in H200] + [CPU_TRACE], ids=lambda p: p.stem)
def test_profiler_table_matches_torch(path):
    want = parse_table(path.with_suffix(".txt"))
    got = profiler_table(session(path))
    torch_only = _TORCH_ONLY.get(path.stem, set())
    assert len(got) == len(want)
    for row in want:
        m = _match(got, row)
        assert len(m) == 1, row["name"]
        g = m.iloc[0]
        tol = lambda v: max(0.0015 * g["calls"], 5e-4 * v + 0.0011)  # noqa: E731  (ms are printed to 1 µs)
        assert g["calls"] == row["calls"], row["name"]
        assert g["cpu_total_us"] == pytest.approx(row["cpu_total_us"], abs=tol(row["cpu_total_us"])), row["name"]
        assert g["self_cpu_us"] == pytest.approx(row["self_cpu_us"], abs=tol(row["self_cpu_us"])), row["name"]
        if row["name"] in torch_only:
            continue
        if "self_device_us" in row:
            assert g["self_device_us"] == pytest.approx(row["self_device_us"], abs=tol(row["self_device_us"]))
            assert g["device_total_us"] == pytest.approx(row["device_total_us"], abs=tol(row["device_total_us"]))


_STACK_WORK = """
def work(x):
    # three GEMMs and ReLUs in a record_function range, then a Python loop that runs no op
    with record_function("region"):
        for _ in range(3):
            x = torch.relu(x @ x)
    total = 0
    for i in range(20000):
        total += i
    return x
"""


def test_profiler_table_holds_the_python_frames_as_torchs_own_table_does(tmp_path):
    """Recorded with ``with_stack=True``, torch's table (``key_averages``) has a row per Python frame, whose self
    time is the interpreter's time in it outside any op (the loop above). Profiled here, on the CPU: the same rows,
    calls and CPU totals as torch's own table. A ``record_function`` range is entered inside a Python frame
    (``__enter__``) and left outside it, so it cannot nest among the frames (nor can ``ProfilerStep``): its self time
    is the thread's time in its window outside its children and the frames and ops below the frames around it (by a
    scan; it was all of its total). torch splits the time around such ranges otherwise, on up to five rows,
    one of them negative; here every instant of a thread's recorded time is some row's own, once: the self times add
    up to the time the thread spent in any slice (a plain scan's union).

    Profiled in a process of its own: a thread another test left running (a worker's pipe reader) would be recorded
    too, its frames begun before the recording written by torch on thread 0 (the process's main thread for the
    trace's readers)."""
    trace, table = record_on_cpu(tmp_path, _STACK_WORK, steps=4, schedule="wait=1, warmup=1, active=2")
    want = {k: SimpleNamespace(count=v[0], cpu_time_total=v[1], self_cpu_time_total=v[2]) for k, v in table.items()}
    assert any(": work" in k for k in want)  # a Python frame is a row of torch's table
    with open_trace(str(trace), engine="sqlite") as s:
        got = profiler_table(s)
        sql = s.query(load_query("profiler_table"))
    got = got[got["lane"] == "cpu"].set_index("name")
    assert set(got.index) == set(want)
    off = 0
    for name, e in want.items():
        g = got.loc[name]
        assert g["calls"] == e.count, name
        assert g["cpu_total_us"] == pytest.approx(e.cpu_time_total, abs=1.0), name
        off += abs(g["self_cpu_us"] - e.self_cpu_time_total) > 1.0
    assert off <= 5
    events = json.loads(trace.read_text())["traceEvents"]
    lanes: dict = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "python_function"):
            lanes.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    assert got["self_cpu_us"].sum() == pytest.approx(sum(_union(v) for v in lanes.values()), abs=1.0)
    assert (got["self_cpu_us"] >= 0).all()
    # the range's own time by a scan of the stated rule: its window less every other slice of its thread inside or
    # partly inside it (the frames and ops below the frames around it), the slices that enclose it left out
    own = 0.0
    for r in (e for e in events if e.get("ph") == "X" and e.get("name") == "region"):
        lo, hi = r["ts"], r["ts"] + r["dur"]
        covered = [(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in events
                   if e is not r and e.get("ph") == "X" and (e["pid"], e["tid"]) == (r["pid"], r["tid"])
                   and e.get("cat") in ("cpu_op", "user_annotation", "python_function")
                   and e["ts"] < hi and e["ts"] + e["dur"] > lo and not (e["ts"] <= lo and e["ts"] + e["dur"] >= hi)]
        own += r["dur"] - _union(covered)
    assert got.loc["region", "self_cpu_us"] == pytest.approx(own, abs=1.0)
    assert own < got.loc["region", "cpu_total_us"]
    sql = sql[sql["lane"] == "cpu"].set_index("name")
    assert set(sql.index) == set(want)
    assert (sql["self_cpu_ns"] / 1000).sum() == pytest.approx(got["self_cpu_us"].sum(), abs=0.01)


_NESTED_RANGES_WORK = """
def work(x):
    with record_function("outer"):  # both entered and left inside the same frame's calls: both spill
        with record_function("inner"):
            for _ in range(3):
                x = torch.relu(x @ x)
        total = 0
        for i in range(5000):
            total += i
    return x
"""


def test_nested_ranges_on_a_spill_track_hand_their_window_over_once(tmp_path):
    """Two ``record_function`` ranges, one inside the other, in one function: both go on a spill track, the inner
    one as the outer one's child, and the frame around both on the first track counted their windows as its own.
    The outer range hands its window over to that frame once; the inner one, inside it, does not hand it again:
    every instant of the thread is some row's own time once (the self times add up to a plain scan's union of the
    thread's slices; handed over twice, a frame's own time went missing)."""
    trace, _table = record_on_cpu(tmp_path, _NESTED_RANGES_WORK, steps=3)
    events = json.loads(trace.read_text())["traceEvents"]
    lanes: dict = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "python_function"):
            lanes.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    with open_trace(str(trace), engine="sqlite") as s:
        got = profiler_table(s)
        sql = s.query(load_query("profiler_table"))
        depth = s.query("SELECT s.name, s.depth, tt.type FROM slice s JOIN thread_track tt ON tt.id = s.track_id "
                        "WHERE s.name IN ('outer', 'inner')")
    assert set(depth["type"]) == {"thread_overlapping_slice"}  # (the case: both on a spill track, nested there)
    assert set(depth.loc[depth["name"] == "inner", "depth"]) == {1}
    got = got[got["lane"] == "cpu"]
    assert got["self_cpu_us"].sum() == pytest.approx(sum(_union(v) for v in lanes.values()), abs=0.01)
    assert (got["self_cpu_us"] >= 0).all()
    assert (sql[sql["lane"] == "cpu"]["self_cpu_ns"] / 1000).sum() == pytest.approx(got["self_cpu_us"].sum())


def test_a_slice_written_on_thread_0_is_held_by_the_op_around_it(tmp_path):
    """Kineto writes its own work on pid -1, tid 0: such a CPU slice inside another thread's op takes its time out of
    that op's self time (once, not twice); one inside nothing keeps its own. By hand: three 8 µs ops each around a
    2 µs thread-0 slice, and one more thread-0 slice after them."""
    ev = []
    for i in range(3):
        ev.append({"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": i * 10, "dur": 8})
        ev.append({"ph": "X", "name": "abr", "cat": "cpu_op", "pid": -1, "tid": 0, "ts": i * 10 + 1, "dur": 2})
    ev.append({"ph": "X", "name": "alone", "cat": "cpu_op", "pid": -1, "tid": 0, "ts": 100, "dur": 5})
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": ev}))
    with open_trace(str(tmp_path / "t.json"), engine="sqlite") as s:
        got = profiler_table(s).set_index("name")
        sql = s.query(load_query("profiler_table")).set_index("name")
    assert got.loc["op", "self_cpu_us"] == pytest.approx(3 * (8 - 2))
    assert got.loc["abr", "self_cpu_us"] == pytest.approx(3 * 2)
    assert got.loc["alone", "self_cpu_us"] == pytest.approx(5)
    assert got["self_cpu_us"].sum() == pytest.approx(3 * 8 + 5)
    for name in ("op", "abr", "alone"):
        assert sql.loc[name, "self_cpu_ns"] / 1000 == pytest.approx(got.loc[name, "self_cpu_us"])


def test_profiler_table_footer_self_cpu_total():
    for name in H200:
        txt = (DATA / "h200" / f"{name}.txt").read_text()
        total = _t(re.search(r"Self CPU time total: (\S+)", txt).group(1))
        got = profiler_table(session(h200(name)))["self_cpu_us"].sum()
        assert got == pytest.approx(total, abs=max(1.0, 1e-3 * total)), name


# --- the facade -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_analyze_runs_everywhere(path):
    r = report(path)
    assert r.engine == "sqlite"
    assert r.summary["steps"] == len(scan(path).steps)
    assert r.summary["has_gpu"] == bool(scan(path).gpu)
    assert r.summary["gpu_ops"] == len(scan(path).gpu)


@pytest.mark.parametrize("eager_w,comp_w,eager_us,comp_us,want", [
    (0.1, 2.1, 400.0, 300.0, (2.0, 100.0, 20000)),    # 2 s of compile / 100 µs saved a step
    (0.1, 2.1, 300.0, 400.0, (2.0, -100.0, None)),    # the compiled step costs more: never pays off
    (0.2, 0.2005, 300.0, 299.0, (0.0005, 1.0, 500)),  # 500 µs of compile / 1 µs a step
])
def test_compile_payoff_by_hand(eager_w, comp_w, eager_us, comp_us, want):
    from profiling_core.analyses import compile_payoff
    p = compile_payoff(eager_w, comp_w, eager_us, comp_us)
    assert (round(p["compile_s"], 6), p["saving_us_per_step"], p["payoff_steps"]) == want


def test_compile_payoff_of_runs_without_warm_up_calls_is_not_measured():
    """Cold runs compile in their profiled steps: 5 µs of warm-up against 6 µs is no compile of -1 µs paid back
    after 0 steps."""
    from profiling_core.analyses import compile_payoff
    p = compile_payoff(6e-06, 5e-06, 3659.87, 3608.84, warmup_calls=0)
    assert (p["measured"], p["compile_s"], p["payoff_steps"]) == (False, None, None)
    assert p["saving_us_per_step"] == pytest.approx(51.03)
    assert compile_payoff(0.1, 2.1, 400.0, 300.0, warmup_calls=3)["payoff_steps"] == 20000
    # where its recorded steps hold no compile (the schedule skipped the step that compiled): still not measured
    assert compile_payoff(6e-06, 5e-06, 400.0, 300.0, warmup_calls=0, traced_compile_s=0.0)["measured"] is False


def test_compile_payoff_of_a_cold_run_is_the_compile_its_trace_holds():
    """A cold run's compile, where its recorded steps hold it: the time in the compiler's ranges, 1.2 s, paid back
    by 100 µs a step after 12,000 steps (the warm-up times, 5 and 6 µs, hold none of it)."""
    from profiling_core.analyses import compile_payoff
    p = compile_payoff(6e-06, 5e-06, 400.0, 300.0, warmup_calls=0, traced_compile_s=1.2)
    assert (p["measured"], p["source"], p["compile_s"], p["payoff_steps"]) == (True, "trace", 1.2, 12000)
    assert compile_payoff(0.1, 2.1, 400.0, 300.0, warmup_calls=3, traced_compile_s=1.2)["source"] == "warm-up"


@pytest.mark.parametrize("eager_w,comp_w", [(1.0, 0.9), (0.1, 0.1)])
def test_a_compiled_warm_up_no_slower_than_eager_measures_no_compile(eager_w, comp_w):
    """A compiled run's warm-up 0.1 s shorter than the eager one's (a warm cache, the machine's noise) read as a
    compile of -0.1 s that "pays off after 0 steps"; an equal one as 0 s. A compile costs time: the difference says
    the noise is larger than it, so nothing is measured."""
    from profiling_core.analyses import compile_payoff
    p = compile_payoff(eager_w, comp_w, 100.0, 50.0, warmup_calls=3)
    assert (p["measured"], p["why"], p["compile_s"], p["payoff_steps"]) == (False, "no slower", None, None)
    assert p["saving_us_per_step"] == 50.0


@pytest.mark.parametrize("name,want", [
    ("triton_poi_fused_add_mm_1", ("pointwise", ["add", "mm"])),
    ("triton_red_fused__unsafe_view_add_mean_mul_pow_rsqrt_1",
     ("reduction", ["_unsafe_view", "add", "mean", "mul", "pow", "rsqrt"])),
    ("triton_poi_fused__unsafe_view_mul_silu_2", ("pointwise", ["_unsafe_view", "mul", "silu"])),
    ("triton_per_fused_native_layer_norm_0", ("persistent reduction", ["native_layer_norm"])),
    ("triton_tem_fused_addmm_gelu_0", ("template", ["addmm", "gelu"])),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", None),
])
def test_fused_ops_reads_inductors_kernel_names(name, want):
    from profiling_core.analyses import fused_ops
    assert fused_ops(name) == want


def test_fused_ops_joins_words_into_the_ops_it_is_told_of():
    from profiling_core.analyses import fused_ops
    assert fused_ops("triton_poi_fused_my_op_relu_0") == ("pointwise", ["my", "op", "relu"])
    assert fused_ops("triton_poi_fused_my_op_relu_0", ["aten::my_op"]) == ("pointwise", ["my_op", "relu"])


def _fused_ops_oracle(kernel, known=()):
    """The first implementation of :func:`fused_ops`, kept as the reference for small names: at each word, every
    run to the end of the name is joined and looked up, longest first (cubic in the words)."""
    from profiling_core.analyses.compile import _MULTIWORD, _TRITON, _TRITON_KINDS
    m = _TRITON.match(kernel or "")
    if m is None:
        return None
    vocab = {k.removeprefix("aten::") for k in known if isinstance(k, str)} | set(_MULTIWORD)
    words = []
    for w in m.group(2).split("_"):
        if words and words[-1] == "":
            words[-1] = "_" + w
        else:
            words.append(w)
    ops, i = [], 0
    while i < len(words):
        j = next((j for j in range(len(words), i + 1, -1) if "_".join(words[i:j]) in vocab), i + 1)
        ops.append("_".join(words[i:j]))
        i = j
    return _TRITON_KINDS[m.group(1)], ops


def test_fused_ops_of_a_2000_word_kernel_name_is_quick():
    """A Triton kernel name of 2,000 words (in a trace anyone can import) took ~22 s on every rerun of Compile vs
    eager: the words were joined again for every run of them. The op names known here include one of 2,000 words
    that matches all but its last word, the worst case for a word-by-word lookup."""
    import time
    from profiling_core.analyses import fused_ops
    words = ["add"] * 2000
    name = "triton_poi_fused_" + "_".join(words) + "_0"
    known = ["aten::" + "_".join(words[:-1] + ["mul"]), "aten::add_add_add"]
    t0 = time.perf_counter()
    got = fused_ops(name, known)
    assert time.perf_counter() - t0 < 2.0  # (the cubic join took ~22 s)
    assert got == ("pointwise", ["add_add_add"] * 666 + ["add", "add"])


@settings(max_examples=400, deadline=None)
@given(words=hst.lists(hst.sampled_from(["add", "mm", "view", "unsafe", "native", "layer", "norm", "", "1", "x"]),
                       min_size=1, max_size=14),
       known=hst.lists(hst.lists(hst.sampled_from(["add", "mm", "view", "unsafe", "", "x", "layer", "norm"]),
                                 min_size=1, max_size=5).map("_".join), max_size=6),
       kind=hst.sampled_from(["poi", "red", "per", "tem", "for"]), suffix=hst.sampled_from(["", "_0", "_12"]))
def test_fused_ops_gives_the_references_answer_on_small_names(words, known, kind, suffix):
    from profiling_core.analyses import fused_ops
    name = f"triton_{kind}_fused_" + "_".join(words) + suffix
    known = [("aten::" if i % 2 else "") + k for i, k in enumerate(known)]
    assert fused_ops(name, known) == _fused_ops_oracle(name, known)


def test_triton_fusions_of_the_compiled_h200_run_by_a_plain_scan():
    """4095² bf16 under torch.compile: Inductor padded the operands (two triton_poi_fused_mm_0 copies a step) and
    fused the bias add into one kernel after the GEMM."""
    from profiling_core.analyses import triton_fusions
    path = DATA / "h200_diag" / "bf16_4095_compile.json"
    evs = json.loads(path.read_text())["traceEvents"]
    steps = sum(1 for e in evs if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
                and e.get("cat") != "gpu_user_annotation")
    triton = [e for e in evs if e.get("cat") == "kernel" and e["name"].startswith("triton_")]
    with open_trace(path, engine="sqlite") as s:
        f = triton_fusions(s).set_index("kernel")
    assert sorted(f.index) == sorted({e["name"] for e in triton})
    assert f.loc["triton_poi_fused_mm_0", "per_step"] == sum(e["name"] == "triton_poi_fused_mm_0"
                                                             for e in triton) / steps == 2
    assert f.loc["triton_poi_fused_add_mm_1", "fused_ops"] == "add + mm"
    assert f["total_us"].sum() == pytest.approx(sum(e["dur"] for e in triton))


def test_chain_subtree_keeps_an_op_its_calls_and_the_gpu_ops_they_launched():
    from profiling_core.analyses import chain_subtree, dispatch_chain
    with open_trace(DATA / "h200_diag" / "bf16_4096.json", engine="sqlite") as s:
        chain = dispatch_chain(s)
    sub = chain_subtree(chain, "aten::mm")
    assert sub["name"].tolist() == ["aten::mm", "cudaMemsetAsync", "cuLaunchKernelEx", "Memset (Device)",
                                    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"]
    assert sub[sub["lane"] == "cpu"]["depth"].tolist() == [0, 1, 1]
    assert chain_subtree(chain, "aten::add")["name"].str.contains("CUDAFunctor_add").sum() == 1
    with pytest.raises(ValueError, match="holds 1 slice\\(s\\) named 'aten::mm'; asked for number 1"):
        chain_subtree(chain, "aten::mm", 1)


def test_kernel_occurrences_in_a_step_follow_a_plain_scan():
    """TraceLens' Qwen trace launches one kernel up to 168 times in its one step: ``occurrence`` numbers each name's
    launches 0, 1, 2, ... in GPU time order, as a scan of the JSON pairing each kernel with its launch call by
    ``args.correlation`` finds them (the launch call inside the CPU ProfilerStep's window)."""
    import collections
    path = DATA / "traces" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    with gzip.open(path) as f:
        ev = json.load(f)["traceEvents"]
    (step,) = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "user_annotation"
               and str(e.get("name")).startswith("ProfilerStep#")]
    lo, hi = step["ts"], step["ts"] + step["dur"]
    launches = {e["args"]["correlation"]: e for e in ev if e.get("ph") == "X"
                and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernels = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"
                      and lo <= launches.get(e["args"]["correlation"], {"ts": -1})["ts"] < hi), key=lambda e: e["ts"])
    want = collections.defaultdict(list)
    for e in kernels:
        want[e["name"]].append(round(e["dur"], 3))
    got = kernel_durations_by_step(session(path))
    assert set(got["step"]) == {6} and len(got) == len(kernels)
    for name, g in got.groupby("name"):
        assert g["occurrence"].tolist() == list(range(len(want[name])))
        assert g.sort_values("occurrence")["dur_us"].round(3).tolist() == want[name]
    assert max(len(v) for v in want.values()) == 168


def test_a_streams_own_waits_are_not_cpu_time():
    """``cuda_sync`` events ("Event Sync", "Stream Wait Event", "Context Sync") sit on the GPU's lanes: they are a
    stream waiting, not CPU time. A plain scan of the multi-stream trace finds which names only ever come as such
    events; none of them is a row of the table's CPU lane."""
    path = Path(__file__).parent / "data" / "traces" / "event_sync_trace.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    cats: dict = {}
    for e in events:
        if e.get("ph") == "X":
            cats.setdefault(e["name"], set()).add(e.get("cat"))
    waits = {n for n, c in cats.items() if c == {"cuda_sync"}}
    assert waits >= {"Event Sync", "Stream Wait Event"}
    with open_trace(path, engine="sqlite") as s:
        t = analyze(s).profiler_table
    assert not set(t.loc[t["lane"] == "cpu", "name"]) & waits


@pytest.mark.parametrize("name", ["gaunernst_bert-small-uncased__1016001.json.gz", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"])
def test_self_cpu_time_fits_in_the_threads_time(name):
    """These traces' ProfilerStep is entered inside a Python frame and left outside it, so it cannot nest on its
    thread's track and sits on a track of its own, with no children: its whole 4.43 ms (BERT) counted as its own,
    beside its ops' own time on the same thread, and the table's self CPU time summed to more than the thread was
    busy. A plain scan of the JSON: per thread, the union of its CPU slices' intervals bounds the self time."""
    path = Path(__file__).parent / "data" / "traces" / name
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", "trace", "ac2g", "flow"}
    spans: dict = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") not in gpu_cats and e.get("dur", 0) > 0:
            spans.setdefault((e["pid"], e["tid"]), []).append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    busy_us = 0.0
    for iv in spans.values():
        end = float("-inf")
        for a, b in sorted(iv):
            busy_us += max(0.0, b - max(a, end))
            end = max(end, b)
    with open_trace(path, engine="sqlite") as s:
        t = analyze(s).profiler_table
    cpu = t[t["lane"] == "cpu"]
    assert cpu["self_cpu_us"].sum() <= busy_us * 1.0001
    step = cpu[cpu["name"] == "ProfilerStep*"].iloc[0]
    assert step["self_cpu_us"] < 0.5 * step["cpu_total_us"]


def _occupancy_by_scan(path) -> dict[str, int]:
    """{kernel name: launches an occupancy query sized}, by a plain scan of the JSON: a kernel's launch call (a
    runtime call whose args.correlation is a kernel's) sits in the innermost op enclosing it in time on its thread
    (runtime calls and GPU ops are no ops); it counts when a query in that same op started after the previous kernel
    launch call in that op and no later than it."""
    from conftest import scan_trace
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    runtime = [e for e in xs if str(e.get("cat", "")).lower() in LAUNCH_CATS]
    kernels = {e["args"]["correlation"]: e["name"] for e in xs if str(e.get("cat", "")).lower() == "kernel"
               and "correlation" in e.get("args", {})}
    ops: dict = {}
    for e in xs:
        if str(e.get("cat", "")).lower() not in LAUNCH_CATS | GPU_CATS:
            ops.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    starts = {k: np.array([o["ts"] for o in v], dtype=float) for k, v in ops.items()}
    ends = {k: np.array([o["ts"] + o["dur"] for o in v], dtype=float) for k, v in ops.items()}
    durs = {k: np.array([o["dur"] for o in v], dtype=float) for k, v in ops.items()}

    def innermost(call):
        k = (call.get("pid"), call.get("tid"))
        if k not in ops:
            return None
        hit = np.flatnonzero((starts[k] <= call["ts"]) & (ends[k] >= call["ts"] + call["dur"]))
        return None if not len(hit) else id(ops[k][hit[np.argmin(durs[k][hit])]])

    by_op: dict = {}
    for c in runtime:
        is_query = c["name"].startswith(("cudaOccupancy", "cuOccupancy", "hipOccupancy"))
        if is_query or c.get("args", {}).get("correlation") in kernels:
            op = innermost(c)
            if op is not None:
                by_op.setdefault(op, []).append(c)
    want: dict[str, int] = {}
    for calls in by_op.values():
        queried = None  # the start of the latest query since the last kernel launch
        for c in sorted(calls, key=lambda c: (c["ts"], not c["name"].startswith(("cudaOcc", "cuOcc", "hipOcc")))):
            if c["name"].startswith(("cudaOccupancy", "cuOccupancy", "hipOccupancy")):
                queried = c["ts"]
                continue
            if queried is not None:
                name = kernels[c["args"]["correlation"]]
                want[name] = want.get(name, 0) + 1
            queried = None
    return want


@pytest.mark.parametrize("path", [
    # ResNet-50 on a V100 (2021): the split-K reduction and cuDNN's winograd kernels are launched after the sgemm
    # under the same op, with no query of their own
    DATA / "traces" / "worker0.1623143089861.pt.trace.json.gz",
    # HTA's A100 control trace: five launch calls start inside a call above them and end after it, so the reader
    # could not nest them in their aten::mm
    DATA / "big" / "control.json.gz",
    # AlexNet on an A100: a memset of cuBLAS' workspace is launched between the query and the sgemm it sized
    DATA / "third_party" / "benchmark_result_2869224_1695835535_trace.json.gz",
], ids=["resnet50", "control", "alexnet"])
def test_an_occupancy_query_sizes_the_kernel_launch_that_follows_it_not_every_later_one(path):
    want = _occupancy_by_scan(path)
    s = session(path)
    got = launch_paths(s)
    got = got[got["category"] == "kernel"].set_index("name")["occupancy_queries"]
    assert {n: int(v) for n, v in got.items() if v} == want
    sql = s.query(load_query("launch_path"))
    sql = sql[sql["gpu_category"] == "kernel"].groupby("gpu_name")["with_occupancy_query"].sum()
    assert {n: int(v) for n, v in sql.items() if v} == want
    assert any(n.startswith(("volta_sgemm", "ampere_sgemm")) for n in want)
    assert not any("winograd" in n.lower() or "splitK" in n for n in want)  # launched after the sized sgemm
