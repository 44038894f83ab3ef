"""The experiment form every page that profiles shares: the workload and its knobs, dtype, device, warm-up calls,
torch.compile and the profiler's schedule, in one ``st.form`` that returns a validated ``ExperimentConfig``; and
the control of where a sweep's runs happen (:func:`executor_control`), which every sweep page draws in its form.
"""
from __future__ import annotations

from typing import Optional

import streamlit as st

import profiling_core.config as _config
from profiling_core import ExperimentConfig
from profiling_core.errors import ConfigError
from profiling_core.present import md_text
from profiling_core.run import EXECUTORS, PLACEMENTS, ray_missing
from profiling_core.workloads import get_workload, workload_names

from .cache import environment

SIZES = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
WARMUP_CALLS_LABEL = "Warm-up calls before profiling (0 = cold)"
WARMUP_CALLS_HELP = ("calls of the workload before the profiler starts: a cold run (0) profiles the first calls, "
                     "with their one-time costs; not the schedule's warm-up steps, which the profiler traces and "
                     "throws away")
SCHEDULE_WARMUP_LABEL = "schedule warm-up steps"
SCHEDULE_WARMUP_HELP = ("steps the profiler traces but discards before the active ones (torch.profiler's schedule); "
                        "not the warm-up calls before profiling")

# the config's own choices (profiling_core.config), as lists for the widgets
DTYPES, COMPILE_MODES, DEVICES, BIASES, MATMUL_PRECISIONS = (list(c) for c in (
    _config.DTYPES, _config.COMPILE_MODES, _config.DEVICES, _config.BIASES, _config.MATMUL_PRECISIONS))

SCRIPT_CONTRACT = ("Your file defines `make_step(device, dtype)` (or the function you name) returning "
                   "`(step_fn, inputs)`: build the model and inputs on `device` (\"cpu\" or \"cuda\") in `dtype` "
                   "(a torch dtype); each profiler step calls `step_fn(*inputs)`. It runs in the worker process, "
                   "with your rights, as `python file.py` would.")


def dtype_select(container, key: str) -> str:
    """The dtype control every form shares: bf16 on a GPU, fp32 on a CPU by default, with the reason."""
    cuda = bool(environment().get("cuda_available"))
    return container.selectbox(
        "dtype", DTYPES, index=DTYPES.index("bf16" if cuda else "fp32"), key=key,
        help="default bf16 on a GPU (its tensor cores' fast path, as the study) and fp32 on a CPU (CPUs have no fast "
             "bf16 GEMM: a bf16 run there measures a slow conversion path)")


def knob_widget(col, key: str, knob, value):
    """One workload knob as the widget its kind asks for (``profiling_core.workloads.Knob``)."""
    label = knob.name + (f" ({knob.when[0]} {knob.when[1]} only)" if knob.when else "")
    if knob.kind == "bool":
        return col.checkbox(label, value=bool(value), key=key, help=knob.help)
    if knob.kind == "choice":
        return col.selectbox(label, list(knob.choices), index=list(knob.choices).index(value), key=key,
                             help=knob.help)
    if knob.kind == "int":
        got = col.number_input(label, min_value=knob.range[0], max_value=knob.range[1],
                               value=None if value is None else int(value), step=1, key=key, help=knob.help,
                               placeholder="empty" if knob.optional else None)
        return None if got is None else int(got)  # an optional knob left empty is None
    if knob.kind == "float":
        return float(col.number_input(label, min_value=float(knob.range[0]), max_value=float(knob.range[1]),
                                      value=float(value), step=0.25, key=key, help=knob.help))
    return col.text_input(label, value=str(value), key=key, help=knob.help)


PROCESS_LABEL = "Keep one worker process for warm eager runs"
PROCESS_HELP = ("off: every run gets a new process (forked from a prestarted one). On: warm eager runs share one "
                "process kept for this device, CUDA context included, so a click pays no process start, CUDA "
                "initialisation or profiler start-up; the settings a run may change (threads, matmul precision, "
                "cuDNN flags, seeds ...) are set back before each. Cold runs, compiled runs and scripts always get "
                "a new process; meta.json says which process ran each run")


def chosen_process(key: str) -> str:
    """The worker process the form ``key`` asked for (its ``process_control``): ``persistent`` or ``fresh``."""
    return "persistent" if st.session_state.get(f"{key}_process") else "fresh"


def config_form(key: str, *, defaults: Optional[dict] = None, submit_label: str = "Run profile",
                show_size: bool = True, show_compile: bool = True,
                workloads: bool = True, process_control: bool = False) -> Optional[ExperimentConfig]:
    """The experiment knobs in one st.form; returns a validated config on submit (errors shown inline).

    workloads: a workload selector above the form (it reruns the page, so the form shows that workload's knobs,
    drawn from the registry's ``Knob``s); matmul_add's form is the study's (size, batch, bias). False: matmul_add
    only.  process_control: a toggle for the worker process (:func:`chosen_process` reads it)."""
    d = {**ExperimentConfig().to_dict(), "size": 64, "active": 3, **(defaults or {})}
    names = workload_names()
    wl_name = d.get("workload", "matmul_add")
    if workloads:
        wl_name = st.selectbox("Workload", names, index=names.index(wl_name), key=f"{key}_workload",
                               help="what each profiled step runs; the study's is matmul_add")
    wl = get_workload(wl_name)
    if workloads:
        st.caption(md_text(wl.description[:1].upper() + wl.description[1:] + "."))
    if wl_name == "script":
        st.caption(SCRIPT_CONTRACT)
    with st.form(key):
        c1, c2, c3 = st.columns(3)
        size, batch, bias, knob_values = d["size"], d["batch"] or 0, d["bias"], {}
        if wl_name == "matmul_add":
            if show_size:
                preset = c1.select_slider("Matrix size n (n×n)", options=SIZES,
                                          value=d["size"] if d["size"] in SIZES else 64, key=f"{key}_size")
                free = c1.number_input("… or any size (0 = use the slider)", min_value=0, max_value=65536,
                                       value=0 if d["size"] in SIZES else d["size"], step=1, key=f"{key}_free")
                size = int(free) if free else int(preset)
        else:
            given = {**wl.defaults(), **(d.get("knobs") or {})}
            cols = (c1, c2, c3)
            for i, knob in enumerate(wl.knobs):
                knob_values[knob.name] = knob_widget(cols[i % 3], f"{key}_{wl_name}_{knob.name}", knob,
                                                      given[knob.name])
        dtype = dtype_select(c2, f"{key}_dtype")
        device = c3.selectbox("Device", DEVICES, index=DEVICES.index(d["device"]), key=f"{key}_device",
                              help="auto: CUDA when available, else CPU")
        if wl_name == "matmul_add":
            batch = c2.number_input("Batch (0 = none; 8 turns aten::mm into aten::bmm)", min_value=0,
                                    max_value=4096, value=int(d["batch"] or 0), key=f"{key}_batch")
            bias = c1.selectbox("Bias shape", BIASES, index=BIASES.index(d["bias"]), key=f"{key}_bias",
                                help="matrix: b is shaped like x, as in the study; vector: b is (n,). Under "
                                     "torch.compile a matrix bias is copied into the output (a Memcpy DtoD) before "
                                     "the GEMM; a vector bias rides in the GEMM's epilogue")
        warmup = c3.number_input(WARMUP_CALLS_LABEL, min_value=0, max_value=10000, value=int(d["warmup"]),
                                 key=f"{key}_warmup", help=WARMUP_CALLS_HELP)
        threads = c2.number_input("CPU threads (0 = torch's default, the machine's cores)", min_value=0,
                                  max_value=1024, value=int(d.get("threads") or 0), key=f"{key}_threads",
                                  help="torch.set_num_threads for the run: on a CPU the step time depends on it "
                                       "as much as on the size; recorded in meta.json")
        precision = c3.selectbox("fp32 matmul precision", MATMUL_PRECISIONS,
                                 index=MATMUL_PRECISIONS.index(d["matmul_precision"]), key=f"{key}_precision",
                                 help="torch.set_float32_matmul_precision: highest = full fp32 (torch's default); "
                                      "high = fp32 GEMMs may use TF32 tensor cores (much faster on a GPU that has "
                                      "them, ~10 mantissa bits); changes only fp32 runs")
        compile_mode = d["compile"]
        if show_compile:
            compile_mode = c1.selectbox("torch.compile", COMPILE_MODES, index=COMPILE_MODES.index(d["compile"]),
                                        key=f"{key}_compile", help="off = eager")
        st.caption("Profiler schedule: wait → warm-up → active steps, repeated")
        s1, s2, s3, s4 = st.columns(4)
        wait = s1.slider("wait", 0, 10, int(d["wait"]), key=f"{key}_wait")
        warm_steps = s2.slider(SCHEDULE_WARMUP_LABEL, 0, 10, int(d["warmup_steps"]), key=f"{key}_wsteps",
                               help=SCHEDULE_WARMUP_HELP)
        active = s3.slider("active", 1, 50, int(d["active"]), key=f"{key}_active")
        repeat = s4.slider("repeat", 1, 5, int(d["repeat"]), key=f"{key}_repeat")
        st.caption("Profiler options (each adds CPU time to every op it records)")
        o1, o2, o3 = st.columns(3)
        shapes = o1.checkbox("record_shapes", value=bool(d["record_shapes"]), key=f"{key}_record_shapes",
                             help="the input shapes of every op (the GEMMs' FLOPs come from them)")
        memory = o2.checkbox("profile_memory", value=bool(d["profile_memory"]), key=f"{key}_profile_memory",
                             help="every allocation and free as a [memory] event: the Profile page draws memory "
                                  "over time and its peak; with with_stack and record_shapes too, torch's memory "
                                  "profiler sorts it into parameters, optimizer state, activations, gradients …")
        stack = o3.checkbox("with_stack", value=bool(d["with_stack"]), key=f"{key}_with_stack",
                            help="the Python call stack of every op (torch's memory categories need it)")
        if process_control:
            st.toggle(PROCESS_LABEL, value=False, key=f"{key}_process", help=PROCESS_HELP)
        submitted = st.form_submit_button(submit_label, type="primary", icon=":material/play_arrow:")
    if not submitted:
        return None
    common = dict(dtype=dtype, matmul_precision=precision, warmup=int(warmup), compile=compile_mode, wait=wait,
                  warmup_steps=warm_steps, active=active, repeat=repeat, device=device, threads=int(threads) or None,
                  record_shapes=bool(shapes), profile_memory=bool(memory), with_stack=bool(stack))
    try:
        if wl_name == "matmul_add":
            return ExperimentConfig(size=size, batch=int(batch) or None, bias=bias, **common)
        # the form shows every knob; those that do not apply (a decode block's seq_len) are left out
        return ExperimentConfig.for_workload(wl_name, wl.applicable(knob_values), **common)
    except ConfigError as exc:
        st.error(md_text(str(exc)), icon=":material/error:")  # it quotes what was typed (a script's path)
        return None


EXECUTOR_WORDS = {"local": "this machine, one run after the other", "ray": "a Ray cluster, one task per run"}
PLACEMENT_WORDS = {"spread": "spread over the nodes", "per_device_type": "every config on each device type"}
EXECUTOR_HELP = ("local: the runs one after the other here, each in a fresh worker behind this machine's device "
                 "lock. ray: each run a Ray task on a cluster's node (a worker there, behind that node's lock of "
                 "the GPU Ray gives it), its trace sent back and saved in this app's run store; runs on different "
                 "GPUs or nodes go on at once")
RAY_ADDRESS_LABEL = "Ray address (empty: a local Ray instance started for the sweep)"
RAY_ADDRESS_HELP = ("HOST:PORT of a cluster's head node (its GCS port, 6379 by default, e.g. 10.0.0.5:6379), "
                    "ray://HOST:PORT for Ray Client, or auto for the cluster `ray start` made on this machine")


def executor_control(key: str) -> dict:
    """Where the sweep's runs happen, drawn in the page's form (keys ``<key>_executor``, ``_ray_address``,
    ``_placement``, ``_retries``): returns ``run_sweep``'s ``executor``, ``ray_address``, ``placement`` and
    ``max_retries`` for :func:`~pages._ui.jobs.start_sweep`, which checks them before anything starts. Without Ray
    installed the Ray choices are disabled, with what to install; the executor is then ``local``."""
    missing = ray_missing()
    with st.expander("Where the runs happen: this machine or a Ray cluster"):
        if missing:
            st.caption(md_text(missing) + ", to run the sweep on a Ray cluster.")
        executor = st.selectbox("Executor", EXECUTORS, key=f"{key}_executor", format_func=EXECUTOR_WORDS.get,
                                disabled=bool(missing), help=EXECUTOR_HELP)
        c1, c2, c3 = st.columns([2, 1, 1])
        address = c1.text_input(RAY_ADDRESS_LABEL, key=f"{key}_ray_address", max_chars=300,
                                disabled=bool(missing), placeholder="e.g. 10.0.0.5:6379", help=RAY_ADDRESS_HELP)
        placement = c2.selectbox("Placement", PLACEMENTS, key=f"{key}_placement", format_func=PLACEMENT_WORDS.get,
                                 disabled=bool(missing),
                                 help="every config once on each device type needs nodes that declare a "
                                      "device_type:<name> resource (docs/RAY.md)")
        retries = c3.number_input("Retries of a run whose task died", 0, 10, 1, key=f"{key}_retries",
                                  disabled=bool(missing),
                                  help="a task whose process died (a worker killed, a node lost) runs again this "
                                       "many times; a run that failed on its node is not retried")
    if missing or executor != "ray":
        return {"executor": "local"}
    return {"executor": "ray", "ray_address": (address or "").strip() or "local", "placement": placement,
            "max_retries": int(retries)}
