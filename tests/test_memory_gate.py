"""The extraction gate: turns with nothing a fact could come from never reach the model.

A gated turn's rows are still marked processed (never sent later), a ``memory.skipped``
event says why, and ``extraction_gate=False`` (or ``CTXGRAPH_EXTRACTION_GATE=0``) calls
the model for every turn with user text, as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.graph.demo import demo_reply
from ctxgraph.nodes.memory.gate import NO_CUE, NO_USER_TEXT, gate_reason, has_fact_cue
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_memory, demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.settings import SettingsError
from ctxgraph.store.memory.progress import ProcessedMessages
from ctxgraph.store.memory.queue import MemoryQueue
from ctxgraph.store.memory.repository import MemoryRepository

CONTEXT = Context(user_id="gate-user")

PASSING = (
    "I prefer tabs over spaces.",
    "Please always give me the numbers first.",
    "My manager Priya signs off on refunds.",
    "We moved the warehouse to Lyon last quarter.",
    "Actually, the deadline is March 3, not March 10.",
    "From now on answer in French.",
    "The project uses Postgres 16.",
    "Note 3: keep the quarterly report in mind.",
    "我喜欢用中文回答技术问题。",
    "以后请别用表格。",
    "其实我已经搬到上海了。",
    "我下周一要去北京出差。",
)
GATED = (
    "Run the tests.",
    "What is 2 * 3?",
    "What does this function return?",
    "Tell me a joke.",
    "Show me the diff, please.",
    "这个函数返回什么？",
    "运行测试",
    "帮我看看这段代码",
)


@pytest.mark.parametrize("text", PASSING)
def test_a_statement_a_fact_could_come_from_passes(text: str) -> None:
    assert has_fact_cue(text)
    assert gate_reason([{"id": "u", "role": "user", "content": text}]) is None


@pytest.mark.parametrize("text", GATED)
def test_a_bare_request_or_question_is_gated(text: str) -> None:
    assert not has_fact_cue(text)
    assert gate_reason([{"id": "u", "role": "user", "content": text}]) == NO_CUE


def test_only_user_rows_count() -> None:
    answer = {"id": "a", "role": "assistant", "content": "I prefer to answer in French."}
    assert gate_reason([answer]) == NO_USER_TEXT
    rows = [{"id": "u", "role": "user", "content": "Run the tests."}, answer]
    assert gate_reason(rows) == NO_CUE
    rows.append({"id": "u2", "role": "user", "content": "I live in Lyon."})
    assert gate_reason(rows) is None


def _graph(memory: ScriptedChatModel, **settings: Any) -> tuple[Any, InMemoryStore]:
    # Inline: these tests assert what a turn stored by the time invoke returns.
    settings.setdefault("memory_extraction", "inline")
    store = InMemoryStore()
    graph = build_graph(
        models=Models(main=ScriptedChatModel(responder=demo_reply), memory=memory),
        tools=demo_tools(),
        settings=Settings(**settings),
        checkpointer=InMemorySaver(),
        store=store,
    )
    return graph, store


def _memory() -> ScriptedChatModel:
    return ScriptedChatModel(responder=lambda m: demo_memory(str(m[-1].content)))


def _send(graph: Any, thread: str, message: BaseMessage) -> list[dict[str, Any]]:
    """Run one turn; the memory events it streamed."""
    config = {"configurable": {"thread_id": thread}}
    chunks = graph.stream({"messages": [message]}, config, context=CONTEXT, stream_mode="custom")
    return [c for c in chunks if str(c.get("event", "")).startswith("memory.")]


def test_greetings_acks_and_tool_chatter_make_no_memory_call() -> None:
    memory = _memory()
    graph, store = _graph(memory)
    skipped: list[dict[str, Any]] = []
    for index, text in enumerate(("Hello!", "thanks, ok", "What is 2 * 3?")):
        skipped += _send(graph, "t-chatter", HumanMessage(text, id=f"u{index}"))
    assert memory.calls == 0
    # The greeting and the ack are filtered out; the arithmetic turn is gated.
    assert skipped == [
        {
            "event": "memory.skipped",
            "thread_id": "t-chatter",
            "at": "turn",
            "reason": NO_CUE,
            "rows": 1,
        }
    ]
    # Every turn's rows are marked processed, the gated one included.
    assert "u2" in ProcessedMessages(store, "t-chatter").get()


def test_a_gated_turn_is_not_sent_again_with_a_later_fact() -> None:
    memory = _memory()
    graph, store = _graph(memory)
    _send(graph, "t-later", HumanMessage("What is 2 * 3?", id="q1"))
    events = _send(graph, "t-later", HumanMessage("I prefer short answers.", id="p1"))
    assert memory.calls == 1
    prompt = str(memory.requests[0][-1].content)
    assert "[p1] user: I prefer short answers." in prompt
    assert "q1" not in prompt and "2 * 3" not in prompt
    assert [e["event"] for e in events] == ["memory.extracted"]
    assert events[0]["facts"] == 1
    facts = MemoryRepository(store).list_facts(CONTEXT)
    assert [f.content for f in facts] == ["I prefer short answers."]


@pytest.mark.parametrize("text", ["I prefer short answers.", "我喜欢简短的回答。"])
def test_a_preference_reaches_the_model(text: str) -> None:
    memory = _memory()
    graph, _ = _graph(memory)
    events = _send(graph, "t-pref", HumanMessage(text, id="p1"))
    assert memory.calls == 1
    assert [e["event"] for e in events] == ["memory.extracted"]


def test_with_the_gate_off_every_user_turn_reaches_the_model() -> None:
    memory = _memory()
    graph, _ = _graph(memory, extraction_gate=False)
    events = _send(graph, "t-off", HumanMessage("What is 2 * 3?", id="q1"))
    assert memory.calls == 1
    assert [e["event"] for e in events] == ["memory.extracted"]


def test_a_run_may_switch_the_gate_off() -> None:
    memory = _memory()
    graph, _ = _graph(memory)
    config = {"configurable": {"thread_id": "t-ctx"}}
    context = Context(user_id="gate-user", settings={"extraction_gate": False})
    graph.invoke({"messages": [HumanMessage("What is 2 * 3?")]}, config, context=context)
    assert memory.calls == 1


def test_deferred_extraction_queues_no_gated_turn_but_marks_it() -> None:
    memory = _memory()
    graph, store = _graph(memory, memory_extraction="deferred")
    _send(graph, "t-defer", HumanMessage("What is 2 * 3?", id="q1"))
    assert MemoryQueue(store).due(quiet_seconds=0) == []
    assert "q1" in ProcessedMessages(store, "t-defer").get()
    _send(graph, "t-defer", HumanMessage("I prefer short answers.", id="p1"))
    [item] = MemoryQueue(store).due(quiet_seconds=0)
    assert [row["id"] for row in item.rows if row["role"] == "user"] == ["p1"]
    assert memory.calls == 0


def test_the_environment_sets_the_gate() -> None:
    assert Settings.from_env({}).extraction_gate is True
    assert Settings.from_env({"CTXGRAPH_EXTRACTION_GATE": "0"}).extraction_gate is False
    assert Settings.from_env({"CTXGRAPH_EXTRACTION_GATE": "yes"}).extraction_gate is True
    with pytest.raises(SettingsError):
        Settings.from_env({"CTXGRAPH_EXTRACTION_GATE": "maybe"})
    with pytest.raises(SettingsError):
        Settings(extraction_gate="no")  # type: ignore[arg-type]


def test_an_answer_alone_never_reaches_the_model() -> None:
    """An injected-style turn whose only row is the assistant's: nothing to gate or send."""
    memory = _memory()
    graph, _ = _graph(memory)
    config = {"configurable": {"thread_id": "t-ai"}}
    graph.invoke({"messages": [HumanMessage("Hi!"), AIMessage("Hello")]}, config, context=CONTEXT)
    assert memory.calls == 0
