"""``input_bound``: the loop waits for its batches. Found by the time the steady-state steps spend inside the
DataLoader's batch range (``enumerate(DataLoader)#<iterator>.__next__``: ``steps.data_us``, the ``data`` phase's
rule), summed over those steps: at least ``analyses.DATA_WAIT_AT`` of their CPU time (``analyses.data_wait``: a sum,
as workers' waits come in bursts). On a CPU, on a GPU whose steady state is overhead-bound, and on one the GPU paces
whose steps wait for it (a sync: no queue carries over into the next step, so its wait for a batch is the step's);
where the GPU sets the pace and its queue carries over, the batches are made while it works through it, and nobody
waits for them. The iterator's class tells how the batches were made:
``_SingleProcessDataLoaderIter`` in the loop's own thread (``num_workers=0``), ``_MultiProcessingDataLoaderIter`` by
worker processes that did not keep up. The cost is that time per step on average, what making the batches beside the
step saves; on a GPU no more than the CPU time per step less the GPU work launched per step (that work stays), and no
finding where that leaves nothing. The GPU's idle share is of these steps' windows (``gpu_busy_in_step_us``)."""
from __future__ import annotations

from typing import Optional

from ....analyses import DATA_WAIT_AT, GPU_PACED, measured_steps, data_wait, is_data_loader_next
from ....units import format_share
from ..base import Diagnosis, _Ctx, _fmt_us

_SINGLE, _WORKERS = "_SingleProcessDataLoaderIter", "_MultiProcessingDataLoaderIter"
BURST_AT = 10.0
"""A step that waited this many times the median wait of the others or more is a burst: the workers' prefetched
batches ran out there."""


def loader_ranges(report, steps: list[int]) -> list[str]:
    """The DataLoader ranges' names in these steps (``cpu_own_times``), most time first: their time on the steps'
    own threads (``own_us`` less ``beside_us``), what ``steps.data_us`` counts; a range only on a thread beside the
    steps (a prefetching or validation thread) is not the loop's wait and is not named."""
    own = report.cpu_own_times
    if own.empty:
        return []
    own = own[own["step"].isin(steps)]
    names = own.loc[[is_data_loader_next(str(n)) for n in own["name"]]]
    mine = (names["own_us"].astype(float) - names["beside_us"].astype(float)).groupby(names["name"].astype(str)).sum()
    return [str(n) for n in mine[mine > 0].sort_values(ascending=False).index]


def _rule_input_bound(c: _Ctx) -> Optional[Diagnosis]:
    r = c.report
    dw = data_wait(r.steps)
    share = dw["share"]
    if share is None or share < DATA_WAIT_AT or not dw["steps"]:
        return None
    ss = r.summary.get("steady_state") or {}
    if r.has_gpu and ss.get("bound") in GPU_PACED and not (ss.get("sync_wait_us_per_step") or 0.0) > 0:
        return None  # the GPU sets the pace: the batches are made while it works through the queue
    n, data, cpu = len(dw["steps"]), dw["data_us_per_step"], dw["cpu_us_per_step"]
    names = loader_ranges(r, dw["steps"])
    which = names[0] if names else "enumerate(DataLoader)#...__next__"
    scope = f"the {n} steady-state steps" if n > 1 else "the one steady-state step"
    text = (f"The loop waits for its data: over {scope} the DataLoader's {which} took {_fmt_us(data)} per step on "
            f"average, {format_share(share)} of their CPU time ({_fmt_us(cpu)} per step).")
    ev = {"data_us_per_step": data, "cpu_us_per_step": cpu, "data_share": share, "data_wait_at": DATA_WAIT_AT,
          "basis_steps": dw["steps"], "data_us_by_step": dw["by_step"], "iterators": names}
    waits = sorted(dw["by_step"].values())
    if n >= 2 and waits[-1] > 0:
        others = waits[:-1]
        mid = others[len(others) // 2]
        if waits[-1] >= BURST_AT * max(mid, 1.0):
            worst = max(dw["by_step"], key=dw["by_step"].get)
            text += (f" The waits come in bursts: step {worst} waited {_fmt_us(waits[-1])}, "
                     + (f"the other {_fmt_us(mid)}" if len(others) == 1 else f"the others a median {_fmt_us(mid)}")
                     + ": the batches made ahead ran out there.")
            ev["burst_step"] = worst
    gpu = None
    cost = data
    if r.has_gpu:
        # the same rows as data_wait's, means over them: the GPU work the steps launched stays, so making the
        # batches beside them saves at most their CPU time less that work; the idle share is of their windows
        st = measured_steps(r.steps)
        gpu = float(st["gpu_busy_us"].astype(float).sum()) / n
        cpu_all = float(st["cpu_dur_us"].astype(float).sum())
        idle = max(0.0, 1.0 - float(st["gpu_busy_in_step_us"].astype(float).sum()) / cpu_all) if cpu_all > 0 else 0.0
        cost = min(data, max(0.0, cpu - gpu))
        if cost <= 0:
            return None  # the steps launched as much GPU work as they took CPU time: the batches' time is hidden
        text += (f" Meanwhile the GPU had {_fmt_us(gpu)} of work per step and idled {format_share(idle)} of these "
                 "steps' time: it waits while the batch is made." if gpu > 0 else
                 " Meanwhile the GPU ran no work in these steps: it sat idle while the batch was made.")
        ev["gpu_us_per_step"] = gpu
        ev["gpu_idle_share"] = idle
    if _WORKERS in which:
        fix = ("The DataLoader's worker processes do not make batches as fast as the step uses them: the loop waits "
               "in __next__ for the next ready one. Give it more workers (num_workers, up to the cores the "
               "training process leaves free), make each sample cheaper (decode or resize once and cache the "
               "result, move augmentations onto the GPU as batched tensor ops), and, where they are not kept "
               "between epochs already (the trace cannot say), persistent_workers=True; a larger prefetch_factor "
               "only evens out bursts, it adds no speed.")
    elif _SINGLE in which and r.has_gpu:
        fix = ("The batches are made in the training loop's own thread (num_workers=0), one after the other with "
               "the step. Set num_workers to a few processes (DataLoader(..., num_workers=4, pin_memory=True, "
               "persistent_workers=True)) so batches are made while the step runs, copy them with "
               ".to(device, non_blocking=True), and make each sample cheaper (decode or resize once and cache the "
               "result, augment on the GPU).")
    elif _SINGLE in which:  # on a CPU the workers take cores from the step's own math
        fix = ("The batches are made in the training loop's own thread (num_workers=0), one after the other with "
               "the step. Set num_workers to a few processes (DataLoader(..., num_workers=2, persistent_workers=True)) "
               "so batches are made on other cores while the step runs, leaving the step the cores it computes on "
               "(torch.set_num_threads), and make each sample cheaper (decode or resize once and cache the result).")
    else:
        fix = ("Make the batches while the step runs: worker processes (num_workers), pinned memory and non_blocking "
               "copies, and cheaper samples (decode or resize once and cache, augment on the GPU).")
    basis = ("the time the step waited inside the DataLoader per steady-state step (mean): what making the batches "
             "beside the step saves" + ("; no more than the CPU time less the GPU work launched per step"
                                        if gpu is not None else ""))
    return Diagnosis("input_bound", "The step waits for its batch (input-bound)", text, fix, cost, basis, ev)
