"""A composable chain of wrappers around each tool call, sync and async alike."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

ToolResult = ToolMessage | Command[Any]
"""What one tool call produces: a result message, or a command updating the state."""

Execute = Callable[[ToolCallRequest], ToolResult]
AsyncExecute = Callable[[ToolCallRequest], Awaitable[ToolResult]]


class ToolWrapper(Protocol):
    """One link around each tool call, with a sync and an async form that behave alike.

    A link may change the request, call ``execute`` (once, again, or not at all), answer
    in its place (``ToolMessage(status="error")`` refuses a call), or change the result.
    """

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        """Handle one call in a synchronous run."""
        ...

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        """Handle one call in an asynchronous run."""
        ...


@dataclass(frozen=True)
class ToolWrapperChain:
    """Wrappers applied around each tool call, the first outermost.

    ``wrap_tool_call`` and ``awrap_tool_call`` are the hooks ``ToolNode`` takes.
    """

    wrappers: tuple[ToolWrapper, ...] = ()

    def wrap_tool_call(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        """Run ``request`` through every wrapper, then ``execute``."""
        handler = execute
        for wrapper in reversed(self.wrappers):
            handler = _link(wrapper, handler)
        return handler(request)

    async def awrap_tool_call(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        """Async :meth:`wrap_tool_call`."""
        handler = execute
        for wrapper in reversed(self.wrappers):
            handler = _alink(wrapper, handler)
        return await handler(request)


def _link(wrapper: ToolWrapper, inner: Execute) -> Execute:
    def handle(request: ToolCallRequest) -> ToolResult:
        return wrapper.wrap(request, inner)

    return handle


def _alink(wrapper: ToolWrapper, inner: AsyncExecute) -> AsyncExecute:
    async def handle(request: ToolCallRequest) -> ToolResult:
        return await wrapper.awrap(request, inner)

    return handle


class RefusalGate:
    """A tool wrapper that answers some calls with an error result instead of running them.

    A subclass decides in ``_refusal``: the error ``ToolMessage`` to answer with, or None
    to run the call.
    """

    def _refusal(self, request: ToolCallRequest) -> ToolMessage | None:
        raise NotImplementedError

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        """Refuse the call when ``_refusal`` says so, else run it."""
        refused = self._refusal(request)
        return refused if refused is not None else execute(request)

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        """Async :meth:`wrap`."""
        refused = self._refusal(request)
        return refused if refused is not None else await execute(request)


def error_result(request: ToolCallRequest, name: str, text: str) -> ToolMessage:
    """The error result that answers ``request`` (a call of ``name``) with ``text``."""
    return ToolMessage(
        content=text, tool_call_id=request.tool_call["id"] or "", name=name, status="error"
    )
