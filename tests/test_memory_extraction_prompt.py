"""What the memory model receives: the related stored facts only, and the compact schema.

The extraction prompt lists at most ``EXTRACTION_FACTS`` stored facts, ranked by the
memory view's index against the user's new text, so a restated fact is still recognised
and a correction still replaces the fact it corrects; the ``MemoryUpdate`` tool it is
bound is the compact one, with the same fields, enums and required lists as the model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.store.memory import InMemoryStore

from ctxgraph.nodes.memory.extract import (
    EXTRACTION_FACTS,
    EXTRACTION_PROMPT,
    EXTRACTION_SYSTEM,
    MEMORY_UPDATE_TOOL,
    MemoryExtractor,
    fact_query,
)
from ctxgraph.nodes.memory.filter import render_rows
from ctxgraph.state import Context
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import MemoryUpdate

CONTEXT = Context(user_id="prompt-user")
TOPICS = ("invoice", "carrier", "refund", "warehouse", "ticket", "audit", "label", "credit")


def _store(count: int, *, paris: bool = True) -> InMemoryStore:
    """``count`` unrelated facts, and (with ``paris``) where the user lives."""
    store = InMemoryStore()
    repository = MemoryRepository(store)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    for index in range(count):
        topic = TOPICS[index % len(TOPICS)]
        repository.add_fact(
            CONTEXT,
            f"Handles the {topic} queue number {index} for the team.",
            key=f"{topic}_{index:03d}",
            confidence=0.8,
            created_at=start + timedelta(minutes=index),
        )
    if paris:
        repository.add_fact(
            CONTEXT,
            "User lives in Paris.",
            key="home_city",
            confidence=0.8,
            created_at=start + timedelta(days=1),
        )
    return store


def _call(facts: list[dict[str, Any]]) -> AIMessage:
    args = {"facts": facts, "profile_updates": []}
    return AIMessage(content="", tool_calls=[{"name": "MemoryUpdate", "args": args, "id": "m"}])


def _city(content: str, quote: str, category: str = "context") -> dict[str, Any]:
    return {
        "key": "home_city",
        "content": content,
        "category": category,
        "scope": "user",
        "durability": "durable",
        "authority": "descriptive",
        "confidence": 0.9,
        "evidence_message_id": "u1",
        "evidence_text": quote,
    }


def _listed(request: Sequence[BaseMessage]) -> list[dict[str, str]]:
    text = str(request[-1].content)
    block = text.split("<existing_facts>\n", 1)[1].split("\n</existing_facts>", 1)[0]
    return [] if block == "(none)" else list(json.loads(block))


def _extract(store: InMemoryStore, model: ScriptedChatModel, text: str) -> Any:
    rows = [
        {"id": "u1", "role": "user", "content": text},
        {"id": "a1", "role": "assistant", "content": "Noted, I will keep that in mind."},
    ]
    return MemoryExtractor(model).extract(
        rows, CONTEXT, MemoryRepository(store), thread_id="t", threshold=0.7
    )


def test_the_model_gets_the_related_facts_capped_and_the_compact_tool() -> None:
    store = _store(40)
    model = ScriptedChatModel(script=[_call([])])
    text = "I live in Paris, keep that in mind."
    _extract(store, model, text)

    listed = _listed(model.requests[0])
    assert len(listed) == EXTRACTION_FACTS  # 41 facts stored, 16 shown
    assert listed[0] == {
        "key": "home_city",
        "content": "User lives in Paris.",
        "category": "context",
    }
    expected = [
        SystemMessage(content=EXTRACTION_SYSTEM),
        HumanMessage(
            content=EXTRACTION_PROMPT.format(
                profile="(empty)",
                facts=json.dumps(listed, ensure_ascii=False),
                conversation=render_rows(
                    [
                        {"id": "u1", "role": "user", "content": text},
                        {
                            "id": "a1",
                            "role": "assistant",
                            "content": "Noted, I will keep that in mind.",
                        },
                    ]
                ),
            )
        ),
    ]
    assert model.requests[0] == expected
    # The memory model is bound exactly the compact tool.
    assert model.tool_requests[0] == [MEMORY_UPDATE_TOOL]


def test_a_small_memory_is_shown_whole_best_match_first() -> None:
    store = _store(5)
    model = ScriptedChatModel(script=[_call([])])
    _extract(store, model, "I live in Paris.")
    everything = MemoryRepository(store).list_facts(CONTEXT)
    listed = [f["key"] for f in _listed(model.requests[0])]
    assert sorted(listed) == sorted(f.key for f in everything)
    assert listed[0] == "home_city"  # the best match first


def test_a_restated_fact_is_recognised_as_existing() -> None:
    store = _store(40)
    before = {f.key: f for f in MemoryRepository(store).list_facts(CONTEXT)}
    model = ScriptedChatModel(script=[_call([_city("User lives in Paris.", "I live in Paris")])])
    result = _extract(store, model, "As I said, I live in Paris.")

    assert "home_city" in [f["key"] for f in _listed(model.requests[0])]
    after = MemoryRepository(store).list_facts(CONTEXT)
    assert len(after) == len(before)  # no duplicate
    city = next(f for f in after if f.key == "home_city")
    assert city.content == "User lives in Paris."
    assert city.confidence == before["home_city"].confidence  # re-extraction never raises it
    assert [f.key for f in result.stored] == ["home_city"]


def test_a_correction_supersedes_the_fact_it_corrects() -> None:
    store = _store(40)
    quote = "I live in Berlin now"
    update = _call([_city("User lives in Berlin.", quote, category="correction")])
    model = ScriptedChatModel(script=[update])
    _extract(store, model, f"Actually I moved last month: {quote}.")

    assert "home_city" in [f["key"] for f in _listed(model.requests[0])]
    facts = MemoryRepository(store).list_facts(CONTEXT)
    city = [f for f in facts if f.key == "home_city"]
    assert [f.content for f in city] == ["User lives in Berlin."]
    assert city[0].is_correction
    assert any("Paris" in str(entry) for entry in city[0].history)
    assert len(facts) == 41


def test_the_query_is_the_user_text_only() -> None:
    rows = [
        {"id": "u1", "role": "user", "content": "I live in Paris."},
        {"id": "a1", "role": "assistant", "content": "The invoice queue is long."},
        {"id": "u2", "role": "user", "content": "I like tea."},
    ]
    assert fact_query(rows) == "I live in Paris.\nI like tea."
    # An assistant answer about invoices does not pull invoice facts over the city.
    store = _store(40)
    model = ScriptedChatModel(script=[_call([])])
    MemoryExtractor(model).extract(
        rows, CONTEXT, MemoryRepository(store), thread_id="t", threshold=0.7
    )
    assert _listed(model.requests[0])[0]["key"] == "home_city"


def test_a_custom_prompt_gets_the_related_facts_through_its_placeholder() -> None:
    store = _store(40)
    model = ScriptedChatModel(script=[_call([])])
    extractor = MemoryExtractor(model, "FACTS={facts}\nNEW={conversation}")
    rows = [{"id": "u1", "role": "user", "content": "I live in Paris."}]
    extractor.extract(rows, CONTEXT, MemoryRepository(store), thread_id="t", threshold=0.7)
    text = str(model.requests[0][-1].content)
    facts = json.loads(text.split("\n", 1)[0].removeprefix("FACTS="))
    assert len(facts) == EXTRACTION_FACTS and facts[0]["key"] == "home_city"
    assert text.endswith("NEW=[u1] user: I live in Paris.")


def _shape(schema: Any) -> Any:
    """The parts of a schema the compact one keeps: types, enums, properties, required."""
    if isinstance(schema, dict):
        kept = {k: v for k, v in schema.items() if k in ("type", "enum", "required")}
        if "properties" in schema:
            kept["properties"] = {k: _shape(v) for k, v in schema["properties"].items()}
        if "items" in schema:
            kept["items"] = _shape(schema["items"])
        return kept
    return schema


def test_the_compact_schema_keeps_every_field_enum_and_required_list() -> None:
    full = convert_to_openai_tool(MemoryUpdate)["function"]
    compact = MEMORY_UPDATE_TOOL["function"]
    assert compact["name"] == full["name"] == "MemoryUpdate"
    assert _shape(compact["parameters"]) == _shape(full["parameters"])
    counter = TokenCounter()
    before, after = counter.count_tools([full]), counter.count_tools([MEMORY_UPDATE_TOOL])
    assert after < 0.55 * before, (before, after)


def test_a_reply_outside_the_dropped_constraints_is_still_refused() -> None:
    """Lengths and the key pattern left the schema; validation here still enforces them.

    The one fact is dropped with its reason; with nothing usable left, the model is
    asked once more for plain lines (here it answers NONE).
    """
    bad = _city("x" * 600, "I live in Paris")
    model = ScriptedChatModel(script=[_call([bad]), "NONE"])
    store = _store(3)
    result = _extract(store, model, "I live in Paris.")
    assert result.stored == [] and result.skipped is None
    assert result.rejected == [
        ("home_city", "facts[0] invalid content: String should have at most 500 characters")
    ]
    assert model.calls == 2
    city = [f for f in MemoryRepository(store).list_facts(CONTEXT) if f.key == "home_city"]
    assert [f.content for f in city] == ["User lives in Paris."]
