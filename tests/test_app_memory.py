"""AppTest: the Profile page's memory section and the Runs page's memory comparison, on the real memory analyses.

The runs are real: a tiny CPU run profiled with ``profile_memory`` through the Profile form, the H200 runs kept in
``tests/data/h200_memory`` (their traces and meta.json), and Kineto traces built here event by event (``[memory]``
events nested under the ops that made them) and imported into the store. What the pages show is checked against a
plain scan of each trace's JSON (:func:`scan`), which reads the events the way the trace states them and shares no
code with ``profiling_core``.
"""
from __future__ import annotations

import io
import json
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest
from conftest import DATA, scan_trace
from conftest_app import CPU_TRACE, app, download, errors_of, import_trace
from test_app_hostile_names import HOSTILE, live_names
from test_app_profile import fill_profile_form, submit

from profiling_core.analyses import NOTHING_RECORDED_TEXT
from profiling_core.present import MEMORY_HOWTO, MEMORY_HOWTO_RUNS, md_text
from profiling_core.present.memory import CHURN_COLUMNS, LIVE_COLUMNS, UNFREED_COLUMNS
from profiling_core.units import human_bytes

MiB, GiB = 2**20, 2**30
H200_MEMORY = DATA / "h200_memory"


# --- traces built here ----------------------------------------------------------------------------------------------

def _x(name, ts, dur, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}


def _mem(ts, nbytes, addr, total, reserved, kind=1, totals=True, addrs=True):
    args = {"Bytes": nbytes, "Device Type": kind, "Device Id": 0 if kind else -1}
    if addrs:
        args["Addr"] = addr
    if totals:
        args["Total Allocated"], args["Total Reserved"] = total, reserved
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": args}


def write_memory_trace(path: Path, *, peak_op: str = "aten::mm", temp: int = 8 * MiB, kept: int = 64 * MiB,
                       reserved: int = 128 * MiB, cpu: bool = False, totals: bool = True, addrs: bool = True,
                       steps: int = 3) -> Path:
    """Three profiled steps on cuda:0 over ``kept`` bytes allocated before the window. Step n keeps n MiB that it
    allocates in ``aten::empty`` (never freed: the memory grows), allocates ``temp`` in ``peak_op`` and frees it in
    ``aten::add``; with ``cpu``, ``peak_op`` also allocates 4 KiB on the CPU, whose totals start at 0 as torch writes
    them, and ``aten::add`` frees them. ``totals``/``addrs`` False: the 2021 format, without either."""
    ev, level, cpu_level = [], kept, 0
    for n in range(1, steps + 1):
        t0 = n * 1000.0
        ev.append(_x(f"ProfilerStep#{n}", t0, 900, cat="user_annotation"))
        level += n * MiB
        ev += [_x("aten::empty", t0 + 10, 50),
               _mem(t0 + 20, n * MiB, 0x1000 + n, level, reserved, totals=totals, addrs=addrs)]
        level += temp
        ev += [_x(peak_op, t0 + 100, 100), _mem(t0 + 150, temp, 0x9000, level, reserved, totals=totals, addrs=addrs)]
        if cpu:
            cpu_level += 4096
            ev.append(_mem(t0 + 160, 4096, 0x5000, cpu_level, 0, kind=0, totals=totals, addrs=addrs))
        level -= temp
        ev += [_x("aten::add", t0 + 300, 100), _mem(t0 + 350, -temp, 0x9000, level, reserved, totals=totals,
                                                      addrs=addrs)]
        if cpu:
            cpu_level -= 4096
            ev.append(_mem(t0 + 360, -4096, 0x5000, cpu_level, 0, kind=0, totals=totals, addrs=addrs))
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    return path


# --- a plain scan of a trace's JSON ---------------------------------------------------------------------------------

def scan(path) -> dict:
    """Per device, from the trace's JSON alone: its events in time order, each with the op it happened in (the
    innermost complete event around it on its thread), its level (``Total Allocated``, else the running sum of
    ``Bytes``), the peak, the op at the peak, what was live there by allocating op, what was never freed, and per
    profiler step what was allocated and freed."""
    events = scan_trace(path)
    ops = [e for e in events if e.get("ph") == "X"]
    steps = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in ops
             if e["name"].startswith("ProfilerStep#")]
    mems = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    out: dict = {}
    for e in mems:
        a = e["args"]
        dev = "cpu" if a.get("Device Type") == 0 else f"cuda:{a.get('Device Id')}"
        around = [o for o in ops if o["pid"] == e["pid"] and o["tid"] == e["tid"]
                  and o["ts"] <= e["ts"] <= o["ts"] + o["dur"]]
        op = min(around, key=lambda o: o["dur"])["name"] if around else None
        step = next((n for n, s, f in steps if s <= e["ts"] < f), None)
        out.setdefault(dev, []).append({"bytes": a["Bytes"], "total": a.get("Total Allocated"),
                                        "addr": a.get("Addr"), "op": op, "step": step})
    result = {}
    for dev, evs in out.items():
        run, levels = 0, []
        for x in evs:
            run += x["bytes"]
            levels.append(x["total"] if x["total"] is not None else run)
        p = levels.index(max(levels))
        open_, live = {}, defaultdict(int)
        for i, x in enumerate(evs[:p + 1]):
            if x["addr"] is None:
                continue
            if x["bytes"] > 0:
                open_[x["addr"]] = x
            else:
                open_.pop(x["addr"], None)
        for x in open_.values():
            live[x["op"]] += x["bytes"]
        never, still = defaultdict(lambda: [0, 0, set()]), {}
        for x in evs:
            if x["addr"] is None:
                continue
            if x["bytes"] > 0:
                still[x["addr"]] = x
            else:
                still.pop(x["addr"], None)
        for x in still.values():
            never[x["op"]][0] += x["bytes"]
            never[x["op"]][1] += 1
            never[x["op"]][2].add(x["step"])
        per_step = defaultdict(lambda: [0, 0])
        for x in evs:
            if x["step"] is not None:
                per_step[x["step"]][0 if x["bytes"] > 0 else 1] += abs(x["bytes"])
        result[dev] = {"levels": levels, "peak": max(levels), "peak_op": evs[p]["op"], "peak_step": evs[p]["step"],
                       "first": levels[0] - evs[0]["bytes"], "last": levels[-1], "live": dict(live),
                       "unfreed": {k: (v[0], v[1], sorted(v[2])) for k, v in never.items()},
                       "steps": {k: tuple(v) for k, v in sorted(per_step.items())}}
    return result


# --- what a page shows ----------------------------------------------------------------------------------------------

def _markdown(at) -> list[str]:
    return [m.value for m in at.markdown]


def _table(at, columns: list[str]) -> pd.DataFrame:
    [t] = [d.value for d in at.dataframe if list(d.value.columns) == columns]
    return t


def _stored(runs_dir, trace: Path, meta: Path, name: str) -> str:
    """A run of the store made from a kept trace and the meta.json its run wrote (as the runner lands it)."""
    rid = import_trace(runs_dir, trace, name=name)
    kept = json.loads(meta.read_text())
    (runs_dir / rid / "meta.json").write_text(json.dumps({**kept, "name": name, "run_id": rid}))
    return rid


def _open(rid: str):
    at = app("runs")
    at.selectbox(key="runs_open").set_value(rid)
    [go] = [b for b in at.button if b.label == "Open on the Profile page"]
    go.click().run()
    assert at.title[0].value == "Profile"
    assert not errors_of(at), errors_of(at)
    return at


# --- runs without memory events -------------------------------------------------------------------------------------

def test_a_run_without_memory_events_says_how_to_record_them(seed_run):
    assert not [e for e in scan_trace(CPU_TRACE) if e.get("name") == "[memory]"]  # recorded without profile_memory
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    assert "Memory" in [h.value for h in at.header]
    assert MEMORY_HOWTO in [c.value for c in at.caption]
    assert not [c for c in at.get("vega_lite_chart") if "Memory over time" in c.proto.spec]


def test_a_run_that_recorded_memory_and_saw_none_says_so_with_the_process_peak(runs_dir):
    """The H200 reduce-overhead run was profiled with profile_memory and its CUDA-graph replays made no event: the
    page told it to tick profile_memory (it had), and the pools rule did not know the run's own peak."""
    rid = _stored(runs_dir, H200_MEMORY / "ro.json", H200_MEMORY / "ro.meta.json", "ro")
    meta = json.loads((H200_MEMORY / "ro.meta.json").read_text())
    assert meta["config"]["profile_memory"] and not [e for e in scan_trace(H200_MEMORY / "ro.json")
                                                      if e.get("name") == "[memory]"]
    at = _open(rid)
    captions = [c.value for c in at.caption]
    assert md_text(NOTHING_RECORDED_TEXT) in captions and MEMORY_HOWTO not in captions
    said = " ".join(_markdown(at))
    assert md_text("CUDA graphs keep private memory pools") in said
    assert md_text(f"the process's own peak was {human_bytes(meta['peak_device_memory_bytes'])} "
                   "(max_memory_allocated)") in said


# --- a real CPU run -------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_run_with_profile_memory_shows_its_memory_its_peak_its_tables_and_its_categories(runs_dir, media):
    at = app("profile")
    fill_profile_form(at)
    at.number_input(key="profile_form_warmup").set_value(1)  # torch 2.13 with_stack: see test_memory_categories
    for knob in ("profile_memory", "with_stack", "record_shapes"):
        at.checkbox(key=f"profile_form_{knob}").check()
    submit(at, "Run profile")
    assert not errors_of(at), errors_of(at)
    [run_dir] = [p for p in runs_dir.iterdir() if not p.name.startswith(".")]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["config"]["profile_memory"] and meta["config"]["with_stack"] and meta["config"]["record_shapes"]
    assert (run_dir / "memory_categories.json").is_file()

    cpu = scan(run_dir / "trace.json")["cpu"]
    assert cpu["first"] == 0  # torch's CPU totals start at 0, the inputs already allocated
    assert "Memory" in [h.value for h in at.header]
    [said] = [m for m in _markdown(at) if m.startswith(md_text("cpu peaked at"))]
    assert said.startswith(md_text(f"cpu peaked at {human_bytes(cpu['peak'])} allocated counted from when the "
                                   "profiler began recording"))
    assert md_text("Counted from when the profiler began recording: torch counts a CPU's memory only from when the profiler began recording it") in said
    assert md_text("The window began with") not in said  # it never began with 0 B: the inputs were there
    live = _table(at, LIVE_COLUMNS)
    assert dict(zip(live["op"], live["bytes"])) == cpu["live"] and live["bytes"].is_monotonic_decreasing
    churn = _table(at, CHURN_COLUMNS)
    assert {s: (a, f) for s, a, f in zip(churn["step"], churn["alloc_bytes"], churn["freed_bytes"])} == cpu["steps"]
    specs = [c.proto.spec for c in at.get("vega_lite_chart")]
    assert any("Memory over time" in s for s in specs)
    assert any("Memory by category" in s for s in specs)
    svg = download(at, media, "svg_profile_memory").decode()
    assert f"peak {human_bytes(cpu['peak'])}" in svg
    cats = download(at, media, "svg_profile_memory_categories").decode()
    # matmul_add has no nn.Module and no optimizer: torch ties none of its memory to a category it knows
    assert ">unknown<" in cats and ">PARAMETER<" not in cats
    report = download(at, media, "report_profile").decode()
    assert "<h2>Memory</h2>" in report and "cpu peaked at" in report and "live at the peak" in report


# --- traces built here, imported ------------------------------------------------------------------------------------

def test_a_hostile_op_name_at_the_peak_is_shown_as_text_in_the_sentence_the_tables_and_the_diagnosis(
        runs_dir, tmp_path):
    path = write_memory_trace(tmp_path / "hostile.json", peak_op=HOSTILE, temp=256 * MiB)
    import_trace(runs_dir, path, name="hostile")
    want = scan(path)["cuda:0"]
    assert want["peak_op"] == HOSTILE and want["peak_step"] == 3
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    said = [m for m in _markdown(at) if m.startswith(md_text(f"cuda:0 peaked at {human_bytes(want['peak'])}"))]
    assert len(said) == 1 and md_text(HOSTILE) in said[0]
    live = _table(at, LIVE_COLUMNS)
    assert live["op"].tolist()[0] == HOSTILE and live["bytes"].tolist()[0] == 256 * MiB  # largest first
    assert dict(zip(live["op"], live["bytes"])) == {**{k: v for k, v in want["live"].items()},
                                                   "": want["first"]}  # "" is what was there before the window
    assert live["bytes"].sum() == want["peak"]
    # the memory_peak rule names the op too, through the diagnosis section's escaping
    assert md_text("Memory peaks far above what the steps keep") in " ".join(_markdown(at))
    assert [m for m in _markdown(at) if md_text(HOSTILE) in m and "above the" in m]
    assert live_names(at) == []
    assert "No memory categories: " + md_text("an imported trace has no memory categories") in \
        " ".join(c.value for c in at.caption)


def test_what_was_never_freed_and_per_step_churn_are_listed_and_the_growth_is_diagnosed(runs_dir, tmp_path):
    path = write_memory_trace(tmp_path / "grows.json")
    import_trace(runs_dir, path, name="grows")
    want = scan(path)["cuda:0"]
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    assert {"Live at the peak", "Never freed in the window", "Per step"} <= {h.value for h in at.subheader}
    unfreed = _table(at, UNFREED_COLUMNS)
    assert {op: (b, n, [int(s) for s in steps.split(", ")]) for op, b, n, steps in
            zip(unfreed["op"], unfreed["bytes"], unfreed["blocks"], unfreed["steps"])} == want["unfreed"] == {
        "aten::empty": (6 * MiB, 3, [1, 2, 3])}
    churn = _table(at, CHURN_COLUMNS)
    assert {s: (a, f) for s, a, f in zip(churn["step"], churn["alloc_bytes"], churn["freed_bytes"])} == want["steps"]
    assert churn["net"].tolist() == ["+1.0 MiB", "+2.0 MiB", "+3.0 MiB"]
    said = " ".join(_markdown(at))
    assert md_text("Memory grows every step") in said and md_text("steps 2–3 each leave about 2.5 MiB more") in said
    evidence = [json.loads(j.value) for j in at.json]
    assert any(e.get("growth_bytes") == 5 * MiB and e.get("steps") == [2, 3] for e in evidence)
    assert md_text("Cost: memory, not time: each step keeps what the text says") in [c.value for c in at.caption]


def test_a_gpu_and_its_host_are_shown_apart_and_the_host_is_counted_from_the_window(runs_dir, tmp_path, media):
    path = write_memory_trace(tmp_path / "two.json", cpu=True)
    import_trace(runs_dir, path, name="two devices")
    want = scan(path)
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    said = [m for m in _markdown(at) if " peaked at " in m]
    assert [m.split(" ")[0] for m in said] == [md_text("cuda:0"), "cpu"]  # the GPU first: the run is about it
    assert said[0].startswith(md_text(f"cuda:0 peaked at {human_bytes(want['cuda:0']['peak'])} allocated ("))
    assert md_text(f"The window began with {human_bytes(want['cuda:0']['first'])} allocated") in said[0]
    assert said[1].startswith(md_text(f"cpu peaked at {human_bytes(want['cpu']['peak'])} allocated counted from "
                                      "when the profiler began recording"))
    live = _table(at, LIVE_COLUMNS)
    assert live["device"].tolist() == ["cuda:0"] * 3 + ["cpu"]
    assert live[live["device"] == "cpu"]["bytes"].tolist() == [want["cpu"]["live"][want["cpu"]["peak_op"]]]
    churn = _table(at, CHURN_COLUMNS)
    assert churn["device"].tolist() == ["cuda:0"] * 3 + ["cpu"] * 3
    csv = pd.read_csv(io.BytesIO(download(at, media, "csv_profile_memory")))
    for dev in ("cuda:0", "cpu"):
        assert csv[csv["device"] == dev]["allocated_bytes"].tolist() == want[dev]["levels"]


def test_a_trace_without_totals_draws_its_level_and_says_what_it_cannot_know(runs_dir, tmp_path, media):
    """The 2021 format: no totals, no addresses. The chart drew nothing (it read the events' totals) and the page
    said the window "began with 0 B allocated"."""
    path = write_memory_trace(tmp_path / "old.json", totals=False, addrs=False)
    import_trace(runs_dir, path, name="2021")
    want = scan(path)["cuda:0"]
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    [said] = [m for m in _markdown(at) if " peaked at " in m]
    assert said.startswith(md_text(f"cuda:0 peaked at {human_bytes(want['peak'])} allocated counted from the "
                                   "window's start"))
    assert md_text("began with") not in said and md_text("Counted from the window's start: the trace has no allocator totals (the 2021") in said
    csv = pd.read_csv(io.BytesIO(download(at, media, "csv_profile_memory")))
    assert csv["allocated_bytes"].tolist() == want["levels"]  # the running sum, drawn
    svg = download(at, media, "svg_profile_memory").decode()
    assert ">allocated<" in svg and f"peak {human_bytes(want['peak'])}" in svg  # the line's legend: it is drawn
    assert not [d for d in at.dataframe if list(d.value.columns) in (LIVE_COLUMNS, UNFREED_COLUMNS)]
    assert md_text("cuda:0: the trace's [memory] events have no addresses") in " ".join(c.value for c in at.caption)


def test_the_process_peak_of_the_run_tells_an_earlier_peak_from_fragmentation(runs_dir, tmp_path):
    """The same trace, once imported (no process peak: the trace alone cannot tell) and once as a run whose meta.json
    has torch.cuda.max_memory_allocated() of 1 GiB, which covers the reserve: the app judged both as the first."""
    path = write_memory_trace(tmp_path / "frag.json", reserved=GiB)
    imported = import_trace(runs_dir, path, name="imported")
    ran = import_trace(runs_dir, path, name="ran")
    meta = json.loads((runs_dir / ran / "meta.json").read_text())
    (runs_dir / ran / "meta.json").write_text(json.dumps({**meta, "peak_device_memory_bytes": GiB}))
    texts = {}
    for rid in (imported, ran):
        said = " ".join(_markdown(_open(rid)))
        assert md_text("Reserved memory far above allocated") in said
        texts[rid] = said
    assert md_text("the trace alone cannot tell") in texts[imported]
    assert md_text("The process peaked earlier at 1.0 GiB (max_memory_allocated") in texts[ran]
    assert md_text("the trace alone cannot tell") not in texts[ran]


def test_the_h200_runs_memory_adds_up_to_its_peak(runs_dir):
    rid = _stored(runs_dir, H200_MEMORY / "train.json", H200_MEMORY / "train.meta.json", "train")
    want = scan(H200_MEMORY / "train.json")
    at = _open(rid)
    live = _table(at, LIVE_COLUMNS)
    for dev in ("cuda:0", "cpu"):
        rows = live[live["device"] == dev]
        assert rows["bytes"].sum() == want[dev]["peak"]
        assert rows["bytes"].is_monotonic_decreasing
    said = [m for m in _markdown(at) if " peaked at " in m]
    assert said[0].startswith(md_text(f"cuda:0 peaked at {human_bytes(want['cuda:0']['peak'])} allocated ("))
    assert said[1].startswith(md_text(f"cpu peaked at {human_bytes(want['cpu']['peak'])} allocated counted from"))


def test_the_runs_page_compares_the_runs_memory(runs_dir, media, tmp_path):
    small = write_memory_trace(tmp_path / "small.json", temp=8 * MiB)
    large = write_memory_trace(tmp_path / "large.json", temp=32 * MiB)
    a, b = import_trace(runs_dir, small, name="small"), import_trace(runs_dir, large, name="large")
    want = {"small": scan(small)["cuda:0"], "large": scan(large)["cuda:0"]}
    at = app("runs")
    at.selectbox(key="runs_a").set_value(a)
    at.selectbox(key="runs_b").set_value(b).run()
    assert not errors_of(at), errors_of(at)
    assert "Memory" in [h.value for h in at.subheader]
    [table] = [d.value for d in at.dataframe if "peak_allocated" in d.value.columns]
    by_run = {r: p for r, p in zip(table["run"], table["peak_allocated"])}
    assert sorted(by_run.values()) == sorted(human_bytes(w["peak"]) for w in want.values())
    assert list(table["peak_reserved"]) == ["128.0 MiB"] * 2 and list(table["op"]) == ["aten::mm"] * 2
    assert list(table["counted"]) == ["", ""]
    assert [c for c in at.get("vega_lite_chart") if "Allocated memory over time" in c.proto.spec]
    overlay = pd.read_csv(io.BytesIO(download(at, media, "csv_runs_memory")))
    assert set(overlay["run"]) == set(table["run"]) and set(overlay["device"]) == {"cuda:0"}
    # each run from its own first step: the first event is 20 µs into it
    assert overlay.groupby("run")["t_ms"].min().tolist() == [0.02, 0.02]
    assert sorted(overlay.groupby("run")["allocated_bytes"].max()) == sorted(w["peak"] for w in want.values())
    assert sorted(overlay["allocated_bytes"]) == sorted(want["small"]["levels"] + want["large"]["levels"])


def test_the_runs_page_says_how_to_record_memory_when_neither_run_has_any(runs_dir):
    import_trace(runs_dir, CPU_TRACE, name="first")
    import_trace(runs_dir, CPU_TRACE, name="second")
    at = app("runs")
    assert not errors_of(at), errors_of(at)
    assert "Memory" in [h.value for h in at.subheader]
    assert MEMORY_HOWTO_RUNS in [c.value for c in at.caption]
    assert not [c for c in at.get("vega_lite_chart") if "Allocated memory over time" in c.proto.spec]


def test_a_damaged_categories_file_is_said_and_the_rest_shows(runs_dir, tmp_path):
    rid = import_trace(runs_dir, write_memory_trace(tmp_path / "t.json"), name="damaged")
    (runs_dir / rid / "memory_categories.json").write_text('{"format": 1, "devices": {"cpu\\u001b[31m": 1}')
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    notes = [c.value for c in at.caption if c.value.startswith("No memory categories: ")]
    assert notes == ["No memory categories: " + md_text(f"run {rid}: memory_categories.json is not valid JSON: "
                                                         "Expecting ',' delimiter: line 1 column 46 (char 45)")]
    assert any("Memory over time" in c.proto.spec for c in at.get("vega_lite_chart"))  # the rest of the run shows
    assert [m for m in _markdown(at) if m.startswith(md_text("cuda:0 peaked at 78.0 MiB allocated"))]
