"""The diagnosis rules, one module per rule, each module named after its rule's id.

Each holds one function ``_rule_…(ctx) -> Diagnosis | None`` (a small pure function of the report, the roofline, the
run's config and the peaks, silent where it does not apply or cannot decide) and the thresholds it uses;
``profiling_core.explain.diagnosis.RULES`` runs them in order:

- ``fp32_without_tf32``: fp32 GEMMs in full-fp32 FFMA kernels on a GPU with TF32 tensor cores.
- ``unaligned_gemm_dims``: a bf16/fp16 GEMM a leading dimension of which (K or M of the first operand, N or K of
  the second, N of the result, as their recorded strides lay them out) is not a multiple of 8.
- ``input_bound``: the steady-state steps spend a fifth of their CPU time or more in the DataLoader's ``__next__``,
  waiting for their batches (GPU or CPU); the fix depends on whether workers made them.
- ``gpu_starved``: the GPU idles half a steady-state step or more, whatever the launch count.
- ``decode_launch_bound``: the GPU idles half a steady-state decode token or more (``decode::token`` ranges), with
  the launch calls per token; the fix is a static KV cache and CUDA graphs.
- ``sync_in_step``: synchronising calls and host-device copies inside a ProfilerStep.
- ``allocator_in_step``: ``cudaMalloc``/``cudaFree`` (or the driver's calls of expandable segments) in every
  steady-state step: ``torch.cuda.empty_cache()`` in the loop, an allocator retrying near a full memory, or a cache
  that grows.
- ``exposed_communication``: the GPU runs only collectives (no compute on any stream) for a tenth of the steady-state
  steps' windows or more; the fix follows the collective (all-reduce, all-gather/reduce-scatter, send/receive).
- ``compile_breaks``: recompiles, graph breaks, or CUDA-graph staging copies costlier than the GEMMs; recompiles
  inside decode tokens are traced to a dynamic KV cache, with the static cache as the fix.
- ``profiler_overhead``: the run was profiled with with_stack or profile_memory.
- ``attention_backend``: which SDPA backend ran, and why flash could not.
- ``cudagraphs_skipped``: mode='reduce-overhead' asked for CUDA graphs, and no step replays one.
- ``conv_layout``: cuDNN transposes NCHW tensors to NHWC and back around the convolutions (channels_last).
- ``cpu_contention``: on a CPU, work ops far slower than the same call elsewhere in the run, or a GEMM below any
  core's rate: threads that did not get their cores (the threads knob, a quieter machine).
- ``unfused_optimizer``: a training step's optimizer ran its for-loop implementation (per-parameter ops), where
  foreach and fused exist.
- ``fp32_training``: a training step's GEMMs in fp32/TF32 on a GPU with bf16 tensor cores: autocast would do.
- ``memory_peak``: a device's memory peak far above what its steps keep: temporaries to free, chunk or recompute.
- ``memory_growth``: allocated memory that grows in every step, with the ops whose blocks are never freed.
- ``memory_fragmentation``: the allocator reserves far more than the tensors use even at the peak (fragmentation:
  expandable_segments; or an earlier peak, told apart by the run's max_memory_allocated).
- ``cudagraph_pools``: CUDA graphs replayed with memory events: their private pools, and what the trace cannot show.
"""
