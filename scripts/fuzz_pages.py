#!/usr/bin/env python3
"""Fuzz the app's pages: odd traces imported as a user imports them, then every page drawn; anything raised is a bug.

The traces are ``scripts/fuzz_analyses.py``'s (real traces of tests/data made odd the same seeded ways). Each case
imports its trace into a fresh run store through ``RunStore.import_trace`` (the Trace lab's path: a trace the store
refuses is an accepted refusal, with its message) and draws each page with Streamlit's AppTest on that run, with the
pages' default controls. A page's uncaught exception fails the case; an error box the page shows is printed with
its text (a page may tell the user that a trace lacks what it needs), and fails the case when it names an exception
type (``TypeError: ...``: a bug shown, not a reason given). Every text the page shows (markdown, captions, notes,
metrics, titles) is read as ``fuzz_analyses`` reads the findings: no NaN, infinity, None as a value or negative
duration.

With ``--controls`` each page is drawn a second time with its selection controls set at random (``_move_controls``).

Usage: python scripts/fuzz_pages.py [-n 40] [--seed 1] [--start 0] [--pages trace_lab,profile,...] [--keep DIR]
[--controls]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from fuzz_analyses import UNREADABLE, load_seeds, mutate  # noqa: E402

PAGES = ["trace_lab", "profile", "dispatch", "variance", "runs", "compile_vs_eager", "overhead", "home"]
_EXCEPTION_NAMED = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b: ")


def _move_controls(at, rng: random.Random) -> list[str]:
    """Set each selection control the page shows (select boxes, radios, multiselects, checkboxes, toggles, sliders)
    to a value drawn from its own options or range, then draw the page again; buttons stay unpressed, so nothing
    runs. AppTest knows a control's shown options, not the values behind them: one shown through a format function
    (``ProfilerStep#3`` for step 3) keeps its value. Returns what was set, as ``label=value``."""
    moved = []

    def settle(w, v, text):  # a control whose options are shown through a format function takes its raw values
        old = w.value
        w.set_value(v)
        try:
            w._widget_state  # (AppTest maps the value back to an option here)
        except ValueError:
            w.set_value(old)
            return
        moved.append(f"{w.label[:30]}={text}")

    for kind in ("selectbox", "radio", "select_slider"):
        for w in at.get(kind):
            if w.options:
                v = w.options[rng.randrange(len(w.options))]
                settle(w, v, str(v)[:30])
    for w in at.get("multiselect"):
        if w.options:
            v = rng.sample(list(w.options), rng.randint(0, len(w.options)))
            settle(w, v, f"{len(v)} of {len(w.options)}")
    for kind in ("checkbox", "toggle"):
        for w in at.get(kind):
            w.set_value(not w.value)
            moved.append(f"{w.label[:30]}={not w.value}")
    for w in at.get("slider"):
        lo, hi = w.min, w.max
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and not isinstance(w.value, (list, tuple)):
            v = type(w.value)(lo + rng.random() * (hi - lo)) if hi > lo else lo
            w.set_value(v)
            moved.append(f"{w.label[:30]}={v}")
    if moved:
        at.run()
    return moved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=40, help="cases (default 40; each draws every page)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--pages", default=",".join(PAGES))
    ap.add_argument("--keep", default=None, help="folder to keep failing cases in (default: a temporary one)")
    ap.add_argument("--controls", action="store_true",
                    help="draw each page a second time with its controls moved at random (never a button: no run)")
    args = ap.parse_args(argv)
    from streamlit.testing.v1 import AppTest

    from profiling_core import RunStore
    from profiling_core.errors import ProfilingError

    pages = [p for p in args.pages.split(",") if p]
    seeds = load_seeds()
    keep = args.keep or tempfile.mkdtemp(prefix="fuzz-pages-")
    os.makedirs(keep, exist_ok=True)
    failures: list[str] = []
    shown = refused = controls = 0
    t0 = time.perf_counter()
    for i in range(args.start, args.start + args.n):
        rng = random.Random(args.seed * 1_000_003 + i)
        src, doc, _config = seeds[rng.randrange(len(seeds))]
        case, log = mutate(rng, doc)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "case.json")
            with open(path, "w") as f:
                json.dump(case, f)
            store = os.path.join(tmp, "runs")
            os.environ["PROFILING_RUNS_DIR"] = store
            try:
                RunStore(store).import_trace(path, name=f"case{i}")
            except (ProfilingError, ValueError) as e:
                refused += 1
                print(f"case {i}: refused at the import: {' '.join(str(e).split())[:200]}", flush=True)
                continue
            bad = []
            for page, moved in [(p, m) for p in pages for m in ([False, True] if args.controls else [False])]:
                at = AppTest.from_file(os.path.join(ROOT, "streamlit_app.py"), default_timeout=180)
                at.run()
                if page != "home":
                    at.switch_page(f"pages/{page}.py")
                    at.run()
                if moved:
                    did = _move_controls(at, rng)
                    controls += len(did)
                    page = f"{page} ({', '.join(did) or 'no control to move'})"
                for e in at.exception:
                    bad.append(f"{page}: uncaught: {' '.join(str(e.value).split())[:400]}")
                for kind in ("markdown", "caption", "info", "warning", "success", "metric", "title", "header",
                             "subheader"):
                    for el in at.get(kind):
                        text = " ".join(str(getattr(el, "value", "")).split())
                        m = UNREADABLE.search(text)
                        if m:
                            bad.append(f"{page}: a {kind} shows {m.group()!r}: "
                                       f"…{text[max(0, m.start() - 150):m.end() + 60]}…")
                for e in at.error:
                    text = " ".join(str(e.value).split())
                    shown += 1
                    if _EXCEPTION_NAMED.search(text):
                        bad.append(f"{page}: error box naming an exception: {text[:400]}")
                    else:
                        print(f"case {i} {page}: error box: {text[:200]}", flush=True)
            if bad:
                kept = os.path.join(keep, f"pages_seed{args.seed}_case{i}.json")
                os.replace(path, kept)
                failures += [f"case {i} ({os.path.relpath(src, ROOT)}; {', '.join(log)}) {b}" for b in bad]
                print("FAIL " + "\n     ".join(bad) + f"\n  kept as {kept}", flush=True)
    print(f"drew {len(pages)} page(s) of {args.n} odd traces (seed {args.seed}; {refused} refused at the import) in "
          f"{time.perf_counter() - t0:.0f} s: {len(failures)} failure(s), {shown} error box(es) shown"
          + (f", {controls} control(s) moved" if args.controls else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
