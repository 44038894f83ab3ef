"""Sweeps on a Ray cluster: each run a Ray task that runs our worker on its node, its artifacts committed here.

``run_sweep(configs, executor="ray")`` comes here (``pip install -e '.[ray]'``). Each run is one Ray task that asks
for one GPU (a CUDA run, or an ``auto`` run on a cluster that has GPUs) or one CPU (a CPU run), and on its node
does exactly what a local run does: :func:`~profiling_core.run.runner.run_experiment` into a node-local run store
(:func:`node_store_root`), so the fresh process or fork server, the device lock of that node and the store's
staging apply there as they do here. The task then sends back the run's artifacts (``RUN_FILES``: trace, table,
memory categories when the run has them) as bytes with its meta.json, adds the node's facts under
``meta["node"]`` (hostname, Ray node id, device name, NVIDIA driver version, CUDA driver API version, torch
version, and the device type it was placed by: :func:`node_facts`), and deletes the run from the node's store. This process commits it into its own store through
``RunStore.import_run``, whole or not at all.

Placement: ``"spread"`` (Ray's SPREAD strategy: one task per config, spread over the nodes that have the
resources) or ``"per_device_type"``: every config once per distinct device type among the cluster's alive nodes.
A node declares its device type as a custom resource named ``device_type:<name>`` (:func:`device_type_resource`:
the device's name with every run of characters other than letters and digits made ``_``, e.g.
``device_type:NVIDIA_H200``), e.g. ``ray start --resources '{"device_type:NVIDIA_H200": 8}'``; each task of that
type asks for 1 of it besides its GPU.

Faults: a task whose process dies (a killed Ray worker, a lost node) is retried ``max_retries`` times by Ray,
then reported as a failed run (``WorkerError`` kind ``crash``, with Ray's reason); a run that fails on its node is
reported as it failed there (never retried: it would fail again). Artifacts above ``max_artifact_bytes`` are
refused on the node, before anything enters Ray's object store, with an error naming the cap. A sweep of N
configs (N × the device types, per device type) always ends with that many outcomes: runs, errors, and on cancel
the configs that never ran (``SweepResult.skipped``). Cancel stops the queued tasks and kills the running ones
(``ray.cancel(force=True)``; a run's worker dies with its Ray worker, the node's store drops its staging folder).

Only this module imports ray, and only when a Ray sweep runs.
"""
from __future__ import annotations

import os
import re
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..config import ExperimentConfig
from ..errors import ConfigError, ProfilingError, RunStoreError, WorkerError
from ..store.runs import RUN_FILES, RunStore

PLACEMENTS = ("spread", "per_device_type")
DEVICE_TYPE_PREFIX = "device_type:"
MAX_ARTIFACT_BYTES = 256 * 2**20
"""The most bytes a run's artifacts may take through Ray's object store (trace, table, memory categories)."""
ENV_NODE_DIR = "PROFILING_RAY_NODE_DIR"
POLL_S = 0.2


def device_type_resource(device_name: str) -> str:
    """The custom resource a node of this device declares: ``device_type:`` and the name, every run of characters
    other than ASCII letters and digits made ``_`` (``NVIDIA H200`` → ``device_type:NVIDIA_H200``)."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", str(device_name)).strip("_")
    if not slug:
        raise ConfigError("device_name", device_name, "a device name with at least one letter or digit")
    return DEVICE_TYPE_PREFIX + slug


def node_store_root() -> Path:
    """Where a node keeps the runs it makes before sending them back: ``$PROFILING_RAY_NODE_DIR`` or
    ``<tmp>/profiling_core-ray``. A run stays there only while its task lives."""
    return Path(os.environ.get(ENV_NODE_DIR) or Path(tempfile.gettempdir()) / "profiling_core-ray")


def _error_dict(exc: ProfilingError) -> dict:
    if isinstance(exc, WorkerError):
        return {"type": "WorkerError", **exc.to_dict()}
    return {"type": type(exc).__name__, "message": str(exc)}


def _error_from(d: dict, where: str) -> ProfilingError:
    """The error a task reported, rebuilt here; the node it happened on is named in the message."""
    if d.get("type") == "WorkerError":
        return WorkerError(str(d.get("kind") or "error"), f"{d.get('message')} (on {where})",
                           str(d.get("stderr_tail") or ""), d.get("returncode"))
    return WorkerError("store" if d.get("type") == "RunStoreError" else "error", f"{d.get('message')} (on {where})")


def run_on_node(config: dict, prestart: int, process: str, max_bytes: int, device_type: Optional[str],
                compile_cache: str = "fresh") -> dict:
    """The body of one Ray task, on its node: the run as ``run_experiment`` makes it locally, into the node's store;
    then its artifacts as bytes (or the error) and the node's facts. Never raises a ProfilingError (a failed run is
    an answer, not a fault to retry)."""
    import ray

    from .runner import run_experiment
    node = {"hostname": socket.gethostname(), "ray_node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(), "device_type": device_type}
    where = f"node {node['hostname']} ({node['ray_node_id'][:12]})"
    try:
        cfg = ExperimentConfig.from_dict(config)
        store = RunStore(node_store_root())
        run = run_experiment(cfg, store=store, prestart=prestart, process=process, compile_cache=compile_cache)
    except ProfilingError as exc:
        return {"error": _error_dict(exc), "where": where, "node": node}
    try:
        names = [n for n in RUN_FILES if (run.run_dir / n).is_file()]
        total = sum((run.run_dir / n).stat().st_size for n in names)
        if total > max_bytes:
            return {"error": _error_dict(WorkerError("store", (
                f"{cfg.name}'s artifacts are {total:,} bytes, over the cap of {max_bytes:,} bytes that a run may send "
                f"back through Ray's object store (max_artifact_bytes)"))), "where": where, "node": node}
        files = {n: (run.run_dir / n).read_bytes() for n in names}
    finally:
        store.delete(run.run_id)
    meta = dict(run.meta)
    node.update(node_facts(meta), node_run_id=run.run_id)
    meta["node"] = node
    return {"files": files, "meta": meta, "where": where}


def node_facts(meta: dict) -> dict:
    """What ``meta["node"]`` keeps of a run's device facts: ``device_name``, ``driver`` (the NVIDIA driver's version
    as the worker read it through NVML, ``meta["device"]["driver"]``; None without NVML or on a CPU),
    ``cuda_driver_api`` (the CUDA driver API's version Kineto wrote into the trace, e.g. ``13000``: not the driver's
    version) and ``torch``."""
    dev = meta.get("device") if isinstance(meta.get("device"), dict) else {}
    versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
    return {"device_name": dev.get("name"), "driver": dev.get("driver"),
            "cuda_driver_api": versions.get("cuda_driver_version"), "torch": versions.get("torch") or dev.get("torch")}


def _device_types(ray) -> list[str]:
    """The device-type resources the cluster's alive nodes declare, sorted."""
    return sorted({k for n in ray.nodes() if n.get("Alive") for k in (n.get("Resources") or {})
                   if k.startswith(DEVICE_TYPE_PREFIX)})


def _wants_gpu(cfg: ExperimentConfig, cluster_gpus: float) -> bool:
    return cfg.device == "cuda" or (cfg.device == "auto" and cluster_gpus > 0)


RAY_ADDRESS_RE = re.compile(r"(ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?):([0-9]{1,5})")
RAY_ADDRESS_ALLOWED = ("empty (the Ray of RAY_ADDRESS, else a local Ray instance started for the sweep), local (a "
                       "local Ray instance started for the sweep), auto (the cluster `ray start` made on this machine), "
                       "HOST:PORT (a cluster's head node, e.g. 10.0.0.5:6379) or ray://HOST:PORT (Ray Client)")
INSTALL_HINT = "pip install -e '.[ray]' (or pip install 'ray[default]')"


def ray_missing() -> Optional[str]:
    """Why the ``ray`` executor cannot run in this Python (Ray is not installed: what to install), or None. Finds
    the package without importing it."""
    import importlib.util
    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"Ray is not installed in this Python: {INSTALL_HINT}"


def check_ray_address(address) -> Optional[str]:
    """``address`` as ``ray.init`` takes it: None for empty (``RAY_ADDRESS``, else a local Ray started for the
    sweep), ``local`` (a local Ray started for the sweep, whatever ``RAY_ADDRESS`` says), ``auto``, or
    ``[ray://]HOST:PORT`` (spaces around it dropped; a port from 1 to 65535). Anything else raises ConfigError
    saying what is allowed."""
    if address is None:
        return None
    if not isinstance(address, str):
        raise ConfigError("ray_address", address, RAY_ADDRESS_ALLOWED)
    text = address.strip()
    if not text:
        return None
    if text in ("auto", "local"):
        return text
    m = RAY_ADDRESS_RE.fullmatch(text)
    if m is None or not 1 <= int(m.group(3)) <= 65535:
        raise ConfigError("ray_address", address if len(address) <= 200 else address[:199] + "…", RAY_ADDRESS_ALLOWED)
    return text


def check_options(ray_address, placement, max_retries, max_artifact_bytes) -> Optional[str]:
    """Refuse what a Ray sweep cannot run with (ConfigError naming the field and what is allowed), before anything
    starts; returns the address as ``check_ray_address`` reads it."""
    if placement not in PLACEMENTS:
        raise ConfigError("placement", placement, " or ".join(PLACEMENTS))
    if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
        raise ConfigError("max_retries", max_retries, "an integer from 0")
    if not isinstance(max_artifact_bytes, int) or isinstance(max_artifact_bytes, bool) or max_artifact_bytes < 1:
        raise ConfigError("max_artifact_bytes", max_artifact_bytes, "a positive integer")
    return check_ray_address(ray_address)


_CONNECTION_LOCK = threading.Lock()
_CONNECTION = {"users": 0, "started": False, "address": None}
"""This process's one connection to Ray, shared by the sweeps that run at once (two pages of the app): made by the
first that needs it, shut down by the last of them, and never when it was made by someone else (a notebook's
``ray.init``)."""


def _where(address: Optional[str]) -> str:
    return {None: "Ray (RAY_ADDRESS, else a local Ray instance)", "local": "a local Ray instance",
            "auto": "this machine's Ray cluster (auto)"}.get(address, f"the Ray cluster at {address}")


def _connect(ray, address: Optional[str]) -> None:
    with _CONNECTION_LOCK:
        if _CONNECTION["users"] and address != _CONNECTION["address"]:
            raise ProfilingError(
                f"another sweep of this process uses {_where(_CONNECTION['address'])}; "
                f"one process connects to one cluster at a time: wait for it to end, or use the same address")
        if not _CONNECTION["users"] and not ray.is_initialized():
            _reachable(address)
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except Exception as exc:  # noqa: BLE001 - Ray's errors on connecting are of many types
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                where = _where(address)
                raise ProfilingError(
                    f"could not connect to {where}: {type(exc).__name__}: {reason[:500]}. Check that the cluster "
                    f"is up (ray status on its head node) and its address; leave the address empty to start a local "
                    f"Ray instance; nothing ran") from None
            _CONNECTION["started"] = True
        _CONNECTION["users"] += 1
        _CONNECTION["address"] = address


CONNECT_TIMEOUT_S = 5.0
"""How long a cluster's address may take to accept a connection before the sweep says it is not reachable (Ray's
own connect waits minutes)."""


def _reachable(address: Optional[str]) -> None:
    """Raise a ProfilingError at once when nothing listens at ``address``'s HOST:PORT (``auto`` and a local start
    are Ray's to find)."""
    m = RAY_ADDRESS_RE.fullmatch(address or "")
    if m is None:
        return
    host, port = m.group(2).strip("[]"), int(m.group(3))
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ProfilingError(
            f"no Ray cluster is reachable at {address} ({exc.strerror or f'no answer within {CONNECT_TIMEOUT_S:g} s'}). Check that the cluster is up (ray status on its head node) and its address "
            f"(the head's GCS port, 6379 by default); leave the address empty to start a local Ray instance; "
            f"nothing ran") from None


def _disconnect(ray) -> None:
    with _CONNECTION_LOCK:
        _CONNECTION["users"] -= 1
        if not _CONNECTION["users"]:
            if _CONNECTION["started"]:
                ray.shutdown()
            _CONNECTION.update(started=False, address=None)


def run_sweep_ray(configs: Sequence[ExperimentConfig], *, store: RunStore, report: Callable, result,
                  cancel_event: Optional[threading.Event], prestart: int, status: Callable[[str], None],
                  process: str, compile_cache: str, ray_address: Optional[str], placement: str,
                  max_retries: int, max_artifact_bytes: int) -> None:
    """Fill ``result`` (a SweepResult) with the outcome of every job, calling ``report`` as each ends (see
    ``_progress``); ``run_sweep`` is the entry point."""
    address = check_options(ray_address, placement, max_retries, max_artifact_bytes)  # run_sweep checked it too
    import ray
    status(f"connecting to {_where(address)}")
    _connect(ray, address)
    try:
        _sweep(ray, configs, store, report, result, cancel_event, prestart, status, process, compile_cache,
               placement, max_retries, max_artifact_bytes)
    finally:
        _disconnect(ray)


def _sweep(ray, configs, store, report, result, cancel_event, prestart, status, process, compile_cache, placement,
           max_retries, max_artifact_bytes) -> None:
    gpus = ray.cluster_resources().get("GPU", 0)
    if placement == "per_device_type":
        types = _device_types(ray)
        if not types:
            raise ConfigError("placement", placement, (
                f"a cluster whose nodes declare a custom resource {DEVICE_TYPE_PREFIX}<name> (e.g. ray start "
                f"--resources '{{\"{DEVICE_TYPE_PREFIX}NVIDIA_H200\": 8}}'); this cluster's nodes declare none"))
        jobs = [(c, t) for c in configs for t in types]
    else:
        jobs = [(c, None) for c in configs]
    task = ray.remote(run_on_node)
    pending: dict = {}
    for cfg, dtype in jobs:
        opts = {"num_gpus": 1, "num_cpus": 1} if _wants_gpu(cfg, gpus) else {"num_cpus": 1}
        if dtype is not None:
            opts["resources"] = {dtype: 1}
        else:
            opts["scheduling_strategy"] = "SPREAD"
        ref = task.options(max_retries=max_retries, retry_exceptions=False, **opts).remote(
            cfg.to_dict(), prestart, process, max_artifact_bytes, dtype, compile_cache)
        pending[ref] = (cfg, dtype)
    total = len(jobs)
    status(f"{total} runs queued on the Ray cluster ({placement})")
    _progress(report, result, total, jobs[0][0].name if jobs else None, f"[0/{total}] queued on the cluster")
    try:
        while pending:
            if cancel_event is not None and cancel_event.is_set():
                _cancel(ray, pending, result)
                return
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            for ref in ready:
                cfg, dtype = pending.pop(ref)
                _outcome(ray, ref, cfg, dtype, store, result, max_retries)
                done = len(result.runs) + len(result.errors)
                _progress(report, result, total, cfg.name, f"[{done}/{total}] {cfg.name}"
                          + (f" on {dtype}" if dtype else ""))
    except BaseException:  # Ctrl-C, or a callback that raised: no task of this sweep goes on running
        for ref in pending:
            ray.cancel(ref, force=True)
        raise


def _progress(report, result, total: int, current: Optional[str], message: str) -> None:
    """``report(done, total, current, message, failed)``: ``run_sweep`` makes a SweepProgress of it."""
    report(len(result.runs) + len(result.errors), total, current, message, len(result.errors))


def _outcome(ray, ref, cfg: ExperimentConfig, dtype: Optional[str], store: RunStore, result, max_retries) -> None:
    label = cfg.name + (f" on {dtype}" if dtype else "")
    try:
        answer = ray.get(ref)
    except ray.exceptions.RayError as exc:
        tries = "once" if max_retries == 0 else f"{max_retries + 1} times"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        result.errors.append((cfg, WorkerError("crash", f"{label}: its Ray task died (tried {tries}): "
                                                        f"{type(exc).__name__}: {reason}")))
        return
    if "error" in answer:
        result.errors.append((cfg, _error_from(answer["error"], answer.get("where", "its node"))))
        return
    try:
        result.runs.append(store.import_run(answer["files"], answer["meta"]))
    except RunStoreError as exc:
        result.errors.append((cfg, exc))


def _cancel(ray, pending: dict, result) -> None:
    """Stop the queued tasks and kill the running ones; their configs are the sweep's skipped ones. Waits a little
    for the killed tasks to end, so their nodes' device locks are free when the sweep returns."""
    for ref in pending:
        ray.cancel(ref, force=True)
    deadline = time.monotonic() + 30
    refs = list(pending)
    while refs and time.monotonic() < deadline:
        _ready, refs = ray.wait(refs, num_returns=len(refs), timeout=1.0)
    result.skipped.extend(cfg for cfg, _t in pending.values())
    result.cancelled = True
