"""Background compaction: queue or launch a summary job under the thread's lease, then apply it.

Below the triggers, a step starts a job on a snapshot of the window (a thread of this
process, or a run on the server's queue); a later step applies the stored result if it
still fits the thread, and discards it with the reason otherwise. At a trigger, a running
job is waited for up to ``background_wait_s`` before the ``compact`` node compacts inline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore

from ctxgraph.nodes.compaction.background import BackgroundJobs, JobSnapshot
from ctxgraph.nodes.compaction.commit import CompactionCommit
from ctxgraph.nodes.compaction.events import emit
from ctxgraph.nodes.compaction.job_queue import JobQueue, job_payload
from ctxgraph.nodes.compaction.job_results import (
    discard,
    take_discarded,
    unusable,
    was_applied,
)
from ctxgraph.nodes.compaction.job_state import (
    JOB_POLL_S,
    UNFIT,
    Launch,
    job_due,
    known_job,
    mark_version,
)
from ctxgraph.nodes.compaction.jobs import JobResult, JobResults
from ctxgraph.nodes.compaction.partition import repair_tool_pairs
from ctxgraph.nodes.compaction.plan import Plan
from ctxgraph.nodes.compaction.planner import CompactionPlanner
from ctxgraph.nodes.compaction.shared_prefix import SummaryRequests, shown_kept
from ctxgraph.nodes.request_size import RequestSize
from ctxgraph.state.compaction_state import CompactionJob
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.sans_io import run
from ctxgraph.state.settings import Settings
from ctxgraph.state.usage import CallUsage, calls_event_fields, usage_update
from ctxgraph.store.persistence.compaction_lease import CompactionLeases, leases_for, new_holder

logger = logging.getLogger("ctxgraph.compaction")


@dataclass(frozen=True)
class BackgroundStep:
    """What the background path works from: a thread's state, settings, Store and request.

    ``before`` is the size of the state's request; ``thread_id`` the thread it belongs to.
    """

    state: AgentState
    settings: Settings
    store: BaseStore
    thread_id: str
    before: RequestSize

    def plan(self, planner: CompactionPlanner) -> Plan:
        """``planner``'s plan of a compaction of this state."""
        return planner.plan(self.state, self.settings, self.store, self.thread_id, self.before)


class BackgroundCompactor:
    """Runs the whole life of background jobs: queue, lease, launch, poll, apply, discard."""

    def __init__(
        self,
        planner: CompactionPlanner,
        commit: CompactionCommit,
        jobs: BackgroundJobs,
        *,
        queue: JobQueue | None = None,
        requests: SummaryRequests | None = None,
    ) -> None:
        """Plan with ``planner``, commit with ``commit``, run jobs with ``jobs``.

        ``queue``, when given, receives the jobs of async runs instead of a thread of this
        process (on a LangGraph server: ``ServerJobQueue``). ``requests`` gives a job run
        in this process the shared-prefix request of its snapshot's state; a queued job
        (a JSON payload) always sends the compact request.
        """
        self._requests = requests
        self._planner = planner
        self._commit = commit
        self._jobs = jobs
        self._queue = queue

    def step(self, at: BackgroundStep, config: RunnableConfig) -> dict[str, Any]:
        """Below the triggers in background mode: apply a ready result, or start a job.

        A ready result is applied as soon as the run passes ``compact`` (no waiting): the
        summary is paid for, and a smaller window leaves the next job the whole way from
        ``background_fraction`` to the trigger. A job that ended without a usable result
        allows one more attempt from the same version.
        """
        state, settings = at.state, at.settings
        if job_due(state, settings, at.before, self._planner.window(settings)):
            return self._start(at)
        plan = at.plan(self._planner)
        applied = self.apply(plan, state.get("messages") or [], config, wait_s=0)
        if applied is not None:
            return applied
        discarded = with_usage({}, take_discarded(plan))
        known: CompactionJob = {**(state.get("compaction_job") or {})}
        current = leases_for(plan.archive.store).current(plan.archive.thread_id)
        if current is not None and current.live:
            return discarded
        known["state"] = "ended"
        known["attempts"] = int(known.get("attempts", 1))
        return {**discarded, "compaction_job": known}

    async def queue(self, at: BackgroundStep, config: RunnableConfig) -> dict[str, Any] | None:
        """Hand the job's snapshot to the queue (a worker run takes the lease and runs it).

        None without a queue, or when the queue refused it (logged as
        ``compaction.failed``): the job then runs in a thread of this process instead.
        """
        if self._queue is None:
            return None
        state, before = at.state, at.before
        plan = at.plan(self._planner)
        thread_id = plan.archive.thread_id
        known = known_job(state, "queued")
        if not plan.old:
            return {"compaction_job": {**known, "state": "nothing to fold"}}
        if plan.unfit is not None:
            plan.skipped()
            return {"compaction_job": {**known, "state": UNFIT}}
        payload = job_payload(
            thread_id=thread_id,
            base_version=known["base_version"],
            folded=plan.old,
            previous=plan.previous,
            request=plan.job.current_request,
            settings=plan.settings,
            tokens_before=before.tokens,
            summary_prompt=self._jobs.prompt,
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

    def _start(self, at: BackgroundStep) -> dict[str, Any]:
        """Start a background summary job on a snapshot of the window, if none is known.

        A result already stored for the current version is left for a step to apply; a
        lease held elsewhere means another job runs (``skipped_busy``, no summarizer
        call). Either way ``compaction_job`` records it, so the router does not start
        another job from this version.
        """
        launched = self._launch(at)
        known = known_job(at.state, launched.state)
        if launched.lease is not None:
            known.update(token=launched.lease.token, holder=launched.lease.holder)
        return {"compaction_job": known}

    def _launch(self, at: BackgroundStep) -> Launch:
        """Start a job for ``state`` unless a result is ready or another job holds the lease.

        No job starts when its result would be refused by the size check whatever the
        summary (``Plan.unfit``): ``compaction.skipped`` and ``Launch.reason`` say why.
        """
        state, settings, store, thread_id = at.state, at.settings, at.store, at.thread_id
        before, version = at.before, mark_version(state)
        ready = JobResults(store, thread_id).ready(version)
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
        plan = at.plan(self._planner)
        if not plan.old:
            leases.release(lease)
            return Launch("nothing to fold")
        if plan.unfit is not None:
            leases.release(lease)
            plan.skipped()
            return Launch(UNFIT, reason=plan.unfit)
        if self._requests is not None:
            plan = self._requests.attach(plan, state)
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
            request="compact" if plan.prefix is None else "shared_prefix",
            **({"reasons": [plan.request_note]} if plan.request_note else {}),
        )
        return Launch("running", lease=lease, worker=worker)

    def run_job(self, at: BackgroundStep, *, wait_s: float) -> Launch:
        """Start a background job for a saved thread state and wait for it, or join one.

        For tools outside a run (``ctxgraph threads compact``). A result already stored
        for the thread's version is returned as it is (``ready``). When another job holds
        the lease, waits for it to end (``joined``). Otherwise starts one and waits for
        it (``completed``). After ``wait_s`` seconds the state is ``running`` (the job
        goes on); a job that ended without a result is ``failed`` (the reason is logged).
        """
        launched = self._launch(at)
        store, thread_id = at.store, at.thread_id
        if launched.state in ("ready", "nothing to fold", UNFIT):
            return launched
        if launched.worker is not None:
            launched.worker.join(wait_s)
            if launched.worker.is_alive():
                return launched
        elif not _lease_ended(leases_for(store), thread_id, time.monotonic() + wait_s):
            return Launch("running")
        result = JobResults(store, thread_id).ready(mark_version(at.state))
        if result is None:
            return Launch("failed", lease=launched.lease)
        return Launch("joined" if launched.worker is None else "completed", result=result)

    def apply(
        self,
        plan: Plan,
        window: list[AnyMessage],
        config: RunnableConfig,
        *,
        wait_s: float,
    ) -> dict[str, Any] | None:
        """Apply a stored, still-valid job result; None when there is none to apply.

        ``window`` is the thread's working window. While a job's lease is live and no
        result is ready, waits for it up to ``wait_s``. Results that can no longer apply
        are discarded (and deleted) with the reason logged and streamed. The applied
        update adds the usage of the result's summary calls, and of the results discarded
        under ``plan``, to ``model_usage``; when nothing applies, the usage of the
        discarded ones waits under ``plan`` for the attempt's update (``take_discarded``).
        """
        store, thread_id = plan.archive.store, plan.archive.thread_id
        results = JobResults(store, thread_id)
        leases = leases_for(store)
        deadline = time.monotonic() + wait_s
        waited_from: float | None = None
        repaired, everything = repair_tool_pairs(window)
        while True:
            for key, result in self._usable_results(plan, everything, results, leases):
                update = self._applied(plan, window, repaired, everything, result, config)
                if not isinstance(update, str):
                    # Not committed ({}: the thread moved on): the result stays stored,
                    # and its usage is added when it is applied or discarded later.
                    applied = [*result.calls] if update else []
                    return with_usage(update, [*applied, *take_discarded(plan)])
                discard(results, key, result, update, plan=plan)
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

    @staticmethod
    def _usable_results(
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
                discard(results, key, None, "unreadable job result", plan=plan)
                continue
            reason = unusable(result, plan, everything, leases)
            if reason is None:
                usable.append((key, result))
            elif was_applied(plan.archive, result):
                results.delete(key)  # its compaction committed: nothing was discarded
            else:
                discard(results, key, result, reason, plan=plan)
        return usable

    def _applied(
        self,
        plan: Plan,
        window: Sequence[AnyMessage],
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
        shown = shown_kept(everything, old, kept) if result.request == "shared_prefix" else ()
        job_plan = plan.refolded(old, kept, shown=shown)
        problems = job_plan.check(result.sections)
        if problems:
            return "the summary no longer passes its checks: " + "; ".join(problems)
        finished = self._planner.finish(job_plan, result.sections)
        if isinstance(finished, str):
            return f"the compacted request would not fit: {finished}"
        if not run(self._commit.prepare(plan.archive, finished.record, old, window, config)):
            return {}
        emit(
            "applied",
            plan.archive.thread_id,
            base_version=result.base_version,
            version=finished.record["version"],
            token=result.token,
            folded=len(old),
            tokens_before=plan.before.tokens,
            tokens_after=finished.after.tokens,
            latency_s=result.latency_s,
            **(calls_event_fields(result.calls) if result.calls else {}),
        )
        return finished.update


def with_usage(update: dict[str, Any], calls: Sequence[CallUsage]) -> dict[str, Any]:
    """``update`` adding ``calls`` to the thread's ``model_usage`` (as it is without calls)."""
    if not calls:
        return update
    return {**update, "model_usage": usage_update(*calls)}


def _lease_ended(leases: CompactionLeases, thread_id: str, deadline: float) -> bool:
    """Wait for the thread's lease to end; False when it is still live at ``deadline``."""
    while True:
        current = leases.current(thread_id)
        if current is None or not current.live:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(JOB_POLL_S)
