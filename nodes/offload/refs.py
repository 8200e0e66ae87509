"""Where offloaded content is referred to from a thread's state, and which refs are live."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.messages import BaseMessage

OFFLOAD_KEY = "offload"
"""``additional_kwargs`` key of a message whose whole content was offloaded (a tool
result or a user input): ``{"ref", "sha256", "tokens"}``."""

OFFLOAD_ARGS_KEY = "offload_args"
"""``additional_kwargs`` key of an AI message whose tool-call arguments were offloaded: a
list of ``{"ref", "sha256", "tokens", "call_id", "arg"}``."""

LEDGER_ARTIFACTS_KEY = "artifacts"
"""Key of the handoff record's ledger listing the refs of folded messages."""


def message_refs(message: BaseMessage) -> list[str]:
    """The artifact refs ``message`` carries, in order."""
    extra = message.additional_kwargs or {}
    refs: list[str] = []
    whole = extra.get(OFFLOAD_KEY)
    if isinstance(whole, Mapping) and isinstance(whole.get("ref"), str):
        refs.append(whole["ref"])
    for entry in extra.get(OFFLOAD_ARGS_KEY) or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("ref"), str):
            refs.append(entry["ref"])
    return refs


def messages_refs(messages: Iterable[BaseMessage]) -> list[str]:
    """Every ref the messages carry, first appearance first, without repeats."""
    return list(dict.fromkeys(ref for m in messages for ref in message_refs(m)))


def ledger_refs(summary: Mapping[str, Any] | None) -> list[str]:
    """The refs the handoff record lists (``summary["ledger"]["artifacts"]``)."""
    ledger = (summary or {}).get("ledger") or {}
    entries = ledger.get(LEDGER_ARTIFACTS_KEY) if isinstance(ledger, Mapping) else None
    return [
        entry["ref"]
        for entry in entries or ()
        if isinstance(entry, Mapping) and isinstance(entry.get("ref"), str)
    ]


def live_refs(state: Mapping[str, Any]) -> set[str]:
    """Refs that must never be evicted: those in the window and those in the record."""
    messages = [m for m in state.get("messages") or () if isinstance(m, BaseMessage)]
    return set(messages_refs(messages)) | set(ledger_refs(state.get("summary")))
