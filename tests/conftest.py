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
