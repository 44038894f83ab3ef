"""The fast trace loader changes nothing: every mirror table is identical to the snapshot taken before the rework.

The snapshot (tests/data/mirror_snapshot/mirror_tables.json) was written by scripts/snapshot_mirror.py from the
loader as it was before any speed-up; it holds a SHA-256 of the full content of every table (in id order) and the
load_stats of every trace under tests/data, of generated edge-case traces, and of the shared real traces (compared
only where ../shared/traces is present).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import snapshot_mirror as sm  # noqa: E402

WANT = json.loads(sm.SNAPSHOT.read_text())
PATHS = sm.trace_paths()


@pytest.mark.parametrize("key", sorted(k for k in WANT if not k.startswith("generated:")))
def test_trace_tables_unchanged(key):
    if key not in PATHS:
        pytest.skip("trace not present here (shared traces)")
    assert sm.snapshot_one(PATHS[key]) == WANT[key]


def test_generated_traces_unchanged():
    keys = [k for k in WANT if k.startswith("generated:")]
    got = sm.snapshot_all(keys=keys)
    assert len(got) == len(keys)
    for k in keys:
        assert got[k] == WANT[k], k
