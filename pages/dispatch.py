"""Dispatch and launch: from ProfilerStep to the kernel, and the time in between (questions 3-7)."""
import pandas as pd
import streamlit as st

from pages import _ui as ui
from profiling_core import ExperimentConfig
from profiling_core.units import format_duration_us, format_share
from profiling_core.present import charts
from profiling_core.analyses import chain_subtree, outside_compiler
from profiling_core.explain import occupancy_pattern, offset_text, started_before_launch_text
from profiling_core.errors import ConfigError
from profiling_core.present import ReportSection, chain_lines, comparison_warnings
from profiling_core.run import SPREAD_WARN_PCT

ui.in_frame(__file__)  # a deep link's first load goes through the app's frame
CHAIN_LINES = 400  # the most rows of a chain written out as text (a training step has thousands)

st.title("Dispatch and launch")
st.caption("How a Python call becomes a kernel: the dispatch chain, the launch call of each kernel, the delay "
           "until the GPU starts it, the cold first step, and the synchronize at the end.")

rid = ui.run_picker("Run", key="dispatch_run")
if rid is None:
    st.info("No run yet: profile one on the **Profile** page, or run the cold/warm pair below.")
rep = ui.report(rid) if rid else None
no_gpu = rep is not None and not rep.has_gpu
if no_gpu:
    st.info("This trace has no GPU lane (recorded on the CPU): launch paths, launch latency and the sync wait need "
            "GPU events, so those sections are left out; the dispatch chain and the cold start are shown from the CPU "
            "side.",
            icon=":material/info:")
report_sections = []

# --- question 5: the dispatch chain ----------------------------------------------------------------
st.header("The dispatch chain of a step", divider="gray")
if rep is not None and len(rep.dispatch_chains):
    chains = rep.dispatch_chains
    # one entry per step slice: where ranks' traces were merged into one file, each rank's step N is a slice of its
    # own, named by its process
    slices = chains.sort_values("start_ns", kind="stable").drop_duplicates("step_slice_id")
    step_of = dict(zip(slices["step_slice_id"].astype(int), slices["step"].astype(int)))
    shared = set(slices.loc[slices["step"].duplicated(keep=False), "step_slice_id"].astype(int))
    pid_of = dict(zip(rep.steps["slice_id"].astype(int), rep.steps["pid"])) if "pid" in rep.steps else {}
    sid = st.selectbox("Step", list(step_of), key="dispatch_step",
                       format_func=lambda k: f"ProfilerStep#{step_of[k]}"
                       + (f" (pid {pid_of[k]})" if k in shared and pid_of.get(k) is not None else ""))
    step = step_of[sid]
    chain = chains[chains["step_slice_id"] == sid]
    cpu_ops = chain[(chain["lane"] == "cpu") & (chain["depth"] > 0)  # ([memory] instants are no ops)
                    & (chain["category"].astype(str) != "cpu_instant_event")].sort_values("start_ns")
    picks = ["the whole step"] + list(dict.fromkeys(cpu_ops["name"].astype(str)))
    op = st.selectbox("Start the chain at", picks, key="dispatch_op",
                      help="any op of the step: its chain down to the kernels it launched (its first call in the "
                           "step)")
    if op != "the whole step":
        chain = chain_subtree(chain, op)
    lines = chain_lines(chain, CHAIN_LINES)
    st.code("\n".join(lines), language="text")
    flame_df = charts.flame_from_chain(chain)
    flame = ui.chart("dispatch_flame", flame_df, title=f"ProfilerStep#{step}: nesting over time"
                     + ("" if op == "the whole step" else f", from {op[:60]}"))
    ui.chart_block(flame, flame_df, f"dispatch_chain_step{step}", key="dispatch_flame")
    report_sections.append(ReportSection("Dispatch chain", text="\n".join(lines), charts=[flame]))
else:
    st.caption("No ProfilerStep slices in this trace.")

if not no_gpu:  # a CPU trace has no launches, GPU lane or synchronize: the note above says so
    # --- question 6: launch paths ---------------------------------------------------------------------
    st.header("How each kernel was launched", divider="gray")
    if rep is not None and len(rep.launch_paths):
        lp = rep.launch_paths
        ui.table_block(lp, "launch_paths", key="dispatch_paths", width="stretch")
        pat = occupancy_pattern(rep, ui.load_run(rid).config)  # question 6's verdict, in one line
        apis = sorted(set(", ".join(lp["launch_apis"]).split(", ")))

        def pattern_line(name) -> tuple[str, str]:
            """The pattern's head (bold on the page) and the rest, each kernel and API written by ``name``."""
            kernels = ", ".join(name(n) for n in pat["every"] or pat["some"])
            apis_are = f"; the launch APIs are {', '.join(name(a) for a in apis)}."
            return {"per_launch": ("Pattern: an occupancy query before every launch", f" of {kernels}"
                                   + (" (as on the A100 in the post)." if pat["study"] else ".")),
                    "first_launch_only": ("Pattern: no occupancy query per launch", ": queries only before the "
                                          f"first launch of {kernels}, a one-time query on the op's first call"
                                          + apis_are),
                    "some_launches": ("Pattern: no occupancy query per launch",
                                      f": queries before only some launches of {kernels}" + apis_are),
                    "unreadable": ("Pattern: not readable from this trace", f": it holds {pat['queries']:,} "
                                   "occupancy queries, none under an op that launched a kernel, so which launch each "
                                   "one sizes is unknown" + apis_are),
                    "none": ("Pattern: no occupancy query", " precedes any launch in this trace" + apis_are),
                    }[pat["pattern"]]
        head, rest = pattern_line(lambda n: ui.md_code(n, 50))
        st.markdown(f"**{head}**{rest}")
        pattern = "".join(pattern_line(str))
        report_sections.append(ReportSection("How each kernel was launched", text=pattern,
                                             tables=[("launch paths", lp)]))
    else:
        st.caption("No launch calls paired with GPU ops in this trace (no GPU lane).")

    # --- question 4: launch latency -------------------------------------------------------------------
    st.header("Launch latency: why the GPU lane is offset", divider="gray")
    if rep is not None and len(rep.launch_latency):
        ll = rep.launch_latency.rename(columns={"gpu_name": "kernel", "launch_name": "launch",
                                                "gpu_start_ns": "t_ns"})
        ll, theirs = outside_compiler(ll)  # not the compiler's launches (its benchmarks under max-autotune): as Q4
        if theirs:
            st.caption(f"{theirs:,} GPU ops launched inside torch.compile's compiler ranges (compiling, benchmarking "
                       "candidates under max-autotune, or recording a CUDA graph) are left out, as question 4 "
                       "leaves them out: they are the compiler's.")
        ll = ll[["kernel", "launch", "step", "latency_us", "gpu_category", "t_ns"]].copy()
        ll["step"] = ll["step"].astype("float").fillna(-1).astype(int)
        lat = ui.chart("launch_latency", ll)
        ui.chart_block(lat, ll, "launch_latency", key="dispatch_latency")
        early = int((ll["latency_us"] < 0).sum())
        st.caption(f"Median launch → start: {offset_text(float(ll['latency_us'].median()))}; "
                   f"max {offset_text(float(ll['latency_us'].max()))}. "
                   + (started_before_launch_text(early, len(ll)) + ". " if early else "")
                   + "A growing latency means the CPU runs ahead of a busy GPU (queueing); a flat small one means "
                   "the GPU waits for the CPU.")
        report_sections.append(ReportSection("Launch latency", charts=[lat]))
    else:
        st.caption("No launch → GPU op pairs (no GPU lane).")

# --- question 3: cold start -----------------------------------------------------------------------
st.header("Cold start: the first step, cold vs warm", divider="gray")
with st.form("coldwarm_form"):
    c1, c2, c3 = st.columns(3)
    size = c1.select_slider("Size", ui.SIZES, value=64, key="cw_size")
    dtype = ui.dtype_select(c2, "cw_dtype")
    device = c3.selectbox("Device", ui.DEVICES, key="cw_device")
    pairs_n = c1.number_input("Pairs", 1, 10, 1 if ui.environment().get("cuda_available") else 3, key="cw_pairs",
                              help="cold and warm runs alternate, each in a fresh worker; with several pairs the "
                                   "chart shows the median of each step with its min–max range")
    executor = ui.executor_control("cw")
    go = st.form_submit_button("Run cold + warm pair (schedule 0/0/3)", icon=":material/play_arrow:")
if go:
    try:
        pair = [ExperimentConfig(size=size, dtype=dtype, device=device, warmup=w, wait=0, warmup_steps=0, active=3)
                for _ in range(int(pairs_n)) for w in (0, 10)]
        ui.start_sweep("coldwarm", pair, f"Cold + warm pair × {int(pairs_n)}", executor)
    except ConfigError as exc:
        st.error(ui.md_text(exc), icon=":material/error:")
ui.finish_sweep("coldwarm", "coldwarm_runs")
pair_ids = [r for r in st.session_state.get("coldwarm_runs", []) if r in set(ui.runs_frame()["run_id"])]
cold_id = ui.run_picker("Cold run", key="cw_cold",
                        default=pair_ids[-2] if len(pair_ids) > 1 else ui.newest_run(warm=False))
warm_id = ui.run_picker("Warm run", key="cw_warm",
                        default=pair_ids[-1] if len(pair_ids) > 1 else ui.newest_run(warm=True, like=cold_id))
def _warmup_calls(rid: str):
    """The run's warm-up calls before profiling (its config's), or None for an imported trace."""
    cfg = ui.load_run(rid).config
    return None if cfg is None else int(cfg.warmup)


if cold_id and warm_id and cold_id == warm_id:
    st.info("The cold and the warm run are the same run (no other run to pair it with): pick a cold run and a warm "
            "one, or run a pair above.", icon=":material/info:")
    cold_id = warm_id = None
elif cold_id and warm_id:
    picked = ((cold_id, "cold", _warmup_calls(cold_id)), (warm_id, "warm", _warmup_calls(warm_id)))
    mislabelled = [f"{ui.load_run(r).name}, picked as the {want} run, was profiled "
                   + (f"after {n} warm-up calls" if n else "cold, with no warm-up call")
                   for r, want, n in picked if n is not None and (n > 0) != (want == "warm")]
    if mislabelled:
        st.warning(ui.md_text("; ".join(mislabelled) + ": the chart's labels follow the pickers, not the runs."),
                   icon=":material/warning:")
if cold_id and warm_id:
    # the last pairs made here (cold, warm, cold, warm, ...) when the pickers show one of them, else the picked pair
    repeated = len(pair_ids) > 2 and cold_id in pair_ids[0::2] and warm_id in pair_ids[1::2]
    groups = ((("cold", pair_ids[0::2]), ("warm", pair_ids[1::2])) if repeated
              else (("cold", [cold_id]), ("warm", [warm_id])))
    rows = []
    for label, ids in groups:
        for r in ids:
            s = ui.report(r).steps
            rows.append(pd.DataFrame({"step": s["step"].to_numpy(), "dur_us": s["cpu_dur_us"].to_numpy(),
                                      "label": f"{label} · {ui.load_run(ids[0]).name}"}))
    per_run = pd.concat(rows, ignore_index=True)
    cw_warnings = comparison_warnings(pd.DataFrame(), [], runs=[ui.load_run(r) for _, ids in groups for r in ids])
    cw = (per_run.groupby(["label", "step"])["dur_us"].agg(dur_us="median", lo_us="min", hi_us="max", n="count")
          .reset_index())
    if repeated:
        st.caption(f"The median of {len(pair_ids) // 2} pairs per step, with the min–max range of each.")
        wide = cw[(cw["n"] > 1) & ((cw["hi_us"] - cw["lo_us"]) > SPREAD_WARN_PCT / 100 * cw["dur_us"])]
        if len(wide):
            cw_warnings.insert(0, f"{len(wide)} step position(s) spread by more than {SPREAD_WARN_PCT:.0f}% of "
                                  "their median across the pairs: read them as noise.")
    else:
        cw = cw.drop(columns=["lo_us", "hi_us"])
        st.caption("One pair: each bar is one run's step, with no spread to read; run several pairs on a CPU.")
    cwc = ui.chart("cold_vs_warm", cw, title="Step duration by position in the profile (CPU)")
    ui.chart_block(cwc, cw, "cold_vs_warm", key="dispatch_coldwarm")
    a, b = st.columns(2)
    for col, (label, r) in zip((a, b), (("cold", cold_id), ("warm", warm_id))):
        g = ui.report(r).cold_start_gap
        col.markdown(f"**{label}**: `matmul_add` start → first aten op")
        col.dataframe(g[["step", "region_dur_us", "first_aten", "gap_us"]], hide_index=True)
    for w in cw_warnings:
        st.warning(ui.md_text(w), icon=":material/warning:")
    report_sections.append(ReportSection(
        "Cold vs warm", text="\n\n".join(cw_warnings), charts=[cwc],
        tables=[(f"{label}: {ui.load_run(r).name}, matmul_add start → first aten op",
                 ui.report(r).cold_start_gap[["step", "region_dur_us", "first_aten", "gap_us"]])
                for label, r in (("cold", cold_id), ("warm", warm_id))]))

if not no_gpu:
    # --- question 7: sync wait ------------------------------------------------------------------------
    st.header("The synchronize at the end: busy or idle?", divider="gray")
    if rep is not None and len(rep.sync_wait):
        sw, theirs = outside_compiler(rep.sync_wait)  # not the compiler's own (max-autotune's benchmarks): as Q7
        if theirs:
            st.caption(f"{theirs:,} synchronize call{'s' if theirs != 1 else ''} made inside torch.compile's "
                       "compiler ranges (compiling, benchmarking candidates under max-autotune, or recording a CUDA "
                       f"graph) {'are' if theirs != 1 else 'is'} left out, as question 7 leaves them out: they are "
                       "the compiler's.")
        syn = ui.chart("sync_idle", charts.sync_parts(sw))
        ui.chart_block(syn, sw, "sync_wait", key="dispatch_sync")
        longest = sw.sort_values("dur_us", ascending=False, kind="stable").head(charts.MAX_SYNC_BARS)
        for _, r in longest.iterrows():
            unrec = (f", and {format_duration_us(r['unrecorded_us'])} on work the trace does not hold (its first "
                     "recorded op waiting behind work queued before the recording)" if r["unrecorded_us"] > 0 else "")
            st.markdown(f"- {ui.md_code(r['name'])} lasted {format_duration_us(r['dur_us'])} while the GPU was busy "
                        f"{format_duration_us(r['gpu_busy_us'])}{unrec}: "
                        f"**{format_share(max(r['idle_pct'], 0.0) / 100.0)} idle**.")
        if len(sw) > len(longest):
            st.caption(f"The {len(longest)} longest of {len(sw):,} synchronize calls; the CSV has them all: together "
                       f"they lasted {format_duration_us(sw['dur_us'].sum())}, the GPU busy "
                       f"{format_duration_us(sw['gpu_busy_us'].sum())} of it.")
        report_sections.append(ReportSection("Sync wait", charts=[syn]))
    else:
        st.caption("No synchronize call in this trace (CPU traces have none: there is no device to wait for).")

if rid:
    ui.show_findings(ui.findings(rid), questions={3, 4, 5, 6, 7})
    ui.report_button("Dispatch and launch", report_sections + [ReportSection("Findings", findings=[
        f for f in ui.findings(rid) if getattr(f, "question", 0) in (3, 4, 5, 6, 7)])],
        configs={r: ui.load_run(r).meta.get("config") or {}  # (and the cold/warm pair the report draws)
                 for r in dict.fromkeys(x for x in (rid, cold_id, warm_id) if x)}, key="dispatch")
