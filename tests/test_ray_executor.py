"""Sweeps on a Ray cluster (``run_sweep(executor="ray")``): a CPU cluster of two nodes on this machine, started once.

The nodes are ``ray.cluster_utils.Cluster`` nodes with one CPU each and a fake device type each (custom resources
``device_type:fake_a`` and ``device_type:fake_b``, the convention a real cluster's nodes follow with their GPU's
name). Every run is a real profile of a tiny matmul_add on the CPU. What each test reads back is the caller's store
on disk (every folder in it, every meta.json read as plain JSON), never the executor's own account alone.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")

from profiling_core import ExperimentConfig, RunStore
from profiling_core.run import run_sweep
from profiling_core.run.cluster import ENV_NODE_DIR, device_type_resource

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TYPES = ("device_type:fake_a", "device_type:fake_b")


@pytest.fixture(scope="module")
def cluster():
    """Two nodes, one CPU and one fake device type each; the node stores in a folder of this module's own."""
    from ray.cluster_utils import Cluster
    node_dir = tempfile.mkdtemp(prefix="profiling-ray-nodes-")
    old = os.environ.get(ENV_NODE_DIR)
    os.environ[ENV_NODE_DIR] = node_dir  # the nodes' processes inherit it from this one
    c = Cluster(initialize_head=True, connect=True,
                head_node_args={"num_cpus": 1, "resources": {TYPES[0]: 1}, "include_dashboard": False})
    c.add_node(num_cpus=1, resources={TYPES[1]: 1})
    c.wait_for_nodes()
    try:
        yield {"address": c.address, "node_dir": Path(node_dir),
               "nodes": {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}}
    finally:
        ray.shutdown()
        c.shutdown()
        if old is None:
            os.environ.pop(ENV_NODE_DIR, None)
        else:
            os.environ[ENV_NODE_DIR] = old


def tiny(size=32):
    return ExperimentConfig(size=size, warmup=1, active=1, device="cpu", dtype="fp32")


def on_disk(root: Path):
    """The run folders under a store's root, each with its meta.json read as plain JSON, and what is staged."""
    runs = {p.name: json.loads((p / "meta.json").read_text()) for p in (root.iterdir() if root.is_dir() else ())
            if p.is_dir() and not p.name.startswith(".")}
    staging = list((root / ".staging").iterdir()) if (root / ".staging").is_dir() else []
    return runs, staging


def complete(root: Path, run_id: str) -> bool:
    d = root / run_id
    trace = json.loads((d / "trace.json").read_text())
    return bool(trace.get("traceEvents")) and (d / "table.txt").stat().st_size > 0


def test_spread_sweep_lands_every_run_with_its_node(cluster, tmp_path):
    store = RunStore(tmp_path / "runs")
    progress = []
    result = run_sweep([tiny(32), tiny(48)], executor="ray", ray_address=cluster["address"], store=store,
                       prestart=1, on_progress=progress.append)
    assert result.errors == [] and not result.cancelled
    runs, staging = on_disk(tmp_path / "runs")
    assert staging == []
    assert sorted(m["config"]["size"] for m in runs.values()) == [32, 48]
    for run_id, meta in runs.items():
        assert complete(tmp_path / "runs", run_id)
        node = meta["node"]
        assert node["ray_node_id"] in cluster["nodes"]
        assert node["hostname"] and node["torch"] and node["device_name"] == meta["device"]["name"]
        # a CPU run: no NVIDIA driver recorded; the CUDA driver API's version only under its own name
        assert node["driver"] is None and "driver" not in meta["device"]
        assert node["cuda_driver_api"] == meta["versions"].get("cuda_driver_version")
    # SPREAD over two idle nodes of one CPU each: one run on each
    assert len({m["node"]["ray_node_id"] for m in runs.values()}) == 2
    assert progress[-1].done == progress[-1].total == 2
    # nothing stays in the nodes' own stores
    node_runs, _ = on_disk(cluster["node_dir"])
    assert node_runs == {}


def test_per_device_type_runs_each_config_on_each_type(cluster, tmp_path):
    store = RunStore(tmp_path / "runs")
    result = run_sweep([tiny(32), tiny(48)], executor="ray", store=store, prestart=1, placement="per_device_type")
    assert result.errors == []
    runs, _ = on_disk(tmp_path / "runs")
    got = sorted((m["config"]["size"], m["node"]["device_type"]) for m in runs.values())
    assert got == [(32, TYPES[0]), (32, TYPES[1]), (48, TYPES[0]), (48, TYPES[1])]
    for meta in runs.values():  # each on the node that declares its type
        node = cluster["nodes"][meta["node"]["ray_node_id"]]
        assert meta["node"]["device_type"] in node["Resources"]


def test_cli_sweep_per_device_type_on_a_cluster(cluster, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    p = subprocess.run([sys.executable, "-m", "profiling_core", "sweep", "--sizes", "32", "--compile-modes", "off",
                        "--dtype", "fp32", "--device", "cpu", "--warmup", "1", "--active", "1", "--executor", "ray",
                        "--ray-address", cluster["address"], "--per-device-type", "--json",
                        "--store", str(tmp_path / "runs")], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert len(out["runs"]) == 2 and out["errors"] == [] and out["skipped"] == []
    runs, staging = on_disk(tmp_path / "runs")
    assert sorted(m["node"]["device_type"] for m in runs.values()) == list(TYPES) and staging == []


def test_device_type_resource_convention():
    assert device_type_resource("NVIDIA H200") == "device_type:NVIDIA_H200"
    assert device_type_resource("AMD Instinct MI300X (gfx942)") == "device_type:AMD_Instinct_MI300X_gfx942"
    with pytest.raises(Exception, match="device_name"):
        device_type_resource(" -- ")


def _kill_when_running(node_dir: Path, killed: list, stop: threading.Event) -> None:
    """Kill -9 the process writing the first run that appears in a node's staging folder (the Ray task's own
    process: the store writes the writer's pid into the folder's .owner file)."""
    before = set((node_dir / ".staging").glob("*/.owner"))  # left by a run killed earlier, its writer gone
    while not stop.is_set():
        for owner in set((node_dir / ".staging").glob("*/.owner")) - before:
            try:
                pid = int(owner.read_text().split()[0])
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                continue
            killed.append(pid)
            return
        time.sleep(0.05)


@pytest.mark.parametrize("max_retries", [1, 0])
def test_a_task_killed_mid_run_is_retried_or_fails_cleanly(cluster, tmp_path, max_retries):
    store = RunStore(tmp_path / "runs")
    killed, stop = [], threading.Event()
    killer = threading.Thread(target=_kill_when_running, args=(cluster["node_dir"], killed, stop), daemon=True)
    killer.start()
    try:
        # a fresh interpreter per run (prestart=0): its seconds of imports are the window the kill lands in
        result = run_sweep([tiny(32)], executor="ray", store=store, prestart=0, max_retries=max_retries)
    finally:
        stop.set()
        killer.join(10)
    assert len(killed) == 1
    assert len(result.runs) + len(result.errors) == 1 and result.skipped == []
    runs, staging = on_disk(tmp_path / "runs")
    assert staging == []
    if max_retries:
        assert len(runs) == 1
        (run_id, meta), = runs.items()
        assert complete(tmp_path / "runs", run_id)
        assert meta["node"]["pid"] != killed[0]  # the second attempt made it
    else:
        assert runs == {}
        (_cfg, err), = result.errors
        assert err.kind == "crash" and "died" in str(err) and "tried once" in str(err)


def test_artifacts_over_the_cap_are_refused_naming_it(cluster, tmp_path):
    store = RunStore(tmp_path / "runs")
    result = run_sweep([tiny(32)], executor="ray", store=store, prestart=1, max_artifact_bytes=1000)
    (_cfg, err), = result.errors
    assert "cap of 1,000 bytes" in str(err) and "max_artifact_bytes" in str(err)
    assert on_disk(tmp_path / "runs") == ({}, [])


def test_cancel_stops_queued_and_kills_running_tasks(cluster, tmp_path):
    store = RunStore(tmp_path / "runs")
    cancel, out = threading.Event(), {}
    configs = [tiny(32), tiny(40), tiny(48), tiny(56)]
    t = threading.Thread(target=lambda: out.update(r=run_sweep(configs, executor="ray", store=store, prestart=0,
                                                                cancel_event=cancel)), daemon=True)
    before = set((cluster["node_dir"] / ".staging").glob("*/.owner"))
    t.start()
    deadline = time.monotonic() + 120
    owners = []
    while not owners and time.monotonic() < deadline:  # a run has started on a node
        owners = list(set((cluster["node_dir"] / ".staging").glob("*/.owner")) - before)
        time.sleep(0.05)
    assert owners
    pid = int(owners[0].read_text().split()[0])
    t0 = time.monotonic()
    cancel.set()
    t.join(120)
    assert not t.is_alive() and time.monotonic() - t0 < 60
    r = out["r"]
    assert r.cancelled and len(r.runs) + len(r.errors) + len(r.skipped) == 4 and r.skipped
    with pytest.raises(ProcessLookupError):  # the running task's process was killed
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
    runs, staging = on_disk(tmp_path / "runs")
    assert staging == [] and len(runs) == len(r.runs)
    assert all(complete(tmp_path / "runs", run_id) for run_id in runs)


@pytest.mark.parametrize("kwargs, match", [
    ({"executor": "dask"}, "executor must be local or ray, got 'dask'"),
    ({"executor": "ray", "placement": "everywhere"}, "placement must be spread or per_device_type, got 'everywhere'"),
    ({"executor": "ray", "max_retries": -1}, "max_retries must be an integer from 0, got -1"),
    ({"executor": "ray", "max_artifact_bytes": 0}, "max_artifact_bytes must be a positive integer, got 0"),
    ({"executor": "ray", "ray_address": "head"}, "or ray://HOST:PORT (Ray Client), got 'head'"),
    ({"executor": "ray", "ray_address": "head:65536"}, "or ray://HOST:PORT (Ray Client), got 'head:65536'"),
    ({"executor": "ray", "ray_address": "ray://"}, "or ray://HOST:PORT (Ray Client), got 'ray://'"),
    ({"executor": "ray", "ray_address": 6379}, "or ray://HOST:PORT (Ray Client), got 6379"),
])
def test_bad_executor_arguments_are_refused_by_name(tmp_path, kwargs, match):
    from profiling_core.errors import ConfigError
    with pytest.raises(ConfigError, match=re.escape(match)):
        run_sweep([tiny()], store=RunStore(tmp_path / "runs"), **kwargs)
    assert on_disk(tmp_path / "runs") == ({}, [])  # refused before anything ran
