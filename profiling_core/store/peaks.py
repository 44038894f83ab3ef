"""The device's peaks, against which a run is judged: a calibration's record, the datasheets, and where they are kept.

- :class:`DevicePeaks`: what one device reached in a calibration (``profiling_core.run.calibrate.measure_peaks``
  measures it in the worker): GEMM TFLOP/s per dtype and copy bandwidth, with the method, the date, the driver and
  the torch version.
- :class:`PeakBook`: the calibrations kept in a run store's ``.calibrations/`` folder, one per (device name, driver,
  torch version), each file read defensively and checked against :data:`CALIBRATION_SCHEMA` (every figure a finite
  number in a range a device can reach, every dtype's entry complete), so a bad file is listed with its reason.
- :data:`DATASHEETS` / :func:`datasheet_for`: a vendor's datasheet number, where this module knows the device; shown
  beside the measured one, never used instead of it.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol

from ..config import GBS_LIMITS, TFLOPS_LIMITS
from ..units import format_count
from .files import read_json_object


class _RunLike(Protocol):
    """What :meth:`PeakBook.for_run` reads of a run (a ``runs.Run``; not imported, so that ``runs`` may use this
    module to import another store's calibrations)."""
    meta: dict


GPU_DTYPES = ("bf16", "fp16", "tf32", "fp32")
CPU_DTYPES = ("fp32", "bf16", "fp16")

# Dense (no sparsity) rates from the vendors' datasheets: TFLOP/s per dtype (tensor-core rates; fp32 is the
# non-tensor FMA rate), memory bandwidth in GB/s. Matched against torch's device name (the first key that is a
# word-bounded part of it wins, so the more specific names come first); a measured calibration is what the app
# judges by, and a datasheet figure only where the device has none, labelled as such.
def _sheet(source: str, bf16: Optional[float], fp16: float, tf32: Optional[float], fp32: float, gbs: float
           ) -> dict[str, Any]:
    tflops = {k: v for k, v in (("bf16", bf16), ("fp16", fp16), ("tf32", tf32), ("fp32", fp32)) if v is not None}
    return {"source": source, "tflops": tflops, "bandwidth_gbs": gbs}


DATASHEETS: dict[str, dict[str, Any]] = {
    "H200": _sheet("NVIDIA H200 datasheet (SXM, dense)", 989.4, 989.4, 494.7, 66.9, 4800.0),
    "H100 PCIe": _sheet("NVIDIA H100 datasheet (PCIe, dense)", 756.0, 756.0, 378.0, 51.2, 2000.0),
    "H100 80GB HBM3": _sheet("NVIDIA H100 datasheet (SXM, dense)", 989.4, 989.4, 494.7, 66.9, 3350.0),
    "H100": _sheet("NVIDIA H100 datasheet (SXM, dense)", 989.4, 989.4, 494.7, 66.9, 3350.0),
    "A100-SXM4-80GB": _sheet("NVIDIA A100 datasheet (SXM 80GB, dense)", 312.0, 312.0, 156.0, 19.5, 2039.0),
    "A100-SXM4-40GB": _sheet("NVIDIA A100 datasheet (SXM 40GB, dense)", 312.0, 312.0, 156.0, 19.5, 1555.0),
    "A100 80GB PCIe": _sheet("NVIDIA A100 datasheet (PCIe 80GB, dense)", 312.0, 312.0, 156.0, 19.5, 1935.0),
    "A100-PCIE-40GB": _sheet("NVIDIA A100 datasheet (PCIe 40GB, dense)", 312.0, 312.0, 156.0, 19.5, 1555.0),
    "L40S": _sheet("NVIDIA L40S datasheet (dense)", 362.05, 362.05, 183.0, 91.6, 864.0),
    "L4": _sheet("NVIDIA L4 datasheet (dense)", 121.0, 121.0, 60.0, 30.3, 300.0),
    "A10": _sheet("NVIDIA A10 datasheet (dense)", 125.0, 125.0, 62.5, 31.2, 600.0),
    "V100-SXM2": _sheet("NVIDIA V100 datasheet (SXM2)", None, 125.0, None, 15.7, 900.0),
    "V100-DGXS": _sheet("NVIDIA V100 datasheet (DGX Station, SXM2 rates)", None, 125.0, None, 15.7, 900.0),
    "V100-PCIE": _sheet("NVIDIA V100 datasheet (PCIe)", None, 112.0, None, 14.0, 900.0),
    "T4": _sheet("NVIDIA T4 datasheet", None, 65.0, None, 8.1, 320.0),
    "MI300X": _sheet("AMD Instinct MI300X datasheet (dense)", 1307.4, 1307.4, 653.7, 163.4, 5300.0),
    "MI250X": _sheet("AMD Instinct MI250X datasheet (dense)", 383.0, 383.0, None, 95.7, 3276.8),
}


VARIANT_WORDS = ("NVL", "MIG", "PCIe", "SXM", "NVLink")
"""Words of a device name that name a variant with other rates than its family's sheet (an H100 NVL, a MIG slice of
an H100 with a fraction of its SMs): a name holding one of them matches only a key that holds it too."""


def datasheet_for(device_name: str) -> Optional[dict[str, Any]]:
    """The datasheet entry whose key is a word-bounded part of ``device_name`` (e.g. "NVIDIA H200"), or None. A
    name that says it is a variant (:data:`VARIANT_WORDS`, any case) the key does not say gets None: no sheet here
    holds its rates, and its family's would judge it by another device's peaks."""
    name = device_name or ""
    for key, entry in DATASHEETS.items():
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", name):
            rest = name.replace(key, " ")
            if any(re.search(rf"(?<![A-Za-z0-9]){w}(?![A-Za-z0-9])", rest, re.IGNORECASE)
                   and not re.search(w, key, re.IGNORECASE) for w in VARIANT_WORDS):
                return None
            return entry
    return None


@dataclass(frozen=True)
class DevicePeaks:
    """What one device reached in a calibration.

    Attributes:
        device: the device's name (torch's CUDA device name, or the CPU model).
        kind: ``"cuda"`` or ``"cpu"``.
        driver: the NVIDIA driver's version as NVML gives it (``run.host.nvml_driver_version``, e.g.
            ``580.159.04``); None on a CPU or where NVML cannot be loaded.
        torch_version: torch's version string.
        measured_at: when (ISO 8601, UTC).
        method: one paragraph saying how each figure was measured.
        gemm_tflops: {dtype: best TFLOP/s} of the dense GEMM.
        gemm_tflops_median: {dtype: median TFLOP/s over the rounds}.
        gemm_sizes: {dtype: the GEMM's M = N = K}.
        bandwidth_gbs: device memory bandwidth in GB/s (bytes read + written per second), best round.
        bandwidth_gbs_median: the median round.
        copy_bytes: the size of the copied tensor.
        threads: the CPU threads torch used (CPU only).
    """
    device: str
    kind: str
    driver: Optional[str]
    torch_version: str
    measured_at: str
    method: str
    gemm_tflops: dict[str, float]
    gemm_tflops_median: dict[str, float]
    gemm_sizes: dict[str, int]
    bandwidth_gbs: float
    bandwidth_gbs_median: float
    copy_bytes: int
    threads: Optional[int] = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The file name this calibration is stored under: device, driver and torch version, made safe."""
        raw = f"{self.device}__{self.driver or 'nodriver'}__{self.torch_version}"
        return re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._-")[:180] or "device"

    def peak_tflops(self, dtype: str) -> Optional[float]:
        return self.gemm_tflops.get(dtype)

    @property
    def ridge_flop_per_byte(self) -> dict[str, float]:
        """{dtype: arithmetic intensity (FLOP/byte) where the GEMM ceiling meets the bandwidth ceiling}."""
        return {d: t * 1e12 / (self.bandwidth_gbs * 1e9) for d, t in self.gemm_tflops.items()
                if self.bandwidth_gbs > 0}

    def datasheet(self) -> Optional[dict[str, Any]]:
        return datasheet_for(self.device) if self.kind == "cuda" else None

    @property
    def source(self) -> str:
        """``"datasheet"`` for figures taken from a vendor's datasheet (:meth:`from_datasheet`), else
        ``"measured"``: the word every fraction of these peaks is labelled with."""
        return "datasheet" if self.method.startswith("datasheet:") else "measured"

    @classmethod
    def from_datasheet(cls, device_name: str) -> Optional["DevicePeaks"]:
        """The vendor's datasheet figures of ``device_name`` as peaks (``source == "datasheet"``), for a trace whose
        device has no calibration here (an imported trace, say); None for a device :data:`DATASHEETS` lacks."""
        sheet = datasheet_for(device_name)
        if sheet is None:
            return None
        return cls(device=device_name, kind="cuda", driver=None, torch_version="", measured_at="",
                   method=f"datasheet: {sheet['source']}", gemm_tflops=dict(sheet["tflops"]),
                   gemm_tflops_median=dict(sheet["tflops"]), gemm_sizes={}, bandwidth_gbs=sheet["bandwidth_gbs"],
                   bandwidth_gbs_median=sheet["bandwidth_gbs"], copy_bytes=0)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "DevicePeaks":
        """Read a stored calibration against :data:`CALIBRATION_SCHEMA`; raises ValueError naming the first field that
        is missing, of a wrong type or out of its range, with the value it holds (escaped, shortened)."""
        return cls(**_checked(data))


# --- what a stored calibration may hold ------------------------------------------------------------------------

# Far above what any device reaches (an H200: ~990 dense bf16 TFLOP/s, 4,800 GB/s), far below what breaks the
# arithmetic a page or a terminal does with them (a copy of 10**400 bytes in MiB is an OverflowError).
_TFLOPS = (float, *TFLOPS_LIMITS, "TFLOP/s")
_GBS = (float, *GBS_LIMITS, "GB/s")
CALIBRATION_SCHEMA: dict[str, Any] = {
    "text": {"device": 200, "kind": 8, "torch_version": 100, "measured_at": 64, "method": 4000},  # max characters
    "optional_text": {"driver": 100},
    "numbers": {"bandwidth_gbs": _GBS, "bandwidth_gbs_median": _GBS, "copy_bytes": (int, 1, 1 << 40, "bytes")},
    "optional_numbers": {"threads": (int, 1, 1 << 16, "threads")},
    # {dtype: number}; each dtype of the first has its entry in the others
    "per_dtype": {"gemm_tflops": _TFLOPS, "gemm_tflops_median": _TFLOPS, "gemm_sizes": (int, 1, 1 << 20, "(M = N = K)")},
}
"""What :meth:`DevicePeaks.from_dict` accepts. Numbers are ``(type, low, high, unit)``: a float is above ``low``
(so positive) and at most ``high``, hence finite (JSON's ``NaN`` and ``1e400`` are refused); an integer (never a
boolean) is from ``low`` to ``high``. The dtypes are those the device's kind calibrates (:data:`GPU_DTYPES`,
:data:`CPU_DTYPES`)."""


def _shown(value: Any) -> str:
    """A bad value as a message quotes it: ``repr`` (control characters escaped), shortened."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 30:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _allowed(spec: tuple) -> str:
    typ, low, high, unit = spec
    if typ is int:
        return f"an integer from {low:,} to {high:,} {unit}"
    return f"a number above {format_count(low)} and at most {high:,.0f} {unit}"


def _fits(value: Any, spec: tuple) -> bool:
    typ, low, high, _unit = spec
    if isinstance(value, bool):
        return False
    if typ is int:
        return isinstance(value, int) and low <= value <= high
    return isinstance(value, (int, float)) and low < value <= high  # NaN compares false: refused


def _checked(data: Any) -> dict[str, Any]:
    """``data`` checked against :data:`CALIBRATION_SCHEMA`, as :class:`DevicePeaks`'s fields; ValueError otherwise."""
    if not isinstance(data, dict):
        raise ValueError(f"a calibration must be a JSON object, got {type(data).__name__}")
    schema = CALIBRATION_SCHEMA
    out: dict[str, Any] = {}

    def present(name: str, optional: bool) -> bool:
        if name not in data and not optional:
            raise ValueError(f"calibration field {name!r} is missing")
        if data.get(name) is None and optional:
            out[name] = None
            return False
        return True

    for name, limit in {**schema["text"], **schema["optional_text"]}.items():
        if not present(name, name in schema["optional_text"]):
            continue
        value = data[name]
        if not isinstance(value, str):
            raise ValueError(f"calibration field {name!r} has the wrong type ({type(value).__name__})")
        if len(value) > limit:
            raise ValueError(f"calibration field {name!r} is over {limit} characters ({len(value):,})")
        out[name] = value
    if out["kind"] not in ("cuda", "cpu"):
        raise ValueError(f"calibration field 'kind' must be 'cuda' or 'cpu', got {_shown(out['kind'])}")
    for name, spec in {**schema["numbers"], **schema["optional_numbers"]}.items():
        if not present(name, name in schema["optional_numbers"]):
            continue
        value = data[name]
        if not _fits(value, spec):
            raise ValueError(f"calibration field {name!r} must be {_allowed(spec)}, got {_shown(value)}")
        out[name] = spec[0](value)
    dtypes = GPU_DTYPES if out["kind"] == "cuda" else CPU_DTYPES
    first = next(iter(schema["per_dtype"]))
    for name, spec in schema["per_dtype"].items():
        present(name, False)
        table = data[name]
        if not isinstance(table, dict):
            raise ValueError(f"calibration field {name!r} has the wrong type ({type(table).__name__})")
        for d, value in table.items():
            if d not in dtypes:
                raise ValueError(f"calibration field {name!r} has a dtype {_shown(d)} that is not one of "
                                 f"{', '.join(dtypes)} (a {out['kind']} calibration's)")
            if not _fits(value, spec):
                raise ValueError(f"calibration field {name!r} must map each dtype to {_allowed(spec)}, got "
                                 f"{_shown(value)} for {d}")
        if name == first:
            if not table:
                raise ValueError(f"calibration field {name!r} has no dtype")
        else:
            for d in out[first]:  # every dtype measured has its median and its size
                if d not in table:
                    raise ValueError(f"calibration field {name!r} has no entry for {d} (which {first!r} has)")
        out[name] = {d: spec[0](v) for d, v in table.items()}
    extra = data.get("extra") or {}
    if not isinstance(extra, dict):
        raise ValueError("calibration field 'extra' must be an object")
    out["extra"] = extra
    return out


class PeakBook:
    """The calibrations kept in a run store's ``.calibrations/`` folder, one JSON file per (device, driver, torch)."""

    MAX_BYTES = 1 << 20  # a calibration is 2 KiB
    MAX_DEPTH = 8  # it nests 2 levels

    def __init__(self, root: os.PathLike | str) -> None:
        self.folder = Path(root) / ".calibrations"

    def save(self, peaks: DevicePeaks) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{peaks.key}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(peaks.to_dict(), indent=1))
        os.replace(tmp, path)
        return path

    def all(self) -> tuple[list[DevicePeaks], list[tuple[str, str]]]:
        """(calibrations newest first, [(file name, why it could not be read)]): each file read defensively
        (``files.read_json_object``: a directory, a FIFO, a link to a device or a file over ``MAX_BYTES`` is refused
        unread) and checked against :data:`CALIBRATION_SCHEMA`, so one bad file is listed, never raised."""
        good, bad = [], []
        if not self.folder.is_dir():
            return good, bad
        for p in sorted(self.folder.glob("*.json")):
            name = os.fsencode(p.name).decode("utf-8", "backslashreplace")  # bytes that are not UTF-8 as \xNN text
            data, why = read_json_object(p, name, self.MAX_BYTES, self.MAX_DEPTH)
            if why is None:
                try:
                    good.append(DevicePeaks.from_dict(data))
                    continue
                except ValueError as e:
                    why = str(e)
            bad.append((name, why[:200]))
        good.sort(key=lambda c: c.measured_at, reverse=True)
        return good, bad

    def find(self, device: str, driver: Optional[str] = None, torch_version: Optional[str] = None
             ) -> Optional[DevicePeaks]:
        """The newest calibration of ``device`` (and ``driver``/``torch_version`` where given), or None."""
        for c in self.all()[0]:
            if c.device == device and (driver is None or c.driver == driver) \
                    and (torch_version is None or c.torch_version == torch_version):
                return c
        return None

    def for_run(self, run: _RunLike) -> Optional[DevicePeaks]:
        """The newest calibration of the device ``run`` ran on: its meta.json's device name, and torch version where
        it gives one; None for a run without a device name (an imported trace) or a device never calibrated."""
        dev = run.meta.get("device")
        if not isinstance(dev, dict) or not isinstance(dev.get("name"), str):
            return None
        torch_version = dev.get("torch") if isinstance(dev.get("torch"), str) else None
        return self.find(dev["name"], torch_version=torch_version)
