"""How the library's log records reach standard error: warnings, and notes with ``--verbose``.

The command's own errors are one ``ctxgraph: ...`` line (see ``main``). Log records
written while a command runs are not errors, and are shown so:

- ``warning: ...``: something the user may want to act on (a failed summary or memory
  model, a damaged archive record, a thread left busy);
- ``note: ...``, only with ``--verbose``: routine notices of compaction, which need no
  action (a background job started, applied, discarded or failed, a compaction skipped
  because the compacted request would not be smaller, the thread moved on while a
  compaction ran), and every informational record;
- ``ctxgraph: ...``: an ERROR record (the library reports a failure it did not raise).
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import TextIO

COMPACTION_LOGGER = "ctxgraph.compaction"
"""The logger of compaction and of its background jobs' events."""

EVENT_PREFIX = "compaction."
"""Every background job event starts so (``nodes.compaction.events.EVENT_PREFIX``)."""

SKIPPED = "compaction skipped"
"""The start of the record of a compaction that left the state as it was."""

NOT_ROUTINE_SKIP = ("no usable summary",)
"""Reasons of a skipped compaction that are worth a warning: every summary model failed."""

ROUTINE_DISCARD = "discarded, nothing written"
"""In the record of a compaction the thread outran (another turn committed first)."""

NOTE = "note: "
WARNING = "warning: "
ERROR = "ctxgraph: "


def is_routine(record: logging.LogRecord) -> bool:
    """Whether ``record`` is a routine compaction notice, shown only with ``--verbose``."""
    if record.levelno >= logging.ERROR or not (
        record.name == COMPACTION_LOGGER or record.name.startswith(COMPACTION_LOGGER + ".")
    ):
        return False
    message = record.getMessage()
    if message.startswith(EVENT_PREFIX) or ROUTINE_DISCARD in message:
        return True
    return message.startswith(SKIPPED) and not any(r in message for r in NOT_ROUTINE_SKIP)


class NoticeFormatter(logging.Formatter):
    """Prefixes a record by what it is: ``ctxgraph:`` an error, ``warning:``, else ``note:``.

    A routine notice (``is_routine``) is a note whatever its level.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record's message, prefixed by its kind."""
        if record.levelno >= logging.ERROR:
            prefix = ERROR
        elif record.levelno >= logging.WARNING and not is_routine(record):
            prefix = WARNING
        else:
            prefix = NOTE
        return prefix + super().format(record)


class QuietFilter(logging.Filter):
    """Without ``--verbose``: lets warnings and errors through, but no routine notice."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a record below WARNING or a routine notice."""
        return record.levelno >= logging.WARNING and not is_routine(record)


class OpenLine:
    """The output stream a streamed answer has left mid-line, if any.

    A record logged while an answer streams would otherwise land on the answer's line
    (standard output and standard error share the terminal): the handler ends that line
    first, and the answer's next token starts a new ``assistant:`` line.
    """

    def __init__(self) -> None:
        """No line is open."""
        self._stream: TextIO | None = None
        self._lock = threading.Lock()

    def opened(self, stream: TextIO) -> None:
        """``stream`` now ends in the middle of a line."""
        with self._lock:
            self._stream = stream

    def forget(self) -> None:
        """Forget an open line without ending it (its writer ended it another way)."""
        with self._lock:
            self._stream = None

    def is_open(self, stream: TextIO) -> bool:
        """Whether ``stream`` ends in the middle of a line."""
        return self._stream is stream

    def end(self) -> None:
        """End the open line, if there is one."""
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.write("\n")
            stream.flush()


OPEN_LINE = OpenLine()
"""The process's one open answer line: the command line prints one turn at a time."""


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is when a record arrives (it may be redirected).

    A record never shares a line with a streamed answer: an open line is ended first.
    """

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record to the current ``sys.stderr``, on a line of its own."""
        OPEN_LINE.end()
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(*, verbose: bool, debug: bool) -> None:
    """Show the library's records on stderr: warnings and errors, notes with ``verbose``.

    With ``verbose``, ctxgraph's informational records are notes too; with ``debug``, its
    debug records as well. As ``logging.basicConfig`` does, nothing is installed when the
    program that runs the command has configured logging itself (the root logger has a
    handler); calling it again replaces the handler it installed before.
    """
    root = logging.getLogger()
    for handler in root.handlers[:]:
        if isinstance(handler, _StderrHandler):
            root.removeHandler(handler)
    library = logging.getLogger("ctxgraph")
    library.setLevel(logging.DEBUG if debug else logging.INFO if verbose else logging.NOTSET)
    if root.handlers:
        return
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(NoticeFormatter("%(message)s"))
    if not (verbose or debug):
        handler.addFilter(QuietFilter())
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
