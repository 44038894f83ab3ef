"""The analyses change nothing by accident: every Report table equals the snapshot taken from the code before.

The snapshot (tests/data/analyses_snapshot/report_tables.json, written by scripts/snapshot_analyses.py from the code
as it was before the analyses were made faster) holds, per trace and per Report DataFrame, the columns, dtypes, row
count and a SHA-256 of every value written exactly (floats via float.hex; None, NaN, pd.NA apart), and the summary.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("snapshot_analyses", ROOT / "scripts" / "snapshot_analyses.py")
snap = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("snapshot_analyses", snap)
_spec.loader.exec_module(snap)

EXPECTED = json.loads(snap.SNAPSHOT.read_text())
PATHS = snap.trace_paths()


def test_snapshot_covers_every_test_trace():
    local = {k for k in PATHS if not k.startswith("shared:")}
    assert local <= set(EXPECTED), f"traces missing from the snapshot: {sorted(local - set(EXPECTED))}"
    assert len(local) >= 30


@pytest.mark.parametrize("key", sorted(PATHS))
def test_report_tables_identical(key):
    if key not in EXPECTED:
        pytest.skip(f"{key} not in the snapshot")
    got = snap.report_tables(PATHS[key])
    problems = snap.compare({key: EXPECTED[key]}, {key: got})
    assert not problems, "\n".join(problems)
