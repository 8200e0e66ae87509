"""The memory side of a forget: facts that hold the text are deleted, the profile redacted.

A fact that held forgotten text is deleted whole (a fact with a hole in it is not worth
keeping); its history goes with it, and so do its search index and vector rows, which
the Store derives from the item. Project facts are shared, so only those a thread of the
user was the source of are touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.store.base import BaseStore, SearchItem

from ctxgraph.store.namespaces import user_profile
from ctxgraph.store.persistence.listing import alist_namespace, list_namespace
from ctxgraph.store.receipts import Place
from ctxgraph.store.redaction import Redactor
from ctxgraph.store.text_codec import decoded

__all__ = [
    "PROFILE_KEY",
    "Removal",
    "afact_namespaces",
    "alist_facts",
    "fact_namespaces",
    "list_facts",
    "matching_facts",
    "redacted_profile",
]

PROFILE_KEY = "profile"
"""Key of the one item in ``user_profile(user_id)``."""

Removal = tuple[tuple[str, ...], str]
"""A Store item to delete: its namespace and key."""


def _where(namespace: tuple[str, ...], key: str) -> str:
    return f"{'/'.join(namespace)}/{key}"


def _fact_namespace(namespace: tuple[str, ...], user_id: str) -> bool:
    """``("memory", U, "agents", A, "facts")`` of the user, or a project's facts."""
    if namespace[-1:] != ("facts",):
        return False
    return namespace[:2] == ("memory", user_id) or namespace[:2] == ("memory", "projects")


def fact_namespaces(store: BaseStore, user_id: str) -> list[tuple[str, ...]]:
    """The user's fact namespaces (every agent), then every project's."""
    found = [
        *store.list_namespaces(prefix=("memory", user_id), limit=10_000),
        *store.list_namespaces(prefix=("memory", "projects"), limit=10_000),
    ]
    return [namespace for namespace in found if _fact_namespace(namespace, user_id)]


async def afact_namespaces(store: BaseStore, user_id: str) -> list[tuple[str, ...]]:
    """Async :func:`fact_namespaces`."""
    found = [
        *await store.alist_namespaces(prefix=("memory", user_id), limit=10_000),
        *await store.alist_namespaces(prefix=("memory", "projects"), limit=10_000),
    ]
    return [namespace for namespace in found if _fact_namespace(namespace, user_id)]


def _in_scope(item: SearchItem, user_id: str, threads: frozenset[str]) -> bool:
    if item.namespace[1] == user_id:
        return True
    value = item.value if isinstance(item.value, dict) else {}
    return value.get("source_thread") in threads


def matching_facts(
    items: Iterable[SearchItem], redactor: Redactor, user_id: str, threads: frozenset[str]
) -> tuple[list[Removal], list[Place]]:
    """The fact items (of the user, or sourced from the user's threads) holding the text."""
    removals: list[Removal] = []
    places: list[Place] = []
    for item in items:
        if not _in_scope(item, user_id, threads):
            continue
        _, found = redactor.value(decoded(item.value))
        if found:
            removals.append((item.namespace, item.key))
            places.append(Place("memory fact", _where(item.namespace, item.key), found))
    return removals, places


def list_facts(store: BaseStore, namespaces: Iterable[tuple[str, ...]]) -> list[SearchItem]:
    """Every item of the given fact namespaces."""
    return [item for namespace in namespaces for item in list_namespace(store, namespace)]


async def alist_facts(store: BaseStore, namespaces: Iterable[tuple[str, ...]]) -> list[SearchItem]:
    """Async :func:`list_facts`."""
    items: list[SearchItem] = []
    for namespace in namespaces:
        items.extend(await alist_namespace(store, namespace))
    return items


def redacted_profile(value: Any, redactor: Redactor, user_id: str) -> tuple[Any, Place | None]:
    """The profile value with the text replaced, and its place (None when it held none)."""
    redacted, found = redactor.value(value)
    if not found:
        return value, None
    return redacted, Place("profile", _where(user_profile(user_id), PROFILE_KEY), found)
