"""One writer at a time of a thread's queued memory item, within this process.

A turn that queues rows and a background extraction that takes its rows out each read
the thread's queue item and write it back in a later batch. Interleaved, the later write
is made from a stale read: the extraction deletes an item the turn has just added rows
to, and those rows, already marked processed, are never extracted. Both hold the lock of
the thread from their read to their write (never across a model call), so within one
process the two never interleave. Threads hash onto a fixed set of locks, so the set does
not grow with the number of threads; a holder takes one lock, so none can deadlock.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
import zlib
from contextlib import AbstractAsyncContextManager, AbstractContextManager

from langgraph.store.base import BaseStore

__all__ = ["STRIPES", "aqueue_lock", "queue_lock"]

STRIPES = 64
"""How many locks the threads hash onto."""

_LOCKS = tuple(threading.Lock() for _ in range(STRIPES))
_ALOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[asyncio.Lock, ...]] = (
    weakref.WeakKeyDictionary()
)
_ALOCKS_GUARD = threading.Lock()


def _stripe(store: BaseStore, thread_id: str) -> int:
    return zlib.crc32(f"{id(store)}:{thread_id}".encode()) % STRIPES


def queue_lock(store: BaseStore, thread_id: str) -> AbstractContextManager[bool]:
    """The lock of ``thread_id``'s queue item in ``store``, for sync holders."""
    return _LOCKS[_stripe(store, thread_id)]


def aqueue_lock(store: BaseStore, thread_id: str) -> AbstractAsyncContextManager[None]:
    """The same for async holders on the running event loop (an asyncio lock per loop)."""
    loop = asyncio.get_running_loop()
    with _ALOCKS_GUARD:
        locks = _ALOCKS.get(loop)
        if locks is None:
            locks = _ALOCKS[loop] = tuple(asyncio.Lock() for _ in range(STRIPES))
    return locks[_stripe(store, thread_id)]
