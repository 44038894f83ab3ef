"""Runs: the history of every profile and imported trace; open, compare side by side, delete."""
import pandas as pd
import streamlit as st

from pages import _ui as ui
from profiling_core.present import charts
from profiling_core.present import (MEMORY_HOWTO_RUNS, ReportSection, comparison_warnings, different_work,
                                      memory_comparison, phase_summary)

ui.in_frame(__file__)  # a deep link's first load goes through the app's frame

st.title("Runs")
runs = ui.runs_frame()
broken = ui.corrupt_runs()  # runs whose meta.json cannot be used: listed here only, to be deleted
root, size = ui.store_summary()
st.caption(f"Run store {ui.md_code(root, 500)} · {size}")
if len(broken):
    st.warning(f"{len(broken)} run folder(s) cannot be read: their meta.json is damaged (why below). The other pages "
               "leave them out; delete them at the bottom of this page.", icon=":material/warning:")
    st.dataframe(broken, hide_index=True, width="stretch", height=ui.fit_height(broken))


def delete_form() -> None:
    st.header("Delete a run", divider="gray")
    labels, readable = ui.label_of(), set(runs["run_id"])
    with st.form("delete_form"):
        victim = st.selectbox("Run", list(runs["run_id"]) + list(broken["run_id"]), key="runs_delete",
                              format_func=lambda r: labels(r) if r in readable else f"{r}  ·  corrupt")
        sure = st.checkbox("Yes, delete it (its folder is removed from the store)", key="runs_delete_sure")
        if st.form_submit_button("Delete", icon=":material/delete:"):
            if not sure:
                st.warning("Tick the box to confirm.")
            else:
                ui.store().delete(victim)
                if st.session_state.get(ui.CURRENT_RUN) == victim:
                    ui.set_current_run(None)
                st.toast(f"Deleted {ui.md_code(victim, 200)}.", icon=":material/delete:")
                st.rerun()


if runs.empty:
    if len(broken):
        delete_form()
    else:
        st.info("No runs yet: profile one on the **Profile** page or import a trace in the **Trace lab**.")
    st.stop()

ui.table_block(runs, "runs", key="runs_table", width="stretch")

st.header("Open a run", divider="gray")
c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
with c1:
    pick = ui.run_picker("Run", key="runs_open")
if c2.button("Open on the Profile page", key="runs_open_btn", icon=":material/open_in_new:"):
    ui.set_current_run(pick)
    st.switch_page("pages/profile.py")

st.header("Compare two runs", divider="gray")
a_col, b_col = st.columns(2)
with a_col:
    a = ui.run_picker("A", key="runs_a")
with b_col:
    b = ui.run_picker("B", key="runs_b", default=next((r for r in runs["run_id"] if r != a), a))
ra, rb = ui.report(a), ui.report(b)
name_a, name_b = f"A · {ui.load_run(a).name}", f"B · {ui.load_run(b).name}"

steps = pd.concat([pd.DataFrame({"step": r.steps["step"].to_numpy(), "dur_us": r.steps["cpu_dur_us"].to_numpy(),
                                 "label": n}) for r, n in ((ra, name_a), (rb, name_b))], ignore_index=True)
step_chart = ui.chart("cold_vs_warm", steps, title="CPU time of each profiled step")
ui.chart_block(step_chart, steps, "compare_steps", key="runs_steps")

busy = comparison_warnings(pd.DataFrame(), [], runs=[ui.load_run(r) for r in dict.fromkeys((a, b))])
work = different_work([("A", ui.load_run(a), ra), ("B", ui.load_run(b), rb)])
busy = ([work] if work else []) + busy
for w in busy:  # a run timed on a busy machine, or one whose step does other work, is not compared as if it were not
    st.warning(ui.md_text(w), icon=":material/warning:")
summary = ui.summaries([a, b]).drop(columns=["run_id"])
summary.insert(0, "run", [name_a, name_b])
st.dataframe(summary, hide_index=True, width="stretch", height=ui.fit_height(summary))

phase_charts, phase_tables = [], []
if ra.has_phases or rb.has_phases:
    st.subheader("Training phases")
    phases = phase_summary([(name_a, ra), (name_b, rb)])
    st.dataframe(phases, hide_index=True, width="stretch", height=ui.fit_height(phases),
                 column_config={c: st.column_config.NumberColumn(c, format="%.2f") for c in ("cpu_us", "gpu_us")})
    phase_tables = [("training phases (median step)", phases)]
    cols = st.columns(2)
    for col, (label, r, key) in zip(cols, ((name_a, ra, "a"), (name_b, rb, "b"))):
        with col:
            st.markdown(f"**{ui.md_text(label)}**")
            if not r.has_phases:
                st.caption("A forward pass: no training phases in this trace.")
                continue
            pchart = ui.chart("phase_bars", r.phases, value="cpu_us", title="Where each training step's time goes")
            ui.chart_block(pchart, r.phases, f"{label}_phases", key=f"runs_phases_{key}")
            phase_charts.append(pchart)
    st.caption("Each training step split into forward, backward, optimizer, zero_grad and other (what no phase "
               "covers), as on the Profile page; the table gives the median step's.")

both = {name_a: ra.step_breakdown, name_b: rb.step_breakdown}
per_run = charts.breakdown_bars(both, per="run")
breakdown_charts = []
if ra.has_gpu or rb.has_gpu:  # two CPU runs have no GPU time: no section for it
    st.subheader("Where the GPU time goes")
if not (ra.has_gpu or rb.has_gpu):
    pass
elif per_run.empty:
    st.caption("Neither trace has ProfilerStep slices, so there is no per-step breakdown to compare.")
else:
    share_chart = ui.chart("time_by_category", per_run, bar="bar", value="share",
                           title="Share of the steps' time, per run")
    ui.chart_block(share_chart, per_run, "compare_breakdown", key="runs_breakdown")
    per_step = charts.breakdown_bars(both)
    step_chart_bd = ui.chart("time_by_category", per_step, bar="bar", value="time_us",
                             title="Every profiled step of both runs (µs)")
    ui.chart_block(step_chart_bd, per_step, "compare_breakdown_steps", key="runs_breakdown_steps")
    breakdown_charts = [share_chart, step_chart_bd]
    st.caption("Same categories, order and colours for both runs (the Profile page says how kernels are put into "
               "them). Where streams overlap, an instant counts for the first category in the legend's order.")
    cols = st.columns(2)
    for col, (label, r) in zip(cols, ((name_a, ra), (name_b, rb))):
        with col:
            st.markdown(f"**{ui.md_text(label)}**")
            t = per_run[per_run["bar"] == label]
            if t.empty:
                st.caption("No ProfilerStep slices in this trace.")
            else:
                st.dataframe(t[["category", "per_step_us", "share", "overlapped_us"]], hide_index=True,
                             width="stretch", height=ui.fit_height(t),
                             column_config={"share": st.column_config.NumberColumn("share", format="percent"),
                                            **{c: st.column_config.NumberColumn(c, format="%.2f")
                                               for c in ("per_step_us", "overlapped_us")}})

memory_charts, memory_tables = [], []
st.subheader("Memory")
mem_table, overlay = memory_comparison({name_a: (ui.memory(a), ra.steps), name_b: (ui.memory(b), rb.steps)})
if overlay.empty:
    st.caption(MEMORY_HOWTO_RUNS)
else:
    shown = mem_table.drop(columns=["peak_allocated_bytes", "peak_reserved_bytes"])
    st.dataframe(shown, hide_index=True, width="stretch", height=ui.fit_height(shown))
    mem_chart = ui.chart("memory_comparison_chart", overlay)
    ui.chart_block(mem_chart, overlay, "compare_memory", key="runs_memory")
    st.caption("Each run's peak per device (reserved: what the caching allocator kept; a CPU reserves nothing; "
               "*counted* says where a peak leaves out what was allocated before the profiler began: a CPU's, a "
               "trace without totals), and the allocated bytes of each run's main device (its GPU, else the CPU) "
               "from its first profiled step on.")
    memory_charts, memory_tables = [mem_chart], [("memory peaks", mem_table)]

ka, kb = ra.kernel_stats.assign(run=name_a), rb.kernel_stats.assign(run=name_b)
kernels = pd.concat([ka, kb], ignore_index=True)
st.subheader("CPU ops" if kernels.empty else "Kernels")
if kernels.empty:
    st.caption("Neither trace has GPU kernels (CPU-only traces): their profiler tables' ops, by self CPU time.")
    ta = ra.profiler_table[["name", "calls", "self_cpu_us", "cpu_total_us"]].assign(run=name_a)
    tb = rb.profiler_table[["name", "calls", "self_cpu_us", "cpu_total_us"]].assign(run=name_b)
    both = pd.concat([ta, tb], ignore_index=True)
    top = both.groupby("name")["self_cpu_us"].max().sort_values(ascending=False).head(8).index
    kchart = ui.chart("grouped_bars", both[both["name"].isin(top)], category="name", value="self_cpu_us", group="run",
                                 title="Self CPU time by op", value_title="µs (all steps)")
    ui.chart_block(kchart, both, "compare_ops", key="runs_kernels")
else:
    kernels["kernel"] = kernels["name"].astype(str)  # full names: kernels that share a prefix stay apart
    kchart = ui.chart("grouped_bars", kernels, category="kernel", value="median_us", group="run",
                                 title="Median kernel duration", value_title="µs")
    ui.chart_block(kchart, kernels, "compare_kernels", key="runs_kernels")

st.subheader("Findings")
fa, fb = st.columns(2)
with fa:
    st.markdown(f"**{ui.md_text(name_a)}**")
    ui.show_findings(ui.findings(a))
with fb:
    st.markdown(f"**{ui.md_text(name_b)}**")
    ui.show_findings(ui.findings(b))
ui.report_button("Compare runs", [ReportSection("Steps", text="\n\n".join(busy), charts=[step_chart],
                                                 tables=[("summary", summary)]),
                                  *([ReportSection("Training phases", charts=phase_charts, tables=phase_tables)]
                                    if phase_tables else []),
                                  *([ReportSection("Where the GPU time goes", charts=breakdown_charts)]
                                    if breakdown_charts else []),
                                  *([ReportSection("Memory", charts=memory_charts, tables=memory_tables)]
                                    if memory_charts else []),
                                  ReportSection("Kernels", charts=[kchart]),
                                  ReportSection(name_a, findings=ui.findings(a)),
                                  ReportSection(name_b, findings=ui.findings(b))],
                 configs={a: ui.load_run(a).meta.get("config") or {}, b: ui.load_run(b).meta.get("config") or {}},
                 key="runs")

delete_form()
