"""Worker processes: every experiment runs in a fresh Python process.

A fresh process makes a cold run honestly cold: no CUDA context, no cuBLAS handle, no reused compile cache
in memory.  Protocol (files, not pipes, so a crash can't leave the parent reading half a message):

- the parent makes a staging folder holding ``config.json`` and starts ``python -m profiling_core.worker DIR``
  (or hands DIR on stdin to a *standby* worker started earlier with ``--standby``, which has imported torch
  but not touched CUDA);
- the worker writes ``trace.json``, ``table.txt`` and then ``result.json`` (timings and device facts), or
  ``error.json`` ({kind, message}) when the experiment fails; its stderr goes to ``worker.log``;
- the parent enforces the timeout (the whole process group is killed), and turns every failure — an error the
  worker reported, a crash, a signal, a timeout, a cancellation — into a ``WorkerError`` with the tail of the log.

Subprocess hygiene follows perfetto's TraceProcessor: stdout to a file, stderr to a file, the child in its own
process group, killed on any failure.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from .config import ExperimentConfig
from .errors import WorkerError

CONFIG_FILE = "config.json"
RESULT_FILE = "result.json"
ERROR_FILE = "error.json"
LOG_FILE = "worker.log"
SPAWN_ENV = "PROFILING_CORE_SPAWN_T"


# ----------------------------------------------------------------------------------------- child side
def _classify(exc: BaseException, phase: str) -> str:
    name = type(exc).__name__
    text = str(exc)
    if isinstance(exc, WorkerError):
        return exc.kind
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


def _child_main(staging: Path, t_spawn: float, t_main: float, torch_import_s: float, prestarted: bool) -> int:
    from . import workload

    timer = workload.Phase()
    timer.timings["process_start_s"] = round(max(0.0, t_main - t_spawn), 6) if t_spawn else None
    timer.timings["torch_import_s"] = round(torch_import_s, 6)
    import torch
    cuda_was_initialized = torch.cuda.is_initialized()
    current = {"phase": "setup"}
    orig_run = timer.run

    def tracked(name, func):
        current["phase"] = name
        return orig_run(name, func)

    timer.run = tracked  # type: ignore[method-assign]
    # A fresh compile cache per run: nothing compiled by an earlier run is reused (honest cold compile).
    cache = staging / ".compile-cache"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    try:
        config = ExperimentConfig.from_json((staging / CONFIG_FILE).read_text())
        facts = workload.run_workload(config, staging, timer)
    except BaseException as exc:  # noqa: BLE001 - every failure must become error.json
        traceback.print_exc(file=sys.stderr)
        kind = _classify(exc, current["phase"])
        if isinstance(exc, WorkerError):
            msg = exc.message
        else:
            msg = f"{type(exc).__name__} during {current['phase'].removesuffix('_s')}: {exc}".strip()
        _write_json(staging / ERROR_FILE, {"kind": kind, "message": msg[:2000]})
        return 2
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    facts["timings"] = timer.timings
    facts["prestarted"] = prestarted
    facts["cuda_initialized_before_run"] = cuda_was_initialized
    _write_json(staging / RESULT_FILE, facts)
    return 0


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def _preimport(compile_too: bool) -> float:
    """Import what the run will import anyway, so it is measured as import (and, for a standby, paid ahead).

    torch.profiler's first profile() imports torch._dynamo (seconds on a GPU host) and torch.compile() imports
    Inductor.  None of this touches CUDA: a standby stays cold (checked per run: meta records whether CUDA was
    initialised before the run started).
    """
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.profiler  # noqa: F401
    if compile_too:
        import torch._inductor.compile_fx  # noqa: F401
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    t_main = time.time()
    argv = sys.argv[1:] if argv is None else argv
    t_spawn = float(os.environ.get(SPAWN_ENV, "0") or 0)
    if argv[:1] == ["--standby"]:
        torch_import_s = _preimport(compile_too=True)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        line = sys.stdin.readline().strip()
        if not line:
            return 0
        staging = Path(line)
        # A standby's start is paid before the click; what the user waits for starts now.
        t_spawn = t_main = time.time()
        log = open(staging / LOG_FILE, "a", buffering=1)
        os.dup2(log.fileno(), 2)
        sys.stderr = log
        return _child_main(staging, t_spawn, t_main, torch_import_s, True)
    staging = Path(argv[0])
    try:
        compile_too = json.loads((staging / CONFIG_FILE).read_text()).get("compile", "off") != "off"
    except (OSError, ValueError, AttributeError):
        compile_too = False
    return _child_main(staging, t_spawn, t_main, _preimport(compile_too), False)


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


@dataclass
class _Proc:
    popen: subprocess.Popen
    t_spawn: float


def _spawn(args: list[str], stdin, stdout, stderr) -> _Proc:
    env = _child_env()
    t = time.time()
    env[SPAWN_ENV] = repr(t)
    p = subprocess.Popen([sys.executable, "-m", "profiling_core.worker", *args], stdin=stdin, stdout=stdout,
                         stderr=stderr, env=env, start_new_session=True, close_fds=True)
    return _Proc(p, t)


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


class StandbyPool:
    """Keeps spare workers with torch (and torch._dynamo, which the profiler imports) already imported and
    CUDA untouched, so a click doesn't pay the import and a cold run stays cold.

    Thread-safe.  ``warm(n)`` keeps ``n`` standbys starting or ready; ``take()`` returns a ready one or None
    (the caller then spawns a fresh worker).  A sweep keeps a few so that the next runs' imports overlap the
    current run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: list[tuple[_Proc, threading.Event]] = []

    def _prune(self) -> None:
        self._procs = [(p, r) for p, r in self._procs if p.popen.poll() is None]

    def warm(self, n: int = 1) -> None:
        with self._lock:
            self._prune()
            while len(self._procs) < n:
                proc = _spawn(["--standby"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
                ready = threading.Event()
                self._procs.append((proc, ready))
                threading.Thread(target=self._wait_ready, args=(proc, ready), daemon=True).start()

    @staticmethod
    def _wait_ready(proc: _Proc, ready: threading.Event) -> None:
        line = proc.popen.stdout.readline()
        if line.strip() == b"ready":
            ready.set()

    def wait_ready(self, timeout: float) -> bool:
        """Block until one standby has finished its imports (True) or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                self._prune()
                if any(r.is_set() for _, r in self._procs):
                    return True
                if not self._procs:
                    return False
            time.sleep(0.02)
        return False

    def take(self, timeout: float = 0.0) -> Optional[_Proc]:
        """A ready standby (the oldest), waiting up to ``timeout`` for one; None when there is none."""
        if timeout > 0:
            self.wait_ready(timeout)
        with self._lock:
            self._prune()
            for i, (proc, ready) in enumerate(self._procs):
                if ready.is_set():
                    del self._procs[i]
                    return proc
        return None

    def size(self) -> int:
        with self._lock:
            self._prune()
            return len(self._procs)

    def close(self) -> None:
        with self._lock:
            procs, self._procs = self._procs, []
        for proc, _ in procs:
            _kill(proc.popen)


_POOL = StandbyPool()


def standby_pool() -> StandbyPool:
    return _POOL


def run_in_worker(config: ExperimentConfig, staging: Path, *, cancel_event: Optional[threading.Event] = None,
                  on_status: Optional[Callable[[str], None]] = None, prestart: int = 0) -> dict:
    """Run ``config`` in a worker writing into ``staging``; return the worker's result facts.

    prestart: 0 always spawns a fresh worker; N > 0 takes a ready standby when there is one and keeps N
    standbys starting for the runs that follow.  Raises WorkerError on any failure.
    """
    (staging / CONFIG_FILE).write_text(config.to_json())
    log_path = staging / LOG_FILE
    status = on_status or (lambda _msg: None)
    proc = _POOL.take() if prestart else None
    if proc is not None:
        status("handing the experiment to a standby worker (torch already imported)")
        try:
            proc.popen.stdin.write((str(staging) + "\n").encode())
            proc.popen.stdin.flush()
            proc.popen.stdin.close()
        except OSError:
            _kill(proc.popen)
            proc = None
    if proc is None:
        status("starting a fresh worker process")
        with open(log_path, "ab") as log:
            proc = _spawn([str(staging)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    if prestart:
        _POOL.warm(int(prestart))  # the next click finds one ready
    status(f"profiling {config.name} in worker pid {proc.popen.pid}")
    deadline = time.monotonic() + config.timeout_s
    p = proc.popen
    while True:
        try:
            rc = p.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
        if cancel_event is not None and cancel_event.is_set():
            _kill(p)
            raise WorkerError("cancelled", f"{config.name} was cancelled", _tail(log_path), p.returncode)
        if time.monotonic() > deadline:
            _kill(p)
            raise WorkerError("timeout", f"{config.name} ran past its timeout of {config.timeout_s:g} s "
                              "and the worker was killed", _tail(log_path), p.returncode)
    tail = _tail(log_path)
    if (staging / ERROR_FILE).exists():
        err = json.loads((staging / ERROR_FILE).read_text())
        raise WorkerError(err.get("kind", "error"), err.get("message", "unknown error"), tail, rc)
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
