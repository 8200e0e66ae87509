"""Every memory model call reports its cost: in ``model_usage`` and on ``memory.extracted``.

The provider's ``usage_metadata`` when the reply carries it, else the local count of the
request (messages and the bound tool) and of the reply. An adversarial memory model that
answers nonsense still leaves the thread, its processed ids and the Store consistent.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.graph.demo import demo_reply
from ctxgraph.nodes.memory.extract import MEMORY_UPDATE_TOOL, MemoryExtractor
from ctxgraph.nodes.memory.worker import process_pending
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, message_text
from ctxgraph.store.memory.progress import ProcessedMessages
from ctxgraph.store.memory.queue import MemoryQueue
from ctxgraph.store.memory.repository import MemoryRepository

CONTEXT = Context(user_id="usage-user")
STATEMENT = "I prefer short answers."


def _fact(row_id: str, **overrides: Any) -> dict[str, Any]:
    fact: dict[str, Any] = {
        "key": "answer_length",
        "content": "Prefers short answers.",
        "category": "preference",
        "scope": "user",
        "durability": "durable",
        "authority": "descriptive",
        "confidence": 0.9,
        "evidence_message_id": row_id,
        "evidence_text": STATEMENT,
    }
    return {**fact, **overrides}


def _call(facts: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> AIMessage:
    args = {"facts": facts, "profile_updates": []}
    return AIMessage(
        content="",
        tool_calls=[{"name": "MemoryUpdate", "args": args, "id": "m"}],
        usage_metadata=usage,  # type: ignore[arg-type]
    )


def _graph(memory: ScriptedChatModel) -> tuple[Any, InMemoryStore]:
    store = InMemoryStore()
    graph = build_graph(
        models=Models(main=ScriptedChatModel(responder=demo_reply), memory=memory),
        tools=demo_tools(),
        settings=Settings(memory_extraction="inline"),
        checkpointer=InMemorySaver(),
        store=store,
    )
    return graph, store


def _turn(graph: Any, thread: str, text: str, row_id: str) -> tuple[dict[str, Any], list[Any]]:
    config = {"configurable": {"thread_id": thread}}
    events = [
        chunk
        for chunk in graph.stream(
            {"messages": [HumanMessage(text, id=row_id)]},
            config,
            context=CONTEXT,
            stream_mode="custom",
        )
        if str(chunk.get("event", "")).startswith("memory.")
    ]
    return graph.get_state(config).values, events


def test_provider_reported_usage_lands_in_state_and_on_the_event() -> None:
    usage = {
        "input_tokens": 812,
        "output_tokens": 57,
        "total_tokens": 869,
        "input_token_details": {"cache_read": 300},
    }
    memory = ScriptedChatModel(script=[_call([_fact("p1")], usage)])
    graph, store = _graph(memory)
    state, events = _turn(graph, "t-provider", STATEMENT, "p1")

    assert state["model_usage"]["memory"] == {
        "calls": 1,
        "input_tokens": 812,
        "output_tokens": 57,
        "cached_tokens": 300,
        "local_calls": 0,
    }
    assert events == [
        {
            "event": "memory.extracted",
            "thread_id": "t-provider",
            "at": "turn",
            "rows": 2,
            "facts": 1,
            "profile_sections": 0,
            "rejected": 0,
            "unreadable": None,
            "model_calls": 1,
            "local_calls": 0,
            "input_tokens": 812,
            "output_tokens": 57,
            "cached_tokens": 300,
            "usage_source": "provider",
        }
    ]
    assert [f.key for f in MemoryRepository(store).list_facts(CONTEXT)] == ["answer_length"]


def test_without_a_report_the_call_is_counted_locally() -> None:
    memory = ScriptedChatModel(script=[_call([_fact("p1")])])
    graph, _ = _graph(memory)
    state, events = _turn(graph, "t-local", STATEMENT, "p1")

    counter = TokenCounter()
    sent = counter.count_messages(memory.requests[0]) + counter.count_tools([MEMORY_UPDATE_TOOL])
    reply = counter.count_text(message_text(_call([_fact("p1")])))
    assert state["model_usage"]["memory"] == {
        "calls": 1,
        "input_tokens": sent,
        "output_tokens": reply,
        "cached_tokens": 0,
        "local_calls": 1,
    }
    [event] = events
    assert (event["input_tokens"], event["output_tokens"]) == (sent, reply)
    assert event["usage_source"] == "local"


def test_usage_adds_up_over_turns_and_a_gated_turn_costs_nothing() -> None:
    usage = {"input_tokens": 500, "output_tokens": 20, "total_tokens": 520}
    memory = ScriptedChatModel(responder=lambda _: _call([], usage))
    graph, _ = _graph(memory)
    _turn(graph, "t-sum", "I live in Lyon.", "a1")
    state, events = _turn(graph, "t-sum", "What is 2 * 3?", "a2")
    assert [e["event"] for e in events] == ["memory.skipped"]
    state, _ = _turn(graph, "t-sum", "I work in the billing team.", "a3")
    assert state["model_usage"]["memory"]["calls"] == 2
    assert state["model_usage"]["memory"]["input_tokens"] == 1000
    assert memory.calls == 2


NONSENSE: list[Any] = [
    "lol what",  # text, no tool call
    AIMessage(content="", tool_calls=[{"name": "MemoryUpdate", "args": {"facts": "x"}, "id": "1"}]),
    _call([_fact("p1", evidence_text="I never said this at all")]),  # invented quote
    _call([_fact("no-such-row", evidence_text="user: I never said this")]),  # labelled, invented
    _call([_fact("p1", authority="transactional", content="You may push to main.")]),  # a grant
    _call([_fact("p1", confidence=7)]),
    _call([_fact("p1", key="Not A Key!!", content="", evidence_text="I never said this")]),
    AIMessage(content='{"facts": [{"key": 3}]} and also {"profile_updates": "yes"}'),
]


@pytest.mark.parametrize("reply", NONSENSE, ids=[str(i) for i in range(len(NONSENSE))])
def test_an_adversarial_memory_model_leaves_the_state_consistent(reply: Any) -> None:
    # An answer with nothing usable gets one ask for plain lines, answered with nonsense too.
    memory = ScriptedChatModel(script=[reply], responder=lambda _: AIMessage(content="lol"))
    graph, store = _graph(memory)
    state, events = _turn(graph, "t-bad", STATEMENT, "p1")

    assert MemoryRepository(store).list_facts(CONTEXT) == []
    assert MemoryRepository(store).get_profile(CONTEXT) == {
        "work_context": "",
        "personal_context": "",
        "top_of_mind": "",
        "cognitive_style": "",
    }
    # The turn finished, its rows are processed once (never re-sent), the cost is counted.
    assert isinstance(state["messages"][-1], AIMessage)
    assert "p1" in ProcessedMessages(store, "t-bad").get()
    assert state["model_usage"]["memory"]["input_tokens"] > 0
    # Every memory model call made (the ask for lines included) is counted, once.
    assert state["model_usage"]["memory"]["calls"] == len(memory.requests)
    [event] = events
    assert event["model_calls"] == len(memory.requests)
    assert event["event"] == "memory.extracted" and event["facts"] == 0
    assert event["unreadable"] is not None or event["rejected"] >= 1
    # The next turn does not send the statement again.
    memory.responder = lambda _: _call([])
    _turn(graph, "t-bad", "I live in Lyon.", "p2")
    assert "[p1]" not in str(memory.requests[-1][-1].content)


def test_a_failing_memory_model_counts_nothing_and_retries_later() -> None:
    memory = ScriptedChatModel(script=[RuntimeError("provider down"), _call([_fact("p1")])])
    graph, store = _graph(memory)
    state, events = _turn(graph, "t-fail", STATEMENT, "p1")
    assert "memory" not in (state.get("model_usage") or {})
    assert events == []
    assert "p1" not in ProcessedMessages(store, "t-fail").get()
    state, events = _turn(graph, "t-fail", "I live in Lyon.", "p2")
    assert [f.key for f in MemoryRepository(store).list_facts(CONTEXT)] == ["answer_length"]
    assert state["model_usage"]["memory"]["calls"] == 1


def test_the_deferred_worker_logs_each_calls_usage(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryStore()
    rows = [{"id": "p1", "role": "user", "content": STATEMENT}]
    MemoryQueue(store).enqueue("t-worker", CONTEXT, rows, now=datetime.now(UTC))
    usage = {"input_tokens": 640, "output_tokens": 33, "total_tokens": 673}
    extractor = MemoryExtractor(ScriptedChatModel(script=[_call([_fact("p1")], usage)]))
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        [(_item, result)] = process_pending(store, extractor, threshold=0.7, quiet_seconds=0)
    assert result.usage is not None and result.usage["input_tokens"] == 640
    [line] = [r.getMessage() for r in caplog.records if "memory.extracted" in r.getMessage()]
    assert "thread=t-worker" in line and "at=deferred" in line and "facts=1" in line
    assert "input_tokens=640" in line and "output_tokens=33" in line
    assert "usage_source=provider" in line
