"""A run's memory by category (``memory_categories.json``): what torch's own memory profiler says each live byte was.

torch's memory profiler (``torch.profiler._memory_profiler.MemoryProfile``, what the deprecated
``profile.export_memory_timeline`` draws) follows every tensor of a profiled cycle through the ops that made, changed
and freed it, and puts each into a category: ``PARAMETER``, ``OPTIMIZER_STATE``, ``INPUT``, ``TEMPORARY``,
``ACTIVATION``, ``GRADIENT``, ``AUTOGRAD_DETAIL``, or ``unknown`` (memory it saw allocated but could not tie to a
tensor: a workspace, an allocator block of a fused kernel).

What it needs: the run profiled with ``profile_memory``, ``record_shapes`` *and* ``with_stack`` (torch refuses
otherwise: the stacks' Python tracer is how it finds the ``nn.Module`` parameters and the optimizer's state, the
shapes how it follows tensors through ops). The worker then runs it once per schedule cycle, in the profiling
process, on the cycle's results (``on_trace_ready``): it cannot be computed afterwards from ``trace.json``, which
does not hold the data flow. What it costs: it is pure Python over every op, allocation and Python call of the
cycle, a little more than exporting the trace: on a loaded 2-core machine 0.4 s for 3 steps of a small MLP's Adam
training step (700 ops, 340 allocations) and 2.0 s for 12 steps (2,700 ops), against 0.3 s and 1.6 s of export;
the worker records it as the ``memory_categories_s`` timing, apart from ``profile_s``. The knobs cost more than the
analysis: ``with_stack`` and ``profile_memory`` add CPU time to every op (the ``profiler_overhead`` rule says so), so
the timings of such a run are not those of a plain one.

Times are on the trace's own clock: torch stamps its events in ns since the Unix epoch, Kineto writes ``ts`` in µs
after ``baseTimeNanoseconds`` (a top-level field of the trace); ``start_ns = t - baseTimeNanoseconds`` then equals,
to the ns, the ``[memory]`` event of the same allocation (``ts`` × 1000), so this frame lines up with the trace's
slices and ``[memory]`` events. Memory alive before the cycle began is placed at the cycle's first event, as torch
does. Each row is the bytes of every category after all events at one instant; several cycles (``repeat``) follow
each other, each from its own start.

If torch's memory profiler fails (its private API changed, an op it cannot follow), the run still lands without the
file and ``meta.json`` says why (``memory_categories.why``): :func:`memory_categories_note`.

The file is read by :func:`memory_categories` through the store's one reader (a regular file of at most
:data:`MAX_BYTES`) and checked against its schema; a file that fails raises :class:`RunStoreError` naming what is
wrong. No torch here: the worker (``profiling_core.run.loop``) turns torch's timeline into plain events and
:func:`coalesce` writes the document.
"""
from __future__ import annotations

import re
from typing import Iterable, Optional

import msgspec

from ..errors import RunStoreError
from .files import read_json_object
from .runs import MEMORY_CATEGORIES_FILE  # named once, with the other files of a run

__all__ = ["MEMORY_CATEGORIES_FILE", "MEMORY_CATEGORIES", "MEMORY_CATEGORY_KNOBS", "MEMORY_CATEGORIES_COLUMNS",
           "memory_categories", "memory_categories_note", "memory_categories_needs", "coalesce", "document"]

MEMORY_CATEGORIES = ("PARAMETER", "OPTIMIZER_STATE", "INPUT", "TEMPORARY", "ACTIVATION", "GRADIENT",
                     "AUTOGRAD_DETAIL", "unknown")
"""The categories, in torch's stacking order (``unknown``: memory torch could not tie to a tensor)."""
MEMORY_CATEGORY_KNOBS = ("profile_memory", "record_shapes", "with_stack")
"""The profiler options torch's memory profiler needs, all on."""
MEMORY_CATEGORIES_COLUMNS = ["device", "start_ns", "category", "bytes"]
FORMAT = 1
MAX_BYTES = 64 * 2**20
"""The largest memory_categories.json read (a row of 8 numbers per instant: some MiB for a large run)."""
MAX_DEPTH = 8
DEVICE_RE = re.compile(r"[a-z][a-z0-9_]{0,31}(:[0-9]{1,4})?")
"""A device as torch writes it: ``cpu``, ``cuda:0``."""


def memory_categories_needs(config) -> Optional[str]:
    """Why a run of ``config`` (an ExperimentConfig, or None for an imported trace) gets no memory categories, or None
    when it has every knob torch's memory profiler needs."""
    if config is None:
        return ("an imported trace has no memory categories: torch computes them in the profiling process, from data "
                "the trace does not keep")
    off = [k for k in MEMORY_CATEGORY_KNOBS if not getattr(config, k)]
    if not off:
        return None
    return (f"memory categories need {', '.join(MEMORY_CATEGORY_KNOBS)} all on; this run had {', '.join(off)} off "
            "(tick profile_memory and with_stack in the form's profiler options)")


def coalesce(events: Iterable[tuple[int, str, Optional[str], int]], base_ns: int) -> dict[str, dict]:
    """Rows per device from torch's memory events of one cycle.

    events: ``(t, device, category, delta_bytes)`` in time order, ``t`` in ns since the Unix epoch (torch's clock)
    or -1 for memory alive before the cycle began, ``category`` one of :data:`MEMORY_CATEGORIES` (None: ``unknown``).
    Returns ``{device: {"start_ns": [...], "bytes": [[bytes per category], ...]}}``: one row per distinct instant,
    the bytes of each category after every event at it, ``start_ns`` on the trace clock (``t - base_ns``); memory
    alive before the cycle counts from the device's first instant."""
    index = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
    per: dict[str, list] = {}
    for t, device, category, delta in events:
        per.setdefault(str(device), []).append((int(t), index[category or "unknown"], int(delta)))
    out = {}
    for device, evs in per.items():
        stamps = [t for t, _, _ in evs if t >= 0]
        if not stamps:
            continue
        first = min(stamps)
        evs.sort(key=lambda e: first if e[0] < 0 else e[0])  # stable: torch's order within an instant
        times: list[int] = []
        rows: list[list[int]] = []
        state = [0] * len(MEMORY_CATEGORIES)
        for t, i, delta in evs:
            t = first if t < 0 else t
            if times and times[-1] == t - base_ns:
                rows[-1][i] += delta
            else:
                state = (rows[-1] if rows else state).copy()
                state[i] += delta
                times.append(t - base_ns)
                rows.append(state)
        out[device] = {"start_ns": times, "bytes": rows}
    return out


def document(cycles: list[dict[str, dict]], source: str) -> dict:
    """The memory_categories.json document of a run: every cycle's :func:`coalesce` rows, one after the other, per
    device."""
    devices: dict[str, dict] = {}
    for cycle in cycles:
        for device, rows in cycle.items():
            d = devices.setdefault(device, {"start_ns": [], "bytes": []})
            d["start_ns"].extend(rows["start_ns"])
            d["bytes"].extend(rows["bytes"])
    return {"format": FORMAT, "source": source, "clock": "trace", "categories": list(MEMORY_CATEGORIES),
            "devices": devices}


class _Device(msgspec.Struct, forbid_unknown_fields=True):
    start_ns: list[int]
    bytes: list[list[int]]


class _Document(msgspec.Struct):
    format: int
    categories: list[str]
    devices: dict[str, _Device]
    clock: str = "trace"
    source: str = ""


def _check(doc: _Document) -> Optional[str]:
    if doc.format != FORMAT:
        return f"format must be {FORMAT}, got {doc.format!r}"
    if doc.clock != "trace":
        return f"clock must be 'trace', got {doc.clock[:40]!r}"
    if tuple(doc.categories) != MEMORY_CATEGORIES:
        return f"categories must be {list(MEMORY_CATEGORIES)}, got {[c[:40] for c in doc.categories[:12]]!r}"
    for device, d in doc.devices.items():
        if not DEVICE_RE.fullmatch(device):
            return f"a device is named like cpu or cuda:0, got {device[:40]!r}"
        if len(d.start_ns) != len(d.bytes):
            return f"device {device}: {len(d.start_ns)} times but {len(d.bytes)} rows of bytes"
        bad = next((k for k, r in enumerate(d.bytes) if len(r) != len(MEMORY_CATEGORIES)), None)
        if bad is not None:
            return (f"device {device}: row {bad} has {len(d.bytes[bad])} numbers, one per category "
                    f"({len(MEMORY_CATEGORIES)}) expected")
        if any(b < a for a, b in zip(d.start_ns, d.start_ns[1:])):
            return f"device {device}: start_ns must not decrease"
    return None


def memory_categories(run):
    """The memory of a run by category over time, from its ``memory_categories.json``: a DataFrame ``device``
    (``cpu``, ``cuda:0``), ``start_ns`` (int, the trace clock), ``category`` (one of :data:`MEMORY_CATEGORIES`),
    ``bytes`` (int: that category's live bytes from this instant to the next), one row per instant and category,
    in time order per device. Empty (same columns) when the run has no such file (:func:`memory_categories_note`
    says why). Raises :class:`RunStoreError` when the file is there but cannot be used (not a regular file, over
    :data:`MAX_BYTES`, not JSON, not of the schema), naming what is wrong."""
    import pandas as pd
    path = run.run_dir / MEMORY_CATEGORIES_FILE
    if not path.exists() and not path.is_symlink():
        return memory_categories_empty()
    obj, why = read_json_object(path, MEMORY_CATEGORIES_FILE, MAX_BYTES, MAX_DEPTH)
    if why is None:
        try:
            doc = msgspec.convert(obj, _Document)
            why = _check(doc)
        except msgspec.ValidationError as exc:
            why = str(exc)
        if why is not None:
            why = f"{MEMORY_CATEGORIES_FILE}: {why}"
    if why is not None:  # read_json_object's reasons name the file already
        raise RunStoreError(f"run {run.run_id}: {why}")
    frames = []
    n = len(MEMORY_CATEGORIES)
    for device, d in doc.devices.items():
        k = len(d.start_ns)
        flat = [b for row in d.bytes for b in row]
        frames.append(pd.DataFrame({"device": [device] * (k * n),
                                    "start_ns": pd.Series([t for t in d.start_ns for _ in range(n)], dtype="int64"),
                                    "category": list(MEMORY_CATEGORIES) * k,
                                    "bytes": pd.Series(flat, dtype="int64")}))
    if not frames:
        return memory_categories_empty()
    return pd.concat(frames, ignore_index=True)[MEMORY_CATEGORIES_COLUMNS]


def memory_categories_empty():
    """The empty frame of :func:`memory_categories` (its columns and dtypes)."""
    import pandas as pd
    return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("start_ns", "bytes") else object)
                         for c in MEMORY_CATEGORIES_COLUMNS})


def memory_categories_note(run) -> Optional[str]:
    """Why ``run`` has no memory categories (one sentence), or None when its ``memory_categories.json`` is there."""
    if (run.run_dir / MEMORY_CATEGORIES_FILE).exists():
        return None
    kept = run.meta.get("memory_categories")
    if isinstance(kept, dict) and isinstance(kept.get("why"), str) and kept["why"]:
        return kept["why"][:2000]
    why = memory_categories_needs(run.config)
    if why is not None:
        return why
    return "this run has no memory_categories.json (it was recorded before the app kept them)"
