"""Background memory extraction: this process runs a thread's queued item after the turn.

With ``memory_extraction="background"`` the ``flush`` and ``extract_memory`` nodes queue
the rows in the Store exactly as ``"deferred"`` does (so a process that dies leaves them
for ``ctxgraph memory process``, the ``memory_worker`` graph or the next command-line
start), then hand the thread to :data:`RUNNER`, and the run goes on without waiting. A
sync run's extraction runs in a daemon thread, an async run's as a task on its event loop
(the same loop as the Store's and the model's async clients); either runs the worker's
``extract_thread``, with no quiet period. At most one extraction per thread runs at a
time: rows queued meanwhile are merged into the thread's item, and the running extraction
runs once more for them when it ends. :func:`wait_for_memory` (or :func:`await_memory`)
waits for what is still running.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from langgraph.store.base import BaseStore

from ctxgraph.nodes.memory.extract import MemoryExtractor
from ctxgraph.nodes.memory.worker import Done, extract_thread
from ctxgraph.state.sans_io import Flow, arun, run
from ctxgraph.store.memory.repository import RepositoryFactory

__all__ = [
    "RUNNER",
    "BackgroundRunner",
    "ThreadExtraction",
    "await_memory",
    "pending_memory",
    "wait_for_memory",
]

logger = logging.getLogger("ctxgraph.memory")

MAX_RUNNING = 4
"""Extractions of one process (per event loop, for async runs) that call a model at once."""

Key = tuple[int, str]
"""A Store (by identity) and a thread id: the unit of which one extraction runs at a time."""


@dataclass(frozen=True)
class ThreadExtraction:
    """The extraction of one thread's queued item, as a graph hands it to the runner."""

    store: BaseStore
    extractor: MemoryExtractor
    thread_id: str
    threshold: float
    repositories: RepositoryFactory | None = None

    @property
    def key(self) -> Key:
        """One extraction at a time per Store and thread."""
        return id(self.store), self.thread_id

    def flow(self) -> Flow[Done]:
        """Extract the thread's item now (a failure is logged and the item stays queued)."""
        return extract_thread(
            self.store,
            self.extractor,
            self.thread_id,
            threshold=self.threshold,
            repositories=self.repositories,
        )

    def run(self) -> None:
        """Run :meth:`flow` with the sync driver."""
        run(self.flow())

    async def arun(self) -> None:
        """Run :meth:`flow` with the async driver."""
        await arun(self.flow())


@dataclass
class _Slot:
    """A thread whose extraction runs; ``again`` when rows were queued since it started."""

    again: bool = False


class BackgroundRunner:
    """Runs extractions off the turn: daemon threads for sync runs, tasks for async ones.

    It keeps a reference to every thread and task it starts (so none is collected while it
    runs), runs at most one extraction per thread at a time and at most ``max_running``
    at once (per event loop for tasks).
    """

    def __init__(self, max_running: int = MAX_RUNNING) -> None:
        """``max_running``: the most extractions that call the memory model at once."""
        if max_running < 1:
            raise ValueError(f"max_running must be at least 1, got {max_running}")
        self._max = max_running
        self._changed = threading.Condition()
        self._slots: dict[Key, _Slot] = {}
        self._threads: set[threading.Thread] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._limit = threading.BoundedSemaphore(max_running)
        self._loop_limits: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Semaphore
        ] = weakref.WeakKeyDictionary()

    def submit(self, extraction: ThreadExtraction) -> bool:
        """Run ``extraction`` in a daemon thread; False when the thread's one already runs.

        A running extraction of the same thread runs once more when it ends, over the
        item as it is then (the rows queued meanwhile merged in).
        """
        if not self._claim(extraction.key):
            return False
        worker = threading.Thread(
            target=self._run_thread,
            args=(extraction,),
            name=f"ctxgraph-memory-{extraction.thread_id}",
            daemon=True,
        )
        with self._changed:
            self._threads.add(worker)
        worker.start()
        return True

    def asubmit(self, extraction: ThreadExtraction) -> bool:
        """Run ``extraction`` as a task on the running event loop; as :meth:`submit`.

        The task starts from an empty context, so it is no part of the run that queued it
        (its events are logged, not streamed into that run).

        Raises:
            RuntimeError: No event loop is running in this thread.

        """
        loop = asyncio.get_running_loop()
        if not self._claim(extraction.key):
            return False
        task = loop.create_task(self._run_task(extraction), context=contextvars.Context())
        with self._changed:
            self._tasks.add(task)
        task.add_done_callback(self._task_ended)
        return True

    def pending(self) -> int:
        """How many threads have an extraction running or waiting for a free place."""
        with self._changed:
            return len(self._slots)

    def wait(self, timeout: float | None = None) -> int:
        """Block until no extraction runs, or ``timeout`` seconds; how many still run.

        Do not call it on an event loop whose tasks it waits for (use :meth:`await_idle`).
        """
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._changed:
            while self._slots:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._changed.wait(left)
            return len(self._slots)

    async def await_idle(self, timeout: float | None = None) -> int:
        """:meth:`wait` from async code: the event loop keeps running the tasks meanwhile."""
        return await asyncio.to_thread(self.wait, timeout)

    def _claim(self, key: Key) -> bool:
        """Mark ``key`` running; when it already runs, ask it to run once more instead."""
        with self._changed:
            slot = self._slots.get(key)
            if slot is not None:
                slot.again = True
                return False
            self._slots[key] = _Slot()
            return True

    def _again(self, key: Key) -> bool:
        """After a run: True to run once more; otherwise the key is released."""
        with self._changed:
            slot = self._slots[key]
            if slot.again:
                slot.again = False
                return True
            self._release(key)
            return False

    def _release(self, key: Key) -> None:
        """Forget ``key`` and wake the waiters (call with the lock held)."""
        self._slots.pop(key, None)
        self._changed.notify_all()

    def _run_thread(self, extraction: ThreadExtraction) -> None:
        finished = False
        try:
            with self._limit:
                while True:
                    _attempt(extraction.run)
                    if not self._again(extraction.key):
                        finished = True
                        return
        finally:
            with self._changed:
                if not finished:
                    self._release(extraction.key)
                self._threads.discard(threading.current_thread())

    async def _run_task(self, extraction: ThreadExtraction) -> None:
        finished = False
        try:
            async with self._loop_limit():
                while True:
                    await _aattempt(extraction.arun)
                    if not self._again(extraction.key):
                        finished = True
                        return
        finally:
            if not finished:  # cancelled (its loop closed): the item stays queued
                with self._changed:
                    self._release(extraction.key)

    def _loop_limit(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._changed:
            limit = self._loop_limits.get(loop)
            if limit is None:
                limit = self._loop_limits[loop] = asyncio.Semaphore(self._max)
            return limit

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        with self._changed:
            self._tasks.discard(task)


def _attempt(run: Callable[[], None]) -> None:
    """Run one extraction; an unexpected error is logged, never raised into the runner."""
    try:
        run()
    except Exception:
        logger.exception("background memory extraction failed; its item stays queued")


async def _aattempt(run: Callable[[], Awaitable[None]]) -> None:
    """Async :func:`_attempt`."""
    try:
        await run()
    except Exception:
        logger.exception("background memory extraction failed; its item stays queued")


RUNNER = BackgroundRunner()
"""The runner of this process: every graph's background extractions go here."""


def wait_for_memory(timeout: float | None = None) -> int:
    """Wait for this process's background memory extractions; how many still run.

    Call it before the process ends or the Store closes (the command line does at exit):
    an extraction that finishes stores its facts; one still running when ``timeout``
    passes stays in the Store's queue for ``ctxgraph memory process``, the
    ``memory_worker`` graph or the next command-line start. From async code, use
    :func:`await_memory`.

    Args:
        timeout: Seconds to wait at most; None waits until none runs.

    Returns:
        The number of threads whose extraction still runs (0 when all are done).

    """
    return RUNNER.wait(timeout)


async def await_memory(timeout: float | None = None) -> int:
    """Async :func:`wait_for_memory`: the event loop runs the extraction tasks meanwhile.

    Args:
        timeout: Seconds to wait at most; None waits until none runs.

    Returns:
        The number of threads whose extraction still runs (0 when all are done).

    """
    return await RUNNER.await_idle(timeout)


def pending_memory() -> int:
    """How many threads of this process have a background memory extraction running."""
    return RUNNER.pending()
