"""``sync_in_step``: synchronising calls and ops (``.item()``, stream/device syncs, blocking ``cudaMemcpy``) and
host-device copies launched inside a ProfilerStep.

The cost is the time the CPU spends blocked in them per step: the synchronising calls, and the calls that launched
each host↔device copy (a copy from pageable memory holds its ``cudaMemcpyAsync`` until the bytes are staged, so its
call lasts about as long as the copy; a pinned one returns at once). Host-to-device copies from pinned memory alone,
with no synchronising call, are no finding: that is how a loop should feed its GPU. In a steady state the GPU paces
(compute- or copy-bound) the CPU's wait is for work the GPU had to do anyway: the cost is then at most the GPU's idle
time inside the steps' windows; in an overhead-bound one it is at most the step's CPU time less its GPU work (a step
gets no shorter than the GPU work it launches). Either way the copies from pageable memory are no floor: pinned, the
same bytes cross the link several times faster, so their time is added to what can be won. Each copy's bytes, rate
and the copy engine's time are the evidence.

An op such as ``.item()`` counts only when a runtime call ran inside it (:func:`_reached_device`): on a CPU tensor
it waits for nothing. In a training step (``analyses.phases``) each synchronising op is placed in its phase: a ``.item()`` outside the
optimizer, after backward, is the loop logging its loss every step, and the text and fix say so; one in the
optimizer phase of a run whose GradScaler unscaled its gradients (``aten::_amp_foreach_non_finite_check_and_unscale_``
in the trace), outside the optimizer's own ``Optimizer.step#`` range, is ``scaler.step`` reading ``found_inf`` back
to decide whether to step: an optimizer without ``fused=True`` makes it do that every step (a fused one takes
``found_inf`` on the device; on an H200, SGD under fp16 autocast synced there once a step, fused Adam never)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ....analyses import GPU_PACED, after_phase, measured_steps, phases_at, working_steps
from ....analyses._common import is_size
from ....analyses._shared import SYNC_CALLS, union_ns
from ....units import human_bytes
from ...questions.base import ELSEWHERE, _basis_text, _on_step_thread, _per_name
from ..base import Diagnosis, _args_of, _cpu_time_cost, _Ctx, _fmt_n, _fmt_us, _other_steps_empty

_SYNC_CALLS = (*sorted(SYNC_CALLS), "cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream")
"""The calls that block the CPU until the GPU has caught up (the analyses' own list), and the blocking copies of both
runtimes."""
_SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero")


def _held_us(tb, rows: list[int]) -> float:
    """The time (µs) these calls held, the union of their intervals."""
    if not rows:
        return 0.0
    ts = np.asarray(tb.ts[rows], dtype=np.int64)
    return union_ns(ts, ts + np.asarray(tb.dur[rows], dtype=np.int64)) / 1000


def _rule_sync_in_step(c: _Ctx) -> Optional[Diagnosis]:
    """Synchronising calls and ops (``.item()``, stream/device syncs, blocking ``cudaMemcpy``) and host↔device
    copies whose launch lies inside a ProfilerStep."""
    r, tb = c.report, c.session.tables
    if r.steps.empty:
        return None
    names = tb.name[:]
    # (tested on the codes: each distinct name and category once)
    idx = np.flatnonzero(np.isin(tb.name.codes, _codes(tb.name, (*_SYNC_CALLS, *_SYNC_OPS)))
                         & ~np.isin(tb.category.codes, _codes(tb.category, ("gpu_user_annotation",))))
    ss = r.summary.get("steady_state") or {}
    work = working_steps(r.steps)  # (an empty step is no step of the loop)
    st = measured_steps(r.steps)  # the steady state's steps: after the first, from 3 steps on (as the bound's)
    steady = st["step"].tolist()
    starts = st["start_ns"].to_numpy(dtype=np.int64)
    ends = starts + np.round(st["cpu_dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64)
    step_of = np.full(len(idx), -1, dtype=np.int64)
    for k, a, b in zip(st["step"].tolist(), starts, ends):
        step_of[(tb.ts[idx] >= a) & (tb.ts[idx] + tb.dur[idx] <= b)] = k
    idx, step_of = idx[step_of >= 0], step_of[step_of >= 0]
    kept = _reached_device(idx, names, tb)
    step_of, idx = step_of[np.isin(idx, kept)], kept
    lat = r.launch_latency
    copies = lat[lat["step"].isin(steady) & _per_name(lat["gpu_name"], lambda t: t.str.contains("HtoD|DtoH",
                                                                                                   na=False))
                 .astype(bool)] if not lat.empty else lat
    copy_kinds = {k: int(copies["gpu_name"].astype(str).str.contains(k).sum()) for k in ("HtoD", "DtoH")}
    if len(idx) == 0 and not any(copy_kinds.values()):
        return None  # (a first step's syncs alone are its cold start's: question 3)
    n = max(1, len(st))
    with_any = len(set(step_of.tolist()) | set(copies["step"].dropna().astype(int).tolist()))
    calls = [int(i) for i in idx if names[i] in _SYNC_CALLS]
    # the calls that launched a copy and held the CPU for it: not those of copies to or from pinned memory, which
    # return at once (where a trace's copy names do not say which memory, every copy's call counts)
    held = copies[~copies["gpu_name"].astype(str).str.lower().str.contains("pinned", regex=False)] if len(copies) \
        else copies
    copy_calls = sorted(set(held["launch_id"].astype(int).tolist()) - set(calls)) if len(held) else []
    # (each instant once: calls on two threads that wait at the same time block the step for that time once)
    sync_us = _held_us(tb, calls) / n
    blocked = _held_us(tb, calls + copy_calls) / n
    copy_call_us = blocked - sync_us
    copy_rows = _copy_rows(c.session, copies, n)
    if len(idx) == 0 and all(row["kind"] == "host-to-device" and row["memory"] == "pinned" for row in copy_rows):
        return None  # a batch copied from pinned memory (non_blocking) holds nothing: how a loop should feed a GPU
    parts = []
    # where the step's slice does not hold them: said, as question 7 says it (the step's code may still have made
    # them, on the autograd engine's thread say; or another program did: the trace cannot tell)
    off = ~_on_step_thread(r, step_of, idx) if len(idx) else np.zeros(0, dtype=bool)
    if len(idx):
        parts.append(f"the CPU waits for the GPU: {_sync_counts(names, tb, idx, n)} per step"
                     + (f" ({'all' if off.all() else f'{off.sum() / n:.3g} per step'} {ELSEWHERE})" if off.any()
                        else "")
                     + (f", {_fmt_us(sync_us)} blocked in synchronising calls per step" if calls else ""))
    for row in copy_rows:
        same = row["min_bytes"] == row["max_bytes"]
        size = (f" of {human_bytes(row['bytes'])}" if same else
                f" of {human_bytes(row['min_bytes'])} to {human_bytes(row['max_bytes'])} "
                f"({human_bytes(row['bytes'])} on average)") if row["bytes"] else ""
        parts.append(f"{_fmt_n(row['per_step'])} {row['kind']} cop{'y' if row['per_step'] == 1 else 'ies'} per step"
                     + size
                     + (f" {'from' if row['kind'] == 'host-to-device' else 'to'} {row['memory']} memory"
                        if row["memory"] else "")
                     + f": the copy engine {_fmt_us(row['copy_us'])}"
                     + (f" ({row['gbs']:,.1f} GB/s)" if row["gbs"] and (row["bytes"] or 0) >= _BANDWIDTH_BOUND_BYTES
                        else "")
                     + f", the CPU {_fmt_us(row['call_us'])} in the call that launched it"
                     + ("" if row["per_step"] == 1 and same else ", a copy on average"))
    by_phase: dict = {}
    logged = scaler = 0.0
    if r.has_phases and len(idx):
        ops = [int(i) for i in idx if not _nested_sync_op(names, tb, i)]
        placed = list(zip(ops, phases_at(c.session, tb.ts[ops], shared=c.shared)))
        for _i, ph in placed:
            by_phase[ph] = by_phase.get(ph, 0) + 1 / n
        # (after this step's optimizer: a call outside every phase may as well sit between the forward and the
        # backward)
        after_opt = after_phase(c.session, tb.ts[ops], "optimizer", shared=c.shared)
        logged = sum(1 for (i, ph), late in zip(placed, after_opt)
                     if ph in ("zero_grad", "other") and late and names[i] in _SYNC_OPS) / n
        if _UNSCALE in tb.name.uniq:
            scaler = sum(1 for i, ph in placed if ph == "optimizer" and names[i] in _SYNC_OPS
                         and not _under(names, tb, i, "Optimizer.step#")) / n
        parts.append("by phase of the training step: " + ", ".join(f"{ph} ×{_fmt_n(v)}" for ph, v in by_phase.items()))
        if scaler:
            parts.append(f"{_fmt_n(scaler)} per step in the optimizer phase, before the optimizer's own step: the "
                         "GradScaler reading found_inf back to decide whether to step (scaler.step with an "
                         "optimizer that is not fused)")
        if logged:
            parts.append(f"{_fmt_n(logged)} per step after the optimizer, outside every phase: the loop reading a "
                         "value back (logging the loss with .item()) every step")
    pageable = any(row["memory"] == "pageable" for row in copy_rows)
    scope = f" of the steady state ({_basis_text(ss, len(work))})" if len(steady) < len(work) and ss else ""
    if len(work) == 1 < len(r.steps):  # one step with work beside empty ones: no steady state to speak of
        where = f"Inside the only step with work in it (step {steady[0]}; {_other_steps_empty(r)})"
    else:
        where = (f"Inside each step{scope}" if with_any >= n else
                 f"Inside {with_any} of the {n} steps{scope}, counted per step over "
                 f"{'both' if n == 2 else f'all {n}'}")
    why = ([] if not len(idx) else ["a synchronising call returns only when the GPU has caught up, so nothing "
                                     "further is queued meanwhile and the GPU runs dry after it"])
    if pageable:
        why.append("a copy from pageable host memory holds the CPU until its bytes are staged, which synchronises"
                   + (" too" if why else ""))
    text = where + ": " + "; ".join(parts) + "." + (f" {'; '.join(why)}.".replace(" a", " A", 1) if why else "")
    unpinned = any(row["kind"] == "host-to-device" and row["memory"] != "pinned" for row in copy_rows)
    # every sync inside a copy, and every copy an input's: the syncs are the pageable copies' own (a .to(device)),
    # and no .item() or .cpu() of the step's makes them
    in_copies = bool(calls) and all(_under(names, tb, i, _COPY_OP) for i in calls) and copy_kinds["DtoH"] == 0
    # (a copy's name says pageable or pinned where the profiler wrote it: ROCm's and older traces' names say neither)
    named = any(row["kind"] == "host-to-device" and row["memory"] == "pageable" for row in copy_rows)
    fix = (("Keep values on the GPU inside the step: avoid .item(), .cpu(), .tolist(), printing tensors and "
            "data-dependent shapes (nonzero, boolean masks) in the hot loop; log every N steps. "
            if not (in_copies and unpinned) else
            "The synchronising calls are those of the copies to the device from pageable memory (aten::copy_ of a "
            ".to(device)). " if named else
            "The synchronising calls are those of the copies to the device (aten::copy_ of a .to(device)); the trace "
            "does not say whether they copied from pageable or pinned memory (their names say neither), but a copy "
            "from pageable memory, or one without non_blocking=True, holds the CPU until it ends. ")
           + ("Move inputs to the device once, or with tensor.pin_memory() and .to(device, non_blocking=True) ahead "
              "of the step; bring" if unpinned else "Bring")
           + " a value back with a non_blocking copy and an event when it must come back.")
    if scaler:
        fix = ("Use a fused optimizer (fused=True: SGD, Adam and AdamW have one on CUDA): scaler.step then hands it "
               "found_inf and the scale on the device instead of reading them back. " + fix)
    if logged:
        fix = ("Log the loss every N steps, not every step: keep a running sum on the device (total += loss.detach()) "
               "and call .item() on it every N steps. " + fix)
    cost = blocked if calls or copy_calls else None
    # (a copy from pageable memory is no floor of the step: pinned, the same bytes cross the link several times faster;
    # not a copy of a few bytes, whose time is the copy's start-up either way)
    pageable_us = sum(row["per_step"] * row["copy_us"] for row in copy_rows
                      if row["memory"] == "pageable" and (row["bytes"] or 0) >= _BANDWIDTH_BOUND_BYTES)
    basis = ("time the CPU spent blocked per step in synchronising calls"
             + (" and in the calls that launched host-device copies (not those of pinned memory, which return at "
                "once)" if copy_calls else "") + " (measured)" + ("; the copies from pageable memory, pinned, still take their bytes at the link's "
                                    "rate, which this trace does not give: the win is less by that" if pageable_us
                                    else ""))
    idle = None
    if cost is not None and ss.get("bound") in GPU_PACED:
        idle = float((st["cpu_dur_us"] * (1.0 - st["gpu_busy_fraction"])).median()) if len(st) else None
        if idle is not None and idle + pageable_us < cost:
            cost = idle + pageable_us
            basis = ("the GPU's idle time per step inside the steps' windows (measured)"
                     + (f", and its {_fmt_us(pageable_us)} of copies from pageable memory, which pinned memory "
                        "speeds up" if pageable_us else "")
                     + f": the GPU sets the pace (a {ss['bound']} step), so the {_fmt_us(blocked)} the CPU spent "
                     "blocked per step was spent waiting for work the GPU had to do anyway; what removing the syncs "
                     "can win back is at most the time the GPU ran dry" + (" and what the faster copies save"
                                                                          if pageable_us else ""))
    elif cost is not None and ss.get("bound") == "overhead-bound":
        cost, basis = _cpu_time_cost(r, cost, basis, f"the {_fmt_us(blocked)} the CPU spent blocked per step",
                                     pageable_us, " other than its copies from pageable memory (which pinned memory "
                                     "speeds up)" if pageable_us else "")
    return Diagnosis("sync_in_step", "Host-device synchronisation or copies inside the step", text, fix,
                     cost, basis,
                     {"gpu_idle_us_per_step": idle, "pageable_copy_us_per_step": pageable_us,
                      "slice_ids": [int(i) for i in idx][:50] + copies["launch_id"].astype(int).tolist()[:50],
                      "blocked_us_per_step": blocked, "sync_calls_us_per_step": sync_us,
                      "copy_calls_us_per_step": copy_call_us, "off_step_thread_per_step": float(off.sum()) / n, "copies_in_steps": copy_kinds, "copies": copy_rows,
                      "sync_ops_by_phase": by_phase, "logged_per_step": logged, "grad_scaler_per_step": scaler})


_BANDWIDTH_BOUND_BYTES = 64 << 10
"""From this size a copy's time is its bytes over the link's rate (the text gives its GB/s), so pinned memory, which
raises the rate, shortens it; a smaller copy's time is mostly its start-up."""

_UNSCALE = "aten::_amp_foreach_non_finite_check_and_unscale_"
"""The op of GradScaler.unscale_ (the gradients checked for inf/NaN and divided by the scale)."""


def _under(names, tb, i: int, prefix: str) -> bool:
    """Whether slice ``i`` lies inside a slice whose name starts with ``prefix``."""
    p = int(tb.parent_id[i])
    while p >= 0:
        if isinstance(names[p], str) and names[p].startswith(prefix):
            return True
        p = int(tb.parent_id[p])
    return False


def _codes(col, values: tuple) -> list[int]:
    """The codes of a text column (``TraceTables.name``/``category``) whose values are among ``values``."""
    return [c for c, v in enumerate(col.uniq) if v in values]


def _reached_device(idx: np.ndarray, names, tb) -> np.ndarray:
    """The synchronising slices of ``idx`` that made the CPU wait for a device: every runtime call, and the ops
    (``.item()``, ``nonzero``) inside which a runtime or driver call ran (the copy back, the stream sync). ``.item()``
    on a CPU tensor (Adam's step counter, a CPU-only run) calls none and waits for nothing."""
    ops = {int(i) for i in idx if names[i] in _SYNC_OPS}
    if not ops:
        return idx
    wanted = np.array(sorted(ops), dtype=np.int64)
    hit: set[int] = set()
    # Every runtime and driver call's ancestors, one level at a time for all of them at once.
    p = tb.parent_id[np.isin(tb.category.codes, _codes(tb.category, ("cuda_runtime", "cuda_driver")))]
    while len(p := p[p >= 0]):
        hit.update(np.unique(p[np.isin(p, wanted)]).tolist())
        p = tb.parent_id[p]
    return np.array([i for i in idx.tolist() if names[i] not in _SYNC_OPS or i in hit], dtype=np.int64)


def _sync_counts(names, tb, idx, n: int) -> str:
    """The synchronising slices ``idx`` counted per step by the outermost of each nest (one ``.item()`` is one wait:
    ``aten::item`` with ``aten::_local_scalar_dense`` and its sync call inside it), each name followed by the chain of
    synchronising names found inside it:
    ``aten::item ×1 (→ aten::_local_scalar_dense → cudaStreamSynchronize)``."""
    inside: dict[int, list[str]] = {}
    for i in idx.tolist():
        top = _outermost_sync(names, tb, int(i))
        inside.setdefault(top, [])
        if top != i:
            inside[top].append(str(names[i]))
    counts: dict[str, int] = {}
    chains: dict[str, dict[str, None]] = {}
    for top, inner in inside.items():
        name = str(names[top])
        counts[name] = counts.get(name, 0) + 1
        chains.setdefault(name, {}).update(dict.fromkeys(inner))
    return ", ".join(f"{x} ×{c / n:.3g}" + (f" (→ {' → '.join(chains[x])})" if chains[x] else "")
                     for x, c in counts.items())


def _outermost_sync(names, tb, i: int) -> int:
    """The outermost synchronising slice that holds slice ``i`` (``aten::item`` for the ``aten::_local_scalar_dense``
    and the sync call under it), or ``i`` itself where none does."""
    top, p = i, int(tb.parent_id[i])
    while p >= 0:
        if names[p] in _SYNC_OPS or names[p] in _SYNC_CALLS:
            top = p
        p = int(tb.parent_id[p])
    return top


def _nested_sync_op(names, tb, i: int) -> bool:
    """Whether synchronising slice ``i`` lies inside another one (``aten::_local_scalar_dense`` under ``aten::item``,
    the copy and sync calls under it): one ``.item()`` is placed once."""
    return _outermost_sync(names, tb, i) != i


def _copy_rows(session, copies, n_steps: int) -> list[dict]:
    """Per kind of host-device copy (its name: direction and memory, e.g. ``Memcpy HtoD (Pageable -> Device)``):
    copies per step, bytes each (the trace's ``bytes``), the copy engine's mean time, GB/s, the launching call's mean
    CPU time, and ``pageable``/``pinned`` where the name says."""
    if copies.empty:
        return []
    nbytes = _args_of(session, "bytes", copies["gpu_id"].astype(int).tolist())
    out = []
    for name, grp in copies.groupby(copies["gpu_name"].astype(str), sort=False):
        b = [nbytes.get(int(i)) for i in grp["gpu_id"]]
        b = [x for x in b if is_size(x)]  # (a number of bytes torch could have copied)
        mean_b = float(sum(b) / len(b)) if b else None
        t = float(grp["gpu_dur_us"].mean())
        low = name.lower()
        memory = "pageable" if "pageable" in low else "pinned" if "pinned" in low else None
        out.append({"name": name, "kind": "host-to-device" if "HtoD" in name else "device-to-host",
                    "memory": memory, "per_step": len(grp) / n_steps, "bytes": mean_b,
                    "min_bytes": min(b) if b else None, "max_bytes": max(b) if b else None, "copy_us": t,
                    "gbs": mean_b / t / 1e3 if mean_b and t > 0 else None,
                    "call_us": float(grp.drop_duplicates("launch_id")["launch_dur_us"].mean())})
    return out


_COPY_OP = "aten::copy_"
"""The op inside which a tensor's copy between host and device runs (``.to(device)``, ``.cpu()``)."""
