"""Which built-in tools a thread has unlocked for good, read from its state alone.

``read_artifact`` / ``grep_artifact`` unlock once anything in the state refers to an
artifact (an offload stub or a subagent's refs in the window, an artifact in the record's
ledger or the delegation record), ``read_history`` once a compaction has been committed.
The readers' gate (``read_tools.ARTIFACT_GATE``) reads ``has_artifact``; the compaction
planner measures the compacted request with ``unlocked_tools``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.messages import BaseMessage

from ctxgraph.nodes.gates import persisted_unlocks
from ctxgraph.nodes.offload.refs import ledger_refs, message_refs
from ctxgraph.state.tool_unlocks import UNLOCKED_KEY
from ctxgraph.store.persistence.archive import committed_version

ARTIFACT_TOOLS = frozenset({"read_artifact", "grep_artifact"})
"""Bound once the thread has an artifact."""
HISTORY_TOOL = "read_history"
"""Bound once the thread has an archive."""

SUBAGENT_KWARG = "subagent"
"""``additional_kwargs`` key of a ``task`` result (``nodes.subagents.result.SUBAGENT_KEY``)."""
SUBAGENT_REFS = ("result_ref", "transcript_ref")


def _has_subagent_refs(extra: Mapping[str, Any]) -> bool:
    meta = extra.get(SUBAGENT_KWARG)
    return isinstance(meta, Mapping) and any(isinstance(meta.get(k), str) for k in SUBAGENT_REFS)


def _window_has_artifact(messages: Iterable[object]) -> bool:
    for message in messages:
        if not isinstance(message, BaseMessage):
            continue
        extra = message.additional_kwargs
        if extra and (message_refs(message) or _has_subagent_refs(extra)):
            return True
    return False


def _record_has_artifact(summary: object) -> bool:
    if not isinstance(summary, Mapping):
        return False
    ledger = summary.get("ledger")
    folded = ledger.get("folded_artifacts") if isinstance(ledger, Mapping) else None
    return bool(ledger_refs(summary)) or (isinstance(folded, int) and folded > 0)


def _delegations_have_artifact(record: object) -> bool:
    entries = record.get("entries") if isinstance(record, Mapping) else None
    return any(
        isinstance(entry, Mapping) and any(isinstance(entry.get(k), str) for k in SUBAGENT_REFS)
        for entry in entries or ()
    )


def has_artifact(state: Mapping[str, Any]) -> bool:
    """True if anything in ``state`` refers to an artifact the read tools can open."""
    return (
        _window_has_artifact(state.get("messages") or ())
        or _record_has_artifact(state.get("summary"))
        or _delegations_have_artifact(state.get("delegations"))
    )


def has_archive(state: Mapping[str, Any]) -> bool:
    """True once the thread has committed a compaction (its archive has a version)."""
    mark = state.get("compaction")
    return (committed_version(mark if isinstance(mark, Mapping) else None) or 0) > 0


def unlocked_tools(state: Mapping[str, Any]) -> frozenset[str]:
    """The tools ``state`` has unlocked: every kept one, plus the built-in readers it earns.

    The kept names (``state["tools_unlocked"]``) are those of any tool that stays bound,
    which the model node keeps as soon as the thread earns one (``ToolBinding.unlocked``).
    """
    kept = persisted_unlocks(state)
    earned: set[str] = set()
    if not kept >= ARTIFACT_TOOLS and has_artifact(state):
        earned |= ARTIFACT_TOOLS
    if HISTORY_TOOL not in kept and has_archive(state):
        earned.add(HISTORY_TOOL)
    return kept | frozenset(earned)


def unlock_update(state: Mapping[str, Any]) -> dict[str, list[str]]:
    """The ``tools_unlocked`` update that keeps what ``state`` newly unlocked ({} if nothing)."""
    new = unlocked_tools(state) - persisted_unlocks(state)
    return {UNLOCKED_KEY: sorted(new)} if new else {}
