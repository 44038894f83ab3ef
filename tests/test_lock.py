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
