"""Who a ``create_agent`` run is for: a clear error without a user, another user refused.

The user comes from ``context=Context(...)``, from an application's own context with a
``user_id``, or from ``configurable``; without one the run fails before any model call,
naming each way to pass it. The first user to run a thread owns it; another user's run
on it is refused with ``ThreadOwnerError`` before any model call, and with
``checked_agent`` before anything is saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.middleware import checked_agent, ctxgraph_middleware
from ctxgraph.state import Context, ContextError, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.ownership import ThreadOwnerError
from tests.support.agents import config, lookup

SETTINGS = Settings(memory_extraction="off")
HELLO = {"messages": [("user", "Hello.")]}


@dataclass
class AppContext:
    """An application's own run context that happens to carry the user."""

    user_id: str
    locale: str = "en"


def agent_for(model: ScriptedChatModel, context_schema: Any = None) -> Any:
    return create_agent(
        model,
        [lookup],
        middleware=ctxgraph_middleware(settings=SETTINGS),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        context_schema=context_schema,
    )


def answering() -> ScriptedChatModel:
    return ScriptedChatModel(responder=lambda _: AIMessage("Hi."))


async def test_a_run_without_a_user_fails_before_any_call_naming_how_to_pass_one() -> None:
    model = answering()
    agent = agent_for(model)
    with pytest.raises(ContextError) as sync_error:
        agent.invoke(HELLO, config("t-none"))
    with pytest.raises(ContextError) as async_error:
        await agent.ainvoke(HELLO, config("t-none"))
    for error in (sync_error.value, async_error.value):
        message = str(error)
        assert "context=Context(user_id=...)" in message
        assert "context_schema=Context" in message
        assert "config={'configurable': {'user_id': ...}}" in message
    assert model.calls == 0


def test_an_invalid_user_id_is_refused() -> None:
    model = answering()
    agent = agent_for(model, Context)
    with pytest.raises(ContextError, match="user_id"):
        agent.invoke(HELLO, {"configurable": {"thread_id": "t-bad", "user_id": "a/b"}})
    assert model.calls == 0


async def test_every_way_of_naming_the_user_claims_the_thread_and_others_are_refused() -> None:
    model = answering()
    agent = agent_for(model, AppContext)
    # The owner, named three ways: the application's context, ctxgraph's, configurable.
    agent.invoke(HELLO, config("t-alice"), context=AppContext(user_id="alice"))
    agent.invoke(HELLO, config("t-alice"), context=Context(user_id="alice"))
    by_config = {"configurable": {"thread_id": "t-alice", "user_id": "alice"}}
    await agent.ainvoke(HELLO, by_config)
    assert model.calls == 3
    assert len(agent.get_state(config("t-alice")).values["messages"]) == 6

    with pytest.raises(ThreadOwnerError, match="'t-alice' belongs to another user, not 'bob'"):
        agent.invoke(HELLO, config("t-alice"), context=AppContext(user_id="bob"))
    with pytest.raises(ThreadOwnerError):
        await agent.ainvoke(HELLO, {"configurable": {"thread_id": "t-alice", "user_id": "bob"}})
    assert model.calls == 3
    # Bob's own thread is his.
    agent.invoke(HELLO, config("t-bob"), context=AppContext(user_id="bob"))
    with pytest.raises(ThreadOwnerError):
        agent.invoke(HELLO, config("t-bob"), context=AppContext(user_id="alice"))


def test_a_refused_run_stops_at_the_first_hook_and_calls_no_model() -> None:
    # create_agent saves a run's input before its first hook: the refused run's message
    # is in the thread (the documented difference), but no model ran and no answer came.
    model = answering()
    agent = agent_for(model, AppContext)
    agent.invoke(HELLO, config("t-alice"), context=AppContext(user_id="alice"))
    calls = len(model.requests)
    with pytest.raises(ThreadOwnerError):
        agent.invoke(HELLO, config("t-alice"), context=AppContext(user_id="bob"))
    assert len(model.requests) == calls
    messages = agent.get_state(config("t-alice")).values["messages"]
    assert [m.type for m in messages] == ["human", "ai", "human"]


@pytest.mark.parametrize("use_async", [False, True])
async def test_checked_agent_refuses_before_anything_is_saved(use_async: bool) -> None:
    model = answering()
    agent = checked_agent(agent_for(model, Context))
    agent.invoke(HELLO, config("t-checked"), context=Context(user_id="alice"))
    kept = agent.get_state(config("t-checked"))
    calls = len(model.requests)
    with pytest.raises(ThreadOwnerError):
        if use_async:
            await agent.ainvoke(HELLO, config("t-checked"), context=Context(user_id="bob"))
        else:
            agent.invoke(HELLO, config("t-checked"), context=Context(user_id="bob"))
    after = agent.get_state(config("t-checked"))
    assert after.values["messages"] == kept.values["messages"]
    assert (
        after.config["configurable"]["checkpoint_id"]
        == kept.config["configurable"]["checkpoint_id"]
    )
    assert len(model.requests) == calls


def test_checked_agent_refuses_a_tool_result_without_its_call() -> None:
    agent = checked_agent(agent_for(answering(), Context))
    orphan = {"messages": [{"role": "tool", "content": "42", "tool_call_id": "nope"}]}
    with pytest.raises(ValueError, match="tool"):
        agent.invoke(orphan, config("t-orphan"), context=Context(user_id="alice"))
    assert not agent.get_state(config("t-orphan")).values.get("messages")
