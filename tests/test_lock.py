"""Device lock: exclusive, visible to the waiter, fail-fast on request, released when the holder dies."""
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
