"""Who a thread belongs to: the user whose run first wrote it.

The owner is one Store item, key ``owner`` in ``thread_meta(thread_id)``, holding
``{"user_id": ...}``. The graph's first task claims an unowned thread for the run's
``Context.user_id`` and refuses a run by anyone else, before anything is written; the
command line checks the same item before it reads a thread. Two first runs of one new
thread by different users at the same moment could both find no owner; the command line
holds the thread lock for a run, so its runs cannot. A thread saved before owners
were recorded has none: the next run claims it.

An owner, once recorded, never changes, so each process remembers the owners it has read
or written (per Store object) and asks the Store only about threads it has not seen owned.
"""

from __future__ import annotations

import weakref
from typing import Any

from langgraph.store.base import BaseStore

from ctxgraph.state.context import ContextError
from ctxgraph.store.namespaces import thread_meta

OWNER_KEY = "owner"
"""Key of the owner item in ``thread_meta(thread_id)``."""


_known: weakref.WeakKeyDictionary[BaseStore, dict[str, str]] = weakref.WeakKeyDictionary()
"""Owners this process has read or recorded, per Store; an owner never changes."""


def _remember(store: BaseStore, thread_id: str, owner: str | None) -> str | None:
    if owner is not None:
        _known.setdefault(store, {})[thread_id] = owner
    return owner


class ThreadOwnerError(ContextError):
    """A user asked for a thread that belongs to another user."""


def _owner_of(value: object) -> str | None:
    """The user id in a stored owner item's value, or None when it holds none."""
    if isinstance(value, dict):
        user = value.get("user_id")
        if isinstance(user, str) and user:
            return user
    return None


def _refusal(thread_id: str, user_id: str) -> ThreadOwnerError:
    return ThreadOwnerError(
        f"thread {thread_id!r} belongs to another user, not {user_id!r}: "
        "use the user id that created it, or another thread id"
    )


def thread_owner(store: BaseStore, thread_id: str) -> str | None:
    """The user id that owns ``thread_id``, or None when no owner is recorded."""
    known = _known.get(store, {}).get(thread_id)
    if known is not None:
        return known
    item = store.get(thread_meta(thread_id), OWNER_KEY)
    return _remember(store, thread_id, None if item is None else _owner_of(item.value))


async def athread_owner(store: BaseStore, thread_id: str) -> str | None:
    """Async :func:`thread_owner`."""
    known = _known.get(store, {}).get(thread_id)
    if known is not None:
        return known
    item = await store.aget(thread_meta(thread_id), OWNER_KEY)
    return _remember(store, thread_id, None if item is None else _owner_of(item.value))


def check_thread_owner(owner: str | None, thread_id: str, user_id: str) -> None:
    """Raise ``ThreadOwnerError`` when ``owner`` is recorded and is not ``user_id``."""
    if owner is not None and owner != user_id:
        raise _refusal(thread_id, user_id)


def record_owner(store: BaseStore, thread_id: str, user_id: str) -> None:
    """Record ``user_id`` as the owner of ``thread_id`` (call after checking none is)."""
    store.put(thread_meta(thread_id), OWNER_KEY, {"user_id": user_id}, index=False)
    _remember(store, thread_id, user_id)


async def arecord_owner(store: BaseStore, thread_id: str, user_id: str) -> None:
    """Async :func:`record_owner`."""
    await store.aput(thread_meta(thread_id), OWNER_KEY, {"user_id": user_id}, index=False)
    _remember(store, thread_id, user_id)


def forget_owner(store: BaseStore, thread_id: str) -> None:
    """Drop what this process remembers of ``thread_id``'s owner (after the thread is deleted).

    Other processes keep their memory of it until they end: they refuse the deleted
    thread's id to other users, which is safe.
    """
    _known.get(store, {}).pop(thread_id, None)


_PAGE = 100

_META = thread_meta("t")[-1]
"""The last part of every ``thread_meta`` namespace."""


def _owned(items: list[Any], user_id: str) -> list[str]:
    return sorted(
        item.namespace[1]
        for item in items
        if item.key == OWNER_KEY
        and len(item.namespace) == 3
        and item.namespace[2] == _META
        and _owner_of(item.value) == user_id
    )


def threads_owned_by(store: BaseStore, user_id: str) -> list[str]:
    """The ids of every thread whose owner record names ``user_id``, sorted.

    Read from the owner items themselves (a Store search over ``("threads",)``), so a
    thread saved before owners were recorded is not listed.
    """
    found: list[Any] = []
    while True:
        page = store.search(
            ("threads",), filter={"user_id": user_id}, limit=_PAGE, offset=len(found)
        )
        found.extend(page)
        if len(page) < _PAGE:
            return _owned(found, user_id)


async def athreads_owned_by(store: BaseStore, user_id: str) -> list[str]:
    """Async :func:`threads_owned_by`."""
    found: list[Any] = []
    while True:
        page = await store.asearch(
            ("threads",), filter={"user_id": user_id}, limit=_PAGE, offset=len(found)
        )
        found.extend(page)
        if len(page) < _PAGE:
            return _owned(found, user_id)
