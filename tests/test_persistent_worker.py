"""The persistent worker: warm eager runs share one process per device, cold ones never do, a failure or a kill
costs only that run, settings do not leak from one run to the next.  Real CPU runs; the facts come from each
run's meta.json and trace read back as plain JSON, and from /proc."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from conftest import scan_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from profiling_core import ExperimentConfig, RunStore, WorkerError, run_experiment
from profiling_core.errors import ConfigError
from profiling_core.run import (
    PROCESS_KINDS,
    persistent_refusal,
    run_sweep,
    stop_persistent_workers,
)
from profiling_core.run.lock import device_lock

slow = pytest.mark.slow  # the tests that make real runs

WARM = {"size": 32, "dtype": "fp32", "device": "cpu", "warmup": 2, "wait": 0, "warmup_steps": 0, "active": 2}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def no_worker_left():
    stop_persistent_workers()
    yield
    stop_persistent_workers()


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _gone_within(pid, seconds=10.0):
    deadline = time.monotonic() + seconds
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(pid)


def _meta(run):
    return json.loads(run.meta_path.read_text())  # what is on disk, not the object in memory


def _steps(run):
    return Counter(e["name"] for e in scan_trace(run.trace_path) if e.get("ph") == "X")["matmul_add"]


@slow
def test_two_warm_runs_share_one_process_and_free_the_device_between(store):
    first = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    with device_lock("cpu", wait=False):  # the worker let go of the run's lock when the run ended
        pass
    second = run_experiment(ExperimentConfig(**{**WARM, "size": 48}), store=store, process="persistent", prestart=1)
    a, b = _meta(first)["process"], _meta(second)["process"]
    assert a["kind"] == b["kind"] == "persistent"
    assert a["pid"] == b["pid"] and _running(a["pid"])  # one process, still there for the next run
    assert (a["runs_before"], b["runs_before"]) == (0, 1)
    assert _steps(first) == _steps(second) == 2  # each trace holds its own run's steps only
    assert "aten::mm" in {e["name"] for e in scan_trace(second.trace_path)}
    assert sorted(r.run_id for r in store.list()) == sorted([first.run_id, second.run_id])
    assert not list((store.root / ".staging").iterdir())
    stop_persistent_workers()
    assert _gone_within(a["pid"])


@slow
def test_the_stages_of_a_run_are_timed_in_meta(store):
    t0 = time.perf_counter()
    run = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    click = time.perf_counter() - t0
    over = _meta(run)["overhead_s"]
    stages = {"start_s", "imports_s", "device_init_s", "profiler_s", "trace_export_s", "table_s", "merge_s",
              "staging_s", "lock_s", "end_s", "meta_s", "commit_s", "other_s", "total_s"}
    assert set(over) == stages, set(over) ^ stages
    assert all(isinstance(v, float) and v >= 0 for v in over.values()), over
    assert over["total_s"] <= click  # measured inside the caller's own clock
    assert sum(v for k, v in over.items() if k != "total_s") <= over["total_s"] + 1e-3


@slow
def test_cold_runs_and_scripts_never_use_it(store, tmp_path):
    warm = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    pid = _meta(warm)["process"]["pid"]
    cold = run_experiment(ExperimentConfig(**{**WARM, "warmup": 0}), store=store, process="persistent", prestart=1)
    script = tmp_path / "step.py"
    script.write_text("def make_step(device, dtype):\n    return (lambda: None), ()\n")
    scripted = run_experiment(ExperimentConfig(workload="script", knobs={"path": str(script)}, dtype="fp32",
                                               device="cpu", warmup=2, wait=0, warmup_steps=0, active=1),
                              store=store, process="persistent", prestart=1)
    for run, why in ((cold, "cold run"), (scripted, "script")):
        proc = _meta(run)["process"]
        assert proc["kind"] in ("fresh", "forked") and proc["pid"] != pid and proc["runs_before"] == 0
        assert why in proc["persistent_refused"], proc
    assert _meta(cold)["cuda_initialized_before_run"] is False
    again = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    assert _meta(again)["process"] == {"kind": "persistent", "pid": pid, "runs_before": 1}


def test_the_rule_names_what_gets_a_new_process():
    assert persistent_refusal(ExperimentConfig(**WARM)) is None
    assert persistent_refusal(ExperimentConfig(**{**WARM, "size": 4096, "batch": 8})) is None
    assert "cold run" in persistent_refusal(ExperimentConfig(**{**WARM, "warmup": 0}))
    for mode in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        assert "compiled run" in persistent_refusal(ExperimentConfig(**WARM, compile=mode))
    assert "calibration" in persistent_refusal(object())
    assert PROCESS_KINDS == ("fresh", "persistent")


@slow
@pytest.mark.parametrize("bad", ["Persistent", "fork", "", None, 1, "persistent\x1b[31m"])
def test_a_bad_process_kind_is_refused_with_the_value(store, bad):
    with pytest.raises(ConfigError) as info:
        run_experiment(ExperimentConfig(**WARM), store=store, process=bad)
    assert repr(bad) in str(info.value) and "'fresh' or 'persistent'" in str(info.value)
    assert store.list() == [] and not list((store.root / ".staging").glob("*"))


@slow
def test_a_failure_in_run_two_is_reported_and_run_three_gets_a_new_process(store):
    first = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    pid = _meta(first)["process"]["pid"]
    # 12 TiB of tensors: the worker's allocation guard refuses it, in the persistent process
    with pytest.raises(WorkerError) as info:
        run_experiment(ExperimentConfig(size=16384, dtype="fp32", batch=4096, device="cpu", warmup=1), store=store,
                       process="persistent", prestart=1)
    assert info.value.kind == "does_not_fit" and "GiB of tensors" in info.value.message
    assert _gone_within(pid)  # the worker died with its failed run
    third = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    proc = _meta(third)["process"]
    assert proc["kind"] == "persistent" and proc["pid"] != pid and proc["runs_before"] == 0
    assert sorted(r.run_id for r in store.list()) == sorted([first.run_id, third.run_id])
    assert not list((store.root / ".staging").iterdir())


@slow
def test_a_crash_in_run_two_loses_only_that_run(store):
    first = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    pid = _meta(first)["process"]["pid"]

    def status(msg):  # killed inside the profiling loop
        if msg.rstrip().endswith(": profiling"):
            os.kill(pid, signal.SIGKILL)

    with pytest.raises(WorkerError) as info:
        run_experiment(_slow(), store=store, process="persistent", prestart=1, on_status=status)
    assert info.value.kind == "crash" and "SIGKILL" in info.value.message
    third = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    assert _meta(third)["process"]["pid"] != pid
    assert sorted(r.run_id for r in store.list()) == sorted([first.run_id, third.run_id])


def _slow(**kw):
    # warm, and ten seconds or more of profiling on a quiet 2-core machine (the most steps a config takes): the tests
    # stop it within seconds of its profiling loop's start
    return ExperimentConfig(size=1024, dtype="fp32", device="cpu", warmup=1, wait=0, warmup_steps=0, active=1000,
                            **kw)


@slow
@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_a_timeout_or_cancel_kills_it_and_leaves_nothing_half_committed(store, how):
    first = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    pid = _meta(first)["process"]["pid"]
    cancel = threading.Event()

    def status(msg):  # cancelled inside the profiling loop
        if how == "cancel" and msg.rstrip().endswith(": profiling"):
            cancel.set()

    t0 = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run_experiment(_slow(timeout_s=2) if how == "timeout" else _slow(), store=store, process="persistent",
                       cancel_event=cancel, on_status=status)
    assert info.value.kind == ("timeout" if how == "timeout" else "cancelled")
    assert time.monotonic() - t0 < 30
    assert not _running(pid)  # killed, not left idle
    with device_lock("cpu", wait=False):
        pass
    assert [r.run_id for r in store.list()] == [first.run_id] and not list((store.root / ".staging").iterdir())
    after = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    assert _meta(after)["process"]["pid"] != pid and _meta(after)["process"]["runs_before"] == 0


@slow
def test_threads_set_by_one_run_do_not_reach_the_next(store):
    default = _meta(run_experiment(ExperimentConfig(**WARM), store=store))["device"]["cpu_threads"]  # a new process
    one = run_experiment(ExperimentConfig(**WARM, threads=1), store=store, process="persistent", prestart=1)
    after = run_experiment(ExperimentConfig(**WARM), store=store, process="persistent", prestart=1)
    assert _meta(one)["process"]["pid"] == _meta(after)["process"]["pid"]
    assert _meta(one)["device"]["cpu_threads"] == 1
    assert _meta(after)["device"]["cpu_threads"] == default
    if default == 1:
        pytest.skip("this machine's default is 1 thread: the leak cannot show")


def test_every_setting_a_run_may_change_is_set_back():
    """Each flag ProcessSettings names, changed to another value, reads as it was after restore (in this test's
    own process, as a worker between runs)."""
    import random

    import torch

    from profiling_core.run.loop import ProcessSettings
    saved = ProcessSettings(torch)
    b = torch.backends
    torch.set_num_threads(1 if torch.get_num_threads() != 1 else 2)
    torch.set_float32_matmul_precision("medium")
    b.cuda.matmul.allow_fp16_reduced_precision_reduction = not b.cuda.matmul.allow_fp16_reduced_precision_reduction
    b.cudnn.benchmark, b.cudnn.deterministic = not b.cudnn.benchmark, not b.cudnn.deterministic
    b.cudnn.enabled, b.mkldnn.enabled = not b.cudnn.enabled, not b.mkldnn.enabled
    b.cuda.enable_flash_sdp(not b.cuda.flash_sdp_enabled())
    b.cuda.enable_math_sdp(not b.cuda.math_sdp_enabled())
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    torch.autograd.set_detect_anomaly(True)
    torch.manual_seed(1234)
    random.seed(99)
    os.environ["PROFILING_LEAK_CHECK"] = "1"
    cwd = os.getcwd()
    os.chdir("/")
    try:
        from profiling_core.run.loop import _flags
        changed = [k for k, v in _flags(torch).items() if v != saved.flags[k]]
        assert len(changed) >= 12, changed
        assert saved.restore(torch) == []
        assert _flags(torch) == saved.flags
        assert "PROFILING_LEAK_CHECK" not in os.environ and os.getcwd() == cwd
        assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
        expected = torch.rand(3, generator=torch.Generator().manual_seed(saved.cpu_seed))
        assert torch.equal(torch.rand(3), expected)  # the seed as the process had it when it started
        torch.set_autocast_enabled("cpu", True)  # no setter puts it back from outside its context: refused
        assert saved.restore(torch) == ["autocast"]
    finally:
        torch.set_autocast_enabled("cpu", False)
        os.chdir(cwd)
        os.environ.pop("PROFILING_LEAK_CHECK", None)
        saved.restore(torch)


_CALLER = ("import sys\nfrom profiling_core import ExperimentConfig, RunStore, run_experiment\n"
           "run = run_experiment(ExperimentConfig(size=32, dtype='fp32', device='cpu', warmup=1, wait=0, "
           "warmup_steps=0, active=1), store=RunStore(sys.argv[1]), prestart=int(sys.argv[2]), "
           "process='persistent')\n"
           "print('pid', run.meta['process']['pid'], flush=True)\n"
           "import time; time.sleep(600)\n")


@slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads process states from /proc")
@pytest.mark.parametrize("prestart", [0, 1], ids=["fresh", "forked"])
def test_an_idle_persistent_worker_dies_with_its_killed_caller(tmp_path, prestart):
    env = dict(os.environ, PYTHONPATH=ROOT)
    caller = subprocess.Popen([sys.executable, "-c", _CALLER, str(tmp_path / "runs"), str(prestart)],
                              stdout=subprocess.PIPE, text=True, env=env)
    pid = None
    try:
        line = caller.stdout.readline()
        m = re.fullmatch(r"pid (\d+)\n", line)
        assert m, line
        pid = int(m.group(1))
        assert _running(pid)
        caller.kill()
        caller.wait()
        assert _gone_within(pid), "the persistent worker outlived its killed caller"
    finally:
        caller.kill()
        if pid and _running(pid):
            os.kill(pid, signal.SIGKILL)


@slow
def test_a_sweep_sends_its_warm_eager_runs_to_one_process(store):
    configs = [ExperimentConfig(**{**WARM, "size": s}) for s in (16, 32)] + [ExperimentConfig(**{**WARM,
                                                                                                 "warmup": 0})]
    res = run_sweep(configs, store=store, process="persistent", prestart=1)
    assert not res.errors, res.errors
    procs = [_meta(r)["process"] for r in res.runs]
    assert [p["kind"] for p in procs[:2]] == ["persistent"] * 2 and procs[0]["pid"] == procs[1]["pid"]
    assert procs[2]["kind"] == "forked" and procs[2]["pid"] != procs[0]["pid"]


@slow
def test_the_cli_sweep_takes_the_process_flag(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    root = tmp_path / "runs"
    p = subprocess.run([sys.executable, "-m", "profiling_core", "sweep", "--store", str(root), "--sizes", "16,32",
                        "--compile-modes", "off", "--warmup", "2", "--device", "cpu", "--dtype", "fp32", "--wait",
                        "0", "--warmup-steps", "0", "--active", "1", "--process", "persistent", "--json"],
                       capture_output=True, text=True, env=env, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    metas = [json.loads((root / r["run_id"] / "meta.json").read_text()) for r in json.loads(p.stdout)["runs"]]
    assert [m["process"]["kind"] for m in metas] == ["persistent"] * 2
    assert [m["process"]["runs_before"] for m in metas] == [0, 1]
    bad = subprocess.run([sys.executable, "-m", "profiling_core", "sweep", "--store", str(root), "--process",
                          "zygote"], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert bad.returncode == 2 and "'zygote'" in bad.stderr and "persistent" in bad.stderr
    assert len(RunStore(root).list()) == 2


@slow
def test_the_profile_forms_toggle_sends_warm_runs_to_one_process(runs_dir):  # noqa: F811
    """The Profile form's control: two warm eager runs with it on share one process; with it off, a new one."""
    from conftest_app import app, errors_of
    from test_app_profile import fill_profile_form, submit
    at = app("profile")
    assert not at.toggle(key="profile_form_process").value  # off unless asked for
    kinds = []
    for on in (True, True, False):
        fill_profile_form(at)
        at.number_input(key="profile_form_warmup").set_value(2)
        at.toggle(key="profile_form_process").set_value(on)
        submit(at, "Run profile")
        assert not errors_of(at), errors_of(at)
        newest = max((p for p in runs_dir.iterdir() if not p.name.startswith(".")), key=lambda p: p.stat().st_mtime)
        kinds.append(json.loads((newest / "meta.json").read_text())["process"])
    assert [k["kind"] for k in kinds] == ["persistent", "persistent", "forked"]
    assert kinds[0]["pid"] == kinds[1]["pid"] != kinds[2]["pid"]
    assert [k["runs_before"] for k in kinds] == [0, 1, 0]


@given(st.one_of(st.text(max_size=30), st.integers(), st.none(), st.booleans(), st.binary(max_size=10)))
@settings(max_examples=300, deadline=None)
def test_any_other_process_kind_is_refused_naming_it(bad):
    from profiling_core.run.worker import check_process
    if bad in PROCESS_KINDS:
        assert check_process(bad) == bad
        return
    with pytest.raises(ConfigError) as info:
        check_process(bad)
    assert repr(bad) in str(info.value) and "'fresh' or 'persistent'" in str(info.value)


@slow
@pytest.mark.parametrize("process,prestart", [("fresh", 0), ("fresh", 1), ("persistent", 0), ("persistent", 1)],
                         ids=["fresh", "forked", "persistent-fresh", "persistent-forked"])
def test_a_with_stack_run_records_no_frame_of_the_runner_s_own_threads(store, process, prestart):
    """torch's Python tracer records the frames every thread holds when the profile starts: a worker's own thread
    (its watch on the caller) must hold none, or every with_stack run of a user's workload shows it, open for the
    whole profile (torch's table gave it half the run's self CPU time).  Every Python frame in the trace is on
    the thread that ran the steps, and torch's own table names no thread's bootstrap."""
    cfg = ExperimentConfig(**{**WARM, "with_stack": True})
    run = run_experiment(cfg, store=store, process=process, prestart=prestart)
    assert _meta(run)["process"]["kind"] == ("forked" if (process, prestart) == ("fresh", 1) else process)
    events = scan_trace(run.trace_path)
    loop = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "X" and e["name"] == "matmul_add"}
    frames = Counter((e["pid"], e["tid"]) for e in events if e.get("cat") == "python_function")
    assert len(loop) == 1 and frames and set(frames) == loop, frames
    table = run.table_path.read_text()
    assert "run/loop.py" in table and "threading.py" not in table and "watch" not in table
