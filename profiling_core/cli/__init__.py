"""The command line: ``python -m profiling_core {run,sweep,workloads,ls,show,rm,import,calibrate,analyze}``.

- ``commands``: the commands and their arguments (``profiling-core`` and ``python -m profiling_core``).
- ``analyze``: ``analyze PATH``'s summary and ``--json`` object; also ``python -m profiling_core.cli.analyze``.

Each command is a thin layer over the library: what it prints is computed by the stages below.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["main"]


def main(argv: Optional[list] = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    from .commands import main as _main  # imported on call: ``-m profiling_core.cli.analyze`` need not load the rest
    return _main(argv)
