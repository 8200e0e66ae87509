"""Typed shapes of the compaction channels of the thread state.

Every key is optional (``total=False``): checkpoints written by earlier versions, or by
a run that stopped half-way, may lack some, and readers treat a missing key as absent.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict


class SummaryRecord(TypedDict, total=False):
    """``state["summary"]``: the verified handoff record.

    The four sections come from the summary model and are checked by code; ``ledger``
    is derived by code from the folded messages (its shape is
    ``ctxgraph.nodes.compaction.ledger.Ledger``; older checkpoints may hold older shapes,
    which ``read_ledger`` upgrades).
    """

    schema_version: int
    session_intent: str
    summary: str
    artifacts: str
    next_steps: str
    ledger: Any
    degraded: bool
    """True when no model wrote a usable summary and code built the sections."""


class CompactionMark(TypedDict, total=False):
    """``state["compaction"]``: where the thread's archive ends and how to verify it."""

    version: int
    """Archive versions committed so far; each compaction adds one."""
    cursor: int
    """Messages folded so far, over all versions."""
    checksum: str
    """Of the summary, the cursor and the folded message ids of the latest version."""
    chain_hash: str
    """Hash chain over every folded message, from ``CHAIN_SEED``."""
    degraded: bool
    """True when this version's summary is the model-free record."""


class CompactionJob(TypedDict, total=False):
    """``state["compaction_job"]``: the background job known for the current version."""

    base_version: int
    """The compaction version the job folds on top of."""
    since: str
    """ISO 8601 time the job was started (or found)."""
    state: str
    """``running``, ``queued``, ``busy``, ``ready``, ``ended``, ``nothing to fold`` or
    ``would not fit`` (no job started: no summary could make the request fit)."""
    attempts: int
    """Jobs started for this version; a job that ended without a result may be retried."""
    run_id: str
    """The server run of a queued job (``ServerJobQueue``)."""


class CompactionRetry(TypedDict, total=False):
    """``state["compaction_retry"]``: refused compactions in a row and the last reason."""

    attempts: int
    reason: str
