"""The delegation record: one entry per ``task`` call, and the reducer that keeps it bounded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, cast, get_args

from typing_extensions import TypedDict

DelegationStatus = Literal["running", "completed", "failed", "timed_out", "cancelled", "capped"]
"""A delegation starts ``running``; every other status is final and never changes."""

STATUSES: tuple[str, ...] = get_args(DelegationStatus)
FINAL_STATUSES = frozenset(STATUSES) - {"running"}

MAX_DELEGATIONS = 50
"""Entries the record keeps; the oldest finished ones beyond it fold into counts."""


class DelegationEntry(TypedDict):
    """One ``task`` call, as ``state["delegations"]`` keeps it."""

    id: str
    """The ``task`` call's id (the parent's tool-call id)."""
    type: str
    """The subagent type asked for."""
    brief: str
    """The task description, cut to one short line."""
    status: DelegationStatus
    stop_reason: NotRequired[str | None]
    """Why it stopped: ``final_answer``, ``step_limit``, ``timeout``, ``parallel_limit``,
    ``run_limit``, ``unknown_type``, ``invalid_arguments``, ``error``, ``cancelled``."""
    started_at: NotRequired[str]
    """ISO-8601 UTC."""
    elapsed_s: NotRequired[float]
    transcript_ref: NotRequired[str | None]
    """The artifact holding the child's whole transcript."""
    result_ref: NotRequired[str | None]
    """The artifact holding the child's full final text, when the result was cut."""
    checkpoint_ns: NotRequired[str | None]
    """The child's checkpoint namespace under the parent's thread."""
    tokens_in: NotRequired[int]
    tokens_out: NotRequired[int]


class DelegationRecord(TypedDict):
    """``state["delegations"]``: the entries, oldest first, and counts of folded ones."""

    entries: list[DelegationEntry]
    folded: dict[str, int]
    """Finished entries dropped to stay within ``MAX_DELEGATIONS``, counted by status."""


def merge_delegations(
    current: Mapping[str, Any] | None,
    update: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None,
) -> DelegationRecord:
    """Reducer of ``delegations``: merge by call id; a final status never changes.

    ``update`` is a list of entries (or a whole record, whose entries are merged). A new
    id is appended; an update to a running entry replaces its fields; an update to a
    finished entry is ignored. Beyond ``MAX_DELEGATIONS`` entries, the oldest finished
    ones fold into ``folded``.
    """
    entries: dict[str, DelegationEntry] = {}
    folded: dict[str, int] = {}
    if current:
        entries = {str(e["id"]): cast(DelegationEntry, dict(e)) for e in current["entries"]}
        folded = dict(current.get("folded") or {})
    if isinstance(update, Mapping):
        update = update.get("entries") or ()
    for raw in update or ():
        entry = _checked(raw)
        old = entries.get(entry["id"])
        if old is None:
            entries[entry["id"]] = entry
        elif old["status"] == "running":
            entries[entry["id"]] = cast(DelegationEntry, {**old, **entry})
    return _bounded(list(entries.values()), folded)


def _bounded(kept: list[DelegationEntry], folded: dict[str, int]) -> DelegationRecord:
    """At most ``MAX_DELEGATIONS`` entries: the oldest finished ones fold into ``folded``."""
    while len(kept) > MAX_DELEGATIONS:
        oldest = next((e for e in kept if e["status"] != "running"), None)
        if oldest is None:
            break
        kept.remove(oldest)
        folded[oldest["status"]] = folded.get(oldest["status"], 0) + 1
    return {"entries": kept, "folded": folded}


def _checked(raw: Mapping[str, Any]) -> DelegationEntry:
    if not isinstance(raw, Mapping):
        raise ValueError(f"a delegations entry must be a mapping, got {raw!r:.200}")
    entry_id = raw.get("id")
    if not isinstance(entry_id, str) or not entry_id:
        raise ValueError(f"a delegations entry needs a non-empty 'id', got {raw!r:.200}")
    if raw.get("status") not in STATUSES:
        raise ValueError(
            f"delegation {entry_id}: status must be one of {list(STATUSES)}, "
            f"got {raw.get('status')!r}"
        )
    return cast(DelegationEntry, dict(raw))


def delegation_entries(state: Mapping[str, Any]) -> list[DelegationEntry]:
    """The entries of ``state["delegations"]`` (none when the thread never delegated)."""
    record = state.get("delegations")
    return list(record["entries"]) if record else []
