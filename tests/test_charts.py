"""Charts are pure: DataFrame in, Altair chart out; checked through chart.to_dict()."""
from __future__ import annotations

import json

import altair as alt
import numpy as np
import pandas as pd
import pytest

from profiling_core.present import charts as C


def _marks(spec: dict) -> list[str]:
    """Every mark type in a (possibly layered / faceted) Vega-Lite spec."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            mark = node.get("mark")
            if mark is not None:
                found.append(mark if isinstance(mark, str) else mark.get("type"))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(spec)
    return found


def _datasets(spec: dict) -> list[list[dict]]:
    return list(spec.get("datasets", {}).values())


@pytest.fixture
def slices():
    return pd.DataFrame({
        "lane": ["CPU thread 1"] * 3 + ["GPU stream 7"],
        "name": ["ProfilerStep#0", "aten::mm", "cudaLaunchKernel", "gemm"],
        "start_us": [0.0, 10.0, 20.0, 60.0], "end_us": [120.0, 50.0, 25.0, 80.0],
        "depth": [0, 1, 2, 0], "category": ["step", "cpu_op", "runtime", "kernel"]})


@pytest.fixture
def sweep():
    sizes = [64, 256, 1024, 4096, 8192]
    return pd.DataFrame({
        "size": sizes * 2, "mode": ["eager"] * 5 + ["compile"] * 5,
        "cpu_us_per_step": [140.0] * 5 + [380.0] * 5,
        "gpu_busy_us_per_step": [3.0, 5.0, 30.0, 180.0, 1400.0] * 2,
        "gpu_busy_fraction": [0.02, 0.03, 0.18, 0.56, 0.9] * 2})


@pytest.fixture
def durations():
    return pd.DataFrame({"step": [0, 1, 2, 0, 1, 2], "kernel": ["gemm"] * 3 + ["add"] * 3,
                         "dur_us": [169.0, 175.0, 168.6, 5.0, 5.2, 5.1]})


def test_step_timeline_draws_bars_and_links(slices):
    links = pd.DataFrame({"launch_us": [20.0], "kernel_us": [60.0], "launch_lane": ["CPU thread 1"],
                          "kernel_lane": ["GPU stream 7"], "name": ["gemm"]})
    spec = C.step_timeline(slices, links).to_dict()
    assert _marks(spec) == ["bar", "text", "rule"]  # bars, their names, the launch links
    bar = spec["layer"][0]["encoding"]
    assert bar["x"]["field"] == "start_us" and bar["x2"]["field"] == "end_us"
    assert bar["y"]["sort"] == ["CPU thread 1", "GPU stream 7"]
    rule = spec["layer"][2]["encoding"]
    assert rule["y"]["field"] == "launch_lane" and rule["y2"]["field"] == "kernel_lane"
    rows = [r for d in _datasets(spec) for r in d if "latency_us" in r]
    assert rows[0]["latency_us"] == 40.0


def test_step_timeline_without_links_or_optional_columns(slices):
    spec = C.step_timeline(slices[["lane", "name", "start_us", "end_us"]]).to_dict()
    assert _marks(spec) == ["bar", "text"]


def test_timeline_bars_carry_their_names_cut_to_fit(slices):
    """A name is written on a bar that can hold ~6 characters at the chart's width, cut with an ellipsis; a bar
    too narrow (cudaLaunchKernel: 5 µs of 120) gets none. The exported SVG holds the text, so a PNG reads too."""
    from profiling_core.present.export import chart_svg
    chart = C.step_timeline(slices)
    labels = {r["label"] for d in _datasets(chart.to_dict()) for r in d if "label" in r}
    assert "ProfilerStep#0" in labels and "aten::mm" in labels and "gemm" in labels
    assert not any(lb.startswith("cudaLaunch") for lb in labels)
    long = slices.assign(name=["ProfilerStep#0", "aten::mm", "x", "void gemm_kernel_" + "a" * 200])
    cut = {r["label"] for d in _datasets(C.step_timeline(long).to_dict()) for r in d if "label" in r}
    assert any(lb.startswith("void gemm_kernel_") and lb.endswith("…") for lb in cut)
    assert ">ProfilerStep#0<" in chart_svg(chart)


def test_all_zero_bars_are_one_sentence():
    df = pd.DataFrame({"metric": ["memcpy DtoD", "memsets"], "value": [0, 0]})
    spec = C.grouped_bars(df, category="metric", value="value", title="GPU ops per step").to_dict()
    assert _marks(spec) == ["text"]
    assert "GPU ops per step: every value is zero" in json.dumps(spec)


def test_bars_spanning_decades_get_a_log_axis():
    df = pd.DataFrame({"size": ["64", "8192"], "cpu_us": [3.0, 9000.0]})
    spec = C.grouped_bars(df, category="size", value="cpu_us").to_dict()
    assert spec["layer"][0]["encoding"]["x"]["scale"]["type"] == "symlog"
    near = C.grouped_bars(df.assign(cpu_us=[30.0, 90.0]), category="size", value="cpu_us").to_dict()
    assert "type" not in near["layer"][0]["encoding"]["x"].get("scale", {})


def test_one_slow_step_does_not_flatten_the_others(durations):
    cold = durations.copy()
    cold.loc[0, "dur_us"] = 5000.0  # the first, cold step of gemm
    spec = C.kernel_durations_by_step(cold).to_dict()
    assert spec["spec"]["layer"][0]["encoding"]["y"]["scale"]["type"] == "log"
    plain = C.kernel_durations_by_step(durations).to_dict()
    assert plain["spec"]["layer"][0]["encoding"]["y"]["scale"].get("type") is None


def test_missing_column_is_named():
    with pytest.raises(ValueError, match=r"needs column\(s\) end_us; got lane, name, start_us"):
        C.step_timeline(pd.DataFrame({"lane": [], "name": [], "start_us": []}))


def test_crossover_is_interpolated_in_log_space(sweep):
    cross = C.crossover_points(sweep)
    assert list(cross["mode"]) == ["eager", "compile"]
    eager = cross.iloc[0]
    assert 1024 < eager["size"] < 4096
    assert eager["value_us"] == pytest.approx(140.0)


def test_a_crossover_names_the_measured_sizes_either_side_and_its_direction(sweep):
    eager = C.crossover_points(sweep).iloc[0]
    assert (eager["below"], eager["above"]) == (1024, 4096)  # 30 < 140 µs at 1024, 180 > 140 µs at 4096
    assert bool(eager["overtakes"])
    falling = sweep[sweep["mode"] == "eager"].assign(cpu_us_per_step=[1.0, 2.0, 50.0, 400.0, 9000.0])
    down = C.crossover_points(falling).iloc[0]  # the GPU's curve starts above the CPU's and falls below it
    assert (down["below"], down["above"], bool(down["overtakes"])) == (256, 1024, False)


def test_no_crossover_when_curves_do_not_cross(sweep):
    flat = sweep.assign(gpu_busy_us_per_step=1.0)
    assert C.crossover_points(flat).empty
    spec = C.overhead_vs_compute(flat).to_dict()
    assert _marks(spec) == ["line"]


def test_overhead_vs_compute_is_log_log_with_crossover(sweep):
    spec = C.overhead_vs_compute(sweep).to_dict()
    line = spec["layer"][0]["encoding"]
    assert line["x"]["scale"]["type"] == "log" and line["y"]["scale"]["type"] == "log"
    assert line["strokeDash"]["field"] == "mode"
    assert _marks(spec) == ["line", "rule", "point", "text"]
    labels = [r["label"] for d in _datasets(spec) for r in d if "label" in r]
    assert any(lbl.startswith("crossover eager: n≈") for lbl in labels)


def test_gpu_busy_fraction_axis_is_percent(sweep):
    spec = C.gpu_busy_fraction(sweep).to_dict()
    assert spec["encoding"]["y"]["axis"]["format"] == "%"
    assert spec["encoding"]["y"]["scale"]["domain"] == [0, 1]


def test_kernel_durations_by_step_facets_per_kernel_with_median_and_mean(durations):
    spec = C.kernel_durations_by_step(durations).to_dict()
    assert spec["facet"]["row"]["field"] == "kernel"
    assert spec["resolve"]["scale"]["y"] == "independent"
    assert _marks(spec) == ["line", "rule", "rule"]
    rows = _datasets(spec)[0]
    gemm = [r for r in rows if r["kernel"] == "gemm"][0]
    assert gemm["median_us"] == pytest.approx(169.0)
    assert gemm["mean_us"] == pytest.approx((169.0 + 175.0 + 168.6) / 3)


def test_kernel_spread_compares_runs(durations):
    two = pd.concat([durations.assign(run="a"), durations.assign(run="b")])
    spec = C.kernel_spread(two).to_dict()
    assert _marks(spec) == ["rule", "bar", "tick", "tick"]  # whiskers, quartiles, median, mean
    rows = _datasets(spec)[0]
    assert {(r["run"], r["kernel"]) for r in rows} == {(a, k) for a in "ab" for k in ("gemm", "add")}
    gemm = next(r for r in rows if r["run"] == "a" and r["kernel"] == "gemm")
    # by hand, linear interpolation over the sorted 168.6, 169.0, 175.0
    assert (gemm["min_us"], gemm["q1_us"], gemm["median_us"], gemm["q3_us"], gemm["max_us"]) == pytest.approx(
        (168.6, 168.8, 169.0, 172.0, 175.0))
    assert gemm["launches"] == 3


def test_kernel_spread_holds_any_number_of_launches():
    """One row per (run, kernel) whatever the launches: 30,000 launches make a spec of 2 rows, not a MaxRowsError."""
    n = 30_000
    df = pd.DataFrame({"kernel": ["k1", "k2"] * (n // 2), "dur_us": [float(i % 1000) for i in range(n)]})
    rows = _datasets(C.kernel_spread(df).to_dict())[0]
    assert len(rows) == 2 and {r["launches"] for r in rows} == {n // 2}
    assert {r["max_us"] for r in rows} == {998.0, 999.0}


def test_grouped_bars_groups_and_labels():
    df = pd.DataFrame({"metric": ["CPU per step", "CPU per step"], "cpu_us": [140.0, 380.0],
                       "mode": ["eager", "compile"]})
    spec = C.grouped_bars(df, category="metric", value="cpu_us", group="mode", title="t").to_dict()
    assert _marks(spec) == ["bar", "text"]
    enc = spec["layer"][0]["encoding"]
    assert enc["yOffset"]["field"] == "mode" and enc["color"]["field"] == "mode"
    assert spec["title"] == "t"


def test_launch_latency_shapes_by_launch_call():
    df = pd.DataFrame({"kernel": ["gemm", "add"], "latency_us": [10.0, 12.0], "step": [0, 0],
                       "launch": ["cuLaunchKernelEx", "cudaLaunchKernel"]})
    spec = C.launch_latency(df).to_dict()
    assert spec["mark"]["type"] == "point"
    assert spec["encoding"]["shape"]["field"] == "launch"


def test_dispatch_flame_labels_only_wide_slices(slices):
    spec = C.dispatch_flame(slices[slices.lane == "CPU thread 1"]).to_dict()
    assert _marks(spec) == ["bar", "text"]
    rows = _datasets(spec)[0]
    labels = {r["name"]: r["label"] for r in rows}
    assert labels["ProfilerStep#0"] == "ProfilerStep#0"
    assert labels["cudaLaunchKernel"] == ""


def test_cold_vs_warm_and_sync_idle():
    steps = pd.DataFrame({"step": [0, 1, 0, 1], "dur_us": [29000.0, 100.0, 101.0, 99.0],
                          "label": ["cold", "cold", "warm", "warm"]})
    spec = C.cold_vs_warm(steps).to_dict()
    assert spec["layer"][0]["encoding"]["xOffset"]["field"] == "label"
    assert spec["layer"][0]["encoding"]["y"]["scale"]["type"] == "symlog"  # 29,000 µs cold against ~100 µs warm
    ranged = C.cold_vs_warm(steps.assign(lo_us=steps["dur_us"] - 1, hi_us=steps["dur_us"] + 1)).to_dict()
    assert _marks(ranged) == ["bar", "rule"]
    parts = pd.DataFrame({"label": ["sync"] * 3, "part": ["GPU busy", "GPU on unrecorded work", "GPU idle"],
                          "dur_us": [26.0, 1200.0, 554.0]})
    spec = C.sync_idle(parts).to_dict()
    assert spec["encoding"]["color"]["scale"]["domain"] == ["GPU busy", "GPU on unrecorded work", "GPU idle"]
    # stacked in that order, whatever the alphabet says ("GPU idle" < "GPU on ...")
    assert spec["encoding"]["order"]["field"] == "order"
    assert sorted(_datasets(spec)[0], key=lambda r: r["order"])[-1]["part"] == "GPU idle"


def test_empty_chart_carries_the_reason():
    spec = C.empty_chart("No GPU lanes: CPU trace").to_dict()
    assert _datasets(spec)[0] == [{"message": "No GPU lanes: CPU trace"}]


def test_every_chart_is_valid_json_without_pandas_types(slices, sweep, durations):
    charts = [C.step_timeline(slices), C.overhead_vs_compute(sweep), C.gpu_busy_fraction(sweep),
              C.kernel_durations_by_step(durations), C.kernel_spread(durations), C.dispatch_flame(slices)]
    for ch in charts:
        assert isinstance(ch, alt.TopLevelMixin)
        json.dumps(ch.to_dict())


def test_repeated_sweep_points_carry_their_range():
    from profiling_core.run.sweep import sweep_points
    runs = pd.DataFrame({"size": [64, 64, 64, 4096], "mode": ["eager"] * 4,
                         "cpu_us_per_step": [10.0, 12.0, 30.0, 50.0], "gpu_busy_us_per_step": [1.0, 1.0, 2.0, 90.0],
                         "gpu_busy_fraction": [0.1, 0.1, 0.1, 0.9]})
    pts = sweep_points(runs)
    p64 = pts[pts["size"] == 64].iloc[0]
    assert (p64["n"], p64["cpu_us_per_step"], p64["cpu_us_per_step_min"], p64["cpu_us_per_step_max"]) == \
        (3, 12.0, 10.0, 30.0)
    assert p64["cpu_us_per_step_spread_pct"] == pytest.approx(100 * 20 / 12)
    assert pd.isna(pts[pts["size"] == 4096]["cpu_us_per_step_spread_pct"].iloc[0])  # one run: no spread
    spec = C.overhead_vs_compute(pts).to_dict()
    bars = [r for d in _datasets(spec) for r in d if "lo_us" in r]
    assert {(r["metric"], r["lo_us"], r["hi_us"]) for r in bars} == {("CPU per step", 10.0, 30.0),
                                                                     ("GPU busy per step", 1.0, 2.0)}


def test_the_whole_run_overview_marks_every_step_and_stays_bounded():
    from profiling_core.analyses import analyze
    from profiling_core.present.export import chart_png
    from profiling_core.trace import open_trace
    from pathlib import Path
    path = Path(__file__).parent / "data" / "h200" / "4096_bf16_warm_eager_a20.json"
    with open_trace(path, engine="sqlite") as s:
        chains = analyze(s).dispatch_chains
    slices, steps, dropped = C.overview_from_chains(chains)
    assert len(steps) == chains["step"].nunique() == 20 and dropped == 0
    assert set(slices["lane"]) == {"CPU", "GPU"} and slices["depth"].max() <= 3
    assert slices["start_us"].min() == 0.0
    few, _, cut = C.overview_from_chains(chains, max_slices=50)
    assert len(few) == 50 and cut == len(slices) - 50
    assert few["end_us"].sub(few["start_us"]).min() >= slices["end_us"].sub(slices["start_us"]).nlargest(50).min()
    chart = C.trace_overview(slices, steps)
    spec = chart.to_dict()
    assert _marks(spec) == ["bar", "rule", "text"] and "params" in json.dumps(spec)  # zoomable
    assert chart_png(chart)[:4] == b"\x89PNG"


def test_bar_labels_never_read_as_exponents_or_zero_runs():
    import re
    big = pd.DataFrame({"metric": ["a", "b"], "value": [5460.0, 12.0]})
    spec = json.dumps(C.grouped_bars(big, category="metric", value="value").to_dict())
    fmt = set(re.findall(r'"format": "([^"]+)"', spec))
    assert fmt == {",.0f", ",.4~r"}  # labels 5,460 and 12, not 5.46e+3; the log axis in plain decimals, not "10m"
    import vl_convert as vlc  # the axis as drawn: one tick per decade, not just 0 and the maximum
    svg = vlc.vegalite_to_svg(C.grouped_bars(big, category="metric", value="value").to_json())
    ticks = re.findall(r'<text[^>]*>([0-9,.]+)</text>', svg)
    assert {"0", "10", "100", "1,000"} <= set(ticks), ticks
    small = pd.DataFrame({"metric": ["a", "b"], "value": [0.5, 0.125]})
    assert ",.3~f" in json.dumps(C.grouped_bars(small, category="metric", value="value").to_dict())


def test_bars_of_medians_carry_their_range():
    df = pd.DataFrame({"run": ["eager (median of 3)", "default (median of 3)"], "cpu_us": [60.0, 140.0],
                       "lo": [55.0, 120.0], "hi": [80.0, 150.0]})
    spec = C.grouped_bars(df, category="run", value="cpu_us", spread=("lo", "hi")).to_dict()
    assert _marks(spec) == ["bar", "text", "rule"]
    rule = spec["layer"][2]["encoding"]
    assert rule["x"]["field"] == "lo" and rule["x2"]["field"] == "hi"


def test_an_all_zero_busy_fraction_is_one_sentence(sweep):
    cpu = sweep.assign(gpu_busy_fraction=0.0)
    spec = C.gpu_busy_fraction(cpu).to_dict()
    assert _marks(spec) == ["text"] and "zero at every size" in json.dumps(spec)
    assert _marks(C.gpu_busy_fraction(sweep).to_dict()) != ["text"]


def test_bars_on_a_wide_range_are_drawn():
    """Rendered, not only specified: with one step 290x the others the bars still show (a log axis drew none)."""
    import io
    from PIL import Image
    from profiling_core.present.export import chart_png
    steps = pd.DataFrame({"step": [0, 1, 2, 0, 1, 2], "dur_us": [29000.0, 100.0, 90.0, 101.0, 99.0, 95.0],
                          "label": ["A"] * 3 + ["B"] * 3})
    import numpy as np
    px = np.asarray(Image.open(io.BytesIO(chart_png(C.cold_vs_warm(steps), scale=1.0))).convert("RGB")).astype(int)
    blue = int((np.abs(px - [76, 120, 168]) < 12).all(axis=2).sum())
    assert blue > 2000  # the default first colour, #4c78a8, fills A's three bars


def test_the_timeline_png_carries_the_names(slices):
    """The exported PNG itself holds the bars' names: the same timeline rendered with the names blanked differs,
    inside the bars, by the glyphs' dark pixels (text is drawn in #111 over the bars' colours)."""
    import io
    from PIL import Image
    from profiling_core.present.export import chart_png

    def dark_pixels(df):
        img = Image.open(io.BytesIO(chart_png(C.step_timeline(df), scale=2.0))).convert("L")
        return sum(img.histogram()[:80])  # pixels darker than 80 of 255
    named = dark_pixels(slices)
    blank = dark_pixels(slices.assign(name=["", "", "", ""]))
    assert named > blank + 300, (named, blank)  # "ProfilerStep#0", "aten::mm", "gemm" drawn on their bars


def test_roofline_draws_each_dtypes_ceiling_with_its_ridge():
    import pandas as pd

    from profiling_core.present import charts
    rows = pd.DataFrame({"kind": ["gemm", "elementwise"], "kernel": ["k1", "add"], "dtype": ["bf16", None],
                         "intensity": [1365.0, 1 / 6], "tflops": [151.3, 0.7], "time_us": [907.9, 22.4],
                         "fraction_of_peak": [0.188, 1.04]})
    spec = charts.roofline(rows, peaks={"bf16": 800.0, "fp32": 50.0}, bandwidth_gbs=4000.0).to_dict()
    ceil = next(d for d in spec["datasets"].values() if d and "ceiling" in d[0])
    # only the dtype on the chart; the ridge where 4000 GB/s x I reaches 800 TFLOP/s: I = 200 FLOP/byte
    assert {r["ceiling"] for r in ceil} == {"bf16 peak 800"}
    ridge = [r for r in ceil if r["tflops"] == 800.0]
    assert min(r["intensity"] for r in ridge) == 200.0
    low = min(ceil, key=lambda r: r["intensity"])
    assert low["tflops"] == 4000.0 * low["intensity"] / 1e3  # on the bandwidth slope
    empty = charts.roofline(rows.assign(intensity=None)).to_dict()
    assert "no op with known FLOPs and bytes" in str(empty)


def test_achieved_vs_peak_draws_the_measured_peak():
    import pandas as pd

    from profiling_core.present import charts
    pts = pd.DataFrame({"size": [4095, 4096], "tflops": [151.3, 811.0], "mode": ["eager", "eager"]})
    spec = charts.achieved_vs_peak(pts, peaks={"bf16": 803.7}).to_dict()
    rules = next(d for d in spec["datasets"].values() if d and "label" in d[0])
    assert rules == [{"tflops": 803.7, "label": "bf16 peak (measured) 803.7 TFLOP/s"}]


def _breakdown(steps_us: dict) -> pd.DataFrame:
    """A step_breakdown-shaped frame: {step: {category: µs}}, the other categories 0, window = the sum."""
    from profiling_core.analyses import BREAKDOWN_CATEGORIES
    rows = []
    for step, parts in steps_us.items():
        window = sum(parts.values())
        for c in BREAKDOWN_CATEGORIES:
            t = parts.get(c, 0.0)
            rows.append({"step": step, "category": c, "time_us": t, "share": t / window, "busy_us": t,
                         "overlapped_us": 0.0, "window_us": window})
    return pd.DataFrame(rows)


def test_time_by_category_has_one_order_and_one_colour_per_category():
    from profiling_core.analyses import BREAKDOWN_CATEGORIES
    eager = _breakdown({2: {"gemm": 170.0, "elementwise": 5.0, "idle": 15.0}})
    comp = _breakdown({2: {"memcpy": 15.0, "gemm": 178.0, "idle": 200.0}})
    specs = []
    for bd in (eager, comp):
        spec = C.time_by_category(C.breakdown_bars({"": bd}), bar="bar").to_dict()
        specs.append(spec)
        color = spec["encoding"]["color"]["scale"]
        assert color["domain"] == list(BREAKDOWN_CATEGORIES)  # every category, present or not, same place
        assert color["range"] == [C.BREAKDOWN_COLORS[c] for c in BREAKDOWN_CATEGORIES]
        assert spec["encoding"]["order"]["field"] == "order" and spec["encoding"]["x"]["stack"] == "zero"
        rows = _datasets(spec)[0]
        assert [r["order"] for r in rows] == list(range(len(BREAKDOWN_CATEGORIES)))
        assert {r["bar"] for r in rows} == {"step 2"}
    assert specs[0]["encoding"]["color"] == specs[1]["encoding"]["color"]
    share = C.time_by_category(C.breakdown_bars({"": eager}), bar="bar", value="share").to_dict()
    assert share["encoding"]["x"]["axis"]["format"] == ".0%"


def test_breakdown_bars_per_step_and_per_run():
    a = _breakdown({2: {"gemm": 100.0, "idle": 100.0}, 3: {"gemm": 50.0, "idle": 150.0}})
    b = _breakdown({7: {"communication": 30.0, "idle": 10.0}})
    steps = C.breakdown_bars({"A": a, "B": b})
    assert list(dict.fromkeys(steps["bar"])) == ["A · step 2", "A · step 3", "B · step 7"]
    runs = C.breakdown_bars({"A": a, "B": b}, per="run", steps={"A": pd.DataFrame({"step": [2, 3]}),
                                                                "B": pd.DataFrame({"step": [7]})})
    runs = runs.set_index(["bar", "category"])
    assert runs.loc[("A", "gemm"), "per_step_us"] == 75.0
    assert runs.loc[("A", "gemm"), "share"] == pytest.approx(150.0 / 400.0)  # over the sum of the windows
    assert runs.loc[("B", "communication"), "share"] == pytest.approx(0.75)
    none = C.breakdown_bars({"A": a.iloc[0:0]}, per="run", steps={"A": pd.DataFrame({"step": [2, 3]})})
    assert none.empty and "per_step_us" in none.columns
    with pytest.raises(ValueError, match="per must be 'step' or 'run'; got 'kernel'"):
        C.breakdown_bars({"A": a}, per="kernel")
    with pytest.raises(ValueError, match="per='run' needs steps="):
        C.breakdown_bars({"A": a}, per="run")


def test_time_by_category_names_what_is_wrong():
    with pytest.raises(ValueError, match="time_by_category needs column"):
        C.time_by_category(pd.DataFrame({"category": ["gemm"]}))
    with pytest.raises(ValueError, match="unknown categor\\(ies\\) kernel; known: gemm, convolution, attention"):
        C.time_by_category(pd.DataFrame({"category": ["kernel"], "step": [1], "time_us": [1.0]}))


def test_kernels_whose_names_share_a_long_prefix_stay_apart_and_repeated_calls_get_a_line_each():
    a, b = "k" * 70 + "_a", "k" * 70 + "_b"  # the same first 60 (and 48) characters
    df = pd.DataFrame({"step": [2, 2, 2, 3, 3, 3, 2, 3], "kernel": [a, a, a, a, a, a, b, b],
                       "occurrence": [0, 1, 2, 0, 1, 2, 0, 0], "dur_us": [1.0, 5.0, 9.0, 1.1, 5.1, 9.1, 3.0, 3.2]})
    spec = C.kernel_durations_by_step(df).to_dict()
    rows = _datasets(spec)[0]
    assert {r["kernel"] for r in rows} == {a, b}  # two facets, not one merged by a truncated name
    assert {round(r["median_us"], 2) for r in rows if r["kernel"] == b} == {3.1}
    line = spec["spec"]["layer"][0]
    assert line["encoding"]["detail"]["field"] == "call"  # one line per call: no zigzag through a step's calls
    lat = C.launch_latency(df.assign(latency_us=df["dur_us"])).to_dict()
    assert lat["encoding"]["color"]["field"] == "kernel"


def _svg_texts(chart) -> list[str]:
    """The text a rendered chart shows (vl-convert's SVG), unescaped."""
    import html
    import re

    import vl_convert as vlc
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", vlc.vegalite_to_svg(chart.to_json()))]


def test_the_sweep_legend_names_only_the_curves_drawn():
    cpu_only = pd.DataFrame({"size": [64, 256, 1024], "cpu_us_per_step": [20.0, 100.0, 5000.0],
                             "gpu_busy_us_per_step": [0.0, 0.0, 0.0]})
    shown = _svg_texts(C.overhead_vs_compute(cpu_only))
    assert "CPU per step" in shown and "GPU busy per step" not in shown  # a CPU run has no GPU line to name
    assert any("launched no GPU work" in t for t in shown)
    both = cpu_only.assign(gpu_busy_us_per_step=[5.0, 50.0, 900.0])
    shown = _svg_texts(C.overhead_vs_compute(both))
    assert {"CPU per step", "GPU busy per step"} <= set(shown)
    assert not any("launched no GPU work" in t for t in shown)


def test_the_sweep_draws_the_cpus_own_time_where_it_waited_for_the_gpu():
    """A loop that syncs every step holds its GPU work in its CPU time: the CPU's own time (less the wait) is the
    line question 2 weighs the GPU's against, drawn where it differs from the CPU time at some size, else left out."""
    synced = pd.DataFrame({"size": [64, 4096], "cpu_us_per_step": [76.8, 2145.1], "cpu_own_us_per_step": [76.8, 1129.5],
                           "gpu_busy_us_per_step": [3.3, 1454.9]})
    own = "CPU's own per step (less its waits for the GPU)"
    spec = C.overhead_vs_compute(synced).to_dict()
    [data] = [v for k, v in spec["datasets"].items() if any(r.get("metric") == own for r in v)]
    assert sorted((r["size"], r["us_per_step"]) for r in data if r["metric"] == own) == [(64, 76.8), (4096, 1129.5)]
    assert own in _svg_texts(C.overhead_vs_compute(synced))
    shown = _svg_texts(C.overhead_vs_compute(synced.assign(cpu_own_us_per_step=synced["cpu_us_per_step"])))
    assert own not in shown and {"CPU per step", "GPU busy per step"} <= set(shown)


def test_a_mean_far_above_the_median_is_explained_in_its_panel():
    skewed = pd.DataFrame({"step": list(range(2, 12)), "kernel": "gemm", "dur_us": [50.0] * 9 + [950.0]})
    steady = pd.DataFrame({"step": list(range(2, 12)), "kernel": "add", "dur_us": [10.0, 10.1] * 5})
    shown = _svg_texts(C.kernel_durations_by_step(pd.concat([skewed, steady], ignore_index=True)))
    notes = [t for t in shown if "above the median" in t]
    # by hand: mean (9·50 + 950) / 10 = 140, 180% above the median 50; the slowest is step 11
    assert notes == ["mean 180% above the median: step 11 (950.0 µs) pulls it up; read the median"]


def test_the_overview_step_labels_sit_inside_the_plot():
    slices = pd.DataFrame({"lane": ["CPU"] * 2, "name": ["ProfilerStep#2", "ProfilerStep#3"],
                           "start_us": [0.0, 100.0], "end_us": [90.0, 190.0], "depth": [0, 0],
                           "category": ["step", "step"]})
    steps = pd.DataFrame({"step": [2, 3], "start_us": [0.0, 100.0]})
    spec = C.trace_overview(slices, steps).to_dict()
    text = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "text")
    assert text["mark"]["baseline"] == "top" and text["encoding"]["y"]["value"] >= 0  # not above, over the legend


def test_a_log_axis_over_five_decades_reads_in_decades_and_names_its_peaks_source():
    g = pd.DataFrame({"size": [64, 512, 4096, 8192], "mode": "eager", "dtype": "bf16",
                      "tflops": [0.01, 1.2, 150.0, 700.0]})
    shown = _svg_texts(C.achieved_vs_peak(g, peaks={"bf16": 989.4}, peak_source="datasheet"))
    ticks = [t for t in shown if t.replace(",", "").replace(".", "").isdigit()]
    assert {"0.01", "0.1", "1", "10", "100", "1,000"} <= set(ticks) and "200" not in ticks and "20" not in ticks
    assert "bf16 peak (datasheet) 989.4 TFLOP/s" in shown
    narrow = _svg_texts(C.achieved_vs_peak(g.assign(tflops=[100.0, 200.0, 300.0, 500.0])))
    assert {"100", "200", "500"} <= set(narrow)  # under three decades: 2× and 5× ticks between


# --- big traces: every chart of events stays within Altair's MAX_ROWS and says what it left out ------------------

def test_keep_longest_keeps_the_longest_in_their_order_and_says_how_long_the_rest_were():
    df = pd.DataFrame({"name": list("abcdefgh"), "dur_us": [5.0, 1.0, 7.0, 1.0, 3.0, 7.0, 2.0, 0.5]})
    kept, note = C.keep_longest(df, 4)
    assert list(kept["name"]) == ["a", "c", "e", "f"]  # 7, 7, 5, 3 in the rows' order
    assert note.startswith("8 slices: the 4 shortest, each 2.0 µs or shorter, are left out")
    same, none = C.keep_longest(df, 8)
    assert same is df and none is None
    ties, _ = C.keep_longest(df, 2, what="slices")  # 7 and 7: the earlier of equals first
    assert list(ties["name"]) == ["c", "f"]


def test_a_breakdown_of_533_steps_draws_its_longest_steps_and_says_so():
    """An H200 loop profiled for 533 steps gave the per-step breakdown 5,330 rows (ten categories a step): Altair
    refused it with MaxRowsError and the Profile and Runs pages stopped there. The chart draws the MAX_BARS longest
    steps (by their window), in their order, in either view, and its subtitle says how many it left out."""
    from profiling_core.units import format_duration_us
    window = {s: 100.0 + (s * 263) % 541 for s in range(533)}  # each step's own length
    bd = _breakdown({s: {"gemm": w - 10.0, "idle": 10.0} for s, w in window.items()})
    longest = sorted(window, key=lambda s: -window[s])
    for value in ("time_us", "share"):
        spec = C.time_by_category(C.breakdown_bars({"": bd}), bar="bar", value=value).to_dict()
        rows = _datasets(spec)[0]
        assert len(rows) <= C.MAX_ROWS
        drawn = [f"step {s}" for s in sorted(longest[:C.MAX_BARS])]
        assert list(dict.fromkeys(r["bar"] for r in rows)) == drawn == spec["encoding"]["y"]["sort"]
        assert spec["title"]["subtitle"] == [
            f"533 bars: the {533 - C.MAX_BARS} shortest, each {format_duration_us(window[longest[C.MAX_BARS]])} or "
            "shorter, are left out to keep the chart drawable (the CSV has them all)"]
    few = C.time_by_category(C.breakdown_bars({"": _breakdown({2: {"gemm": 5.0}})}), bar="bar").to_dict()
    assert few["title"] == "Where each step's time goes on the GPU"  # nothing left out: nothing said


def test_the_phases_of_900_steps_draw_the_longest_steps_and_say_so():
    """Six phases a step: 900 training steps were 5,400 rows, over MAX_ROWS. The chart draws the MAX_BARS steps of
    the most CPU time, in their order, and says how many it left out."""
    from profiling_core.analyses import PHASES
    cpu = {s: 50.0 + (s * 263) % 907 for s in range(900)}
    phases = pd.DataFrame([{"step": s, "phase": p, "cpu_us": cpu[s] / len(PHASES), "share": 1 / len(PHASES)}
                           for s in cpu for p in PHASES])
    longest = sorted(cpu, key=lambda s: -cpu[s])
    for value in ("cpu_us", "share"):
        spec = C.phase_bars(phases, value=value).to_dict()
        rows = _datasets(spec)[0]
        assert len(rows) <= C.MAX_ROWS
        assert list(dict.fromkeys(r["bar"] for r in rows)) == [f"step {s}" for s in sorted(longest[:C.MAX_BARS])]
        assert spec["title"]["subtitle"][0].startswith(f"900 steps: the {900 - C.MAX_BARS} shortest, each ")


def test_grouped_bars_of_3000_kernels_draw_the_longest_and_say_so():
    """Two runs' median kernel durations side by side (the Runs page): 3,000 distinct kernel names were 6,000 rows,
    over MAX_ROWS, and from some 1,400 names vl-convert's PNG/SVG export failed ("Maximum call stack size
    exceeded"). The chart draws the kernels of the longest bars, MAX_BARS bars in all, in their order; it exports."""
    from profiling_core.present.export import chart_svg
    n = 3000
    median = [1.0 + (k * 263) % 2999 / 10 for k in range(n)]
    df = pd.DataFrame({"kernel": [f"triton_poi_fused_{k:05d}" for k in range(n)] * 2,
                       "median_us": median + [m / 2 for m in median], "run": ["A"] * n + ["B"] * n})
    chart = C.grouped_bars(df, category="kernel", value="median_us", group="run", title="Median kernel duration")
    spec = chart.to_dict()
    rows = _datasets(spec)[0]
    kept = sorted(range(n), key=lambda k: -median[k])[:C.MAX_BARS // 2]  # A's bar is each kernel's longest
    assert [r["kernel"] for r in rows] == [f"triton_poi_fused_{k:05d}" for k in sorted(kept)] * 2
    assert spec["title"]["subtitle"][0].startswith(f"3,000 kernels: the {n - C.MAX_BARS // 2:,} shortest, each ")
    assert chart_svg(chart).lstrip().startswith("<svg")
    few = C.grouped_bars(df.head(3), category="kernel", value="median_us", title="t").to_dict()
    assert few["title"] == "t"


def test_thin_by_time_keeps_each_slice_of_times_lowest_highest_and_last():
    n = 10_000
    t = pd.Series(range(n)) * 1000
    v = pd.Series([(i * 7919) % 1000 for i in range(n)], dtype=float)
    v[4321] = 5000.0  # one spike
    keep, note = C.thin_by_time(t, [v], 400, what="launches")
    assert keep.sum() <= 3 * 100 and keep[4321] and keep[n - 1]
    assert note.startswith(f"{n:,} launches drawn as {int(keep.sum()):,}: in each of 100 slices of time")
    bucket = (t * 100 // (n * 1000)).astype(int)  # the slices by hand: each keeps its own min and max
    for b, g in v.groupby(bucket):
        assert v[keep & (bucket == b)].max() == g.max() and v[keep & (bucket == b)].min() == g.min()


def test_a_kernel_called_many_times_a_step_is_drawn_as_each_steps_median_with_its_range():
    rows = [(step, "many", call, float(call)) for step in range(3) for call in range(50)]
    rows += [(step, "few", call, 10.0 + call) for step in range(3) for call in range(2)]
    df = pd.DataFrame(rows, columns=["step", "kernel", "occurrence", "dur_us"])
    spec = C.kernel_durations_by_step(df).to_dict()
    data = _datasets(spec)[0]
    many = [r for r in data if r["kernel"] == "many"]
    assert len(many) == 3 and {(r["dur_us"], r["lo_us"], r["hi_us"], r["calls"]) for r in many} == {(24.5, 0.0, 49.0,
                                                                                                     50)}
    assert all(r["median_us"] == 24.5 and r["mean_us"] == 24.5 for r in many)  # of all 150 launches
    assert len([r for r in data if r["kernel"] == "few"]) == 6  # one line per call, as before
    assert "1 kernel(s) called over 20 times in a step" in " ".join(spec["title"]["subtitle"])


def test_memory_comparison_of_many_runs_shares_one_charts_points():
    n = 5000
    runs = pd.concat([pd.DataFrame({"run": f"run {k}", "t_ms": [i / 10 for i in range(n)],
                                    "allocated_bytes": [float((i * 31) % 997) for i in range(n)]}) for k in range(6)])
    spec = C.memory_comparison_chart(runs).to_dict()
    assert sum(len(d) for d in _datasets(spec)) <= C.MAX_ROWS
    assert spec["title"]["subtitle"][0].startswith("run 0: 5,000 instants drawn as")


def test_sync_parts_split_each_call_into_busy_unrecorded_and_idle():
    """The H200 fp32 attention run's final sync (sync_wait, itself checked against plain scans): its three parts, in
    the chart's order, add up to the call's length, and its unrecorded part is the one sync_wait measured."""
    from pathlib import Path
    from profiling_core.analyses import sync_wait
    from profiling_core.trace import open_trace
    with open_trace(Path(__file__).parent / "data" / "h200_verdicts" / "attn_hd100_fp32_eager.json",
                    engine="sqlite") as s:
        sw = sync_wait(s)
    parts = C.sync_parts(sw)
    assert parts["part"].unique().tolist() == ["GPU busy", "GPU on unrecorded work", "GPU idle"]
    per = parts.groupby("label", sort=False)["dur_us"].sum()
    assert per.tolist() == pytest.approx(sw["dur_us"].tolist(), abs=0.01)
    longest = sw.loc[sw["dur_us"].idxmax()]
    got = parts.set_index(["label", "part"])["dur_us"]
    assert got[(f"{longest['name']} #{longest['id']}", "GPU on unrecorded work")] == longest["unrecorded_us"] > 1000


def test_sync_idle_draws_the_longest_calls():
    parts = pd.concat([pd.DataFrame({"label": [f"sync #{i}"] * 2, "part": ["GPU busy", "GPU idle"],
                                     "dur_us": [float(i), 1.0]}) for i in range(100)])
    spec = C.sync_idle(parts).to_dict()
    drawn = {r["label"] for r in _datasets(spec)[0]}
    assert drawn == {f"sync #{i}" for i in range(70, 100)}
    assert spec["title"]["subtitle"] == ["100 synchronize calls: the 30 longest are drawn (the CSV has them all)"]
    assert spec["encoding"]["y"]["sort"] is None  # in time order, not "sync #100" before "sync #99"


def test_thin_by_time_holds_the_loaders_whole_range_of_times():
    """Times from -2**62 to 2**62 ns (what the loader keeps) would overflow int64 arithmetic: every slice of time
    still keeps its lowest, highest and last, the first and the last point among them."""
    n = 5000
    t = pd.Series([-(2**62) + 1 + i * ((2**63 - 2) // (n - 1)) for i in range(n)], dtype="int64")
    v = pd.Series([float(i % 97) for i in range(n)])
    keep, note = C.thin_by_time(t, [v], 400)
    assert note is not None and keep.sum() <= 300 and keep.iloc[0] and keep.iloc[-1]
    kept_slices = {int(i * 100 // n) for i in np.flatnonzero(keep.to_numpy())}  # equal times apart: slice by position
    assert kept_slices == set(range(100))  # each of the 100 slices of time keeps its points, none merged


def test_run_names_in_legends_are_drawn_whole():
    """A legend that names runs shows each name whole: run names run to ~50 characters (``4096_bf16_warm_compile_
    reduce-overhead_b8``), which Vega's default label limit (160 px) cut with an ellipsis."""
    cold, warm = "cold · 4096_bf16_cold_compile_reduce-overhead_b8", "warm · 4096_bf16_warm_compile_reduce-overhead_b8"
    steps = pd.DataFrame({"step": [0, 1, 0, 1], "dur_us": [900.0, 100.0, 110.0, 100.0],
                          "label": [cold, cold, warm, warm]})
    shown = _svg_texts(C.cold_vs_warm(steps))
    assert cold in shown and warm in shown, [t for t in shown if "·" in t]
    runs = ["4096_bf16_warm_eager_b8-20261205-231820-9d2d", "4096_bf16_warm_compile_reduce-overhead_b8-1a2b"]
    bars = pd.DataFrame({"metric": ["cpu_us", "cpu_us"], "value": [10.0, 20.0], "run": runs})
    shown = _svg_texts(C.grouped_bars(bars, category="metric", value="value", group="run"))
    assert set(runs) <= set(shown), [t for t in shown if "4096" in t]
    durations = pd.DataFrame({"step": [0, 1, 0, 1], "kernel": ["k"] * 4, "dur_us": [1.0, 1.1, 1.2, 1.0],
                              "run": [runs[0], runs[0], runs[1], runs[1]]})
    shown = _svg_texts(C.kernel_durations_by_step(durations))
    assert set(runs) <= set(shown), [t for t in shown if "4096" in t]
