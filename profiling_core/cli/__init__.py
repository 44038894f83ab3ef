"""The command line: ``python -m profiling_core {run,sweep,workloads,ls,show,rm,import,calibrate,analyze}``.

- ``commands``: the commands and their arguments (``profiling-core`` and ``python -m profiling_core``).
- ``analyze``: ``analyze PATH``'s summary and ``--json`` object; also ``python -m profiling_core.cli.analyze``.
- ``_process``: what a command-line process does at its start and its end (:func:`starting_analyze`,
  :func:`leaving`).

Each command is a thin layer over the library: what it prints is computed by the stages below.
"""
from __future__ import annotations

import sys
from typing import Optional

from ._process import leaving, starting_analyze, text_in_python_objects

__all__ = ["main", "starting_analyze", "text_in_python_objects", "leaving"]


def main(argv: Optional[list] = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Without ``argv`` this is the process's own command line (``python -m profiling_core``, ``profiling-core``): an
    ``analyze`` process starts with :func:`starting_analyze` and every command ends with :func:`leaving`."""
    if (sys.argv[1:] if argv is None else argv)[:1] == ["analyze"]:
        if argv is None:
            starting_analyze()
        from ._dispatch import dispatch
        from .analyze import command_parser
        rc = dispatch(command_parser(), argv)  # its parser alone: the other commands' imports are not needed
    else:
        from .commands import main as _main  # imported on call: ``-m profiling_core.cli.analyze`` need not load it
        rc = _main(argv)
    if argv is None:
        leaving()
    return rc
