"""Cursors on a LangGraph Postgres Store's own connection, for SQL the Store does not run.

A Store holds either one connection, shared by its threads (sync) or coroutines (async)
under the Store's ``lock``, or a connection pool. These helpers give a cursor either way,
so other modules can query the Store's database without opening connections of their own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress

import psycopg
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore
from psycopg import AsyncCursor, Cursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

__all__ = ["acommitted_cursor", "astore_cursor", "committed_cursor", "store_cursor"]


@contextmanager
def store_cursor(store: PostgresStore) -> Iterator[Cursor[DictRow]]:
    """A cursor on the Store's own connection (under its ``lock``), or on a pooled one."""
    conn = store.conn
    if isinstance(conn, ConnectionPool):
        with conn.connection() as pooled, pooled.cursor(binary=True, row_factory=dict_row) as cur:
            yield cur
    else:
        with store.lock, conn.cursor(binary=True, row_factory=dict_row) as cur:
            yield cur


@asynccontextmanager
async def astore_cursor(store: AsyncPostgresStore) -> AsyncIterator[AsyncCursor[DictRow]]:
    """Async :func:`store_cursor`; a shared connection is used under the Store's ``lock``."""
    conn = store.conn
    if isinstance(conn, AsyncConnectionPool):
        async with (
            conn.connection() as pooled,
            pooled.cursor(binary=True, row_factory=dict_row) as cur,
        ):
            yield cur
    else:
        async with store.lock, conn.cursor(binary=True, row_factory=dict_row) as cur:
            yield cur


@contextmanager
def committed_cursor(store: PostgresStore) -> Iterator[Cursor[DictRow]]:
    """A :func:`store_cursor` whose statements form one transaction of their own.

    A transaction the connection left open is committed first (its snapshot would make
    ``now()`` and the rows read stale); the block's statements are committed when it
    ends, or rolled back when it raises.
    """
    with store_cursor(store) as cur:
        conn = cur.connection
        try:
            if not conn.autocommit:
                conn.commit()
            yield cur
            if not conn.autocommit:
                conn.commit()
        except BaseException:
            if not conn.autocommit:
                with suppress(psycopg.Error):
                    conn.rollback()
            raise


@asynccontextmanager
async def acommitted_cursor(store: AsyncPostgresStore) -> AsyncIterator[AsyncCursor[DictRow]]:
    """Async :func:`committed_cursor`."""
    async with astore_cursor(store) as cur:
        conn = cur.connection
        try:
            if not conn.autocommit:
                await conn.commit()
            yield cur
            if not conn.autocommit:
                await conn.commit()
        except BaseException:
            if not conn.autocommit:
                with suppress(psycopg.Error):
                    await conn.rollback()
            raise
