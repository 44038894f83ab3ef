"""What a GPU op is, read from its name and trace category by stated rules: the one place kernel names are classified.

:func:`gpu_op_category` puts every GPU op (kernel, memcpy, memset) into one of :data:`GPU_OP_CATEGORIES` (the
per-step breakdown and the top-kernels table use it); :func:`is_gemm_kernel` is its GEMM rule, which the diagnosis
also uses; :func:`kernel_family` reads what a GEMM kernel's name states (architecture, math, alignment), and
:func:`ran_tf32` whether an fp32 GEMM's kernels ran on TF32 tensor cores.

The rules match lower-cased substrings of the name; the first rule that matches wins, in this order:

1. the trace category: ``gpu_memcpy``/``Memcpy`` → ``memcpy``; ``gpu_memset``/``Memset`` → ``memset``;
2. ``communication``: ``nccl`` or ``rccl`` (``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_…``);
3. ``attention``: ``flash``, ``fmha``, ``sdpa``, ``attention`` or ``attn`` (``pytorch_flash::flash_fwd_kernel``
   on an H100, ``attn_fwd`` from Triton on an MI300X; PyTorch's memory-efficient ``fmha_cutlassF_…`` and cuDNN's
   ``…sdpa…`` kernels). Before the GEMM rule because flash kernels are built from CUTLASS and name it. SDPA's
   math backend runs as GEMMs and a softmax, and shows as such; Inductor's pointwise kernels that say
   ``attention`` (``triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy_…``: a copy or a cat beside the
   attention kernel, named after the ops it fused) stay ``elementwise``, as for rule 4;
4. ``convolution``: cuDNN's and MIOpen's convolution kernels, by the words their names use for the three passes and
   the algorithms: ``fprop``, ``dgrad``, ``wgrad`` (``sm90_xmma_fprop_implicit_gemm_…`` forward, ``…dgrad…`` /
   ``…wgrad…`` backward), ``convolve`` (``implicit_convolve_sgemm``), ``winograd``, ``conv2d``/``conv3d``/
   ``conv1d``, ``depthwise``, ``miopensp``. Before the GEMM rule because implicit-GEMM convolutions name ``gemm``
   and ``xmma``; Inductor's pointwise kernels that say ``convolution`` (``triton_poi_fused_convolution_0``: a layout
   copy or the bias) stay ``elementwise`` (rule 6 checks their prefix first). cuDNN's layout transposes around a
   convolution (``nchwToNhwcKernel``, ``nhwcToNchwKernel``) are copies of data and stay ``other``;
5. ``gemm`` (:func:`is_gemm_kernel`): ``gemm``, ``gemv``, ``nvjet``, ``cutlass``, ``xmma``; names starting with
   ``triton_tem_fused_`` (Inductor's GEMM templates), ``triton_mm`` or ``triton_bmm`` (the same templates as
   max-autotune benchmarks them: 1,696 ``triton_mm`` kernels in an H100's cold run) or ``cijk_`` (AMD's Tensile
   GEMMs, ``Cijk_Alik_Bljk_…``);
6. ``elementwise`` (elementwise, reductions and normalisation): ``elementwise`` (ATen's
   ``vectorized_elementwise_kernel``, ``unrolled_…``, ``elementwise_kernel``), ``reduce_kernel``, ``softmax``,
   ``layer_norm``/``layernorm``, ``rms_norm``/``rmsnorm``, ``group_norm``, ``batch_norm``/``batchnorm``, cuDNN's
   batch norm ``bn_fw``/``bn_bw``, ``multi_tensor_apply`` (foreach / optimizer kernels), and Inductor's pointwise and
   reduction kernels ``triton_poi_``, ``triton_red_``, ``triton_per_``;
7. ``other``: every other kernel (copies such as ``CatArrayBatchedCopy``, embeddings, sorts, unnamed ones).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Optional

__all__ = ["GPU_OP_CATEGORIES", "BREAKDOWN_CATEGORIES", "gpu_op_category", "is_gemm_kernel", "kernel_family",
           "ran_tf32", "split_kernel_names"]

GPU_OP_CATEGORIES = ("gemm", "convolution", "attention", "elementwise", "other", "memcpy", "memset", "communication")
"""The categories of GPU ops, in the order the breakdown attributes overlapping time (the first wins) and shows
them: compute kernels first, then copies, then communication (so ``communication`` is the time nothing else ran)."""

BREAKDOWN_CATEGORIES = GPU_OP_CATEGORIES + ("unrecorded", "idle")
""":data:`GPU_OP_CATEGORIES`, ``unrecorded`` and ``idle``: the rows of a step's breakdown, in this order.
``unrecorded`` is time a GPU spent on work the trace does not hold, where no recorded op ran: its first recorded op
waited that long after its launch call returned (or, where it was launched before the recording, after the
recording began), behind work queued before the recording began (the profiler records no op that started before it
did: a schedule's warm-up step's kernel still running, docs/FINDINGS.md). ``Shared.unrecorded_waits`` states the
rule: only that wait is known, so time before the launch call counts as idle even where such work ran then. ``idle`` is
the rest: no GPU op of the trace's running."""

_COMMUNICATION = ("nccl", "rccl")
_ATTENTION = ("flash", "fmha", "sdpa", "attention", "attn")
_CONVOLUTION = ("fprop", "dgrad", "wgrad", "convolve", "winograd", "conv2d", "conv3d", "conv1d", "depthwise",
                "miopensp")
_INDUCTOR_POINTWISE = ("triton_poi_", "triton_red_", "triton_per_")
_GEMM = ("gemm", "gemv", "nvjet", "cutlass", "xmma")
_GEMM_PREFIX = ("triton_tem_fused_", "triton_mm", "triton_bmm", "cijk_")
_ELEMENTWISE = ("elementwise", "reduce_kernel", "softmax", "layer_norm", "layernorm", "rms_norm", "rmsnorm",
                "group_norm", "batch_norm", "batchnorm", "bn_fw", "bn_bw", "multi_tensor_apply", "triton_poi_",
                "triton_red_", "triton_per_")
_COPY_CATEGORIES = {"gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}


# A trace holds each kernel name thousands of times and ~1k distinct ones: the classifiers below answer each distinct
# name once (a 59 MiB trace: 57k calls from the diagnosis alone, 2.8 s of substring tests without it).
_CACHED = 1 << 16


@lru_cache(maxsize=_CACHED)
def is_gemm_kernel(name: Optional[str]) -> bool:
    """True when a kernel's name says it is a GEMM (rule 5 of the module's rules; attention and convolution kernels
    are not)."""
    return _kernel_category((name or "").lower()) == "gemm"


def _kernel_category(low: str) -> str:
    """Rules 2–7 on a lower-cased kernel name."""
    if any(k in low for k in _COMMUNICATION):
        return "communication"
    pointwise = low.startswith(_INDUCTOR_POINTWISE)  # (named after the ops they fused: elementwise, rule 6)
    if not pointwise and any(k in low for k in _ATTENTION):
        return "attention"
    if not pointwise and any(k in low for k in _CONVOLUTION):
        return "convolution"
    if any(k in low for k in _GEMM) or low.startswith(_GEMM_PREFIX):
        return "gemm"
    if any(k in low for k in _ELEMENTWISE):
        return "elementwise"
    return "other"


@lru_cache(maxsize=_CACHED)
def gpu_op_category(name: Optional[str], category: Optional[str]) -> str:
    """The category (one of :data:`GPU_OP_CATEGORIES`) of a GPU op with this name and trace category (``kernel``,
    ``gpu_memcpy``, ``gpu_memset`` or the 2021 ``Kernel``/``Memcpy``/``Memset``), by the module's rules."""
    copy = _COPY_CATEGORIES.get((category or "").lower())
    return copy if copy is not None else _kernel_category((name or "").lower())


def kernel_family(name: str) -> dict[str, Any]:
    """What a GEMM kernel's name states, by these rules (None where the name does not say):

    - ``arch``: the SM generation it was built for: ``sm<NN>_`` / ``nvjet_sm<NN>`` / ``cutlass_<NN>_`` /
      ``cutlass3x_sm<NN>`` give NN; ``volta_``/``turing_``/``ampere_``/``hopper_`` give 70/75/80/90;
    - ``math``: ``tf32`` if the name has ``tf32``, or for a CUTLASS tensor-op kernel of fp32 operands (``tensorop_``
      then ``s`` and the MMA shape: ``cutlass_80_tensorop_s1688gemm_…``; a kernel of 16-bit operands names their type
      first, ``tensorop_bf16_s16816gemm``): :func:`ran_tf32` says why; ``fp32-simt`` for full-fp32 FFMA kernels
      (``sgemm``, ``_ffma_`` or xmma's ``f32f32_f32f32`` without ``tf32``); ``tensor-core`` for the other
      ``tensorop``/``s16816``/``s1688``/``nvjet``/``hmma``/``wgmma`` kernels;
    - ``align``: the operand alignment in elements of a CUTLASS kernel (``align1`` .. ``align8``).
    """
    n = name or ""
    low = n.lower()
    arch = None
    m = re.search(r"(?:^|[^a-z0-9])(?:nvjet_)?sm_?(\d{2,3})(?=[_a-z])", low) or re.search(r"cutlass_(\d{2})_", low) \
        or re.search(r"cutlass3x_sm(\d{2,3})", low)
    if m:
        arch = int(m.group(1))
    else:
        for word, a in (("volta_", 70), ("turing_", 75), ("ampere_", 80), ("hopper_", 90)):
            if word in low:
                arch = a
                break
    if "tf32" in low or re.search(r"tensorop_s\d+gemm", low):
        math_ = "tf32"
    elif "sgemm" in low or "_ffma" in low or "f32f32_f32f32" in low:
        math_ = "fp32-simt"
    elif any(k in low for k in ("tensorop", "s16816", "s1688", "nvjet", "hmma", "wgmma", "gmma")):
        math_ = "tensor-core"
    else:
        math_ = None
    a = re.search(r"align(\d+)", low)
    return {"arch": arch, "math": math_, "align": int(a.group(1)) if a else None}


@lru_cache(maxsize=_CACHED)  # (once per distinct text: a trace's GEMMs share a few kernel names)
def ran_tf32(kernel_names: str) -> bool:
    """Whether an fp32 GEMM (recorded ``float`` inputs) whose kernels are ``kernel_names`` (one name, or a
    comma-joined list as ``gemm_throughput`` gives them) ran on TF32 tensor cores: one of them is a ``tf32`` kernel
    by :func:`kernel_family`'s ``math``. The one rule for it: the roofline judges such a GEMM against the tf32 peak,
    and a trace with one had TF32 on (``fp32_without_tf32``).

    Evidence, fp32 GEMMs in the recorded traces: on the H200 (``tests/data/h200_diag``) torch's matmul precision
    ``high`` ran ``sm90_xmma_gemm_f32f32_tf32f32_…`` and ``highest`` ran ``sm80_xmma_gemm_f32f32_f32f32_…_ffma_…``
    (FFMA), both xmma names saying their math; other fp32 runs there ran ``cutlass_80_simt_sgemm_…`` (FFMA). On an
    A100 (HTA's control trace) fp32 GEMMs ran ``ampere_sgemm_…`` (FFMA) and ``cutlass_80_tensorop_s1688gemm_…``:
    CUTLASS tensor ops on fp32 operands, which is TF32 math. An ``nvjet`` kernel is not taken for TF32: its letters
    name the operand types (``nvjet_sm90_tst_…`` bf16, ``…_hsh_…`` fp16), and in these traces one ran under an fp32
    op only as autocast's wrapper, whose inner call was bf16 or fp16; no trace shows the math an fp32 GEMM runs
    in one. Nor is any other ``tensor-core`` kernel, for the same reason."""
    return any(kernel_family(x)["math"] == "tf32" for x in split_kernel_names(kernel_names or ""))


def split_kernel_names(joined: str) -> list[str]:
    """The kernel names of a comma-joined list (``gemm_throughput``'s ``kernel_names``), split only at the commas
    outside brackets: a demangled name keeps the commas of its template and argument lists
    (``splitKreduce_kernel<32, 16, int, ...>(...)``)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(joined or ""):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            out.append(joined[start:i])
            start = i + 1
    out.append((joined or "")[start:])
    return [x for x in out if x]
