"""Processes deferred memory extractions left in the Store queue, one thread at a time."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from langgraph.store.base import BaseStore

from ctxgraph.nodes.memory import events
from ctxgraph.nodes.memory.extract import ExtractionResult, MemoryExtractor
from ctxgraph.state.models import Models
from ctxgraph.state.settings import Settings
from ctxgraph.state.usage import UsageTotals, add_usage, event_fields, usage_update
from ctxgraph.store.memory.progress import ProcessedMessages
from ctxgraph.store.memory.queue import MemoryQueue, PendingExtraction
from ctxgraph.store.memory.repository import RepositoryFactory

logger = logging.getLogger("ctxgraph.memory")

Processed = list[tuple[PendingExtraction, ExtractionResult]]
"""Each processed queue item with what its extraction stored."""


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

    A processed item has its row ids marked as processed and leaves the queue (unless newer
    rows arrived meanwhile). An item whose extraction fails is logged and stays queued, so a
    later run retries it and nothing is lost. ``repositories`` gives the repository the
    extractions write through (the graph's, when the graph's process runs the worker).
    """
    queue = MemoryQueue(store)
    repository = (repositories or RepositoryFactory())(store)
    processed: Processed = []
    for item in queue.due(quiet_seconds=quiet_seconds, now=now):
        try:
            result = extractor.extract(
                item.rows,
                item.context,
                repository,
                thread_id=item.thread_id,
                threshold=threshold,
            )
        except Exception as error:
            logger.warning(
                "memory extraction for thread %s failed (%s: %s); it stays queued for a later run",
                item.thread_id,
                type(error).__name__,
                error,
                exc_info=logger.isEnabledFor(logging.DEBUG),
            )
            continue
        ProcessedMessages(store, item.thread_id).add(row["id"] for row in item.rows)
        queue.done(item)
        processed.append((item, result))
        _log_extraction(item, result)
    return processed


def _log_extraction(item: PendingExtraction, result: ExtractionResult) -> None:
    """Log ``memory.extracted`` for a queue item: the call's usage and what it wrote.

    The worker runs outside the thread's runs, so the usage is logged, not added to the
    thread's ``model_usage``.
    """
    fields: dict[str, object] = {
        "at": "deferred",
        "rows": len(item.rows),
        "facts": len(result.stored),
        "profile_sections": len(result.profile_sections),
        "rejected": len(result.rejected),
        "unreadable": result.skipped,
    }
    if result.usage is not None:
        fields.update(event_fields(result.usage))
    events.emit("extracted", item.thread_id, **fields)


def processed_usage(processed: Processed) -> UsageTotals:
    """The memory model's usage over ``processed``, as ``model_usage`` totals."""
    totals: UsageTotals = {}
    for _, result in processed:
        if result.usage is not None:
            totals = add_usage(totals, usage_update(result.usage))
    return totals


def worker_from_env(
    environ: Mapping[str, str], *, extraction_prompt: str | None = None
) -> tuple[MemoryExtractor, Settings]:
    """The extractor on the configured memory model, and the settings (pass ``os.environ``).

    ``extraction_prompt`` replaces ``EXTRACTION_PROMPT``, as ``build_graph``'s argument of
    that name does; give the same one to process the extractions a graph built with it
    deferred.

    Raises ``ModelConfigError`` or ``SettingsError`` with a one-line message when the
    environment does not configure a usable model or settings, and ``PromptTemplateError``
    for a template that cannot be filled.
    """
    models = Models.from_env(environ)
    settings = Settings.from_env(environ)
    return MemoryExtractor(models.memory_model, extraction_prompt), settings
