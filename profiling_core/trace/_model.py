"""The loader's result: the rows of the mirror's tables (``Model``), what it skipped (``LoadStats``), and ``build``,
which runs the second pass over the first pass's columns and makes the process, thread and track rows.

The loader is ``_collect.Collector`` (first pass: events in file order -> columns) then :func:`build` (second pass,
``_nest.nest``: slice ids, depth, parent, tracks, flows). ``_mirror.py`` feeds it and writes the rows to SQLite.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._nest import nest
from ._stats import LoadStats
from ._tables import TextColumn

if TYPE_CHECKING:
    from ._collect import Collector

# What a row of each table holds (order = column order in _schema.py).
ProcessRow = tuple  # (upid, pid, name, is_synthetic)
ThreadRow = tuple   # (utid, tid, name, upid, is_main_thread)
TrackRow = tuple    # (id, name, type, utid or None, upid or None)
CounterTrackRow = tuple  # (id, name, upid): a process's counter of that name (type "json_counter")


@dataclass
class Model:
    processes: list[ProcessRow]
    threads: list[ThreadRow]
    tracks: list[TrackRow]
    # slice columns, in slice id order (int64 arrays; -1 stands for NULL in parent_id and arg_set_id)
    ts: np.ndarray
    dur: np.ndarray
    track_id: np.ndarray
    category: TextColumn
    name: TextColumn
    depth: np.ndarray
    parent_id: np.ndarray
    arg_set_id: np.ndarray
    # flow columns, in flow id order
    flow_out: np.ndarray
    flow_in: np.ndarray
    flow_trace_id: np.ndarray
    # counter columns, in counter id order, and their tracks (ids after the slice tracks')
    counter_ts: np.ndarray
    counter_track_id: np.ndarray
    counter_value: np.ndarray
    counter_tracks: list[CounterTrackRow]
    stats: LoadStats
    # where each arg set's raw JSON is in the args file the load wrote: arg set a is bytes args_offsets[a] to
    # args_offsets[a + 1] (int64, one more than the arg sets)
    args_offsets: np.ndarray


def build(c: Collector) -> Model:
    """Turn the collected events into the rows of the mirror's tables (args were written to the args file already,
    their offsets set as ``c.args_offsets``).

    A flow row goes out of the slice that began first: trace_processor orders the two ends of each link by start
    time (with equal starts, the flow's earlier end stays out).
    """
    c.finish()
    n = nest(c)
    processes, threads, utid_of, upid_of = _processes_and_threads(c)
    tracks = []
    for tid, (key, kind) in enumerate(n.tracks):
        if key[0] == "thread":
            tracks.append((tid, None, kind, utid_of[key[1]], None))
        elif key[0] == "process":
            tracks.append((tid, None, kind, None, upid_of.get(key[1])))
        else:
            tracks.append((tid, None, kind, None, None))
    stats = c.stats
    stats.slices = len(n.ts)
    fl = np.stack([n.flow_out, n.flow_in, n.flow_trace_id], axis=1).astype(np.int64).reshape(-1, 3)
    later = n.ts[fl[:, 0]] > n.ts[fl[:, 1]]
    fl[later, :2] = fl[later, 1::-1]
    stats.flows = len(fl)
    s_args = np.frombuffer(c.s_args, dtype=np.int64) if len(c.s_args) else np.zeros(0, np.int64)
    c_ts, c_track, c_value, counter_tracks = _counters(c, upid_of, len(tracks))
    stats.counters = len(c_ts)
    return Model(
        processes=processes, threads=threads, tracks=tracks,
        ts=n.ts, dur=n.dur, track_id=n.track_id,
        category=TextColumn.of(c.s_cat, n.order), name=TextColumn.of(c.s_name, n.order),
        depth=n.depth, parent_id=n.parent_id, arg_set_id=s_args[n.order],
        flow_out=fl[:, 0].copy(), flow_in=fl[:, 1].copy(), flow_trace_id=fl[:, 2].copy(),
        counter_ts=c_ts, counter_track_id=c_track, counter_value=c_value, counter_tracks=counter_tracks,
        stats=stats, args_offsets=c.args_offsets)


def _counters(c: Collector, upid_of: dict[int, int], first_track: int):
    """The counter columns (ts, track id, value) in counter id order, and the counter track rows.

    trace_processor sorts a JSON trace's events by time (events of one ts in file order) and appends a row to its
    ``counter`` table for each numeric field of a ``C`` event as it meets them; it gives the rows their tracks once
    the whole trace is read: one track per (process, counter name), in the order of their first rows, made after
    every other track (``EventTracker::FlushPendingEvents``; type ``json_counter``, named after the counter)."""
    n_ev = _np(c.c_ev_n)
    ts = np.repeat(_np(c.c_ev_ts), n_ev)
    order = np.argsort(ts, kind="stable")  # (values appended in file order)
    names = TextColumn.of(c.c_name, order)
    upid_of_thread = np.array([upid_of[p] for p, *_ in c.thread_keys], dtype=np.int64)
    upid = upid_of_thread[np.repeat(_np(c.c_ev_th), n_ev)[order]] if len(order) else np.zeros(0, np.int64)
    key = upid * max(1, len(names.uniq)) + names.codes
    distinct, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")  # the tracks in the order of their first rows
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[by_first] = np.arange(len(distinct))
    rows = [(first_track + t, names.uniq[int(names.codes[i])], int(upid[i]))
            for t, i in enumerate(first[by_first].tolist())]
    values = np.frombuffer(c.c_value, dtype=np.float64) if len(c.c_value) else np.zeros(0, np.float64)
    return ts[order], first_track + rank[inverse.reshape(-1)], values[order], rows


def _np(a) -> np.ndarray:
    return np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, dtype=np.int64)


def _processes_and_threads(c: Collector):
    """The process and thread rows, and each thread index's utid / pid number's upid.

    upid/utid 0 are trace_processor's placeholders (pid 0 / tid 0, no name); then processes and threads in the order
    their first event made them, each process followed by its main thread (tid = pid; trace_processor gives every
    process one, made with the process when no event named it)."""
    processes = [(0, 0, None, 0)]
    threads = [(0, 0, None, 0, 1)]
    upid_of: dict[int, int] = {}
    utid_of: dict[int, int] = {}
    main_of: dict[int, int] = {}  # pid -> thread index of its main thread
    for t, (p, q, _praw, _traw) in enumerate(c.thread_keys):
        if q == p and p not in main_of:
            main_of[p] = t
    for t, (p, q, praw, _traw) in enumerate(c.thread_keys):
        if p not in upid_of:
            upid = upid_of[p] = len(processes)
            name = c.proc_names.get(p, c.proc_raw.get(p))
            processes.append((upid, p, name, int(type(praw) is str)))
            m = main_of.get(p)
            if m is None:
                threads.append((len(threads), p, None, upid, 1))
            elif m != t:
                utid_of[m] = len(threads)
                threads.append((len(threads), p, _thread_name(c, m), upid, 1))
        if t not in utid_of:
            utid_of[t] = len(threads)
            threads.append((len(threads), q, _thread_name(c, t), upid_of[p], int(q == p)))
    return processes, threads, utid_of, upid_of


def _thread_name(c: Collector, t: int):
    """A thread's name: a string tid (even "") names its thread (trace_processor renames the thread to it at each of
    its events, after any ``thread_name`` metadata); else the ``thread_name`` metadata, if any."""
    raw = c.thread_keys[t][3]
    if type(raw) is str:
        return raw
    return c.thread_names.get(t)
