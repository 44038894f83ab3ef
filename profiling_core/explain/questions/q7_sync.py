"""Question 7, why cudaDeviceSynchronize is long (``q7.sync``): the longest synchronising call against the GPU's busy
time within it."""
from __future__ import annotations

from ...analyses import compile_steps, outside_compiler
from ...units import format_duration_us as _us
from ...units import format_share
from .base import ELSEWHERE, NO_GPU_TEXT, Finding, _compile_steps_text, _n, _num, _on_step_thread


def _q7_sync(r, config=None) -> list[Finding]:
    sw = r.sync_wait
    if sw.empty:
        return [Finding("q7.sync", 7, "No synchronize call", "No cudaDeviceSynchronize / cudaStreamSynchronize call "
                        "in this trace." + ("" if r.has_gpu else " " + NO_GPU_TEXT + "."), {"syncs": 0})]
    mine, theirs = outside_compiler(sw)  # not torch.compile's compiler's own syncs (max-autotune's benchmarks)
    longest = mine.sort_values("dur_us", ascending=False).iloc[0]
    unrec = float(longest["unrecorded_us"])
    ev = {"syncs": int(len(sw)), "name": str(longest["name"]), "dur_us": _num(longest["dur_us"]),
          "gpu_busy_us": _num(longest["gpu_busy_us"]), "unrecorded_us": _num(unrec),
          "idle_pct": _num(longest["idle_pct"]), "gpu_ops": int(longest["gpu_ops"])}
    if not float(longest["dur_us"]) > 0:  # (whole-µs times write a short call as 0 µs: no length to split)
        ev.pop("idle_pct")
        return [Finding("q7.sync", 7, "Why the sync is long", f"Every synchronising call of the trace ({len(sw)}, "
                        f"{longest['name']} among them) took 0 µs as recorded: too short for the trace to measure, so "
                        "there is no wait to explain.", ev)]
    # said where the longest of all was the compiler's (a sync left out that no reader would miss goes unsaid)
    left = theirs if theirs and bool(sw["compiler"].astype(bool).loc[sw["dur_us"].idxmax()]) else 0
    if left:
        ev["compiler_syncs"] = left
    text = (f"The longest {longest['name']}"
            + (f" (of the {_n(len(mine), 'synchronising call')} outside torch.compile's compiler; its own {left}, "
               "made while it compiled or recorded a CUDA graph, left out)" if left else "")
            + f" took {_us(longest['dur_us'])}; the GPU was busy {_us(longest['gpu_busy_us'])}"
            f" of it ({int(longest['gpu_ops'])} GPU op(s) overlapping)"
            + (f", and for {_us(unrec)} more its first recorded op waited behind work the trace does not hold (queued "
               "before the recording began)" if unrec > 0 else "")
            + f": {format_share(max(float(longest['idle_pct']), 0.0) / 100.0)} idle. ")
    if not r.has_gpu:
        text += NO_GPU_TEXT + "."
    elif round(longest["idle_pct"]) == 50:  # (said as 50%: neither part is most of it)
        text += ("For half of the call the GPU ran work queued earlier; the other half is the synchronisation itself "
                 f"({_place(r, int(longest['start_ns']), int(longest['id']), ev)}).")
    elif longest["idle_pct"] > 50:
        text += ("The GPU had little or nothing left to run: most of the call is the synchronisation itself "
                 f"({_place(r, int(longest['start_ns']), int(longest['id']), ev)}), not waiting for GPU work.")
    else:
        text += "The CPU waited for GPU work it had queued earlier: the sync's length is the GPU's backlog."
    return [Finding("q7.sync", 7, "Why the sync is long", text, ev)]


def _after_last(r, ts: int, ev: dict) -> str:
    """A sync after the last step: the profiler's own sync at the end of its window (torch synchronizes the device
    when the recording stops) where it is a device sync and the last sync and launch call of the trace; else only
    where it sits."""
    sw, lat = r.sync_wait, r.launch_latency
    later = (sw["start_ns"].astype("int64") > ts).any() or (
        not lat.empty and (lat["launch_start_ns"].astype("int64") > ts).any())
    if "DeviceSynchronize" in str(ev.get("name", "")) and not later:
        return "after the last step: the profiler's own sync at the end of its window"
    return "after the last step"


def _place(r, ts: int, call_id: int, ev: dict) -> str:
    """Where a synchronize call starting at ``ts`` sits among the steps, in words; ``ev`` gets ``in_step`` (the step
    whose window holds it, or None) and, for such a call, ``on_step_thread``. A call is the step's own code only where
    it sits inside the step's slice on the step's thread (the step's dispatch chain holds it); a call in the step's
    window on another thread or process is said to be there, not to be another program's (``base.ELSEWHERE``)."""
    st = r.steps.dropna(subset=["start_ns"])
    starts = st["start_ns"].astype("int64")
    inside = st.loc[(starts <= ts) & (ts < starts + st["cpu_dur_us"] * 1000), "step"].tolist()
    ev["in_step"] = int(inside[0]) if inside else None
    if not inside:
        return ("the trace has no steps to place it in" if st.empty else
                _after_last(r, ts, ev) if ts >= (starts + st["cpu_dur_us"] * 1000).max() else
                "before the first step" if ts < starts.min() else "between two steps")
    step = int(inside[0])
    ev["on_step_thread"] = bool(_on_step_thread(r, [step], [call_id])[0])
    sw = r.sync_wait
    mine = sw.loc[sw["id"] == call_id]
    if ev["on_step_thread"] and bool(mine["compiler"].any()):
        return f"a call inside step {step}, made by torch.compile's compiler while it compiled"
    if ev["on_step_thread"] and bool(mine["compiled_call"].any()):
        ev["in_compiled_call"] = True
        once = step in compile_steps(r.steps)  # (CUDA graph trees synchronise while they record a graph)
        return (f"a call inside step {step}, made inside a call of the torch.compile'd graph (## Call "
                "CompiledFxGraph …), by the compiled code or the CUDA-graph runtime around it rather than by a line "
                "of the step's own Python" + (f"; {_compile_steps_text([step])}" if once else ""))
    if ev["on_step_thread"]:
        return f"a call inside step {step}, made by the step's own code"
    return f"a call in step {step}'s window, {ELSEWHERE}"
