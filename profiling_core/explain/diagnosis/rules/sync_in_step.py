"""``sync_in_step``: synchronising calls and ops (``.item()``, stream/device syncs, blocking ``cudaMemcpy``) and
host-device copies launched inside a ProfilerStep, with the time the CPU spent blocked in them."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..base import Diagnosis, _Ctx, _fmt_us, _steps


_SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
               "cuStreamSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize", "hipStreamSynchronize",
               "hipMemcpy", "hipMemcpyWithStream")  # the blocking copies of both runtimes included
_SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero")


def _rule_sync_in_step(c: _Ctx) -> Optional[Diagnosis]:
    """Synchronising calls and ops (``.item()``, stream/device syncs, blocking ``cudaMemcpy``) and host↔device
    copies whose launch lies inside a ProfilerStep."""
    r, tb = c.report, c.session.tables
    if r.steps.empty:
        return None
    names = np.array(tb.name.tolist(), dtype=object)
    cats = np.array(tb.category.tolist(), dtype=object)
    idx = np.flatnonzero(np.isin(names, list(_SYNC_CALLS) + list(_SYNC_OPS)) & (cats != "gpu_user_annotation"))
    starts = r.steps["start_ns"].to_numpy(dtype=np.int64)
    ends = starts + np.round(r.steps["cpu_dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64)
    inside = np.zeros(len(idx), dtype=bool)
    for a, b in zip(starts, ends):
        inside |= (tb.ts[idx] >= a) & (tb.ts[idx] + tb.dur[idx] <= b)
    idx = idx[inside]
    lat = r.launch_latency
    copies = lat[lat["step"].notna() & lat["gpu_name"].astype(str).str.contains("HtoD|DtoH", na=False)] \
        if not lat.empty else lat
    copy_kinds = {k: int(copies["gpu_name"].astype(str).str.contains(k).sum()) for k in ("HtoD", "DtoH")}
    if len(idx) == 0 and not any(copy_kinds.values()):
        return None
    n = _steps(r)
    calls = [i for i in idx if names[i] in _SYNC_CALLS]
    blocked = float(tb.dur[calls].sum()) / 1000 / n if calls else 0.0
    parts = []
    if len(idx):
        what = ", ".join(f"{x} ×{(names[idx] == x).sum() / n:g}" for x in dict.fromkeys(names[idx].tolist()))
        parts.append(f"the CPU waits for the GPU: {what} per step"
                     + (f", {_fmt_us(blocked)} blocked in synchronising calls per step" if calls else ""))
    for k, count in copy_kinds.items():
        if count:
            parts.append(f"{count / n:g} {'host-to-device' if k == 'HtoD' else 'device-to-host'} "
                         f"cop{'y' if count == n else 'ies'} per step")
    text = ("Inside each step: " + "; ".join(parts) + ". A synchronising call returns only when the GPU has caught "
            "up, so nothing further is queued meanwhile and the GPU runs dry after it; a copy from pageable host "
            "memory synchronises too.")
    fix = ("Keep values on the GPU inside the step: avoid .item(), .cpu(), .tolist(), printing tensors and "
           "data-dependent shapes (nonzero, boolean masks) in the hot loop; log every N steps. Move inputs to the "
           "device once, or with tensor.pin_memory() and .to(device, non_blocking=True) ahead of the step; bring a "
           "value back with a non_blocking copy and an event when it must come back.")
    return Diagnosis("sync_in_step", "Host-device synchronisation or copies inside the step", text, fix,
                     blocked if calls else None, "time the CPU spent in synchronising calls per step (measured)",
                     {"slice_ids": [int(i) for i in idx][:50] + copies["launch_id"].astype(int).tolist()[:50],
                      "blocked_us_per_step": blocked, "copies_in_steps": copy_kinds})
