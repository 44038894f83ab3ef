"""Trace lab: bring any Chrome/Kineto trace, run the same analyses, and ask it your own SQL (read-only)."""
import tempfile
from pathlib import Path

import streamlit as st

from pages import _ui as ui
from profiling_core.analyses import unparted, write_rank
from profiling_core.units import format_duration_us
from profiling_core.errors import ConfigError, ProfilingError
from profiling_core.explain import UNPLACED_EVENTS_TEXT
from profiling_core.queries import list_queries, load_query
from profiling_core.trace import CAP_VARIABLE, trace_cap

ui.in_frame(__file__)  # a deep link's first load goes through the app's frame

st.title("Trace lab")
st.caption("Upload a trace written by torch.profiler (`export_chrome_trace`, .json or .json.gz), or any "
           "Chrome/Kineto trace. It is copied into the run store, so every page can analyse it.")

# --- upload --------------------------------------------------------------------------------------
cap = st.get_option("server.maxUploadSize")
ui.show_notices("lab_import")
try:
    inflated = f"; read up to {trace_cap() >> 20:,} MiB once decompressed (`{CAP_VARIABLE}` sets it)"
except ConfigError as exc:
    inflated = ""
    ui.show_error(exc, "The trace cap is not set right")
upload = st.file_uploader(f"Trace file (up to {cap} MB{inflated})", type=["json", "gz"], key="lab_upload")
imported = st.session_state.setdefault("lab_imported", {})
if upload is not None and upload.file_id not in imported:
    imported[upload.file_id] = None  # one try per upload, whatever happens: a rerun never imports it again
    with tempfile.TemporaryDirectory() as tmp:
        # the user's file name may not fit a file name (93 CJK characters are 279 bytes, over 255): it is kept as
        # the run's metadata instead (gzip is told by content, not by the name)
        path = Path(tmp) / "upload"
        path.write_bytes(upload.getbuffer())
        try:
            with st.spinner(f"Importing {ui.md_code(upload.name, 120)} ..."):
                stem = Path(upload.name).name.removesuffix(".gz").removesuffix(".json")
                # refuses what cannot be read; the page then opens the run with the tables the check loaded
                run = ui.store().import_trace(path, name=stem, filename=upload.name, checked=ui.hand_over_session)
        except (ProfilingError, ValueError) as exc:
            ui.show_error(exc, f"Could not import {upload.name}")
        else:
            imported[upload.file_id] = run.run_id
            # announce it and run the page again, so the sidebar (drawn first) shows it too
            ui.end_action("lab_import", [run.run_id],
                          [("success", f"Imported as run {ui.md_code(run.run_id, 200)}; it is now the current run of "
                                       "every page.")])

rid = ui.run_picker("Trace to explore", key="lab_run")
if rid is None:
    st.info("No trace yet: upload one above, or profile on the **Profile** page.")
    st.stop()
ui.set_current_run(rid)
rep = ui.report(rid)
sess = ui.session(rid)
s = rep.summary
c1, c2, c3, c4 = st.columns(4)
c1.metric("Profiler steps", s.get("steps", 0))
c2.metric("GPU ops" if rep.has_gpu else "GPU ops (a CPU trace)", s.get("gpu_ops", 0) if rep.has_gpu else "none")
c3.metric("CPU per step (median)", format_duration_us(s.get("cpu_step_median_us")),
          help=ui.STEP_MEDIAN_HELP)
c4.metric("SQL engine", sess.engine, help=ui.md_text(sess.engine_reason))
ui.per_step_notes(s, rep.steps, rank_link=False)
# ranks' traces merged into one file: each rank can become a run of its own, unless they cannot be read apart
every = s["ranks"] if len(s.get("step_processes") or []) > 1 else []
apart = unparted(every)
if apart:
    st.caption(f"Its ranks cannot be read on their own: {ui.md_text(apart)}.")
elif every:
    with st.form("lab_rank"):
        pick = st.selectbox("Read one rank on its own: the process that holds its steps", range(len(every)),
                            format_func=lambda i: (f"pid {every[i]['pid']}: {every[i]['steps']} step slices, GPU "
                                                   f"lane{'s' if len(every[i]['gpus']) > 1 else ''} "
                                                   f"{', '.join(map(str, every[i]['gpus'])) or 'none'}"))
        add = st.form_submit_button("Import this rank as a run", icon=":material/call_split:",
                                    help="A new run holds that process's events and those of the GPU lanes its calls "
                                         "launched work on, as its own trace would; this run stays as it is.")
    if add:
        rank = every[pick]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "rank.json"
            try:
                written = write_rank(sess, rank["pid"], path)
                label = f"{ui.load_run(rid).name} pid {rank['pid']}"
                run = ui.store().import_trace(path, name=label, filename=label + ".json",
                                              checked=ui.hand_over_session)
            except (ProfilingError, ValueError, OSError) as exc:
                ui.show_error(exc, f"Could not import pid {rank['pid']}'s rank")
            else:
                ui.end_action("lab_import", [run.run_id],
                              [("success", f"Pid {ui.md_code(str(rank['pid']), 60)}'s rank imported as run "
                                           f"{ui.md_code(run.run_id, 200)}; it is now the current run of every "
                                           "page.")]
                              + ([("warning", UNPLACED_EVENTS_TEXT)] if written["unowned_events_placed"] is False
                                 else []))

st.header("The same analyses", divider="gray")
st.caption("This trace is now the current run of every page. A quick look:")
if len(rep.steps):
    steps = rep.steps[["step", "cpu_dur_us", "gpu_busy_us", "gpu_busy_in_step_us", "gpu_busy_fraction", "launches",
                       "kernels"] if rep.has_gpu else ["step", "cpu_dur_us"]]  # a CPU trace has no GPU columns
    st.dataframe(steps, hide_index=True, width="stretch", height=ui.fit_height(steps), column_config={
        "gpu_busy_us": st.column_config.NumberColumn(help="The GPU work the step launched (the union of its ops' "
                                                     "intervals), wherever it ran"),
        "gpu_busy_in_step_us": st.column_config.NumberColumn(help="The time the GPU was busy inside the step's "
                                                             "window, whatever launched the work"),
        "gpu_busy_fraction": st.column_config.NumberColumn(help="gpu_busy_in_step_us / cpu_dur_us")})
if len(rep.kernel_stats):
    top = rep.kernel_stats.head(10).assign(kernel=lambda d: d["name"].astype(str))  # full names: one bar each
    kc = ui.chart("grouped_bars", top, category="kernel", value="total_us", title="Kernels by total time",
                  value_title="µs")
    ui.chart_block(kc, rep.kernel_stats, "lab_kernels", key="lab_kernels")
elif not rep.has_gpu:
    st.caption("No GPU lane in this trace (recorded on the CPU): no kernels to rank; the Profile page's table "
               "ranks its CPU ops.")
cols = st.columns(4)
for col, (path, label) in zip(cols, [("pages/profile.py", "Profile"), ("pages/dispatch.py", "Dispatch and launch"),
                                     ("pages/variance.py", "Kernel variance"), ("pages/runs.py", "Runs")]):
    col.page_link(path, label=label + " →")

# --- SQL console -----------------------------------------------------------------------------------
st.header("SQL console (read-only)", divider="gray")
QUESTION_OF = {"profiler_table": "Q1", "steps": "Q1-2", "gpu_busy": "Q2", "cold_start_gap": "Q3",
               "launch_latency": "Q4", "dispatch_chain": "Q5", "launch_path": "Q6", "sync_wait": "Q7",
               "per_step_kernels": "Q8", "kernel_stats": "Q8", "kernels": "Q8", "compile_breakdown": "Q9-10",
               "gemm_ops": "Q10", "gemm_shapes": "Q10"}
examples = list_queries()
names = sorted(examples, key=lambda n: (QUESTION_OF.get(n, "Q0"), n))  # the explore examples first


def _load_example():
    st.session_state["lab_sql"] = load_query(st.session_state["lab_example"])


st.selectbox("Example queries, by study question", names, key="lab_example", on_change=_load_example,
             format_func=lambda n: f"{QUESTION_OF.get(n, 'explore')} · {n} — {examples[n]}")
st.session_state.setdefault("lab_sql", load_query(names[0]))
st.caption("Tables as in Perfetto's trace_processor: `slice`, `thread_track`, `thread`, `process`, `track`, "
           "`flow`, `args` and `extract_arg(arg_set_id, 'args.…')`. Writes are refused; a query may run "
           "10 s and show 100,000 rows.")
with st.form("sql_form"):
    sql = st.text_area("SQL", key="lab_sql", height=220)
    run_sql = st.form_submit_button("Run query", type="primary", icon=":material/play_arrow:")
if run_sql:
    try:
        result = sess.console(sql)
    except ProfilingError as exc:
        st.error(f"**Query failed**: {ui.md_text(exc)}", icon=":material/error:")
    except Exception as exc:  # an engine error we did not anticipate still shows as one line
        st.error(f"**Query failed**: {type(exc).__name__}: {ui.md_text(exc)}", icon=":material/error:")
    else:
        if result.cut:
            st.warning(f"The result was cut at {len(result.frame):,} rows: the console shows at most "
                       f"{result.limits.max_rows:,} rows or {result.limits.max_result_bytes // 2**20} MiB "
                       "(every value counts). "
                       "Aggregate or add a LIMIT to see what you need.", icon=":material/content_cut:")
        else:
            st.caption(f"{len(result.frame):,} rows")
        ui.table_block(result.frame, "query_result", key="lab_result", width="stretch")
