#!/usr/bin/env python3
"""Snapshot the full content of every table of the SQLite mirror, so loader speed-ups can prove they change nothing.

For each trace — every ``.json``/``.json.gz`` under tests/data, every one under ``../shared/traces/third_party``
(beside the repo, or /work/shared) when present, and a fixed set of generated edge-case traces (overlapping X events
that spill, B/E pairs, instants of every scope, s/t/f flows with and without ``bp``, string pids/tids, equal
timestamps, float/str times) — ``open_trace(engine="sqlite")`` loads it and every public table (slice, thread_track,
process_track, track, thread, process, flow, args) is read in id order; the stored value is a row count and a SHA-256
of every row written canonically (floats exactly, via ``float.hex``; value types kept). ``load_stats`` is stored
whole. A trace that does not load stores its error class and message instead.

Usage:
    python scripts/snapshot_mirror.py            # (re)write tests/data/mirror_snapshot/mirror_tables.json
    python scripts/snapshot_mirror.py --check    # compare against it, print differences, exit 1 on any
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data"
SNAPSHOT = DATA / "mirror_snapshot" / "mirror_tables.json"
SHARED_CANDIDATES = [ROOT.parent / "shared" / "traces" / "third_party", Path("/work/shared/traces/third_party")]

# (table, ORDER BY) — every column of the public table/view, rows in id order.
TABLES = [
    ("slice", "id"), ("thread_track", "id"), ("process_track", "id"), ("track", "id"),
    ("thread", "utid"), ("process", "upid"), ("flow", "id"), ("args", "id"),
]
N_GENERATED = 60


def shared_dir() -> Path | None:
    for d in SHARED_CANDIDATES:
        if d.is_dir():
            return d
    return None


def trace_paths() -> dict[str, Path]:
    """{key: path}: paths relative to tests/data, or ``shared:<path>`` for the shared traces."""
    out: dict[str, Path] = {}
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")) \
                and not p.name.endswith(".meta.json") \
                and not any(part.endswith("_snapshot") for part in p.parts):
            out[str(p.relative_to(DATA))] = p
    sd = shared_dir()
    if sd is not None:
        for p in sorted(sd.rglob("*")):
            if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")):
                out["shared:" + str(p.relative_to(sd))] = p
    return out


def _ts(rng: random.Random, base: int) -> object:
    r = rng.random()
    if r < 0.6:
        return base
    if r < 0.85:
        return base + rng.choice([0.5, 0.25, 0.001, 0.0005, 0.123456])
    return f"{base}.{rng.randint(0, 999999):06d}" if r < 0.95 else str(base)


def generated_trace(seed: int) -> list:
    """A small trace full of the cases the nesting/flow rules care about."""
    rng = random.Random(seed)
    pids = [1, 2, -1, "Spans", 0][: rng.randint(1, 5)]
    tids = [1, 2, 0, "stream 7", 7, None][: rng.randint(1, 6)]
    evs: list = []
    for p in pids:
        if rng.random() < 0.7:
            evs.append({"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": f"proc {p}"}})
        for t in tids:
            if rng.random() < 0.5:
                evs.append({"ph": "M", "name": "thread_name", "pid": p, "tid": t, "args": {"name": f"thr {t} "}})
    n = rng.randint(5, 400)
    span = rng.choice([20, 200, 5000])
    for i in range(n):
        p, t = rng.choice(pids), rng.choice(tids)
        base = rng.randint(0, span)
        r = rng.random()
        e: dict = {"pid": p, "tid": t}
        if t is None:
            del e["tid"]
        if r < 0.55:
            e.update(ph="X", ts=_ts(rng, base), dur=rng.choice([0, 1, 2, 5, 10, 50, rng.randint(0, span)]))
            if rng.random() < 0.05:
                e["dur"] = rng.choice([-1, None, "x", 1.5])
        elif r < 0.65:
            e.update(ph=rng.choice("BE"), ts=_ts(rng, base))
        elif r < 0.72:
            e.update(ph=rng.choice(["i", "I", "R"]), ts=_ts(rng, base))
            if rng.random() < 0.8:
                e["s"] = rng.choice(["g", "p", "t", "x"])
        elif r < 0.95:
            e.update(ph=rng.choice("sftf"), ts=_ts(rng, base), id=rng.choice([rng.randint(0, 30), "0x1f", "zz", 7]))
            if rng.random() < 0.5:
                e["bp"] = "e"
        else:
            e.update(ph=rng.choice(["C", "b", "", None, 5]), ts=base)
        if rng.random() < 0.9:
            e["name"] = rng.choice(["k", "a", "", None, 3, "ProfilerStep#1", "cudaLaunchKernel", "é"])
        if rng.random() < 0.8:
            e["cat"] = rng.choice(["kernel", "cpu_op", "", None, "ac2g", 1])
        if rng.random() < 0.6:
            e["args"] = rng.choice([{}, None, {"correlation": i, "grid": [1, 2, 3]}, {"a": {"b": 1.0, "c": True}},
                                    {"External id": i, "s": "x\u00e9", "n": None}])
        evs.append(e)
    if rng.random() < 0.5:
        evs.sort(key=lambda e: (str(type(e.get("ts"))), str(e.get("ts"))))
    return evs


def _value(v):
    if v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return {"f": v.hex()}
    if isinstance(v, bytes):
        return {"b": v.hex()}
    return {type(v).__name__: repr(v)}


def snapshot_one(path: Path) -> dict:
    from profiling_core.errors import TraceError
    from profiling_core.trace import open_trace
    try:
        s = open_trace(path, engine="sqlite")
    except TraceError as e:
        return {"error": type(e).__name__, "message": str(e).replace(str(path), "<path>")}
    try:
        out: dict = {"load_stats": dataclasses.asdict(s.load_stats)}
        with s._backend._b._lock:  # the mirror's connection (read-only: SELECTs only), opened once its tables exist
            conn = s._backend._b._connection()
        for table, order in TABLES:
            h = hashlib.sha256()
            cur = conn.execute(f"SELECT * FROM {table} ORDER BY {order}")
            cols = [d[0] for d in cur.description]
            h.update(json.dumps(cols).encode())
            n = 0
            while rows := cur.fetchmany(8192):
                for row in rows:
                    h.update(json.dumps([_value(v) for v in row], ensure_ascii=False).encode("utf-8", "surrogatepass"))
                    h.update(b"\n")
                n += len(rows)
            out[table] = {"rows": n, "sha256": h.hexdigest()}
        return out
    finally:
        s.close()


def snapshot_all(keys: list[str] | None = None, generated: bool = True) -> dict:
    res: dict = {}
    for key, path in trace_paths().items():
        if keys is None or key in keys:
            res[key] = snapshot_one(path)
    if generated:
        with tempfile.TemporaryDirectory() as d:
            for i in range(N_GENERATED):
                key = f"generated:{i}"
                if keys is not None and key not in keys:
                    continue
                p = Path(d) / f"g{i}.json"
                evs = generated_trace(i)
                doc = {"traceEvents": evs} if i % 3 else evs
                text = json.dumps(doc).encode()
                if i % 4 == 3:  # invalid UTF-8 inside args (repaired to U+FFFD by the loader)
                    text = text.replace(b'"s": "x\\u00e9"', b'"s": "x\xff\xc3 \xed\xa0\x80"')
                p.write_bytes(text)
                res[key] = snapshot_one(p)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    got = snapshot_all()
    if not args.check:
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(got)} traces to {SNAPSHOT}")
        return 0
    want = json.loads(SNAPSHOT.read_text())
    bad = 0
    for key, w in want.items():
        if key not in got:
            continue  # e.g. shared traces absent here
        if got[key] != w:
            bad += 1
            print(f"DIFF {key}:")
            for k in sorted(set(w) | set(got[key])):
                if w.get(k) != got[key].get(k):
                    print(f"   {k}: want {w.get(k)} got {got[key].get(k)}")
    print(f"{len(got)} traces checked, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
