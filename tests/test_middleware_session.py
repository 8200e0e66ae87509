"""A long ``create_agent`` session with ctxgraph's middleware, on the embedded Postgres.

Three hundred turns, each a tool call and a reply, with low triggers: every request the
agent's model receives stays under the triggers and is one a provider accepts (no call
without its result right after it, no result without its call); every message the
compactions folded is in the thread's archive, once and unchanged, and the archive
verifies against the thread's mark.
"""

from __future__ import annotations

import logging

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.messages import message_origin
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.store.persistence.archive import verify_thread
from ctxgraph.store.persistence.connection import Persistence
from tests.support.agents import (
    archived,
    config,
    message_key,
    provider_problems,
    session_agent,
    session_keys,
    session_reply,
    user_turn,
)
from tests.support.scripted import demo_summarizer

TURNS = 300
SETTINGS = Settings(
    trigger_messages=20, keep_messages=6, trigger_tokens=2_500, memory_extraction="off"
)
CTX = Context(user_id="u-session")
REPORT = " The carrier's report lists every scan, depot and handover of the parcel." * 40


@tool
def lookup(order_id: str) -> str:
    """Look up an order."""
    number = int(order_id.removeprefix("A-"))
    report = REPORT if number % 10 == 0 else ""  # every tenth result is about 600 tokens
    return f"Order {order_id}: shipped from the north dock.{report}"


def test_three_hundred_turns_stay_under_the_triggers_and_every_folded_message_is_archived(
    persistence: Persistence, thread_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    main = ScriptedChatModel(responder=session_reply)
    summarizer = demo_summarizer()
    agent = session_agent(
        main,
        SETTINGS,
        persistence.checkpointer,
        persistence.store,
        models=Models(main=main, summary=summarizer),
        tools=[lookup],
    )
    with caplog.at_level(logging.WARNING, logger="ctxgraph"):
        for n in range(1, TURNS + 1):
            agent.invoke(user_turn(n), config(thread_id), context=CTX)

    # Every request the model answered: one per call and one per reply, each under the
    # triggers and valid for a provider.
    assert len(main.requests) == 2 * TURNS
    counter = TokenCounter()
    tokens = [
        counter.count_messages(request) + counter.count_tools(tools)
        for request, tools in zip(main.requests, main.tool_requests, strict=True)
    ]
    assert max(tokens) < SETTINGS.trigger_tokens, max(tokens)
    assert max(len(request) for request in main.requests) < SETTINGS.trigger_messages
    problems = {i: provider_problems(r) for i, r in enumerate(main.requests)}
    assert {i: found for i, found in problems.items() if found} == {}
    assert [r.getMessage() for r in caplog.records if r.name.startswith("ctxgraph")] == []

    state = agent.get_state(config(thread_id)).values
    assert {"summary", "compaction"} <= set(state)
    mark = state["compaction"]
    assert mark["version"] > 50  # the triggers fired again and again
    assert summarizer.calls == mark["version"]  # one summary call per compaction
    assert state["summary"]["session_intent"] and not state["summary"].get("degraded")
    # The main model reads the record: the last request opens with the summary.
    assert message_origin(main.requests[-1][0]) == "summary"

    # The archive and the window together hold every message once, in order.
    folded = archived(persistence.store, thread_id)
    window = list(state["messages"])
    assert [message_key(m) for m in folded + window] == session_keys(range(1, TURNS + 1))
    assert mark["cursor"] == len(folded)
    sent = {f"h{n}": user_turn(n)["messages"][0].content for n in range(1, TURNS + 1)}
    for message in folded:
        if isinstance(message, HumanMessage):
            assert message.content == sent[str(message.id)]
        if isinstance(message, ToolMessage):
            order = message.tool_call_id.removeprefix("c")
            assert message.content == lookup.invoke({"order_id": f"A-{order}"})
    report = verify_thread(persistence.store, thread_id, mark)
    assert report.ok, report
    assert report.versions_checked == mark["version"]
