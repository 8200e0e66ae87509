"""What ctxgraph's middleware of one agent share: the parts, and the nodes built from them.

The middleware host runs the code the explicit graph runs, node for node: the ``compact``
node's step before a model call (with the ``flush`` of memory first), the ``model``
node's request assembly and answer handling around the agent's own model call, the
``tools`` node's wrappers around each tool call, ``load_memory`` when a run starts and
``extract_memory`` when it ends. Nothing here decides anything a part or a node does not.

The main model is the agent's own (``ModelRequest.model``), learnt at its first call; a
``Models`` given to the host sets the summary and memory roles (each falls back to the
main model) and the main model until that first call. The agent's system prompt and tools
are learnt at that call too: the compaction measures the request the model will get, so
before the first call of a process the model call itself compacts when a trigger fires.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from langchain.agents.middleware import ExtendedModelResponse, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.graph.message import add_messages
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from ctxgraph.graph.assembly import Assembly, checked_counter, memory_loader, ordered_parts
from ctxgraph.middleware.identity import ctx_runtime, ctx_tool_request, with_context
from ctxgraph.nodes.invalid_calls import has_invalid_calls, invalid_calls_node
from ctxgraph.nodes.memory.load import MemoryLoader
from ctxgraph.nodes.model import ModelCall
from ctxgraph.nodes.part import Part, PartSetup
from ctxgraph.nodes.parts import CompactionPart, MemoryPart
from ctxgraph.nodes.request import SYSTEM_PROMPT_ID
from ctxgraph.nodes.tools.wrappers import AsyncExecute, Execute, ToolResult, ToolWrapperChain
from ctxgraph.state.context import Context, validate_thread_id
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.models import Models
from ctxgraph.state.sans_io import Flow, Io, arun, io, run
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import MessageCount, TokenCounter, encoding
from ctxgraph.state.usage import add_usage
from ctxgraph.store.ownership import (
    arecord_owner,
    athread_owner,
    check_thread_owner,
    record_owner,
    thread_owner,
)

ModelResult = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]


@dataclass(frozen=True)
class _Nodes:
    """The assembly of one agent model, prompt and tool list, and its tool-call chain."""

    assembly: Assembly
    tools: ToolWrapperChain


def merged(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two node updates as one: messages in order, usage added, other keys the later."""
    out = {**first, **second}
    if "messages" in first and "messages" in second:
        out["messages"] = [*first["messages"], *second["messages"]]
    if "model_usage" in first and "model_usage" in second:
        out["model_usage"] = add_usage(first["model_usage"], second["model_usage"])
    return out


def applied(state: AgentState, update: dict[str, Any]) -> AgentState:
    """``state`` after ``update``, its messages through the ``add_messages`` reducer."""
    out: dict[str, Any] = {**state, **update}
    if "messages" in update:
        current: list[Any] = list(state.get("messages") or [])
        out["messages"] = add_messages(current, update["messages"])
    return out  # type: ignore[return-value]


def _thread_id(config: RunnableConfig) -> str | None:
    """The run's checked thread id, None without one."""
    raw = (config.get("configurable") or {}).get("thread_id")
    return None if raw is None else validate_thread_id(raw, "thread_id")


def _config() -> RunnableConfig:
    """The running step's config (every middleware hook runs as a graph node)."""
    return get_config()


NO_PROMPT = "(the agent has no system prompt)"
"""Stands in for an agent without a system prompt while the request is assembled
(``Settings.system_prompt`` cannot be empty); it never reaches the model."""


def _split_system(messages: Sequence[BaseMessage]) -> tuple[SystemMessage | None, list[Any]]:
    """The assembled system prompt (None when empty) and the messages after it."""
    first = messages[0] if messages else None
    if not (isinstance(first, SystemMessage) and str(first.id or "").startswith(SYSTEM_PROMPT_ID)):
        return None, list(messages)
    rest = list(messages[1:])
    if not first.text.startswith(NO_PROMPT):
        return first, rest
    appended = first.text.removeprefix(NO_PROMPT).lstrip("\n")
    return (SystemMessage(content=appended, id=first.id) if appended else None), rest


class MiddlewareHost:
    """The parts of one agent's ctxgraph middleware, and the nodes that run them.

    ``ctxgraph_middleware`` gives its list one host; a middleware made on its own makes
    its own. The first middleware registered leads: it alone assembles the model request
    and wraps tool calls for every part of the host, so two middleware of one host never
    do the same work twice. A run starts (the owner check) in the first hook the host's
    parts have: the memory middleware's ``before_agent``, else the compaction
    middleware's ``before_model``, else the leader's model call (``starts_in``).
    """

    def __init__(
        self,
        models: Models | None = None,
        settings: Settings | None = None,
        *,
        token_counter: MessageCount | None = None,
    ) -> None:
        """``models`` set the summary and memory roles; ``settings`` are the graph's."""
        self.models = models
        self.settings = settings or Settings()
        self._counter = token_counter
        checked_counter(token_counter)
        self._parts: list[Part] = []
        self._part_tools: set[str] = set()
        self.leader: object | None = None
        self._main: BaseChatModel | None = models.main if models is not None else None
        self._nodes: dict[tuple[int, tuple[str, ...], str | None], _Nodes] = {}
        self._user_tools: tuple[BaseTool, ...] = ()
        self._prompt: str | None = None
        self._called = False
        self._loader: MemoryLoader | None = None
        self._lock = threading.Lock()
        encoding()  # read the tokenizer's file now, not on a server's event loop in a run

    # -- parts ----------------------------------------------------------------------

    def register(self, owner: object, part: Part) -> list[BaseTool]:
        """Add ``owner``'s part; the first owner leads. Returns the tools it gives the agent.

        The tools are made after the part is added, so they see the settings of a host
        that has it (``memory_search`` needs the memory part's own host settings).

        Raises:
            ValueError: The host already has a part of that kind.

        """
        if any(type(p) is type(part) for p in self._parts):
            raise ValueError(
                f"this middleware host already has a {type(part).__name__}: give each "
                "ctxgraph middleware once per agent"
            )
        with self._lock:
            self._parts = ordered_parts([*self._parts, part], self.settings, defaults=False)
            self._nodes.clear()
            self._loader = None
            if self.leader is None:
                self.leader = owner
        tools = list(part.tools(PartSetup(None, self.host_settings(), TokenCounter())))
        with self._lock:
            self._part_tools.update(t.name for t in tools)
        return tools

    def part(self, kind: type[Part]) -> Part | None:
        """The host's part of ``kind``, if it has one."""
        return next((p for p in self._parts if isinstance(p, kind)), None)

    @property
    def starts_in(self) -> str:
        """The hook that starts a run: ``before_agent``, ``before_model`` or ``model_call``."""
        if self.part(MemoryPart) is not None:
            return "before_agent"
        return "before_model" if self.part(CompactionPart) is not None else "model_call"

    def host_settings(self) -> Settings:
        """The settings, with memory off when no memory middleware is in the list."""
        if self.part(MemoryPart) is None:
            return replace(self.settings, memory_mode="off", memory_extraction="off")
        return self.settings

    # -- nodes ----------------------------------------------------------------------

    def _models(self, main: BaseChatModel) -> Models:
        given = self.models
        if given is None:
            return Models(main=main)
        return Models(main=main, summary=given.summary, memory=given.memory)

    def nodes(self, main: BaseChatModel | None = None) -> _Nodes | None:
        """The nodes for ``main`` (else the model last seen); None before any is known."""
        model = main or self._main
        if model is None:
            return None
        self._main = model
        key = (id(model), tuple(t.name for t in self._user_tools), self._prompt)
        with self._lock:
            built = self._nodes.get(key)
            if built is None:
                built = self._build(model)
                self._nodes[key] = built
        return built

    def learn_tools(self, tools: Sequence[BaseTool | dict[str, Any]]) -> None:
        """Note the agent's own tools (a request's tools that are no part's)."""
        own = self._part_tools
        users = tuple(t for t in tools if isinstance(t, BaseTool) and t.name not in own)
        if tuple(t.name for t in users) != tuple(t.name for t in self._user_tools):
            self._user_tools = users

    def learn_prompt(self, prompt: str | None) -> None:
        """Note the agent's system prompt (the requests the nodes measure begin with it)."""
        self._prompt = prompt or None
        self._called = True

    def _build(self, main: BaseChatModel) -> _Nodes:
        settings = self.host_settings()
        if self._prompt is not None:
            settings = replace(settings, system_prompt=self._prompt)
        assembly = Assembly(
            self._models(main), self._user_tools, settings, self._parts, token_counter=self._counter
        )
        return _Nodes(assembly, ToolWrapperChain(tuple(assembly.wrappers)))

    def loader(self) -> MemoryLoader | None:
        """The ``load_memory`` node's loader (it needs no model), None with memory off."""
        with self._lock:
            if self._loader is None:
                counter = checked_counter(self._counter)
                self._loader = memory_loader(self._parts, self.host_settings(), counter)
        return self._loader

    # -- before_agent: the owner check and load_memory -----------------------------

    def _start(self, runtime: Runtime[Any]) -> Flow[None]:
        config = _config()
        rt = ctx_runtime(runtime, config)
        thread_id = _thread_id(config)
        if thread_id is None or rt.store is None:
            return
        owner = yield from io(thread_owner, athread_owner, rt.store, thread_id)
        check_thread_owner(owner, thread_id, rt.context.user_id)
        if owner is None:
            yield from io(record_owner, arecord_owner, rt.store, thread_id, rt.context.user_id)

    def _start_in(self, hook: str, runtime: Runtime[Any]) -> Flow[None]:
        """The run's start in ``hook`` when it is the host's first (see ``starts_in``).

        It checks the identity, refuses another user's thread and claims an unowned one:
        ``ContextError`` for no usable identity, ``ThreadOwnerError`` for another user's.
        """
        if self.starts_in == hook:
            yield from self._start(runtime)

    def _load(self, state: AgentState, runtime: Runtime[Any]) -> Flow[dict[str, Any] | None]:
        yield from self._start_in("before_agent", runtime)
        loader = self.loader()
        if loader is None:
            return None
        rt = ctx_runtime(runtime, _config())
        return (yield from io(loader.load, loader.aload, state, rt)) or None

    def load(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """When a run starts: the owner check, then the ``load_memory`` node's step."""
        return run(self._load(state, runtime))

    async def aload(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async :meth:`load`."""
        return await arun(self._load(state, runtime))

    # -- before_model: flush, then compact ------------------------------------------

    def _compaction(
        self, nodes: _Nodes, state: AgentState, rt: Runtime[Context], config: RunnableConfig
    ) -> Flow[dict[str, Any]]:
        """The ``flush`` node's step (with memory), then the ``compact`` node's."""
        update: dict[str, Any] = {}
        if nodes.assembly.memory is not None:
            memory = nodes.assembly.memory
            update = yield from io(memory.flush, memory.aflush, state, rt, config)
        compact = nodes.assembly.compact
        done = yield from io(compact.invoke, compact.ainvoke, applied(state, update), rt, config)
        return merged(update, done)

    def _before_model(
        self, state: AgentState, runtime: Runtime[Any]
    ) -> Flow[dict[str, Any] | None]:
        yield from self._start_in("before_model", runtime)
        nodes = self.nodes() if self._called else None
        if nodes is None:
            return None  # the agent's model or prompt is not known yet: the model call compacts
        config = _config()
        rt = ctx_runtime(runtime, config)
        if nodes.assembly.compact.route(state, rt) != "compact":
            return None
        return (yield from self._compaction(nodes, state, rt, config))

    def compact(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The ``compact`` node's step when its router sends the run there (flush first)."""
        return run(self._before_model(state, runtime))

    async def acompact(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async :meth:`compact`."""
        return await arun(self._before_model(state, runtime))

    # -- wrap_model_call: the model node around the agent's call -------------------

    def _call(
        self, request: ModelRequest[Any]
    ) -> tuple[_Nodes, Runtime[Context], Settings, AgentState]:
        self.learn_tools(request.tools)
        self.learn_prompt(request.system_prompt)
        nodes = self.nodes(request.model)
        assert nodes is not None  # a model was given
        rt = ctx_runtime(request.runtime, _config())
        settings = replace(
            nodes.assembly.model.settings_of(rt), system_prompt=request.system_prompt or NO_PROMPT
        )
        return nodes, rt, settings, request.state  # type: ignore[return-value]

    def _request(
        self, request: ModelRequest[Any], nodes: _Nodes, call: ModelCall, settings: Settings
    ) -> ModelRequest[Any]:
        system, messages = _split_system(nodes.assembly.model.sent(call.request, settings))
        chosen = call.tool_names
        tools = [t for t in request.tools if not isinstance(t, BaseTool) or t.name in chosen]
        # In the graph's binding order (the agent's tools, then each part's), not
        # create_agent's (the middleware's first): the same schemas, in the same bytes.
        rank = {t.name: index for index, t in enumerate(nodes.assembly.tools)}
        tools.sort(
            key=lambda t: rank.get(t.name, len(rank)) if isinstance(t, BaseTool) else len(rank)
        )
        return request.override(system_message=system, messages=messages, tools=tools)

    def _model_step(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Any]
    ) -> Flow[ModelResult]:
        """The ``model`` node's step around ``handler`` (the agent's own model call).

        A compaction that ``before_model`` could not run (the host learns the agent's
        model at its first call in a process) runs first, flush included.
        """
        yield from self._start_in("model_call", request.runtime)
        nodes, rt, settings, state = self._call(request)
        first: dict[str, Any] = {}
        if nodes.assembly.compact.route(state, rt) == "compact":
            first = yield from self._compaction(nodes, state, rt, _config())
            state = applied(state, first)
        model = nodes.assembly.model
        store = rt.store
        before = yield from io(model.before_parts, model.abefore_parts, state, settings, store)
        call = model.prepare(state, settings, before)
        if not isinstance(call, ModelCall):
            return _answered(merged(first, call), None)
        sent = self._request(request, nodes, call, settings)
        response = yield Io(partial(handler, sent), partial(handler, sent))
        update = model.reply_update(_reply(response), call)
        answered = invalid_calls(applied(state, update))
        return _answered(merged(first, merged(update, answered or {})), response)

    def model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResult:
        """Build the request as the ``model`` node does, call ``handler``, make its update."""
        return run(self._model_step(request, handler))

    async def amodel_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResult:
        """Async :meth:`model_call`."""
        return await arun(self._model_step(request, handler))

    # -- wrap_tool_call: the tools node's wrappers ------------------------------------

    def tool_call(self, request: ToolCallRequest, handler: Execute) -> ToolResult:
        """Run a tool call through the wrappers the graph's ``tools`` node has.

        The wrappers and the parts' tools see the run's ``Context`` (also when the
        identity came from another context or from ``configurable``); the agent's own
        tools get the run's own context back.
        """
        nodes = self.nodes()
        if nodes is None:
            return handler(request)
        own = request.runtime.context

        def execute(call: ToolCallRequest) -> ToolResult:
            return handler(self._for_tool(call, own))

        return nodes.tools.wrap_tool_call(ctx_tool_request(request), execute)

    async def atool_call(self, request: ToolCallRequest, handler: AsyncExecute) -> ToolResult:
        """Async :meth:`tool_call`."""
        nodes = self.nodes()
        if nodes is None:
            return await handler(request)
        own = request.runtime.context

        async def execute(call: ToolCallRequest) -> ToolResult:
            return await handler(self._for_tool(call, own))

        return await nodes.tools.awrap_tool_call(ctx_tool_request(request), execute)

    def _for_tool(self, call: ToolCallRequest, own: object) -> ToolCallRequest:
        """``call`` with the context its tool expects: ``Context`` for a part's tool."""
        if call.tool_call["name"] in self._part_tools:
            return call
        return with_context(call, own)

    # -- after_agent: extract_memory ---------------------------------------------------

    def _finish(self, state: AgentState, runtime: Runtime[Any]) -> Flow[dict[str, Any] | None]:
        nodes = self.nodes()
        if nodes is None or nodes.assembly.memory is None:
            return None
        config = _config()
        rt = ctx_runtime(runtime, config)
        memory = nodes.assembly.memory
        update = yield from io(memory.extract_turn, memory.aextract_turn, state, rt, config)
        return update or None

    def finish(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """When a run ends: the ``extract_memory`` node's step."""
        return run(self._finish(state, runtime))

    async def afinish(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Async :meth:`finish`."""
        return await arun(self._finish(state, runtime))


def invalid_calls(state: AgentState) -> dict[str, Any] | None:
    """The ``invalid_calls`` node's update when the answer has unreadable calls, else None.

    The answer comes back with every call answered or pending, so ``create_agent`` runs
    its readable calls, or, with none, calls the model again (the compaction check
    first), as the graph's ``invalid_calls`` node routes.
    """
    if not has_invalid_calls(state.get("messages") or []):
        return None
    return dict(invalid_calls_node(state))


def _reply(response: ModelResponse[Any] | AIMessage) -> AIMessage:
    """The model's answer in a handler's response."""
    if isinstance(response, AIMessage):
        return response
    answers = [m for m in response.result if isinstance(m, AIMessage)]
    if not answers:
        raise TypeError("the agent's model call returned no AIMessage")
    return answers[-1]


def _answered(
    update: dict[str, Any], response: ModelResponse[Any] | AIMessage | None
) -> ModelResult:
    """The model node's update as a model response plus a state command.

    The answer (the step's last ``AIMessage``) is the response; the messages the step adds
    around it (a compaction's before, the error results of unreadable calls after) and
    every other key go in the command, applied after the answer with the state's
    reducers, so the answer is repeated in its place among the command's messages.
    """
    by_id = {m.id or id(m): m for m in update.pop("messages", [])}
    messages: list[AnyMessage] = list(by_id.values())
    answer = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    structured = getattr(response, "structured_response", None)
    result = ModelResponse(
        result=[answer] if answer is not None else [], structured_response=structured
    )
    if [m for m in messages if m is not answer]:
        update["messages"] = messages
    if not update:
        return result
    return ExtendedModelResponse(model_response=result, command=Command(update=update))
