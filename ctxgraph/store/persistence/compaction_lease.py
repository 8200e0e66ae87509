"""Per-thread compaction leases: one summary job per thread at a time, across processes.

A lease holds a thread for a bounded time (``ttl_s``) and is kept only by renewing it,
so a holder that crashes stops blocking the thread once its lease expires. Every
successful acquire raises the thread's fencing token by one: before a job commits its
work it checks ``is_current(lease)`` (or writes only where the token still matches), so a
holder whose lease expired and was taken over cannot overwrite its successor's result::

    leases = leases_for(store)
    lease = leases.acquire(thread_id, new_holder(), ttl_s=60)
    if lease is not None:
        try:
            ...  # summarize, renewing the lease while the work lasts
        finally:
            leases.release(lease)

On Postgres the leases live in the table ``ctxgraph_compaction_leases`` and every expiry
is judged by the database clock, so processes whose clocks disagree still agree on who
holds a thread; ``Lease.expires_at`` is then in that clock. Other Stores get leases kept
in this process, shared by every user of the same Store object.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import threading
import time
import weakref
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar
from uuid import uuid4

from langgraph.store.base import BaseStore
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore
from psycopg.rows import DictRow

from ctxgraph.store.persistence.store_cursor import acommitted_cursor, committed_cursor

__all__ = [
    "TABLE",
    "CompactionLeases",
    "Lease",
    "LeaseState",
    "LocalLeases",
    "PostgresLeases",
    "adelete_lease",
    "delete_lease",
    "leases_for",
    "new_holder",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Lease:
    """A held lease: who holds which thread, with which fencing token, until when."""

    thread_id: str
    holder: str
    token: int
    """The fencing token: the thread's acquire count, 1 for its first lease."""
    expires_at: float
    """Epoch seconds (on Postgres, by the database clock)."""


@dataclass(frozen=True)
class LeaseState:
    """A thread's latest lease as stored, whether or not it is still held."""

    holder: str
    token: int
    expires_at: float
    live: bool
    """True while ``expires_at`` is in the future (False once expired or released)."""


class CompactionLeases(Protocol):
    """Leases that give each thread at most one compaction job at a time."""

    def acquire(self, thread_id: str, holder: str, ttl_s: float) -> Lease | None:
        """Take the thread for ``ttl_s`` seconds; None while another live lease holds it."""
        ...

    def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        """Extend a live lease to ``ttl_s`` seconds from now; None once it expired or was taken."""
        ...

    def release(self, lease: Lease) -> None:
        """Expire the lease now; does nothing once another acquire replaced it."""
        ...

    def current(self, thread_id: str) -> LeaseState | None:
        """The thread's latest lease, or None if the thread never had one."""
        ...

    def is_current(self, lease: Lease) -> bool:
        """True while no later acquire replaced ``lease`` (live, expired or released)."""
        ...

    async def aacquire(self, thread_id: str, holder: str, ttl_s: float) -> Lease | None:
        """Async :meth:`acquire`."""
        ...

    async def arenew(self, lease: Lease, ttl_s: float) -> Lease | None:
        """Async :meth:`renew`."""
        ...

    async def arelease(self, lease: Lease) -> None:
        """Async :meth:`release`."""
        ...

    async def acurrent(self, thread_id: str) -> LeaseState | None:
        """Async :meth:`current`."""
        ...

    async def ais_current(self, lease: Lease) -> bool:
        """Async :meth:`is_current`."""
        ...


def new_holder() -> str:
    """A holder name unique to this call: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:8]}"


def _check_name(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _check_ttl(ttl_s: object) -> float:
    if (
        isinstance(ttl_s, bool)
        or not isinstance(ttl_s, int | float)
        or not math.isfinite(ttl_s)
        or ttl_s <= 0
    ):
        raise ValueError(f"ttl_s must be a positive, finite number of seconds, got {ttl_s!r}")
    return float(ttl_s)


# -- in this process -------------------------------------------------------------------


class _Row(NamedTuple):
    holder: str
    token: int
    expires_at: float


class LocalLeases:
    """Leases kept in this process (one table under a lock), by the local clock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}

    def acquire(self, thread_id: str, holder: str, ttl_s: float) -> Lease | None:
        """See :meth:`CompactionLeases.acquire`."""
        _check_name("thread_id", thread_id)
        _check_name("holder", holder)
        ttl = _check_ttl(ttl_s)
        with self._lock:
            now = time.time()
            row = self._rows.get(thread_id)
            if row is not None and row.expires_at > now:
                return None
            taken = _Row(holder, row.token + 1 if row else 1, now + ttl)
            self._rows[thread_id] = taken
        return Lease(thread_id, holder, taken.token, taken.expires_at)

    def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        """See :meth:`CompactionLeases.renew`."""
        ttl = _check_ttl(ttl_s)
        with self._lock:
            now = time.time()
            row = self._rows.get(lease.thread_id)
            if row is None or row.token != lease.token or row.expires_at <= now:
                return None
            renewed = _Row(row.holder, row.token, now + ttl)
            self._rows[lease.thread_id] = renewed
        return Lease(lease.thread_id, renewed.holder, renewed.token, renewed.expires_at)

    def forget_thread(self, thread_id: str) -> int:
        """Drop the thread's row, live or not (a deleted thread); how many went (0 or 1)."""
        with self._lock:
            return 0 if self._rows.pop(thread_id, None) is None else 1

    def release(self, lease: Lease) -> None:
        """See :meth:`CompactionLeases.release`."""
        with self._lock:
            row = self._rows.get(lease.thread_id)
            if row is not None and row.token == lease.token:
                expires_at = min(row.expires_at, time.time())
                self._rows[lease.thread_id] = _Row(row.holder, row.token, expires_at)

    def current(self, thread_id: str) -> LeaseState | None:
        """See :meth:`CompactionLeases.current`."""
        _check_name("thread_id", thread_id)
        with self._lock:
            row = self._rows.get(thread_id)
            now = time.time()
        if row is None:
            return None
        return LeaseState(row.holder, row.token, row.expires_at, row.expires_at > now)

    def is_current(self, lease: Lease) -> bool:
        """See :meth:`CompactionLeases.is_current`."""
        with self._lock:
            row = self._rows.get(lease.thread_id)
        return row is not None and row.token == lease.token

    async def aacquire(self, thread_id: str, holder: str, ttl_s: float) -> Lease | None:
        """Async :meth:`acquire`."""
        return self.acquire(thread_id, holder, ttl_s)

    async def arenew(self, lease: Lease, ttl_s: float) -> Lease | None:
        """Async :meth:`renew`."""
        return self.renew(lease, ttl_s)

    async def arelease(self, lease: Lease) -> None:
        """Async :meth:`release`."""
        self.release(lease)

    async def acurrent(self, thread_id: str) -> LeaseState | None:
        """Async :meth:`current`."""
        return self.current(thread_id)

    async def ais_current(self, lease: Lease) -> bool:
        """Async :meth:`is_current`."""
        return self.is_current(lease)


# -- in Postgres -----------------------------------------------------------------------

TABLE = "ctxgraph_compaction_leases"
"""The Postgres table of leases, one row per thread that ever had one."""

_INSTALL = (
    f"SELECT pg_advisory_xact_lock(hashtext('{TABLE}'))",
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    "thread_id text PRIMARY KEY, holder text NOT NULL, token bigint NOT NULL, "
    "expires_at timestamptz NOT NULL)",
)
"""Run in one transaction; the lock keeps processes that start together from colliding."""

_EXPIRY = "extract(epoch FROM expires_at) AS expires_at"

_ACQUIRE = (
    f"INSERT INTO {TABLE} AS l (thread_id, holder, token, expires_at) "
    "VALUES (%s, %s, 1, now() + make_interval(secs => %s)) "
    "ON CONFLICT (thread_id) DO UPDATE SET holder = EXCLUDED.holder, token = l.token + 1, "
    "expires_at = EXCLUDED.expires_at WHERE l.expires_at <= now() "
    f"RETURNING token, {_EXPIRY}"
)
_RENEW = (
    f"UPDATE {TABLE} SET expires_at = now() + make_interval(secs => %s) "
    f"WHERE thread_id = %s AND token = %s AND expires_at > now() RETURNING token, {_EXPIRY}"
)
_RELEASE = (
    f"UPDATE {TABLE} SET expires_at = LEAST(expires_at, now()) "
    "WHERE thread_id = %s AND token = %s RETURNING token"
)
_DELETE = f"DELETE FROM {TABLE} WHERE thread_id = %s RETURNING token"
_CURRENT = (
    f"SELECT holder, token, {_EXPIRY}, expires_at > now() AS live FROM {TABLE} WHERE thread_id = %s"
)

_installed: weakref.WeakSet[BaseStore] = weakref.WeakSet()
"""Stores whose database this process has already given the lease table."""
_installed_guard = threading.Lock()


def _is_installed(store: BaseStore) -> bool:
    with _installed_guard:
        return store in _installed


def _mark_installed(store: BaseStore) -> None:
    with _installed_guard:
        _installed.add(store)


def _fetch(store: PostgresStore, query: str, params: tuple[object, ...]) -> DictRow | None:
    """Run one statement as its own committed transaction; its first row, if any."""
    with committed_cursor(store) as cur:
        if not _is_installed(store):
            with cur.connection.transaction():
                for statement in _INSTALL:
                    cur.execute(statement)
            _mark_installed(store)
        cur.execute(query, params)
        return cur.fetchone()


async def _afetch(
    store: AsyncPostgresStore, query: str, params: tuple[object, ...]
) -> DictRow | None:
    """Async :func:`_fetch`."""
    async with acommitted_cursor(store) as cur:
        if not _is_installed(store):
            async with cur.connection.transaction():
                for statement in _INSTALL:
                    await cur.execute(statement)
            _mark_installed(store)
        await cur.execute(query, params)
        return await cur.fetchone()


def _on_loop(store: AsyncPostgresStore, method: str, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` on the Store's event loop and wait for it, from another thread."""
    loop = store.loop
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        work.close()
        raise RuntimeError(
            f"PostgresLeases.{method}() was called on the event loop of its "
            f"AsyncPostgresStore, where it would block forever; use "
            f"`await leases.a{method}(...)` instead"
        )
    if not loop.is_running():
        work.close()
        raise RuntimeError(
            f"PostgresLeases.{method}() needs the event loop of its AsyncPostgresStore to "
            "be running"
        )
    return asyncio.run_coroutine_threadsafe(work, loop).result()


def _lease(thread_id: str, holder: str, row: DictRow | None) -> Lease | None:
    if row is None:
        return None
    return Lease(thread_id, holder, int(row["token"]), float(row["expires_at"]))


def _state(row: DictRow | None) -> LeaseState | None:
    if row is None:
        return None
    return LeaseState(
        str(row["holder"]), int(row["token"]), float(row["expires_at"]), bool(row["live"])
    )


class PostgresLeases:
    """Leases in the Store's Postgres database, judged by the database clock.

    Each call is one short transaction on the Store's own connection (or pool); the table
    is created on first use. Over an ``AsyncPostgresStore`` the sync methods work from
    any thread but the Store's event loop, where the ``a``-prefixed ones must be awaited.
    """

    def __init__(self, store: PostgresStore | AsyncPostgresStore) -> None:
        if not isinstance(store, PostgresStore | AsyncPostgresStore):
            raise TypeError(
                f"PostgresLeases needs a PostgresStore or AsyncPostgresStore, got {store!r}"
            )
        self.store = store

    def _run(self, method: str, query: str, params: tuple[object, ...]) -> DictRow | None:
        if isinstance(self.store, PostgresStore):
            return _fetch(self.store, query, params)
        return _on_loop(self.store, method, _afetch(self.store, query, params))

    async def _arun(self, query: str, params: tuple[object, ...]) -> DictRow | None:
        if isinstance(self.store, AsyncPostgresStore):
            return await _afetch(self.store, query, params)
        return await asyncio.to_thread(_fetch, self.store, query, params)

    def acquire(self, thread_id: str, holder: str, ttl_s: float) -> Lease | None:
        """See :meth:`CompactionLeases.acquire`."""
        params = (_check_name("thread_id", thread_id), _check_name("holder", holder))
        row = self._run("acquire", _ACQUIRE, (*params, _check_ttl(ttl_s)))
        return _lease(thread_id, holder, row)

    def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        """See :meth:`CompactionLeases.renew`."""
        row = self._run("renew", _RENEW, (_check_ttl(ttl_s), lease.thread_id, lease.token))
        return _lease(lease.thread_id, lease.holder, row)

    def release(self, lease: Lease) -> None:
        """See :meth:`CompactionLeases.release`."""
        self._run("release", _RELEASE, (lease.thread_id, lease.token))

    def current(self, thread_id: str) -> LeaseState | None:
        """See :meth:`CompactionLeases.current`."""
        return _state(self._run("current", _CURRENT, (_check_name("thread_id", thread_id),)))

    def is_current(self, lease: Lease) -> bool:
        """See :meth:`CompactionLeases.is_current`."""
        state = _state(self._run("is_current", _CURRENT, (lease.thread_id,)))
        return state is not None and state.token == lease.token

    async def aacquire(self, thread_id: str, holder: str, ttl_s: float) -> Lease | None:
        """Async :meth:`acquire`."""
        params = (_check_name("thread_id", thread_id), _check_name("holder", holder))
        row = await self._arun(_ACQUIRE, (*params, _check_ttl(ttl_s)))
        return _lease(thread_id, holder, row)

    async def arenew(self, lease: Lease, ttl_s: float) -> Lease | None:
        """Async :meth:`renew`."""
        row = await self._arun(_RENEW, (_check_ttl(ttl_s), lease.thread_id, lease.token))
        return _lease(lease.thread_id, lease.holder, row)

    async def arelease(self, lease: Lease) -> None:
        """Async :meth:`release`."""
        await self._arun(_RELEASE, (lease.thread_id, lease.token))

    async def acurrent(self, thread_id: str) -> LeaseState | None:
        """Async :meth:`current`."""
        return _state(await self._arun(_CURRENT, (_check_name("thread_id", thread_id),)))

    async def ais_current(self, lease: Lease) -> bool:
        """Async :meth:`is_current`."""
        state = _state(await self._arun(_CURRENT, (lease.thread_id,)))
        return state is not None and state.token == lease.token


# -- choosing ----------------------------------------------------------------------------

PROCESS_LEASES = LocalLeases()
"""The leases of every Store that is not Postgres: one set per process.

Keyed by thread id alone, not by Store object: a LangGraph server hands each run a new
Store wrapper over the same data, so leases kept per object would not keep two runs of
one thread from starting two jobs.
"""


def leases_for(store: BaseStore | None) -> CompactionLeases:
    """The leases for ``store``: in its database on Postgres, else ``PROCESS_LEASES``."""
    if isinstance(store, PostgresStore | AsyncPostgresStore):
        return PostgresLeases(store)
    return PROCESS_LEASES


def delete_lease(store: BaseStore | None, thread_id: str) -> int:
    """Delete the thread's lease row (live or not); how many rows went (0 or 1).

    For a thread that is being deleted: a job that still holds the lease loses it (its
    ``is_current`` turns False, so it commits nothing), and the next acquire starts the
    thread's fencing tokens again at 1.
    """
    _check_name("thread_id", thread_id)
    if isinstance(store, PostgresStore):
        return 0 if _fetch(store, _DELETE, (thread_id,)) is None else 1
    if isinstance(store, AsyncPostgresStore):
        return 0 if _on_loop(store, "delete", _afetch(store, _DELETE, (thread_id,))) is None else 1
    return PROCESS_LEASES.forget_thread(thread_id)


async def adelete_lease(store: BaseStore | None, thread_id: str) -> int:
    """Async :func:`delete_lease`."""
    _check_name("thread_id", thread_id)
    if isinstance(store, AsyncPostgresStore):
        return 0 if await _afetch(store, _DELETE, (thread_id,)) is None else 1
    if isinstance(store, PostgresStore):
        row = await asyncio.to_thread(_fetch, store, _DELETE, (thread_id,))
        return 0 if row is None else 1
    return delete_lease(store, thread_id)
