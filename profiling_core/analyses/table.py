"""The profiler table (``prof.key_averages().table()``) rebuilt from the trace (study question 1)."""
from __future__ import annotations

import pandas as pd

import numpy as np

from ._common import ints, us
from ._shared import _RUNTIME_CATS, Shared, covered_ns, factorize, frame, merged, shared_for, union_ns

_NOT_CPU = {"trace", "kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "gpu_user_annotation",
            "ac2g", "flow", "cuda_sync"}  # (cuda_sync: a stream's wait, on a GPU lane)
_GPU_ROWS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "gpu_user_annotation"}


def _cpu_mask(sh: Shared) -> np.ndarray:
    """Whether each row of ``sh.slices`` is a CPU slice: on a thread, and its category is not a GPU op's or a trace's
    (:data:`_NOT_CPU`; NULL is not a CPU category). The Python frames of a ``with_stack=True`` recording
    (``python_function``) are rows, as in torch's own table: the time the interpreter spends in a frame outside any
    op is that frame's self time."""
    t = sh.slices
    low = t["cat_low_uniq"]  # lower(category) of each category code (NULL: None)
    return np.array([c is not None and c not in _NOT_CPU for c in low], dtype=bool)[t["cat_codes"]] & (t["utid"] >= 0)


def cpu_op_count(sh: Shared) -> int:
    """How many CPU slices (:func:`_cpu_mask`) are not runtime or driver calls: the ATen ops, ``record_function``
    ranges, Python frames and step slices a trace recorded on its threads. None in a trace recorded without the
    profiler's CPU activity (an old format's, or ``activities=[CUDA]``), whose threads hold only the launch and other
    runtime calls: such a trace cannot show a row that is an op, a torch.compile range among them."""
    low = sh.slices["cat_low_uniq"]
    runtime = np.array([c in _RUNTIME_CATS for c in low], dtype=bool)[sh.slices["cat_codes"]]
    return int((_cpu_mask(sh) & ~runtime).sum())


NO_WORK_TEXT = ("This trace recorded no work: no op, range, runtime call or GPU op, only the profiler's own "
                "slices (its steps', its span and the Python frames of its start and stop). A schedule's recording "
                "ends with its cycle: torch hands each cycle's trace to on_trace_ready and clears its events (\"Profiler clears events at the end "
                "of each cycle\", it warns), so export_chrome_trace() called after the loop writes what came after "
                "the last cycle, or nothing. Export from on_trace_ready (torch.profiler.tensorboard_trace_handler, or "
                "a function that calls prof.export_chrome_trace), or keep every cycle with acc_events=True.")
"""What the findings, the memory note and the command line say of a trace in which :func:`work_count` is 0."""


def work_count(sh: Shared) -> int:
    """How many slices of the trace are the program's: the CPU slices (:func:`_cpu_mask`: ATen ops, ranges, runtime
    calls) that are neither a step slice nor a Python frame, and the GPU ops. 0 in a trace of the profiler's own
    slices alone (its step slices, its ``PyTorch Profiler`` span, the Python frames of its start and stop), which
    holds nothing any question or rule can read (:data:`NO_WORK_TEXT`)."""
    step = sh.name_mask(lambda x: isinstance(x, str) and x.startswith("ProfilerStep#"))
    frame = sh.cat_mask(lambda c: isinstance(c, str) and c.lower() == "python_function")
    return int((_cpu_mask(sh) & ~step & ~frame).sum()) + len(sh.gpu_rows)


def _cpu_own_ns(sh: Shared) -> tuple[np.ndarray, np.ndarray]:
    """(is a CPU slice (:func:`_cpu_mask`), own ns) for every row of ``sh.slices``: a slice's own (self) time is its
    duration less its children's (the profiler table's "Self CPU"; of a step cut at the recording's end, their time
    inside the cut: a child running past it would make the step's own time negative), or, for a slice on a spill
    track of its thread (:func:`_spilled_own`), less the union of its children and of the time the thread's first
    track spent in slices inside its window; an idle thread's frame (:func:`idle_frames`) is on a thread of its own.
    The one rule for a CPU slice's own time: the table, ``cpu_own_times`` and the dispatch chains' ``own_us`` read
    it. Computed once per trace (read only)."""
    return sh.cached("cpu_own_ns", _cpu_own_build)


def autograd_wait(sh: Shared) -> np.ndarray:
    """For every row of ``sh.slices`` (int64 ns), the part of its own time (its window less its children's) during
    which the autograd engine ran backward functions on another thread of its process, for the slices of a thread
    that runs the steps (holds a ``ProfilerStep#N`` slice); 0 for every other slice (a data loader's thread does not
    wait for the backward). On a GPU the engine runs the backward on a thread of its own while the loop's thread,
    which called ``backward()``, blocks until it is done: that thread's own time there (a ``train::backward`` or
    ``## backward ##`` range, or the step slice itself) is a wait for work counted on the engine's thread. The
    engine's work is ``Shared.backward_work`` (``autograd::engine::evaluate_function: …`` slices, or the 2021
    format's backward nodes) on the other threads of the loop's process. A CPU run's backward runs on the calling
    thread (the functions are its children, not another thread's): no wait. Never more than the slice's own time by
    the profiler table's rule (:func:`_cpu_own_ns`), which also takes out the windows it hands to slices on a spill
    track: the time it waited is part of its own time. Read by :func:`cpu_own_times` and the dispatch chains'
    ``wait_us``; computed once per trace (read only)."""
    return sh.cached("autograd_wait", _autograd_wait_build)


def engine_work_beside(sh: Shared, utid: int) -> tuple[np.ndarray, np.ndarray]:
    """The windows (disjoint sorted starts and ends, ns: :func:`merged`) in which the autograd engine ran backward
    functions (``Shared.backward_work``) on the other threads of thread ``utid``'s process: what that thread waits
    for when it called ``backward()``."""
    t = sh.slices
    fn = np.flatnonzero(sh.backward_work)
    upid_of = {u: up for u, _tid, _name, up, _main in sh.tables.threads}
    src = fn[np.array([x != utid and upid_of.get(x) == upid_of.get(utid) for x in t["utid"][fn].tolist()],
                      dtype=bool)] if len(fn) else fn
    return merged(t["ts"][src], t["ts"][src] + t["dur"][src])


def _autograd_wait_build(sh: Shared) -> np.ndarray:
    t = sh.slices
    wait = np.zeros(len(t["ts"]), dtype=np.int64)
    utid = t["utid"]
    loops = {int(r[6]) for r in sh.steps_list if r[6] is not None}  # the threads that run the steps
    if not sh.backward_work.any() or not loops:
        return wait
    ts, end, ppos = t["ts"], t["ts"] + t["dur"], t["ppos"]
    for u in sorted(loops):  # the loop's thread waits for the backward functions other threads run
        s, e = engine_work_beside(sh, u)
        rows = np.flatnonzero(utid == u)
        if not len(s) or not len(rows):
            continue
        ov = np.zeros(len(wait), dtype=np.int64)
        ov[rows] = covered_ns(ts[rows], end[rows], s, e)
        kids = rows[ppos[rows] >= 0]
        child = np.zeros(len(wait), dtype=np.int64)
        np.add.at(child, ppos[kids], ov[kids])
        wait[rows] = np.maximum(ov[rows] - child[rows], 0)
    return np.minimum(wait, np.maximum(_cpu_own_ns(sh)[1], 0))


def _cpu_own_build(sh: Shared) -> tuple[np.ndarray, np.ndarray]:
    t = sh.slices
    idle, idle_own = idle_frames(sh)
    ppos = _parents(sh)
    dur, ts = t["dur"], t["ts"]
    child = np.zeros(len(dur), dtype=np.int64)
    has = ppos >= 0
    has[idle] = False  # (an idle thread's frame is no slice's child, nor on the thread it is read on)
    kids = np.flatnonzero(has)
    up = ppos[kids]
    took = dur[kids]
    cut = dur[up] != sh.tables.dur[up]  # a step cut at the recording's end: its children count inside the cut only
    if cut.any():
        k, u = kids[cut], up[cut]
        took = took.copy()
        took[cut] = np.maximum(np.minimum(ts[k] + dur[k], ts[u] + dur[u]) - np.maximum(ts[k], ts[u]), 0)
    np.add.at(child, up, took)
    own = dur - child
    cpu = _cpu_mask(sh)
    host = _host_utid(sh, cpu)
    host[idle] = -1
    _spilled_own({**t, "ppos": ppos}, own, cpu, host)
    own[idle] = idle_own
    return cpu, own


def _parents(sh: Shared) -> np.ndarray:
    """Each row's parent for the own-time rule: its parent in ``sh.slices`` (``ppos``), past the frames of idle
    threads (:func:`idle_frames`) that the readers nested it in: the nearest ancestor that is not one (-1: none)."""
    return sh.cached("own_parents", _parents_build)


def _parents_build(sh: Shared) -> np.ndarray:
    ppos = sh.slices["ppos"]
    rows = idle_frames(sh)[0]
    if not len(rows):
        return ppos
    idle = np.zeros(len(ppos), dtype=bool)
    idle[rows] = True
    up = ppos.copy()
    m = (up >= 0) & idle[np.maximum(up, 0)]
    while m.any():
        up[m] = ppos[up[m]]
        m = (up >= 0) & idle[np.maximum(up, 0)]
    return up


_HELD_NS = 1000  # a frame open until the recording stopped ends within this of its thread's last frame's end


def idle_frames(sh: Shared) -> tuple[np.ndarray, np.ndarray]:
    """(rows of ``sh.slices``, own ns of each) of the Python frames of threads that ran no Python code while the
    profile recorded: the one rule for telling them from the frames of the thread they are read on.

    torch's Python tracer (``with_stack=True``) records, when a recording starts, the frames every thread of the
    process holds, and writes those of a thread it never saw run Python code (a thread waiting all along: a progress
    bar's monitor, a notebook kernel's I/O threads, a watchdog) on thread 0, open until the recording stopped; the
    trace's readers put thread 0 on the process's main thread (tid = pid), where such frames nest by time alone with
    that thread's own slices, around them or inside them. torch's table counts each such frame on its own thread:
    its self time is its whole wait.

    torch links every frame to its caller (the ``Python id`` and ``Python parent id`` arguments), so a thread's Python
    frames (category ``python_function``, as torch writes it) form trees. On a thread whose frames open until its last
    frame's end (within 1 µs: the stop, as written) each have an id of their own and form more than one tree, or on a
    thread numbered 0 (where a trace's process id is 0, the readers keep torch's thread 0 as a thread of its own), a
    tree all of whose frames are open until then is an idle thread's stack (the thread's own tree holds the calls it
    made while recording, which ended before; where no tree does, every tree is such a stack). An idle thread's frame is
    no slice's child and no slice's parent there: its own time is its duration less its callees' (the frames whose
    ``Python parent id`` is its ``Python id``), it holds no other thread's time, and no device time. Traces without
    those arguments keep their frames where the readers nest them. torch links the stacks of several idle threads into
    one chain (the second's outermost frame gets the first's innermost as its caller), and so counts them in its own
    table; so does this rule. ``profiler_table.sql`` states the same rule."""
    return sh.cached("idle_frames", _idle_frames_build)


def _idle_frames_build(sh: Shared) -> tuple[np.ndarray, np.ndarray]:
    none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    t = sh.slices
    utid = t["utid"]
    py = np.flatnonzero(_python_frames(sh) & (utid >= 0))
    if not len(py):
        return none
    end = t["ts"][py] + t["dur"][py]
    u = utid[py]
    last = np.full(int(u.max()) + 1, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, u, end)
    held = end >= last[u] - _HELD_NS
    counts = np.bincount(u[held], minlength=len(last))
    tb = sh.tables
    zero = np.zeros(len(last), dtype=bool)  # threads numbered 0: torch's own lane for them, kept as a thread
    for th, tid, _name, _upid, _main in tb.threads:
        if 0 <= th < len(zero) and tid == 0:
            zero[th] = True
    maybe = (counts >= 2) | zero
    if not maybe.any():
        return none  # a thread holding one frame at the stop cannot hold two trees
    ids_of = tb.arg_set_id
    names = ("Python id", "Python parent id")
    cand = py[held & maybe[u]]
    got = tb.args.get_many(names, np.unique(ids_of[cand]).tolist())
    threads = []
    for th in np.unique(utid[cand]).tolist():
        rows = cand[utid[cand] == th]
        pid = {_int(got[names[0]].get(a)) for a in ids_of[rows].tolist()}
        roots = sum(_int(got[names[1]].get(a)) not in pid for a in ids_of[rows].tolist())
        if (roots >= 2 or zero[th]) and None not in pid and len(pid) == len(rows):  # (each with an id of its own)
            threads.append(th)
    if not threads:
        return none
    rows = py[np.isin(u, threads)]
    got = tb.args.get_many(names, np.unique(ids_of[rows]).tolist())
    ths, asids = utid[rows].tolist(), ids_of[rows].tolist()
    me = [_int(got[names[0]].get(a)) for a in asids]
    position: dict = {}  # (thread, Python id) -> the first frame with it
    for i, key in enumerate(zip(ths, me)):
        if key[1] is not None:
            position.setdefault(key, i)
    # each frame's caller, a position in rows (-1: a root)
    caller = np.array([position.get((th, _int(got[names[1]].get(a))), -1) for th, a in zip(ths, asids)],
                      dtype=np.int64)
    root = np.where(caller >= 0, caller, np.arange(len(rows)))
    for _ in range(64):  # each frame's tree: its root, by pointer jumping (a cycle of ids never reaches one)
        nxt = root[root]
        if (nxt == root).all():
            break
        root = nxt
    rooted = caller[root] < 0
    r_end = t["ts"][rows] + t["dur"][rows]
    open_all = r_end >= last[utid[rows]] - _HELD_NS
    idle_tree = np.ones(len(rows), dtype=bool)
    np.logical_and.at(idle_tree, root[rooted], open_all[rooted])  # idle: every frame of it open at the stop
    idle = rooted & idle_tree[root]
    if not idle.any():
        return none
    dur = t["dur"][rows]
    callees = np.zeros(len(rows), dtype=np.int64)
    c = caller >= 0
    np.add.at(callees, caller[c], dur[c])
    return rows[idle], (dur - callees)[idle]


def _python_frames(sh: Shared) -> np.ndarray:
    """Which rows of ``sh.slices`` are Python frames: category ``python_function``, as torch writes it."""
    return sh.cat_mask(lambda c: c == "python_function")


def _int(v):
    """A Python id as an int (None when absent or not an integer)."""
    return v if type(v) is int else None


def _host_utid(sh: Shared, cpu: np.ndarray) -> np.ndarray:
    """The thread of each row of ``sh.slices`` for the own-time rule: its own (``utid``), but for a CPU slice written
    on no thread, the thread whose CPU slice encloses it. Kineto writes the profiler's own work, such as its start-up
    slice ``Activity Buffer Request`` (the CUPTI buffer it requests on the thread making the first CUDA call), with
    pid -1 and tid 0, which the trace's readers put on thread 0 (:func:`~profiling_core.trace._ids.thread_numbers`);
    torch's table has its real thread and nests it there, inside the op that made the call. Such a slice (a CPU slice
    of a thread numbered 0 that is not a Python frame: torch writes an idle thread's frames there, :func:`idle_frames`)
    belongs to the thread of the innermost CPU slice of a thread not numbered 0 that encloses
    its window (``Shared.enclosing_rows``: the latest start, then the shortest, then the first), as a slice of a track
    of its own there (a spill track: :func:`_spilled_own`), and stays on thread 0 where none does.
    ``profiler_table.sql`` states the same rule."""
    t = sh.slices
    utid = t["utid"].copy()
    if not len(utid):
        return utid
    tid_of = {u: tid for u, tid, _name, _upid, _main in sh.tables.threads}
    zero = np.array([tid_of.get(u) == 0 for u in range(int(utid.max()) + 1)] if utid.max() >= 0 else [], dtype=bool)
    on = cpu & (utid >= 0)
    if not on.any():
        return utid
    at_zero = zero[np.maximum(utid, 0)] & on & ~_python_frames(sh)  # (Python frames there: idle threads')
    lost = np.flatnonzero(at_zero)
    if not len(lost):
        return utid
    host = sh.enclosing_rows(lost, hosts=on & ~at_zero)
    utid[lost[host >= 0]] = utid[host[host >= 0]]
    return utid


def _spilled_own(t: dict, own: np.ndarray, cpu: np.ndarray, host: np.ndarray) -> None:
    """Own time, in place, of each CPU slice (``cpu``) of a thread's spill track. A slice that overlaps a slice of its
    thread's track without enclosing it (a ``record_function`` range, ``ProfilerStep#N`` say, entered inside a
    Python frame and left outside it) cannot nest there, and goes on a track of its own (trace_processor's
    ``thread_overlapping_slice``), where only what nests in it on that track is its child: its duration less its
    children would count as its own the time the thread spent meanwhile in the first track's slices (a step's own
    time beside all of its ops'). Its own time is its duration less the union of its children and of the time spent
    inside its window by the outermost slices of the thread's first track (the track of its earliest slice, an idle
    thread's frame included: the readers' track; its idle frames themselves are not among those slices) that do not
    enclose it: those that overlap its window, do not enclose it, and whose parent encloses it or who have none
    (with ``with_stack=True`` the first track's top slices are Python frames around the whole recording: the slices
    that count are the ones below the frames around it). That window, less those slices, is taken out of the own
    time of the innermost first-track slice around it, which would count it too, unless that slice also encloses the
    spill slice this one is inside (which handed the window over already); the windows a slice is handed are taken
    out as their union, so spill slices that overlap each other (ranges left out of order) take their shared time
    once. The thread of a slice is ``host``
    (:func:`_host_utid`: a slice written on no thread is a spill slice of the thread around it). ``profiler_table.sql``
    states the same rule."""
    utid, track, ts, dur, ppos = host, t["track_id"], t["ts"], t["dur"], t["ppos"]
    on = np.flatnonzero(utid >= 0)
    if not len(on):
        return
    some_track = np.full(int(utid[on].max()) + 1, -1, dtype=np.int64)  # per thread: some track of it...
    some_track[utid[on]] = track[on]
    other = on[track[on] != some_track[utid[on]]]  # ...and the rows of its threads on any other track
    for u in np.unique(utid[other]).tolist():
        rows = on[utid[on] == u]
        # the thread's first track: the readers' track of its earliest slice of its own (not one moved there from
        # thread 0; an idle thread's frame is one, as the readers put it: the track is theirs, not this rule's)
        own_rows = np.flatnonzero(t["utid"] == u)
        first = track[own_rows[np.argmin(ts[own_rows])]]  # (the lowest id among the earliest: rows are in id order)
        mine = rows[track[rows] == first]
        mine = mine[np.lexsort((t["depth"][mine], ts[mine]))]  # by start, the deepest of equal starts last
        b, e, par = ts[mine], ts[mine] + dur[mine], ppos[mine]
        pb = np.where(par >= 0, ts[np.maximum(par, 0)], 0)
        pe = np.where(par >= 0, ts[np.maximum(par, 0)] + dur[np.maximum(par, 0)], 0)
        at = np.full(len(ts), -1, dtype=np.int64)  # row -> its position in mine
        at[mine] = np.arange(len(mine))
        spill = rows[(track[rows] != first) & cpu[rows]]
        enclosers: dict = {}  # spill slice -> its innermost first-track encloser (-1: none)
        kids = spill[ppos[spill] >= 0]  # (a spill slice's children are on its own track)
        kids = kids[np.argsort(ppos[kids], kind="stable")]
        depth = t["depth"][mine]
        handed: dict = {}  # first-track slice -> the windows it hands over and its slices inside them: (b, e, sb, se)
        for r in spill.tolist():
            lo, hi = int(ts[r]), int(ts[r] + dur[r])
            # the first track's slices that overlap the window: those starting inside it, and the chain of those
            # around its start (the last slice starting at or before it and its ancestors: the track is nested)
            j = int(np.searchsorted(b, lo, side="right"))
            chain, c = [], (int(mine[j - 1]) if j > 0 else -1)
            while c >= 0:
                if at[c] >= 0:
                    chain.append(at[c])
                c = int(ppos[c])
            near = np.concatenate([np.array(chain, dtype=np.int64),
                                   np.arange(j, int(np.searchsorted(b, hi, side="left")), dtype=np.int64)])
            nb, ne, npar, npb, npe = b[near], e[near], par[near], pb[near], pe[near]
            outer = (nb < hi) & (ne > lo) & ~((nb <= lo) & (ne >= hi)) & ((npar < 0) | ((npb <= lo) & (npe >= hi)))
            k = kids[np.searchsorted(ppos[kids], r, side="left"):np.searchsorted(ppos[kids], r, side="right")]
            own[r] = dur[r] - union_ns(np.concatenate([np.maximum(nb[outer], lo), np.clip(ts[k], lo, hi)]),
                                        np.concatenate([np.minimum(ne[outer], hi), np.clip(ts[k] + dur[k], lo, hi)]))
            around = near[(nb <= lo) & (ne >= hi)]
            enc = enclosers[r] = int(mine[around[np.argmax(depth[around])]]) if len(around) else -1
            # the frame around it counted that window (less its own children) as its own time, unless that frame
            # encloses the spill slice this one is inside, which handed it over already
            if enc >= 0 and enclosers.get(int(ppos[r]), -1) != enc:
                w = handed.setdefault(enc, ([], [], [], []))
                w[0].append(lo)
                w[1].append(hi)
                w[2].extend(np.maximum(nb[outer], lo).tolist())
                w[3].extend(np.minimum(ne[outer], hi).tolist())
        # each first-track slice loses the union of the windows it handed over, less its slices inside them, once:
        # spill slices that overlap each other (ranges left out of order) would take their shared time twice
        for enc, (wb, we, sb, se) in handed.items():
            mb, me = merged(np.array(wb, dtype=np.int64), np.array(we, dtype=np.int64))
            cb, ce = merged(np.array(sb, dtype=np.int64), np.array(se, dtype=np.int64))
            inside = int(covered_ns(mb, me, cb, ce).sum()) if len(cb) else 0
            own[enc] -= int((me - mb).sum()) - inside


def _profiler_table_raw(sh: Shared) -> pd.DataFrame:
    """What ``profiler_table.sql`` returns, from the shared slice tree and launch pairs."""
    cols = ["name", "lane", "calls", "self_cpu_ns", "cpu_total_ns", "self_device_ns", "device_total_ns"]
    t = sh.slices
    n = len(t["id"])
    if n == 0:
        return frame([], cols)
    dur = t["dur"]
    is_cpu, own = _cpu_own_ns(sh)
    is_gpu = np.array([c in _GPU_ROWS for c in t["cat_low_uniq"]], dtype=bool)[t["cat_codes"]]
    # device time: GPU ops launched by calls (on a thread) whose parent is the op (self) or an ancestor (total)
    self_dev = np.zeros(n, dtype=np.int64)
    total_dev = np.zeros(n, dtype=np.int64)
    p = sh.p
    keep = ~pd.isna(p["launch_utid"]) & (p["launch_parent"] >= 0) if len(p["gpu_id"]) else np.zeros(0, dtype=bool)
    if keep.any():
        cur = sh.pos(p["launch_parent"][keep])
        g = p["gpu_dur"][keep]
        np.add.at(self_dev, cur, g)
        up = _parents(sh)  # (an idle thread's frames hold none of the GPU time below them)
        while len(cur):
            np.add.at(total_dev, cur, g)
            nxt = up[cur]
            m = nxt >= 0
            cur, g = nxt[m], g[m]
    # one code per row label: the name, ProfilerStep#N merged into ProfilerStep* (codes of the distinct names)
    labels = np.empty(len(t["name_uniq"]), dtype=object)
    labels[:] = [row_label(u) for u in t["name_uniq"]]
    label_codes, uniq = factorize(labels, use_na_sentinel=False)
    code = label_codes[t["name_codes"]]  # name code -1 (NULL) takes the last label, None
    uniq = [None if (u is None or u != u) else u for u in uniq.tolist()]
    k = len(uniq)
    rows = []
    for lane, m, vals in (("cpu", is_cpu, (own, dur, self_dev, total_dev)),
                          ("gpu", is_gpu, (None, None, dur, dur))):
        idx = np.flatnonzero(m)
        if len(idx) == 0:
            continue
        codes = code[idx]
        calls = np.bincount(codes, minlength=k)
        present = np.flatnonzero(calls)
        sums = []
        for v in vals:
            acc = np.zeros(k, dtype=np.int64)
            if v is not None:
                np.add.at(acc, codes, v[idx])
            sums.append(acc[present].tolist())
        rows.extend(zip([uniq[j] for j in present.tolist()], [lane] * len(present), calls[present].tolist(), *sums))
    # ORDER BY self_device_ns DESC, self_cpu_ns DESC, name (NULL first); lane order on full ties
    rows.sort(key=lambda r: (-r[5], -r[3], r[0] is not None, r[0] or "", r[1]))
    return frame(rows, cols)

__all__ = ["cpu_own_times", "cpu_slices_by_step", "idle_frames", "profiler_table", "row_label"]


def cpu_slices_by_step(sh: Shared, steps: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """Which step each CPU slice belongs to: the rule for every per-step count of CPU rows.

    A CPU slice (the profiler table's, :func:`_cpu_mask`: a slice on a thread whose category is not a GPU op's or a
    trace's: ops, ranges, runtime calls and, recorded with ``with_stack``, Python frames; the GPU's
    ``gpu_user_annotation`` copies are not CPU slices) belongs to the first of ``steps`` (time order) whose window
    holds its start, whatever thread it ran on, as a launch call does in ``launch_latency``: the backward's ops on
    the autograd engine's own thread (``pt_autograd_0`` on a GPU) count with the step that ran them, not only the
    step's own thread. Step slices themselves are left out.

    Args:
        sh: the trace's shared pieces.
        steps: rows of ``sh.steps_list`` (in its (ts, id) order), the candidate steps.

    Returns:
        (rows of ``sh.slices``, index into ``steps``) of every CPU slice inside a step, in row order.
    """
    t = sh.slices
    if not steps or len(t["ts"]) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    is_cpu = _cpu_mask(sh) & ~sh.name_mask(lambda u: isinstance(u, str) and u.startswith("ProfilerStep#"))
    rows = np.flatnonzero(is_cpu)
    ts = t["ts"][rows]
    starts = np.array([s[3] for s in steps], dtype=np.int64)
    ends = starts + np.array([s[4] for s in steps], dtype=np.int64)
    # the first step (time order) whose window holds the start: of the steps starting at or before it, the earliest
    # that has not ended (steps are in start order; overlapping steps are rare: nested or repeated annotations)
    if (starts[1:] >= ends[:-1]).all():  # the usual: steps one after the other
        j = np.searchsorted(starts, ts, side="right") - 1
        j[(j >= 0) & (ts >= ends[np.maximum(j, 0)])] = -1
    else:
        j = np.full(len(rows), -1, dtype=np.int64)
        for k in range(len(steps)):
            j[(j < 0) & (ts >= starts[k]) & (ts < ends[k])] = k
    keep = j >= 0
    return rows[keep], j[keep].astype(np.int64)


def cpu_own_times(session, shared: Shared | None = None) -> pd.DataFrame:
    """Per profiler step, the CPU's own time by op name, on every thread: where a step's CPU time goes.

    A CPU slice belongs to the first step (time order) whose window holds its start, whatever thread it ran on
    (:func:`cpu_slices_by_step`): the backward's ops on the autograd engine's own thread count with their step, not
    only the step's own thread (``dispatch_chains``). Own time is the slice's duration less its children's, and
    less the time it waited while the autograd engine ran the backward on another thread (:func:`autograd_wait`:
    that time is counted once, on the engine's thread, where the backward's ops ran). The step slices themselves
    are left out (their own time is what no op of the step accounts for).

    Not every thread works for the step: a thread that neither holds the step slice nor makes a launch call in the
    step's window (a DataLoader's pin-memory thread, its queues' feeder threads, recorded with ``with_stack``; an idle
    thread's frames, :func:`idle_frames`) runs *beside* it, and its time is no cost of the step's (its waits overlap
    the step's own). ``beside_us`` is the part of ``own_us`` on such threads, ``beside_calls`` the part of ``calls``.
    ``compile_us`` and ``compile_calls`` are the parts that are torch.compile's compiler's own work
    (``Shared.compiler_work``: inside its ranges, or Kineto's overhead events in their time), made once where it
    compiles, on whatever thread; they are no part of ``beside_us`` and ``beside_calls``.

    Returns:
        DataFrame ``step``, ``name``, ``category`` (lower case, of the name's first slice in the step), ``calls``,
        ``own_us`` (summed over the step's slices of that name), ``wait_us`` (the autograd wait taken out of it),
        ``beside_us`` (of ``own_us``, the time on threads beside the step), ``beside_calls`` (of ``calls``, those
        on threads beside the step), ``compile_us``, ``compile_calls`` (of the rest, those in the compiler's ranges),
        in step order, then largest ``own_us`` first; empty (same columns) without
        steps.
    """
    sh = shared_for(session, shared)
    cols = ["step", "name", "category", "calls", "own_us", "wait_us", "beside_us", "beside_calls", "compile_us",
            "compile_calls"]
    steps = sh.steps_list
    t = sh.slices
    if not steps or len(t["ts"]) == 0:
        return frame([], cols)
    _is_cpu, own = _cpu_own_ns(sh)
    rows, j = cpu_slices_by_step(sh, steps)
    if len(rows) == 0:
        return frame([], cols)
    code = t["name_codes"][rows]
    key = j * (len(t["name_uniq"]) + 1) + (code + 1)
    uk, first, inv = np.unique(key, return_index=True, return_inverse=True)
    calls = np.bincount(inv, minlength=len(uk))
    wait = autograd_wait(sh)[rows]
    ns = np.bincount(inv, weights=(own[rows] - wait).astype(np.float64), minlength=len(uk))
    waited = np.bincount(inv, weights=wait.astype(np.float64), minlength=len(uk))
    compiling = sh.compiler_work[rows]  # (the compiler's, on whatever thread: Kineto's overhead events too)
    beside = _beside_step(sh, steps, rows, j) & ~compiling
    aside = np.bincount(inv, weights=np.where(beside, own[rows] - wait, 0).astype(np.float64), minlength=len(uk))
    comp = np.bincount(inv, weights=np.where(compiling, own[rows] - wait, 0).astype(np.float64), minlength=len(uk))
    k_step, k_name = uk // (len(t["name_uniq"]) + 1), uk % (len(t["name_uniq"]) + 1) - 1
    names = t["name_uniq"]
    df = pd.DataFrame({"step": [steps[k][1] for k in k_step.tolist()],
                       "name": pd.Series([names[c] for c in k_name.tolist()], dtype=object),
                       "category": pd.Series(sh.cats_at(rows[first]), dtype=object),
                       "calls": calls.astype(np.int64), "own_us": ns / 1000.0, "wait_us": waited / 1000.0,
                       "beside_us": aside / 1000.0,
                       "beside_calls": np.bincount(inv, weights=beside, minlength=len(uk)).astype(np.int64),
                       "compile_us": comp / 1000.0,
                       "compile_calls": np.bincount(inv, weights=compiling, minlength=len(uk)).astype(np.int64)})
    df = df.sort_values(["step", "own_us", "name"], ascending=[True, False, True], kind="stable")
    df["step"] = df["step"].astype("Int64")
    return df[cols].reset_index(drop=True)


def _beside_step(sh: Shared, steps: list[tuple], rows: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Whether each of these CPU slices (``rows``, in step ``j`` of ``steps``) ran on a thread beside its step (see
    :func:`cpu_own_times`): not the step slice's thread, and no launch call of the step's window on it; an idle
    thread's frame always."""
    utid = sh.slices["utid"]
    width = int(utid.max()) + 2 if len(utid) else 1
    works = [j_ * width + int(s[6]) + 1 for j_, s in enumerate(steps) if s[6] is not None]
    i, k = sh.pair_steps
    u = utid[sh.p["launch_id"][i]]  # (the launch calls' rows)
    out = ~np.isin(j * width + utid[rows] + 1, np.concatenate([np.array(works, dtype=np.int64),
                                                              k[u >= 0] * width + u[u >= 0] + 1]))
    idle = idle_frames(sh)[0]
    if len(idle):
        out |= np.isin(rows, idle)
    return out


def row_label(name):
    """The profiler table's row of a slice name: ``ProfilerStep#N`` merged into ``ProfilerStep*``, as torch's
    ``key_averages()`` merges them; any other name (None included) as it is."""
    return "ProfilerStep*" if isinstance(name, str) and name.startswith("ProfilerStep#") else name


def profiler_table(session, shared: Shared | None = None) -> pd.DataFrame:
    """The profiler table rebuilt from the trace, one row per name and lane.

    CPU rows (cpu_op, user_annotation, cuda_runtime, cuda_driver, overhead, 2021 Operator/Runtime): self CPU =
    duration minus the durations of the slice's children; self device = GPU ops launched by calls whose parent is
    the op; device total = GPU ops launched anywhere inside it. GPU rows (kernels, memcpy, memset and
    gpu_user_annotation such as the GPU-side ``matmul_add``) carry their duration as device time, as in torch's
    table, which is why summing "Self CUDA" over all rows double counts. ``ProfilerStep#N`` rows merge into
    ``ProfilerStep*``.

    Args:
        session: a trace session.

    Returns:
        DataFrame sorted by self device time then self CPU time: ``name``, ``lane`` (``cpu``/``gpu``), ``calls``,
        ``self_cpu_us``, ``cpu_total_us``, ``self_device_us``, ``device_total_us``, ``cpu_avg_us``
        (cpu_total / calls).
    """
    df = _profiler_table_raw(shared_for(session, shared))
    df = ints(df, "calls")
    df = us(df, {"self_cpu_ns": "self_cpu_us", "cpu_total_ns": "cpu_total_us",
                 "self_device_ns": "self_device_us", "device_total_ns": "device_total_us"})
    df["cpu_avg_us"] = df["cpu_total_us"] / df["calls"].where(df["calls"] > 0)
    for c in ("name", "lane"):
        df[c] = df[c].astype("object")
    return df[["name", "lane", "calls", "self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us",
               "cpu_avg_us"]].reset_index(drop=True)
