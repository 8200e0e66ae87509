"""Runs queued memory extractions: due items for a worker, one thread's item for the runner.

The deferred worker (``process_pending``: ``ctxgraph memory process``, the
``memory_worker`` graph, the command line's start) takes every item whose thread has been
quiet long enough; the background runner (``memory.runner``) takes one thread's item at
once (``extract_thread``). Both run an item the same way, as one :class:`_ItemRun`: the
memory model's call, then one Store read and one write that mark the rows processed and
take them out of the queue. A failed extraction is logged and its item stays queued.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, Literal

from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from ctxgraph.nodes.memory import events
from ctxgraph.nodes.memory.extract import ExtractionResult, MemoryExtractor
from ctxgraph.state.model_errors import endpoint_warning
from ctxgraph.state.models import Models
from ctxgraph.state.sans_io import Flow, held, io, run
from ctxgraph.state.settings import Settings
from ctxgraph.state.usage import UsageTotals, add_usage, calls_event_fields, usage_update
from ctxgraph.store.memory.progress import ProcessedMessages, Progress, UnclaimedUsage
from ctxgraph.store.memory.queue import MemoryQueue, PendingExtraction
from ctxgraph.store.memory.queue_lock import aqueue_lock, queue_lock
from ctxgraph.store.memory.repository import MemoryRepository, RepositoryFactory
from ctxgraph.store.namespaces import memory_queue

logger = logging.getLogger("ctxgraph.memory")

Processed = list[tuple[PendingExtraction, ExtractionResult]]
"""Each processed queue item with what its extraction stored."""

Done = tuple[PendingExtraction, ExtractionResult] | None
"""One thread's processed item and its result; None when nothing ran or it failed."""

Origin = Literal["deferred", "background"]
"""Who ran the item: the deferred worker or the background runner (``memory.extracted``)."""


def process_pending(
    store: BaseStore,
    extractor: MemoryExtractor,
    *,
    threshold: float,
    quiet_seconds: float,
    now: datetime | None = None,
    repositories: RepositoryFactory | None = None,
) -> Processed:
    """Extract every queued item whose thread has been quiet for ``quiet_seconds``.

    A processed item has its row ids marked as processed and leaves the queue (rows that
    arrived meanwhile stay queued). An item whose extraction fails is logged and stays
    queued, so a later run retries it and nothing is lost. ``repositories`` gives the
    repository the extractions write through (the graph's, when the graph's process runs
    the worker).
    """
    repository = (repositories or RepositoryFactory())(store)
    processed: Processed = []
    for item in MemoryQueue(store).due(quiet_seconds=quiet_seconds, now=now):
        done = _ItemRun(store, item, "deferred").run(extractor, repository, threshold)
        if done is not None:
            processed.append(done)
    return processed


def extract_thread(
    store: BaseStore,
    extractor: MemoryExtractor,
    thread_id: str,
    *,
    threshold: float,
    repositories: RepositoryFactory | None = None,
) -> Flow[Done]:
    """Extract the queued item of ``thread_id`` now, however recent (the background runner).

    A flow (``ctxgraph.state.sans_io``): ``run`` or ``arun`` it.

    Args:
        store: The Store holding the queue and the memory.
        extractor: The graph's extractor (its memory model and prompt).
        thread_id: The thread whose item to run.
        threshold: The lowest confidence a fact is stored with.
        repositories: The graph's repository factory; None: a plain repository.

    Returns:
        The item and what its extraction stored; None when nothing is queued for the
        thread or the extraction failed (logged; the item stays queued).

    """
    waiting = yield from io(store.get, store.aget, memory_queue(), thread_id)
    item = MemoryQueue.read(waiting)
    if item is None:
        return None
    repository = (repositories or RepositoryFactory())(store)
    return (yield from _ItemRun(store, item, "background").flow(extractor, repository, threshold))


class _ItemRun:
    """One queue item's extraction: the model call, then one Store read and one write.

    Its :meth:`flow` is the one path, sync and async: the model call and the Store
    batches are its yielded I/O. After the call it reads the thread's item and processed
    ids again, then writes both in one batch: the ids marked, the item deleted (or only
    its rows taken out when newer ones arrived meanwhile).
    """

    def __init__(self, store: BaseStore, item: PendingExtraction, origin: Origin) -> None:
        self.item = item
        self.origin: Origin = origin
        self._store = store
        self._queue = MemoryQueue(store)
        self._processed = ProcessedMessages(store, item.thread_id)

    def run(
        self, extractor: MemoryExtractor, repository: MemoryRepository, threshold: float
    ) -> Done:
        """Extract the item's rows and take them out of the queue; None when it failed."""
        return run(self.flow(extractor, repository, threshold))

    def flow(
        self, extractor: MemoryExtractor, repository: MemoryRepository, threshold: float
    ) -> Flow[Done]:
        """:meth:`run` as a flow, for ``arun`` or ``yield from``."""
        arguments = self._arguments(repository, threshold)
        try:
            result = yield from extractor.extraction(**arguments)
        except Exception as error:  # the item stays queued for a later run
            self._failed(error, extractor)
            return None
        store, thread_id = self._store, self.item.thread_id
        locks = partial(queue_lock, store, thread_id), partial(aqueue_lock, store, thread_id)
        yield from held(*locks, self._finish(result))
        return self._done(result)

    def _finish(self, result: ExtractionResult) -> Flow[None]:
        """Read the item and ids as they are now and write them back (under the lock)."""
        store = self._store
        found = yield from io(store.batch, store.abatch, self.reads())
        yield from io(store.batch, store.abatch, self.writes(found, result))

    def _arguments(self, repository: MemoryRepository, threshold: float) -> dict[str, Any]:
        item = self.item
        return {
            "rows": item.rows,
            "context": item.context,
            "repository": repository,
            "thread_id": item.thread_id,
            "threshold": threshold,
        }

    def _failed(self, error: Exception, extractor: MemoryExtractor) -> None:
        """Log one line naming the thread, the endpoint and the cause; the item stays queued."""
        logger.debug("memory extraction failed", exc_info=error)
        logger.warning(
            "memory extraction for thread %s failed, it stays queued for a later run: %s",
            self.item.thread_id,
            endpoint_warning(error, "memory", extractor.model),
        )

    def _done(self, result: ExtractionResult) -> Done:
        """Emit ``memory.extracted``; the item and its result."""
        _log_extraction(self.item, result, self.origin)
        return self.item, result

    def reads(self) -> list[GetOp]:
        """The thread's queue item and processed ids, as they are now."""
        return [self._queue.get_op(self.item.thread_id), self._processed.get_op()]

    def writes(self, results: Sequence[Any], result: ExtractionResult) -> list[PutOp]:
        """The ids marked processed and the item out of the queue, after :meth:`reads`.

        A background extraction also leaves its calls' usage for the thread's next run to
        add to ``model_usage`` (``UnclaimedUsage``); the deferred worker's graph returns it
        as its own ``model_usage`` instead.
        """
        current, record = (value if isinstance(value, Item) else None for value in results)
        ids = [row["id"] for row in self.item.rows]
        progress = Progress.from_item(record)
        ops = self._queue.done_ops(self.item, current)
        if not progress.covers(ids):
            ops.append(self._processed.put_op(progress.marked(ids)))
        if self.origin == "background" and (calls := result.model_calls()):
            ops.append(UnclaimedUsage(self._store, self.item.thread_id).put_op(calls))
        return ops


def _log_extraction(item: PendingExtraction, result: ExtractionResult, origin: Origin) -> None:
    """Emit ``memory.extracted`` for a queue item: the call's usage and what it wrote.

    The item runs outside the thread's runs, so the usage is logged (``at`` is
    ``deferred`` or ``background``); a background extraction's is added to the thread's
    ``model_usage`` by its next run (``UnclaimedUsage``).
    """
    emit_extracted(item.thread_id, origin, len(item.rows), result)


def emit_extracted(thread_id: str, at: str, rows: int, result: ExtractionResult) -> dict[str, Any]:
    """Emit ``memory.extracted`` (where it ran, the rows, what it cost and wrote); return it."""
    fields: dict[str, Any] = {
        "at": at,
        "rows": rows,
        "facts": len(result.stored),
        "profile_sections": len(result.profile_sections),
        "rejected": len(result.rejected),
        "unreadable": result.skipped,
    }
    if calls := result.model_calls():
        fields.update(calls_event_fields(calls))
    return events.emit("extracted", thread_id, **fields)


def processed_usage(processed: Processed) -> UsageTotals:
    """The memory model's usage over ``processed``, as ``model_usage`` totals."""
    totals: UsageTotals = {}
    for _, result in processed:
        totals = add_usage(totals, usage_update(*result.model_calls()))
    return totals


def worker_from_env(
    environ: Mapping[str, str], *, extraction_prompt: str | None = None
) -> tuple[MemoryExtractor, Settings]:
    """The extractor on the configured memory model, and the settings (pass ``os.environ``).

    ``extraction_prompt`` replaces ``EXTRACTION_PROMPT``, as ``MemoryPart(extraction_prompt=)``
    does in a graph; give the same one to process the extractions that graph deferred
    (``CtxGraph(...).memory_worker()`` does it with the root's part).

    Raises ``ModelConfigError`` or ``SettingsError`` with a one-line message when the
    environment does not configure a usable model or settings, and ``PromptTemplateError``
    for a template that cannot be filled.
    """
    models = Models.from_env(environ)
    settings = Settings.from_env(environ)
    return MemoryExtractor(models.memory_model, extraction_prompt), settings
