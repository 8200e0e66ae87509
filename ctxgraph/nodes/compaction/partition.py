"""Splits the working window into messages to fold and messages to keep, whole exchanges only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, SystemMessage, ToolMessage

from ctxgraph.state.messages import is_real_user_message

MISSING_RESULT = (
    "No result was recorded for this tool call, so its outcome is unknown. "
    "Do not assume it succeeded or failed; check before repeating it."
)

M = TypeVar("M", bound=BaseMessage)


def exchange_units(messages: Sequence[M]) -> list[list[M]]:
    """Group messages into units that must not be split.

    An assistant message with tool calls and the tool results that answer it (parallel
    calls included) form one unit; every other message is a unit of its own.
    """
    units: list[list[M]] = []
    open_unit: list[M] | None = None
    open_ids: set[str] = set()
    for message in messages:
        if (
            isinstance(message, ToolMessage)
            and open_unit is not None
            and message.tool_call_id in open_ids
        ):
            open_unit.append(message)
            continue
        if isinstance(message, AIMessage) and message.tool_calls:
            open_unit = [message]
            open_ids = {call["id"] for call in message.tool_calls if call["id"]}
            units.append(open_unit)
            continue
        open_unit = None
        open_ids = set()
        units.append([message])
    return units


def repair_tool_pairs(
    messages: Sequence[AnyMessage],
) -> tuple[list[AnyMessage], list[AnyMessage]]:
    """Make messages safe to send: every tool result follows its call, every call is answered.

    Returns ``(repaired, everything)``. ``repaired`` drops orphan tool results (no earlier
    call) and gives each unanswered tool call that is followed by other messages a
    synthetic error result saying its outcome is unknown; calls at the very end are left
    alone, since the tools node has not run them yet. ``everything`` is ``repaired`` with
    the orphans back in their original places, for archiving.
    """
    repaired: list[AnyMessage] = []
    everything: list[AnyMessage] = []
    units = exchange_units(messages)
    for position, unit in enumerate(units):
        head = unit[0]
        if isinstance(head, ToolMessage):
            everything.append(head)
            continue
        synthetic: list[AnyMessage] = []
        if isinstance(head, AIMessage) and head.tool_calls:
            answered = {m.tool_call_id for m in unit[1:] if isinstance(m, ToolMessage)}
            pending = position == len(units) - 1 and not answered
            synthetic = [] if pending else _missing_results(head, answered)
        repaired.extend([*unit, *synthetic])
        everything.extend([*unit, *synthetic])
    return repaired, everything


def _missing_results(call_message: AIMessage, answered: set[str]) -> list[AnyMessage]:
    return [
        ToolMessage(
            content=MISSING_RESULT,
            tool_call_id=call["id"],
            name=call["name"],
            status="error",
            id=f"{call['id']}-missing-result",
        )
        for call in call_message.tool_calls
        if call["id"] and call["id"] not in answered
    ]


def _cut_index(units: Sequence[Sequence[BaseMessage]], keep: int) -> int:
    """Index of the first unit kept so that at least ``keep`` messages stay verbatim."""
    kept = 0
    index = len(units)
    while index > 0 and kept < keep:
        index -= 1
        kept += len(units[index])
    return index


def partition_history(
    messages: Sequence[AnyMessage], keep: int
) -> tuple[list[AnyMessage], list[AnyMessage]]:
    """Split ``messages`` into ``(old, kept)`` for compaction.

    - The last ``keep`` messages are kept, moved back so that no tool exchange is split.
    - System messages and the latest real user message are always kept verbatim, even
      when a long tool run after that user message is folded.
    - Orphan tool results are folded (never sent again); unanswered calls that are
      followed by other messages get a synthetic "outcome unknown" result.
    """
    if keep < 1:
        raise ValueError(f"partition_history needs keep >= 1, got {keep}")
    repaired, everything = repair_tool_pairs(messages)
    units = exchange_units(repaired)
    cut = _cut_index(units, keep)
    old_units, kept_units = units[:cut], units[cut:]
    kept = _pinned(old_units, kept_units) + [m for unit in kept_units for m in unit]
    kept_ids = {id(m) for m in kept}
    old = [m for m in everything if id(m) not in kept_ids]
    return old, kept


def _pinned(
    old_units: Sequence[Sequence[AnyMessage]], kept_units: Sequence[Sequence[AnyMessage]]
) -> list[AnyMessage]:
    """The messages before the cut that stay: system messages and the latest user message.

    That user message stays only while no newer real user message is kept anyway.
    """
    latest_user_id: int | None = None
    for unit in reversed(old_units):
        if is_real_user_message(unit[0]):
            latest_user_id = id(unit[0])
            break
    pinned = [
        unit[0]
        for unit in old_units
        if isinstance(unit[0], SystemMessage) or id(unit[0]) == latest_user_id
    ]
    if latest_user_id is not None and any(is_real_user_message(u[0]) for u in kept_units):
        # A newer real user message is already kept; the older one may be folded.
        pinned = [m for m in pinned if isinstance(m, SystemMessage)]
    return pinned
