"""The driver a run records: the NVIDIA driver's version through NVML (``run.host``'s one loader), None without
NVML, and never the CUDA driver API's number under that name. No GPU here: NVML is absent, or a fake library
stands in for ``libnvidia-ml.so.1`` where ``run.host`` loads it (``ctypes.CDLL``)."""
from __future__ import annotations

import ctypes
import json
from types import SimpleNamespace

import pytest

from test_h200_app_traces import meta
from test_machines import run_with
from profiling_core.run import host
from profiling_core.run.cluster import node_facts
from profiling_core.run.loop import device_info
from profiling_core.store.machines import group_by_machine

DRIVER = "580.159.03"


class FakeNvml:
    """The NVML calls ``run.host`` makes: initialised, the driver's version, no GPU list, shut down."""

    def __init__(self):
        self.calls = []

    def nvmlInit_v2(self):
        self.calls.append("init")
        return 0

    def nvmlShutdown(self):
        self.calls.append("shutdown")
        return 0

    def nvmlSystemGetDriverVersion(self, buf, length):
        self.calls.append("driver")
        buf.value = DRIVER.encode()[:length - 1]
        return 0

    def nvmlDeviceGetCount_v2(self, count):
        return 999  # NVML_ERROR_UNKNOWN: no GPU list, so the run's GPU is named from CUDA_VISIBLE_DEVICES


def load_with(monkeypatch, nvml):
    """``ctypes.CDLL`` answering ``libnvidia-ml.so.1`` with ``nvml`` (OSError where it is None, as without the
    library); every other library as ctypes loads it."""
    real = ctypes.CDLL

    def cdll(name, *args, **kwargs):
        if name == "libnvidia-ml.so.1":
            if nvml is None:
                raise OSError(f"{name}: cannot open shared object file: No such file or directory")
            return nvml
        return real(name, *args, **kwargs)

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    return nvml


@pytest.fixture(autouse=True)
def _fresh_gpu_list():
    host.nvml_gpus.cache_clear()
    yield
    host.nvml_gpus.cache_clear()


def fake_torch():
    """A torch on one GPU, as far as ``device_info`` asks."""
    props = SimpleNamespace(name="NVIDIA H200", total_memory=150109880320, multi_processor_count=132, major=9,
                            minor=0, uuid="GPU-0b4a1f9e-0000-0000-0000-000000000000")
    return SimpleNamespace(__version__="2.11.0+cu130", version=SimpleNamespace(cuda="13.0"),
                           get_num_threads=lambda: 16,
                           cuda=SimpleNamespace(get_device_properties=lambda i: props),
                           backends=SimpleNamespace(cudnn=SimpleNamespace(version=lambda: 91900)))


def test_without_nvml_no_driver_is_recorded(monkeypatch):
    load_with(monkeypatch, None)
    assert host.nvml_driver_version() is None
    info = device_info(fake_torch(), "cuda")
    assert info["driver"] is None and info["name"] == "NVIDIA H200"
    json.dumps(info)  # meta.json takes it as it is


def test_the_driver_is_nvmls_version_string(monkeypatch):
    nvml = load_with(monkeypatch, FakeNvml())
    assert host.nvml_driver_version() == DRIVER
    assert nvml.calls == ["init", "driver", "shutdown"]
    assert device_info(fake_torch(), "cuda")["driver"] == DRIVER


def test_a_cpu_run_records_no_driver(monkeypatch):
    load_with(monkeypatch, FakeNvml())
    assert "driver" not in device_info(fake_torch(), "cpu")


def test_a_nodes_driver_is_the_runs_and_the_cuda_driver_api_keeps_its_own_name():
    m = meta("sweep_64_warm_eager")  # a real run's meta.json: Kineto's cuda_driver_version is 13000
    assert m["versions"]["cuda_driver_version"] == "13000"
    with_driver = dict(m, device=dict(m["device"], driver=DRIVER))
    assert node_facts(with_driver) == {"device_name": "NVIDIA H200", "driver": DRIVER, "cuda_driver_api": "13000",
                                       "torch": "2.11.0+cu130"}
    # a worker that read no driver (no NVML, or an older worker): None, never the CUDA driver API's number
    assert node_facts(m)["driver"] is None and node_facts(m)["cuda_driver_api"] == "13000"
    assert node_facts({"device": "hostile", "versions": 7}) == {"device_name": None, "driver": None,
                                                                "cuda_driver_api": None, "torch": None}


def test_runs_of_one_node_stay_one_machine_whatever_driver_they_recorded():
    m = meta("sweep_64_warm_eager")
    old = dict(m, node={"hostname": "gpu-node-7", "device_name": "NVIDIA H200", "driver": "13000"})
    new = dict(m, node={"hostname": "gpu-node-7", **node_facts(dict(m, device=dict(m["device"], driver=DRIVER)))})
    other = dict(m, node={"hostname": "gpu-node-8", **node_facts(m)})
    groups = group_by_machine([run_with(old), run_with(new), run_with(other)])
    assert [(g.label, len(rs)) for g, rs in groups] == [("NVIDIA H200 on gpu-node-7", 2),
                                                       ("NVIDIA H200 on gpu-node-8", 1)]
