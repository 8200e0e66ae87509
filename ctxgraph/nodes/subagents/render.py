"""The delegation record as a hidden data message on every request (it outlives compaction)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from langchain_core.messages import HumanMessage

from ctxgraph.state.delegations import DelegationEntry, DelegationRecord
from ctxgraph.state.messages import HIDE_FROM_UI_KEY, ORIGIN_KEY

DELEGATIONS_MESSAGE_ID = "ctxgraph-delegations"
BRIEF_CHARS = 100
"""Characters of a task's description the record keeps."""


def brief(description: str) -> str:
    """One line of at most ``BRIEF_CHARS`` characters from a task description."""
    line = " ".join(description.split())
    return line if len(line) <= BRIEF_CHARS else line[: BRIEF_CHARS - 1] + "…"


def _line(entry: DelegationEntry) -> str:
    status: str = entry["status"]
    reason = entry.get("stop_reason")
    if reason and reason != "final_answer":
        status = f"{status} ({reason})"
    parts = [f"- {entry['id']} {entry['type']}: {entry['brief']!r} - {status}"]
    if entry.get("result_ref"):
        parts.append(f"full answer {entry['result_ref']}")
    if entry.get("transcript_ref"):
        parts.append(f"transcript {entry['transcript_ref']}")
    return ", ".join(parts)


def render_delegations(record: DelegationRecord) -> str:
    """One line per delegation (id, type, brief, status, refs), then the folded counts."""
    lines: list[str] = [
        "Delegations of this thread (task calls, oldest first; a status other than "
        "running is final):"
    ]
    lines.extend(_line(entry) for entry in record["entries"])
    folded = record.get("folded") or {}
    if folded:
        counts = ", ".join(f"{count} {status}" for status, count in sorted(folded.items()))
        lines.append(f"Earlier delegations, no longer listed: {counts}.")
    return "\n".join(lines)


def delegations_message(record: DelegationRecord | None) -> HumanMessage | None:
    """The record as a data message marked by origin and hidden from UIs; None when empty."""
    if not record or not (record["entries"] or record.get("folded")):
        return None
    text = render_delegations(record)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return HumanMessage(
        content=text,
        id=f"{DELEGATIONS_MESSAGE_ID}-{digest}",
        additional_kwargs={ORIGIN_KEY: "delegations", HIDE_FROM_UI_KEY: True},
    )


def unanswered(entries: Sequence[DelegationEntry]) -> list[str]:
    """Ids of entries still ``running``."""
    return [entry["id"] for entry in entries if entry["status"] == "running"]
