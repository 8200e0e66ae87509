"""The one reader of JSON objects in model answers: fences, tags, doubled and missing braces."""

from __future__ import annotations

from ctxgraph.state.answer_json import json_objects, residue, top_level_objects

CALL = '{"name": "lookup_order", "arguments": {"order_id": "A123"}}'


def test_bare_fenced_and_tagged_objects_are_read_with_nothing_left_over() -> None:
    for text in (
        CALL,
        f"```json\n{CALL}\n```",
        f"<tools>\n{CALL}\n</tools>",
        f"<tool_call>{CALL}</tool_call>",
    ):
        spans = top_level_objects(text)
        assert [span.value["arguments"] for span in spans] == [{"order_id": "A123"}], text
        assert residue(text, spans) == ""


def test_a_doubled_opening_brace_is_read_from_its_second_brace() -> None:
    text = "{" + CALL + "}"
    (span,) = top_level_objects(text)
    assert span.start == 1
    assert span.value["name"] == "lookup_order"
    assert residue(text, [span]) == ""


def test_a_missing_closing_brace_is_repaired_and_said() -> None:
    text = "{" + CALL[:-1]
    (span,) = top_level_objects(text)
    assert span.value["arguments"] == {"order_id": "A123"}
    assert span.repaired == "1 closing brace(s) added"


def test_prose_around_an_object_is_residue() -> None:
    text = f"Sure, I will look it up: {CALL} and tell you."
    spans = top_level_objects(text)
    assert len(spans) == 1
    assert residue(text, spans) == "Sure, I will look it up: and tell you."


def test_several_objects_in_order_and_nested_ones_only_when_asked() -> None:
    text = f"{CALL}\n{CALL.replace('A123', 'B456')}"
    assert [s.value["arguments"]["order_id"] for s in top_level_objects(text)] == [
        "A123",
        "B456",
    ]
    nested = [span.value for span in json_objects(text)]
    assert {"order_id": "A123"} in nested


def test_text_without_objects_and_broken_json_yield_nothing() -> None:
    assert top_level_objects("Hi! How can I help?") == []
    assert top_level_objects('{"name": lookup}') == []
    assert top_level_objects("[1, 2]") == []
