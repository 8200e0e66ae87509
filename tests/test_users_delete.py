"""Deleting a user: no row of it is left in any table, other users are untouched."""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from psycopg import sql

from ctxgraph.graph import build_graph
from ctxgraph.graph.cli.main import main
from ctxgraph.graph.cli.threads import verify_thread_command
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.context import ContextError
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import ProfileUpdate
from ctxgraph.store.namespaces import (
    deletion_receipts,
    memory_queue,
    thread_archive,
    thread_artifacts,
    thread_compaction_jobs,
)
from ctxgraph.store.ownership import thread_owner
from ctxgraph.store.persistence.compaction_lease import leases_for, new_holder
from ctxgraph.store.persistence.connection import Persistence, open_persistence
from ctxgraph.store.receipts import FORGET, Place, new_receipt, store_receipt, subject_digest
from ctxgraph.store.user_deletion import adelete_user, delete_user
from tests.test_hybrid_search import index_config

GONE = "zed-7f3a"
KEPT = "ona-41c9"
PROJECT = "harbor-9q"
FILLER = " ".join(["The carrier confirmed the pickup window and the customs papers."] * 6)
LOG = "\n".join(f"{i:05d} GET /orders/{i * 7919 % 100_000:05d} status=200" for i in range(3000))


@tool
def read_log() -> str:
    """Return the whole access log."""
    return LOG


def reply(messages: list[BaseMessage]) -> AIMessage:
    last = messages[-1]
    if isinstance(last, HumanMessage) and "fetch the log" in str(last.content):
        return AIMessage("", tool_calls=[{"name": "read_log", "args": {}, "id": "c1"}])
    if isinstance(last, ToolMessage):
        return AIMessage("The log is stored.")
    return AIMessage("ok")


def graph_on(persistence: Persistence) -> Any:
    return build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=ScriptedChatModel(responder=reply), summary=demo_models().summary),
        tools=[read_log],
        settings=Settings(
            trigger_messages=6,
            keep_messages=2,
            memory_extraction="deferred",
            memory_mode="off",
            offload_tokens=200,
        ),
    )


def turn(graph: Any, thread: str, user: str, text: str) -> None:
    config = {"configurable": {"thread_id": thread}}
    context = Context(user_id=user, project_id=PROJECT)
    graph.invoke({"messages": [HumanMessage(text)]}, config, context=context)


def profile(content: str) -> ProfileUpdate:
    return ProfileUpdate(
        section="work_context",
        content=content,
        scope="user",
        durability="durable",
        authority="descriptive",
        confidence=0.9,
        evidence_message_id="m1",
        evidence_text=content,
    )


def make_user(persistence: Persistence, user: str) -> str:
    """A thread of ``user`` with an artifact, an archive record, a queued extraction, a job
    result and a lease; facts of two agents, a profile, a project fact and a forget receipt."""
    store = persistence.store
    thread = f"t-{uuid.uuid4().hex[:12]}"
    graph = graph_on(persistence)
    turn(graph, thread, user, "Please fetch the log.")
    for number in range(12):
        if store.search(thread_archive(thread), limit=1):
            break
        turn(graph, thread, user, f"Note {number}: I prefer parcels on Mondays. {FILLER}")
    assert store.search(thread_archive(thread), limit=1), "no compaction happened"
    assert store.search(thread_artifacts(thread), limit=1), "no tool result was offloaded"
    assert store.get(memory_queue(), thread) is not None, "no extraction was deferred"
    store.put(thread_compaction_jobs(thread), "job-1", {"thread": thread}, index=False)
    assert leases_for(store).acquire(thread, new_holder(), ttl_s=60) is not None
    repository = MemoryRepository(store)
    context = Context(user_id=user, project_id=PROJECT)
    repository.add_fact(context, f"{user} drinks green tea every morning")
    repository.add_fact(Context(user_id=user, agent_name="helper"), "Likes espresso and trains")
    repository.update_profile(context, profile("Works on harbor logistics software."))
    repository.add_fact(
        context, f"The harbor {user} dock opens at six", scope="project", source_thread=thread
    )
    digest = subject_digest(f"forgotten by {user}")
    store_receipt(store, new_receipt(FORGET, user, digest, [Place("x", "y", 1)], dry_run=False))
    return thread


@dataclass
class World:
    persistence: Persistence
    gone_thread: str
    kept_thread: str


@pytest.fixture
def world(new_database: str) -> Iterator[World]:
    with open_persistence(new_database, index=index_config()) as persistence:
        gone = make_user(persistence, GONE)
        kept = make_user(persistence, KEPT)
        shared = Context(user_id=KEPT, project_id=PROJECT)
        MemoryRepository(persistence.store).add_fact(
            shared, "The gate code changes weekly", scope="project"
        )
        yield World(persistence, gone, kept)


def tables(uri: str) -> list[str]:
    with psycopg.connect(uri) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1"
        ).fetchall()
    return [row[0] for row in rows]


def rows_naming(uri: str, *needles: str) -> dict[str, int]:
    """Rows of every table whose text holds one of ``needles``, per table (non-zero only)."""
    found: dict[str, int] = {}
    with psycopg.connect(uri) as conn:
        for table in tables(uri):
            query = sql.SQL("SELECT count(*) FROM {} AS t WHERE t::text LIKE %s").format(
                sql.Identifier(table)
            )
            for needle in needles:
                row = conn.execute(query, (f"%{needle}%",)).fetchone()
                if row and row[0]:
                    found[table] = found.get(table, 0) + int(row[0])
    return found


def row_counts(uri: str) -> dict[str, int]:
    with psycopg.connect(uri) as conn:
        return {
            table: int(
                conn.execute(
                    sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
                ).fetchone()[0]  # type: ignore[index]
            )
            for table in tables(uri)
        }


def test_no_row_of_the_deleted_user_is_left_and_the_other_user_goes_on(world: World) -> None:
    """A dry run first changes nothing and lists the places the deletion then empties."""
    p = world.persistence
    uri = p.uri
    before = rows_naming(uri, GONE, world.gone_thread)
    for table in (
        "checkpoints",
        "checkpoint_blobs",
        "checkpoint_writes",
        "store",
        "store_vectors",
        "ctxgraph_compaction_leases",
        "ctxgraph_namespace_versions",
        "ctxgraph_namespace_changes",
    ):
        assert before.get(table), f"the setup left no row of the user in {table}"
    kept_before = rows_naming(uri, KEPT, world.kept_thread)
    totals = row_counts(uri)

    dry = delete_user(p.store, p.checkpointer, GONE, dry_run=True, connection=p)
    assert dry.dry_run and row_counts(uri) == totals
    assert p.store.search(deletion_receipts()) == []
    assert dry.lines()[-1].startswith("would remove ")

    receipt = delete_user(p.store, p.checkpointer, GONE, connection=p)

    assert [(x.kind, x.where) for x in dry.places] == [(x.kind, x.where) for x in receipt.places]
    assert {x.kind: x.count for x in dry.places if not x.kind.startswith("change")} == {
        x.kind: x.count for x in receipt.places if not x.kind.startswith("change")
    }

    assert rows_naming(uri, GONE, world.gone_thread) == {}
    assert rows_naming(uri, KEPT, world.kept_thread) == kept_before
    counts = {place.kind: place.count for place in receipt.places}
    assert counts["thread"] == 1
    assert counts["checkpoint"] > 3
    for kind in (
        "archive record",
        "artifact",
        "background job result",
        "thread memory bookkeeping",
        "owner record",
        "queue entry",
        "lease row",
        "memory fact",
        "profile",
        "project fact",
        "forget receipt",
        "vector row",
        "change counter",
        "change log row",
    ):
        assert counts.get(kind), f"the receipt counts no {kind}"
    assert counts["owner record"] == 1 and counts["project fact"] == 1
    stored = p.store.get(deletion_receipts(), receipt.id)
    assert stored is not None and stored.value["subject"] == subject_digest(GONE)
    assert thread_owner(p.store, world.gone_thread) is None  # this process forgot it too

    # The other user's thread still runs and verifies; its memory and the shared facts stay.
    turn(graph_on(p), world.kept_thread, KEPT, "One more note.")
    out = io.StringIO()
    assert verify_thread_command(p, world.kept_thread, out) == 0, out.getvalue()
    kept = Context(user_id=KEPT, project_id=PROJECT)
    project = [fact.content for fact in MemoryRepository(p.store).list_project_facts(kept)]
    assert sorted(project) == [
        "The gate code changes weekly",
        f"The harbor {KEPT} dock opens at six",
    ]
    assert MemoryRepository(p.store).get_profile(kept)["work_context"]
    assert MemoryRepository(p.store).list_facts(Context(user_id=GONE)) == []

    # A rerun finds nothing and writes nothing.
    totals = row_counts(uri)
    again = delete_user(p.store, p.checkpointer, GONE, connection=p)
    assert again.places == () and again.lines()[-1] == "nothing found"
    assert row_counts(uri) == totals


def test_the_async_deletion_removes_the_same_rows(new_database: str) -> None:
    from ctxgraph.store.persistence.connection import open_async_persistence

    with open_persistence(new_database) as persistence:
        thread = make_user(persistence, GONE)

    async def run() -> Any:
        async with open_async_persistence(new_database) as db:
            return await adelete_user(db.store, db.checkpointer, GONE, connection=db)

    receipt = asyncio.run(run())
    assert {place.kind for place in receipt.places} >= {"checkpoint", "artifact", "memory fact"}
    assert rows_naming(new_database, GONE, thread) == {}


def test_in_memory_stores_work_too() -> None:
    store, saver = InMemoryStore(), InMemorySaver()
    graph = build_graph(
        checkpointer=saver,
        store=store,
        models=Models(main=ScriptedChatModel(responder=reply)),
        settings=Settings(memory_extraction="off", memory_mode="off"),
    )
    for user, thread in ((GONE, "t-a"), (KEPT, "t-b")):
        turn(graph, thread, user, "hello")
        MemoryRepository(store).add_fact(Context(user_id=user), "Likes tea")
    receipt = delete_user(store, saver, GONE)
    assert {place.kind for place in receipt.places} >= {"thread", "checkpoint", "memory fact"}
    assert saver.get_tuple({"configurable": {"thread_id": "t-a"}}) is None
    assert saver.get_tuple({"configurable": {"thread_id": "t-b"}}) is not None
    left = [ns for ns in store.list_namespaces() if store.search(ns, limit=1)]
    assert [ns for ns in left if GONE in ns or "t-a" in ns] == []
    assert MemoryRepository(store).list_facts(Context(user_id=KEPT))


@pytest.mark.parametrize("user", ["projects", "bad id", ""])
def test_an_invalid_or_reserved_user_id_is_refused(user: str) -> None:
    with pytest.raises(ContextError):
        delete_user(InMemoryStore(), InMemorySaver(), user)


def test_the_command_line(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = world.persistence.uri
    monkeypatch.setenv("DATABASE_URI", uri)
    totals = row_counts(uri)

    assert main(["users", "delete", "projects"]) == 2
    assert main(["users", "delete", "bad id"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("ctxgraph: user_id") for line in err)
    assert row_counts(uri) == totals

    assert main(["users", "delete", GONE, "--dry-run"]) == 0
    dry = capsys.readouterr().out.splitlines()
    assert dry[0].startswith(f"delete user {subject_digest(GONE)} ")
    assert dry[-1].startswith("would remove ") and "receipt" not in dry[-1]
    assert any(line.strip().startswith("checkpoint checkpointer: ") for line in dry)
    assert row_counts(uri) == totals

    assert main(["users", "delete", GONE]) == 0
    done = capsys.readouterr().out.splitlines()
    assert done[-1].startswith("removed ") and "; receipt " in done[-1]
    assert GONE not in "\n".join(done) and world.gone_thread not in "\n".join(done)
    assert rows_naming(uri, GONE, world.gone_thread) == {}

    assert main(["users", "delete", GONE]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "nothing found"
