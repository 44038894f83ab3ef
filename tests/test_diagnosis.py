"""profiling_core.explain.diagnosis: the roofline rows and the rules, against plain scans of the JSON and hand counts.

Real H200 runs (tests/data/h200_diag, made by scripts/gpu_diagnose.py through the app's runner) trigger or must not
trigger each GPU rule; every other real fixture must not trigger a rule that does not apply to it; synthetic traces
trigger the rules the real ones cannot (a sync inside the step, a recompile)."""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from conftest import scan_trace

from profiling_core.analyses.categories import ran_tf32
from profiling_core.config import ExperimentConfig
from profiling_core.explain.diagnosis import diagnose, kernel_family
from profiling_core.store.peaks import DevicePeaks
from profiling_core.trace import open_trace

DATA = Path(__file__).parent / "data"
DIAG = DATA / "h200_diag"
TRACES = DATA / "traces"
# The H200's peaks, as the CLI's calibrate measured them there on 2026-12-01 in the same session as the runs
H200 = DevicePeaks.from_dict(json.loads((DIAG / "peaks.json").read_text()))
BF16 = H200.gemm_tflops["bf16"]


def run(name: str, peaks=H200):
    meta = json.loads((DIAG / f"{name}.meta.json").read_text())
    cfg = ExperimentConfig.from_dict(meta["config"])
    with open_trace(DIAG / f"{name}.json", engine="sqlite") as s:
        return diagnose(s, config=cfg, peaks=peaks, compute_capability=float(meta["device"]["compute_capability"]))


def rules(d) -> list[str]:
    return [x.rule for x in d.diagnoses]


def kernel_durs(path: Path, contains: str) -> list[float]:
    return [float(e["dur"]) for e in scan_trace(path) if e.get("ph") == "X" and e.get("cat") == "kernel"
            and contains in e["name"]]


@pytest.mark.parametrize("name,want", [
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_"
     "kernel__5x_cublas", {"arch": 80, "math": "fp32-simt", "align": None}),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_"
     "cublas", {"arch": 90, "math": "tf32", "align": None}),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", {"arch": 90, "math": "tensor-core", "align": None}),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1>(cutlass_75_tensorop_bf16_"
     "s1688gemm_bf16_256x128_nn_align1::Params)", {"arch": 75, "math": "tensor-core", "align": 1}),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_nn_align2>(...)",
     {"arch": 80, "math": "tensor-core", "align": 2}),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align4>(cutlass_80_tensorop_s1688gemm_"
     "256x128_32x3_nt_align4::Params)", {"arch": 80, "math": "tf32", "align": 4}),
    ("ampere_sgemm_128x64_nn", {"arch": 80, "math": "fp32-simt", "align": None}),
    ("volta_sgemm_128x64_nn", {"arch": 70, "math": "fp32-simt", "align": None}),
    ("triton_poi_fused_add_mm_1", {"arch": None, "math": None, "align": None}),
])
def test_kernel_family_reads_what_the_name_states(name, want):
    assert kernel_family(name) == want


@pytest.mark.parametrize("names,want", [
    # the fp32 GEMM kernels of the recorded traces (tests/data, /work/shared/traces), by what ran them
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x"
     "_cublas", True),  # H200, matmul precision high (h200_diag/fp32_tf32_on)
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_"
     "kernel__5x_cublas", False),  # H200, highest (h200_diag/fp32_tf32_off)
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1"
     "::Params)", False),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align4>(cutlass_80_tensorop_s1688gemm_"
     "128x128_32x3_tn_align4::Params)", True),  # A100, HTA's control trace
    ("ampere_sgemm_32x128_tn", False),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", False),  # bf16 operands (under autocast's fp32 wrapper)
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_nn_align2>(...)", False),
    ("void splitKreduce_kernel<float, float, float, float, true, false, false>(cublasSplitKParams<float>, float "
     "const*),void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_nt_align4>(...)", True),  # one of a list
])
def test_an_fp32_gemm_ran_tf32_where_a_kernel_name_says_so(names, want):
    assert ran_tf32(names) is want


def test_an_unaligned_bf16_gemm_is_named_with_its_kernel_and_fraction_of_peak():
    d = run("bf16_4095")
    assert rules(d) == ["unaligned_gemm_dims"]
    (g,) = d.roofline[d.roofline["kind"] == "gemm"].itertuples()
    durs = kernel_durs(DIAG / "bf16_4095.json", "gemm")
    flops = 2 * 4095 ** 3  # 2·M·K·N by hand
    assert (g.m, g.k, g.n, g.count, g.flops) == (4095, 4095, 4095, 3, flops)
    assert g.time_us == pytest.approx(statistics.mean(durs))
    assert g.tflops == pytest.approx(flops / statistics.mean(durs) / 1e6)
    assert g.fraction_of_peak == pytest.approx(g.tflops / BF16)  # 19 %
    assert g.bytes == 3 * 4095 * 4095 * 2 and g.intensity == pytest.approx(flops / g.bytes)
    x = d.diagnoses[0]
    assert "M=4095, K=4095, N=4095: K and N are not multiples of 8" in x.text
    assert "cutlass_75_tensorop_bf16_s1688gemm" in x.text and "built for sm75, operand alignment 1 element" in x.text
    assert g.roof == "compute" and f"({g.fraction_of_peak:.0%} of its compute roof, measured)" in x.text
    # the bound: this GEMM's time per step less the same FLOPs at the measured peak
    assert x.cost_us_per_step == pytest.approx(statistics.mean(durs) - flops / (BF16 * 1e6))
    assert "shape_padding" in x.fix


def test_the_4100_gemm_names_its_align2_sm80_kernel():
    d = run("bf16_4100")
    assert rules(d) == ["unaligned_gemm_dims"]
    assert "built for sm80, operand alignment 2 elements" in d.diagnoses[0].text


@pytest.mark.parametrize("name", ["bf16_4096", "bf16_4095_compile"])
def test_aligned_and_compile_padded_gemms_are_not_flagged(name):
    d = run(name)
    assert rules(d) == []
    g = d.roofline[d.roofline["kind"] == "gemm"].iloc[0]
    # torch.compile padded 4095 to 4096: the recorded shapes of the GEMM that ran are what counts
    assert (g.m, g.k, g.n) == (4096, 4096, 4096) and g.flops_from == "shapes"
    assert 0.9 < g.fraction_of_peak < 1.1  # the aligned GEMM runs at the measured peak


def test_the_add_kernel_moves_three_matrices():
    d = run("bf16_4096")
    (e,) = d.roofline[d.roofline["kind"] == "elementwise"].itertuples()
    assert e.op == "aten::add" and e.bytes == 3 * 4096 * 4096 * 2  # two inputs read, the sum written, bf16
    assert e.time_us == pytest.approx(statistics.mean(kernel_durs(DIAG / "bf16_4096.json", "CUDAFunctor_add")))
    assert e.gbs == pytest.approx(e.bytes / e.time_us / 1e3) and e.peak == H200.bandwidth_gbs


_ESIZE = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2}


def test_a_copy_to_a_narrower_dtype_reads_its_source_and_writes_its_destination():
    """``x.to(torch.bfloat16)`` of 8 MiB of fp32 on the H200 (``aten::copy_(self, src)``): its kernel reads the source
    (fp32) and writes ``self`` (bf16), which it does not read; counted as three fp32 matrices, it ran at 112% of the
    measured bandwidth."""
    path = DATA / "h200_verdicts" / "copy_pinned_eager.json"
    copies = [e for e in scan_trace(path) if e.get("name") == "aten::copy_"
              and e["args"].get("Input type", [None])[0] == "c10::BFloat16"]
    (want,) = {sum(math.prod(d) * _ESIZE[t] for d, t in zip(e["args"]["Input Dims"][:2], e["args"]["Input type"][:2]))
               for e in copies}
    assert want == (8 << 20) + (4 << 20)
    with open_trace(path, engine="sqlite") as s:
        d = diagnose(s, None, None, H200)
    (e,) = d.roofline[(d.roofline["kind"] == "elementwise") & (d.roofline["op"] == "aten::copy_")].itertuples()
    assert e.bytes == want and e.fraction_of_peak < 1


_PROMOTED = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
             "complex32", "complex64", "complex128")


def test_type_promotion_of_two_dtypes_is_torch_s():
    """Every pair of the dtypes torch promotes, against ``torch.promote_types`` itself (bf16 with fp16: fp32; uint8
    with int8: int16)."""
    torch = pytest.importorskip("torch")
    from profiling_core.explain.diagnosis.roofline import _promote_types
    for a in _PROMOTED:
        for b in _PROMOTED:
            want = str(torch.promote_types(getattr(torch, a), getattr(torch, b))).removeprefix("torch.")
            assert _promote_types(a, b) == want, (a, b)


# (recorded type, dims, Concrete Inputs text) of each operand, as the profiler records them, and the torch values
_OPERANDS = [
    [("c10::BFloat16", [8], ""), ("long int", [8], "")],
    [("c10::BFloat16", [8], ""), ("c10::Half", [8], "")],
    [("unsigned char", [8], ""), ("signed char", [8], "")],
    [("long int", [8], ""), ("double", [], "")],                    # a zero-dim float tensor over an int64 one
    [("c10::BFloat16", [8], ""), ("double", [], "")],               # same category: the dimensioned one wins
    [("int", [8], ""), ("long int", [], "")],
    [("long int", [8], ""), ("Scalar", [], "0.5")],                 # a Python float: the default dtype
    [("int", [8], ""), ("Scalar", [], "1024")],
    [("bool", [8], ""), ("Scalar", [], "2")],
    [("c10::Half", [8], ""), ("Scalar", [], "2.")],
    [("bool", [8], ""), ("bool", [8], "")],
    [("c10::BFloat16", [8], ""), ("c10::complex<float>", [], "")],
    [("double", [8], ""), ("c10::complex<float>", [8], "")],
]


def _torch_operand(torch, t, dims, text):
    if t == "Scalar":
        return {"True": True, "False": False}.get(text, float(text) if "." in text else int(text) if text else 0)
    names = {"c10::BFloat16": "bfloat16", "long int": "int64", "c10::Half": "float16", "unsigned char": "uint8",
             "signed char": "int8", "double": "float64", "int": "int32", "bool": "bool", "float": "float32",
             "c10::complex<float>": "complex64"}
    return torch.ones(dims, dtype=getattr(torch, names[t]))


@pytest.mark.parametrize("operands", _OPERANDS)
def test_an_elementwise_op_s_result_type_is_torch_s(operands):
    """Dimensioned tensors over zero-dim ones over Python numbers, each class counting where its category is higher:
    against ``torch.result_type`` of tensors and numbers of the recorded types."""
    torch = pytest.importorskip("torch")
    from profiling_core.explain.diagnosis.roofline import _result_type
    a, b = (_torch_operand(torch, *x) for x in operands)
    want = torch.result_type(a, b) if isinstance(a, torch.Tensor) else torch.result_type(b, a)
    assert _result_type(operands) == str(want).removeprefix("torch.")


@pytest.mark.parametrize("op,types,concrete", [
    ("aten::div", ["long int", "long int"], ["", ""]),                 # true division of integers: fp32
    ("aten::div", ["long int", "long int", ""], ["", "", "floor"]),    # with a rounding mode: int64
    ("aten::sigmoid", ["long int"], [""]),
    ("aten::add", ["c10::BFloat16", "c10::Half", "Scalar"], ["", "", "1"]),
    ("aten::mul", ["c10::BFloat16", "long int"], ["", ""]),
    ("aten::add_", ["c10::BFloat16", "float", "Scalar"], ["", "", "1"]),  # in place: self's type
])
def test_elementwise_bytes_write_the_type_torch_gives_the_result(op, types, concrete):
    torch = pytest.importorskip("torch")
    from profiling_core.explain.diagnosis.roofline import _elementwise_bytes
    n = 1 << 20
    dims = [[n] if t != "Scalar" and t else [] for t in types]
    xs = [_torch_operand(torch, t, [4], c) for t, c in zip(types, concrete) if t not in ("", "Scalar")]
    fn = {"aten::div": lambda a, b: torch.div(a, b, rounding_mode=concrete[2] if len(concrete) > 2 else None),
          "aten::sigmoid": torch.sigmoid, "aten::add": torch.add, "aten::mul": torch.mul,
          "aten::add_": lambda a, b: a.add_(b)}[op]
    out = fn(*xs)
    read = sum(x.element_size() for x in xs) * n
    assert _elementwise_bytes(dims, types, op, concrete) == (read + out.element_size() * n, n), out.dtype


# element sizes of the types torch records, from C++ (sizeof) by hand: no table of the library's
_HAND_BYTES = {"float": 4, "c10::BFloat16": 2, "long int": 8, "long": 8, "int": 4, "unsigned char": 1, "bool": 1,
               "c10::Float8_e4m3fn": 1}


@pytest.mark.parametrize("op,types,want_elems", [
    ("aten::copy_", ["long int", "float", "Scalar"], 4 + 8),          # .long(): reads fp32, writes int64
    ("aten::copy_", ["float", "long int", "Scalar"], 8 + 4),          # int64 to fp32
    ("aten::copy_", ["long", "int", "Scalar"], 4 + 8),                # int32 to int64, as older traces name them
    ("aten::copy_", ["float", "unsigned char", "Scalar"], 1 + 4),     # x.float() of uint8 images
    ("aten::copy_", ["c10::Float8_e4m3fn", "c10::BFloat16", "Scalar"], 2 + 1),
    ("aten::mul", ["c10::BFloat16", "bool"], 2 + 1 + 2),              # a bf16 tensor times a bool mask
])
def test_elementwise_bytes_count_every_tensor_type_torch_records(tmp_path, op, types, want_elems):
    """Inputs of a type outside fp32/bf16/fp16/fp64 were dropped, and the next input taken for ``self``: a
    ``.long()`` copy of 64 Mi floats counted 4 bytes an element (nothing read), not 12."""
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from verdict_traces import Trace
    n = 1 << 26
    t = Trace()
    for k in range(3):
        t.step(k + 1, lambda t: t.cpu(op, 200, dims=[[n], [n]] + ([[]] if len(types) == 3 else []), types=types,
                                      children=lambda t: t.launch("vectorized_elementwise_kernel", 100.0)))
    path = t.write(tmp_path / "t.json")
    ev = [e for e in scan_trace(path) if e["name"] == op][0]["args"]
    tensors = [(d, ty) for d, ty in zip(ev["Input Dims"], ev["Input type"]) if d]
    read = sum(math.prod(d) * _HAND_BYTES[ty] for d, ty in (tensors[1:] if op == "aten::copy_" else tensors))
    written = n * (_HAND_BYTES[tensors[0][1]] if op == "aten::copy_" else max(_HAND_BYTES[ty] for _, ty in tensors))
    assert read + written == want_elems * n
    with open_trace(path, engine="sqlite") as s:
        d = diagnose(s, None, None, H200)
    (row,) = d.roofline[(d.roofline["kind"] == "elementwise") & (d.roofline["op"] == op)].itertuples()
    assert row.bytes == read + written


def test_copies_of_one_kind_are_judged_per_size(tmp_path):
    """Each step: ten 4 KiB device-to-device copies (2 µs each) and one of 1 GiB (520 µs). One row per name gave
    "195,233,233.45 bytes" (no copy moved that) at 93% of the bandwidth, hiding that the small copies reach 0.1%.
    By hand: a DtoD copy reads and writes its bytes."""
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from verdict_traces import Trace
    t = Trace()
    for k in range(4):
        def body(t):
            for _ in range(10):
                t.copy("DtoD (Device -> Device)", 4096, 2.0, 5.0, blocking=False)
            t.copy("DtoD (Device -> Device)", 1 << 30, 520.0, 5.0, blocking=False)
        t.step(k + 1, body)
    path = t.write(tmp_path / "t.json")
    copies = [e for e in scan_trace(path) if e.get("cat") == "gpu_memcpy"]
    want = {}
    for e in copies:
        want.setdefault(2 * e["args"]["bytes"], []).append(e["dur"])
    with open_trace(path, engine="sqlite") as s:
        d = diagnose(s, None, None, H200)
    rows = d.roofline[d.roofline["kind"] == "copy"]
    got = {int(r.bytes): (r.count, r.time_us, r.gbs) for r in rows.itertuples()}
    assert got == {b: (len(ds), pytest.approx(statistics.mean(ds)), pytest.approx(b / statistics.mean(ds) / 1e3))
                   for b, ds in want.items()}
    assert set(got) == {8192, 2 << 30}


def test_a_rate_above_its_roof_says_what_gave_way():
    """ResNet-50 on a V100 (2021): small adds run at up to 1,183 GB/s against the datasheet's 900: their tensors (up to
    7 MB) sat in the L2 cache the kernel before had just written them to. The row says so rather than stand at 131%."""
    path = DATA / "traces" / "worker0.1623143089861.pt.trace.json.gz"
    with open_trace(path, engine="sqlite") as s:
        d = diagnose(s)
    roof = d.roofline[d.roofline["roof"] == "memory"]
    over = roof[roof["fraction_of_peak"] > 1]
    assert len(over) and (over["gbs"] > d.peaks.bandwidth_gbs).all()
    assert all("above that bandwidth" in j and "L2 cache" in j for j in over["judged"])
    assert not any("above that" in j for j in roof.loc[roof["fraction_of_peak"] <= 1, "judged"])


@pytest.mark.parametrize("path", [DIAG / "bf16_4096.json", DIAG / "fp32_tf32_on_compile.json",
                                  TRACES / "worker0.1623143089861.pt.trace.json.gz"], ids=lambda p: p.name)
def test_each_roofline_row_names_the_unit_of_its_peak(path):
    """One table holds GEMMs judged in TFLOP/s and elementwise ops and copies judged in GB/s under one ``peak``
    column: ``peak_unit`` says which, and it is the unit of the rate the fraction divides (achieved / peak)."""
    with open_trace(path, engine="sqlite") as s:
        roof = diagnose(s, peaks=H200 if path.parent == DIAG else None).roofline
    with_peak = roof[roof["peak"].notna()]
    assert set(with_peak["peak_unit"]) == {"TFLOP/s", "GB/s"}
    assert roof.loc[roof["peak"].isna(), "peak_unit"].isna().all()
    for row in with_peak.itertuples():
        rate = row.tflops if row.peak_unit == "TFLOP/s" else row.gbs
        assert row.fraction_of_peak == pytest.approx(rate / row.peak), row
        assert (row.peak_unit == "TFLOP/s") == (row.kind in ("gemm", "conv", "attention")), row


def test_without_a_calibration_the_trace_s_gpu_is_judged_by_its_datasheet_and_says_so():
    d = run("bf16_4095", peaks=None)  # the trace's deviceProperties name the NVIDIA H200
    assert rules(d) == ["unaligned_gemm_dims"] and d.peaks.source == "datasheet"
    (g,) = d.roofline[d.roofline["kind"] == "gemm"].itertuples()
    assert g.compute_peak == 989.4 and g.fraction_of_peak == pytest.approx(g.tflops / 989.4)
    assert "of its compute roof, datasheet" in d.diagnoses[0].text
    assert "datasheet peaks" in d.diagnoses[0].cost_basis


def test_without_peaks_or_a_named_gpu_there_is_no_fraction_and_no_cost_bound(tmp_path):
    doc = json.loads((DIAG / "bf16_4095.json").read_text())
    del doc["deviceProperties"]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    with open_trace(p, engine="sqlite") as s:
        d = diagnose(s)
    assert rules(d) == ["unaligned_gemm_dims"] and d.peaks is None
    assert d.roofline["fraction_of_peak"].isna().all() and d.diagnoses[0].cost_us_per_step is None


def test_a_cpu_run_on_a_gpu_host_is_not_judged_by_the_gpu_s_datasheet(tmp_path):
    """Kineto writes the host's GPUs into a CPU-only run's deviceProperties too (seen on the H200 host: a CPU run's
    1024² bf16 GEMM was put at 0.2 % of the H200's 989.4 TFLOP/s). Its GEMMs ran on the CPU: no GPU peak applies."""
    doc = json.loads((DATA / "cpu" / "64_fp32_warm_eager.json").read_text())
    h200 = json.loads((DATA / "h200_app" / "sweep_4096_warm_eager.json").read_text())["deviceProperties"]
    doc["deviceProperties"] = h200
    p = tmp_path / "cpu_on_gpu_host.json"
    p.write_text(json.dumps(doc))
    assert not any(e.get("cat") == "kernel" for e in doc["traceEvents"])  # a plain scan: no GPU work at all
    with open_trace(p, engine="sqlite") as s:
        assert [d["name"] for d in s.devices] == ["NVIDIA H200"]
        d = diagnose(s, config=ExperimentConfig(size=64, dtype="fp32", device="cpu"))
    assert d.peaks is None
    gemm = d.roofline[d.roofline["kind"] == "gemm"] if len(d.roofline) else d.roofline
    assert len(gemm) == 0 or gemm["fraction_of_peak"].isna().all()


# Every real fixture: the rules that apply to it, and no others.
EXPECTED = {
    # the compiled 4096 step: 420 µs of CPU (the compiled region's Python, under the profiler) for 195 µs of GPU work
    "4096_bf16_warm_compile.json": ["gpu_starved"], "4096_bf16_warm_eager.json": [],
    "4096_bf16_warm_eager_a20.json": [],
    "64_bf16_cold_eager.json": ["gpu_starved"], "64_bf16_warm_eager_b8.json": ["gpu_starved"],
    "64_bf16_warm_compile_ro.json": ["gpu_starved"],
    # an A100 trace whose fp32 GEMM ran in ampere_sgemm (no TF32), outside any ProfilerStep
    "event_sync_trace.json.gz": ["fp32_without_tf32"],
    # BERT inference: the vocabulary projection (N=30522) and 141 tokens are not multiples of 8, 61 short kernels a
    # step, and an .item() with a stream sync in each step; recorded with with_stack and profile_memory (its header's
    # "with_stack": 1, "profile_memory": 1)
    "gaunernst_bert-small-uncased__1016001.json.gz": ["unaligned_gemm_dims", "gpu_starved", "sync_in_step",
                                                      "profiler_overhead", "attention_backend"],
    "gpu_metrics_input.json": ["gpu_starved", "sync_in_step"],
    # one kernel in a 13 s step: the GPU starves whatever the number of launches
    "triton_example.json.gz": ["gpu_starved", "sync_in_step"],
    "inference_rank_1.json.gz": [], 
    # a ROCm training loop: its input goes to the device in each step with hipMemcpyWithStream (a blocking copy)
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz": ["gpu_starved", "sync_in_step"],
    "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": [],
    "trace.json.gz": ["attention_backend"],  # one flash attention call (aten::_scaled_dot_product_flash_attention)
    # Qwen 0.5B inference with profile_memory: the MLP's temporaries take the peak to 1.9 GiB over 0.9 GiB of
    # weights (and an .item() per step, flash attention; its one fp32 GEMM, the rotary embedding's 32 x 1 x 559
    # bmm in a full-fp32 kernel, is held by the memory roof: TF32 would not speed it up); recorded with with_stack
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": ["sync_in_step", "profiler_overhead", "attention_backend",
                                                "memory_peak"],
    # ResNet-50 training (2021 format): its batches made in the loop's thread (num_workers=0: 40% of each step in
    # the DataLoader's __next__), a pageable input copy per step, NCHW convolutions, a for-loop SGD; its [memory]
    # events carry no totals, so what the steps keep is unknown and no peak is judged against it
    "worker0.1623143089861.pt.trace.json.gz": ["input_bound", "sync_in_step", "conv_layout", "unfused_optimizer"],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_real_fixture_gets_only_the_rules_that_apply(name):
    with open_trace(TRACES / name, engine="sqlite") as s:
        assert rules(diagnose(s)) == EXPECTED[name]


def test_a_multi_tensor_optimizer_without_foreach_ops_is_not_called_a_for_loop():
    """HTA's A100 training trace steps a FusedAdam (apex's or DeepSpeed's: no aten::_foreach_ or _fused_ op, 257
    aten::add_ of its step counters a step) whose update is 8 multi_tensor_apply kernels a step, as a plain scan of
    the JSON finds them (kernels paired to the launch calls inside each Optimizer.step range by correlation): not the
    per-parameter for-loop, so the rule stays silent; the 2021 ResNet-50's SGD, whose optimizer ranges launch one
    elementwise kernel per parameter and term, is still named."""
    path = TRACES.parent / "big" / "control.json.gz"
    evs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    for rng in [e for e in evs if str(e.get("name", "")).startswith("Optimizer.step#FusedAdam")]:
        inside = [e for e in evs if rng["ts"] <= e["ts"] < rng["ts"] + rng["dur"]]
        corr = {e["args"]["correlation"] for e in inside if e.get("cat") == "cuda_runtime"}
        kernels = [e["name"] for e in evs if e.get("cat") == "kernel" and e["args"].get("correlation") in corr]
        assert len(kernels) == 8 and all("multi_tensor_apply" in k for k in kernels)
        assert sum(e["name"] == "aten::add_" for e in inside) == 257
    with open_trace(path, engine="sqlite") as s:
        assert "unfused_optimizer" not in rules(diagnose(s))
    assert "unfused_optimizer" in EXPECTED["worker0.1623143089861.pt.trace.json.gz"]


def test_the_sync_rule_counts_the_calls_inside_steps_by_a_plain_scan():
    path = TRACES / "gaunernst_bert-small-uncased__1016001.json.gz"
    evs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in evs if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation"]
    inside = [e for e in evs if e["name"] in ("cudaStreamSynchronize", "cudaDeviceSynchronize")
              and any(a <= e["ts"] and e["ts"] + e["dur"] <= b for a, b in steps)]
    copied = {e["args"]["correlation"] for e in evs if e.get("cat") == "gpu_memcpy"
              and ("HtoD" in e["name"] or "DtoH" in e["name"]) and "pinned" not in e["name"].lower()}
    pinned = {e["args"]["correlation"] for e in evs if e.get("cat") == "gpu_memcpy" and "pinned" in e["name"].lower()}
    copy_calls = [e for e in evs if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in copied
                  and any(a <= e["ts"] <= b for a, b in steps)]
    with open_trace(path, engine="sqlite") as s:
        x = next(d for d in diagnose(s).diagnoses if d.rule == "sync_in_step")
    # the CPU blocked in synchronising calls and in the calls that launched host-device copies, not those of copies
    # from or to pinned memory, which return at once
    assert pinned and x.cost_us_per_step == pytest.approx(
        sum(e["dur"] for e in inside + copy_calls) / len(steps), rel=1e-6)
    # the step's one .item() is one wait: its stream sync sits inside it (the scan), so it is named in its chain
    (item,) = [e for e in evs if e["name"] == "aten::item" and any(a <= e["ts"] <= b for a, b in steps)]
    assert [e for e in inside if e["name"] == "cudaStreamSynchronize"
            and item["ts"] <= e["ts"] and e["ts"] + e["dur"] <= item["ts"] + item["dur"]]
    assert "aten::item ×1 (→ aten::_local_scalar_dense → cudaStreamSynchronize)" in x.text
    assert "cudaStreamSynchronize ×" not in x.text


H200_RULES = {
    "fp32_tf32_off": ["fp32_without_tf32"], "fp32_tf32_off_compile": ["fp32_without_tf32"],
    "fp32_tf32_on": [], "fp32_tf32_on_compile": [],
    "bf16_4096": [], "fp16_4096": [], "bf16_4095_compile": [],
    "bf16_4095": ["unaligned_gemm_dims"], "bf16_4100": ["unaligned_gemm_dims"], "fp16_4095": ["unaligned_gemm_dims"],
    "bf16_64": ["gpu_starved"], "bf16_64_noshapes": ["gpu_starved"], "bf16_64_compile": ["gpu_starved"],
    "bf16_64_ro": ["gpu_starved"], "bf16_64_stack_memory": ["gpu_starved", "profiler_overhead"],
}


@pytest.mark.parametrize("name", sorted(H200_RULES))
def test_each_h200_run_triggers_the_rules_made_for_it_and_no_others(name):
    assert rules(run(name)) == H200_RULES[name]


def test_fp32_without_tf32_names_the_ffma_kernel_and_bounds_the_cost_by_the_tf32_peak():
    d = run("fp32_tf32_off")
    (x,) = d.diagnoses
    durs = kernel_durs(DIAG / "fp32_tf32_off.json", "gemm")
    assert "sm80_xmma_gemm_f32f32_f32f32_f32" in x.text and "TF32 tensor cores" in x.text
    flops = 2 * 4096 ** 3
    assert x.cost_us_per_step == pytest.approx(statistics.mean(durs) - flops / (H200.gemm_tflops["tf32"] * 1e6))
    (g,) = d.roofline[d.roofline["kind"] == "gemm"].itertuples()
    assert g.dtype == "fp32" and g.fraction_of_peak == pytest.approx(flops / statistics.mean(durs) / 1e6 /
                                                                     H200.gemm_tflops["fp32"])
    assert "set_float32_matmul_precision('high')" in x.fix
    # with TF32 on, the GEMM is judged against the tf32 peak
    g = run("fp32_tf32_on").roofline.query("kind == 'gemm'").iloc[0]
    assert g["dtype"] == "tf32" and "tf32" in g["kernel"] and g["peak"] == H200.gemm_tflops["tf32"]


def test_a_fix_names_this_app_s_setting_only_on_a_run_of_this_app():
    # imported traces (no matmul_add region in the JSON, no config): torch's own switch, no app knob
    for name, rule in (("event_sync_trace.json.gz", "fp32_without_tf32"),
                       ("worker0.1623143089861.pt.trace.json.gz", "unfused_optimizer")):
        assert not any(e.get("name") == "matmul_add" for e in scan_trace(TRACES / name))
        with open_trace(TRACES / name, engine="sqlite") as s:
            x = next(d for d in diagnose(s).diagnoses if d.rule == rule)
        assert "this app" not in x.fix.lower(), (name, x.fix)
    # the same rule on a run of this app (its config known) names the app's knob
    x = next(d for d in run("fp32_tf32_off").diagnoses if d.rule == "fp32_without_tf32")
    assert "set_float32_matmul_precision('high')" in x.fix and x.fix.endswith(
        "In this app: the fp32 matmul precision knob.")


def test_a_gemm_replayed_from_a_cuda_graph_gets_its_flops_from_the_config():
    d = run("bf16_64_ro")
    (g,) = d.roofline[d.roofline["kind"] == "gemm"].itertuples()
    assert g.flops_from == "config" and g.flops == 2 * 64 ** 3 and g.count == 3
    assert g.time_us == pytest.approx(statistics.mean(kernel_durs(DIAG / "bf16_64_ro.json", "nvjet")))


def test_a_config_given_as_meta_json_s_dict_counts_as_the_config_itself():
    # A trace recorded without shapes: its GEMMs' FLOPs can only come from the config. meta.json's dict must give
    # the same answer as the ExperimentConfig read from it (it used to crash analyze and be dropped by diagnose).
    from profiling_core import analyze
    from profiling_core.errors import ConfigError
    meta = json.loads((DIAG / "bf16_64_noshapes.meta.json").read_text())
    mm = [e for e in scan_trace(DIAG / "bf16_64_noshapes.json") if e.get("ph") == "X" and e.get("name") == "aten::mm"
          and e.get("cat") == "cpu_op"]
    steps = [e for e in scan_trace(DIAG / "bf16_64_noshapes.json")
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    in_steps = [e for e in mm if any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)]
    assert len(in_steps) == 3 and all("Input Dims" not in e.get("args", {}) for e in mm)
    with open_trace(DIAG / "bf16_64_noshapes.json", engine="sqlite") as s:
        for cfg in (meta["config"], ExperimentConfig.from_dict(meta["config"])):
            g = analyze(s, config=cfg).gemm_throughput
            assert set(g["flops_from"]) == {"config"} and set(g["flops"]) == {2 * 64 ** 3}
            (row,) = diagnose(s, config=cfg, peaks=H200).roofline.query("kind == 'gemm'").itertuples()
            assert row.flops_from == "config" and row.flops == 2 * 64 ** 3 and row.count == len(in_steps)
        assert analyze(s).gemm_throughput.empty  # without a config there is nothing to count them by
        for bad, says in (({**meta["config"], "size": "big"}, "size must be"), ("4096", "config must be an"),
                          ({**meta["config"], "sizes": 64}, "config must be one of the fields")):
            with pytest.raises(ConfigError, match=says):
                analyze(s, config=bad)


def test_the_starved_rule_counts_the_launch_calls_of_each_step():
    x = next(d for d in run("bf16_64").diagnoses if d.rule == "gpu_starved")
    evs = [e for e in scan_trace(DIAG / "bf16_64.json") if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in evs if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation"]
    steps = sorted(steps)[1:] if len(steps) >= 3 else steps  # the steady state: the steps after the first
    launches = [e["dur"] for e in evs if e["name"] in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx")
                and any(a <= e["ts"] <= b for a, b in steps)]
    assert x.evidence["launch_calls_per_step"] == len(launches) / len(steps) == 2
    assert x.evidence["launch_call_us"] == pytest.approx(statistics.median(launches))
    assert x.cost_us_per_step == pytest.approx(x.evidence["cpu_step_us"] - x.evidence["gpu_busy_us"])


def _trace(tmp_path, events, name="t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def _x(name, ts, dur, cat="cpu_op", pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_a_sync_inside_a_synthetic_step_is_found_and_one_outside_is_not(tmp_path):
    evs = [_x("ProfilerStep#1", 0, 100, "user_annotation"), _x("aten::item", 10, 30),
           _x("aten::_local_scalar_dense", 11, 28), _x("cudaStreamSynchronize", 12, 25, "cuda_runtime"),
           _x("cudaDeviceSynchronize", 150, 40, "cuda_runtime")]  # after the step: not the step's
    with open_trace(_trace(tmp_path, evs), engine="sqlite") as s:
        (x,) = [d for d in diagnose(s).diagnoses if d.rule == "sync_in_step"]
    assert x.cost_us_per_step == 25.0 and "cudaDeviceSynchronize" not in x.text
    # one .item(), the calls nested in it named as its chain, not counted as three waits
    assert "aten::item ×1 (→ aten::_local_scalar_dense → cudaStreamSynchronize) per step" in x.text


def test_an_sgemm_on_a_gpu_without_tf32_is_not_flagged(tmp_path):
    evs = [_x("ProfilerStep#1", 0, 100, "user_annotation"), _x("cudaLaunchKernel", 10, 5, "cuda_runtime",
                                                                 correlation=1),
           _x("volta_sgemm_128x64_nn", 20, 50, "kernel", pid=0, tid=7, correlation=1)]
    with open_trace(_trace(tmp_path, evs), engine="sqlite") as s:
        assert "fp32_without_tf32" not in rules(diagnose(s))
        assert "fp32_without_tf32" not in rules(diagnose(s, compute_capability=7.0))
        assert "fp32_without_tf32" in rules(diagnose(s, compute_capability=8.0))  # what the run's meta says wins


def test_recompiles_and_graph_breaks_are_named(tmp_path):
    evs = []
    for i, region in enumerate(["0/0", "0/1"]):  # frame 0 compiled, then recompiled
        t = i * 1000
        evs += [_x(f"ProfilerStep#{i + 1}", t, 900, "user_annotation"),
                _x("TorchDynamo Cache Lookup", t + 10, 5, "user_annotation"),
                _x(f"Torch-Compiled Region: {region}", t + 20, 300, "user_annotation"),
                _x("## Call CompiledFxGraph abc ##", t + 30, 200, "user_annotation"),
                _x("Torch-Compiled Region: 1/0", t + 400, 300, "user_annotation")]  # a second frame: a graph break
    with open_trace(_trace(tmp_path, evs), engine="sqlite") as s:
        (x,) = [d for d in diagnose(s).diagnoses if d.rule == "compile_breaks"]
    assert "1 recompiled frame (0/1: frame/recompile count)" in x.text
    assert "2 compiled regions per step from 2 compiled frames (graph breaks" in x.text
    assert "TORCH_LOGS='graph_breaks,recompiles'" in x.fix


def test_a_frame_recompiled_twice_is_one_recompiled_frame(tmp_path):
    """Frame 1 compiled as 1/0, then recompiled twice (1/1, 1/2), frame 0 never: one recompiled frame, where the
    rule counted its two recompiled regions as "2 recompiled frames"."""
    evs = []
    for i, region in enumerate(["1/0", "1/1", "1/2"]):
        t = i * 1000
        evs += [_x(f"ProfilerStep#{i + 1}", t, 900, "user_annotation"),
                _x("Torch-Compiled Region: 0/0", t + 20, 300, "user_annotation"),
                _x(f"Torch-Compiled Region: {region}", t + 400, 300, "user_annotation")]
    with open_trace(_trace(tmp_path, evs), engine="sqlite") as s:
        (x,) = [d for d in diagnose(s).diagnoses if d.rule == "compile_breaks"]
    assert "1 recompiled frame (1/1, 1/2: frame/recompile count)" in x.text


def test_one_compiled_function_called_often_is_not_a_graph_break(tmp_path):
    evs = []
    for i in range(3):  # a loop that calls one compiled function 4 times a step: frame 0, never recompiled
        t = i * 2000
        evs.append(_x(f"ProfilerStep#{i + 1}", t, 1900, "user_annotation"))
        for k in range(4):
            evs += [_x("TorchDynamo Cache Lookup", t + 10 + 400 * k, 5, "user_annotation"),
                    _x("Torch-Compiled Region: 0/0", t + 20 + 400 * k, 300, "user_annotation")]
    with open_trace(_trace(tmp_path, evs), engine="sqlite") as s:
        assert "compile_breaks" not in rules(diagnose(s))


def test_a_blocking_host_to_device_copy_in_each_step_is_found_by_a_plain_scan():
    """MI250's loop copies its input to the device with hipMemcpyWithStream (a blocking copy). Its second step is
    empty (nothing begins in its window), so the copies are counted per step over the one step that worked."""
    path = TRACES / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    evs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in evs if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation"]
    worked = [(a, b) for a, b in steps if sum(1 for e in evs if a <= e["ts"] < b) > 1]  # (the step's own slice)
    copies = [e for e in evs if e["name"] == "hipMemcpyWithStream" and any(a <= e["ts"] <= b for a, b in steps)]
    assert len(steps) == 2 and len(worked) == 1 and len(copies) == 2
    with open_trace(path, engine="sqlite") as s:
        x = next(d for d in diagnose(s).diagnoses if d.rule == "sync_in_step")
    assert x.evidence["copies_in_steps"] == {"HtoD": len(copies), "DtoH": 0}
    assert x.cost_us_per_step == pytest.approx(sum(e["dur"] for e in copies) / len(worked), rel=1e-6)
    assert x.text.startswith("Inside the only step with work in it (step 1; the other step is the profiler's closing "
                             "stub)")
    assert "2 host-to-device copies per step" in x.text and "pin_memory" in x.fix


def test_staging_copies_that_cost_more_than_the_gemm_are_named(tmp_path):
    def run_(copy_us, graph=True):
        evs = [_x("ProfilerStep#1", 0, 1000, "user_annotation"),
               _x("Torch-Compiled Region: 0/0", 10, 900, "user_annotation"),
               _x("aten::_foreach_copy_", 20, 40),
               _x("cudaLaunchKernel", 30, 5, "cuda_runtime", correlation=1),
               _x("void at::native::multi_tensor_apply_kernel<Copy>", 100, copy_us, "kernel", pid=0, tid=7,
                  correlation=1),
               _x("aten::mm", 300, 100, **{"Input Dims": [[64, 64], [64, 64]],
                                           "Input type": ["c10::BFloat16", "c10::BFloat16"]}),
               _x("cudaLaunchKernel", 310, 5, "cuda_runtime", correlation=2),
               _x("nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT", 320 + copy_us, 2, "kernel", pid=0, tid=7, correlation=2),
               # reduce-overhead replays the graph the inputs were staged for
               _x("cudaGraphLaunch", 600, 8, "cuda_runtime", correlation=3),
               _x("triton_poi_fused_add_0", 700 + copy_us, 1, "kernel", pid=0, tid=7, correlation=3)]
        if not graph:
            evs = evs[:-2]
        with open_trace(_trace(tmp_path, evs, f"t{copy_us}{graph}.json"), engine="sqlite") as s:
            return diagnose(s)
    (x,) = [d for d in run_(50).diagnoses if d.rule == "compile_breaks"]
    assert "CUDA-graph input staging copies (1 multi_tensor_apply kernel a step, 50.0 µs per step) cost more than " \
           "the GEMMs (2.00 µs per step)" in x.text
    assert "compile_breaks" not in rules(run_(1))  # a copy cheaper than the math: nothing to say
    assert "compile_breaks" not in rules(run_(50, graph=False))  # no graph replayed: a foreach op, not staging


def test_a_graph_replayed_without_staging_copies_is_diagnosed(tmp_path):
    """A reduce-overhead run whose graph stages no input (its inputs static: no multi_tensor_apply kernel) replays
    graphs all the same; the compile rule looked for staging copies in an empty selection and raised KeyError, so the
    whole diagnosis of such a run failed. Now it finds none and says nothing of them."""
    evs = [_x("ProfilerStep#1", 0, 1000, "user_annotation"),
           _x("Torch-Compiled Region: 0/0", 10, 900, "user_annotation"),
           _x("aten::mm", 300, 100, **{"Input Dims": [[64, 64], [64, 64]],
                                       "Input type": ["c10::BFloat16", "c10::BFloat16"]}),
           _x("cudaLaunchKernel", 310, 5, "cuda_runtime", correlation=2),
           _x("nvjet_sm90_tst_64x8_64x16_1x4_h_bz_NNT", 370, 2, "kernel", pid=0, tid=7, correlation=2),
           _x("cudaGraphLaunch", 600, 8, "cuda_runtime", correlation=3),
           _x("triton_poi_fused_add_0", 750, 1, "kernel", pid=0, tid=7, correlation=3)]
    with open_trace(_trace(tmp_path, evs), engine="sqlite") as s:
        d = diagnose(s)
        assert (d.roofline["kind"] == "gemm").sum() == 1
    assert not any("staging" in x.text for x in d.diagnoses)


def test_a_fix_for_staging_copies_alone_does_not_send_the_reader_after_graph_breaks_or_recompiles():
    """The H200 reduce-overhead run (h200_memory/ro): one compiled frame never recompiled (every region 0/0), one
    region per step, one CUDA graph replayed per step; only its input staging copies cost more than its GEMM. The fix
    addresses those copies and names no graph-break or recompile hunt; a recompile-only trace gets only that hunt."""
    path = DATA / "h200_memory" / "ro.json"
    evs = [e for e in scan_trace(path) if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in evs if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation"]
    regions = [e for e in evs if e["name"].startswith("Torch-Compiled Region: ")]
    assert {e["name"] for e in regions} == {"Torch-Compiled Region: 0/0"}  # one frame, never recompiled
    assert [sum(1 for e in regions if a <= e["ts"] < b) for a, b in steps] == [1] * len(steps)
    assert sum(1 for e in evs if e["name"] == "cudaGraphLaunch") == len(steps)
    # the copies launched in the steady state's steps (after the first), which the rule reads as the GEMMs
    steady_steps = sorted(steps)[1:] if len(steps) >= 3 else steps
    calls = {e["args"]["correlation"]: e for e in evs
             if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    staging = [e for e in evs if e.get("cat") == "kernel" and "multi_tensor_apply" in e["name"]
               and any(a <= calls[e["args"]["correlation"]]["ts"] < b for a, b in steady_steps)]
    meta = json.loads((DATA / "h200_memory" / "ro.meta.json").read_text())
    with open_trace(path, engine="sqlite") as s:
        (x,) = [d for d in diagnose(s, config=ExperimentConfig.from_dict(meta["config"]), peaks=H200).diagnoses
                if d.rule == "compile_breaks"]
    per_step = sum(e["dur"] for e in staging) / len(steady_steps)
    # one a step (it said "2 multi_tensor_apply kernels", the two steps' together, beside one step's time)
    assert len(staging) == len(steady_steps) == 2
    assert x.text == (f"torch.compile in this trace: CUDA-graph input staging copies (1 multi_tensor_apply kernel a "
                      f"step, {per_step:.2f} µs per step) cost more than the GEMMs "
                      f"({x.text.split('than the GEMMs (')[1]}")
    for word in ("graph break", "recompile", "TORCH_LOGS", "mark_dynamic", "dynamic=True"):
        assert word not in x.fix, word
    assert "mark_static_address" in x.fix and "copied in" in x.fix


def test_a_recompile_alone_gets_the_recompile_hunt_and_no_staging_or_graph_break_advice(tmp_path):
    evs = []
    for i, region in enumerate(["0/0", "0/1"]):  # one frame, recompiled once; one region per step
        t = i * 1000
        evs += [_x(f"ProfilerStep#{i + 1}", t, 900, "user_annotation"),
                _x(f"Torch-Compiled Region: {region}", t + 20, 300, "user_annotation")]
    with open_trace(_trace(tmp_path, evs), engine="sqlite") as s:
        (x,) = [d for d in diagnose(s).diagnoses if d.rule == "compile_breaks"]
    assert x.text == "torch.compile in this trace: 1 recompiled frame (0/1: frame/recompile count)."
    assert "TORCH_LOGS='recompiles'" in x.fix and "mark_dynamic" in x.fix
    assert "graph break" not in x.fix and "reduce-overhead" not in x.fix


def test_the_attention_backend_that_ran_is_named_from_the_trace():
    path = TRACES / "gaunernst_bert-small-uncased__1016001.json.gz"
    flash = [e for e in scan_trace(path) if e.get("name") == "aten::_scaled_dot_product_flash_attention"]
    with open_trace(path, engine="sqlite") as s:
        x = next(d for d in diagnose(s).diagnoses if d.rule == "attention_backend")
    assert flash and x.evidence["backend"] == "flash" and x.title == "Attention backend: flash"
    assert "aten::_scaled_dot_product_flash_attention" in x.text and x.fix.startswith("Nothing to change for the backend")


@pytest.mark.slow
def test_a_forced_math_backend_on_the_cpu_is_named_with_its_reason(store):
    from profiling_core import run_experiment
    cfg = ExperimentConfig(workload="attention", knobs={"backend": "math", "seq_len": 64, "batch": 1, "heads": 2},
                           device="cpu", wait=0, warmup_steps=0, active=1)
    run = run_experiment(cfg, store=store)
    with open_trace(run.trace_path, engine="sqlite") as s:
        x = next(d for d in diagnose(s, config=cfg).diagnoses if d.rule == "attention_backend")
    assert x.evidence["backend"] == "math" and "the run forced backend=math" in x.text
    assert "drop the forced backend" in x.fix


@pytest.mark.parametrize("k, flagged", [(1, False), (4096, True)])
def test_an_fp32_gemm_held_by_the_memory_roof_is_not_sent_to_tf32(tmp_path, k, flagged):
    # an LLM's rotary embedding in decode: (4096 x 1) @ (1 x 4096) in fp32 moves 64 MiB for 32 MFLOP, 0.5 FLOP/byte,
    # held by the bandwidth whatever the math units; a K = 4096 product of the same M, N is compute-bound
    dims = [[4096, k], [k, 4096]]
    evs = [_x("ProfilerStep#1", 0, 100, "user_annotation"),  # (the GPU paces the step: its GEMM time counts in full)
           _x("aten::mm", 10, 40, **{"Input Dims": dims, "Input type": ["float", "float"]}),
           _x("cudaLaunchKernel", 20, 5, "cuda_runtime", correlation=1),
           _x("cutlass_80_simt_sgemm_128x32_8x5_tn_align1", 30, 600, "kernel", pid=0, tid=7, correlation=1)]
    with open_trace(_trace(tmp_path, evs), engine="sqlite") as s:
        d = diagnose(s, peaks=H200, compute_capability=9.0)
    (g,) = d.roofline[d.roofline["kind"] == "gemm"].itertuples()
    assert g.roof == ("compute" if flagged else "memory")
    assert ("fp32_without_tf32" in rules(d)) is flagged
    if flagged:
        x = next(x for x in d.diagnoses if x.rule == "fp32_without_tf32")
        floor = max(2 * 4096 * 4096 * k / (H200.gemm_tflops["tf32"] * 1e6),
                    (2 * 4096 * k + 4096 * 4096) * 4 / (H200.bandwidth_gbs * 1e3))
        assert x.cost_us_per_step == pytest.approx(600 - floor)


def _own_times_in(events, a: float, b: float) -> dict:
    """Own time (duration less the children's, nesting per thread) of every CPU slice that starts in [a, b), by
    name, summed: a plain scan of the JSON, every thread of the trace included."""
    gpu = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Trace", "python_function"}
    by_thread: dict = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") not in gpu and "dur" in e:
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    own: dict = {}
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list = []
        child = {}
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                child[id(stack[-1])] = child.get(id(stack[-1]), 0.0) + e["dur"]
            stack.append(e)
        for e in evs:
            if a <= e["ts"] < b and not str(e["name"]).startswith("ProfilerStep#"):
                own[e["name"]] = own.get(e["name"], 0.0) + e["dur"] - child.get(id(e), 0.0)
    return own


def test_the_starved_rules_cpu_ops_count_every_thread_as_its_launch_total_does():
    """On ROCm the backward's launches run on the autograd engine's own thread (pt_autograd_0): a 6.5 ms
    hipLaunchKernel there counted in the step's launch total but was missing from where the CPU time goes."""
    path = TRACES / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    with open_trace(path, engine="sqlite") as s:
        (x,) = [d for d in diagnose(s).diagnoses if d.rule == "gpu_starved"]
    events = scan_trace(path)
    (step,) = [e for e in events if e.get("name") == "ProfilerStep#1" and e.get("cat") != "gpu_user_annotation"]
    assert x.evidence["basis_steps"] == [1]
    # step 2 is empty (nothing begins in its window): one step of work is no steady state, and the text says which
    (step2,) = [e for e in events if e.get("name") == "ProfilerStep#2" and e.get("cat") != "gpu_user_annotation"]
    assert not [e for e in events if e.get("ph") in ("X", "i") and e is not step2
                and step2["ts"] <= e["ts"] < step2["ts"] + step2["dur"]]
    assert x.text.startswith("The GPU waits on the CPU: in the only step with work in it (step 1; the other step "
                             "is the profiler's closing stub) the step takes 9,288.3 µs")
    own = _own_times_in(events, step["ts"], step["ts"] + step["dur"])
    top = sorted(own.items(), key=lambda kv: -kv[1])[:5]
    assert top[0][0] == "hipLaunchKernel" and top[0][1] > 6500  # the launch that blocked, on the autograd thread
    got = [(o["name"], o["us_per_step"]) for o in x.evidence["top_cpu_ops"]]
    assert [n for n, _ in got] == [n for n, _ in top]
    assert [us for _, us in got] == pytest.approx([us for _, us in top], abs=1e-3)
    launches = sum(e["dur"] for e in events if e.get("name") in ("hipLaunchKernel", "hipExtModuleLaunchKernel",
                                                                 "hipMemcpyWithStream")  # (ROCm's copy launch too)
                   and step["ts"] <= e["ts"] < step["ts"] + step["dur"])
    assert x.evidence["launch_calls_us_per_step"] == pytest.approx(launches, abs=1e-3)
    assert own["hipLaunchKernel"] <= x.evidence["launch_calls_us_per_step"]
    assert x.text.split("largest first): ")[1].startswith("hipLaunchKernel 6,")


def test_an_overhead_bound_steps_gpu_cost_is_the_time_blocked_while_the_gpu_worked():
    """BERT-small on an H100 (TraceLens): one overhead-bound step whose LM-head GEMM runs unaligned. A GPU-time saving
    shortens such a step at most by the time its CPU sat blocked in synchronising calls while the GPU worked: by a
    plain scan 2.24 µs (the stream sync waits on a 1-byte copy), though that is under the share the bound rule counts
    (it takes it as none there). The cost quotes that measured time, not 0."""
    path = TRACES / "gaunernst_bert-small-uncased__1016001.json.gz"
    events = scan_trace(path)
    [step] = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
              and e.get("cat") != "gpu_user_annotation"]
    lo, hi = step["ts"], step["ts"] + step["dur"]
    busy = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X"
                  and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    syncs = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and lo <= e["ts"] < hi
             and e["name"] in ("cudaDeviceSynchronize", "cudaStreamSynchronize")]
    assert len(syncs) == 2

    def overlap(a, b):  # GPU busy time inside [a, b) (the ops of one stream here do not overlap one another)
        return sum(max(0.0, min(b, e) - max(a, s)) for s, e in busy)
    blocked = sum(overlap(e["ts"], e["ts"] + e["dur"]) for e in syncs)
    assert blocked == pytest.approx(2.24, abs=0.01)
    with open_trace(path, engine="sqlite") as s:
        d = diagnose(s)
    [x] = [x for x in d.diagnoses if x.rule == "unaligned_gemm_dims"]
    assert x.cost_us_per_step == pytest.approx(blocked, abs=0.01)
    assert f"{blocked:.2f} µs per step" in x.cost_basis and "while the GPU worked" in x.cost_basis


def test_a_fix_names_a_knob_only_where_the_run_can_set_it():
    """A CPU linear training step with AdamW's for-loop (tests/data/cpu, with its meta): the unfused_optimizer fix
    names the app's impl knob. The same trace read as a ``script`` run whose train knob is off (a user's own
    training step, its own optimizer) was told "In this app: the impl knob", a knob the app refuses there ("must be
    left at its default 'auto' when train is False")."""
    from profiling_core.analyses import analyze
    from profiling_core.errors import ConfigError
    path = DATA / "cpu" / "linear_train_adamw_fp16_scaler.json.gz"
    own = json.loads((DATA / "cpu" / "linear_train_adamw_fp16_scaler.meta.json").read_text())["config"]
    script = ExperimentConfig.for_workload("script", {"path": str(DATA.parent / "data" / "scripts" / "train_step.py")},
                                           device="cpu")
    assert script.knobs["train"] is False
    with pytest.raises(ConfigError, match="when train is False"):
        ExperimentConfig.for_workload("script", {"path": "step.py", "impl": "fused"}, device="cpu")
    with open_trace(path, engine="sqlite") as s:
        fixes = {name: [d.fix for d in diagnose(s, analyze(s, config=cfg), cfg).diagnoses
                        if d.rule == "unfused_optimizer"][0] for name, cfg in (("own", own), ("script", script))}
    assert fixes["own"].endswith("In this app: the impl knob.")
    assert "In this app" not in fixes["script"]
