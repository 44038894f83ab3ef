"""Analyses of one trace, one per study question: pure functions, trace session in, DataFrame out.

Every analysis reads the session's typed tables (``session.tables``, the same on both engines) and runs no SQL.
Units are in column names (``start_ns`` timestamps are integer ns on the trace clock; durations are float
``*_us``). Text columns are object columns: in the frames with one row per event (``gpu_ops``,
``kernel_durations_by_step``, ``launch_latency``, ``dispatch_chains``, ``gemm_throughput``, ``sync_wait``) a kernel
name is one ``str`` shared by its rows, not copied into each (a 93 MB trace has 77k kernel rows of ~250-character
names).
GPU ops are put into categories (GEMM, attention, elementwise, copies, communication, ...) by the stated name rules of
``profiling_core.analyses.categories``; ``step_breakdown`` splits each step's window over them and idle time,
``top_kernels`` ranks the GPU ops with the CPU ops that launched them; every GPU figure of a step is the time at
least one GPU was busy (the union over devices and streams), and ``device_busy`` gives each GPU's own busy time per
step where one process drove several; ``phases`` splits each step of a training loop
into data (the DataLoader's batches), forward, backward, optimizer and zero_grad (the rule is stated in
``profiling_core.analyses.phases``);
``memory`` says where the memory goes from the ``[memory]`` events (peaks, what was live at them, per op, per step,
what was never freed; its rules are stated in ``profiling_core.analyses.memory``).
Nothing here plots or imports streamlit. ``analyze(session)`` runs them all once and returns a :class:`Report`;
``profiling_core.explain.findings`` turns a report into short statements with evidence.
"""
from __future__ import annotations

from ._common import recorded_with
from .breakdown import category_totals, step_breakdown, top_kernels
from .categories import BREAKDOWN_CATEGORIES, GPU_OP_CATEGORIES, gpu_op_category
from .compile import (GRAPH_LAUNCHES, STAGING_OP, compile_breakdown, compile_in_measured_steps, compile_payoff,
                      compiler_launches, compiler_only_kernels, fused_ops, outside_compiler, ran_compiled,
                      staging_pairs, triton_fusions)
from .gemm import (GEMM_OPS, gemm_dims, gemm_flops_from_dims, gemm_kernel_shapes, gemm_leading_dims,
                   gemm_shape_text, gemm_throughput, is_shapes)
from .kernels import gpu_ops, kernel_configs, kernel_durations_by_step, kernel_stats
from .launches import chain_subtree, dispatch_chain, dispatch_chains, launch_latency, launch_ops, launch_paths
from .memory import (BEFORE_WINDOW, NO_MEMORY_TEXT, NOTHING_RECORDED_TEXT, PEAK_MATCH_TOLERANCE, RELATIVE_BASES,
                     MemoryReport, live_at_peak, memory_by_op, memory_churn, memory_peaks, memory_report,
                     memory_timeline, unfreed)
from .phases import PHASES, SUM_TOLERANCE_US, after_phase, is_data_loader_next, phase_ops, phases, phases_at
from ._shared import Shared
from .ranks import ranks, step_processes, unparted, write_rank
from .report import Report, analyze
from .steps import (CPU_GEMM_FLOOR_GFLOPS, CPU_GEMM_FLOOR_MIN_US, CPU_MATH_BOUND_AT, DATA_WAIT_AT, GPU_BOUND_AT,
                    GPU_PACED, GROWS_AT, QUEUE_GREW, RISES_AT, STARVED_AT, SYNC_WAIT_AT,
                    annotation_ranges, basis_steps, bound, compile_steps, counted_wait, cpu_vs_gpu, data_wait,
                    device_busy, first_steps, gpu_busy, gpu_paced_up_to, measured_steps, queue_growth, steady_state,
                    steps, working_steps)
from .table import NO_WORK_TEXT, cpu_own_times, profiler_table
from .timing import cold_start_gap, sync_wait

__all__ = [
    "analyze", "Report", "Shared",
    "steps", "device_busy", "cpu_vs_gpu", "gpu_busy", "bound", "steady_state", "basis_steps", "first_steps",
    "working_steps",
    "measured_steps", "compile_steps",
    "annotation_ranges", "ranks", "step_processes", "unparted", "write_rank",
    "data_wait", "DATA_WAIT_AT", "GPU_BOUND_AT", "GPU_PACED",
    "STARVED_AT", "SYNC_WAIT_AT", "counted_wait", "gpu_paced_up_to", "queue_growth", "QUEUE_GREW", "GROWS_AT",
    "RISES_AT",
    "CPU_MATH_BOUND_AT", "CPU_GEMM_FLOOR_GFLOPS", "CPU_GEMM_FLOOR_MIN_US", "gpu_ops", "kernel_stats", "kernel_configs",
    "kernel_durations_by_step",
    "launch_latency", "launch_paths", "launch_ops", "dispatch_chain", "dispatch_chains", "chain_subtree",
    "cold_start_gap", "sync_wait", "GRAPH_LAUNCHES", "STAGING_OP", "compile_breakdown", "compile_in_measured_steps",
    "compile_payoff", "compiler_launches", "staging_pairs", "compiler_only_kernels", "outside_compiler",
    "triton_fusions", "fused_ops", "ran_compiled",
    "GEMM_OPS", "gemm_throughput", "gemm_kernel_shapes", "gemm_flops_from_dims", "gemm_dims", "gemm_leading_dims",
    "gemm_shape_text", "is_shapes",
    "profiler_table", "NO_WORK_TEXT",
    "cpu_own_times",
    "phases", "phase_ops", "phases_at", "after_phase", "PHASES", "SUM_TOLERANCE_US", "is_data_loader_next",
    "step_breakdown", "category_totals", "top_kernels", "gpu_op_category", "GPU_OP_CATEGORIES", "BREAKDOWN_CATEGORIES",
    "memory_timeline", "memory_peaks", "live_at_peak", "memory_by_op", "unfreed", "memory_churn", "memory_report",
    "MemoryReport", "NO_MEMORY_TEXT", "NOTHING_RECORDED_TEXT", "recorded_with", "BEFORE_WINDOW", "PEAK_MATCH_TOLERANCE",
    "RELATIVE_BASES",
]
