"""Which messages of a thread memory extraction has already read, shared by every path."""

from __future__ import annotations

from collections.abc import Iterable

from langgraph.store.base import BaseStore

from store.namespaces import thread_memory

PROCESSED_KEY = "processed"
MAX_REMEMBERED_IDS = 5_000
"""Message ids kept per thread; older ones have long left any window that could resend them."""


class ProcessedMessages:
    """The ids of messages already handed to extraction (flush, end of turn or worker)."""

    def __init__(self, store: BaseStore, thread_id: str) -> None:
        self._store = store
        self._namespace = thread_memory(thread_id)

    def get(self) -> set[str]:
        """Ids already processed."""
        item = self._store.get(self._namespace, PROCESSED_KEY)
        return set(item.value.get("ids", [])) if item else set()

    async def aget(self) -> set[str]:
        """Async :meth:`get`."""
        item = await self._store.aget(self._namespace, PROCESSED_KEY)
        return set(item.value.get("ids", [])) if item else set()

    @staticmethod
    def _merged(existing: list[str], ids: Iterable[str]) -> dict[str, list[str]]:
        merged = list(dict.fromkeys([*existing, *ids]))
        return {"ids": merged[-MAX_REMEMBERED_IDS:]}

    def add(self, ids: Iterable[str]) -> None:
        """Mark ``ids`` as processed."""
        item = self._store.get(self._namespace, PROCESSED_KEY)
        existing = list(item.value.get("ids", [])) if item else []
        self._store.put(self._namespace, PROCESSED_KEY, self._merged(existing, ids), index=False)

    async def aadd(self, ids: Iterable[str]) -> None:
        """Async :meth:`add`."""
        item = await self._store.aget(self._namespace, PROCESSED_KEY)
        existing = list(item.value.get("ids", [])) if item else []
        value = self._merged(existing, ids)
        await self._store.aput(self._namespace, PROCESSED_KEY, value, index=False)
