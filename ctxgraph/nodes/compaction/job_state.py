"""What a thread's state says about its background compaction job, and what a job did.

The router asks these questions without I/O: is a job due, is one pending, has this
process's job ended. ``Launch`` reports what asking for a job did.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.config import get_config

from ctxgraph.nodes.compaction.background import job_ended
from ctxgraph.nodes.compaction.jobs import JobResult
from ctxgraph.nodes.compaction.triggers import fired_triggers
from ctxgraph.nodes.request_size import RequestSize
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.settings import Settings
from ctxgraph.store.persistence.archive import committed_version
from ctxgraph.store.persistence.compaction_lease import Lease

MAX_JOB_ATTEMPTS = 2
"""Jobs one compaction version may start; after that the trigger compacts inline."""

JOB_POLL_S = 0.1
"""Seconds between two looks for a running job's result while a trigger waits for it."""

UNFIT = "would not fit"
"""The job state when no job started because the size check would refuse its result
whatever the summary (``Plan.unfit``); the trigger then decides inline, as it does after
``nothing to fold``."""


@dataclass(frozen=True)
class Launch:
    """What asking for a background job did.

    ``state`` is ``running`` (a job was started, or is still running), ``busy`` (another
    job holds the thread's lease), ``ready`` (a result for the thread's version is
    stored), ``completed`` or ``joined`` (a job this call started, or waited for, stored
    its result), ``failed`` (it ended without one), ``nothing to fold`` or ``UNFIT`` (no
    job started: its result would not fit whatever the summary).
    """

    state: str
    lease: Lease | None = None
    worker: threading.Thread | None = None
    result: JobResult | None = None
    reason: str | None = None
    """Why no job started, for ``UNFIT``."""


def mark_version(state: AgentState) -> int:
    """The thread's committed compaction version (0 before the first)."""
    mark = state.get("compaction")
    return committed_version(mark if isinstance(mark, dict) else None) or 0


def known_job(state: AgentState, job_state: str) -> dict[str, Any]:
    """The ``compaction_job`` record of a job just started (or found) from ``state``."""
    previous = state.get("compaction_job") or {}
    attempts = int(previous.get("attempts", 0)) if previous.get("state") == "ended" else 0
    return {
        "base_version": mark_version(state),
        "since": datetime.now(UTC).isoformat(),
        "state": job_state,
        "attempts": attempts + 1,
    }


def job_due(state: AgentState, settings: Settings, size: RequestSize, window: int | None) -> bool:
    """Whether a background job should start (background mode only).

    It should once the request reaches ``background_fraction`` of a trigger and no job is
    known for the thread's current version, or the known one ended without a usable
    result and this is its version's second attempt at most.
    """
    if not job_pending(state, settings, size, window):
        return False
    known = state.get("compaction_job")
    if not isinstance(known, dict) or known.get("base_version") != mark_version(state):
        return True
    return known.get("state") == "ended" and int(known.get("attempts", 1)) < MAX_JOB_ATTEMPTS


def job_pending(
    state: AgentState, settings: Settings, size: RequestSize, window: int | None
) -> bool:
    """Background mode, and the request is at ``background_fraction`` of a trigger."""
    if settings.compaction_mode != "background":
        return False
    return bool(fired_triggers(size, settings, window, scale=settings.background_fraction))


def result_stored(state: AgentState) -> bool:
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
    return job_ended(thread_id, mark_version(state))
