"""Cursors on a LangGraph Postgres Store's own connection, for SQL the Store does not run.

A Store holds either one connection, shared by its threads (sync) or coroutines (async)
under the Store's ``lock``, or a connection pool. These helpers give a cursor either way,
so other modules can query the Store's database without opening connections of their own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from langgraph.store.postgres import AsyncPostgresStore, PostgresStore
from psycopg import AsyncCursor, Cursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

__all__ = ["astore_cursor", "store_cursor"]


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
