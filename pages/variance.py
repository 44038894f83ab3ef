"""Kernel variance: why does the same kernel take different times? (question 8)"""
import pandas as pd
import streamlit as st

from pages import _ui as ui
from profiling_core.analyses import compiler_only_kernels
from profiling_core.units import format_duration_us
from profiling_core.present import (ReportSection, comparison_warnings, setting_labels, setting_parts,
                                    significant_figures)
from profiling_core.explain import MIN_LAUNCHES_FOR_SKEW, kernel_groups, mean_above_median_pct, skew_text

ui.in_frame(__file__)  # a deep link's first load goes through the app's frame

st.title("Kernel variance")
st.caption("Profile many steps and look at each kernel's distribution: the mean misleads when a few steps are "
           "slow; the median, min and max tell the story.")

cuda = bool(ui.environment().get("cuda_available"))
config = ui.config_form("variance_form", submit_label="Run 20-step profile",
                        defaults={"size": 4096 if cuda else 256, "active": 20, "wait": 0, "warmup_steps": 1,
                                  "warmup": 3})
if config is not None:
    ui.start_profile("variance", config)
ui.finish_profile("variance")


def durations(run_id: str) -> tuple[pd.DataFrame, str]:
    """Per-step durations of each kernel; on CPU traces, of the aten ops that do the work (the CPU does it there):
    those whose self time (their duration less their CPU children's) is at least half their duration, whatever the
    workload (aten::mm is, aten::matmul around it is not)."""
    rep = ui.report(run_id)
    k = rep.kernel_durations_by_step
    if len(k) or rep.has_gpu:  # (a GPU trace without steps has kernels, none per step: not a CPU trace)
        return k.rename(columns={"name": "kernel"})[["step", "kernel", "dur_us"]], "kernel"
    ch = rep.dispatch_chains
    cpu = ch[ch["lane"] == "cpu"]
    children_us = cpu.groupby("parent_id")["dur_us"].sum()
    aten = cpu[(cpu["category"] == "cpu_op") & cpu["name"].astype(str).str.startswith("aten::")]
    self_us = aten["dur_us"] - aten["id"].map(children_us).fillna(0.0).to_numpy()
    working = aten[self_us >= 0.5 * aten["dur_us"]]
    return working.rename(columns={"name": "kernel"})[["step", "kernel", "dur_us"]], "cpu_op"


def skew_verdict(k) -> str:
    """The question-8 finding's verdict for one kernel (or configuration): its ``count``, ``mean_us``, ``median_us``."""
    if k["count"] < MIN_LAUNCHES_FOR_SKEW:
        return f"too few launches (under {MIN_LAUNCHES_FOR_SKEW}) to judge the skew"
    return "the mean " + skew_text(k["mean_us"], k["median_us"])


rid = ui.run_picker("Run", key="variance_run")
if rid is None:
    st.info("No run yet: press **Run 20-step profile** above.")
    st.stop()
dur, kind = durations(rid)
rep = ui.report(rid)
if kind == "cpu_op":
    st.info("This trace has no GPU kernels (recorded on the CPU), so the kernel panels show the CPU durations of "
            "the aten ops that do the work instead. Run on a CUDA device for GPU kernel durations.",
            icon=":material/info:")
steps_note = "it has no ProfilerStep slices" if rep.steps.empty else "no kernel of it ran inside a ProfilerStep"
if dur.empty and (kind == "cpu_op" or rep.kernel_stats.empty):
    st.warning(f"No per-step durations in this trace ({steps_note}).")
    st.stop()
if dur.empty:  # a GPU trace without steps: its kernels' statistics over all their launches, as question 8 reads them
    st.info(f"No per-step durations in this trace ({steps_note}): the statistics below are over all the launches "
            f"of its {len(rep.kernel_stats):,} kernel names, as question 8 reads them; the per-step chart and the "
            "comparison of runs need steps.", icon=":material/info:")
    by_total = list(rep.kernel_stats.sort_values("total_us", ascending=False, kind="stable")["name"].astype(str))
else:
    by_total = list(dur.groupby("kernel")["dur_us"].sum().sort_values(ascending=False).index)
top = st.slider("Kernels shown (by total time)", 1, 10, 3, key="variance_top", help="display only")
picked = st.multiselect("… or these kernels (any of the trace's)", by_total, key="variance_kernels",
                        help="display only; empty: the largest by total time, as many as the slider says")
theirs = set(compiler_only_kernels(rep)) if kind == "kernel" else set()
ours = [k for k in by_total if k not in theirs] or by_total  # the workload's kernels first (question 8 reads them)
keep = picked or ours[:top]
if theirs and not picked:
    st.caption(f"{len(theirs)} kernel name{'s' if len(theirs) > 1 else ''} only torch.compile's compiler launched, "
               "while it compiled (under max-autotune, its benchmarks of candidates), "
               f"{'are' if len(theirs) > 1 else 'is'} left out of the largest; pick them above to see them.")
if kind == "kernel":  # the library's statistics: the numbers the question-8 finding quotes
    stats = rep.kernel_stats.rename(columns={"name": "kernel"})
    stats = stats[stats["kernel"].isin(keep)].reset_index(drop=True)
else:
    stats = None
dur = dur[dur["kernel"].isin(keep)]

st.header("Per-step durations" if len(dur) else "Kernel durations", divider="gray")
per_step = ui.chart("kernel_durations_by_step", dur) if len(dur) else None
if per_step is not None:
    ui.chart_block(per_step, dur, "kernel_durations_by_step", key="variance_steps")


if stats is None:
    st.caption("Per-kernel statistics come from the GPU kernels (`kernel_stats`); this trace has none, so read the "
               "aten ops' spread from the charts.")
else:
    stats["mean_above_median_pct"] = [mean_above_median_pct(m, d) for m, d in zip(stats["mean_us"], stats["median_us"])]
    # (six significant figures, as the HTML report writes them: 3 decimals showed a CV of 0.00815 as 0.008)
    ui.table_block(significant_figures(stats), "kernel_stats", key="variance_stats", width="stretch",
                   column_config={c: st.column_config.NumberColumn(format="%.6g")
                                  for c in stats.columns if pd.api.types.is_float_dtype(stats[c])})
    for _, k in stats.iterrows():
        line = (f"- {ui.md_code(k['kernel'])}: median {format_duration_us(k['median_us'])}, mean "
                f"{format_duration_us(k['mean_us'])}, min {format_duration_us(k['min_us'])}, max "
                f"{format_duration_us(k['max_us'])}, std {format_duration_us(k['std_us'])} over "
                f"{int(k['count'])} launches")
        # launches of another GEMM shape, or in another grid or block, do another amount of work: Q8's reading
        by, groups = kernel_groups(rep, str(k["kernel"]))
        if not groups:
            st.markdown(f"{line}; {skew_verdict(k)}.")
            continue
        if by == "shape":
            shaped = sum(g["count"] for g in groups)
            st.markdown(f"{line}, in {len(groups)} GEMM shapes (M×K×N, from the launching ops' recorded shapes"
                        + (f"; {int(k['count']) - shaped} launches have none" if shaped < int(k["count"]) else "")
                        + "): its spread is shape, not noise; each shape's own:")
        else:
            st.markdown(f"{line}, in {len(groups)} launch configurations: its spread is partly work, not noise; each "
                        "configuration's own:")
        for g in groups:
            what = (f"{ui.md_code(g['shape'])} ({g['gflop']:,.3g} GFLOP)" if by == "shape" else
                    f"grid {ui.md_code(g['grid'])}, block {ui.md_code(g['block'])}")
            st.markdown(f"    - {what}: median {format_duration_us(g['median_us'])}, "
                        f"min {format_duration_us(g['min_us'])}, max {format_duration_us(g['max_us'])} over "
                        f"{g['count']} launches; {skew_verdict(g)}.")

if per_step is None:  # (no steps: the question-8 finding and the statistics are the page)
    ui.show_findings(ui.findings(rid), questions={8})
    ui.report_button("Kernel variance", [ReportSection("Kernel durations", tables=[("kernel_stats", stats)])],
                     configs={rid: ui.load_run(rid).meta.get("config") or {}}, key="variance")
    st.stop()

st.header("Compare two runs", divider="gray")
other = ui.run_picker("Second run", key="variance_other",
                      default=next((r for r in ui.runs_frame()["run_id"] if r != rid), rid))
both = [dur.assign(run=f"A · {ui.load_run(rid).name}")]
unlike = ""  # what the page says of two runs of different settings, plain text: the report says it too
if other and other != rid:
    d2, _ = durations(other)
    d2 = d2[d2["kernel"].isin(keep)]
    if d2.empty:
        st.caption(f"The second run has none of these kernels ({ui.md_code(ui.load_run(other).name)} ran other ones); "
                   "pick a run of the same kind to compare.")
    else:
        both.append(d2.assign(run=f"B · {ui.load_run(other).name}"))
        a_label, b_label = setting_labels([setting_parts(ui.load_run(r), ui.report(r)) for r in (rid, other)])
        if a_label:  # (another size, batch, dtype or machine: a kernel of one name does other work, in other grids)
            unlike = (f"A and B measured different settings (A: {a_label}; B: {b_label}): a kernel of the same name "
                      "may do another amount of work in each (a launch in another grid does), so compare their "
                      "spreads, not their times.")
            st.caption(ui.md_text(unlike))
busy = comparison_warnings(pd.DataFrame(), [], runs=[ui.load_run(r) for r in dict.fromkeys((rid, other or rid))])
for w in busy:
    st.warning(ui.md_text(w), icon=":material/warning:")
spread_df = pd.concat(both, ignore_index=True)
spread = ui.chart("kernel_spread", spread_df)
ui.chart_block(spread, spread_df, "kernel_spread", key="variance_spread")
st.caption("Box: quartiles and median; whiskers: min..max; red tick: the mean.")

ui.show_findings(ui.findings(rid), questions={8})
ui.report_button("Kernel variance", [ReportSection("Per-step durations", charts=[per_step],
                                                   tables=[] if stats is None else [("kernel_stats", stats)]),
                                     ReportSection("Spread", text="\n\n".join([*busy, *([unlike] if unlike else [])]),
                                                   charts=[spread])],
                 configs={r: ui.load_run(r).meta.get("config") or {}
                          for r in dict.fromkeys((rid, *(r for r in (other,) if len(both) > 1)))}, key="variance")
