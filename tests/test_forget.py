"""Forget everywhere, on the embedded Postgres: the Zed scenario, ending in 0 places.

A phone number is stored as a fact; the thread then compacts and a pasted document
holding the number is offloaded. ``forget --fact`` must leave the number in no row of
any table (Store, checkpoints, blobs, writes, ctxgraph's own tables), keep the archive
verifiable with the redaction listed, leave a receipt, and let the thread run on without
the model ever seeing the number again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from ctxgraph import SubagentsPart
from ctxgraph.graph import build_graph, wait_for_memory
from ctxgraph.graph.cli.main import main
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.forget import ForgetError, aforget, forget
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.ownership import ThreadOwnerError
from ctxgraph.store.persistence.archive import verify_thread
from ctxgraph.store.persistence.connection import (
    Persistence,
    open_async_persistence,
    open_persistence,
)
from ctxgraph.store.receipts import receipt_namespace
from ctxgraph.store.redaction import REDACTION_MARKER, RedactionError
from tests.support.scripted import demo_summarizer, main_requests
from tests.support.table_scan import rows_holding

USER = "zed"
NUMBER = "555-0199"
STATEMENT = f"My name is Zed and I usually take calls on {NUMBER}."
FILLER = " Keep the quarterly report, the budget sheet and the travel plan in mind." * 20


@pytest.fixture
def fresh(new_database: str) -> Iterator[tuple[Persistence, str]]:
    """A database of this test's own, so a scan of every table sees only this test's rows."""
    with open_persistence(new_database) as opened:
        yield opened, new_database


def memory_reply(messages: list[BaseMessage]) -> AIMessage:
    """Extract the statement as the fact ``name_is_zed``; nothing from other turns."""
    prompt = str(messages[-1].content)
    facts: list[dict[str, Any]] = []
    if STATEMENT in prompt:
        facts.append(
            {
                "key": "name_is_zed",
                "content": f"The user's name is Zed; takes calls on {NUMBER}",
                "category": "context",
                "confidence": 0.95,
                "scope": "user",
                "durability": "durable",
                "authority": "descriptive",
                "evidence_message_id": "zed-1",
                "evidence_text": STATEMENT,
            }
        )
    args = {"facts": facts, "profile_updates": []}
    return AIMessage(content="", tool_calls=[{"name": "MemoryUpdate", "args": args, "id": "m"}])


def make_graph(persistence: Persistence, main_model: ScriptedChatModel) -> Any:
    return build_graph(
        models=Models(
            main=main_model,
            summary=demo_summarizer(),
            memory=ScriptedChatModel(responder=memory_reply),
        ),
        settings=Settings(trigger_messages=8, keep_messages=2, offload_input_tokens=1_500),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )


def run_session(persistence: Persistence, thread_id: str) -> tuple[Any, ScriptedChatModel]:
    main_model = ScriptedChatModel(responder=lambda messages: AIMessage("Noted."))
    graph = make_graph(persistence, main_model)
    document = (
        "\n".join(f"{i:04d} contact sheet line: call the desk" for i in range(300))
        + f"\n0300 Zed's direct line is {NUMBER}\n"
    )
    turns = [
        HumanMessage(STATEMENT, id="zed-1"),
        HumanMessage("First, the plan." + FILLER, id="zed-2"),
        HumanMessage("Second, the budget." + FILLER, id="zed-3"),
        HumanMessage(document, id="zed-4"),
        HumanMessage("Third, the travel." + FILLER, id="zed-5"),
        HumanMessage("Fourth, wrap up." + FILLER, id="zed-6"),
    ]
    for message in turns:
        graph.invoke(
            {"messages": [message]},
            {"configurable": {"thread_id": thread_id}},
            context=Context(user_id=USER),
        )
    assert wait_for_memory(30) == 0  # extracted in the background (the default)
    return graph, main_model


def test_forgetting_a_fact_leaves_its_number_in_no_row_and_the_thread_verifiable(
    fresh: tuple[Persistence, str],
    thread_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    persistence, database_uri = fresh
    monkeypatch.setenv("DATABASE_URI", database_uri)
    graph, main_model = run_session(persistence, thread_id)
    store = persistence.store
    state = graph.get_state({"configurable": {"thread_id": thread_id}}).values
    assert state.get("compaction", {}).get("version", 0) >= 1  # the thread compacted
    before = rows_holding(database_uri, NUMBER)
    assert {"store", "checkpoint_blobs"} <= set(before), before  # the copies exist
    assert [f.key for f in MemoryRepository(store).list_facts(Context(user_id=USER))] == [
        "name_is_zed"
    ]

    receipt = forget(store, persistence.checkpointer, USER, fact="name_is_zed")

    kinds = {place.kind for place in receipt.places}
    assert {"memory fact", "archive record", "artifact", "older checkpoints"} <= kinds, kinds
    assert rows_holding(database_uri, NUMBER) == {}
    assert rows_holding(database_uri, "My name is Zed and I usually") == {}
    assert MemoryRepository(store).list_facts(Context(user_id=USER)) == []
    # The receipt is stored, names what was removed by digest only.
    stored = store.get(receipt_namespace(receipt), receipt.id)
    assert stored is not None and stored.value["digest"] == receipt.digest
    assert NUMBER not in json.dumps(stored.value)
    # The archive verifies, with the redaction listed.
    mark = graph.get_state({"configurable": {"thread_id": thread_id}}).values["compaction"]
    report = verify_thread(store, thread_id, mark)
    assert report.ok, report
    assert report.redactions and report.redactions[0].receipt == receipt.id
    assert main(["threads", "verify", thread_id, "--user", USER]) == 0
    assert "1 redaction" in capsys.readouterr().out
    assert main(["threads", "show", thread_id, "--user", USER]) == 0
    shown = capsys.readouterr().out
    assert REDACTION_MARKER in shown and NUMBER not in shown
    assert "different content" not in shown and "BROKEN" not in shown
    # Message ids survive; the window holds markers where the text was.
    values = graph.get_state({"configurable": {"thread_id": thread_id}}).values
    window = {message.id: message for message in values["messages"]}
    assert len(window) == len(values["messages"])
    assert all(NUMBER not in str(message.content) for message in values["messages"])
    # The thread runs on; the model's next request does not hold the number.
    seen = len(main_requests(main_model))
    graph.invoke(
        {"messages": [HumanMessage("What number do I take calls on?", id="zed-7")]},
        {"configurable": {"thread_id": thread_id}},
        context=Context(user_id=USER),
    )
    requests = main_requests(main_model)[seen:]
    assert requests
    assert all(NUMBER not in str(m.content) for request in requests for m in request)
    assert any(REDACTION_MARKER in str(m.content) for request in requests for m in request)
    # A second forget finds nothing more.
    again = forget(store, persistence.checkpointer, USER, text=NUMBER)
    assert again.places == ()


def test_a_dry_run_lists_the_places_and_changes_nothing(
    fresh: tuple[Persistence, str], thread_id: str
) -> None:
    persistence, database_uri = fresh
    run_session(persistence, thread_id)
    before = rows_holding(database_uri, NUMBER)

    receipt = forget(persistence.store, persistence.checkpointer, USER, text=NUMBER, dry_run=True)

    assert receipt.dry_run and receipt.total() > 0
    assert rows_holding(database_uri, NUMBER) == before
    assert persistence.store.get(receipt_namespace(receipt), receipt.id) is None


def test_forget_refuses_what_it_cannot_do(persistence: Persistence, thread_id: str) -> None:
    store, saver = persistence.store, persistence.checkpointer
    with pytest.raises(ForgetError, match="exactly one"):
        forget(store, saver, USER)
    with pytest.raises(ForgetError, match="no fact with key 'nope'"):
        forget(store, saver, USER, fact="nope")
    with pytest.raises(RedactionError, match="at least 3"):
        forget(store, saver, USER, text="ab")
    run_session(persistence, thread_id)
    with pytest.raises(ThreadOwnerError):
        forget(store, saver, "mallory", text=NUMBER, thread_id=thread_id)
    # Another user's forget reaches none of zed's threads.
    other = forget(store, saver, "mallory", text=NUMBER)
    assert other.places == ()


def test_the_command_line_prints_a_receipt_and_refuses_bad_input(
    fresh: tuple[Persistence, str],
    thread_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    persistence, database_uri = fresh
    monkeypatch.setenv("DATABASE_URI", database_uri)
    run_session(persistence, thread_id)

    assert main(["forget", "--user", USER, "--text", NUMBER, "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "would remove" in dry and f"thread {thread_id}" in dry
    assert rows_holding(database_uri, NUMBER)

    assert main(["forget", "--user", USER, "--text", NUMBER, "--thread", thread_id]) == 0
    done = capsys.readouterr().out
    assert "removed" in done and "receipt" in done and NUMBER not in done
    assert rows_holding(database_uri, NUMBER) == {}

    assert main(["forget", "--user", USER, "--fact", "nope"]) == 2
    assert "no fact with key 'nope'" in capsys.readouterr().err


async def test_the_async_forget_reaches_the_same_places(
    fresh: tuple[Persistence, str], thread_id: str
) -> None:
    persistence, database_uri = fresh
    run_session(persistence, thread_id)
    async with open_async_persistence(database_uri) as apersistence:
        receipt = await aforget(
            apersistence.store, apersistence.checkpointer, USER, fact="name_is_zed"
        )
    assert receipt.total() > 0
    assert rows_holding(database_uri, NUMBER) == {}


def test_a_forgotten_fact_takes_its_vector_rows_with_it(new_database: str) -> None:
    from tests.test_hybrid_search import index_config

    with open_persistence(new_database, index=index_config()) as persistence:
        store = persistence.store
        context = Context(user_id=USER)
        MemoryRepository(store).add_fact(context, f"Takes calls on {NUMBER}", key="phone")
        MemoryRepository(store).add_fact(context, "Writes Rust", key="lang")

        def vectors(key: str) -> int:
            with psycopg.connect(new_database) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM store_vectors WHERE key = %s", (key,)
                ).fetchone()
            return int(row[0]) if row else 0

        assert vectors("phone") > 0 and vectors("lang") > 0
        receipt = forget(store, persistence.checkpointer, USER, text=NUMBER)
        assert [place.kind for place in receipt.places] == ["memory fact"]
        assert vectors("phone") == 0 and vectors("lang") > 0
        assert [fact.key for fact in MemoryRepository(store).search(context, "rust")] == ["lang"]


def test_a_subagent_s_transcript_and_checkpoints_lose_the_text_too(
    fresh: tuple[Persistence, str], thread_id: str
) -> None:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool

    from ctxgraph import SubagentSpec

    persistence, database_uri = fresh

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        return f"the desk for {query} answers on {NUMBER}"

    def parent(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("The researcher found it.")
        if "desk" not in str(messages[-1].content):
            return AIMessage("You're welcome.")
        args = {"description": "find Zed's desk line", "subagent_type": "researcher"}
        call = {"name": "task", "args": args, "id": "t1", "type": "tool_call"}
        return AIMessage(content="", tool_calls=[call])

    def child(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(f"Zed's desk answers on {NUMBER}.")
        call = {"name": "lookup", "args": {"query": "Zed"}, "id": "l1", "type": "tool_call"}
        return AIMessage(content="", tool_calls=[call])

    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=ScriptedChatModel(responder=parent)),
        settings=Settings(memory_extraction="off", memory_mode="off"),
        parts=[
            SubagentsPart(
                [
                    SubagentSpec(
                        name="researcher",
                        description="Researches one question.",
                        system_prompt="You research one question.",
                        tools=(lookup,),
                        model=ScriptedChatModel(responder=child),
                    )
                ]
            )
        ],
    )
    config: Any = {"configurable": {"thread_id": thread_id}}
    graph.invoke(
        {"messages": [HumanMessage("Where is Zed's desk?")]}, config, context=Context(user_id=USER)
    )
    before = rows_holding(database_uri, NUMBER)
    assert {"store", "checkpoint_blobs"} <= set(before), before

    receipt = forget(persistence.store, persistence.checkpointer, USER, text=NUMBER)

    assert "artifact" in {place.kind for place in receipt.places}  # the transcript
    assert rows_holding(database_uri, NUMBER) == {}
    graph.invoke({"messages": [HumanMessage("Thanks.")]}, config, context=Context(user_id=USER))
    assert rows_holding(database_uri, NUMBER) == {}


def test_a_busy_thread_is_skipped_and_the_fact_kept_for_the_next_forget(
    fresh: tuple[Persistence, str],
    thread_id: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ctxgraph.store.persistence.thread_lock import thread_lock

    persistence, database_uri = fresh
    monkeypatch.setenv("DATABASE_URI", database_uri)
    run_session(persistence, thread_id)
    command = ["forget", "--user", USER, "--fact", "name_is_zed", "--wait", "0"]

    with thread_lock(persistence, thread_id, wait=0):  # a turn is running
        assert main(command) == 3
    out = capsys.readouterr().out
    assert f"skipped thread {thread_id} is busy" in out and "run it again" in out
    assert rows_holding(database_uri, NUMBER)  # the thread is as it was
    facts = MemoryRepository(persistence.store).list_facts(Context(user_id=USER))
    assert [fact.key for fact in facts] == ["name_is_zed"]  # kept: the rerun needs its text

    assert main(command) == 0
    assert rows_holding(database_uri, NUMBER) == {}
    assert MemoryRepository(persistence.store).list_facts(Context(user_id=USER)) == []
