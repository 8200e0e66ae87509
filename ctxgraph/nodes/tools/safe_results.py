"""Makes every tool result storable: NUL and lone surrogates become U+FFFD."""

from __future__ import annotations

import dataclasses
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from ctxgraph.nodes.tools.wrappers import AsyncExecute, Execute, ToolResult
from ctxgraph.state.messages import sanitized_message


def safe_result(result: ToolResult) -> ToolResult:
    """``result`` with ``sanitized_message`` applied to its message(s); itself when clean.

    A ``Command`` is covered when its update is a dict or a list of pairs whose
    ``messages`` are messages (the shapes a tool returns); other values are left as given.
    """
    if not isinstance(result, Command):
        return sanitized_message(result)
    update = result.update
    if isinstance(update, dict) and "messages" in update:
        messages = _safe_messages(update["messages"])
        if messages is not update["messages"]:
            return _with_update(result, {**update, "messages": messages})
    elif isinstance(update, (list, tuple)):
        pairs = [
            (key, _safe_messages(value) if key == "messages" else value) for key, value in update
        ]
        if any(a is not b for (_, a), (_, b) in zip(pairs, update, strict=True)):
            return _with_update(result, pairs)
    return result


def _safe_messages(value: Any) -> Any:
    """A message, or a list of them, sanitized; ``value`` itself when nothing changed."""
    if isinstance(value, BaseMessage):
        return sanitized_message(value)
    if isinstance(value, list):
        safe = [sanitized_message(m) if isinstance(m, BaseMessage) else m for m in value]
        return value if all(a is b for a, b in zip(safe, value, strict=True)) else safe
    return value


def _with_update(command: Command[Any], update: Any) -> Command[Any]:
    """``command`` with its update replaced, everything else kept."""
    return dataclasses.replace(command, update=update)


class SafeResults:
    """A ``ToolWrapper`` that sanitizes the result of the calls it wraps.

    ``tools_node`` puts one innermost, next to the tool, so the result offloader stores
    (and verifies) the sanitized text as the artifact, and one outermost, so a caller's
    wrapper cannot bring the characters back.
    """

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        """Run the call, then sanitize its result."""
        return safe_result(execute(request))

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        """Async :meth:`wrap`."""
        return safe_result(await execute(request))
