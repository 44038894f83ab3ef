"""AppTest: every page on the largest real traces people import, its controls at their largest.

Real traces hold far more events than a chart can draw (Altair refuses a dataset of more than 5,000 rows with
``MaxRowsError``, which took the whole page down): HTA's A100 trace has 9,450 launch → GPU op pairs and 61
synchronize calls, the 2021 ResNet-50 trace 3,090 launches of one kernel, TraceLens' Qwen trace 13,905 slices in its
one step, and this project's own H200 trace of a compiled Llama decoding 5,735 slices a step and 52 synchronize calls. Each page must draw every chart with each dataset within ``MAX_ROWS``, and a chart that leaves events out
must say how many in its subtitle; what it draws is checked against the CSV beside it (every row) and against a plain
scan of the trace's JSON."""
from __future__ import annotations

import csv
import gzip
import io
import json
import re

import pytest

from conftest_app import DATA, app, chart_specs, download, errors_of, import_trace
from profiling_core.present import charts

CONTROL = DATA / "big" / "control.json.gz"  # A100, HTA
RESNET = DATA / "traces" / "worker0.1623143089861.pt.trace.json.gz"  # V100, 2021
QWEN = DATA / "traces" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"  # H100, TraceLens
LLM_DECODE = DATA / "h200_train" / "llm_decode_dynamic_compile_default.json.gz"  # ours, H200: 5,735 slices a step
PAGES = ["trace_lab", "profile", "dispatch", "variance", "runs", "compile_vs_eager", "overhead", "home"]


def _datasets(spec: dict) -> dict:
    return spec["datasets"]


def _subtitle(spec: dict) -> str:
    title = spec.get("title")
    sub = title.get("subtitle", []) if isinstance(title, dict) else []
    return " ".join(sub if isinstance(sub, list) else [sub])


def _chart(at, title_part: str) -> dict:
    found = [s for s in chart_specs(at) if title_part in json.dumps(s.get("title", ""))]
    assert len(found) == 1, [s.get("title") for s in chart_specs(at)]
    return found[0]


def _rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def _scan(path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def _bounded(at) -> None:
    assert not errors_of(at), errors_of(at)
    for spec in chart_specs(at):
        for name, rows in _datasets(spec).items():
            assert len(rows) <= charts.MAX_ROWS, (spec.get("title"), len(rows))


@pytest.mark.parametrize("trace", [CONTROL, RESNET, QWEN, LLM_DECODE], ids=["control", "resnet50", "qwen", "h200_llm"])
def test_every_page_draws_a_big_real_trace(runs_dir, trace):
    import_trace(runs_dir, trace, "big")
    for page in PAGES:
        at = app(page)
        _bounded(at)
        if page == "variance":  # the most kernels the slider offers: 3,090 + 978 + ... launches on the ResNet-50
            at.slider(key="variance_top").set_value(10).run()
            _bounded(at)


def test_a_step_of_13905_slices_is_drawn_with_its_longest(runs_dir, media):
    """Qwen's one ProfilerStep: the timeline draws the MAX_SLICES longest of its slices, names how many it left out
    and how long they were at most, and the CSV keeps them all."""
    import_trace(runs_dir, QWEN, "qwen")
    at = app("profile")
    _bounded(at)
    every = _rows(download(at, media, "csv_profile_timeline"))
    spec = _chart(at, "ProfilerStep#")
    drawn = next(rows for rows in _datasets(spec).values() if rows and "thickness" in rows[0])
    assert len(every) > charts.MAX_SLICES and len(drawn) == charts.MAX_SLICES
    dur = sorted((float(r["end_us"]) - float(r["start_us"]) for r in every), reverse=True)
    assert min(r["dur_us"] for r in drawn) == pytest.approx(dur[charts.MAX_SLICES - 1])
    note = _subtitle(spec)
    assert f"{len(every):,} slices: the {len(every) - charts.MAX_SLICES:,} shortest" in note
    # the longest left out, as the note quotes it, is no longer than the shortest drawn
    assert dur[charts.MAX_SLICES] <= dur[charts.MAX_SLICES - 1]


def _long_training(path, steps: int):
    """A training loop of ``steps`` steps on an H200 (forward, backward and optimizer ranges, one kernel each), no two
    steps of the same length."""
    import verdict_traces as vt
    t = vt.Trace()
    for n in range(steps):
        x = (n * 263) % 509  # a permutation of 0..508

        def body(t, x=x):
            for phase, cpu_us, gpu_us in (("forward", 30 + x / 4, 5 + x / 8), ("backward", 40.0, 10.0),
                                          ("optimizer", 15.0, 6.0)):
                vt._annotate(t, f"train::{phase}", lambda t, c=cpu_us, g=gpu_us: t.cpu(
                    "aten::mm", c, children=lambda t: t.launch(vt.BF16_GEMM, g)))
        t.step(n + 1, body)
    return t.write(path)


def _longest_bars(rows: list[dict], by: str, label) -> list[str]:
    """The MAX_BARS longest bars of a chart's CSV (a bar's length: the sum of its rows' ``by``), named as drawn."""
    length: dict = {}
    for r in rows:
        length[r["step"]] = length.get(r["step"], 0.0) + float(r[by])
    return [label(s) for s in sorted(length, key=lambda s: -length[s])[:charts.MAX_BARS]]


def test_a_run_of_501_steps_draws_its_longest_steps(runs_dir, media, tmp_path):
    """A loop profiled for 501 steps: the per-step breakdown (ten categories a step) was 5,010 rows, and Altair's
    MaxRowsError stopped the Profile and Runs pages there (no phases, timeline, findings or downloads after it).
    Each per-step bar chart draws its MAX_BARS longest steps, says how many it left out, and exports."""
    for name in ("long A", "long B"):
        import_trace(runs_dir, _long_training(tmp_path / f"{name}.json", 501), name)
    at = app("profile")
    _bounded(at)
    for title, csv_key, by in (("Where each step's time goes on the GPU", "profile_breakdown", "time_us"),
                               ("Where each training step's time goes", "profile_phases", "cpu_us")):
        every = _rows(download(at, media, f"csv_{csv_key}"))
        spec = _chart(at, title)
        drawn = {r["bar"] for rows in _datasets(spec).values() for r in rows if "bar" in r}
        assert drawn == set(_longest_bars(every, by, lambda s: f"step {s}")), title
        assert f"501 {'bars' if by == 'time_us' else 'steps'}: the {501 - charts.MAX_BARS:,} shortest" in \
            _subtitle(spec)
        assert download(at, media, f"png_{csv_key}")[:4] == b"\x89PNG"
    assert "What this trace says" in " ".join(h.value for h in at.header)  # the page goes on past them
    at = app("runs")
    _bounded(at)
    spec = _chart(at, "Every profiled step of both runs")
    assert len({r["bar"] for rows in _datasets(spec).values() for r in rows if "bar" in r}) == charts.MAX_BARS
    assert f"1,002 bars: the {1002 - charts.MAX_BARS:,} shortest" in _subtitle(spec)
    assert download(at, media, "png_runs_breakdown_steps")[:4] == b"\x89PNG"


def test_two_runs_of_1500_kernels_compare_their_longest(runs_dir, media, tmp_path):
    """Two runs of a step launching 1,500 distinct kernels (a compiled model's Triton kernels) on the Runs page: the
    median kernel duration chart listed every name, and vl-convert's PNG and SVG export, and so the page's report,
    failed ("Maximum call stack size exceeded"); above 2,500 names the page stopped with MaxRowsError. It draws the
    kernels of the MAX_BARS longest bars, says how many it left out, and exports; the CSV has every kernel."""
    import verdict_traces as vt
    t = vt.Trace()
    t.step(1, lambda t: [t.launch(f"triton_poi_fused_{k:04d}", 1.0 + (k * 263) % 1499 / 100, call_us=1.0)
                         for k in range(1500)])
    for name in ("A", "B"):
        import_trace(runs_dir, t.write(tmp_path / f"{name}.json"), name)
    at = app("runs")
    _bounded(at)
    every = _rows(download(at, media, "csv_runs_kernels"))
    assert len(every) == 2 * 1500
    spec = _chart(at, "Median kernel duration")
    drawn = [r["kernel"] for rows in _datasets(spec).values() for r in rows if "kernel" in r]
    longest = sorted({r["kernel"]: float(r["median_us"]) for r in every}.items(), key=lambda kv: -kv[1])
    assert set(drawn) == {k for k, _ in longest[:charts.MAX_BARS // 2]} and len(drawn) == charts.MAX_BARS
    assert f"1,500 kernels: the {1500 - charts.MAX_BARS // 2:,} shortest" in _subtitle(spec)
    assert download(at, media, "png_runs_kernels")[:4] == b"\x89PNG"
    assert b"<svg" in download(at, media, "svg_runs_kernels")[:200]
    assert "Median kernel duration" in download(at, media, "report_runs").decode()


def test_dispatch_on_9450_launches_and_61_syncs(runs_dir, media):
    """HTA's A100 trace on the Dispatch page: each synchronize counted as a plain scan counts them, the latency
    chart's points each a real launch and every step's lowest and highest latency among them, the chain's text cut
    with a line that says so."""
    import_trace(runs_dir, CONTROL, "control")
    events = _scan(CONTROL)
    syncs = [e for e in events if e.get("ph") == "X" and e.get("name") in ("cudaStreamSynchronize",
                                                                          "cudaDeviceSynchronize")]
    gpu_ops = [e for e in events if e.get("ph") == "X" and str(e.get("cat")).lower() in ("kernel", "gpu_memcpy",
                                                                                        "gpu_memset")]
    at = app("dispatch")
    _bounded(at)
    lat = _chart(at, "Launch latency")
    every = _rows(download(at, media, "csv_dispatch_latency"))
    assert len(every) == len(gpu_ops) == 9450  # every GPU op of this trace has its launch's flow
    drawn = next(iter(_datasets(lat).values()))
    assert len(drawn) <= charts.MAX_POINTS
    assert f"{len(every):,} launches drawn as {len(drawn):,}" in _subtitle(lat)
    names = {r["kernel"] for r in every}
    assert f"{len(names):,} GPU op names: the {charts.MAX_COLOURS - 1} launched most often" in _subtitle(lat)
    assert len({r["kernel"] for r in drawn}) <= charts.MAX_COLOURS  # the legend's entries
    real = {(r["kernel"], r["step"], round(float(r["latency_us"]), 6)) for r in every}
    assert {(r["name"], str(r["step"]), round(r["latency_us"], 6)) for r in drawn} <= real
    for step in {r["step"] for r in every}:
        mine = [float(r["latency_us"]) for r in every if r["step"] == step]
        shown = [r["latency_us"] for r in drawn if str(r["step"]) == step]
        assert min(shown) == pytest.approx(min(mine)) and max(shown) == pytest.approx(max(mine))
    sync = _chart(at, "What the synchronize waited for")
    assert len(syncs) == 61
    assert f"{len(syncs)} synchronize calls: the {charts.MAX_SYNC_BARS} longest" in _subtitle(sync)
    assert len(_rows(download(at, media, "csv_dispatch_sync"))) == len(syncs)
    assert any(f"The {charts.MAX_SYNC_BARS} longest of {len(syncs)} synchronize calls" in c.value for c in at.caption)
    tree = at.code[0].value
    more = re.search(r"… and ([\d,]+) more rows", tree)
    chain = _rows(download(at, media, "csv_dispatch_flame"))
    assert more and int(more.group(1).replace(",", "")) == len(chain) - len(tree.splitlines()) + 1
