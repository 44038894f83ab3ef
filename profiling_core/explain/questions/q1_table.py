"""Question 1, reading the profiler table: self vs total CPU time (``q1.table``), and why summing Self CUDA over
the rows counts the GPU's time more than once (``q1.double_count``; ``q1.no_gpu`` on a CPU-only trace)."""
from __future__ import annotations

from ...units import format_duration_us as _us
from .base import NO_GPU_TEXT, Finding, _listed, _num, _per_name, _short, _step_star


def _q1_table(r, config=None) -> list[Finding]:
    t = r.profiler_table
    if t.empty:
        return []
    self_cpu = float(t["self_cpu_us"].sum())
    top = t.sort_values("self_cpu_us", ascending=False).iloc[0]
    ev = {"self_cpu_total_us": _num(self_cpu), "top_self_cpu_row": str(top["name"]),
          "top_self_cpu_us": _num(top["self_cpu_us"]), "rows": int(len(t))}
    text = (f"The table has {len(t)} rows; self CPU time sums to {_us(self_cpu)} and the largest self CPU row is "
            f"{_short(top['name'])} ({_us(top['self_cpu_us'])}); total CPU time of a row includes its children.")
    ch = r.dispatch_chains  # (the steps' slices on their own thread, the step slices included)
    if len(ch) and "wait_us" in ch:
        cpu = ch[ch["lane"] == "cpu"]
        waited = float(cpu.loc[_per_name(cpu["name"], lambda t: t.map(_step_star, na_action="ignore"))
                               == top["name"], "wait_us"].sum())
    else:
        waited = 0.0
    if waited > 0:  # self time that is a thread's wait for the autograd engine's thread (``table.autograd_wait``)
        ev["top_self_cpu_autograd_wait_us"] = _num(waited)
        text += (f" Of {_short(top['name'])}'s self time, {_us(waited)} inside the steps passed while the autograd "
                 "engine ran the backward on another thread: its thread was waiting, and the backward's own rows "
                 "count that time again (self CPU time sums the threads' time, waits included).")
    idle = r.summary.get("idle_thread_frames") or {}
    if idle:  # self time that is the wait of threads that ran no Python code (``analyses.table.idle_frames``)
        waited_idle = float(sum(idle.values()))
        ev["idle_thread_self_us"] = _num(waited_idle)
        ev["idle_thread_rows"] = sorted(idle)
        names = ", ".join(_short(n) for n in list(idle)[:3]) + (", …" if len(idle) > 3 else "")
        text += (f" {_us(waited_idle)} of the self CPU time is in the frames of threads that ran no Python code "
                 f"while the profile recorded ({names}): the stacks they held when it began, which torch writes on "
                 "thread 0 and counts until it stopped, whether the thread waited or ran one long C call; none of "
                 "it is time of the thread that ran the steps.")
    out = [Finding("q1.table", 1, "Self vs total CPU time", text, ev)]
    if not r.has_gpu:
        out.append(Finding("q1.no_gpu", 1, "No device columns", NO_GPU_TEXT + ": the table has no CUDA columns to "
                           "read, only CPU time.", {"gpu_ops": 0}))
        return out
    dev_sum = float(t["self_device_us"].sum())
    busy = float(r.summary["gpu_busy_us"]) if r.summary.get("gpu_busy_scope") == "trace" else float(
        r.gpu_busy.set_index("scope").loc["trace", "busy_us"])
    # (a set of the names: Python keeps each str's hash, where pandas' unique() hashes every row's text again)
    ann = t[(t["lane"] == "gpu") & ~t["name"].isin(set(r.gpu_ops["name"]))]
    cpu_dev = t[(t["lane"] == "cpu") & (t["self_device_us"] > 0)]
    ev2 = {"sum_self_device_us": _num(dev_sum), "gpu_busy_us": _num(busy),
           "ratio": _num(dev_sum / busy) if busy > 0 else None,
           "gpu_annotation_rows": sorted(map(str, ann["name"])), "cpu_rows_with_device_time": sorted(
               map(str, cpu_dev["name"]))}
    text2 = (f"Summing self device time over all rows gives {_us(dev_sum)}, "
             f"{dev_sum / busy:.1f}× the {_us(busy)} the GPU was actually busy (union of kernel, memcpy and memset "
             f"intervals): ") if busy > 0 else f"Summing self device time over all rows gives {_us(dev_sum)}: "
    parts = []
    if len(cpu_dev):
        parts.append("the ops that launched GPU work (" + _listed(cpu_dev["name"], 4) + ") carry their kernels' "
                     "time")
    ops = t[(t["lane"] == "gpu") & t["name"].isin(set(r.gpu_ops["name"]))]
    ops_sum = float(ops["self_device_us"].sum())
    if ops_sum > 0:  # (the GPU ops' own rows: each op's time once more, beside the op that launched it)
        ev2["gpu_op_rows_us"] = _num(ops_sum)
        parts.append("the GPU ops' own rows (kernels, copies, memsets) "
                     + ("count that time again, " if len(cpu_dev) else "sum to ") + _us(ops_sum)
                     + (", more than the busy time, because some ran at the same time (on several streams or GPUs), "
                        "each with its whole duration" if busy > 0 and ops_sum > busy * 1.01 else ""))
    if len(ann):
        parts.append("the GPU-side annotation rows (" + _listed(ann["name"], 4) +
                     ") carry their whole span on the GPU, from the start of the first GPU op under them to the "
                     "end of the last, idle gaps included")
    text2 += ("; ".join(parts) or "no row is counted twice") + "."
    out.append(Finding("q1.double_count", 1, "Summing Self CUDA double counts", text2, ev2))
    return out

