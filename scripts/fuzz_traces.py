#!/usr/bin/env python3
"""Fuzz the trace loader: >= 10,000 generated inputs; any exception that is not a TraceError, or a hang, fails.

Inputs are mutations of real traces (tests/data/traces) and of small generated traces: cut, spliced,
byte-flipped, gzip-damaged, events with fields swapped for odd values, deep nesting. Then (``--pathological``, 2,000
by default, numbered after the others) the shapes made against the streaming splitter (tests/pathological_traces.py:
long elements, "}," inside strings and at nested levels, whitespace runs, escapes), damaged the same ways, with text
that is not Unicode (lone surrogate escapes, bytes that are not UTF-8) put in, and small gzip bombs. Seeded, so a
failure can be replayed with --seed and --start (and --pathological 0, or -n 0 for a pathological case).

Usage: python scripts/fuzz_traces.py [-n 10000] [--pathological 2000] [--seed 1] [--timeout 10]
"""
from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import random
import signal
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

sys.path.insert(0, os.path.join(ROOT, "tests"))

import pathological_traces  # noqa: E402

from profiling_core.errors import TraceError  # noqa: E402
from profiling_core.trace import open_trace  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data", "traces")
ODD = [None, True, -1, 0, 2 ** 64, -2 ** 63, 1e308, -0.0, 1.5e-9, "", "x", "12", "0x1f", "nan", "1e3", [], {},
       [1, [2]], {"a": {"b": None}}, "\u00e9\u6f22", "\ud800"[:0] + "\x00"]
PHASES = ["X", "i", "I", "R", "s", "f", "t", "M", "B", "E", "C", "b", "e", "n", "P", "O", "", "XX"]


def _load_seeds() -> list[list]:
    seeds = []
    for name in sorted(os.listdir(DATA)):
        path = os.path.join(DATA, name)
        if not os.path.isfile(path) or os.path.getsize(path) > 120_000:
            continue
        raw = open(path, "rb").read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
        seeds.append(doc["traceEvents"] if isinstance(doc, dict) else doc)
    return seeds


def _mutate_events(rng: random.Random, evs: list) -> list:
    evs = [dict(e) if isinstance(e, dict) else e for e in rng.sample(evs, min(len(evs), rng.randint(1, 60)))]
    for _ in range(rng.randint(1, 8)):
        e = rng.choice(evs)
        if not isinstance(e, dict):
            continue
        op = rng.random()
        if op < 0.5:
            e[rng.choice(["ph", "ts", "dur", "pid", "tid", "name", "cat", "id", "bp", "s", "args"])] = copy.deepcopy(rng.choice(ODD))
        elif op < 0.7:
            e["ph"] = rng.choice(PHASES)
        elif op < 0.85 and e:
            e.pop(rng.choice(list(e)))
        else:
            evs.append(copy.deepcopy(rng.choice(ODD)))
    return evs


def _bytes_case(rng: random.Random, seeds: list) -> bytes:
    kind = rng.random()
    evs = _mutate_events(rng, rng.choice(seeds))
    doc = {"traceEvents": evs} if rng.random() < 0.8 else evs
    data = json.dumps(doc).encode()
    if kind < 0.55:
        return data
    if kind < 0.7:  # cut
        return data[: rng.randint(0, len(data))]
    if kind < 0.8:  # flip bytes
        b = bytearray(data)
        for _ in range(rng.randint(1, 10)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind < 0.9:  # gzip, maybe damaged
        z = bytearray(gzip.compress(data))
        if rng.random() < 0.5:
            z = z[: rng.randint(2, len(z))]
        elif rng.random() < 0.5:
            z[rng.randrange(10, len(z))] ^= 0xFF
        return bytes(z)
    depth = rng.choice([10, 500, 5000, 100_000])  # deep nesting
    return b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": ' + b"[" * depth + b"]" * depth + b"}]}"


_ODD_TEXT = [b"\\ud800", b"\\udc00x", b"\\ud83d\\ude00", b"\\\\ud800", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\\",
             b"\\\"", b"},", b" " * 5000]
_MAX_BYTES = 64 << 20


def _pathological_case(rng: random.Random, tmp: str) -> str:
    """A pathological shape (small), maybe damaged, with odd text put in; or a small gzip bomb. Returns its path."""
    path = os.path.join(tmp, "case.json")
    if rng.random() < 0.01:
        path += ".gz"
        pathological_traces.write_bomb(path, rng.choice(sorted(pathological_traces.BOMBS)), _MAX_BYTES + (1 << 20))
        return path
    shape = rng.choice(sorted(pathological_traces.SHAPES))
    size = rng.choice([1 << 10, 1 << 14, 1 << 17, 1 << 20])
    inner = {"brace_names": "name_bytes", "whitespace": "run", "nested_args": "event_bytes", "escapes": "name_bytes"}
    kw = {inner[shape]: rng.choice([64, 1 << 12, 1 << 16, 1 << 19])} if shape in inner else {}
    b = bytearray(pathological_traces.SHAPES[shape](size, **kw)[0])
    for _ in range(rng.choice([0, 1, 3, 20])):  # odd text at random places (in a string, or not: invalid JSON)
        at = rng.randrange(len(b))
        b[at:at] = rng.choice(_ODD_TEXT)
    kind = rng.random()
    if kind < 0.15:  # cut
        b = b[: rng.randint(0, len(b))]
    elif kind < 0.25:  # flip bytes
        for _ in range(rng.randint(1, 10)):
            b[rng.randrange(len(b))] = rng.choice(b'{}[],"\\ :x0')
    data = bytes(b)
    if kind > 0.9:  # gzip, maybe damaged
        data = gzip.compress(data, 1)
        if rng.random() < 0.3:
            data = data[: rng.randint(2, len(data))]
    with open(path, "wb") as f:
        f.write(data)
    return path


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10_000)
    ap.add_argument("--pathological", type=int, default=2_000, help="pathological inputs, after the -n others")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first case number (to replay one)")
    ap.add_argument("--pstart", type=int, default=0, help="first pathological case number (to replay one)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds one input may take before it counts as a hang")
    args = ap.parse_args(argv)
    seeds = _load_seeds()
    signal.signal(signal.SIGALRM, _alarm)
    failures, errors, done = [], 0, 0
    t0 = time.monotonic()
    total = args.n + args.pathological
    with tempfile.TemporaryDirectory(prefix="fuzz-traces-") as tmp:
        cases = [(i, f"--start {i} -n 1 --pathological 0") for i in range(args.start, args.start + args.n)]
        cases += [(-1 - j, f"-n 0 --pstart {j} --pathological 1")
                  for j in range(args.pstart, args.pstart + args.pathological)]
        for i, replay in cases:
            if i >= 0:
                rng = random.Random(args.seed * 1_000_003 + i)
                path = os.path.join(tmp, "case.json")
                with open(path, "wb") as f:
                    f.write(_bytes_case(rng, seeds))
            else:  # (their own seeds: the others' cases stay as they were)
                rng = random.Random(args.seed * 1_000_003 + 500_000_000 - 1 - i)
                path = _pathological_case(rng, tmp)
            signal.setitimer(signal.ITIMER_REAL, args.timeout)
            try:
                with open_trace(path, engine="sqlite", max_bytes=_MAX_BYTES) as s:
                    s.query("select count(*), sum(dur), max(depth) from slice")
                    s.query("select count(*) from flow f join slice a on a.id = f.slice_out")
                    s.query("select count(extract_arg(arg_set_id, 'args.External id')) from slice")
                    s.query("select count(*), count(distinct key) from args")
            except TraceError:
                errors += 1
            except _Hang:
                failures.append((replay, "hang", f"> {args.timeout} s"))
            except Exception as e:  # noqa: BLE001 - that is what we look for
                failures.append((replay, type(e).__name__, "".join(traceback.format_exception_only(e)).strip()[:300]))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                if os.path.exists(path):
                    os.unlink(path)
            done += 1
            if done % 1000 == 0:
                print(f"  {done} inputs, {errors} TraceErrors, {len(failures)} failures, "
                      f"{time.monotonic() - t0:.0f} s", flush=True)
    print(f"fuzzed {total} inputs ({args.n} + {args.pathological} pathological; seed {args.seed}) in "
          f"{time.monotonic() - t0:.0f} s: {total - errors - len(failures)} loaded, {errors} refused with a TraceError, "
          f"{len(failures)} failures")
    for replay, kind, msg in failures[:50]:
        print(f"FAIL (replay: --seed {args.seed} {replay}): {kind}: {msg}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
