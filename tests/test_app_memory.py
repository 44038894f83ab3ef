"""AppTest: the Profile page's memory section and the Runs page's memory comparison.

The memory analyses (``profiling_core.analyses.memory_timeline`` / ``memory_peaks``) are stood in for here by a plain
scan of the trace's ``[memory]`` events (or by frames made by hand), in the columns the analyses give; what the
pages show is then checked against that scan.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest_app import app, download, errors_of, import_trace, media, runs_dir, seed_run  # noqa: F401
from conftest_app import CPU_TRACE
from test_app_hostile_names import HOSTILE, live_names
from test_app_profile import fill_profile_form, submit

from profiling_core.present import MEMORY_HOWTO, MEMORY_HOWTO_RUNS, md_text
from profiling_core.units import human_bytes


def _memory_events(path) -> list[dict]:
    trace = json.loads(Path(path).read_text())
    return [e for e in trace["traceEvents"] if e.get("name") == "[memory]"]


def _scan_timeline(session) -> pd.DataFrame:
    """The analyses' memory_timeline, as a plain scan of the trace file's [memory] events."""
    rows = []
    for e in _memory_events(session.path):
        a = e["args"]
        device = "cpu" if a.get("Device Type", 0) == 0 else f"cuda:{a.get('Device Id', 0)}"
        rows.append({"device": device, "start_ns": round(e["ts"] * 1000), "bytes": a["Bytes"],
                     "allocated_bytes": a["Total Allocated"],
                     "reserved_bytes": a["Total Reserved"] if device != "cpu" else np.nan,
                     "step": np.nan, "op": None})
    cols = ["device", "start_ns", "bytes", "allocated_bytes", "reserved_bytes", "step", "op"]
    return pd.DataFrame(rows, columns=cols).sort_values("start_ns", kind="stable").reset_index(drop=True)


def _peaks_of(tl: pd.DataFrame, op=None, chain="") -> pd.DataFrame:
    rows = []
    for device, g in tl.groupby("device"):
        r = g.loc[g["allocated_bytes"].idxmax()]
        rows.append({"device": device, "peak_allocated_bytes": r["allocated_bytes"],
                     "peak_reserved_bytes": g["reserved_bytes"].max(), "peak_ns": r["start_ns"], "step": r["step"],
                     "op": op if op is not None else r["op"], "call_chain": chain,
                     "first_allocated_bytes": g["allocated_bytes"].iloc[0],
                     "last_allocated_bytes": g["allocated_bytes"].iloc[-1]})
    return pd.DataFrame(rows, columns=["device", "peak_allocated_bytes", "peak_reserved_bytes", "peak_ns", "step",
                                       "op", "call_chain", "first_allocated_bytes", "last_allocated_bytes"])


@pytest.fixture
def scanned(monkeypatch):
    import profiling_core.analyses as analyses
    monkeypatch.setattr(analyses, "memory_timeline", _scan_timeline, raising=False)
    monkeypatch.setattr(analyses, "memory_peaks", lambda s: _peaks_of(_scan_timeline(s)), raising=False)


def _made(op: str):
    """Stand-ins that give every trace the same hand-made memory: 1, 3, then 2 MiB on cuda:0, the peak in ``op``."""
    def timeline(session):
        t0 = round(json.loads(Path(session.path).read_text())["traceEvents"][0].get("ts", 0) * 1000)
        return pd.DataFrame({"device": "cuda:0", "start_ns": [t0, t0 + 1000, t0 + 2000],
                             "bytes": [2**20, 2 * 2**20, -(2**20)],
                             "allocated_bytes": [2**20, 3 * 2**20, 2 * 2**20],
                             "reserved_bytes": [2 * 2**20, 4 * 2**20, 4 * 2**20], "step": [1, 1, 2],
                             "op": ["aten::empty", op, "aten::add"]})
    return timeline, lambda s: _peaks_of(timeline(s), op=op, chain=f"ProfilerStep#1 › {op}")


def _markdown(at) -> list[str]:
    return [m.value for m in at.markdown]


def test_a_run_without_memory_events_says_how_to_record_them(seed_run, scanned):
    assert not _memory_events(CPU_TRACE)  # the imported CPU trace was recorded without profile_memory
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    assert "Memory" in [h.value for h in at.header]
    assert MEMORY_HOWTO in [c.value for c in at.caption]
    assert not [c for c in at.get("vega_lite_chart") if "Memory over time" in c.proto.spec]


@pytest.mark.slow
def test_a_run_with_profile_memory_shows_its_memory_its_peak_and_its_categories(runs_dir, media, scanned):
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

    events = _memory_events(run_dir / "trace.json")
    peak = max(e["args"]["Total Allocated"] for e in events)  # by a plain scan of the trace
    assert "Memory" in [h.value for h in at.header]
    said = [m for m in _markdown(at) if m.startswith(md_text("cpu peaked at"))]
    assert said == [m for m in said if md_text(f"cpu peaked at {human_bytes(peak)} allocated") in m] and said
    specs = [c.proto.spec for c in at.get("vega_lite_chart")]
    assert any("Memory over time" in s for s in specs)
    assert any("Memory by category" in s for s in specs)
    svg = download(at, media, "svg_profile_memory").decode()
    assert f"peak {human_bytes(peak)}" in svg
    cats = download(at, media, "svg_profile_memory_categories").decode()
    # matmul_add has no nn.Module and no optimizer: torch ties none of its memory to a category it knows
    assert ">unknown<" in cats and ">PARAMETER<" not in cats
    report = download(at, media, "report_profile").decode()
    assert "<h2>Memory</h2>" in report and "cpu peaked at" in report


def test_a_hostile_op_name_in_the_peak_is_shown_as_text(seed_run, monkeypatch):
    import profiling_core.analyses as analyses
    timeline, peaks = _made(HOSTILE)
    monkeypatch.setattr(analyses, "memory_timeline", timeline, raising=False)
    monkeypatch.setattr(analyses, "memory_peaks", peaks, raising=False)
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    said = [m for m in _markdown(at) if m.startswith(md_text("cuda:0 peaked at 3.0 MiB allocated"))]
    assert len(said) == 1 and md_text(HOSTILE) in said[0]
    assert live_names(at) == []
    assert "No memory categories: " + md_text("an imported trace has no memory categories") in \
        " ".join(c.value for c in at.caption)


def test_the_runs_page_compares_the_runs_memory(runs_dir, media, monkeypatch):
    import profiling_core.analyses as analyses
    import_trace(runs_dir, CPU_TRACE, name="first")
    import_trace(runs_dir, CPU_TRACE, name="second")
    timeline, peaks = _made("aten::mm")
    monkeypatch.setattr(analyses, "memory_timeline", timeline, raising=False)
    monkeypatch.setattr(analyses, "memory_peaks", peaks, raising=False)
    at = app("runs")
    assert not errors_of(at), errors_of(at)
    assert "Memory" in [h.value for h in at.subheader]
    [table] = [d.value for d in at.dataframe if "peak_allocated" in d.value.columns]
    assert list(table["peak_allocated"]) == ["3.0 MiB", "3.0 MiB"] and list(table["peak_reserved"]) == ["4.0 MiB"] * 2
    assert list(table["op"]) == ["aten::mm", "aten::mm"]
    assert [c for c in at.get("vega_lite_chart") if "Allocated memory over time" in c.proto.spec]
    import io
    overlay = pd.read_csv(io.BytesIO(download(at, media, "csv_runs_memory")))
    assert set(overlay["run"]) == set(table["run"]) and set(overlay["device"]) == {"cuda:0"}
    assert overlay.groupby("run")["t_ms"].min().max() <= 0.0  # each run from its own first step (or before it)
    assert sorted(overlay["allocated_bytes"].unique()) == [2**20, 2 * 2**20, 3 * 2**20]


def test_the_runs_page_says_how_to_record_memory_when_neither_run_has_any(runs_dir, scanned):
    import_trace(runs_dir, CPU_TRACE, name="first")
    import_trace(runs_dir, CPU_TRACE, name="second")
    at = app("runs")
    assert not errors_of(at), errors_of(at)
    assert "Memory" in [h.value for h in at.subheader]
    assert MEMORY_HOWTO_RUNS in [c.value for c in at.caption]
    assert not [c for c in at.get("vega_lite_chart") if "Allocated memory over time" in c.proto.spec]


def test_a_damaged_categories_file_is_said_and_the_rest_shows(seed_run, runs_dir, monkeypatch):
    import profiling_core.analyses as analyses
    timeline, peaks = _made("aten::mm")
    monkeypatch.setattr(analyses, "memory_timeline", timeline, raising=False)
    monkeypatch.setattr(analyses, "memory_peaks", peaks, raising=False)
    (runs_dir / seed_run / "memory_categories.json").write_text('{"format": 1, "devices": {"cpu\\u001b[31m": 1}')
    at = app("profile")
    assert not errors_of(at), errors_of(at)
    notes = [c.value for c in at.caption if c.value.startswith("No memory categories: ")]
    assert notes == ["No memory categories: " + md_text(f"run {seed_run}: memory_categories.json is not valid JSON: "
                                                         "Expecting ',' delimiter: line 1 column 46 (char 45)")]
    assert any("Memory over time" in c.proto.spec for c in at.get("vega_lite_chart"))  # the rest of the run shows
    assert [m for m in _markdown(at) if m.startswith(md_text("cuda:0 peaked at 3.0 MiB allocated"))]
