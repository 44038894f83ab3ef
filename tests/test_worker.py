"""Real torch.profiler runs on the CPU, each in a fresh worker process; traces checked by a plain JSON scan."""
import json
import os
import re
import signal
import threading
import time
from collections import Counter

import pytest

from conftest import scan_trace
from profiling_core import ExperimentConfig, RunStore, WorkerError, run_experiment

pytestmark = pytest.mark.slow

SMALL = dict(size=32, dtype="fp32", device="cpu")


def x_names(events):
    return Counter(e["name"] for e in events if e.get("ph") == "X")


def test_cpu_profile_has_study_slices_per_step(store):
    cfg = ExperimentConfig(**SMALL, warmup=2, wait=1, warmup_steps=1, active=2, repeat=2)
    run = run_experiment(cfg, store=store)
    events = scan_trace(run.trace_path)
    names = x_names(events)
    steps = sorted(n for n in names if re.fullmatch(r"ProfilerStep#\d+", n))
    assert len(steps) == cfg.active * cfg.repeat == 4
    # one matmul_add, aten::matmul and aten::add per recorded step
    assert names["matmul_add"] == 4 and names["aten::matmul"] == 4 and names["aten::add"] == 4
    assert "aten::mm" in names
    assert not any(e.get("cat") == "kernel" for e in events)  # CPU run: no GPU lane
    # artifacts and meta
    assert run.table_path.read_text().count("matmul_add") >= 1
    meta = json.loads(run.meta_path.read_text())
    assert meta["status"] == "ok" and meta["config"] == cfg.to_dict()
    assert meta["device"]["type"] == "cpu" and meta["versions"]["torch"].startswith("2.")
    for key in ("process_start_s", "torch_import_s", "device_init_s", "warmup_s", "profile_s", "export_s", "wall_s"):
        assert meta["timings"][key] >= 0
    assert set(os.listdir(run.run_dir)) >= {"trace.json", "table.txt", "meta.json"}
    assert not list((store.root / ".staging").iterdir())


def test_batch_dimension_dispatches_bmm(store):
    run = run_experiment(ExperimentConfig(**SMALL, batch=4, wait=0, warmup_steps=0, active=2), store=store)
    names = x_names(scan_trace(run.trace_path))
    assert names["aten::bmm"] == 2 and "aten::mm" not in names


def test_cold_and_warm_runs_differ_only_in_warmup(store):
    cold = run_experiment(ExperimentConfig(**SMALL, wait=0, warmup_steps=0, active=2), store=store)
    warm = run_experiment(ExperimentConfig(**SMALL, warmup=5, wait=0, warmup_steps=0, active=2), store=store)
    assert cold.meta["name"].endswith("_cold_eager") and warm.meta["name"].endswith("_warm_eager")
    # the warm-up calls are not profiled: both traces hold exactly the active steps' matmul_add
    assert x_names(scan_trace(cold.trace_path))["matmul_add"] == 2
    assert x_names(scan_trace(warm.trace_path))["matmul_add"] == 2
    # each run is its own process
    assert cold.meta["timings"]["torch_import_s"] > 0 and warm.meta["timings"]["torch_import_s"] > 0


def test_compile_on_cpu_shows_compiled_region(store):
    run = run_experiment(ExperimentConfig(**SMALL, warmup=1, compile="default", wait=0, warmup_steps=0, active=2),
                         store=store)
    names = x_names(scan_trace(run.trace_path))
    regions = [n for n in names if n.startswith("Torch-Compiled Region")]
    assert regions and sum(names[n] for n in regions) == 2
    assert any(n.startswith("## Call CompiledFxGraph") for n in names)


def test_shared_compile_cache_serves_warm_runs_only(store, tmp_path):
    """compile_cache="shared": a warm compiled run finds the graph an earlier run of the same config compiled
    (torch's own cache counters say so); a cold run still compiles from an empty cache, says why, and adds what it
    compiled for the warm run after it; the default leaves no cache behind."""
    from profiling_core.errors import ConfigError
    from profiling_core.run import run_sweep
    warm = ExperimentConfig(**SMALL, warmup=1, compile="default", wait=0, warmup_steps=0, active=2)
    cold = ExperimentConfig(**SMALL, warmup=0, compile="default", wait=0, warmup_steps=0, active=2)
    eager = ExperimentConfig(**SMALL, warmup=1, wait=0, warmup_steps=0, active=2)
    fresh = run_experiment(warm, store=store)
    assert fresh.meta["compile_cache"]["kind"] == "fresh" and fresh.meta["compile_cache"]["fx_graph_misses"] == 1
    assert not (store.root / ".compile-cache").exists()
    result = run_sweep([warm, warm, eager], store=store, compile_cache="shared")
    assert not result.errors
    first, second, eager_run = result.runs
    assert first.meta["compile_cache"] == {"kind": "shared", "fx_graph_hits": 0, "fx_graph_misses": 1,
                                           "aot_autograd_hits": 0, "aot_autograd_misses": 1}
    assert second.meta["compile_cache"]["kind"] == "shared" and second.meta["compile_cache"]["fx_graph_hits"] == 1
    assert (first.compile_cache_reused, second.compile_cache_reused) == (False, True)
    assert eager_run.meta["compile_cache"] is None and eager_run.compile_cache_reused is None
    assert {r.run_id for r in store.list()} == {r.run_id for r in (fresh, *result.runs)}  # the cache is not a run
    # the profiled steps ran the same generated code: the same compiled-region rows per step
    for run in (first, second):
        names = x_names(scan_trace(run.trace_path))
        assert sum(n for k, n in names.items() if k.startswith("Torch-Compiled Region")) == 2
    # a cold run: its own empty cache (a first call from scratch), then the warm run after it finds its graph
    other = RunStore(tmp_path / "other")
    cold_run, after = run_sweep([cold, warm], store=other, compile_cache="shared").runs
    assert cold_run.meta["compile_cache"]["kind"] == "fresh" and cold_run.meta["compile_cache"]["fx_graph_hits"] == 0
    assert "cold run" in cold_run.meta["compile_cache"]["shared_refused"] and cold_run.compile_cache_reused is False
    assert after.meta["compile_cache"]["fx_graph_hits"] == 1 and after.compile_cache_reused is True
    with pytest.raises(ConfigError, match="compile_cache.*'fresh' or 'shared'"):
        run_experiment(warm, store=store, compile_cache="warm")


def _slow_config(**kw):
    # big enough to keep the worker busy for ten seconds or more on a quiet 2-core machine (the most steps a config
    # takes): the tests that use it stop it (a timeout, a cancel, a kill) within seconds of its profiling loop's start
    return ExperimentConfig(size=1024, dtype="fp32", device="cpu", wait=0, warmup_steps=0, active=1000, **kw)


@pytest.mark.parametrize("prestart", [0, 1], ids=["fresh", "forked"])
def test_worker_killed_mid_run_leaves_no_run(store, prestart):
    pids, profiling = [], threading.Event()

    def status(msg):
        m = re.search(r"worker pid (\d+)", msg)
        if m:
            pids.append(int(m.group(1)))
        if msg.rstrip().endswith(": profiling"):
            profiling.set()

    def killer():  # inside the profiling loop, whatever the machine's speed (not a fixed wait: a quiet machine
        profiling.wait(120)  # ran the whole loop within one)
        os.kill(pids[0], signal.SIGKILL)

    t = threading.Thread(target=killer)
    t.start()
    with pytest.raises(WorkerError) as info:
        run_experiment(_slow_config(), store=store, on_status=status, prestart=prestart)
    t.join()
    assert info.value.kind == "crash" and "SIGKILL" in info.value.message
    assert store.list() == [] and not list((store.root / ".staging").iterdir())


def test_timeout_kills_worker_and_leaves_no_run(store):
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run_experiment(_slow_config(timeout_s=2), store=store)
    assert info.value.kind == "timeout" and "timeout of 2 s" in info.value.message
    assert time.monotonic() - t0 < 30
    assert store.list() == [] and not list((store.root / ".staging").iterdir())


def test_cancel_kills_worker(store):
    cancel = threading.Event()

    def status(msg):  # cancelled inside the profiling loop
        if msg.rstrip().endswith(": profiling"):
            cancel.set()

    with pytest.raises(WorkerError) as info:
        run_experiment(_slow_config(), store=store, cancel_event=cancel, on_status=status)
    assert info.value.kind == "cancelled"
    assert store.list() == []


def test_allocation_guard_refuses_before_allocating(store):
    # 3 x 4096 x 16384^2 fp32 = 12 TiB: refused by the worker before any tensor exists
    cfg = ExperimentConfig(size=16384, dtype="fp32", batch=4096, device="cpu")
    with pytest.raises(WorkerError) as info:
        run_experiment(cfg, store=store)
    assert info.value.kind == "does_not_fit"
    assert "GiB of tensors" in info.value.message and "choose a smaller size or batch" in info.value.message
    assert store.list() == []


def test_compile_failure_without_c_compiler(store, tmp_path, monkeypatch):
    # Inductor on the CPU needs a C++ compiler: hide every compiler from the worker's PATH.
    import sys
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(sys.executable, bindir / "python3")
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(WorkerError) as info:
        # batched: bmm plus a broadcast add that Inductor must generate C++ for (2-D becomes one extern addmm)
        run_experiment(ExperimentConfig(**SMALL, batch=2, warmup=1, compile="default", active=1, wait=0,
                                        warmup_steps=0),
                       store=store)
    assert info.value.kind == "compile", info.value
    assert info.value.stderr_tail  # the worker's own traceback tail comes back
    assert store.list() == []


def test_earlier_runs_survive_a_failed_run(store):
    ok = run_experiment(ExperimentConfig(**SMALL, wait=0, warmup_steps=0, active=1), store=store)
    with pytest.raises(WorkerError):
        run_experiment(_slow_config(timeout_s=1), store=store)
    assert [r.run_id for r in store.list()] == [ok.run_id]
    assert scan_trace(store.load(ok.run_id).trace_path)


def test_two_concurrent_runs_serialise(store, monkeypatch):
    """Two callers at once: the device lock's hold intervals never overlap, and the second caller is told it
    waits. The intervals are the lock's own (taken inside it, from acquire to release), not the callers' calls,
    which also include the store's commit after the release."""
    import contextlib

    import profiling_core.run.runner as runner

    real_lock = runner.device_lock
    holds, waits = [], []
    record = threading.Lock()

    @contextlib.contextmanager
    def timed_lock(*args, **kwargs):
        with real_lock(*args, **kwargs) as fd:
            start = time.monotonic()
            try:
                yield fd  # the lock's descriptor: the worker holds it too
            finally:
                with record:
                    holds.append((start, time.monotonic()))

    monkeypatch.setattr(runner, "device_lock", timed_lock)
    barrier = threading.Barrier(2)

    def go(tag):
        barrier.wait()

        def status(msg):
            if msg.startswith("waiting for device lock"):
                with record:
                    waits.append(tag)
        run_experiment(ExperimentConfig(**SMALL, wait=0, warmup_steps=0, active=2), store=store, on_status=status)

    threads = [threading.Thread(target=go, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(holds) == 2, holds
    (a0, a1), (b0, b1) = sorted(holds)
    assert a1 <= b0, f"the device lock was held by both callers at once: {holds}"
    assert waits, f"the second caller never saw that it waits: {holds}"
    assert len(store.list()) == 2


def test_forked_worker_runs_cold_and_reports_prestart(store):
    from profiling_core.run.worker import fork_server
    pool = fork_server()
    try:
        pool.warm()
        assert pool.wait_ready(120)
        run = run_experiment(ExperimentConfig(**SMALL, wait=0, warmup_steps=0, active=2), store=store, prestart=1)
        assert run.meta["prestarted"] is True
        assert run.meta["cuda_initialized_before_run"] is False
        assert x_names(scan_trace(run.trace_path))["matmul_add"] == 2
        # a compiled run forked from the same server compiles from scratch and shows its compiled region
        comp = run_experiment(ExperimentConfig(**SMALL, warmup=1, compile="default", wait=0, warmup_steps=0,
                                               active=2), store=store, prestart=1)
        names = x_names(scan_trace(comp.trace_path))
        assert sum(v for k, v in names.items() if k.startswith("Torch-Compiled Region")) == 2
        assert run.meta["timings"]["process_start_s"] < 1.0  # a fork, not an interpreter start
    finally:
        pool.close()


def test_bias_shape_follows_the_config(store):
    """The study's matrix bias by default, (n,) with bias="vector": aten::add's recorded input shapes say so."""
    def add_dims(cfg):
        run = run_experiment(cfg, store=store)
        adds = [e for e in scan_trace(run.trace_path) if e.get("ph") == "X" and e.get("name") == "aten::add"]
        assert adds and run.meta["config"]["bias"] == cfg.bias
        return adds[0]["args"]["Input Dims"][:2]
    base = dict(SMALL, wait=0, warmup_steps=0, active=1)
    assert add_dims(ExperimentConfig(**base)) == [[32, 32], [32, 32]]
    assert add_dims(ExperimentConfig(**base, bias="vector")) == [[32, 32], [32]]


def test_the_matmul_precision_reaches_torch_and_meta(store):
    run = run_experiment(ExperimentConfig(**{**SMALL, "dtype": "fp32"}, wait=0, warmup_steps=0, active=1,
                                          matmul_precision="high"), store=store)
    meta = json.loads(run.meta_path.read_text())
    assert meta["config"]["matmul_precision"] == "high"
    assert meta["matmul"] == {"float32_matmul_precision": "high", "cuda_allow_tf32": True}  # as torch reported it


def test_threads_and_machine_load_are_recorded(store):
    run = run_experiment(ExperimentConfig(**SMALL, wait=0, warmup_steps=0, active=1, threads=1), store=store)
    meta = json.loads(run.meta_path.read_text())
    assert meta["config"]["threads"] == 1 and meta["device"]["cpu_threads"] == 1  # torch.get_num_threads() there
    load = meta["machine_load"]
    assert load["cores"] == os.cpu_count() and load["load_1min_before"] >= 0 and load["load_1min_after"] >= 0


def test_the_run_reports_its_phases_in_order(store):
    """The parent reads the worker's phase file and reports each phase it sees, in the worker's order."""
    from profiling_core.run.worker import PHASE_WORDS
    seen = []
    # ~1e11 FLOPs of warm-up calls (a second or more on any CPU), so the parent, polling every 0.1 s, sees that
    # phase whatever the machine's speed; the shorter phases it may or may not see
    cfg = ExperimentConfig(size=256, dtype="fp32", device="cpu", warmup=3000, wait=0, warmup_steps=0, active=2)
    run_experiment(cfg, store=store, on_status=seen.append)
    order = list(PHASE_WORDS.values())
    phases = [m.split(": ", 1)[1] for m in seen if m.startswith(f"{cfg.name}: ")]
    assert "warm-up calls" in phases and all(p in order for p in phases), seen
    assert [order.index(p) for p in phases] == sorted(order.index(p) for p in phases)  # never backwards
    assert seen[-1].startswith("saving run")


def test_phase_timer_tells_each_start():
    from profiling_core.run.loop import Phase
    started = []
    t = Phase(on_start=started.append)
    t.run("a_s", lambda: None)
    t.run("b_s", lambda: None)
    assert started == ["a_s", "b_s"] and set(t.timings) == {"a_s", "b_s"}


# ------------------------------------------------------------------------- a killed caller, a full disk
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SLOW_ARGS = ["--size", "1024", "--dtype", "fp32", "--device", "cpu", "--wait", "0", "--warmup-steps", "0",
              "--active", "400"]  # many seconds of profiling
_FORKED_CALLER = ("import sys\nfrom profiling_core import ExperimentConfig, RunStore, run_experiment\n"
                  "cfg = ExperimentConfig(size=1024, dtype='fp32', device='cpu', wait=0, warmup_steps=0, active=400)\n"
                  "run_experiment(cfg, store=RunStore(sys.argv[1]), prestart=1,\n"
                  "               on_status=lambda m: print(m, flush=True))\n")


def _running(pid):
    """Whether any thread of process pid still lives.  A zombie has exited and closed everything it held, but its
    leader shows as a zombie while its other threads are still exiting (and holding its descriptors)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        return not zombie or len(os.listdir(f"/proc/{pid}/task")) > 1
    except (FileNotFoundError, ProcessLookupError):
        return False


def _descendants(pid):
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [c for c, p in parents.items() if p == parent]
        found += kids
        todo += kids
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads process states from /proc")
@pytest.mark.parametrize("prestart", [0, 1], ids=["fresh", "forked"])
def test_killed_caller_leaves_nothing_running_and_nothing_behind(tmp_path, monkeypatch, prestart):
    """kill -9 of the caller mid-profile: its worker (and the fork server) die within seconds; while the orphan
    still lives the device stays locked and its staging folder stays; then the lock is free and the next open of
    the store removes the staging folder."""
    import queue
    import subprocess
    import sys
    from profiling_core import DeviceBusyError
    from profiling_core.run.lock import device_lock
    root, locks = tmp_path / "runs", tmp_path / "locks"
    monkeypatch.setenv("PROFILING_LOCK_DIR", str(locks))
    env = dict(os.environ, PYTHONPATH=ROOT)
    cmd = ([sys.executable, "-m", "profiling_core", "run", "--store", str(root), *_SLOW_ARGS] if prestart == 0
           else [sys.executable, "-c", _FORKED_CALLER, str(root)])
    caller = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    lines = queue.Queue()
    threading.Thread(target=lambda: [*map(lines.put, caller.stdout), lines.put(None)], daemon=True).start()
    spawned = []
    try:
        worker, deadline = None, time.monotonic() + 60
        while True:  # until the worker is profiling
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, "the caller ended before its worker profiled"
            m = re.search(r"worker pid (\d+)", line)
            worker = int(m.group(1)) if m else worker
            if line.rstrip().endswith(": profiling"):
                break
        spawned = _descendants(caller.pid)
        assert worker in spawned and len(spawned) == 1 + prestart  # the worker (and the fork server)
        os.kill(worker, signal.SIGSTOP)  # a stopped orphan cannot notice its parent's death yet
        caller.kill()
        caller.wait()
        with pytest.raises(DeviceBusyError):  # the orphan still holds the device
            with device_lock("cpu", wait=False):
                pass
        RunStore(root)  # opened while the orphan lives: its staging folder stays
        assert len(list((root / ".staging").iterdir())) == 1
        os.kill(worker, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while any(map(_running, spawned)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in spawned if _running(pid)], "processes outlived their killed caller"
        with device_lock("cpu", wait=False):
            pass
        assert RunStore(root).list() == [] and list((root / ".staging").iterdir()) == []
    finally:
        caller.kill()
        for pid in spawned:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


_FULL_DISK = '''
import builtins, errno, io, os, sys
if "profiling_core.run.worker" in sys.orig_argv:  # the worker (and the fork server's runs): the disk is full for them
    _open = io.open

    def _full(file, mode="r", *args, **kwargs):
        path = os.fsdecode(file) if isinstance(file, (str, bytes, os.PathLike)) else ""
        if "/.staging/" in path and not path.endswith(".phase.tmp") and set(mode) & set("wax+"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return _open(file, mode, *args, **kwargs)

    io.open = builtins.open = _full
'''


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_disk_full_reason_reaches_the_user(tmp_path, command):
    """Every file the worker writes into the staging folder (but its progress file) fails with ENOSPC, as on a
    full disk: the reason reaches the CLI's message, for a fresh worker (run) and a forked one (sweep); nothing is
    kept."""
    import subprocess
    import sys
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_FULL_DISK)
    root = tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{site}", PROFILING_LOCK_DIR=str(tmp_path / "locks"))
    args = ["--device", "cpu", "--dtype", "fp32", "--wait", "0", "--warmup-steps", "0", "--active", "1",
            "--repeat", "2"]  # two cycles: the worker writes the merged trace itself
    args += ["--size", "32"] if command == "run" else ["--sizes", "32", "--compile-modes", "off"]
    p = subprocess.run([sys.executable, "-m", "profiling_core", command, "--store", str(root), *args],
                       capture_output=True, text=True, env=env, timeout=120)
    shown = p.stderr if command == "run" else p.stdout
    assert p.returncode == (3 if command == "run" else 1), (p.stdout, p.stderr)
    assert "store: OSError during export: [Errno 28] No space left on device" in shown, shown
    assert "trace.json" in shown, shown
    assert RunStore(root).list() == [] and list((root / ".staging").iterdir()) == []


_SPAWNING_SCRIPT = '''
import os, subprocess, sys, time

def _sleeper():
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    return pid

def make_step(device, dtype):
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]).pid,  # a program
            _sleeper()]  # a forked copy of the worker, holding what it holds (the device lock)
    moved = os.fork()
    if moved == 0:  # a fork in a process group of its own
        os.setpgid(0, 0)
        time.sleep(600)
        os._exit(0)
    kids.append(moved)
    with open(PIDS, "a") as f:
        f.write(" ".join(map(str, kids)) + "\\n")
    return (lambda: None), ()
'''


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads process states from /proc")
@pytest.mark.parametrize("prestart", [0, 1], ids=["fresh", "forked"])
def test_a_run_that_succeeds_leaves_nothing_running_and_the_device_free(store, tmp_path, prestart):
    """A script's make_step starts long-sleeping children (a program, a fork holding the device lock, a fork in its
    own process group) and the run succeeds: when it returns, none of them lives, and the next run (fail-fast, so a
    held lock shows as "device cpu is busy") starts and succeeds too."""
    pids_file = tmp_path / "pids.txt"
    script = tmp_path / "spawns.py"
    script.write_text(f"PIDS = {str(pids_file)!r}\n" + _SPAWNING_SCRIPT)
    cfg = ExperimentConfig(workload="script", knobs={"path": str(script)}, dtype="fp32", device="cpu", wait=0,
                           warmup_steps=0, active=1)
    kids = []
    try:
        for _ in range(2):
            run_experiment(cfg, store=store, prestart=prestart, wait_for_device=False)
            kids = [int(p) for p in pids_file.read_text().split()]
            alive = [pid for pid in kids if _running(pid)]
            assert not alive, f"children of the run outlived it: {alive} of {kids}"
        assert len(kids) == 6 and len(store.list()) == 2
    finally:
        for pid in kids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


_ESCAPING_SCRIPT = '''
import os, time

def make_step(device, dtype):
    pid = os.fork()
    if pid == 0:  # leaves the worker's session: beyond the reach of the run's end
        os.setsid()
        time.sleep(600)
        os._exit(0)
    with open(PIDS, "w") as f:
        f.write(str(pid))
    return (lambda: None), ()
'''


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads process states from /proc")
@pytest.mark.parametrize("prestart", [0, 1], ids=["fresh", "forked"])
def test_a_child_that_leaves_the_workers_session_does_not_keep_the_device(store, tmp_path, prestart):
    """A fork of the worker that makes a session of its own outlives the run, but lets go of the device lock at its
    fork: the next run starts (fail-fast) while it still lives."""
    pids_file = tmp_path / "pid.txt"
    script = tmp_path / "escapes.py"
    script.write_text(f"PIDS = {str(pids_file)!r}\n" + _ESCAPING_SCRIPT)
    cfg = ExperimentConfig(workload="script", knobs={"path": str(script)}, dtype="fp32", device="cpu", wait=0,
                           warmup_steps=0, active=1)
    escaped = []
    try:
        run_experiment(cfg, store=store, prestart=prestart)
        escaped.append(int(pids_file.read_text()))
        assert _running(escaped[0])  # out of reach, as the README says
        run_experiment(cfg, store=store, prestart=prestart, wait_for_device=False)
        escaped.append(int(pids_file.read_text()))
        assert len(store.list()) == 2
    finally:
        for pid in escaped:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
