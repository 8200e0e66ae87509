"""Counts reused across ids, measurements and lines stay exact when a text changes."""

from __future__ import annotations

import random
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxgraph.state import Settings
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.tokens import TokenCounter, count_text, encoding
from tests.support.requests import request_builder

SETTINGS = Settings()


class CountingChars:
    """A caller's counter that counts characters and its own calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        self.calls += 1
        return sum(len(str(m.content)) + 2 for m in messages)


def test_the_same_text_under_another_id_is_counted_alike_with_tiktoken() -> None:
    counter = TokenCounter()
    text = "Where is order A-1001? It should go to the new address. " * 12
    first = HumanMessage(content=text, id="routed")
    second = HumanMessage(content=text, id="stored")
    assert counter.count_message(first) == counter.count_message(second)
    assert counter.counted_alike(first, second)
    assert counter.cached_entries == 2
    longer = HumanMessage(content=text + "And gift-wrap it.", id="stored")
    assert counter.count_message(longer) > counter.count_message(second)
    assert not counter.counted_alike(longer, second)


def test_a_callers_counter_counts_each_id_itself() -> None:
    chars = CountingChars()
    counter = TokenCounter(count=chars)
    first = HumanMessage(content="hello", id="a")
    second = HumanMessage(content="hello", id="b")
    counter.count_message(first)
    counter.count_message(second)
    assert chars.calls == 2
    assert not counter.counted_alike(first, second)
    assert counter.counted_alike(first, first)


def test_a_tool_result_answering_another_call_under_the_same_id_is_recounted() -> None:
    counter = TokenCounter()
    short = ToolMessage(content="shipped", tool_call_id="c1", id="t1")
    renamed = ToolMessage(content="shipped", tool_call_id="call_" + "x" * 60, id="t1")
    assert counter.count_message(renamed) > counter.count_message(short)


def test_an_extra_tool_calls_attribute_still_counts() -> None:
    counter = TokenCounter()
    calls = [{"name": "lookup", "args": {"order_id": "A-1001"}, "id": "c1"}]
    plain = HumanMessage(content="hi", id="h1")
    carrying = HumanMessage(content="hi", id="h2", tool_calls=calls)
    assert counter.count_message(carrying) > counter.count_message(plain)


def _state(messages: list[BaseMessage]) -> AgentState:
    return {"messages": messages}  # type: ignore[typeddict-item]


def test_a_request_is_measured_afresh_once_a_message_changes_under_its_id() -> None:
    builder = request_builder([], TokenCounter())
    call = {"name": "lookup", "args": {"order_id": "A-1001"}, "id": "c1"}
    window: list[BaseMessage] = [
        HumanMessage(content="Where is A-1001?", id="u1"),
        AIMessage(content="", id="a1", tool_calls=[call]),
        ToolMessage(content="shipped", tool_call_id="c1", id="t1"),
    ]
    first = builder.measure(builder.build(_state(window), SETTINGS))
    again = builder.measure(builder.build(_state(list(window)), SETTINGS))
    assert again == first
    # Same id, same content, longer arguments: a new object that must be counted.
    longer = {**call, "args": {"order_id": "A-1001 " + "and more " * 40}}
    changed = [window[0], AIMessage(content="", id="a1", tool_calls=[longer]), window[2]]
    grown = builder.measure(builder.build(_state(changed), SETTINGS))
    assert grown.tokens > first.tokens
    fresh = request_builder([], TokenCounter())
    assert grown == fresh.measure(fresh.build(_state(changed), SETTINGS))


def test_long_texts_counted_line_by_line_count_exactly() -> None:
    pieces = [
        *"abXZ09 \n\r\t.,'!-_#[]{}\"",
        *["\u00a0", "\u3000", "中", "文", "é", "½", "Ⅻ", "٣", "\u2028", "\x1c", "\x85"],
        *["'s", "'ll", "  ", "\n\n\n", " \n", ".\n", "ab\n", "\r\n", "😀", "\u0301"],
        "<|endoftext|>",
    ]
    rng = random.Random(11)
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(150, 900)))
        assert count_text(text) == len(encoding().encode(text, disallowed_special=()))
    # The same lines in another text: memoized, and still exact.
    record = "Decisions:\n- ship A-1001 to Berlin\nOpen:\n- refund B-7\n" * 20
    for text in (record, "Summary so far\n" + record, record + "Next\n\n  \n1. step"):
        assert count_text(text) == len(encoding().encode(text, disallowed_special=()))
