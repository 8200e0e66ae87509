"""Per-process BM25 indexes of fact namespaces, derived from the Store and never stale.

The Store is the source of truth. Before every search the cache asks the Store for a cheap
version of the namespace; when it changed (a write by this or any other process sharing
the database), the namespace is re-read and only new or changed facts are re-tokenized.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from langgraph.store.base import BaseStore, SearchItem
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore

from store.search import Bm25Index, tokenize

__all__ = ["FactIndexCache", "IndexedDoc", "NamespaceIndex", "fact_index_cache"]

PAGE = 1_000
"""Items read per Store call while (re)loading a namespace."""

_VERSION_SQL = "SELECT count(*) AS n, max(updated_at) AS latest FROM store WHERE prefix = %s"


@dataclass(frozen=True)
class IndexedDoc:
    """One stored fact as indexed: its value, its Store timestamp and its terms."""

    key: str
    value: Mapping[str, Any]
    updated_at: str
    tokens: tuple[str, ...]


@dataclass(frozen=True)
class NamespaceIndex:
    """An immutable snapshot of one namespace: its documents and their BM25 index."""

    version: Hashable
    docs: Mapping[str, IndexedDoc]
    index: Bm25Index

    @cached_property
    def by_confidence(self) -> list[str]:
        """Keys from the most to the least confident fact (newest first on ties)."""
        return sorted(
            self.docs,
            key=lambda k: (
                -float(self.docs[k].value.get("confidence", 0.0)),
                _negated(str(self.docs[k].value.get("created_at", ""))),
                k,
            ),
        )

    @cached_property
    def corrections(self) -> list[str]:
        """Keys of corrections, most confident first."""
        return [k for k in self.by_confidence if _is_correction(self.docs[k].value)]

    @classmethod
    def build(
        cls, version: Hashable, items: list[SearchItem], previous: NamespaceIndex | None
    ) -> NamespaceIndex:
        """Index ``items``, reusing the terms of documents unchanged since ``previous``."""
        old = previous.docs if previous is not None else {}
        docs: dict[str, IndexedDoc] = {}
        for item in items:
            stamp = item.updated_at.isoformat()
            known = old.get(item.key)
            if known is not None and known.updated_at == stamp:
                docs[item.key] = known
                continue
            content = str(item.value.get("content", ""))
            docs[item.key] = IndexedDoc(item.key, item.value, stamp, tuple(tokenize(content)))
        return cls(version, docs, Bm25Index({k: d.tokens for k, d in docs.items()}))


def _is_correction(value: Mapping[str, Any]) -> bool:
    return value.get("category") == "correction" or bool(value.get("is_correction"))


def _negated(stamp: str) -> tuple[int, ...]:
    """A sort key that orders ISO timestamps newest first."""
    return tuple(-ord(c) for c in stamp)


def _prefix(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace)


def _listing_version(items: list[SearchItem]) -> Hashable:
    return tuple(sorted((item.key, item.updated_at.isoformat()) for item in items))


def _row_version(row: Mapping[str, Any] | None) -> Hashable:
    if row is None:
        return (0, None)
    latest = row["latest"]
    return (int(row["n"]), latest.isoformat() if latest is not None else None)


@dataclass
class _Slot:
    """The current snapshot of one namespace plus the lock that serializes sync refreshes.

    Async refreshes take no lock: a refresh is idempotent and swaps the snapshot in one
    assignment, so two coroutines refreshing at once only repeat work.
    """

    snapshot: NamespaceIndex | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class FactIndexCache:
    """Snapshots per (store, namespace); refreshed whenever the Store's version moves."""

    def __init__(self) -> None:
        self._slots: weakref.WeakKeyDictionary[BaseStore, dict[tuple[str, ...], _Slot]] = (
            weakref.WeakKeyDictionary()
        )
        self._guard = threading.Lock()

    def _slot(self, store: BaseStore, namespace: tuple[str, ...]) -> _Slot:
        with self._guard:
            per_store = self._slots.setdefault(store, {})
            return per_store.setdefault(namespace, _Slot())

    def get(self, store: BaseStore, namespace: tuple[str, ...]) -> NamespaceIndex:
        """The up-to-date index of ``namespace`` (sync stores and sync paths)."""
        slot = self._slot(store, namespace)
        with slot.lock:
            if isinstance(store, PostgresStore):
                version = self._sql_version(store, namespace)
                if slot.snapshot is not None and slot.snapshot.version == version:
                    return slot.snapshot
                items = _list_all(store, namespace)
            else:
                items = _list_all(store, namespace)
                version = _listing_version(items)
                if slot.snapshot is not None and slot.snapshot.version == version:
                    return slot.snapshot
            slot.snapshot = NamespaceIndex.build(version, items, slot.snapshot)
            return slot.snapshot

    async def aget(self, store: BaseStore, namespace: tuple[str, ...]) -> NamespaceIndex:
        """The up-to-date index of ``namespace`` (async paths)."""
        slot = self._slot(store, namespace)
        current = slot.snapshot
        if isinstance(store, AsyncPostgresStore):
            version = await self._asql_version(store, namespace)
            if current is not None and current.version == version:
                return current
            items = await _alist_all(store, namespace)
        else:
            items = await _alist_all(store, namespace)
            version = _listing_version(items)
            if current is not None and current.version == version:
                return current
        slot.snapshot = NamespaceIndex.build(version, items, current)
        return slot.snapshot

    @staticmethod
    def _sql_version(store: PostgresStore, namespace: tuple[str, ...]) -> Hashable:
        # One aggregate over the prefix index: the count catches deletes, the latest update
        # time catches inserts and in-place updates.
        with store._cursor() as cursor:
            cursor.execute(_VERSION_SQL, (_prefix(namespace),))
            return _row_version(cursor.fetchone())

    @staticmethod
    async def _asql_version(store: AsyncPostgresStore, namespace: tuple[str, ...]) -> Hashable:
        async with store._cursor() as cursor:
            await cursor.execute(_VERSION_SQL, (_prefix(namespace),))
            return _row_version(await cursor.fetchone())

    def clear(self) -> None:
        """Drop every snapshot; the next search rebuilds from the Store."""
        with self._guard:
            self._slots = weakref.WeakKeyDictionary()


def _list_all(store: BaseStore, namespace: tuple[str, ...]) -> list[SearchItem]:
    items: list[SearchItem] = []
    while True:
        page = store.search(namespace, limit=PAGE, offset=len(items))
        items.extend(page)
        if len(page) < PAGE:
            return [item for item in items if item.namespace == namespace]


async def _alist_all(store: BaseStore, namespace: tuple[str, ...]) -> list[SearchItem]:
    items: list[SearchItem] = []
    while True:
        page = await store.asearch(namespace, limit=PAGE, offset=len(items))
        items.extend(page)
        if len(page) < PAGE:
            return [item for item in items if item.namespace == namespace]


fact_index_cache = FactIndexCache()
"""The process-wide cache used by ``MemoryRepository.search``."""
