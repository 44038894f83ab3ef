"""Synthetic Kineto traces built to break verdicts shaped on matmul + add, each with the verdict it must get.

A :class:`Trace` lays out profiler steps on one CPU thread and one GPU stream the way torch.profiler records them:
a ``ProfilerStep#N`` annotation, CPU ops (with ``Input Dims`` / ``Input type`` where shapes are recorded), runtime
calls that launch GPU work (paired with it by ``correlation``, as traces without flow events are), kernels and
copies on the stream, which start no earlier than their launch and no earlier than the previous op on the stream
ended (so a CPU that runs ahead builds a queue, as a real stream does), and ``[memory]`` events.
"""
from __future__ import annotations

import json
from pathlib import Path


class Trace:
    def __init__(self, device_name: str = "NVIDIA H200"):
        self.events: list[dict] = []
        self.t = 1000.0  # CPU clock, µs
        self.gpu_free = 0.0  # when the stream is next free
        self.corr = 0
        self.device_name = device_name
        self.other_free: dict[int, float] = {}  # when the stream of each GPU but device 0 is next free

    def _x(self, name, ts, dur, cat, pid=1, tid=1, **args):
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                            "args": args})

    def step(self, n: int, body, gap_us: float = 5.0):
        """``ProfilerStep#n`` around ``body(self)``, which advances the CPU clock; returns the step's window."""
        start = self.t
        self.t += 2.0
        body(self)
        self.t += 2.0
        self._x(f"ProfilerStep#{n}", start, self.t - start, "user_annotation")
        window = (start, self.t)
        self.t += gap_us
        return window

    def cpu(self, name, dur, *, dims=None, types=None, concrete=None, strides=None, children=None, cat="cpu_op"):
        """A CPU op of ``dur`` µs (``cat`` user_annotation: a record_function range); ``children(self)`` runs inside
        it (its own time is the rest)."""
        start = self.t
        args = {}
        if dims is not None:
            args["Input Dims"] = dims
        if strides is not None:
            args["Input Strides"] = strides
        if types is not None:
            args["Input type"] = types
        if concrete is not None:
            args["Concrete Inputs"] = concrete
        self.t += 1.0
        if children:
            children(self)
        self.t = max(self.t, start + dur)
        self._x(name, start, self.t - start, cat, **args)

    def launch(self, kernel: str, gpu_us: float, call_us: float = 5.0, call: str = "cudaLaunchKernel",
               cat: str = "kernel", device: int = 0, after: float = 0.0, **gpu_args):
        """A runtime call of ``call_us`` that queues ``gpu_us`` of GPU work named ``kernel`` on GPU ``device`` (its
        ops under pid ``device``, as Kineto writes them), starting no earlier than ``after`` (a dependency on
        another GPU's work)."""
        self.corr += 1
        ts = self.t
        self._x(call, ts, call_us, "cuda_runtime", correlation=self.corr)
        start = max(ts + 3.0, self.gpu_free if device == 0 else self.other_free.get(device, 0.0), after)
        self._x(kernel, start, gpu_us, cat, pid=device, tid=7, correlation=self.corr, device=device, stream=7,
                **gpu_args)
        if device == 0:
            self.gpu_free = start + gpu_us
        else:
            self.other_free[device] = start + gpu_us
        self.t = ts + call_us
        return start

    def graph(self, kernels: list, call_us: float = 10.0, call: str = "cudaGraphLaunch"):
        """A CUDA graph's replay: one ``call`` of ``call_us`` whose ``kernels`` ((name, µs) each) run back to back on
        GPU 0, each with the call's correlation, as the H200's reduce-overhead traces record a replay."""
        self.corr += 1
        ts = self.t
        self._x(call, ts, call_us, "cuda_runtime", correlation=self.corr)
        start = max(ts + 3.0, self.gpu_free)
        for name, us in kernels:
            self._x(name, start, us, "kernel", pid=0, tid=7, correlation=self.corr, device=0, stream=7)
            start += us
        self.gpu_free = start
        self.t = ts + call_us

    def copy(self, kind: str, nbytes: int, gpu_us: float, call_us: float, *, blocking: bool):
        """A cudaMemcpyAsync of ``nbytes``: ``kind`` as Kineto names it (``HtoD (Pageable -> Device)``,
        ``HtoD (Pinned -> Device)``, ``DtoH (Device -> Pageable)``); a pageable copy blocks the CPU call until done."""
        self.corr += 1
        ts = self.t
        start = max(ts + 3.0, self.gpu_free)
        end = start + gpu_us
        dur = max(call_us, end - ts + 1.0) if blocking else call_us
        self._x("cudaMemcpyAsync", ts, dur, "cuda_runtime", correlation=self.corr)
        self._x(f"Memcpy {kind}", start, gpu_us, "gpu_memcpy", pid=0, tid=7, correlation=self.corr, device=0,
                stream=7, bytes=nbytes, **{"memory bandwidth (GB/s)": nbytes / gpu_us / 1e3})
        self.gpu_free = end
        self.t = ts + dur

    def sync(self, name: str = "cudaStreamSynchronize"):
        """A synchronising call that waits until the stream (every GPU's) is idle."""
        ts = self.t
        dur = max(2.0, max([self.gpu_free, *self.other_free.values()]) - ts + 2.0)
        self._x(name, ts, dur, "cuda_runtime")
        self.t = ts + dur

    def memory(self, nbytes: int, total: int, reserved: int, device: int = 0, addr: int | None = None,
               kind: int = 1):
        """A ``[memory]`` event of ``nbytes`` (negative: a free) at ``addr`` (default: an address of its own) on
        device ``kind`` (c10's DeviceType: 1 CUDA, 0 the CPU) number ``device``."""
        self.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                            "ts": self.t, "args": {"Addr": 140000000000 + len(self.events) if addr is None else addr,
                                                   "Bytes": nbytes, "Total Allocated": total,
                                                   "Total Reserved": reserved, "Device Type": kind,
                                                   "Device Id": device if kind else -1}})
        self.t += 1.0

    def write(self, path: Path, device_properties: bool = True) -> Path:
        doc = {"schemaVersion": 1, "traceEvents": self.events}
        if device_properties:
            doc["deviceProperties"] = [{"id": d, "name": self.device_name, "computeMajor": 9, "computeMinor": 0}
                                       for d in [0, *sorted(self.other_free)]]
        Path(path).write_text(json.dumps(doc))
        return Path(path)


BF16 = ["c10::BFloat16", "c10::BFloat16"]


def gpu_bound_with_drift(path: Path, steps: int = 5, gemm_us: float = 7000.0, sync: bool = False) -> Path:
    """An fp32-MLP-like step: 0.3 ms of CPU that launches 3 GEMMs of ``gemm_us`` each. The CPU runs ahead, the queue
    drifts, and the GPU work of a step runs long after that step's window: compute-bound. With ``sync`` the step then
    waits for them in cudaDeviceSynchronize."""
    t = Trace()
    for n in range(steps):
        def body(t):
            for _ in range(3):
                t.cpu("aten::mm", 90, dims=[[4096, 4096], [4096, 4096]], types=["float", "float"],
                      children=lambda t: t.launch("ampere_sgemm_128x64_nn", gemm_us))
            if sync:
                t.sync("cudaDeviceSynchronize")
        t.step(n + 1, body)
    return t.write(path)


def gpu_bound_synced(path: Path, steps: int = 4) -> Path:
    """A step that launches 3 GEMMs of 2 ms in ~0.3 ms of CPU, then waits for them in cudaDeviceSynchronize: its CPU
    time holds all of its GPU work (so GPU work / CPU time stays under 1), and the GPU sets the pace."""
    return gpu_bound_with_drift(path, steps, gemm_us=2000.0, sync=True)


def full_launch_queue(path: Path, steps: int = 4, kernels: int = 6, kernel_us: float = 1000.0,
                      cpu_us: float = 20.0, gap_us: float = 1.0) -> Path:
    """A CPU far ahead of its GPU, its launch queue full: each launch call blocks until the kernel before the one it
    queues has ended (a queue one kernel deep), so the CPU's time follows the GPU's and GPU work / CPU time sits just
    under 1; the GPU never waits for a launch (each kernel starts ``gap_us`` after the one before it, already
    queued)."""
    t = Trace()
    ends: list[float] = []
    for n in range(steps):
        def body(t):
            for _ in range(kernels):
                def queue(t):
                    t.corr += 1
                    ts = t.t
                    free_slot = ends[-2] if len(ends) >= 2 else ts  # the kernel before the last one has ended
                    dur = max(5.0, free_slot - ts + 1.0)
                    t._x("cudaLaunchKernel", ts, dur, "cuda_runtime", correlation=t.corr)
                    start = max(ts + 3.0, (ends[-1] + gap_us) if ends else ts + 3.0)
                    t._x("ampere_sgemm_128x64_nn", start, kernel_us, "kernel", pid=0, tid=7, correlation=t.corr,
                         device=0, stream=7)
                    ends.append(start + kernel_us)
                    t.gpu_free = start + kernel_us
                    t.t = ts + dur
                t.cpu("aten::mm", cpu_us, dims=[[4096, 4096], [4096, 4096]], types=["float", "float"],
                      children=queue)
        t.step(n + 1, body)
    return t.write(path)


def cpu_paced(path: Path, steps: int = 4, kernels: int = 6, kernel_us: float = 1000.0, cpu_us: float = 1100.0
              ) -> Path:
    """The counter-case of :func:`full_launch_queue`: the CPU spends ``cpu_us`` before each launch of a
    ``kernel_us`` kernel, so the GPU drains its queue and waits ~0.1 ms for every launch: overhead-bound."""
    t = Trace()
    for n in range(steps):
        def body(t):
            for _ in range(kernels):
                t.cpu("aten::mm", cpu_us, dims=[[4096, 4096], [4096, 4096]], types=["float", "float"],
                      children=lambda t: (setattr(t, "t", t.t + cpu_us - 10.0),
                                          t.launch("ampere_sgemm_128x64_nn", kernel_us)))
        t.step(n + 1, body)
    return t.write(path)


def copy_bound(path: Path, pinned: bool, steps: int = 4) -> Path:
    """A step that copies 8 MiB from the host (pageable: the call blocks for the whole copy; pinned: it returns at
    once), runs a 20 µs kernel on it and reads a scalar back with .item() (a copy into pinned memory and a stream
    synchronize, as on the H200 of ``h200_verdicts/copy_*``, whose CPU side took about as long)."""
    t = Trace()
    kind = "HtoD (Pinned -> Device)" if pinned else "HtoD (Pageable -> Device)"
    gpu_us = 170.0 if pinned else 650.0
    for n in range(steps):
        def body(t):
            t.cpu("aten::copy_", 30, children=lambda t: t.copy(kind, 8 << 20, gpu_us, 8.0, blocking=not pinned))
            t.cpu("aten::mm", 150, dims=[[1024, 1024], [1024, 1024]], types=BF16,
                  children=lambda t: t.launch("nvjet_sm90_tst_128x128_64x4_1x2_h_bz_NNT", 20.0))
            t.cpu("aten::item", 30, children=lambda t: t.cpu(
                "aten::_local_scalar_dense", 28, children=lambda t: (
                    t.copy("DtoH (Device -> Pinned)", 4, 2.0, 6.0, blocking=False), t.sync())))
        t.step(n + 1, body)
    return t.write(path)


def two_gpu_pipeline(path: Path, steps: int = 5, kernels: int = 4, kernel_us: float = 1000.0) -> Path:
    """One process, a model split across two GPUs (as ``device_map="auto"`` splits one): each step runs its first
    ``kernels`` GEMMs on device 0, then its last ``kernels`` on device 1 once device 0's are done, and waits for
    both in cudaDeviceSynchronize. The union of the two GPUs' work fills the step; each GPU idles half of it."""
    t = Trace()
    for n in range(steps):
        def body(t):
            done0 = 0.0
            for _ in range(kernels):
                t.cpu("aten::mm", 20, dims=[[4096, 4096], [4096, 4096]], types=BF16, children=lambda t: t.launch(
                    BF16_GEMM, kernel_us))
                done0 = t.gpu_free
            for _ in range(kernels):
                t.cpu("aten::mm", 20, dims=[[4096, 4096], [4096, 4096]], types=BF16, children=lambda t: t.launch(
                    BF16_GEMM, kernel_us, device=1, after=done0))
            t.sync("cudaDeviceSynchronize")
        t.step(n + 1, body)
    return t.write(path)


def two_gpu_cpu_paced(path: Path, steps: int = 4, kernels: int = 6, kernel_us: float = 100.0, cpu_us: float = 400.0
                      ) -> Path:
    """:func:`cpu_paced` on two GPUs of one process, its launches alternating between device 0 and device 1: the
    CPU spends ``cpu_us`` before each ``kernel_us`` kernel, so both GPUs wait for it most of the step."""
    t = Trace()
    for n in range(steps):
        def body(t):
            for k in range(kernels):
                t.cpu("aten::mm", cpu_us, dims=[[1024, 1024], [1024, 1024]], types=BF16,
                      children=lambda t: (setattr(t, "t", t.t + cpu_us - 10.0),
                                          t.launch(BF16_GEMM, kernel_us, device=k % 2)))
        t.step(n + 1, body)
    return t.write(path)


def gpu_starved_one_launch(path: Path, steps: int = 4) -> Path:
    """A compiled step of one 1.3 µs Triton kernel inside 375 µs of CPU (Dynamo's guards, the compiled region's
    Python): one launch per step, the GPU idle 99.7 % of the step."""
    t = Trace()
    for n in range(steps):
        def body(t):
            t.cpu("TorchDynamo Cache Lookup", 120)
            t.cpu("Torch-Compiled Region: 0/0", 240, children=lambda t: t.cpu(
                "## Call CompiledFxGraph f0 ##", 200, children=lambda t: t.launch(
                    "triton_poi_fused_add_mul_relu_sin_0", 1.3, call="cuLaunchKernel")))
        t.step(n + 1, body, gap_us=5.0)
    return t.write(path)


def gemm(path: Path, m: int, k: int, n: int, kernel: str, gpu_us: float, steps: int = 4, cpu_us: float = 60.0,
         types=None) -> Path:
    """One bf16 (or ``types``) ``aten::mm`` of (m, k) @ (k, n) per step, recorded shapes, running ``kernel`` for
    ``gpu_us``."""
    t = Trace()
    for s in range(steps):
        t.step(s + 1, lambda t: t.cpu("aten::mm", cpu_us, dims=[[m, k], [k, n]], types=types or BF16,
                                      children=lambda t: t.launch(kernel, gpu_us)))
    return t.write(path)


def conv_with_transposes(path: Path, steps: int = 3, transpose_us: float = 12.0, conv_us: float = 40.0,
                         cpu_us: float = 300.0, gap_us: float = 5.0) -> Path:
    """A bf16 NCHW conv (3×3, stride 1, padding 1, (32, 64, 56, 56) input, 64 filters): cuDNN transposes the input
    to NHWC, runs the implicit-GEMM kernel, transposes back."""
    t = Trace()
    for s in range(steps):
        def body(t):
            def conv(t):
                t.launch("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, "
                         "false, true, (cudnnKernelDataType_t)0>(...)", transpose_us)
                t.launch("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x64x32_"
                         "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn", conv_us)
                t.launch("void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16, float, "
                         "true, false, (cudnnKernelDataType_t)0>(...)", transpose_us)
            t.cpu("aten::convolution", cpu_us, dims=[[32, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], [], [], []],
                  types=["c10::BFloat16", "c10::BFloat16", "", "ScalarList", "ScalarList", "ScalarList", "Scalar",
                         "ScalarList", "Scalar"],
                  concrete=["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
                  children=lambda t: t.cpu("aten::cudnn_convolution", 60, children=conv))
        t.step(s + 1, body, gap_us=gap_us)
    return t.write(path)


def attention(path: Path, q: list, kv: list, *, causal: bool = False, backend: str = "flash", gpu_us: float = 11.2,
              steps: int = 3, autocast: bool = False) -> Path:
    """One bf16 ``aten::scaled_dot_product_attention`` per step, query ``q`` and key/value ``kv`` ([B, H, L, D]).

    ``backend``: ``flash`` (eager: the public op calls ``aten::_scaled_dot_product_flash_attention``, which runs one
    flash kernel), ``efficient`` (the same through ``aten::_scaled_dot_product_efficient_attention`` and a cutlass
    fmha kernel), ``compiled`` (a compiled graph calls the flash backend op directly), ``math`` (a bmm, a softmax and
    a bmm: no fused kernel). ``autocast``: fp32 inputs under bf16 autocast, as torch records them (the H200's Llama
    training step, ``h200_train/llm_train``): the public op with fp32 types holds the casts (``aten::to``) and then
    the same op again with the bf16 ones."""
    t = Trace()
    flash = "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<64, 64, 128, 4, false>>(...)"
    fmha = "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)"
    dims, types = [q, kv, kv, [], [], [], [], []], ["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "", "Scalar"]
    concrete = ["", "", "", "", "0.", str(causal), "", "False"]
    backend_op = dict(dims=[q, kv, kv, [], [], [], []], types=["c10::BFloat16"] * 3 + ["Scalar"] * 3 + [""],
                      concrete=["", "", "", "0.", str(causal), "False", ""],
                      children=lambda t: t.launch(flash, gpu_us))
    efficient_op = dict(dims=[q, kv, kv, [], [], [], [], []],
                        types=["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "Scalar", ""],
                        concrete=["", "", "", "", "True", "0.", str(causal), ""],
                        children=lambda t: t.launch(fmha, gpu_us))

    def public(t, types=types, inner=None):
        if inner is None:
            inner = (lambda t: t.cpu("aten::_scaled_dot_product_flash_attention", 30, **backend_op)) \
                if backend == "flash" else \
                (lambda t: t.cpu("aten::_scaled_dot_product_efficient_attention", 30, **efficient_op))
        t.cpu("aten::scaled_dot_product_attention", 40, dims=dims, types=types, concrete=concrete, children=inner)

    def cast(t):
        for x in (q, kv, kv):
            t.cpu("aten::to", 3, dims=[x, [], [], [], []], types=["float", "Scalar", "Scalar", "Scalar", "Scalar"],
                  children=lambda t: t.launch("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_"
                                              "kernel_cuda(...)>(...)", 1.0))
        public(t)
    for s in range(steps):
        def body(t):
            if backend == "compiled":
                t.cpu("aten::_scaled_dot_product_flash_attention", 30, **backend_op)
            elif backend in ("flash", "efficient") and autocast:
                public(t, types=["float"] * 3 + types[3:], inner=cast)
            elif backend in ("flash", "efficient"):
                public(t)
            else:
                t.cpu("aten::scaled_dot_product_attention", 90, dims=dims, types=types, concrete=concrete,
                      children=lambda t: (t.launch("ampere_bf16_s16816gemm_bf16_64x64_ldg8_f2f_nn", gpu_us / 3),
                                          t.launch("void at::native::(anonymous namespace)::cunn_SoftMaxForward"
                                                   "<8, c10::BFloat16, float, c10::BFloat16>(...)", gpu_us / 3),
                                          t.launch("ampere_bf16_s16816gemm_bf16_64x64_ldg8_f2f_nn", gpu_us / 3)))
        t.step(s + 1, body)
    return t.write(path)


def cpu_steps(path: Path, calls: list[list[tuple]], *, gemm_dims=None) -> Path:
    """A CPU-only trace (no device properties, no GPU lane): one step per entry of ``calls``, each a list of
    (op name, own µs) run inside ``aten::linear`` wrappers; ops named ``aten::addmm`` carry ``gemm_dims``, the others
    a (8, 128, 512) input."""
    t = Trace()
    for n, step in enumerate(calls):
        def body(t, step=step):
            for name, us in step:
                dims = gemm_dims if name == "aten::addmm" else [[8, 128, 512]]
                types = ["float"] * len(dims)
                t.cpu("aten::linear", us + 4, children=lambda t, name=name, us=us, dims=dims, types=types: t.cpu(
                    name, us, dims=dims, types=types))
        t.step(n + 1, body)
    return t.write(path, device_properties=False)


def allocations_only(path: Path) -> Path:
    """A CUDA trace (device properties, [memory] events on device 0) in which no kernel ran."""
    t = Trace()
    t.step(1, lambda t: (t.memory(1 << 20, 1 << 20, 2 << 20), t.cpu("aten::empty", 10),
                         t.memory(-(1 << 20), 0, 2 << 20)))
    return t.write(path)


def one_kernel_two_shapes(path: Path, steps: int = 6) -> Path:
    """One GEMM kernel name run at two shapes each step: 10 µs at 1024³ and 80 µs at 2048³ (a spread that is
    shape, not noise)."""
    t = Trace()
    name = "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_NNT"
    for s in range(steps):
        def body(t):
            t.cpu("aten::mm", 20, dims=[[1024, 1024], [1024, 1024]], types=BF16,
                  children=lambda t: t.launch(name, 10.0))
            t.cpu("aten::mm", 20, dims=[[2048, 2048], [2048, 2048]], types=BF16,
                  children=lambda t: t.launch(name, 80.0))
        t.step(s + 1, body)
    return t.write(path)


def _annotate(t: Trace, name: str, body) -> None:
    """A ``record_function`` range (category user_annotation) around ``body(t)``."""
    start = t.t
    t.t += 1.0
    body(t)
    t.t += 1.0
    t._x(name, start, t.t - start, "user_annotation")


FP32 = ["float", "float"]
SGEMM = "ampere_sgemm_128x64_nn"
TF32_GEMM = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel"
BF16_GEMM = "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_NNT"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float>>(...)"
FOREACH = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<2>>(...)"
FUSED = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>(...)"
FOR_LOOP_OPS = ("aten::mul_", "aten::add_", "aten::addcmul_", "aten::sqrt", "aten::div")
FOREACH_OPS = ("aten::_foreach_mul_", "aten::_foreach_addcmul_", "aten::_foreach_add_")


def training_step(path: Path, *, impl: str = "fused", types=BF16, kernel: str = BF16_GEMM, params: int = 4,
                  log_loss: bool = False, ranges: bool = True, backward: bool = True, steps: int = 4,
                  optimizer_every: int = 1) -> Path:
    """A training step on a GPU: a forward GEMM (20 µs), a backward of two GEMMs (40 µs each) inside
    ``autograd::engine::evaluate_function: MmBackward0``, the optimizer inside ``Optimizer.step#AdamW.step``, and
    ``Optimizer.zero_grad#AdamW.zero_grad``; ``ranges``: each phase inside the app's ``train::`` range too.

    ``impl``: ``for-loop`` (the five ops of FOR_LOOP_OPS per parameter, one 2 µs elementwise kernel each),
    ``foreach`` (the three FOREACH_OPS, one multi-tensor kernel each) or ``fused`` (one ``aten::_fused_adamw_``, one
    kernel). ``log_loss``: an ``.item()`` (a blocking 4-byte copy back and a stream sync) after zero_grad.
    ``backward`` False: no backward phase (a forward and an optimizer step only). ``optimizer_every``: the optimizer
    and zero_grad run in every this-many-th step only (gradient accumulation over that many micro-batches)."""
    t = Trace()

    def mm(t, gpu_us):
        t.cpu("aten::mm", 30, dims=[[512, 512], [512, 512]], types=types,
              children=lambda t: t.launch(kernel, gpu_us))

    def optimizer(t):
        if impl == "for-loop":
            for _ in range(params):
                for op in FOR_LOOP_OPS:
                    t.cpu(op, 8, children=lambda t: t.launch(ELEMENTWISE, 2.0))
        elif impl == "foreach":
            for op in FOREACH_OPS:
                t.cpu(op, 12, children=lambda t: t.launch(FOREACH, 4.0))
        else:
            t.cpu("aten::_fused_adamw_", 15, children=lambda t: t.launch(FUSED, 6.0))

    phases = [("train::forward", None, lambda t: mm(t, 20.0))]
    if backward:
        phases.append(("train::backward", "autograd::engine::evaluate_function: MmBackward0",
                       lambda t: (mm(t, 40.0), mm(t, 40.0))))
    phases += [("train::optimizer", "Optimizer.step#AdamW.step", optimizer),
               ("train::zero_grad", "Optimizer.zero_grad#AdamW.zero_grad", lambda t: t.cpu("aten::detach", 3))]
    for n in range(steps):
        def body(t, n=n):
            for rng, annotation, inner in phases:
                if rng in ("train::optimizer", "train::zero_grad") and (n + 1) % optimizer_every:
                    continue
                def run(t, annotation=annotation, inner=inner):
                    if annotation is None:
                        inner(t)
                    else:
                        _annotate(t, annotation, inner)
                _annotate(t, rng, run) if ranges else run(t)
            if log_loss:
                t.cpu("aten::item", 30, children=lambda t: t.cpu(
                    "aten::_local_scalar_dense", 28, children=lambda t: (
                        t.copy("DtoH (Device -> Pageable)", 4, 2.0, 6.0, blocking=True), t.sync())))
        t.step(n + 1, body)
    return t.write(path)


def decode_tokens(path: Path, tokens: int = 4, launches: int = 30, kernel_us: float = 2.0, steps: int = 4,
                  graph: bool = False, regions: str | None = None) -> Path:
    """Decode steps shaped like the causal_lm workload's: ``decode::prefill`` (one 400 µs GEMM), then ``tokens``
    ``decode::token`` ranges, each launching ``launches`` kernels of ``kernel_us`` (5 µs calls), or with ``graph``
    one cudaGraphLaunch (8 µs) of a ``launches × kernel_us`` kernel. ``regions``: each forward sits in a
    ``Torch-Compiled Region``, ``0/0`` for the prefill, then as a real CPU run compiled them: ``dynamic`` (a
    dynamic cache) ``0/1`` for the first token and ``0/2`` for the later ones, ``static`` ``0/1`` for every token."""
    t = Trace()

    def forward(t, variant, body):
        if regions:
            t.cpu("TorchDynamo Cache Lookup", 10)
            t.cpu(f"Torch-Compiled Region: {variant}", 1, children=body)
        else:
            body(t)

    def token_work(t):
        if graph:
            t.launch("ampere_bf16_gemv_graph", launches * kernel_us, call_us=8.0, call="cudaGraphLaunch")
        else:
            for _ in range(launches):
                t.launch("void at::native::elementwise_kernel<128, 4>", kernel_us)
        t.cpu("aten::argmax", 15)

    for n in range(steps):
        def body(t):
            t.cpu("decode::prefill", 1, cat="user_annotation", children=lambda t: forward(t, "0/0", lambda t: t.cpu(
                "aten::mm", 20, dims=[[128, 512], [512, 512]], types=BF16,
                children=lambda t: t.launch("nvjet_sm90_tst_128x128_64x4_1x2_h_bz_NNT", 400.0))))
            for k in range(tokens):
                t.cpu("decode::token", 1, cat="user_annotation",
                      children=lambda t, k=k: forward(t, "0/1" if k == 0 or regions == "static" else "0/2",
                                                      token_work))
        t.step(n + 1, lambda t: t.cpu("causal_lm", 1, cat="user_annotation", children=body))
    return t.write(path)


MiB, GiB = 1 << 20, 1 << 30


def memory_steps(path: Path, *, steps: int = 4, kept: int = 100 * MiB, temp: int = GiB, leak: int = 0,
                 first_step_state: int = 0, reserved: int | None = None, kind: int = 1, graphs: bool = False,
                 with_memory: bool = True) -> Path:
    """Steps that each allocate a ``temp`` in ``aten::mul`` and free it, over ``kept`` bytes allocated before the
    window, ``leak`` bytes more kept by ``leaky_op`` in every step, ``first_step_state`` bytes kept by the first step
    only (an optimizer's state); the allocator reserves ``reserved`` (default: the peak, rounded up to 2 MiB). On the
    CPU (``kind`` 0) it writes 0 reserved, as torch does. ``graphs``: each step launches one cudaGraphLaunch."""
    t = Trace()
    level = [kept]
    peak = kept + first_step_state + steps * leak + temp
    res = 0 if kind == 0 else (reserved if reserved is not None else -(-peak // (2 * MiB)) * 2 * MiB)
    addr = [1 << 40]

    def alloc(nbytes, a=None):
        level[0] += nbytes
        a = a if a is not None else addr[0]
        addr[0] += 4096
        if with_memory:
            t.memory(nbytes, level[0], res, addr=a, kind=kind)
        return a

    for n in range(1, steps + 1):
        def body(t, n=n):
            if n == 1 and first_step_state:
                t.cpu("aten::zeros_like", 10, children=lambda t: alloc(first_step_state))
            if leak:
                t.cpu("leaky_op", 10, children=lambda t: alloc(leak))
            box = {}
            t.cpu("aten::mul", 20, children=lambda t: box.update(a=alloc(temp)))
            t.cpu("aten::add", 20, children=lambda t: (
                t.launch("cudaGraphLaunch_work", 50.0, call="cudaGraphLaunch") if graphs else None,
                alloc(-temp, box["a"])))
        t.step(n, body)
    return t.write(path)


SINGLE_NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
WORKERS_NEXT = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def data_loader_steps(path: Path, data_us, *, name: str = SINGLE_NEXT, train: bool = True, gpu: bool = True,
                      compute_us: float = 40.0, gpu_copy: bool = False, kernel_us: float = 20.0) -> Path:
    """One step per entry of ``data_us``: the DataLoader's range (``name``, category user_annotation) of that many µs
    around a collation (``aten::stack``, 10 µs), then the batch's copy and a forward GEMM (``compute_us`` of CPU, a
    ``kernel_us`` kernel; on the CPU, ``gpu`` False: an ``aten::mm`` of ``compute_us``), then, with ``train``, a backward
    range and an SGD step (without: an inference loop, no training phase). ``gpu_copy``: the DataLoader range also has
    its ``gpu_user_annotation`` copy on the GPU lane (as Kineto writes a range that launched GPU work)."""
    t = Trace()
    for n, d in enumerate(data_us):
        def body(t, d=d):
            start = t.t
            t.cpu(name, d, cat="user_annotation", children=lambda t: t.cpu("aten::stack", 10.0))
            if gpu_copy:
                t._x(name, start + 3.0, d, "gpu_user_annotation", pid=0, tid=7)
            if gpu:
                t.copy("HtoD (Pinned -> Device)", 1 << 20, 30.0, 8.0, blocking=False)
                t.cpu("aten::mm", compute_us, dims=[[512, 512], [512, 512]], types=BF16,
                      children=lambda t: t.launch(BF16_GEMM, kernel_us))
            else:
                t.cpu("aten::mm", compute_us, dims=[[512, 512], [512, 512]], types=FP32)
            if train:
                _annotate(t, "autograd::engine::evaluate_function: MmBackward0", lambda t: t.cpu(
                    "aten::mm", compute_us, dims=[[512, 512], [512, 512]], types=BF16 if gpu else FP32,
                    children=(lambda t: t.launch(BF16_GEMM, 40.0)) if gpu else None))
                _annotate(t, "Optimizer.step#SGD.step", lambda t: t.cpu("aten::_foreach_add_", 12.0))
        t.step(n + 1, body)
    return t.write(path, device_properties=gpu)


def earlier_work(path: Path, *, earlier_us: float = 5000.0, sync: bool = True, kernels: int = 6,
                 kernel_us: float = 30.0, steps: int = 1, full_queue: bool = False) -> Path:
    """A trace taken from a running loop: when the profiler began recording, the GPU still had ``earlier_us`` of
    work queued (its kernel is in the trace, its launch call is not). The first step waits for it in
    cudaDeviceSynchronize (with ``sync``) or launches its own ``kernels`` small kernels behind it, 50 µs of CPU
    each; with ``full_queue`` the launch queue is one kernel deep, so each launch call blocks until the kernel
    before the one it queues has ended (the earlier work first)."""
    t = Trace()
    start = t.t + 1.0
    t._x("ampere_sgemm_128x64_nn", start, earlier_us, "kernel", pid=0, tid=7, correlation=10 ** 6, device=0,
         stream=7)
    t.gpu_free = start + earlier_us
    ends = [start + earlier_us]

    def blocking_launch(t):
        t.corr += 1
        ts = t.t
        dur = max(5.0, (ends[-2] if len(ends) >= 2 else ts) - ts + 1.0)  # a slot frees when that kernel ends
        t._x("cudaLaunchKernel", ts, dur, "cuda_runtime", correlation=t.corr)
        begin = max(ts + 3.0, ends[-1])
        t._x("vectorized_elementwise_kernel", begin, kernel_us, "kernel", pid=0, tid=7, correlation=t.corr,
             device=0, stream=7)
        ends.append(begin + kernel_us)
        t.gpu_free, t.t = ends[-1], ts + dur

    for n in range(steps):
        def body(t, first=n == 0):
            if sync and first:
                t.sync("cudaDeviceSynchronize")
            for _ in range(kernels):
                t.cpu("aten::add", 50, children=blocking_launch if full_queue else
                      (lambda t: t.launch("vectorized_elementwise_kernel", kernel_us)))
        t.step(n + 1, body)
    return t.write(path)


def as_ranks(src: Path, dst: Path, ranks: int = 2, shift_us: float = 7.0) -> Path:
    """The trace ``src`` with ``ranks - 1`` copies of its events as further processes (pid + 100000 per rank, every
    time ``shift_us`` later per rank): the file a merge of several ranks' traces makes, each rank's step N a step
    slice of its own."""
    doc = json.loads(Path(src).read_text())
    events = list(doc["traceEvents"])
    for k in range(1, ranks):
        for e in doc["traceEvents"]:
            if isinstance(e.get("pid"), int):
                f = dict(e, pid=e["pid"] + 100000 * k)
                if "ts" in f:
                    f["ts"] = f["ts"] + shift_us * k
                events.append(f)
    doc["traceEvents"] = events
    Path(dst).write_text(json.dumps(doc))
    return Path(dst)
