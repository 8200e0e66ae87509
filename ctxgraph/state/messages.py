"""Checks on the ``messages`` a caller sends, made before anything is written."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, convert_to_messages


class MalformedMessagesError(ValueError):
    """Input messages cannot form a valid chat history; the message names the problem."""


RECOVERED_CALL_ID_PREFIX = "call_text_"
"""Start of the id of every tool call recovered from an answer's text
(``nodes.text_tool_calls``); the ledger marks such calls as recovered."""


def is_recovered_call_id(call_id: str | None) -> bool:
    """Whether ``call_id`` is the id of a call recovered from an answer's text."""
    return bool(call_id) and str(call_id).startswith(RECOVERED_CALL_ID_PREFIX)


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
    """Validate a graph input's ``messages`` against the thread's current messages.

    Also refuses text the thread's storage cannot hold (see ``check_storable``).
    """
    if not isinstance(update, dict) or "messages" not in update:
        return
    incoming = coerce_messages(update["messages"])
    check_storable(incoming)
    check_tool_results(current or [], incoming)


def check_input_text(update: Any) -> None:
    """Refuse a graph input whose messages hold unstorable text; leave other problems be.

    Made before LangGraph saves the run's input, so a refused input leaves no checkpoint;
    input that cannot be read as messages is left to ``check_input`` in the first task.
    """
    if not isinstance(update, dict) or "messages" not in update:
        return
    try:
        incoming = coerce_messages(update["messages"])
    except MalformedMessagesError:
        return
    check_storable(incoming)


UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""NUL and lone surrogates: Postgres ``text``/``jsonb`` cannot hold NUL (U+0000), and UTF-8
cannot encode a surrogate (U+D800-U+DFFF) standing alone, so the Store, the checkpointer
and every model client fail on them."""

REPLACEMENT = "\ufffd"
"""What ``safe_text`` puts in place of each unstorable character (U+FFFD)."""

UNSTORABLE_HOW_TO = "remove it, or replace it (e.g. with U+FFFD)"
"""How to fix a message holding an unstorable character, the end of its error."""


def unstorable_position(text: str) -> int | None:
    """The index of the first NUL or lone surrogate in ``text``, or None."""
    found = UNSTORABLE.search(text)
    return None if found is None else found.start()


def character_name(character: str) -> str:
    """``U+0000 (NUL)`` or ``U+D800 (a lone surrogate)``: how errors name a character."""
    code = ord(character)
    kind = "NUL" if code == 0 else "a lone surrogate" if 0xD800 <= code <= 0xDFFF else None
    return f"U+{code:04X}" + (f" ({kind})" if kind else "")


def unstorable_problem(label: str, text: str, position: int) -> str:
    """The one-line refusal of ``text``, whose character at ``position`` cannot be stored."""
    return (
        f"{label} holds {character_name(text[position])} at character {position + 1}, which "
        "the thread's storage cannot hold; nothing was written; " + UNSTORABLE_HOW_TO
    )


def _first_unstorable(value: object, where: str) -> tuple[str, str, int] | None:
    """The first unstorable character in ``value`` (strings, dicts and lists of them).

    Returns the place (``where`` extended by keys and indexes), the string and the index.
    """
    if isinstance(value, str):
        position = unstorable_position(value)
        return None if position is None else (where, value, position)
    if isinstance(value, dict):
        for key, item in value.items():
            found = _first_unstorable(key, f"{where} key {key!r:.40}")
            found = found or _first_unstorable(item, f"{where}[{key!r:.40}]")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = _first_unstorable(item, f"{where}[{index}]")
            if found:
                return found
    return None


_MESSAGE_PARTS = ("content", "tool_calls", "invalid_tool_calls", "name", "tool_call_id", "id")
"""The message fields checked first, in this order (then every other field)."""


def _message_parts(message: BaseMessage) -> list[tuple[str, object]]:
    """The fields of ``message`` to check, with the names errors give them."""
    fields = dict(message)
    parts = [(name, fields.pop(name)) for name in _MESSAGE_PARTS if name in fields]
    parts += [(name, value) for name, value in fields.items() if name != "type"]
    return parts


def check_storable(messages: Sequence[BaseMessage]) -> None:
    """Raise ``MalformedMessagesError`` when a message holds NUL or a lone surrogate.

    The error names the character, the message (counted from 1), the place in it (its
    string content is named by the message alone) and the character's position there.
    """
    for number, message in enumerate(messages, start=1):
        for name, value in _message_parts(message):
            found = _first_unstorable(value, name)
            if found is None:
                continue
            where, text, position = found
            plain = name == "content" and isinstance(value, str)
            label = f"message {number}" if plain else f"message {number} ({message.type}) {where}"
            raise MalformedMessagesError(unstorable_problem(label, text, position))


def safe_text(text: str) -> str:
    """``text`` with each NUL and lone surrogate replaced by U+FFFD (itself when it has none)."""
    return UNSTORABLE.sub(REPLACEMENT, text) if UNSTORABLE.search(text) else text


T = TypeVar("T")


def map_text(value: T, change: Callable[[str], str]) -> T:
    """``value`` with ``change`` applied to every string in it (dict keys included).

    Dicts, lists and tuples are walked; returns ``value`` itself when no string changed.
    """
    if isinstance(value, str):
        return cast(T, change(value))
    if isinstance(value, dict):
        items = [(map_text(k, change), map_text(v, change)) for k, v in value.items()]
        if all(k is a and v is b for (k, v), (a, b) in zip(items, value.items(), strict=True)):
            return value
        return cast(T, type(value)(items) if type(value) is not dict else dict(items))
    if isinstance(value, (list, tuple)):
        mapped = [map_text(item, change) for item in value]
        if all(a is b for a, b in zip(mapped, value, strict=True)):
            return value
        return cast(T, type(value)(mapped) if isinstance(value, tuple) else mapped)
    return value


Message = TypeVar("Message", bound=BaseMessage)


def sanitized_message(message: Message) -> Message:
    """``message`` with NUL and lone surrogates replaced by U+FFFD in every field.

    Content (strings and blocks), tool calls (names and arguments), ``additional_kwargs``
    and metadata are all covered, so whatever stores the message (checkpoint, archive,
    memory, artifacts) gets text it can hold. Returns ``message`` itself when it is clean.
    """
    changes = {}
    for name, value in dict(message).items():
        safe = map_text(value, safe_text)
        if safe is not value:
            changes[name] = safe
    return message.model_copy(update=changes) if changes else message


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
