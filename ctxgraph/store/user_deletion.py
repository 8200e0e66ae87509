"""Deleting a user: its threads, its memory, its queue entries and every row that names it.

``delete_user`` (or ``adelete_user``) removes, for one user id:

- every thread whose owner record names the user: its checkpoints, blobs and writes (all
  checkpoint namespaces, subagents' included), every Store item under ``("threads", T)``
  (archive records, artifacts, background job results, memory bookkeeping, the owner
  record), its deferred memory extraction in the queue and its compaction lease row;
- every Store item under ``("memory", user)``: the facts of every agent and the profile;
- the project facts whose ``source_thread`` is one of those threads (other project facts
  are shared and stay);
- queue entries that name the user, and the user's forget receipts;
- the Postgres rows derived from those items: vector rows (``store_vectors`` cascades on
  the item's delete) and the change counters and change log of the user's memory
  namespaces (``ctxgraph_namespace_versions`` and ``ctxgraph_namespace_changes``).

It returns a ``Receipt`` with a count per place and, unless it is a dry run or nothing
was found, stores it in ``deletion_receipts()``; the receipt names the user by the
SHA-256 of its id and the places by kind and shape, never by a thread id or the user id.

The order makes a crash midway safe to finish by running the deletion again: the threads
are found from their owner records, so project facts (found by thread) go first, then
each thread, its owner record last; the user's memory, queue entries and tracking rows
are found by the user id alone, so they can go after the threads. With ``connection``
each thread is held with ``thread_lock`` while it is deleted, so a turn that is running
on it finishes first (and a turn that waits for it finds the thread gone).

Not covered: a thread saved before owners were recorded (it has no owner record, so
nothing says it is the user's), and a run or ``threads compact`` of the user that starts
while the deletion runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore, Item, PutOp
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore

from ctxgraph.state.context import ContextError, validate_label
from ctxgraph.state.sans_io import Flow, arun, held, io, run
from ctxgraph.store.namespaces import forget_receipts, memory_queue, thread_meta
from ctxgraph.store.ownership import (
    OWNER_KEY,
    athreads_owned_by,
    forget_owner,
    threads_owned_by,
)
from ctxgraph.store.persistence.change_tracking import CHANGES as CHANGE_LOG_TABLE
from ctxgraph.store.persistence.change_tracking import TABLE as COUNTER_TABLE
from ctxgraph.store.persistence.compaction_lease import (
    TABLE as LEASE_TABLE,
)
from ctxgraph.store.persistence.compaction_lease import (
    adelete_lease,
    delete_lease,
    leases_for,
)
from ctxgraph.store.persistence.connection import AsyncPersistence, Persistence
from ctxgraph.store.persistence.listing import alist_namespace, list_namespace
from ctxgraph.store.persistence.store_cursor import acommitted_cursor, committed_cursor
from ctxgraph.store.persistence.thread_lock import DEFAULT_WAIT, athread_lock, thread_lock
from ctxgraph.store.receipts import (
    DELETE_USER,
    Place,
    Receipt,
    astore_receipt,
    new_receipt,
    store_receipt,
    subject_digest,
)
from ctxgraph.store.search.index import fact_index_cache

__all__ = ["RESERVED_USER_IDS", "adelete_user", "delete_user"]

RESERVED_USER_IDS = ("projects",)
"""Ids that name shared namespaces under ``("memory",)``, not a user."""

_PROJECTS = ("memory", "projects")
_PAGE = 100
_BATCH = 500

_THREAD_KINDS = {
    "archive": "archive record",
    "redactions": "redaction record",
    "artifacts": "artifact",
    "compaction_jobs": "background job result",
    "memory": "thread memory bookkeeping",
    "meta": "thread record",
}

_VECTORS = (
    "SELECT count(*) AS n FROM store_vectors WHERE (prefix, key) IN "
    "(SELECT * FROM unnest(%s::text[], %s::text[]))"
)
_HAS_VECTORS = "SELECT to_regclass('store_vectors') IS NOT NULL AS ready"
_HAS_TRACKING = f"SELECT to_regclass('{CHANGE_LOG_TABLE}') IS NOT NULL AS ready"
_NO_LEASES = f"SELECT to_regclass('{LEASE_TABLE}') IS NULL AS ready"
"""True on a Postgres database without the lease table (no lease to count or delete)."""
_TRACKED = "WHERE prefix = %s OR prefix LIKE %s ESCAPE '\\'"


_TRACKING_KINDS = (("change log row", CHANGE_LOG_TABLE), ("change counter", COUNTER_TABLE))


def _tracking_statement(dry_run: bool) -> str:
    """One statement counting (or deleting) both tables' rows of one user's namespaces.

    The log and the counters go in one statement, so no other process can read a counter
    whose log is already gone (it would trust a log that no longer names the deleted keys).
    Parameters: the prefix and its LIKE pattern, once per table.
    """
    if dry_run:
        parts = [f"(SELECT count(*) FROM {table} {_TRACKED})" for _, table in _TRACKING_KINDS]
        return f"SELECT {parts[0]} AS log, {parts[1]} AS counters"
    (_, log), (_, counters) = _TRACKING_KINDS
    return (
        f"WITH log AS (DELETE FROM {log} {_TRACKED} RETURNING 1), "
        f"counters AS (DELETE FROM {counters} {_TRACKED} RETURNING 1) "
        "SELECT (SELECT count(*) FROM log) AS log, (SELECT count(*) FROM counters) AS counters"
    )


def _tally_tracking(tally: _Tally, rows: list[Any]) -> None:
    row = rows[0] if rows else {"log": 0, "counters": 0}
    for (kind, table), column in zip(_TRACKING_KINDS, ("log", "counters"), strict=True):
        tally.add(kind, table, int(row[column]))


def _like_literal(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def checked_user_id(user_id: object) -> str:
    """``user_id`` if it may be deleted; ``ContextError`` for an invalid or reserved id."""
    validate_label("user_id", user_id)
    assert isinstance(user_id, str)
    if user_id in RESERVED_USER_IDS:
        raise ContextError(
            f"user_id {user_id!r} cannot be deleted: it names the shared project facts, not a user"
        )
    return user_id


class _Tally:
    """Counts per (kind, where), in the order first seen."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def add(self, kind: str, where: str, count: int = 1) -> None:
        key = (kind, where)
        self.counts[key] = self.counts.get(key, 0) + count

    def places(self) -> list[Place]:
        return [Place(kind, where, n) for (kind, where), n in self.counts.items() if n]


def _thread_place(item: Item) -> tuple[str, str]:
    """Kind and where of an item under ``("threads", T)``, without the thread id."""
    rest = item.namespace[2:]
    if rest == thread_meta("t")[2:] and item.key == OWNER_KEY:
        return "owner record", "threads/*/meta"
    kind = _THREAD_KINDS.get(rest[0], "thread item") if rest else "thread item"
    return kind, "/".join(("threads", "*", *rest))


def _memory_place(item: Item, user_id: str) -> tuple[str, str]:
    """Kind and where of an item under ``("memory", user)``, the user named ``<user>``."""
    rest = item.namespace[2:]
    where = "/".join(("memory", "<user>", *rest))
    if rest == ("profile",):
        return "profile", where
    if len(rest) == 3 and rest[0] == "agents" and rest[2] == "facts":
        return "memory fact", where
    return "memory item", where


def _deletes(items: Iterable[Item]) -> list[list[PutOp]]:
    ops = [PutOp(tuple(item.namespace), item.key, None) for item in items]
    return [ops[i : i + _BATCH] for i in range(0, len(ops), _BATCH)]


def _pairs(items: Sequence[Item]) -> tuple[list[str], list[str]]:
    return [".".join(item.namespace) for item in items], [item.key for item in items]


def _count(rows: list[Any]) -> int:
    return int(rows[0]["n"]) if rows else 0


_Locking = tuple[Persistence | AsyncPersistence | None, float]
"""The connection whose thread locks are held (None: none), and how long to wait."""


def _ready(rows: list[Any]) -> bool:
    return bool(rows and rows[0]["ready"])


def _tracking_params(user_id: str) -> tuple[str, str]:
    prefix = f"memory.{user_id}"
    return prefix, f"{_like_literal(prefix)}.%"


# -- I/O, in its two forms ---------------------------------------------------------------


def _sql(store: BaseStore, query: str, params: Sequence[object] = ()) -> list[Any]:
    """Rows of one statement on a Postgres Store's database, committed; [] elsewhere."""
    if not isinstance(store, PostgresStore):
        return []
    with committed_cursor(store) as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else []


async def _asql(store: BaseStore, query: str, params: Sequence[object] = ()) -> list[Any]:
    """Async :func:`_sql` (a sync ``PostgresStore`` is queried as :func:`_sql` does)."""
    if isinstance(store, PostgresStore):
        return _sql(store, query, params)
    if not isinstance(store, AsyncPostgresStore):
        return []
    async with acommitted_cursor(store) as cur:
        await cur.execute(query, params)
        return await cur.fetchall() if cur.description else []


def _checkpoints(checkpointer: BaseCheckpointSaver[Any], thread: str) -> int:
    return sum(1 for _ in checkpointer.list({"configurable": {"thread_id": thread}}))


async def _acheckpoints(checkpointer: BaseCheckpointSaver[Any], thread: str) -> int:
    return len([_ async for _ in checkpointer.alist({"configurable": {"thread_id": thread}})])


def _current_lease(store: BaseStore, thread: str) -> int:
    return int(leases_for(store).current(thread) is not None)


async def _acurrent_lease(store: BaseStore, thread: str) -> int:
    return int(await leases_for(store).acurrent(thread) is not None)


# -- the deletion, as one flow for both drivers -----------------------------------------


def _query(store: BaseStore, query: str, params: Sequence[object] = ()) -> Flow[list[Any]]:
    return (yield from io(_sql, _asql, store, query, params))


def _namespaces(store: BaseStore, prefix: tuple[str, ...]) -> Flow[list[tuple[str, ...]]]:
    found: list[tuple[str, ...]] = []
    while True:
        page = yield from io(
            store.list_namespaces,
            store.alist_namespaces,
            prefix=prefix,
            limit=_PAGE,
            offset=len(found),
        )
        found.extend(page)
        if len(page) < _PAGE:
            return found


def _items_under(store: BaseStore, prefix: tuple[str, ...]) -> Flow[list[Item]]:
    items: list[Item] = []
    for ns in (yield from _namespaces(store, prefix)):
        items.extend((yield from io(list_namespace, alist_namespace, store, ns)))
    return items


def _matching(store: BaseStore, prefix: tuple[str, ...], match: dict[str, Any]) -> Flow[list[Item]]:
    found: list[Item] = []
    while True:
        page = yield from io(
            store.search, store.asearch, prefix, filter=match, limit=_PAGE, offset=len(found)
        )
        found.extend(page)
        if len(page) < _PAGE:
            return found


def _remove(store: BaseStore, items: Sequence[Item], tally: _Tally, dry_run: bool) -> Flow[None]:
    """Count the vector rows of ``items``, then delete the items (unless a dry run)."""
    if items and _ready((yield from _query(store, _HAS_VECTORS))):
        rows = yield from _query(store, _VECTORS, _pairs(items))
        tally.add("vector row", "store_vectors", _count(rows))
    if not dry_run:
        for batch in _deletes(items):
            yield from io(store.batch, store.abatch, batch)


def _held(
    connection: Persistence | AsyncPersistence | None, thread: str, wait: float, flow: Flow[None]
) -> Flow[None]:
    """Run ``flow`` holding the thread's lock (with no ``connection``, no lock)."""
    if connection is None:
        return (yield from flow)
    enter = partial(thread_lock, connection, thread, wait=wait)
    return (yield from held(enter, partial(athread_lock, connection, thread, wait=wait), flow))


@dataclass(frozen=True)
class _Deletion:
    """One user's deletion: where, and whether it only counts."""

    store: BaseStore
    checkpointer: BaseCheckpointSaver[Any]
    tally: _Tally
    dry_run: bool

    def remove(self, items: Sequence[Item]) -> Flow[None]:
        return _remove(self.store, items, self.tally, self.dry_run)

    def thread(self, thread: str, leases: bool) -> Flow[None]:
        """One owned thread: queue entry, lease, checkpoints, Store items, owner record last."""
        store, tally, dry_run = self.store, self.tally, self.dry_run
        queued = yield from io(store.get, store.aget, memory_queue(), thread)
        if queued is not None:
            tally.add("queue entry", "memory_queue")
            yield from self.remove([queued])
        if leases:
            yield from self.lease(thread)
        yield from self.checkpoints(thread)
        items = yield from _items_under(store, ("threads", thread))
        owner = [i for i in items if _thread_place(i)[0] == "owner record"]
        rest = [i for i in items if _thread_place(i)[0] != "owner record"]
        for item in items:
            tally.add(*_thread_place(item))
        yield from self.remove(rest)
        yield from self.remove(owner)
        if not dry_run:
            forget_owner(store, thread)

    def lease(self, thread: str) -> Flow[None]:
        """Count the thread's compaction lease row and (unless a dry run) delete it."""
        if self.dry_run:
            rows = yield from io(_current_lease, _acurrent_lease, self.store, thread)
        else:
            rows = yield from io(delete_lease, adelete_lease, self.store, thread)
        self.tally.add("lease row", LEASE_TABLE, rows)

    def checkpoints(self, thread: str) -> Flow[None]:
        """Count the thread's checkpoints and (unless a dry run) delete them."""
        saver = self.checkpointer
        checkpoints = yield from io(_checkpoints, _acheckpoints, saver, thread)
        self.tally.add("checkpoint", "checkpointer", checkpoints)
        if checkpoints and not self.dry_run:
            yield from io(saver.delete_thread, saver.adelete_thread, thread)

    def user(self, user_id: str, locking: _Locking) -> Flow[Receipt]:
        """Everything of ``user_id``, in the order the module's docstring gives."""
        store, tally = self.store, self.tally
        connection, wait = locking
        threads = yield from io(threads_owned_by, athreads_owned_by, store, user_id)
        tally.add("thread", "threads", len(threads))
        for thread in threads:
            facts = yield from _matching(store, _PROJECTS, {"source_thread": thread})
            tally.add("project fact", "memory/projects/*", len(facts))
            yield from self.remove(facts)
        leases = not _ready((yield from _query(store, _NO_LEASES)))
        for thread in threads:
            yield from _held(connection, thread, wait, self.thread(thread, leases))
        yield from self.memory(user_id, threads)
        if _ready((yield from _query(store, _HAS_TRACKING))):
            params = _tracking_params(user_id) * 2
            rows = yield from _query(store, _tracking_statement(self.dry_run), params)
            _tally_tracking(tally, rows)
        receipt = _receipt(user_id, tally, self.dry_run)
        if receipt.places and not self.dry_run:
            fact_index_cache.clear()  # this process's indexes of the deleted namespaces
            yield from io(store_receipt, astore_receipt, store, receipt)
        return receipt

    def memory(self, user_id: str, threads: list[str]) -> Flow[None]:
        """The user's queue entries (of other threads), memory and forget receipts."""
        store, tally = self.store, self.tally
        matching = yield from _matching(store, memory_queue(), {"user_id": user_id})
        queued = [i for i in matching if i.key not in threads]
        tally.add("queue entry", "memory_queue", len(queued))
        yield from self.remove(queued)
        memory = yield from _items_under(store, ("memory", user_id))
        for item in memory:
            tally.add(*_memory_place(item, user_id))
        yield from self.remove(memory)
        receipts = yield from io(list_namespace, alist_namespace, store, forget_receipts(user_id))
        tally.add("forget receipt", "receipts/forget/<user>", len(receipts))
        yield from self.remove(receipts)


def _receipt(user_id: str, tally: _Tally, dry_run: bool) -> Receipt:
    digest = subject_digest(user_id)
    return new_receipt(DELETE_USER, digest, digest, tally.places(), dry_run=dry_run)


def delete_user(
    store: BaseStore,
    checkpointer: BaseCheckpointSaver[Any],
    user_id: str,
    *,
    dry_run: bool = False,
    connection: Persistence | AsyncPersistence | None = None,
    wait: float = DEFAULT_WAIT,
) -> Receipt:
    """Delete everything of ``user_id`` (see the module's docstring) and return the receipt.

    Args:
        store: The Store of the user's threads and memory.
        checkpointer: The checkpointer of the user's threads.
        user_id: The user to delete.
        dry_run: Count what would be deleted, change nothing, store no receipt.
        connection: The database's ``Persistence``; given, each thread is deleted while
            its ``thread_lock`` is held (the command line's runs hold it too).
        wait: Seconds to wait for a running turn to release a thread's lock.

    Returns:
        The receipt: a count per place (none for an unknown user), stored in
        ``deletion_receipts()`` unless it is a dry run or lists no place.

    Raises:
        ContextError: An invalid user id, or ``projects``.
        ThreadBusyError: A turn held one of the user's threads for longer than ``wait``
            (the threads done so far stay deleted; run it again).

    """
    user_id = checked_user_id(user_id)
    deletion = _Deletion(store, checkpointer, _Tally(), dry_run)
    return run(deletion.user(user_id, (connection, wait)))


async def adelete_user(
    store: BaseStore,
    checkpointer: BaseCheckpointSaver[Any],
    user_id: str,
    *,
    dry_run: bool = False,
    connection: Persistence | AsyncPersistence | None = None,
    wait: float = DEFAULT_WAIT,
) -> Receipt:
    """Async :func:`delete_user` (an async Store and checkpointer)."""
    user_id = checked_user_id(user_id)
    deletion = _Deletion(store, checkpointer, _Tally(), dry_run)
    return await arun(deletion.user(user_id, (connection, wait)))
