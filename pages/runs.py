"""Runs: the history of every profile and imported trace, by machine; open, compare side by side (two runs, or one
config across machines), import another machine's runs, delete."""
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from pages import _ui as ui
from profiling_core.errors import ProfilingError
from profiling_core.present import charts
from profiling_core.present import (ABSENT, DIFFERS, MEMORY_HOWTO_RUNS, ONE_RUN, ONE_RUN_DIFFERS, TOO_NOISY, VARIES,
                                      ReportSection, comparison_warnings, different_work, memory_comparison,
                                      phase_summary, setting_labels, setting_parts)

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


def _import_result(result, shown: str) -> None:
    """Say what an import of a store did, on the page's next run (with its new runs announced)."""
    notices = [("success", f"Imported {len(result.runs)} run(s) from {ui.md_code(shown, 200)}"
                           + (f" and {result.calibrations} calibration(s)" if result.calibrations else "") + ".")]
    if result.skipped:
        notices.append(("warning", f"Skipped {len(result.skipped)} run folder(s): " + "; ".join(
            f"{ui.md_code(folder, 120)}: {ui.md_text(why)}" for folder, why in result.skipped[:20])
            + (" …" if len(result.skipped) > 20 else "")))
    ui.end_action("runs_import", [r.run_id for r in result.runs], notices)


def import_form() -> None:
    st.header("Import another machine's runs", divider="gray")
    st.caption("Every run of another run store (its folder, or a .tar/.tar.gz of it: `tar czf runs.tgz runs` on "
               "that machine) lands here with its meta.json, so it keeps its machine and takes part in the "
               "comparison of machines above, with that store's calibrations. Broken runs and runs already here are "
               "skipped, each with its reason; an archive with links, devices or paths outside it is refused.")
    ui.show_notices("runs_import")
    with st.form("runs_import_form"):
        path = st.text_input("Folder of a run store, or a .tar/.tar.gz of one, on this server", key="runs_import_path",
                             max_chars=4096)
        go = st.form_submit_button("Import the store", icon=":material/drive_folder_upload:")
    if go and path.strip():
        try:
            with st.spinner("Importing ..."):
                result = ui.store().import_store(path.strip())
        except (ProfilingError, OSError) as exc:
            ui.show_error(exc, f"Could not import {path.strip()}")
        else:
            _import_result(result, path.strip())
    elif go:
        st.warning("Name a folder or an archive.")
    upload = st.file_uploader("Or upload a .tar/.tar.gz of a run store", type=["tar", "gz", "tgz"],
                              key="runs_import_upload")
    tried = st.session_state.setdefault("runs_imported_uploads", set())
    if upload is not None and upload.file_id not in tried:
        tried.add(upload.file_id)  # one try per upload, whatever happens: a rerun never imports it again
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / "upload"  # the user's file name is kept as text only, never as a path
            archive.write_bytes(upload.getbuffer())
            try:
                with st.spinner("Importing ..."):
                    result = ui.store().import_store(archive, filename=upload.name)
            except (ProfilingError, OSError) as exc:
                ui.show_error(exc, f"Could not import {upload.name}")
                result = None
        if result is not None:
            _import_result(result, upload.name)


def forms_then_stop() -> None:
    """The import and delete forms, then a stop: where a run the page was to show cannot be read (its error box is
    above), the forms stay reachable, so that it can be deleted as the box says."""
    import_form()
    delete_form()
    st.stop()


if runs.empty:
    if len(broken):
        delete_form()
    else:
        st.info("No runs yet: profile one on the **Profile** page, import a trace in the **Trace lab**, or import "
                "another machine's runs below.")
    import_form()
    st.stop()

machines = ui.machines()
order = {m: i for i, m in enumerate(machines["machine"])}
by_machine = runs.assign(_order=runs["machine"].map(order)).sort_values("_order", kind="stable").drop(
    columns="_order")  # grouped by machine, newest first inside each
ui.table_block(by_machine, "runs", key="runs_table", width="stretch")
st.subheader("Machines")
st.dataframe(machines, hide_index=True, width="stretch", height=ui.fit_height(machines))
st.caption("A machine is a host and its device (a CPU and a GPU of one host are two): a Ray node's, else what the "
           "run's meta.json recorded. An imported trace does not say where it was recorded: *unknown machine*.")

st.header("Open a run", divider="gray")
c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
with c1:
    pick = ui.run_picker("Run", key="runs_open")
if c2.button("Open on the Profile page", key="runs_open_btn", icon=":material/open_in_new:"):
    ui.set_current_run(pick)
    st.switch_page("pages/profile.py")

st.header("Compare machines", divider="gray")
matches = ui.config_matches()
machine_sections = []
if not matches:
    st.caption("No config has run on two machines yet. Run a sweep on a Ray cluster with one run per device type "
               "(`sweep --executor ray --per-device-type`), or import another machine's runs below: the same "
               "config (everything but the device, the time-out and the table's rows) then shows here side by side.")
else:
    labels = [f"{name} · {len(ms)} machines, {sum(len(ids) for _m, ids in ms)} runs · {i + 1}"
              for i, (name, ms) in enumerate(matches)]
    pick_cfg = st.selectbox("Config run on several machines", labels, key="runs_machines_config")
    _name, per_machine = matches[labels.index(pick_cfg)]
    every = [r for _label, ids in per_machine for r in ids  # all of each machine's runs of it ...
             if ui.readable(r)]  # ... but those whose trace cannot be read: an error box each
    if not every:
        forms_then_stop()
    cmp = ui.machine_comparison(every)
    for w in comparison_warnings(cmp.table, ["machine"], runs=[ui.load_run(r) for r in every]):
        st.warning(ui.md_text(w), icon=":material/warning:")
    shown = cmp.table.drop(columns=["run_ids"])
    st.dataframe(shown, hide_index=True, width="stretch", height=ui.fit_height(shown),
                 column_config={"n": st.column_config.NumberColumn("runs", format="%d"),
                                "fraction_of_peak": st.column_config.ProgressColumn(
                                    "of its peak", format="percent", min_value=0.0, max_value=1.0),
                                "gpu_busy_fraction": st.column_config.NumberColumn("gpu_busy_fraction",
                                                                                   format="percent"),
                                **{c: st.column_config.NumberColumn(c, format="%.2f") for c in shown.columns
                                   if c.startswith(("cpu_us_per_step", "gpu_busy_us_per_step", "tflops"))}})
    one = [m for m, n in zip(cmp.table["machine"], cmp.table["n"]) if n < 2]
    st.caption("Every run of this config on each machine (*runs*): the median over them of each run's median step "
               "(CPU time, and the GPU busy time of the work it launched) with its min, max and spread (max − min, "
               "% of the median), the steady state's bound, and its GEMM's achieved TFLOP/s against THAT device's "
               "own roof (*peak*: the lower of its dtype's compute peak and intensity × bandwidth; *measured* by a "
               "calibration in this store, else the GPU's *datasheet*; none for a device with neither)."
               + (f" {len(one)} machine(s) ran it once: their run-to-run spread is unknown, so no gap to them is "
                  "called a difference; run the config again there." if one else ""))
    with st.expander(f"Each run ({len(cmp.runs)})"):
        st.dataframe(cmp.runs, hide_index=True, width="stretch", height=ui.fit_height(cmp.runs))
    per_step = pd.concat([cmp.table[["machine", v, f"{v}_min", f"{v}_max"]].set_axis(
        ["machine", "us", "lo", "hi"], axis=1).assign(**{"per step": v})
        for v in ("cpu_us_per_step", "gpu_busy_us_per_step")], ignore_index=True)
    mchart = ui.chart("grouped_bars", per_step, category="machine", value="us", group="per step",
                      title="The median step on each machine (the rule: min–max of its runs)",
                      value_title="µs per step", spread=("lo", "hi"))
    ui.chart_block(mchart, per_step, "compare_machines", key="runs_machines")
    st.subheader("Gaps between machines")
    if cmp.gaps.empty:
        st.caption("No figure is known on two machines.")
    else:
        st.dataframe(cmp.gaps, hide_index=True, width="stretch", height=ui.fit_height(cmp.gaps),
                     column_config={c: st.column_config.NumberColumn(c, format="%.2f")
                                    for c in ("a", "b", "ratio", "gap", "spread_a", "spread_b")})
        st.caption(f"Each figure between two machines: *{ui.md_text(DIFFERS)}* when the gap between their medians "
                   f"is larger than each machine's own run-to-run spread (max − min); *{ui.md_text(TOO_NOISY)}* "
                   f"when it is not; *{ui.md_text(ONE_RUN)}* when a machine ran the config once.")
    st.subheader("Findings and diagnoses that differ")
    if cmp.differences.empty:
        st.caption("Every finding and every diagnosis gives the same verdict on every run of each machine.")
    else:
        st.dataframe(cmp.differences, hide_index=True, width="stretch", height=ui.fit_height(cmp.differences))
        st.caption(f"By id: a finding's verdict (its title) or a rule's, on each machine; *{ui.md_text(ABSENT)}*: "
                   f"that machine's runs have none; *{ui.md_text(VARIES)}*: its runs disagree (how many gave each). "
                   f"*{ui.md_text(DIFFERS)}* in the last column: two machines, each with two runs or more, share "
                   f"no verdict on it; *{ui.md_text(ONE_RUN_DIFFERS)}*: two machines share none but one of them ran "
                   "the config once, so one run cannot tell the machines apart from run-to-run variation (run it "
                   f"again there); *{ui.md_text(VARIES)}*: the runs disagree, not the machines. Open a run on the "
                   "Profile page for the evidence.")
    machine_sections = [ReportSection("Machines", charts=[mchart],
                                      tables=[("machines", cmp.table), ("gaps between machines", cmp.gaps),
                                              ("what differs", cmp.differences), ("each run", cmp.runs)])]

st.header("Compare two runs", divider="gray")
a_col, b_col = st.columns(2)
with a_col:
    a = ui.run_picker("A", key="runs_a")
with b_col:
    b = ui.run_picker("B", key="runs_b", default=next((r for r in runs["run_id"] if r != a), a))
if not all([ui.readable(r) for r in dict.fromkeys((a, b))]):  # (an error box for each that cannot be read)
    forms_then_stop()
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
a_label, b_label = setting_labels([setting_parts(ui.load_run(r), rep) for r, rep in ((a, ra), (b, rb))])
if a_label:  # (another size, dtype, mode or machine: each side's figures are its own setting's)
    st.caption(ui.md_text(f"A and B measured different settings (A: {a_label}; B: {b_label}): each side's figures "
                          "are its own setting's, and a kernel of the same name may do another amount of work in "
                          "each (a launch in another grid does)."))
summary = ui.summaries([a, b]).drop(columns=["run_id"])
summary.insert(0, "run", [name_a, name_b])
st.dataframe(summary, hide_index=True, width="stretch", height=ui.fit_height(summary))

phase_charts, phase_tables = [], []
if ra.has_phases or rb.has_phases:
    st.subheader("Training phases")
    phases = phase_summary([(name_a, ra), (name_b, rb)])
    st.dataframe(phases, hide_index=True, width="stretch", height=ui.fit_height(phases),
                 column_config={c: st.column_config.NumberColumn(c, format="%.2f") for c in ("cpu_us", "gpu_us")})
    phase_tables = [("training phases (each phase's median over the steady state's steps)", phases)]
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
    st.caption("Each training step split into data, forward, backward, optimizer, zero_grad and other (what no phase "
               "covers), as on the Profile page; the table gives each phase's median over the steady state's steps, "
               "the steps the summary's CPU time per step above is the median of (each phase's own median: they "
               "need not add up to it).")

both = {name_a: ra.step_breakdown, name_b: rb.step_breakdown}
per_run = charts.breakdown_bars(both, per="run", steps={name_a: ra.steps, name_b: rb.steps})
breakdown_charts = []
if ra.has_gpu or rb.has_gpu:  # two CPU runs have no GPU time: no section for it
    st.subheader("Where the GPU time goes")
if not (ra.has_gpu or rb.has_gpu):
    pass
elif per_run.empty:
    st.caption("Neither trace has ProfilerStep slices, so there is no per-step breakdown to compare.")
else:
    share_chart = ui.chart("time_by_category", per_run, bar="bar", value="share",
                           title="Share of the steady state's time, per run")
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
                st.caption("No GPU work in this trace: it ran on the CPU." if not r.has_gpu else
                           "No ProfilerStep slices in this trace." if r.steps.empty else
                           "No step of this trace's steady state to total.")
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
                                  ReportSection(name_b, findings=ui.findings(b)), *machine_sections],
                 configs={a: ui.load_run(a).meta.get("config") or {}, b: ui.load_run(b).meta.get("config") or {}},
                 key="runs")

import_form()
delete_form()
