"""What a real model writes, through ``create_agent`` with ctxgraph's middleware.

The recorded answers of a small local model (``../shared/data/real_model/``) replayed as
the agent's model: a tool call written as text runs the tool, as in ctxgraph's graph; a
call of a tool that is not bound stays the answer; a call cut off at the output limit is
answered with an error result and the model is asked again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph import Context, Settings
from ctxgraph.middleware import ctxgraph_middleware
from ctxgraph.nodes.text_tool_calls import CALL_ID_PREFIX
from ctxgraph.state.scripted_model import ScriptedChatModel
from tests.test_text_tool_calls import (
    FENCED,
    RECOVERED_SEQS,
    TOOLS,
    WARNED_SEQS,
    recorded_main_answers,
)

CTX = Context(user_id="u-answers")


def agent_for(model: ScriptedChatModel) -> Any:
    return create_agent(
        model,
        TOOLS,
        middleware=ctxgraph_middleware(settings=Settings(memory_extraction="off")),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        context_schema=Context,
    )


def turn(model: ScriptedChatModel, use_async: bool = False) -> list[BaseMessage]:
    agent = agent_for(model)
    config: Any = {"configurable": {"thread_id": "t-answers"}}
    question = {"messages": [("user", "Where is my order?")]}
    if use_async:
        asyncio.run(agent.ainvoke(question, config, context=CTX))
    else:
        agent.invoke(question, config, context=CTX)
    return list(agent.get_state(config).values["messages"])


def recorded(seqs: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in recorded_main_answers() if r["seq"] in seqs]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_every_recorded_call_written_as_text_runs_the_tool(use_async: bool) -> None:
    records = recorded(RECOVERED_SEQS)
    assert len(records) == len(RECOVERED_SEQS)
    for record in records:
        _, order = RECOVERED_SEQS[record["seq"]]
        model = ScriptedChatModel(script=[record["answer"]["text"], "Here it is."])
        messages = turn(model, use_async)
        assert [m.type for m in messages] == ["human", "ai", "tool", "ai"], record["seq"]
        call, result = messages[1], messages[2]
        assert isinstance(call, AIMessage) and isinstance(result, ToolMessage)
        [made] = call.tool_calls
        assert (made["name"], made["args"]) == ("lookup_order", {"order_id": order})
        assert str(made["id"]).startswith(CALL_ID_PREFIX)
        assert result.tool_call_id == made["id"] and order in result.text


def test_a_recorded_call_of_an_unbound_tool_stays_the_answer() -> None:
    [record] = recorded(WARNED_SEQS)
    text = record["answer"]["text"]
    model = ScriptedChatModel(script=[text])
    messages = turn(model)
    assert model.calls == 1
    assert [m.type for m in messages] == ["human", "ai"] and messages[-1].content == text


def test_a_call_cut_off_at_the_output_limit_gets_an_error_and_the_model_again() -> None:
    cut = AIMessage(FENCED, response_metadata={"finish_reason": "length"})
    model = ScriptedChatModel(script=[cut, "Sorry, let me try again later."])
    messages = turn(model)
    assert model.calls == 2
    error = messages[2]
    assert isinstance(error, ToolMessage) and error.status == "error"
    assert "cut off at the model's output token limit" in error.text
    # The second request shows the model its unusable call with the error answering it.
    second = model.requests[1]
    assert [m.type for m in second[-2:]] == ["ai", "tool"]
    assert messages[-1].content == "Sorry, let me try again later."
