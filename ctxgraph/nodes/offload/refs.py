"""Where offloaded content is referred to from a thread's state, and which refs are live."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from langchain_core.messages import BaseMessage

OFFLOAD_KEY = "offload"
"""``additional_kwargs`` key of a message whose whole content was offloaded (a tool
result or a user input): ``{"ref", "sha256", "tokens"}``."""

OFFLOAD_ARGS_KEY = "offload_args"
"""``additional_kwargs`` key of an AI message whose tool-call arguments were offloaded: a
list of ``{"ref", "sha256", "tokens", "call_id", "arg"}``."""

OFFLOAD_FAILED_KEY = "offload_failed"
"""``additional_kwargs`` key of a message (a tool result or a user input) too large to keep
whose content could not be stored: ``{"sha256", "tokens", "error"}``; it carries no ref,
only the content's head and tail and a notice that the rest was not saved."""

LEDGER_ARTIFACTS_KEY = "artifacts"
"""Key of the handoff record's ledger listing the refs of folded messages."""


class ArtifactMention(TypedDict):
    """An artifact a message refers to, as the record's ledger lists it."""

    ref: str
    kind: str
    """``tool_result``, ``tool_args`` or ``user_input``."""
    tool: str | None
    """The tool whose result or arguments were offloaded; None for a user input."""
    tokens: int


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


def _tokens(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def message_artifacts(message: BaseMessage) -> list[ArtifactMention]:
    """The artifacts ``message`` refers to, with their kind, tool and size, in order.

    A whole offloaded message is a ``user_input`` when a person sent it, else a
    ``tool_result`` of the tool that answered; offloaded arguments are ``tool_args`` of
    the call they belong to.
    """
    extra = message.additional_kwargs or {}
    whole = _whole_mention(message, extra.get(OFFLOAD_KEY))
    found: list[ArtifactMention] = [] if whole is None else [whole]
    return found + _args_mentions(message, extra.get(OFFLOAD_ARGS_KEY) or ())


def _args_mentions(message: BaseMessage, entries: Iterable[object]) -> list[ArtifactMention]:
    """The mentions of a message's offloaded arguments (its ``OFFLOAD_ARGS_KEY`` entries)."""
    found: list[ArtifactMention] = []
    names = {
        call.get("id"): call.get("name")
        for call in getattr(message, "tool_calls", None) or ()
        if isinstance(call, Mapping)
    }
    for entry in entries:
        if isinstance(entry, Mapping) and isinstance(entry.get("ref"), str):
            name = names.get(entry.get("call_id"))
            found.append(
                {
                    "ref": entry["ref"],
                    "kind": "tool_args",
                    "tool": name if isinstance(name, str) else None,
                    "tokens": _tokens(entry.get("tokens")),
                }
            )
    return found


def _whole_mention(message: BaseMessage, whole: object) -> ArtifactMention | None:
    """The mention of a whole offloaded message (its ``OFFLOAD_KEY`` entry), if any."""
    if not isinstance(whole, Mapping) or not isinstance(whole.get("ref"), str):
        return None
    human = message.type == "human"
    kind = whole.get("kind")
    if not isinstance(kind, str):
        kind = "user_input" if human else "tool_result"
    tool = None if human else message.name
    return {"ref": whole["ref"], "kind": kind, "tool": tool, "tokens": _tokens(whole.get("tokens"))}


def messages_artifacts(messages: Iterable[BaseMessage]) -> list[ArtifactMention]:
    """Every artifact the messages refer to, first appearance first, one entry per ref."""
    found: dict[str, ArtifactMention] = {}
    for message in messages:
        for mention in message_artifacts(message):
            found.setdefault(mention["ref"], mention)
    return list(found.values())
