"""The extraction ladder a small model can climb: per-fact reading, defaults, plain lines.

A ``MemoryUpdate`` written as text in any of the shapes small models use is read; each
fact is validated on its own (one bad fact drops that fact, with the field that failed);
fields with a safe default get it; an answer with nothing usable gets one more ask, for
one fact per line, whose lines pass the same gate. Sync and async take the same steps.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.store.memory import InMemoryStore

from ctxgraph.nodes.memory.extract import (
    EXTRACTION_SYSTEM,
    ExtractionResult,
    MemoryExtractor,
    update_from_text,
)
from ctxgraph.nodes.memory.filter import render_rows
from ctxgraph.nodes.memory.ladder import LINE_PROMPT
from ctxgraph.state import Context
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, message_text
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.writes import default_key

CONTEXT = Context(user_id="ladder-user")
NAME = "My name is Lin, by the way."
JOB = "I'm a Python backend developer."
ROWS = [
    {"id": "u1", "role": "user", "content": f"{NAME} {JOB} I mostly ship small services."},
    {"id": "a1", "role": "assistant", "content": "你好，Lin。"},
]


def fact(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "key": "name",
        "content": "Lin",
        "category": "context",
        "scope": "user",
        "durability": "durable",
        "authority": "descriptive",
        "confidence": 0.9,
        "evidence_message_id": "u1",
        "evidence_text": NAME,
    }
    return {k: v for k, v in {**base, **changes}.items() if v is not None}


JOB_FACT = fact(key="job", content="Python backend developer", evidence_text=JOB)


def run(
    *replies: Any, rows: list[dict[str, str]] | None = None, asynchronous: bool = False
) -> tuple[ExtractionResult, ScriptedChatModel, list[tuple[str, str]]]:
    """One extraction whose memory model answers ``replies``: result, model, stored facts."""
    model = ScriptedChatModel(script=list(replies))
    repository = MemoryRepository(InMemoryStore())
    extractor = MemoryExtractor(model)
    arguments: dict[str, Any] = {
        "thread_id": "t-ladder",
        "threshold": 0.7,
        "profile": {},
        "facts": [],
    }
    if asynchronous:
        result = asyncio.run(extractor.aextract(rows or ROWS, CONTEXT, repository, **arguments))
    else:
        result = extractor.extract(rows or ROWS, CONTEXT, repository, **arguments)
    stored = [(f.key, f.content) for f in repository.list_facts(CONTEXT)]
    return result, model, stored


def memory_logs(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "ctxgraph.memory" and r.levelno >= level
    ]


# -- the shapes small models write --------------------------------------------------------

UPDATE = {"facts": [fact()], "profile_updates": []}
SHAPES = {
    "fenced call": f"```json\n{json.dumps({'name': 'MemoryUpdate', 'arguments': UPDATE})}\n```",
    "doubled brace": "{" + json.dumps({"name": "MemoryUpdate", "arguments": UPDATE}) + "}",
    "function key": json.dumps({"function": "MemoryUpdate", "arguments": UPDATE}),
    "lower-case name": json.dumps({"name": "memory_update", "arguments": UPDATE}),
    "bare update": f"Here you go: {json.dumps(UPDATE)}",
    "arguments as a list": json.dumps({"name": "MemoryUpdate", "arguments": [fact()]}),
    "arguments as a string": json.dumps({"name": "MemoryUpdate", "arguments": json.dumps(UPDATE)}),
    "OpenAI form": json.dumps(
        {"type": "function", "function": {"name": "MemoryUpdate", "arguments": json.dumps(UPDATE)}}
    ),
    "tool tags": f"<tool_call>\n{json.dumps({'name': 'MemoryUpdate', 'arguments': UPDATE})}\n",
}


@pytest.mark.parametrize("text", SHAPES.values(), ids=SHAPES.keys())
def test_every_shape_of_a_call_written_as_text_is_read(text: str) -> None:
    result, model, stored = run(text)
    assert stored == [("name", "Lin")]
    assert model.calls == 1 and result.skipped is None and result.rejected == []


# -- one bad fact drops that fact ---------------------------------------------------------


def test_one_bad_fact_drops_that_fact_not_the_update(caplog: pytest.LogCaptureFixture) -> None:
    no_content = fact(key="office", content=None, evidence_text="I mostly ship small services.")
    answer = json.dumps({"name": "MemoryUpdate", "arguments": {"facts": [fact(), no_content]}})
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        result, model, stored = run(answer)
    assert stored == [("name", "Lin")]
    assert result.rejected == [("office", "facts[1] missing content")]
    assert model.calls == 1
    assert memory_logs(caplog) == [
        "memory model answered without a valid tool call; read its JSON text: "
        "read 1 of 2 facts from the answer text; 1 dropped: facts[1] missing content"
    ]
    assert memory_logs(caplog, logging.WARNING) == memory_logs(caplog)


def test_each_dropped_fact_names_the_field_that_failed() -> None:
    facts = [
        fact(confidence=None),
        fact(scope=None, durability=None),
        fact(confidence="very"),
        fact(scope="everywhere"),
        "Lin",
        fact(key=None, content=None, evidence_text="I mostly ship small services."),
        JOB_FACT,
    ]
    result, _, stored = run(json.dumps({"facts": facts}))
    assert stored == [("job", "Python backend developer")]
    assert result.rejected == [
        ("name", "facts[0] missing confidence"),
        ("name", "facts[1] missing scope, durability"),
        (
            "name",
            "facts[2] invalid confidence: Input should be a valid number, unable to parse "
            "string as a number",
        ),
        ("name", "facts[3] invalid scope: Input should be 'user', 'thread' or 'project'"),
        ("facts[4]", "facts[4] is not an object (str)"),
        ("facts[5]", "facts[5] missing key, content"),
    ]


def test_safe_defaults_fill_what_a_small_model_leaves_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    facts = [
        fact(category=None),  # -> context
        fact(key="job", content=None, category="identity", evidence_text=JOB),
        fact(key=None, content="Lin", authority=None, evidence_message_id=None),
    ]
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        result, _, stored = run(json.dumps({"facts": facts}))
    # content from a quote that states a durable fact; a key derived from the content;
    # a missing authority is transactional, lifted by the quote; a missing id is cited.
    assert sorted(stored) == sorted([("name", "Lin"), ("job", JOB), (default_key("Lin"), "Lin")])
    assert result.rejected == []
    [line] = memory_logs(caplog)
    assert line.endswith(
        "read 3 of 3 facts from the answer text (defaults: facts[0] category 'context', "
        "facts[1] category 'context' (was 'identity'), facts[1] content from its quote, "
        f"facts[2] key '{default_key('Lin')}' from its content, facts[2] authority "
        "'transactional', facts[2] evidence_message_id '(uncited)')"
    )


def test_a_missing_content_is_never_taken_from_a_quote_that_states_no_fact() -> None:
    rows = [{"id": "u1", "role": "user", "content": "What do you know about me?"}]
    question = fact(content=None, evidence_text="What do you know about me?")
    result, model, stored = run(json.dumps({"facts": [question]}), "NONE", rows=rows)
    assert stored == []
    assert result.rejected == [("name", "facts[0] missing content")]
    assert model.calls == 2  # nothing usable: the plain lines were asked for


def test_a_confidence_is_never_made_up() -> None:
    result, _, stored = run(json.dumps({"facts": [fact(confidence=None), JOB_FACT]}))
    assert stored == [("job", "Python backend developer")]
    assert result.rejected == [("name", "facts[0] missing confidence")]


def test_update_from_text_keeps_its_readable_facts() -> None:
    update = update_from_text(json.dumps({"facts": [fact(), fact(confidence=None)]}))
    assert update is not None and [f.key for f in update.facts] == ["name"]
    assert update_from_text("no json") is None


# -- the plain line rung -------------------------------------------------------------------

LINES = f'''Here are the facts:
- name | Lin | context | "{NAME}"
- job | Python backend developer | context | "{JOB}"
- shipping | small services | goal | "I mostly ship small services."
- greeting | 你好 | context | "你好，Lin。"'''


def line_request() -> list[BaseMessage]:
    return [
        SystemMessage(content=EXTRACTION_SYSTEM),
        HumanMessage(content=LINE_PROMPT.format(conversation=render_rows(ROWS))),
    ]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_unreadable_answer_gets_one_ask_for_plain_lines(
    asynchronous: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        result, model, stored = run(
            "I think the user is called Lin.", LINES, asynchronous=asynchronous
        )
    assert model.calls == 2
    assert model.requests[1] == line_request()
    assert model.tool_requests[0] and model.tool_requests[1] == []  # no schema for lines
    # Every line passes the same gate: durable statements are kept, cited from u1; a line
    # without a durable statement stays transactional; a quote of the assistant is refused.
    assert sorted(stored) == [("job", "Python backend developer"), ("name", "Lin")]
    facts = {f.key: f for f in result.stored}
    assert facts["name"].confidence == 0.7  # the threshold, never more
    assert result.rejected == [
        ("shipping", "transactional: an authorization or instruction is never remembered"),
        ("greeting", "transactional: an authorization or instruction is never remembered"),
    ]
    assert result.skipped is None
    assert memory_logs(caplog) == [
        "memory model's answer held no usable MemoryUpdate (no MemoryUpdate tool call and no "
        "MemoryUpdate JSON in the answer text (31 chars)); asking once more for plain lines",
        "memory model answered in plain lines: read 4 of 4 facts from the lines",
    ]


def test_a_request_in_the_lines_is_never_stored() -> None:
    rows = [{"id": "u1", "role": "user", "content": "Ship B456 to my office address, not home."}]
    lines = 'destination | office address | goal | "Ship B456 to my office address"'
    result, _, stored = run("no idea", lines, rows=rows)
    assert stored == []
    assert result.rejected == [
        ("destination", "transactional: an authorization or instruction is never remembered")
    ]


def test_none_is_a_fine_answer_and_garbage_is_skipped_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    result, model, stored = run("", "NONE.")
    assert (stored, result.skipped, model.calls) == ([], None, 2)
    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        result, model, stored = run("", "I cannot tell.")
    assert stored == [] and model.calls == 2
    assert result.skipped == (
        "no MemoryUpdate tool call and an empty answer; asked for plain lines: no line in the "
        'format key | content | category | "quote" and no NONE (14 chars)'
    )
    warnings = memory_logs(caplog, logging.WARNING)
    assert warnings == [f"memory extraction skipped (memory model scripted): {result.skipped}"]


def test_a_usable_answer_is_not_asked_again() -> None:
    for answer in (json.dumps({"facts": []}), json.dumps(UPDATE)):
        _, model, _ = run(answer)
        assert model.calls == 1


def test_malformed_lines_are_dropped_with_their_number() -> None:
    lines = f'name | Lin\nname | Lin | context | "{NAME}"'
    result, _, stored = run("?", lines)
    assert stored == [("name", "Lin")]
    assert result.rejected == [
        ("line 1", 'line 1 is not in the format key | content | category | "quote"')
    ]


# -- usage ---------------------------------------------------------------------------------


def test_the_ask_for_lines_is_counted_like_the_first_call() -> None:
    reported = {"input_tokens": 900, "output_tokens": 40, "total_tokens": 940}
    first = AIMessage(content="nothing", usage_metadata=reported)
    answer = f'name | Lin | context | "{NAME}"'
    result, _, _ = run(first, answer)
    counter = TokenCounter()
    lines_sent = counter.count_messages(line_request())  # no tool schema bound
    lines_answer = counter.count_text(message_text(AIMessage(content=answer)))
    assert result.calls == [
        {
            "role": "memory",
            "input_tokens": 900,
            "output_tokens": 40,
            "cached_tokens": 0,
            "source": "provider",
        },
        {
            "role": "memory",
            "input_tokens": lines_sent,
            "output_tokens": lines_answer,
            "cached_tokens": 0,
            "source": "local",
        },
    ]
    assert result.usage == {
        "role": "memory",
        "input_tokens": 900 + lines_sent,
        "output_tokens": 40 + lines_answer,
        "cached_tokens": 0,
        "source": "local",
    }


def test_the_async_path_reads_every_rung_the_same_way() -> None:
    for replies in (
        (SHAPES["doubled brace"],),
        (json.dumps({"facts": [fact(), fact(confidence=None)]}),),
        ("nothing here", LINES),
        ("", "gibberish"),
    ):
        sync, sync_model, sync_stored = run(*replies)
        async_, async_model, async_stored = run(*replies, asynchronous=True)
        assert sorted(sync_stored) == sorted(async_stored)
        assert sync.rejected == async_.rejected and sync.skipped == async_.skipped
        assert sync_model.requests == async_model.requests
