#!/usr/bin/env python3
"""Snapshot every Report table of ``analyze(session)`` on the test traces, so speed-ups can prove they change nothing.

For each trace (every ``.json``/``.json.gz`` trace under tests/data, plus three real traces from
/work/shared/traces when present) the mirror (``engine="sqlite"``) loads it and ``analyze`` runs; every Report
DataFrame is reduced to its columns, dtypes, row count, index and a SHA-256 of its values written canonically
(floats exactly, via ``float.hex``; None, NaN and pd.NA kept apart; value types kept), and ``summary`` is stored
whole. Finding texts are not snapshotted (profiling_core/findings.py changes independently).

Usage:
    python scripts/snapshot_analyses.py            # (re)write tests/data/analyses_snapshot/report_tables.json
    python scripts/snapshot_analyses.py --check    # compare against it, print differences, exit 1 on any
    python scripts/snapshot_analyses.py --dump DIR # also write each table's canonical values (for diffing)
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data"
SNAPSHOT = DATA / "analyses_snapshot" / "report_tables.json"
SHARED = Path("/work/shared/traces/third_party")
SHARED_TRACES = [
    "hta/trace_diff_control_a100/control.json.gz",
    "kineto/resnet50_v100_2021jun/worker0.1623143089861.pt.trace.json.gz",
    "hta/ns_resolution_v100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
]


def trace_paths() -> dict[str, Path]:
    """{key: path}: keys are paths relative to tests/data, or ``shared:<path>`` for the shared traces."""
    out: dict[str, Path] = {}
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")) \
                and not p.name.endswith(".meta.json") and "tp_golden" not in p.parts \
                and not any(part.endswith("_snapshot") for part in p.parts):  # snapshots are not traces
            out[str(p.relative_to(DATA))] = p
    for rel in SHARED_TRACES:
        if (SHARED / rel).is_file():
            out["shared:" + rel] = SHARED / rel
    return out


def _value(v):
    import numpy as np
    import pandas as pd
    if v is None:
        return None
    if v is pd.NA:
        return {"NA": 1}
    if v is pd.NaT:
        return {"NaT": 1}
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return {"nan": 1} if math.isnan(f) else {"f": f.hex()}
    if isinstance(v, str):
        return v
    return {type(v).__name__: repr(v)}


def canonical(df) -> dict:
    """The frame's columns, dtypes, index and every value, as plain JSON (exact floats)."""
    return {
        "columns": [str(c) for c in df.columns],
        "dtypes": [str(t) for t in df.dtypes],
        "index": {"type": type(df.index).__name__, "values": [_value(v) for v in df.index.tolist()]},
        "data": [[_value(v) for v in df[c].tolist()] for c in df.columns] if df.columns.is_unique
        else [[_value(v) for v in df.iloc[:, i].tolist()] for i in range(df.shape[1])],
    }


def digest(df) -> dict:
    c = canonical(df)
    text = json.dumps(c, sort_keys=True, separators=(",", ":"))
    return {"columns": c["columns"], "dtypes": c["dtypes"], "rows": int(len(df)),
            "sha256": hashlib.sha256(text.encode()).hexdigest()}


def report_tables(path: Path, dump_dir: Path | None = None, key: str = "") -> dict:
    """{table: digest} of analyze() on one trace, plus ``summary`` (JSON-normalised)."""
    import pandas as pd

    from profiling_core.analyses import analyze
    from profiling_core.trace import open_trace
    with open_trace(str(path), engine="sqlite") as s:
        r = analyze(s)
    out: dict = {}
    for f in dataclasses.fields(r):
        v = getattr(r, f.name)
        if isinstance(v, pd.DataFrame):
            out[f.name] = digest(v)
            if dump_dir is not None:
                d = dump_dir / key.replace("/", "__").replace(":", "_")
                d.mkdir(parents=True, exist_ok=True)
                (d / f"{f.name}.json").write_text(json.dumps(canonical(v), indent=0))
    out["summary"] = json.loads(json.dumps(r.summary, default=str))
    out["engine"] = r.engine
    return out


def snapshot(dump_dir: Path | None = None) -> dict:
    return {key: report_tables(p, dump_dir, key) for key, p in trace_paths().items()}


def compare(expected: dict, got: dict) -> list[str]:
    problems = []
    for key in sorted(set(expected) | set(got)):
        if key not in got:
            problems.append(f"{key}: not computed now")
            continue
        if key not in expected:
            problems.append(f"{key}: not in the snapshot")
            continue
        e, g = expected[key], got[key]
        for table in sorted(set(e) | set(g)):
            if e.get(table) != g.get(table):
                problems.append(f"{key}: {table} differs: expected {e.get(table)!r}, got {g.get(table)!r}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the stored snapshot instead of writing it")
    ap.add_argument("--dump", type=Path, help="also write every table's canonical values under this folder")
    a = ap.parse_args()
    got = snapshot(a.dump)
    if a.check:
        problems = compare(json.loads(SNAPSHOT.read_text()), got)
        for p in problems:
            print(p)
        print(f"{len(got)} traces, {len(problems)} differences")
        return 1 if problems else 0
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    # one line per trace: small, and a diff names the trace
    lines = [f"{json.dumps(k)}: {json.dumps(got[k], sort_keys=True, separators=(',', ':'))}" for k in sorted(got)]
    SNAPSHOT.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {SNAPSHOT.relative_to(ROOT)}: {len(got)} traces")
    return 0


if __name__ == "__main__":
    sys.exit(main())
