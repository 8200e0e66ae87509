"""The ``flush`` and ``extract_memory`` nodes: hand new user content to memory extraction."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from ctxgraph.nodes.compaction.node import CompactNode
from ctxgraph.nodes.memory.extract import MemoryExtractor
from ctxgraph.nodes.memory.filter import filter_for_memory, has_user_rows
from ctxgraph.nodes.settings import effective_settings
from ctxgraph.state.context import Context, require_context
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.model_errors import endpoint_warning
from ctxgraph.state.models import Models
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.progress import ProcessedMessages
from ctxgraph.store.memory.queue import MemoryQueue
from ctxgraph.store.memory.repository import MemoryRepository

logger = logging.getLogger("ctxgraph.memory")


@dataclass(frozen=True)
class MemoryJob:
    """New rows of one thread for extraction, with where and how to process them."""

    store: BaseStore
    context: Context
    settings: Settings
    thread_id: str
    processed: ProcessedMessages
    messages: Sequence[BaseMessage]

    def new_rows(self, done: set[str]) -> list[dict[str, str]]:
        """Filtered rows not yet handed to extraction by any path."""
        return [row for row in filter_for_memory(self.messages) if row["id"] not in done]


class MemoryNodes:
    """End-of-turn extraction and the flush before compaction, sharing processed ids."""

    def __init__(self, models: Models, compact: CompactNode, settings: Settings) -> None:
        self._extractor = MemoryExtractor(models.memory_model)
        self._compact = compact
        self._settings = settings

    def _job(
        self, messages: Sequence[BaseMessage], runtime: Runtime[Context], config: RunnableConfig
    ) -> MemoryJob | None:
        context = require_context(runtime.context)
        settings = effective_settings(context, self._settings)
        thread_id = (config.get("configurable") or {}).get("thread_id")
        if settings.memory_extraction == "off":
            return None
        if runtime.store is None or not isinstance(thread_id, str):
            logger.debug("memory extraction skipped: the run has no store or no thread")
            return None
        return MemoryJob(
            store=runtime.store,
            context=context,
            settings=settings,
            thread_id=thread_id,
            processed=ProcessedMessages(runtime.store, thread_id),
            messages=messages,
        )

    def _folded(self, state: AgentState, runtime: Runtime[Context]) -> list[AnyMessage]:
        settings = effective_settings(require_context(runtime.context), self._settings)
        old, _ = self._compact.split(state, settings)
        return old

    def extract_turn(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """After the final answer: extract from what the turn added."""
        job = self._job(state.get("messages") or [], runtime, config)
        if job is not None:
            self._run(job)
        return {}

    async def aextract_turn(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Async :meth:`extract_turn`."""
        job = self._job(state.get("messages") or [], runtime, config)
        if job is not None:
            await self._arun(job)
        return {}

    def flush(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Before compaction: extract from exactly the messages about to be folded."""
        job = self._job(self._folded(state, runtime), runtime, config)
        if job is not None:
            self._run(job)
        return {}

    async def aflush(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Async :meth:`flush`."""
        job = self._job(self._folded(state, runtime), runtime, config)
        if job is not None:
            await self._arun(job)
        return {}

    def _run(self, job: MemoryJob) -> None:
        done = job.processed.get()
        rows = job.new_rows(set(done))
        if not rows:
            return
        ids = [row["id"] for row in rows]
        if has_user_rows(rows):
            if job.settings.memory_extraction == "deferred":
                MemoryQueue(job.store).enqueue(job.thread_id, job.context, rows)
            else:
                try:
                    self._extractor.extract(
                        rows,
                        job.context,
                        MemoryRepository(job.store),
                        thread_id=job.thread_id,
                        threshold=job.settings.confidence_threshold,
                    )
                except Exception as error:  # the model's failure must not fail the turn
                    self._warn(error)
                    return
        job.processed.add(ids, known=done)

    async def _arun(self, job: MemoryJob) -> None:
        done = await job.processed.aget()
        rows = job.new_rows(set(done))
        if not rows:
            return
        ids = [row["id"] for row in rows]
        if has_user_rows(rows):
            if job.settings.memory_extraction == "deferred":
                await MemoryQueue(job.store).aenqueue(job.thread_id, job.context, rows)
            else:
                try:
                    await self._extractor.aextract(
                        rows,
                        job.context,
                        MemoryRepository(job.store),
                        thread_id=job.thread_id,
                        threshold=job.settings.confidence_threshold,
                    )
                except Exception as error:  # the model's failure must not fail the turn
                    self._warn(error)
                    return
        await job.processed.aadd(ids, known=done)

    def _warn(self, error: Exception) -> None:
        """Log one line naming the role, endpoint and cause; the turn goes on."""
        logger.debug("memory extraction failed", exc_info=error)
        line = endpoint_warning(error, "memory", self._extractor.model)
        logger.warning("memory extraction failed, will retry next turn: %s", line)
