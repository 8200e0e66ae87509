"""Forget in every place of the user's data, and only there (in-memory Store and saver).

Each test puts the text where ctxgraph keeps a copy (profile, facts of several agents,
project facts, a queued extraction, a background job result, a thread's archive) next to
data that must not change (another user's, a shared project fact), then checks what the
forget changed, what it left, and what a forget stopped midway leaves for the next one.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.forget import forget
from ctxgraph.store.memory.queue import MemoryQueue
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.namespaces import (
    memory_queue,
    project_facts,
    thread_compaction_jobs,
    user_facts,
    user_profile,
)
from ctxgraph.store.ownership import record_owner
from ctxgraph.store.persistence.archive import verify_thread
from ctxgraph.store.persistence.archive_redaction import redact_archive
from ctxgraph.store.receipts import new_receipt_id, receipt_time
from ctxgraph.store.redaction import REDACTION_MARKER, Redactor
from tests.support.scripted import demo_summarizer

SECRET = "555-0199"
STAMP = "2026-11-01T10:00:00+00:00"


def fact_value(content: str, *, thread: str = "t-zed", history: list[Any] | None = None) -> Any:
    return {
        "content": content,
        "category": "context",
        "confidence": 0.9,
        "created_at": STAMP,
        "source_thread": thread,
        "evidence": content,
        "history": history or [],
        "provenance": "extraction",
    }


def stored_text(store: InMemoryStore) -> str:
    """Every Store value, as one JSON text."""
    namespaces = store.list_namespaces(prefix=(), limit=1_000)
    items = [item for ns in namespaces for item in store.search(ns, limit=1_000)]
    return json.dumps([[list(i.namespace), i.key, i.value] for i in items], ensure_ascii=False)


def test_every_memory_place_of_the_user_is_reached_and_nothing_else() -> None:
    store, saver = InMemoryStore(), InMemorySaver()
    record_owner(store, "t-zed", "zed")
    record_owner(store, "t-ann", "ann")
    store.put(user_facts("zed", "default"), "phone", fact_value(f"Takes calls on {SECRET}"))
    store.put(
        user_facts("zed", "coder"),
        "old",
        fact_value(
            "Works nights",
            history=[{"content": f"Works nights, reachable on {SECRET}", "replaced_at": STAMP}],
        ),
    )
    store.put(user_facts("zed", "coder"), "lang", fact_value("Writes Rust"))
    store.put(project_facts("p1"), "desk", fact_value(f"The desk line is {SECRET}"))
    store.put(project_facts("p1"), "ann-desk", fact_value(f"Desk {SECRET}", thread="t-ann"))
    store.put(
        user_facts("ann", "default"), "phone", fact_value(f"Ann's is {SECRET}", thread="t-ann")
    )
    store.put(
        user_profile("zed"), "profile", {"sections": {"personal_context": f"Phone {SECRET}."}}
    )

    receipt = forget(store, saver, "zed", text=SECRET)

    repo = MemoryRepository(store)
    zed, coder = Context(user_id="zed"), Context(user_id="zed", agent_name="coder")
    assert repo.list_facts(zed) == []
    assert [f.key for f in repo.list_facts(coder)] == ["lang"]  # history held it: gone
    assert store.get(project_facts("p1"), "desk") is None  # sourced from zed's thread
    assert store.get(project_facts("p1"), "ann-desk") is not None  # ann's, kept
    assert store.get(user_facts("ann", "default"), "phone") is not None
    profile = repo.get_profile(zed)
    assert profile["personal_context"] == f"Phone {REDACTION_MARKER}."
    kinds = sorted(place.kind for place in receipt.places)
    assert kinds == ["memory fact"] * 3 + ["profile"]
    assert SECRET not in json.dumps(receipt.as_dict())


def test_a_queued_extraction_and_a_job_result_are_redacted_keeping_their_shape() -> None:
    store, saver = InMemoryStore(), InMemorySaver()
    record_owner(store, "t-zed", "zed")
    MemoryQueue(store).enqueue(
        "t-zed",
        Context(user_id="zed"),
        [{"id": "zed-1", "role": "user", "content": f"Call {SECRET}"}],
        now=datetime(2026, 11, 1, tzinfo=UTC),
    )
    job = {"thread_id": "t-zed", "summary": {"intent": f"user's line is {SECRET}"}, "version": 1}
    store.put(thread_compaction_jobs("t-zed"), "job-1", job)

    receipt = forget(store, saver, "zed", text=SECRET)

    queued = store.get(memory_queue(), "t-zed")
    assert queued is not None
    assert queued.value["user_id"] == "zed" and queued.value["thread_id"] == "t-zed"
    assert queued.value["rows"][0]["content"] == f"Call {REDACTION_MARKER}"
    assert queued.value["rows"][0]["id"] == "zed-1"
    result = store.get(thread_compaction_jobs("t-zed"), "job-1")
    assert result is not None and result.value["version"] == 1
    assert result.value["summary"]["intent"] == f"user's line is {REDACTION_MARKER}"
    assert {place.kind for place in receipt.places} == {
        "queued extraction",
        "background job result",
    }
    assert SECRET not in stored_text(store).replace(json.dumps(receipt.as_dict()), "")


def test_forgetting_a_text_equal_to_the_user_id_keeps_every_record_readable() -> None:
    store, saver = InMemoryStore(), InMemorySaver()
    record_owner(store, "t-zed", "zed")
    MemoryQueue(store).enqueue(
        "t-zed",
        Context(user_id="zed"),
        [{"id": "zed-1", "role": "user", "content": "I am zed"}],
        now=datetime(2026, 11, 1, tzinfo=UTC),
    )

    forget(store, saver, "zed", text="zed")

    queued = store.get(memory_queue(), "t-zed")
    assert queued is not None and queued.value["user_id"] == "zed"
    assert queued.value["rows"][0] == {
        "id": "zed-1",
        "role": "user",
        "content": f"I am {REDACTION_MARKER}",
    }


def compacted_thread(store: InMemoryStore, saver: InMemorySaver, thread_id: str) -> Any:
    graph = build_graph(
        models=Models(
            main=ScriptedChatModel(responder=lambda messages: AIMessage("Noted.")),
            summary=demo_summarizer(),
        ),
        settings=Settings(
            trigger_messages=6, keep_messages=2, memory_extraction="off", memory_mode="off"
        ),
        checkpointer=saver,
        store=store,
    )
    filler = " Keep the report, the budget and the plan in mind." * 20
    texts = [f"My line is {SECRET}." + filler, *(f"Step {i}." + filler for i in range(5))]
    for number, text in enumerate(texts):
        graph.invoke(
            {"messages": [HumanMessage(text, id=f"m{number}")]},
            {"configurable": {"thread_id": thread_id}},
            context=Context(user_id="zed"),
        )
    return graph


def test_a_forget_stopped_after_the_archive_is_finished_by_the_next_one() -> None:
    store, saver = InMemoryStore(), InMemorySaver()
    graph = compacted_thread(store, saver, "t-zed")
    config = {"configurable": {"thread_id": "t-zed"}}
    mark = graph.get_state(config).values["compaction"]
    assert verify_thread(store, "t-zed", mark).ok
    # A forget that stopped after redacting the archive: the state's mark is the old one.
    redact_archive(
        store,
        "t-zed",
        Redactor.for_text(SECRET),
        mark,
        receipt_id=new_receipt_id(),
        at=receipt_time(),
    )
    assert not verify_thread(store, "t-zed", graph.get_state(config).values["compaction"]).ok

    forget(store, saver, "zed", text=SECRET)

    values = graph.get_state(config).values
    report = verify_thread(store, "t-zed", values["compaction"])
    assert report.ok, report
    assert len(report.redactions) == 1
    assert SECRET not in str(values["messages"]) + str(values.get("summary"))
    graph.invoke(
        {"messages": [HumanMessage("And now?", id="m9")]}, config, context=Context(user_id="zed")
    )
    assert verify_thread(store, "t-zed", graph.get_state(config).values["compaction"]).ok


def test_a_thread_with_pending_writes_is_skipped_before_anything_is_written() -> None:
    store, saver = InMemoryStore(), InMemorySaver()
    graph = compacted_thread(store, saver, "t-zed")
    config: Any = {"configurable": {"thread_id": "t-zed"}}
    head = saver.get_tuple(config)
    assert head is not None
    saver.put_writes(head.config, [("messages", [HumanMessage("in flight", id="x")])], "task-1")
    before = stored_text(store)

    receipt = forget(store, saver, "zed", text=SECRET)

    assert receipt.skipped and "t-zed" in receipt.skipped[0]
    assert SECRET in stored_text(store)  # the archive is untouched
    values = graph.get_state(config).values
    assert verify_thread(store, "t-zed", values["compaction"]).ok
    assert all(
        place.kind == "memory fact" or "t-zed" not in place.where for place in receipt.places
    )
    assert before.count(SECRET) == stored_text(store).count(SECRET)
