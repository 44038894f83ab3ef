"""What a command-line process does at its start and at its end (``cli.main`` and ``cli.analyze``'s own entry
point call these; nothing else should)."""
from __future__ import annotations

import gc
import os
import sys


def starting_analyze() -> None:
    """What an ``analyze`` process does first, before numpy and pandas are imported: :func:`text_in_python_objects`
    and :func:`one_blas_thread`."""
    text_in_python_objects()
    one_blas_thread()


def one_blas_thread() -> None:
    """For an ``analyze`` process, before numpy is imported: numpy's OpenBLAS to start no threads of its own
    (``OPENBLAS_NUM_THREADS=1``, unless the environment already says how many).

    At its import, OpenBLAS starts one thread per core, and each waits for work by spinning for a while before it
    sleeps; the analyses do no BLAS work (no matrix products: sorts, searches and sums), so those threads only burn
    other cores' time (docs/BENCHMARKS.md has the figures of a 16-core host). The forked loader inherits the
    setting. Only a command-line process does this, and nothing happens once numpy is imported."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


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
