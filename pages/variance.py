"""Kernel variance: why does the same kernel take different times? (question 8)"""
import pandas as pd
import streamlit as st

from pages import _common as ui
from profiling_core.export import ReportSection

st.title("Kernel variance")
st.caption("Profile many steps and look at each kernel's distribution: the mean misleads when a few steps are "
           "slow; the median, min and max tell the story.")

cuda = bool(ui.environment().get("cuda_available"))
config = ui.config_form("variance_form", submit_label="Run 20-step profile",
                        defaults={"size": 4096 if cuda else 256, "active": 20, "wait": 0, "warmup_steps": 1,
                                  "warmup": 3, "dtype": "bf16" if cuda else "fp32"})
if config is not None:
    ui.start_profile("variance", config)
ui.finish_profile("variance")


def durations(run_id: str) -> tuple[pd.DataFrame, str]:
    """Per-step durations of each kernel; on CPU traces, of each aten op (the CPU does the work there)."""
    rep = ui.report(run_id)
    k = rep.kernel_durations_by_step
    if len(k):
        return k.rename(columns={"name": "kernel"})[["step", "kernel", "dur_us"]], "kernel"
    ch = rep.dispatch_chains
    ops = ch[(ch["category"] == "cpu_op") & ch["name"].isin(["aten::mm", "aten::bmm", "aten::addmm", "aten::add"])]
    return ops.rename(columns={"name": "kernel"})[["step", "kernel", "dur_us"]], "cpu_op"


rid = ui.run_picker("Run", key="variance_run")
if rid is None:
    st.info("No run yet: press **Run 20-step profile** above.")
    st.stop()
dur, kind = durations(rid)
if kind == "cpu_op":
    st.info("This trace has no GPU kernels (recorded on the CPU), so the kernel panels show the CPU durations of "
            "the aten ops that do the work instead. Run on a CUDA device for GPU kernel durations.",
            icon=":material/info:")
if dur.empty:
    st.warning("No per-step durations in this trace (it has no ProfilerStep slices).")
    st.stop()

top = st.slider("Kernels shown (by total time)", 1, 10, 3, key="variance_top", help="display only")
keep = dur.groupby("kernel")["dur_us"].sum().sort_values(ascending=False).head(top).index
dur = dur[dur["kernel"].isin(keep)]

st.header("Per-step durations", divider="gray")
per_step = ui.chart("kernel_durations_by_step", dur)
ui.chart_block(per_step, dur, "kernel_durations_by_step", key="variance_steps")

stats = (dur.groupby("kernel")["dur_us"].agg(count="count", median_us="median", mean_us="mean", min_us="min",
                                             max_us="max", std_us="std").reset_index())
stats["spread_us"] = stats["max_us"] - stats["min_us"]
stats["mean_minus_median_us"] = stats["mean_us"] - stats["median_us"]
ui.table_block(stats.round(3), "kernel_stats", key="variance_stats", width="stretch")
for _, r in stats.iterrows():
    skew = "the mean sits above the median: a few slow steps pull it up" if r["mean_minus_median_us"] > 0.01 * \
        r["median_us"] else "mean and median agree"
    st.markdown(f"- `{str(r['kernel'])[:70]}`: median {ui.fmt_us(r['median_us'])}, mean {ui.fmt_us(r['mean_us'])}, "
                f"min {ui.fmt_us(r['min_us'])}, max {ui.fmt_us(r['max_us'])} over {int(r['count'])} steps; {skew}.")

st.header("Compare two runs", divider="gray")
other = ui.run_picker("Second run", key="variance_other",
                      default=next((r for r in ui.runs_frame()["run_id"] if r != rid), rid))
both = [dur.assign(run=f"A · {ui.load_run(rid).name}")]
if other and other != rid:
    d2, _ = durations(other)
    d2 = d2[d2["kernel"].isin(keep)]
    if d2.empty:
        st.caption(f"The second run has none of these kernels ({ui.load_run(other).name} ran other ones); "
                   "pick a run of the same kind to compare.")
    both.append(d2.assign(run=f"B · {ui.load_run(other).name}"))
spread_df = pd.concat(both, ignore_index=True)
spread = ui.chart("kernel_spread", spread_df)
ui.chart_block(spread, spread_df, "kernel_spread", key="variance_spread")
st.caption("Box: quartiles and median; whiskers: min..max; red tick: the mean.")

ui.show_findings(ui.findings(rid), questions={8})
ui.report_button("Kernel variance", [ReportSection("Per-step durations", charts=[per_step], tables=[("stats", stats)]),
                                     ReportSection("Spread", charts=[spread])],
                 configs={rid: ui.load_run(rid).meta.get("config") or {}}, key="variance")
