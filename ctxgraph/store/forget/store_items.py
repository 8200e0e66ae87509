"""Redacting plain Store items: a thread's job results and bookkeeping, its queued rows.

These items are JSON written by ctxgraph (background compaction results, processed
message ids, the deferred extraction waiting for a worker); each is redacted as a whole
value and written back under its key, unindexed as it was written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from langgraph.store.base import BaseStore, Item

from ctxgraph.store.namespaces import memory_queue, thread_compaction_jobs, thread_memory
from ctxgraph.store.persistence.listing import alist_namespace, list_namespace
from ctxgraph.store.receipts import Place
from ctxgraph.store.redaction import Redactor
from ctxgraph.store.text_codec import decoded, encoded

__all__ = ["ItemRewrite", "aapply", "aitem_rewrites", "apply", "item_rewrites"]


@dataclass(frozen=True)
class ItemRewrite:
    """One Store item to write back redacted, and the place the receipt lists."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, object]
    place: Place


_KINDS = {"compaction_jobs": "background job result", "memory": "memory bookkeeping"}


def _namespaces(thread_id: str) -> list[tuple[str, ...]]:
    return [thread_compaction_jobs(thread_id), thread_memory(thread_id)]


def _rewrites(items: Iterable[Item], redactor: Redactor) -> list[ItemRewrite]:
    out: list[ItemRewrite] = []
    for item in items:
        value, found = redactor.value(decoded(item.value))
        if found:
            kind = _KINDS.get(item.namespace[-1], "queued extraction")
            where = f"{'/'.join(item.namespace)}/{item.key}"
            place = Place(kind, where, found)
            out.append(ItemRewrite(item.namespace, item.key, encoded(value), place))
    return out


def item_rewrites(store: BaseStore, thread_id: str, redactor: Redactor) -> list[ItemRewrite]:
    """The thread's job results, bookkeeping and queued extraction that hold the text."""
    items: list[Item] = [
        item for namespace in _namespaces(thread_id) for item in list_namespace(store, namespace)
    ]
    queued = store.get(memory_queue(), thread_id)
    return _rewrites([*items, *([queued] if queued else [])], redactor)


async def aitem_rewrites(store: BaseStore, thread_id: str, redactor: Redactor) -> list[ItemRewrite]:
    """Async :func:`item_rewrites`."""
    items: list[Item] = []
    for namespace in _namespaces(thread_id):
        items.extend(await alist_namespace(store, namespace))
    queued = await store.aget(memory_queue(), thread_id)
    return _rewrites([*items, *([queued] if queued else [])], redactor)


def apply(store: BaseStore, rewrites: Iterable[ItemRewrite]) -> None:
    """Write every rewrite back."""
    for rewrite in rewrites:
        store.put(rewrite.namespace, rewrite.key, rewrite.value, index=False)


async def aapply(store: BaseStore, rewrites: Iterable[ItemRewrite]) -> None:
    """Async :func:`apply`."""
    for rewrite in rewrites:
        await store.aput(rewrite.namespace, rewrite.key, rewrite.value, index=False)
