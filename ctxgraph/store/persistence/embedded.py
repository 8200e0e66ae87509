"""Where the database lives: ``DATABASE_URI``, or an embedded Postgres started on demand."""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxgraph.store.persistence.embedded_server import EmbeddedServer

DATABASE_HELP = (
    "set DATABASE_URI to a Postgres server "
    "(for example postgresql://user:password@localhost:5432/ctxgraph)"
)

_servers: dict[Path, EmbeddedServer] = {}


class EmbeddedPostgresError(RuntimeError):
    """The embedded Postgres could not be started; the message says what to set instead."""


def data_home(environ: Mapping[str, str]) -> Path:
    """The ctxgraph data folder: ``CTXGRAPH_HOME``, else the per-user data directory."""
    configured = environ.get("CTXGRAPH_HOME", "").strip()
    if configured:
        return Path(configured).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("ctxgraph", appauthor=False))


def embedded_uri(home: Path) -> str:
    """Start (or join) the embedded Postgres whose data lives under ``home``; return its URI.

    Several processes may share one data folder: the first starts the server, later ones
    connect to it, and the last live one to exit stops it (see ``embedded_server``). A
    server that died, or a stale ``postmaster.pid``, is replaced by a new start.

    Args:
        home: the data folder (``CTXGRAPH_HOME``).

    Returns:
        The ``postgresql://`` URI of the server.

    Raises:
        EmbeddedPostgresError: the server could not be started; the message names the
            cause and what to do (and that ``DATABASE_URI`` avoids the embedded server).

    """
    from ctxgraph.store.persistence.embedded_server import EmbeddedServer, ServerError

    pgdata = home / "pgdata"
    server = _servers.get(pgdata) or EmbeddedServer(home)
    try:
        uri = server.join()
    except ServerError as error:
        remedy = f"{error.remedy}, or {DATABASE_HELP}" if error.remedy else DATABASE_HELP
        raise EmbeddedPostgresError(
            f"could not start the embedded Postgres in {pgdata}: {error}; {remedy}"
        ) from error
    except OSError as error:  # the data folder could not be created or written
        raise EmbeddedPostgresError(
            f"could not start the embedded Postgres in {pgdata}: "
            f"{type(error).__name__}: {error}; set CTXGRAPH_HOME to a writable folder, "
            f"or {DATABASE_HELP}"
        ) from error
    except Exception as error:  # anything else also means "could not start"
        raise EmbeddedPostgresError(
            f"could not start the embedded Postgres in {pgdata}: "
            f"{type(error).__name__}: {error}; {DATABASE_HELP}"
        ) from error
    if pgdata not in _servers:
        _servers[pgdata] = server
        atexit.register(server.leave_quietly)
    return uri


def database_uri(environ: Mapping[str, str] | None = None) -> str:
    """The Postgres URI to use: ``DATABASE_URI`` when set, else the embedded server's."""
    env = os.environ if environ is None else environ
    configured = env.get("DATABASE_URI", "").strip()
    if configured:
        return configured
    return embedded_uri(data_home(env))
