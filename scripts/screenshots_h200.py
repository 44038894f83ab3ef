#!/usr/bin/env python3
"""Screenshots of the pages on H200 runs (docs/FINDINGS.md, issue 14): each page served by `streamlit run` over a
store holding the runs it shows (their traces and recorded configs), in Debian's Chromium, saved to
docs/screenshots/h200_workloads_<name>.png.

Usage (repo root): python scripts/screenshots_h200.py RUNS_DIR [workloads|train] [NAME,...]
where RUNS_DIR holds <label>.json and <label>.meta.json as scripts/gpu_workloads.py (``workloads``, the default)
or scripts/gpu_train.py (``train``: saved as docs/screenshots/h200_train_<name>.png) wrote them, or as
``tests/data/h200_workloads`` keeps them (a run's name is then its label); NAME,... takes only those screenshots.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_browser import CHROMIUM, CHROMIUM_ARGS, _serve, _wait_idle  # noqa: E402

from profiling_core import RunStore  # noqa: E402

SHOTS = {  # screenshot name: (page, the runs in its store, the last one is the page's current run)
    "profile_decode_ro": ("profile", ["block_decode_ro"]),
    "profile_attention_fp32": ("profile", ["attention_fp32_eager"]),
    "compile_mlp": ("compile_vs_eager", ["mlp_eager", "mlp_compile"]),
    "compile_block_prefill": ("compile_vs_eager", ["block_prefill_eager", "block_prefill_ro"]),
    "overhead_decode_sweep": ("overhead", [f"sweep_decode_{kv}_{m}" for kv in (256, 2048, 8192)
                                           for m in ("eager", "ro")]),
    "dispatch_block": ("dispatch", ["block_prefill_eager"]),
    "dispatch_attention_fp32": ("dispatch", ["attention_fp32_eager"]),
}
TRAIN_SHOTS = {
    "profile_mlp_forloop": ("profile", ["mlp_train_adam_forloop_fp32"]),
    "profile_block_fused": ("profile", ["block_train_adam_fused_eager"]),
    "compile_mlp_fused": ("compile_vs_eager", ["mlp_train_adam_fused_eager", "mlp_train_adam_fused_compile"]),
    "profile_lm_decode_ro": ("profile", ["lm_decode_static_ro"]),
    "compile_lm_decode": ("compile_vs_eager", ["lm_decode_static_eager", "lm_decode_static_ro"]),
}


def seed(store_dir: Path, src: Path, labels: list[str]) -> None:
    store = RunStore(store_dir)
    for label in labels:
        run = store.import_trace(src / f"{label}.json", name=label)
        meta = json.loads(run.meta_path.read_text())
        recorded = json.loads((src / f"{label}.meta.json").read_text())
        meta.update(config=recorded["config"], device=recorded["device"], name=recorded.get("name", label),
                    source="experiment")
        run.meta_path.write_text(json.dumps(meta))


def main() -> int:
    from playwright.sync_api import sync_playwright
    src = Path(sys.argv[1])
    which = sys.argv[2] if len(sys.argv) > 2 else "workloads"
    shots = {"workloads": SHOTS, "train": TRAIN_SHOTS}[which]
    if len(sys.argv) > 3:
        shots = {k: v for k, v in shots.items() if k in sys.argv[3].split(",")}
    out = ROOT / "docs" / "screenshots"
    for name, (page_name, labels) in shots.items():
        runs = Path(tempfile.mkdtemp()) / "runs"
        seed(runs, src, labels)
        with _serve(runs) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_context(viewport={"width": 1400, "height": 6000}).new_page()
            page.goto(f"{url}/{page_name}")
            page.locator("h1").first.wait_for(timeout=60_000)
            _wait_idle(page, timeout_s=180)
            path = out / f"h200_{which}_{name}.png"
            page.wait_for_timeout(3000)  # the charts draw after the script run ends
            page.screenshot(path=str(path), full_page=True)
            from PIL import Image  # 128 colours: a third of the bytes, the text as sharp
            Image.open(path).convert("RGB").quantize(colors=128).save(path, optimize=True)
            print(path, path.stat().st_size)
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
