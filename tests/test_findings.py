"""Findings: their evidence numbers against independent JSON scans and torch's own tables, and their text says
what the trace in hand shows (not a fixed story)."""
from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from profiling_core.findings import NO_GPU_TEXT, Finding, findings

try:
    from test_analyses import DATA, H200, THIRD, _union, report, scan, session
except ImportError:  # tests/ made a package
    from tests.test_analyses import DATA, H200, THIRD, _union, report, scan, session

CPU_TRACE = DATA / "cpu" / "64_fp32_warm_eager.json"


def h200(name: str) -> Path:
    return DATA / "h200" / f"{name}.json"


def by_id(path) -> dict[str, Finding]:
    return {f.id: f for f in findings(report(path))}


@pytest.mark.parametrize("name", H200)
def test_every_question_is_answered_on_h200(name):
    fs = findings(report(h200(name)))
    assert {f.question for f in fs} == set(range(1, 11))
    assert len({f.id for f in fs}) == len(fs)
    for f in fs:
        assert f.text and f.title and isinstance(f.evidence, dict)
        assert "nan" not in f.text.lower().replace("nanos", "")


def test_findings_accept_a_session_or_a_report():
    path = h200("64_bf16_cold_eager")
    assert [f.to_dict() for f in findings(session(path))] == [f.to_dict() for f in findings(report(path))]


def test_finding_question_is_checked():
    with pytest.raises(ValueError, match="1..10"):
        Finding("x", 11, "t", "text")


# --- evidence against the scan --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", H200)
def test_q2_bound_evidence(name):
    rows = scan(h200(name)).step_rows()
    ev = by_id(h200(name))["q2.bound"].evidence
    assert ev["steps"] == len(rows)
    assert ev["cpu_step_median_us"] == pytest.approx(statistics.median(r["cpu_dur_us"] for r in rows), abs=0.002)
    assert ev["gpu_step_median_us"] == pytest.approx(statistics.median(r["gpu_busy_us"] for r in rows), abs=0.01)
    expected = "compute-bound" if name.startswith("4096_bf16_warm_eager") else "overhead-bound"
    assert ev["bound"] == expected


@pytest.mark.parametrize("name", H200)
def test_q3_cold_start_evidence(name):
    rows = scan(h200(name)).step_rows()
    ev = by_id(h200(name))["q3.cold_start"].evidence
    assert ev["first_step"] == rows[0]["step"]
    assert ev["first_step_cpu_us"] == pytest.approx(rows[0]["cpu_dur_us"], abs=0.002)
    assert ev["other_steps_median_us"] == pytest.approx(statistics.median(r["cpu_dur_us"] for r in rows[1:]),
                                                        abs=0.002)


def _self_us(sc, ev):
    kids = [e for e in sc.xs if e is not ev and e.get("tid") == ev.get("tid") and e.get("pid") == ev.get("pid")
            and ev["ts"] <= e["ts"] and e["ts"] + e["dur"] <= ev["ts"] + ev["dur"]]
    direct = [k for k in kids if not any(o is not k and o["ts"] <= k["ts"] and k["ts"] + k["dur"] <= o["ts"] + o["dur"]
                                         for o in kids)]
    return ev["dur"] - sum(k["dur"] for k in direct)


@pytest.mark.parametrize("name", ["64_bf16_cold_eager", "4096_bf16_warm_eager_a20"])
def test_q3_names_the_slice_that_grew(name):
    sc = scan(h200(name))
    ev = by_id(h200(name))["q3.cold_start"].evidence
    first_mm = min(sc.named("aten::mm"), key=lambda e: e["ts"])
    assert ev["largest_excess_slice"] == "aten::mm"
    assert ev["largest_excess_self_us"] == pytest.approx(_self_us(sc, first_mm), abs=0.01)


@pytest.mark.parametrize("name", H200)
def test_q4_offset_evidence(name):
    sc = scan(h200(name))
    lat = [g["ts"] - l["ts"] for l, g in sc.pairs]
    ev = by_id(h200(name))["q4.offset"].evidence
    assert ev["pairs"] == len(lat)
    assert ev["median_us"] == pytest.approx(statistics.median(lat), abs=0.003)
    assert ev["max_us"] == pytest.approx(max(lat), abs=0.003)


def test_q4_says_the_queue_grows_when_it_does():
    grows = by_id(h200("4096_bf16_warm_eager_a20"))["q4.offset"]
    assert "queues up" in grows.text
    assert grows.evidence["activity_buffer_request_us"] == pytest.approx(358.783, abs=0.002)
    assert "queues up" not in by_id(h200("64_bf16_cold_eager"))["q4.offset"].text


@pytest.mark.parametrize("name", H200)
def test_q6_launch_path_is_what_this_trace_shows(name):
    sc = scan(h200(name))
    apis: dict[str, set] = {}
    for l, g in sc.pairs:
        if g["cat"] == "kernel":
            apis.setdefault(g["name"], set()).add(l["name"])
    f = by_id(h200(name))["q6.launch_path"]
    assert {k: set(v.split(", ")) for k, v in f.evidence["kernels"].items()} == apis
    # the H200 (cuBLAS 13) issues no occupancy query before the GEMM: the finding must say so
    assert not any(e["name"].startswith("cudaOccupancy") for e in sc.xs)
    assert f.evidence["occupancy_query_kernels"] == []
    assert f.text.startswith("No occupancy query")
    for api in set().union(*apis.values()):
        assert api in f.text


def test_q6_on_an_older_trace_reports_the_occupancy_query():
    f = by_id(DATA / "third_party" / "gpu_metrics_input.json")["q6.launch_path"]
    assert "volta_sgemm_128x32_nt" in f.evidence["occupancy_query_kernels"]
    assert f.text.startswith("An occupancy query precedes")


@pytest.mark.parametrize("name", H200)
def test_q7_sync_evidence(name):
    sc = scan(h200(name))
    (y,) = sc.named("cudaDeviceSynchronize")
    busy = _union((max(g["ts"], y["ts"]), min(g["ts"] + g["dur"], y["ts"] + y["dur"])) for g in sc.gpu
                  if g["ts"] < y["ts"] + y["dur"] and g["ts"] + g["dur"] > y["ts"])
    ev = by_id(h200(name))["q7.sync"].evidence
    assert ev["dur_us"] == pytest.approx(y["dur"], abs=0.002)
    assert ev["gpu_busy_us"] == pytest.approx(busy, abs=0.01)
    assert ev["idle_pct"] == pytest.approx(100 * (1 - busy / y["dur"]), abs=0.01)


@pytest.mark.parametrize("name", H200)
def test_q8_variance_evidence(name):
    per: dict[str, list[float]] = {}
    for e in scan(h200(name)).gpu:
        if e["cat"] == "kernel":
            per.setdefault(e["name"], []).append(e["dur"])
    top = max(per, key=lambda n: sum(per[n]))
    ev = by_id(h200(name))["q8.variance"].evidence
    assert ev["kernel"] == top and ev["count"] == len(per[top])
    assert ev["median_us"] == pytest.approx(statistics.median(per[top]), abs=0.002)
    assert ev["min_us"] == pytest.approx(min(per[top]), abs=0.002)
    assert ev["max_us"] == pytest.approx(max(per[top]), abs=0.002)


@pytest.mark.parametrize("name", H200)
def test_q9_compile_evidence(name):
    sc = scan(h200(name))
    regions = [e for e in sc.xs if e["name"].startswith("Torch-Compiled Region")]
    hashes = {e["name"].split()[3] for e in sc.xs if e["name"].startswith("## Call CompiledFxGraph")}
    f = by_id(h200(name))["q9.compile"]
    assert f.evidence["compiled_regions"] == len(regions)
    assert f.evidence["memcpy_dtod"] == sum(1 for e in sc.gpu if e["name"].startswith("Memcpy DtoD"))
    assert f.evidence["graph_launches"] == len(sc.named("cudaGraphLaunch"))
    if regions:
        assert set(f.evidence["fx_graph_hashes"]) == hashes and len(hashes) == 1
        assert "cache hit" in f.text
    else:
        assert f.text.startswith("No torch.compile rows")


@pytest.mark.parametrize("name", [n for n in H200 if "compile" in n])
def test_q10_compile_cost_evidence(name):
    sc = scan(h200(name))
    ev = by_id(h200(name))["q10.compile_cost"].evidence
    regions = sorted(e["dur"] for e in sc.xs if e["name"].startswith("Torch-Compiled Region"))
    assert ev["compiled_region_us"] == pytest.approx(statistics.median(regions), abs=0.002)
    assert ev["cpu_step_median_us"] == pytest.approx(statistics.median(s["dur"] for s in sc.steps), abs=0.002)


def _txt_self_cuda_sum(path: Path) -> float:
    total = 0.0
    for line in path.read_text().splitlines():
        parts = line[55:].split()
        if len(parts) == 10 and parts[-1].isdigit():
            m = re.fullmatch(r"([\d.]+)(us|ms)", parts[5])
            total += float(m.group(1)) * (1000.0 if m.group(2) == "ms" else 1.0)
    return total


@pytest.mark.parametrize("name", [n for n in H200 if n != "4096_bf16_warm_eager_a20"])
def test_q1_double_count_against_torchs_table(name):
    # torch's own Self CUDA column, summed over rows, against the union of GPU intervals from the JSON
    ev = by_id(h200(name))["q1.double_count"].evidence
    assert ev["sum_self_device_us"] == pytest.approx(_txt_self_cuda_sum(h200(name).with_suffix(".txt")), abs=0.05)
    sc = scan(h200(name))
    assert ev["gpu_busy_us"] == pytest.approx(_union((e["ts"], e["ts"] + e["dur"]) for e in sc.gpu), abs=0.01)
    assert ev["ratio"] > 2 and "matmul_add" in ev["gpu_annotation_rows"]


def test_q5_chain_evidence_cold_eager():
    ev = by_id(h200("64_bf16_cold_eager"))["q5.chain"].evidence
    assert ev["step"] == 4
    assert ["ProfilerStep#4", "matmul_add", "aten::matmul", "aten::mm", "cuLaunchKernelEx",
            "nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT"] in ev["paths"]


# --- no GPU lane ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [CPU_TRACE, DATA / "third_party" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"],
                         ids=lambda p: p.name)
def test_cpu_traces_say_there_is_no_gpu_lane(path):
    fs = by_id(path)
    for fid in ("q2.bound", "q4.offset", "q6.launch_path", "q8.variance"):
        assert NO_GPU_TEXT in fs[fid].text, fid
    assert "occupancy" not in fs["q6.launch_path"].text.lower()
    assert fs["q2.bound"].evidence["gpu_ops"] == 0
    assert fs["q2.bound"].evidence["steps"] == len(scan(path).steps)


@pytest.mark.parametrize("path", THIRD, ids=lambda p: p.name)
def test_findings_hold_on_third_party_traces(path):
    fs = findings(report(path))
    assert fs and all(1 <= f.question <= 10 for f in fs)
    assert any(f.question == 4 for f in fs)
