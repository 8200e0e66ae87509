"""What the command line prints while an answer streams: warnings on a line, no call text."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk

from ctxgraph.graph.cli import turns
from ctxgraph.graph.cli.notices import configure_logging

META = {"langgraph_node": "model"}


def streamed_turn() -> Iterator[tuple[str, Any]]:
    yield ("messages", (AIMessageChunk(content="Order A123 ", id="a1"), META))
    logging.getLogger("ctxgraph.model").warning("the model wrote a tool call as text")
    yield ("messages", (AIMessageChunk(content="has shipped.", id="a1"), META))
    answer = AIMessage(content="Order A123 has shipped.", id="a1")
    yield ("updates", {"model": {"messages": [answer]}})


def test_a_warning_mid_answer_ends_the_line_and_the_answer_resumes_on_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = io.StringIO()  # standard output and standard error share one terminal
    monkeypatch.setattr("sys.stderr", terminal)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    library = logging.getLogger("ctxgraph")
    monkeypatch.setattr(library, "level", library.level)
    configure_logging(verbose=False, debug=False)

    final = turns._print_events(streamed_turn(), terminal)

    assert terminal.getvalue().splitlines() == [
        "assistant: Order A123 ",
        "warning: the model wrote a tool call as text",
        "assistant: has shipped.",
    ]
    assert final is not None and final.text == "Order A123 has shipped."


def test_without_a_warning_the_answer_is_one_line() -> None:
    out = io.StringIO()
    events = [
        ("messages", (AIMessageChunk(content="Hello ", id="a2"), META)),
        ("messages", (AIMessageChunk(content="there.", id="a2"), META)),
    ]
    turns._print_events(iter(events), out)
    assert out.getvalue() == "assistant: Hello there.\n"


CALL_TEXT = '<tools>\n{"name": "lookup_order", "arguments": {"order_id": "A123"}}\n</tools>'


def call_text_turn(answer: AIMessage) -> Iterator[tuple[str, Any]]:
    for piece in (CALL_TEXT[:8], CALL_TEXT[8:40], CALL_TEXT[40:]):
        yield ("messages", (AIMessageChunk(content=piece, id="a3"), META))
    yield ("updates", {"model": {"messages": [answer]}})


def test_a_tool_call_written_as_text_is_not_streamed_and_shows_as_the_call_it_became() -> None:
    recovered = AIMessage(
        content="",
        id="a3",
        tool_calls=[{"name": "lookup_order", "args": {"order_id": "A123"}, "id": "call_text_1"}],
    )
    out = io.StringIO()
    turns._print_events(call_text_turn(recovered), out)
    assert out.getvalue() == '  → lookup_order({"order_id": "A123"}) [call_text_1]\n'


def test_call_text_that_stays_the_answer_is_printed_once_whole() -> None:
    out = io.StringIO()
    turns._print_events(call_text_turn(AIMessage(content=CALL_TEXT, id="a3")), out)
    assert out.getvalue() == f"assistant: {CALL_TEXT}\n"
