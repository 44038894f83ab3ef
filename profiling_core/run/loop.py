"""A workload, profiled exactly as the study does.  Runs only inside a worker process.

The config's workload (``profiling_core.workloads``) builds ``(step, inputs)`` on the device — for the study's
``matmul_add``, ``step(x, w, b) = torch.add(torch.matmul(x, w), b)`` — and each call is ``step(*inputs)`` inside
``record_function(<workload name>)``; optional ``torch.compile`` of the step function (so the compiled region
sits inside ``matmul_add`` as in the study's traces; a step may compile its own part instead, :func:`compile_step`);
``warmup`` calls before profiling; then
``torch.profiler.profile`` with CPU (and CUDA) activities and
``schedule(wait, warmup, active, repeat)``, ``prof.step()`` per iteration.  Each finished cycle is exported
through ``on_trace_ready``; with ``repeat > 1`` the cycles' traces are merged into one file so the trace holds
``active x repeat`` ProfilerStep slices.  With ``profile_memory``, ``record_shapes`` and ``with_stack`` on, each cycle's
memory is also put into torch's categories (parameters, optimizer state, activations, ...) right there, while the
cycle's results are still in the process, and written as ``memory_categories.json``
(``profiling_core.store.memory``); a failure of that step leaves the run without the file and says why
in its facts, the run itself lands.

This is the only module (with ``worker``) that imports torch.
"""
from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path
from typing import Callable

from ..config import ExperimentConfig
from ..store import memory as memcat
from ..workloads import get_workload
from .host import cpu_model, nvml_driver_version

TRACE_FILE = "trace.json"
TABLE_FILE = "table.txt"
FREED_FRAME_NAME = (
    "torch's profiler read an event name from freed memory while exporting the cycle: with with_stack, its Python "
    "tracer keeps the names of Python functions as pointers into their code objects, and code objects made and "
    "dropped during the profiled steps (a cold first step's lazy imports) are gone by the export (a torch bug, fixed "
    "after 2.13). Run warm-up calls before the profiled steps (warmup of 1 or more), or profile without with_stack.")
"""Why a run with with_stack fails with a UnicodeDecodeError as its trace is exported (torch issue 130622)."""


class Phase:
    """Wall-clock timer of named phases, in seconds; ``on_start(name)`` is told as each phase begins (the worker
    writes it where its parent reads the run's progress)."""

    def __init__(self, on_start: Callable[[str], None] | None = None) -> None:
        self.timings: dict[str, float] = {}
        self.overhead: dict[str, float] = {}
        """Seconds of a run that are not its workload's own work, by stage (meta.json's ``overhead_s``)."""
        self._on_start = on_start

    def add(self, stage: str, seconds: float) -> None:
        """Add ``seconds`` to the overhead stage ``stage``."""
        self.overhead[stage] = round(self.overhead.get(stage, 0.0) + seconds, 6)

    def run(self, name: str, func: Callable):
        if self._on_start is not None:
            self._on_start(name)
        t0 = time.perf_counter()
        try:
            return func()
        finally:
            self.timings[name] = round(time.perf_counter() - t0, 6)


def _mem_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def peak_rss_bytes() -> int:
    """This process's peak resident memory: Linux's VmHWM (which a persistent worker resets before each run,
    :func:`reset_peak_rss`), else getrusage's ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> bool:
    """Start this process's peak resident memory again from its current size (Linux: ``/proc/self/clear_refs``);
    False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


_CUDA_DEFAULT_SEED = 67280421310721  # c10's default_rng_seed_val: a CUDA generator's seed in a new process


def _flags(torch) -> dict:
    """The process-wide settings a run may change, as (getter value) by name."""
    b = torch.backends
    out = {"num_threads": torch.get_num_threads(),
           "float32_matmul_precision": torch.get_float32_matmul_precision(),
           "cuda.matmul.allow_tf32": b.cuda.matmul.allow_tf32,
           "cuda.matmul.allow_fp16_reduced_precision_reduction": b.cuda.matmul.allow_fp16_reduced_precision_reduction,
           "cuda.matmul.allow_bf16_reduced_precision_reduction": b.cuda.matmul.allow_bf16_reduced_precision_reduction,
           "cudnn.enabled": b.cudnn.enabled, "cudnn.benchmark": b.cudnn.benchmark,
           "cudnn.deterministic": b.cudnn.deterministic, "cudnn.allow_tf32": b.cudnn.allow_tf32,
           "mkldnn.enabled": b.mkldnn.enabled,
           "sdp.flash": b.cuda.flash_sdp_enabled(), "sdp.mem_efficient": b.cuda.mem_efficient_sdp_enabled(),
           "sdp.math": b.cuda.math_sdp_enabled(), "sdp.cudnn": b.cuda.cudnn_sdp_enabled(),
           "deterministic_algorithms": (torch.are_deterministic_algorithms_enabled(),
                                        torch.is_deterministic_algorithms_warn_only_enabled()),
           "default_dtype": str(torch.get_default_dtype()), "grad_enabled": torch.is_grad_enabled(),
           "anomaly": (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
           "autocast": torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")}
    return out


class ProcessSettings:
    """What one run may leave behind in a process that runs several (a persistent worker), captured when that
    process starts and set back before each run: torch's intra-op threads, the float32 matmul precision, the
    cuBLAS, cuDNN, oneDNN and SDPA flags, deterministic mode, the default dtype, grad and anomaly mode, the RNG
    seeds (the CPU's as the process started, CUDA's as a new process has it), Dynamo's caches, the environment
    and the working folder.  :meth:`restore` then checks every flag reads as captured and names those that do not
    (the run is refused)."""

    def __init__(self, torch) -> None:
        import random
        self.flags = _flags(torch)
        self.cpu_seed = torch.initial_seed()
        self.py_random = random.getstate()
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()

    def restore(self, torch) -> list[str]:
        """Set everything back; the names of the flags that still differ (empty: all set back)."""
        import random
        f, b = self.flags, torch.backends
        torch.set_num_threads(f["num_threads"])
        torch.set_float32_matmul_precision(f["float32_matmul_precision"])
        b.cuda.matmul.allow_tf32 = f["cuda.matmul.allow_tf32"]
        b.cuda.matmul.allow_fp16_reduced_precision_reduction = f["cuda.matmul.allow_fp16_reduced_precision_reduction"]
        b.cuda.matmul.allow_bf16_reduced_precision_reduction = f["cuda.matmul.allow_bf16_reduced_precision_reduction"]
        b.cudnn.enabled, b.cudnn.benchmark = f["cudnn.enabled"], f["cudnn.benchmark"]
        b.cudnn.deterministic, b.cudnn.allow_tf32 = f["cudnn.deterministic"], f["cudnn.allow_tf32"]
        b.mkldnn.enabled = f["mkldnn.enabled"]
        b.cuda.enable_flash_sdp(f["sdp.flash"])
        b.cuda.enable_mem_efficient_sdp(f["sdp.mem_efficient"])
        b.cuda.enable_math_sdp(f["sdp.math"])
        b.cuda.enable_cudnn_sdp(f["sdp.cudnn"])
        torch.use_deterministic_algorithms(f["deterministic_algorithms"][0], warn_only=f["deterministic_algorithms"][1])
        torch.set_default_dtype(getattr(torch, f["default_dtype"].removeprefix("torch.")))
        torch.set_grad_enabled(f["grad_enabled"])
        torch.autograd.set_detect_anomaly(*f["anomaly"])
        torch.default_generator.manual_seed(self.cpu_seed)
        if torch.cuda.is_initialized():
            for gen in torch.cuda.default_generators:
                gen.manual_seed(_CUDA_DEFAULT_SEED)
        random.setstate(self.py_random)
        if "torch._dynamo" in __import__("sys").modules:
            torch._dynamo.reset()
        os.environ.clear()
        os.environ.update(self.environ)
        os.chdir(self.cwd)
        now = _flags(torch)
        return [k for k, v in self.flags.items() if now[k] != v]


def release_run(torch) -> None:
    """After a run in a persistent worker: its tensors freed, the device memory the allocator cached for them
    given back (so an idle worker holds only its CUDA context), and the peak counters started again."""
    import gc
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    reset_peak_rss()


def resolve_device(torch, wanted: str) -> str:
    if wanted == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if wanted == "cuda":
        from ..errors import WorkerError
        raise WorkerError("device", "device 'cuda' was asked for but torch.cuda.is_available() is False "
                          f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}); use device 'cpu' or 'auto'")
    return "cpu"


def device_info(torch, device: str) -> dict:
    """The device facts a run's meta.json keeps (``meta["device"]``); on a GPU, ``driver`` is the NVIDIA driver's
    version as NVML gives it (``host.nvml_driver_version``, e.g. ``580.159.04``; None without NVML)."""
    info = {"type": device, "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
            "cpu_threads": torch.get_num_threads()}
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, total_memory_bytes=p.total_memory, multi_processor_count=p.multi_processor_count,
                    compute_capability=f"{p.major}.{p.minor}", cudnn=torch.backends.cudnn.version(),
                    driver=nvml_driver_version(), **gpu_identity(getattr(p, "uuid", None)))
    else:  # the name calibrations are kept under (one device identity for runs and calibrations)
        info.update(name=cpu_model(), total_memory_bytes=None)
    return info


def gpu_identity(uuid) -> dict:
    """Which physical GPU the run's ``cuda`` was: ``index`` as NVML (and ``nvidia-smi``) numbers it and ``uuid``,
    found by the UUID CUDA gives (``index_from: "nvml"``); without NVML, the number ``CUDA_VISIBLE_DEVICES``
    gives it (CUDA's own numbering, ``index_from: "CUDA_VISIBLE_DEVICES"``) and the UUID as CUDA writes it."""
    from .host import nvml_gpus
    from .lock import visible_gpu
    text = str(uuid) if uuid is not None else None
    if text:
        bare = text.lower().removeprefix("gpu-").removeprefix("mig-")
        for g in nvml_gpus() or ():
            if str(g["uuid"]).lower().removeprefix("gpu-").removeprefix("mig-") == bare:
                return {"index": g["index"], "uuid": g["uuid"], "index_from": "nvml"}
    entry = visible_gpu()
    return {"index": int(entry) if entry is not None and entry.isdecimal() else None, "uuid": text,
            "index_from": "CUDA_VISIBLE_DEVICES"}


def compile_step(torch, step, mode: str):
    """``torch.compile(step, mode=mode)``; or, for a step that has a ``compile_with`` attribute (a workload that
    compiles its own part, as causal_lm compiles ``model.forward``), what ``step.compile_with(compile)`` returns,
    where ``compile(f)`` is ``torch.compile(f, mode=mode)``."""
    own = getattr(step, "compile_with", None)
    if own is not None:
        return own(lambda f: torch.compile(f, mode=mode))
    return torch.compile(step, mode=mode)


def run_workload(config: ExperimentConfig, out_dir: Path, timer: Phase) -> dict:
    """Run one experiment and write trace.json and table.txt into ``out_dir``.  Returns facts for meta.json."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    if config.threads is not None:
        torch.set_num_threads(config.threads)
    torch.set_float32_matmul_precision(config.matmul_precision)
    device = resolve_device(torch, config.device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[config.dtype]

    # PROFILING_CORE_SKIP_FIT_CHECK=1 lets a real out-of-memory happen (used to test that path on a GPU).
    check = os.environ.get("PROFILING_CORE_SKIP_FIT_CHECK") != "1"

    def init_device():
        if device == "cuda":
            torch.cuda.init()
            free, _total = torch.cuda.mem_get_info()
            if check:
                config.check_fits(free, "the GPU (free memory)")
        elif check:
            config.check_fits(_mem_available_bytes(), "this machine (MemAvailable)")

    timer.run("device_init_s", init_device)
    timer.add("device_init_s", timer.timings["device_init_s"])

    wl = get_workload(config.workload)

    def make_inputs():
        step, inputs = wl.build(torch, config.workload_knobs, device, dtype)
        if device == "cuda":
            torch.cuda.synchronize()
        return step, inputs

    inner, inputs = timer.run("tensors_s", make_inputs)

    if config.compile != "off":
        # Importing torch._dynamo is paid here (about 1 s); the compile itself happens at the first call.
        inner = timer.run("compile_setup_s", lambda: compile_step(torch, inner, config.compile))

    def fn(*args):
        with record_function(wl.name):
            return inner(*args)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def warm():
        for _ in range(config.warmup):
            fn(*inputs)
        sync()

    timer.run("warmup_s", warm)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sort_by = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    cycles: list[tuple[Path, str]] = []

    export_s = [0.0]
    memory = {"cycles": [], "why": memcat.memory_categories_needs(config), "s": 0.0}
    profiler_s = [0.0]  # in the profiler's own calls (start, step, stop), on_trace_ready's time left out

    def on_trace_ready(prof):
        t0 = time.perf_counter()
        k = len(cycles)
        path = out_dir / f"cycle{k}.json"
        try:
            prof.export_chrome_trace(str(path))  # Kineto writes the file once, in C++
            t_table = time.perf_counter()
            timer.add("trace_export_s", t_table - t0)
            # the table from the events the profiler parsed once (key_averages caches them for a second call)
            try:
                table = prof.key_averages().table(sort_by=sort_by, row_limit=config.row_limit)
            except (KeyError, AttributeError, ValueError):
                table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=config.row_limit)
        except UnicodeDecodeError as exc:
            if not config.with_stack:
                raise
            from ..errors import WorkerError
            raise WorkerError("export", FREED_FRAME_NAME + f" torch {torch.__version__} said: {exc}") from exc
        cycles.append((path, table))
        t1 = time.perf_counter()
        timer.add("table_s", t1 - t_table)
        export_s[0] += t1 - t0
        if memory["why"] is None:
            try:
                memory["cycles"].append(memcat.coalesce(memory_events(prof), trace_base_ns(path)))
            except Exception as exc:  # noqa: BLE001 - the categories are extra: the run lands without them
                memory["why"] = (f"torch's memory profiler failed on cycle {k + 1} (torch {torch.__version__}): "
                                 f"{type(exc).__name__}: {str(exc)[:500]}")
            memory["s"] += time.perf_counter() - t1

    def profile_loop():
        t = time.perf_counter()
        with profile(activities=activities,
                     schedule=schedule(wait=config.wait, warmup=config.warmup_steps,
                                       active=config.active, repeat=config.repeat),
                     on_trace_ready=on_trace_ready,
                     record_shapes=config.record_shapes, with_flops=config.with_flops,
                     with_stack=config.with_stack, profile_memory=config.profile_memory) as prof:
            profiler_s[0] += time.perf_counter() - t
            for _ in range(config.iterations):
                fn(*inputs)
                t = time.perf_counter()
                prof.step()
                profiler_s[0] += time.perf_counter() - t
            t = time.perf_counter()
        profiler_s[0] += time.perf_counter() - t
        sync()

    timer.run("profile_s", profile_loop)
    timer.run("export_s", lambda: _merge_cycles(cycles, out_dir, config))
    timer.add("merge_s", timer.timings["export_s"])
    timer.add("profiler_s", profiler_s[0] - export_s[0] - memory["s"])
    # on_trace_ready ran inside the profiling loop: move its time from profiling to export (and to the memory
    # categories, which it computed too).
    timer.timings["profile_s"] = round(timer.timings["profile_s"] - export_s[0] - memory["s"], 6)
    timer.timings["export_s"] = round(timer.timings["export_s"] + export_s[0], 6)
    if config.profile_memory:
        timer.timings["memory_categories_s"] = round(memory["s"], 6)
        timer.add("memory_categories_s", memory["s"])

    facts = {"device": device_info(torch, device),
             "matmul": {"float32_matmul_precision": torch.get_float32_matmul_precision(),
                        "cuda_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32)}}
    if device == "cuda":
        facts["peak_device_memory_bytes"] = torch.cuda.max_memory_allocated()
    facts["peak_host_rss_bytes"] = peak_rss_bytes()
    facts["cycles"] = len(cycles)
    facts["memory_categories"] = _write_memory_categories(memory, out_dir, torch.__version__)
    return facts


def memory_events(prof):
    """torch's memory timeline of the cycle ``prof`` just finished, as ``(t, device, category, delta_bytes)`` events
    for :func:`profiling_core.store.memory.coalesce` (``t``: ns since the Unix epoch, -1 for memory alive
    before the cycle; category None: one torch could not tell). The actions become signed sizes as torch's own
    ``export_memory_timeline_raw`` turns them: a new version of a tensor moves its bytes from the old version's
    category to the new one's."""
    from torch.profiler._memory_profiler import Action, MemoryProfileTimeline, TensorKey
    tl = MemoryProfileTimeline(prof._memory_profile())  # raises ValueError without the knobs it needs

    def category(key, version):
        c = tl.categories.get(key, version) if isinstance(key, TensorKey) else None
        return None if c is None else c.name

    for t, action, (key, version), n in tl.timeline:
        device = str(key.device)
        if action in (Action.PREEXISTING, Action.CREATE):
            yield t, device, category(key, version), n
        elif action == Action.INCREMENT_VERSION:
            yield t, device, category(key, version), -n
            yield t, device, category(key, version + 1), n
        elif action == Action.DESTROY:
            yield t, device, category(key, version), -n
        else:
            raise ValueError(f"unknown action {action!r} in torch's memory timeline")


def trace_base_ns(path: Path) -> int:
    """The ``baseTimeNanoseconds`` Kineto wrote at the top of the trace at ``path``: its ``ts`` are µs after it."""
    import re
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    m = re.search(rb'"baseTimeNanoseconds"\s*:\s*([0-9]+)', head)
    if m is None:
        raise ValueError("the trace has no baseTimeNanoseconds in its first MiB, so torch's clock cannot be put on "
                         "the trace's")
    return int(m.group(1))


def _write_memory_categories(memory: dict, out_dir: Path, torch_version: str) -> dict:
    """Write memory_categories.json from the cycles' rows; the facts meta.json keeps about it (``file`` and the
    devices, or ``why`` there is none)."""
    if memory["why"] is None and not any(memory["cycles"]):
        memory["why"] = "torch's memory profiler saw no allocation in the profiled steps"
    if memory["why"] is not None:
        return {"file": None, "why": memory["why"]}
    doc = memcat.document(memory["cycles"], f"torch.profiler memory profiler (torch {torch_version})")
    try:
        with open(out_dir / memcat.MEMORY_CATEGORIES_FILE, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
    except OSError as exc:
        (out_dir / memcat.MEMORY_CATEGORIES_FILE).unlink(missing_ok=True)
        return {"file": None, "why": f"could not write {memcat.MEMORY_CATEGORIES_FILE}: {exc.strerror or exc}"}
    return {"file": memcat.MEMORY_CATEGORIES_FILE, "devices": sorted(doc["devices"]), "seconds": round(memory["s"], 6)}


def _merge_cycles(cycles: list[tuple[Path, str]], out_dir: Path, config: ExperimentConfig) -> None:
    if not cycles:
        from ..errors import WorkerError
        raise WorkerError("export", "the profiler produced no trace (no schedule cycle completed)")
    trace_path = out_dir / TRACE_FILE
    if len(cycles) == 1:
        os.replace(cycles[0][0], trace_path)
        tables = cycles[0][1]
    else:
        merged = json.loads(cycles[0][0].read_text())
        seen_meta = {json.dumps(e, sort_keys=True) for e in merged["traceEvents"] if e.get("ph") == "M"}
        for path, _ in cycles[1:]:
            for e in json.loads(path.read_text())["traceEvents"]:
                if e.get("ph") == "M":
                    key = json.dumps(e, sort_keys=True)
                    if key in seen_meta:
                        continue
                    seen_meta.add(key)
                merged["traceEvents"].append(e)
        trace_path.write_text(json.dumps(merged))
        for path, _ in cycles:
            path.unlink()
        tables = "\n".join(f"== profiler cycle {k + 1} of {len(cycles)} ==\n{t}" for k, (_, t) in enumerate(cycles))
    (out_dir / TABLE_FILE).write_text(tables + ("" if tables.endswith("\n") else "\n"))
