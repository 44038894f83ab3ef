"""Where a first torch.compile call's time goes in a new process (what a cold compiled run pays in its profile).

    python scripts/gpu_compile_probe.py --out DIR [--device cuda] [--size 64]

Each case runs in its own fresh interpreter that imports what the fork server imports (torch, torch._dynamo,
torch.profiler, torch._inductor.compile_fx), then times the first call of ``torch.compile(x @ w + b)``:
``empty`` with an empty Inductor/Triton cache, ``warm`` with the cache the ``empty`` case filled, ``preimported``
with an empty cache after also importing the modules the first compile imported in the ``empty`` case.  For each:
the first call's wall, the modules it imported (count, and their import time from ``-X importtime``), the second
call's wall.  Writes DIR/compile_probe.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import torch, torch._dynamo, torch.profiler, torch._inductor.compile_fx
t_imp = time.perf_counter() - t0
pre = os.environ.get("PROBE_PREIMPORT")
if pre:
    import importlib
    for m in json.load(open(pre)):
        try:
            importlib.import_module(m)
        except Exception:
            pass
dev = os.environ["PROBE_DEVICE"]; n = int(os.environ["PROBE_SIZE"])
dt = torch.bfloat16 if dev == "cuda" else torch.float32
x = torch.randn(n, n, device=dev, dtype=dt); w = torch.randn(n, n, device=dev, dtype=dt); b = torch.randn(n, device=dev, dtype=dt)
if dev == "cuda": torch.cuda.synchronize()
f = torch.compile(lambda x, w, b: x @ w + b)
before = set(sys.modules)
sys.stderr.write("PROBE-MARK\n"); sys.stderr.flush()
t1 = time.perf_counter(); f(x, w, b)
if dev == "cuda": torch.cuda.synchronize()
first = time.perf_counter() - t1
sys.stderr.write("PROBE-END\n"); sys.stderr.flush()
t2 = time.perf_counter(); f(x, w, b)
if dev == "cuda": torch.cuda.synchronize()
second = time.perf_counter() - t2
new = sorted(set(sys.modules) - before)
print(json.dumps({"imports_before_s": t_imp, "first_call_s": first, "second_call_s": second, "new_modules": new}))
"""


def run(case: str, env: dict) -> dict:
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=300)
    if p.returncode:
        return {"case": case, "error": p.stderr[-2000:]}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    err = p.stderr.split("PROBE-MARK", 1)[-1].split("PROBE-END", 1)[0]
    import_us = 0
    for line in err.splitlines():  # "import time: self [us] | cumulative | imported package"
        if line.startswith("import time:") and "|" in line:
            try:
                import_us += int(line.split(":", 1)[1].split("|")[0])
            except ValueError:
                pass
    out.update(case=case, first_call_import_s=import_us / 1e6, n_new_modules=len(out["new_modules"]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", type=int, default=64)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        def env_for(cache: str, pre: str | None = None) -> dict:
            e = dict(os.environ, PROBE_DEVICE=a.device, PROBE_SIZE=str(a.size),
                     TORCHINDUCTOR_CACHE_DIR=f"{cache}/inductor", TRITON_CACHE_DIR=f"{cache}/triton")
            if pre:
                e["PROBE_PREIMPORT"] = pre
            return e
        empty = run("empty", env_for(f"{tmp}/c1"))
        rows.append(empty)
        rows.append(run("warm", env_for(f"{tmp}/c1")))
        mods = Path(tmp) / "mods.json"
        mods.write_text(json.dumps(empty.get("new_modules", [])))
        rows.append(run("preimported", env_for(f"{tmp}/c2", str(mods))))
        rows.append(run("empty again", env_for(f"{tmp}/c3")))
    for r in rows:
        r.pop("new_modules", None) if r["case"] != "empty" else None
    (out / "compile_probe.json").write_text(json.dumps(rows, indent=1))
    print("| case | first call s | of which imports s | new modules | second call s |")
    print("|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['case']} | error: {r['error'][-300:]!r} |")
            continue
        print(f"| {r['case']} | {r['first_call_s']:.3f} | {r['first_call_import_s']:.3f} | {r['n_new_modules']} | "
              f"{r['second_call_s']:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
