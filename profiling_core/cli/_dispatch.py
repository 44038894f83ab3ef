"""Parse a command line and run its command: the one place the command line turns exceptions into exit statuses
(``commands.main`` for every command; ``cli.main`` for an ``analyze`` process, with only that command's parser)."""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from ..errors import ProfilingError, WorkerError
from ..present.terminal import echo


def dispatch(parser: argparse.ArgumentParser, argv: Optional[list[str]] = None) -> int:
    """Parse ``argv`` with ``parser`` and call the command it names (``func``); returns the exit status: the
    command's, 1 when stdout's reader went away, 2 for an error of the input (a one-line reason on stderr), 3 for a
    worker's failure, 130 when interrupted."""
    a = parser.parse_args(argv)
    try:
        rc = a.func(a)
        sys.stdout.flush()  # inside the try: a reader that went away shows here, not at exit
        return rc
    except BrokenPipeError:
        # The reader went away (`ls | head`): say nothing more. Point stdout at devnull so that Python's flush at
        # exit does not raise again (the recipe of Python's signal module documentation).
        import os
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except WorkerError as exc:
        echo("error: " + " ".join(str(exc).split())[:500], file=sys.stderr)
        return 3
    except (ProfilingError, OSError) as exc:
        echo("error: " + " ".join(str(exc).split())[:500], file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        echo("interrupted", file=sys.stderr)
        return 130
