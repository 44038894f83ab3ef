"""Device lock: exclusive, visible to the waiter, fail-fast on request, released when the holder dies."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from profiling_core import DeviceBusyError, ProfilingError
from profiling_core.run.lock import device_lock


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PROFILING_LOCK_DIR", str(tmp_path / "locks"))


def test_second_caller_waits_and_sees_who_holds_it():
    order, messages = [], []
    held = threading.Event()

    def first():
        with device_lock("cpu", what="run A"):
            held.set()
            order.append("A in")
            time.sleep(1.5)
            order.append("A out")

    t = threading.Thread(target=first)
    t.start()
    held.wait()
    with device_lock("cpu", what="run B", on_wait=messages.append):
        order.append("B in")
    t.join()
    assert order == ["A in", "A out", "B in"]
    assert messages and "held by pid" in messages[0] and "run A" in messages[0]


def test_fail_fast_and_timeout():
    with device_lock("cuda", what="holder"):
        with pytest.raises(DeviceBusyError, match="device cuda is busy: pid .* \\(holder\\) is profiling on it"):
            with device_lock("cuda", wait=False):
                pass
        with pytest.raises(DeviceBusyError, match="stayed busy"):
            with device_lock("cuda", timeout_s=0.3):
                pass


def test_lock_of_a_killed_holder_is_released(tmp_path):
    code = ("import time; from profiling_core.run.lock import device_lock\n"
            "with device_lock('cpu', what='doomed'):\n    print('held', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"held"
    with pytest.raises(DeviceBusyError):
        with device_lock("cpu", wait=False):
            pass
    p.kill()
    p.wait()
    with device_lock("cpu", wait=False):
        pass


def test_holder_file_never_follows_a_planted_symlink(tmp_path):
    """The lock folder is shared (a temp folder by default): a link planted where the holder file is written must
    not make the lock write through it."""
    from profiling_core.run.lock import holder, lock_dir
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    # the name the holder's temporary copy used to have (predictable: the pid), and the holder's own name
    for name in (f"cpu.holder.{os.getpid()}", "cpu.holder"):
        os.symlink(victim, lock_dir() / name)
    with device_lock("cpu", what="run A"):
        assert holder("cpu")["what"] == "run A"
    assert victim.read_text() == "precious\n"


def test_a_symlinked_lock_file_is_refused(tmp_path):
    from profiling_core.run.lock import lock_dir
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.symlink(victim, lock_dir() / "cpu.lock")
    with pytest.raises(ProfilingError, match="cpu.lock is a symbolic link, which the lock refuses to follow"):
        with device_lock("cpu"):
            pass
    assert victim.read_text() == "precious\n"


def test_a_process_that_inherits_the_lock_holds_it_until_it_exits():
    """The caller hands the lock to its worker: after the caller's block ends (or the caller dies), the device
    stays locked until the worker exits too."""
    with device_lock("cpu", what="caller") as fd:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=[fd])
    try:
        with pytest.raises(DeviceBusyError):
            with device_lock("cpu", wait=False):
                pass
    finally:
        child.kill()
        child.wait()
    with device_lock("cpu", wait=False):
        pass


# ------------------------------------------------------------------------------ a cancel while the device is busy
def _entry_points():
    """Each way to run something behind the device lock, with a cancel event: (name, call(store, cancel, status))."""
    from profiling_core import ExperimentConfig, calibrate, run_experiment, run_sweep
    from profiling_core.run import CalibrationJob
    cfg = ExperimentConfig(size=32, dtype="fp32", device="cpu", wait=0, warmup_steps=0, active=1)
    return {
        "run": lambda store, cancel, status: run_experiment(cfg, store=store, cancel_event=cancel, on_status=status),
        "forked run": lambda store, cancel, status: run_experiment(cfg, store=store, cancel_event=cancel,
                                                                   on_status=status, prestart=1),
        "sweep": lambda store, cancel, status: run_sweep([cfg, cfg], store=store, cancel_event=cancel,
                                                         on_status=status),
        "calibration": lambda store, cancel, status: calibrate(CalibrationJob(device="cpu"), store=store,
                                                               cancel_event=cancel, on_status=status),
    }


@pytest.mark.parametrize("entry", ["run", "forked run", "sweep", "calibration"])
def test_a_cancel_reaches_a_run_waiting_for_the_device(tmp_path, entry):
    """The device is held (by this test); a run waits for it; a cancel ends the wait at once with a 'cancelled'
    outcome, and no worker is ever started (its status lines never mention one; nothing lands in the store). The bug
    this guards against waited until the device was free, then started a worker only to kill it."""
    from profiling_core import RunStore, WorkerError
    store = RunStore(tmp_path / "runs")
    cancel, statuses, outcome = threading.Event(), [], {}
    call = _entry_points()[entry]

    def go():
        try:
            outcome["result"] = call(store, cancel, statuses.append)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome["error"] = exc
        outcome["ended"] = time.monotonic()

    with device_lock("cpu", what="the test holding the device"):
        t = threading.Thread(target=go, daemon=True)
        t.start()
        deadline = time.monotonic() + 30
        while not any(m.startswith("waiting for device lock 'cpu'") for m in statuses):
            assert t.is_alive() and time.monotonic() < deadline, (statuses, outcome)
            time.sleep(0.05)
        cancelled_at = time.monotonic()
        cancel.set()
        t.join(10)  # the old wait ignored the cancel for as long as the device stayed busy
        ended_while_busy = not t.is_alive()
    t.join(120)  # released: the old wait went on to start a worker and kill it
    assert ended_while_busy, f"the run went on waiting for the device after its cancel: {statuses}"
    assert outcome["ended"] - cancelled_at < 10
    if entry == "sweep":
        res = outcome["result"]
        assert res.cancelled and res.runs == [] and res.errors == []
        assert len(res.skipped) == 2  # both configs are accounted for: the one cancelled while waiting, the next
    else:
        err = outcome["error"]
        assert isinstance(err, WorkerError) and err.kind == "cancelled", repr(err)
        assert "was cancelled while it waited" in err.message and "for device cpu (held by pid" in err.message
        assert err.message.endswith("(the test holding the device)); nothing was started")
    assert not [m for m in statuses if "worker" in m], statuses
    assert store.list() == [] and list((store.root / ".staging").iterdir()) == []


# ------------------------------------------------------------------------------ one lock per GPU
UUID_A = "GPU-8f3c1a2b-0000-1111-2222-333344445555"
UUID_B = "GPU-8f3d9e8f-6666-7777-8888-999900001111"
H200S = [{"index": 0, "uuid": UUID_A, "name": "NVIDIA H200"}, {"index": 1, "uuid": UUID_B, "name": "NVIDIA H200"}]


@pytest.mark.parametrize("value,entry", [
    (None, "0"),  # unset: every GPU visible, the run's cuda is GPU 0
    ("1", "1"), (" 2 , 0", "2"), ("3,1", "3"), ("+1", "1"), ("01", "1"),
    (UUID_A, UUID_A), ("GPU-8f3c", "GPU-8f3c"), (f"{UUID_B},0", UUID_B),
    ("MIG-5c2a0f1e-aaaa-bbbb-cccc-ddddeeeeffff", "MIG-5c2a0f1e-aaaa-bbbb-cccc-ddddeeeeffff"),
    ("", None), (" ", None), ("-1", None), ("none", None), ("NoDevFiles", None), (",1", None),
])
def test_visible_gpu_reads_the_first_entry_of_cuda_visible_devices(value, entry):
    from profiling_core.run.lock import visible_gpu
    assert visible_gpu({} if value is None else {"CUDA_VISIBLE_DEVICES": value}) == entry


@pytest.mark.parametrize("entry,gpus,order,key", [
    ("0", None, None, "cuda0"), ("7", None, None, "cuda7"),
    ("1", H200S, None, "cuda1"), ("2", H200S, None, None),  # NVML knows 2 GPUs: a third is no GPU
    # a UUID, or a unique prefix of one, is the GPU of that number: the same lock as its index
    (UUID_B, H200S, None, "cuda1"), ("GPU-" + UUID_A[4:].upper(), H200S, None, "cuda0"), ("GPU-8f3d", H200S, None, "cuda1"),
    ("GPU-8f3", H200S, None, None),  # a prefix of both: CUDA takes it for no GPU
    ("GPU-ffff", H200S, None, None),
    # without NVML the UUID is its own lock
    (UUID_B, None, None, "cuda-" + UUID_B),
    # GPUs of two models: CUDA's default order (fastest first) may not be NVML's, unless it is told the bus order
    (UUID_B, [H200S[0], {**H200S[1], "name": "NVIDIA A100"}], None, "cuda-" + UUID_B),
    (UUID_B, [H200S[0], {**H200S[1], "name": "NVIDIA A100"}], "PCI_BUS_ID", "cuda1"),
    ("MIG-5c2a0f1e-aaaa-bbbb-cccc-ddddeeeeffff", H200S, None, "cuda-MIG-5c2a0f1e-aaaa-bbbb-cccc-ddddeeeeffff"),
    ("MIG-GPU-8f3c1a2b/1/0", None, None, "cuda-MIG-GPU-8f3c1a2b-1-0"),  # the old MIG form: no '/' in a file name
])
def test_gpu_key_names_the_gpu_however_it_is_written(entry, gpus, order, key):
    from profiling_core.run.lock import gpu_key
    assert gpu_key(entry, gpus, order) == key


@pytest.mark.parametrize("value,key", [(None, "cuda0"), ("0", "cuda0"), ("1", "cuda1"), ("1,0", "cuda1"),
                                       ("", "cpu"), ("-1", "cpu")])
def test_device_key_of_a_cuda_run_is_its_gpu(monkeypatch, value, key):
    from profiling_core.run.lock import device_key
    if value is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert device_key("cuda") == key
    assert device_key("cpu") == "cpu"  # a CPU run's lock is the CPU's, whatever GPU is visible


def test_device_key_of_auto_is_the_cpu_without_an_nvidia_driver(monkeypatch):
    from profiling_core.run.lock import device_key
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert device_key("auto") == ("cuda1" if os.path.exists("/dev/nvidiactl") else "cpu")


def test_runs_on_two_gpus_do_not_wait_for_each_other_and_two_on_one_do(tmp_path, monkeypatch):
    """GPU 1 is held. A CUDA run given GPU 0 goes past the lock to its worker (which, on a machine without CUDA,
    says so); one given GPU 1, by number or as the first of several, finds the device busy."""
    from profiling_core import ExperimentConfig, RunStore, WorkerError, run_experiment
    store = RunStore(tmp_path / "runs")
    cfg = ExperimentConfig(size=32, dtype="fp32", device="cuda", wait=0, warmup_steps=0, active=1)
    with device_lock("cuda1", what="a run on GPU 1"):
        for busy in ("1", "1,0"):
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", busy)
            with pytest.raises(DeviceBusyError, match=r"device cuda1 is busy: pid \d+ \(a run on GPU 1\)"):
                run_experiment(cfg, store=store, wait_for_device=False)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        statuses = []
        try:
            run = run_experiment(cfg, store=store, wait_for_device=False, on_status=statuses.append)
        except WorkerError as exc:  # no CUDA here: the worker ran and said so
            assert exc.kind == "device" and "torch.cuda.is_available() is False" in exc.message, exc
        else:  # a machine with a GPU: the run is GPU 0's
            assert run.meta["device_lock"] == "cuda0" and run.meta["device"]["visible_devices"] == "0"
        assert any("worker pid" in m for m in statuses), statuses  # it went past the lock to a worker


SEE_ENV = '''
import json, os
import torch

def make_step(device, dtype):
    with open(SEEN_FILE, "a") as f:
        f.write(json.dumps(os.environ.get("CUDA_VISIBLE_DEVICES")) + "\\n")
    x = torch.ones(2, 2)
    return (lambda a: a + 1), (x,)
'''


def test_a_forked_run_uses_the_gpu_its_caller_locked(tmp_path, monkeypatch):
    """A forked run has the fork server's environment, made when the server started: a caller given another GPU
    since (a Ray worker process runs one task after another, each with its own CUDA_VISIBLE_DEVICES) must still run
    on the GPU its lock names. The run's own code reads the variable."""
    from profiling_core import ExperimentConfig, RunStore, run_experiment
    script = tmp_path / "see_env.py"
    seen = tmp_path / "seen.txt"
    script.write_text(f"SEEN_FILE = {str(seen)!r}\n" + SEE_ENV)  # not through the environment: the fork
    # server's may be older than this test (made by an earlier one of this process)
    store = RunStore(tmp_path / "runs")
    cfg = ExperimentConfig.for_workload("script", {"path": str(script)}, dtype="fp32", device="cpu", wait=0,
                                        warmup_steps=0, active=1)
    for value in ("5", "7,2", None):
        if value is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        run_experiment(cfg, store=store, prestart=1)
    assert [json.loads(line) for line in seen.read_text().splitlines()] == ["5", "7,2", None]
