"""The ranks of a file that merged several ranks' traces, and one rank's own trace.

Each rank's loop writes its steps (``ProfilerStep#N``) under its own process id, and its GPU's ops under a process
whose pid is the GPU's device index. A file that holds the steps of several processes therefore holds several ranks,
whose steps share numbers and overlap in time: every figure per step number mixes them. A rank's own trace, as its
profiler wrote it, is the events of its process and of the GPUs its calls launched work on; :func:`write_rank` writes
it, so that every analysis reads one rank as it reads any trace of one process.

The rule that ties a GPU to a process is the launch pairing's (:meth:`Shared._one_process_each`): the GPU's ops keep
the calls of one process. Where two ranks' GPUs share a pid (two nodes' device 0 in one file) their ops sit on one
lane, which no rule by process can part: the lane goes with one process, and the other rank, whose calls launched work
too, has no lane of its own. :func:`unparted` says so, and :func:`write_rank` then refuses.
"""
from __future__ import annotations

import os

import numpy as np

from ..trace import same_pid, write_without_processes
from ._shared import Shared, shared_for

__all__ = ["ranks", "step_processes", "unparted", "write_rank"]


def _steps_by_process(sh: Shared) -> dict:
    lanes = sh.lanes
    steps: dict = {}
    for *_rest, u in sh.steps_list:
        pid = (lanes.get(u) or (None, None))[1] if u is not None else None
        if pid is not None:
            steps[pid] = steps.get(pid, 0) + 1
    return steps


def step_processes(session, shared: Shared | None = None) -> list:
    """The process ids whose threads hold the trace's step slices, in pid order (integers first): one for a trace of
    one process's loop; several where ranks' traces were merged into one file, whose per-step figures then mix
    them (:func:`ranks` tells them apart)."""
    return sorted(_steps_by_process(shared_for(session, shared)), key=_order)


def ranks(session, shared: Shared | None = None) -> list[dict]:
    """Per process whose threads hold step slices, in pid order (:func:`step_processes`): ``pid``, ``steps`` (its step
    slices), ``launch_calls`` (its runtime calls that launch GPU work: kernels, copies, memsets), ``gpus`` (the
    pids of the GPU lanes that ran ops its calls launched, sorted) and ``unowned_launchers`` (the processes whose
    calls launched GPU work but that hold no step slice, the same in every entry: no rank's by pid). One entry for
    a trace of one process's loop, several where ranks' traces were merged into one file; none for a trace without
    step slices on a thread."""
    sh = shared_for(session, shared)
    steps = _steps_by_process(sh)
    if not steps:
        return []
    t = sh.slices
    calls: dict = {}
    utids, n = np.unique(t["utid"][sh._launch_calls], return_counts=True)
    for pid, k in zip(sh.pids_of(utids), n.tolist()):
        calls[pid] = calls.get(pid, 0) + k
    p = sh.p
    gpus: dict = {pid: set() for pid in steps}
    if len(p["launch_id"]):
        a, b = t["utid"][p["launch_id"]].astype(np.int64) + 1, t["utid"][p["gpu_id"]].astype(np.int64) + 1
        k = int(b.max()) + 1
        pairs = np.unique(a * k + b)  # (each distinct thread pair once: utids from -1)
        for call_pid, gpu_pid in zip(sh.pids_of(pairs // k - 1), sh.pids_of(pairs % k - 1)):
            if call_pid in gpus and gpu_pid is not None:
                gpus[call_pid].add(gpu_pid)
    # processes whose calls launched GPU work but that hold no step slice (a trace may write its steps under another
    # pid than its launches': HTA's triton example): no rank's by pid
    apart = sorted((p for p, k in calls.items() if k and p is not None and p not in steps), key=_order)
    return [{"pid": pid, "steps": steps[pid], "launch_calls": calls.get(pid, 0), "gpus": sorted(gpus[pid], key=_order),
             "unowned_launchers": apart} for pid in sorted(steps, key=_order)]


def unparted(every: list[dict]) -> str:
    """Why the ranks :func:`ranks` found cannot be read apart, or "" where they can: a rank whose calls launch GPU
    work but that has no GPU lane of its own ran its ops on a lane another rank's ops share (two nodes' device 0
    merged into one file writes both under pid 0), a lane that ran ops of two ranks' calls holds both, and a lane
    whose pid is another rank's process (ranks renumbered 0, 1... beside GPUs written as their device index) holds
    that rank's threads too; no rule by process can part them. Nor can it part ranks beside a process whose calls
    launch GPU work but that holds no step slice (a trace that writes its steps under another pid than its
    launches): which rank its work is, no pid says."""
    if len(every) < 2:
        return ""
    lanes = sorted({g for r in every for g in r["gpus"]}, key=_order)
    shared = [g for g in lanes if sum(1 for r in every if g in r["gpus"]) > 1]
    if shared:
        return (f"GPU lane{'s' if len(shared) > 1 else ''} {', '.join(map(str, shared))} ran"
                " ops that calls of several ranks launched: ranks whose GPUs share a pid, as two nodes' device 0 "
                "merged into one file do, cannot be read apart")
    crossed = [(g, r["pid"]) for r in every for g in r["gpus"]
               if any(same_pid(q["pid"], g) for q in every if q is not r)]
    if crossed:  # (one pid for one rank's threads and another's GPU lane: leaving out either takes the other too)
        return ("; ".join(f"GPU lane {g}, which ran ops that process {p}'s calls launched, has the pid of another "
                          f"rank's process" for g, p in crossed)
                + ": ranks whose GPU lanes and processes share pids cannot be read apart")
    unowned = every[0].get("unowned_launchers") or []
    if unowned:
        many = len(unowned) > 1
        named = ", ".join(map(str, unowned[:8])) + (" and more" if len(unowned) > 8 else "")
        return (f"process{'es' if many else ''} {named} launch{'' if many else 'es'} GPU work but "
                f"hold{'' if many else 's'} no step slice, so no pid says which rank "
                f"{'they belong' if many else 'it belongs'} to: ranks whose work a process without steps launches "
                "cannot be read apart")
    lost = [r for r in every if r["launch_calls"] and not r["gpus"]]
    if not lost:
        return ""
    many = len(lost) > 1
    return (f"process{'es' if many else ''} {', '.join(str(r['pid']) for r in lost)} launch{'' if many else 'es'} "
            f"GPU work but no GPU lane holds {'their' if many else 'its'} ops apart from another rank's (GPU lane"
            f"{'s' if len(lanes) > 1 else ''} {', '.join(map(str, lanes)) or 'none'}): ranks whose GPUs share a pid, "
            "as two nodes' device 0 merged into one file do, cannot be read apart")


def _order(pid) -> tuple:
    return (0, pid, "") if isinstance(pid, int) else (1, 0, str(pid))


def write_rank(session, pid, dst: str | os.PathLike, shared: Shared | None = None) -> dict:
    """Write to ``dst`` (plain JSON) the rank of process ``pid`` as its own trace: the file less the events of the
    other ranks (each other process that holds step slices, and the GPU lanes its calls launched work on:
    :func:`ranks`). The events of processes that belong to no rank (the profiler's own recording span and overhead
    events, which every rank's trace holds a set of, a GPU's lane that ran nothing) go with the rank the file holds
    them in (``trace.write_without_processes``' ``keep``: after its other events, as a file that joined the ranks'
    traces one after the other holds them), or all stay where the rank's events do not sit in one run of the file;
    the file's other members (``deviceProperties``...) stay as they are. A trace of one process's loop is written
    whole. Returns that rank's entry of :func:`ranks`, with ``unowned_events_placed`` (whether those events were
    placed, False where they all stayed).

    ValueError where ``pid`` holds no step slice in this trace, naming those that do, where the ranks cannot be
    read apart (:func:`unparted`), saying why, and where the pids the file writes do not say which events are whose
    (a text pid the engine numbered otherwise and metadata renamed: ``trace.write_without_processes`` refuses what
    it cannot find)."""
    every = ranks(session, shared)
    rank = next((r for r in every if same_pid(r["pid"], pid)), None)
    if rank is None:
        held = ", ".join(str(r["pid"]) for r in every) or "none"
        raise ValueError(f"process {pid!r} holds no step slice in this trace; the processes that hold steps: {held}")
    why = unparted(every)
    if why:
        raise ValueError(f"cannot read process {pid!r} on its own: {why}")
    # each as the file may write it: its number, or its name where the file wrote a text pid, which the reader
    # numbers and names by that text (both engines: docs/SQL.md) unless metadata renamed it
    names = {p: name for _upid, p, name in session.tables.processes}
    def written(q):
        return (q, names[q]) if isinstance(names.get(q), str) else q
    others = [written(q) for r in every if r is not rank for q in (r["pid"], *r["gpus"])]
    placed: dict = {}
    write_without_processes(session.path, dst, others, keep=[written(q) for q in (rank["pid"], *rank["gpus"])],
                            placed=placed)
    return {**rank, "unowned_events_placed": placed["by_position"]}

