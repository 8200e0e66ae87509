"""The ``ctxgraph`` command line: chat, run, demo, threads, memory and skills.

``parser`` builds the command line, ``dispatch`` runs a parsed command; this module is the
entry point: it sets up logging and turns the errors a user can fix into one line and an
exit status.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ctxgraph.graph.cli.dispatch import dispatch
from ctxgraph.graph.cli.dispatch import thread_wait as thread_wait
from ctxgraph.graph.cli.exit_status import INTERRUPTED_EXITS, SIGINT_EXIT, exit_at_once
from ctxgraph.graph.cli.options import SEARCH_LIMITS as SEARCH_LIMITS
from ctxgraph.graph.cli.options import OptionError
from ctxgraph.graph.cli.parser import DEBUG_VARIABLE, MODEL_ERROR_EXIT, build_parser
from ctxgraph.graph.cli.parser import THREAD_BUSY_EXIT as THREAD_BUSY_EXIT
from ctxgraph.graph.cli.parser import USER_ERROR_EXIT as USER_ERROR_EXIT

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at startup
if TYPE_CHECKING:
    from typing import NoReturn

_USER_ERRORS = (
    ("ctxgraph.state.models", "ModelConfigError"),
    ("ctxgraph.state.settings", "SettingsError"),
    ("ctxgraph.state.context", "ContextError"),
    ("ctxgraph.store.persistence.embedded", "EmbeddedPostgresError"),
    ("ctxgraph.store.persistence.connection", "DatabaseError"),
    ("ctxgraph.graph.cli.threads", "UnknownThreadError"),
    ("ctxgraph.graph.cli.threads", "UnknownArtifactRefError"),
    ("ctxgraph.graph.cli.memory", "UnknownFactError"),
    ("ctxgraph.graph.cli.skills", "UnknownSkillError"),
    ("ctxgraph.store.persistence.vector_index", "EmbeddingConfigError"),
    ("ctxgraph.nodes.memory.render", "MemoryBudgetError"),
    ("ctxgraph.graph.subagent_files", "SubagentFileError"),
    ("ctxgraph.store.forget.run", "ForgetError"),
    ("ctxgraph.store.redaction", "RedactionError"),
)
"""Errors reported as one line and exit status 2 instead of a traceback (module, class), as
``OptionError`` is."""


def _user_errors() -> tuple[type[Exception], ...]:
    """The classes of ``_USER_ERRORS`` whose modules are loaded.

    An error is an instance of a class only when the class's module has been imported, so
    the others need not be: reporting an error loads nothing new.
    """
    found: list[type[Exception]] = [OptionError]
    for module, name in _USER_ERRORS:
        loaded = sys.modules.get(module)
        error = getattr(loaded, name, None) if loaded is not None else None
        if isinstance(error, type) and issubclass(error, Exception):
            found.append(error)
    return tuple(found)


def entry() -> NoReturn:
    """The ``ctxgraph`` console script: ``main``, then the exit.

    A command stopped by Ctrl-C or SIGTERM ends at once after its exit handlers (see
    ``exit_at_once``): it was asked to stop, and the interpreter's teardown after a turn
    would add most of a second. Other commands exit the usual way.
    """
    status = main()
    if status in INTERRUPTED_EXITS:
        exit_at_once(status)
    sys.exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``ctxgraph`` command with ``argv``; its exit status."""
    args = build_parser().parse_args(argv)  # `--help` and usage errors exit here
    import logging

    if args.debug:
        os.environ[DEBUG_VARIABLE] = "1"  # also read where chat reports a failed turn
    debug = os.environ.get(DEBUG_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")
    from ctxgraph.graph.cli.notices import configure_logging

    configure_logging(verbose=args.verbose, debug=debug)
    if not debug:
        # psycopg warns about connections it drops while a broken one is cleaned up; the
        # command reports the database fault itself, in one line.
        logging.getLogger("psycopg").setLevel(logging.ERROR)
    try:
        if args.command == "skills":  # reads folders only: no database, no psycopg
            return dispatch(args)
        from ctxgraph.store.persistence.connection import database_errors

        with database_errors():  # a database fault mid-command becomes one line
            return dispatch(args)
    except KeyboardInterrupt:
        return SIGINT_EXIT
    except BrokenPipeError:  # the reader (e.g. `| head`) stopped reading
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0
    except Exception as error:
        reported = _reported(error)
        if reported is None:
            raise
        status, line = reported
        if debug:
            import traceback

            traceback.print_exc(file=sys.stderr)
        print(f"ctxgraph: {line}", file=sys.stderr)
        return status


def _reported(error: Exception) -> tuple[int, str] | None:
    """The exit status and line of an error reported as one line, or None for a traceback."""
    status = _exit_status(error)
    if status is not None:
        return status, str(error)
    from ctxgraph.state.model_errors import endpoint_error, is_endpoint_error

    if is_endpoint_error(error):
        # Summary and memory calls do not fail a turn, so a failure that ends the command
        # is the main model's, or the embedding model's (named by its request's path).
        return MODEL_ERROR_EXIT, str(endpoint_error(error, "main"))
    return None


def _exit_status(error: Exception) -> int | None:
    """The exit status of an error reported as its message, or None."""
    if isinstance(error, _user_errors()):
        return USER_ERROR_EXIT
    thread_lock = sys.modules.get("ctxgraph.store.persistence.thread_lock")
    if thread_lock is not None and isinstance(error, thread_lock.ThreadBusyError):
        return THREAD_BUSY_EXIT
    return None
