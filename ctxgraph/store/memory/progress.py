"""Which messages of a thread memory extraction has already read, shared by every path.

The record is small and bounded: the ids of the latest ``RECENT_IDS`` rows handed to
extraction, oldest first, stored under the thread's ``processed`` key as ``{"ids": [...]}``
(the form earlier versions stored without a bound, so either version reads the other's).
Its per-turn write does not grow with the thread.

Extraction reads a thread in order (flush takes the prefix about to be folded, the end
of the turn the rest), so what it has read is a prefix of the thread's filtered rows plus
the remembered tail. :meth:`Progress.unread` decides against the filtered rows of the
whole working window:

- a row whose id is remembered has been read;
- a row before the oldest remembered id (the *horizon*) has been read, however long the
  window is;
- every other row is new.

When the horizon is no longer in the window (compaction folded it away, which is the
usual case once a thread has run for a while), every processed row still in the window is
among the remembered ids, so the answer is exact. A row edited in place keeps its id and
is not read again; a message that becomes a row only through an edit (an acknowledgement
rewritten into a statement) is read if it lies after the horizon. Rewinding a thread to a
checkpoint whose window lies entirely before the horizon (more than ``RECENT_IDS`` rows
back) reads that window again.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langgraph.store.base import BaseStore, GetOp, Item, PutOp, SearchOp

from ctxgraph.state.usage import CallUsage, stored_calls
from ctxgraph.store.namespaces import thread_memory
from ctxgraph.store.text_codec import decoded, encoded

PROCESSED_KEY = "processed"
RECENT_IDS = 128
"""Row ids remembered per thread: more than a working window holds with the default
triggers, so the horizon has normally been folded away and membership alone decides."""

Row = Mapping[str, str]
"""A filtered row, ``{"id", "role", "content"}`` (see ``filter_for_memory``)."""
R = TypeVar("R", bound=Row)


def store_get_op(store: BaseStore, namespace: tuple[str, ...], key: str) -> GetOp:
    """The ``GetOp`` ``store.get(namespace, key)`` runs, for a batch of reads."""
    config = store.ttl_config
    refresh = config.get("refresh_on_read", True) if config is not None else True
    return GetOp(namespace, key, refresh)


def store_put_op(
    store: BaseStore, namespace: tuple[str, ...], key: str, value: dict[str, Any]
) -> PutOp:
    """The ``PutOp`` ``store.put(namespace, key, value, index=False)`` runs, for a batch."""
    config = store.ttl_config
    ttl = config.get("default_ttl") if config else None
    return PutOp(namespace, key, value, index=False, ttl=ttl)


@dataclass(frozen=True)
class Progress:
    """What extraction has read of one thread: the latest row ids, oldest first."""

    ids: tuple[str, ...] = ()

    @classmethod
    def from_value(cls, value: Mapping[str, Any] | None) -> Progress:
        """Read a stored value; an unbounded one of an earlier version is read whole."""
        if not value:
            return cls()
        return cls(tuple(str(i) for i in decoded(value.get("ids") or ())))

    @classmethod
    def from_item(cls, item: Item | None) -> Progress:
        """Read a Store item (None: nothing processed yet)."""
        return cls.from_value(item.value if item is not None else None)

    def to_value(self) -> dict[str, list[str]]:
        """The Store value: at most ``RECENT_IDS`` ids (encoded: ``store.text_codec``)."""
        return {"ids": encoded(list(self.ids[-RECENT_IDS:]))}

    def unread(self, rows: Sequence[R], *, among: Collection[str] | None = None) -> list[R]:
        """The rows not yet handed to extraction, in order; only ids in ``among`` if given.

        ``rows`` are the filtered rows of the thread's whole working window, so the
        horizon is found even when it lies outside ``among`` (flush extracts only the
        messages about to be folded).
        """
        start = 0
        if self.ids:
            horizon = self.ids[0]
            start = next((i for i, row in enumerate(rows) if row["id"] == horizon), 0)
        known = set(self.ids)
        return [
            row
            for row in rows[start:]
            if row["id"] not in known and (among is None or row["id"] in among)
        ]

    def marked(self, ids: Iterable[str]) -> Progress:
        """These ids read too; an id already remembered keeps its place."""
        merged = dict.fromkeys(self.ids)
        merged.update(dict.fromkeys(ids))
        return Progress(tuple(merged)[-RECENT_IDS:])

    def covers(self, ids: Iterable[str]) -> bool:
        """True if every id is remembered (marking them again would change nothing)."""
        known = set(self.ids)
        return all(i in known for i in ids)


class ProcessedMessages:
    """The ids of messages already handed to extraction (flush, end of turn or worker).

    ``read`` and ``write`` take and store a :class:`Progress`; ``get`` and ``add`` keep
    the earlier list-of-ids interface.
    """

    def __init__(self, store: BaseStore, thread_id: str) -> None:
        self._store = store
        self._namespace = thread_memory(thread_id)

    def get_op(self) -> GetOp:
        """The Store read of the record, to batch with other reads."""
        return store_get_op(self._store, self._namespace, PROCESSED_KEY)

    def put_op(self, progress: Progress) -> PutOp:
        """The Store write of ``progress``, to batch with other writes."""
        return store_put_op(self._store, self._namespace, PROCESSED_KEY, progress.to_value())

    def read(self) -> Progress:
        """The thread's progress."""
        return Progress.from_item(self._store.get(self._namespace, PROCESSED_KEY))

    async def aread(self) -> Progress:
        """Async :meth:`read`."""
        return Progress.from_item(await self._store.aget(self._namespace, PROCESSED_KEY))

    def write(self, progress: Progress) -> None:
        """Store ``progress`` (bounded, so the write does not grow with the thread)."""
        self._store.put(self._namespace, PROCESSED_KEY, progress.to_value(), index=False)

    async def awrite(self, progress: Progress) -> None:
        """Async :meth:`write`."""
        await self._store.aput(self._namespace, PROCESSED_KEY, progress.to_value(), index=False)

    def get(self) -> list[str]:
        """The remembered ids, oldest first (at most ``RECENT_IDS`` once written)."""
        return list(self.read().ids)

    async def aget(self) -> list[str]:
        """Async :meth:`get`."""
        return list((await self.aread()).ids)

    def add(self, ids: Iterable[str], *, known: Progress | None = None) -> Progress:
        """Mark ``ids`` as processed; ``known`` is what ``read`` returned, if already read.

        Nothing is written when every id is already remembered. Returns the progress.
        """
        wanted = list(ids)
        progress = self.read() if known is None else known
        if progress.covers(wanted):
            return progress
        progress = progress.marked(wanted)
        self.write(progress)
        return progress

    async def aadd(self, ids: Iterable[str], *, known: Progress | None = None) -> Progress:
        """Async :meth:`add`."""
        wanted = list(ids)
        progress = await self.aread() if known is None else known
        if progress.covers(wanted):
            return progress
        progress = progress.marked(wanted)
        await self.awrite(progress)
        return progress


UNCLAIMED_USAGE = "background_usage"
"""``kind`` of the items that hold a background extraction's usage (key ``usage-…``)."""

UNCLAIMED_LIMIT = 100
"""The most such items one read claims (a thread's next turn claims them all, usually)."""


class UnclaimedUsage:
    """Usage of background extractions that no run of the thread has counted yet.

    A background extraction runs after its turn, outside the thread's runs, so it cannot
    add its calls to the thread's ``model_usage``. It leaves them here instead, one item
    per extraction next to the thread's processed ids, and the thread's next memory node
    reads them in the batch it reads anyway, adds them to ``model_usage`` and deletes them
    in the batch it writes anyway. An item is written once and deleted once, so no count
    is lost or added twice when an extraction ends while a turn runs.
    """

    def __init__(self, store: BaseStore, thread_id: str) -> None:
        self._store = store
        self._namespace = thread_memory(thread_id)

    def put_op(self, calls: Sequence[CallUsage]) -> PutOp:
        """The write that leaves one extraction's ``calls`` for the thread to count."""
        key = f"usage-{uuid.uuid4().hex}"
        value = {"kind": UNCLAIMED_USAGE, "calls": [dict(call) for call in calls]}
        return store_put_op(self._store, self._namespace, key, value)

    def search_op(self) -> SearchOp:
        """The read of what is left, to batch with the memory node's other reads."""
        return SearchOp(self._namespace, {"kind": UNCLAIMED_USAGE}, UNCLAIMED_LIMIT)

    @staticmethod
    def claimed(items: Sequence[Item]) -> tuple[list[CallUsage], list[str]]:
        """The calls the items found by :meth:`search_op` hold, and their keys."""
        calls: list[CallUsage] = []
        keys: list[str] = []
        for item in items:
            if item.value.get("kind") == UNCLAIMED_USAGE:
                calls.extend(stored_calls(item.value.get("calls")))
                keys.append(item.key)
        return calls, keys

    def delete_ops(self, keys: Iterable[str]) -> list[PutOp]:
        """The deletes of the claimed items, to batch with the memory node's writes."""
        return [PutOp(self._namespace, key, None) for key in keys]
