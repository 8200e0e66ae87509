"""The input check sits in the compiled graph's first task, or compiling fails loudly."""

from __future__ import annotations

import pytest
from langchain_core.messages import ToolMessage

from ctxgraph.graph import build_graph
from ctxgraph.graph.input_check import InputCheckLayoutError, attach_input_check
from ctxgraph.state import Context, MalformedMessagesError
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools


def test_graph_without_persistence_rejects_malformed_input() -> None:
    graph = build_graph(models=demo_models(), tools=demo_tools())
    with pytest.raises(MalformedMessagesError, match="got int: 5"):
        graph.invoke({"messages": 5}, context=Context(user_id="u1"))
    orphan = ToolMessage(content="1", tool_call_id="call_none")
    with pytest.raises(MalformedMessagesError, match="'call_none'"):
        graph.invoke({"messages": [("user", "hi"), orphan]}, context=Context(user_id="u1"))


async def test_async_run_rejects_malformed_input() -> None:
    graph = build_graph(models=demo_models(), tools=demo_tools())
    with pytest.raises(MalformedMessagesError, match="got NoneType"):
        await graph.ainvoke({"messages": None}, context=Context(user_id="u1"))


def test_unexpected_start_layout_fails_naming_the_module() -> None:
    graph = build_graph(models=demo_models(), tools=demo_tools())
    # Already attached: __start__ now reads two channels, not the layout LangGraph compiles.
    with pytest.raises(InputCheckLayoutError, match=r"ctxgraph\.graph\.input_check"):
        attach_input_check(graph)
