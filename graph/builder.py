"""Assembles the ctxgraph ``StateGraph`` from models, tools and settings."""

from __future__ import annotations

import os
from collections.abc import Sequence

from langchain_core.tools import BaseTool
from langgraph._internal._runnable import RunnableCallable
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore

from graph.input_check import attach_input_check
from nodes.model import ModelNode
from nodes.routing import route_after_model
from nodes.tools import tools_node
from state.context import Context
from state.graph_state import AgentState, InputState, OutputState
from state.models import Models
from state.settings import Settings
from state.tokens import TokenCounter

Graph = CompiledStateGraph[AgentState, Context, InputState, OutputState]
Builder = StateGraph[AgentState, Context, InputState, OutputState]


def create_builder(
    *,
    models: Models,
    tools: Sequence[BaseTool] = (),
    settings: Settings | None = None,
) -> Builder:
    """Return the uncompiled graph, so callers can compile it with their own persistence."""
    settings = settings or Settings()
    counter = TokenCounter()
    model = ModelNode(models.main, tools, settings, counter)

    builder: Builder = StateGraph(
        AgentState, context_schema=Context, input_schema=InputState, output_schema=OutputState
    )
    builder.add_node("model", RunnableCallable(model.invoke, model.ainvoke, name="model"))
    builder.add_node("tools", tools_node(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route_after_model, {"tools": "tools", "finish": END})
    builder.add_edge("tools", "model")
    return builder


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
