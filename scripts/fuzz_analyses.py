#!/usr/bin/env python3
"""Fuzz the analyses: traces that load, made odd, through everything ``analyze`` does; anything raised is a bug.

``scripts/fuzz_traces.py`` checks that the loader refuses what it cannot read; this checks what comes after, on traces
it accepts. Each input is one of the real traces in ``tests/data`` (this app's H200 and CPU runs, third-party traces)
with a few of these changes, each to a few events: events dropped, duplicated or cut off at a time; starts moved and
durations set to 0, negative, fractional or huge; names and categories taken from other events or from the names the
analyses look for (``ProfilerStep#x``, launch and sync calls, compiled regions, ``[memory]``); events moved to other
processes and threads; arguments the analyses read (``External id``, ``correlation``, ``Python id``/``Python parent
id``, ``Input Dims``, ``grid``, ``block``, memory sizes ...) set to another event's value or to odd ones; flow ids
crossed; phases changed; ``deviceProperties`` made odd. A trace with a ``.meta.json`` beside it is analysed with that
run's config, and the diagnosis is judged against a calibration, as in the app.

Each case runs ``analyze``, ``findings``, ``diagnose``, the ``--json`` object (``json.dumps(allow_nan=False)``: a
NaN is no JSON) and the text summary; then every sentence (the summary's lines, the findings, the diagnoses' texts
and fixes) is read for what none may show (:data:`UNREADABLE`: NaN, infinity, Python's None as a value, a negative
duration). A ``TraceError`` at the load is an accepted refusal; any other exception, or a
case that runs past ``--timeout`` seconds, is reported once per (stage, exception type, place in profiling_core),
with the case kept as a file to replay. Seeded: ``--seed S --start I -n 1`` replays case I. Exit status 1 on any
failure.

Usage: python scripts/fuzz_analyses.py [-n 2000] [--seed 1] [--start 0] [--timeout 60] [--keep DIR]
"""
from __future__ import annotations

import argparse
import copy
import glob
import gzip
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

if __name__ == "__main__":  # as an ``analyze`` process starts (pandas without pyarrow); not when imported
    from profiling_core.cli import starting_analyze

    starting_analyze()

from profiling_core import ExperimentConfig  # noqa: E402
from profiling_core.analyses import analyze  # noqa: E402
from profiling_core.cli.analyze import _human, build_json  # noqa: E402
from profiling_core.errors import TraceError  # noqa: E402
from profiling_core.explain.diagnosis import diagnose  # noqa: E402
from profiling_core.explain.questions import findings  # noqa: E402
from profiling_core.store.peaks import DevicePeaks  # noqa: E402
from profiling_core.trace import open_trace  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data")
MAX_SEED_BYTES = 3 << 20  # decompressed: larger seeds make slow cases and add no kind of event the others lack
ODD = [None, True, -1, 0, 1, 2 ** 63, -2 ** 63, 1e308, -0.0, 1.5e-9, 3.5, "", "x", "12", "nan", [], {}, [1, [2]], [[]],
       [[-1, 0]], [[1, 2], "x"], "\u00e9\u6f22", 10 ** 400, [[10 ** 400, 2], [2, 3]]]  # (an int no float holds)
ARG_KEYS = ["External id", "correlation", "Python id", "Python parent id", "Python thread", "Input Dims", "Input type",
            "Input Strides", "Concrete Inputs", "grid", "block", "device", "stream", "context", "Ev Idx", "Bytes",
            "bytes", "Total Allocated", "Total Reserved", "Addr", "Device Type", "Device Id", "Sequence number",
            "Fwd thread id", "Record function id", "kernel", "queued", "registers per thread", "shared memory",
            "warps per SM", "est. achieved occupancy %", "memory bandwidth (GB/s)", "cbid", "graph id"]
NAMES = ["ProfilerStep#1", "ProfilerStep#x", "ProfilerStep#", "ProfilerStep#-3", "ProfilerStep#99999999999999999999",
         "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaLaunchKernel",
         "cuLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "aten::mm", "aten::addmm", "aten::copy_",
         "aten::to", "aten::item", "aten::nonzero", "Memcpy DtoD (Device -> Device)",
         "Memcpy HtoD (Pageable -> Device)",
         "[memory]", "Torch-Compiled Region: 0/0", "CompiledFunction", "Optimizer.step#AdamW.step",
         "Optimizer.zero_grad#AdamW.zero_grad", "## forward ##", "autograd::engine::evaluate_function: MmBackward0",
         "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "<built-in method run_backward>", "INVALID",
         "Activity Buffer Request", "", "\u00e9\u6f22 <b>x</b>"]
CATS = ["kernel", "cpu_op", "python_function", "user_annotation", "gpu_user_annotation", "cuda_runtime",
        "cuda_driver", "gpu_memcpy", "gpu_memset", "ac2g", "cpu_instant_event", "Trace", "overhead", "", None]


UNREADABLE = re.compile(r"\b(nan|NaN|inf|null)\b|[#(=]None\b|\bNone ?(µs|ms|s|%|×)"
                        r"|(?<![\w.])-\d[\d.,]* ?(µs|ms|s)\b")
"""What no sentence may show: a number that is not one (NaN, infinity, Python's None) or a negative duration."""


def load_seeds() -> list[tuple[str, dict, object]]:
    """(path, document, config or None) of every trace in tests/data small enough, with its run's config when a
    ``.meta.json`` lies beside it."""
    out = []
    for p in sorted(glob.glob(os.path.join(DATA, "**", "*.json*"), recursive=True)):
        base = os.path.basename(p)
        if base.endswith((".meta.json", "meta.json")) or os.sep + "tp_" in p or os.sep + "expected" + os.sep in p \
                or os.sep + "findings_snapshot" + os.sep in p or os.path.getsize(p) > MAX_SEED_BYTES:
            continue
        raw = open(p, "rb").read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        if len(raw) > MAX_SEED_BYTES:
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        if not (isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list) and len(doc["traceEvents"]) > 20):
            continue
        config = None
        meta = p[:-len(".json")] + ".meta.json" if p.endswith(".json") else None
        if meta and os.path.isfile(meta):
            try:
                config = ExperimentConfig.from_dict(json.load(open(meta))["config"])
            except (ValueError, KeyError, TypeError):
                config = None
        out.append((p, doc, config))
    return out


def _dicts(evs: list) -> list[dict]:
    return [e for e in evs if isinstance(e, dict)]


def mutate(rng: random.Random, doc: dict) -> tuple[dict, list[str]]:
    """A copy of the trace with 1 to 6 changes; returns it and the changes' names."""
    doc = copy.deepcopy(doc)
    evs = doc["traceEvents"]
    names = [e.get("name") for e in _dicts(evs)] + NAMES
    lanes = [(e.get("pid"), e.get("tid")) for e in _dicts(evs)]
    log: list[str] = []
    for _ in range(rng.randint(1, 6)):
        ds = _dicts(evs)
        if not ds:
            break
        some = lambda k=20: [rng.choice(ds) for _ in range(rng.randint(1, k))]  # noqa: E731
        k = rng.random()
        if k < 0.10:
            m = rng.randint(1, max(1, len(evs) // rng.choice([2, 5, 20, 100])))
            for _ in range(m):
                if evs:
                    evs.pop(rng.randrange(len(evs)))
            log.append(f"drop {m}")
        elif k < 0.16:
            evs.extend(copy.deepcopy(e) for e in some(10))
            log.append("duplicate")
        elif k < 0.20:
            ts = sorted(e["ts"] for e in ds if isinstance(e.get("ts"), (int, float)))
            if ts:
                end = ts[int(rng.random() * (len(ts) - 1))]
                evs[:] = [e for e in evs if not (isinstance(e, dict) and isinstance(e.get("ts"), (int, float))
                                                 and e["ts"] > end)]
            log.append("cut")
        elif k < 0.30:
            for e in some():
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] += rng.choice([-1, 1]) * rng.choice([0.001, 1, 7, 100, 5000, 1e6])
            log.append("ts")
        elif k < 0.38:
            for e in some():
                if "dur" in e:
                    d = e["dur"] if isinstance(e["dur"], (int, float)) else 1
                    e["dur"] = rng.choice([0, 1, -5, 0.5, 1e9, d * 3, d / 7])
            log.append("dur")
        elif k < 0.45:
            for e in some(10):
                e["cat"] = rng.choice(CATS)
            log.append("cat")
        elif k < 0.54:
            for e in some(10):
                e["name"] = rng.choice(names)
            log.append("name")
        elif k < 0.60:
            for e in some(10):
                p, t = rng.choice(lanes)
                e[rng.choice(["pid", "tid"])] = rng.choice([p, t, 0, -1, "x", 7, 2 ** 40])
            log.append("pid/tid")
        elif k < 0.76:
            for e in some():
                a = e.setdefault("args", {})
                if not isinstance(a, dict):
                    continue
                key = rng.choice(ARG_KEYS)
                other = [x["args"][key] for x in rng.sample(ds, min(30, len(ds)))
                         if isinstance(x.get("args"), dict) and key in x["args"]]
                if rng.random() < 0.15:
                    a.pop(key, None)
                else:
                    a[key] = copy.deepcopy(rng.choice(other + ODD))
            log.append("args")
        elif k < 0.82:
            flows = [e for e in ds if e.get("ph") in ("s", "f", "t")]
            ids = [e.get("id") for e in flows] + ODD[:6]
            for e in [rng.choice(flows) for _ in range(rng.randint(1, 10))] if flows else []:
                op = rng.random()
                if op < 0.5:
                    e["id"] = copy.deepcopy(rng.choice(ids))
                elif op < 0.7:
                    e["ph"] = rng.choice(["s", "f", "t"])
                elif op < 0.85:
                    e["bp"] = rng.choice(["e", "x", None])
                else:
                    e["cat"] = rng.choice(["ac2g", "fwdbwd", "async_cpu_to_gpu", "x"])
            log.append("flows")
        elif k < 0.88:
            frames = [e for e in ds if e.get("cat") == "python_function" and isinstance(e.get("args"), dict)]
            for e in [rng.choice(frames) for _ in range(rng.randint(1, 10))] if frames else []:
                a = e["args"]
                ids = [f["args"].get("Python id") for f in frames[:200]]
                a[rng.choice(["Python id", "Python parent id"])] = copy.deepcopy(rng.choice(ids + ODD[:5]))
            log.append("python links")
        elif k < 0.94:
            dp = doc.get("deviceProperties")
            if isinstance(dp, list) and dp and isinstance(dp[0], dict) and dp[0]:
                d = rng.choice(dp)
                if isinstance(d, dict) and d:
                    d[rng.choice(list(d))] = copy.deepcopy(rng.choice(ODD))
            else:
                doc["deviceProperties"] = [{"id": rng.choice([0, 1, "x"]), "name": rng.choice(["NVIDIA H100", "", 5]),
                                            "computeMajor": rng.choice([9, "x", None]), "computeMinor": 0,
                                            "totalGlobalMem": rng.choice([0, -1, 1 << 40]),
                                            "numSms": rng.choice([0, 132, -1])}]
            log.append("deviceProperties")
        else:
            for e in some(10):
                e["ph"] = rng.choice(["X", "i", "I", "s", "f", "B", "E", "C", "M"])
            log.append("ph")
    return doc, log


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _peaks() -> DevicePeaks:
    return DevicePeaks(device="NVIDIA H200", kind="cuda", driver="580", torch_version="2.11.0+cu130",
                       measured_at="2026-12-01T00:00:00+00:00", method="fuzz",
                       gemm_tflops={"bf16": 800.0, "fp32": 51.0, "fp16": 800.0}, gemm_tflops_median={"bf16": 750.0},
                       gemm_sizes={"bf16": 8192}, bandwidth_gbs=4200.0, bandwidth_gbs_median=4100.0, copy_bytes=2 << 30)


def run_case(path: str, config, peaks) -> str | None:
    """Run every stage on one file; the stage an exception escaped from is in its ``stage`` attribute."""
    stage = "open"
    try:
        try:
            session = open_trace(path, engine="sqlite")
        except TraceError:
            return "refused"
        with session:
            stage = "analyze"
            report = analyze(session, config=config)
            stage = "findings"
            found = findings(report, config)
            stage = "diagnose"
            diagnosis = diagnose(session, report, config, peaks)
            stage = "json"
            json.dumps(build_json(report, found, diagnosis), ensure_ascii=False, allow_nan=False)
            stage = "text"
            lines = _human(path, report, found, diagnosis)
            stage = "text check"
            for text in [*lines, *(f.text for f in found), *(x for d in diagnosis.diagnoses for x in (d.text, d.fix))]:
                m = UNREADABLE.search(text)
                if m:
                    around = text[max(0, m.start() - 120):m.end() + 60]
                    raise AssertionError(f"a text shows {m.group()!r}: …{around}…")
    except BaseException as e:
        e.stage = stage
        raise
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=2_000, help="cases (default 2,000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first case number (to replay one: --start I -n 1)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--keep", default=None, help="folder to keep failing cases in (default: a temporary one)")
    args = ap.parse_args(argv)
    seeds = load_seeds()
    keep = args.keep or tempfile.mkdtemp(prefix="fuzz-analyses-")
    os.makedirs(keep, exist_ok=True)
    peaks = _peaks()
    signal.signal(signal.SIGALRM, _alarm)
    failures: dict[tuple, list[int]] = {}
    refused = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.start, args.start + args.n):
            rng = random.Random(args.seed * 1_000_003 + i)
            src, doc, config = seeds[rng.randrange(len(seeds))]
            case, log = mutate(rng, doc)
            path = os.path.join(tmp, f"case{i}.json")
            with open(path, "w") as f:
                json.dump(case, f)
            signal.setitimer(signal.ITIMER_REAL, args.timeout)
            try:
                refused += run_case(path, config if rng.random() < 0.8 else None,
                                    peaks if rng.random() < 0.5 else None) == "refused"
            except Exception as e:  # noqa: BLE001 - every escape is what this looks for
                tb = traceback.extract_tb(e.__traceback__)
                at = next((f"{os.path.relpath(fr.filename, ROOT)}:{fr.lineno}" for fr in reversed(tb)
                           if os.sep + "profiling_core" + os.sep in fr.filename), "?")
                key = (getattr(e, "stage", "?"), "hang" if isinstance(e, _Hang) else type(e).__name__, at)
                if key not in failures:
                    kept = os.path.join(keep, f"seed{args.seed}_case{i}.json")
                    os.replace(path, kept)
                    print(f"FAIL case {i} ({os.path.relpath(src, DATA)}; {', '.join(log)}): {key[0]}: {key[1]}: "
                          f"{' '.join(str(e).split())[:300]} at {at}\n  kept as {kept}; replay: --seed {args.seed} "
                          f"--start {i} -n 1", flush=True)
                failures.setdefault(key, []).append(i)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                if os.path.exists(path):
                    os.unlink(path)
    print(f"fuzzed {args.n} cases (seed {args.seed}, from {len(seeds)} real traces; {refused} refused at the load) in "
          f"{time.perf_counter() - t0:.0f} s: {len(failures)} distinct failure(s)"
          + "".join(f"\n  {n}× {k[0]}: {k[1]} at {k[2]}" for k, n in
                    sorted(((k, len(v)) for k, v in failures.items()), key=lambda x: -x[1])))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
