"""Question 9, what torch.compile changes in the trace (``q9.compile``): compiled regions, graph hashes, launches and
copies per step, the kernels, and whether Inductor's addmm copied the bias into the output.

A step may run compiled and eager code (an LLM's eager prefill before its compiled decode; an eager optimizer after
a compiled forward and backward): the per-step counts are then said to hold both, and the kernels are listed as
torch.compile's code launched them and as eager code did (``launch_paths``' ``from_compiled``), the most launched
first, at most :data:`KERNELS_LISTED` names of each."""
from __future__ import annotations

from .base import (NO_GPU_TEXT, NO_STEPS_TEXT, STEPS_HOWTO, Finding, _compile_rows, _eager_after_compiling,
                   _left_out_text, _n, _num, _short)


def _as_config(config):
    """The run's config as an ``ExperimentConfig`` (a meta.json dict is read by ``ExperimentConfig.from_dict``, which
    knows what older runs ran with); None when unknown or unreadable."""
    from ...config import as_config
    from ...errors import ConfigError
    try:
        return as_config(config)
    except (ConfigError, TypeError, ValueError):
        return None


def _q9_compile(r, config=None) -> list[Finding]:
    from ...analyses import compile_in_measured_steps, compile_steps
    if r.steps.empty:
        return [_q9_without_steps(r)]
    if r.compile_breakdown.empty:
        return []
    cb = compile_in_measured_steps(r)  # per step: the steady state's steps
    regions = int(cb["compiled_regions"].sum())
    ev = {"steps": int(len(cb)), "compiled_regions": regions,
          "compiled_regions_per_step": _num(regions / len(cb)),
          "kernel_launches_per_step": _num(cb["kernel_launches"].median()),
          "launches_per_step": _num(cb["launches"].median()),
          "kernels_per_step": _num(cb["kernels"].median()), "memcpy_dtod": int(cb["memcpy_dtod"].sum()),
          "memcpy_htod": int(cb["memcpy_htod"].sum()), "memcpy_dtoh": int(cb["memcpy_dtoh"].sum()),
          "memcpy_htod_per_step": _num(cb["memcpy_htod"].median()),
          "memcpy_dtoh_per_step": _num(cb["memcpy_dtoh"].median()),
          "memsets": int(cb["memsets"].sum()), "graph_launches": int(cb["graph_launches"].sum()),
          "memcpy_dtod_per_step": _num(cb["memcpy_dtod"].median()), "memsets_per_step": _num(cb["memsets"].median()),
          "graph_launches_per_step": _num(cb["graph_launches"].median())}
    left = compile_steps(r.steps)
    gave_up = _eager_after_compiling(r, cb)
    if gave_up:
        ev["compile_steps"] = left
        return [Finding("q9.compile", 9, "Compiled only while compiling", gave_up
                        + ("" if r.has_gpu else f" {NO_GPU_TEXT}."), ev)]
    if regions == 0 and not r.has_gpu:
        return [Finding("q9.compile", 9, "Eager execution", "No torch.compile rows (TorchDynamo Cache Lookup, "
                        "Torch-Compiled Region) in this trace: it ran eagerly. " + NO_GPU_TEXT + ".", ev)]
    if regions == 0:
        text = (f"No torch.compile rows (TorchDynamo Cache Lookup, Torch-Compiled Region) in this trace: it ran "
                f"eagerly, with a median {_n(ev['kernel_launches_per_step'], 'kernel launch', 'kernel launches')} "
                f"and {_n(ev['kernels_per_step'], 'kernel')} per step.")
        return [Finding("q9.compile", 9, "Eager execution", text, ev)]
    hashes = sorted({h for v in cb["fx_graph_hash"].dropna() for h in str(v).split(",") if h})
    ev["fx_graph_hashes"] = hashes
    # a training step's backward graphs (inside CompiledFunctionBackward, on the autograd engine's thread) come with
    # its forward graphs: counted apart, so a forward and its backward read as one compiled function, not two graphs
    backward = sorted({h for v in cb["backward_fx_graph_hash"].dropna() for h in str(v).split(",") if h})
    forward = [h for h in hashes if h not in backward]
    forward_calls = int(cb["fx_graph_calls"].sum()) - int(cb["backward_fx_graph_calls"].sum())
    if backward:
        ev["backward_fx_graph_hashes"] = backward
    lp = r.launch_paths[r.launch_paths["category"] == "kernel"]
    kernels = sorted(set(lp["name"].astype(str)))
    ev["kernel_names"] = kernels
    # which kernels torch.compile's code launched (its regions, graphs and compiled backward) and which eager code did:
    # a step may run both (an eager prefill before a compiled decode, an eager optimizer after a compiled backward)
    # the compiler's own launches (compiling in a recorded step: under max-autotune its benchmarks) are neither
    cl = r.compiler_launches
    cl = cl[cl["category"] == "kernel"].groupby("name")["count"].sum() if len(cl) else None
    lp = lp.assign(from_compiler=0 if cl is None else lp["name"].map(cl).fillna(0).astype("int64").to_numpy())
    compiled = lp[lp["from_compiled"] > 0]
    by_compiler = lp[lp["from_compiler"] > 0]
    eager = lp[lp["from_compiled"] + lp["from_compiler"] < lp["count"]]
    mixed = (len(compiled) > 0) + (len(eager) > 0) + (len(by_compiler) > 0) > 1
    if mixed:
        ev["compiled_kernel_names"] = sorted(set(compiled["name"].astype(str)))
        ev["eager_kernel_names"] = sorted(set(eager["name"].astype(str)))
        ev["compiler_kernel_names"] = sorted(set(by_compiler["name"].astype(str)))
        ev["kernel_launches_from_compiled"] = int(lp["from_compiled"].sum())
        ev["kernel_launches_from_compiler"] = int(lp["from_compiler"].sum())
        ev["kernel_launches"] = int(lp["count"].sum())
    if left:
        ev["compile_steps"] = left
    text = (f"torch.compile ran: {_n(regions, 'Torch-Compiled Region slice')} over {_n(len(cb), 'step')}"
            + _left_out_text(r) + ", with "
            + (f"{len(forward)} distinct CompiledFxGraph hash{'es' if len(forward) != 1 else ''}" if hashes
               else "no CompiledFxGraph call recorded")
            + (_same_graph(cb, forward[0], forward_calls) if len(forward) == 1 and forward_calls > 1 else "")
            + (f" and {_n(len(backward), 'backward graph')} run by autograd (CompiledFunctionBackward"
               + (", the same every step" if len(backward) == 1 and int(cb["backward_fx_graph_calls"].sum()) > 1
                  else "") + ")" if backward else "")
            + (". Per step (median)" + (", compiled and eager code together" if len(compiled) and len(eager) else
                                        "") + ": "
               f"{_n(ev['kernel_launches_per_step'], 'kernel launch', 'kernel launches')}, "
               f"{_n(ev['kernels_per_step'], 'kernel')}" if r.has_gpu else f". {NO_GPU_TEXT}: the compiled code ran "
               "on the CPU"))
    totals = []
    ours = _compiler_copies(r, set(cb["step"].tolist()))
    for key, word, plural, note in (("memcpy_dtod", "device-to-device copy", "device-to-device copies", ""),
                                    ("memcpy_htod", "host-to-device copy", "host-to-device copies", ""),
                                    ("memcpy_dtoh", "device-to-host copy", "device-to-host copies", ""),
                                    ("memsets", "memset", None, ""),
                                    ("graph_launches", "cudaGraphLaunch call", None, " (CUDA graphs replayed)")):
        if ev[key]:
            text += f", {_n(ev[key + '_per_step'], word, plural)}"
            theirs = "all" if ours.get(key) == ev[key] else f"{ours.get(key, 0):,}"
            totals.append(_n(ev[key], word, plural) + note
                          + (f" ({theirs} of them by the compiler while it compiled)" if ours.get(key) else ""))
    if totals:
        text += f"; in total over the {_n(len(cb), 'step')}: {', '.join(totals)}"
    text += "."
    if mixed:
        parts = []
        if len(compiled):
            parts.append(f"{ev['kernel_launches_from_compiled']:,} were launched from torch.compile's code: "
                         f"{_kernel_list(compiled, compiled['from_compiled'])}")
        if len(by_compiler):
            parts.append(f"{ev['kernel_launches_from_compiler']:,} by its compiler while it compiled (under "
                         "max-autotune, its benchmarks of candidate kernels; question 3 counts them): "
                         f"{_kernel_list(by_compiler, by_compiler['from_compiler'])}")
        if len(eager):
            parts.append(("the others" if len(parts) else "all") + " from eager code: "
                         + _kernel_list(eager, eager["count"] - eager["from_compiled"] - eager["from_compiler"]))
        text += (f" Of the {ev['kernel_launches']:,} kernels whose launch call the trace pairs with them, "
                 + "; ".join(parts) + ".")
    elif kernels:
        text += f" Kernels: {_kernel_list(lp, lp['count'], counts=False)}."
    text += _bias_copy(r, config, ev)
    return [Finding("q9.compile", 9, "What torch.compile changed", text, ev)]


def _q9_without_steps(r) -> Finding:
    """Question 9 on a trace without steps: whether torch.compile ran (its rows in the profiler table, over the whole
    trace) and which kernels its code launched, and that the per-step counts need steps."""
    rows = _compile_rows(r)
    lp = r.launch_paths[r.launch_paths["category"] == "kernel"] if len(r.launch_paths) else r.launch_paths
    launches = int(lp["count"].sum()) if len(lp) else 0
    ev = {"steps": 0, "compiled_regions": rows["regions"], "fx_graph_calls": rows["graph_calls"],
          "fx_graph_hashes": rows["hashes"], "kernel_launches": launches}
    per_step = (f" {NO_STEPS_TEXT}, so there is no step to count launches, kernels and copies per step and set beside "
                f"another run's: to get them, {STEPS_HOWTO}.")
    if not rows["regions"] and not rows["graph_calls"] and r.summary.get("cpu_ops", 1) == 0:
        # torch.compile's rows are CPU ranges: a trace whose threads hold only runtime calls cannot show them
        text = ("This trace records no CPU op, only runtime calls on its threads (recorded without the profiler's "
                "CPU activity, or with its ops left out of the file), and torch.compile's rows (TorchDynamo Cache "
                "Lookup, Torch-Compiled Region) are CPU ranges: whether it ran compiled or eagerly cannot be read "
                "from it"
                + (f"; {_n(launches, 'kernel launch', 'kernel launches')} over the whole trace." if r.has_gpu
                   else "."))
        return Finding("q9.compile", 9, "No CPU ops to tell compiled from eager", text + per_step, ev)
    if not rows["regions"] and not rows["graph_calls"]:
        text = ("No torch.compile rows (TorchDynamo Cache Lookup, Torch-Compiled Region) in this trace: it ran "
                "eagerly" + (f", with {_n(launches, 'kernel launch', 'kernel launches')} over the whole trace."
                             if r.has_gpu else f". {NO_GPU_TEXT}."))
        return Finding("q9.compile", 9, "Eager execution", text + per_step, ev)
    compiled = lp[lp["from_compiled"] > 0] if len(lp) else lp
    ev["kernel_launches_from_compiled"] = int(compiled["from_compiled"].sum()) if len(compiled) else 0
    text = (f"torch.compile ran: {_n(rows['regions'], 'Torch-Compiled Region slice')} in this trace, with "
            + (f"{_n(len(rows['hashes']), 'distinct CompiledFxGraph hash', 'distinct CompiledFxGraph hashes')} "
               f"({_n(rows['graph_calls'], 'call')})" if rows["graph_calls"] else "no CompiledFxGraph call recorded")
            + ".")
    if r.has_gpu and launches:
        text += (f" Of the {launches:,} kernels whose launch call the trace pairs with them, "
                 + (f"{'all ' if ev['kernel_launches_from_compiled'] == launches else ''}"
                    f"{ev['kernel_launches_from_compiled']:,} were launched from torch.compile's code: "
                    f"{_kernel_list(compiled, compiled['from_compiled'])}." if len(compiled)
                    else "none was launched from torch.compile's code."))
    elif not r.has_gpu:
        text += f" {NO_GPU_TEXT}: the compiled code ran on the CPU."
    return Finding("q9.compile", 9, "What torch.compile changed", text + per_step, ev)


_COPY_KEYS = {"Memcpy DtoD": "memcpy_dtod", "Memcpy HtoD": "memcpy_htod", "Memcpy DtoH": "memcpy_dtoh"}


def _compiler_copies(r, steps: set) -> dict:
    """How many of the copies and memsets that question 9 totals over ``steps`` torch.compile's compiler launched
    while it compiled (``compiler_launches``), by the totals' keys."""
    cl = r.compiler_launches
    cl = cl[cl["step"].isin(steps)] if len(cl) else cl
    out: dict = {}
    for name, cat, n in zip(cl["name"].astype(str), cl["category"].astype(str), cl["count"]):
        key = "memsets" if cat in ("gpu_memset", "memset") else _COPY_KEYS.get(name[:11])
        if key:
            out[key] = out.get(key, 0) + int(n)
    return out


KERNELS_LISTED = 10
"""At most this many kernel names in question 9's text (the evidence holds them all)."""


def _same_graph(cb, graph: str, calls: int) -> str:
    """How the one forward graph ``graph`` was reused, ``calls`` calls in all: " (the same every step: a cache hit)"
    where every step called it, else how many of the steps did."""
    ran = sum(graph in str(v).split(",") for v in cb["fx_graph_hash"].dropna())
    if ran == len(cb):
        return " (the same every step: a cache hit)"
    return (f" (called {calls:,} times in {ran} of the {len(cb)} steps: a cache hit after the first; the other "
            f"step{'s' if len(cb) - ran > 1 else ''} called no compiled graph)")


def _kernel_list(lp, launches, counts: bool = True) -> str:
    """Kernel names of launch-path rows ``lp``, most launched first (``launches``: a number per row), each cut to 48
    characters and before a ", " (a template's arguments: the list is comma-separated), with its launches (×N); names
    the cut makes alike are one entry that says how many kernel names it stands for; then how many more names there
    are, and their launches: the launches listed add up to the count the sentence gives (``counts``; without it,
    the names alone, for a list beside per-step figures)."""
    by: dict[str, list] = {}
    for name, k in zip(lp["name"].astype(str), list(launches)):
        cut = name.find(", ", 0, 47)
        e = by.setdefault(name[:cut] + "…" if cut >= 0 else _short(name, 48), [0, set()])
        e[0] += int(k)
        e[1].add(name)
    order = sorted(by.items(), key=lambda kv: (-kv[1][0], kv[0]))
    shown = [label + (f" ×{k:,}" if counts else "") + (f" ({len(names)} kernel names)" if len(names) > 1 else "")
             for label, (k, names) in order[:KERNELS_LISTED]]
    rest = sum(len(names) for _label, (_k, names) in order[KERNELS_LISTED:])
    more = sum(k for _label, (k, _names) in order[KERNELS_LISTED:])
    return ", ".join(shown) + (f" and {rest} more kernel name{'s' if rest > 1 else ''}" if rest else "") \
        + (f" (×{more:,})" if rest and counts else "")


def _bias_copy(r, config, ev: dict) -> str:
    """Question 9's central observation: whether Inductor's ``aten::addmm`` copied the bias into the output (a
    device-to-device memcpy launched under it) before the GEMM. From each copy's launching op (``top_kernels``); the
    bias's shape from the run's config when known. Seen on an H200: a matrix bias gives the copy and a GEMM with
    beta = 1 (``…badd…``); a vector bias gives no copy and the bias in the GEMM's epilogue (``…bias…``)."""
    tk = r.top_kernels
    copies = tk[tk["name"].astype(str).str.startswith("Memcpy DtoD")] if not tk.empty else tk
    # each copy's launching op (``top_kernels``' ``cpu_ops``: the innermost aten:: op around its launch call), so
    # copies that other ops launched (an aten::copy_ beside the addmm) are not counted as the bias's
    by_addmm = sum(n for ops in copies["cpu_ops"] for op, n in ops if op == "aten::addmm") if len(copies) else 0
    all_copies = int(copies["count"].sum()) if len(copies) else 0
    ev["bias_copies_by_addmm"] = int(by_addmm)
    cfg = _as_config(config)
    if cfg is not None and not cfg.is_matmul_add:
        cfg = None  # the bias knob is matmul_add's: another workload's config says nothing of this bias's shape
    bias = cfg.bias if cfg is not None else None
    shape = f" {cfg.bias_shape()}" if cfg is not None else ""
    if bias:
        ev["bias"] = bias
    cl = r.compiler_launches
    theirs = int(cl.loc[cl["name"].astype(str).str.startswith("Memcpy DtoD") & (cl["op"] == "aten::addmm"),
                        "count"].sum()) if len(cl) else 0
    if theirs:
        ev["bias_copies_by_addmm_of_the_compiler"] = theirs
    if by_addmm and theirs >= by_addmm:  # all of them the compiler's (max-autotune's benchmarks of cuBLAS's addmm)
        return (f" The {_n(by_addmm, 'device-to-device copy', 'device-to-device copies')} aten::addmm launched "
                f"{'was' if by_addmm == 1 else 'were all'} the compiler's, while it compiled (under max-autotune, "
                "its benchmarks of the library GEMM); the compiled code's own steps launched no such copy.")
    if by_addmm:
        which = ("The device-to-device copy is" if by_addmm == all_copies else
                 f"{by_addmm:,} of the trace's {all_copies:,} device-to-device copies are")
        mine = f" ({theirs:,} of them while the compiler benchmarked it)" if theirs else ""
        return (f" {which} launched by aten::addmm{mine}: Inductor turned add(matmul) into addmm, "
                f"which first copies the bias{shape if bias == 'matrix' else ''} into the output, then runs the GEMM "
                f"adding its product to it; a bias shaped like the output does that (the study's matrix bias), "
                f"while a vector bias rides in the GEMM's epilogue with no copy.")
    has_addmm = bool((r.profiler_table["name"].astype(str) == "aten::addmm").any()) if not r.profiler_table.empty \
        else False
    if bias == "vector" and has_addmm:
        return (f" aten::addmm launched no copy: the vector bias{shape} is added in the GEMM's epilogue; with a bias "
                f"shaped like the output (the study's matrix bias) addmm would first copy it into the output "
                f"(a Memcpy DtoD).")
    return ""
