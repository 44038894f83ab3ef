"""Worker processes: every experiment runs in a fresh Python process (a warm one, when asked, in a persistent one).

A fresh process makes a cold run honestly cold: no CUDA context, no cuBLAS handle, no reused compile cache
in memory.  Protocol:

- the parent makes a staging folder holding ``config.json`` and starts ``python -m profiling_core.run.worker DIR``,
  or (``prestart``) asks the *fork server* (``--zygote``: a process that imported torch, torch._dynamo and
  Inductor once and never touched CUDA) to fork a new process for DIR — as cold as a fresh interpreter
  (no CUDA context, no cuBLAS handle, nothing compiled), without paying seconds of imports per run;
- the worker gets a *channel*: one end of a Unix socket pair whose other end only the parent holds.  It dies
  with its parent through it (``_watch_parent``), and reports a failure through it as one JSON line
  ({kind, message}): a socket needs no disk, so the reason of a disk-full failure reaches the parent too;
- the worker also inherits the descriptors the parent holds for the run (the device lock and the staging
  folder's owner lock) and keeps them until it exits, so both cover the worker's whole life;
- the worker writes ``trace.json``, ``table.txt`` and then ``result.json`` (timings and device facts); its
  stderr goes to ``worker.log``;
- the parent enforces the timeout (the whole process group is killed), and turns every failure — an error the
  worker reported, a crash, a signal, a timeout, a cancellation — into a ``WorkerError`` with the tail of the log;
- a caller that asks for it (``process="persistent"``) sends warm eager runs to a *persistent worker* instead
  (``_serve_main``: one per device and caller, forked from the fork server or a fresh interpreter), which runs
  them one after another in the same process, its CUDA context kept; it gets each run's staging folder, channel
  and locks in a message, runs it as a new process would (``_child_main``), sets back what a run may change
  before the next (``loop.ProcessSettings``), and dies on any failure, timeout or cancel, or with its caller.
  ``persistent_refusal`` names the runs that still get a new process (cold, compiled, scripts, calibrations).

Subprocess hygiene follows perfetto's TraceProcessor: stdout to a file, stderr to a file, the child in its own
process group, killed on any failure.
"""
from __future__ import annotations

import _thread
import collections
import contextlib
import errno
import functools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..config import ExperimentConfig
from ..errors import WorkerError

CONFIG_FILE = "config.json"
GPU_ENV_FILE = "gpu_env.json"
"""The caller's ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` (null: unset), which its device lock was chosen
by: a forked or persistent worker has its parent's environment, not the caller's (a Ray worker process is given
another GPU per task), so the run sets them from here before CUDA starts."""
RESULT_FILE = "result.json"
PHASE_FILE = "phase"
"""The phase the worker is in (a timing name such as ``warmup_s``), rewritten as each begins; its parent reads it."""
PHASE_WORDS = {"device_init_s": "initialising the device", "tensors_s": "building the workload and its tensors",
               "compile_setup_s": "setting up torch.compile", "warmup_s": "warm-up calls",
               "profile_s": "profiling", "export_s": "writing the trace",
               "calibrate_s": "timing GEMMs and a copy"}


def _receive(sock) -> tuple[bytes, list[int]]:
    """One request of the caller on ``sock``: its text and the descriptors sent with it (up to 16); empty text when
    the caller closed its end. A signal that interrupts the wait is waited through."""
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(sock, 8192, 16)
            return msg, fds
        except InterruptedError:
            continue


def _write_phase(staging: Path, name: str) -> None:
    tmp = staging / f".{PHASE_FILE}.tmp"
    tmp.write_text(name)
    os.replace(tmp, staging / PHASE_FILE)  # the reader sees a whole name, never half of one
LOG_FILE = "worker.log"
SPAWN_ENV = "PROFILING_CORE_SPAWN_T"


# ------------------------------------------------------------------------------------ the worker's session
def _session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` (Linux's /proc; zombies have exited and hold nothing), else []."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdecimal():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[0] not in (b"Z", b"X") and int(fields[3]) == sid:
            members.append(int(entry))
    return members


def _kill_session(sid: int) -> None:
    """SIGKILL every process of the worker's session ``sid``: its process group (``sid`` too) and any process of
    it that moved to a group of its own (setpgid).  The caller's own process is spared."""
    me = os.getpid()
    for pid in _session_members(sid):
        if pid != me:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    if os.getpgid(0) != sid:  # a persistent worker ends its own session's other members: not its own group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, signal.SIGKILL)


def _end_session(sid: int, timeout_s: float = 10.0) -> None:
    """End what a finished worker (the leader of session ``sid``, exited but not yet reaped, so its number cannot be
    reused) left running, success or not: the children of a user's script, a compile worker.  Returns once none
    of them lives, so the device lock and the staging folder's owner lock they may have inherited are free when
    the caller's run ends (or after ``timeout_s``, for a process stuck in the kernel).  A persistent worker calls
    it on its own session after each run: everything but itself."""
    deadline = time.monotonic() + timeout_s
    me = os.getpid()
    if not [pid for pid in _session_members(sid) if pid != me]:
        return  # nothing lives in it, so nothing can start there any more: one look at /proc is enough
    _kill_session(sid)
    while [pid for pid in _session_members(sid) if pid != me] and time.monotonic() < deadline:
        time.sleep(0.01)
        _kill_session(sid)


# ----------------------------------------------------------------------------------------- child side
def _classify(exc: BaseException, phase: str) -> str:
    name = type(exc).__name__
    text = str(exc)
    if isinstance(exc, WorkerError):
        return exc.kind
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "store"  # the staging folder's disk is full: the run cannot be written
    if type(exc).__name__ == "DoesNotFitError":
        return "does_not_fit"
    if name == "OutOfMemoryError" or "out of memory" in text.lower():
        return "oom"
    mod = type(exc).__module__ or ""
    if "_dynamo" in mod or "_inductor" in mod or name in ("BackendCompilerFailed", "InductorError"):
        return "compile"
    if "CUDA" in text or "cuBLAS" in text or "CUBLAS" in text:
        return "cuda"
    if phase == "warmup_s" and "compile" in text.lower():
        return "compile"
    return "error"


def _watch_parent(channel: int) -> None:
    """Die with the parent: a thread waits on the channel, whose other end only the parent holds; it turns
    readable (end-of-file) once the parent is gone, however it died (SIGKILL included: the kernel closes its
    descriptors), and the thread SIGKILLs the worker's session (the worker leads its own; Inductor's compile
    workers and the children of a user's script are in it).

    A pipe watchdog (the channel is a socket, read as a pipe would be) rather than Linux's
    prctl(PR_SET_PDEATHSIG): that signal fires when the *thread* that forked the worker ends (the app starts runs
    from Streamlit script threads), for a forked run it would watch the fork server instead of the caller, and it
    exists on Linux only.  The watchdog works the same for both kinds of worker and on any POSIX system.  The
    parent never writes to the channel.

    The thread holds no Python frame while it waits: it runs C callables only (``deque`` consuming ``map`` over
    ``iter(poll, ...)``) until the channel turns readable, and only then calls Python (``_parent_gone``).
    torch's Python tracer (``with_stack``) records the frames every thread of the process holds when a profile
    starts; a ``threading.Thread`` waiting in Python would appear in every such run of a user's workload as this
    module's ``watch`` frame open for the whole profile (torch's own table gave it half of the run's self CPU
    time).
    """
    poller = select.poll()
    poller.register(channel, select.POLLIN)
    events = iter(poller.poll, None)  # poll() returns a list of events, never None: one item per wake-up
    _thread.start_new_thread(collections.deque, (map(functools.partial(_parent_gone, channel), events), 0))


def _parent_gone(channel: int, _events: object) -> None:
    """The channel turned readable: end-of-file or an error once the parent is gone (data, which the parent never
    sends, is read and ignored).  Then SIGKILL the worker's session, this process last."""
    try:
        if os.read(channel, 4096):
            return
    except OSError:
        pass
    if os.getsid(0) == os.getpid():
        _kill_session(os.getpid())  # its other members; then the group, this process with it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _keep(fds: Sequence[int]) -> None:
    """The descriptors from the parent (the channel, the run's locks) stay open until this process exits (nothing
    closes them) and out of the programs it starts (a compiler, Inductor's compile workers): the locks end with
    this process, not with a helper it left behind."""
    for fd in fds:
        os.set_inheritable(fd, False)


_HELD: list[int] = []
"""The run's locks this process holds now (a persistent worker: the current run's; empty between runs)."""
_DROP_REGISTERED = [False]


def _drop_held() -> None:
    fds, _HELD[:] = list(_HELD), []  # in a fork of a fork they are closed already, and their numbers may be reused
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _hold_alone(fds: Sequence[int]) -> None:
    """Called by the run's own process: the run's locks (``fds``) are held by it alone.  A fork of it (a script's
    ``os.fork``, a pool started by fork), which inherits every descriptor whatever ``_keep`` says, closes its copies
    at once, so even a child that leaves the worker's session (and so outlives ``_end_session``) cannot keep the
    device locked.  A persistent worker calls it with each run's locks, and with none between runs."""
    _HELD[:] = list(fds)
    if not _DROP_REGISTERED[0]:
        _DROP_REGISTERED[0] = True
        os.register_at_fork(after_in_child=_drop_held)


def _report_error(channel: Optional[int], err: dict) -> None:
    """Tell the parent why the run failed: one JSON line on the channel (a socket: it works with the disk full)."""
    if channel is None:  # started by hand, without a parent: the traceback on stderr says it
        return
    with contextlib.suppress(OSError):  # the parent is gone: nobody to tell
        os.write(channel, (json.dumps(err) + "\n").encode())


def _child_main(staging: Path, t_spawn: float, t_main: float, torch_import_s: float, prestarted: bool,
                channel: int | None = None, process: dict | None = None, import_paid_s: float = 0.0) -> int:
    """Run the job of ``staging`` in this process; 0 once its result.json is written, else 2 (the reason told on
    ``channel``).  ``t_spawn``: when the caller asked for this process (or, persistent, for this run);
    ``import_paid_s``: the imports this run paid itself (a fresh interpreter's torch); ``process``: which process
    ran it (``kind``, ``pid``, ``runs_before``), recorded in meta.json."""
    t_imports = time.perf_counter()
    from . import loop
    gpu_env = _apply_gpu_env(staging)

    timer = loop.Phase(on_start=lambda name: _write_phase(staging, name))
    timer.timings["process_start_s"] = round(max(0.0, t_main - t_spawn), 6) if t_spawn else None
    timer.timings["torch_import_s"] = round(torch_import_s, 6)
    import torch
    timer.overhead["start_s"] = timer.timings["process_start_s"] or 0.0
    timer.overhead["imports_s"] = round(import_paid_s + time.perf_counter() - t_imports, 6)
    cuda_was_initialized = torch.cuda.is_initialized()
    current = {"phase": "setup"}
    orig_run = timer.run

    def tracked(name, func):
        current["phase"] = name
        return orig_run(name, func)

    timer.run = tracked  # type: ignore[method-assign]
    # A fresh compile cache per run: nothing compiled by an earlier run is reused (honest cold compile), unless
    # the caller gave this warm run the store's shared cache (COMPILE_CACHES).
    shared, use_shared = _shared_cache_dir(staging)
    cache = shared if use_shared else staging / ".compile-cache"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    config = None
    try:
        job = json.loads((staging / CONFIG_FILE).read_text())
        if isinstance(job, dict) and job.get("job") == "calibrate":
            from .calibration import CalibrationJob
            facts = CalibrationJob.from_dict(job).run(timer)
        else:
            config = ExperimentConfig.from_dict(job)
            facts = loop.run_workload(config, staging, timer)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent
        with contextlib.suppress(OSError):  # stderr is worker.log, on the disk that may be full
            traceback.print_exc(file=sys.stderr)
        kind = _classify(exc, current["phase"])
        if isinstance(exc, WorkerError):
            msg = exc.message
        else:
            msg = f"{type(exc).__name__} during {current['phase'].removesuffix('_s')}: {exc}".strip()
            # the workload may know better (an attention backend that cannot run, the user's script raising)
            better = None
            if config is not None:  # BaseException too: a user's script may raise KeyboardInterrupt or its own
                from ..workloads import get_workload
                better = get_workload(config.workload).explain(exc, config.workload_knobs, current["phase"], kind)
            if better is not None:
                kind, msg = better
        if kind == "store":
            msg += f" (no room in the run store {staging.parent.parent}: free space there or use another store)"
        _report_error(channel, {"kind": kind, "message": msg[:2000]})
        return 2
    finally:
        if not use_shared:
            if shared is not None and config is not None and config.compile != "off":
                with contextlib.suppress(OSError):
                    _merge_cache(cache, shared)  # what this cold run compiled, for the warm runs after it
            shutil.rmtree(cache, ignore_errors=True)
    if config is not None and config.compile != "off":
        facts["compile_cache"] = {"kind": "shared" if use_shared else "fresh", **_compile_cache_counts()}
    facts["timings"] = timer.timings
    if isinstance(facts.get("device"), dict) and facts["device"].get("type") == "cuda":
        facts["device"]["visible_devices"] = gpu_env
    facts["prestarted"] = prestarted
    facts["cuda_initialized_before_run"] = cuda_was_initialized
    facts["process"] = process or {"kind": "forked" if prestarted else "fresh", "pid": os.getpid(), "runs_before": 0}
    facts["overhead_s"] = dict(timer.overhead)
    facts["result_written_at"] = time.time()  # the caller's end_s: from here until it has the result
    try:
        _write_json(staging / RESULT_FILE, facts)
    except OSError as exc:
        _report_error(channel, {"kind": _classify(exc, "saving"),
                                "message": f"could not write {RESULT_FILE}: {exc}"})
        return 2
    return 0


def _shared_cache_dir(staging: Path) -> tuple[Optional[Path], bool]:
    """The shared compile cache the caller named in ``staging`` (COMPILE_CACHE_FILE: ``use DIR`` for a warm run,
    ``give DIR`` for a cold one, which compiles from an empty cache and then adds what it compiled), and whether
    this run uses it; (None, False) without one."""
    try:
        how, _, where = (staging / COMPILE_CACHE_FILE).read_text().strip().partition(" ")
    except OSError:
        return None, False
    if how not in ("use", "give") or not where:
        return None, False
    return Path(where), how == "use"


def _merge_cache(src: Path, dst: Path) -> None:
    """Add the files of the compile cache ``src`` to the shared cache ``dst``, keeping those ``dst`` has: each
    written under a temporary name and renamed into place, so a run reading ``dst`` meanwhile never sees half a
    file (Inductor's and Triton's caches are folders of content-addressed files, made to be shared this way)."""
    for path in src.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        target = dst / path.relative_to(src)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.copyfile(path, tmp)
        os.replace(tmp, target)


def _compile_cache_counts() -> dict:
    """How often this process's compiles found their graph in Inductor's caches (torch's own counters): the FX
    graph cache (Inductor's output code) and AOTAutograd's cache; zeros where torch keeps no such counter."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    ind, aot = counters.get("inductor", {}), counters.get("aot_autograd", {})
    return {"fx_graph_hits": int(ind.get("fxgraph_cache_hit", 0)), "fx_graph_misses": int(ind.get("fxgraph_cache_miss", 0)),
            "aot_autograd_hits": int(aot.get("autograd_cache_hit", 0)),
            "aot_autograd_misses": int(aot.get("autograd_cache_miss", 0))}


def _apply_gpu_env(staging: Path) -> Optional[str]:
    """Set this process's GPU variables to the caller's (``GPU_ENV_FILE``) while CUDA is untouched in it, so the
    run uses the GPU its device lock names; returns ``CUDA_VISIBLE_DEVICES`` as the run sees it. A process whose
    CUDA already started (a persistent worker after its first run) keeps its own: it serves one device key, and
    the same key is the same GPU."""
    import torch
    try:
        wanted = json.loads((staging / GPU_ENV_FILE).read_text())
    except (OSError, ValueError):
        wanted = None
    if isinstance(wanted, dict) and not torch.cuda.is_initialized():
        from .lock import GPU_ENV
        for name, value in wanted.items():
            if name not in GPU_ENV:
                continue
            if value is None:
                os.environ.pop(name, None)
            elif isinstance(value, str):
                os.environ[name] = value
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def _preimport(compile_too: bool) -> float:
    """Import what the run will import anyway, so it is measured as import (and, for the fork server, paid once).

    torch.profiler's first profile() imports torch._dynamo (seconds on a GPU host) and torch.compile() imports
    Inductor.  None of this touches CUDA: a forked run stays cold (checked per run: meta records whether CUDA was
    initialised before the run started).
    """
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.profiler  # noqa: F401

    from . import loop  # noqa: F401
    if compile_too:
        import torch._inductor.compile_fx  # noqa: F401
    return time.perf_counter() - t0


def _serve_main(requests: int, import_s: float, prestarted: bool, import_paid_s: float) -> int:
    """A persistent worker: run one warm run after another in this process, each asked for on ``requests``.

    A request is one message ``run <time sent> <staging dir>`` (SOCK_SEQPACKET) carrying the run's descriptors:
    its channel (for the failure report), then the locks it holds.  Before each run the settings a run may change
    are set back (``loop.ProcessSettings``; a run whose settings cannot be is refused); the run is the same code
    a new process runs (``_child_main``), its stderr in its own worker.log.  After it, whatever it started is
    ended (``_end_session`` on this process's session), the memory it cached given back, its descriptors closed
    (so its locks are free), and only then is ``done`` answered.  On any failure the worker reports it on the
    run's channel and exits: the next run gets a new process.  It ends when the caller closes ``requests``; it
    dies with the caller through the channel it was started with (``_watch_parent``)."""
    import gc

    import torch

    from . import loop
    settings = loop.ProcessSettings(torch)
    gc.freeze()  # what the imports made is never collected: the collection after each run sees only the run's
    t_ready = time.time()
    sock = socket.socket(fileno=requests)
    devnull = os.open(os.devnull, os.O_WRONLY)
    runs = 0
    while True:
        msg, fds = _receive(sock)
        if not msg:
            return 0  # the caller closed its end
        parts = msg.decode(errors="replace").split(" ", 2)
        if len(parts) != 3 or parts[0] != "run" or not fds:
            for fd in fds:
                os.close(fd)
            continue
        t_sent, staging = float(parts[1]), Path(parts[2])
        channel = fds[0]
        _keep(fds)
        _hold_alone(fds[1:])
        try:
            log = os.open(staging / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, 2)
            os.close(log)
            left = settings.restore(torch)
            if left:
                _report_error(channel, {"kind": "error", "message": "the persistent worker could not set back "
                                        + ", ".join(left) + " after its last run, so it does not run this one: "
                                        "run it with process='fresh'"})
                return 2
            # the first run waited for this process's imports (when it started them itself): imports, not start
            paid = 0.0 if runs else min(import_paid_s, max(0.0, t_ready - t_sent))
            rc = _child_main(staging, t_sent + paid, time.time(), import_s, prestarted, channel=channel,
                             process={"kind": "persistent", "pid": os.getpid(), "runs_before": runs},
                             import_paid_s=paid)
            if rc == 0:
                loop.release_run(torch)
        except BaseException as exc:  # noqa: BLE001 - the run fails, the worker with it
            with contextlib.suppress(OSError):
                traceback.print_exc(file=sys.stderr)
            _report_error(channel, {"kind": _classify(exc, "setup"),
                                    "message": f"the persistent worker failed: {type(exc).__name__}: {exc}"[:2000]})
            return 2
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(devnull, 2)
        if rc != 0:
            return rc
        _end_session(os.getpid())  # what the run started (a compile worker, a helper thread's child) ends with it
        _hold_alone([])
        for fd in fds:
            os.close(fd)
        runs += 1
        sock.send(b"done")


def _zygote_main(requests: int) -> int:
    """Fork server: import once (no CUDA), then fork one child per run asked for on the ``requests`` socket.

    Protocol: a request is one message ``<token> run <staging dir>`` on the socket (SOCK_SEQPACKET), carrying the
    run's descriptors (SCM_RIGHTS): its channel first, then the locks it holds; or ``<token> serve -`` with a
    channel and a socket of requests, for a persistent worker (``_serve_main``); on stdout: ``ready``, then
    ``started <token> <pid>`` and ``exited <token> <returncode>`` (negative: killed by that signal), said once the
    run's session is ended (``_end_session``: nothing it started still runs).  The child
    keeps the descriptors and the zygote closes its copies, so the child dies with the caller and holds the
    caller's locks as a fresh worker does.  The zygote ends when the caller closes the socket (or dies).  Each
    child is a new process in its own session with no CUDA context, no cuBLAS handle and nothing compiled: as
    cold as a fresh interpreter, without paying the imports again.  The zygote runs no torch op, so forking it
    is safe.
    """
    # Keep the CUDA runtime untouched while importing: torch.cuda.is_available() would otherwise call
    # cudaGetDeviceCount, after which a forked child may not use CUDA (torch refuses: "bad fork").
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import_s = _preimport(compile_too=True)
    if not _fork_is_safe():
        os.write(1, b"unsafe\n")
        return 3
    tokens: dict[int, str] = {}
    tokens_lock = threading.Lock()

    def say(line: str) -> None:
        os.write(1, (line + "\n").encode())  # one small write: atomic, no Python-level lock held at fork

    def reaper() -> None:
        while True:
            try:  # a run that exited, left unreaped (its number stays its own) until its session is ended
                pid = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT).si_pid
            except ChildProcessError:
                time.sleep(0.05)
                continue
            _end_session(pid)
            _, status = os.waitpid(pid, 0)
            rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            with tokens_lock:
                token = tokens.pop(pid, None)
            if token is not None:
                say(f"exited {token} {rc}")

    threading.Thread(target=reaper, daemon=True).start()
    sock = socket.socket(fileno=requests)
    say("ready")
    while True:
        msg, fds = _receive(sock)
        if not msg:
            break  # the caller closed its end or died
        parts = msg.decode(errors="replace").strip().split(" ", 2)
        if len(parts) != 3 or parts[1] not in ("run", "serve") or not fds or (parts[1] == "serve" and len(fds) != 2):
            for fd in fds:
                os.close(fd)
            continue
        token, kind, staging = parts
        _keep(fds)
        t_fork = time.time()
        with tokens_lock:
            pid = os.fork()
            if pid == 0:  # the run's own process
                try:
                    sock.close()
                    os.setsid()
                    _hold_alone(fds[1:] if kind == "run" else [])
                    _watch_parent(fds[0])
                    devnull = os.open(os.devnull, os.O_RDWR)
                    os.dup2(devnull, 0)
                    os.dup2(devnull, 1)
                    if kind == "serve":
                        os.dup2(devnull, 2)
                        rc = _serve_main(fds[1], import_s, True, 0.0)
                    else:
                        log = os.open(os.path.join(staging, LOG_FILE), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                                      0o644)
                        os.dup2(log, 2)
                        rc = _child_main(Path(staging), t_fork, time.time(), import_s, True, channel=fds[0])
                except BaseException:  # noqa: BLE001
                    traceback.print_exc()
                    rc = 70
                finally:
                    try:
                        sys.stderr.flush()
                    except Exception:  # noqa: BLE001
                        pass
                os._exit(rc)
            tokens[pid] = token
        for fd in fds:
            os.close(fd)  # the child has its own: the next child must not inherit this run's
        say(f"started {token} {pid}")
    return 0


def _fork_is_safe() -> bool:
    """Fork a probe: may a child of this process still initialise CUDA?"""
    import torch
    probe = getattr(torch._C, "_cuda_isInBadFork", None)
    if probe is None:
        return True
    pid = os.fork()
    if pid == 0:
        os._exit(1 if probe() else 0)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def main(argv: list[str] | None = None) -> int:
    """``DIR [--channel FD] [--hold FD,...]`` runs the experiment of DIR; ``--zygote FD`` is the fork server;
    ``--serve CHANNEL REQUESTS`` a persistent worker (``_serve_main``)."""
    t_main = time.time()
    argv = sys.argv[1:] if argv is None else argv
    t_spawn = float(os.environ.get(SPAWN_ENV, "0") or 0)
    if argv[:1] == ["--zygote"]:
        return _zygote_main(int(argv[1]))
    if argv[:1] == ["--serve"]:
        life, requests = int(argv[1]), int(argv[2])
        _keep([life, requests])
        _hold_alone([])
        _watch_parent(life)
        import_s = _preimport(False)
        return _serve_main(requests, import_s, False, import_s)
    staging = Path(argv[0])
    opts = dict(zip(argv[1::2], argv[2::2]))
    channel = int(opts["--channel"]) if "--channel" in opts else None
    held = [int(fd) for fd in opts.get("--hold", "").split(",") if fd]
    _keep(held + ([channel] if channel is not None else []))
    _hold_alone(held)
    if channel is not None:
        _watch_parent(channel)  # before the imports: they take seconds
    try:
        compile_too = json.loads((staging / CONFIG_FILE).read_text()).get("compile", "off") != "off"
    except (OSError, ValueError, AttributeError):
        compile_too = False
    import_s = _preimport(compile_too)
    return _child_main(staging, t_spawn, t_main, import_s, False, channel=channel, import_paid_s=import_s)


# ---------------------------------------------------------------------------------------- parent side
def _tail(path: Path, max_lines: int = 25, max_chars: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = text.splitlines()[-max_lines:]
    return "\n".join(lines)[-max_chars:]


def _child_env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _spawn(args: list[str], stdin, stdout, stderr, pass_fds: Sequence[int] = ()) -> subprocess.Popen:
    """A fresh interpreter running this module, in its own session; it learns its spawn time from the env."""
    env = _child_env()
    env[SPAWN_ENV] = repr(time.time())
    return subprocess.Popen([sys.executable, "-m", "profiling_core.run.worker", *args], stdin=stdin, stdout=stdout,
                            stderr=stderr, env=env, start_new_session=True, close_fds=True, pass_fds=pass_fds)


def _read_report(channel: socket.socket) -> Optional[dict]:
    """The failure the worker reported on its channel (read once it has exited), or None."""
    data = b""
    channel.setblocking(False)
    with contextlib.suppress(OSError):
        while chunk := channel.recv(65536):
            data += chunk
    for line in reversed(data.splitlines()):
        try:
            err = json.loads(line)
        except ValueError:
            continue
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err
    return None


def _kill(p) -> None:
    """SIGKILL the worker's whole session and reap it."""
    _kill_session(p.pid)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


class _Fresh:
    """A worker started as a fresh interpreter: Popen's ``wait``, which returns once the worker exited *and* its
    session is ended (``_end_session``), before the worker is reaped."""

    def __init__(self, popen: subprocess.Popen):
        self.popen = popen
        self.pid = popen.pid
        self.returncode: Optional[int] = None

    def wait(self, timeout: float) -> Optional[int]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    break
            except ChildProcessError:  # reaped already: its number may be another's now, so no session to end
                self.returncode = self.popen.wait()
                return self.returncode
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("worker", timeout)
            time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))
        _end_session(self.pid)
        self.returncode = self.popen.wait()
        return self.returncode


class ForkServer:
    """Parent side of the fork server (see ``_zygote_main``).  Thread-safe; started lazily or by ``warm()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._ready = threading.Event()
        self._runs: dict[str, dict] = {}
        self._counter = 0
        self.unsafe = False  # set when the zygote finds that its children could not use CUDA (or cannot start)
        self._sock: Optional[socket.socket] = None  # requests to the zygote (see _zygote_main)

    def warm(self) -> None:
        """Start the zygote if it is not running (its imports then happen in the background)."""
        with self._lock:
            if self.unsafe or (self._proc is not None and self._proc.poll() is None):
                return
            self._ready.clear()
            env = _child_env()
            try:
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            except OSError:  # no SOCK_SEQPACKET Unix sockets on this system: fresh interpreters only
                self.unsafe = True
                return
            if self._sock is not None:
                self._sock.close()
            self._sock = ours
            with theirs:
                self._proc = subprocess.Popen([sys.executable, "-m", "profiling_core.run.worker", "--zygote",
                                               str(theirs.fileno())],
                                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                              stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                                              close_fds=True, pass_fds=[theirs.fileno()])
            threading.Thread(target=self._read, args=(self._proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:
            parts = raw.decode(errors="replace").split()
            if parts == ["ready"]:
                self._ready.set()
            elif parts == ["unsafe"]:
                self.unsafe = True  # runs fall back to fresh interpreters
            elif len(parts) == 3 and parts[0] in ("started", "exited"):
                with self._lock:
                    run = self._runs.get(parts[1])
                if run is not None:
                    run[parts[0]] = int(parts[2])
                    run["event_" + parts[0]].set()
        # the zygote died: wake everyone waiting on it
        self._ready.clear()
        with self._lock:
            for run in self._runs.values():
                run.setdefault("exited", None)
                run["event_started"].set()
                run["event_exited"].set()

    def wait_ready(self, timeout: float) -> bool:
        """Block until the zygote has finished its imports (True) or ``timeout`` passes (False)."""
        return self._ready.wait(timeout)

    def submit(self, staging, fds: Sequence[int], timeout: float = 300.0, kind: str = "run") -> dict | None:
        """Fork a run for ``staging`` handing it ``fds`` (its channel, then the locks it holds); returns its record
        (``started`` pid, later ``exited`` code) or None when the zygote is not ready within ``timeout``.
        ``kind="serve"`` forks a persistent worker instead (``staging`` "-", ``fds`` its channel and requests)."""
        if self.unsafe:
            return None
        self.warm()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self.unsafe or time.monotonic() > deadline or self._proc is None or self._proc.poll() is not None:
                return None
        with self._lock:
            self._counter += 1
            token = f"r{self._counter}"
            run = {"event_started": threading.Event(), "event_exited": threading.Event()}
            self._runs[token] = run
            sock = self._sock
        try:
            socket.send_fds(sock, [f"{token} {kind} {staging}".encode()], list(fds))
        except (OSError, AttributeError):
            return None
        if not run["event_started"].wait(30) or run.get("started") is None:
            return None
        run["token"] = token
        return run

    def forget(self, run: dict) -> None:
        with self._lock:
            self._runs.pop(run.get("token", ""), None)

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        if proc is not None:
            _kill(proc)


_SERVER = ForkServer()


def fork_server() -> ForkServer:
    return _SERVER


class _Forked:
    """A forked run, with the subset of Popen's interface run_in_worker uses."""

    def __init__(self, run: dict):
        self.run = run
        self.pid = run["started"]
        self.returncode: Optional[int] = None

    def wait(self, timeout: float) -> Optional[int]:
        if not self.run["event_exited"].wait(timeout):
            raise subprocess.TimeoutExpired("forked run", timeout)
        self.returncode = self.run.get("exited")
        return self.returncode


# ------------------------------------------------------------------------------------- persistent workers
PROCESS_KINDS = ("fresh", "persistent")
"""What a caller may ask for: ``fresh``, a new process per run (a fresh interpreter or a fork of the fork
server); ``persistent``, warm eager runs in one process kept per device between runs (:func:`persistent_refusal`
says which runs; the others still get a new process)."""


def _one_of(field: str, value, allowed: tuple) -> str:
    """``value`` if it is one of ``allowed``, else a ConfigError naming ``field`` and quoting what is allowed."""
    if value not in allowed:
        from ..errors import ConfigError
        raise ConfigError(field, value, " or ".join(repr(k) for k in allowed))
    return value


def check_process(process) -> str:
    """``process`` if it is one of PROCESS_KINDS, else a ConfigError quoting it."""
    return _one_of("process", process, PROCESS_KINDS)


COMPILE_CACHES = ("fresh", "shared")
"""Where a compiled run's Inductor and Triton caches live.  ``fresh`` (the default): an empty cache of its own,
deleted after the run, so the compile it pays is a compile from scratch.  ``shared``: a *warm* compiled run uses the
run store's one cache (``<store>/.compile-cache``, :data:`SHARED_CACHE_DIR`), as a user's second start of a program
uses Inductor's cache on disk: its warm-up then compiles only what no earlier run left there (seconds less on a GPU
for a graph seen before; the profiled steps run the same generated code).  A cold run always compiles from an empty
cache of its own (:func:`shared_cache_refusal`), then adds what it compiled to the shared one, so the warm run of
the same config after it finds its graph.  meta.json's ``compile_cache`` says which cache a compiled run had and
how often Inductor found its graph there."""
SHARED_CACHE_DIR = ".compile-cache"
COMPILE_CACHE_FILE = "compile_cache_dir"
"""In a run's staging folder, written by the caller when the shared cache was asked for: ``use DIR`` (a warm
compiled run compiles in the shared cache DIR) or ``give DIR`` (a cold one compiles in an empty cache of its own,
then adds what it compiled to DIR); absent: a fresh cache, deleted after the run."""


def check_compile_cache(compile_cache) -> str:
    """``compile_cache`` if it is one of COMPILE_CACHES, else a ConfigError quoting it."""
    return _one_of("compile_cache", compile_cache, COMPILE_CACHES)


def shared_cache_refusal(config) -> str | None:
    """Why ``config`` compiles from an empty cache even when the shared cache is asked for; None when it may use
    it.  The rule: only warm compiled runs of an experiment share the store's cache; a cold run shows a first call
    from scratch, and a run that compiles nothing has no use for one."""
    if not isinstance(config, ExperimentConfig):
        return "a calibration compiles nothing"
    if config.compile == "off":
        return "an eager run compiles nothing"
    if not config.is_warm:
        return "a cold run (0 warm-up calls) always compiles from an empty cache, so that its first call is a compile from scratch"
    return None


def persistent_refusal(config) -> str | None:
    """Why ``config`` runs in a new process even when a persistent worker is asked for; None when it may run in
    one.  The rule: only warm eager runs of the built-in workloads share a process.  A cold run needs a process
    with nothing initialised; a compiled run leaves what cannot all be set back (Dynamo's and Inductor's caches,
    Inductor's compile workers, CUDA graph pools); a script may change anything in its process; a calibration
    measures from a new process as it always did."""
    if not isinstance(config, ExperimentConfig):
        return "a calibration always gets a new process"
    if not config.is_warm:
        return "a cold run (0 warm-up calls) always gets a new process, so that it starts cold"
    if config.compile != "off":
        return ("a compiled run gets a new process: torch.compile leaves caches, compile workers and CUDA graph "
                "pools in its process that cannot all be set back")
    if config.workload == "script":
        return "a script may change anything in its process, so it gets a new one"
    return None


class _PersistentWorker:
    """Parent side of one persistent worker (``_serve_main``): its process, the socket its runs are asked on,
    the channel it dies with us through, and how many runs it finished."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.lock = threading.Lock()  # one run at a time (the device lock serialises callers; this, threads)
        self.proc = None  # _Forked or _Fresh
        self.requests: socket.socket | None = None
        self.life: socket.socket | None = None
        self.runs = 0

    def alive(self) -> bool:
        if self.proc is None:
            return False
        try:
            self.proc.wait(0)
        except subprocess.TimeoutExpired:
            return True
        self.close()
        return False

    def start(self, prestart: int, status: Callable[[str], None]) -> None:
        life_ours, life_theirs = socket.socketpair()
        req_ours, req_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with life_theirs, req_theirs:
            fds = [life_theirs.fileno(), req_theirs.fileno()]
            proc = None
            if prestart:
                status("forking a persistent worker from the prestarted worker")
                run = _SERVER.submit("-", fds, kind="serve")
                proc = _Forked(run) if run is not None else None
            if proc is None:
                status("starting a persistent worker process")
                proc = _Fresh(_spawn(["--serve", *map(str, fds)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=fds))
        self.proc, self.life, self.requests, self.runs = proc, life_ours, req_ours, 0

    def close(self) -> None:
        """Let the worker go: its channel closed, it ends its session and itself (race-free: no pid is
        signalled); a fresh interpreter is reaped in the background."""
        proc, self.proc = self.proc, None
        for sock in (self.requests, self.life):
            if sock is not None:
                sock.close()
        self.requests = self.life = None
        if isinstance(proc, _Forked):
            _SERVER.forget(proc.run)
        elif isinstance(proc, _Fresh):
            threading.Thread(target=_reap, args=(proc,), daemon=True).start()


def _reap(proc: _Fresh) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)


class _PersistentRun:
    """One run in a persistent worker, with the subset of Popen's interface ``_wait`` uses: ``wait`` returns 0
    when the worker answers ``done`` (it lives on), else the worker's exit status once it has exited."""

    def __init__(self, worker: _PersistentWorker):
        self.worker = worker
        self.pid = worker.proc.pid
        self.returncode: int | None = None
        self._eof = False

    def wait(self, timeout: float) -> int | None:
        import select
        deadline = time.monotonic() + timeout
        sock, proc = self.worker.requests, self.worker.proc
        while True:
            left = max(0.0, deadline - time.monotonic())
            if not self._eof and select.select([sock], [], [], min(0.005, left))[0]:
                data = sock.recv(64)
                if data == b"done":
                    self.returncode = 0
                    return 0
                self._eof = not data  # the worker is ending: its exit status follows
            try:
                self.returncode = proc.wait(min(0.01, left) if self._eof else 0)
                return self.returncode
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise


_PERSISTENT: dict[str, _PersistentWorker] = {}
_PERSISTENT_LOCK = threading.Lock()


def _persistent_worker(key: str) -> _PersistentWorker:
    with _PERSISTENT_LOCK:
        return _PERSISTENT.setdefault(key, _PersistentWorker(key))


def stop_persistent_workers() -> None:
    """Let every persistent worker of this process go (each ends itself and what it started); the next
    persistent run starts a new one.  They also end with this process, however it ends."""
    with _PERSISTENT_LOCK:
        workers = list(_PERSISTENT.values())
    for w in workers:
        with w.lock:
            w.close()


def _run_persistent(config: ExperimentConfig, staging: Path, cancel_event: threading.Event | None,
                    status: Callable[[str], None], prestart: int, hold_fds: Sequence[int]) -> dict:
    from .lock import device_key
    worker = _persistent_worker(device_key(config.device))
    with worker.lock:
        ours, theirs = socket.socketpair()  # the run's channel: its failure report comes back on it
        try:
            with theirs:
                for attempt in (1, 2):  # a worker that died while idle is replaced once
                    if not worker.alive():
                        worker.start(prestart, status)
                    try:
                        socket.send_fds(worker.requests, [f"run {time.time()!r} {staging}".encode()],
                                        [theirs.fileno(), *hold_fds])
                        break
                    except OSError:
                        worker.close()
                        if attempt == 2:
                            raise WorkerError("crash", f"the persistent worker for {config.name} could not be "
                                              "started") from None
            p = _PersistentRun(worker)
            status(f"running {config.name} in worker pid {p.pid} (persistent, its run {worker.runs + 1})")
            facts = _wait(p, config, staging, staging / LOG_FILE, cancel_event, status, ours)
        except BaseException:
            worker.close()  # killed, failed or interrupted: the next run starts a new process
            raise
        finally:
            ours.close()
        worker.runs += 1
        return facts


def run_in_worker(config: ExperimentConfig, staging: Path, *, cancel_event: Optional[threading.Event] = None,
                  on_status: Optional[Callable[[str], None]] = None, prestart: int = 0,
                  hold_fds: Sequence[int] = (), process: str = "fresh") -> dict:
    """Run ``config`` in a worker writing into ``staging``; return the worker's result facts.

    prestart: 0 starts a fresh interpreter; > 0 forks the run from the fork server (torch, torch._dynamo and
    Inductor imported once, CUDA never touched), falling back to a fresh interpreter if the server fails.
    process: ``fresh`` (a new process per run, as prestart says) or ``persistent``: a warm eager run goes to the
    device's persistent worker (started as prestart says, kept between runs, let go on any failure); the runs
    :func:`persistent_refusal` names still get a new process.
    hold_fds: descriptors the worker inherits and keeps until it exits (the caller's device lock and staging
    folder lock: flocks, held as long as any process has them open); a persistent worker keeps them until its
    run ends.  The worker dies with this process, and whatever it started (a script's children, compile
    workers) is killed when it ends, success included, before this returns: the locks are free of them.  Raises
    WorkerError on any failure.
    """
    check_process(process)
    if cancel_event is not None and cancel_event.is_set():
        raise WorkerError("cancelled", f"{config.name} was cancelled before its worker started")
    (staging / CONFIG_FILE).write_text(config.to_json())
    from .lock import GPU_ENV
    (staging / GPU_ENV_FILE).write_text(json.dumps({k: os.environ.get(k) for k in GPU_ENV}))
    log_path = staging / LOG_FILE
    status = on_status or (lambda _msg: None)
    if process == "persistent" and persistent_refusal(config) is None:
        return _run_persistent(config, staging, cancel_event, status, prestart, hold_fds)
    p = None
    ours, theirs = socket.socketpair()  # the worker's channel (see _watch_parent); only we hold `ours`
    try:
        with theirs:
            if prestart:
                status("forking the run from the prestarted worker (torch already imported, CUDA untouched)")
                run = _SERVER.submit(staging, [theirs.fileno(), *hold_fds])
                if run is not None:
                    p = _Forked(run)
            if p is None:
                status("starting a fresh worker process")
                fds = [theirs.fileno(), *hold_fds]
                with open(log_path, "ab") as log:
                    p = _Fresh(_spawn([str(staging), "--channel", str(fds[0]), "--hold", ",".join(map(str, fds[1:]))],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, pass_fds=fds))
        status(f"running {config.name} in worker pid {p.pid}")
        return _wait(p, config, staging, log_path, cancel_event, status, ours)
    except WorkerError as exc:
        if not (isinstance(p, _Forked) and "forked subprocess" in exc.message):
            raise
        # The fork server's process had touched the CUDA runtime: stop forking, rerun in a fresh interpreter.
        _SERVER.unsafe = True
        _SERVER.close()
        status("forked worker could not use CUDA; starting a fresh worker process")
        return run_in_worker(config, staging, cancel_event=cancel_event, on_status=on_status, prestart=0,
                             hold_fds=hold_fds)
    finally:
        ours.close()
        if isinstance(p, _Forked):
            _SERVER.forget(p.run)


def _wait(p, config: ExperimentConfig, staging: Path, log_path: Path,
          cancel_event: Optional[threading.Event], status: Callable[[str], None],
          channel: socket.socket) -> dict:
    deadline = time.monotonic() + config.timeout_s
    seen = None
    while True:
        try:
            rc = p.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
        try:
            phase = (staging / PHASE_FILE).read_text()
        except OSError:
            phase = None
        if phase and phase != seen:  # the worker moved on: say where it is
            seen = phase
            word = PHASE_WORDS.get(phase, phase)
            if phase == "warmup_s" and config.compile != "off":
                word += " (torch.compile compiles in the first)"
            status(f"{config.name}: {word}")
        if cancel_event is not None and cancel_event.is_set():
            _kill(p)
            raise WorkerError("cancelled", f"{config.name} was cancelled", _tail(log_path), p.returncode)
        if time.monotonic() > deadline:
            _kill(p)
            raise WorkerError("timeout", f"{config.name} ran past its timeout of {config.timeout_s:g} s "
                              "and the worker was killed", _tail(log_path), p.returncode)
    tail = _tail(log_path)
    err = _read_report(channel)
    if err is not None:
        raise WorkerError(str(err.get("kind", "error")), err["message"], tail, rc)
    if rc != 0 or not (staging / RESULT_FILE).exists():
        if rc is not None and rc < 0:
            try:
                signame = signal.Signals(-rc).name
            except ValueError:
                signame = str(-rc)
            msg = f"the worker was killed by signal {signame} before finishing {config.name}"
        else:
            msg = f"the worker exited with code {rc} without a result for {config.name}"
        raise WorkerError("crash", msg, tail, rc)
    return json.loads((staging / RESULT_FILE).read_text())


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything the parent needs is on disk; skip interpreter teardown (torch.compile's worker pools can
    # take seconds to shut down).
    os._exit(code)
