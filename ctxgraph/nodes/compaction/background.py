"""Background summary jobs: one daemon thread per job, under the thread's compaction lease.

The ``compact`` node takes the lease and a snapshot (the messages to fold, the previous
summary) and hands them to ``BackgroundJobs.spawn``; the run goes on at once. The job
renews its lease while the summary model works, stores the checked sections in the Store
(``JobResults``) if its lease is still current, and releases the lease. A job whose
process dies leaves its lease to expire; the next trigger then compacts inline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage
from langgraph.store.base import BaseStore

from ctxgraph.nodes.compaction.events import emit
from ctxgraph.nodes.compaction.fallback import degraded_sections
from ctxgraph.nodes.compaction.jobs import JobResult, JobResults, folded_hash
from ctxgraph.nodes.compaction.plan import SummaryJob
from ctxgraph.nodes.compaction.summarizer import Check, SummaryError, SummaryWriter
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.state.usage import CallUsage, calls_event_fields
from ctxgraph.store.persistence.compaction_lease import CompactionLeases, Lease

__all__ = ["BackgroundJobs", "JobSnapshot", "job_ended", "running_jobs", "wait_for_jobs"]

_RUNNING: set[threading.Thread] = set()
_RUNNING_LOCK = threading.Lock()
_FINISHED: dict[str, int] = {}
"""Thread id -> the base version of the last job of this process that ended there."""


@dataclass(frozen=True)
class JobSnapshot:
    """What one job summarizes, taken from the thread's state when it starts."""

    thread_id: str
    base_version: int
    folded: Sequence[AnyMessage]
    job: SummaryJob
    settings: Settings
    check: Check
    tokens_before: int


class BackgroundJobs:
    """Starts summary jobs in daemon threads of this process."""

    def __init__(
        self,
        models: Sequence[BaseChatModel],
        counter: TokenCounter | None = None,
        *,
        prompt: str | None = None,
    ) -> None:
        """Write each job's summary with a ``SummaryWriter`` of these arguments.

        Args:
            models: The summary model first, then its fallbacks.
            counter: Counts the folded messages' tokens; the ``compact`` node passes its
                own. Without one, the jobs share a counter of their own.
            prompt: The summary prompt template (see ``SummaryWriter``); None for
                ``SUMMARY_PROMPT``.

        Raises:
            PromptTemplateError: ``prompt`` is not a usable summary template.

        """
        counter = counter if counter is not None else TokenCounter(max_entries=5_000)
        self._writer = SummaryWriter(models, counter, prompt=prompt)
        self._prompt = prompt

    @property
    def prompt(self) -> str | None:
        """The summary prompt template the jobs use (None: ``SUMMARY_PROMPT``)."""
        return self._prompt

    def spawn(
        self, snapshot: JobSnapshot, lease: Lease, leases: CompactionLeases, store: BaseStore
    ) -> threading.Thread:
        """Run the job of ``snapshot`` under ``lease`` in a new daemon thread; returns it."""
        worker = threading.Thread(
            target=self._run,
            args=(snapshot, lease, leases, store),
            name=f"ctxgraph-compaction-{snapshot.thread_id}",
            daemon=True,
        )
        with _RUNNING_LOCK:
            _RUNNING.add(worker)
        worker.start()
        return worker

    def run_here(
        self, snapshot: JobSnapshot, lease: Lease, leases: CompactionLeases, store: BaseStore
    ) -> bool:
        """Run the job in the calling thread (a worker run); True when its result was stored."""
        with _RUNNING_LOCK:
            _RUNNING.add(threading.current_thread())
        return self._run(snapshot, lease, leases, store)

    def _run(
        self, snapshot: JobSnapshot, lease: Lease, leases: CompactionLeases, store: BaseStore
    ) -> bool:
        try:
            return self._summarize(snapshot, lease, leases, store)
        finally:
            try:
                leases.release(lease)
            except Exception as error:  # the lease then expires by itself
                emit("failed", snapshot.thread_id, reason=f"cannot release the lease: {error}")
            with _RUNNING_LOCK:
                _RUNNING.discard(threading.current_thread())
                _FINISHED[snapshot.thread_id] = snapshot.base_version

    def _sections(self, snapshot: JobSnapshot, usage: list[CallUsage]) -> dict[str, str]:
        """The job's summary; the model-free degraded record when no model writes one.

        ``usage`` receives the usage of every answered summary call.
        """
        try:
            return self._writer.write(snapshot.job, snapshot.settings, snapshot.check, usage=usage)
        except SummaryError as error:
            if snapshot.settings.summary_fallback == "off":
                raise
            sections = degraded_sections(
                snapshot.job, snapshot.settings, snapshot.check, version=snapshot.base_version + 1
            )
            emit(
                "degraded",
                snapshot.thread_id,
                base_version=snapshot.base_version,
                reason=str(error),
                reasons=list(error.reasons),
                **_usage_fields(usage),
            )
            return sections

    def _summarize(
        self, snapshot: JobSnapshot, lease: Lease, leases: CompactionLeases, store: BaseStore
    ) -> bool:
        thread_id = snapshot.thread_id
        started_at = datetime.now(UTC).isoformat()
        started = time.monotonic()
        renewal = _Renewal(leases, lease, snapshot.settings.compaction_lease_s)
        renewal.start()
        usage: list[CallUsage] = []
        try:
            sections = self._sections(snapshot, usage)
        except Exception as error:  # a SummaryError, or a model or store failure
            emit(
                "failed",
                thread_id,
                base_version=snapshot.base_version,
                token=lease.token,
                reason=f"{type(error).__name__}: {error}",
                **_usage_fields(usage),
            )
            return False
        finally:
            renewal.stop()
        latency = time.monotonic() - started
        if renewal.lost.is_set() or not leases.is_current(lease):
            emit(
                "discarded",
                thread_id,
                base_version=snapshot.base_version,
                token=lease.token,
                reason="stale worker: its lease expired and was taken over",
                **_usage_fields(usage),
            )
            return False
        result = JobResult(
            base_version=snapshot.base_version,
            folded_ids=tuple(str(m.id) for m in snapshot.folded),
            folded_hash=folded_hash(snapshot.folded),
            sections=sections,
            token=lease.token,
            holder=lease.holder,
            started_at=started_at,
            stored_at=datetime.now(UTC).isoformat(),
            latency_s=round(latency, 3),
            tokens_before=snapshot.tokens_before,
            calls=tuple(usage),
            request="compact" if snapshot.job.prefix is None else "shared_prefix",
        )
        JobResults(store, thread_id).put(result)
        emit(
            "ready",
            thread_id,
            base_version=snapshot.base_version,
            token=lease.token,
            folded=len(result.folded_ids),
            latency_s=result.latency_s,
            **_usage_fields(usage),
        )
        return True


class _Renewal:
    """Renews a lease every third of its time to live until stopped; notes when it is lost."""

    def __init__(self, leases: CompactionLeases, lease: Lease, ttl_s: float) -> None:
        self._leases = leases
        self._lease = lease
        self._ttl = ttl_s
        self._done = threading.Event()
        self.lost = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._done.wait(self._ttl / 3):
            try:
                renewed = self._leases.renew(self._lease, self._ttl)
            except Exception:  # a database hiccup: try again at the next beat
                continue
            if renewed is None:
                self.lost.set()
                return


def _usage_fields(calls: Sequence[CallUsage]) -> dict[str, object]:
    """The usage fields of a job's event; none when the job made no summary call."""
    return calls_event_fields(calls) if calls else {}


def job_ended(thread_id: str, base_version: int) -> bool:
    """Whether a job of this process for that thread and version has ended.

    It tells the router, without any I/O, that a step should look at the stored result
    (or start the version's second attempt when the job ended without one).
    """
    with _RUNNING_LOCK:
        return _FINISHED.get(thread_id) == base_version


def running_jobs() -> int:
    """How many background jobs of this process are still running."""
    with _RUNNING_LOCK:
        return sum(1 for worker in _RUNNING if worker.is_alive())


def wait_for_jobs(timeout: float) -> int:
    """Wait up to ``timeout`` seconds for this process's jobs; returns how many still run.

    Call it before closing the Store the jobs write to (the command line does at exit): a
    job that finishes stores its result, and one that is abandoned leaves only a lease
    that expires.
    """
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        with _RUNNING_LOCK:
            workers = [worker for worker in _RUNNING if worker.is_alive()]
        if not workers:
            return 0
        left = deadline - time.monotonic()
        if left <= 0:
            return len(workers)
        workers[0].join(left)
