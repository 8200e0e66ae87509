"""Opens the Postgres checkpointer and Store (sync or async) on one database."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore
from langgraph.store.postgres.base import PostgresIndexConfig
from psycopg.conninfo import conninfo_to_dict

from ctxgraph.store.persistence.advisory import SETUP_KEY, atry_lock_until, try_lock_until
from ctxgraph.store.persistence.change_tracking import install_change_tracking
from ctxgraph.store.persistence.embedded import database_uri
from ctxgraph.store.persistence.vector_index import embedding_index

_prepared: set[tuple[str, bool]] = set()
"""Databases (and whether with vector tables) this process has already set up."""

SETUP_WAIT = 300.0
"""Seconds a process waits for another one to finish creating the tables."""


class DatabaseError(RuntimeError):
    """The database could not be reached or prepared; the message names the URI's host."""


@dataclass(frozen=True)
class Persistence:
    """A checkpointer and a Store that share one Postgres database."""

    checkpointer: PostgresSaver
    store: PostgresStore
    uri: str


@dataclass(frozen=True)
class AsyncPersistence:
    """The async twin of ``Persistence``."""

    checkpointer: AsyncPostgresSaver
    store: AsyncPostgresStore
    uri: str


_last_uri: list[str] = []
"""The URI this process opened most recently, for errors raised outside ``open_*``."""

_FAULTS: tuple[type[Exception], ...] = (psycopg.OperationalError, psycopg.InterfaceError)
"""psycopg errors that mean the database is unreachable, gone or shut down (not a bug)."""


def _redacted(uri: str) -> str:
    """The URI without user name and password; a key=value string keeps host, port, dbname."""
    if "://" in uri:
        _, at, tail = uri.rpartition("@")
        return f"postgresql://…@{tail}" if at else uri
    try:
        params = conninfo_to_dict(uri)
    except psycopg.Error:
        return "DATABASE_URI (malformed)"
    kept = " ".join(f"{k}={params[k]}" for k in ("host", "port", "dbname") if params.get(k))
    return kept or "DATABASE_URI"


EXAMPLE_URI = "postgresql://user:password@localhost:5432/ctxgraph"
"""The example a malformed ``DATABASE_URI`` error shows."""


def _checked(uri: str) -> str:
    """``uri`` if libpq can parse it; else the one-line ``DatabaseError`` with an example."""
    try:
        conninfo_to_dict(uri)
    except psycopg.Error as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else "cannot parse it"
        raise DatabaseError(
            f"DATABASE_URI is not a valid Postgres URI ({reason}): set it to a URI such as "
            f"{EXAMPLE_URI}, or unset it to use the embedded Postgres"
        ) from error
    return uri


@contextmanager
def database_errors(uri: str | None = None) -> Iterator[None]:
    """Turn a lost, refused or shut-down database connection into a one-line ``DatabaseError``.

    Use it around code that runs statements after ``open_persistence`` returned (a
    graph's ``stream``, whose checkpoint writes fail when the server stops mid-turn).
    ``uri`` names the database in the message; by default, the one opened last.
    """
    try:
        yield
    except _FAULTS as error:
        target = uri or (_last_uri[-1] if _last_uri else "")
        raise unreachable(target, error) from error


@contextmanager
def open_persistence(
    uri: str | None = None, *, index: PostgresIndexConfig | None = None
) -> Iterator[Persistence]:
    """Open the checkpointer and Store; tables are created on first use in this process.

    ``index`` gives the Store an embedding model (pgvector) for hybrid memory search;
    without it, ``CTXGRAPH_EMBEDDING_MODEL`` is read (see ``store.embeddings``).
    """
    resolved = _checked(uri or database_uri())
    _last_uri.append(resolved)
    index = index if index is not None else embedding_index(os.environ)
    with ExitStack() as stack:
        try:
            checkpointer = stack.enter_context(PostgresSaver.from_conn_string(resolved))
            store = stack.enter_context(PostgresStore.from_conn_string(resolved, index=index))
            if (resolved, index is not None) not in _prepared:
                with _setup_lock(resolved):
                    checkpointer.setup()
                    store.setup()
                    install_change_tracking(resolved)
                _prepared.add((resolved, index is not None))
        except _FAULTS as error:
            raise unreachable(resolved, error) from error
        yield Persistence(checkpointer=checkpointer, store=store, uri=resolved)


@asynccontextmanager
async def open_async_persistence(
    uri: str | None = None, *, index: PostgresIndexConfig | None = None
) -> AsyncIterator[AsyncPersistence]:
    """Async version of ``open_persistence``."""
    resolved = _checked(uri or database_uri())
    _last_uri.append(resolved)
    index = index if index is not None else embedding_index(os.environ)
    async with AsyncExitStack() as stack:
        try:
            checkpointer = await stack.enter_async_context(
                AsyncPostgresSaver.from_conn_string(resolved)
            )
            store = await stack.enter_async_context(
                AsyncPostgresStore.from_conn_string(resolved, index=index)
            )
            if (resolved, index is not None) not in _prepared:
                async with _async_setup_lock(resolved):
                    await checkpointer.setup()
                    await store.setup()
                    await asyncio.to_thread(install_change_tracking, resolved)
                _prepared.add((resolved, index is not None))
        except _FAULTS as error:
            raise unreachable(resolved, error) from error
        yield AsyncPersistence(checkpointer=checkpointer, store=store, uri=resolved)


@contextmanager
def _setup_lock(uri: str) -> Iterator[None]:
    """Hold the setup lock while this process creates or migrates the tables.

    Processes that start together on a new database would otherwise run the same
    ``CREATE`` statements and migrations at once, and all but one would fail with a
    ``UniqueViolation``. The lock lives on its own connection and ends with it.
    """
    with psycopg.connect(uri, autocommit=True) as conn:
        if not try_lock_until(conn, SETUP_KEY, SETUP_WAIT):
            raise _setup_timeout(uri)
        yield


@asynccontextmanager
async def _async_setup_lock(uri: str) -> AsyncIterator[None]:
    """Async ``_setup_lock``."""
    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
        if not await atry_lock_until(conn, SETUP_KEY, SETUP_WAIT):
            raise _setup_timeout(uri)
        yield


def _setup_timeout(uri: str) -> DatabaseError:
    return DatabaseError(
        f"cannot use the database at {_redacted(uri)}: another process kept creating the "
        f"tables for {SETUP_WAIT:g} s"
    )


def unreachable(uri: str, error: Exception) -> DatabaseError:
    """The one-line error for a database that refused a connection or a statement."""
    text = str(error).strip()
    reason = text.splitlines()[0] if text else type(error).__name__
    where = f" at {_redacted(uri)}" if uri else ""
    return DatabaseError(f"cannot use the database{where}: {reason}")
