"""Malformed input gets a clear error and leaves the persisted thread untouched."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from ctxgraph.graph import build_graph
from ctxgraph.state import Context, MalformedMessagesError
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.store.persistence.connection import Persistence

BAD_INPUTS: list[tuple[Any, str]] = [
    (5, r"'messages' must be a list of messages .* got int: 5"),
    (None, r"got NoneType"),
    ([{"content": "no role"}], r"cannot read the 'messages' input: .*'role' and 'content'"),
    (
        [{"role": "tool", "content": "42", "tool_call_id": "call_missing"}],
        r"tool_call_id 'call_missing', but no assistant message before it made that call",
    ),
    (
        [
            ToolMessage(content="early", tool_call_id="call_late"),
            AIMessage(
                content="", tool_calls=[{"name": "calculator", "args": {}, "id": "call_late"}]
            ),
        ],
        r"tool_call_id 'call_late', but no assistant message before it",
    ),
]


@pytest.mark.parametrize(("messages", "pattern"), BAD_INPUTS)
def test_malformed_input_is_rejected_and_thread_survives(
    persistence: Persistence, thread_id: str, messages: Any, pattern: str
) -> None:
    graph = build_graph(
        models=demo_models(),
        tools=demo_tools(),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )
    config = {"configurable": {"thread_id": thread_id}}
    ctx = Context(user_id="u1")
    graph.invoke({"messages": [("user", "What is 2 * 4?")]}, config, context=ctx)
    before = graph.get_state(config).values["messages"]

    with pytest.raises(MalformedMessagesError, match=pattern):
        graph.invoke({"messages": messages}, config, context=ctx)

    # The failed call wrote nothing: the state reads back as before and the thread goes on.
    assert graph.get_state(config).values["messages"] == before
    result = graph.invoke({"messages": [("user", "What did I say before?")]}, config, context=ctx)
    assert "What is 2 * 4?" in result["messages"][-1].content
    assert len(result["messages"]) == len(before) + 2


def test_tool_result_for_a_call_already_in_state_is_accepted(
    persistence: Persistence, thread_id: str
) -> None:
    """A result answering a call that the thread already holds is valid input."""
    graph = build_graph(
        models=demo_models(),
        tools=demo_tools(),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )
    config = {"configurable": {"thread_id": thread_id}}
    pending = AIMessage(
        content="", tool_calls=[{"name": "calculator", "args": {}, "id": "call_open"}]
    )
    graph.update_state(config, {"messages": [("user", "compute"), pending]}, as_node="model")
    graph.invoke(
        {"messages": [ToolMessage(content="7", tool_call_id="call_open")]},
        config,
        context=Context(user_id="u1"),
    )
    messages = graph.get_state(config).values["messages"]
    assert messages[-1].content == "The calculator says 7."
