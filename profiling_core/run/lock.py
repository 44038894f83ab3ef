"""Device lock: two callers (two browser sessions, the CLI and the app) never profile one device at once.

One lock per device: ``cpu``, and one per GPU (``cuda0``, ``cuda1``, …: :func:`device_key` reads the GPU a run
will use from ``CUDA_VISIBLE_DEVICES``, as Ray gives each task its GPU), so runs on two GPUs of a machine go on at
once and two runs on one GPU never do.  An exclusive ``fcntl.flock`` on ``<lock dir>/<device>.lock``; the holder writes who it is into
``<device>.holder`` so a waiter can say what it waits for.  An flock belongs to the open file, not to the process:
the caller hands the lock's descriptor to its worker (``device_lock`` yields it), so the device stays locked while
the worker lives, even when the caller was killed first; the kernel drops the lock when the last process holding
it dies, so a crashed run never leaves the device locked.  The lock folder is shared by every run store on the
machine: ``PROFILING_LOCK_DIR`` or ``<tmp>/profiling_core-locks``.  A waiter polls, so a cancel reaches it while it
waits (``cancel_event``): the wait ends at once with a ``cancelled`` WorkerError, and nothing was started.  Nothing in it is opened through a symbolic
link (a shared temp folder lets anyone plant one): the holder file is made under a fresh random name
(``tempfile.mkstemp``: O_CREAT|O_EXCL|O_NOFOLLOW) and renamed into place; the lock file is opened O_NOFOLLOW.
A waiter reads the holder file through the store's reader of small files (``store.files``), never through a link:
a FIFO, a directory or a device planted in its place reads as an unknown holder instead of blocking the waiter.
What the holder wrote is its own text, passed on as it is: whoever prints it escapes it.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence

from ..errors import DeviceBusyError, ProfilingError, WorkerError
from ..store.files import read_json_object

ENV_LOCK_DIR = "PROFILING_LOCK_DIR"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def lock_dir() -> Path:
    d = Path(os.environ.get(ENV_LOCK_DIR) or Path(tempfile.gettempdir()) / "profiling_core-locks")
    d.mkdir(parents=True, exist_ok=True)
    return d


ENV_VISIBLE = "CUDA_VISIBLE_DEVICES"
ENV_ORDER = "CUDA_DEVICE_ORDER"
GPU_ENV = (ENV_VISIBLE, ENV_ORDER)
"""The variables that say which GPU a run's ``cuda`` is: the caller's are the worker's (``run_in_worker`` hands
them to a forked or persistent worker, whose own environment is its parent's)."""


def visible_gpu(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The GPU a run's ``cuda`` (``cuda:0``) is, as ``CUDA_VISIBLE_DEVICES`` names it: its first entry, stripped (an
    index such as ``1``, a GPU UUID ``GPU-…`` or a prefix of one, a MIG id ``MIG-…``); ``"0"`` when the variable is
    unset. None when it hides every GPU: set but empty, or a first entry CUDA does not read as a GPU (``-1``,
    ``none``), as torch's own reading of the variable says."""
    env = os.environ if environ is None else environ
    value = env.get(ENV_VISIBLE)
    if value is None:
        return "0"
    first = value.split(",")[0].strip()
    if first.startswith(("GPU-", "MIG-")):
        return first
    m = re.match(r"[+-]?\d+", first)  # CUDA reads an entry's leading integer; a negative one ends the list
    if m is None or int(m.group()) < 0:
        return None
    return str(int(m.group()))


def gpu_key(entry: str, gpus: Optional[Sequence[Mapping]] = None, order: Optional[str] = None) -> Optional[str]:
    """The lock of the GPU that ``entry`` (from :func:`visible_gpu`) names: ``cuda<i>`` for the GPU CUDA numbers
    ``i``. A UUID (or a unique prefix of one) is turned into that number through ``gpus`` (NVML's list,
    ``host.nvml_gpus()``: index, uuid, name) where NVML's order is CUDA's: ``order`` (``CUDA_DEVICE_ORDER``) is
    ``PCI_BUS_ID``, or every GPU is of one model (CUDA's default order, fastest first, keeps the bus order among
    equals). Otherwise, and for a MIG id (an instance of its own), the key is ``cuda-`` and the id itself, its
    characters other than letters, digits and ``-`` made ``-``: the same GPU named once by number and once by
    UUID then has two locks, which cannot be told apart without initialising CUDA. None when NVML knows the GPUs
    and ``entry`` names none of them (CUDA then shows no GPU either)."""
    if entry.isdecimal():
        if gpus is not None and int(entry) >= len(gpus):
            return None
        return f"cuda{int(entry)}"
    if entry.startswith("GPU-") and gpus is not None:
        found = [g for g in gpus if str(g.get("uuid", "")).lower().startswith(entry.lower())]
        if len(found) != 1:
            return None
        if order == "PCI_BUS_ID" or len({g.get("name") for g in gpus}) == 1:
            return f"cuda{found[0]['index']}"
        entry = str(found[0]["uuid"])
    return "cuda-" + re.sub(r"[^A-Za-z0-9-]+", "-", entry)[:96]


def device_key(device: str) -> str:
    """The lock a config's device maps to on this machine: ``cpu``, or the GPU its run will use (``cuda0``,
    ``cuda1``, …: :func:`gpu_key` of :func:`visible_gpu`), so runs on two GPUs of one machine do not wait for each
    other and two runs on one GPU, however ``CUDA_VISIBLE_DEVICES`` names it, do. ``auto`` means the GPU when this
    machine has an NVIDIA driver. A run whose ``CUDA_VISIBLE_DEVICES`` hides every GPU runs on the CPU (``auto``)
    or fails (``cuda``): ``cpu``. Never initialises CUDA; NVML is asked only to read a UUID."""
    if device == "cpu":
        return "cpu"
    if device != "cuda" and not os.path.exists("/dev/nvidiactl"):
        return "cpu"
    entry = visible_gpu()
    if entry is None:
        return "cpu"
    gpus = None
    if not entry.isdecimal():
        from .host import nvml_gpus
        gpus = nvml_gpus()
    return gpu_key(entry, gpus, os.environ.get(ENV_ORDER)) or "cpu"


HOLDER_MAX_BYTES = 4096  # {"pid": ..., "what": ..., "since": ...}


def holder(device: str) -> dict | None:
    """What the holder of ``device``'s lock wrote about itself (``pid``, ``what``, ``since``), or None where its
    holder file cannot be read: read through the store's one reader of small files, never through a link, so that
    a FIFO, a directory or a link to ``/dev/zero`` planted in the shared folder neither blocks nor floods a waiter."""
    data, why = read_json_object(lock_dir() / f"{device}.holder", "the device lock's holder file", HOLDER_MAX_BYTES,
                                 4, follow_symlinks=False)
    return None if why is not None else data


def _who(h: dict | None) -> str:
    """``pid N (what it runs)`` from a holder's record, with what is missing or of a wrong type as ``?`` and ``a
    run``. The text is the holder's own and may hold anything: whoever prints it escapes it."""
    h = h or {}
    pid = h.get("pid") if isinstance(h.get("pid"), int) and not isinstance(h.get("pid"), bool) else "?"
    what = h.get("what") if isinstance(h.get("what"), str) and h.get("what") else "a run"
    return f"pid {pid} ({what if len(what) <= 200 else what[:199] + '…'})"


@contextlib.contextmanager
def device_lock(device: str, *, what: str = "", wait: bool = True, timeout_s: Optional[float] = None,
                on_wait: Optional[Callable[[str], None]] = None, poll_s: float = 0.1,
                cancel_event: Optional[threading.Event] = None) -> Iterator[int]:
    """Hold the lock of ``device`` (a key from ``device_key``) for the duration of the block.

    Yields the lock's file descriptor: a process that inherits it holds the lock too, until it exits (the block's
    end closes this process's copy and never unlocks the file for the others).
    wait=False raises DeviceBusyError at once when another caller holds it; otherwise ``on_wait`` is called
    about once a second with a line saying who holds it, until the lock is free or ``timeout_s`` passes.
    A set ``cancel_event`` (before the lock is taken, or while waiting for it) raises WorkerError(kind="cancelled")
    within ``poll_s``: the caller then never starts what it would have run under the lock.
    """
    path = lock_dir() / f"{device}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o666)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise ProfilingError(f"the device lock file {path} is a symbolic link, which the lock refuses to follow: "
                             "remove it (or set PROFILING_LOCK_DIR to a folder of your own)") from None
    try:
        t0 = time.monotonic()
        last = -1.0
        cancelled = cancel_event.is_set if cancel_event is not None else (lambda: False)
        who = ""
        while True:
            if cancelled():
                raise WorkerError("cancelled", f"{what or 'the run'} was cancelled while it waited "
                                  f"{time.monotonic() - t0:.0f} s for device {device}"
                                  + (f" (held by {who})" if who else "") + "; nothing was started")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                who = _who(holder(device))
                if not wait:
                    raise DeviceBusyError(f"device {device} is busy: {who} is profiling on it") from None
                waited = time.monotonic() - t0
                if timeout_s is not None and waited > timeout_s:
                    raise DeviceBusyError(f"device {device} stayed busy for {waited:.0f} s: {who}") from None
                if on_wait and waited - last >= 1.0:
                    last = waited
                    on_wait(f"waiting for device lock '{device}' held by {who} ({waited:.0f} s)")
                if cancel_event is not None:
                    cancel_event.wait(poll_s)  # returns at once on a cancel
                else:
                    time.sleep(poll_s)
        tmp_fd, tmp = tempfile.mkstemp(prefix=f".{device}.holder.", dir=lock_dir())
        os.fchmod(tmp_fd, 0o644)  # waiters of other users may read who holds the device
        with os.fdopen(tmp_fd, "w") as f:
            f.write(json.dumps({"pid": os.getpid(), "what": what, "since": time.time()}))
        os.replace(tmp, lock_dir() / f"{device}.holder")
        try:
            yield fd
        finally:
            with contextlib.suppress(OSError):
                (lock_dir() / f"{device}.holder").unlink()
    finally:
        os.close(fd)  # the lock ends with the last descriptor of it: a worker that inherited one still holds it
