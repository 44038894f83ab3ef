"""Findings stay exactly as snapshotted (tests/data/findings_snapshot/findings.json, written by
tests/findings_snapshot.py): every id, question, title, text and evidence of every test trace, with and
without the run's config. A speed-up of profiling_core/explain/questions/ must not change a character.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("findings_snapshot", ROOT / "tests" / "findings_snapshot.py")
snap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(snap)

EXPECTED = json.loads(snap.SNAPSHOT.read_text(encoding="utf-8"))
PATHS = snap.trace_paths()
KEYS = sorted(k for k in EXPECTED if k.split("#")[0] in PATHS)


def test_snapshot_covers_every_test_trace():
    local = {k for k in snap.trace_paths(shared=False)}
    assert local <= {k.split("#")[0] for k in EXPECTED}
    with_meta = {k for k, p in PATHS.items() if snap.meta_config(p) is not None}
    assert with_meta and all(k + "#config" in EXPECTED for k in with_meta)


@pytest.mark.parametrize("key", sorted({k.split("#")[0] for k in KEYS}))
def test_findings_match_snapshot(key):
    got = {key + suffix: fs for suffix, fs in snap.trace_findings(PATHS[key]).items()}
    expected = {k: v for k, v in EXPECTED.items() if k.split("#")[0] == key}
    problems = snap.compare(expected, got)
    assert not problems, "\n".join(problems)
