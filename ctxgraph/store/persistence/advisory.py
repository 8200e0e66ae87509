"""Postgres advisory locks of ctxgraph: their keys, and taking one without blocking others.

Postgres identifies an advisory lock either by one 64-bit key or by two 32-bit keys, and
the two forms never conflict with each other. ctxgraph uses only the two-key form, with
a fixed first key per purpose, so its locks show up in ``pg_locks`` as
``locktype = 'advisory'`` with ``classid`` set to one of the constants below and
``objsubid = 2``, and they cannot block a user of the one-key form.

A waiter polls ``pg_try_advisory_lock`` rather than blocking in ``pg_advisory_lock``: a
statement blocked on a lock keeps its snapshot open, and ``CREATE INDEX CONCURRENTLY``
(run when the tables are set up) waits for every open snapshot, so a blocked waiter
could hold up the very holder it waits for.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time

import psycopg
from psycopg.rows import TupleRow

__all__ = [
    "SETUP_KEY",
    "SETUP_LOCKS",
    "THREAD_LOCKS",
    "atry_lock_until",
    "aunlock",
    "thread_key",
    "try_lock_until",
    "unlock",
]

THREAD_LOCKS = 0x63747854
"""First key of every per-thread lock (the bytes ``ctxT``)."""

SETUP_LOCKS = 0x63747853
"""First key of the lock that serializes creating the tables (the bytes ``ctxS``)."""

SETUP_KEY = (SETUP_LOCKS, 0)
"""The lock held while a process creates or migrates ctxgraph's tables."""

_TRY_LOCK = "SELECT pg_try_advisory_lock(%s, %s)"
_UNLOCK = "SELECT pg_advisory_unlock(%s, %s)"
_FIRST_PAUSE = 0.01
_LONGEST_PAUSE = 0.1
"""Seconds between two attempts: doubling from the first to the longest, with jitter."""


def thread_key(thread_id: str) -> tuple[int, int]:
    """The two keys of the advisory lock of ``thread_id``.

    The second key is a stable 32-bit hash of the id (BLAKE2b), the same in every process
    and Python version. Two different threads share a key with a chance of one in four
    billion, and then they merely take turns.
    """
    digest = hashlib.blake2b(thread_id.encode("utf-8"), digest_size=4).digest()
    return THREAD_LOCKS, int.from_bytes(digest, "big", signed=True)


def _pauses(wait: float) -> tuple[float, float]:
    """The deadline for ``wait`` seconds from now, and the first pause."""
    return time.monotonic() + wait, _FIRST_PAUSE


def _next_pause(pause: float, deadline: float) -> tuple[float, float]:
    """How long to sleep now (never past the deadline), and the pause after that one."""
    sleep = min(pause * random.uniform(0.5, 1.0), max(0.0, deadline - time.monotonic()))
    return sleep, min(pause * 2, _LONGEST_PAUSE)


def try_lock_until(conn: psycopg.Connection[TupleRow], key: tuple[int, int], wait: float) -> bool:
    """Take the session-level lock ``key`` on ``conn``, trying until ``wait`` seconds passed.

    Returns False when it was still held by another session at the deadline (``wait`` 0:
    one attempt).
    """
    deadline, pause = _pauses(wait)
    while True:
        row = conn.execute(_TRY_LOCK, key).fetchone()
        if row is not None and row[0]:
            return True
        if time.monotonic() >= deadline:
            return False
        sleep, pause = _next_pause(pause, deadline)
        time.sleep(sleep)


async def atry_lock_until(
    conn: psycopg.AsyncConnection[TupleRow], key: tuple[int, int], wait: float
) -> bool:
    """Async ``try_lock_until``."""
    deadline, pause = _pauses(wait)
    while True:
        row = await (await conn.execute(_TRY_LOCK, key)).fetchone()
        if row is not None and row[0]:
            return True
        if time.monotonic() >= deadline:
            return False
        sleep, pause = _next_pause(pause, deadline)
        await asyncio.sleep(sleep)


def unlock(conn: psycopg.Connection[TupleRow], key: tuple[int, int]) -> bool:
    """Release the session-level lock ``key``; False when this session did not hold it."""
    row = conn.execute(_UNLOCK, key).fetchone()
    return bool(row is not None and row[0])


async def aunlock(conn: psycopg.AsyncConnection[TupleRow], key: tuple[int, int]) -> bool:
    """Async ``unlock``."""
    row = await (await conn.execute(_UNLOCK, key)).fetchone()
    return bool(row is not None and row[0])
