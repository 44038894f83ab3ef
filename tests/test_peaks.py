"""The device-peak calibration (profiling_core.run.calibration, profiling_core.store.peaks): real and small on this CPU, and its storage."""
from __future__ import annotations

import pytest

from profiling_core.run.calibration import measure_peaks
from profiling_core.store.peaks import DevicePeaks, PeakBook, datasheet_for


@pytest.fixture(scope="module")
def cpu_peaks():
    return measure_peaks("cpu", gemm_size=256, copy_bytes=16 << 20, rounds=3, warmup=1)


def test_a_cpu_calibration_measures_every_dtype_and_the_copy(cpu_peaks):
    import torch
    p = cpu_peaks
    assert p.kind == "cpu" and p.driver is None and p.torch_version == torch.__version__
    assert set(p.gemm_tflops) == {"fp32", "bf16", "fp16"} and p.gemm_sizes == {"fp32": 256, "bf16": 256, "fp16": 256}
    for d, best in p.gemm_tflops.items():
        # the best round is at least the median one; a 2-core CPU is far below a TFLOP/s
        assert 0 < p.gemm_tflops_median[d] <= best < 50
    assert 0 < p.bandwidth_gbs_median <= p.bandwidth_gbs and p.copy_bytes == 16 << 20
    assert p.threads == torch.get_num_threads() and f"{p.threads} CPU threads" in p.method
    # the method says what a CPU calibration measured: no TF32 row, no device-to-device copy (it said both)
    assert "tf32" not in p.method and "device-to-device" not in p.method
    assert "a copy_ in the CPU's memory of 16 MiB counting bytes read + written" in p.method
    assert p.datasheet() is None  # no datasheet for a CPU


def test_calibration_refuses_what_it_cannot_measure():
    with pytest.raises(ValueError, match=r"dtypes \['tf32'\] cannot be calibrated on cpu; allowed: fp32, bf16, fp16"):
        measure_peaks("cpu", dtypes=("tf32",))
    with pytest.raises(ValueError, match="device must be 'cuda' or 'cpu', got 'tpu'"):
        measure_peaks("tpu")


def test_the_book_keeps_one_file_per_device_driver_and_torch(tmp_path, cpu_peaks):
    book = PeakBook(tmp_path)
    assert book.all() == ([], [])
    path = book.save(cpu_peaks)
    assert path.parent == tmp_path / ".calibrations"
    assert book.find(cpu_peaks.device) == cpu_peaks
    assert book.find(cpu_peaks.device, torch_version="0.0") is None
    newer = DevicePeaks.from_dict({**cpu_peaks.to_dict(), "measured_at": "2999-01-01T00:00:00Z"})
    book.save(newer)  # the same device, driver and torch: replaces the file
    assert len(list((tmp_path / ".calibrations").glob("*.json"))) == 1 and book.find(cpu_peaks.device) == newer


@pytest.mark.parametrize("content,why", [
    ("{", "Expecting property name"),
    ("[]", "must hold a JSON object, got an array"),
    ('{"device": 1}', "calibration field 'device' has the wrong type (int)"),
    ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
    ("[]" * 10, "is not valid JSON"),
])
def test_a_broken_calibration_file_is_listed_not_raised(tmp_path, cpu_peaks, content, why):
    book = PeakBook(tmp_path)
    book.save(cpu_peaks)
    (tmp_path / ".calibrations" / "broken.json").write_text(content)
    good, bad = book.all()
    assert good == [cpu_peaks]
    assert [name for name, _ in bad] == ["broken.json"] and why in bad[0][1]


def test_wrong_field_values_are_named():
    base = {"device": "d", "kind": "cuda", "torch_version": "2", "measured_at": "t", "method": "m",
            "gemm_tflops": {"bf16": 1.0}, "gemm_tflops_median": {"bf16": 1.0}, "gemm_sizes": {"bf16": 8},
            "bandwidth_gbs": 1.0, "bandwidth_gbs_median": 1.0, "copy_bytes": 8}
    assert DevicePeaks.from_dict(base).gemm_tflops == {"bf16": 1.0}
    with pytest.raises(ValueError, match="'gemm_tflops' must map each dtype to a number above 0.000001 and at most "
                                         "100,000 TFLOP/s, got -1 for bf16"):
        DevicePeaks.from_dict({**base, "gemm_tflops": {"bf16": -1}})
    # (a peak no device has: 1e-300 TFLOP/s made fractions of peak near 1e302, "594 of 0 GB/s" in the JSON)
    with pytest.raises(ValueError, match="got 1e-300 for bf16"):
        DevicePeaks.from_dict({**base, "gemm_tflops": {"bf16": 1e-300}})
    with pytest.raises(ValueError, match="'bandwidth_gbs' must be a number above 0.000001"):
        DevicePeaks.from_dict({**base, "bandwidth_gbs": 1e-300})
    with pytest.raises(ValueError, match="'kind' must be 'cuda' or 'cpu', got 'tpu'"):
        DevicePeaks.from_dict({**base, "kind": "tpu"})
    with pytest.raises(ValueError, match="calibration field 'method' is missing"):
        DevicePeaks.from_dict({k: v for k, v in base.items() if k != "method"})
    # ridge point: where the bf16 ceiling meets the bandwidth ceiling, FLOP per byte
    p = DevicePeaks.from_dict({**base, "gemm_tflops": {"bf16": 800.0}, "bandwidth_gbs": 4000.0})
    assert p.ridge_flop_per_byte == {"bf16": 200.0}


def test_datasheets_match_whole_device_names_only():
    assert datasheet_for("NVIDIA H200")["tflops"]["bf16"] == 989.4
    assert datasheet_for("NVIDIA H200")["bandwidth_gbs"] == 4800.0
    assert datasheet_for("NVIDIA H2000") is None and datasheet_for("") is None
    assert datasheet_for("NVIDIA A100-SXM4-80GB")["tflops"]["tf32"] == 156.0


@pytest.mark.parametrize("name", ["NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                                  "NVIDIA A100-SXM4-40GB MIG 3g.20gb"])
def test_a_variant_no_sheet_holds_gets_no_datasheet_peaks(name):
    """An H100 NVL or a MIG slice names its family (H100, H200, A100) but runs at other rates: no sheet here holds
    them, so none is used (its family's SXM figures would judge it by another device's peaks)."""
    assert datasheet_for(name) is None


def test_a_variant_its_sheet_names_still_gets_it():
    assert datasheet_for("NVIDIA H100 PCIe")["source"] == "NVIDIA H100 datasheet (PCIe, dense)"
    assert datasheet_for("NVIDIA H100 80GB HBM3")["source"] == "NVIDIA H100 datasheet (SXM, dense)"
    assert datasheet_for("NVIDIA A100 80GB PCIe")["tflops"]["bf16"] == 312.0


def test_calibrate_runs_in_a_worker_behind_the_device_lock_and_stores_the_result(tmp_path):
    """The real path: runner.calibrate starts a worker (as an experiment does), which measures on this CPU; the
    result is stored, the staging folder is gone, and the store lists no run for it."""
    from profiling_core import RunStore
    from profiling_core.run.calibration import CalibrationJob
    from profiling_core.run.runner import calibrate
    store = RunStore(tmp_path / "runs")
    said = []
    p = calibrate(CalibrationJob(device="cpu", gemm_size=128, copy_bytes=8 << 20, rounds=2, warmup=1),
                  store=store, on_status=said.append)
    assert p.kind == "cpu" and p.gemm_sizes == {"fp32": 128, "bf16": 128, "fp16": 128}
    assert PeakBook(store.root).find(p.device) == p
    assert any("worker pid" in m for m in said)  # (its phase may pass between two polls: not asserted)
    assert list((store.root / ".staging").iterdir()) == [] and store.list() == []


@pytest.mark.slow
def test_a_cpu_run_is_named_as_its_calibration_so_the_calibration_takes_effect(tmp_path):
    """One device identity: a CPU run's meta.json names the device as the CPU's calibration does (its model name,
    not the machine type), so the store finds that calibration for the run."""
    from profiling_core import ExperimentConfig, RunStore, run_experiment
    from profiling_core.run.calibration import CalibrationJob
    from profiling_core.run.host import cpu_model
    from profiling_core.run.runner import calibrate
    store = RunStore(tmp_path / "runs")
    p = calibrate(CalibrationJob(device="cpu", gemm_size=128, copy_bytes=8 << 20, rounds=1, warmup=0), store=store)
    run = run_experiment(ExperimentConfig(size=64, device="cpu", warmup=0, active=1), store=store)
    name = run.meta["device"]["name"]
    assert name == p.device == cpu_model() and name not in ("x86_64", "aarch64", "")
    assert PeakBook(store.root).find(name) == p


def test_a_calibration_job_refuses_bad_knobs():
    from profiling_core.errors import ConfigError
    from profiling_core.run.calibration import CalibrationJob
    with pytest.raises(ConfigError, match="gemm_size must be an integer from 64 to 32768, or null, got 7"):
        CalibrationJob(gemm_size=7)
    with pytest.raises(ConfigError, match="device must be one of 'auto', 'cuda', 'cpu', got 'gpu'"):
        CalibrationJob(device="gpu")
