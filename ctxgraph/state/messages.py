"""Checks on the ``messages`` a caller sends, made before anything is written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, convert_to_messages


class MalformedMessagesError(ValueError):
    """Input messages cannot form a valid chat history; the message names the problem."""


def coerce_messages(value: object) -> list[BaseMessage]:
    """Turn a caller's ``messages`` value into messages, or say exactly why it cannot be."""
    if isinstance(value, (BaseMessage, str, dict)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise MalformedMessagesError(
            "'messages' must be a list of messages (or message dicts), "
            f"got {type(value).__name__}: {value!r:.200}"
        )
    try:
        return convert_to_messages(value)
    except (NotImplementedError, ValueError, TypeError, KeyError) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise MalformedMessagesError(f"cannot read the 'messages' input: {first_line}") from error


def check_tool_results(current: Sequence[BaseMessage], incoming: Sequence[BaseMessage]) -> None:
    """Every incoming tool result must answer a tool call made before it in the history."""
    incoming_ids = {id(m) for m in incoming}
    calls: set[str] = set()
    for message in [*current, *incoming]:
        if isinstance(message, AIMessage):
            calls.update(call["id"] for call in message.tool_calls if call["id"])
        elif (
            isinstance(message, ToolMessage)
            and id(message) in incoming_ids
            and message.tool_call_id not in calls
        ):
            raise MalformedMessagesError(
                f"tool message answers tool_call_id {message.tool_call_id!r}, but no assistant "
                "message before it made that call"
            )


def check_input(current: Sequence[BaseMessage] | None, update: Any) -> None:
    """Validate a graph input's ``messages`` against the thread's current messages."""
    if not isinstance(update, dict) or "messages" not in update:
        return
    check_tool_results(current or [], coerce_messages(update["messages"]))


def unencodable_position(text: str) -> int | None:
    """The index of the first character of ``text`` UTF-8 cannot encode, or None.

    Only lone surrogates (for example from ``surrogateescape`` decoding of bad bytes)
    qualify; a model client fails on them deep inside its request encoding.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


ORIGIN_KEY = "origin"
"""``additional_kwargs`` key that marks a message ctxgraph (or a caller) injected."""

HIDE_FROM_UI_KEY = "hide_from_ui"
"""``additional_kwargs`` key telling UIs not to show an injected message."""


def message_origin(message: BaseMessage) -> str | None:
    """The origin mark of an injected message (``memory``, ``summary``, ...), else ``None``."""
    value = message.additional_kwargs.get(ORIGIN_KEY)
    return value if isinstance(value, str) else None


def is_real_user_message(message: BaseMessage) -> bool:
    """True for what a person typed: a human message that carries no origin mark."""
    return message.type == "human" and message_origin(message) is None


def content_text(message: BaseMessage) -> str:
    """The text of a message: string content, or its text blocks joined by newlines.

    Images, files and other non-text blocks are ignored.
    """
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type", "text") == "text":
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
    return "\n".join(part for part in parts if part.strip())
