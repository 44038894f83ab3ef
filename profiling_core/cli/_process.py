"""What a command-line process does at its start and at its end (``cli.main`` and ``cli.analyze``'s own entry
point call these; nothing else should)."""
from __future__ import annotations

import gc
import sys


def text_in_python_objects() -> None:
    """For an ``analyze`` process, before pandas is imported: keep pandas from loading pyarrow, so that pandas holds
    text columns as Python strings (its ``"python"`` string storage, what pandas does where pyarrow is not
    installed) instead of copying each into Arrow buffers.

    Nothing in this project uses pyarrow; pandas 3 imports it whenever it is installed, only to store text columns.
    The analyses' text columns are Python strings shared with the trace's columns (``TextColumn``), so the Arrow copy
    is pure cost for a command: the library's import and memory pool, and a conversion at each frame made with text
    (docs/BENCHMARKS.md has the figures). The analyses compute the same values on either storage (the whole-process
    benchmark compares the outputs byte for byte with a process that has pyarrow). Only a command-line process does
    this: the app and other callers of the library keep pandas as it is; and nothing happens once pandas or pyarrow
    is imported."""
    if "pandas" not in sys.modules:
        sys.modules.setdefault("pyarrow", None)  # an import of pyarrow then raises ImportError, which pandas expects


def leaving() -> None:
    """Called when a command-line process has done its work and is about to exit: moves every object into the
    collector's permanent generation, so that the interpreter's collections at exit do not walk the heap a command
    leaves (the modules it imported, the caches of its analyses) only for the operating system to free it anyway.
    Not for a process that goes on: what is frozen is never collected."""
    gc.freeze()
