#!/usr/bin/env python3
"""Snapshot the full findings (id, question, title, text, evidence) of every test trace, so speed-ups of
profiling_core/explain/questions/ can prove they change no output.

For each trace under tests/data (h200, h200_app, cpu, third_party, traces; ``tp_golden`` and ``*.meta.json``
excluded), plus three shared traces (SHARED_TRACES) when present, the mirror (``engine="sqlite"``)
loads it, ``analyze`` runs and ``findings(report)`` is stored as JSON. A trace with a ``.meta.json`` beside it
(tests/data/h200_app) is stored twice: without a config (``<key>``) and with the meta's ``config``
(``<key>#config``), as tests/test_findings.py passes it.

Usage:
    python tests/findings_snapshot.py            # (re)write tests/data/findings_snapshot/findings.json
    python tests/findings_snapshot.py --check    # compare against it, print differences, exit 1 on any
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data"
SNAPSHOT = DATA / "findings_snapshot" / "findings.json"
SHARED = ROOT.parent / "shared" / "traces" / "third_party"  # the shared traces beside the repository
SHARED_TRACES = [
    "hta/trace_diff_control_a100/control.json.gz",
    "kineto/resnet50_v100_2021jun/worker0.1623143089861.pt.trace.json.gz",
    "hta/ns_resolution_v100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
]
TRACE_DIRS = ("h200", "h200_app", "cpu", "third_party", "traces")
"""The folders of tests/data that hold traces (others hold snapshots of other tools)."""
SKIP_DIRS = ("tp_golden",)


def trace_paths(shared: bool = True) -> dict[str, Path]:
    """{key: path}: keys are paths relative to tests/data, or ``shared:<path>`` for the shared traces."""
    out: dict[str, Path] = {}
    for p in sorted(q for d in TRACE_DIRS for q in (DATA / d).rglob("*")):
        if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")) \
                and not p.name.endswith(".meta.json") and not any(d in p.parts for d in SKIP_DIRS):
            out[str(p.relative_to(DATA))] = p
    if shared:
        for rel in SHARED_TRACES:
            if (SHARED / rel).is_file():
                out["shared:" + rel] = SHARED / rel
    return out


def meta_config(path: Path):
    """The run's config from the ``.meta.json`` beside a trace, or None."""
    if not path.name.endswith(".json"):
        return None
    meta = path.with_name(path.name[:-len(".json")] + ".meta.json")
    return json.loads(meta.read_text()).get("config") if meta.is_file() else None


def _json(fs) -> list:
    """Findings as plain JSON (what json.dumps keeps: the snapshot compares exactly on that)."""
    return json.loads(json.dumps([f.to_dict() for f in fs], default=repr))


def trace_findings(path: Path) -> dict[str, list]:
    """{"": findings without config, "#config": with the meta's config (when there is one)}."""
    from profiling_core.analyses import analyze
    from profiling_core.explain.questions import findings
    from profiling_core.trace import open_trace
    with open_trace(str(path), engine="sqlite") as s:
        r = analyze(s)
    out = {"": _json(findings(r))}
    config = meta_config(path)
    if config is not None:
        out["#config"] = _json(findings(r, config=config))
    return out


def snapshot(paths: dict[str, Path]) -> dict[str, list]:
    got: dict[str, list] = {}
    for key, p in paths.items():
        for suffix, fs in trace_findings(p).items():
            got[key + suffix] = fs
    return got


def compare(expected: dict, got: dict) -> list[str]:
    problems = []
    for key in sorted(set(expected) | set(got)):
        if key not in got:
            problems.append(f"{key}: not computed now")
        elif key not in expected:
            problems.append(f"{key}: not in the snapshot")
        elif expected[key] != got[key]:
            e = {f["id"]: f for f in expected[key]}
            g = {f["id"]: f for f in got[key]}
            if list(e) != list(g):
                problems.append(f"{key}: finding ids differ: expected {list(e)}, got {list(g)}")
            for fid in e:
                if fid in g and e[fid] != g[fid]:
                    problems.append(f"{key}: {fid} differs:\n  expected {e[fid]!r}\n  got      {g[fid]!r}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the stored snapshot instead of writing it")
    a = ap.parse_args()
    got = snapshot(trace_paths())
    if a.check:
        expected = json.loads(SNAPSHOT.read_text())
        # shared traces are optional: compare only those present on both sides
        expected = {k: v for k, v in expected.items() if not k.startswith("shared:") or k in got}
        problems = compare(expected, got)
        for p in problems:
            print(p)
        print(f"{len(got)} entries, {len(problems)} differences")
        return 1 if problems else 0
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    # one line per trace: a diff names the trace
    lines = [f"{json.dumps(k)}: {json.dumps(got[k], sort_keys=True, ensure_ascii=False)}" for k in sorted(got)]
    SNAPSHOT.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT.relative_to(ROOT)}: {len(got)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
