"""One writer per thread: a Postgres advisory lock that serializes runs on one thread.

LangGraph starts every run from the thread's latest checkpoint. Two runs that start
together on one thread both extend the same checkpoint, and whichever writes last hides
the other's turns (they survive only in a sibling checkpoint). Holding
``thread_lock`` (or ``athread_lock``) around each run makes the runs take turns::

    with open_persistence() as db:
        graph = build_graph(checkpointer=db.checkpointer, store=db.store)
        with thread_lock(db, "t1"):
            graph.invoke(inputs, {"configurable": {"thread_id": "t1"}}, context=context)

The lock is a session-level advisory lock on a connection of its own, opened from
``persistence.uri``: it covers every process that uses the same database, it is released
when the block ends, and Postgres releases it when the holding process dies.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import psycopg

from ctxgraph.store.persistence.advisory import (
    atry_lock_until,
    aunlock,
    thread_key,
    try_lock_until,
    unlock,
)
from ctxgraph.store.persistence.connection import (
    AsyncPersistence,
    DatabaseError,
    Persistence,
    unreachable,
)

__all__ = [
    "DEFAULT_WAIT",
    "ThreadBusyError",
    "ThreadLockError",
    "athread_lock",
    "thread_lock",
]

logger = logging.getLogger("ctxgraph.persistence")

DEFAULT_WAIT = 30.0
"""Seconds a run waits for another run on the same thread to finish."""


class ThreadLockError(RuntimeError):
    """The lock that gives a thread one writer at a time could not be taken."""


class ThreadBusyError(ThreadLockError):
    """Another run held the thread for longer than this run was willing to wait."""

    def __init__(self, thread_id: str, waited: float) -> None:
        self.thread_id = thread_id
        self.waited = waited
        super().__init__(f"thread {thread_id} is busy: another run holds it (waited {waited:g} s)")


def checked_wait(wait: float) -> float:
    """``wait`` as a float, or ``ValueError`` when it is not a non-negative number."""
    if isinstance(wait, bool) or not isinstance(wait, int | float):
        raise ValueError(f"wait must be a number of seconds, got {wait!r}")
    if not math.isfinite(wait) or wait < 0:
        raise ValueError(f"wait must be a non-negative, finite number of seconds, got {wait!r}")
    return float(wait)


def _lost(thread_id: str, reason: str) -> None:
    """Warn that the lock was lost, unless the run itself failed on the database.

    When the run is ending with a database error (the server went away), that error is
    what the caller reports; the lost lock is one more symptom of it and is only logged
    for debugging.
    """
    if _failing_on_the_database(sys.exc_info()[1]):
        logger.debug(
            "the lock on thread %s went with the database connection (%s)", thread_id, reason
        )
        return
    logger.warning(
        "the lock on thread %s was lost while a run held it (%s); another run may have "
        "written to the thread at the same time",
        thread_id,
        reason,
    )


def _failing_on_the_database(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it came from, is a database error."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, psycopg.Error | DatabaseError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


@contextmanager
def _reaching(uri: str) -> Iterator[None]:
    """Raise ``DatabaseError`` (``unreachable``) for a connection error in the block."""
    try:
        yield
    except psycopg.OperationalError as error:
        raise unreachable(uri, error) from error


@contextmanager
def _released(thread_id: str) -> Iterator[Callable[[bool], None]]:
    """Check the unlock the block reports: a database error or an unknown lock is lost."""
    outcome: list[bool] = []
    try:
        yield outcome.append
    except psycopg.Error as error:
        _lost(thread_id, f"{type(error).__name__}: {error}".strip())
    else:
        if not all(outcome):
            _lost(thread_id, "the database no longer knew it")


def _busy_unless(acquired: bool, thread_id: str, seconds: float) -> None:
    if not acquired:
        raise ThreadBusyError(thread_id, seconds)


@contextmanager
def thread_lock(
    persistence: Persistence | AsyncPersistence, thread_id: str, *, wait: float = DEFAULT_WAIT
) -> Iterator[None]:
    """Hold the thread's lock for the block; wait up to ``wait`` seconds for it.

    Raises ``ThreadBusyError`` when another holder keeps it longer than ``wait`` (0: one
    attempt), and ``DatabaseError`` when the database cannot be reached. A waiter retries
    every 10-100 ms; waiters are not queued in arrival order.
    """
    seconds, key = checked_wait(wait), thread_key(thread_id)
    with _reaching(persistence.uri):
        conn = psycopg.connect(persistence.uri, autocommit=True)
    with conn:
        with _reaching(persistence.uri):
            _busy_unless(try_lock_until(conn, key, seconds), thread_id, seconds)
        try:
            yield
        finally:
            with _released(thread_id) as released:
                released(unlock(conn, key))


@asynccontextmanager
async def athread_lock(
    persistence: Persistence | AsyncPersistence, thread_id: str, *, wait: float = DEFAULT_WAIT
) -> AsyncIterator[None]:
    """Async ``thread_lock``: the same lock, so sync and async runs take turns too."""
    seconds, key = checked_wait(wait), thread_key(thread_id)
    with _reaching(persistence.uri):
        conn = await psycopg.AsyncConnection.connect(persistence.uri, autocommit=True)
    async with conn:
        with _reaching(persistence.uri):
            _busy_unless(await atry_lock_until(conn, key, seconds), thread_id, seconds)
        try:
            yield
        finally:
            with _released(thread_id) as released:
                released(await aunlock(conn, key))
