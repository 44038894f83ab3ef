"""The package's layout holds: no import cycles, stages import only the stages below them, pages use the public API.

The import graph is read from the source (every ``import`` and ``from ... import``, those inside functions and under
``TYPE_CHECKING`` included), not from what happens to be imported at run time, so a lazy import cannot hide a cycle.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "profiling_core"

# The stages, bottom up: each may import only those before it (README's "How it works" draws the same map).
STAGES = ["errors", "units", "workloads", "config", "trace", "store", "run", "queries", "analyses", "explain",
          "present", "cli"]
# What pages may import: the top level's card and these subpackages' ``__all__``.
PUBLIC = ["profiling_core"] + [f"profiling_core.{s}" for s in STAGES if s != "cli"]


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _package_of(mod: str) -> str:
    return mod if MODULES[mod].name == "__init__.py" else mod.rsplit(".", 1)[0]


def _imports(mod: str) -> set[str]:
    """The package's modules that ``mod`` imports: the named module, or for ``from P import x`` the submodule P.x
    where it exists, and every package above them that ``mod`` is not already inside (importing a.b.c runs a/b's
    ``__init__``)."""
    tree = ast.parse(MODULES[mod].read_text(encoding="utf-8"))
    own = _package_of(mod)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = own.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != mod:
                found.add(t)  # the module named (a package's __init__ too, when a name is taken from it)
            t = t.rpartition(".")[0]
            while t:  # and the packages above it that are not already running because mod is inside them
                if not own.startswith(t + ".") and t != own:
                    found.add(t)
                t = t.rpartition(".")[0]
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node, or a node that imports itself (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _stage(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else None


def test_the_graph_is_read():
    # the reader finds edges it must find: a relative import two levels up, a lazy one inside a function
    assert "profiling_core.store.runs" in GRAPH["profiling_core.run.runner"]
    assert "profiling_core.run.worker" in GRAPH["profiling_core.run.runner"]
    assert "profiling_core.run.loop" in GRAPH["profiling_core.run.worker"]  # `from . import loop`, in a function
    assert "profiling_core.analyses" in GRAPH["profiling_core.explain.questions"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"a"}}) == [["a"]] and _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_stages_import_only_the_stages_below_them():
    assert {_stage(m) for m in MODULES} - {None, "__main__"} == set(STAGES), "a stage is missing from STAGES"
    wrong = []
    for mod, deps in GRAPH.items():
        s = _stage(mod)
        if s in (None, "__main__"):
            continue
        for d in deps:
            t = _stage(d)
            if t is not None and t != s and STAGES.index(t) > STAGES.index(s):
                wrong.append(f"{mod} -> {d}")
    assert wrong == []


def _ui_graph() -> dict[str, set[str]]:
    """The modules of the pages' UI package (``pages/_ui``, its ``__init__`` included) and those of them each
    imports, relative (``from .cache import x``, ``from . import cache``) or absolute (``pages._ui.cache``)."""
    folder = ROOT / "pages" / "_ui"
    mods = {p.stem: p for p in folder.glob("*.py")}
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    targets = [node.module] if node.module else [a.name for a in node.names]
                elif node.level == 0 and (node.module or "").startswith("pages._ui"):
                    rest = node.module[len("pages._ui"):].lstrip(".")
                    targets = [rest] if rest else [a.name if a.name in mods else "__init__" for a in node.names]
                elif node.level == 0 and node.module == "pages":
                    targets = ["__init__" for a in node.names if a.name == "_ui"]
                else:
                    continue
            elif isinstance(node, ast.Import):
                targets = [a.name[len("pages._ui"):].lstrip(".") or "__init__" for a in node.names
                           if a.name.startswith("pages._ui")]
            else:
                continue
            deps |= {t.split(".")[0] for t in targets if t.split(".")[0] in mods and t.split(".")[0] != name}
        graph[name] = deps
    return graph


def test_the_ui_package_has_no_import_cycles():
    graph = _ui_graph()
    assert "cache" in graph["state"] and "state" in graph["__init__"]  # the reader finds the edges it must
    assert _cycles(graph) == []


def _page_files() -> list[Path]:
    return sorted((ROOT / "pages").rglob("*.py")) + [ROOT / "streamlit_app.py"]


def test_pages_import_only_the_public_api():
    bad = []
    for path in _page_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += [f"{path.name}: import {a.name}" for a in node.names
                        if a.name.startswith("profiling_core") and a.name not in PUBLIC]
            elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("profiling_core"):
                if node.module not in PUBLIC:
                    bad.append(f"{path.name}: from {node.module} import ...")
                    continue
                public = set(importlib.import_module(node.module).__all__)
                bad += [f"{path.name}: from {node.module} import {a.name}" for a in node.names if a.name not in public]
    assert bad == []


def test_pages_hold_no_profiling_work():
    # UI only: no page (nor the UI package) imports torch, numpy, sqlite3, msgspec or altair itself
    heavy = {"torch", "numpy", "sqlite3", "msgspec", "altair", "perfetto"}
    found = []
    for path in _page_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in heavy]
    assert found == []


@pytest.mark.parametrize("module", PUBLIC)
def test_every_public_name_resolves(module):
    mod = importlib.import_module(module)
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert missing == [] and len(set(mod.__all__)) == len(mod.__all__)


def test_the_top_level_is_the_card():
    import profiling_core
    verbs = [n for n in profiling_core.__all__ if not n.endswith("Error")]
    assert verbs == ["ExperimentConfig", "run_experiment", "run_sweep", "RunStore", "open_trace", "analyze",
                     "findings", "diagnose", "calibrate"]
    errors = [n for n in profiling_core.__all__ if n.endswith("Error")]
    assert all(issubclass(getattr(profiling_core, n), profiling_core.ProfilingError) for n in errors)
    assert callable(profiling_core.findings) and callable(profiling_core.analyze)
    with pytest.raises(AttributeError, match=r"from profiling_core\.present import md_text"):
        profiling_core.md_text  # noqa: B018 - a name the top level once had says where it lives now
