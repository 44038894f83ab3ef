"""``memory_fragmentation``: the caching allocator holds far more than the tensors use, even at the peak: its cache
is split into blocks the live tensors cannot reuse (fragmentation), or it still holds what an earlier, higher peak
needed.

Read from ``analyses.memory.memory_peaks`` on a device with reserved figures (a caching allocator: the CPU writes
none): the rule speaks when the reserved memory at the peak is at least :data:`RESERVED_OVER_ALLOCATED_AT` times the
peak and the gap at least :data:`MIN_GAP_BYTES`. A run's ``peak_device_memory_bytes`` (meta.json,
``torch.cuda.max_memory_allocated()``, one device's) tells the two causes apart where it is known and the trace's
memory is that one device's (a trace whose events name several GPUs leaves it unknown). A run whose steps replay CUDA
graphs (``base._graph_replays``) is left to ``cudagraph_pools``: there the gap holds the graphs' private pools, which
are neither fragmentation nor an earlier peak (an MLP training step under reduce-overhead on an H200: 922 MiB
reserved against a 464 MiB peak in the window and a 632 MiB process peak)."""
from __future__ import annotations

from ....units import format_share, human_bytes
from ..base import Diagnosis, _Ctx, _graph_replays

RESERVED_OVER_ALLOCATED_AT = 1.5
"""Reserved at the peak, as a multiple of the peak, from which the gap is worth naming: at 1.5 a third of what the
allocator holds serves no tensor even when the tensors need the most."""
MIN_GAP_BYTES = 256 << 20
"""The least gap worth naming (256 MiB): the allocator rounds blocks up (to 512 B, 2 MiB segments, 20 MiB for large
ones), so a few MiB of gap is its normal slack."""
EARLIER_PEAK_COVERS = 0.9
"""Where the process's own peak (``max_memory_allocated``) reaches this share of the reserved memory, the reserve is
what that earlier peak needed, not fragmentation."""


def _rule_memory_fragmentation(c: _Ctx) -> Diagnosis | None:
    m = c.report.memory
    if not m.has_events or _graph_replays(c.report):
        return None
    hits = [pk for pk in m.peaks.to_dict(orient="records")
            if pk["reserved_at_peak_bytes"] == pk["reserved_at_peak_bytes"] and pk["peak_allocated_bytes"] > 0
            and pk["basis"] == "total"
            and pk["reserved_at_peak_bytes"] >= RESERVED_OVER_ALLOCATED_AT * pk["peak_allocated_bytes"]
            and pk["gap_at_peak_bytes"] >= MIN_GAP_BYTES]
    if not hits:
        return None
    pk = max(hits, key=lambda p: p["gap_at_peak_bytes"])
    dev, res, peak = pk["device"], pk["reserved_at_peak_bytes"], pk["peak_allocated_bytes"]
    gap = pk["gap_at_peak_bytes"]
    # (max_memory_allocated is one device's, the process's current one: it speaks for this device only where the
    # trace's memory events name no other device with a caching allocator)
    cached = [p["device"] for p in m.peaks.to_dict(orient="records")
              if p["reserved_at_peak_bytes"] == p["reserved_at_peak_bytes"]]
    process_peak = c.process_peak_bytes if cached == [dev] else None
    text = (f"{dev}'s allocator holds {human_bytes(res)} at the peak, where the tensors use "
            f"{human_bytes(peak)}: {human_bytes(gap)} ({format_share(gap / res)} of the reserve) serves no tensor "
            "even then"
            f" (over the window the gap is {human_bytes(pk['gap_median_bytes'])} at the median, "
            f"{human_bytes(pk['gap_max_bytes'])} at most).")
    earlier = process_peak is not None and process_peak >= EARLIER_PEAK_COVERS * res
    if earlier:
        text += (f" The process peaked earlier at {human_bytes(process_peak)} (max_memory_allocated, outside the "
                 "profiled window): the reserve is what that peak needed, kept cached.")
    else:
        text += (" Either the cache is fragmented (blocks split for tensors of changing sizes that later tensors "
                 "cannot reuse), or an earlier, higher peak outside the window needed it"
                 + (" (the trace alone cannot tell: torch.cuda.max_memory_allocated() of the run would)."
                    if process_peak is None else "; the process's own peak does not reach it, so fragmentation."))
    fix = ("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow in place, so tensors whose sizes "
           "change, such as sequences of varying length, stop splitting the cache), before CUDA starts; "
           "torch.cuda.memory_stats()['inactive_split_bytes.all.current'] measures the fragmentation. Where an "
           "earlier phase (loading, a warm-up) made the peak, torch.cuda.empty_cache() after it returns the cache.")
    ev = {"device": dev, "reserved_at_peak_bytes": res, "peak_allocated_bytes": int(peak), "gap_at_peak_bytes": gap,
          "gap_median_bytes": pk["gap_median_bytes"], "gap_max_bytes": pk["gap_max_bytes"],
          "process_peak_bytes": process_peak, "earlier_peak": earlier, "threshold": RESERVED_OVER_ALLOCATED_AT,
          "min_gap_bytes": MIN_GAP_BYTES}
    return Diagnosis("memory_fragmentation", "Reserved memory far above allocated", text, fix, None,
                     "memory, not time: the gap is what the allocator could give back", ev)
