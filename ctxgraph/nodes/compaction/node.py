"""The ``compact`` node and its router: offload, then fold old messages into a verified summary."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal

from langchain_core.messages import AnyMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from ctxgraph.nodes.compaction.background import BackgroundJobs, JobSnapshot, job_ended
from ctxgraph.nodes.compaction.commit import CompactionCommit, ThreadHead
from ctxgraph.nodes.compaction.events import emit
from ctxgraph.nodes.compaction.job_queue import JobQueue, job_payload
from ctxgraph.nodes.compaction.jobs import JobResult, JobResults, folded_hash
from ctxgraph.nodes.compaction.ledger import (
    MAX_ARTIFACTS,
    Ledger,
    bound_ledger,
    derive_ledger,
    empty_ledger,
    merge_ledgers,
)
from ctxgraph.nodes.compaction.offloads import StepOffloads
from ctxgraph.nodes.compaction.partition import partition_history, repair_tool_pairs
from ctxgraph.nodes.compaction.summarizer import Check, SummaryError, SummaryJob, SummaryWriter
from ctxgraph.nodes.compaction.triggers import fired_triggers
from ctxgraph.nodes.compaction.verify import size_problems, summary_problems
from ctxgraph.nodes.offload.refs import OFFLOAD_ARGS_KEY
from ctxgraph.nodes.request_size import RequestMeasurer, RequestSize, state_key
from ctxgraph.nodes.settings import effective_settings
from ctxgraph.state.context import Context, require_context
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.messages import is_real_user_message
from ctxgraph.state.models import Models, input_window
from ctxgraph.state.settings import Settings
from ctxgraph.state.summary import CHAIN_SEED, SUMMARY_SCHEMA_VERSION
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.store.persistence.archive import (
    ArchiveRecord,
    ThreadArchive,
    build_record,
    committed_version,
)
from ctxgraph.store.persistence.compaction_lease import (
    CompactionLeases,
    Lease,
    leases_for,
    new_holder,
)

logger = logging.getLogger("ctxgraph.compaction")


class CompactionError(RuntimeError):
    """Compaction cannot proceed and the request does not fit; the message says what is big."""


@dataclass(frozen=True)
class Plan:
    """Everything one compaction attempt needs, worked out before any model call."""

    settings: Settings
    archive: ThreadArchive
    old: list[AnyMessage]
    kept: list[AnyMessage]
    previous: dict[str, Any] | None
    mark: dict[str, Any]
    before: RequestSize
    window: int | None
    ledger: Ledger
    memory_view: str

    def summary(self, sections: dict[str, str]) -> dict[str, Any]:
        """The summary record for candidate sections: schema version, sections, ledger."""
        return {"schema_version": SUMMARY_SCHEMA_VERSION, **sections, "ledger": self.ledger}

    def check(self, sections: dict[str, str]) -> list[str]:
        """Schema, size and ledger problems of candidate sections."""
        return summary_problems(self.summary(sections), self.settings)

    @property
    def job(self) -> SummaryJob:
        """The summary call's input."""
        latest = next((m for m in reversed(self.kept) if is_real_user_message(m)), None)
        request = "" if latest is None else latest.text
        return SummaryJob(self.previous, self.old, request)


@dataclass(frozen=True)
class Launch:
    """What asking for a background job did.

    ``state`` is ``running`` (a job was started, or is still running), ``busy`` (another
    job holds the thread's lease), ``ready`` (a result for the thread's version is
    stored), ``completed`` or ``joined`` (a job this call started, or waited for, stored
    its result), ``failed`` (it ended without one) or ``nothing to fold``.
    """

    state: str
    lease: Lease | None = None
    worker: threading.Thread | None = None
    result: JobResult | None = None


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
    ) -> None:
        """``head`` reads the thread's saved state for the compare-and-set commit.

        ``queue``, when given, receives the background jobs of async runs instead of a
        thread of this process (on a LangGraph server: ``ServerJobQueue``).

        Give it when the graph is compiled with a checkpointer (see
        ``ctxgraph.nodes.compaction.commit.checkpoint_head``); without it, the commit relies
        on one run per thread at a time, as a LangGraph server guarantees.
        """
        self._main = models.main
        self._commit = CompactionCommit(head)
        self._builder = builder
        self._settings = settings
        self._counter = counter
        self._writer = SummaryWriter([models.summary_model, models.main], counter)
        self._jobs = BackgroundJobs([models.summary_model, models.main])
        self._queue = queue
        # The last split: the flush node and the compact node of one step split one state.
        self._split_cache: tuple[Hashable, tuple[list[AnyMessage], list[AnyMessage]]] | None = None
        self._offloads = StepOffloads(self._measure, self._fresh_measure, self.split)

    def _measure(self, state: AgentState, settings: Settings) -> RequestSize:
        return self._builder.measure_state(state, settings)

    def _fresh_measure(self, state: AgentState, settings: Settings) -> RequestSize:
        """Measured afresh: offloaded arguments change a request but not its ``state_key``."""
        return self._builder.measure(self._builder.build(state, settings))

    def _settings_for(self, runtime: Runtime[Context]) -> Settings:
        return effective_settings(require_context(runtime.context), self._settings)

    def route(self, state: AgentState, runtime: Runtime[Context]) -> Literal["compact", "model"]:
        """Send the run through ``compact`` when a trigger fires or offloading has work.

        Offloading has work when a user input is over its threshold, or when the request
        reached ``offload_args_fraction`` of a threshold and an old call has a long
        argument; both checks are cheap when there is nothing to offload. In background
        mode the run also comes here once the request reaches ``background_fraction`` of
        a trigger and no job has been started from the thread's current version, and
        then once this process's job for it has ended (no I/O: see ``_result_stored``).
        """
        settings = self._settings_for(runtime)
        size = self._measure(state, settings)
        window = input_window(self._main, settings.context_window)
        if fired_triggers(size, settings, window):
            return "compact"
        if _job_due(state, settings, size, window):
            return "compact"
        if _job_pending(state, settings, size, window) and _result_stored(state):
            return "compact"
        return "compact" if self._offloads.pending(state, settings, size, window) else "model"

    def _plan(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> Plan:
        store, thread_id = _require_store(runtime.store), _thread_id(config)
        return self._plan_for(state, self._settings_for(runtime), store, thread_id, before)

    def _plan_for(
        self,
        state: AgentState,
        settings: Settings,
        store: BaseStore,
        thread_id: str,
        before: RequestSize,
    ) -> Plan:
        previous: dict[str, Any] | None = state.get("summary")
        window = input_window(self._main, settings.context_window)
        old, kept = self.split(state, settings)
        ledger = _merged_ledger(previous, old, settings)
        return Plan(
            settings=settings,
            archive=ThreadArchive(store, thread_id),
            old=old,
            kept=kept,
            previous=previous,
            mark=dict(state.get("compaction") or {}),
            before=before,
            window=window,
            ledger=ledger,
            memory_view=state.get("memory_view") or "",
        )

    def split(
        self, state: AgentState, settings: Settings
    ) -> tuple[list[AnyMessage], list[AnyMessage]]:
        """The ``(old, kept)`` split the next compaction of ``state`` will use.

        Deterministic for a given state, so the flush node hands memory extraction exactly
        the messages that compaction is about to fold.
        """
        key = (state_key(state, settings), _offloaded_arguments(state))
        if self._split_cache is not None and self._split_cache[0] == key:
            return self._split_cache[1]
        split = self._choose_split(state, settings)
        self._split_cache = (key, split)
        return split

    def _choose_split(
        self, state: AgentState, settings: Settings
    ) -> tuple[list[AnyMessage], list[AnyMessage]]:
        window = input_window(self._main, settings.context_window)
        messages = state.get("messages") or []
        expected_summary = self._expected_summary(state, settings)
        # Each refusal in a row halves the messages the next attempt starts from, so a
        # retry never repeats the split that was refused.
        keep = max(1, settings.keep_messages >> _refusals(state))
        while True:
            old, kept = partition_history(messages, keep)
            # Large kept messages (big tool results) can leave no room for the summary:
            # then keep fewer, down to the last exchange and the pinned messages.
            if keep == 1 or self._room_after(state, kept, expected_summary, settings, window):
                return old, kept
            keep = max(1, keep // 2)

    def _expected_summary(self, state: AgentState, settings: Settings) -> int:
        """A cautious guess at the next summary message's size: the current one's plus 15%.

        After a refused compaction, the largest a summary may be.
        """
        largest = settings.summary_max_tokens + settings.ledger_budget
        if _refusals(state):
            return largest
        current = self._builder.summary_tokens(state, settings)
        if not current:
            return largest // 2
        return min(current + current // 7 + 100, largest)

    def _room_after(
        self,
        state: AgentState,
        kept: list[AnyMessage],
        expected_summary: int,
        settings: Settings,
        window: int | None,
    ) -> bool:
        """Whether ``kept`` plus a summary of the expected size leaves room under the triggers."""
        after: AgentState = {"messages": kept, "memory_view": state.get("memory_view") or ""}
        size = self._builder.measure(self._builder.build(after, settings))
        expected = RequestSize(tokens=size.tokens + expected_summary, messages=size.messages + 1)
        return not fired_triggers(expected, settings, window, scale=settings.compaction_target)

    def invoke(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Synchronous offloading, then compaction if a trigger still fires.

        In background mode a ready job result is applied instead (see ``_apply_job``),
        and below the triggers a job may be started (see ``_start_job``).
        """
        settings = self._settings_for(runtime)
        window = input_window(self._main, settings.context_window)
        offloaded = self._offloads.apply(state, settings, window, runtime.store, config)
        state = offloaded.applied(state)
        if not fired_triggers(offloaded.size, settings, window):
            if _job_pending(state, settings, offloaded.size, window):
                step = self._background_step(state, runtime, config, offloaded.size)
                return offloaded.merged(step)
            if offloaded.pending:
                return offloaded.update()
        return offloaded.merged(self._compact(state, runtime, config, offloaded.size))

    async def ainvoke(
        self, state: AgentState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        """Asynchronous offloading, then compaction if a trigger still fires."""
        settings = self._settings_for(runtime)
        window = input_window(self._main, settings.context_window)
        offloaded = await self._offloads.aapply(state, settings, window, runtime.store, config)
        state = offloaded.applied(state)
        if not fired_triggers(offloaded.size, settings, window):
            if _job_pending(state, settings, offloaded.size, window):
                if self._queue is not None and _job_due(state, settings, offloaded.size, window):
                    queued = await self._queue_job(state, runtime, config, offloaded.size)
                    if queued is not None:
                        return offloaded.merged(queued)
                # The lease and Store calls are short; a thread keeps them off the loop.
                step = await asyncio.to_thread(
                    self._background_step, state, runtime, config, offloaded.size
                )
                return offloaded.merged(step)
            if offloaded.pending:
                return offloaded.update()
        return offloaded.merged(await self._acompact(state, runtime, config, offloaded.size))

    def _compact(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> dict[str, Any]:
        """Synchronous compaction; in background mode a ready job result goes first."""
        plan = self._plan(state, runtime, config, before)
        self._commit.audit.check(plan.archive, plan.mark)
        if plan.settings.compaction_mode == "background":
            wait = plan.settings.background_wait_s
            applied = self._apply_job(plan, state, runtime, config, wait_s=wait)
            if applied is not None:
                return applied
        if not plan.old:
            return self._give_up(plan, "nothing old enough to fold")
        try:
            sections = self._writer.write(plan.job, plan.settings, plan.check)
        except SummaryError as error:
            return self._give_up(plan, f"no usable summary ({error})")
        outcome = self._finish(plan, sections)
        if isinstance(outcome, str):
            return self._give_up(plan, outcome)
        record, update, _ = outcome
        window = state.get("messages") or []
        prepared = self._commit.prepare(plan.archive, record, plan.old, window, config)
        return update if prepared else {}

    async def _acompact(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> dict[str, Any]:
        """Asynchronous compaction; in background mode a ready job result goes first."""
        plan = self._plan(state, runtime, config, before)
        await self._commit.audit.acheck(plan.archive, plan.mark)
        if plan.settings.compaction_mode == "background":
            # Polling the Store for a running job's result may wait; keep it off the loop.
            applied = await asyncio.to_thread(
                partial(self._apply_job, wait_s=plan.settings.background_wait_s),
                plan,
                state,
                runtime,
                config,
            )
            if applied is not None:
                return applied
        if not plan.old:
            return self._give_up(plan, "nothing old enough to fold")
        try:
            sections = await self._writer.awrite(plan.job, plan.settings, plan.check)
        except SummaryError as error:
            return self._give_up(plan, f"no usable summary ({error})")
        outcome = self._finish(plan, sections)
        if isinstance(outcome, str):
            return self._give_up(plan, outcome)
        record, update, _ = outcome
        window = state.get("messages") or []
        prepared = await self._commit.aprepare(plan.archive, record, plan.old, window, config)
        return update if prepared else {}

    def _background_step(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> dict[str, Any]:
        """Below the triggers in background mode: apply a ready result, or start a job.

        A ready result is applied as soon as the run passes ``compact`` (no waiting): the
        summary is paid for, and a smaller window leaves the next job the whole way from
        ``background_fraction`` to the trigger. A job that ended without a usable result
        allows one more attempt from the same version.
        """
        settings = self._settings_for(runtime)
        if _job_due(state, settings, before, input_window(self._main, settings.context_window)):
            return self._start_job(state, runtime, config, before)
        plan = self._plan(state, runtime, config, before)
        applied = self._apply_job(plan, state, runtime, config, wait_s=0)
        if applied is not None:
            return applied
        known = dict(state.get("compaction_job") or {})
        leases = leases_for(plan.archive.store)
        current = leases.current(plan.archive.thread_id)
        if current is not None and current.live:
            return {}
        known.update(state="ended", attempts=int(known.get("attempts", 1)))
        return {"compaction_job": known}

    async def _queue_job(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> dict[str, Any] | None:
        """Hand the job's snapshot to the queue (a worker run takes the lease and runs it).

        None when the queue refused it (logged as ``compaction.failed``): the job then
        runs in a thread of this process instead.
        """
        assert self._queue is not None
        plan = self._plan(state, runtime, config, before)
        thread_id = plan.archive.thread_id
        known = _known_job(state, "queued")
        if not plan.old:
            return {"compaction_job": {**known, "state": "nothing to fold"}}
        payload = job_payload(
            thread_id=thread_id,
            base_version=known["base_version"],
            folded=plan.old,
            previous=plan.previous,
            request=plan.job.current_request,
            settings=plan.settings,
            tokens_before=before.tokens,
        )
        try:
            run_id = await self._queue.submit(payload)
        except Exception as error:  # the queue is down: a thread does the job instead
            emit(
                "failed",
                thread_id,
                base_version=known["base_version"],
                reason=f"cannot queue the job ({type(error).__name__}: {error}); "
                "running it in this process",
            )
            return None
        emit(
            "queued",
            thread_id,
            base_version=known["base_version"],
            run_id=run_id,
            folded=len(plan.old),
            tokens_before=before.tokens,
        )
        return {"compaction_job": {**known, "run_id": run_id}}

    def _start_job(
        self,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        before: RequestSize,
    ) -> dict[str, Any]:
        """Start a background summary job on a snapshot of the window, if none is known.

        A result already stored for the current version is left for a step to apply; a
        lease held elsewhere means another job runs (``skipped_busy``, no summarizer
        call). Either way ``compaction_job`` records it, so the router does not start
        another job from this version.
        """
        settings = self._settings_for(runtime)
        store = _require_store(runtime.store)
        launched = self._launch(state, settings, store, _thread_id(config), before)
        known = _known_job(state, launched.state)
        if launched.lease is not None:
            known.update(token=launched.lease.token, holder=launched.lease.holder)
        return {"compaction_job": known}

    def _launch(
        self,
        state: AgentState,
        settings: Settings,
        store: BaseStore,
        thread_id: str,
        before: RequestSize,
    ) -> Launch:
        """Start a job for ``state`` unless a result is ready or another job holds the lease."""
        version = _mark_version(state)
        results = JobResults(store, thread_id)
        ready = results.ready(version)
        if ready is not None:
            return Launch("ready", result=ready)
        leases = leases_for(store)
        lease = leases.acquire(thread_id, new_holder(), settings.compaction_lease_s)
        if lease is None:
            holder = leases.current(thread_id)
            emit(
                "skipped_busy",
                thread_id,
                base_version=version,
                holder=holder.holder if holder else None,
                token=holder.token if holder else None,
            )
            return Launch("busy")
        plan = self._plan_for(state, settings, store, thread_id, before)
        if not plan.old:
            leases.release(lease)
            return Launch("nothing to fold")
        snapshot = JobSnapshot(
            thread_id=thread_id,
            base_version=version,
            folded=list(plan.old),
            job=plan.job,
            settings=settings,
            check=plan.check,
            tokens_before=before.tokens,
        )
        worker = self._jobs.spawn(snapshot, lease, leases, store)
        emit(
            "started",
            thread_id,
            base_version=version,
            token=lease.token,
            folded=len(plan.old),
            tokens_before=before.tokens,
        )
        return Launch("running", lease=lease, worker=worker)

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

        For tools outside a run (``ctxgraph threads compact``). A result already stored
        for the thread's version is returned as it is (``ready``). When another job holds
        the lease, waits for it to end (``joined``). Otherwise starts one and waits for
        it (``completed``). After ``wait_s`` seconds the state is ``running`` (the job
        goes on); a job that ended without a result is ``failed`` (the reason is logged).
        """
        settings = settings or self._settings
        before = self._measure(state, settings)
        launched = self._launch(state, settings, store, thread_id, before)
        if launched.state in ("ready", "nothing to fold"):
            return launched
        version = _mark_version(state)
        deadline = time.monotonic() + wait_s
        if launched.worker is not None:
            launched.worker.join(wait_s)
            if launched.worker.is_alive():
                return launched
        else:
            leases = leases_for(store)
            while True:
                current = leases.current(thread_id)
                if current is None or not current.live:
                    break
                if time.monotonic() >= deadline:
                    return Launch("running")
                time.sleep(JOB_POLL_S)
        result = JobResults(store, thread_id).ready(version)
        if result is None:
            return Launch("failed", lease=launched.lease)
        return Launch("joined" if launched.worker is None else "completed", result=result)

    def _apply_job(
        self,
        plan: Plan,
        state: AgentState,
        runtime: Runtime[Context],
        config: RunnableConfig,
        *,
        wait_s: float,
    ) -> dict[str, Any] | None:
        """Apply a stored, still-valid job result; None when there is none to apply.

        While a job's lease is live and no result is ready, waits for it up to
        ``wait_s``. Results that can no longer apply are discarded (and
        deleted) with the reason logged and streamed.
        """
        store = _require_store(runtime.store)
        thread_id = plan.archive.thread_id
        results = JobResults(store, thread_id)
        leases = leases_for(store)
        deadline = time.monotonic() + wait_s
        waited_from: float | None = None
        window = state.get("messages") or []
        repaired, everything = repair_tool_pairs(window)
        while True:
            for key, result in self._usable_results(plan, everything, results, leases):
                update = self._applied(plan, window, repaired, everything, result, config)
                if not isinstance(update, str):
                    return update
                _discard(results, key, result, update)
            current = leases.current(thread_id)
            if current is None or not current.live or time.monotonic() >= deadline:
                if waited_from is not None:
                    logger.info(
                        "no job result after waiting %.1f s; compacting inline",
                        time.monotonic() - waited_from,
                    )
                return None
            waited_from = waited_from or time.monotonic()
            time.sleep(JOB_POLL_S)

    def _usable_results(
        self,
        plan: Plan,
        everything: list[AnyMessage],
        results: JobResults,
        leases: CompactionLeases,
    ) -> list[tuple[str, JobResult]]:
        """The stored results that can apply, newest first; every other one is discarded.

        Discarding deletes the result and emits ``compaction.discarded`` with the reason,
        so results of superseded versions do not pile up.
        """
        usable: list[tuple[str, JobResult]] = []
        for key, result in results.results():
            if result is None:
                _discard(results, key, None, "unreadable job result")
                continue
            reason = self._unusable(result, plan, everything, leases)
            if reason is None:
                usable.append((key, result))
            elif _was_applied(plan.archive, result):
                results.delete(key)  # its compaction committed: nothing was discarded
            else:
                _discard(results, key, result, reason)
        return usable

    @staticmethod
    def _unusable(
        result: JobResult,
        plan: Plan,
        everything: list[AnyMessage],
        leases: CompactionLeases,
    ) -> str | None:
        """Why a stored result cannot apply (None: it can).

        ``everything`` is the window as ``repair_tool_pairs`` gives it, orphans included.
        """
        version = int(plan.mark.get("version", 0) or 0)
        if result.base_version != version:
            return (
                f"superseded: the job started from v{result.base_version} and the thread "
                f"is at v{version}"
            )
        # The token is checked where it was issued; a process that never saw a lease for
        # the thread (a server worker in another process) relies on the checks below.
        current = leases.current(plan.archive.thread_id)
        if current is not None and current.token != result.token:
            return f"stale worker: token {result.token} is no longer the thread's current token"
        present = {str(m.id): m for m in everything}
        missing = [i for i in result.folded_ids if i not in present]
        if missing:
            return (
                f"history edited or rewound: {len(missing)} of the {len(result.folded_ids)} "
                "folded messages are no longer in the window"
            )
        if folded_hash([present[i] for i in result.folded_ids]) != result.folded_hash:
            return "history edited: a folded message changed after the job took its snapshot"
        return None

    def _applied(
        self,
        plan: Plan,
        window: list[AnyMessage],
        repaired: list[AnyMessage],
        everything: list[AnyMessage],
        result: JobResult,
        config: RunnableConfig,
    ) -> dict[str, Any] | str:
        """The committed update of a valid result, or why it does not fit (a string).

        ``repaired`` and ``everything`` are what ``repair_tool_pairs(window)`` returns.
        """
        folded = set(result.folded_ids)
        by_id = {str(m.id): m for m in everything}
        old: list[AnyMessage] = [by_id[i] for i in result.folded_ids]
        kept = [m for m in repaired if str(m.id) not in folded]
        job_plan = replace(
            plan, old=old, kept=kept, ledger=_merged_ledger(plan.previous, old, plan.settings)
        )
        problems = job_plan.check(result.sections)
        if problems:
            return "the summary no longer passes its checks: " + "; ".join(problems)
        outcome = self._finish(job_plan, result.sections)
        if isinstance(outcome, str):
            return f"the compacted request would not fit: {outcome}"
        record, update, after = outcome
        if not self._commit.prepare(plan.archive, record, old, window, config):
            return {}
        emit(
            "applied",
            plan.archive.thread_id,
            base_version=result.base_version,
            version=record["version"],
            token=result.token,
            folded=len(old),
            tokens_before=plan.before.tokens,
            tokens_after=after.tokens,
            latency_s=result.latency_s,
        )
        return update

    def _finish(
        self, plan: Plan, sections: dict[str, str]
    ) -> tuple[ArchiveRecord, dict[str, Any], RequestSize] | str:
        """Commit material for a checked summary; a string return says why it was rejected.

        Returns the archive record, the state update and the size of the compacted request.

        If the compacted request would not shrink or would still fire a trigger, the record
        is shrunk before the compaction is judged: the ledger's bounds are halved, step by
        step (``RECORD_SHRINK_STEPS`` at most), and the first record whose request passes
        is committed. The kept messages never change here, so memory extraction has
        already seen exactly what is folded.
        """
        problems: list[str] = []
        ledger = plan.ledger
        for step in range(RECORD_SHRINK_STEPS + 1):
            if step:
                smaller = _bounded(plan.ledger, plan.settings, halved=step)
                if smaller == ledger:
                    continue
                ledger = smaller
            summary = {**plan.summary(sections), "ledger": ledger}
            if step and summary_problems(summary, plan.settings):
                continue
            version = int(plan.mark.get("version", 0)) + 1
            record = build_record(
                version=version,
                messages=plan.old,
                summary=summary,
                previous_cursor=int(plan.mark.get("cursor", 0)),
                previous_chain_hash=str(plan.mark.get("chain_hash", CHAIN_SEED)),
            )
            mark = {
                "version": version,
                "cursor": record["cursor"],
                "checksum": record["checksum"],
                "chain_hash": record["chain_hash"],
            }
            after = self._measure(
                {
                    "messages": plan.kept,
                    "summary": summary,
                    "compaction": mark,
                    "memory_view": plan.memory_view,
                },
                plan.settings,
            )
            problems = size_problems(plan.before, after, plan.settings, plan.window)
            if not problems:
                if step:
                    logger.info("compaction record shrunk %d step(s) to fit the triggers", step)
                update = {
                    "summary": summary,
                    "compaction": mark,
                    "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *plan.kept],
                    "compaction_retry": None,
                    "compaction_job": None,
                }
                return record, update, after
        return "; ".join(problems)

    def _give_up(self, plan: Plan, reason: str) -> dict[str, Any]:
        """Keep the old summary and every message; fail only if the request cannot fit.

        The refusal is counted in ``compaction_retry``, so the next attempt keeps fewer
        messages and budgets for the largest summary (see ``_choose_split``).
        """
        logger.warning("compaction skipped, state left as it was: %s", reason)
        if plan.window is not None and plan.before.tokens > plan.window:
            raise CompactionError(
                f"compaction failed ({reason}) and the request is {plan.before.tokens} tokens, "
                f"over the main model's input window of {plan.window}; "
                f"{self._largest(plan.kept + plan.old)}"
            )
        return {"compaction_retry": {"attempts": 1, "reason": reason}}

    def _largest(self, messages: list[AnyMessage]) -> str:
        if not messages:
            return "the system prompt and tool schemas alone are too large"
        biggest = max(messages, key=self._counter.count_message)
        name = getattr(biggest, "name", None) or biggest.type
        return (
            f"the largest message is a {biggest.type} message ({name}, id {biggest.id}) "
            f"of {self._counter.count_message(biggest)} tokens"
        )


MAX_JOB_ATTEMPTS = 2
"""Jobs one compaction version may start; after that the trigger compacts inline."""

JOB_POLL_S = 0.1
"""Seconds between two looks for a running job's result while a trigger waits for it."""

RECORD_SHRINK_STEPS = 4
"""How many times ``_finish`` may halve the ledger's bounds to make a compaction fit."""


def _bounded(ledger: Ledger, settings: Settings, *, halved: int = 0) -> Ledger:
    """``ledger`` within the bounds of ``settings``, each halved ``halved`` times."""
    return bound_ledger(
        ledger,
        max_tool_calls=max(1, settings.ledger_max_tool_calls >> halved),
        max_identifiers=settings.ledger_max_identifiers >> halved,
        max_constraint_tokens=settings.constraint_budget >> halved,
        max_artifacts=MAX_ARTIFACTS >> halved,
    )


def _offloaded_arguments(state: AgentState) -> int:
    """How many arguments the window's messages have offloaded, so a split is redone after.

    Offloading arguments keeps every message's id and content length, so ``state_key``
    alone would not tell the states apart.
    """
    return sum(
        len(message.additional_kwargs.get(OFFLOAD_ARGS_KEY) or ())
        for message in state.get("messages") or ()
    )


def _refusals(state: AgentState) -> int:
    """Compactions refused in a row on this thread, as ``compaction_retry`` counts them."""
    return int((state.get("compaction_retry") or {}).get("attempts", 0))


def _require_store(store: BaseStore | None) -> BaseStore:
    """The run's Store; without one, say where the Store comes from in each setup."""
    if store is None:
        raise CompactionError(
            "compaction archives folded messages in a LangGraph Store, and this run has "
            "none: pass store= to build_graph; inside a parent graph, add ctxgraph with "
            "ctxgraph.graph.as_subgraph(...) and compile the parent with store= (a "
            "LangGraph server provides one)"
        )
    return store


def _thread_id(config: RunnableConfig) -> str:
    """The run's thread id; inside a parent graph it is the parent's thread id."""
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        raise CompactionError(
            "compaction needs a thread: pass config={'configurable': {'thread_id': ...}} "
            f"(to the parent graph when ctxgraph runs inside one), got {thread_id!r}"
        )
    return thread_id


def _merged_ledger(
    previous: dict[str, Any] | None, old: list[AnyMessage], settings: Settings
) -> Ledger:
    """The previous ledger plus what the folded messages add, within its bounds.

    The previous ledger may be of any stored shape (see ``read_ledger``).
    """
    merged = merge_ledgers(
        (previous or {}).get("ledger") or empty_ledger(),
        derive_ledger(old, read_only_tools=frozenset(settings.read_only_tools)),
    )
    return _bounded(merged, settings)


def summary_check(
    previous: dict[str, Any] | None, folded: list[AnyMessage], settings: Settings
) -> Check:
    """The check a job's candidate sections must pass: the ``Plan.check`` of its snapshot."""
    ledger = _merged_ledger(previous, folded, settings)

    def check(sections: dict[str, str]) -> list[str]:
        summary = {"schema_version": SUMMARY_SCHEMA_VERSION, **sections, "ledger": ledger}
        return summary_problems(summary, settings)

    return check


def _known_job(state: AgentState, job_state: str) -> dict[str, Any]:
    """The ``compaction_job`` record of a job just started (or found) from ``state``."""
    previous = state.get("compaction_job") or {}
    attempts = int(previous.get("attempts", 0)) if previous.get("state") == "ended" else 0
    return {
        "base_version": _mark_version(state),
        "since": datetime.now(UTC).isoformat(),
        "state": job_state,
        "attempts": attempts + 1,
    }


def _was_applied(archive: ThreadArchive, result: JobResult) -> bool:
    """Whether the version after ``result``'s base folded exactly its messages."""
    if not result.folded_ids:
        return False
    record = archive.get(result.base_version + 1)
    return record is not None and tuple(record["event_ids"]) == result.folded_ids


def _mark_version(state: AgentState) -> int:
    """The thread's committed compaction version (0 before the first)."""
    mark = state.get("compaction")
    return committed_version(mark if isinstance(mark, dict) else None) or 0


def _job_due(state: AgentState, settings: Settings, size: RequestSize, window: int | None) -> bool:
    """Whether a background job should start (background mode only).

    It should once the request reaches ``background_fraction`` of a trigger and no job is
    known for the thread's current version, or the known one ended without a usable
    result and this is its version's second attempt at most.
    """
    if not _job_pending(state, settings, size, window):
        return False
    known = state.get("compaction_job")
    if not isinstance(known, dict) or known.get("base_version") != _mark_version(state):
        return True
    return known.get("state") == "ended" and int(known.get("attempts", 1)) < MAX_JOB_ATTEMPTS


def _job_pending(
    state: AgentState, settings: Settings, size: RequestSize, window: int | None
) -> bool:
    """Background mode, and the request is at ``background_fraction`` of a trigger."""
    if settings.compaction_mode != "background":
        return False
    return bool(fired_triggers(size, settings, window, scale=settings.background_fraction))


def _result_stored(state: AgentState) -> bool:
    """Whether this process's job for the thread's current version has ended.

    Routers run on the event loop in async runs, so this asks the process, not the
    Store; a result stored by another process is found at the trigger.
    """
    known = state.get("compaction_job")
    if not isinstance(known, dict) or known.get("state") == "ended":
        return False
    thread_id = (get_config().get("configurable") or {}).get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        return False
    return job_ended(thread_id, _mark_version(state))


def _discard(results: JobResults, key: str, result: JobResult | None, reason: str) -> None:
    """Delete a stored job result that cannot apply, and say why (``compaction.discarded``)."""
    results.delete(key)
    emit(
        "discarded",
        results.thread_id,
        base_version=result.base_version if result else None,
        token=result.token if result else None,
        reason=reason,
    )
