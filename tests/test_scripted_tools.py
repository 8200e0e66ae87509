"""The offline demo model calls only the tools bound to it."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool

from ctxgraph.graph import build_graph
from ctxgraph.state import Context, Models
from ctxgraph.state.demo_replies import demo_chat_reply, demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel, bound_tool_names

CTX = Context(user_id="u1")


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order by its id."""
    return f"order {order_id}: shipped"


def scripted() -> Models:
    return Models.from_env({"CTXGRAPH_MODEL": "scripted"})


def tool_calls(messages: list[BaseMessage]) -> list[str]:
    return [c["name"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]


def test_without_a_calculator_bound_arithmetic_is_answered_in_text() -> None:
    models = scripted()
    graph = build_graph(models=models, tools=[lookup_order])

    result = graph.invoke({"messages": [HumanMessage("What is 6 * 7?")]}, context=CTX)

    main = models.main
    assert isinstance(main, ScriptedChatModel)
    bound = bound_tool_names(main.tool_requests[0])
    assert "lookup_order" in bound and "calculator" not in bound
    calls = tool_calls(result["messages"])
    assert "calculator" not in calls
    assert set(calls) <= bound
    answer = result["messages"][-1]
    assert isinstance(answer, AIMessage) and not answer.tool_calls
    assert answer.content == (
        "6 * 7 = 42 (no calculator tool is bound, so I worked it out myself)."
    )


def test_with_the_calculator_bound_it_is_called() -> None:
    models = scripted()
    graph = build_graph(models=models, tools=demo_tools())

    result = graph.invoke({"messages": [HumanMessage("What is 6 * 7?")]}, context=CTX)

    assert tool_calls(result["messages"]) == ["calculator"]
    assert result["messages"][-1].content == "The calculator says 42."


def test_a_delegation_without_the_task_tool_is_an_ordinary_message() -> None:
    user = HumanMessage("Ask the researcher to find the release date", id="abcdef123456")
    assert demo_chat_reply([user]).tool_calls[0]["name"] == "task"
    reply = demo_chat_reply([user], frozenset({"lookup_order"}))
    assert not reply.tool_calls
    assert str(reply.content).startswith("Noted:")


def test_the_tool_responder_gets_the_bound_names_and_scripts_play_as_written() -> None:
    seen: list[frozenset[str]] = []

    def reply(messages: list[BaseMessage], tools: frozenset[str]) -> AIMessage:
        seen.append(tools)
        return AIMessage("done")

    unbound = AIMessage("", tool_calls=[{"name": "anything", "args": {}, "id": "c1"}])
    model = ScriptedChatModel(script=[unbound], tool_responder=reply)
    bound = model.bind_tools([lookup_order])
    first = bound.invoke("hi")
    assert [c["name"] for c in first.tool_calls] == ["anything"]  # the script says so
    assert bound.invoke("again").content == "done"
    assert model.invoke("plain").content == "done"
    assert seen == [frozenset({"lookup_order"}), frozenset()]


def test_one_responder_only() -> None:
    with pytest.raises(TypeError, match="responder= or tool_responder=, not both"):
        ScriptedChatModel(
            responder=lambda messages: AIMessage("a"),
            tool_responder=lambda messages, tools: AIMessage("b"),
        )
