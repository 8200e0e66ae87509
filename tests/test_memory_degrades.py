"""Memory extraction degrades: tool call, then JSON in the answer text, then a logged skip."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.graph.demo import demo_reply
from ctxgraph.nodes.memory.extract import update_from_text
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.repository import MemoryRepository

STATEMENT = "I mainly write Go services at work. Please plan the migration."
MESSAGE_ID = "h-deg-1"
CONTEXT = Context(user_id="dora")


def candidate(**changes: Any) -> dict[str, Any]:
    """A candidate the gate accepts, unless ``changes`` break one of its rules."""
    base = {
        "key": "main_language",
        "content": "The user mainly writes Go services at work.",
        "category": "context",
        "scope": "user",
        "durability": "durable",
        "authority": "descriptive",
        "confidence": 0.9,
        "evidence_message_id": MESSAGE_ID,
        "evidence_text": "I mainly write Go services at work.",
    }
    return {**base, **changes}


ACCEPTED = candidate()
REJECTED = [
    # Not said by the user: evidence that does not occur in the message.
    candidate(key="favourite_editor", content="Uses Emacs.", evidence_text="I love Emacs."),
    # An instruction, however durable it claims to be.
    candidate(key="may_migrate", content="May migrate.", authority="transactional"),
    # Too unsure.
    candidate(key="team_size", content="Works in a team.", confidence=0.3),
]
UPDATE = {"facts": [ACCEPTED, *REJECTED], "profile_updates": []}


def tool_call(args: dict[str, Any]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "MemoryUpdate", "args": args, "id": "m1"}])


def run_turn(
    reply: AIMessage | str | BaseException, *more: str
) -> tuple[list[str], list[Any], AIMessage]:
    """One graph turn whose memory model answers ``reply`` (then ``more``, asked for plain
    lines): stored facts, the final answer."""
    store = InMemoryStore()
    memory = ScriptedChatModel(script=[reply, *more])
    graph = build_graph(
        models=Models(main=ScriptedChatModel(responder=demo_reply), memory=memory),
        tools=demo_tools(),
        settings=Settings(memory_extraction="inline"),
        checkpointer=InMemorySaver(),
        store=store,
    )
    out = graph.invoke(
        {"messages": [HumanMessage(STATEMENT, id=MESSAGE_ID)]},
        {"configurable": {"thread_id": "t-deg"}},
        context=CONTEXT,
    )
    assert memory.calls == 1 + len(more)
    facts = MemoryRepository(store).list_facts(CONTEXT)
    return [f.key for f in facts], facts, out["messages"][-1]


def memory_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "ctxgraph.memory" and r.levelno == logging.WARNING
    ]


def assert_answered(answer: AIMessage) -> None:
    assert isinstance(answer, AIMessage)
    assert not answer.tool_calls
    assert answer.text.strip()


def test_a_tool_call_stores_exactly_what_the_gate_accepts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        keys, _, answer = run_turn(tool_call(UPDATE))
    assert_answered(answer)
    assert keys == ["main_language"]
    assert memory_warnings(caplog) == []


def test_plain_json_text_is_read_and_still_gated(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        keys, facts, answer = run_turn(json.dumps(UPDATE))
    assert_answered(answer)
    assert keys == ["main_language"]
    assert facts[0].content == ACCEPTED["content"]
    assert memory_warnings(caplog) == []
    assert any("read its JSON text" in r.getMessage() for r in caplog.records)


def test_fenced_json_with_chatter_is_read_and_still_gated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = (
        "Sure! Here is what I would remember {not json}:\n\n```json\n"
        + json.dumps(UPDATE, indent=2)
        + "\n```\nLet me know if you need anything else."
    )
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        keys, _, answer = run_turn(text)
    assert_answered(answer)
    assert keys == ["main_language"]
    assert memory_warnings(caplog) == []


def test_invalid_tool_arguments_fall_back_to_the_text(caplog: pytest.LogCaptureFixture) -> None:
    reply = AIMessage(
        content=f"The update: {json.dumps(UPDATE)}",
        tool_calls=[{"name": "MemoryUpdate", "args": {"facts": "oops"}, "id": "m1"}],
    )
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        keys, _, answer = run_turn(reply)
    assert_answered(answer)
    assert keys == ["main_language"]
    assert memory_warnings(caplog) == []


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("I think the user likes Go, but I am not sure what to store.", "no MemoryUpdate JSON"),
        (
            'Here: {"facts": [{"key": "x"}]} and {"answer": 42}',
            "no usable fact in the MemoryUpdate JSON of the text (facts[0] missing scope",
        ),
        ("", "empty answer"),
        (
            AIMessage(
                content="", tool_calls=[{"name": "MemoryUpdate", "args": {"facts": 1}, "id": "m1"}]
            ),
            "invalid MemoryUpdate arguments",
        ),
        (
            AIMessage(
                content="",
                invalid_tool_calls=[
                    {"name": "MemoryUpdate", "args": "{facts: [", "id": "m1", "error": None}
                ],
            ),
            "invalid MemoryUpdate arguments (not JSON)",
        ),
    ],
    ids=["nonsense", "json-of-another-shape", "empty", "invalid-args", "unparsable-args"],
)
def test_an_unreadable_answer_is_skipped_with_one_warning(
    reply: AIMessage | str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Unreadable twice: the answer, then the answer to the one ask for plain lines."""
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        keys, _, answer = run_turn(reply, "I cannot say.")
    assert_answered(answer)
    assert keys == []
    warnings = memory_warnings(caplog)
    assert len(warnings) == 1
    assert "memory extraction skipped" in warnings[0]
    assert reason in warnings[0]
    assert warnings[0].endswith(
        'asked for plain lines: no line in the format key | content | category | "quote" '
        "and no NONE (13 chars)"
    )


@pytest.mark.parametrize(
    "error",
    [TimeoutError("read timed out"), ConnectionError("provider returned 503")],
    ids=["timeout", "provider-error"],
)
def test_a_failing_memory_call_skips_without_failing_the_turn(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        keys, _, answer = run_turn(error)
    assert_answered(answer)
    assert keys == []
    warnings = memory_warnings(caplog)
    assert len(warnings) == 1
    assert "memory extraction failed" in warnings[0]


def test_a_skipped_answer_is_not_asked_again_but_a_failed_call_is() -> None:
    """An unreadable reply marks its rows done; an error leaves them for the next turn."""
    for first, asked_again in (("no json here", False), (TimeoutError("slow"), True)):
        lines = [] if asked_again else ["NONE"]  # an unreadable reply gets one ask for lines
        memory = ScriptedChatModel(script=[first, *lines, tool_call({"facts": []})])
        graph = build_graph(
            models=Models(main=ScriptedChatModel(responder=demo_reply), memory=memory),
            tools=demo_tools(),
            settings=Settings(memory_extraction="inline"),
            checkpointer=InMemorySaver(),
            store=InMemoryStore(),
        )
        cfg: Any = {"configurable": {"thread_id": "t-again"}}
        first_turn: Any = {"messages": [HumanMessage(STATEMENT, id=MESSAGE_ID)]}
        second_turn: Any = {"messages": [("user", "I prefer tabs over spaces.")]}
        graph.invoke(first_turn, cfg, context=CONTEXT)
        graph.invoke(second_turn, cfg, context=CONTEXT)
        second = str(memory.requests[-1][-1].content)
        assert (f"[{MESSAGE_ID}]" in second) is asked_again


def test_the_async_path_degrades_the_same_way(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryStore()
    memory = ScriptedChatModel(script=[f"```\n{json.dumps(UPDATE)}\n```"])
    graph = build_graph(
        models=Models(main=ScriptedChatModel(responder=demo_reply), memory=memory),
        tools=demo_tools(),
        settings=Settings(memory_extraction="inline"),
        checkpointer=InMemorySaver(),
        store=store,
    )
    out = asyncio.run(
        graph.ainvoke(
            {"messages": [HumanMessage(STATEMENT, id=MESSAGE_ID)]},
            {"configurable": {"thread_id": "t-async"}},
            context=CONTEXT,
        )
    )
    assert_answered(out["messages"][-1])
    assert [f.key for f in MemoryRepository(store).list_facts(CONTEXT)] == ["main_language"]


def test_update_from_text_reads_a_tool_call_written_out() -> None:
    written = json.dumps({"name": "MemoryUpdate", "arguments": json.dumps(UPDATE)})
    update = update_from_text(f"Calling the tool: {written}")
    assert update is not None
    assert [f.key for f in update.facts][:1] == ["main_language"]
    assert update_from_text("{}") is None
    assert update_from_text('{"facts": []}') is not None
