"""Worker processes: every experiment runs in a fresh Python process.

A fresh process makes a cold run honestly cold: no CUDA context, no cuBLAS handle, no reused compile cache
in memory.  Protocol (files, not pipes, so a crash can't leave the parent reading half a message):

- the parent makes a staging folder holding ``config.json`` and starts ``python -m profiling_core.worker DIR``,
  or (``prestart``) asks the *fork server* (``--zygote``: a process that imported torch, torch._dynamo and
  Inductor once and never touched CUDA) to fork a new process for DIR — as cold as a fresh interpreter
  (no CUDA context, no cuBLAS handle, nothing compiled), without paying seconds of imports per run;
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
from pathlib import Path
from typing import Callable, Optional

from .config import ExperimentConfig
from .errors import WorkerError

CONFIG_FILE = "config.json"
RESULT_FILE = "result.json"
PHASE_FILE = "phase"
"""The phase the worker is in (a timing name such as ``warmup_s``), rewritten as each begins; its parent reads it."""
PHASE_WORDS = {"device_init_s": "initialising the device", "tensors_s": "making the tensors",
               "compile_setup_s": "setting up torch.compile", "warmup_s": "warm-up calls",
               "profile_s": "profiling", "export_s": "writing the trace"}


def _write_phase(staging: Path, name: str) -> None:
    tmp = staging / f".{PHASE_FILE}.tmp"
    tmp.write_text(name)
    os.replace(tmp, staging / PHASE_FILE)  # the reader sees a whole name, never half of one
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

    timer = workload.Phase(on_start=lambda name: _write_phase(staging, name))
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
    """Import what the run will import anyway, so it is measured as import (and, for the fork server, paid once).

    torch.profiler's first profile() imports torch._dynamo (seconds on a GPU host) and torch.compile() imports
    Inductor.  None of this touches CUDA: a forked run stays cold (checked per run: meta records whether CUDA was
    initialised before the run started).
    """
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.profiler  # noqa: F401
    if compile_too:
        import torch._inductor.compile_fx  # noqa: F401
    return time.perf_counter() - t0


def _zygote_main() -> int:
    """Fork server: import once (no CUDA), then fork one child per run read from stdin.

    Protocol on stdin: ``<token> <staging dir>`` per line; on stdout: ``ready``, then ``started <token> <pid>``
    and ``exited <token> <returncode>`` (negative: killed by that signal).  Each child is a new process in its
    own session with no CUDA context, no cuBLAS handle and nothing compiled: as cold as a fresh interpreter,
    without paying the imports again.  The zygote runs no torch op, so forking it is safe.
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
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                time.sleep(0.05)
                continue
            rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            with tokens_lock:
                token = tokens.pop(pid, None)
            if token is not None:
                say(f"exited {token} {rc}")

    threading.Thread(target=reaper, daemon=True).start()
    say("ready")
    for line in sys.stdin:
        parts = line.strip().split(" ", 1)
        if len(parts) != 2:
            continue
        token, staging = parts
        t_fork = time.time()
        with tokens_lock:
            pid = os.fork()
            if pid == 0:  # the run's own process
                try:
                    os.setsid()
                    log = os.open(os.path.join(staging, LOG_FILE), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                    devnull = os.open(os.devnull, os.O_RDWR)
                    os.dup2(devnull, 0)
                    os.dup2(devnull, 1)
                    os.dup2(log, 2)
                    rc = _child_main(Path(staging), t_fork, time.time(), import_s, True)
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
    t_main = time.time()
    argv = sys.argv[1:] if argv is None else argv
    t_spawn = float(os.environ.get(SPAWN_ENV, "0") or 0)
    if argv[:1] == ["--zygote"]:
        return _zygote_main()
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


def _spawn(args: list[str], stdin, stdout, stderr) -> subprocess.Popen:
    """A fresh interpreter running this module, in its own session; it learns its spawn time from the env."""
    env = _child_env()
    env[SPAWN_ENV] = repr(time.time())
    return subprocess.Popen([sys.executable, "-m", "profiling_core.worker", *args], stdin=stdin, stdout=stdout,
                            stderr=stderr, env=env, start_new_session=True, close_fds=True)


def _kill(p) -> None:
    """SIGKILL the worker's whole process group (its own session) and reap it."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


class ForkServer:
    """Parent side of the fork server (see ``_zygote_main``).  Thread-safe; started lazily or by ``warm()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._ready = threading.Event()
        self._runs: dict[str, dict] = {}
        self._counter = 0
        self.unsafe = False  # set when the zygote finds that its children could not use CUDA

    def warm(self) -> None:
        """Start the zygote if it is not running (its imports then happen in the background)."""
        with self._lock:
            if self.unsafe or (self._proc is not None and self._proc.poll() is None):
                return
            self._ready.clear()
            env = _child_env()
            self._proc = subprocess.Popen([sys.executable, "-m", "profiling_core.worker", "--zygote"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                                          close_fds=True)
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

    def submit(self, staging: Path, timeout: float = 300.0) -> Optional[dict]:
        """Fork a run for ``staging``; returns its record (``started`` pid, later ``exited`` code) or None when
        the zygote is not ready within ``timeout``."""
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
            proc = self._proc
        try:
            proc.stdin.write(f"{token} {staging}\n".encode())
            proc.stdin.flush()
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


def run_in_worker(config: ExperimentConfig, staging: Path, *, cancel_event: Optional[threading.Event] = None,
                  on_status: Optional[Callable[[str], None]] = None, prestart: int = 0) -> dict:
    """Run ``config`` in a worker writing into ``staging``; return the worker's result facts.

    prestart: 0 starts a fresh interpreter; > 0 forks the run from the fork server (torch, torch._dynamo and
    Inductor imported once, CUDA never touched), falling back to a fresh interpreter if the server fails.
    Raises WorkerError on any failure.
    """
    (staging / CONFIG_FILE).write_text(config.to_json())
    log_path = staging / LOG_FILE
    status = on_status or (lambda _msg: None)
    p = None
    if prestart:
        status("forking the run from the prestarted worker (torch already imported, CUDA untouched)")
        run = _SERVER.submit(staging)
        if run is not None:
            p = _Forked(run)
    if p is None:
        status("starting a fresh worker process")
        with open(log_path, "ab") as log:
            p = _spawn([str(staging)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    status(f"running {config.name} in worker pid {p.pid}")
    try:
        return _wait(p, config, staging, log_path, cancel_event, status)
    except WorkerError as exc:
        if not (isinstance(p, _Forked) and "forked subprocess" in exc.message):
            raise
        # The fork server's process had touched the CUDA runtime: stop forking, rerun in a fresh interpreter.
        _SERVER.unsafe = True
        _SERVER.close()
        (staging / ERROR_FILE).unlink(missing_ok=True)
        status("forked worker could not use CUDA; starting a fresh worker process")
        return run_in_worker(config, staging, cancel_event=cancel_event, on_status=on_status, prestart=0)
    finally:
        if isinstance(p, _Forked):
            _SERVER.forget(p.run)


def _wait(p, config: ExperimentConfig, staging: Path, log_path: Path,
          cancel_event: Optional[threading.Event], status: Callable[[str], None] = lambda _m: None) -> dict:
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
