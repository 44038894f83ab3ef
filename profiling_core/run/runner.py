"""Run one experiment: device lock → fresh worker → atomic run folder.  The notebook/CLI entry point.

    >>> from profiling_core import ExperimentConfig, run_experiment
    >>> run = run_experiment(ExperimentConfig(size=64, dtype="fp32", device="cpu", warmup=3))
    >>> run.trace_path, run.meta["timings"]
"""
from __future__ import annotations

import functools
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Callable, Optional

from ..config import ExperimentConfig
from ..errors import RunStoreError
from ..store.runs import Run, RunStore
from .host import cpu_model
from .lock import device_key, device_lock
from .worker import (COMPILE_CACHE_FILE, SHARED_CACHE_DIR, check_compile_cache, check_process, fork_server,
                     persistent_refusal, run_in_worker, shared_cache_refusal)


def _trace_versions(trace_path) -> dict:
    """Driver/runtime versions Kineto wrote into the trace's top level (first 4 KB are enough)."""
    out = {}
    try:
        with open(trace_path, "rb") as f:
            head = f.read(8192).decode("utf-8", "replace")
    except OSError:
        return out
    import re
    for key in ("cuda_driver_version", "cuda_runtime_version", "cupti_version", "schemaVersion"):
        m = re.search(rf'"{key}"\s*:\s*"?([0-9.]+)', head)
        if m:
            out[key] = m.group(1)
    return out


def run_experiment(config: ExperimentConfig, *, store: Optional[RunStore] = None,
                   on_status: Optional[Callable[[str], None]] = None, wait_for_device: bool = True,
                   lock_timeout_s: Optional[float] = None, cancel_event: Optional[threading.Event] = None,
                   prestart: int = 0, process: str = "fresh", compile_cache: str = "fresh") -> Run:
    """Profile ``config`` in a worker process and save it as a run.

    Args:
        config: the experiment.
        store: where the run lands (default: ``RunStore()``: ./runs or $PROFILING_RUNS_DIR).
        on_status: called with one-line progress messages (including "waiting for device lock ...").
        wait_for_device: False fails fast with DeviceBusyError when another caller profiles on the device.
        lock_timeout_s: give up waiting for the device after this long (None: wait as long as it takes).
        cancel_event: set it to stop the run: while it waits for the device lock (no worker is started) or
            while its worker runs (the worker is killed); the run then raises WorkerError(kind="cancelled").
        prestart: 0 starts a fresh interpreter; 1 forks the run from the fork server, which imported torch once
            and never touched CUDA (so a cold run stays cold) — what the app and sweeps use.
        process: ``"fresh"`` (default): a new process per run, as ``prestart`` says.  ``"persistent"``: a warm
            eager run goes to this device's persistent worker, one process kept between runs (and its CUDA
            context), with the settings a run may change set back before each; cold runs, compiled runs, scripts
            keep their new process (``worker.persistent_refusal``).  ``meta["process"]`` says which ran it.
        compile_cache: ``"fresh"`` (default): a compiled run compiles from an empty cache of its own.
            ``"shared"``: a warm compiled run uses the store's compile cache, so its warm-up compiles only what no
            earlier run left there; cold runs keep an empty one (``worker.COMPILE_CACHES``).  A compiled run's
            ``meta["compile_cache"]`` says which it had and whether Inductor found its graph there.

    Returns:
        The complete ``Run``.  On any failure raises ``WorkerError`` (or ``RunStoreError`` when the store cannot
        be written); nothing half-written stays in the store.
    """
    t0 = time.perf_counter()
    check_process(process)
    check_compile_cache(compile_cache)
    store = store or RunStore()
    status = on_status or (lambda _m: None)
    key = device_key(config.device)
    run_id, staging = store._begin(config.name)
    cache_refusal = shared_cache_refusal(config) if compile_cache == "shared" else None
    if compile_cache == "shared" and isinstance(config, ExperimentConfig) and config.compile != "off":
        try:
            shared = store.root / SHARED_CACHE_DIR
            shared.mkdir(exist_ok=True)
            how = "use" if cache_refusal is None else "give"  # a cold run: an empty cache, then adds to the shared
            (staging / COMPILE_CACHE_FILE).write_text(f"{how} {shared.resolve()}")
        except OSError as exc:
            store._abort(staging)
            raise RunStoreError(f"cannot make the shared compile cache in {store.root}: {exc.strerror}") from None
    started = datetime.now(timezone.utc)
    t_staged = time.perf_counter()
    load_before = _load_average()
    try:
        with device_lock(key, what=f"{config.name} ({run_id})", wait=wait_for_device,
                         timeout_s=lock_timeout_s, on_wait=status, cancel_event=cancel_event) as lock_fd:
            t_locked = time.perf_counter()
            # The worker holds the device lock and the staging folder's owner lock too, and dies with this
            # process: killed, this process leaves no worker running on an unlocked device, and the next open
            # of the store removes the staging folder once both are gone.
            facts = run_in_worker(config, staging, cancel_event=cancel_event, on_status=status, prestart=prestart,
                                  hold_fds=(lock_fd, store._owner_fd(staging)), process=process)
            t_back, t_back_wall = time.perf_counter(), time.time()
    except BaseException:
        store._abort(staging)
        raise
    wall = t_back - t0
    timings = dict(facts.get("timings", {}))
    timings["lock_wait_s"] = round(t_locked - t_staged, 6)
    timings["wall_s"] = round(wall, 6)
    overhead = dict(facts.get("overhead_s") or {})
    overhead["staging_s"] = round(t_staged - t0, 6)
    overhead["lock_s"] = timings["lock_wait_s"]
    written = facts.get("result_written_at")
    # from the worker's result to this process having it: the worker's exit and its session's end (a fork's
    # reaping by the fork server), or a persistent worker's clean-up and answer
    overhead["end_s"] = round(max(0.0, t_back_wall - written), 6) if isinstance(written, (int, float)) else None
    proc = dict(facts.get("process") or {})
    refusal = persistent_refusal(config) if process == "persistent" else None
    if refusal:
        proc["persistent_refused"] = refusal
    cache = facts.get("compile_cache")
    if cache is not None and cache_refusal is not None and config.compile != "off":
        cache = {**cache, "shared_refused": cache_refusal}
    meta = {
        "name": config.name,
        "status": "ok",
        "source": "experiment",
        "config": config.to_dict(),
        "started_at": started.isoformat(),
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(),
                 "python": platform.python_version()},
        # for a GPU run: which GPU (index as nvidia-smi numbers it, uuid, CUDA_VISIBLE_DEVICES as the run saw it)
        "device": facts.get("device", {}),
        "device_lock": key,  # the lock it held: cpu, or its GPU's (cuda0, cuda1, ...: lock.device_key)
        "matmul": facts.get("matmul"),
        "versions": {"torch": facts.get("device", {}).get("torch"),
                     "cuda_runtime": facts.get("device", {}).get("cuda_runtime"),
                     **_trace_versions(staging / "trace.json")},
        "timings": timings,
        "prestarted": facts.get("prestarted", False),
        # which process ran it: "fresh" (a new interpreter), "forked" (from the fork server) or "persistent",
        # its pid, and how many runs that process had finished before this one
        "process": proc,
        # False means the run started with no CUDA context in its process: a cold run was honestly cold.
        "cuda_initialized_before_run": facts.get("cuda_initialized_before_run"),
        # a compiled run's Inductor cache: "fresh" (empty, its own) or "shared" (the store's, warm runs only), and
        # how often Inductor found its graph there (torch's counters); None for a run that compiled nothing
        "compile_cache": cache,
        "peak_device_memory_bytes": facts.get("peak_device_memory_bytes"),
        "peak_host_rss_bytes": facts.get("peak_host_rss_bytes"),
        "profiler_cycles": facts.get("cycles"),
        # memory_categories.json (torch's memory profiler: parameters, optimizer state, ...), or why there is none
        "memory_categories": facts.get("memory_categories"),
        # How busy the machine was: 1-minute load averages before and after the run, against its cores. A CPU run
        # on a machine whose load exceeds its cores measured the other work too (docs: machine_busy).
        "machine_load": {"cores": os.cpu_count(), "load_1min_before": load_before, "load_1min_after": _load_average()},
    }
    overhead["meta_s"] = round(time.perf_counter() - t_back, 6)
    meta["overhead_s"] = overhead
    status(f"saving run {run_id}")
    t_commit = time.perf_counter()

    def finish(meta: dict) -> dict:
        """Called by the commit once the artifacts are on disk, before meta.json is written: the commit's time
        so far, and the rest of click-to-artifacts that no stage names."""
        overhead["commit_s"] = round(time.perf_counter() - t_commit, 6)
        total = time.perf_counter() - t0
        work = sum(timings.get(k) or 0.0 for k in ("tensors_s", "compile_setup_s", "warmup_s", "profile_s"))
        work -= overhead.get("profiler_s") or 0.0
        named = sum(v for k, v in overhead.items() if isinstance(v, (int, float)) and k != "other_s")
        overhead["other_s"] = round(max(0.0, total - work - named), 6)
        overhead["total_s"] = round(total, 6)
        return meta

    try:
        return store._commit(run_id, staging, meta, before_meta=finish)
    except BaseException:
        store._abort(staging)
        raise


def calibrate(job=None, *, store: Optional[RunStore] = None, on_status: Optional[Callable[[str], None]] = None,
              wait_for_device: bool = True, lock_timeout_s: Optional[float] = None,
              cancel_event: Optional[threading.Event] = None, prestart: int = 0):
    """Measure the device's peaks (``peaks.CalibrationJob``, default: the GPU if there is one, else the CPU) in a
    worker, as an experiment runs: behind the device lock, with the worker's timeout and fault handling. Stores the
    result in ``store``'s calibrations (one per device, driver and torch version; a re-run replaces it) and returns
    it as a :class:`~profiling_core.store.DevicePeaks`. Raises WorkerError as ``run_experiment`` does."""
    from ..store.peaks import DevicePeaks, PeakBook
    from .calibration import CalibrationJob
    job = job or CalibrationJob()
    store = store or RunStore()
    status = on_status or (lambda _m: None)
    _run_id, staging = store._begin(job.name)
    try:
        with device_lock(device_key(job.device), what=job.name, wait=wait_for_device, timeout_s=lock_timeout_s,
                         on_wait=status, cancel_event=cancel_event) as lock_fd:
            facts = run_in_worker(job, staging, cancel_event=cancel_event, on_status=status, prestart=prestart,
                                  hold_fds=(lock_fd, store._owner_fd(staging)))
        peaks = DevicePeaks.from_dict(facts["peaks"])
        PeakBook(store.root).save(peaks)
        return peaks
    finally:
        store._abort(staging)


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def machine_busy(meta: dict) -> str | None:
    """A sentence when the machine was busy as a run started (a 1-minute load average above its core count, before
    the run added its own), else None: CPU timings of such a run include other work. The load after the run, which
    includes the run itself, is recorded but not judged."""
    load = (meta or {}).get("machine_load") or {}
    cores, before = load.get("cores") or 0, load.get("load_1min_before")
    if not cores or before is None or before <= cores:
        return None
    return (f"The machine was busy as this run started (1-minute load average {before:g} on {cores} cores): its "
            f"CPU timings include other work; run it again on a quiet machine before comparing them.")


@functools.lru_cache(maxsize=1)
def environment_info() -> dict:
    """torch/CUDA versions and the device this machine would profile on (asked of a subprocess, cached)."""
    code = ("import json, torch, platform; c = torch.cuda.is_available(); "
            "print(json.dumps({'torch': torch.__version__, 'cuda_build': torch.version.cuda, "
            "'cuda_available': c, 'device_count': torch.cuda.device_count() if c else 0, "
            "'device_name': torch.cuda.get_device_name(0) if c else None, "
            "'cpu_threads': torch.get_num_threads()}))")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError, OSError) as exc:
        info = {"torch": None, "error": f"could not import torch in a subprocess: {exc}"}
    info["python"] = platform.python_version()
    info["host"] = socket.gethostname()
    info["cpu_model"] = cpu_model()
    if info.get("torch") and not info.get("device_name"):  # a CPU: named as its runs and calibrations name it
        info["device_name"] = info["cpu_model"]
    info["cpu_cores"] = os.cpu_count()
    return info


def prestart_worker() -> None:
    """Start the fork server (torch imported once, CUDA untouched) in the background; a no-op once it runs.

    ``run_experiment(..., prestart=1)`` starts it anyway; calling this early (the app does on every page) moves
    the seconds of torch imports off the first click.
    """
    fork_server().warm()
