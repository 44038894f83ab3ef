"""``compile_breaks``: torch.compile's recompiled frames, graph breaks (more than one compiled region per step),
several compiled graphs, or CUDA-graph input staging copies that cost more than the GEMMs."""
from __future__ import annotations

from typing import Optional

from ..base import Diagnosis, _Ctx, _fmt_us, _steps


def _rule_compile(c: _Ctx) -> Optional[Diagnosis]:
    cb = c.report.compile_breakdown
    if cb.empty or not (cb["compiled_regions"] > 0).any():
        return None
    tb = c.session.tables
    names = tb.name.tolist()
    regions = sorted({n for n in names if isinstance(n, str) and n.startswith("Torch-Compiled Region: ")})
    recompiled = [n for n in regions if not n.endswith("/0")]
    per_step = float(cb["compiled_regions"].median())
    hashes = set()
    for h in cb["fx_graph_hash"].dropna():
        hashes.update(str(h).split(","))
    parts = []
    if recompiled:
        parts.append(f"{len(recompiled)} recompiled frame{'s' if len(recompiled) > 1 else ''} "
                     f"({', '.join(x.split(': ', 1)[1] for x in recompiled[:4])}: frame/recompile count)")
    if per_step > 1:
        parts.append(f"{per_step:g} compiled regions per step (graph breaks split the step)")
    if len(hashes) > 1:
        parts.append(f"{len(hashes)} distinct compiled graphs")
    staging = c.report.gpu_ops[c.report.gpu_ops["name"].astype(str).str.contains("multi_tensor_apply", na=False)]
    math_us = float(c.roof.loc[c.roof["kind"] == "gemm", "time_us"].mul(
        c.roof.loc[c.roof["kind"] == "gemm", "count"]).sum()) if not c.roof.empty else 0.0
    stage_us = float(staging["dur_us"].sum())
    if len(staging) and math_us and stage_us > math_us:
        parts.append(f"CUDA-graph input staging copies ({len(staging)} multi_tensor_apply kernels, "
                     f"{_fmt_us(stage_us / _steps(c.report))} per step) cost more than the GEMMs "
                     f"({_fmt_us(math_us / _steps(c.report))} per step)")
    if not parts:
        return None
    text = "torch.compile in this trace: " + "; ".join(parts) + "."
    fix = ("Find graph breaks and recompiles with TORCH_LOGS='graph_breaks,recompiles' (or torch._dynamo.explain); "
           "mark dynamic sizes (torch._dynamo.mark_dynamic) or compile with dynamic=True; under reduce-overhead, "
           "keep inputs in the same static buffers between calls so nothing is copied in.")
    return Diagnosis("compile_breaks", "Recompiles, graph breaks or staging copies", text, fix, None,
                     "", {"regions": regions[:20], "fx_graphs": sorted(hashes)[:20]})
