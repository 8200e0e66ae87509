"""Which messages of a thread memory extraction has already read, shared by every path."""

from __future__ import annotations

from collections.abc import Iterable

from langgraph.store.base import BaseStore

from ctxgraph.store.namespaces import thread_memory

PROCESSED_KEY = "processed"
MAX_REMEMBERED_IDS = 5_000
"""Message ids kept per thread; older ones have long left any window that could resend them."""


class ProcessedMessages:
    """The ids of messages already handed to extraction (flush, end of turn or worker).

    ``get`` returns the ids in the order they were added; passing that list back to ``add``
    as ``known`` saves reading it again.
    """

    def __init__(self, store: BaseStore, thread_id: str) -> None:
        self._store = store
        self._namespace = thread_memory(thread_id)

    def get(self) -> list[str]:
        """Ids already processed, oldest first."""
        item = self._store.get(self._namespace, PROCESSED_KEY)
        return list(item.value.get("ids", [])) if item else []

    async def aget(self) -> list[str]:
        """Async :meth:`get`."""
        item = await self._store.aget(self._namespace, PROCESSED_KEY)
        return list(item.value.get("ids", [])) if item else []

    @staticmethod
    def _merged(known: list[str], ids: Iterable[str]) -> dict[str, list[str]]:
        merged = list(dict.fromkeys([*known, *ids]))
        return {"ids": merged[-MAX_REMEMBERED_IDS:]}

    def add(self, ids: Iterable[str], *, known: list[str] | None = None) -> None:
        """Mark ``ids`` as processed; ``known`` is what ``get`` returned, if already read."""
        existing = self.get() if known is None else known
        self._store.put(self._namespace, PROCESSED_KEY, self._merged(existing, ids), index=False)

    async def aadd(self, ids: Iterable[str], *, known: list[str] | None = None) -> None:
        """Async :meth:`add`."""
        existing = await self.aget() if known is None else known
        value = self._merged(existing, ids)
        await self._store.aput(self._namespace, PROCESSED_KEY, value, index=False)
