"""Second pass of the loader: the collected slices and flow events -> slice ids, depth, parent, tracks, flows.

The rules (docs/SQL.md, "Rules" and "How flows bind"; trace_processor's, for a Chrome JSON trace):

- Slice ids follow (ts, longer first, file order). Flow events come after the slices of their ts, in (ts, file order).
- Each thread has lanes, stacks of open slices popped lazily: when a slice arrives on its thread, each lane in turn
  drops the slices it closes (:func:`_closes`: those that ended before it starts, or at its start unless both are
  instants), and the slice goes on the first lane that is then empty or whose top encloses it; when none does, on a
  new lane (:func:`_lane_for`). Lane 0 is the thread's track (``thread_execution``), each further lane a spill track
  (``thread_overlapping_slice``). depth = the lane's stack height below the slice, parent = its top.
- Global and process-scoped instants go on one track each (``legacy_chrome_global_instants`` /
  ``legacy_chrome_process_instants``), depth 0. Tracks are numbered in the order their first slice arrives.
- An ``s``, ``t`` or ``f`` with bp=e binds to the top of its thread's lane 0 as the last slice that arrived there left
  it (however stale; none: ``flow_no_enclosing_slice``); an ``f`` without bp=e binds to its thread's next slice
  (none: ``flow_end_without_next_slice``). Per flow key (id, cat, name), in that order: the first ``s`` opens the flow
  (a later one is ``flow_duplicate_id``); a ``t`` or ``f`` links the slice of the key's last opener (that ``s`` or a
  later ``t``) to its own (before any: ``flow_end_without_start``), and a ``t`` becomes the opener. Trace ids number
  the keys in the order they were opened. (``_model.build`` orients each link by start time.)

Threads do not interact: :func:`_place` places one thread's slices, lane 0 a window of slices at a time with arrays
(:func:`_nest_window`), and a slice that does not fit lane 0 (and, where windows keep stopping early, the slices
after it) one at a time by :func:`_lane_for`. :func:`_bind_flows` then applies the flow rules with arrays.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ._collect import Collector

_SPILL_TRACK = "thread_overlapping_slice"  # trace_processor's type of a thread's tracks for overlapping slices
_S, _T, _F, _WAIT = 0, 1, 2, 3  # flow kinds (as _collect's S, T, F); _WAIT: an 'f' without bp=e
_MIN_WINDOW = 32  # a thread with fewer slices, or a window that placed fewer before a spill: place one at a time
_STEPS = 64       # slices placed one at a time after such a window (doubled while windows keep stopping early)


@dataclass
class Nested:
    """The second pass's result: slice columns in slice id order, the tracks, the flow links."""

    ts: np.ndarray
    dur: np.ndarray
    track_id: np.ndarray
    depth: np.ndarray
    parent_id: np.ndarray  # -1: none
    order: np.ndarray      # the collector's slice index of each slice id
    tracks: list[tuple]    # per track id (key, type); key ("thread", thread index, lane), ("process", pid), ("global",)
    flow_out: np.ndarray   # per link, slice ids (in flow event order; not oriented yet) and trace id
    flow_in: np.ndarray
    flow_trace_id: np.ndarray


def nest(c: Collector) -> Nested:
    """Apply the rules above to the collector's slices and flow events (skips and spill tracks go to c.stats).

    Per thread, :func:`_place` gives each slice's lane, depth and parent, each of its flow events' slice (the top of
    lane 0 once the slices before it arrived) and the first slice of each lane; tracks are then numbered by those
    first slices. :func:`_bind_flows` links the flow events (an 'f' without bp=e at the place of the slice it waits
    for: the thread's next one).
    """
    stats = c.stats
    s_ts, s_dur = _np(c.s_ts), _np(c.s_dur)
    ns, nf = len(s_ts), len(c.f_ts)
    order = _slice_order(s_ts, s_dur, _np(c.s_idx))
    o_ts, o_dur = s_ts[order], s_dur[order]
    o_end = o_ts + o_dur
    o_th = _np(c.s_th)[order]
    f_ts = _np(c.f_ts)
    f_k = np.argsort(f_ts, kind="stable")             # flow event indexes in (ts, file order)
    f_nsb = np.searchsorted(o_ts, f_ts[f_k], "right")  # per flow event: how many slices come before it
    f_th = _np(c.f_th)[f_k]
    depth = np.zeros(ns, np.int64)
    parent = np.full(ns, -1, np.int64)
    lane = np.zeros(ns, np.int64)
    f_top = np.full(nf, -1, np.int64)   # the slice a flow event binds to (-1: none)
    f_next = np.full(nf, -1, np.int64)  # the next slice on its thread (-1: none)
    flows_of = dict(_groups(f_th)) if nf else {}
    made = []    # (slice id, track key, type): each track, with the slice that first lands on it
    groups = []  # (slice ids, track keys of its lanes)
    for t, g in (_groups(o_th) if ns else ()):
        if t < 0:
            key = ("global",) if t == -1 else ("process", -2 - t)
            made.append((int(g[0]), key, "legacy_chrome_global_instants" if t == -1
                         else "legacy_chrome_process_instants"))
            groups.append((g, [key]))
            continue
        fl = flows_of.pop(t, None)
        fn = f_nsb[fl] if fl is not None else f_nsb[:0]
        lanes, d, p, tops, firsts = _place(g, o_ts[g], o_end[g], fn)
        lane[g] = lanes
        depth[g] = d
        parent[g] = p
        keys = [("thread", t, li) for li in range(len(firsts))]
        made.append((int(g[0]), keys[0], "thread_execution"))
        made.extend((sid, key, _SPILL_TRACK) for sid, key in zip(firsts[1:], keys[1:]))
        stats.spill_tracks += len(firsts) - 1
        groups.append((g, keys))
        if fl is not None:
            f_top[fl] = tops
            k = np.searchsorted(g, fn)
            f_next[fl] = np.where(k < len(g), g[np.minimum(k, len(g) - 1)], -1)
    made.sort(key=itemgetter(0))
    tracks = [(key, kind) for _sid, key, kind in made]
    track_ids = {key: i for i, (key, _kind) in enumerate(tracks)}
    track = np.empty(ns, np.int64)
    for g, keys in groups:
        ids = [track_ids[key] for key in keys]
        track[g] = ids[0] if len(ids) == 1 else np.array(ids, np.int64)[lane[g]]
    if nf:
        key = _key_numbers(np.frombuffer(c.f_id, dtype=np.uint64)[f_k], _np(c.f_text)[f_k])
        kind = np.frombuffer(c.f_kind, dtype=np.int8)[f_k]
        enc = np.frombuffer(c.f_enc, dtype=np.int8)[f_k].astype(bool)
        out, into, trace = _bind_flows(stats, kind, enc, key, f_nsb, f_top, f_next)
    else:
        out = into = trace = np.zeros(0, np.int64)
    return Nested(ts=o_ts, dur=o_dur, track_id=track, depth=depth, parent_id=parent, order=order, tracks=tracks,
                  flow_out=out, flow_in=into, flow_trace_id=trace)


def _place(sids: np.ndarray, starts: np.ndarray, ends: np.ndarray, f_nsb: np.ndarray):
    """The rules for the slices of one thread (ids ``sids``, increasing; ``starts``, ``ends``) and its flow events
    (``f_nsb``: how many slices, of all threads, come before each; non-decreasing).

    Returns per slice its lane, depth and parent id; per flow event the slice it binds to (-1: none); and the id of
    the first slice placed on each lane.

    Lane 0 goes a window of slices at a time through :func:`_nest_window` (the first window: the whole thread), which
    places the slices up to the first that does not fit lane 0. That slice is placed by :func:`_lane_for` (its
    arrival pops lane 0, then it goes on lanes 1, 2, ...); where a window placed few slices before it (and on a small
    thread), the following slices are placed that way too, one at a time, for a while: arrays pay only for long
    windows. Lanes 1+ change only when a slice does not fit lane 0 (the rule looks at them only then), and lane 0 does
    not depend on them. A flow event binds to the top of lane 0: right after a lane-0 slice x, x itself; right after
    a spilled slice, lane 0's top once that slice's arrival popped it.
    """
    n = len(sids)
    windows = n >= _MIN_WINDOW  # (else every slice is placed one at a time: lists are cheaper)
    if windows:
        depth = np.zeros(n, np.int64)
        parent = np.full(n, -1, np.int64)   # thread positions while placing
        lane = np.zeros(n, np.int64)
    else:
        depth, parent, lane = [0] * n, [-1] * n, [0] * n
    lanes: list[list] = [[]]            # per lane, its stack (thread positions, bottom to top)
    firsts = [int(sids[0])]
    spilled: list[int] = []             # thread positions of the slices placed on lanes 1+
    spill_top: list[int] = []           # the flow top (lane 0's top) right after each of those
    s_list = e_list = None              # starts, ends as lists (for one slice at a time)
    pos, size, steps = 0, n, _STEPS
    step_to = 0 if windows else n  # slices before this are placed one at a time
    while pos < n:
        if pos < step_to:
            if s_list is None:
                s_list, e_list = starts.tolist(), ends.tolist()
            for pos in range(pos, step_to):
                li, st, new = _lane_for(lanes, s_list, e_list, pos)
                if new:
                    firsts.append(int(sids[pos]))
                if st:
                    depth[pos] = len(st)
                    parent[pos] = st[-1]
                st.append(pos)
                if li:
                    lane[pos] = li
                    spilled.append(pos)
                    spill_top.append(lanes[0][-1] if lanes[0] else -1)
            pos = step_to
            continue
        end = min(n, pos + size)
        at = np.array(lanes[0], np.int64)
        v, d, p = _nest_window(starts[pos:end], ends[pos:end], starts[at], ends[at], at, pos)
        depth[pos:pos + v] = d[:v]
        parent[pos:pos + v] = p[:v]
        if v:
            lanes[0] = _chain(parent, pos + v - 1)
        pos += v
        if pos == end:
            size *= 2
            steps = _STEPS
            continue
        # slice pos does not fit lane 0
        if v < _MIN_WINDOW:
            step_to = min(n, pos + steps)
            steps *= 2
        else:
            step_to = pos + 1
        size = max(256, 2 * v)
    if windows:
        parent = np.where(parent >= 0, sids[np.maximum(parent, 0)], -1)
    else:
        ids = sids.tolist()
        parent = [ids[i] if i >= 0 else -1 for i in parent]
    return lane, depth, parent, _flow_tops(sids, f_nsb, spilled, spill_top), firsts


def _flow_tops(sids: np.ndarray, f_nsb: np.ndarray, spilled: list, spill_top: list) -> np.ndarray:
    """The slice (id; -1: none) each flow event of a thread binds to: the top of lane 0 right after the thread's last
    slice before it (see _place; ``spilled``, ``spill_top``: the spilled slices' positions and lane 0's top after
    each)."""
    if not len(f_nsb):
        return f_nsb
    last = np.searchsorted(sids, f_nsb) - 1
    if spilled:
        sp = np.array(spilled, np.int64)
        k = np.searchsorted(sp, last, side="right")  # spills at or before it
        ks = np.maximum(k - 1, 0)
        tops = last.copy()
        after = (k > 0) & (sp[ks] == last)
        tops[after] = np.array(spill_top, np.int64)[ks[after]]
        tops[last < 0] = -1
    else:
        tops = last
    return np.where(tops >= 0, sids[np.maximum(tops, 0)], -1)


def _lane_for(lanes: list, starts: list, ends: list, i: int) -> tuple[int, list, bool]:
    """The lane rule for slice i (``starts[i]``, ``ends[i]``) arriving on a thread with these lanes (stacks of slice
    positions): each lane in turn first drops the slices it closes (:func:`_closes`); the slice goes on the first lane
    that is then empty or whose top encloses it (its end <= that top's end); when none does, on a new lane (appended).
    Returns (lane index, that lane's stack, whether the lane is new); the caller pushes the slice."""
    s, e = starts[i], ends[i]
    li = 0
    for st in lanes:
        while st and _closes(starts[st[-1]], ends[st[-1]], s, e):
            st.pop()
        if not st or e <= ends[st[-1]]:
            return li, st, False
        li += 1
    st = []
    lanes.append(st)
    return li, st, True


def _bind_flows(stats, kind: np.ndarray, enc: np.ndarray, key: np.ndarray, f_nsb: np.ndarray, f_top: np.ndarray,
                f_next: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The flow rules (module docstring) with arrays: the links (slice out, slice in, trace id, in the order they are
    made) of the flow events (kind, bp == "e", key number; in (ts, file order)) whose slices are known: ``f_top``
    (for an 'f' without bp=e: ``f_next``; it takes effect when that slice arrives, i.e. after the flow events before
    that slice and before those after it).

    Per flow key: the first 's' with a slice opens the flow (later ones are duplicates); a 't' or 'f' before it has
    no start; after it, each 't'/'f' links the slice of the last opener (that 's' or a later 't') to its own, and a
    't' becomes the opener. Skip reasons are counted, and first counted, in the order the events take effect.
    """
    nk = int(key.max()) + 1
    kind = np.where((kind == _F) & ~enc, _WAIT, kind)
    waits = (kind == _WAIT) & (f_next < 0)  # never bound
    ops = np.flatnonzero(~waits)
    ops = ops[np.argsort(np.where(kind == _WAIT, 2 * f_next + 1, 2 * f_nsb)[ops], kind="stable")]
    code = key[ops]
    kind = kind[ops]
    sid = np.where(kind == _WAIT, f_next[ops], f_top[ops])
    m = len(ops)
    pos = np.arange(m)
    lost = (kind != _WAIT) & (sid < 0)            # flow_no_enclosing_slice
    opens = ~lost & (kind == _S)
    first = np.full(nk, m, np.int64)              # per key: the op that opened it (m: none)
    uk, at = np.unique(code[opens], return_index=True)
    first[uk] = pos[opens][at]
    opener = first[code]
    dup = opens & (pos > opener)                  # flow_duplicate_id
    ends = ~lost & (kind != _S)
    linked = ends & (pos > opener)
    unstarted = ends & ~linked                    # flow_end_without_start
    # the slice each linked op links from: that of the key's last opener before it
    setter = (opens & (pos == opener)) | (linked & (kind == _T))
    by = np.argsort(code, kind="stable")           # ops of a key together, in order
    last = np.maximum.accumulate(np.where(setter[by], pos, -1))  # (a linked op's key has one before it)
    src = np.empty(m, np.int64)
    src[by] = by[np.concatenate(([0], last[:-1]))[:m]]
    trace = np.zeros(nk, np.int64)
    trace[code[pos[opens & (pos == opener)]]] = np.arange(len(uk))
    reasons = [(int(mask.argmax()), reason, int(np.count_nonzero(mask))) for mask, reason in (
        (lost, "flow_no_enclosing_slice"), (dup, "flow_duplicate_id"), (unstarted, "flow_end_without_start"))
        if mask.any()]
    for _at, reason, n in sorted(reasons):
        stats.skip(reason, n)
    n = int(np.count_nonzero(waits))
    if n:
        stats.skip("flow_end_without_next_slice", n)
    return sid[src[linked]].astype(np.int64), sid[linked].astype(np.int64), trace[code[linked]]


def _np(a: array) -> np.ndarray:
    """An int64 array column as numpy (a view)."""
    return np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, dtype=np.int64)



def _key_numbers(fid: np.ndarray, text: np.ndarray) -> np.ndarray:
    """A number per distinct (fid, text) pair (0, 1, ...; any order) for each flow event."""
    if not len(fid):
        return np.zeros(0, np.int64)
    bits = int(text.max()).bit_length()
    if int(fid.max()).bit_length() + bits <= 63:  # the pair as one int64
        return np.unique((fid.astype(np.int64) << bits) | text, return_inverse=True)[1].astype(np.int64)
    order = np.lexsort((text, fid))
    f, t = fid[order], text[order]
    new = np.concatenate(([False], (f[1:] != f[:-1]) | (t[1:] != t[:-1])))
    out = np.empty(len(fid), np.int64)
    out[order] = np.cumsum(new)
    return out


def _slice_order(ts: np.ndarray, dur: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Slice indexes sorted by (ts, longer first, file index idx)."""
    if len(ts) < 2:
        return np.arange(len(ts))
    if (idx[1:] > idx[:-1]).all():  # in file order already (no B/E slices): a stable sort keeps that order for ties
        t0 = int(ts.min())
        bits = int(dur.max()).bit_length()
        if (int(ts.max()) - t0).bit_length() + bits <= 62:  # (ts, -dur) as one int64: one (fast, stable) argsort
            return np.argsort(((ts - t0) << bits) | (int(dur.max()) - dur), kind="stable")
        return np.lexsort((-dur, ts))
    return np.lexsort((idx, -dur, ts))


def _stable_argsort(a: np.ndarray) -> np.ndarray:
    """np.argsort(a, kind="stable"), faster for small values (numpy radix-sorts 16-bit integers)."""
    if len(a) and -(1 << 15) <= a.min() and a.max() < (1 << 15):
        return np.argsort(a.astype(np.int16), kind="stable")
    return np.argsort(a, kind="stable")


def _groups(keys: np.ndarray):
    """(key, positions of keys holding it (increasing)) for each distinct key, in increasing key order."""
    by = _stable_argsort(keys)
    k = keys[by]
    cut = np.flatnonzero(k[1:] != k[:-1]) + 1
    starts = [0, *cut.tolist()]
    ends = [*cut.tolist(), len(k)]
    return [(int(k[a]), by[a:b]) for a, b in zip(starts, ends)]


def _nest_window(starts: np.ndarray, ends: np.ndarray, below_start: np.ndarray, below_end: np.ndarray,
                 below_at: np.ndarray, base: int):
    """Lane 0 of one thread for a window of its slices: (v, depth, parent) where the first v slices all go on lane 0
    (v = len(starts): all of them; else slice v does not fit it) and depth, parent (thread positions, -1 for none) are
    exact for those v.

    Slices in slice id order (starts non-decreasing); ``base``: the thread position of the first. ``below_end``,
    ``below_at``: lane 0's stack before it (bottom to top: ends non-increasing; thread positions), maybe partly ended.

    The lane rule (_lane_for) pops a lane's stack only when a slice arrives, then pushes it on the first lane where it
    fits.
    If no slice of the window has spilled before slice i, lane 0's stack once popped for i holds exactly the earlier
    lane-0 slices that end after i starts (stacked slices nest, so the ones popped are those that ended): the alive
    part of the stack below (a prefix of it) and the window's slices j < i with ends[j] > starts[i]. So depth[i] is
    their count; the top (parent[i]) is, if a window slice is alive, the last earlier window slice of depth[i] - 1
    (every slice after it and before i sits above it, deeper), else the top of the alive part below. Slice i fits if
    it ends within that top. Checking that for every i, with depth and parent from those formulas, proves (by
    induction over i) that the first v fit and that the formulas are the rule's values for them.
    """
    w = len(starts)
    # window slice j is popped when the first slice after it that it does not enclose by _closes arrives: one that
    # starts at or after its end; for an instant (dur 0), one that starts after it (the later slices at its ts are
    # instants too: longer ones come first)
    popped = np.maximum(np.where(ends > starts, np.searchsorted(starts, ends, side="left"),
                                 np.searchsorted(starts, ends, side="right")), np.arange(1, w + 1))
    alive = np.arange(w) - np.cumsum(np.bincount(popped, minlength=w + 1))[:w]
    if len(below_end):
        # the stack below that slice i finds alive: the slices ending after it starts, and the instants ending at its
        # start (only an instant can start there then; a slice ending there is closed unless it is an instant)
        rev = below_end[::-1]
        gt = len(below_end) - np.searchsorted(rev, starts, side="right")
        ge = len(below_end) - np.searchsorted(rev, starts, side="left")
        at_end = np.minimum(gt, len(below_end) - 1)
        below = np.where((ge > gt) & (below_start[at_end] == below_end[at_end]), ge, gt)
    else:
        below = np.zeros(w, np.int64)
    depth = below + alive
    parent = np.full(w, -1, np.int64)
    ok = np.ones(w, bool)
    by_depth = _stable_argsort(depth)           # positions by (depth, position)
    child = by_depth[alive[by_depth] > 0]       # (in that order, so the queries below increase)
    if len(child):
        key = depth[by_depth] * (w + 1) + by_depth  # increasing
        at = np.searchsorted(key, (depth[child] - 1) * (w + 1) + child) - 1
        p = by_depth[np.maximum(at, 0)]
        open_at = (ends[p] > starts[child]) | ((ends[p] == starts[child]) & (starts[p] == ends[p])
                                               & (starts[child] == ends[child]))  # not closed by the child
        ok[child] = ((at >= 0) & (depth[p] == depth[child] - 1) & (p < child) & open_at & (ends[child] <= ends[p]))
        parent[child] = p + base
    low = np.flatnonzero((alive == 0) & (below > 0))
    if len(low):
        top = below[low] - 1
        ok[low] = ends[low] <= below_end[top]
        parent[low] = below_at[top]
    bad = np.flatnonzero(~ok)
    return (int(bad[0]) if len(bad) else w), depth, parent


def _chain(parent: np.ndarray, j: int) -> list:
    """Thread positions from the bottom of j's stack (following parents) up to j."""
    out = []
    while j >= 0:
        out.append(j)
        j = int(parent[j])
    out.reverse()
    return out


def _closes(start: int, end: int, s: int, e: int) -> bool:
    """Whether an open slice [start, end) is closed by a slice [s, e) that starts on its track (trace_processor's rule):
    it starts after the open slice's end, or at it, unless both are instants (dur 0): instants at one ts stack."""
    return end < s or (end == s and not (start == end and e == s))

