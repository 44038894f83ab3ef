"""The per-step breakdown of GPU time by category, the top kernels and the category rules, against plain scans of the
JSON (loops, no code under test except the name rules, which are tested on their own first), hand counts read off
real traces, and synthetic traces whose answer is worked out by hand."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from profiling_core.analyses import (BREAKDOWN_CATEGORIES, GPU_OP_CATEGORIES, analyze, category_totals,
                                     gpu_busy, gpu_op_category, launch_ops, step_breakdown, steps, top_kernels)
from profiling_core.analyses._shared import coverage_ns, union_ns
from profiling_core.analyses.categories import is_gemm_kernel
from profiling_core.trace import open_trace

from conftest import scan_trace

try:
    from test_analyses import ALL, DATA, NS, Scan, h200, scan, session
except ImportError:  # tests/ made a package
    from tests.test_analyses import ALL, DATA, NS, Scan, h200, scan, session

BERT = DATA / "traces" / "gaunernst_bert-small-uncased__1016001.json.gz"
MI250 = DATA / "third_party" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
MI300 = DATA / "traces" / "trace.json.gz"  # TraceLens' MI300X torch.compile trace: attn_fwd, Cijk_ GEMM, Triton
NCCL = Path(__file__).parents[1].parent / "shared" / "traces" / "third_party" / "hta" / "nccl_2rank_rank0_a100" \
    / "nccl_data.json.gz"
TRACES = ALL + [BERT, MI300]
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
PRIORITY = {c: k for k, c in enumerate(GPU_OP_CATEGORIES)}


# --- the category rules, one test per rule ----------------------------------------------------------------------------

@pytest.mark.parametrize("name,cat,want", [
    # rule 1: the trace category decides copies (whatever the name)
    ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", "memcpy"),
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy", "memcpy"),  # 2021 Kineto
    ("Memset (Device)", "gpu_memset", "memset"),
    ("Memset (Device)", "Memset", "memset"),
    # rule 2: communication
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "kernel", "communication"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "kernel", "communication"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "communication"),
    ("rcclGenericKernel<1, false>(ncclDevComm*)", "kernel", "communication"),
    # rule 3: attention, before GEMM although the flash kernel names cutlass
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, false, "
     "false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)", "kernel", "attention"),
    ("attn_fwd", "kernel", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "kernel", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "kernel",
     "attention"),
    # rule 4: GEMM
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "kernel", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>(...)", "kernel", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
     "cublas", "kernel", "gemm"),
    ("ampere_sgemm_128x64_nn", "Kernel", "gemm"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(...)", "kernel",
     "gemm"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1", "kernel", "gemm"),
    ("triton_tem_fused_addmm_0", "kernel", "gemm"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16", "kernel",
     "convolution"),  # an implicit-GEMM convolution: "fprop" before "gemm"
    ("sm80_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", "kernel", "convolution"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16>", "kernel", "other"),  # a layout copy
    ("triton_poi_fused_convolution_0", "kernel", "elementwise"),  # Inductor pointwise, whatever it says
    # (the H200 compiled Llama decode: a copy beside cuDNN's attention, named after the ops Inductor fused)
    ("triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy_3", "kernel", "elementwise"),
    ("triton_poi_fused__scaled_dot_product_efficient_attention_0", "kernel", "elementwise"),
    ("triton_tem_fused__scaled_dot_product_flash_attention_0", "kernel", "attention"),  # a template: the kernel
    # rule 5: elementwise, reductions, normalisation
    ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)", "kernel",
     "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>(...)",
     "kernel", "elementwise"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, ...)",
     "kernel", "elementwise"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(...)", "kernel", "elementwise"),
    ("void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, (anonymous namespace)::"
     "SoftMaxForwardEpilogue>(float*, float const*, int)", "kernel", "elementwise"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...>(...)", "kernel", "elementwise"),
    ("triton_poi_fused_add_mm_1", "kernel", "elementwise"),
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "kernel", "elementwise"),
    ("triton_per_fused__softmax_0", "kernel", "elementwise"),
    # rule 6: the rest
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>(...)", "kernel",
     "other"),
    ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "kernel", "convolution"),
    (None, "kernel", "other"),
])
def test_each_category_rule(name, cat, want):
    assert gpu_op_category(name, cat) == want


def test_the_gemm_rule_is_the_diagnosis_gemm_rule():
    """The diagnosis reads GEMM kernels through the same rule: a flash attention kernel, which names cutlass, is not a
    GEMM (the diagnosis's own rule counted it as one before)."""
    from profiling_core.explain import diagnosis
    flash = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, cutlass::bf16>>"
    assert is_gemm_kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT")
    assert not is_gemm_kernel(flash) and not is_gemm_kernel("ncclKernel_AllReduce_RING_LL_Sum_float")
    assert diagnosis.is_gemm_kernel is is_gemm_kernel
    assert diagnosis.kernel_family("nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT")["arch"] == 90


def test_categories_order():
    assert GPU_OP_CATEGORIES == ("gemm", "convolution", "attention", "elementwise", "other", "memcpy", "memset",
                                 "communication")
    assert BREAKDOWN_CATEGORIES == GPU_OP_CATEGORIES + ("unrecorded", "idle")


# --- the independent scan ---------------------------------------------------------------------------------------------

def scan_windows(sc: Scan) -> list[tuple[int, float, float]]:
    """(N, start, end) of each step's window, in time order: from its start to the later of its end and the end of
    the GPU ops launched in it, started no earlier than every earlier window's end."""
    out, reach = [], float("-inf")
    for st in sc.steps:
        end = max([st["ts"] + st["dur"]] + [g["ts"] + g["dur"] for _, g in sc.in_step(st)])
        lo = max(st["ts"], reach)
        out.append((int(st["name"].split("#")[1]), lo, max(lo, end)))
        reach = max(reach, end)
    return out


def scan_unrecorded(sc: Scan) -> list[tuple[float, float]]:
    """(start, end) µs of each GPU's wait behind work the trace does not hold, by the rule stated in the analyses:
    the GPU's (pid's) first op by start; if its launch call is in the trace and the op started more than 100 µs after
    the call returned, [the call's end, the op's start); if it has none where the GPU's other ops have theirs and the
    trace has the profiler's own ``Trace`` slice, and the op started more than 100 µs after that slice's start (the
    last before it), [that start, the op's start). (The rule's guard against a GPU clock stamped behind the CPU's does
    not apply to the traces this is used on: test_a_gpu_clock_behind_the_cpu_s_is_not_unrecorded_work.)"""
    first: dict = {}
    for g in sc.gpu:  # (in start order)
        first.setdefault(g.get("pid"), [])
        if not first[g.get("pid")] or first[g.get("pid")][0]["ts"] == g["ts"]:
            first[g.get("pid")].append(g)
    began = sorted(e["ts"] for e in sc.xs if str(e.get("cat") or "").lower() == "trace")
    out = []
    for pid, ops in first.items():
        ends = [l["ts"] + l["dur"] for l, g in sc.pairs if any(g is o for o in ops)]
        launched = any(g.get("pid") == pid for _, g in sc.pairs)
        start = (max(ends) if ends else
                 max((b for b in began if b <= ops[0]["ts"]), default=None) if launched else None)
        if start is not None and ops[0]["ts"] - start > 100.0:
            out.append((start, ops[0]["ts"]))
    return out


def scan_breakdown(sc: Scan) -> dict:
    """{(step, category): time µs} by a sweep over the boundaries of the GPU ops clipped to each step window: each
    elementary piece goes to the first category (GPU_OP_CATEGORIES order) with an op running, else to unrecorded
    where a GPU waited behind work the trace does not hold (:func:`scan_unrecorded`), else to idle; and {(step,
    category): own busy µs}, the category's ops alone; and {step: window µs}."""
    out, own, windows = {}, {}, {}
    waits = scan_unrecorded(sc)
    for n, b0, e0 in scan_windows(sc):
        windows[n] = e0 - b0
        ops = [(max(g["ts"], b0), min(g["ts"] + g["dur"], e0), gpu_op_category(g["name"], g["cat"]))
               for g in sc.gpu if g["ts"] < e0 and g["ts"] + g["dur"] > b0]
        ws = [(max(b, b0), min(e, e0)) for b, e in waits if b < e0 and e > b0]
        cuts = sorted({b0, e0, *(b for b, _, _ in ops), *(e for _, e, _ in ops), *(x for w in ws for x in w)})
        for c in BREAKDOWN_CATEGORIES:
            out[(n, c)] = own[(n, c)] = 0.0
        for lo, hi in zip(cuts, cuts[1:]):
            running = {c for b, e, c in ops if b <= lo and e >= hi}
            first = min(running, key=PRIORITY.__getitem__) if running else \
                "unrecorded" if any(b <= lo and e >= hi for b, e in ws) else "idle"
            out[(n, first)] += hi - lo
            for c in running:
                own[(n, c)] += hi - lo
        own[(n, "idle")], own[(n, "unrecorded")] = out[(n, "idle")], out[(n, "unrecorded")]
    return {"time": out, "own": own, "window": windows}


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_step_breakdown_matches_the_scan(path):
    sc = scan(path)
    got = step_breakdown(session(path))
    if not sc.gpu:  # no GPU lane: nothing to break down (see test_step_breakdown_empty_without_a_gpu_lane)
        assert got.empty
        return
    want = scan_breakdown(sc)
    assert len(got) == len(sc.steps) * len(BREAKDOWN_CATEGORIES)
    assert got["category"].tolist() == list(BREAKDOWN_CATEGORIES) * len(sc.steps)
    tol = 2 * NS * (1 + len(sc.gpu))
    for r in got.itertuples():
        assert r.time_us == pytest.approx(want["time"][(r.step, r.category)], abs=tol), r
        assert r.busy_us == pytest.approx(want["own"][(r.step, r.category)], abs=tol), r
        assert r.window_us == pytest.approx(want["window"][r.step], abs=2 * NS), r
    # the categories and idle add up to the step's window, and the windows to gpu_busy's steps window
    for step, grp in got.groupby("step", sort=False):
        assert grp["time_us"].sum() == pytest.approx(grp["window_us"].iloc[0], abs=NS)
        assert grp["share"].sum() == pytest.approx(1.0)
    assert (got["overlapped_us"] >= -NS).all()
    if sc.steps:
        busy = gpu_busy(session(path)).set_index("scope").loc["steps"]
        assert got["window_us"].sum() / len(BREAKDOWN_CATEGORIES) == pytest.approx(busy["window_us"], abs=NS)
    if sc.steps and path.parent.name == "h200":  # every GPU op in the windows was launched in a step
        not_idle = got.loc[~got["category"].isin(["unrecorded", "idle"]), "time_us"].sum()
        assert not_idle == pytest.approx(busy["busy_us"], abs=tol)


def test_step_breakdown_hand_counts_h200():
    # 64² bf16 cold eager, read off the JSON: ProfilerStep#2 (187.518 µs) runs its GEMM (1.920 µs) and its add
    # (0.864 µs) inside its window; nothing else
    b = step_breakdown(session(h200("64_bf16_cold_eager")))
    s2 = b[b["step"] == 2].set_index("category")
    assert s2.loc["gemm", "time_us"] == pytest.approx(1.92, abs=NS)  # nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT
    assert s2.loc["elementwise", "time_us"] == pytest.approx(0.864, abs=NS)  # vectorized_elementwise_kernel add
    assert s2.loc["idle", "time_us"] == pytest.approx(187.518 - 1.92 - 0.864, abs=3 * NS)
    assert s2.loc[["attention", "other", "memcpy", "memset", "communication"], "time_us"].tolist() == [0.0] * 5
    # compile: a DtoD memcpy and a memset before the GEMM in every step
    s = session(h200("4096_bf16_warm_compile"))
    c = category_totals(step_breakdown(s), steps(s)).set_index("category")
    assert c.loc["memcpy", "per_step_us"] > 10 and c.loc["memset", "per_step_us"] > 0.5


def test_step_breakdown_hand_counts_bert_and_mi250():
    # bert-small on an H100 (one step, ProfilerStep#6): the four flash_fwd_kernel launches are its attention
    b = step_breakdown(session(BERT)).set_index("category")
    flash = [g["dur"] for g in scan(BERT).gpu if "flash_fwd_kernel" in g["name"]]
    assert len(flash) == 4
    assert b.loc["attention", "time_us"] == pytest.approx(sum(flash), abs=4 * NS)
    assert b.loc["memcpy", "time_us"] == pytest.approx(2.24, abs=NS)  # one Memcpy DtoH (Device -> Pinned)
    # MI250 (ROCm): the Tensile Cijk_ kernels are its GEMMs; the HtoD copies its memcpy
    m = step_breakdown(session(MI250))
    m1 = m[m["step"] == 1].set_index("category")
    cijk = [g for g in scan(MI250).gpu if g["name"].startswith("Cijk_")]
    st = scan(MI250).steps[0]
    assert m1.loc["gemm", "time_us"] == pytest.approx(
        sum(min(g["ts"] + g["dur"], st["ts"] + st["dur"]) - max(g["ts"], st["ts"]) for g in cijk
            if g["ts"] < st["ts"] + st["dur"]), abs=len(cijk) * NS)
    assert m1.loc["memcpy", "time_us"] > 0


def _write(tmp_path, events) -> Path:
    path = tmp_path / "synthetic.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _step(n, ts, dur):
    return {"ph": "X", "name": f"ProfilerStep#{n}", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _launch(corr, ts, name="cudaLaunchKernel"):
    return {"ph": "X", "name": name, "cat": "cuda_runtime", "pid": 1, "tid": 1, "ts": ts, "dur": 1.0,
            "args": {"correlation": corr}}


def _gpu(corr, name, ts, dur, stream, cat="kernel"):
    return {"ph": "X", "name": name, "cat": cat, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def test_two_streams_overlap_by_hand(tmp_path):
    """Step 0 [0, 100) µs launches, on stream 7: a GEMM [10, 50), a memcpy [60, 70), flash attention [85, 95) and a
    kernel of no rule [95, 120); on stream 20 an NCCL all-reduce [30, 80). Step 1 [110, 200) launches a kernel of no
    rule on stream 9 [115, 130) and an elementwise one [150, 160).
    Windows: step 0 runs until its last GPU op ends, [0, 120); step 1 starts there, [120, 200). Clipped to them,
    step 1's first kernel gives 5 µs to step 0 (under the other 'other' kernel) and 10 to step 1.
    By hand, step 0: gemm 40; attention 10; memcpy 10 (nothing earlier runs in [60, 70)); communication [50, 80)
    minus the memcpy = 20 of its own 50 (30 overlapped); other [95, 120) = 25; idle 120 − |[10, 80) ∪ [85, 120)|
    = 15. Step 1: other 10, elementwise 10, idle 60."""
    ev = [_step(0, 0.0, 100.0), _step(1, 110.0, 90.0),
          _launch(1, 1.0), _gpu(1, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 10.0, 40.0, 7),
          _launch(2, 2.0), _gpu(2, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                                30.0, 50.0, 20),
          _launch(3, 3.0, "cudaMemcpyAsync"), _gpu(3, "Memcpy DtoD (Device -> Device)", 60.0, 10.0, 7, "gpu_memcpy"),
          _launch(4, 4.0), _gpu(4, "void pytorch_flash::flash_fwd_kernel<cutlass::bfloat16_t>", 85.0, 10.0, 7),
          _launch(5, 5.0), _gpu(5, "my_custom_kernel", 95.0, 25.0, 7),
          _launch(6, 111.0), _gpu(6, "my_other_kernel", 115.0, 15.0, 9),
          _launch(7, 112.0), _gpu(7, "triton_poi_fused_add_0", 150.0, 10.0, 7)]
    with open_trace(_write(tmp_path, ev), engine="sqlite") as s:
        b = step_breakdown(s)
        busy = gpu_busy(s).set_index("scope").loc["steps"]
        tk = top_kernels(s, n=None)
    t = {(r.step, r.category): (r.time_us, r.busy_us, r.overlapped_us) for r in b.itertuples()}
    assert t[(0, "gemm")] == (40.0, 40.0, 0.0)
    assert t[(0, "attention")] == (10.0, 10.0, 0.0)
    assert t[(0, "memcpy")] == (10.0, 10.0, 0.0)
    assert t[(0, "communication")] == (20.0, 50.0, 30.0)
    assert t[(0, "other")] == (25.0, 25.0, 0.0)
    assert t[(0, "idle")] == (15.0, 15.0, 0.0)
    assert [t[(1, c)][0] for c in ("other", "elementwise", "idle")] == [10.0, 10.0, 60.0]
    assert b.groupby("step")["time_us"].sum().tolist() == [120.0, 80.0]
    assert b.groupby("step")["window_us"].first().tolist() == [120.0, 80.0]
    assert (busy["window_us"], busy["busy_us"]) == (200.0, 125.0)  # gpu_busy's steps scope: the same windows
    assert set(tk["category"]) == {"gemm", "communication", "memcpy", "attention", "other", "elementwise"}
    # per step: five GPU ops launched in step 0's slice and two in step 1's
    assert tk.set_index("name").loc["my_other_kernel", "per_step"] == 0.5


FP32_ATTENTION = DATA / "h200_verdicts" / "attn_hd100_fp32_eager.json"
FP32_COMPILE = DATA / "h200_diag" / "fp32_tf32_off_compile.json"


H100_SDPA = DATA / "h100"


@pytest.mark.parametrize("name,want", [("plain_0", "a wait"), ("plain_1", "no call"), ("synced_0", "no wait")])
def test_the_unrecorded_wait_is_the_queued_warm_up_step_h100(name, want):
    """The same fp32 attention loop on an H100, profiled with schedule(wait=1, warmup=1, active=3)
    (``scripts/gpu_unrecorded.py``). ``plain_0``: the warm-up step's kernel (~3.26 ms) was running when the recording
    began, is not in the trace, and the first recorded kernel waited 2.42 ms after its call returned (a plain scan):
    unrecorded. ``plain_1``: that kernel started after the recording began, so the trace holds it, with no launch call
    (it was launched before the recording); it started 689.5 µs after the recording began, behind the wait step's
    kernel, still running and not in the trace: unrecorded from the recording's start (454.2 µs of it in the steps'
    windows).
    ``synced_0``: a torch.cuda.synchronize() before the recording opened, and the first kernel starts before its
    call returns: nothing unrecorded."""
    path = H100_SDPA / f"sdpa_fp32_{name}.json.gz"
    sc = scan(path)
    first = sc.gpu[0]
    call = [l for l, g in sc.pairs if g is first]
    got = step_breakdown(session(path))
    unrec = got.loc[got["category"] == "unrecorded", "time_us"].sum()
    if want == "a wait":
        wait = first["ts"] - (call[0]["ts"] + call[0]["dur"])
        assert 2000 < wait < first["dur"] and unrec == pytest.approx(wait, abs=0.01)
    elif want == "no call":
        began = next(e["ts"] for e in sc.xs if e.get("cat") == "Trace")  # the profiler's own slice: the recording
        in_steps = sum(max(0.0, min(b, first["ts"]) - max(a, began)) for _, a, b in scan_windows(sc))
        assert not call and first["ts"] - began == pytest.approx(689.530, abs=0.001)
        assert unrec == pytest.approx(in_steps, abs=0.01) == pytest.approx(454.203, abs=0.001)  # (in the windows)
    else:
        assert first["ts"] < call[0]["ts"] + call[0]["dur"] and unrec == 0.0
    want_all = scan_breakdown(sc)
    for r in got.itertuples():
        assert r.time_us == pytest.approx(want_all["time"][(r.step, r.category)], abs=0.01), r


@pytest.mark.parametrize("path", [FP32_ATTENTION, FP32_COMPILE], ids=lambda p: p.name)
def test_the_wait_behind_unrecorded_work_matches_the_scan(path):
    """Two H200 runs whose first recorded GPU op waited behind the warm-up's work (a plain scan: 2.25 ms after its
    cudaLaunchKernel returned, 1.58 ms after its cudaMemcpyAsync): that wait is ``unrecorded``, not idle."""
    sc = scan(path)
    (wait,) = scan_unrecorded(sc)
    assert wait[1] - wait[0] > 1500.0
    want = scan_breakdown(sc)
    got = step_breakdown(session(path))
    tol = 2 * NS * (1 + len(sc.gpu))
    for r in got.itertuples():
        assert r.time_us == pytest.approx(want["time"][(r.step, r.category)], abs=tol), r
    assert got.loc[got["category"] == "unrecorded", "time_us"].sum() == pytest.approx(wait[1] - wait[0], abs=tol)


def test_the_wait_behind_unrecorded_work_by_hand_h200():
    """The H200's fp32 attention run, read off the JSON (µs, the trace's clock less 5,582,934,000,000):
    ProfilerStep#2 starts at 17,901.916; its cudaLaunchKernel (correlation 75) runs from 18,190.681 for 25.908, so it
    returns at 18,216.589; the kernel starts at 20,463.229 and runs 3,288.732. Step 2's window runs to that kernel's
    end: 3,288.732 µs of attention, 2,246.640 unrecorded (18,216.589 → 20,463.229), and idle the 314.673 µs before
    the call returned (what ran then the trace cannot tell). Steps 3 and 4 wait behind recorded work only."""
    b = step_breakdown(session(FP32_ATTENTION)).set_index(["step", "category"])["time_us"]
    assert b[(2, "attention")] == pytest.approx(3288.732, abs=0.002)
    assert b[(2, "unrecorded")] == pytest.approx(2246.640, abs=0.002)
    assert b[(2, "idle")] == pytest.approx(314.673, abs=0.002)
    assert [b[(n, "unrecorded")] for n in (3, 4)] == [0.0, 0.0]


def test_what_is_not_a_wait_behind_unrecorded_work(tmp_path):
    """Cases built to break the rule. GPU 0's first kernel starts 50 µs after its call returned (a slow launch, not
    hidden work); GPU 1's first kernel has no launch call in the trace (it is itself the recorded work), and its
    second waits 900 µs on a stream with nothing recorded before it, but behind that first kernel. Nothing is
    unrecorded. Then GPU 2's first kernel waits [6, 1006) µs after its call, while GPU 0 runs recorded kernels
    [52, 62) and [300, 500) and GPU 1 [20, 50) and [904, 914): 1000 − 250 = 750 µs unrecorded, the rest of the wait
    under recorded work."""
    def gpu(corr, ts, dur, pid, tid=7):
        return {"ph": "X", "name": "my_kernel", "cat": "kernel", "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                "args": {"correlation": corr}}
    base = [_step(0, 0.0, 2000.0), _launch(1, 1.0), gpu(1, 52.0, 10.0, 0),
            gpu(99, 20.0, 30.0, 1), _launch(2, 3.0), gpu(2, 904.0, 10.0, 1, tid=8)]
    with open_trace(_write(tmp_path, base), engine="sqlite") as s:
        b = step_breakdown(s).set_index("category")["time_us"]
    assert b["unrecorded"] == 0.0
    more = base + [_launch(3, 5.0), gpu(3, 1006.0, 10.0, 2), _launch(4, 6.0), gpu(4, 300.0, 200.0, 0)]
    with open_trace(_write(tmp_path, more), engine="sqlite") as s:
        b = step_breakdown(s).set_index("category")["time_us"]
    assert b["unrecorded"] == pytest.approx(750.0)
    assert b.sum() == pytest.approx(2000.0)


MLP_FP32 = DATA / "h200_verdicts" / "mlp_fp32_eager.json"


def test_a_first_op_launched_before_the_recording_waited_from_its_start_h200():
    """The H200's fp32 MLP run (schedule with a warm-up step), read off the JSON (µs, the trace's clock less
    5,297,331,000,000): the profiler's own slice, "PyTorch Profiler (0)", begins the recording at 592,002.749; the
    first GPU op the trace holds, a GELU kernel (correlation 29), has no launch call in it (the warm-up step launched
    it) and starts at 599,614.098: 7,611.349 µs on the warm-up's GEMMs, which started before the recording and are not
    in the trace. ProfilerStep#2 starts at 592,447.043, so 7,167.055 µs of its window are unrecorded, and the 4.704
    µs from the GELU's end to the next GEMM's start idle. Question 2 said the GPU was busy "only 0.0%" inside each
    step's window, where all of it lay in that wait."""
    sc = scan(MLP_FP32)
    assert scan_unrecorded(sc) == [(pytest.approx(5297331592002.749), pytest.approx(5297331599614.098))]
    b = step_breakdown(session(MLP_FP32)).set_index(["step", "category"])["time_us"]
    assert b[(2, "unrecorded")] == pytest.approx(7167.055, abs=0.002)
    assert b[(2, "idle")] == pytest.approx(4.704, abs=0.002)
    from profiling_core.explain import findings
    q2 = {f.id: f for f in findings(analyze(session(MLP_FP32)))}["q2.bound"]
    assert "busy 100.0% (100.0% of the window on work the trace does not hold" in q2.text
    assert "busy only 0.0%" not in q2.text


def test_a_first_op_without_a_launch_call_by_the_recording_s_start(tmp_path):
    """Cases built for the rule's second branch. The recording begins at 0 (the profiler's own ``Trace`` slice);
    step 0 [100, 600) launches kernel 1 at 101; kernel 99, launched before the recording (no call in the trace),
    starts at 2,100 and runs 100 µs, kernel 1 after it. The window [100, 2300): 2,000 µs unrecorded (from the step's
    start to kernel 99's), 100 other work each. Not unrecorded: without the ``Trace`` slice (when the recording began
    is unknown); where the trace holds no launch call of that GPU at all (launches not recorded: its first op says
    nothing of a queue); where kernel 99 starts 50 µs after the recording began."""
    trace = {"ph": "X", "name": "PyTorch Profiler (0)", "cat": "Trace", "pid": "Spans", "tid": "PyTorch Profiler",
             "ts": 0.0, "dur": 5000.0}
    body = [_step(0, 100.0, 500.0), _gpu(99, "early_kernel", 2100.0, 100.0, 7)]
    launched = [_launch(1, 101.0), _gpu(1, "my_kernel", 2200.0, 100.0, 7)]
    cases = {"recorded launches": ([trace] + body + launched, 2000.0),
             "no Trace slice": (body + launched, 0.0),
             "no launch call at all": ([trace] + body + [_gpu(7, "my_kernel", 2200.0, 100.0, 7)], 0.0),
             "50 µs after the start": ([{**trace, "ts": 2050.0}] + body + launched, 0.0)}
    for what, (events, want) in cases.items():
        path = _write(tmp_path, events)
        with open_trace(path, engine="sqlite") as s:
            b = step_breakdown(s).set_index(["step", "category"])["time_us"]
        assert b[(0, "unrecorded")] == want, what
        assert sum(w - max(v, 100.0) for v, w in scan_unrecorded(Scan(path))) == want, what  # (the oracle agrees)


@pytest.mark.parametrize("skew", [0.0, 5000.0])
def test_a_gpu_clock_behind_the_cpu_s_is_not_unrecorded_work(tmp_path, skew):
    """Three steps 10 ms apart, each launching one 100 µs kernel (call [s + 1, s + 2) µs) onto an idle GPU. The first
    kernel starts 2 ms after its call returned; the later two 3 µs after theirs. Unrecorded: 2 ms. With the GPU's
    clock 5 ms behind the CPU's (every kernel stamped 5 ms later), every kernel launched onto the free GPU starts more
    than 0.1 ms after its call: the trace never shows a prompt start, so nothing is called unrecorded."""
    ev = []
    for n, s0 in enumerate((0.0, 10_000.0, 20_000.0)):
        ev += [_step(n, s0, 500.0), _launch(n + 1, s0 + 1.0),
               _gpu(n + 1, "my_kernel", s0 + 2.0 + (2000.0 if n == 0 else 3.0) + skew, 100.0, 7)]
    with open_trace(_write(tmp_path, ev), engine="sqlite") as s:
        b = step_breakdown(s).set_index(["step", "category"])["time_us"]
    assert b[(0, "unrecorded")] == (2000.0 if skew == 0 else 0.0)
    assert b[(1, "unrecorded")] == b[(2, "unrecorded")] == 0.0


def test_coverage_by_group_and_class_against_a_brute_force():
    """coverage_ns against counting each ns by hand: per group, each class's own union and the time where it is the
    first class running; union_ns is its one-group, one-class case."""
    rng = np.random.default_rng(14)
    b = rng.integers(0, 300, 200)
    e = b + rng.integers(0, 40, 200)
    g, c = rng.integers(0, 4, 200), rng.integers(0, 3, 200)
    first, own = coverage_ns(b, e, g, 5, c, 3)
    for gg in range(5):
        for cc in range(3):
            covered = {t for bb, ee, x, y in zip(b, e, g, c) if x == gg and y == cc for t in range(bb, ee)}
            lower = {t for bb, ee, x, y in zip(b, e, g, c) if x == gg and y < cc for t in range(bb, ee)}
            assert own[gg, cc] == len(covered)
            assert first[gg, cc] == len(covered - lower)
        assert first[gg].sum() == union_ns(b[g == gg], e[g == gg])
    assert first[4].tolist() == own[4].tolist() == [0, 0, 0]  # a group without intervals
    assert union_ns(b, e) == len({t for bb, ee in zip(b, e) for t in range(bb, ee)})
    # absolute-epoch timestamps in ns (~1.7e18) do not overflow; an interval ending before it starts covers nothing
    big = b + 1_700_000_000_000_000_000
    assert np.array_equal(coverage_ns(big, big + (e - b), g, 5, c, 3)[0], first)
    assert union_ns(np.array([0, 5]), np.array([10, 2])) == 10


def test_step_breakdown_empty_without_steps():
    path = DATA / "third_party" / "inference_rank_1.json.gz"
    b = step_breakdown(session(path))
    assert b.empty and list(b.columns) == ["step", "category", "time_us", "share", "busy_us", "overlapped_us",
                                           "window_us"]
    assert category_totals(b, steps(session(path))).empty
    assert len(top_kernels(session(path))) == 4  # the trace's four kernels, without per-step counts
    assert top_kernels(session(path))["per_step"].isna().all()


def test_step_breakdown_empty_without_a_gpu_lane():
    """A CPU-only trace (three steps, no kernel, memcpy or memset by a plain scan) has no GPU time to break down:
    no row says its GPU sat idle, and the summary's time by category is empty."""
    path = DATA / "cpu" / "64_fp32_warm_eager.json"
    events = scan_trace(path)
    assert not any(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in events)
    assert sum(str(e.get("name", "")).startswith("ProfilerStep#") for e in events if e.get("ph") == "X") == 3
    assert step_breakdown(session(path)).empty
    assert analyze(session(path)).summary["time_by_category"] == {}


@pytest.mark.skipif(not NCCL.is_file(), reason="shared/traces is not beside the repository")
def test_nccl_trace_two_streams():
    """HTA's 2-rank A100 trace: NCCL all-reduces on stream 40 overlap compute on stream 7."""
    sc = Scan(NCCL)
    with open_trace(NCCL, engine="sqlite") as s:
        b = step_breakdown(s)
        tk = top_kernels(s, n=3)
    want = scan_breakdown(sc)
    for r in b.itertuples():
        assert r.time_us == pytest.approx(want["time"][(r.step, r.category)], abs=0.05), r
        assert r.busy_us == pytest.approx(want["own"][(r.step, r.category)], abs=0.05), r
    comm = b[b["category"] == "communication"]
    assert (comm["overlapped_us"] > 1000).all()  # ms of each step's all-reduce ran under compute
    top = tk.iloc[0]
    assert top["name"].startswith("ncclKernel_AllReduce_RING_LL_Sum_float") and top["category"] == "communication"
    assert top["cpu_ops"] == (("nccl:all_reduce", 15),)  # no aten:: op around it: its launch call's parent


# --- top kernels ------------------------------------------------------------------------------------------------------

def scan_launching_op(sc: Scan, launch: dict):
    """The innermost aten:: op enclosing a launch call on its thread, else its innermost enclosing slice, else the
    launch itself (by time containment: the latest start, then the shortest)."""
    around = [e for e in sc.xs if e.get("pid") == launch.get("pid") and e.get("tid") == launch.get("tid")
              and e is not launch and e["ts"] <= launch["ts"] and launch["ts"] + launch["dur"] <= e["ts"] + e["dur"]
              and e.get("cat") != "gpu_user_annotation"]
    key = lambda e: (e["ts"], -e["dur"])  # noqa: E731
    aten = [e for e in around if str(e.get("name", "")).startswith("aten::")]
    if aten:
        return max(aten, key=key)["name"]
    return max(around, key=key)["name"] if around else launch["name"]


@pytest.mark.parametrize("path", [h200(n) for n in ("64_bf16_cold_eager", "4096_bf16_warm_eager_a20",
                                                    "4096_bf16_warm_compile", "64_bf16_warm_compile_ro",
                                                    "64_bf16_warm_eager_b8")] + [BERT, MI250, MI300],
                         ids=lambda p: p.name)
def test_top_kernels_match_the_scan(path):
    sc = scan(path)
    got = top_kernels(session(path), n=None)
    per: dict = {}
    for g in sc.gpu:
        per.setdefault(g["name"], []).append(g)
    all_us = sum(g["dur"] for g in sc.gpu)
    assert set(got["name"]) == set(per)
    assert got["total_us"].is_monotonic_decreasing
    in_steps = {id(g) for st in sc.steps for _, g in sc.in_step(st)}
    # per step the loop worked in: a step with any slice beginning in its window (the profiler stopping right after
    # a step began leaves one with none: HTA's MI250 trace), all of them where none has one
    worked = [st for st in sc.steps if any(e is not st and st["ts"] <= e["ts"] < st["ts"] + st["dur"] for e in sc.xs)]
    worked = worked or sc.steps
    for r in got.itertuples():
        gs = per[r.name]
        assert r.count == len(gs)
        assert r.total_us == pytest.approx(sum(g["dur"] for g in gs), abs=NS * len(gs))
        assert r.mean_us == pytest.approx(sum(g["dur"] for g in gs) / len(gs), abs=NS)
        assert r.share == pytest.approx(sum(g["dur"] for g in gs) / all_us, abs=1e-6)
        assert r.category == gpu_op_category(r.name, gs[0]["cat"])
        if sc.steps:
            assert r.per_step == pytest.approx(sum(id(g) in in_steps for g in gs) / len(worked))
        want: dict = {}
        for launch, g in sc.pairs:
            if g["name"] == r.name:
                op = scan_launching_op(sc, launch)
                want[op] = want.get(op, 0) + 1
        assert dict(r.cpu_ops) == want, r.name
    assert got["share"].sum() == pytest.approx(1.0)


def test_top_kernels_hand_counts():
    # 64² bf16 cold eager: 3 steps, each an aten::mm GEMM and an aten::add; the GEMM takes the most time
    t = top_kernels(session(h200("64_bf16_cold_eager")))
    assert t["name"].tolist() == ["nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT",
                                  "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::"
                                  "BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
                                  "std::array<char*, 3ul>)"]
    assert t["category"].tolist() == ["gemm", "elementwise"]
    assert t["count"].tolist() == [3, 3] and t["per_step"].tolist() == [1.0, 1.0]
    assert t["cpu_ops"].tolist() == [(("aten::mm", 3),), (("aten::add", 3),)]
    # reduce-overhead: the GEMM replays from a CUDA graph, launched by cudaGraphLaunch under the compiled graph's call
    ro = top_kernels(session(h200("64_bf16_warm_compile_ro")), n=1).iloc[0]
    assert ro["name"] == "nvjet_sm90_tst_64x8_64x16_1x4_h_badd_NNT"
    [(op, launches)] = ro["cpu_ops"]
    assert op.startswith("## Call CompiledFxGraph") and launches == 3
    # bert: flash attention launched by aten::_flash_attention_forward, four times in the one step
    bert = top_kernels(session(BERT), n=None).set_index("category")
    assert bert.loc["attention", "cpu_ops"] == (("aten::_flash_attention_forward", 4),)
    assert bert.loc["attention", "count"] == 4 and bert.loc["attention", "per_step"] == 4.0
    assert len(top_kernels(session(BERT), n=3)) == 3


@pytest.mark.parametrize("n", [0, -1, 2.5, True, "10"])
def test_top_kernels_refuses_a_bad_n(n):
    with pytest.raises(ValueError, match=r"top_kernels: n must be a whole number of kernels \(1 or more\) or None "
                                         r"for all; got "):
        top_kernels(session(h200("64_bf16_cold_eager")), n=n)


def test_launch_ops_is_the_innermost_aten_op():
    path = h200("64_bf16_cold_eager")
    s = session(path)
    lat = analyze(s).launch_latency
    ops = launch_ops(s, lat["launch_id"].to_numpy())
    names = [s.tables.name[[int(o)]][0] if o >= 0 else None for o in ops]
    assert sorted(set(names)) == ["aten::add", "aten::mm"]
    assert launch_ops(s, np.zeros(0, dtype=np.int64)).tolist() == []


# --- the report -------------------------------------------------------------------------------------------------------

def test_report_holds_the_breakdown_and_the_top_kernels():
    path = h200("4096_bf16_warm_eager_a20")
    r = analyze(session(path))
    assert r.step_breakdown.equals(step_breakdown(session(path)))
    assert r.top_kernels.equals(top_kernels(session(path), n=None))
    shares = r.summary["time_by_category"]
    assert list(shares) == list(BREAKDOWN_CATEGORIES)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["gemm"] > 0.5  # 20 warm steps of a 4096² GEMM: compute-bound


def test_top_kernels_per_step_is_over_the_steps_the_loop_worked_in(tmp_path):
    """Four steps launch one GEMM each; a fifth is the profiler stopping (30 µs, nothing in it). Every other per-step
    figure leaves that step out; top_kernels divided by all five (0.8 a step)."""
    import verdict_traces as vt
    t = vt.Trace()
    for n in range(1, 5):
        t.step(n, lambda t: t.cpu("aten::mm", 40, dims=[[512, 512], [512, 512]], types=vt.BF16,
                                  children=lambda t: t.launch(vt.BF16_GEMM, 20.0)))
    t._x("ProfilerStep#5", t.t, 30.0, "user_annotation")
    path = t.write(tmp_path / "t.json")
    ev = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    inside = lambda e, s: s["ts"] <= e["ts"] < s["ts"] + s["dur"] and e is not s  # noqa: E731
    worked = [s for s in steps if any(inside(e, s) for e in ev if e.get("cat") not in ("kernel",))]
    launches = sum(1 for s in worked for e in ev if e["name"] == "cudaLaunchKernel" and inside(e, s))
    assert (len(steps), len(worked), launches) == (5, 4, 4)
    with open_trace(path, engine="sqlite") as s:
        r = analyze(s)
    row = r.top_kernels[r.top_kernels["name"] == vt.BF16_GEMM].iloc[0]
    assert row["per_step"] == launches / len(worked) == 1.0


def test_run_totals_and_per_step_counts_read_the_steady_state():
    """A cold max-autotune run on an H100: step 0 holds torch.compile's autotuning (610 ms of GPU work, every
    ``triton_mm`` candidate), steps 1 and 2 the compiled GEMM (0.2 ms each). The run's totals per step and the top
    kernels' launches per step are the steady steps' (1 and 2), as the summary's GPU work per step is: not 184 ms
    of GEMM "per step", nor 408 ``triton_mm`` launches per step that no step after the first made."""
    path = DATA / "h100" / "autotune_4096_cold_manc.json.gz"
    sc = scan(path)
    assert [e["name"] for e in sc.steps] == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    started = [[g for g in sc.gpu if e["ts"] <= g["ts"] < e["ts"] + e["dur"]] for e in sc.steps]
    work = [sum(g["dur"] for g in gs) for gs in started]
    assert work[0] > 600_000 and work[1] < 200 and work[2] < 200
    assert all(g["ts"] < sc.steps[1]["ts"] for g in sc.gpu if g["name"] == "triton_mm")
    s = session(path)
    assert analyze(s).summary["measured_steps"] == [1, 2]
    t = category_totals(step_breakdown(s), steps(s)).set_index("category")
    assert t.loc[list(GPU_OP_CATEGORIES), "per_step_us"].sum() == pytest.approx((work[1] + work[2]) / 2, rel=1e-3)
    top = top_kernels(s, n=None).set_index("name")
    assert top.loc["triton_mm", "count"] == 1223 and top.loc["triton_mm", "per_step"] == 0
    nvjet = [n for n in top.index if str(n).startswith("nvjet")]
    assert [sum(1 for g in gs if g["name"] in nvjet) for gs in started[1:]] == [1, 1]
    assert top.loc[nvjet, "per_step"].sum() == 1.0
