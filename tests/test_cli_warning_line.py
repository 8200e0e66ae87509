"""A warning logged while an answer streams is printed on a line of its own."""

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
