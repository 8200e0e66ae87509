"""The ``flush`` and ``extract_memory`` nodes: hand new user content to memory extraction.

Each turn reads the Store as little as it can. ``load_memory`` hands the profile (and,
when they are complete, the facts) it read to extraction through the run's untracked
``memory_turn`` channel; without it, extraction reads the profile and the processed-ids
record in one Store batch. A flush hands the processed ids on to the end of the turn.

With ``extraction_gate`` on, rows whose user text has no fact cue (``memory.gate``) are
marked processed without calling the memory model (``memory.skipped``); each call adds
its usage to ``model_usage`` and emits ``memory.extracted`` (``memory.events``).

``memory_extraction`` chooses where the memory model is called: ``"inline"`` here, in
the run; ``"deferred"`` and ``"background"`` queue the rows in the Store instead, and
``"background"`` then hands the thread to this process's runner (``memory.runner``), so
the run does not wait for the model.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, GetOp, Item, PutOp, SearchOp

from ctxgraph.nodes.memory import events
from ctxgraph.nodes.memory.extract import MEMORY_TURN_KEY, ExtractionResult, MemoryExtractor
from ctxgraph.nodes.memory.filter import USER, filter_for_memory, has_user_rows
from ctxgraph.nodes.memory.gate import gate_reason
from ctxgraph.nodes.memory.runner import RUNNER, BackgroundRunner, ThreadExtraction
from ctxgraph.nodes.memory.worker import emit_extracted
from ctxgraph.nodes.settings import effective_settings
from ctxgraph.state.context import Context, require_context
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.model_errors import endpoint_warning
from ctxgraph.state.models import Models
from ctxgraph.state.sans_io import Flow, arun, held, io, run
from ctxgraph.state.settings import Settings
from ctxgraph.state.usage import CallUsage, usage_update
from ctxgraph.store.memory.progress import ProcessedMessages, Progress, UnclaimedUsage
from ctxgraph.store.memory.queue import MemoryQueue
from ctxgraph.store.memory.queue_lock import aqueue_lock, queue_lock
from ctxgraph.store.memory.repository import MemoryRepository, RepositoryFactory
from ctxgraph.store.search.vectors import aput_facts, put_facts

logger = logging.getLogger("ctxgraph.memory")

Row = dict[str, str]

USAGE_KEY = "model_usage"
"""State key of the per-role usage totals an extraction adds its call to."""


def extraction_event(
    job: MemoryJob, rows: Sequence[Row], result: ExtractionResult
) -> dict[str, Any]:
    """Emit ``memory.extracted`` for one call over ``rows``: its usage and what it wrote."""
    return emit_extracted(job.thread_id, job.at, len(rows), result)


def usage_of(result: ExtractionResult) -> dict[str, Any]:
    """The ``model_usage`` update of an extraction (empty when it reported no usage)."""
    calls = result.model_calls()
    return {USAGE_KEY: usage_update(*calls)} if calls else {}


class FoldSplit(Protocol):
    """What a flush asks of compaction: which messages its next fold takes out of the window."""

    def split(
        self, state: AgentState, settings: Settings
    ) -> tuple[list[AnyMessage], list[AnyMessage]]:
        """``(old, kept)``: what the next compaction of ``state`` folds, and what it keeps."""
        ...


@dataclass(frozen=True)
class MemoryJob:
    """New rows of one thread for extraction, with where and how to process them."""

    store: BaseStore
    context: Context
    settings: Settings
    thread_id: str
    processed: ProcessedMessages
    rows: list[Row]
    """The filtered rows of the whole working window, in order."""
    among: Collection[str] | None = None
    """Flush: the ids of the messages about to be folded; only those rows are extracted."""
    turn: Mapping[str, Any] | None = None
    """What this run already read from the Store (the ``memory_turn`` channel)."""
    repositories: RepositoryFactory | None = None
    """The graph's repository factory (its ranker ranks the related facts); None: plain."""

    def candidates(self) -> list[Row]:
        """The rows this job may extract, whether or not processed already."""
        if self.among is None:
            return self.rows
        return [row for row in self.rows if row["id"] in self.among]

    def new_rows(self, progress: Progress) -> list[Row]:
        """Filtered rows not yet handed to extraction by any path."""
        return progress.unread(self.rows, among=self.among)

    @property
    def at(self) -> str:
        """``flush`` before a compaction, ``turn`` at the end of a turn."""
        return "turn" if self.among is None else "flush"


class MemoryNodes:
    """End-of-turn extraction and the flush before compaction, sharing processed ids."""

    def __init__(
        self,
        models: Models,
        planner: FoldSplit,
        settings: Settings,
        *,
        extraction_prompt: str | None = None,
        repositories: RepositoryFactory | None = None,
        runner: BackgroundRunner | None = None,
    ) -> None:
        """``planner`` splits as the ``compact`` node will: a flush extracts from what it folds.

        ``extraction_prompt`` replaces ``EXTRACTION_PROMPT`` (see ``MemoryExtractor``);
        ``repositories`` is the graph's factory, whose ranker picks the stored facts the
        memory model is shown; ``runner`` runs background extractions (None: the
        process's ``RUNNER``).
        """
        self._repositories = repositories
        self._runner = runner if runner is not None else RUNNER
        self._extractor = MemoryExtractor(models.memory_model, extraction_prompt)
        self._planner = planner
        self._settings = settings

    def _job(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        *,
        folding: bool,
    ) -> MemoryJob | None:
        context = require_context(runtime.context)
        settings = effective_settings(context, self._settings)
        thread_id = (config.get("configurable") or {}).get("thread_id")
        if settings.memory_extraction == "off":
            return None
        if runtime.store is None or not isinstance(thread_id, str):
            logger.debug("memory extraction skipped: the run has no store or no thread")
            return None
        messages: Sequence[BaseMessage] = state.get("messages") or []
        among: set[str] | None = None
        if folding:
            messages, among = self._folding(state, settings, messages)
        return MemoryJob(
            store=runtime.store,
            context=context,
            settings=settings,
            thread_id=thread_id,
            processed=ProcessedMessages(runtime.store, thread_id),
            rows=filter_for_memory(messages),
            among=among,
            turn=state.get("memory_turn"),  # MEMORY_TURN_KEY
            repositories=self._repositories,
        )

    def _folding(
        self, state: AgentState, settings: Settings, messages: Sequence[BaseMessage]
    ) -> tuple[Sequence[BaseMessage], set[str] | None]:
        """A flush's messages and the ids it extracts among (the ones about to be folded)."""
        old = self._folded(state, settings)
        if any(not m.id for m in old):
            # Rows of messages without ids are named by position: use the old ones alone.
            return old, None
        return messages, {m.id for m in old if m.id}

    def _folded(self, state: AgentState, settings: Settings) -> list[AnyMessage]:
        old, _ = self._planner.split(state, settings)
        return old

    def extract_turn(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """After the final answer: extract from what the turn added (and add its usage)."""
        job = self._job(state, runtime, config, folding=False)
        if job is None:
            return {}
        update = self._run(job)
        return {USAGE_KEY: update[USAGE_KEY]} if USAGE_KEY in update else {}

    async def aextract_turn(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Async :meth:`extract_turn`."""
        job = self._job(state, runtime, config, folding=False)
        if job is None:
            return {}
        update = await self._arun(job)
        return {USAGE_KEY: update[USAGE_KEY]} if USAGE_KEY in update else {}

    def flush(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Before compaction: extract from exactly the messages about to be folded."""
        job = self._job(state, runtime, config, folding=True)
        return self._run(job) if job is not None else {}

    async def aflush(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Async :meth:`flush`."""
        job = self._job(state, runtime, config, folding=True)
        return await self._arun(job) if job is not None else {}

    def _run(self, job: MemoryJob) -> dict[str, Any]:
        """Extract the job's new rows; returns the ``memory_turn`` (and usage) update."""
        return run(self._flow(job))

    async def _arun(self, job: MemoryJob) -> dict[str, Any]:
        """Async :meth:`_run`."""
        return await arun(self._flow(job))

    def _flow(self, job: MemoryJob) -> Flow[dict[str, Any]]:
        """:meth:`_run` as a flow: Store batches, the model call and the hand-off are I/O.

        Rows that go to the queue are read and written under the thread's queue lock, so
        a background extraction finishing meanwhile cannot write the item back from a
        stale read (``queue_lock``); no model is called while it is held.
        """
        plan = _Plan(job)
        if not plan.candidates:
            return {}
        if not plan.deferred:
            return (yield from self._steps(job, plan))
        locks = (
            partial(queue_lock, job.store, job.thread_id),
            partial(aqueue_lock, job.store, job.thread_id),
        )
        return (yield from held(*locks, self._steps(job, plan)))

    def _steps(self, job: MemoryJob, plan: _Plan) -> Flow[dict[str, Any]]:
        """The reads, the inline extraction or the queueing, the writes and the hand-off."""
        store, extractor = job.store, self._extractor
        while reads := plan.reads():  # at most two batches, usually one
            plan.read((yield from io(store.batch, store.abatch, reads)))
        rows = plan.new_rows()
        if not rows:
            return plan.update()
        usage: dict[str, Any] = {}
        if plan.inline(rows):
            try:
                result = yield from extractor.extraction(rows, **plan.extraction())
            except Exception as error:  # the model's failure must not fail the turn
                self._warn(error)
                return plan.failed()
            plan.extracted(result)
            extraction_event(job, rows, result)
            usage = usage_of(result)
        yield from io(put_facts, aput_facts, store, plan.writes(rows))
        if plan.claimed:  # background extractions of earlier turns, counted now
            usage = {USAGE_KEY: usage_update(*plan.claimed)}
        if plan.handed_on:
            yield from io(self._runner.submit, self._asubmit, self._background(job))
        return {**plan.update(), **usage}

    async def _asubmit(self, extraction: ThreadExtraction) -> bool:
        """Hand ``extraction`` to the runner as a task on this event loop."""
        return self._runner.asubmit(extraction)

    def _background(self, job: MemoryJob) -> ThreadExtraction:
        """The runner's extraction of the thread's queued item, with the graph's extractor."""
        return ThreadExtraction(
            store=job.store,
            extractor=self._extractor,
            thread_id=job.thread_id,
            threshold=job.settings.confidence_threshold,
            repositories=job.repositories,
        )

    def _warn(self, error: Exception) -> None:
        """Log one line naming the role, endpoint and cause; the turn goes on."""
        logger.debug("memory extraction failed", exc_info=error)
        line = endpoint_warning(error, "memory", self._extractor.model)
        logger.warning("memory extraction failed, will retry next turn: %s", line)


class _Plan:
    """One run of extraction over a job, as Store batches: what to read, what to write.

    The sync and async nodes share it through one flow (``MemoryNodes._flow``), whose
    I/O is the Store batches, the memory model's call and the hand-off to the runner. It
    starts from what this run already read (the ``memory_turn`` channel) and reads the
    rest in batches (see :meth:`reads`): the processed ids unless handed on, the profile
    when the memory model is called and no earlier node read it, and the waiting queue
    item when rows are queued (deferred or background); at the end of a background turn,
    also what earlier background extractions left to count (``UnclaimedUsage``). It
    writes in one batch: the queue item, the processed ids and the deletes of the usage
    it claimed.
    """

    def __init__(self, job: MemoryJob) -> None:
        self.job = job
        self.candidates = job.candidates()
        mode = job.settings.memory_extraction
        self.deferred = mode in ("deferred", "background")
        """Rows go to the Store's queue, not to the memory model in this run."""
        self.background = mode == "background"
        self.handed_on = False
        """True once :meth:`writes` queued rows that this process's runner should take."""
        self.gate = job.settings.extraction_gate
        self._gated: set[tuple[str, ...]] = set()
        factory = job.repositories
        self.repository = factory(job.store) if factory else MemoryRepository(job.store)
        self.queue = MemoryQueue(job.store)
        value = job.turn or {}
        profile, facts, ids = value.get("profile"), value.get("facts"), value.get("processed")
        self.profile: dict[str, str] | None = dict(profile) if profile is not None else None
        self.facts: list[dict[str, str]] | None = list(facts) if facts is not None else None
        self.progress: Progress | None = Progress(tuple(ids)) if ids is not None else None
        self.waiting: Item | None = None
        self._queue_read = False
        self._reads: list[str] = []
        self.unclaimed = UnclaimedUsage(job.store, job.thread_id)
        # The end of a background turn reads (None) what earlier extractions left to count.
        claims = self.background and job.among is None
        self._usage_keys: list[str] | None = None if claims else []
        self._usage_calls: list[CallUsage] = []
        self.claimed: list[CallUsage] = []
        """Calls of earlier background extractions that :meth:`writes` claimed."""

    def reads(self) -> list[GetOp | SearchOp]:
        """The Store reads still needed, for one batch; empty once everything is read.

        While the processed ids are unknown so are the new rows. Then the end of the turn,
        whose rows are nearly always new, reads along with the ids what its candidates
        would need; a flush, whose rows have nearly always been read at the end of an
        earlier turn, reads the ids alone. Once the ids are known, exactly what the new
        rows need.
        """
        self._reads = []
        ops: list[GetOp | SearchOp] = []
        if self._usage_keys is None:  # background: what earlier extractions left to count
            ops.append(self.unclaimed.search_op())
            self._reads.append("usage")
        rows: Sequence[Row]
        if self.progress is None:
            ops.append(self.job.processed.get_op())
            self._reads.append("processed")
            rows = self.candidates if self.job.among is None else ()
        else:
            rows = self.new_rows()
        if self.wanted(rows, announce=False):
            if self.deferred and not self._queue_read:
                ops.append(self.queue.get_op(self.job.thread_id))
                self._reads.append("queue")
            elif not self.deferred and self.profile is None:
                ops.append(self.repository.profile_op(self.job.context))
                self._reads.append("profile")
        return ops

    def read(self, results: Sequence[Any]) -> None:
        """Take the results of the :meth:`reads` batch."""
        found: dict[str, Item | None] = {}
        for name, result in zip(self._reads, results, strict=True):
            if name == "usage":
                self._usage_calls, self._usage_keys = UnclaimedUsage.claimed(result)
            else:
                found[name] = result if isinstance(result, Item) else None
        if "processed" in found:
            self.progress = Progress.from_item(found["processed"])
        if "profile" in found:
            self.profile = MemoryRepository.profile_of(found["profile"])
        if "queue" in found:
            self.waiting, self._queue_read = found["queue"], True

    def new_rows(self) -> list[Row]:
        """Rows not yet handed to extraction by any path."""
        return self.job.new_rows(self.progress or Progress())

    def wanted(self, rows: Sequence[Row], *, announce: bool = True) -> bool:
        """True if the memory model should see ``rows``: user text the gate lets through.

        With ``extraction_gate`` on, user rows with no fact cue are kept from the model
        (they are still marked processed); ``announce`` emits ``memory.skipped`` once for
        them.
        """
        if not has_user_rows(rows):
            return False
        if not self.gate:
            return True
        reason = gate_reason(rows)
        if reason is None:
            return True
        ids = tuple(row["id"] for row in rows)
        if announce and ids not in self._gated:
            self._gated.add(ids)
            users = sum(row["role"] == USER for row in rows)
            events.emit("skipped", self.job.thread_id, at=self.job.at, reason=reason, rows=users)
        return False

    def inline(self, rows: Sequence[Row]) -> bool:
        """True if ``rows`` go to the memory model now (wanted, not deferred)."""
        return self.wanted(rows) and not self.deferred

    def extraction(self) -> dict[str, Any]:
        """Arguments of ``MemoryExtractor.extract`` besides the rows."""
        job = self.job
        return {
            "context": job.context,
            "repository": self.repository,
            "thread_id": job.thread_id,
            "threshold": job.settings.confidence_threshold,
            "profile": self.profile,
            "facts": self.facts,
        }

    def extracted(self, result: ExtractionResult) -> None:
        """Keep the handed-on records current after the extraction wrote to the Store."""
        if result.profile is not None:
            self.profile = result.profile
        if result.stored:
            self.facts = None  # the next extraction lists them again, in the Store's order

    def failed(self) -> dict[str, Any]:
        """After a failed extraction: nothing is marked; hand on only the processed ids."""
        self.profile = self.facts = None
        return self.update()

    def writes(self, rows: Sequence[Row]) -> list[PutOp]:
        """The Store writes that finish the job: the queue item (queued), the processed ids."""
        job = self.job
        ops: list[PutOp] = []
        if self.deferred and self.wanted(rows):
            pending = self.queue.pending(job.thread_id, job.context, rows, self.waiting)
            ops.append(self.queue.put_op(pending))
            self.handed_on = self.background
        self.progress = (self.progress or Progress()).marked(row["id"] for row in rows)
        ops.append(job.processed.put_op(self.progress))
        if self._usage_keys:
            ops.extend(self.unclaimed.delete_ops(self._usage_keys))
            self.claimed, self._usage_calls, self._usage_keys = self._usage_calls, [], []
        return ops

    def update(self) -> dict[str, Any]:
        """The ``memory_turn`` update: what this run has read, for the next memory node."""
        value: dict[str, Any] = {}
        if self.profile is not None:
            value["profile"] = self.profile
        if self.facts is not None:
            value["facts"] = self.facts
        if self.progress is not None:
            value["processed"] = list(self.progress.ids)
        return {MEMORY_TURN_KEY: value}
