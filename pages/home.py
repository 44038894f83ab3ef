"""Home: what the app answers, this machine, recent runs, a quick start."""
import streamlit as st

from pages import _ui as ui

ui.in_frame(__file__)  # a deep link's first load goes through the app's frame

st.title("Reading PyTorch profiles, by experiment")
st.markdown(
    "One tiny workload, `torch.add(torch.matmul(x, w), b)` inside `record_function(\"matmul_add\")`, profiled "
    "with `torch.profiler` on **your** machine. Every number and statement on these pages is derived from the "
    "trace in front of you, never from a fixed text.")

QUESTIONS = [
    ("Profile", "pages/profile.py", "How do I read the profiler table: self vs total, # of calls, the footers?"),
    ("Overhead vs compute", "pages/overhead.py", "When is the step bound by CPU overhead, when by GPU compute?"),
    ("Dispatch and launch", "pages/dispatch.py", "Why is the first profiled step so long (cold start)?"),
    ("Dispatch and launch", "pages/dispatch.py", "Why is the GPU lane offset from the CPU lane (launch latency)?"),
    ("Dispatch and launch", "pages/dispatch.py", "What is the dispatch chain from ProfilerStep to the kernel?"),
    ("Dispatch and launch", "pages/dispatch.py", "How is each kernel launched (cudaLaunchKernel, cuLaunchKernelEx)?"),
    ("Dispatch and launch", "pages/dispatch.py", "Why is cudaDeviceSynchronize so long?"),
    ("Kernel variance", "pages/variance.py", "Why does the same kernel take different times?"),
    ("Compile vs eager", "pages/compile_vs_eager.py", "What does torch.compile change in the trace?"),
    ("Compile vs eager", "pages/compile_vs_eager.py", "What does compile cost on the CPU (incl. reduce-overhead)?"),
]

left, right = st.columns([3, 2], gap="large")
with left:
    st.subheader("The ten questions")
    for i, (title, path, question) in enumerate(QUESTIONS, start=1):
        st.page_link(path, label=f"{i}. {question}", help=f"answered on the {title} page")

    st.subheader("Quick start")
    st.markdown(
        "1. **Profile**: pick a size (64 is instant), dtype and device, press *Run profile*; read the table, "
        "the step timeline and the findings.\n"
        "2. **Overhead vs compute**: sweep sizes 64 … 8192 and see where GPU time overtakes CPU time.\n"
        "3. **Runs** keeps every run; compare two side by side. **Trace lab** opens any Chrome/Kineto trace "
        "and gives you a read-only SQL console over it.\n"
        "4. Every chart has PNG / SVG / CSV downloads; each page offers a one-file HTML report.")

with right:
    st.subheader("This machine")
    env = ui.environment()
    cuda = env.get("cuda_available")
    c1, c2 = st.columns(2)
    c1.metric("Device", "CUDA" if cuda else "CPU only")
    c2.metric("torch", env.get("torch") or "not importable")
    st.markdown(
        f"- **Device name**: {ui.md_text(env.get('device_name') or '–')}"
        f"{' × ' + str(env.get('device_count')) if (env.get('device_count') or 0) > 1 else ''}\n"
        f"- **CUDA build**: {ui.md_text(env.get('cuda_build') or 'none (CPU wheel)')}\n"
        f"- **CPU**: {ui.md_text(env.get('cpu_model') or '–')} · {env.get('cpu_cores') or '?'} cores; torch uses "
        f"{env.get('cpu_threads') or '?'} threads\n"
        f"- **Python**: {ui.md_text(env.get('python', '–'))} on {ui.md_text(env.get('host', '–'))}")
    if env.get("error"):
        st.warning(ui.md_text(env["error"]))
    if not cuda:
        st.info("No CUDA device here: profiles run on the CPU. Five questions need a GPU lane in the trace: 4 "
                "(launch latency), 6 (how kernels are launched), 7 (sync wait against GPU busy), 8 (kernel "
                "variance) and the GPU side of 9 (what compile changes on the GPU); their panels say so. On the CPU "
                "question 2 compares the work ops' own time (the ATen ops that compute or move data: the GEMM and "
                "the rest) with the framework overhead around them, and gives the GEMMs' GFLOP/s; import an H200 "
                "trace (Trace lab) for the GPU panels.", icon=":material/info:")
    engine, reason = ui.sql_engine()
    st.markdown(f"- **SQL engine**: {ui.md_code(engine)} — {ui.md_text(reason)}")
    root, size = ui.store_summary()
    st.markdown(f"- **Run store**: {ui.md_code(root, 500)} ({size})")

st.subheader("Measured peaks")
st.caption("What a dense GEMM per dtype and a large copy reached on each device calibrated in this store (here, or "
           "on the machine of a store whose runs were imported: the device column says which), measured in a worker "
           "like a run: the ceilings every GEMM and copy of a run on that device is judged by (Profile → *What to "
           "change*). The vendor's datasheet figure, where known, is shown beside, never used instead.")
ui.finish_calibration("calibrate")
good, bad = ui.calibrations()
here = env.get("device_name") if cuda else env.get("cpu_model")  # (the device name a run made here records)
if good and here and not any(p.device == here for p in good):
    st.caption(ui.md_text(f"None of them is of this machine's device ({here}): calibrate it below to judge runs made "
                          "here."))
if good:
    ui.table_block(ui.peaks_frame(good).assign(here=lambda d: d["device"] == here), "calibrations", key="home_peaks",
                   column_config={"measured best": st.column_config.NumberColumn(format="%.3f"),
                                  "median": st.column_config.NumberColumn(format="%.3f")})
    with st.expander("How they were measured"):
        for p in good:
            st.markdown(f"**{ui.md_text(p.device)}** ({ui.md_text(p.measured_at)}): {ui.md_text(p.method)}")
else:
    st.caption("No calibration in this store yet.")
for name, why in bad:
    st.warning(ui.md_text(f"Unreadable calibration file {name}: {why}"), icon=":material/warning:")
c1, c2 = st.columns([1, 3])
device = c1.selectbox("Device", ui.DEVICES, key="calibrate_device", help="auto: the GPU when there is one")
c2.button("Calibrate this device", key="calibrate_go", icon=":material/speed:", disabled=ui.get_job("calibrate") is not None,
          on_click=lambda: ui.start_calibration("calibrate", st.session_state["calibrate_device"]),
          help="About 10 s on a GPU (8192³ GEMMs and a 2 GiB copy), a few seconds on a CPU; waits for the device "
               "lock like a run")

st.subheader("Recent runs")
runs = ui.runs_frame()
if len(runs):
    st.dataframe(runs.head(10), hide_index=True, width="stretch",
                 column_config={"run_id": st.column_config.TextColumn("run id", width="medium")})
    st.page_link("pages/runs.py", label="All runs →")
else:
    st.caption("No runs yet. Open **Profile** and press *Run profile*.")
