"""The ``compact`` node and its router: offload, then fold old messages into a verified summary.

The node routes and runs the step; which messages leave the window is the planner's
(``planner.py``), the inline summary and commit are ``inline.py``'s, background jobs are
``background_compactor.py``'s.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from ctxgraph.nodes.compaction.background import BackgroundJobs
from ctxgraph.nodes.compaction.background_compactor import BackgroundCompactor, BackgroundStep
from ctxgraph.nodes.compaction.commit import CompactionCommit, ThreadHead
from ctxgraph.nodes.compaction.errors import CompactionError, require_store, thread_id_of
from ctxgraph.nodes.compaction.inline import InlineCompactor
from ctxgraph.nodes.compaction.job_queue import JobQueue
from ctxgraph.nodes.compaction.job_state import (
    JOB_POLL_S,
    MAX_JOB_ATTEMPTS,
    UNFIT,
    Launch,
    job_due,
    job_pending,
    result_stored,
)
from ctxgraph.nodes.compaction.offloads import StepOffloads
from ctxgraph.nodes.compaction.plan import Plan
from ctxgraph.nodes.compaction.planner import RECORD_SHRINK_STEPS, CompactionPlanner, summary_check
from ctxgraph.nodes.compaction.shared_prefix import SummaryRequests
from ctxgraph.nodes.compaction.summarizer import SummaryWriter
from ctxgraph.nodes.compaction.triggers import fired_triggers
from ctxgraph.nodes.request_size import RequestMeasurer, RequestSize
from ctxgraph.nodes.settings import effective_settings
from ctxgraph.state.context import Context, require_context
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.models import Models
from ctxgraph.state.sans_io import Flow, arun, io, run, threaded
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter

__all__ = [
    "JOB_POLL_S",
    "MAX_JOB_ATTEMPTS",
    "RECORD_SHRINK_STEPS",
    "UNFIT",
    "CompactNode",
    "CompactionError",
    "Launch",
    "summary_check",
]


class CompactNode:
    """Router and node: decides when to compact, then summarizes, verifies and commits.

    Before compaction is considered, the node offloads (see ``StepOffloads``): large user
    inputs, and once the request nears the triggers, long arguments of old tool calls.
    The router also sends the run here when only offloading has work to do; then the
    node compacts only if a trigger still fires after the offloads.
    """

    def __init__(
        self,
        models: Models,
        builder: RequestMeasurer,
        settings: Settings,
        counter: TokenCounter,
        *,
        head: ThreadHead | None = None,
        queue: JobQueue | None = None,
        summary_prompt: str | None = None,
    ) -> None:
        """Build the node, its planner, its inline path and its background compactor.

        Args:
            models: The main model (whose input window caps the triggers) and the summary
                model (the main model is its fallback).
            builder: Builds and measures the main model's requests.
            settings: The graph's settings; a run's ``Context.settings`` override them.
            counter: Counts message tokens, for the summary chunks inline and in the
                background jobs.
            head: Reads the thread's saved state for the compare-and-set commit. Give it
                when the graph is compiled with a checkpointer (see
                ``ctxgraph.nodes.compaction.commit.checkpoint_head``); without it, the
                commit relies on one run per thread at a time, as a LangGraph server
                guarantees.
            queue: Receives the background jobs of async runs instead of a thread of this
                process (on a LangGraph server: ``ServerJobQueue``).
            summary_prompt: A template replacing ``SUMMARY_PROMPT`` in every summary
                call, inline and in the background (see ``SummaryWriter``). In a
                shared-prefix request it is the instruction's text, filled with pointers
                to the record and the messages above (see ``shared_prefix``).

        Raises:
            PromptTemplateError: ``summary_prompt`` is not a usable summary template.

        """
        summary_models = [models.summary_model, models.main]
        self._settings = settings
        self._commit = CompactionCommit(head)
        self._planner = planner = CompactionPlanner(models.main, builder)
        writer = SummaryWriter(summary_models, counter, prompt=summary_prompt)
        self._inline = InlineCompactor(planner, writer, self._commit, counter)
        jobs = BackgroundJobs(summary_models, counter, prompt=summary_prompt)
        self._requests = SummaryRequests(models, builder, counter, template=summary_prompt)
        self._background = BackgroundCompactor(
            planner, self._commit, jobs, queue=queue, requests=self._requests
        )
        self._offloads = StepOffloads(
            planner.measure, planner.fresh_measure, planner.split, counter
        )

    @property
    def planner(self) -> CompactionPlanner:
        """Decides which messages leave the window; the ``flush`` node is given it too."""
        return self._planner

    def _settings_for(self, runtime: Runtime[Context]) -> Settings:
        return effective_settings(require_context(runtime.context), self._settings)

    def route(self, state: AgentState, runtime: Runtime[Context]) -> Literal["compact", "model"]:
        """Send the run through ``compact`` when a trigger fires or offloading has work.

        Offloading has work when a user input is over its threshold, or when the request
        reached ``offload_args_fraction`` of a threshold and an old call has a long
        argument; both checks are cheap when there is nothing to offload. In background
        mode the run also comes here once the request reaches ``background_fraction`` of
        a trigger and no job has been started from the thread's current version, and
        then once this process's job for it has ended (no I/O: see ``result_stored``).
        """
        settings = self._settings_for(runtime)
        size = self._planner.measure(state, settings)
        window = self._planner.window(settings)
        if fired_triggers(size, settings, window):
            return "compact"
        if job_due(state, settings, size, window):
            return "compact"
        if job_pending(state, settings, size, window) and result_stored(state):
            return "compact"
        return "compact" if self._offloads.pending(state, settings, size, window) else "model"

    def invoke(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Synchronous offloading, then compaction if a trigger still fires.

        In background mode a ready job result is applied instead, and below the triggers
        a job may be started (see ``BackgroundCompactor``).
        """
        return run(self._step(state, runtime, config))

    async def ainvoke(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Asynchronous offloading, then compaction if a trigger still fires."""
        return await arun(self._step(state, runtime, config))

    def _step(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> Flow[dict[str, Any]]:
        """The node's step, as a flow both paths drive (``ctxgraph.state.sans_io``)."""
        settings = self._settings_for(runtime)
        window = self._planner.window(settings)
        offloaded = yield from self._offloads.apply(state, settings, window, runtime.store, config)
        state = offloaded.applied(state)
        if not fired_triggers(offloaded.size, settings, window):
            if job_pending(state, settings, offloaded.size, window):
                store, thread_id = require_store(runtime.store), thread_id_of(config)
                at = BackgroundStep(state, settings, store, thread_id, offloaded.size)
                step = yield from io(self._background.step, self._abackground_step, at, config)
                return offloaded.merged(step)
            if offloaded.pending:
                return offloaded.update()
        return offloaded.merged((yield from self._compact(state, runtime, config, offloaded.size)))

    async def _abackground_step(self, at: BackgroundStep, config: RunnableConfig) -> dict[str, Any]:
        """Async ``BackgroundCompactor.step``: an async run may hand a due job to the queue."""
        if job_due(at.state, at.settings, at.before, self._planner.window(at.settings)):
            queued = await self._background.queue(at, config)
            if queued is not None:
                return queued
        # The lease and Store calls are short; a thread keeps them off the loop.
        return await asyncio.to_thread(self._background.step, at, config)

    def _plan(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> Plan:
        store, thread_id = require_store(runtime.store), thread_id_of(config)
        return self._planner.plan(state, self._settings_for(runtime), store, thread_id, before)

    def _compact(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> Flow[dict[str, Any]]:
        """Compaction; in background mode a ready job result goes first."""
        plan = self._plan(state, runtime, config, before)
        window = state.get("messages") or []
        audit = self._commit.audit
        yield from io(audit.check, audit.acheck, plan.archive, plan.mark)
        if plan.settings.compaction_mode == "background":
            # Polling the Store for a running job's result may wait; async keeps it off the loop.
            apply = self._background.apply
            wait = plan.settings.background_wait_s
            applied = yield from io(apply, threaded(apply), plan, window, config, wait_s=wait)
            if applied is not None:
                return applied
        plan = self._requests.attach(plan, state)
        return (yield from self._inline.compact(plan, window, config))

    def run_job(
        self,
        state: AgentState,
        store: BaseStore,
        thread_id: str,
        *,
        wait_s: float,
        settings: Settings | None = None,
    ) -> Launch:
        """Start a background job for a saved thread state and wait for it, or join one.

        For tools outside a run (``ctxgraph threads compact``); see
        ``BackgroundCompactor.run_job``. ``settings`` default to the node's.
        """
        chosen = settings or self._settings
        before = self._planner.measure(state, chosen)
        at = BackgroundStep(state, chosen, store, thread_id, before)
        return self._background.run_job(at, wait_s=wait_s)
