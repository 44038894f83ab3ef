"""Blocks that show results: a chart or a table with its downloads, the page's HTML report, findings and the
diagnosis.

Downloads (PNG, SVG, CSV, the report) are made only when their button is clicked.
"""
from __future__ import annotations

import functools
import json
from typing import Optional

import pandas as pd
import streamlit as st

from profiling_core.analyses import NO_WORK_TEXT
from profiling_core.errors import InvalidRunIdError, RunNotFoundError
from profiling_core.explain import cut_steps_text, devices_text, empty_steps_text, merged_processes_text
from profiling_core.present import export, md_text
from profiling_core.store import machine_of

from .cache import chart, diagnosis, environment, load_run

PERFETTO_HOWTO = ("Open https://ui.perfetto.dev, click **Open trace file** in the left bar and pick the "
                  "downloaded `trace.json` (the file stays in your browser; nothing is uploaded).")

STEP_MEDIAN_HELP = ("The median over the steady state's steps, which every per-step figure, question 2's verdict and "
                    "the diagnosis read: the steps with work in them after the first (from 3 steps on: the first may "
                    "carry start-up effects, which question 3 reads), less those in which torch.compile's compiler "
                    "ran and, on a GPU, those that launched no GPU work.")
"""The help of a page's per-step median metrics (``summary["cpu_step_median_us"]``)."""

TABLE_ROWS_SHOWN = 25
"""Rows a table shows without scrolling; longer ones scroll inside their box (the CSV holds every row)."""

ROOFLINE_COLUMNS = ["kind", "op", "kernel", "dtype", "m", "k", "n", "count", "time_us", "judged", "fraction_of_peak",
                    "tflops", "gbs", "peak", "peak_unit", "roof", "intensity", "flops_from"]


def per_step_notes(summary: dict, steps: Optional[pd.DataFrame] = None, *, rank_link: bool = True) -> None:
    """Under a page's per-step metrics: which steps are empty and left out of them (``steady_state``'s
    ``empty_steps``, :func:`profiling_core.analyses.working_steps`), whether the first is, which ran torch.compile's
    compiler and are left out (:func:`profiling_core.analyses.measured_steps`), which step slices outlast the
    recording and are cut at its end (``steps``: the report's, :func:`profiling_core.explain.cut_steps_text`), and,
    where the steps' work ran on several GPUs (``step_devices``), what its GPU figures count and each GPU's own busy
    time; first of all, where the step slices belong to several processes (``step_processes``: ranks' traces merged
    into one file), that every per-step figure mixes them (:func:`profiling_core.explain.merged_processes_text`),
    with a link to the Trace lab, which imports one rank as a run of its own (``rank_link``; not on that page);
    nothing when none holds."""
    if summary.get("work", 1) == 0:  # (the profiler's own slices alone: no figure below stands for any work)
        st.warning(NO_WORK_TEXT, icon=":material/block:")
    pids = summary.get("step_processes") or []
    if len(pids) > 1:
        st.warning(md_text(merged_processes_text(pids)), icon=":material/call_merge:")  # (pids: escaped)
        if rank_link:
            st.page_link("pages/trace_lab.py", label="Read one rank on its own: the Trace lab imports it as a run →",
                         icon=":material/call_split:")
    ss = summary.get("steady_state") or {}
    if ss.get("empty_steps"):
        text = empty_steps_text(ss)
        st.caption(text[0].upper() + text[1:] + ": the per-step figures leave "
                   + ("them" if len(ss["empty_steps"]) > 1 else "it") + " out.")
    if ss.get("basis") == "after_first":
        st.caption("The per-step figures read the steps after the first (the steady state): the first may carry "
                   "start-up effects, which question 3 compares with them." if len(ss.get("first_steps") or []) <= 1
                   else f"The per-step figures read the steps after each of the {len(ss['first_steps'])} processes' "
                   "first (the steady state): a first step may carry start-up effects, which question 3 compares "
                   "with the others.")
    comp = ss.get("compile_steps") or []
    if comp:
        many = len(comp) > 1
        st.caption(f"In step{'s' if many else ''} {', '.join(map(str, comp))} torch.compile's compiler ran (compiling, "
                   "or recording a CUDA graph): one-time work, which the per-step figures and the steady state leave "
                   "out.")
    cut = cut_steps_text(steps) if steps is not None else ""
    if cut:
        st.caption(md_text(cut))  # (step names are the trace's: escaped)
    gpus = summary.get("step_devices") or []
    if len(gpus) > 1:
        st.caption(md_text(devices_text(gpus, len(summary.get("step_processes") or []))))  # (ids: escaped)


def show_findings(items: list, *, questions: Optional[set] = None) -> None:
    """Findings as callouts; ``questions`` keeps only those answering these study question numbers. A finding's
    title and text are plain text that quotes the trace's names, so they are shown escaped (:func:`md_text`)."""
    shown = [f for f in items if questions is None or getattr(f, "question", None) in questions]
    if not shown:
        st.caption("No findings for this question in this trace.")
        return
    for f in shown:
        with st.container(border=True):
            q = getattr(f, "question", None)
            st.markdown(f"**{md_text(getattr(f, 'title', ''))}**" + (f"  ·  study question {q}" if q else ""))
            st.markdown(md_text(getattr(f, "text", str(f))))
            ev = getattr(f, "evidence", None)
            if isinstance(ev, pd.DataFrame):
                if not ev.empty:
                    with st.expander("evidence"):
                        st.dataframe(ev, hide_index=True)
            elif ev:
                with st.expander("evidence"):
                    st.json(ev if isinstance(ev, (dict, list)) else {"evidence": str(ev)}, expanded=True)


@functools.lru_cache(maxsize=64)
def _png(spec_json: str) -> bytes:
    return export.chart_png(json.loads(spec_json))


@functools.lru_cache(maxsize=64)
def _svg(spec_json: str) -> str:
    return export.chart_svg(json.loads(spec_json))


def chart_block(spec: dict, data: Optional[pd.DataFrame], name: str, key: str) -> None:
    """Draw a chart spec (from :func:`chart`) and PNG / SVG / CSV download buttons (images made only on click)."""
    shown = dict(spec)
    if "facet" not in spec:
        # Streamlit's default autosize ("fit") squeezes charts with a discrete y axis into a sliver;
        # fit the width only and keep the height the chart asks for.
        shown["autosize"] = {"type": "fit-x", "contains": "padding"}
    st.vega_lite_chart(shown, width="stretch", key=f"chart_{key}")

    def spec_json() -> str:  # (on click only: a big trace's spec takes tens of ms to write out)
        return json.dumps(spec, sort_keys=True, default=str)
    base = export.safe_filename(name)
    cols = st.columns([1, 1, 1, 5])
    cols[0].download_button("PNG", data=lambda: _png(spec_json()), file_name=f"{base}.png", mime="image/png",
                            key=f"png_{key}", on_click="ignore", icon=":material/image:")
    cols[1].download_button("SVG", data=lambda: _svg(spec_json()), file_name=f"{base}.svg",
                            mime="image/svg+xml", key=f"svg_{key}", on_click="ignore", icon=":material/draw:")
    if data is not None:
        cols[2].download_button("CSV", data=lambda: export.dataframe_csv(data), file_name=f"{base}.csv",
                                mime="text/csv", key=f"csv_{key}", on_click="ignore", icon=":material/table:")


def table_block(df: pd.DataFrame, name: str, key: str, **kwargs) -> None:
    """A DataFrame with a CSV download button, tall enough for all its rows up to ``TABLE_ROWS_SHOWN`` (Streamlit's
    default box shows ten and cuts the rest off behind a scroll)."""
    kwargs.setdefault("height", fit_height(df))
    st.dataframe(df, hide_index=True, **kwargs)
    st.download_button("CSV", data=lambda: export.dataframe_csv(df), file_name=f"{export.safe_filename(name)}.csv",
                       mime="text/csv", key=f"csv_{key}", on_click="ignore", icon=":material/table:")


def fit_height(df: pd.DataFrame) -> int:
    """The height (px) of a table box that holds all of ``df``'s rows, up to ``TABLE_ROWS_SHOWN``."""
    return 38 + 35 * max(1, min(len(df), TABLE_ROWS_SHOWN))


def report_button(title: str, sections: list, *, configs: Optional[dict] = None, key: str) -> None:
    """Download one self-contained HTML report of the page (charts inlined as SVG; built on click)."""
    env = {k: v for k, v in environment().items() if v is not None}

    def recorded(label: str) -> dict:
        """Where the run ``label`` names was recorded (its meta.json's machine and torch); {} for a label that
        names no run of the store."""
        try:
            run = load_run(label)
        except (InvalidRunIdError, RunNotFoundError):
            return {}
        torch_version = (run.meta.get("device") or {}).get("torch")
        return {"recorded on": machine_of(run).label, **({"torch": torch_version} if torch_version else {})}

    configs = {label: {**(cfg or {}), **recorded(label)} for label, cfg in (configs or {}).items()}

    def build() -> str:
        return export.html_report(title, sections, configs=configs, environment=env)

    st.download_button("Download HTML report", data=build, file_name=f"{export.safe_filename(title)}.html",
                       mime="text/html", key=f"report_{key}", on_click="ignore", icon=":material/description:")


def peaks_note(d) -> str:
    """What a diagnosis's fractions of peak are of (``DiagnosisReport.peaks``), as plain text: the page's caption and
    the report's."""
    p = d.peaks
    if p is None:
        return ("No calibration of this run's device in the store, and no datasheet for it: achieved throughput is "
                "shown without a fraction of peak. Measure the peaks on Home (Calibrate this device).")
    if p.source == "datasheet":
        return (f"No calibration of {p.device} in the store: fractions are of the vendor's datasheet figures "
                f"({p.method.removeprefix('datasheet: ')}), labelled datasheet; a calibration measured on the device "
                "is what to judge by (Home, Calibrate this device).")
    return f"Judged against {p.device}'s peaks measured {p.measured_at[:10]} (torch {p.torch_version}; see Home)."


def cost_line(d, x) -> str:
    """A diagnosis's cost as the page and the report say it (plain text); "" when it has none."""
    if x.cost_us_per_step is not None:
        return f"Cost: {x.cost_us_per_step:,.1f} µs {d.cost_unit} ({x.cost_basis})"
    return f"Cost: {x.cost_basis}" if x.cost_basis else ""


def show_diagnosis(run_id: str, *, key: str) -> None:
    """What to change: each rule's finding (text, fix, cost), then the roofline of the run's GEMMs, convolutions,
    attention, elementwise ops and copies."""
    d = diagnosis(run_id)
    p = d.peaks
    st.caption(md_text(peaks_note(d)))
    if not d.diagnoses:
        st.success("None of the rules applies to this trace (fp32 without TF32, unaligned GEMM sizes, GPU-starved "
                   "steps, syncs and host copies in the step, recompiles, the profiler's own options, the attention "
                   "backend, CUDA graphs skipped, layout transposes around convolutions, CPU ops stalled by "
                   "threads without cores, a training step's for-loop optimizer and fp32 GEMMs, memory peaks "
                   "far above what the steps keep, memory that grows every step, reserved memory far above "
                   "allocated, CUDA graphs' memory pools).", icon=":material/check:")
    for x in d.diagnoses:
        with st.container(border=True):
            st.markdown(f"**{md_text(x.title)}**")
            st.markdown(md_text(x.text))
            st.markdown("**Change:** " + md_text(x.fix))
            if cost_line(d, x):
                st.caption(md_text(cost_line(d, x)))
            with st.expander("evidence"):
                st.json(json.loads(json.dumps(x.evidence, default=str)), expanded=False)
    roof = d.roofline
    if len(roof):
        st.subheader("Against the hardware's limits")
        shown = roof[[c for c in ROOFLINE_COLUMNS if c in roof.columns]]
        table_block(shown, f"{load_run(run_id).name}_roofline", key=f"{key}_roof_table",
                    column_config={"fraction_of_peak": st.column_config.ProgressColumn(
                        "of peak", format="percent", min_value=0.0, max_value=1.0),
                        "time_us": st.column_config.NumberColumn("µs per call", format="%.2f"),
                        "tflops": st.column_config.NumberColumn("TFLOP/s", format="%.3f"),
                        "gbs": st.column_config.NumberColumn("GB/s", format="%.1f")})
        spec = chart("roofline", shown, peaks=p.gemm_tflops if p else None,
                     bandwidth_gbs=p.bandwidth_gbs if p else None)
        chart_block(spec, shown, f"{load_run(run_id).name}_roofline", key=f"{key}_roofline")
