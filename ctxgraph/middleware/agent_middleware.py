"""ctxgraph's parts as LangChain ``AgentMiddleware``, for agents built with ``create_agent``.

Each class wraps one part of ctxgraph's graph and runs it through a ``MiddlewareHost``,
which runs the graph's own nodes: nothing a feature does is written again here. Give an
agent one host (``ctxgraph_middleware`` does) so the parts share one request, one set of
tool wrappers and one compaction planner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    ModelRequest,
    ModelResponse,
)
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime

from ctxgraph.middleware.host import MiddlewareHost, ModelResult
from ctxgraph.middleware.schemas import private_state
from ctxgraph.nodes.part import Part
from ctxgraph.nodes.parts import CompactionPart, MemoryPart, OffloadPart, SkillsPart
from ctxgraph.nodes.skills.sources import SkillSources, has_sources
from ctxgraph.nodes.tools.wrappers import AsyncExecute, Execute, ToolResult
from ctxgraph.state.models import Models
from ctxgraph.state.settings import Settings

__all__ = [
    "CompactionMiddleware",
    "CtxgraphMiddleware",
    "MemoryMiddleware",
    "OffloadMiddleware",
    "SkillsMiddleware",
    "ctxgraph_middleware",
]


class CtxgraphMiddleware(AgentMiddleware[Any, Any, Any]):
    """One ctxgraph part inside ``create_agent``; the base of the four middleware.

    The host's first middleware (the leader) assembles every model request from the
    thread's state as ctxgraph's ``model`` node does, answers unreadable tool calls as
    the ``invalid_calls`` node does, and runs every tool call through the ``tools``
    node's wrappers; the others hand those calls on. A class defines only the hooks it
    works in, since ``create_agent`` makes a graph step of each ``before_*``/``after_*``
    hook; the model and tool-call wrappers are no steps. When a run starts the host
    checks the run's identity, refuses another user's thread and claims an unowned one
    (``MiddlewareHost.starts_in``).
    """

    state_schema = private_state("CtxgraphState", None)

    def __init__(self, part: Part, host: MiddlewareHost | None = None) -> None:
        """Register ``part`` with ``host`` (a host of its own when None)."""
        super().__init__()
        self.host = host if host is not None else MiddlewareHost()
        self.part = part
        self.tools: list[BaseTool] = self.host.register(self, part)

    @property
    def name(self) -> str:
        """The middleware's name in the agent's graph (``<Class>.before_model`` ...)."""
        return type(self).__name__

    def _leads(self) -> bool:
        return self.host.leader is self

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResult:
        """The leader builds the request from the parts and turns the answer into state."""
        if not self._leads():
            return handler(request)
        return self.host.model_call(request, handler)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResult:
        """Async :meth:`wrap_model_call`."""
        if not self._leads():
            return await handler(request)
        return await self.host.amodel_call(request, handler)

    def wrap_tool_call(self, request: ToolCallRequest, handler: Execute) -> ToolResult:
        """The leader runs each tool call through the parts' wrappers and gates."""
        if not self._leads():
            return handler(request)
        return self.host.tool_call(request, handler)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncExecute) -> ToolResult:
        """Async :meth:`wrap_tool_call`."""
        if not self._leads():
            return await handler(request)
        return await self.host.atool_call(request, handler)


class CompactionMiddleware(CtxgraphMiddleware):
    """The verified record, the lossless archive and ``read_history``.

    Before each model call it runs the ``compact`` node's step when a trigger fires (the
    memory middleware's ``flush`` first, when the host has one): offloading, the summary
    ladder, the archive under ``("threads", thread_id, "archive")`` in the agent's Store,
    the hash chain and the mark, or a background job in background mode.
    """

    state_schema = private_state("CompactionState", CompactionPart.state)

    def __init__(
        self, *, summary_prompt: str | None = None, host: MiddlewareHost | None = None
    ) -> None:
        """``summary_prompt`` replaces ``SUMMARY_PROMPT``, as ``CompactionPart`` takes it."""
        super().__init__(CompactionPart(summary_prompt), host)

    def before_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Flush and compact when the ``compact`` node's router says so."""
        return self.host.compact(state, runtime)

    async def abefore_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async :meth:`before_model`."""
        return await self.host.acompact(state, runtime)


class MemoryMiddleware(CtxgraphMiddleware):
    """Long-term memory: the notes (or view) in each request, ``memory_search``, extraction.

    When a run starts the ``load_memory`` node's step chooses the turn's facts; when it
    ends the ``extract_memory`` node's step extracts (inline, in the background, or queued
    for the memory worker, as ``Settings.memory_extraction`` says) through the acceptance
    gate. The user comes from the run's context or ``configurable`` (``identity``).
    """

    state_schema = private_state("MemoryState", MemoryPart.state)

    def __init__(
        self,
        *,
        extraction_prompt: str | None = None,
        ranker: Any = None,
        host: MiddlewareHost | None = None,
    ) -> None:
        """``extraction_prompt`` and ``ranker`` as ``MemoryPart`` takes them."""
        super().__init__(MemoryPart(extraction_prompt, ranker), host)

    def before_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Start the run (the owner check), then load the user's memory for the turn."""
        return self.host.load(state, runtime)

    async def abefore_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async :meth:`before_agent`."""
        return await self.host.aload(state, runtime)

    def after_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Extract memory from what the run added."""
        return self.host.finish(state, runtime)

    async def aafter_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async :meth:`after_agent`."""
        return await self.host.afinish(state, runtime)


class OffloadMiddleware(CtxgraphMiddleware):
    """Large tool results into artifacts, with ``read_artifact`` and ``grep_artifact``.

    Large user inputs and old tool arguments are offloaded by the compaction step, so
    they need the compaction middleware in the same host.
    """

    def __init__(self, *, host: MiddlewareHost | None = None) -> None:
        """The offloading part; results are offloaded inside the tool-call wrappers."""
        super().__init__(OffloadPart(), host)


class SkillsMiddleware(CtxgraphMiddleware):
    """Skills: the listing, ``load_skill``, re-attachment after compaction, allowed-tools.

    A skill's ``allowed-tools`` is enforced twice, as in the graph: a request binds only
    the tools the active skills allow, and a call of any other tool is answered with a
    ``ToolMessage`` with status ``error`` (the policy gate among the tool wrappers).
    """

    state_schema = private_state("SkillsState", SkillsPart.state)

    def __init__(
        self, *, skills: SkillSources | None = None, host: MiddlewareHost | None = None
    ) -> None:
        """``skills`` are the sources (None: the folders and Store the settings name)."""
        super().__init__(SkillsPart(skills), host)


def ctxgraph_middleware(
    *, models: Models | None = None, settings: Settings | None = None
) -> list[CtxgraphMiddleware]:
    """The default ctxgraph middleware for ``create_agent``, in order, sharing one host.

    Compaction, memory and offloading; skills too when ``settings`` name skill sources
    (``skills_dirs`` or ``skills_from_store``). Put the list first in ``middleware=[...]``
    so the request it assembles is what the other middleware see.

    Args:
        models: The summary and memory roles (each falls back to the agent's own model);
            ``main`` is not used: the main model is always the agent's own.
        settings: ctxgraph's ``Settings`` (None is ``Settings()``); a run's
            ``Context(settings=...)`` overrides the fields it sets, as in the graph.

    Returns:
        The middleware list.

    """
    host = MiddlewareHost(models, settings)
    chosen: list[CtxgraphMiddleware] = [
        CompactionMiddleware(host=host),
        MemoryMiddleware(host=host),
        OffloadMiddleware(host=host),
    ]
    if has_sources(host.settings):
        chosen.append(SkillsMiddleware(host=host))
    return chosen
