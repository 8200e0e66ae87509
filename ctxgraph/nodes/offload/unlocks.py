"""What unlocks the built-in readers, read from a thread's state alone.

``read_artifact`` / ``grep_artifact`` unlock once anything in the state refers to an
artifact (an offload stub or a subagent's refs in the window, an artifact in the record's
ledger or the delegation record), ``read_history`` once a compaction has been committed.
The readers' gate (``read_tools.ARTIFACT_GATE``) reads ``has_artifact``, the history
gate (``tools.history.HISTORY_GATE``) ``has_archive``; tool binding keeps what they unlock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.messages import BaseMessage

from ctxgraph.nodes.offload.refs import ledger_refs, message_refs
from ctxgraph.store.persistence.archive import committed_version

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
