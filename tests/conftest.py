"""Shared fixtures.  Every test session gets its own device-lock folder, so tests never wait on (or block)
a real app running on the same machine; tests of the lock itself use their own folders."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("PROFILING_LOCK_DIR", tempfile.mkdtemp(prefix="profiling-locks-"))

DATA = Path(__file__).resolve().parent / "data"

pytest_plugins = ["conftest_app"]  # the AppTest fixtures (runs_dir, media, seed_run, interrupted), by argument name


@pytest.fixture
def store(tmp_path):
    from profiling_core import RunStore
    return RunStore(tmp_path / "runs")


def steady(rows) -> list:
    """The steps every per-step figure of a run reads (the steady state's), of a test's own list of a trace's working
    steps in trace order (the profiler's closing stub already left out): with 3 or more, those after the first (it
    may carry start-up effects, which question 3 compares); else all of them. Steps in which torch.compile's compiler
    ran, and on a GPU those that launched no GPU work, the test leaves out itself where its trace has any."""
    rows = list(rows)
    return rows[1:] if len(rows) >= 3 else rows


def scan_trace(path):
    """Plain json scan of a trace, independent of profiling_core: returns the list of events."""
    import gzip
    import json
    p = Path(path)
    raw = p.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    return data["traceEvents"] if isinstance(data, dict) else data


_RECORD_SCRIPT = '''
import json, sys
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
{setup}
{work}

x = torch.randn(64, 64)
work(x)  # warm: code objects made by a first call and dropped would be gone by the export (torch issue 130622)
with profile(activities=[ProfilerActivity.CPU], with_stack=True, acc_events=True{schedule}) as prof:
    for _ in range({steps}):
        work(x)
        prof.step()
prof.export_chrome_trace(sys.argv[1])
json.dump({{e.key: [e.count, e.cpu_time_total, e.self_cpu_time_total] for e in prof.key_averages()}},
          open(sys.argv[2], "w"))
'''


def record_on_cpu(tmp_path, work: str, *, steps: int, schedule: str = "", setup: str = ""):
    """Profile ``work(x)`` (``work``: the source of a function of that name; ``x`` a 64×64 tensor) ``steps`` times,
    after one call outside the profile, with ``with_stack=True`` on the CPU, in a process of its own (a thread another test left in this one would be
    recorded too). ``schedule``: torch's schedule arguments (``wait=1, warmup=1, active=2``); ``setup``: code run
    before. Returns (the trace's path, torch's own table: ``{key: [count, cpu_time_total, self_cpu_time_total]}``)."""
    import json
    import subprocess
    script = tmp_path / "record.py"
    script.write_text(_RECORD_SCRIPT.format(setup=setup, work=work, steps=steps,
                                            schedule=f", schedule=schedule({schedule})" if schedule else ""))
    trace, table = tmp_path / "t.json", tmp_path / "torch_table.json"
    subprocess.run([sys.executable, str(script), str(trace), str(table)], check=True, capture_output=True,
                   timeout=300)
    return trace, json.loads(table.read_text())
