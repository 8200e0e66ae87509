"""How the ``ctxgraph`` command ends: the interrupted exit statuses and the quick exit."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at startup
if TYPE_CHECKING:
    from typing import NoReturn

SIGINT_EXIT = 130
"""Exit status of a command stopped by SIGINT (Ctrl-C): 128 + 2."""

SIGTERM_EXIT = 143
"""Exit status of ``run`` and ``chat`` stopped by SIGTERM: 128 + 15."""

INTERRUPTED_EXITS = frozenset({SIGINT_EXIT, SIGTERM_EXIT})


def exit_at_once(status: int) -> NoReturn:
    """End the process with ``status`` without the interpreter's teardown.

    Standard output and error are flushed (as far as their readers still read) and the
    exit handlers run (they close logging and leave the embedded Postgres), then the
    process ends. What the interpreter would
    do next (join worker threads, free every module) can take most of a second after a
    turn, and nothing in it is needed once the command's writes are committed.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # no reader left, or stream closed
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(status)
