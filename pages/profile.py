"""Profile: run one experiment, then read its table, its step timeline and what the trace says (question 1)."""
import json

import streamlit as st

from pages import _ui as ui
from profiling_core.units import MISSING, format_duration_us
from profiling_core.run import machine_busy
from profiling_core.present import charts
from profiling_core.present import PERFETTO_OPEN_MAX_BYTES, ReportSection, perfetto_open_html, safe_filename

ui.in_frame(__file__)  # a deep link's first load goes through the app's frame

st.title("Profile")
st.caption("Run the workload under torch.profiler with your knobs; read the table, the timeline, the findings.")

config = ui.config_form("profile_form", process_control=True)
if config is not None:
    ui.start_profile("profile", config, process=ui.chosen_process("profile_form"))
ui.finish_profile("profile")

rid = ui.current_run_id()
if rid is None:
    st.info("No run yet: set the knobs above and press **Run profile** (size 64 on the CPU takes a few seconds).")
    st.stop()

run = ui.load_run(rid)
rep = ui.report(rid)
st.subheader(ui.md_text(run.name))
st.markdown(ui.config_summary(rid))
busy = machine_busy(run.meta)
if busy:
    st.warning(busy, icon=":material/warning:")

# --- the profiler table --------------------------------------------------------------------------
st.header("1 · The profiler table", divider="gray")
with st.expander("How to read it: self vs total, # of calls, the footers", expanded=False):
    st.markdown(
        "- **Self CPU** is the time spent in the op itself, its children excluded; **CPU total** includes "
        "everything it called. `aten::matmul` has a small self time and a large total because `aten::mm` "
        "does the work.\n"
        "- **# of Calls** counts invocations over all profiled steps; averages divide by it.\n"
        "- The footers *Self CPU time total* and *Self CUDA time total* sum the **self** columns.\n"
        "- Trap: summing *Self CUDA* over all rows double counts — the kernel row, the aten op that launched it "
        "and the GPU-side `matmul_add` annotation all carry the same device time (the table can show >100 %). "
        "GPU busy time comes from GPU events as a union of intervals (below).")
table_text = run.table_text()
left, right = st.columns([3, 2])
with left:
    if table_text:
        st.code(table_text, language="text", wrap_lines=False)
    else:
        st.caption("This run has no profiler table text (an imported trace); the table rebuilt from the trace "
                   "is on the right.")
with right:
    st.markdown("**Rebuilt from the trace** (µs)")
    ui.table_block(rep.profiler_table.drop(columns=["cpu_avg_us"]), f"{run.name}_profiler_table",
                   key="profile_table")
s = rep.summary
c1, c2, c3, c4 = st.columns(4)
c1.metric("Profiled steps", s.get("steps", 0))
c2.metric("CPU per step (median)", format_duration_us(s.get("cpu_step_median_us")),
          help=ui.STEP_MEDIAN_HELP)
c3.metric("GPU work per step (median)",
          format_duration_us(s.get("gpu_step_median_us")) if s.get("has_gpu") else "no GPU",
          help="the GPU time of the work each step launched (its GPU ops' union, wherever they ran), as the bound "
               "rule reads it: not how busy the GPU was inside the step's window")
ss = s.get("steady_state") or {}
found = ui.findings(rid)
q2 = next((f for f in found if getattr(f, "id", None) == "q2.bound"), None)
cpu_bound = (q2.evidence or {}).get("bound") if q2 is not None and not s.get("has_gpu") else None
bound_shown = (ss["bound"].removesuffix("-bound") if s.get("has_gpu") and ss.get("bound") else
               cpu_bound.removesuffix("-bound") if isinstance(cpu_bound, str) else
               MISSING if s.get("has_gpu") else "no GPU")  # (a GPU trace without steps has no steady state)
# (a CPU run's verdict is by question 2's CPU rule: the label says so, and the value stays one word that a quarter
# of the page's width shows whole)
bound_label = "Bound, steady state" + (" (CPU rule)" if isinstance(cpu_bound, str) else "")
report_summary = (f"Profiled steps: {s.get('steps', 0)}. CPU per step (median over the steady state's steps): "
                  f"{format_duration_us(s.get('cpu_step_median_us'))}. GPU work launched per step (median): "
                  + (format_duration_us(s.get("gpu_step_median_us")) if s.get("has_gpu") else "no GPU")
                  + f". {bound_label}: {bound_shown}.")
c4.metric(bound_label, bound_shown,
          help="the bound rule (question 2): GPU work launched per step against the CPU's own time per step (its "
               "time less what it spent blocked waiting for the GPU, in synchronize calls and in copies to or from "
               "pageable memory), over the steady state's steps; at or above 1× the GPU sets the pace "
               "(compute-bound; copy-bound when most of its work is copies between host and device), and so it does "
               "where the GPU never waited for a launch (a full launch queue); otherwise the GPU waits on the CPU "
               "(overhead-bound). The GPU's busy share inside each step's own window is evidence only: when the CPU "
               "runs ahead, a step's GPU work runs after its window. On a run without a GPU lane, question 2's CPU "
               "rule: the work ops' own time against the rest of each step, compute-bound from half of it.")
ui.per_step_notes(s, rep.steps)

# --- the whole run ---------------------------------------------------------------------------------
if not rep.dispatch_chains.empty:
    st.header("The whole run", divider="gray")
    ov_slices, ov_steps, dropped = ui.overview(rid)
    overview = ui.chart("trace_overview", ov_slices, ov_steps,
                        title=f"All {len(ov_steps)} profiled steps" + ("" if rep.has_gpu else ": CPU lane"))
    ui.chart_block(overview, ov_slices, f"{run.name}_overview", key="profile_overview")
    st.caption("Drag to pan, scroll to zoom; dashed rules mark where each step starts. CPU slices down to depth 3 "
               "and every GPU op" + (f"; the {dropped:,} shortest slices are left out to keep the chart fast."
                                     if dropped else "."))

# --- where the GPU time goes -----------------------------------------------------------------------
breakdown_chart, top = None, None
if rep.has_gpu:
    st.header("Where the GPU time goes", divider="gray")
    if rep.step_breakdown.empty:
        st.caption("This trace has no ProfilerStep slices, so there is no per-step breakdown; the kernels below are "
                   "the whole trace's.")
    else:
        view = st.radio("Show", ["µs", "share of the step"], horizontal=True, key="profile_breakdown_view",
                        help="display only: switching never re-runs the profile")
        bars = charts.breakdown_bars({"": rep.step_breakdown})
        breakdown_chart = ui.chart("time_by_category", bars, bar="bar",
                                   value="time_us" if view == "µs" else "share",
                                   title="Where each step's time goes on the GPU")
        ui.chart_block(breakdown_chart, rep.step_breakdown, f"{run.name}_breakdown", key="profile_breakdown")
        st.caption(
            "Each step's window runs from its start until the later of its end and the end of the GPU work it "
            "launched (so an asynchronous step's kernels count with it, however late they run; the next window "
            "starts where this one ends), split by what the GPU ran in it: every kernel, memcpy and memset clipped "
            "to the window. *unrecorded* is where a GPU's first recorded op waited, after its launch call "
            "returned (or, for an op launched before the recording, after the recording began), behind work the "
            "trace does not hold: a kernel already running when the profiler began "
            "recording is not in the trace, so work queued before the recording shows only as that wait (more than "
            "0.1 ms, far longer than a launch takes to reach an idle GPU). *idle* is the rest, the time with no GPU "
            "work the trace recorded nor such a wait. (The GPU busy metric above is the union of the GPU work each "
            "step launched, wherever it ran, not clipped to any window.) "
            "Kernels are put into categories by "
            "their names (GEMM: gemm, nvjet, cutlass, xmma, …; attention: flash, fmha, sdpa, attention; "
            "elementwise: elementwise, reduce, norm, softmax, Triton pointwise and reductions; communication: "
            "nccl, rccl). Where streams overlap, an instant counts once, for the first category in the legend's "
            "order: communication is what nothing else hid, and *overlapped* gives what ran under an earlier one.")
        totals = charts.breakdown_bars({"": rep.step_breakdown}, per="run",
                                       steps={"": rep.steps}).drop(columns=["bar"])
        ui.table_block(totals[["category", "per_step_us", "share", "time_us", "overlapped_us"]],
                       f"{run.name}_breakdown_totals", key="profile_breakdown_totals",
                       column_config={"share": st.column_config.NumberColumn("share", format="percent"),
                                      **{c: st.column_config.NumberColumn(c, format="%.2f")
                                         for c in ("per_step_us", "time_us", "overlapped_us")}})
        st.caption("The table: each category over the steady state's steps, those the GPU work per step above "
                   "reads (the chart shows every step).")
    st.subheader("Top kernels")
    tk = rep.top_kernels
    shown = st.number_input("Kernels shown", min_value=1, max_value=max(1, len(tk)), value=min(10, max(1, len(tk))),
                            step=1, key="profile_top_n", help="display only; by total time over the trace")
    top = tk.head(int(shown)).assign(
        cpu_ops=[", ".join(f"{op} ×{n}" for op, n in ops) for ops in tk["cpu_ops"].head(int(shown))])
    ui.table_block(top[["name", "category", "share", "total_us", "mean_us", "count", "per_step", "cpu_ops"]],
                   f"{run.name}_top_kernels", key="profile_top_kernels",
                   column_config={"name": st.column_config.TextColumn("name", width="medium"),
                                  "cpu_ops": st.column_config.TextColumn("launched by", width="medium"),
                                  "share": st.column_config.NumberColumn("share", format="percent"),
                                  **{c: st.column_config.NumberColumn(c, format="%.2f")
                                     for c in ("total_us", "mean_us", "per_step")}})
    st.caption("Per GPU op name: its share of the summed GPU op time, and the CPU op(s) that launched it (the "
               "innermost aten:: op around each launch call, else the launch call's parent, e.g. a compiled "
               "graph's call for a CUDA graph replay), with how many launches each accounts for; *per_step*: its "
               "launches per step of the steady state (the totals are the whole trace's).")

# --- the phases of a training step ----------------------------------------------------------------
phase_chart = None
if rep.has_phases:
    st.header("Forward, backward, optimizer", divider="gray")
    pview = st.radio("Show", ["CPU µs", "share of the step"] + (["GPU µs"] if rep.has_gpu else []),
                     horizontal=True, key="profile_phase_view", help="display only: switching never re-runs the "
                     "profile")
    phase_chart = ui.chart("phase_bars", rep.phases,
                           value={"CPU µs": "cpu_us", "GPU µs": "gpu_us"}.get(pview, "share"),
                           title="Where each training step's time goes")
    ui.chart_block(phase_chart, rep.phases, f"{run.name}_phases", key="profile_phases")
    st.caption("Each step split by phase: the app's `train::forward`, `train::backward`, `train::optimizer` and "
               "`train::zero_grad` ranges, or in an imported trace the profiler's own annotations "
               "(`autograd::engine::evaluate_function: …` for backward, in a 2021 trace its `…Backward` nodes; "
               "`Optimizer.step#…` and "
               "`Optimizer.zero_grad#…`; forward is what the step ran before its first backward range); *data* "
               "is the DataLoader's own range around each batch it hands out (`enumerate(DataLoader)#…__next__`). "
               "An instant counts once; *other* is what no phase covers (the loop's Python, a `.item()` after the "
               "step). GPU µs and kernels are those launched from inside each phase.")

# --- memory ----------------------------------------------------------------------------------------
memory_charts, memory_tables, memory_text = [], [], ""
mem = ui.memory_section(rid)
st.header("Memory", divider="gray")
if not mem.has_events:
    st.caption(mem.note_markdown)
    memory_text = mem.note_text
else:
    mchart = ui.chart("memory_timeline_chart", mem.timeline, mem.peaks, mem.steps, origin_ns=mem.origin_ns)
    ui.chart_block(mchart, mem.timeline, f"{run.name}_memory", key="profile_memory")
    for sentence in mem.sentences:
        st.markdown(ui.md_text(sentence))
    st.caption("Allocated is what live tensors hold; reserved is what the caching allocator keeps from the device "
               "(a CPU reserves nothing, so it has no reserved line). Each line holds its value until the next "
               "[memory] event; shaded bands are every other profiled step.")
    memory_charts, memory_text = [mchart], "\n\n".join(mem.sentences)
    memory_tables = [("memory peaks", mem.peaks)]
    for title, frame, key, caption in (
            ("Live at the peak", mem.live, "profile_memory_live",
             ("What was allocated at each device's peak, by the op that allocated it, largest first; *before the "
              "window* is what was already allocated when the profiler began (its op unknown).")),
            ("Never freed in the window", mem.unfreed, "profile_memory_unfreed",
             ("Blocks the profiled steps allocated and did not free before the profiler stopped: what a step keeps "
              "(a cache, a leak) and what the last step still held, with the steps that allocated them.")),
            ("Per step", mem.churn, "profile_memory_churn",
             "What each profiled step allocated and freed, what it left behind (net) and its highest level.")):
        if len(frame):
            st.subheader(title)
            ui.table_block(frame, f"{run.name}_{key.removeprefix('profile_')}", key=key)
            st.caption(caption)
            memory_tables.append((title.lower(), frame))
    for note in mem.table_notes:
        st.caption(ui.md_text(note))
    if mem.categories is not None:
        cchart = ui.chart("memory_categories_chart", mem.categories, mem.steps, origin_ns=mem.origin_ns)
        ui.chart_block(cchart, mem.categories, f"{run.name}_memory_categories", key="profile_memory_categories")
        st.caption("torch's own memory profiler's categories: it follows every tensor through the ops that made "
                   "and freed it (parameters and optimizer state from the model and optimizer it saw, gradients "
                   "from autograd, activations kept for backward, temporaries freed within the step); *unknown* "
                   "is memory it could not tie to a tensor. It counts what was alive before profiling began too, "
                   "which a CPU's [memory] events leave out (they start from what the profiled steps allocated).")
        memory_charts.append(cchart)
    elif mem.categories_note:
        st.caption("No memory categories: " + ui.md_text(mem.categories_note))

# --- the step timeline ---------------------------------------------------------------------------
st.header("2 · A step on the timeline", divider="gray")
chains = rep.dispatch_chains
steps = list(dict.fromkeys(chains.sort_values("start_ns")["step"])) if len(chains) else []
if not steps:
    st.info("This trace has no ProfilerStep slices, so there is no step to draw.")
    chart_data = None
else:
    step = st.select_slider("Step", options=steps, value=steps[0], key="profile_step",
                            help="display only: moving it never re-runs the profile")
    slices, links = ui.step_timeline(rid, step)
    if not rep.has_gpu:
        st.caption("CPU lane only: this trace has no GPU events (recorded on the CPU), so there is no GPU lane "
                   "and no launch → kernel links.")
    lanes = "CPU and GPU lanes" if rep.has_gpu else "CPU lane"
    timeline = ui.chart("step_timeline", slices, links, title=f"ProfilerStep#{step}: {lanes}")
    ui.chart_block(timeline, slices, f"{run.name}_step{step}_timeline", key="profile_timeline")
    if len(links):
        st.caption("Dashed lines join each launch call (CPU) to the GPU op it started; their slope is the "
                   "launch latency (see *Dispatch and launch*).")
    chart_data = timeline

# --- findings ------------------------------------------------------------------------------------
st.header("3 · What this trace says", divider="gray")
ui.show_findings(found)

# --- diagnosis -----------------------------------------------------------------------------------
st.header("4 · What to change", divider="gray")
st.caption("Each GEMM, convolution and copy against the device's peaks (measured here, else its datasheet's), and "
           "the anti-patterns the rules recognise in this trace, each with its evidence and the PyTorch change that "
           "addresses it.")
ui.show_diagnosis(rid, key="profile")
diag = ui.diagnosis(rid)

# --- downloads -----------------------------------------------------------------------------------
st.header("5 · Take it with you", divider="gray")
d1, d2, d3, d4 = st.columns(4)
base = safe_filename(run.name)  # (a run's name is anyone's text: no path, no control or bidi character, ≤ 120)
d1.download_button("Trace JSON", data=lambda: run.trace_path.read_bytes(),
                   file_name=f"{base}.{run.trace_path.name}",
                   mime="application/json", key="dl_trace", on_click="ignore", icon=":material/download:")
d2.download_button("Table text", data=table_text or "", file_name=f"{base}.txt", mime="text/plain",
                   key="dl_table", on_click="ignore", icon=":material/download:", disabled=not table_text)
d3.download_button("Meta JSON", data=json.dumps(run.meta, indent=1, default=str), file_name=f"{base}.meta.json",
                   mime="application/json", key="dl_meta", on_click="ignore", icon=":material/download:")
with d4:
    ui.report_button(
        f"Profile {run.name}",
        [ReportSection("The run", text=report_summary),
         ReportSection("Profiler table", preformatted=table_text or "",
                       text="" if table_text else "This trace came without torch's table (an imported trace): the "
                                                  "table rebuilt from the trace follows.",
                       tables=[("profiler table (rebuilt, µs)", rep.profiler_table), ("steps", rep.steps)]),
         ReportSection("Where the GPU time goes", charts=[breakdown_chart] if breakdown_chart is not None else [],
                       tables=[("top kernels", top)] if top is not None else []),
         *([ReportSection("Forward, backward, optimizer", charts=[phase_chart], tables=[("phases", rep.phases)])]
           if phase_chart is not None else []),
         *([ReportSection("Memory", text=memory_text, charts=memory_charts, tables=memory_tables)]
           if memory_text else []),
         ReportSection("Step timeline", charts=[chart_data] if chart_data is not None else []),
         ReportSection("Findings", findings=found),
         ReportSection("What to change", text=ui.peaks_note(diag) + ("" if diag.diagnoses else
                                                                     "\n\nNo rule applies to this trace."),
                       findings=[(x.title, " ".join(filter(None, (x.text, f"Change: {x.fix}", ui.cost_line(diag, x)))))
                                 for x in diag.diagnoses],
                       tables=[("roofline", diag.roofline.drop(columns=["slice_ids", "leading_dims"]))]
                       if len(diag.roofline) else [])],
        configs={rid: (run.meta.get("config") or {"source": "imported trace"})}, key="profile")
st.info("**Open the trace in Perfetto:** " + ui.PERFETTO_HOWTO, icon=":material/open_in_new:")
trace_bytes = run.trace_path.read_bytes()
if len(trace_bytes) <= PERFETTO_OPEN_MAX_BYTES:
    st.caption("Or hand it over from this browser (nothing is uploaded by the server; pop-ups must be allowed):")
    # (our own markup: the names reach its script only as JSON data, present.perfetto_open_html)
    st.iframe(perfetto_open_html(trace_bytes, run.name, run.trace_path.name), height=46,
              alt="Open the trace in the Perfetto UI")
