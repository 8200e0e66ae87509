"""ctxgraph embedded as one node of a parent graph that owns its own state.

Each test runs twice: with the compiled graph itself as the node (``build_graph()``,
which keeps no state of its own between parent turns) and with ``as_subgraph()``, which
keeps its state under the parent's checkpointer. For these short threads, which never
compact, the parent sees the same messages either way.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Literal

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import as_subgraph, build_graph
from ctxgraph.state import Context, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel

CALCULATION = "What is 17 * 23?"
RECALL = "What did I say before?"
PARENT_RULES = "Rules supplied by the parent's run context."


class ParentState(MessagesState):
    """The parent's state: the shared ``messages`` plus a key only the parent writes."""

    steps: int


def count_step(state: ParentState) -> dict[str, Any]:
    return {"steps": state.get("steps", 0) + 1}


Mode = Literal["compiled", "as_subgraph"]


@pytest.fixture(params=["compiled", "as_subgraph"])
def mode(request: pytest.FixtureRequest) -> Mode:
    """How ctxgraph is added to the parent."""
    value: Mode = request.param
    return value


def build_parent(mode: Mode) -> tuple[CompiledStateGraph[Any, Any, Any, Any], ScriptedChatModel]:
    """Parent ``count -> agent``, where ``agent`` is ctxgraph added the ``mode`` way."""
    models = demo_models()
    assert isinstance(models.main, ScriptedChatModel)
    builder = StateGraph(ParentState, context_schema=Context)
    builder.add_node("count", count_step)
    if mode == "compiled":
        builder.add_node("agent", build_graph(models=models, tools=demo_tools()))
    else:
        builder.add_node("agent", as_subgraph(models=models, tools=demo_tools()))
    builder.add_edge(START, "count")
    builder.add_edge("count", "agent")
    builder.add_edge("agent", END)
    store = InMemoryStore() if mode == "as_subgraph" else None
    return builder.compile(checkpointer=InMemorySaver(), store=store), models.main


def new_thread() -> RunnableConfig:
    return {"configurable": {"thread_id": f"parent-{uuid.uuid4().hex[:12]}"}}


def context() -> Context:
    return Context(user_id="parent-user", settings=Settings(system_prompt=PARENT_RULES))


def user(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=text)]}


def assert_no_duplicates(messages: Sequence[BaseMessage]) -> None:
    ids = [m.id for m in messages]
    assert None not in ids, ids
    assert len(set(ids)) == len(ids), ids
    shapes = [
        (m.type, m.text, tuple(c["id"] for c in getattr(m, "tool_calls", []))) for m in messages
    ]
    assert len(set(shapes)) == len(shapes), shapes


def assert_calculation_turn(messages: Sequence[BaseMessage]) -> None:
    """Exactly: the question, the calculator call, its result and the final answer."""
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, ToolMessage, AIMessage], (
        messages
    )
    question, call, result, answer = messages
    assert question.text == CALCULATION
    assert isinstance(call, AIMessage)
    assert [c["name"] for c in call.tool_calls] == ["calculator"]
    assert call.tool_calls[0]["args"] == {"expression": "17 * 23"}
    assert isinstance(result, ToolMessage)
    assert result.tool_call_id == call.tool_calls[0]["id"]
    assert result.status == "success"
    assert result.text == "391"
    assert isinstance(answer, AIMessage)
    assert not answer.tool_calls
    assert "391" in answer.text


def assert_recall_turn(messages: Sequence[BaseMessage]) -> None:
    assert [type(m) for m in messages] == [HumanMessage, AIMessage], messages
    question, answer = messages
    assert question.text == RECALL
    assert isinstance(answer, AIMessage)
    assert not answer.tool_calls
    assert answer.text == f'Earlier in this thread you said: "{CALCULATION}".'


def assert_model_got_parent_context(model: ScriptedChatModel, calls: int) -> None:
    """The child ran under the parent's context: its settings override reached the model."""
    assert model.calls == calls
    for request in model.requests:
        assert request[0].type == "system"
        assert request[0].text == PARENT_RULES


def test_child_messages_land_once_in_parent_state(mode: Mode) -> None:
    parent, model = build_parent(mode)
    config = new_thread()

    result = parent.invoke(user(CALCULATION), config, context=context())

    assert set(result) == {"messages", "steps"}
    assert result["steps"] == 1
    assert_calculation_turn(result["messages"])
    assert_no_duplicates(result["messages"])
    assert_model_got_parent_context(model, calls=2)

    saved = parent.get_state(config)
    assert saved.next == ()
    assert saved.values["steps"] == 1
    assert [m.id for m in saved.values["messages"]] == [m.id for m in result["messages"]]


def test_second_parent_turn_shows_child_the_first_turn(mode: Mode) -> None:
    parent, model = build_parent(mode)
    config = new_thread()

    first = parent.invoke(user(CALCULATION), config, context=context())
    second = parent.invoke(user(RECALL), config, context=context())

    assert second["steps"] == 2
    messages = second["messages"]
    assert len(messages) == 6, messages
    assert [m.id for m in messages[:4]] == [m.id for m in first["messages"]]
    assert_calculation_turn(messages[:4])
    assert_recall_turn(messages[4:])
    assert_no_duplicates(messages)
    # The recall request carried the whole first turn, not just the new question.
    assert [m.type for m in model.requests[-1]] == [
        "system",
        "human",
        "ai",
        "tool",
        "ai",
        "human",
    ]
    assert_model_got_parent_context(model, calls=3)
    assert parent.get_state(config).values["steps"] == 2


async def test_child_as_node_async(mode: Mode) -> None:
    parent, model = build_parent(mode)
    config = new_thread()

    first = await parent.ainvoke(user(CALCULATION), config, context=context())
    assert first["steps"] == 1
    assert_calculation_turn(first["messages"])
    assert_no_duplicates(first["messages"])

    second = await parent.ainvoke(user(RECALL), config, context=context())
    assert second["steps"] == 2
    assert len(second["messages"]) == 6, second["messages"]
    assert_calculation_turn(second["messages"][:4])
    assert_recall_turn(second["messages"][4:])
    assert_no_duplicates(second["messages"])
    assert_model_got_parent_context(model, calls=3)

    saved = await parent.aget_state(config)
    assert saved.values["steps"] == 2
    assert [m.id for m in saved.values["messages"]] == [m.id for m in second["messages"]]
