"""Overhead vs compute: sweep the size; where does GPU time overtake CPU time per step? (question 2)"""
import streamlit as st

from pages import _ui as ui
from profiling_core.present import charts
from profiling_core.errors import ConfigError
from profiling_core.present import (ReportSection, bound_sentence, comparison_warnings, crossover_sentence,
                                    setting_labels, setting_parts, size_axis_title, sweep_bounds)
from profiling_core.run import sweep_configs, sweep_points, sweep_values

ui.in_frame(__file__)  # a deep link's first load goes through the app's frame

st.title("Overhead vs compute")
st.caption("At 64² the GPU idles while the CPU launches; at 4096² the GPU works. Sweep sizes and see where the "
           "curves of CPU time per step and GPU busy time per step cross.")

cuda = bool(ui.environment().get("cuda_available"))
names = ui.workload_names()
wl_name = st.selectbox("Workload", names, key="sweep_workload",
                       help="what each run profiles; the sweep varies its size knob (matrix size, batch, sequence "
                            "length, KV length)")
wl = ui.get_workload(wl_name)
if not wl.size_knobs:
    st.info(f"{ui.md_code(wl_name)} has no size knob to sweep: profile it on the **Profile** page.",
            icon=":material/info:")
with st.form("sweep_form"):
    c1, c2, c3 = st.columns(3)
    knob_values = {}
    sizes_error = None
    if wl_name == "matmul_add":
        sizes = c1.multiselect("Sizes", ui.SIZES, default=ui.SIZES if cuda else [64, 256, 1024], key="sweep_sizes",
                               help="each size is one fresh worker process")
    elif not wl.size_knobs:
        sizes = []
    else:
        axis_names = " / ".join(wl.size_knobs)
        text = c1.text_input(f"Values of {axis_names} (comma-separated)", value="128,512,2048",
                             key=f"sweep_values_{wl_name}", max_chars=1000,
                             help="the sweep axis: " + wl.size_axis_text()
                             + "; whole numbers in the digits 0-9, in the knob's range")
        cols = (c1, c2, c3)
        given = wl.defaults()
        for i, knob in enumerate(k for k in wl.knobs if k.name not in wl.size_knobs):
            knob_values[knob.name] = ui.knob_widget(cols[(i + 1) % 3], f"sweep_{wl_name}_{knob.name}", knob,
                                                     given[knob.name])
        try:
            sizes = sweep_values(text, wl_name, wl.applicable(knob_values))
        except ConfigError as exc:
            sizes, sizes_error = [], exc
            c1.error(ui.md_text(exc), icon=":material/error:")
    modes = c1.multiselect("Modes", ["off", "default", "reduce-overhead"], default=["off"], key="sweep_modes",
                           format_func=lambda m: "eager" if m == "off" else f"compile ({m})",
                           help="overlay eager and torch.compile")
    dtype = ui.dtype_select(c2, "sweep_dtype")
    device = c2.selectbox("Device", ui.DEVICES, index=0, key="sweep_device")
    warmup = c3.number_input(ui.WARMUP_CALLS_LABEL, 0, 1000, 3, key="sweep_warmup", help=ui.WARMUP_CALLS_HELP)
    active = c3.slider("Active steps", 1, 50, 10, key="sweep_active")
    repeats = c2.number_input("Runs of each point", 1, 10, 1 if cuda else 3, key="sweep_repeats",
                              help="each (size, mode) runs this many times, each in a fresh worker; the chart shows "
                                   "their median with the min–max range (on a CPU the step time is mostly noise "
                                   "unless repeated)")
    executor = ui.executor_control("sweep")
    go = st.form_submit_button("Run sweep", type="primary", icon=":material/play_arrow:", disabled=not wl.size_knobs)
if go and sizes_error is None:  # (a bad value is said under its box)
    try:
        common = dict(dtype=dtype, device=device, warmup=int(warmup), wait=0,
                      warmup_steps=1 if warmup == 0 else 0, active=active)
        configs = [c for _ in range(int(repeats))
                   for c in sweep_configs(sorted(sizes), modes, workload=wl_name,
                                          knobs=wl.applicable(knob_values), **common)]
        configs.sort(key=lambda c: (c.compile, c.workload_knobs.get(c.size_knob) or 0))
        if not configs:
            st.warning("Pick at least one size and one mode.")
        else:
            ui.start_sweep("sweep", configs, f"Sweep of {len(configs)} runs", executor)
    except ConfigError as exc:
        st.error(ui.md_text(exc), icon=":material/error:")
ui.finish_sweep("sweep", "overhead_runs")

# --- which runs to chart ---------------------------------------------------------------------------
runs = ui.runs_frame()
default = [r for r in st.session_state.get("overhead_runs", []) if r in set(runs["run_id"])]
if not default and len(runs):
    default = list(runs["run_id"].head(12))
chosen = ui.runs_multiselect("Runs in the chart (the last sweep by default)", "overhead_chosen", default)
if not chosen:
    st.info("No runs to chart yet: run a sweep above.")
    st.stop()

per_run = ui.summaries(chosen).dropna(subset=["size"])
if per_run.empty:
    st.info("None of the chosen runs has a known matrix size.")
    st.stop()
if per_run["has_gpu"].nunique() > 1:  # CPU-only and GPU runs chosen together: keep their curves apart
    per_run["mode"] = per_run["mode"] + per_run["has_gpu"].map({True: " · GPU", False: " · CPU only"})
axes = sorted(set(per_run["axis"].dropna()))
if len(axes) > 1:  # sizes along different knobs (2 new tokens is not a 2-token prompt): one curve per axis
    per_run["mode"] = per_run["mode"] + " · " + per_run["axis"].map(lambda a: size_axis_title(a)[0])
if per_run["step"].nunique() > 1:  # a forward pass and a training step are different work: never one point
    per_run["mode"] = per_run["mode"] + " · " + per_run["step"]
machines = per_run["machine"].nunique() > 1
if machines:  # runs of several machines (a Ray sweep per device type, an imported store): one curve per machine
    per_run["mode"] = per_run["mode"] + " · " + per_run["machine"]
# runs of one curve that measured another setting (cold against warm, another dtype, batch or knob) are points of
# another curve, never repeats of one point: one curve per setting, named by what differs within the curve
parts = {r: setting_parts(ui.load_run(r), ui.report(r), besides=("size", "mode", "where")) for r in per_run["run_id"]}
extra = dict.fromkeys(per_run["run_id"], "")
for _curve, ids in per_run.groupby("mode", sort=False)["run_id"]:
    extra.update({r: f" · {x}" if x else "" for r, x in zip(ids, setting_labels(parts[r] for r in ids))})
per_run["mode"] = per_run["mode"] + per_run["run_id"].map(extra)
x_title, symbol = size_axis_title(axes[0]) if len(axes) == 1 else (
    " / ".join(size_axis_title(x)[0] for x in axes) + ", each curve along its own", "size")
axis_of = dict(zip(per_run["mode"], per_run["axis"]))  # each curve's axis, for the crossover's wording
# each (axis, step, size, mode) point: the median of its runs with their min–max (one run: no spread to show)
keys = ("axis", "step", "size", "mode")
sweep = sweep_points(per_run, keys=keys, values=("cpu_us_per_step", "cpu_own_us_per_step", "cpu_work_share",
                                                 "gpu_busy_us_per_step", "gpu_busy_fraction"))
sweep = sweep.merge(sweep_bounds(per_run, keys), on=list(keys), how="left").sort_values(["mode", "size"])
sweep["has_gpu"] = sweep["gpu_busy_us_per_step"] > 0
warnings = comparison_warnings(sweep, ["size", "mode"], runs=[ui.load_run(r) for r in chosen])
for w in warnings:
    st.warning(ui.md_text(w), icon=":material/warning:")
if (sweep["n"] == 1).all():
    st.caption("Each point is one run: its CPU time has no spread to read. Run each point several times (the "
               "form's *Runs of each point*) for a median and its range.")
st.header("CPU time per step against GPU busy time per step", divider="gray")
if not per_run["has_gpu"].any():
    st.info("These runs have no GPU lane (recorded on the CPU): GPU busy time is zero, so only the CPU curve is "
            "drawn and there is no crossover; question 2's rule on a CPU (the work ops' share of each step) gives "
            "each size's verdict below the chart. Run the sweep on a CUDA device to see the GPU take over.",
            icon=":material/info:")
cols = ["axis", "step", "size", "mode", "n", "cpu_us_per_step", "cpu_us_per_step_min", "cpu_us_per_step_max",
        "cpu_us_per_step_spread_pct", "cpu_own_us_per_step", "cpu_work_share", "gpu_busy_us_per_step",
        "gpu_busy_us_per_step_min",
        "gpu_busy_us_per_step_max", "gpu_busy_fraction", "bound"]
main = ui.chart("overhead_vs_compute", sweep[cols], x_title=x_title, symbol=symbol)
ui.chart_block(main, sweep[cols], "overhead_vs_compute", key="overhead_main")
cross = charts.crossover_points(sweep)
crossings = []  # (curve, what the page says of it), plain text: the report says it too
for mode, curve in sweep.groupby("mode", sort=False):
    said = " ".join([*(crossover_sentence(r, axis_of.get(mode)) for _, r in cross[cross["mode"] == mode].iterrows()),
                     *filter(None, [bound_sentence(curve, axis_of.get(mode))])])
    if said:
        crossings.append((str(mode), said))
        st.success(f"**{ui.md_text(mode)}**: {ui.md_text(said)}")
if per_run["has_gpu"].any() and cross.empty:
    st.caption("The curves do not cross inside this sweep"
               + (": extend the sizes to find the crossover." if (sweep.groupby("mode")["bound"].nunique() <= 1).all()
                  else ", though the verdict changes along it, as said above."))

frac_charts = []
if per_run["has_gpu"].any():  # a CPU run has no GPU busy fraction to draw
    st.header("GPU busy fraction of the step", divider="gray")
    frac = ui.chart("gpu_busy_fraction", sweep[cols], x_title=x_title)
    ui.chart_block(frac, sweep[cols], "gpu_busy_fraction", key="overhead_frac")
    frac_charts = [frac]
st.dataframe(sweep[cols], hide_index=True, width="stretch", height=ui.fit_height(sweep))

st.header("GEMM throughput against its device's peak", divider="gray")
gemm = ui.gemm_vs_peak(chosen)
peak_charts = []
if gemm.empty:
    st.caption("None of the chosen runs has a GEMM of known FLOPs.")
else:
    points = gemm
    if gemm["machine"].nunique() > 1:  # each machine's own curve, against its own device's peak
        points = gemm.assign(mode=gemm["mode"] + " · " + gemm["machine"],
                             dtype=gemm["dtype"] + " · " + gemm["machine"])
    peaks = {d: float(p) for d, p in points.dropna(subset=["compute_peak"]).groupby("dtype")["compute_peak"].max().items()}
    if not peaks:
        st.caption("No calibration of these runs' device in the store: the peak line is missing (measure it on "
                   "**Home**).")
    achieved = ui.chart("achieved_vs_peak", points[["size", "mode", "dtype", "tflops"]], peaks=peaks or None,
                        peak_source="datasheet" if (points["peak_source"] == "datasheet").any() else "measured",
                        x_title=x_title)
    ui.chart_block(achieved, gemm, "gemm_vs_peak", key="overhead_peak")
    peak_charts = [achieved]
    ui.table_block(gemm.drop(columns=["run_id"]), "gemm_vs_peak", key="overhead_peak_table", width="stretch",
                   column_config={"fraction_of_peak": st.column_config.ProgressColumn(
                       "of peak", format="percent", min_value=0.0, max_value=1.0)})
ui.report_button("Overhead vs compute",
                 [ReportSection("CPU vs GPU per step", charts=[main, *frac_charts],
                                text="\n\n".join([*warnings, *(f"{m}: {x}" for m, x in crossings)]),
                                tables=[("sweep", sweep[cols])]),
                  ReportSection("GEMM against its device's peak", charts=peak_charts,
                                tables=[("GEMM", gemm)] if len(gemm) else [])],
                 configs={r: (ui.load_run(r).meta.get("config") or {}) for r in chosen}, key="overhead")
