"""The app's analyses and findings on real H200 traces made by the app (tests/data/h200_app), checked against
plain JSON scans of the same files written here, independently of profiling_core.

Nothing below is an expected value copied from the code under test: every reference number is computed in this
file from the raw ``traceEvents`` (or, for the profiler table, from the ``.txt`` table torch itself wrote).
"""
from __future__ import annotations

import json
import re
import statistics
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import steady

from profiling_core import open_trace
from profiling_core.analyses import analyze
from profiling_core.explain.questions import findings

DATA = Path(__file__).parent / "data" / "h200_app"
NAMES = sorted(p.name[:-len(".json")] for p in DATA.glob("*.json") if not p.name.endswith(".meta.json"))
GEMM = re.compile(r"^nvjet_")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
TOL = 0.005  # µs: the library keeps integer ns, the JSON has fractional µs


# --- plain scans (no profiling_core) ----------------------------------------------------------------------------

@lru_cache(maxsize=None)
def events(name: str) -> tuple:
    return tuple(json.loads((DATA / f"{name}.json").read_text())["traceEvents"])


@lru_cache(maxsize=None)
def meta(name: str) -> dict:
    return json.loads((DATA / f"{name}.meta.json").read_text())


def xs(name: str, *cats: str) -> list[dict]:
    return sorted((e for e in events(name) if e.get("ph") == "X" and e.get("cat") in cats), key=lambda e: e["ts"])


def cpu_steps(name: str) -> list[dict]:
    return [e for e in xs(name, "user_annotation") if e["name"].startswith("ProfilerStep#")]


def gpu_ops_plain(name: str) -> list[dict]:
    return xs(name, *GPU_CATS)


def launches_by_corr(name: str) -> dict:
    return {e["args"]["correlation"]: e for e in xs(name, "cuda_runtime", "cuda_driver")
            if "correlation" in e.get("args", {})}


def flow_ids(name: str) -> set:
    """Ids of complete ac2g flows (an ``s`` and an ``f``): a cold trace has a dangling ``s`` on
    cudaDeviceSynchronize that leads to no GPU op."""
    ends = {ph: {e["id"] for e in events(name) if e.get("ph") == ph and e.get("cat") == "ac2g"} for ph in "sf"}
    return ends["s"] & ends["f"]


def launch_of(name: str, op: dict):
    corr = op.get("args", {}).get("correlation")
    return launches_by_corr(name).get(corr) if corr in flow_ids(name) else None


def step_of(name: str, ts: float):
    for s in cpu_steps(name):
        if s["ts"] <= ts <= s["ts"] + s["dur"]:
            return s
    return None


def union_us(intervals) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def gemm_name(name: str) -> str:
    names = {e["name"] for e in xs(name, "kernel") if GEMM.match(e["name"])}
    assert len(names) == 1, names
    return names.pop()


# --- the app ------------------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def report(name: str):
    with open_trace(str(DATA / f"{name}.json"), engine="sqlite") as tp:
        return analyze(tp)


@lru_cache(maxsize=None)
def finding(name: str, fid: str):
    return {f.id: f for f in findings(report(name))}[fid]


def names_with(word: str) -> list[str]:
    return [n for n in NAMES if word in n]


# --- tests --------------------------------------------------------------------------------------------------------

def test_fixture_set_is_small_and_complete():
    assert len(NAMES) >= 8
    total = sum(p.stat().st_size for p in DATA.iterdir())
    assert total <= 3 * 1024 * 1024
    for n in NAMES:
        assert (DATA / f"{n}.txt").exists() and (DATA / f"{n}.meta.json").exists()
        assert meta(n)["device"]["name"] == "NVIDIA H200"
    readme = (DATA / "README.md").read_text()
    assert all(meta(n)["run_id"] in readme for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_steps_and_their_cpu_time(name):
    plain = cpu_steps(name)
    st = report(name).steps
    assert len(st) == len(plain) == meta(name)["config"]["active"]
    assert list(st["step"]) == [int(e["name"].split("#")[1]) for e in plain]
    assert list(st["cpu_dur_us"]) == pytest.approx([e["dur"] for e in plain], abs=TOL)


@pytest.mark.parametrize("name", NAMES)
def test_kernels_and_launches_per_step(name):
    kernels = {e["name"]: 0 for e in cpu_steps(name)}
    launch_ids = {e["name"]: set() for e in cpu_steps(name)}
    for op in gpu_ops_plain(name):
        la = launch_of(name, op)
        s = step_of(name, la["ts"]) if la else None
        if s is None:
            continue
        launch_ids[s["name"]].add(la["args"]["correlation"])
        if op["cat"] == "kernel":
            kernels[s["name"]] += 1
    st = report(name).steps
    assert list(st["kernels"]) == list(kernels.values())
    assert list(st["launches"]) == [len(v) for v in launch_ids.values()]


@pytest.mark.parametrize("name", NAMES)
def test_gemm_duration_statistics(name):
    g = gemm_name(name)
    durs = [e["dur"] for e in xs(name, "kernel") if e["name"] == g]
    ks = report(name).kernel_stats.set_index("name").loc[g]
    assert int(ks["count"]) == len(durs)
    assert ks["median_us"] == pytest.approx(statistics.median(durs), abs=TOL)
    assert ks["mean_us"] == pytest.approx(statistics.fmean(durs), abs=TOL)
    assert (ks["min_us"], ks["max_us"]) == pytest.approx((min(durs), max(durs)), abs=TOL)


@pytest.mark.parametrize("name", NAMES)
def test_launch_apis_are_the_calls_with_ac2g_flows(name):
    ids = flow_ids(name)
    plain = {e["name"] for e in xs(name, "cuda_runtime", "cuda_driver") if e.get("args", {}).get("correlation") in ids}
    assert set(report(name).summary["launch_apis"]) == plain
    # Per kernel: the launch call found through its flow is the one the app names.
    lp = report(name).launch_paths.set_index("name")
    for k in {e["name"] for e in xs(name, "kernel")}:
        apis = {launch_of(name, e)["name"] for e in xs(name, "kernel") if e["name"] == k and launch_of(name, e)}
        assert set(lp.loc[k, "launch_apis"].split(", ")) == apis


def gemm_launches_after_occupancy_query(name: str) -> tuple[int, int]:
    """(GEMM launches, those with a cudaOccupancy* call before them inside the same aten:: op), by hand."""
    g = gemm_name(name)
    occ = [e for e in xs(name, "cuda_runtime", "cuda_driver") if "Occupancy" in e["name"]]
    ops = [e for e in xs(name, "cpu_op") if e["name"] in ("aten::mm", "aten::bmm", "aten::addmm")]
    n = hit = 0
    for k in xs(name, "kernel"):
        la = launch_of(name, k) if k["name"] == g else None
        if la is None:
            continue
        n += 1
        parent = next((o for o in ops if o["ts"] <= la["ts"] <= o["ts"] + o["dur"]), None)
        if parent and any(parent["ts"] <= q["ts"] < la["ts"] for q in occ):
            hit += 1
    return n, hit


@pytest.mark.parametrize("name", NAMES)
def test_occupancy_queries_on_the_h200(name):
    """No occupancy query before any launch in a warm (or post-schedule-wait) trace; in a cold 0/0/3 trace cuBLAS
    queries occupancy once, before the first GEMM only (not per launch, as on the post's A100)."""
    occ = [e for e in events(name) if "Occupancy" in str(e.get("name", ""))]
    n, hit = gemm_launches_after_occupancy_query(name)
    lp = report(name).launch_paths.set_index("name")
    g = gemm_name(name)
    assert int(lp.loc[g, "occupancy_queries"]) == hit
    if meta(name)["config"]["warmup"] == 0 and meta(name)["config"]["wait"] == 0:
        assert occ and hit == 1 and n == len(cpu_steps(name))
        assert finding(name, "q6.launch_path").text.startswith("An occupancy query precedes the launch of " + g[:40])
    else:
        assert not occ and hit == 0
        assert not report(name).launch_paths["occupancy_query_before"].any()
        assert finding(name, "q6.launch_path").text.startswith("No occupancy query")
    # Whatever the warm-up, the GEMM goes through the driver's cuLaunchKernelEx (or a CUDA graph).
    gemm_launchers = {launch_of(name, e)["name"] for e in xs(name, "kernel") if e["name"] == g}
    expected = {"cudaGraphLaunch"} if "reduce-overhead" in name else {"cuLaunchKernelEx"}
    assert gemm_launchers == expected
    assert g[:40] in finding(name, "q6.launch_path").text


@pytest.mark.parametrize("name", NAMES)
def test_gpu_busy_is_the_union_of_gpu_op_intervals(name):
    ops = gpu_ops_plain(name)
    busy = union_us((e["ts"], e["ts"] + e["dur"]) for e in ops)
    gb = report(name).gpu_busy.set_index("scope")
    assert gb.loc["trace", "busy_us"] == pytest.approx(busy, abs=0.05)
    # Per step: union of the ops launched inside the step.
    per = {e["name"]: [] for e in cpu_steps(name)}
    for op in ops:
        la = launch_of(name, op)
        s = step_of(name, la["ts"]) if la else None
        if s is not None:
            per[s["name"]].append((op["ts"], op["ts"] + op["dur"]))
    assert list(report(name).steps["gpu_busy_us"]) == pytest.approx([union_us(v) for v in per.values()], abs=0.05)


@pytest.mark.parametrize("name", NAMES)
def test_launch_latency_median(name):
    first: dict = {}  # each launch call's first GPU op's wait (a CUDA graph's replay runs several, in order)
    for op in gpu_ops_plain(name):
        call = launch_of(name, op)
        if call:
            first[id(call)] = min(first.get(id(call), float("inf")), op["ts"] - call["ts"])
    assert report(name).summary["launch_latency_median_us"] == pytest.approx(statistics.median(first.values()),
                                                                               abs=TOL)


@pytest.mark.parametrize("name", NAMES)
def test_longest_sync(name):
    syncs = [e for e in xs(name, "cuda_runtime") if e["name"] == "cudaDeviceSynchronize"]
    s = max(syncs, key=lambda e: e["dur"])
    a, b = s["ts"], s["ts"] + s["dur"]
    busy = union_us((max(a, e["ts"]), min(b, e["ts"] + e["dur"])) for e in gpu_ops_plain(name)
                    if e["ts"] < b and e["ts"] + e["dur"] > a)
    ev = finding(name, "q7.sync").evidence
    assert ev["dur_us"] == pytest.approx(s["dur"], abs=TOL)
    assert ev["gpu_busy_us"] == pytest.approx(busy, abs=0.05)


@pytest.mark.parametrize("name", NAMES)
def test_compiled_regions_and_graph_launches(name):
    steps = steady(cpu_steps(name))  # (the per-step figures: the steady state's steps, after the first)
    within = lambda e: any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)  # noqa: E731
    regions = [e for e in xs(name, "user_annotation", "cpu_op") if e["name"].startswith("Torch-Compiled Region")]
    graphs = [e for e in xs(name, "cuda_runtime", "cuda_driver") if e["name"] == "cudaGraphLaunch"]
    r = report(name)
    assert r.summary["compiled_regions_per_step"] == pytest.approx(len([e for e in regions if within(e)]) / len(steps))
    assert int(r.compile_breakdown["graph_launches"].sum()) == len(graphs)
    compiled = meta(name)["config"]["compile"] != "off"
    assert bool(regions) == compiled
    assert bool(graphs) == (meta(name)["config"]["compile"] == "reduce-overhead")
    text = finding(name, "q9.compile").text
    if compiled:
        fx = {e["name"] for e in xs(name, "user_annotation", "cpu_op")
              if e["name"].startswith("## Call CompiledFxGraph")}
        assert len(fx) == 1 and "cache hit" in text
        assert finding(name, "q9.compile").evidence["graph_launches"] == len([e for e in graphs if within(e)])
    else:
        assert text.startswith("No torch.compile rows")


@pytest.mark.parametrize("name", names_with("compile") + names_with("reduce-overhead"))
def test_compile_rewrites_to_addmm_with_a_bias_gemm(name):
    ops = {e["name"] for e in xs(name, "cpu_op")}
    assert "aten::mm" not in ops and "aten::add" not in ops
    if "reduce-overhead" in name:
        # The graph replays the GEMM: no aten:: op launches it; only the input copies run eagerly.
        assert "aten::addmm" not in ops and "aten::_foreach_copy_" in ops
    else:
        assert "aten::addmm" in ops
    g = gemm_name(name)
    assert "bias" in g
    assert report(name).kernel_stats["name"].str.contains("bias").any()


@pytest.mark.parametrize("name", names_with("_b8"))
def test_batch_8_dispatches_aten_bmm(name):
    bmm = [e for e in xs(name, "cpu_op") if e["name"] == "aten::bmm"]
    assert len(bmm) == len(cpu_steps(name))
    assert not [e for e in xs(name, "cpu_op") if e["name"] == "aten::mm"]
    paths = finding(name, "q5.chain").evidence["paths"]
    assert any("aten::bmm" in p and p[-1] == gemm_name(name) for p in paths)
    t = report(name).profiler_table
    assert int(t.loc[(t["name"] == "aten::bmm") & (t["lane"] == "cpu"), "calls"].iloc[0]) == len(bmm)


@pytest.mark.parametrize("name", names_with("a20"))
def test_twenty_step_variance(name):
    g = gemm_name(name)
    per_step = []
    for s in cpu_steps(name):
        d = [op["dur"] for op in xs(name, "kernel") if op["name"] == g and launch_of(name, op)
             and step_of(name, launch_of(name, op)["ts"]) is s]
        assert len(d) == 1
        per_step.append(d[0])
    assert len(per_step) == 20
    ev = finding(name, "q8.variance").evidence
    assert ev["kernel"] == g and ev["count"] == 20
    assert ev["median_us"] == pytest.approx(statistics.median(per_step), abs=TOL)
    assert ev["mean_us"] == pytest.approx(statistics.fmean(per_step), abs=TOL)
    assert (ev["min_us"], ev["max_us"]) == pytest.approx((min(per_step), max(per_step)), abs=TOL)
    kd = report(name).kernel_durations_by_step
    assert list(kd.loc[kd["name"] == g, "dur_us"]) == pytest.approx(per_step, abs=TOL)


@pytest.mark.parametrize("name", names_with("coldwarm"))
def test_first_step_cold_vs_warm(name):
    d = [e["dur"] for e in cpu_steps(name)]
    ev = finding(name, "q3.cold_start").evidence
    assert ev["first_step_cpu_us"] == pytest.approx(d[0], abs=TOL)
    assert ev["other_steps_median_us"] == pytest.approx(statistics.median(d[1:]), abs=TOL)
    assert ev["ratio"] == pytest.approx(d[0] / statistics.median(d[1:]), rel=1e-3)


def test_cold_first_step_is_far_longer_than_warm():
    cold = cpu_steps("coldwarm_64_cold_eager")[0]["dur"]
    warm = cpu_steps("coldwarm_64_warm_eager")[0]["dur"]
    assert cold > 10 * warm
    assert finding("coldwarm_64_cold_eager", "q3.cold_start").evidence["first_step_cpu_us"] > 10 * finding(
        "coldwarm_64_warm_eager", "q3.cold_start").evidence["first_step_cpu_us"]


@pytest.mark.parametrize("name", names_with("sweep_") + names_with("variance"))
def test_bound_label_follows_gpu_vs_cpu_per_step(name):
    plain_cpu = statistics.median(e["dur"] for e in steady(cpu_steps(name)))  # (the steady state's steps)
    ev = finding(name, "q2.bound").evidence
    assert ev["cpu_step_median_us"] == pytest.approx(plain_cpu, abs=TOL)
    size = meta(name)["config"]["size"]
    if size <= 2048:
        assert ev["gpu_step_median_us"] < plain_cpu and ev["bound"] == "overhead-bound"
    elif size >= 8192:
        assert ev["gpu_step_median_us"] > plain_cpu and ev["bound"] == "compute-bound"


def _txt_calls(name: str) -> dict:
    """# of Calls per row name in torch's own table (.txt), for names that fit the name column."""
    out = {}
    for line in (DATA / f"{name}.txt").read_text().splitlines():
        m = re.match(r"^\s*(aten::\S+|matmul_add|cudaLaunchKernel|cuLaunchKernelEx|cudaGraphLaunch)\s+.*\s(\d+)\s*$",
                     line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_profiler_table_calls_match_torch_table(name):
    calls = _txt_calls(name)
    assert "cudaLaunchKernel" in calls or "cuLaunchKernelEx" in calls
    t = report(name).profiler_table
    cpu = t[t["lane"] == "cpu"].groupby("name")["calls"].sum()
    for row, n in calls.items():
        if row == "matmul_add":
            continue  # two rows in torch's table (CPU and GPU annotation) under one name
        assert int(cpu.get(row, 0)) == n, row


def _txt_self_cpu(name: str) -> tuple[float, dict]:
    """(the footer's "Self CPU time total", Self CPU per row) of torch's own table (.txt), in µs."""
    def us(text: str) -> float:
        number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
        return float(number) * {"us": 1.0, "ms": 1e3, "s": 1e6}[unit]

    text = (DATA / f"{name}.txt").read_text()
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(aten::\S+|Activity Buffer Request)\s+[\d.]+%\s+(\S+)\s", line)
        if m:
            rows[m.group(1)] = us(m.group(2))
    return us(re.search(r"Self CPU time total: (\S+)", text).group(1)), rows


@pytest.mark.parametrize("name", NAMES)
def test_profiler_table_self_cpu_adds_up_to_the_threads_time_as_in_torchs_table(name):
    """Every instant of the loop thread's recorded time is some row's self CPU time, once: the rows add up to the
    union of that thread's CPU slices (a plain scan) and to the footer of torch's own table. The profiler's
    "Activity Buffer Request" is written with pid -1, tid 0, inside the first aten::mm of the loop's thread; torch
    nests it there, so aten::mm's self CPU time is its own, without the request's (one row each, as in torch's)."""
    cpu_cats = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "overhead")
    xs_ = [e for e in events(name) if e.get("ph") == "X" and e.get("cat") in cpu_cats]
    lanes: dict = {}
    for e in xs_:
        if e["pid"] != -1:
            lanes.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    loop = (cpu_steps(name)[0]["pid"], cpu_steps(name)[0]["tid"])
    for e in xs_:
        if e["pid"] == -1:  # the profiler's own slices lie inside an op of the loop's thread
            assert any(b <= e["ts"] and e["ts"] + e["dur"] <= f for b, f in lanes[loop]), e["name"]
    plain = sum(union_us(v) for v in lanes.values())
    footer, rows = _txt_self_cpu(name)
    t = report(name).profiler_table
    cpu = t[t["lane"] == "cpu"].groupby("name")["self_cpu_us"].sum()
    assert float(cpu.sum()) == pytest.approx(plain, abs=0.01)
    assert float(cpu.sum()) == pytest.approx(footer, abs=max(1.0, 1e-3 * footer))
    for row, us in rows.items():
        assert float(cpu.get(row, 0.0)) == pytest.approx(us, abs=max(0.002, 5e-4 * us)), row


# --- docs/FINDINGS.md quotes the findings as the code writes them -------------------------------------------------

def doc_quotes(heading: str) -> dict[str, str]:
    """The quoted findings (``> label: *"…"*``) in the section of docs/FINDINGS.md that starts with ``heading``,
    by label, each quote's lines joined."""
    text = (Path(__file__).parent.parent / "docs" / "FINDINGS.md").read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    paragraphs = re.split(r"\n>?\n", section)  # a quote's paragraphs are parted by a bare ">" line
    joined = [" ".join(ln[2:] for ln in p.strip().splitlines()) for p in paragraphs if p.strip().startswith("> ")]
    return dict(m.groups() for p in joined if (m := re.fullmatch(r'([^:]+): \*"(.*)"\*', p)))


def plain_us(number: str, unit: str) -> float:
    return float(number) * {"µs": 1.0, "ms": 1e3, "s": 1e6}[unit]


@pytest.mark.parametrize("label,name", [("64² cold", "coldwarm_64_cold_eager"), ("64² warm", "coldwarm_64_warm_eager")])
def test_findings_doc_quotes_the_current_q3_text(label, name):
    quote = doc_quotes("## Q3.")[label]
    text = finding(name, "q3.cold_start").text
    for part in filter(None, (p.strip() for p in quote.split("…"))):
        assert part in text, (part, text)


@pytest.mark.parametrize("label,name", [(f"{n}²", f"sweep_{n}_warm_eager") for n in (64, 2048, 4096, 8192)])
def test_findings_doc_quotes_the_current_q2_text(label, name):
    quote = doc_quotes("## Q2.")[label]
    text = finding(name, "q2.bound").text
    for part in filter(None, (p.strip() for p in quote.split("…"))):
        assert part in text, (part, text)


def test_the_q2_verdict_and_its_evidence_are_told_apart_where_they_differ():
    # 2048²: the verdict's idle share (1 − GPU work ÷ CPU time) and the busy share measured inside the step windows
    # do not add up to 100 %; the text must say they are two measures, not one.
    f = finding("sweep_2048_warm_eager", "q2.bound")
    ev = f.evidence
    assert round(100 * ev["gpu_idle_share"]) + round(100 * ev["busy_in_window"], 1) < 95
    assert f"idle {100 * ev['gpu_idle_share']:.0f}% of each step" in f.text
    assert f"measured another way: inside each step's own CPU window the GPU was busy a median " \
           f"{100 * ev['busy_in_window']:.1f}%" in f.text
    assert ev["gpu_idle_share"] == pytest.approx(1 - ev["gpu_us_per_step"] / ev["cpu_us_per_step"], abs=0.01)


def test_findings_doc_says_most_only_for_more_than_half():
    quotes = doc_quotes("## Q3.")
    assert len(quotes) == 4, quotes
    for label, quote in quotes.items():
        if "Most of the extra time" in quote:
            m = re.search(r"Most of the extra time \(([\d.]+) (µs|ms|s) of ([\d.]+) (µs|ms|s)\)", quote)
            assert m, f"{label}: says most without the share: {quote}"
            assert plain_us(*m.group(1, 2)) > plain_us(*m.group(3, 4)) / 2, label
