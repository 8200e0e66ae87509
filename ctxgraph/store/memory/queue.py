"""Durable queue of memory extractions: one pending item per thread, newest rows merged.

Deferred extraction leaves an item for a worker; background extraction leaves one too and
hands it to this process's runner at once, so a process that dies leaves it for the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from ctxgraph.state.context import Context
from ctxgraph.store.memory.progress import store_get_op, store_put_op
from ctxgraph.store.namespaces import memory_queue
from ctxgraph.store.persistence.listing import list_namespace
from ctxgraph.store.text_codec import decoded, encoded


@dataclass(frozen=True)
class PendingExtraction:
    """Rows of one thread waiting for extraction, with the identity to store them under."""

    thread_id: str
    context: Context
    rows: list[dict[str, str]]
    updated_at: datetime

    def to_value(self) -> dict[str, Any]:
        """The Store value (its text encoded: ``store.text_codec``)."""
        return encoded(
            {
                "thread_id": self.thread_id,
                "user_id": self.context.user_id,
                "agent_name": self.context.agent_name,
                "project_id": self.context.project_id,
                "rows": self.rows,
                "updated_at": self.updated_at.isoformat(),
            }
        )

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> PendingExtraction:
        """Read a Store value back."""
        value = decoded(value)
        return cls(
            thread_id=value["thread_id"],
            context=Context(
                user_id=value["user_id"],
                agent_name=value["agent_name"],
                project_id=value.get("project_id"),
            ),
            rows=list(value["rows"]),
            updated_at=datetime.fromisoformat(value["updated_at"]),
        )


def merge_rows(
    existing: Sequence[dict[str, str]], new: Sequence[dict[str, str]]
) -> list[dict[str, str]]:
    """Union of rows by message id, in first-seen order; a newer row replaces an older one."""
    merged = {row["id"]: row for row in existing}
    for row in new:
        merged[row["id"]] = row
    return list(merged.values())


class MemoryQueue:
    """Pending extractions in the Store, so they survive a crash of the process."""

    def __init__(self, store: BaseStore) -> None:
        self._store = store

    # -- batched use: read with ``get_op``, merge with ``pending``, write with ``put_op`` --

    def get_op(self, thread_id: str) -> GetOp:
        """The Store read of a thread's pending item, to batch with other reads."""
        return store_get_op(self._store, memory_queue(), thread_id)

    @staticmethod
    def pending(
        thread_id: str,
        context: Context,
        rows: Sequence[dict[str, str]],
        waiting: Item | None,
        *,
        now: datetime | None = None,
    ) -> PendingExtraction:
        """The item after adding ``rows`` to what ``get_op`` read (``waiting``)."""
        earlier = PendingExtraction.from_value(waiting.value).rows if waiting else []
        return PendingExtraction(
            thread_id, context, merge_rows(earlier, rows), now or datetime.now(UTC)
        )

    def put_op(self, pending: PendingExtraction) -> PutOp:
        """The Store write of ``pending``, to batch with other writes."""
        return store_put_op(self._store, memory_queue(), pending.thread_id, pending.to_value())

    @staticmethod
    def read(item: Item | None) -> PendingExtraction | None:
        """The pending item ``get_op`` read (None: nothing waits for that thread)."""
        return PendingExtraction.from_value(item.value) if item is not None else None

    def done_ops(self, pending: PendingExtraction, current: Item | None) -> list[PutOp]:
        """The Store writes that take processed ``pending`` out of the queue.

        ``current`` is the thread's item as ``get_op`` reads it now. Unchanged since
        ``pending`` was read, it is deleted; when newer rows arrived meanwhile, only the
        rows ``pending`` held (same id and text) leave, and the newer ones stay queued.
        """
        now = self.read(current)
        if now is None:
            return []
        namespace, key = memory_queue(), pending.thread_id
        if now.updated_at == pending.updated_at:
            return [PutOp(namespace, key, None)]
        handled = {(row["id"], row["content"]) for row in pending.rows}
        rest = [row for row in now.rows if (row["id"], row["content"]) not in handled]
        if not rest:
            return [PutOp(namespace, key, None)]
        left = PendingExtraction(now.thread_id, now.context, rest, now.updated_at)
        return [self.put_op(left)]

    def enqueue(
        self,
        thread_id: str,
        context: Context,
        rows: Sequence[dict[str, str]],
        *,
        now: datetime | None = None,
    ) -> PendingExtraction:
        """Add rows for a thread, merging with what is already waiting (debounce).

        Async code batches the same steps: ``get_op``, ``pending``, ``put_op``.
        """
        waiting = self._store.get(memory_queue(), thread_id)
        pending = self.pending(thread_id, context, rows, waiting, now=now)
        self._store.put(memory_queue(), thread_id, pending.to_value(), index=False)
        return pending

    def due(self, *, quiet_seconds: float, now: datetime | None = None) -> list[PendingExtraction]:
        """Pending items whose thread has been quiet for ``quiet_seconds`` (0: all of them)."""
        moment = now or datetime.now(UTC)
        pending = [
            PendingExtraction.from_value(item.value)
            for item in list_namespace(self._store, memory_queue())
        ]
        return [p for p in pending if (moment - p.updated_at).total_seconds() >= quiet_seconds]

    def done(self, pending: PendingExtraction) -> None:
        """Remove an item once processed; newer rows that arrived meanwhile stay queued."""
        ops = self.done_ops(pending, self._store.get(memory_queue(), pending.thread_id))
        if ops:
            self._store.batch(ops)
