"""Compile vs eager: what torch.compile changes in the trace, and what it costs on the CPU (questions 9, 10)."""
import pandas as pd
import streamlit as st

from pages import _ui as ui
from profiling_core import ExperimentConfig
from profiling_core.analyses import compile_in_measured_steps, compile_payoff, compile_steps
from profiling_core.errors import ConfigError
from profiling_core.present import ReportSection, comparison_warnings, setting_labels, setting_parts
from profiling_core.run import SPREAD_WARN_PCT, sweep_points

ui.in_frame(__file__)  # a deep link's first load goes through the app's frame

st.title("Compile vs eager")
st.caption("torch.compile can fuse add(matmul) into one addmm, and reduce-overhead replays the step as a CUDA graph "
           "(one cudaGraphLaunch); both add CPU rows of their own (Dynamo cache lookup, the compiled region, the AOT "
           "prologue, the compiled FX graph). Is the step cheaper on the CPU, and how many launches are left?")

cuda = bool(ui.environment().get("cuda_available"))
with st.form("compile_form"):
    c1, c2, c3 = st.columns(3)
    size = c1.select_slider("Size", ui.SIZES, value=64, key="compile_size")
    dtype = ui.dtype_select(c1, "compile_dtype")
    modes = c2.multiselect("Compile modes (eager always runs)", ui.COMPILE_MODES[1:],
                           default=["default", "reduce-overhead"] if cuda else ["default"], key="compile_modes",
                           help="reduce-overhead uses CUDA graphs (cudaGraphLaunch) on a GPU")
    device = c2.selectbox("Device", ui.DEVICES, key="compile_device")
    warmup = c3.number_input(ui.WARMUP_CALLS_LABEL, 0, 1000, 3, key="compile_warmup",
                             help="compiling happens in these calls; keep them > 0 to profile the compiled steady "
                                  "state (" + ui.WARMUP_CALLS_HELP + ")")
    active = c3.slider("Active steps", 1, 50, 5, key="compile_active")
    reps = c3.number_input("Runs of each mode", 1, 10, 1 if cuda else 3, key="compile_reps",
                           help="the modes run in turn, this many rounds, each run in a fresh worker; the charts show "
                                "each mode's median with its min–max range")
    executor = ui.executor_control("compile")
    go = st.form_submit_button("Run eager + compiled", type="primary", icon=":material/play_arrow:")
if go:
    try:
        configs = [ExperimentConfig(size=size, dtype=dtype, device=device, warmup=int(warmup), compile=m, wait=0,
                                    warmup_steps=0, active=active) for _ in range(int(reps)) for m in ["off", *modes]]
        ui.start_sweep("compile", configs, f"Eager + {len(modes)} compile mode(s)", executor)
    except ConfigError as exc:
        st.error(ui.md_text(exc), icon=":material/error:")
ui.finish_sweep("compile", "compile_runs")

runs = ui.runs_frame()
default = [r for r in st.session_state.get("compile_runs", []) if r in set(runs["run_id"])] or list(
    runs["run_id"].head(2))
chosen = ui.runs_multiselect("Runs to compare (the eager ones of the first eager run's setting are the baseline)",
                             "compile_chosen", default)
if not chosen:
    st.info("No runs yet: press **Run eager + compiled** above.")
    st.stop()
# runs compare (and repeat each other) only where they measured the same setting but for their compile mode
setting = {r: setting_parts(ui.load_run(r), ui.report(r), besides=("mode",)) for r in chosen}
base_id = next((r for r in chosen if ui.mode_label(r) == "eager"), chosen[0])
unlike = [r for r in chosen if setting[r] != setting[base_id]]
if unlike:
    said = []
    for r in unlike:  # each against the baseline: the parts in which the two differ
        base_label, label = setting_labels([setting[base_id], setting[r]])
        said.append(f"{ui.load_run(r).name} ({label}; the baseline: {base_label})")
    st.warning(ui.md_text(
        f"Left out: {len(unlike)} of the chosen runs measured another setting than the baseline "
        f"{ui.load_run(base_id).name}, not only another compile mode: {'; '.join(said)}. Their times differ for "
        "that, not for torch.compile: compare each with an eager run of its own setting."), icon=":material/warning:")
    chosen = [r for r in chosen if r not in set(unlike)]


# the steps in which torch.compile's compiler ran in any of the runs: left out of every run's per-step figures, so
# that each run is read over the same steps (a cold eager run's first step is its cold start, not a compile)
compiling = sorted({k for r in chosen for k in compile_steps(ui.report(r).steps)})


def per_step(run_id: str) -> dict:
    rep = ui.report(run_id)
    cb = compile_in_measured_steps(rep)  # (the steps in which the compiler ran are left out, as question 10 does)
    cb = cb[~cb["step"].isin(compiling)]
    med = (lambda c: float(cb[c].median())) if len(cb) else (lambda c: float("nan"))
    return {"run": f"{ui.mode_label(run_id)} · {run_id[-4:]}", "mode": ui.mode_label(run_id),
            "CPU per step (µs)": med("cpu_dur_us"), "launches per step": med("launches"),
            "kernels per step": med("kernels"), "memcpy DtoD per step": med("memcpy_dtod"),
            "memsets per step": med("memsets"), "cudaGraphLaunch per step": med("graph_launches"),
            "Dynamo cache lookup (µs)": med("cache_lookup_us"), "compiled region (µs)": med("compiled_region_us"),
            "AOT prologue (µs)": med("prologue_us"), "CompiledFxGraph (µs)": med("fx_graph_us"),
            "FX graph hash": ", ".join(sorted({h for h in cb["fx_graph_hash"].dropna()})) if len(cb) else "",
            "compile in the steps (s)": float(rep.steps["compile_us"].sum()) / 1e6 if len(rep.steps) else 0.0}


per_run = pd.DataFrame([per_step(r) for r in chosen])
if any((ui.report(r).summary.get("steady_state") or {}).get("basis") == "after_first" for r in chosen):
    st.caption("Each run's per-step figures read its steady state, as every per-step figure does: the steps after the "
               "first (the first may carry start-up effects; the Dispatch page and question 3 compare it).")
if compiling:
    many = len(compiling) > 1
    st.caption(f"Step{'s' if many else ''} {', '.join(map(str, compiling))} {'are' if many else 'is'} left out of "
               f"every run's per-step figures: torch.compile's compiler ran in {'them' if many else 'it'} (compiling, "
               "or recording a CUDA graph) in one of the runs, so each run is read over the same steps.")
per_run["warmup_s"] = [(ui.load_run(r).meta.get("timings") or {}).get("warmup_s") for r in chosen]
per_run["warmup_calls"] = [getattr(ui.load_run(r).config, "warmup", None) for r in chosen]
per_run["cache_reused"] = [bool(ui.load_run(r).compile_cache_reused) for r in chosen]
points = sweep_points(per_run, keys=("mode",), values=("CPU per step (µs)",))
warnings = comparison_warnings(points, ["mode"], value="CPU per step (µs)", runs=[ui.load_run(r) for r in chosen])
noisy_modes = set(points.loc[points["CPU per step (µs)_spread_pct"] > SPREAD_WARN_PCT, "mode"])
for w in warnings:
    st.warning(ui.md_text(w), icon=":material/warning:")
GPU_COUNTS = ["launches per step", "kernels per step", "memcpy DtoD per step", "memsets per step",
              "cudaGraphLaunch per step"]
any_gpu = any(ui.report(r).has_gpu for r in chosen)
metrics = [c for c in per_run.columns if c not in ("run", "mode", "FX graph hash", "warmup_s", "warmup_calls",
                                                   "cache_reused", "compile in the steps (s)")
           and (any_gpu or c not in GPU_COUNTS)]  # (without a GPU lane there is nothing to count: no zeros)
if per_run["mode"].duplicated().any():  # repeated runs of a mode: its median, with the range of its CPU time
    g = per_run.groupby("mode", sort=False)
    table = g[metrics].median()
    table["CPU per step min (µs)"] = g["CPU per step (µs)"].min()
    table["CPU per step max (µs)"] = g["CPU per step (µs)"].max()
    table["runs"] = g.size()
    table["warmup_s"] = g["warmup_s"].median()
    table["warmup_calls"] = g["warmup_calls"].first()  # (one setting: the runs of another were left out above)
    table["cache_reused"] = g["cache_reused"].any()
    table["compile in the steps (s)"] = g["compile in the steps (s)"].median()
    table["FX graph hash"] = g["FX graph hash"].agg(lambda h: ", ".join(sorted({x for x in h if x})))
    table = table.reset_index()
    table["run"] = [f"{m} (median of {n})" for m, n in zip(table["mode"], table["runs"])]
    st.caption("Several runs of a mode: each number is its median; the CPU chart shows the min–max range.")
else:
    table = per_run
long = table.melt(id_vars=["run"], value_vars=metrics, var_name="metric", value_name="value")

st.header("Per step, by mode", divider="gray")
cpu_rows = table[["run", "CPU per step (µs)"]].rename(columns={"CPU per step (µs)": "cpu_us"})
if "CPU per step min (µs)" in table.columns:
    cpu_rows = cpu_rows.assign(lo=table["CPU per step min (µs)"].to_numpy(), hi=table["CPU per step max (µs)"].to_numpy())
cpu = ui.chart("grouped_bars", cpu_rows, category="run", value="cpu_us", title="CPU time per step (median)",
               value_title="µs per step", spread=("lo", "hi") if "lo" in cpu_rows.columns else None)
ui.chart_block(cpu, cpu_rows, "compile_cpu_per_step", key="compile_cpu")
gpu_charts = []
if any_gpu:
    counts = long[long["metric"].isin(GPU_COUNTS)]
    ops = ui.chart("grouped_bars", counts, category="metric", value="value", group="run",
                   title="Launches and GPU ops per step (median)", value_title="per step")
    ui.chart_block(ops, counts, "compile_gpu_ops", key="compile_ops")
    gpu_charts = [ops]
else:
    st.info("No GPU lane in these traces (recorded on the CPU), so there are no launches, GPU ops or "
            "cudaGraphLaunch to count. The CPU-side rows of torch.compile are below.", icon=":material/info:")

st.header("What fused", divider="gray")
eager_ids = [r for r in chosen if ui.mode_label(r) == "eager"]
known = tuple(sorted({n for r in eager_ids for n in ui.report(r).profiler_table["name"]
                      if isinstance(n, str) and n.startswith("aten::")}))
shown_any = False
for r in chosen:
    fused = ui.fusions(r, known)
    if fused.empty:
        continue
    shown_any = True
    st.markdown(f"**{ui.md_text(ui.load_run(r).name)}**: {len(fused)} Triton kernel(s); each row names the aten ops "
                "its name says it fused (Inductor names a kernel after the ops it replaced)")
    ui.table_block(fused, f"{ui.load_run(r).name}_fusions", key=f"compile_fused_{r}", width="stretch")
if shown_any and eager_ids:
    e = ui.report(eager_ids[0]).steps
    st.caption((f"Eager: {float(e['kernels'].median()):g} kernels per step (median); " if len(e) else
                "The eager run has no ProfilerStep, so it has no kernel count per step; ")
               + "the compiled runs' counts are in the chart above.")
elif not shown_any:
    st.caption("No Triton kernels in these runs: nothing was fused into generated kernels (on a CPU Inductor "
               "writes C++, and at this size a GEMM plus a bias add may compile to a library GEMM and a copy).")

st.header("The compiled region, broken down", divider="gray")
region = long[long["metric"].isin(["Dynamo cache lookup (µs)", "compiled region (µs)", "AOT prologue (µs)",
                                   "CompiledFxGraph (µs)"])]
reg = ui.chart("grouped_bars", region, category="metric", value="value", group="run",
                          title="torch.compile's CPU rows per step (median µs)", value_title="µs per step")
ui.chart_block(reg, region, "compile_region", key="compile_region")
hashes = table[["run", "FX graph hash"]]
if hashes["FX graph hash"].str.len().gt(0).any():
    st.caption("The same `CompiledFxGraph` hash in every step means every step hit the compile cache:")
    st.dataframe(hashes, hide_index=True)

st.header("Deltas against eager", divider="gray")
base_rows = table[table["mode"] == "eager"]
if base_rows.empty:
    st.caption("Add an eager run to the comparison to see deltas.")
    delta = table.set_index("run")[metrics].T.reset_index(names="metric")
else:
    base = base_rows.iloc[0]
    delta = pd.DataFrame({"metric": metrics, "eager": [base[m] for m in metrics]})
    for _, row in table.iterrows():
        if row["run"] == base["run"]:
            continue
        delta[row["run"]] = [row[m] for m in metrics]
        delta[f"Δ {row['run']}"] = [row[m] - base[m] for m in metrics]
ui.table_block(delta.round(2), "compile_deltas", key="compile_delta", width="stretch")

st.header("What compiling costs, and when it pays off", divider="gray")
payoff_rows = []
if not base_rows.empty:
    for _, row in table.iterrows():
        if row["mode"] == "eager" or pd.isna(row["warmup_s"]) or pd.isna(base["warmup_s"]):
            continue
        calls = row["warmup_calls"]
        p = compile_payoff(base["warmup_s"], row["warmup_s"], base["CPU per step (µs)"], row["CPU per step (µs)"],
                           warmup_calls=None if pd.isna(calls) else int(calls),
                           traced_compile_s=row["compile in the steps (s)"])
        noisy = sorted({"eager", row["mode"]} & noisy_modes)
        if not p["measured"] and p["why"] == "no warm-up":
            payoff_rows.append({"run": row["run"], "one-time compile (s)": None,
                                "compiled from": "no warm-up call, and no compile in its recorded steps: it "
                                                 "compiled in a step the profiler's schedule did not record",
                                "CPU saved per step (µs)": round(p["saving_us_per_step"], 1),
                                "pays off after": "not measured: make the runs with warm-up calls (its compile is "
                                                  "then their warm-up time's difference), or record from the "
                                                  "first step"})
            continue
        if not p["measured"]:
            payoff_rows.append({"run": row["run"], "one-time compile (s)": None,
                                "compiled from": "its warm-up took no longer than the eager run's "
                                                 f"({row['warmup_s']:.2f} against {base['warmup_s']:.2f} s)",
                                "CPU saved per step (µs)": round(p["saving_us_per_step"], 1),
                                "pays off after": "not measured: the runs' noise is larger than the compile; repeat "
                                                  "the runs (a fresh compile cache makes the compile show)"})
            continue
        payoff_rows.append({"run": row["run"], "one-time compile (s)": round(p["compile_s"], 2),
                            "compiled from": ("a warm cache: Inductor found the graph an earlier run compiled, "
                                              "so this is less than a first compile costs") if row["cache_reused"]
                            else "an empty cache" + (", in its recorded steps: their time inside torch.compile's "
                                                     "compiler ranges" if p["source"] == "trace" else ""),
                            "CPU saved per step (µs)": round(p["saving_us_per_step"], 1),
                            "pays off after": (f"unclear: the runs of {' and '.join(noisy)} spread by more than "
                                               f"{SPREAD_WARN_PCT:.0f}% (see the warning above)") if noisy
                            else "never (the compiled step is not cheaper on the CPU)"
                            if p["payoff_steps"] is None else f"{p['payoff_steps']:,} steps"})
if payoff_rows:
    st.caption("The compile happens in the first warm-up call: its one-time cost is the compiled run's warm-up time "
               "minus the eager run's (the same number of calls). A run without warm-up compiles in its first "
               "step: its cost is then the time the recorded steps spent inside torch.compile's compiler ranges. "
               "It pays off once the per-step CPU saving has added up to it.")
    ui.table_block(pd.DataFrame(payoff_rows), "compile_payoff", key="compile_payoff", width="stretch")
elif base_rows.empty or (table["mode"] == "eager").all():
    st.caption("Compare an eager and a compiled run to see the one-time compile cost beside the per-step saving.")
else:
    st.caption("Compare an eager and a compiled run made here (imported traces have no warm-up timings) to see "
               "the one-time compile cost beside the per-step saving.")
cpu_runs = [r for r in chosen if (ui.load_run(r).meta.get("device") or {}).get("type") == "cpu"]
if any(ui.mode_label(r) == "reduce-overhead" for r in cpu_runs):
    st.info("mode=\"reduce-overhead\" captures CUDA graphs, and a CPU has none: on the CPU it compiles as the default "
            "mode does (no cudaGraphLaunch, no saving from graphs).", icon=":material/info:")

st.header("The GEMM against its device's peak", divider="gray")
gemm = ui.gemm_vs_peak(chosen)
if gemm.empty:
    st.caption("None of these runs has a GEMM of known FLOPs.")
else:
    if gemm["peak"].isna().all():
        st.caption("No calibration of these runs' device in the store: no fraction of peak (measure it on **Home**).")
    ui.table_block(gemm.drop(columns=["run_id"]), "compile_gemm_vs_peak", key="compile_peak", width="stretch",
                   column_config={"fraction_of_peak": st.column_config.ProgressColumn(
                       "of peak", format="percent", min_value=0.0, max_value=1.0)})
    st.caption("µs per call: the mean over every call of the GEMM in the trace, the steps left out above included "
               "(the roofline's, as on the Profile page): a cold run's first calls carry its start-up, so compare "
               "warm runs here, or read the per-step figures above.")

st.header("What the findings say, run by run", divider="gray")
compiled_chosen = [r for r in chosen if ui.mode_label(r) != "eager"]
for r in chosen:
    if compiled_chosen and ui.mode_label(r) == "eager":
        continue  # an eager run's compile findings only say there is nothing compiled: the page compares already
    st.markdown(f"**{ui.md_text(ui.load_run(r).name)}** ({ui.md_text(ui.mode_label(r))})")
    ui.show_findings(ui.findings(r), questions={9, 10})
if compiled_chosen and len(compiled_chosen) < len(chosen):
    st.caption("The eager runs are the baseline above: they have no compiled region to explain.")
findings_shown = [(f"{ui.load_run(r).name} ({ui.mode_label(r)}): {f.title}", f.text) for r in chosen
                  if not (compiled_chosen and ui.mode_label(r) == "eager")
                  for f in ui.findings(r) if getattr(f, "question", None) in {9, 10}]
ui.report_button("Compile vs eager", [
    ReportSection("Per step", text="\n\n".join(warnings), charts=[cpu, *gpu_charts, reg],
                  tables=[("deltas", delta), *((("payoff", pd.DataFrame(payoff_rows)),) if payoff_rows else ())]),
    *([ReportSection("The GEMM against its device's peak", tables=[("GEMM", gemm.drop(columns=["run_id"]))])]
      if len(gemm) else []),
    ReportSection("What the findings say, run by run", findings=findings_shown)],
    configs={r: ui.load_run(r).meta.get("config") or {} for r in chosen}, key="compile")
