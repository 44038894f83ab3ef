"""Facts of the machine a run is on, read without torch: the processor's model name, and the NVIDIA GPUs as NVML
numbers them (index, UUID, name) when the driver's NVML library can be loaded.

NVML is the driver's management library (what ``nvidia-smi`` reads); asking it never initialises CUDA, so a
caller and the fork server stay free of CUDA. It is optional: without the library (no NVIDIA driver, a CPU
machine) :func:`nvml_gpus` and :func:`nvml_driver_version` are None and whoever asked does without.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import platform
from typing import Optional


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``'s ``model name``; ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@contextlib.contextmanager
def _nvml():
    """NVML, initialised, for the ``with`` block (shut down after it); None where the library cannot be loaded or
    will not initialise."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        ok = nvml.nvmlInit_v2() == 0
    except (OSError, AttributeError):
        yield None
        return
    if not ok:
        yield None
        return
    try:
        yield nvml
    finally:
        try:
            nvml.nvmlShutdown()
        except (AttributeError, OSError):
            pass


@functools.lru_cache(maxsize=1)
def nvml_gpus() -> Optional[tuple[dict, ...]]:
    """The machine's NVIDIA GPUs in NVML's order (``nvidia-smi``'s indices, by PCI bus): ``{"index", "uuid",
    "name"}`` each, the UUID as NVML writes it (``GPU-…``). None when NVML cannot be loaded or answers with an error.
    Read once per process (tens of milliseconds the first time)."""
    with _nvml() as nvml:
        if nvml is None:
            return None
        try:
            count = ctypes.c_uint(0)
            if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
                return None
            gpus = []
            for i in range(count.value):
                handle = ctypes.c_void_p()
                if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
                    return None
                uuid, name = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
                if nvml.nvmlDeviceGetUUID(handle, uuid, 96) != 0:
                    return None
                if nvml.nvmlDeviceGetName(handle, name, 96) != 0:
                    name.value = b""
                gpus.append({"index": i, "uuid": uuid.value.decode("ascii", "replace"),
                             "name": name.value.decode("utf-8", "replace")})
            return tuple(gpus)
        except (AttributeError, OSError):
            return None


def nvml_driver_version() -> Optional[str]:
    """The NVIDIA driver's version as NVML gives it (``nvidia-smi``'s, e.g. ``580.159.04``); None without NVML."""
    with _nvml() as nvml:
        if nvml is None:
            return None
        try:
            buf = ctypes.create_string_buffer(96)
            return buf.value.decode() if nvml.nvmlSystemGetDriverVersion(buf, 96) == 0 else None
        except (AttributeError, OSError):
            return None
