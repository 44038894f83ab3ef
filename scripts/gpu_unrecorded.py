#!/usr/bin/env python3
"""On a GPU machine: is the first recorded kernel's long wait after its launch call work queued before the recording?

The breakdown's ``unrecorded`` time (``Shared.unrecorded_waits``) rests on that reading. This script profiles the same
fp32 scaled_dot_product_attention step (batch 8, 16 heads, 2048 tokens, head_dim 100, causal: the H200 fixture
``tests/data/h200_verdicts/attn_hd100_fp32_eager.json``, a kernel of ~3.3 ms) under ``schedule(wait=1, warmup=1,
active=3)`` twice, alternating: ``plain``, the loop as a user writes it, and ``synced``, the same loop with one
``torch.cuda.synchronize()`` before the step that opens the recording, so that nothing is queued when it begins.
If the reading holds, the first recorded kernel of ``plain`` waits about a kernel's length after its call returns and
that of ``synced`` starts within a launch's latency; or, where the warm-up step's kernel started only after the
recording began, ``plain``'s first recorded kernel is that one, with no launch call in the trace, and it starts
later after the recording began than a launch takes (behind the wait step's kernel). Writes
``<variant>_<round>.json`` traces to ``--out`` and prints, per trace, those waits from a plain scan of its JSON.

Usage (repo root, on the device machine): python3 scripts/gpu_unrecorded.py --out DIR [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule


def first_wait_us(path: Path) -> tuple[float | None, float, float | None]:
    """(first kernel's start − its launch call's end, that kernel's duration, its start − the recording's start),
    µs, from the trace's JSON; the first is None where the trace holds no launch call of that kernel (it was queued
    before the recording began and started after it), the last where the trace has no profiler ``Trace`` slice."""
    ev = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") == "cuda_runtime" and "correlation" in (e.get("args") or {})}
    first = min((e for e in ev if e.get("cat") == "kernel"), key=lambda e: float(e["ts"]))
    began = [float(e["ts"]) for e in ev if e.get("cat") == "Trace"]
    since = float(first["ts"]) - max(b for b in began if b <= float(first["ts"])) if began else None
    call = calls.get(first["args"]["correlation"])
    if call is None:
        return None, float(first["dur"]), since
    return float(first["ts"]) - (float(call["ts"]) + float(call["dur"])), float(first["dur"]), since


def run(out: Path, label: str, synced: bool) -> Path:
    q, k, v = (torch.randn(8, 16, 2048, 100, device="cuda") for _ in range(3))
    for _ in range(10):  # warm, as the app's runs are
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    path = out / f"{label}.json"
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=1, active=3), record_shapes=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for i in range(5):
            with torch.profiler.record_function("attention"):
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if synced and i == 1:  # the warm-up step's kernel done before the recording opens
                torch.cuda.synchronize()
            prof.step()
    torch.cuda.synchronize()
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| trace | first kernel: start − its call's end, µs | its start − the recording's start, µs "
          "| its duration, µs |\n|---|---|---|---|")
    for r in range(a.rounds):
        for variant in (("plain", "synced") if r % 2 == 0 else ("synced", "plain")):
            p = run(out, f"{variant}_{r}", variant == "synced")
            wait, dur, since = first_wait_us(p)
            print(f"| {p.name} | {'no launch call in the trace' if wait is None else f'{wait:,.1f}'} "
                  f"| {'–' if since is None else f'{since:,.1f}'} | {dur:,.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
