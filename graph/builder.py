"""Assembles the ctxgraph ``StateGraph`` from models, tools and settings."""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import get_runtime
from langgraph.store.base import BaseStore

from ctxgraph.graph.input_check import attach_input_check
from ctxgraph.nodes.compaction.node import CompactNode
from ctxgraph.nodes.history_tool import read_history_tool
from ctxgraph.nodes.memory.load import MemoryLoader
from ctxgraph.nodes.memory.node import MemoryNodes
from ctxgraph.nodes.memory.search_tool import memory_search_tool
from ctxgraph.nodes.model import ModelNode
from ctxgraph.nodes.request import RequestBuilder
from ctxgraph.nodes.routing import route_after_model
from ctxgraph.nodes.tools import tools_node
from ctxgraph.state.context import Context
from ctxgraph.state.graph_state import AgentState, InputState, OutputState
from ctxgraph.state.models import Models
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter

Graph = CompiledStateGraph[AgentState, Context, InputState, OutputState]
Builder = StateGraph[AgentState, Context, InputState, OutputState]

_Handler = Callable[..., Any]
"""A node body: ``(state, runtime)``, or ``(state, runtime, config)``."""
_AsyncHandler = Callable[..., Awaitable[Any]]
"""The async twin of ``_Handler``."""


def _node(sync: _Handler, async_: _AsyncHandler, *, name: str) -> RunnableLambda[AgentState, Any]:
    """A graph node whose ``invoke`` runs ``sync`` and whose ``ainvoke`` runs ``async_``.

    Both bodies get the state and, as LangGraph gives plain function nodes, the run's
    ``runtime`` and (when they declare a ``config`` parameter) its ``config``.
    """
    sync_config = "config" in inspect.signature(sync).parameters
    async_config = "config" in inspect.signature(async_).parameters

    def run(state: AgentState, config: RunnableConfig) -> Any:
        extra = {"config": config} if sync_config else {}
        return sync(state, runtime=get_runtime(Context), **extra)

    async def arun(state: AgentState, config: RunnableConfig) -> Any:
        extra = {"config": config} if async_config else {}
        return await async_(state, runtime=get_runtime(Context), **extra)

    return RunnableLambda(run, afunc=arun, name=name)


def create_builder(
    *,
    models: Models,
    tools: Sequence[BaseTool] = (),
    settings: Settings | None = None,
) -> Builder:
    """Return the uncompiled graph, so callers can compile it with their own persistence.

    With ``settings.memory_extraction == "off"`` the graph has no extraction nodes (no
    ``flush``, no ``extract_memory``), and with ``settings.memory_mode == "off"`` no
    ``load_memory`` node and no ``memory_search`` tool; otherwise per-run settings choose.
    """
    settings = settings or Settings()
    with_loading = settings.memory_mode != "off"
    all_tools = _with_builtin_tools(tools, settings, memory_search=with_loading)
    counter = TokenCounter()
    requests = RequestBuilder(all_tools, counter)
    model = ModelNode(models.main, all_tools, settings, requests)
    compact = CompactNode(models, requests, settings, counter)
    with_memory = settings.memory_extraction != "off"

    builder: Builder = StateGraph(
        AgentState, context_schema=Context, input_schema=InputState, output_schema=OutputState
    )
    builder.add_node("compact", _node(compact.invoke, compact.ainvoke, name="compact"))
    builder.add_node("model", _node(model.invoke, model.ainvoke, name="model"))
    builder.add_node("tools", tools_node(all_tools))
    builder.add_edge("compact", "model")
    if with_memory:
        memory = MemoryNodes(models, compact, settings)
        builder.add_node("flush", _node(memory.flush, memory.aflush, name="flush"))
        builder.add_node(
            "extract_memory",
            _node(memory.extract_turn, memory.aextract_turn, name="extract_memory"),
        )
        builder.add_edge("flush", "compact")
        builder.add_edge("extract_memory", END)
    before_model: dict[Hashable, str] = {
        "compact": "flush" if with_memory else "compact",
        "model": "model",
    }
    finish = "extract_memory" if with_memory else END
    if with_loading:
        loader = MemoryLoader(settings)
        builder.add_node("load_memory", _node(loader.load, loader.aload, name="load_memory"))
        builder.add_edge(START, "load_memory")
        builder.add_conditional_edges("load_memory", compact.route, before_model)
    else:
        builder.add_conditional_edges(START, compact.route, before_model)
    builder.add_conditional_edges("model", route_after_model, {"tools": "tools", "finish": finish})
    builder.add_conditional_edges("tools", compact.route, before_model)
    return builder


def _with_builtin_tools(
    tools: Sequence[BaseTool], settings: Settings, *, memory_search: bool
) -> list[BaseTool]:
    """The caller's tools plus ``read_history`` (and ``memory_search``); names must be unique."""
    all_tools = [*tools, read_history_tool()]
    if memory_search:
        all_tools.append(memory_search_tool(settings))
    names = [t.name for t in all_tools]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"tool names must be unique; {duplicates} appear more than once")
    return all_tools


def build_graph(
    *,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    store: BaseStore | None = None,
    models: Models | None = None,
    tools: Sequence[BaseTool] = (),
    settings: Settings | None = None,
) -> Graph:
    """Build and compile the graph; ``models=None`` reads the models from the environment."""
    builder = create_builder(
        models=models if models is not None else Models.from_env(os.environ),
        tools=tools,
        settings=settings,
    )
    return compile_graph(builder, checkpointer=checkpointer, store=store)


def compile_graph(
    builder: Builder,
    *,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    store: BaseStore | None = None,
) -> Graph:
    """Compile a builder from ``create_builder`` with input checks attached."""
    compiled = builder.compile(checkpointer=checkpointer, store=store, name="ctxgraph")
    attach_input_check(compiled)
    return compiled
