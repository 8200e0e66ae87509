"""Reads every item of one Store namespace, page by page, through the public Store API."""

from __future__ import annotations

from langgraph.store.base import BaseStore, SearchItem

__all__ = ["PAGE", "alist_namespace", "list_namespace"]

PAGE = 1_000
"""Items fetched per Store search."""


def list_namespace(
    store: BaseStore, namespace: tuple[str, ...], *, page: int = PAGE
) -> list[SearchItem]:
    """Every item of exactly ``namespace`` (items of nested namespaces are left out)."""
    items: list[SearchItem] = []
    while True:
        found = store.search(namespace, limit=page, offset=len(items))
        items.extend(found)
        if len(found) < page:
            return [item for item in items if item.namespace == namespace]


async def alist_namespace(
    store: BaseStore, namespace: tuple[str, ...], *, page: int = PAGE
) -> list[SearchItem]:
    """Async :func:`list_namespace`."""
    items: list[SearchItem] = []
    while True:
        found = await store.asearch(namespace, limit=page, offset=len(items))
        items.extend(found)
        if len(found) < page:
            return [item for item in items if item.namespace == namespace]
