"""Verdicts that hold beyond the study's matmul: a grid of synthetic traces built to break them, each with the
verdict written here, and properties every test trace must keep (no verdict contradicts its own evidence)."""
from __future__ import annotations

import collections
import json
import re
import statistics
from pathlib import Path

import pandas as pd
import pytest

import verdict_traces as vt
from conftest import scan_trace
from test_analyses import _union
from profiling_core import analyze, diagnose, findings, open_trace
from profiling_core.analyses import DATA_WAIT_AT, GPU_BOUND_AT, STARVED_AT, basis_steps, data_wait
from profiling_core.explain.diagnosis.rules.allocator_in_step import ALLOCS, FREES
from profiling_core.explain.diagnosis.rules.exposed_communication import EXPOSED_AT
from profiling_core.store import DevicePeaks

DATA = Path(__file__).parent / "data"
H200_PEAKS = DevicePeaks.from_dict(json.loads((DATA / "h200_verdicts" / "peaks.json").read_text()))


def run(path, peaks=H200_PEAKS, config=None):
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        return r, {f.id: f for f in findings(r)}, diagnose(s, r, config, peaks)


def rules(d) -> dict:
    return {x.rule: x for x in d.diagnoses}


def steps_of(events):
    return [(e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]


# --- the grid -------------------------------------------------------------------------------------------------------

def test_a_gpu_bound_step_whose_queue_drifts_is_compute_bound(tmp_path):
    path = vt.gpu_bound_with_drift(tmp_path / "t.json")
    r, f, d = run(path)
    q2 = f["q2.bound"]
    assert q2.evidence["bound"] == "compute-bound" and q2.evidence["gpu_us_per_step"] == pytest.approx(21000.0)
    # each step's first kernel, from the JSON: its start after its launch call's (the queue's length at that step)
    events = scan_trace(path)
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"}
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: launch[e["args"]["correlation"]])
    waits = [k["ts"] - launch[k["args"]["correlation"]] for k in kernels[::3]]
    assert waits[-1] > 3 * waits[0]  # the rule's 3×, by hand
    assert q2.evidence["cpu_us_per_step"] < 400 and q2.evidence["queue"] == "grows" == f["q4.offset"].evidence["queue"]
    assert "compute-bound" in q2.text and "overhead-bound" not in q2.text
    assert "gpu_starved" not in rules(d)


def _starved_by_scan(events) -> list[float]:
    """Per step, from the JSON alone: the µs of the step's window in which no kernel ran and the next kernel's
    launch call (paired by correlation) had not yet begun: the GPU waiting for the CPU. The time before the first
    kernel is not counted (the trace cannot show whether the GPU was idle then)."""
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"
              and "correlation" in e.get("args", {})}
    out = []
    for a, b in steps_of(events):
        idle_from, starved = float("-inf"), 0.0
        for k in kernels:
            lo, hi = max(idle_from, a), min(k["ts"], b)
            if idle_from > float("-inf") and hi > lo and launch[k["args"]["correlation"]] >= idle_from:
                starved += hi - lo
            idle_from = max(idle_from, k["ts"] + k["dur"])
        starved += max(0.0, b - max(idle_from, a))
        out.append(starved)
    return out


def test_a_step_that_waits_for_its_gpu_in_a_sync_is_compute_bound(tmp_path):
    """Its CPU time holds its GPU work (GPU work / CPU time < 1 every step), and the GPU sets the pace: the time
    blocked in cudaDeviceSynchronize while the GPU worked is not the CPU's own."""
    path = vt.gpu_bound_synced(tmp_path / "t.json")
    events = scan_trace(path)
    steps = steps_of(events)
    syncs = [sum(e["dur"] for e in events if e["name"] == "cudaDeviceSynchronize" and a <= e["ts"] < b)
             for a, b in steps]
    gpu = [sum(e["dur"] for e in events if e.get("cat") == "kernel") / len(steps)] * len(steps)
    assert all(g < b - a for g, (a, b) in zip(gpu, steps))  # the old rule's ratio: under 1
    r, f, d = run(path)
    q2 = f["q2.bound"]
    assert q2.evidence["bound"] == "compute-bound"
    assert q2.evidence["sync_wait_us_per_step"] == pytest.approx(sorted(syncs)[len(syncs) // 2], rel=0.01)
    assert "blocked in synchronize calls" in q2.text and "overhead-bound" not in q2.text
    assert "gpu_starved" not in rules(d)
    x = rules(d)["sync_in_step"]  # what removing the syncs can win: at most the GPU's idle time, not their length
    assert x.cost_us_per_step < 0.1 * x.evidence["sync_calls_us_per_step"]


def test_a_full_launch_queue_is_compute_bound_and_its_counter_case_is_not(tmp_path):
    """A CPU throttled by a full launch queue: GPU work / CPU time just under 1, the GPU never waiting for a launch:
    compute-bound. The same kernels with the CPU working before each launch: the GPU waits for every launch:
    overhead-bound. The starved time is checked against a plain scan of each trace."""
    full = vt.full_launch_queue(tmp_path / "full.json", gap_us=5.0)
    r, f, _ = run(full)
    q2 = f["q2.bound"]
    assert 0.97 < q2.evidence["gpu_to_cpu"] < GPU_BOUND_AT  # the ratio alone would say overhead-bound
    assert q2.evidence["bound"] == "compute-bound" and "never waited for a launch" in q2.text
    scan = _starved_by_scan(scan_trace(full))
    assert r.steps["gpu_starved_us"].tolist() == pytest.approx(scan, abs=0.01)
    assert max(scan[1:]) == 0.0
    paced = vt.cpu_paced(tmp_path / "paced.json")
    r, f, _ = run(paced)
    q2 = f["q2.bound"]
    assert q2.evidence["bound"] == "overhead-bound"
    scan = _starved_by_scan(scan_trace(paced))
    assert r.steps["gpu_starved_us"].tolist() == pytest.approx(scan, abs=0.01)
    assert min(scan) > 0.05 * min(r.steps["cpu_dur_us"])


@pytest.mark.parametrize("pinned", [False, True])
def test_a_host_copy_is_costed_by_the_cpu_time_it_blocks(tmp_path, pinned):
    path = vt.copy_bound(tmp_path / "t.json", pinned)
    events = scan_trace(path)
    steps = steps_of(events)
    to_pinned = {e["args"]["correlation"] for e in events if e["name"].startswith("Memcpy") and "Pinned" in e["name"]}
    calls = [e for e in events if e["name"] in ("cudaMemcpyAsync", "cudaStreamSynchronize")
             and e["args"].get("correlation") not in to_pinned  # (a call of a copy to or from pinned memory returns)
             and any(a <= e["ts"] and e["ts"] + e["dur"] <= b for a, b in steps)]
    r, _, d = run(path)
    x = rules(d)["sync_in_step"]
    blocked = sum(e["dur"] for e in calls) / len(steps)
    assert x.evidence["blocked_us_per_step"] == pytest.approx(blocked)
    if pinned:  # (a step gets no shorter than its GPU work)
        assert x.cost_us_per_step == pytest.approx(min(blocked, _room(r)))
    else:  # its GPU work is mostly the copy from pageable memory, no floor of the step: pinned, it runs faster
        assert r.summary["steady_state"]["bound"] == "copy-bound"
        assert x.cost_us_per_step == pytest.approx(blocked) and blocked > _room(r)
    (htod,) = [c for c in x.evidence["copies"] if c["kind"] == "host-to-device"]
    assert htod["bytes"] == 8 << 20 and htod["memory"] == ("pinned" if pinned else "pageable")
    assert htod["copy_us"] == (170.0 if pinned else 650.0)
    assert f"from {'pinned' if pinned else 'pageable'} memory" in x.text and "8.0 MiB" in x.text
    if pinned:  # the call returns at once (the .item() after it still waits for the queue, and that is costed)
        assert htod["call_us"] < htod["copy_us"]
    else:  # the call holds the CPU for the whole copy
        assert htod["call_us"] > htod["copy_us"]


def test_a_gpu_starved_step_with_one_launch_is_found_and_its_cpu_time_named(tmp_path):
    r, f, d = run(vt.gpu_starved_one_launch(tmp_path / "t.json"))
    x = rules(d)["gpu_starved"]
    assert x.evidence["gpu_ops_per_step"] == 1 and x.evidence["gpu_idle_share"] > 0.99
    assert x.evidence["top_cpu_ops"][0]["name"] == "## Call CompiledFxGraph f0 ##"
    assert "TorchDynamo Cache Lookup" in x.text and "reduce-overhead" in x.fix
    assert x.cost_us_per_step == pytest.approx(x.evidence["cpu_step_us"] - 1.3)
    assert f["q2.bound"].evidence["bound"] == "overhead-bound"


def test_a_gemv_like_gemm_is_judged_by_the_memory_roof(tmp_path):
    path = vt.gemm(tmp_path / "t.json", 4, 4096, 4096, "nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT", 9.0)
    _, _, d = run(path)
    (row,) = d.roofline[d.roofline["kind"] == "gemm"].to_dict("records")
    flops, nbytes = 2 * 4 * 4096 * 4096, 2 * (4 * 4096 + 4096 * 4096 + 4 * 4096)  # by hand: bf16, 2 bytes each
    assert row["roof"] == "memory" and row["intensity"] == pytest.approx(flops / nbytes)
    assert row["peak"] == pytest.approx(flops / nbytes * H200_PEAKS.bandwidth_gbs / 1e3)  # TFLOP/s the bandwidth allows
    assert row["fraction_of_peak"] == pytest.approx((nbytes / 9.0 / 1e3) / H200_PEAKS.bandwidth_gbs)  # GB/s over GB/s
    assert "unaligned_gemm_dims" not in rules(d)  # M = 4: K and N are what alignment is about


def test_an_unaligned_leading_dimension_is_named(tmp_path):
    path = vt.gemm(tmp_path / "t.json", 4, 4096, 4095,
                   "void cutlass::Kernel2<cutlass_75_tensorop_s1688gemm_bf16_64x64_32x1_nn_align1>(...)", 24.5)
    _, _, d = run(path)
    x = rules(d)["unaligned_gemm_dims"]
    assert x.evidence["unaligned"] == ["N"] and "N is not a multiple of 8" in x.text
    # (this trace records no Input Strides: the operands are taken as row-major, and the text says so)
    assert "the trace recorded no Input Strides, so the operands are taken as row-major" in x.text
    assert "built for sm75" in x.text and "operand alignment 1 element" in x.text
    assert "of its memory roof" in x.text


def _gemm_kernels_by_scan(path) -> list[dict]:
    """Each bf16 ``aten::mm`` of a trace, by a plain scan: its recorded dims and strides, the names of the kernels
    whose launch call (same correlation) starts inside it on its thread, and their µs."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    calls = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})]
    kernels = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "kernel"}
    out = []
    for op in ev:
        if op.get("cat") != "cpu_op" or op["name"] != "aten::mm":
            continue
        ks = [kernels[c["args"]["correlation"]] for c in calls if (c["pid"], c["tid"]) == (op["pid"], op["tid"])
              and op["ts"] <= c["ts"] < op["ts"] + op["dur"] and c["args"]["correlation"] in kernels]
        out.append({"dims": op["args"]["Input Dims"][:2], "strides": op["args"]["Input Strides"][:2],
                    "kernels": [k["name"] for k in ks], "us": sum(k["dur"] for k in ks)})
    return out


def test_a_gemm_s_leading_dimensions_are_read_from_the_strides_torch_records(tmp_path):
    """GEMMs of every layout, profiled by torch on the CPU: each operand's leading dimension from the ``Input Dims``
    and ``Input Strides`` torch wrote (a plain scan), against what cuBLAS would be given, by hand."""
    import torch
    import torch.nn.functional as F
    from profiling_core.analyses import gemm_leading_dims
    a, b = torch.randn(6, 10), torch.randn(10, 12)
    cases = {  # range name: (the GEMM, its op, [(operand, layout, dim, ld)] by hand)
        "row-major": (lambda: a @ b, "aten::mm", [("A", "row-major", "K", 10), ("B", "row-major", "N", 12),
                                                 ("C", "row-major", "N", 12)]),
        "x.t()": (lambda: torch.randn(10, 6).t() @ b, "aten::mm", [("A", "transposed", "M", 6),
                                                                   ("B", "row-major", "N", 12),
                                                                   ("C", "row-major", "N", 12)]),
        "linear": (lambda: F.linear(a, torch.randn(12, 10), torch.randn(12)), "aten::addmm",
                   [("A", "row-major", "K", 10), ("B", "transposed", "K", 10), ("C", "row-major", "N", 12)]),
        "a slice": (lambda: torch.randn(6, 16)[:, :10] @ b, "aten::mm", [("A", "row-major", "K", 16),
                                                                          ("B", "row-major", "N", 12),
                                                                          ("C", "row-major", "N", 12)]),
        "every other column": (lambda: torch.randn(6, 20)[:, ::2] @ b, "aten::mm",
                               [("A", "copied", "K", 10), ("B", "row-major", "N", 12), ("C", "row-major", "N", 12)]),
        "bmm": (lambda: torch.bmm(torch.randn(3, 6, 10), torch.randn(3, 10, 12)), "aten::bmm",
                [("A", "row-major", "K", 10), ("B", "row-major", "N", 12), ("C", "row-major", "N", 12)]),
        "out=": (lambda: torch.mm(a, b, out=torch.empty(12, 6).t()), "aten::mm",
                 [("A", "row-major", "K", 10), ("B", "row-major", "N", 12), ("C", "transposed", "M", 6)]),
        "one row": (lambda: torch.randn(1, 10) @ b, "aten::mm", [("A", "row-major", "K", 10),
                                                                 ("B", "row-major", "N", 12),
                                                                 ("C", "row-major", "N", 12)]),
        "one column": (lambda: torch.mm(a, torch.randn(10, 1)), "aten::mm", [("A", "row-major", "K", 10),
                                                                             ("B", "vector", "N", None),
                                                                             ("C", "vector", "N", None)]),
    }
    with torch.profiler.profile(record_shapes=True) as prof:
        for name, (gemm, _op, _want) in cases.items():
            with torch.profiler.record_function(name):
                gemm()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    ev = [e for e in scan_trace(tmp_path / "t.json") if e.get("ph") == "X"]
    for name, (_gemm, op, want) in cases.items():
        (rng,) = [e for e in ev if e["name"] == name]
        (rec,) = [e for e in ev if e["name"] == op and rng["ts"] <= e["ts"] <= rng["ts"] + rng["dur"]]
        got = gemm_leading_dims(op, rec["args"]["Input Dims"], rec["args"]["Input Strides"])
        assert [(x["operand"], x["layout"], x["dim"], x["ld"]) for x in got] == want, name
    assert gemm_leading_dims("aten::mm", [[6, 10], [10, 12]], None) is None  # no strides recorded


def test_a_cpu_gemm_of_odd_size_is_not_called_unaligned(tmp_path):
    """A bf16 (100×100) @ (100×100) profiled by torch on this CPU: no GPU kernel ran (a plain scan), so there is no
    cuBLAS kernel to be unaligned for, and the rule says nothing (it told a CPU run "cuBLAS cannot use its
    16-byte-aligned tensor-core kernels; it ran  at 0.0 TFLOP/s")."""
    import torch
    a, b = torch.randn(100, 100, dtype=torch.bfloat16), torch.randn(100, 100, dtype=torch.bfloat16)
    torch.mm(a, b)
    with torch.profiler.profile(record_shapes=True, activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for n in range(3):
            with torch.profiler.record_function(f"ProfilerStep#{n + 1}"):
                torch.mm(a, b)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    ev = scan_trace(tmp_path / "t.json")
    mms = [e for e in ev if e.get("name") == "aten::mm" and e.get("cat") == "cpu_op"]
    assert len(mms) == 3 and all(e["args"]["Input Dims"] == [[100, 100], [100, 100]] for e in mms)
    assert not [e for e in ev if e.get("cat") == "kernel"]
    _r, _f, d = run(tmp_path / "t.json", peaks=None)
    assert len(d.roofline[d.roofline["kind"] == "gemm"]) == 1  # (the GEMM is still on the roofline)
    assert "unaligned_gemm_dims" not in rules(d)


def test_which_gemm_dimension_must_be_aligned_follows_the_operands_layout():
    """On the H200, (4095×4096) @ (4096×4096) in bf16 twice: with the first operand row-major (M = 4095 spans no
    row) cuBLAS ran a 16-byte-aligned kernel; with it a transposed view (``x.t()``: its rows are 4095 elements apart,
    so M is its leading dimension) an align1 kernel, several times slower. Only the second is named, by its M."""
    row_major = _gemm_kernels_by_scan(DATA / "h200_verdicts" / "gemm_m4095_eager.json")
    transposed = _gemm_kernels_by_scan(DATA / "h200_verdicts" / "gemm_m4095_t_eager.json")
    assert {str(g["strides"]) for g in row_major} == {"[[4096, 1], [4096, 1]]"}
    assert {str(g["strides"]) for g in transposed} == {"[[1, 4095], [4096, 1]]"}
    assert all(g["dims"] == [[4095, 4096], [4096, 4096]] for g in row_major + transposed)
    assert not any("align1" in k for g in row_major for k in g["kernels"])
    assert all(len(g["kernels"]) == 1 and "_align1>" in g["kernels"][0] for g in transposed)
    slow = statistics.mean(g["us"] for g in transposed) / statistics.mean(g["us"] for g in row_major)
    assert slow > 3  # (5.3× in these runs)
    assert "unaligned_gemm_dims" not in rules(run(DATA / "h200_verdicts" / "gemm_m4095_eager.json")[2])
    x = rules(run(DATA / "h200_verdicts" / "gemm_m4095_t_eager.json")[2])["unaligned_gemm_dims"]
    assert x.evidence["unaligned"] == ["M"] and x.evidence["m"] == 4095
    assert {"operand": "A", "layout": "transposed", "dim": "M", "ld": 4095} in x.evidence["leading_dims"]
    assert x.text.startswith("A bf16 GEMM with M=4095, K=4096, N=4096: M is not a multiple of 8 and is the leading "
                             "dimension of the first operand (read transposed")
    assert "operand alignment 1 element" in x.text
    assert "M from 4095 to 4096" in x.fix and "a contiguous copy of it, whose rows span K=4096" in x.fix


def test_a_view_of_a_wider_tensor_is_named_by_its_rows_distance(tmp_path):
    """A first operand that is a slice of a wider tensor (64×1000 columns of a 64×1001 one: rows 1,001 elements
    apart) has an unaligned leading dimension though M, K and N are multiples of 8: the text says whose rows, and the
    fix pads the tensor it views rather than an extent."""
    t = vt.Trace()
    kernel = "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_nn_align1>(...)"
    for s in range(4):
        t.step(s + 1, lambda t: t.cpu("aten::mm", 60, dims=[[64, 1000], [1000, 4096]], types=vt.BF16,
                                      strides=[[1001, 1], [4096, 1]], children=lambda t: t.launch(kernel, 30.0)))
    x = rules(run(t.write(tmp_path / "t.json"))[2])["unaligned_gemm_dims"]
    assert x.evidence["unaligned"] == [] and x.evidence["m"] == 64
    assert ("M=64, K=1000, N=4096: the first operand's rows are 1001 elements apart (a view of a wider tensor), not "
            "a multiple of 8, so cuBLAS") in x.text
    assert "the first operand's rows from 1001 to 1008 elements apart (pad the tensor it is a view of" in x.fix
    assert "K from" not in x.fix and "recorded no Input Strides" not in x.text


def test_a_single_column_has_no_leading_dimension_to_align():
    """(4096×4096) @ (4096×1) on the H200: N = 1 is no multiple of 8, yet cuBLAS ran a Hopper (sm90) GEMM kernel,
    no align1 one (a plain scan); the second operand and the result are vectors, so nothing is called unaligned."""
    (g, *_rest) = gemms = _gemm_kernels_by_scan(DATA / "h200_verdicts" / "gemm_n1_eager.json")
    assert len(gemms) == 3 and g["dims"] == [[4096, 4096], [4096, 1]]
    assert all(any(k.startswith("nvjet_sm90") for k in x["kernels"]) for x in gemms)
    assert not any("align1" in k for x in gemms for k in x["kernels"])
    assert "unaligned_gemm_dims" not in rules(run(DATA / "h200_verdicts" / "gemm_n1_eager.json")[2])


def test_a_single_row_keeps_its_row_length_as_its_leading_dimension():
    """A decode step's (1×4095) @ (4095×4096) on the H200 ran cuBLAS's gemv kernel, a Hopper GEMM kernel where
    K = 4096 (the same call, a plain scan), and took longer: one row's length is still what cuBLAS aligns, so K is
    named as the first operand's leading dimension."""
    odd = _gemm_kernels_by_scan(DATA / "h200_verdicts" / "gemm_m1_k4095_eager.json")
    even = _gemm_kernels_by_scan(DATA / "h200_verdicts" / "gemm_m1_k4096_eager.json")
    assert {str(g["dims"]) for g in odd} == {"[[1, 4095], [4095, 4096]]"} and len(odd) == len(even) == 3
    assert all("gemvx" in g["kernels"][0] for g in odd)
    assert all(g["kernels"][0].startswith("nvjet_sm90") for g in even)
    assert statistics.mean(g["us"] for g in odd) > 1.2 * statistics.mean(g["us"] for g in even)  # (12.6 / 9.5 µs)
    assert "unaligned_gemm_dims" not in rules(run(DATA / "h200_verdicts" / "gemm_m1_k4096_eager.json")[2])
    x = rules(run(DATA / "h200_verdicts" / "gemm_m1_k4095_eager.json")[2])["unaligned_gemm_dims"]
    assert x.evidence["unaligned"] == ["K"]
    assert "M=1, K=4095, N=4096: K is not a multiple of 8 and is the leading dimension of the first operand," in x.text


@pytest.mark.parametrize("compile_mode, flagged", [("reduce-overhead", False), ("off", True)])
def test_a_gemm_known_only_from_the_config_is_judged_only_when_eager(tmp_path, compile_mode, flagged):
    """The study's 4095² GEMM replayed from a CUDA graph each step (no CPU op records its shapes: the roofline has
    them from the config). Compiled, Inductor may have padded it (under compile="default" the H200 ran it as 4096²:
    ``h200_diag/bf16_4095_compile``'s recorded ``aten::mm``), so nothing is called unaligned; an eager run's config
    is what ran."""
    from profiling_core import ExperimentConfig
    padded = [e["args"]["Input Dims"] for e in scan_trace(DATA / "h200_diag" / "bf16_4095_compile.json")
              if e.get("name") == "aten::mm" and e.get("cat") == "cpu_op"]
    assert padded and all(d[:2] == [[4096, 4096], [4096, 4096]] for d in padded)
    t = vt.Trace()
    for s in range(4):
        t.step(s + 1, lambda t: t.launch("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 200.0,
                                         call="cudaGraphLaunch"))
    cfg = ExperimentConfig(size=4095, dtype="bf16", compile=compile_mode, device="cuda", warmup=10,
                           record_shapes=compile_mode != "off")
    _r, _f, d = run(t.write(tmp_path / "t.json"), config=cfg)
    (row,) = d.roofline[d.roofline["kind"] == "gemm"].to_dict("records")
    assert row["flops_from"] == "config" and (row["m"], row["k"], row["n"]) == (4095, 4095, 4095)
    assert ("unaligned_gemm_dims" in rules(d)) is flagged


def test_a_compiled_odd_gemm_replayed_from_a_cuda_graph_ran_padded():
    """The study's 4095² GEMM under reduce-overhead on the H200: no CPU op records its shapes (the roofline takes
    4095 from the config), while the replayed kernels are a Triton padding copy (``triton_poi_fused_mm_0``) and an
    aligned Hopper GEMM (a plain scan): Inductor padded it, so nothing is called unaligned."""
    path = DATA / "h200_verdicts" / "mm4095_ro.json"
    ev = scan_trace(path)
    assert not [e for e in ev if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm")]
    kernels = {e["name"] for e in ev if e.get("cat") == "kernel"}
    assert "triton_poi_fused_mm_0" in kernels and "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT" in kernels
    assert not any("align1" in k for k in kernels)
    cfg = json.loads((DATA / "h200_verdicts" / "mm4095_ro.meta.json").read_text())["config"]
    assert (cfg["size"], cfg["compile"]) == (4095, "reduce-overhead")
    _r, _f, d = run(path, config=cfg)
    (row,) = d.roofline[d.roofline["kind"] == "gemm"].to_dict("records")
    assert row["flops_from"] == "config" and row["m"] == 4095
    assert "unaligned_gemm_dims" not in rules(d)


LM_HEAD = DATA / "h200_verdicts" / "lm_head_50257_eager.json"


def test_a_language_model_head_over_an_odd_vocabulary_is_unaligned_in_all_three_gemms():
    """``F.linear(x, w)`` and its backward with a vocabulary of 50,257 (GPT-2's): the forward's result (N), the
    input gradient's first operand (K) and the weight gradient's transposed first operand ``dY.t()`` (M) all have
    rows 50,257 elements apart, and each ran an align1 kernel (a plain scan). The cost counts the three; the same
    head padded to 50,304 (run beside it) took less GPU time per step by what the cost says, within 3% (the roof is
    the bf16 peak measured on one square GEMM; the padded head's GEMMs ran at 0.95-1.05 times it)."""
    odd, padded = _gemm_kernels_by_scan(LM_HEAD), _gemm_kernels_by_scan(DATA / "h200_verdicts" /
                                                                         "lm_head_50304_eager.json")
    assert len(odd) == len(padded) == 9  # three GEMMs a step, three steps
    assert all(len(g["kernels"]) == 1 and "_align1>" in g["kernels"][0] for g in odd)
    assert not any("align1" in k for g in padded for k in g["kernels"])
    _r, _f, d = run(LM_HEAD)
    x = rules(d)["unaligned_gemm_dims"]
    got = {(s["m"], s["k"], s["n"]): s["unaligned"] for s in x.evidence["shapes"]}
    assert got == {(4096, 768, 50257): ["N"], (4096, 50257, 768): ["K"], (50257, 4096, 768): ["M"]}
    assert "The cost counts 3 unaligned GEMM shapes" in x.text
    per_step = sum(g["us"] for g in odd) / 3
    saved = per_step - sum(g["us"] for g in padded) / 3
    assert saved > 0.8 * per_step  # (the padded head's GEMMs took 1,189 µs a step, the odd one's 7,908)
    assert x.cost_us_per_step == pytest.approx(saved, rel=0.03) and x.cost_us_per_step < per_step
    assert "M from 50257 to 50264" in x.fix and "K from 50257 to 50264" in x.fix and "N from 50257 to 50264" in x.fix


def test_torch_compile_pads_the_odd_vocabulary_of_a_language_model_head():
    """The same head under torch.compile on the H200: Inductor padded the vocabulary to 50,264 in every GEMM (their
    recorded dims, a plain scan), none ran an align1 kernel, and nothing is called unaligned: what the eager run's
    fix says torch.compile does."""
    gemms = _gemm_kernels_by_scan(DATA / "h200_verdicts" / "lm_head_50257_compile.json")
    assert len(gemms) == 9 and all(50264 in sum(g["dims"], []) and 50257 not in sum(g["dims"], []) for g in gemms)
    assert not any("align1" in k for g in gemms for k in g["kernels"])
    assert "unaligned_gemm_dims" not in rules(run(DATA / "h200_verdicts" / "lm_head_50257_compile.json")[2])
    assert "torch.compile can pad such GEMMs itself" in rules(run(LM_HEAD)[2])["unaligned_gemm_dims"].fix


def test_torch_compile_may_leave_one_gemm_of_the_odd_head_unpadded():
    """The same compiled head on an H100: Inductor times each GEMM padded against unpadded, and there it padded the
    forward's and the input gradient's GEMMs (to 50,264) but not the weight gradient's M=50257 one, which ran an align1
    kernel (a plain scan). The finding names that GEMM alone, as one that ran compiled and unpadded, with its padding
    by hand; and the eager run's fix says that torch.compile can pad such GEMMs, not that it will."""
    path = DATA / "h100" / "lm_head_50257_compile.json.gz"
    gemms = _gemm_kernels_by_scan(path)
    odd = [g for g in gemms if 50257 in sum(g["dims"], [])]
    assert len(gemms) == 9 and len(odd) == 3  # one a step
    assert all(g["dims"] == [[50257, 4096], [4096, 768]] and "_align1>" in g["kernels"][0] for g in odd)
    assert all(50264 in sum(g["dims"], []) and "align1" not in g["kernels"][0] for g in gemms if g not in odd)
    x = rules(run(path)[2])["unaligned_gemm_dims"]
    assert [(s["m"], s["k"], s["n"]) for s in x.evidence["shapes"]] == [(50257, 4096, 768)]
    assert x.fix.startswith("This GEMM ran under torch.compile (inside a compiled region) and unpadded")
    assert "M from 50257 to 50264" in x.fix
    eager = rules(run(LM_HEAD)[2])["unaligned_gemm_dims"].fix
    assert "where its own timing finds the padded GEMM faster" in eager and "pads such GEMMs itself" not in eager


def _attention_calls(name) -> tuple[list[list[int]], collections.Counter]:
    """By a plain scan of an H200 attention run: the query shape of each ``aten::scaled_dot_product_attention``
    call, and how often each backend's own op was called."""
    ev = scan_trace(DATA / "h200_verdicts" / f"{name}.json")
    q = [e["args"]["Input Dims"][0] for e in ev if e.get("cat") == "cpu_op"
         and e["name"] == "aten::scaled_dot_product_attention"]
    return q, collections.Counter(e["name"] for e in ev if e.get("cat") == "cpu_op"
                                  and e["name"].startswith("aten::_scaled_dot_product_"))


def _attention_verdict(name):
    """The attention_backend diagnosis of an H200 attention run, read without its config (as an imported trace)."""
    with open_trace(DATA / "h200_verdicts" / f"{name}.json", engine="sqlite") as s:
        return next(d for d in diagnose(s, compute_capability=9.0).diagnoses if d.rule == "attention_backend")


def test_flash_attention_ran_a_head_dim_that_is_not_a_multiple_of_8():
    """bf16, head_dim 100, torch's own choice on the H200: flash ran every call (it pads the head itself), so a
    head_dim that is not a multiple of 8 is never given as a reason flash could not run; fp32 at the same head_dim
    ran the efficient backend, for its dtype alone."""
    q, backends = _attention_calls("attn_hd100_eager")
    assert q == [[8, 16, 2048, 100]] * 3 and backends == {"aten::_scaled_dot_product_flash_attention": 3}
    x = _attention_verdict("attn_hd100_eager")
    assert x.evidence["backend"] == "flash" and x.evidence["reasons"] == []
    q, backends = _attention_calls("attn_hd100_fp32_eager")
    assert q == [[8, 16, 2048, 100]] * 3 and backends == {"aten::_scaled_dot_product_efficient_attention": 3}
    x = _attention_verdict("attn_hd100_fp32_eager")
    assert x.evidence["backend"] == "efficient" and len(x.evidence["reasons"]) == 1
    assert x.evidence["reasons"][0].startswith("flash attention takes only fp16/bf16 inputs")
    assert "multiple of 8" not in x.text + x.fix


def test_a_head_dim_above_256_recorded_in_the_trace_is_why_flash_did_not_run():
    """bf16, head_dim 264 on the H200: the efficient backend ran (flash takes up to 256). Read without the run's
    config, the reason comes from the query's recorded shape."""
    q, backends = _attention_calls("attn_hd264_eager")
    assert q == [[8, 16, 2048, 264]] * 3 and backends == {"aten::_scaled_dot_product_efficient_attention": 3}
    x = _attention_verdict("attn_hd264_eager")
    assert x.evidence["backend"] == "efficient" and x.evidence["head_dims"] == [264]
    assert x.evidence["reasons"] == ["flash supports head_dim up to 256 and the trace records 264 (the last "
                                     "dimension of the attention's query)"]
    assert "does not say" not in x.text


def test_an_explicit_causal_mask_ran_cudnn_attention_on_the_h200():
    """An explicit boolean causal mask where is_causal=True would do (bf16, 8×16×2048×128): on the H200 torch ran
    its cuDNN backend (a fused kernel, a plain scan), so there is nothing to change for the backend; the mask's
    recorded shape is the fourth input."""
    ev = scan_trace(DATA / "h200_verdicts" / "attn_mask_eager.json")
    calls = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::scaled_dot_product_attention"]
    assert len(calls) == 3 and all(e["args"]["Input Dims"][3] == [2048, 2048] for e in calls)
    _q, backends = _attention_calls("attn_mask_eager")
    assert backends == {"aten::_scaled_dot_product_cudnn_attention": 3}
    assert any(e["name"].startswith("cudnn_generated_fort_native_sdpa_sm90_flash") for e in ev if e.get("cat") == "kernel")
    x = _attention_verdict("attn_mask_eager")
    assert x.evidence["backend"] == "cudnn" and x.fix.startswith("Nothing to change for the backend")


def _gemms_under_compile(path, dims) -> list[bool]:
    """For each CPU ``aten::mm`` recorded with these ``Input Dims`` (by a plain scan): whether a ``Torch-Compiled
    Region`` and a ``## Call CompiledFxGraph`` call of its thread hold it (start and end inside theirs)."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation"]

    def inside(e, prefix):
        return any(str(o["name"]).startswith(prefix) and (o["pid"], o["tid"]) == (e["pid"], e["tid"])
                   and o["ts"] <= e["ts"] and e["ts"] + e["dur"] <= o["ts"] + o["dur"] for o in ev)
    return [inside(e, "Torch-Compiled Region") and inside(e, "## Call CompiledFxGraph ") for e in ev
            if e["name"] == "aten::mm" and e.get("args", {}).get("Input Dims", [])[:2] == dims]


@pytest.mark.parametrize("name,compiled", [("gemv_m4_n4095_compile", True), ("gemv_m4_n4095_eager", False)])
def test_an_unaligned_gemm_that_ran_compiled_is_not_promised_compiles_padding(name, compiled):
    """On the H200, torch.compile ran the M=4 GEMM with N=4095 inside its compiled graph, unpadded (its aten::mm
    records N=4095 and a cuBLAS align1 kernel ran): the fix cannot send the user to torch.compile's shape padding;
    it names the padding to do by hand. The eager run is still told that torch.compile pads such GEMMs."""
    path = DATA / "h200_verdicts" / f"{name}.json"
    under = _gemms_under_compile(path, [[4, 4096], [4096, 4095]])
    assert len(under) == 3 and all(u == compiled for u in under)  # one a step
    aligned1 = [e["name"] for e in scan_trace(path) if e.get("cat") == "kernel" and "gemm" in e["name"]]
    assert len(aligned1) == 3 and all("_align1>" in n for n in aligned1)
    x = rules(run(path)[2])["unaligned_gemm_dims"]
    assert (x.evidence["m"], x.evidence["k"], x.evidence["n"]) == (4, 4096, 4095)
    promise = "torch.compile can pad such GEMMs itself"
    if compiled:
        assert promise not in x.fix
        assert "ran under torch.compile (inside a compiled region) and unpadded" in x.fix
        assert "N from 4095 to 4096" in x.fix and "K from" not in x.fix  # K = 4096 is aligned
    else:
        assert promise in x.fix and "ran under torch.compile" not in x.fix


def test_of_unaligned_gemms_only_the_compiled_ones_are_sent_to_pad_by_hand(tmp_path):
    """One unaligned GEMM inside a compiled graph, another outside any: the fix names the compiled one's padding and
    sends the eager one to padding or to torch.compile, promising neither that compile pads."""
    t = vt.Trace()
    kernel = "void cutlass::Kernel2<cutlass_75_tensorop_s1688gemm_bf16_64x64_32x1_nn_align1>(...)"

    def body(t):
        t.cpu("Torch-Compiled Region: 0/0", 120, children=lambda t: t.cpu(
            "## Call CompiledFxGraph f0 ##", 100, cat="user_annotation", children=lambda t: t.cpu(
                "aten::mm", 60, dims=[[64, 1000], [1000, 4095]], types=vt.BF16,
                children=lambda t: t.launch(kernel, 30.0))))
        t.cpu("aten::mm", 60, dims=[[64, 4096], [4096, 1001]], types=vt.BF16,
              children=lambda t: t.launch(kernel, 30.0))
    for s in range(4):
        t.step(s + 1, body)
    path = t.write(tmp_path / "t.json")
    assert _gemms_under_compile(path, [[64, 1000], [1000, 4095]]) == [True] * 4
    assert _gemms_under_compile(path, [[64, 4096], [4096, 1001]]) == [False] * 4
    x = rules(run(path)[2])["unaligned_gemm_dims"]
    assert "torch.compile can pad such GEMMs itself" not in x.fix
    assert x.fix.startswith("The GEMM with M=64, K=1000, N=4095 ran under torch.compile")
    assert "N from 4095 to 4096" in x.fix and "1001" not in x.fix  # K = 1000 is a multiple of 8
    assert "The other unaligned GEMMs ran eagerly" in x.fix


def test_unaligned_gemms_under_two_roofs_are_each_costed_at_their_own(tmp_path):
    """A big unaligned GEMM (compute roof) and a GEMV-like one (memory roof) in each step: the cost is their time
    less each one's FLOPs at its own roof, and the text names both shapes with their time per step."""
    t = vt.Trace()
    kernel = "void cutlass::Kernel2<cutlass_75_tensorop_s1688gemm_bf16_64x64_32x1_nn_align1>(...)"

    def body(t):
        t.cpu("aten::mm", 60, dims=[[4096, 4096], [4096, 4095]], types=vt.BF16,
              children=lambda t: t.launch(kernel, 400.0))
        t.cpu("aten::mm", 60, dims=[[4, 4096], [4096, 4095]], types=vt.BF16,
              children=lambda t: t.launch(kernel, 30.0))
    for s in range(4):
        t.step(s + 1, body)
    _, _, d = run(t.write(tmp_path / "t.json"))
    x = rules(d)["unaligned_gemm_dims"]
    big, small = 2 * 4096 * 4096 * 4095, 2 * 4 * 4096 * 4095
    compute = H200_PEAKS.gemm_tflops["bf16"]
    memory = small / (2 * (4 * 4096 + 4096 * 4095 + 4 * 4095)) * H200_PEAKS.bandwidth_gbs / 1e3  # TFLOP/s
    assert memory < compute
    assert x.cost_us_per_step == pytest.approx(400.0 + 30.0 - big / (compute * 1e6) - small / (memory * 1e6))
    assert (f"each one's roof (memory {memory:,.1f} TFLOP/s; compute {compute:,.1f} TFLOP/s, from the measured "
            "peaks)") in x.cost_basis
    assert ("The cost counts 2 unaligned GEMM shapes, each by its GPU time per step, this one first: "
            "M=4096, K=4096, N=4095 (N unaligned) 400.0 µs; M=4, K=4096, N=4095 (N unaligned) 30.0 µs.") in x.text


def test_a_big_aligned_gemm_is_judged_by_the_compute_roof(tmp_path):
    path = vt.gemm(tmp_path / "t.json", 4096, 4096, 4096, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 190.0)
    _, _, d = run(path)
    (row,) = d.roofline[d.roofline["kind"] == "gemm"].to_dict("records")
    assert row["roof"] == "compute" and row["peak"] == H200_PEAKS.gemm_tflops["bf16"]
    assert row["fraction_of_peak"] == pytest.approx(2 * 4096 ** 3 / 190.0 / 1e6 / H200_PEAKS.gemm_tflops["bf16"])


def test_a_conv_in_nchw_gets_the_channels_last_rule_and_its_own_category(tmp_path):
    path = vt.conv_with_transposes(tmp_path / "t.json")
    events = scan_trace(path)
    transposes = [e for e in events if "nchwToNhwc" in e["name"] or "nhwcToNchw" in e["name"]]
    r, _, d = run(path)
    x = rules(d)["conv_layout"]
    n = len(steps_of(events))
    assert x.evidence["transposes_per_step"] == len(transposes) / n == 2
    assert x.evidence["transpose_us_per_step"] == pytest.approx(sum(e["dur"] for e in transposes) / n)
    assert "channels_last" in x.fix
    convs = [e for e in events if "fprop_implicit_gemm" in e["name"]]
    b = r.step_breakdown.groupby("category")["time_us"].sum()
    assert b["convolution"] == pytest.approx(sum(e["dur"] for e in convs)) and b["gemm"] == 0
    assert b["other"] == pytest.approx(sum(e["dur"] for e in transposes))  # the transposes: data copies
    (row,) = d.roofline[d.roofline["kind"] == "conv"].to_dict("records")
    flops = 2 * 32 * 64 * 56 * 56 * 64 * 3 * 3  # by hand: 2·N·K·Hₒ·Wₒ·C·R·S, same-size output (padding 1)
    nbytes = 2 * (32 * 64 * 56 * 56 + 64 * 64 * 3 * 3 + 32 * 64 * 56 * 56)
    assert (row["flops"], row["bytes"], row["count"]) == (flops, nbytes, n) and row["time_us"] == 40.0
    assert row["tflops"] == pytest.approx(flops / 40.0 / 1e6) and row["roof"] == "compute"


def test_a_conv_called_again_by_autocast_gets_one_row_in_the_type_it_ran(tmp_path):
    """Autocast's wrapper records the op with its fp32 inputs and calls it again with bf16 ones: the outer call's
    window holds the same kernels, and it made a second, fp32 row of the one conv."""
    path = vt.conv_with_transposes(tmp_path / "t.json")
    doc = json.loads(path.read_text())
    for e in [e for e in doc["traceEvents"] if e["name"] == "aten::convolution"]:
        doc["traceEvents"].append({**e, "ts": e["ts"] - 1.0, "dur": e["dur"] + 2.0,
                                   "args": {**e["args"],
                                            "Input type": ["float", "float", *e["args"]["Input type"][2:]]}})
    path.write_text(json.dumps(doc))
    convs = [e for e in scan_trace(path) if "fprop_implicit_gemm" in e["name"]]
    _, _, d = run(path)
    (row,) = d.roofline[d.roofline["kind"] == "conv"].to_dict("records")
    assert (row["dtype"], row["count"], row["time_us"]) == ("bf16", len(convs), 40.0)


def test_the_channels_last_cost_is_no_more_than_the_step_can_lose(tmp_path):
    """Each step: 640 µs of CPU (no waiting) launch 700 µs of GPU work, 300 µs of it transposes. The GPU sets the
    pace, but without the transposes the step is still its CPU's 640-odd µs: it can shorten by about 56 µs, not the
    300 µs the rule claimed."""
    path = vt.conv_with_transposes(tmp_path / "t.json", steps=8, transpose_us=150.0, conv_us=400.0, cpu_us=640.0,
                                   gap_us=0.0)
    events = scan_trace(path)
    spans = steps_of(events)[2:]  # the steady state: after the first (from 3 on)
    cpu = statistics.median(b - a for a, b in spans)
    gpu = sum(e["dur"] for e in events if e.get("cat") == "kernel") / len(steps_of(events))
    assert gpu == 700.0 and cpu < gpu
    r, _, d = run(path)
    assert r.summary["steady_state"]["bound"] == "compute-bound"
    x = rules(d)["conv_layout"]
    assert x.cost_us_per_step == pytest.approx(gpu - cpu, abs=0.5)  # by hand: 700 µs of GPU down to the CPU's time
    assert x.cost_us_per_step < 300.0 and "more than the step can lose" in x.cost_basis


def test_an_fp32_conv_that_ran_on_tf32_cores_is_judged_by_the_tf32_peak(tmp_path):
    """cuDNN runs fp32 convolutions on TF32 tensor cores by default (torch.backends.cudnn.allow_tf32): its kernel
    says ``tf32``. Judged against the fp32 peak, the conv read "185 of 51.25 TFLOP/s ... above that peak"."""
    path = vt.conv_with_transposes(tmp_path / "t.json")
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:
        if e["name"] == "aten::convolution":
            e["args"]["Input type"] = ["float", "float"] + e["args"]["Input type"][2:]
        if "fprop_implicit_gemm" in e["name"]:
            e["name"] = e["name"].replace("bf16bf16_bf16f32_f32", "tf32f32_tf32f32_f32")
    path.write_text(json.dumps(doc))
    (row,) = run(path)[2].roofline.query("kind == 'conv'").to_dict("records")
    flops = 2 * 32 * 64 * 56 * 56 * 64 * 3 * 3  # by hand, as above; 40 µs
    assert row["dtype"] == "tf32" and row["peak"] == H200_PEAKS.peak_tflops("tf32")
    assert row["bytes"] == 4 * (2 * 32 * 64 * 56 * 56 + 64 * 64 * 3 * 3)  # fp32 operands: 4 bytes each
    assert row["fraction_of_peak"] == pytest.approx(flops / 40e-6 / 1e12 / H200_PEAKS.peak_tflops("tf32"))
    assert "above that peak" not in row["judged"]


def test_an_fp32_gemm_on_cutlass_tensor_ops_is_judged_by_the_tf32_peak(tmp_path):
    """An fp32 GEMM (recorded ``float`` inputs) that ran cuBLAS's ``cutlass_80_tensorop_s1688gemm`` ran TF32 math
    on the tensor cores (as in HTA's A100 control trace, beside FFMA ``ampere_sgemm`` kernels). Judged against the
    fp32 peak it read "344 of 51.25 TFLOP/s (compute-bound; above that peak: ...)"."""
    kernel = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_16x3_nn_align4>(...)"
    t = vt.Trace()
    for n in range(4):
        t.step(n + 1, lambda t: t.cpu("aten::mm", 30, dims=[[4096, 4096], [4096, 4096]], types=vt.FP32,
                                      children=lambda t: t.launch(kernel, 400.0)))
    path = t.write(tmp_path / "t.json")
    tf32 = json.loads((DATA / "h200_verdicts" / "peaks.json").read_text())["gemm_tflops"]["tf32"]  # 406.9
    (row,) = run(path)[2].roofline.query("kind == 'gemm'").to_dict("records")
    rate = 2 * 4096 ** 3 / 400e-6 / 1e12  # by hand: 343.6 TFLOP/s
    assert row["dtype"] == "tf32" and row["compute_peak"] == tf32 and row["roof"] == "compute"
    assert row["fraction_of_peak"] == pytest.approx(rate / tf32)
    assert row["judged"] == "344 of 406.9 TFLOP/s (compute-bound)"


FP8_GEMM = ("sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128_cgasize1x2x1_warpgroupsize1x1x1_execute_"
            "segment_k_off_kernel__5x_cublas")
FP8 = ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", "", "", "Scalar", "Scalar"]


def test_fp8_gemms_count_as_gemms_and_are_shown_unjudged(tmp_path):
    """A training step whose big GEMMs are fp8 (``aten::_scaled_mm``, 1,000 µs each) beside a small fp32 head (60 µs
    each, FFMA). Without _scaled_mm among the GEMM ops, fp32_training read "runs its GEMMs in fp32: 180.0 µs ...
    (100% of the GEMMs')" where fp32 was 6% of the GEMM time; the fp8 rows have no peak to be judged against."""
    t = vt.Trace()

    def smm(t):
        t.cpu("aten::_scaled_mm", 30, dims=[[8192, 8192], [8192, 8192], [], [], [], [], [], []], types=FP8,
              concrete=["", "", "", "", "", "", "15", "False"], children=lambda t: t.launch(FP8_GEMM, 1000.0))

    def head(t):
        t.cpu("aten::mm", 30, dims=[[1024, 1024], [1024, 1024]], types=vt.FP32,
              children=lambda t: t.launch(vt.SGEMM, 60.0))
    for n in range(4):
        def body(t):
            vt._annotate(t, "train::forward", lambda t: (smm(t), head(t)))
            vt._annotate(t, "train::backward", lambda t: vt._annotate(
                t, "autograd::engine::evaluate_function: MmBackward0", lambda t: (head(t), head(t), smm(t), smm(t))))
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    kernels = [e for e in scan_trace(path) if e.get("cat") == "kernel"]
    fp8_us = sum(e["dur"] for e in kernels if e["name"] == FP8_GEMM) / 4  # by scan: 3,000 µs a step
    fp32_us = sum(e["dur"] for e in kernels if e["name"] == vt.SGEMM) / 4  # 180 µs: 6% of the GEMM time
    r, _f, d = run(path)
    assert (r.gemm_throughput["op"] == "aten::_scaled_mm").sum() == 12
    assert "fp32_training" not in rules(d) and fp32_us / (fp8_us + fp32_us) < 0.5
    (row,) = d.roofline.query("op == 'aten::_scaled_mm'").to_dict("records")
    assert row["dtype"] == "fp8" and row["flops"] == 2 * 8192 ** 3 and row["count"] == 12
    assert row["bytes"] == 2 * 8192 * 8192 * 1 + 8192 * 8192 * 2  # fp8 inputs, a bf16 result (out_dtype 15)
    assert all(pd.isna(row[c]) for c in ("peak", "compute_peak", "fraction_of_peak"))  # no peak
    assert row["judged"] == "1,100 TFLOP/s (not judged: the measured peaks hold no fp8 figure)"


def test_an_int8_gemm_counts_as_a_gemm_with_an_int32_result_and_is_shown_unjudged(tmp_path):
    """``aten::_int_mm``: int8 (``signed char``) [M, K] @ [K, N] into an int32 result."""
    t = vt.Trace()
    for n in range(3):
        t.step(n + 1, lambda t: t.cpu("aten::_int_mm", 30, dims=[[4096, 2048], [2048, 1024]],
                                      types=["signed char", "signed char"],
                                      children=lambda t: t.launch("cutlass_80_tensorop_i16832gemm_s8", 50.0)))
    (row,) = run(t.write(tmp_path / "t.json"))[2].roofline.to_dict("records")
    assert row["dtype"] == "int8" and row["flops"] == 2 * 4096 * 2048 * 1024
    assert row["bytes"] == (4096 * 2048 + 2048 * 1024) * 1 + 4096 * 1024 * 4
    assert pd.isna(row["peak"]) and row["judged"] == "344 TFLOP/s (not judged: the measured peaks hold no int8 figure)"


def test_an_elementwise_op_of_mixed_types_writes_the_type_torch_promotes_to(tmp_path):
    """A bf16 tensor times an int64 one writes bf16 (a floating type wins over any integer one), bf16 plus fp16 writes
    fp32 (torch.promote_types). Sized by the widest input, the mul counted 1,207,959,552 bytes and read "5,491 of
    4,258 GB/s ... part of its bytes were read from L2" (impossible for 1.2 GB)."""
    torch = pytest.importorskip("torch")
    n = 64 << 20
    t = vt.Trace()
    for k in range(3):
        def body(t):
            t.cpu("aten::mul", 20, dims=[[n], [n]], types=["c10::BFloat16", "long int"],
                  children=lambda t: t.launch(vt.ELEMENTWISE, 220.0))
            t.cpu("aten::add", 20, dims=[[n], [n], []], types=["c10::BFloat16", "c10::Half", "Scalar"],
                  concrete=["", "", "1"], children=lambda t: t.launch(vt.ELEMENTWISE, 160.0))
        t.step(k + 1, body)
    roof = run(t.write(tmp_path / "t.json"))[2].roofline.set_index("op")
    def size(d):
        return torch.empty((), dtype=d).element_size()
    mul_out = torch.promote_types(torch.bfloat16, torch.int64)  # bf16
    add_out = torch.promote_types(torch.bfloat16, torch.float16)  # fp32
    assert roof.loc["aten::mul", "bytes"] == n * (2 + 8) + n * size(mul_out) == 805306368
    assert roof.loc["aten::add", "bytes"] == n * (2 + 2) + n * size(add_out) == n * 8
    assert roof.loc["aten::mul", "judged"] == f"{805306368 / 220e-6 / 1e9:,.0f} of 4,258 GB/s (memory-bound)"


def test_the_channels_last_rule_names_its_transposes_whole_or_cut_with_an_ellipsis(tmp_path):
    """Kernel names are long C++ signatures: the rule names the two shortest whole, or cut to 60 characters with an
    ellipsis (never cut silently mid-name), and says how many more there are."""
    path = vt.conv_with_transposes(tmp_path / "t.json")
    doc = json.loads(path.read_text())
    long = {"nchwToNhwc": "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
                          "(cudnnKernelDataType_t)0>(int, int, int, int, float const*, float*, float, float)",
            "nhwcToNchw": "void nhwcToNchwKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int)"}
    k = 0
    for e in doc["traceEvents"]:
        for word, name in long.items():
            if word in e["name"]:
                k += 1
                e["name"] = name if k % 3 else "void cudnn::ops::nchwToNhwcKernel<__half, __half, float, true>(int)"
    path.write_text(json.dumps(doc))
    names = sorted({e["name"] for e in doc["traceEvents"] if "Nhwc" in e["name"] or "Nchw" in e["name"]},
                   key=lambda x: (len(x), x))
    assert len(names) == 3 and all(len(x) > 60 for x in names)
    text = rules(run(path)[2])["conv_layout"].text
    assert f"({names[0][:59]}…; {names[1][:59]}…; and 1 more)" in text


@pytest.mark.parametrize("backend", ["flash", "compiled"])
def test_attention_in_decode_is_judged_by_the_bandwidth(tmp_path, backend):
    q, kv = [4, 16, 1, 64], [4, 16, 2048, 64]  # one new token per sequence against a 2,048-token KV cache
    path = vt.attention(tmp_path / "t.json", q, kv, backend=backend, gpu_us=11.2)
    events = scan_trace(path)
    flash_us = [e["dur"] for e in events if "flash_fwd" in e["name"]]
    _, _, d = run(path)
    (row,) = d.roofline[d.roofline["kind"] == "attention"].to_dict("records")  # one row: the backend op is inside
    flops = 2 * (4 * 16) * (1 * 2048) * (64 + 64)  # by hand: Q·Kᵀ and P·V over every (query, key) pair
    nbytes = 2 * (4 * 16 * 64 + 2 * 4 * 16 * 2048 * 64 + 4 * 16 * 64)  # Q, K, V read, O written, 2 bytes each
    assert (row["flops"], row["bytes"], row["count"]) == (flops, nbytes, len(flash_us))
    assert row["time_us"] == pytest.approx(sum(flash_us) / len(flash_us))
    assert row["intensity"] == pytest.approx(flops / nbytes) and row["intensity"] < 1.01
    assert row["roof"] == "memory"
    gbs = nbytes / 11.2 / 1e3
    assert row["gbs"] == pytest.approx(gbs)
    assert row["fraction_of_peak"] == pytest.approx(gbs / H200_PEAKS.bandwidth_gbs)
    assert row["judged"] == f"{gbs:,.0f} of {H200_PEAKS.bandwidth_gbs:,.0f} GB/s (memory-bound)"


def test_causal_prefill_attention_counts_the_unmasked_pairs_and_is_compute_bound(tmp_path):
    q = [1, 8, 1024, 128]
    path = vt.attention(tmp_path / "t.json", q, q, causal=True, gpu_us=10.0)
    _, _, d = run(path)
    (row,) = d.roofline[d.roofline["kind"] == "attention"].to_dict("records")
    pairs = 1024 * 1025 // 2  # the lower triangle, diagonal included
    assert row["flops"] == 2 * 8 * pairs * (128 + 128)
    assert row["roof"] == "compute" and row["peak"] == H200_PEAKS.gemm_tflops["bf16"]
    assert row["judged"].endswith("TFLOP/s (compute-bound)")


@pytest.mark.parametrize("kv_heads", [32, 8, 1])
def test_grouped_query_attention_gets_its_row(tmp_path, kv_heads):
    """Grouped-query attention (``enable_gqa``): 32 query heads over 8 K/V heads got no row at all (the heads do not
    broadcast), where multi-head (32) and multi-query (1) did. By hand: FLOPs over every query head, K and V read
    once at their own size."""
    q, kv = [4, 32, 2048, 128], [4, kv_heads, 2048, 128]
    path = vt.attention(tmp_path / "t.json", q, kv, gpu_us=500.0)
    _, _, d = run(path)
    (row,) = d.roofline[d.roofline["kind"] == "attention"].to_dict("records")
    assert row["flops"] == 2 * (4 * 32) * (2048 * 2048) * (128 + 128)
    assert row["bytes"] == 2 * (4 * 32 * 2048 * 128 + 2 * 4 * kv_heads * 2048 * 128 + 4 * 32 * 2048 * 128)


@pytest.mark.parametrize("backend", ["flash", "efficient"])
def test_attention_under_autocast_is_judged_in_the_type_it_ran(tmp_path, backend):
    """Under bf16 autocast the public op records the fp32 inputs it was handed and calls itself again with the cast
    ones: the row was fp32 (its peak, 4-byte elements) for a bf16 kernel. By a plain scan: the bf16 call's types and
    the fused kernel's time; by hand: 2-byte elements, judged against the bf16 peak."""
    q = [4, 32, 2048, 128]
    path = vt.attention(tmp_path / "t.json", q, q, backend=backend, gpu_us=500.0, autocast=True)
    ev = scan_trace(path)
    calls = [e for e in ev if e["name"] == "aten::scaled_dot_product_attention"]
    assert sorted(e["args"]["Input type"][0] for e in calls) == ["c10::BFloat16"] * 3 + ["float"] * 3
    fused = [e["dur"] for e in ev if e.get("cat") == "kernel" and ("flash" in e["name"] or "fmha" in e["name"])]
    _, _, d = run(path)
    (row,) = d.roofline[d.roofline["kind"] == "attention"].to_dict("records")  # one row per call, not per record
    assert (row["dtype"], row["count"], row["time_us"]) == ("bf16", 3, pytest.approx(sum(fused) / len(fused)))
    assert row["bytes"] == 2 * 4 * 4 * 32 * 2048 * 128  # Q, K, V read and O written, 2 bytes each
    assert row["compute_peak"] == H200_PEAKS.gemm_tflops["bf16"]


def test_the_llama_training_steps_attention_is_bf16_under_autocast():
    """The H200's Llama training step (fp32 weights, bf16 autocast): each aten::scaled_dot_product_attention records
    fp32 inputs and holds one that records bf16, under which cuDNN's bf16 (``f16``) flash kernel ran. The row read
    27.6 of 51.25 TFLOP/s, the fp32 peak; it is a bf16 attention."""
    path = DATA / "h200_train" / "llm_train.json.gz"
    ev = scan_trace(path)
    types = collections.Counter(e["args"]["Input type"][0] for e in ev
                                if e.get("cat") == "cpu_op" and e["name"] == "aten::scaled_dot_product_attention")
    assert types == {"float": 12, "c10::BFloat16": 12}
    fused = [e for e in ev if e.get("cat") == "kernel" and "sdpa" in e["name"] and "fprop" in e["name"]]
    assert len(fused) == 12 and all("_f16_" in e["name"] for e in fused)
    _, _, d = run(path)
    (row,) = d.roofline[d.roofline["kind"] == "attention"].to_dict("records")
    assert (row["dtype"], row["count"]) == ("bf16", 12)
    assert row["compute_peak"] == H200_PEAKS.gemm_tflops["bf16"]
    assert row["time_us"] == pytest.approx(sum(e["dur"] for e in fused) / 12)


def test_an_fp32_run_under_autocast_is_not_why_flash_did_not_run(tmp_path):
    """An app run of dtype fp32 with the autocast knob at bf16 (its way to train in bf16): the attention ran on bf16
    inputs (recorded), so "this run is fp32" is no reason; a run's dtype is its tensors', which autocast casts."""
    q = [4, 8, 128, 264]
    path = vt.attention(tmp_path / "t.json", q, q, backend="efficient", gpu_us=50.0, autocast=True)
    ran = {tuple(e["args"]["Input type"][:3]) for e in scan_trace(path)
           if e["name"] == "aten::_scaled_dot_product_efficient_attention"}
    assert ran == {("c10::BFloat16",) * 3}
    config = {"workload": "transformer_block", "dtype": "fp32", "knobs": {"train": True, "autocast": "bf16",
                                                                        "d_model": 2112, "heads": 8}}
    x = rules(run(path, config=config)[2])["attention_backend"]
    assert x.evidence["reasons"] == ["flash supports head_dim up to 256 and the trace records 264 (the last "
                                     "dimension of the attention's query)"]


def test_autocast_is_not_why_flash_did_not_run(tmp_path):
    """The efficient backend ran a bf16 head_dim of 264 under autocast: the reason is the head_dim, not the fp32
    inputs the public op recorded before autocast cast them (flash got bf16 ones)."""
    q = [8, 16, 2048, 264]
    path = vt.attention(tmp_path / "t.json", q, q, backend="efficient", gpu_us=500.0, autocast=True)
    with open_trace(path, engine="sqlite") as s:
        x = next(d for d in diagnose(s, compute_capability=9.0).diagnoses if d.rule == "attention_backend")
    assert x.evidence["backend"] == "efficient"
    assert x.evidence["reasons"] == ["flash supports head_dim up to 256 and the trace records 264 (the last "
                                     "dimension of the attention's query)"]


def test_attention_on_the_math_backend_is_left_to_its_gemms(tmp_path):
    path = vt.attention(tmp_path / "t.json", [4, 16, 1, 64], [4, 16, 2048, 64], backend="math")
    _, _, d = run(path)
    assert (d.roofline["kind"] == "attention").sum() == 0


GEMM_64 = [[64], [64, 64], [64, 64]]  # the study's bias add and 64² product, as aten::addmm records them


@pytest.mark.parametrize("threads", [None, 2, 1])
def test_a_cpu_gemm_far_below_any_cores_rate_names_the_threads_knob(tmp_path, threads):
    # the 64² CPU run seen on a busy 2-core machine: ~34 ms per GEMM with two threads (one thread: ~21 µs)
    path = vt.cpu_steps(tmp_path / "t.json", [[("aten::addmm", 34000.0)]] * 4, gemm_dims=GEMM_64)
    events = scan_trace(path)
    addmm = [e for e in events if e["name"] == "aten::addmm"]
    _, f, d = run(path, peaks=None, config={"workload": "mlp", "threads": threads, "device": "cpu"})
    x = rules(d)["cpu_contention"]
    assert "not math" in f["q2.bound"].text  # the bound's words do not pass a stalled GEMM off as heavy compute
    floor_us = 2 * 64 ** 3 / 1e3  # by hand: 524,288 FLOPs at 1 GFLOP/s
    lost = sum(e["dur"] - floor_us for e in addmm[1:]) / 3  # the steps after the first
    assert x.cost_us_per_step == pytest.approx(lost)
    assert "aten::addmm [[64], [64, 64], [64, 64]] ran at a median 0.0154 GFLOP/s over 3 calls (34,000.0 µs each)" in x.text
    assert "same call" not in x.text  # every call was slow: no claim that another ran fast
    if threads == 1:
        assert "already used one thread" in x.fix and "quieter machine" in x.fix
    else:
        assert "threads=1" in x.fix and "--threads 1" in x.fix
        assert ("torch's default, one per core" if threads is None else "threads: 2") in x.text


def test_a_tiny_gemm_s_rate_is_no_stall(tmp_path):
    """The study's matmul + add at 8×8 on a 2-core VM (one thread): each aten::mm's 1,024 FLOPs (1 µs at 1 GFLOP/s)
    take a few µs of dispatch and set-up, 0.07 to 0.39 GFLOP/s. Question 2 said "the GEMMs' time is threads waiting
    for cores, not math (What to change: *CPU ops stalled*)", a card the rule never wrote: it judges no call under
    CPU_GEMM_FLOOR_MIN_US. Both now read the floor on calls that long only; a slow call of that length among short
    ones is still said, with its own rate."""
    from profiling_core.analyses import CPU_GEMM_FLOOR_MIN_US
    path = DATA / "cpu" / "sweep" / "8_fp32_warm_eager.json"
    mm = [e for e in scan_trace(path) if e.get("name") == "aten::mm"]
    assert max(e["dur"] for e in mm) < CPU_GEMM_FLOOR_MIN_US and all(2 * 8 ** 3 / e["dur"] / 1e3 < 1 for e in mm)
    r, f, d = run(path, peaks=None)
    q2 = f["q2.bound"].text
    assert "cpu_contention" not in rules(d) and "waiting for cores" not in q2 and "CPU ops stalled" not in q2
    steady = sorted(e["dur"] for e in mm)[:-1]  # by the JSON: the first step's call is the slowest
    assert f"Those calls are short (a median {statistics.median(steady):.1f} µs), under the 100.0 µs" in q2
    # one call of 34 ms among short ones: the long call's own rate is judged, and said as such
    steps = [[("aten::addmm", 20.0)], [("aten::addmm", 20.0)], [("aten::addmm", 34000.0)], [("aten::addmm", 20.0)],
             [("aten::addmm", 20.0)]]
    _, f, d = run(vt.cpu_steps(tmp_path / "t.json", steps, gemm_dims=GEMM_64), peaks=None)
    assert ("The one call of 100.0 µs or more ran at 0.0154 GFLOP/s, below the 1 GFLOP/s any core exceeds on a call "
            "that long") in f["q2.bound"].text
    assert "cpu_contention" in rules(d)


def test_one_stalled_call_among_fast_ones_is_named_against_its_median(tmp_path):
    fast = [("aten::native_layer_norm", 50.0)] * 4
    steps = [fast, fast, fast[:2] + [("aten::native_layer_norm", 5000.0)] + fast[3:], fast]
    path = vt.cpu_steps(tmp_path / "t.json", steps)
    _, _, d = run(path, peaks=None)
    x = rules(d)["cpu_contention"]
    assert "took 5,000.0 µs in step 3 against a median 50.0 µs for the same call (100×)" in x.text
    assert x.cost_us_per_step == pytest.approx((5000.0 - 50.0) / 3)  # by hand: over steps 2-4
    assert "not recorded in an imported trace" in x.text
    # its share is of the mean step over the same steps, of which the lost time is a part: under 100% whatever the
    # stall (against the median step, 220 µs, it read 750%)
    durs = [b - a for a, b in steps_of(scan_trace(path))][1:]
    share = (5000.0 - 50.0) / 3 / (sum(durs) / 3)
    assert share < 1 and f"{share:.0%} of the steps' time" in x.text


def test_a_quiet_cpu_run_with_ordinary_spread_gets_no_contention_verdict(tmp_path):
    steps = [[("aten::addmm", 40.0), ("aten::native_layer_norm", 50.0)],
             [("aten::addmm", 25.0), ("aten::native_layer_norm", 90.0)],
             [("aten::addmm", 21.0), ("aten::native_layer_norm", 45.0)],
             [("aten::addmm", 30.0), ("aten::native_layer_norm", 60.0)]]
    _, _, d = run(vt.cpu_steps(tmp_path / "t.json", steps, gemm_dims=GEMM_64), peaks=None)
    assert "cpu_contention" not in rules(d)
    _, _, d = run(DATA / "cpu" / "64_fp32_warm_eager.json", peaks=None)  # a real CPU run on a quiet machine
    assert "cpu_contention" not in rules(d)


def test_one_kernel_name_that_ran_two_shapes_is_read_per_shape(tmp_path):
    path = vt.one_kernel_two_shapes(tmp_path / "t.json")
    _, f, _ = run(path)
    q8 = f["q8.variance"]
    assert [(g["gflop"], g["count"], g["median_us"]) for g in q8.evidence["shapes"]] == [
        (2 * 2048 ** 3 / 1e9, 6, 80.0), (2 * 1024 ** 3 / 1e9, 6, 10.0)]  # by hand: 2·M·K·N, per size
    assert "ran 2 GEMM shapes" in q8.text and "shape, not noise" in q8.text and q8.evidence["cv"] > 0.7
    assert [g["shape"] for g in q8.evidence["shapes"]] == ["2048×2048×2048", "1024×1024×1024"]


def test_a_gemm_op_that_launched_its_kernel_twice_counts_two_launches(tmp_path):
    """Each 2048³ aten::bmm launches the kernel twice (a batch cuBLAS splits), 40 µs each: Q8 grouped per op, so that
    shape read "×6" at a median 80 µs (two launches summed) and said 6 of the 18 launches had no shape. Per launch,
    from a plain scan: each launch takes the shape of the op around its launch call."""
    import statistics
    t = vt.Trace()
    name = "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_NNT"
    for n in range(6):
        def body(t):
            t.cpu("aten::mm", 20, dims=[[1024, 1024], [1024, 1024]], types=vt.BF16,
                  children=lambda t: t.launch(name, 10.0))
            t.cpu("aten::bmm", 30, dims=[[2, 2048, 2048], [2, 2048, 2048]], types=vt.BF16,
                  children=lambda t: (t.launch(name, 40.0 + n), t.launch(name, 40.0 - n)))
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    ev = scan_trace(path)
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    ops = [e for e in ev if e["name"] in ("aten::mm", "aten::bmm")]
    want: dict = {}
    for k in (e for e in ev if e.get("cat") == "kernel"):
        call = calls[k["args"]["correlation"]]
        op = next(o for o in ops if o["ts"] <= call["ts"] < o["ts"] + o["dur"])
        want.setdefault(op["name"], []).append(k["dur"])
    q8 = run(path)[1]["q8.variance"]
    got = [(g["shape"], g["count"], g["median_us"]) for g in q8.evidence["shapes"]]
    assert got == [("2 × 2048×2048×2048", len(want["aten::bmm"]), statistics.median(want["aten::bmm"])),
                   ("1024×1024×1024", len(want["aten::mm"]), statistics.median(want["aten::mm"]))]
    assert got[0][1:] == (12, 40.0)  # by hand
    assert "have none" not in q8.text and "2 × 2048×2048×2048 (34.4 GFLOP) ×12: median 40.0 µs" in q8.text


def test_two_gemm_shapes_of_equal_flops_are_two_groups():
    """The H200 MLP (compiled): its nvjet kernel ran [4096×2048]·[2048×8192] and [4096×8192]·[8192×2048], both
    137.4 GFLOP; a scan of the launching addmm ops' shapes and their kernels' durations gives the two groups Q8
    reports."""
    import statistics
    path = DATA / "h200_workloads" / "mlp_compile.json"
    q8 = run(path)[1]["q8.variance"]
    ev = scan_trace(path)
    ops = [e for e in ev if e.get("name") == "aten::addmm" and e.get("cat") == "cpu_op"]
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    want: dict = {}
    for k in (e for e in ev if e.get("cat") == "kernel" and e["name"] == q8.evidence["kernel"]):
        call = calls[k["args"]["correlation"]]
        op = next(o for o in ops if o["tid"] == call["tid"] and o["ts"] <= call["ts"] < o["ts"] + o["dur"])
        (_, a, b) = op["args"]["Input Dims"][:3]
        want.setdefault(f"{a[0]}×{a[1]}×{b[1]}", []).append(k["dur"])
    assert len(want) == 2
    got = {g["shape"]: g for g in q8.evidence["shapes"]}
    assert set(got) == set(want)
    for shape, durs in want.items():
        assert got[shape]["count"] == len(durs)
        assert got[shape]["median_us"] == pytest.approx(statistics.median(durs), abs=1e-3)
        assert f"{shape} ({got[shape]['gflop']:,.3g} GFLOP) ×{len(durs)}" in q8.text


def test_a_cuda_trace_that_launched_no_kernel_says_so(tmp_path):
    _, f, d = run(vt.allocations_only(tmp_path / "t.json"))
    t = f["q2.bound"].text
    assert "names NVIDIA H200 but recorded no kernel" in t and "ran on the CPU" not in t


def test_a_trace_of_a_device_without_calibration_is_judged_by_its_datasheet_and_says_so(tmp_path):
    path = vt.gemm(tmp_path / "t.json", 4096, 4096, 4095,
                   "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_align1>(...)", 400.0)
    _, _, d = run(path, peaks=None)
    assert d.peaks is not None and d.peaks.source == "datasheet" and d.peaks.gemm_tflops["bf16"] == 989.4
    assert "datasheet" in rules(d)["unaligned_gemm_dims"].text
    _, _, d2 = run(path, peaks=H200_PEAKS)
    assert d2.peaks.source == "measured" and "datasheet" not in rules(d2)["unaligned_gemm_dims"].text


# --- properties of every test trace ---------------------------------------------------------------------------------

TRACES = sorted(p for d in ("h200", "h200_app", "h200_bias", "h200_diag", "h200_workloads", "h200_verdicts", "h200_train",
                            "h200_train/app", "h200_memory", "h100", "cpu", "cpu/sweep",
                            "third_party", "traces", "big")
                for p in (DATA / d).glob("*.json*") if not p.name.endswith((".meta.json", "peaks.json", "facts.json")))


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_verdict_contradicts_its_own_evidence(path):
    meta = path.with_name(path.name.removesuffix(".gz").removesuffix(".json") + ".meta.json")
    config = json.loads(meta.read_text())["config"] if meta.is_file() else None
    r, f, d = run(path, peaks=H200_PEAKS if "h200" in path.parent.name else None, config=config)
    ss = r.summary["steady_state"]
    if ss["bound"] in ("compute-bound", "overhead-bound"):
        fed = ss["starved_share"] is not None and ss["starved_share"] <= STARVED_AT  # the GPU never waited
        own = ss["cpu_us_per_step"] - ss["sync_wait_us_per_step"]
        by_medians = "compute-bound" if ss["gpu_us_per_step"] >= GPU_BOUND_AT * own or fed else "overhead-bound"
        cv = r.cpu_vs_gpu
        each = set(cv.loc[cv["step"].isin(ss["basis_steps"]), "bound"])  # the steps' own verdicts, by the same rule
        assert ss["bound"] == (next(iter(each)) if len(each) == 1 and by_medians not in each else by_medians)
        assert f["q2.bound"].evidence["bound"] == ss["bound"]
    found = rules(d)
    # a finding that sends the reader to a card of What to change names one the diagnosis holds (the CPU sweep's
    # 8x8 GEMMs, 0.2 GFLOP/s in 5 µs calls, were said to be stalled threads, "What to change: *CPU ops stalled*",
    # a card the rule, which judges no call under CPU_GEMM_FLOOR_MIN_US, never wrote)
    titles = [x.title for x in d.diagnoses]
    for x in f.values():
        for named in re.findall(r"What to change: \*([^*]+)\*", x.text):
            assert any(t.startswith(named) for t in titles), (x.id, named, titles)
    if "cpu_contention" in found:
        assert not r.has_gpu  # a rule about CPU threads speaks only where the CPU did the work
    if "gpu_starved" in found:
        assert ss["bound"] == "overhead-bound" and ss["gpu_idle_share"] >= 0.5
    dw = data_wait(r.steps)  # the input rule speaks exactly where the steps' own figures say they waited for data
    assert ("input_bound" in found) == (dw["share"] is not None and dw["share"] >= DATA_WAIT_AT
                                        and not (r.has_gpu and ss["bound"] == "compute-bound"))
    if "input_bound" in found:
        basis = basis_steps(r.steps)
        assert dw["share"] == pytest.approx(basis["data_us"].sum() / basis["cpu_dur_us"].sum())
    own = r.cpu_own_times  # the allocator rule: driver allocation calls in every step of the steady state
    steady = set(int(x) for x in basis_steps(r.steps)["step"]) if len(r.steps) else set()
    with_calls = (set(int(x) for x in own.loc[own["name"].astype(str).isin(FREES + ALLOCS), "step"])
                  if len(own) else set())
    assert ("allocator_in_step" in found) == (r.has_gpu and bool(steady) and steady <= with_calls)
    sb = r.step_breakdown  # the communication rule: collectives alone on the GPU a tenth of the steady windows
    comm = sb[(sb["category"] == "communication") & sb["step"].isin(steady)] if len(sb) else sb
    alone = float(comm["time_us"].sum()) if len(comm) else 0.0
    window = float(comm["window_us"].sum()) if len(comm) else 0.0
    assert ("exposed_communication" in found) == (r.has_gpu and window > 0 and alone >= EXPOSED_AT * window)
    longest = float((r.steps[["cpu_dur_us", "gpu_busy_us"]].max(axis=1)).max()) if len(r.steps) else None
    for x in d.diagnoses:
        if x.cost_us_per_step is not None and longest is not None:
            assert 0 <= x.cost_us_per_step <= longest * 1.001, (x.rule, x.cost_us_per_step, longest)
        if x.cost_basis and "is more than the step can lose" in x.cost_basis:  # a capped cost says what it is first
            assert x.cost_basis.startswith("the most the step can lose: "), x.cost_basis
    roof = d.roofline
    for row in roof[roof["kind"].isin(["gemm", "conv", "attention"])].to_dict("records"):
        if row["peak"] is not None and row["compute_peak"] is not None and row["peak"] == row["peak"]:
            assert row["peak"] <= row["compute_peak"] + 1e-9
            assert row["roof"] == ("memory" if row["peak"] < row["compute_peak"] else "compute")
    texts = [x.text for x in f.values()] + [x.text for x in d.diagnoses]
    for text in texts:  # a count of one is said in the singular
        assert not re.search(r"\b1 more (?:distinct )?(?:kernels|chains|op names)\b", text), text
    if "gpu_starved" in found and "blocked in" in found["gpu_starved"].text:  # where the CPU was blocked: Q2's words
        where = re.search(r"blocked in (.+?) while the GPU worked", found["gpu_starved"].text).group(1)
        assert f"blocked in {where}" in f["q2.bound"].text
    if len(r.steps) == 2:
        assert not any("the other steps are the profiler's closing stubs" in t for t in texts)
    q7 = f.get("q7.sync")
    if q7 is not None and "most of the call" in q7.text:  # (more than the half its own rounded figure shows)
        assert round(q7.evidence["idle_pct"]) > 50
    q6 = f.get("q6.launch_path")  # the kernels it lists, different kernels, read apart (cut names of one head)
    if q6 is not None and "Launches: " in q6.text:
        launches = q6.text.split("Launches: ")[1].split(". These counts")[0]
        shown = re.findall(r"(?:^|; )(.+?) by \w+ \(from ", launches)
        listed = q6.evidence["kernels"]
        assert shown and len(set(shown)) == len(shown) <= len(listed), q6.text
    if q7 is not None and q7.evidence.get("idle_pct") is not None:  # its idle share: 0% or 100% only where exact
        m = re.search(r": (\d+(?:\.\d+)?)% idle\. ", q7.text)
        assert m and (float(m[1]) not in (0.0, 100.0) or q7.evidence["idle_pct"] in (0.0, 100.0)), q7.text
        assert abs(float(m[1]) - q7.evidence["idle_pct"]) < 0.6, q7.text
    for text in texts:  # a share or a ratio that is not none, or not all, never reads as 0%, 100% or 0.00×
        for m in re.finditer(r"(?:idles?|sits idle|busy(?: only)?(?: a median)?) (\d+(?:\.\d+)?)%", text):
            assert float(m[1]) not in (0.0, 100.0) or ss.get("gpu_idle_share") in (0.0, 1.0, None), m[0]
        assert ss.get("gpu_us_per_step") in (None, 0) or not re.search(r"(?<![\d.])0\.00×", text), text
    q8 = f.get("q8.variance")  # the four durations it quotes show the spread it states
    m = q8 and re.search(r"min ([\d.]+) (µs|ms), max ([\d.]+) (µs|ms) \(max ([\d.]+)% above min", q8.text)
    if m:
        lo, hi = (float(m[i]) * (1000 if m[i + 1] == "ms" else 1) for i in (1, 3))
        h_lo, h_hi = (0.0005 * (1000 if m[i + 1] == "ms" else 1) for i in (1, 3))  # (half the last digit shown)
        assert abs(100 * (hi / lo - 1) - float(m[5])) <= 0.05 + 100 * (h_hi / lo + hi * h_lo / lo ** 2), q8.text
    q4 = f.get("q4.offset")  # the later ops wait longer than the first, by its own medians
    m = q4 and re.search(r"later ops wait longer than the first \(a median ([\d.,]+ (?:µs|ms)) for a step's first "
                         r"GPU op, ([\d.,]+ (?:µs|ms)) for the later half", q4.text)
    if m:
        first, later = (float(x.split()[0].replace(",", "")) * (1000 if x.endswith("ms") else 1) for x in m.groups())
        assert later > first, q4.text
    q2 = f.get("q2.bound")  # where question 2 says the queue grew, question 4 says so, from the same first wait
    if q2 is not None and "queue grew" in q2.text:
        m = re.search(r"the queue grew( and then held)?: the first GPU op of step (\d+) started ([\d.,]+ (?:µs|ms)) "
                      r"after its launch call, against ([\d.,]+ (?:µs|ms)) in step (\d+)", q2.text)
        assert m and q4 is not None, q2.text
        assert ("The queue grew and then held" if m[1] else "The queue grows across the steps") in q4.text, q4.text
        assert f"the first GPU op of step {m[5]} started {m[4]} after its launch" in q4.text, (q2.text, q4.text)
    q5 = f.get("q5.chain")  # the step's own slice is not among the slices it holds
    m = q5 and re.search(r"own slice holds [^(;]*\(([^)]*)\)", q5.text)
    if m:
        assert "ProfilerStep#" not in m[1], q5.text
    for row in roof.to_dict("records"):  # the verdict's words name the roof and its unit, and say it when a rate
        over = row["fraction_of_peak"] is not None and row["fraction_of_peak"] > 1  # passes its roof
        if row["roof"] == "memory":
            assert row["judged"].endswith("(memory-bound; above that bandwidth: part of its bytes were read from or "
                                          "written to the GPU's L2 cache, not its memory)" if over else
                                          "GB/s (memory-bound)"), row
        elif row["roof"] == "compute":
            assert ("TFLOP/s (compute-bound; above that peak:" in row["judged"] if over else
                    row["judged"].endswith("TFLOP/s (compute-bound)")), row


def test_a_step_that_already_replays_graphs_is_not_told_to_capture_one():
    # the H200 Llama decode, compiled with reduce-overhead and a static cache: 16 cudaGraphLaunch per step
    _, _, d = run(DATA / "h200_train" / "llm_decode_static_compile_ro.json.gz")
    x = rules(d)["gpu_starved"]
    assert "already replays a CUDA graph (16 cudaGraphLaunch per step)" in x.text
    assert "already replays CUDA graphs" in x.fix and "capture the step" not in x.fix
    assert "compile_breaks" not in rules(d)  # 16 compiled calls per step are 16 tokens, not graph breaks


def test_the_gpu_starved_rule_says_the_step_was_blocked_in_pageable_copies_where_it_was():
    """The H200 Llama decode (static cache, reduce-overhead) copies to or from pageable memory inside its steps (a
    plain scan of the JSON): the GPU-starved item says where its CPU was blocked as question 2 does, copies and
    synchronize calls, not synchronize calls alone."""
    path = DATA / "h200_train" / "llm_decode_static_compile_ro.json.gz"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = steps_of([e for e in ev if e.get("cat") == "user_annotation"])
    assert any("Pageable" in e["name"] and any(a <= e["ts"] < b for a, b in steps) for e in ev
               if e.get("cat") == "gpu_memcpy")
    _r, f, d = run(path)
    both = "blocked in synchronize calls and in copies to or from pageable memory (which wait for the GPU too)"
    assert both in rules(d)["gpu_starved"].text and both in f["q2.bound"].text


def test_q9_counts_the_kernels_it_splits_between_compiled_and_eager_code_as_what_they_are():
    """The H200 Llama decode (reduce-overhead, eager prefill) has 4,615 kernels, 10 of them with no launch call in
    the trace (a plain scan, pairing by correlation id): question 9 splits the 4,605 it can trace to a call between
    compiled and eager code, and says they are those, not the trace's kernels."""
    ev = [e for e in scan_trace(DATA / "h200_train" / "app" / "lm_decode_static_ro.json.gz") if e.get("ph") == "X"]
    calls = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    paired = sum(1 for e in kernels if e.get("args", {}).get("correlation") in calls)
    assert paired < len(kernels)
    _r, f, _d = run(DATA / "h200_train" / "app" / "lm_decode_static_ro.json.gz")
    q9 = f["q9.compile"]
    assert q9.evidence["kernel_launches"] == paired
    assert f"Of the {paired:,} kernels whose launch call the trace pairs with them, " in q9.text
    assert "the trace's" not in q9.text


def test_a_step_that_launched_nothing_is_left_out_of_the_per_step_figures_and_said_so(tmp_path):
    t = vt.Trace()
    t.step(1, lambda t: t.cpu("aten::mm", 9000, dims=[[64, 64], [64, 64]], types=vt.BF16,
                              children=lambda t: t.launch("nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT", 150.0)))
    t.step(2, lambda t: t.cpu("aten::empty", 40))  # this step launched no GPU work
    r, f, _ = run(t.write(tmp_path / "t.json"))
    ss = r.summary["steady_state"]
    assert ss["basis_steps"] == [1] and ss["steps_without_gpu"] == [2]
    events = scan_trace(tmp_path / "t.json")
    (first,) = [e for e in events if e["name"] == "ProfilerStep#1"]
    assert ss["cpu_us_per_step"] == pytest.approx(first["dur"])  # the median of the one step that launched work
    assert "the 1 that launched GPU work, as step 2 launched none" in f["q2.bound"].text


def _steps_syncing(path, syncing: set, steps: int = 4):
    """``steps`` GPU steps of one launch each; the steps numbered in ``syncing`` also call cudaStreamSynchronize."""
    t = vt.Trace()
    for n in range(1, steps + 1):
        def body(t, n=n):
            t.cpu("aten::mm", 30, children=lambda t: t.launch("gemm", 20.0))
            if n in syncing:
                t.sync()
        t.step(n, body)
    return t.write(path)


@pytest.mark.parametrize("syncing, says", [({1}, None), ({2, 4}, "Inside 2 of the 3 steps"),
                                           ({1, 2, 3, 4}, "Inside each step")])
def test_the_sync_finding_reads_the_steady_state_and_says_how_many_steps_sync(tmp_path, syncing, says):
    """A first step's syncs alone are its cold start's (question 3), not a per-step cost; syncs in some steady-state
    steps only are said to be in some, and counted per step over all of them (a plain count of the events)."""
    path = _steps_syncing(tmp_path / "t.json", syncing)
    d = rules(run(path)[2])
    if says is None:
        assert "sync_in_step" not in d
        return
    f = d["sync_in_step"]
    assert f.text.startswith(says) and "of the steady state (the 3 steps after the first; the first may" in f.text
    ev = [e for e in scan_trace(path) if e.get("name") == "cudaStreamSynchronize"]
    steady = [e for e in ev if e["ts"] > min(float(x["ts"]) for x in scan_trace(path)
                                             if x.get("name") == "ProfilerStep#2")]
    per_step = len(steady) / 3
    assert f"cudaStreamSynchronize ×{per_step:.3g} per step" in f.text
    assert f.evidence["sync_calls_us_per_step"] == pytest.approx(sum(float(e["dur"]) for e in steady) / 3)


def _first_delays_by_scan(path) -> list[float]:
    """Per step (time order), the delay of its first GPU op after its launch call, paired by correlation."""
    ev = scan_trace(path)
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]}
    ops = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: calls[e["args"]["correlation"]]["ts"])
    out = []
    for b, e in steps_of(ev):
        mine = [o for o in ops if b <= calls[o["args"]["correlation"]]["ts"] < e]
        if mine:
            out.append(mine[0]["ts"] - calls[mine[0]["args"]["correlation"]]["ts"])
    return out


@pytest.mark.parametrize("synced", [False, True])
def test_q4_tells_a_queue_that_drifts_from_one_that_drains_each_step(tmp_path, synced):
    """Three 7 ms GEMMs launched per step in 0.3 ms of CPU: without a sync the queue grows from step to step (the
    GPU lane drifts right); with the step waiting for its GEMMs at its end, each step's queue drains, and its first
    GEMM starts at once: growth within the step only. The scan's first-op delays per step decide which."""
    path = vt.gpu_bound_with_drift(tmp_path / "t.json", steps=4, sync=synced)
    first = _first_delays_by_scan(path)
    q4 = run(path)[1]["q4.offset"]
    if synced:
        assert max(first) < 3 * min(first)  # the trace as built: every step starts with an empty queue
        assert "Within each step the later ops wait longer than the first" in q4.text and "drifts right" not in q4.text
    else:
        assert first[-1] > 3 * first[0]
        assert "The queue grows across the steps" in q4.text and "drifts right" in q4.text
    assert q4.evidence["step_first_us"] == {k: pytest.approx(v, abs=0.01)
                                            for k, v in zip(sorted(q4.evidence["step_first_us"]), first)}


def _queue_trace(path: Path, waits: list[float], *, step_us: float = 1000.0, late: dict | None = None) -> Path:
    """Steps of ``step_us`` of CPU time, each launching one kernel 10 µs in whose start is ``waits[k]`` after its
    launch call; ``late`` (step → (call offset, wait, kernel µs)) adds a second launch to a step."""
    ev = [{"ph": "X", "name": "PyTorch Profiler (0)", "cat": "Trace", "pid": "Spans", "tid": "PyTorch Profiler",
           "ts": 0.0, "dur": 1000.0 * step_us}]
    corr = 0

    def launch(ts: float, wait: float, dur: float) -> None:
        nonlocal corr
        corr += 1
        ev.append({"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": 1, "tid": 1, "ts": ts,
                   "dur": 1.0, "args": {"correlation": corr}})
        ev.append({"ph": "X", "name": "gemm_kernel", "cat": "kernel", "pid": 0, "tid": 7, "ts": ts + wait,
                   "dur": dur, "args": {"correlation": corr}})

    for k, w in enumerate(waits):
        s = 1000.0 + k * step_us
        ev.append({"ph": "X", "name": f"ProfilerStep#{k}", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": s,
                   "dur": step_us})
        nxt = waits[k + 1] + step_us - w if k + 1 < len(waits) else 1.5 * step_us  # back to back on the GPU
        launch(s + 10.0, w, min(nxt, 20.0) if late else nxt)
        if late and k in late:
            launch(s + late[k][0], *late[k][1:])
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


@pytest.mark.parametrize("waits", [[9000.0, 9500.0, 10000.0, 10500.0], [9000.0, 9300.0, 9600.0, 9900.0]])
def test_q4_a_long_queue_still_growing_every_step_has_not_held(tmp_path, waits):
    """The GPU falls 0.3 or 0.5 ms further behind at every 1 ms step, starting 9 ms behind: the last steps' waits
    are within 10% of each other only because the queue is long. It still grows; it did not grow and then hold."""
    path = _queue_trace(tmp_path / "t.json", waits)
    first = _first_delays_by_scan(path)
    assert first == pytest.approx(waits)
    assert all(b - a >= 0.1 * 1000.0 for a, b in zip(first, first[1:]))  # rising at every step, 10%+ of a step
    r, f, _d = run(path)
    q4 = f["q4.offset"]
    assert r.summary["queue_growth"]["state"] == "grows"
    assert "The queue grows across the steps" in q4.text and "held" not in q4.text
    assert "the queue grew:" in f["q2.bound"].text and "grew and then held" not in f["q2.bound"].text


def test_q4_a_queue_that_grew_and_then_held_still_says_so(tmp_path):
    """The counter case: the queue grows in the first step, then holds at ~9 ms (waits 0.5, 9.0, 9.05, 9.02, 9.04
    ms), so the steps after the first keep one distance between the lanes."""
    waits = [500.0, 9000.0, 9050.0, 9020.0, 9040.0]
    path = _queue_trace(tmp_path / "t.json", waits)
    assert _first_delays_by_scan(path) == pytest.approx(waits)
    r, f, _d = run(path)
    q = r.summary["queue_growth"]
    assert q["state"] == "grew_held" and q["held_steps"] == [1, 2, 3, 4]
    assert "The queue grew and then held" in f["q4.offset"].text


def test_q4_one_late_step_is_no_growing_queue(tmp_path):
    """Five 1 ms steps, each launching a 20 µs kernel that starts 5 µs after its call; step 3 also launches a
    1.5 ms kernel 0.9 ms in, so step 4's kernel waits behind it (1,395 µs). Only the last step waited more than 3×
    the first: the GPU ran 20 µs a step and sat idle the rest, which is no queue that grows across the steps."""
    path = _queue_trace(tmp_path / "t.json", [5.0, 5.0, 5.0, 5.0, 1395.0], late={3: (900.0, 5.0, 1500.0)})
    ev = scan_trace(path)
    long = next(e for e in ev if e.get("dur") == 1500.0)
    step4 = next(e for e in ev if e.get("cat") == "kernel" and e["ts"] > long["ts"])
    assert step4["ts"] == long["ts"] + long["dur"]  # as built: it waits behind the long kernel, nothing more
    assert _first_delays_by_scan(path) == pytest.approx([5.0, 5.0, 5.0, 5.0, 1395.0])
    assert sum(e["dur"] for e in ev if e.get("cat") == "kernel") == pytest.approx(5 * 20.0 + 1500.0)
    r, f, _d = run(path)
    assert r.summary["queue_growth"]["state"] is None
    assert "grows across the steps" not in f["q4.offset"].text and "queue grew" not in f["q2.bound"].text
    assert f["q2.bound"].evidence["bound"] == "overhead-bound"


# --- a cost is what the step can lose --------------------------------------------------------------------------------
# A step gets no shorter than the GPU work it launches, nor than its CPU's own time: a fix that takes GPU time off a
# step the CPU paces (overhead-bound) saves at most what the CPU spent blocked on the GPU, and removing blocking
# saves at most the step's CPU time less its GPU work.

def _room(r) -> float:
    ss = r.summary["steady_state"]
    return max(0.0, ss["cpu_us_per_step"] - ss["gpu_us_per_step"])


def test_gpu_time_fixes_on_a_cpu_paced_training_step_save_only_what_the_cpu_waited():
    """A real H200 fp32 training step whose CPU sets the pace (2.25 ms of CPU for 1.78 ms of GPU work): TF32 and
    autocast would take ~0.9 ms of GEMM time off the GPU, none of it on the critical path."""
    r, _f, d = run(DATA / "h200_memory" / "train.json")
    ss = r.summary["steady_state"]
    assert ss["bound"] == "overhead-bound" and ss["cpu_us_per_step"] > ss["gpu_us_per_step"]
    for rule in ("fp32_without_tf32", "fp32_training"):
        x = rules(d)[rule]
        assert x.cost_us_per_step <= (ss["sync_wait_us_per_step"] or 0.0) + 1e-9
        assert "is not on the critical path" in x.cost_basis


def test_the_tf32_rule_s_text_and_cost_count_the_same_gemm_time_as_the_fp32_training_rule():
    """The H200 fp32 MLP training step: 5 GEMMs a step in FFMA kernels (982.6 µs), one of which cuBLAS splits along
    K and finishes with a splitKreduce_kernel (7.7 µs): 990.3 µs of GEMM time a step, 42.9 GFLOP. The TF32 rule's
    text gives that time and the FFMA kernels' part of it, its cost is that time less the FLOPs at the tf32 peak, and
    the fp32 training rule gives the same GEMM time."""
    path = DATA / "h200_memory" / "train.json"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = steps_of([e for e in ev if e.get("cat") != "gpu_user_annotation"])
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    kernels = [e for e in ev if e.get("cat") == "kernel"
               and any(a <= launch.get(e["args"].get("correlation"), -1) < b for a, b in steps)]
    ffma = [k for k in kernels if "sgemm" in k["name"] or "_ffma_" in k["name"]]
    reduce = [k for k in kernels if "splitKreduce_kernel" in k["name"]]
    n = len(steps)
    assert len(ffma) == 5 * n and len(reduce) == n
    ffma_us, reduce_us = sum(k["dur"] for k in ffma) / n, sum(k["dur"] for k in reduce) / n
    flops = 0
    for o in (e for e in ev if e["name"] in ("aten::mm", "aten::addmm") and any(a <= e["ts"] < b for a, b in steps)):
        dims = o["args"]["Input Dims"]
        m1, m2 = (dims[1], dims[2]) if o["name"] == "aten::addmm" else (dims[0], dims[1])  # (addmm's first: bias)
        flops += 2 * m1[0] * m1[1] * m2[1]
    floor = flops / n / (H200_PEAKS.gemm_tflops["tf32"] * 1e6)
    _r, _f, d = run(path)
    x, t = rules(d)["fp32_without_tf32"], rules(d)["fp32_training"]
    gemm = f"{ffma_us + reduce_us:.1f} µs"
    assert (f"{gemm} of GEMM time per step in these GEMMs: {ffma_us:.1f} µs in the FFMA kernels and "
            f"{reduce_us:.2f} µs in the other kernel they launched (splitKreduce_kernel)") in x.text
    assert f"the time at stake, {ffma_us + reduce_us - floor:.1f} µs per step" in x.cost_basis
    assert f"these GEMMs' time ({gemm} per step, every kernel they launched)" in x.cost_basis
    assert f"{gemm} of GEMM time per step" in t.text
    assert x.evidence["gemm_us_per_step"] == pytest.approx(t.evidence["fp32_gemm_us_per_step"])


def test_the_kernel_the_tf32_rule_names_ran_at_the_rate_it_gives():
    """The H200 fp32 MLP training step runs its GEMMs in four FFMA kernels at different rates: the one the TF32
    rule names ran at the TFLOP/s the rule gives it (its launching ops' FLOPs over its time, a plain scan of the JSON
    pairing each kernel to the op around its launch call)."""
    path = DATA / "h200_memory" / "train.json"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    x = rules(run(path)[2])["fp32_without_tf32"]
    named, rate = re.search(r"not on the tensor cores: (.+?)… at ([\d,.]+) TFLOP/s", x.text).groups()
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    ops = [e for e in ev if e["name"] in ("aten::mm", "aten::addmm")]
    flops = time = 0.0
    for k in (e for e in ev if e.get("cat") == "kernel" and e["name"].startswith(named)):
        call = calls[k["args"]["correlation"]]
        op = next(o for o in ops if o["tid"] == call["tid"] and o["ts"] <= call["ts"] <= o["ts"] + o["dur"])
        dims = op["args"]["Input Dims"]
        m1, m2 = (dims[1], dims[2]) if op["name"] == "aten::addmm" else (dims[0], dims[1])  # (addmm's first: bias)
        flops, time = flops + 2 * m1[0] * m1[1] * m2[1], time + k["dur"]
    assert time > 0 and float(rate.replace(",", "")) == pytest.approx(flops / time / 1e6, rel=0.01)


def test_profile_memory_that_recorded_nothing_is_not_said_to_cost_cpu_time():
    """The H200 reduce-overhead run was profiled with profile_memory, but its trace holds no [memory] event (a CUDA
    graph's replay allocates nothing the profiler sees): the finding says so, with no claim of a cost. The fp32 MLP
    training run, profiled the same way, recorded allocations: its finding gives their count and the cost."""
    for name, cost in (("ro", False), ("train", True)):
        path = DATA / "h200_memory" / f"{name}.json"
        mem = sum(1 for e in scan_trace(path) if e.get("name") == "[memory]")
        config = json.loads((DATA / "h200_memory" / f"{name}.meta.json").read_text())["config"]
        assert config["profile_memory"] and not config["with_stack"] and (mem > 0) is cost
        _r, _f, d = run(path, config=config)
        x = rules(d)["profiler_overhead"]
        assert x.evidence["memory_events"] == mem
        if cost:
            assert f"every allocation and free ({mem:,} [memory] events here), which adds CPU time" in x.text
            assert "include that cost" in x.text
        else:
            assert "the trace holds no [memory] event" in x.text and "added no per-allocation CPU time" in x.text
            assert "adds CPU time" not in x.text and "include that cost" not in x.text and "0 [memory]" not in x.text
            assert x.fix.startswith("Nothing to change for these times")


@pytest.mark.parametrize("path,same", [("h200_memory/train_fused", "the same settings"),
                                       ("h200_verdicts/decode_eager", "the same settings"),
                                       ("h200_diag/fp32_tf32_off", "the same size")])
def test_q10_asks_for_the_same_settings_where_one_knob_is_not_the_run_s_size(path, same):
    """An eager run of this app is told to profile the same work with torch.compile. The MLP's sweep axis is its
    batch and the transformer block's its KV length, each one knob of several (width, heads, mode ...) that set the
    work: "the same size" would not say which, so Q10 asks for the same settings; the study's matmul_add, whose
    matrix size is the size, keeps "the same size"."""
    trace = DATA / f"{path}.json"
    trace = trace if trace.is_file() else trace.with_name(trace.name + ".gz")
    config = json.loads((DATA / f"{path}.meta.json").read_text())["config"]
    assert config["compile"] == "off"
    assert not any(str(e.get("name", "")).startswith("Torch-Compiled Region") for e in scan_trace(trace))
    with open_trace(trace, engine="sqlite") as s:
        q10 = {x.id: x for x in findings(analyze(s), config)}["q10.compile_cost"].text
    assert f"profile {same} with torch.compile" in q10
    if same == "the same settings":
        assert "the same size" not in q10


def test_a_gpu_time_fix_on_a_gpu_paced_step_keeps_its_gpu_saving(tmp_path):
    r, _f, d = run(vt.gpu_bound_with_drift(tmp_path / "t.json"))
    assert r.summary["steady_state"]["bound"] == "compute-bound"
    x = rules(d)["fp32_without_tf32"]
    assert x.cost_us_per_step > 10000.0 and "critical path" not in x.cost_basis  # 3 × 7 ms of FFMA GEMMs a step


def test_removing_the_blocking_saves_no_more_than_the_steps_cpu_time_less_its_gpu_work(tmp_path):
    """Each step: a 190 µs GEMM, 100 µs of the CPU's own work, then a cudaDeviceSynchronize that waits for the GEMM and
    spends another 100 µs with the GPU idle (the driver's own time): the call blocks longer than the step's CPU time
    exceeds its GPU work. (A copy from pageable memory is no such floor: test_copy_bound.)"""
    t = vt.Trace()
    for n in range(4):
        def body(t):
            t.cpu("aten::mm", 20, dims=[[4096, 4096], [4096, 4096]], types=vt.BF16,
                  children=lambda t: t.launch(vt.BF16_GEMM, 190.0))
            t.cpu("aten::relu", 100)
            ts = t.t
            dur = max(2.0, t.gpu_free - ts) + 100.0
            t._x("cudaDeviceSynchronize", ts, dur, "cuda_runtime")
            t.t = ts + dur
        t.step(n + 1, body)
    r, _f, d = run(t.write(tmp_path / "t.json"))
    assert r.summary["steady_state"]["bound"] == "overhead-bound"
    x = rules(d)["sync_in_step"]
    assert x.evidence["blocked_us_per_step"] > _room(r)  # the CPU blocked longer than the step can lose...
    assert x.cost_us_per_step == pytest.approx(_room(r))  # ... so the cost is what it can lose
    assert "gets no shorter than its GPU work" in x.cost_basis


def test_decode_tokens_of_a_gpu_paced_step_are_not_launch_bound(tmp_path):
    """Three launches a token, replayed from a graph: each token's CPU time is longer than its own GPU work, but
    work queued before it keeps the GPU busy through it: the step is compute-bound."""
    r, _f, d = run(vt.decode_tokens(tmp_path / "t.json", launches=3, graph=True))
    assert r.summary["steady_state"]["bound"] == "compute-bound"
    assert "decode_launch_bound" not in rules(d)


@pytest.mark.parametrize("regions", [None, "static"])
def test_launch_bound_decode_tokens_cost_no_more_than_the_step_can_lose(tmp_path, regions):
    r, _f, d = run(vt.decode_tokens(tmp_path / "t.json", regions=regions))
    x = rules(d)["decode_launch_bound"]
    ev = x.evidence
    per_tokens = (ev["cpu_us_per_token"] - ev["gpu_us_per_token"]) * ev["tokens_per_step"]
    assert per_tokens > _room(r) and x.cost_us_per_step == pytest.approx(_room(r))


def test_fp32_ffma_gemms_beside_tf32_ones_are_not_sent_to_tf32(tmp_path):
    """TF32 is one switch for all matmuls: where one fp32 GEMM ran a TF32 tensor-core kernel (an A100's
    cutlass_80_tensorop_s1688gemm, as in HTA's control trace), TF32 was on, and the FFMA kernels cuBLAS chose for
    other shapes are no TF32 finding."""
    def build(kernels):
        t = vt.Trace(device_name="NVIDIA A100-SXM4-80GB")
        for n in range(4):
            def body(t):
                for k in kernels:
                    t.cpu("aten::mm", 60, dims=[[4096, 4096], [4096, 4096]], types=vt.FP32,
                          children=lambda t, k=k: t.launch(k, 2000.0))
            t.step(n + 1, body)
        return t.write(tmp_path / f"{len(kernels)}.json")
    tensorop = "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4"
    assert "fp32_without_tf32" in rules(run(build([vt.SGEMM]))[2])
    assert "fp32_without_tf32" not in rules(run(build([vt.SGEMM, tensorop]))[2])


def _first_op_waits(path) -> list[float]:
    """Per step, from the JSON alone: how long its first kernel started after its launch call (by correlation)."""
    events = scan_trace(path)
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"
              and "correlation" in e.get("args", {})}
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: launch[e["args"]["correlation"]])
    return [next(k["ts"] - launch[k["args"]["correlation"]] for k in kernels
                 if a <= launch[k["args"]["correlation"]] < b) for a, b in steps_of(events)]


def test_a_launch_queue_that_fills_and_holds_is_not_said_to_drift(tmp_path):
    """A full launch queue: the first step's first kernel starts at once, every later one ~2 ms after its launch
    (the queue is as long as it can get): the lanes hold their distance, they do not drift apart."""
    path = vt.full_launch_queue(tmp_path / "t.json", gap_us=5.0)
    waits = _first_op_waits(path)
    assert waits[0] < 10 and max(waits[1:]) - min(waits[1:]) < 0.1 * max(waits[1:])
    _r, f, _d = run(path)
    q4 = f["q4.offset"].text
    assert "grew and then held" in q4 and f"steps 2 to 4 {waits[-1] / 1000:.2f} ms each" in q4
    assert "drifts right" not in q4


def test_a_queue_that_keeps_growing_is_said_to_drift(tmp_path):
    path = vt.gpu_bound_with_drift(tmp_path / "t.json")
    waits = _first_op_waits(path)
    assert all(b - a > 0.1 * waits[-1] for a, b in zip(waits[1:], waits[2:]))  # each step's wait well above the last's
    _r, f, _d = run(path)
    assert "grows across the steps" in f["q4.offset"].text and "drifts right" in f["q4.offset"].text


# --- a CPU run is told nothing about a GPU it did not have -----------------------------------------------------------

def test_a_cpu_runs_texts_name_no_gpu_figure(tmp_path, capsys):
    """A CPU training loop (built: DataLoader, forward, backward, optimizer; no GPU lane), once eager and once with a
    compiled region per step, profiled with profile_memory: analyze's summary, question 9 and the profiler-overhead
    diagnosis say nothing of GPU time, kernels or device copies it cannot have."""
    from profiling_core.cli import analyze as analyze_cli
    path = vt.data_loader_steps(tmp_path / "t.json", [300.0] * 4, gpu=False)
    assert analyze_cli.main([str(path), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    head, summary = out.split("  findings:")[0].split("\n", 2)[1:]  # (the counts' line, then the figures)
    assert "GPU ops 0   kernels 0   (no GPU lane)" in head and "training phases" in summary
    assert "GPU busy" not in summary and " GPU, " not in summary and "kernel" not in summary
    r, _f, d = run(path, peaks=None, config={"with_stack": True, "profile_memory": True, "device": "cpu"})
    text = rules(d)["profiler_overhead"].text
    assert "ran on the CPU, so every time here does" in text and "GPU kernel times" not in text
    assert "the trace holds no [memory] event" in text  # (the built trace has none: only with_stack cost anything)

    t = vt.Trace()
    for n in range(3):
        t.step(n + 1, lambda t: (t.cpu("TorchDynamo Cache Lookup", 10), t.cpu(
            "Torch-Compiled Region: 0/0", 60, children=lambda t: t.cpu("## Call CompiledFxGraph fabc123 ##", 40))))
    compiled = t.write(tmp_path / "c.json", device_properties=False)
    assert analyze_cli.main([str(compiled), "--engine", "sqlite"]) == 0
    out = capsys.readouterr().out
    assert "compiled regions per step 1" in out and "memcpy DtoD" not in out
    _r, f, _d = run(compiled, peaks=None)
    q9 = f["q9.compile"].text
    assert "the compiled code ran on the CPU" in q9 and "kernel launch" not in q9


def test_steps_that_each_meet_the_bound_rule_their_own_way_keep_their_verdict():
    """The H200 fp16 4096² run: step 3 launched more GPU work than its CPU time (by the ratio), step 4 less, but its
    GPU never sat idle with nothing launched (by the starved share): each is compute-bound, while the medians of the
    two figures over both steps pass neither test. The steady state takes the steps' verdict and Q2 says why."""
    from profiling_core.analyses import STARVED_AT, bound
    path = DATA / "h200_diag" / "fp16_4096.json"
    r, f, _d = run(path)
    ss = r.summary["steady_state"]
    cv = r.cpu_vs_gpu[r.cpu_vs_gpu["step"].isin(ss["basis_steps"])]
    assert len(cv) == 2 and set(cv["bound"]) == {"compute-bound"}
    by_ratio, by_starving = cv.iloc[0], cv.iloc[1]
    assert by_ratio["gpu_to_cpu"] >= 1 and by_starving["gpu_to_cpu"] < 1
    events = scan_trace(path)  # a plain scan: the GPU work each step launched (the union of its ops, by correlation)
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    work = {n: _union([(e["ts"], e["ts"] + e["dur"]) for e in gpu
                          if a <= launch.get(e["args"].get("correlation"), -1) < b])
            for n, (a, b) in zip(range(len(steps_of(events))), steps_of(events))}
    assert [work[k] for k in (len(work) - 2, len(work) - 1)] == pytest.approx(cv["gpu_busy_us"].tolist(), abs=0.01)
    assert by_starving["gpu_starved_share"] <= STARVED_AT < by_ratio["gpu_starved_share"]
    medians = bound(ss["gpu_us_per_step"], ss["cpu_us_per_step"], 2, sync_wait_us=ss["sync_wait_us_per_step"],
                    starved_share=ss["starved_share"])
    assert medians == "overhead-bound" and ss["bound"] == "compute-bound" and ss["bound_of_every_step"]
    q2 = f["q2.bound"].text
    assert "Each of these steps is compute-bound by the rule on its own figures" in q2
    assert "Yet the GPU never waited" not in q2 and "overhead-bound, so" not in q2



def test_a_queue_that_empties_every_step_is_not_said_to_drift():
    """The H200 fp32 training step (overhead-bound): each later step's first GPU op waits 7× the first step's (22.6
    → 156.9 µs), but the GPU sat idle with nothing launched in each of them, so no backlog carries over."""
    path = DATA / "h200_memory" / "train.json"
    ev = scan_trace(path)
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    gpu = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    waits, idle = [], []
    for a, b in steps_of(ev):
        mine = sorted((g for g in gpu if a <= launch.get(g["args"].get("correlation"), -1) < b),
                      key=lambda g: launch[g["args"]["correlation"]])
        waits.append(mine[0]["ts"] - launch[mine[0]["args"]["correlation"]])
        # the GPU idle with nothing launched: a gap in its work (inside the step) before an op not yet launched
        free, dry = a, 0.0
        for g in gpu:
            if g["ts"] > free and g["ts"] > a and free < b and launch.get(g["args"].get("correlation"), 1e30) >= free:
                dry += min(g["ts"], b) - max(free, a)
            free = max(free, g["ts"] + g["dur"])
        idle.append(dry)
    assert waits[-1] > 3 * waits[0]
    cpu = [b - a for a, b in steps_of(ev)]
    assert all(s > STARVED_AT * c for s, c in zip(idle[1:], cpu[1:]))
    _r, f, _d = run(path)
    q4 = f["q4.offset"].text
    assert "drifts right" not in q4 and "ran dry" in q4 and "do not drift apart" in q4


@pytest.mark.parametrize("name", ["fp32_tf32_off", "fp32_tf32_off_compile"])
def test_a_queue_that_grows_is_not_said_to_empty_when_the_trace_begins_mid_queue(name):
    """H200 fp32 GEMMs without TF32: 2.7 ms of GPU work launched per ~0.2 ms step. The trace's first GPU op starts
    after every step has ended (the GPU was still running warm-up work the profiler did not record), so from each
    later step's first launch on, launched work waited for the GPU: it never sat idle with nothing launched, and
    the first op of each step waits longer than the last (1.70 → 4.09 → 6.60 ms). Q4 says the queue grows, as Q2
    does, not that it empties every step; no step counts time the GPU was starved."""
    path = DATA / "h200_diag" / f"{name}.json"
    ev = scan_trace(path)
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    steps = steps_of([e for e in ev if e.get("cat") != "gpu_user_annotation"])
    waits = []
    for a, b in steps:
        mine = sorted((g for g in gpu if a <= launch.get(g["args"].get("correlation"), -1) < b),
                      key=lambda g: launch[g["args"]["correlation"]])
        waits.append(mine[0]["ts"] - launch[mine[0]["args"]["correlation"]])
    assert waits[0] < waits[1] < waits[2] and waits[-1] > 3 * waits[0]
    assert min(g["ts"] for g in gpu) > steps[-1][1]  # the first recorded GPU op: after every step
    # launched, unfinished work (from its launch call, or from before the trace for an op it holds no launch for,
    # to the op's end) covers every instant of each step after the first, from that step's start on
    held = sorted((launch.get(g["args"].get("correlation"), float("-inf")), g["ts"] + g["dur"]) for g in gpu)
    for a, b in steps[1:]:
        reach = a
        for lo, hi in held:
            if lo <= reach:
                reach = max(reach, hi)
        assert reach >= b
    r, f, _d = run(path)
    assert r.summary["steady_state"]["starved_share"] == 0.0
    assert r.steps["gpu_starved_us"].tolist() == [0.0, 0.0, 0.0]
    q4 = f["q4.offset"].text
    assert "ran dry" not in q4 and "empties" not in q4
    assert "The queue grows across the steps" in q4
    assert f"that of step {int(r.steps['step'].iloc[-1])} {waits[-1] / 1000:.2f} ms" in q4
    assert "the queue grew" in f["q2.bound"].text


def test_one_late_op_a_step_is_no_queue_that_grows_within_it():
    """HTA's 2-GPU rank 0 (nccl_data): a step's first GPU op waits ~20 µs after its launch and so do most of the
    others (the later half of each step's ops: a median of ~12 µs); only its last op waits ~86 µs. Q4 does not say
    the delay grows within each step."""
    path = DATA / "third_party" / "nccl_data.json.gz"
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
              and "correlation" in e.get("args", {})}
    gpu = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and e.get("args", {}).get("correlation") in launch), key=lambda e: launch[e["args"]["correlation"]])
    for a, b in steps_of(ev):
        waits = [g["ts"] - launch[g["args"]["correlation"]] for g in gpu if a <= launch[g["args"]["correlation"]] < b]
        if waits:
            assert statistics.median(waits[len(waits) // 2:]) < 3 * waits[0]
    _r, f, _d = run(path)
    assert "Within each step the later ops wait longer" not in f["q4.offset"].text


def test_a_decode_loop_is_told_its_cache_must_be_static_before_it_is_told_to_graph_the_step():
    """The H200 Llama decode, compiled (default mode) with a dynamic cache: the per-token rule says no CUDA graph can
    be reused while the shapes change each token; the GPU-starved rule's fix, which names reduce-overhead, says the
    cache must be static first instead of contradicting it."""
    _, _, d = run(DATA / "h200_train" / "llm_decode_dynamic_compile_default.json.gz")
    starved, tokens = rules(d)["gpu_starved"], rules(d)["decode_launch_bound"]
    assert "no CUDA graph can be reused" in tokens.fix and "reduce-overhead" in starved.fix
    assert starved.fix.index("must be a static one") < starved.fix.index("reduce-overhead")


@pytest.mark.parametrize("name,unlike", [("input_workers_eager", True), ("copy_pinned_eager", False)])
def test_a_median_of_two_unlike_steps_is_said_to_be_their_mean(name, unlike):
    """Three profiled steps leave two in the steady state, whose median is their mean: the H200 DataLoader run's two
    took 33.88 and 1.78 ms (the workers' batches ran out in one), a 17.83 ms no step took; Q2 gives both. Two alike
    steps (the pinned copy run's) get no such note."""
    from profiling_core.units import format_duration_us
    path = DATA / "h200_verdicts" / f"{name}.json"
    durs = [b - a for a, b in sorted(steps_of(scan_trace(path)))][1:]
    assert len(durs) == 2 and (max(durs) >= 2 * min(durs)) == unlike
    text = run(path)[1]["q2.bound"].text
    said = f"these two differ: {format_duration_us(durs[0])} and {format_duration_us(durs[1])} of CPU time"
    assert (said in text) == unlike and ("The median of two steps is their mean" in text) == unlike


def _paired(events):
    """{correlation: the runtime or driver call} and the GPU events (kernels, copies, memsets) of a plain scan."""
    xs = [e for e in events if e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in xs if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    gpu = [e for e in xs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    return xs, calls, gpu


def _inside(inner, outer) -> bool:
    return (inner["pid"], inner["tid"]) == (outer["pid"], outer["tid"]) and outer["ts"] <= inner["ts"] \
        and inner["ts"] + inner.get("dur", 0) <= outer["ts"] + outer["dur"]


def test_q6_says_which_kernel_runs_its_launch_counts_leave_out():
    """The H100 LM-head trace (torch.compile) holds kernels whose launch call it does not (queued before the
    recording began): the kernel table counts 4 runs of three kernels where question 6, counting launches from their
    calls, lists 3. A plain scan pairs each kernel with its call by correlation; the finding says which it left out."""
    path = DATA / "h100" / "lm_head_50257_compile.json.gz"
    _xs, calls, gpu = _paired(scan_trace(path))
    runs = collections.Counter(e["name"] for e in gpu if e["cat"] == "kernel")
    paired = collections.Counter(e["name"] for e in gpu if e["cat"] == "kernel"
                                 and e.get("args", {}).get("correlation") in calls)
    short = {n: (runs[n], paired[n]) for n in runs if runs[n] > paired[n]}
    assert short and sum(runs.values()) - sum(paired.values()) == 3
    q6 = run(path)[1]["q6.launch_path"]
    assert q6.evidence["kernel_runs_without_launch_call"] == 3
    assert "3 kernel runs on the GPU lane have none in it" in q6.text
    for name, (total, here) in short.items():
        assert f"{name} {total}× in the table, {here}× here" in q6.text
    for name in set(runs) - set(short):
        assert f"{name} " not in q6.text.split("this list does not:")[1]


def test_one_item_call_is_one_wait_with_the_syncs_inside_it_named_as_its_chain():
    """The H200 pinned-copy compiled run reads one scalar back per step: aten::item, with aten::_local_scalar_dense
    inside it and cudaStreamSynchronize inside that (a plain scan). The synchronisation item counts that as one
    .item() per step, naming the calls inside it, not as three synchronising calls."""
    path = DATA / "h200_verdicts" / "copy_pinned_compile.json"
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = sorted((e for e in xs if str(e["name"]).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"),
                   key=lambda e: e["ts"])[1:]  # the steady state: the steps after the first
    for st in steps:
        (item,) = [e for e in xs if e["name"] == "aten::item" and _inside(e, st)]
        (dense,) = [e for e in xs if e["name"] == "aten::_local_scalar_dense" and _inside(e, st)]
        (sync,) = [e for e in xs if e["name"] == "cudaStreamSynchronize" and _inside(e, st)]
        assert _inside(dense, item) and _inside(sync, dense)
    text = rules(run(path)[2])["sync_in_step"].text
    assert "the CPU waits for the GPU: aten::item ×1 (→ aten::_local_scalar_dense → cudaStreamSynchronize) per step" \
        in text
    assert "aten::_local_scalar_dense ×" not in text and "cudaStreamSynchronize ×" not in text


def test_the_attention_rule_measures_the_padding_around_a_fused_kernel():
    """The H200 bf16 attention with head_dim 100: flash ran it, and scaled_dot_product_attention padded the query,
    key and value to a multiple of 8 first (aten::pad → aten::constant_pad_nd: a fill and a copy kernel each). A plain
    scan sums, over the steady-state steps, the kernels whose launch call lies inside an aten::pad inside the
    attention call: a third of the attention's GPU time. The rule says so, and its fix names it, where "nothing to
    change for the backend" alone would hide it; head_dim 64 pads nothing and the rule says nothing of padding."""
    path = DATA / "h200_verdicts" / "attn_hd100_eager.json"
    xs, calls, gpu = _paired(scan_trace(path))
    steps = sorted((e for e in xs if str(e["name"]).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"),
                   key=lambda e: e["ts"])[1:]
    sdpa = [e for e in xs if e["name"] == "aten::scaled_dot_product_attention"]
    pads = [e for e in xs if e["name"] == "aten::pad" and any(_inside(e, a) for a in sdpa)]
    pad_us = sdpa_us = 0.0
    pad_ops = 0
    for g in gpu:
        call = calls.get(g.get("args", {}).get("correlation"))
        if call is None or not any(_inside(call, st) for st in steps) or not any(_inside(call, a) for a in sdpa):
            continue
        sdpa_us += g["dur"]
        if any(_inside(call, p) for p in pads):
            pad_us, pad_ops = pad_us + g["dur"], pad_ops + 1
    n = len(steps)
    assert pad_ops / n == 6 and 0.3 < pad_us / sdpa_us < 0.36
    x = rules(run(path)[2])["attention_backend"]
    assert x.evidence["padding_us_per_step"] == pytest.approx(pad_us / n, abs=1e-3)
    assert x.evidence["attention_gpu_us_per_step"] == pytest.approx(sdpa_us / n, abs=1e-3)
    assert (f"padded its inputs' last dimension (head_dim 100) to a multiple of 8 (aten::pad → aten::constant_pad_nd): "
            f"6 GPU ops per step, {pad_us / n:.1f} µs of GPU time per step, {100 * pad_us / sdpa_us:.0f}% of the "
            f"{sdpa_us / n:.1f} µs the attention's GPU ops took") in x.text
    assert x.cost_us_per_step == pytest.approx(pad_us / n, abs=1e-3)  # the GPU sets this step's pace
    assert "Nothing to change for the backend" in x.fix and "a head_dim that is a multiple of 8" in x.fix
    plain = rules(run(DATA / "h200_workloads" / "attention_eager.json")[2])["attention_backend"]
    assert "padded" not in plain.text and "padding" not in plain.fix and plain.cost_us_per_step is None


@pytest.mark.parametrize("head_dim, pads", [(100, True), (104, False)])
def test_on_an_h100_a_head_dim_that_is_a_multiple_of_8_is_not_padded(head_dim, pads):
    """The same attention on an H100: at head_dim 100 aten::pad runs inside scaled_dot_product_attention (a plain
    scan) and the rule measures its kernels; at 104, a multiple of 8 that is no power of two, nothing is padded (the
    scan finds no aten::pad) and the rule says nothing of padding: the fix's claim, seen on a second GPU."""
    path = DATA / "h100" / f"attn_hd{head_dim}_eager.json.gz"
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    assert any(e["name"] == "aten::pad" for e in xs) == pads
    x = rules(run(path, peaks=None)[2])["attention_backend"]
    assert (f"padded its inputs' last dimension (head_dim {head_dim}) to a multiple of 8" in x.text) == pads
    assert ("a head_dim that is a multiple of 8" in x.fix) == pads


def test_rocm_copy_calls_count_among_the_launch_calls():
    """The MI250 training step launches 16 GPU ops: 14 kernels through hipLaunchKernel and hipExtModuleLaunchKernel,
    2 copies through hipMemcpyWithStream (a plain scan, pairing by correlation). The GPU-starved item counts all 16
    calls as launch calls, as it counts cudaMemcpyAsync on CUDA (the calls of every thread that start in the step's
    window, the backward's too)."""
    path = DATA / "third_party" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    xs, calls, gpu = _paired(scan_trace(path))
    (step,) = [e for e in xs if e["name"] == "ProfilerStep#1" and e.get("cat") == "user_annotation"]
    launched = [calls[g["args"]["correlation"]] for g in gpu if g.get("args", {}).get("correlation") in calls
                and step["ts"] <= calls[g["args"]["correlation"]]["ts"] < step["ts"] + step["dur"]]  # any thread
    names = collections.Counter(c["name"] for c in {id(c): c for c in launched}.values())
    assert names["hipMemcpyWithStream"] == 2 and sum(names.values()) == 16
    text = rules(run(path, peaks=None)[2])["gpu_starved"].text
    assert "(16 GPU ops per step)" in text and "The 16 launch calls take" in text


# --- per step means the steps' own calls, and a cost never passes what the step can lose (rules read by hand) -------

_UNALIGNED_BF16 = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_nn_align1>(x)"


def _gemm_loop(path: Path, *, dims, types, kernel: str, gpu_us: float, warmup_calls: int) -> Path:
    """Four steps of one GEMM and a sync each, after ``warmup_calls`` calls of the same GEMM before the first step
    (a script's warm-up the recording caught)."""
    t = vt.Trace()

    def gemm(t):
        t.cpu("aten::mm", 60, dims=dims, types=types, children=lambda t: t.launch(kernel, gpu_us))
    for _ in range(warmup_calls):
        gemm(t)
    if warmup_calls:
        t.sync()
        t.t += 10
    for n in range(1, 5):
        t.step(n, lambda t: (gemm(t), t.sync()))
    return t.write(path)


@pytest.mark.parametrize("rule,kw", [
    ("unaligned_gemm_dims", dict(dims=[[4096, 4095], [4095, 4096]], types=vt.BF16, kernel=_UNALIGNED_BF16,
                                 gpu_us=200.0)),
    ("fp32_without_tf32", dict(dims=[[4096, 4096], [4096, 4096]], types=["float", "float"],
                               kernel="ampere_sgemm_128x64_nn", gpu_us=4000.0))])
def test_gemm_rules_per_step_count_the_steps_calls_not_a_warm_up_before_them(tmp_path, rule, kw):
    """Eight calls of the GEMM before the first ProfilerStep, then one per step: the rules' per-step figures are the
    steps' own GEMMs (one per step, as a scan of the trace counts), the same as without the warm-up calls; before,
    they divided all twelve calls' time by the four steps (an unaligned GEMM's cost 3× its own, an fp32 GEMM's
    "12,000 µs of GEMM time per step" beside a step of 4,000 µs of GPU work)."""
    warm = _gemm_loop(tmp_path / "warm.json", warmup_calls=8, **kw)
    plain = _gemm_loop(tmp_path / "plain.json", warmup_calls=0, **kw)
    ev = [e for e in scan_trace(warm) if e.get("ph") == "X"]
    steps = steps_of(ev)
    gemms = [e for e in ev if e["name"] == "aten::mm"]
    assert len(gemms) == 12 and sum(any(a <= e["ts"] < b for a, b in steps) for e in gemms) == 4
    got = {}
    for name, path in (("warm", warm), ("plain", plain)):
        _r, _f, d = run(path)
        got[name] = rules(d)[rule]
    assert got["warm"].cost_us_per_step == pytest.approx(got["plain"].cost_us_per_step, rel=1e-9)
    assert 0 < got["warm"].cost_us_per_step <= kw["gpu_us"]
    if rule == "fp32_without_tf32":
        assert "4,000.0 µs of such kernels per step" in got["warm"].text and "12,000" not in got["warm"].text


def _scan_step_figures(path: Path) -> tuple[float, float]:
    """(median step's CPU time, median step's GPU kernel time) over the steps after the first, by a plain scan."""
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = steps_of(ev)[1:]
    calls = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
             and "correlation" in e.get("args", {})}
    gpu = [sum(k["dur"] for k in ev if k.get("cat") == "kernel" and a <= calls[k["args"]["correlation"]] < b)
           for a, b in steps]
    return statistics.median(b - a for a, b in steps), statistics.median(gpu)


def test_a_for_loop_optimizer_s_cost_on_a_cpu_paced_step_is_what_the_step_can_lose(tmp_path):
    """A 1 ms forward GEMM and a for-loop AdamW (40 parameters × 5 ops of 8 µs, a 2 µs kernel each): 1,640 µs of
    CPU and 1,400 µs of GPU work a step, the CPU sets the pace. A fused optimizer takes the optimizer's CPU time and
    most of its 400 µs of kernels off, but the step keeps its 1 ms GEMM: it can lose at most CPU − (GPU − the
    optimizer's GPU time), 640 µs, where the rule said 1,604 µs (the optimizer's whole CPU time)."""
    t = vt.Trace()

    def body(t):
        vt._annotate(t, "train::forward", lambda t: t.cpu("aten::mm", 30, dims=[[512, 512], [512, 512]],
                                                          types=vt.BF16, children=lambda t: t.launch(vt.BF16_GEMM,
                                                                                                    1000.0)))

        def opt(t):
            for _ in range(40):
                for op in vt.FOR_LOOP_OPS:
                    t.cpu(op, 8, children=lambda t: t.launch(vt.ELEMENTWISE, 2.0))
        vt._annotate(t, "train::optimizer", lambda t: vt._annotate(t, "Optimizer.step#AdamW.step", opt))
    for n in range(1, 6):
        t.step(n, body)
    path = t.write(tmp_path / "t.json")
    cpu, gpu = _scan_step_figures(path)
    opt_gpu = 40 * len(vt.FOR_LOOP_OPS) * 2.0
    assert (cpu, gpu) == pytest.approx((1640.0, 1400.0))
    r, _f, d = run(path)
    x = rules(d)["unfused_optimizer"]
    assert r.summary["steady_state"]["bound"] == "overhead-bound"
    assert x.cost_us_per_step == pytest.approx(cpu - (gpu - opt_gpu))
    assert "a step gets no shorter than its GPU work" in x.cost_basis


def test_the_allocator_rule_s_cost_is_no_more_than_the_step_can_lose(tmp_path):
    """Each step: a 3 ms GEMM, then empty_cache()'s cudaFree, which waits for it, then a cudaMalloc. The calls take
    2,987 µs of the step's 3,031 µs, nearly all of it the wait for a GEMM the step runs anyway: without them the
    step would still take its 3 ms of GPU work, so the cost is the step's CPU time less its GPU work (31 µs)."""
    t = vt.Trace()

    def body(t):
        t.cpu("aten::mm", 30, dims=[[4096, 4096], [4096, 4096]], types=vt.BF16,
              children=lambda t: t.launch(vt.BF16_GEMM, 3000.0))
        ts = t.t
        dur = max(5.0, t.gpu_free - ts + 3.0)
        t._x("cudaFree", ts, dur, "cuda_runtime")
        t.t = ts + dur
        t.cpu("aten::empty", 20, children=lambda t: (t._x("cudaMalloc", t.t, 10.0, "cuda_runtime"),
                                                     setattr(t, "t", t.t + 10.0)))
    for n in range(1, 6):
        t.step(n, body)
    path = t.write(tmp_path / "t.json")
    cpu, gpu = _scan_step_figures(path)
    _r, _f, d = run(path)
    x = rules(d)["allocator_in_step"]
    assert "2,987.0 µs of CPU time per step" in x.text
    assert x.cost_us_per_step == pytest.approx(cpu - gpu) and cpu - gpu == pytest.approx(31.0)
    assert "comes on top" not in x.cost_basis


@pytest.mark.parametrize("slow_types,slow_dims", [(["c10::Half", "c10::Half"], [[256, 256], [256, 256]]),
                                                  (None, None)])
def test_cpu_contention_compares_a_call_only_with_calls_of_its_shapes_and_dtypes(tmp_path, slow_types, slow_dims):
    """A quiet CPU run: three 300 µs fp32 256² aten::mm a step, and one 6 ms call that is another computation: the
    same shapes in fp16 (a slow path, not a stall), or an op whose shapes the trace never recorded. Neither is "the
    same call" as the fp32 ones, so neither is a stall 20× its median; the fp16 one, alone of its kind, has no
    median at all."""
    t = vt.Trace()
    dims = [[256, 256], [256, 256]]

    def body(t):
        for _ in range(3):
            t.cpu("aten::mm", 300, dims=None if slow_dims is None else dims,
                  types=None if slow_types is None else ["float", "float"])
        t.cpu("aten::mm", 6000, dims=slow_dims, types=slow_types)
    for n in range(1, 5):
        t.step(n, body)
    path = t.write(tmp_path / "t.json", device_properties=False)
    _r, _f, d = run(path, config={"workload": "mlp", "threads": 2, "device": "cpu"})
    assert "cpu_contention" not in rules(d)


def test_cpu_contention_still_names_a_stall_of_the_same_call(tmp_path):
    """The counter case: the slow call is the same op, shapes and dtypes as the others (fp32 256²), 20× their
    300 µs median: a stall the rule names, with the figures of a scan."""
    t = vt.Trace()
    dims, types = [[256, 256], [256, 256]], ["float", "float"]

    def body(t):
        for _ in range(3):
            t.cpu("aten::mm", 300, dims=dims, types=types)
        t.cpu("aten::mm", 6000, dims=dims, types=types)
    for n in range(1, 5):
        t.step(n, body)
    path = t.write(tmp_path / "t.json", device_properties=False)
    _r, _f, d = run(path, config={"workload": "mlp", "threads": 2, "device": "cpu"})
    x = rules(d)["cpu_contention"]
    assert "took 6,000.0 µs" in x.text and "against a median 300.0 µs for the same call (20×)" in x.text


def test_the_input_rule_does_not_call_a_gpu_without_work_busy(tmp_path):
    """Steps after the first launch nothing on the GPU while the DataLoader takes 1 ms of their ~1.04 ms: the rule
    said "the GPU had 0.00 µs of work per step and idled 0% of the step"."""
    t = vt.Trace()

    def first(t):
        t.cpu(vt.SINGLE_NEXT, 100, cat="user_annotation", children=lambda t: t.cpu("aten::stack", 10.0))
        t.cpu("aten::mm", 40, dims=[[512, 512], [512, 512]], types=vt.BF16,
              children=lambda t: t.launch(vt.BF16_GEMM, 20.0))

    def later(t):
        t.cpu(vt.SINGLE_NEXT, 1000, cat="user_annotation", children=lambda t: t.cpu("aten::stack", 10.0))
        t.cpu("aten::add", 40)
    t.step(1, first)
    for n in range(2, 5):
        t.step(n, later)
    path = t.write(tmp_path / "t.json")
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    later_steps = steps_of(ev)[1:]
    assert not [e for e in ev if e.get("cat") == "kernel" and any(a <= e["ts"] < b for a, b in later_steps)]
    _r, _f, d = run(path)
    x = rules(d)["input_bound"]
    assert "idled 0%" not in x.text and "the GPU ran no work in these steps" in x.text


@pytest.mark.parametrize("call", ["cudaEventSynchronize", "hipEventSynchronize", "cuEventSynchronize"])
def test_the_sync_rule_knows_every_runtime_s_event_sync(tmp_path, call):
    """One loop waiting each step in an event sync of the CUDA runtime, of ROCm's or of the driver API: question 2
    counts the wait under each name (the analyses' one list of sync calls), and the sync rule names it under each
    too; it knew only the CUDA runtime's."""
    t = vt.Trace()

    def body(t):
        t.cpu("aten::foo", 300)
        t.cpu("aten::mm", 20, children=lambda t: t.launch("k", 400))
        t.sync(call)
    for n in range(1, 5):
        t.step(n, body)
    path = t.write(tmp_path / "t.json")
    assert sum(e["name"] == call for e in scan_trace(path)) == 4
    r, _f, d = run(path)
    assert r.summary["steady_state"]["sync_wait_us_per_step"] > 0
    x = rules(d)["sync_in_step"]
    assert f"{call} ×1 per step" in x.text


def _first_step_malloc(path: Path, malloc_us: float) -> Path:
    """Four steps; the first alone calls cudaMalloc (``malloc_us``) and runs its aten::foo 0.8 ms shorter (1.2 against
    2.0 ms)."""
    t = vt.Trace()

    def body(first):
        def b(t):
            t.cpu("aten::foo", 1200 if first else 2000)
            if first:
                t.cpu("aten::empty", malloc_us + 5, children=lambda t: t._x("cudaMalloc", t.t, malloc_us,
                                                                            "cuda_runtime")
                      or setattr(t, "t", t.t + malloc_us))
            t.cpu("aten::mm", 20, children=lambda t: t.launch("k", 50))
        return b
    for n in range(1, 5):
        t.step(n, body(n == 1))
    return t.write(path)


def test_q3_gives_no_share_over_the_whole_extra_to_the_first_step_s_calls(tmp_path):
    """The first step alone calls cudaMalloc (1 ms), but its other work is 0.8 ms shorter than the later steps':
    the first step's extra is ~0.2 ms (a scan), less than the call. Question 3 said the call was "488% of the
    205.0 µs extra; the rest is host-side work" (no rest exists); it now says the calls are more than all of it."""
    path = _first_step_malloc(tmp_path / "t.json", 1000.0)
    durs = [b - a for a, b in steps_of([e for e in scan_trace(path) if e.get("ph") == "X"])]
    extra = durs[0] - statistics.median(durs[1:])
    assert 0 < extra < 1000.0
    q3 = run(path)[1]["q3.cold_start"]
    assert "the first step alone calls cudaMalloc ×1 (1.00 ms), 1.00 ms in all: more than all of the" in q3.text
    assert "the rest is host-side work" not in q3.text and "%" not in q3.text.split("in all")[1].split(".")[0]


def _two_waiters(path: Path, *, second: bool, cpu_us: float = 600.0, gpu_us: float = 400.0) -> Path:
    """Each step: ``cpu_us`` of CPU work, a ``gpu_us`` kernel, then the step's thread waits in cudaDeviceSynchronize
    for it; with ``second``, a second thread waits in cudaStreamSynchronize for the same kernel at the same time."""
    t = vt.Trace()

    def body(t):
        t.cpu("aten::foo", cpu_us)
        t.cpu("aten::mm", 20, children=lambda t: t.launch("k", gpu_us))
        ts, end = t.t, t.gpu_free + 2.0
        t._x("cudaDeviceSynchronize", ts, end - ts, "cuda_runtime", tid=1)
        if second:
            t._x("cudaStreamSynchronize", ts + 1.0, end - ts - 1.0, "cuda_runtime", tid=2)
        t.t = end
    for n in range(1, 5):
        t.step(n, body)
    return t.write(path)


def test_two_threads_waiting_on_the_same_kernel_block_the_step_once(tmp_path):
    """Two threads wait at once for one 400 µs kernel a step: the step spends that time blocked once. Summed, the
    two calls gave a "sync wait" of 767 µs a step, more than the GPU work it waited for, and turned an overhead-bound
    step (626 µs of the CPU's own work against 400 µs of GPU work) compute-bound."""
    one = _two_waiters(tmp_path / "one.json", second=False)
    two = _two_waiters(tmp_path / "two.json", second=True)
    ev = [e for e in scan_trace(two) if e.get("ph") == "X"]
    syncs = [e for e in ev if e["name"].endswith("Synchronize")]
    assert len({e["tid"] for e in syncs}) == 2 and len(syncs) == 8
    kernel_us = statistics.median(e["dur"] for e in ev if e.get("cat") == "kernel")
    r1, f1, d1 = run(one)
    r2, f2, d2 = run(two)
    ss1, ss2 = r1.summary["steady_state"], r2.summary["steady_state"]
    assert ss2["sync_wait_us_per_step"] == pytest.approx(ss1["sync_wait_us_per_step"])
    assert ss2["sync_wait_us_per_step"] <= kernel_us
    assert ss2["bound"] == ss1["bound"] == "overhead-bound"
    assert (r2.steps["sync_wait_us"] <= r2.steps["gpu_busy_us"] + 1e-6).all()
    blocked = float(re.search(r"([\d,.]+) µs blocked in synchronising calls per step",
                              rules(d2)["sync_in_step"].text).group(1).replace(",", ""))
    held = []  # per step after the first, by a scan: the union of its sync calls' intervals (the two overlap)
    for a, b in steps_of(ev)[1:]:
        mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in syncs if a <= e["ts"] < b)
        held.append(max(e for _s, e in mine) - mine[0][0])
    assert blocked == pytest.approx(statistics.mean(held), abs=0.05)


@pytest.mark.parametrize("call", ["cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch"])
def test_a_decode_token_replaying_a_graph_of_any_runtime_is_said_to_replay_one(tmp_path, call):
    """Each decode token replays one captured graph (ten 2 µs kernels) through the CUDA runtime's, ROCm's or the
    driver API's graph launch. The analyses count all three as graph replays (question 9 says so); the decode rule
    and the GPU-starved rule counted only cudaGraphLaunch, and on a ROCm trace told the user to start replaying a
    graph."""
    t = vt.Trace(device_name="AMD Instinct MI300X" if call.startswith("hip") else "NVIDIA H200")

    def graph_launch(t):
        t.corr += 1
        ts = t.t
        t._x(call, ts, 8.0, "cuda_runtime", correlation=t.corr)
        start = max(ts + 3, t.gpu_free)
        for i in range(10):
            t._x(f"triton_poi_fused_{i}", start, 2.0, "kernel", pid=0, tid=7, correlation=t.corr, device=0, stream=7)
            start += 2.0
        t.gpu_free = start
        t.t = ts + 8.0

    def token(t):
        t.cpu("Torch-Compiled Region: 0/0", 300, children=lambda t: t.cpu("## Call CompiledFxGraph aaaa ##", 50,
                                                                           children=graph_launch))
    for n in range(1, 5):
        t.step(n, lambda t: [t.cpu("decode::token", 320, children=token, cat="user_annotation") for _ in range(4)])
    path = t.write(tmp_path / "t.json")
    assert sum(e["name"] == call for e in scan_trace(path)) == 16
    _r, _f, d = run(path, config={"compile": "reduce-overhead"})
    x = rules(d)["decode_launch_bound"]
    assert f"Each token already replays a CUDA graph (1 {call} per token)" in x.text
    assert x.fix.startswith("The graph replays already")


# --- torch.compile's regions, counted as the steps ran them ----------------------------------------------------------

def _region(t, frame: str, us: float, graph: str = "aaaa", graph_us: float = 30.0, inner=None):
    def body(t):
        t.cpu(f"## Call CompiledFxGraph {graph} ##", graph_us,
              children=lambda t: t.launch("triton_poi_fused_add_0", 5, call="cuLaunchKernel"))
        if inner is not None:
            inner(t)
    t.cpu(f"Torch-Compiled Region: {frame}", us, children=body)


def test_q10_counts_a_region_nested_in_another_once(tmp_path):
    """A compiled function called from compiled code: a 100 µs region (its 80 µs graph) inside a 200 µs one (its own
    40 µs graph). Question 10 summed both regions' time (300 µs of region in a 214 µs step, 180 µs of "wrapping");
    the outer region holds the inner one: 200 µs, 120 µs of graphs, 80 µs around them (a scan)."""
    t = vt.Trace()

    def body(t):
        t.cpu("TorchDynamo Cache Lookup", 10)
        _region(t, "0/0", 200, graph_us=40, inner=lambda t: _region(t, "1/0", 100, graph="bbbb", graph_us=80))
    for n in range(1, 4):
        t.step(n, body)
    path = t.write(tmp_path / "t.json")
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    outer = [e for e in ev if e["name"] == "Torch-Compiled Region: 0/0"]
    graphs = [e for e in ev if e["name"].startswith("## Call CompiledFxGraph")]
    region_us, graph_us = outer[1]["dur"], sum(e["dur"] for e in graphs) / len(outer)
    q10 = run(path)[1]["q10.compile_cost"]
    assert (f"Torch-Compiled Region {region_us:.1f} µs, of which CompiledFxGraph {graph_us:.1f} µs and "
            f"{region_us - graph_us:.1f} µs of Dynamo/AOT wrapping") in q10.text


def test_q10_s_compiled_steps_are_the_steps_that_ran_compiled_code(tmp_path):
    """Two eager steps (1 ms of aten::add each), then one compiled step (94 µs): question 10 said "Compiled steps took
    a median 1.00 ms", the median of all three; the compiled step took 94 µs (a scan)."""
    t = vt.Trace()
    t.step(1, lambda t: t.cpu("aten::add", 1000, children=lambda t: t.launch("vectorized_elementwise_kernel", 5)))
    t.step(2, lambda t: t.cpu("aten::add", 1000, children=lambda t: t.launch("vectorized_elementwise_kernel", 5)))
    t.step(3, lambda t: (t.cpu("TorchDynamo Cache Lookup", 10), _region(t, "0/0", 80, graph_us=50)))
    path = t.write(tmp_path / "t.json")
    last = steps_of([e for e in scan_trace(path) if e.get("ph") == "X"])[-1]
    q10 = run(path)[1]["q10.compile_cost"]
    assert f"Compiled steps took a median {last[1] - last[0]:.1f} µs of CPU time" in q10.text


@pytest.mark.parametrize("every", [True, False])
def test_q9_says_the_graph_is_the_same_every_step_only_where_every_step_called_it(tmp_path, every):
    """One compiled graph called twice in step 1; steps 2 and 3 call it too, or run eagerly. Question 9 said "(the
    same every step: a cache hit)" either way; where only the first step ran it, it says so (the per-step figures
    read the steps after the first)."""
    t = vt.Trace()
    def eager(t):
        t.cpu("aten::add", 60, children=lambda t: t.launch("vectorized_elementwise_kernel", 5))
    t.step(1, lambda t: (_region(t, "0/0", 60), _region(t, "0/0", 60)))
    for n in (2, 3):
        t.step(n, (lambda t: _region(t, "0/0", 60)) if every else eager)
    text = run(t.write(tmp_path / "t.json"))[1]["q9.compile"].text
    if every:
        assert "1 distinct CompiledFxGraph hash (the same every step: a cache hit)" in text
    else:
        # step 1, the only one that ran compiled code, is the first, which the per-step figures leave out
        assert "No torch.compile rows" not in text and "every step" not in text
        assert ("torch.compile ran compiled code only in step 1, which the per-step figures leave out (the 2 steps "
                "after the first;") in text and "the steps the per-step figures read ran eagerly." in text


def test_compile_breaks_counts_the_frames_the_steps_ran(tmp_path):
    """Each step runs compiled frame 0 twice; frame 1 ran once before the first step (a warm-up). The rule said "2
    compiled regions per step from 2 compiled frames (graph breaks ...)"; in the steps one frame ran, called twice,
    which is neither a graph break nor two compiled functions."""
    t = vt.Trace()
    _region(t, "1/0", 50)
    t.t += 10
    for n in range(1, 4):
        t.step(n, lambda t: (_region(t, "0/0", 50), _region(t, "0/0", 50)))
    _r, _f, d = run(t.write(tmp_path / "t.json"))
    assert "compile_breaks" not in rules(d)


@pytest.mark.parametrize("frames", [["0/0"] * 4, ["0/0", "1/0", "0/0", "1/0"]])
def test_compile_breaks_per_decode_token_needs_more_than_one_frame(tmp_path, frames):
    """Each decode token calls compiled regions four times: one frame (a compiled block called once per layer: no
    graph break, and the same trace without token ranges gets no verdict), or two (the forward split in two: the
    rule names it)."""
    t = vt.Trace()

    def token(t):
        for f in frames:
            _region(t, f, 40, graph_us=20)
    for n in range(1, 4):
        t.step(n, lambda t: [t.cpu("decode::token", 170, children=token, cat="user_annotation") for _ in range(3)])
    _r, _f, d = run(t.write(tmp_path / "t.json"))
    if len(set(frames)) == 1:
        assert "compile_breaks" not in rules(d)
    else:
        assert "4 compiled regions per decode token from 2 compiled frames (graph breaks split the forward)" in \
            rules(d)["compile_breaks"].text


def test_q3_places_a_cold_start_the_first_step_holds_in_the_first_step(tmp_path):
    """The first step alone calls cudaMalloc (300 µs) and is still faster than the others (its aten::foo 0.8 ms
    shorter). Question 3 said "(the run's cold-start work fell before the recorded steps)", while the call it calls
    cold-start work lies in the first step (a scan)."""
    path = _first_step_malloc(tmp_path / "t.json", 300.0)
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    first = steps_of(ev)[0]
    assert [first[0] <= e["ts"] < first[1] for e in ev if e["name"] == "cudaMalloc"] == [True]
    q3 = run(path)[1]["q3.cold_start"]
    assert "fell before the recorded steps" not in q3.text
    assert "it alone calls cudaMalloc ×1 (300.0 µs), cold-start work" in q3.text


def test_q3_gives_the_profiler_s_start_up_no_share_past_the_whole(tmp_path):
    """The profiler's Activity Buffer Request (800 µs, on its own lane beside the first step) is longer than the
    first step's whole extra (500 µs, a scan): question 3 said "160% of the 500.0 µs extra"."""
    t = vt.Trace()
    t.events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                     "tid": "PyTorch Profiler", "ts": 900.0, "dur": 6000.0, "args": {}})

    def body(n):
        def b(t):
            if n == 1:
                t.events.append({"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0,
                                 "ts": t.t + 10, "dur": 800.0, "args": {}})
            t.cpu("aten::foo", 1500 if n == 1 else 1000)
            t.cpu("aten::mm", 20, children=lambda t: t.launch("k", 50))
        return b
    for n in range(1, 5):
        t.step(n, body(n))
    path = t.write(tmp_path / "t.json")
    durs = [b - a for a, b in steps_of([e for e in scan_trace(path) if e.get("ph") == "X" and e.get("pid") == 1])]
    extra = durs[0] - statistics.median(durs[1:])
    q3 = run(path)[1]["q3.cold_start"]
    assert f"its Activity Buffer Request took 800.0 µs, more than all of the {extra:.1f} µs extra" in q3.text
    assert "160%" not in q3.text


def test_q2_does_not_take_collectives_the_step_did_not_launch_from_its_gpu_work(tmp_path):
    """Each 100 µs step launches one 150 µs GEMM; an all-reduce launched by another thread before the step runs
    200 µs inside each step's window. The breakdown counts that collective in the window (whoever launched it), and
    question 2 said "Of that GPU work, 200.0 µs a step ... without them the GPU would have -50.0 µs to do"."""
    ev, corr = [], 0

    def x(name, ts, dur, cat, pid=1, tid=1, **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args})

    def launch(kernel, ts, gts, gdur, stream, tid=1):
        nonlocal corr
        corr += 1
        x("cudaLaunchKernel", ts, 5 if tid == 2 else 10, "cuda_runtime", tid=tid, correlation=corr)
        x(kernel, gts, gdur, "kernel", pid=0, tid=stream, correlation=corr, device=0, stream=stream)
    for n, base in enumerate([1000, 2000, 3000, 4000]):
        x(f"ProfilerStep#{n}", base, 100, "user_annotation")
        x("aten::mm", base + 5, 50, "cpu_op")
        launch("gemm_kernel", base + 10, base + 200, 150, 7)
        launch("ncclDevKernel_AllReduce_RING_LL", base - 40, base, 200, 9, tid=2)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev, "deviceProperties": [
        {"id": 0, "name": "NVIDIA H100", "computeMajor": 9, "computeMinor": 0}]}))
    q2 = run(path)[1]["q2.bound"]
    assert "collectives that no other GPU work overlaps" not in q2.text and "-50.0" not in q2.text
    assert not re.search(r"would have -", q2.text)


def test_q2_says_plainly_that_the_steady_steps_launched_no_gpu_work(tmp_path):
    """The first step launches a kernel, the three after it none: question 2 read "None of the 3 steps after the
    first; the first carries start-up effects launched GPU work", the clause's own semicolon cutting it in two."""
    t = vt.Trace()
    t.step(1, lambda t: t.cpu("aten::mm", 40, children=lambda t: t.launch(vt.BF16_GEMM, 20.0)))
    for n in range(2, 5):
        t.step(n, lambda t: t.cpu("aten::add", 40))
    q2 = run(t.write(tmp_path / "t.json"))[1]["q2.bound"]
    assert q2.text.startswith("In steady state (the 3 steps after the first; the first may carry start-up effects, "
                              "and question 3 compares it with them) no step launched GPU work (median ")


def test_q1_names_gpu_ops_that_ran_at_once_among_what_the_sum_counts(tmp_path):
    """Two 1 ms kernels on two streams at the same time, launched with no op around their calls: the rows' self
    device time sums to 2 ms against 1 ms of busy GPU (a scan: the two intervals are the same), and question 1 said
    "no row is counted twice" beside its own 2.0×."""
    ev, corr = [], 0
    for kernel, ts, stream in (("gemm_a", 1000, 7), ("gemm_b", 1010, 8)):
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                   "dur": 10, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": stream, "ts": 1020, "dur": 1000,
                   "args": {"correlation": corr, "device": 0, "stream": stream}})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    text = run(path)[1]["q1.double_count"].text
    assert "2.0× the 1.00 ms" in text and "no row is counted twice" not in text
    assert ("the GPU ops' own rows (kernels, copies, memsets) sum to 2.00 ms, more than the busy time, because some "
            "ran at the same time") in text


@pytest.mark.parametrize("synced", [True, False])
def test_bursts_of_waiting_for_batches_count_where_each_step_waits_for_the_gpu(tmp_path, synced):
    """Ten steps of a 2 ms GEMM; one step in five waits 40 ms in the DataLoader's workers. With a sync at each step's
    end no queue carries over, so the wait is the step's: 82% of the steady steps' CPU time, and the rule names it.
    It stayed silent because the median step is GPU-paced ("the batches are made while it works through the queue").
    Without the sync the queue does carry the GPU through, and the rule still says nothing there."""
    t = vt.Trace()
    for n in range(1, 11):
        def body(t, d=40000.0 if n % 5 == 0 else 20.0):
            t.cpu(vt.WORKERS_NEXT, d, cat="user_annotation")
            t.cpu("aten::mm", 40, dims=[[4096, 4096], [4096, 4096]], types=vt.BF16,
                  children=lambda t: t.launch(vt.BF16_GEMM, 2000.0))
            if synced:
                t.sync()
        t.step(n, body)
    r, _f, d = run(t.write(tmp_path / "t.json"))
    assert r.summary["steady_state"]["bound"] == "compute-bound"
    if synced:
        x = rules(d)["input_bound"]
        assert "The waits come in bursts: step 5 waited 40,000.0 µs" in x.text and x.cost_us_per_step > 0
    else:
        assert "input_bound" not in rules(d)


def test_the_tf32_rule_says_why_it_leaves_a_memory_bound_gemm_s_time_out(tmp_path):
    """One FFMA kernel runs a 4096³ fp32 GEMM (4 ms) and an outer product 4096×1 @ 1×4096 (1 ms), both with recorded
    shapes; the outer product is held by the memory roof, where TF32 changes nothing. The text said the 1 ms was not
    in "GEMMs whose shapes the trace records"."""
    t = vt.Trace()

    def body(t):
        t.cpu("aten::mm", 60, dims=[[4096, 4096], [4096, 4096]], types=["float", "float"],
              children=lambda t: t.launch("ampere_sgemm_128x64_nn", 4000.0))
        t.cpu("aten::mm", 60, dims=[[4096, 1], [1, 4096]], types=["float", "float"],
              children=lambda t: t.launch("ampere_sgemm_128x64_nn", 1000.0))
        t.sync()
    for n in range(1, 5):
        t.step(n, body)
    path = t.write(tmp_path / "t.json")
    assert all("Input Dims" in e["args"] for e in scan_trace(path) if e.get("name") == "aten::mm")
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
        x = rules(diagnose(s, r, None, H200_PEAKS, compute_capability=9.0))["fp32_without_tf32"]
    assert "5,000.0 µs of such kernels per step, 4,000.0 µs of it" in x.text
    assert "the memory roof holds, which TF32 would not speed up" in x.text


@pytest.mark.parametrize("side", [True, False])
def test_a_sync_on_a_thread_beside_the_step_does_not_block_it(tmp_path, side):
    """The step's thread launches a 700 µs kernel and runs 900 µs of its own work without waiting; another thread,
    which holds no step and launches nothing, waits for the kernel in cudaStreamSynchronize. The step's thread never
    waited, so the step is overhead-bound (924 µs of CPU against 700 µs of GPU work), with or without that thread:
    question 2 said "684 µs of it blocked in synchronize calls ... compute-bound" with it."""
    t = vt.Trace()

    def body(t):
        t.cpu("aten::mm", 20, children=lambda t: t.launch("k", 700))
        if side:
            t._x("cudaStreamSynchronize", t.t, t.gpu_free - t.t + 2, "cuda_runtime", tid=2)
        t.cpu("aten::foo", 900)
    for n in range(1, 5):
        t.step(n, body)
    path = t.write(tmp_path / "t.json")
    ev = scan_trace(path)
    assert {e["tid"] for e in ev if e.get("name") == "cudaStreamSynchronize"} == ({2} if side else set())
    assert not [e for e in ev if e.get("tid") == 2 and e.get("name") != "cudaStreamSynchronize"]
    r, f, _d = run(path)
    ss = r.summary["steady_state"]
    assert ss["bound"] == "overhead-bound" and (ss["sync_wait_us_per_step"] or 0) == 0
    assert "blocked in synchronize calls" not in f["q2.bound"].text


def test_cpu_contention_counts_a_stall_per_step_slice_where_ranks_were_merged(tmp_path):
    """Two ranks' CPU traces merged into one file, each stalling once in step 3: the rule read every step number
    once per rank (their calls twice over) and divided what both ranks lost by the step numbers, twice what a step
    loses. Each rank's step is a step: the cost is one rank's, by hand (5,000 − 50) / 3 over steps 2-4."""
    fast = [("aten::native_layer_norm", 50.0)] * 4
    steps = [fast, fast, fast[:2] + [("aten::native_layer_norm", 5000.0)] + fast[3:], fast]
    one = vt.cpu_steps(tmp_path / "one.json", steps)
    two = vt.as_ranks(one, tmp_path / "two.json")
    evs = scan_trace(two)
    assert len({e["pid"] for e in evs if str(e.get("name")).startswith("ProfilerStep#")}) == 2
    stalls = [e for e in evs if e["name"] == "aten::native_layer_norm" and e["dur"] == 5000.0]
    assert len(stalls) == 2
    _, _, d = run(two, peaks=None)
    x = rules(d)["cpu_contention"]
    assert x.cost_us_per_step == pytest.approx((5000.0 - 50.0) / 3)
    assert len(x.evidence["slow_calls"]) == len(stalls) and x.evidence["basis_steps"] == [2, 3, 4]


def _busy_inside(kernels: list, a: float, b: float) -> float:
    """The union of kernel intervals inside [a, b), by a plain sweep."""
    tot, cur = 0.0, a
    for s, e in sorted(kernels):
        s, e = max(s, cur), min(e, b)
        if e > s:
            tot, cur = tot + e - s, e
    return tot


def test_the_input_rule_s_idle_share_is_of_the_same_steps_as_its_gpu_work(tmp_path):
    """One steady step launches a 1,500 µs kernel, the others 30 µs ones, each step ~1 ms of which 800 µs in the
    DataLoader. The rule paired the steps' mean GPU work with the steady state's median-based idle share ("had
    372 µs of work per step and idled 96%"), though the long kernel kept the GPU busy into the next step. The idle
    share now comes from the same steps' windows: a plain scan's union of kernel time inside each."""
    t = vt.Trace()
    for n in range(1, 7):
        def body(t, n=n):
            t.cpu(vt.SINGLE_NEXT, 800, cat="user_annotation", children=lambda t: t.cpu("aten::stack", 10.0))
            t.cpu("aten::mm", 40, dims=[[512, 512], [512, 512]], types=vt.BF16,
                  children=lambda t: t.launch(vt.BF16_GEMM, 1500.0 if n == 4 else 30.0))
            t.cpu("aten::add", 150)
        t.step(n, body)
    path = t.write(tmp_path / "t.json")
    events = scan_trace(path)
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "kernel"]
    spans = steps_of(events)[1:]  # the steady steps: after the first
    idle = 1 - sum(_busy_inside(kernels, a, b) for a, b in spans) / sum(b - a for a, b in spans)
    gpu = sum(e - s for s, e in kernels[1:]) / len(spans)  # the work the steady steps launched, per step
    _, _, d = run(path)
    x = rules(d)["input_bound"]
    assert x.evidence["gpu_us_per_step"] == pytest.approx(gpu)
    assert x.evidence["gpu_idle_share"] == pytest.approx(idle) and 0.3 < idle < 0.9
    assert f"had {gpu:,.1f} µs of work per step and idled {idle:.0%} of these steps' time" in x.text


def test_a_gpu_paced_step_with_a_full_launch_queue_can_lose_its_gpu_time(tmp_path):
    """A full launch queue: each launch call waits for the GPU, so the CPU's time (6,001 µs) follows its GPU work
    (6,000 µs). The GPU-time bound took the CPU's whole time as the floor and said TF32 could save 0 µs of six
    1,000 µs fp32 GEMMs; with less GPU work the launch calls return sooner, so the floor is the CPU's time outside
    them, and the cost is the GEMMs' time above their TF32 floor, by hand."""
    path = vt.full_launch_queue(tmp_path / "t.json")
    events = scan_trace(path)
    gemms = [e for e in events if e.get("cat") == "kernel"]
    per_step = len(gemms) / len(steps_of(events))
    floor_us = 2 * 4096 ** 3 / (H200_PEAKS.peak_tflops("tf32") * 1e6)  # FLOPs at the tf32 peak (bytes: shorter)
    r, _, d = run(path)
    assert r.summary["steady_state"]["bound"] == "compute-bound"
    x = rules(d)["fp32_without_tf32"]
    assert x.cost_us_per_step == pytest.approx(per_step * (1000.0 - floor_us), rel=1e-6)


@pytest.mark.parametrize("item_after", ["train::forward", "train::zero_grad"])
def test_a_sync_outside_every_phase_is_after_the_optimizer_only_where_it_is(tmp_path, item_after):
    """``loss.item()`` between the forward and the backward lies outside every phase too: the rule said it ran "1
    per step after the optimizer". Where it lies is read off each step's ranges, by a plain scan below."""
    t = vt.Trace()

    def mm(t, gpu_us):
        t.cpu("aten::mm", 30, dims=[[512, 512], [512, 512]], types=vt.BF16,
              children=lambda t: t.launch(vt.BF16_GEMM, gpu_us))

    def item(t):  # .item(): a 4-byte copy back to pageable memory and a stream sync
        t.cpu("aten::item", 30, children=lambda t: t.cpu("aten::_local_scalar_dense", 28, children=lambda t: (
            t.copy("DtoH (Device -> Pageable)", 4, 2.0, 6.0, blocking=True), t.sync())))

    ranges = [("train::forward", lambda t: mm(t, 20.0)),
              ("train::backward", lambda t: vt._annotate(t, "autograd::engine::evaluate_function: MmBackward0",
                                                         lambda t: (mm(t, 40.0), mm(t, 40.0)))),
              ("train::optimizer", lambda t: vt._annotate(t, "Optimizer.step#AdamW.step", lambda t: t.cpu(
                  "aten::_fused_adamw_", 15, children=lambda t: t.launch(vt.FUSED, 6.0)))),
              ("train::zero_grad", lambda t: vt._annotate(t, "Optimizer.zero_grad#AdamW.zero_grad",
                                                          lambda t: t.cpu("aten::detach", 3)))]
    for n in range(1, 5):
        def body(t):
            for name, inner in ranges:
                vt._annotate(t, name, inner)
                if name == item_after:
                    item(t)
        t.step(n, body)
    path = t.write(tmp_path / "t.json")
    ev = scan_trace(path)
    opt_end = [e["ts"] + e["dur"] for e in ev if e["name"] == "train::optimizer"]
    items = [e["ts"] for e in ev if e["name"] == "aten::item"]
    after = all(any(o <= i < o + 200 for o in opt_end) for i in items)  # each right after its step's optimizer
    assert after == (item_after == "train::zero_grad")
    x = rules(run(path)[2])["sync_in_step"]
    assert ("after the optimizer" in x.text) == after


def test_a_conv_row_times_only_the_kernels_its_own_thread_launched(tmp_path):
    """Two threads (nn.DataParallel's replicas) each run one aten::convolution at the same time, each launching one
    40 µs conv kernel on its own GPU: each conv was timed by both kernels (80 µs, half its rate)."""
    conv_k = ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x64x32_warpgroupsize1x1x1_"
              "g1_execute_segment_k_off_kernel__5x_cudnn")
    x, w = [32, 64, 56, 56], [64, 64, 3, 3]
    ev, corr = [], 0

    def xe(name, ts, dur, cat, pid, tid, **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args})
    for s in range(4):
        st = 1000.0 + s * 1000.0
        xe(f"ProfilerStep#{s + 1}", st, 900.0, "user_annotation", 1, 1)
        for tid, dev in ((1, 0), (2, 1)):
            xe("aten::convolution", st + 10 + tid, 300.0, "cpu_op", 1, tid,
               **{"Input Dims": [x, w, [], [], [], [], [], [], []],
                  "Input type": ["c10::BFloat16", "c10::BFloat16", "", "ScalarList", "ScalarList", "ScalarList",
                                 "Scalar", "ScalarList", "Scalar"],
                  "Concrete Inputs": ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]})
            corr += 1
            xe("cudaLaunchKernel", st + 100 + tid * 20, 5.0, "cuda_runtime", 1, tid, correlation=corr)
            xe(conv_k, st + 400 + tid * 50, 40.0, "kernel", dev, 7, correlation=corr, device=dev, stream=7)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev, "deviceProperties": [
        {"id": d, "name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0} for d in (0, 1)]}))
    convs = [e for e in scan_trace(path) if e["name"] == "aten::convolution"]
    calls = {e["args"]["correlation"]: e for e in scan_trace(path) if e["name"] == "cudaLaunchKernel"}
    kernels = [e for e in scan_trace(path) if e.get("cat") == "kernel"]
    own = [sum(k["dur"] for k in kernels if calls[k["args"]["correlation"]]["tid"] == c["tid"]
               and c["ts"] <= calls[k["args"]["correlation"]]["ts"] < c["ts"] + c["dur"]) for c in convs]
    assert own == [40.0] * len(convs)
    (row,) = run(path)[2].roofline.query("kind == 'conv'").to_dict("records")
    assert row["count"] == len(convs) and row["time_us"] == 40.0
    assert row["tflops"] == pytest.approx(2 * 32 * 64 * 56 * 56 * 64 * 9 / 40e-6 / 1e12)


def test_the_input_rule_names_the_loop_s_own_dataloader_not_a_thread_beside_it(tmp_path):
    """The loop's thread makes its batches itself (num_workers=0, 300 µs a step); a thread beside the step runs a
    worker-process DataLoader's range of 380 µs, which the step does not wait on. The rule named that one and told
    the user to add workers."""
    t = vt.Trace()
    for n in range(1, 6):
        def body(t):
            start = t.t
            t.cpu(vt.SINGLE_NEXT, 300, cat="user_annotation", children=lambda t: t.cpu("aten::stack", 10.0))
            t.cpu("aten::mm", 40, dims=[[512, 512], [512, 512]], types=vt.BF16,
                  children=lambda t: t.launch(vt.BF16_GEMM, 20.0))
            t._x(vt.WORKERS_NEXT, start + 1.0, 380.0, "user_annotation", tid=2)
        t.step(n, body)
    path = t.write(tmp_path / "t.json")
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    loop = {e["tid"] for e in ev if e["name"].startswith("ProfilerStep#")}
    on_loop = {e["name"] for e in ev if e["name"].startswith("enumerate(DataLoader)#") and e["tid"] in loop}
    assert on_loop == {vt.SINGLE_NEXT}
    x = rules(run(path)[2])["input_bound"]
    assert x.evidence["iterators"] == [vt.SINGLE_NEXT]
    assert "_SingleProcessDataLoaderIter" in x.text and "_MultiProcessing" not in x.text
    assert "num_workers=0" in x.fix


def test_merged_ranks_are_no_gradient_accumulation(tmp_path):
    """Two ranks' traces in one file, each step of each running its optimizer once: the rule counted the step
    numbers that ran it (4) against the steady steps listed once per rank (7), said "ran in 4 of the 7 steady-state
    steps (gradient accumulation)" and cut its cost by 4/7."""
    one = vt.training_step(tmp_path / "one.json", impl="for-loop")
    two = vt.as_ranks(one, tmp_path / "two.json")
    ev = [e for e in scan_trace(two) if e.get("ph") == "X"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    opt = [e for e in ev if e["name"].startswith("Optimizer.step#")]
    assert all(sum(1 for o in opt if o["pid"] == s["pid"] and s["ts"] <= o["ts"] < s["ts"] + s["dur"]) == 1
               for s in steps) and len({s["pid"] for s in steps}) == 2
    x1, x2 = rules(run(one)[2])["unfused_optimizer"], rules(run(two)[2])["unfused_optimizer"]
    assert "gradient accumulation" not in x2.text
    assert x2.evidence["steady_steps_with_optimizer"] == x2.evidence["steady_steps"]
    assert x2.cost_us_per_step == pytest.approx(x1.cost_us_per_step, rel=0.05)


# --- CUDA graphs and torch.compile, against traces built to break them -----------------------------------------------

TRITON = [(f"triton_poi_fused_add_{i}", 2.0) for i in range(30)]


def _compiled(t, region: str, graph: str, work):
    t.cpu("TorchDynamo Cache Lookup", 50)
    t.cpu(f"Torch-Compiled Region: {region}", 400,
          children=lambda t: t.cpu(f"## Call CompiledFxGraph {graph} ##", 300, children=work))


def _one_by_one(t, kernels=TRITON):
    for name, us in kernels:
        t.launch(name, us, call="cuLaunchKernel", call_us=10.0)


def test_steps_that_stop_replaying_their_graph_are_not_said_to_replay_one(tmp_path):
    """Steps 1–2 replay a graph; a recompile (0/1) makes steps 3–8 launch their 30 kernels one by one. The rule said
    "The step already replays a CUDA graph (0.142857 cudaGraphLaunch per step)" and offered no fewer launches."""
    t = vt.Trace()
    for n in range(8):
        t.step(n + 1, lambda t, n=n: _compiled(t, "0/0", "aaa", lambda t: t.graph(TRITON)) if n < 2 else
               _compiled(t, "0/1", "bbb", _one_by_one))
    path = t.write(tmp_path / "t.json")
    ev = scan_trace(path)
    basis = steps_of(ev)[1:]  # the steady state: the steps after the first
    replaying = sum(any(e["name"] == "cudaGraphLaunch" and a <= e["ts"] < b for e in ev) for a, b in basis)
    assert (replaying, len(basis)) == (1, 7)
    x = rules(run(path, config={"compile": "reduce-overhead"})[2])["gpu_starved"]
    assert "already replays" not in x.text + x.fix
    assert ("1 of the 7 steps replay a CUDA graph (cudaGraphLaunch); the others launch their kernels one by "
            "one") in x.text
    assert x.fix.startswith("1 of the 7 steady-state steps replay a CUDA graph") and "recompiles" in x.fix


def test_decode_tokens_that_do_not_all_replay_a_graph_are_not_said_to(tmp_path):
    """Of each step's 8 tokens only the last replays a graph; the rule said "Each token already replays a CUDA graph
    (0.125 cudaGraphLaunch per token)"."""
    t = vt.Trace()
    for n in range(4):
        def body(t):
            for k in range(8):
                work = (lambda t: t.graph(TRITON, call_us=8.0)) if k == 7 else _one_by_one
                vt._annotate(t, "decode::token", lambda t, work=work: _compiled(t, "0/1", "abc", work))
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    ev = scan_trace(path)
    tokens = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"] == "decode::token"]
    replaying = sum(any(e["name"] == "cudaGraphLaunch" and a <= e["ts"] < b for e in ev) for a, b in tokens)
    x = rules(run(path)[2])["decode_launch_bound"]
    n = x.evidence["tokens_replaying_graphs"]
    assert n == replaying * 3 // 4 == 3  # the steady state: the 3 steps after the first, one token each
    assert "already replays" not in x.text + x.fix
    assert f"{n} of the 24 tokens replay a CUDA graph" in x.text and "per token" in x.fix


@pytest.mark.parametrize("graphs", [False, True])
def test_compile_rules_count_per_step_over_the_steps_with_work(tmp_path, graphs):
    """One working step (frames 0/0 and 1/0: a graph break) and the profiler's closing stub (a last step of 4 µs with
    nothing in it): the per-step medians counted the stub ("15 kernel launches per step"; no graph-break sentence;
    "1.33" graph launches per step: the mean over three steps with two)."""
    t = vt.Trace()

    def body(t):
        for fr in ("0/0", "1/0"):
            kernels = [(f"triton_poi_fused_add_{fr[0]}_{i}", 2.0) for i in range(15)]
            if graphs:
                t.memory(4096, 1 << 30, 2 << 30)
            _compiled(t, fr, f"g{fr[0]}", (lambda t, k=kernels: t.graph(k)) if graphs else
                      (lambda t, k=kernels: _one_by_one(t, k)))
    t.step(1, body)
    t.step(2, lambda t: None)
    path = t.write(tmp_path / "t.json")
    ev = scan_trace(path)
    (a, b), (stub_a, stub_b) = steps_of(ev)
    assert not [e for e in ev if stub_a <= e.get("ts", -1) < stub_b and not e["name"].startswith("ProfilerStep#")]
    launch = "cudaGraphLaunch" if graphs else "cuLaunchKernel"
    per_step = sum(e["name"] == launch and a <= e["ts"] < b for e in ev)
    regions = sum(e["name"].startswith("Torch-Compiled Region") and a <= e["ts"] < b for e in ev)
    assert (per_step, regions) == ((2 if graphs else 30), 2) and stub_b - stub_a < b - a
    d = rules(run(path, config={"compile": "reduce-overhead"})[2])
    assert "2 compiled regions per step from 2 compiled frames" in d["compile_breaks"].text
    if graphs:
        assert "2 cudaGraphLaunch calls in the trace (a median 2 per step)" in d["cudagraph_pools"].text
    else:
        assert "no cudaGraphLaunch in any step, 30 kernel launches per step instead" in d["cudagraphs_skipped"].text


def test_graph_replays_outside_the_steps_are_no_steps_replays(tmp_path):
    """Three steps replay one graph each; nine more replays came before the first step (a warm-up recorded without
    step slices): "12 cudaGraphLaunch calls (4 per step)"."""
    t = vt.Trace()

    def region(t):
        _compiled(t, "0/0", "abc", lambda t: (t.memory(4096, 1 << 30, 2 << 30), t.memory(-4096, (1 << 30) - 4096,
                                                                                           2 << 30),
                                              t.graph(TRITON[:10])))
    for _ in range(9):
        region(t)
        t.t += 10
    for n in range(3):
        t.step(n + 1, region)
    path = t.write(tmp_path / "t.json")
    ev = scan_trace(path)
    per_step = [sum(e["name"] == "cudaGraphLaunch" and a <= e["ts"] < b for e in ev) for a, b in steps_of(ev)]
    assert per_step == [1, 1, 1] and sum(e["name"] == "cudaGraphLaunch" for e in ev) == 12
    x = rules(run(path)[2])["cudagraph_pools"]
    assert "12 cudaGraphLaunch calls in the trace (a median 1 per step)" in x.text


def test_the_users_own_foreach_kernels_are_not_a_graphs_input_copies(tmp_path):
    """A reduce-overhead forward, an eager backward, then clip_grad_norm_'s foreach kernels (60 µs each) before a
    fused AdamW: they were "CUDA-graph input staging copies (8 multi_tensor_apply kernels, 120.0 µs per step)".
    Input copies are what aten::_foreach_copy_ launches inside the compiled code; here there are none. With such
    copies beside the same kernels, only those are counted."""
    norm = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<1>, LpNorm>(...)"
    copy = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<2>, Copy>(...)"

    def path_with(staged: bool):
        t = vt.Trace()

        def forward(t):
            if staged:
                t.cpu("aten::_foreach_copy_", 10, children=lambda t: t.launch(copy, 70.0))
            t.graph([("triton_poi_fused_relu_0", 5.0)])

        def body(t):
            vt._annotate(t, "train::forward", lambda t: _compiled(t, "0/0", "fwd", forward))
            vt._annotate(t, "train::backward", lambda t: t.cpu(
                "aten::mm", 30, dims=[[512, 512], [512, 512]], types=vt.BF16,
                children=lambda t: t.launch("nvjet_sm90_tst_128x128_64x4_1x2_h_bz_NNT", 40.0)))
            t.cpu("aten::_foreach_norm", 20, children=lambda t: t.launch(norm, 60.0))
            t.cpu("aten::_foreach_mul_", 20, children=lambda t: t.launch(norm, 60.0))
            vt._annotate(t, "train::optimizer", lambda t: t.cpu(
                "aten::_fused_adamw_", 15, children=lambda t: t.launch(vt.FUSED, 6.0)))
        for n in range(4):
            t.step(n + 1, body)
        return t.write(tmp_path / f"t{int(staged)}.json")
    d = rules(run(path_with(False))[2])
    assert "compile_breaks" not in d or "staging" not in d["compile_breaks"].text
    x = rules(run(path_with(True))[2])["compile_breaks"]
    copies = [e for e in scan_trace(path_with(True)) if e["name"] == copy]
    # (one a step; the rule reads the steps after the first, as every per-step figure does: it said "3
    # multi_tensor_apply kernels, 70.0 µs per step", the kernels of 3 steps beside one step's time)
    assert len(copies) == 4
    assert "CUDA-graph input staging copies (1 multi_tensor_apply kernel a step, 70.0 µs per step)" in x.text


def test_a_graph_replayed_outside_the_compiled_code_is_not_the_compiled_codes(tmp_path):
    """mode='default': the compiled region launches its 20 kernels one by one; the user's own CUDAGraph.replay()
    beside it replays 10. Q10 said "In this mode the GPU work is replayed from a CUDA graph" where Q9 lists the
    compiled code's own launches."""
    t = vt.Trace()

    def body(t):
        _compiled(t, "0/0", "abc", lambda t: _one_by_one(t, TRITON[:20]))
        vt._annotate(t, "CUDAGraph.replay", lambda t: t.graph([(f"manual_kernel_{i}", 2.0) for i in range(10)]))
    for n in range(4):
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    _, f, _ = run(path)
    q10 = f["q10.compile_cost"].text
    assert "In this mode the compiled code's GPU work is replayed" not in q10
    assert "are launched from outside the compiled code, which launches its own kernels one by one" in q10


def test_fp32_gemms_beside_autocast_are_not_told_to_wrap_the_forward_in_autocast(tmp_path):
    """A training step under bf16 autocast (each aten::linear records fp32 inputs and holds the bf16 call that ran, as
    the H200's Llama step records it) whose fp32 output layer runs outside it: 60% of the GEMM time in fp32. The rule
    told it to wrap the forward in autocast; it now says autocast is on and these GEMMs ran outside it."""
    sgemm = "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align4>(...)"

    def linear(t):
        def inner(t):
            t.cpu("aten::to", 3, types=["float", "Scalar", "Scalar", "Scalar", "Scalar"])
            t.cpu("aten::linear", 20, dims=[[2048, 4096], [4096, 4096], [4096]], types=["c10::BFloat16"] * 3,
                  children=lambda t: t.cpu("aten::addmm", 15, dims=[[4096], [2048, 4096], [4096, 4096], [], []],
                                           types=["c10::BFloat16"] * 3 + ["Scalar", "Scalar"],
                                           children=lambda t: t.launch(vt.BF16_GEMM, 100.0)))
        t.cpu("aten::linear", 40, dims=[[2048, 4096], [4096, 4096], [4096]], types=["float"] * 3, children=inner)

    def head(t, types=vt.FP32, kernel=sgemm, us=150.0):
        t.cpu("aten::mm", 30, dims=[[2048, 4096], [4096, 4096]], types=types, children=lambda t: t.launch(kernel, us))
    t = vt.Trace()
    for n in range(4):
        def body(t):
            vt._annotate(t, "train::forward", lambda t: (linear(t), head(t)))
            vt._annotate(t, "train::backward", lambda t: vt._annotate(
                t, "autograd::engine::evaluate_function: MmBackward0",
                lambda t: (head(t), head(t), head(t, vt.BF16, vt.BF16_GEMM, 100.0),
                           head(t, vt.BF16, vt.BF16_GEMM, 100.0))))
            vt._annotate(t, "train::optimizer", lambda t: t.cpu("aten::_fused_adamw_", 15,
                                                                children=lambda t: t.launch(vt.FUSED, 6.0)))
        t.step(n + 1, body)
    path = t.write(tmp_path / "t.json")
    ev = scan_trace(path)
    wrapped = sum(1 for e in ev if e["name"] == "aten::linear" and e["args"]["Input type"][0] == "float")
    fp32_us = sum(e["dur"] for e in ev if e["name"] == sgemm)
    all_us = fp32_us + sum(e["dur"] for e in ev if e["name"] == vt.BF16_GEMM)
    assert (wrapped, round(fp32_us / all_us, 2)) == (4, 0.6)
    x = rules(run(path)[2])["fp32_training"]
    assert x.evidence["autocast_casts"] == {"aten::linear": wrapped}
    assert "Autocast is on for part of the step (4 aten::linear calls recorded with fp32 inputs" in x.text
    assert "these GEMMs ran outside it (aten::mm)" in x.text
    assert "Wrap the forward" not in x.fix and "already on" in x.fix


def test_a_run_that_set_tf32_on_is_not_told_to_turn_it_on(tmp_path):
    """An app run of dtype fp32 with matmul precision 'high' (TF32 on) whose GEMM ran an FFMA kernel: the rule told
    it to call torch.set_float32_matmul_precision('high'), the setting it ran with."""
    sgemm = "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(...)"
    path = vt.gemm(tmp_path / "t.json", 4095, 4095, 4095, sgemm, 2700.0, types=vt.FP32)
    assert {e["args"]["Input type"][0] for e in scan_trace(path) if e["name"] == "aten::mm"} == {"float"}
    assert "fp32_without_tf32" in rules(run(path, config={"dtype": "fp32", "matmul_precision": "highest"})[2])
    assert "fp32_without_tf32" not in rules(run(path, config={"dtype": "fp32", "matmul_precision": "high"})[2])


# --- fp32 models under bf16 autocast, recorded on an H100 (tests/data/h100/README.md) -------------------------------

def _nested_same_op(name: str) -> collections.Counter:
    """By a plain scan of an H100 autocast run: (op, whether an fp32 input is bf16 in the inner call) for each call
    that holds the same op directly (a stack over each thread's ops, by start and length)."""
    ev = sorted((e for e in scan_trace(DATA / "h100" / f"{name}.json.gz") if e.get("cat") == "cpu_op"),
                key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    out, stack = collections.Counter(), []
    for e in ev:
        while stack and (stack[-1]["tid"] != e["tid"] or stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]):
            stack.pop()
        if stack and stack[-1]["name"] == e["name"]:
            cast = any(a == "float" and b == "c10::BFloat16"
                       for a, b in zip(stack[-1]["args"]["Input type"], e["args"]["Input type"]))
            out[(e["name"], cast)] += 1
        stack.append(e)
    return out


@pytest.mark.parametrize("name,op,kind", [("autocast_mm_eager", "aten::mm", "gemm"),
                                          ("autocast_attn_hd264_eager", "aten::scaled_dot_product_attention",
                                           "attention"),
                                          ("autocast_conv_eager", "aten::conv2d", "conv")])
def test_what_autocast_ran_on_an_h100_is_judged_in_bf16(name, op, kind):
    """Each op autocast casts is recorded with the fp32 inputs and again, inside, with bf16 ones: the roofline's rows
    are bf16, one per call that ran (the conv's aten::convolution is recorded once, inside the bf16 conv2d), and the
    casts the trace shows are the scan's."""
    nested = _nested_same_op(name)
    assert {k for k in nested if k[0] == op} == {(op, True)}  # (every such call cast an fp32 input to bf16)
    casts = nested[(op, True)]
    with open_trace(DATA / "h100" / f"{name}.json.gz", engine="sqlite") as s:
        d = diagnose(s, peaks=H200_PEAKS)
        from profiling_core.explain.diagnosis.roofline import autocast_casts
        assert autocast_casts(s)[op] == casts > 0
    rows = d.roofline[d.roofline["kind"] == kind]
    assert set(rows["dtype"]) == {"bf16"}
    if kind == "attention":
        x = next(x for x in d.diagnoses if x.rule == "attention_backend")
        assert x.evidence["backend"] == "efficient" and len(x.evidence["reasons"]) == 1
        assert "264" in x.evidence["reasons"][0] and "fp32" not in x.text


def test_a_kernel_queued_into_the_profilers_closing_stub_makes_it_no_step(tmp_path):
    """A GPU-bound step queues three 2 ms GEMMs; the profiler stops 40 µs into the next step, while the second GEMM
    runs. That stub counted as a step (a slice began in it): Q3 called the real step a cold start, "7.60×" the
    stub's 40 µs, and the summary's medians mixed the two."""
    t = vt.Trace()
    t.step(2, lambda t: [t.cpu("aten::mm", 100.0, dims=[[4096, 4096], [4096, 4096]], types=vt.FP32,
                               children=lambda t: t.launch("ampere_sgemm_128x64_nn", 2000.0)) for _ in range(3)])
    t.t = 2990.0
    t.step(3, lambda t: setattr(t, "t", t.t + 36.0))
    path = t.write(tmp_path / "t.json")
    ev = scan_trace(path)
    (a, b), (sa, sb) = steps_of(ev)
    inside = [e["name"] for e in ev if sa <= e["ts"] < sb and not e["name"].startswith("ProfilerStep#")]
    assert inside == ["ampere_sgemm_128x64_nn"]  # a GEMM the first step launched, not one the stub did
    r, f, _ = run(path)
    assert r.summary["steady_state"]["empty_steps"] == [3]
    assert r.summary["cpu_step_median_us"] == pytest.approx(b - a)
    assert f["q3.cold_start"].evidence["first_step_slower"] is None and "×" not in f["q3.cold_start"].text


def test_the_decode_fix_says_nothing_of_the_caches_setting_that_the_trace_does_not():
    """The H200's Llama decode with a dynamic KV cache, read without a config: the fix said "this workload's
    cache=static" where the attention's K/V grow one position a token (a plain scan), and then "with a dynamic cache
    the shapes change every token". The app's setting is named only for a run of the app."""
    path = DATA / "h200_train" / "llm_decode_dynamic_compile_default.json.gz"
    kv = [e["args"]["Input Dims"][1][2] for e in scan_trace(path)
          if e.get("cat") == "cpu_op" and e["name"] == "aten::_scaled_dot_product_cudnn_attention"]
    assert sorted(set(kv)) == list(range(128, 145))  # the prefill's 128, then one more cached position a token
    x = rules(run(path)[2])["decode_launch_bound"]
    assert "cache=static" not in x.fix and "In this app" not in x.fix
    app = {"workload": "causal_lm", "knobs": {"cache": "dynamic"}, "compile": "default", "device": "cuda"}
    assert "In this app: the causal_lm workload's cache=static." in rules(run(path, config=app)[2])[
        "decode_launch_bound"].fix


def test_a_graphs_replayed_ops_are_no_launch_queue():
    """The H200 Llama decode under reduce-overhead: each cudaGraphLaunch replays 81 kernels one after another, and Q4
    read their offsets as a queue ("the later ops wait longer than the first …: the CPU launches a step's work faster
    than the GPU runs it") of a step that is overhead-bound. By a plain scan: each launch call's first GPU op (by
    correlation) waited a median ~10 µs; the offset is read from those, and the queue did not grow."""
    path = DATA / "h200_train" / "llm_decode_static_compile_ro.json.gz"
    ev = scan_trace(path)
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]}
    first: dict = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("correlation") in calls:
            c = e["args"]["correlation"]
            first[c] = min(first.get(c, float("inf")), e["ts"] - calls[c]["ts"])
    graphs = [c for c, e in calls.items() if e["name"] == "cudaGraphLaunch" and c in first]
    assert len(graphs) == 48
    r, f, _ = run(path)
    q4 = f["q4.offset"]
    assert q4.evidence["launches"] == len(first) and q4.evidence["launches_of_several_ops"] == len(graphs)
    assert q4.evidence["median_us"] == pytest.approx(statistics.median(first.values()), abs=0.01)
    assert r.summary["launch_latency_median_us"] == pytest.approx(statistics.median(first.values()), abs=0.01)
    assert q4.evidence["queue"] is None and "faster than the GPU" not in q4.text
    assert "48 calls (cudaGraphLaunch) ran several GPU ops each" in q4.text


def test_q1_names_the_gpu_ops_own_rows_among_what_the_sum_counts_twice():
    """The H200 Llama training step: 70.79 ms of self device time against 11.35 ms busy. The text named the launching
    ops and the annotation rows, which account for 59.44 ms; the GPU ops' own rows (by a plain scan, the sum of every
    kernel, copy and memset) count the launching ops' time again, and are named now."""
    path = DATA / "h200_train" / "llm_train.json.gz"
    ops_us = sum(e["dur"] for e in scan_trace(path) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    q1 = run(path)[1]["q1.double_count"]
    assert q1.evidence["gpu_op_rows_us"] == pytest.approx(ops_us, abs=0.01)
    assert f"the GPU ops' own rows (kernels, copies, memsets) count that time again, {ops_us / 1000:.2f} ms" in q1.text


def test_a_cold_steps_slow_first_launches_are_not_called_host_work_with_no_cuda_call():
    """The H200's cold DataLoader run (no warm-up): Q3 put 1.47 ms of the first step's 429 ms extra in the calls only
    it makes and said "the rest is host-side work with no CUDA call in the trace", where its cudaLaunchKernel calls
    alone took ~22.6 ms against ~143 µs in a later step (a plain scan of the calls' durations in each step's
    window): the first launches load their kernels."""
    import json as _json
    from profiling_core.config import ExperimentConfig
    path = DATA / "h200_verdicts" / "cold_workers_eager.json.gz"
    ev = scan_trace(path)
    windows = steps_of(ev)
    launch = [sum(e["dur"] for e in ev if e["name"] == "cudaLaunchKernel" and a <= e["ts"] < b) for a, b in windows]
    first, later = launch[0], statistics.median(launch[1:])
    assert first > 100 * later
    config = ExperimentConfig.from_dict(_json.loads((DATA / "h200_verdicts" / "cold_workers_eager.meta.json")
                                                    .read_text())["config"])
    with open_trace(path, engine="sqlite") as s:
        q3 = {f.id: f for f in findings(analyze(s), config)}["q3.cold_start"]
    assert "no CUDA call" not in q3.text
    m = re.search(r"cudaLaunchKernel ([\d.,]+) ms against ([\d.,]+) µs", q3.text)
    # (the scan sums every thread's calls; the text counts the threads that run the steps, less lazy loading)
    assert m and float(m[1]) == pytest.approx(first / 1000, rel=0.05) and float(m[2]) == pytest.approx(later, rel=0.1)


def test_q3_says_own_time_where_it_leaves_out_a_wait_for_the_autograd_thread():
    """The H200 empty_cache case: Q3 said "self time of script: 666.9 µs in the first step", where script's self time
    (its duration less its children's on its thread, a plain scan) is 1,421.3 µs, the figure Q1 sums; the 666.9 µs
    leave out its wait for the autograd engine's thread, and the text now says so."""
    path = DATA / "h200_verdicts" / "empty_cache_eager.json"
    q3 = run(path)[1]["q3.cold_start"]
    assert "self time of script" not in q3.text
    assert "own time of script (its self time less its wait for the autograd engine's thread)" in q3.text


def test_a_cost_basis_names_the_pageable_copies_it_counts_as_blocked():
    """The H200 input_loader case copies its batches from pageable memory (a plain scan: cudaMemcpyAsync calls whose
    copies are 'Pageable'), and those copies wait for the GPU: the cost basis said the 6.60 µs per step were "blocked
    in synchronising calls", where the syncs alone overlap GPU work 2.59 µs. It names the copies now, as question 2
    does."""
    path = DATA / "h200_verdicts" / "input_loader_eager.json"
    assert any("Pageable" in e["name"] for e in scan_trace(path) if e.get("cat") == "gpu_memcpy")
    x = rules(run(path)[2])["unaligned_gemm_dims"]
    assert "blocked in synchronize calls and in copies to or from pageable memory" in x.cost_basis


@pytest.mark.parametrize("name,asked,not_asked", [
    ("attn_hd264_eager", "a head_dim of at most 256", ("fp16 or bf16 inputs", "attention mask")),
    ("attn_hd100_fp32_eager", "fp16 or bf16 inputs", ("head_dim of at most", "attention mask"))])
def test_the_attention_fix_asks_only_for_what_kept_flash_from_running(name, asked, not_asked):
    """The H200's bf16 head_dim-264 attention (no mask, by a plain scan: the public op's mask input is empty) was
    told to use bf16 inputs and drop a mask; the fp32 head_dim-100 one to keep its head_dim at most 256. The fix now
    names what the reasons found."""
    masks = [e["args"]["Input Dims"][3] for e in scan_trace(DATA / "h200_verdicts" / f"{name}.json")
             if e.get("cat") == "cpu_op" and e["name"] == "aten::scaled_dot_product_attention"]
    assert masks and all(m == [] for m in masks)
    x = _attention_verdict(name)
    assert asked in x.fix and not any(w in x.fix for w in not_asked)


def test_the_layout_rule_says_how_many_convolutions_transposed(tmp_path):
    """HTA's V100 trace: 12 of its 265 forward convolutions launched cuDNN's layout transposes and the others ran
    NCHW kernels, yet the rule said "The convolution kernels work in NHWC, and the tensors arrive in NCHW". Here each
    step runs the transposing conv and a second conv whose kernel is NCHW's own (by a plain scan: which conv holds a
    transpose)."""
    path = vt.conv_with_transposes(tmp_path / "t.json")
    doc = json.loads(path.read_text())
    extra, corr = [], 1000
    for e in [e for e in doc["traceEvents"] if e["name"] == "aten::convolution"]:
        corr += 1
        ts = e["ts"] + e["dur"] + 1.0  # (right after it, inside the same step)
        extra += [{**e, "ts": ts, "dur": 4.0},  # (over before the next step's conv begins)
                  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 1.0,
                   "dur": 2.0, "args": {"correlation": corr}},
                  {"ph": "X", "cat": "kernel", "name": "void cudnn::winograd_nonfused::winogradForwardData4x4<float>()",
                   "pid": 0, "tid": 7, "ts": ts + 900.0, "dur": 30.0, "args": {"correlation": corr, "device": 0,
                                                                              "stream": 7}}]
    doc["traceEvents"] += extra
    path.write_text(json.dumps(doc))
    ev = scan_trace(path)
    calls = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"}
    transposes = [calls[e["args"]["correlation"]] for e in ev if "nchwToNhwc" in e["name"]]
    convs = [e for e in ev if e["name"] == "aten::convolution"]
    with_t = [cv for cv in convs if any(cv["ts"] <= t < cv["ts"] + cv["dur"] for t in transposes)]
    assert (len(with_t), len(convs)) == (3, 6)
    x = rules(run(path)[2])["conv_layout"]
    assert (x.evidence["convolutions_transposed"], x.evidence["convolutions"]) == (3, 6)
    assert "3 of the trace's 6 convolution calls (aten::convolution) launched them" in x.text
    assert "The convolution kernels work in NHWC" not in x.text


def test_a_sync_waiting_for_work_queued_before_the_recording_costs_no_more_than_the_step_can_lose():
    """The H100 Qwen trace: its 14.1 ms cudaDeviceSynchronize waits mostly for GPU ops with no launch call in the
    trace (a plain scan: they were queued before the recording), which question 2 counts among the GPU's work ("the
    same GPU work makes the steps compute-bound"); sync_in_step said removing the sync wins back 14.11 ms a step.
    It wins back at most the step's CPU time less that GPU work."""
    path = DATA / "traces" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    ev = scan_trace(path)
    launched = {e["args"].get("correlation") for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    sync = max((e for e in ev if e["name"] == "cudaDeviceSynchronize"), key=lambda e: e["dur"])
    orphans = [e for e in ev if e.get("cat") == "kernel" and e["args"].get("correlation") not in launched
               and sync["ts"] <= e["ts"] < sync["ts"] + sync["dur"]]
    assert len(orphans) > 100
    r, f, d = run(path, peaks=None)
    ss = r.summary["steady_state"]
    room = ss["cpu_us_per_step"] - ss["gpu_us_per_step"] - ss["unlaunched_wait_us_per_step"]
    x = rules(d)["sync_in_step"]
    assert x.cost_us_per_step == pytest.approx(room) and x.cost_us_per_step < 0.2 * sync["dur"]
    assert "waited for work queued before the recording" in x.cost_basis


def test_syncs_inside_the_input_copies_get_the_copies_fix_first():
    """The H200 input_loader case: both cudaStreamSynchronize calls a step makes sit under aten::copy_ of a
    .to(device) from pageable memory, and nothing is copied back (a plain scan: no DtoH copy). The fix opened with
    "avoid .item(), .cpu(), .tolist()", none of which the loop does; it now says the syncs are the copies' own."""
    path = DATA / "h200_verdicts" / "input_loader_eager.json"
    ev = scan_trace(path)
    assert not any("DtoH" in e["name"] for e in ev if e.get("cat") == "gpu_memcpy")
    copies = [e for e in ev if e["name"] == "aten::copy_"]
    syncs = [e for e in ev if e["name"] == "cudaStreamSynchronize"]
    assert syncs and all(any(c["tid"] == s["tid"] and c["ts"] <= s["ts"] < c["ts"] + c["dur"] for c in copies)
                         for s in syncs)
    x = rules(run(path)[2])["sync_in_step"]
    assert x.fix.startswith("The synchronising calls are those of the copies to the device from pageable memory")
    assert ".item()" not in x.fix and "pin_memory()" in x.fix


def test_copies_whose_names_say_no_memory_kind_are_not_called_pageable():
    """ROCm 6.2's MI250 trace names its two host-to-device copies "Memcpy HtoD (Host -> Device)": neither pageable nor
    pinned (a plain scan). The fix called them copies "from pageable memory", which the trace cannot say; it now says
    so, and names both ways such a copy holds the CPU."""
    path = DATA / "third_party" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    names = {e["name"] for e in scan_trace(path) if e.get("cat") == "gpu_memcpy"}
    assert names == {"Memcpy HtoD (Host -> Device)"}
    x = rules(run(path, peaks=None)[2])["sync_in_step"]
    assert "pageable memory (aten::copy_" not in x.fix
    assert x.fix.startswith("The synchronising calls are those of the copies to the device (aten::copy_ of a "
                            ".to(device)); the trace does not say whether they copied from pageable or pinned memory")
    assert "non_blocking=True" in x.fix


def test_a_for_loop_optimizers_ops_are_those_of_its_own_step_not_the_scalers():
    """A CPU training step with a for-loop AdamW and a GradScaler (tests/data/cpu/README.md): its optimizer phase
    holds 87 ATen ops a step, 62 of them inside the profiler's Optimizer.step#AdamW.step range and, outside it, the
    GradScaler's unscale and step, among them the multi-tensor aten::_amp_foreach_non_finite_check_and_unscale_ (a
    plain scan). The rule counted all 87 as the optimizer's and said none of them was a multi-tensor op; it now
    counts the optimizer's own 62 and says what the other 25 are."""
    path = DATA / "cpu" / "linear_train_adamw_fp16_scaler.json.gz"
    xs = [e for e in scan_trace(path) if e.get("ph") == "X"]

    def aten_in(r) -> list:
        return [e for e in xs if e.get("cat") == "cpu_op" and str(e["name"]).startswith("aten::")
                and e["tid"] == r["tid"] and r["ts"] <= e["ts"] < r["ts"] + r["dur"]]
    own = {len(aten_in(r)) for r in xs if str(r["name"]).startswith("Optimizer.step#AdamW.step")}
    phase = [aten_in(r) for r in xs if r["name"] == "train::optimizer"]
    assert own == {62} and {len(p) for p in phase} == {87}
    assert all(any(e["name"] == "aten::_amp_foreach_non_finite_check_and_unscale_" for e in p) for p in phase)
    x = rules(run(path, peaks=None)[2])["unfused_optimizer"]
    assert x.evidence["aten_ops_per_step"] == 62
    assert ("The optimizer (AdamW) ran its for-loop implementation: 62 ATen ops per step inside its Optimizer.step "
            "range") in x.text
    assert "(the optimizer phase's 25 other ATen ops per step are outside that range" in x.text


def test_an_op_of_one_step_in_four_is_no_step_s_median(tmp_path):
    """An evaluation's convolution in one step of four (steps 2-5 the steady state): question 2 listed it at its own
    time in that step, 5,000 µs, beside "a median 80 µs per step" of work. Each op's figure is its median over the
    same steps, 0 where it did not run."""
    mm = [("aten::addmm", 40.0), ("aten::add", 40.0)]
    steps = [mm, mm, mm + [("aten::mkldnn_convolution", 5000.0)], mm, mm]
    _, f, _ = run(vt.cpu_steps(tmp_path / "t.json", steps, gemm_dims=GEMM_64), peaks=None)
    q2 = f["q2.bound"]
    assert q2.evidence["work_ops"] == {"aten::addmm": 40.0, "aten::add": 40.0}  # the conv: 0, 5000, 0, 0 µs
    assert "their own time: aten::addmm 40.0 µs, aten::add 40.0 µs) took a median 80.0 µs per step" in q2.text


def test_in_place_and_composite_views_are_no_work(tmp_path):
    """A user's step that transposes a tensor in place 1,000 times (aten::t_ → aten::transpose_ → aten::as_strided_:
    no arithmetic, no data moved) beside one small GEMM: question 2 listed the three views as "the ATen ops that
    compute or move data" and called the step compute-bound."""
    views = [("aten::t_", 400.0), ("aten::transpose_", 300.0), ("aten::as_strided_", 200.0),
             ("aten::unbind", 100.0), ("aten::flatten", 100.0)]
    steps = [views + [("aten::addmm", 50.0)]] * 4
    _, f, _ = run(vt.cpu_steps(tmp_path / "t.json", steps, gemm_dims=GEMM_64), peaks=None)
    q2 = f["q2.bound"]
    assert q2.evidence["work_ops"] == {"aten::addmm": 50.0} and "overhead-bound" in q2.text
