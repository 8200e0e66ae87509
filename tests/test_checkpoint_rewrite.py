"""Forgotten text leaves every checkpoint of a thread, and the thread keeps working."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.memory import InMemoryStore
from psycopg import sql

from ctxgraph import Context, Settings, build_graph
from ctxgraph.graph import as_subgraph
from ctxgraph.graph.builder import Graph
from ctxgraph.state.messages import content_text
from ctxgraph.state.models import Models
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.persistence import (
    CheckpointRewrite,
    PendingWritesError,
    Persistence,
    ThreadBusyError,
    arewrite_thread,
    open_async_persistence,
    rewrite_thread,
)
from ctxgraph.store.redaction import REDACTION_MARKER, Redactor

CONTEXT = Context(user_id="rewrite-user")
SETTINGS = Settings(memory_extraction="off", memory_mode="off")


def echo_model() -> ScriptedChatModel:
    """Answers every call by quoting the last user message, so replies hold the needle too."""

    def reply(messages: list[BaseMessage]) -> AIMessage:
        last = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        return AIMessage(content=f"Noted: {content_text(last)}")

    return ScriptedChatModel(responder=reply)


def graph_on(checkpointer: Any, store: Any, model: ScriptedChatModel) -> Graph:
    return build_graph(
        checkpointer=checkpointer, store=store, models=Models(main=model), settings=SETTINGS
    )


def unique_needle() -> str:
    return f"Kestrel-{uuid.uuid4().hex[:8]} vault code"


def turns(needle: str) -> list[str]:
    return [
        f"My {needle} is in the drawer.",
        "What is the weather like?",
        f"Repeat this: {needle}.",
    ]


def config_of(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def transform_for(needle: str) -> Any:
    redactor = Redactor.for_text(needle)
    return lambda _channel, value: redactor.value(value)


def rows_holding(uri: str, needle: str) -> dict[str, int]:
    """Per table of the public schema, the rows whose text or bytes hold ``needle``."""
    found: dict[str, int] = {}
    with psycopg.connect(uri, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
        ]
        for table in tables:
            blobs = [
                row[0]
                for row in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE "
                    "table_schema = 'public' AND table_name = %s AND data_type = 'bytea'",
                    (table,),
                )
            ]
            tests: list[sql.Composable] = [sql.SQL("t::text ILIKE %s")]
            tests += [
                sql.SQL("position(convert_to(%s, 'UTF8') in {}) > 0").format(sql.Identifier(c))
                for c in blobs
            ]
            query = sql.SQL("SELECT count(*) FROM {} AS t WHERE {}").format(
                sql.Identifier(table), sql.SQL(" OR ").join(tests)
            )
            params = [f"%{needle}%", *([needle] * len(blobs))]
            row = conn.execute(query, params).fetchone()
            if row and row[0]:
                found[table] = row[0]
    return found


def history(graph: Graph, thread_id: str) -> list[Any]:
    return list(graph.get_state_history(config_of(thread_id)))


def run_turns(graph: Graph, thread_id: str, needle: str) -> int:
    """Run the needle turns; returns how many checkpoints one turn adds."""
    graph.invoke({"messages": [("user", turns(needle)[0])]}, config_of(thread_id), context=CONTEXT)
    per_turn = len(history(graph, thread_id))
    for text in turns(needle)[1:]:
        graph.invoke({"messages": [("user", text)]}, config_of(thread_id), context=CONTEXT)
    return per_turn


def assert_next_turn_is_one_normal_turn(
    graph: Graph, model: ScriptedChatModel, thread_id: str, needle: str, per_turn: int
) -> None:
    before = graph.get_state(config_of(thread_id)).values["messages"]
    calls = model.calls
    graph.invoke({"messages": [("user", "And now?")]}, config_of(thread_id), context=CONTEXT)
    assert model.calls == calls + 1
    request = " ".join(content_text(m) for m in model.requests[-1])
    assert needle.lower() not in request.lower()
    assert REDACTION_MARKER in request
    after = graph.get_state(config_of(thread_id)).values["messages"]
    assert [m.id for m in after[: len(before)]] == [m.id for m in before]
    assert [content_text(m) for m in after[len(before) :]] == ["And now?", "Noted: And now?"]
    assert len(history(graph, thread_id)) == 1 + per_turn


def test_postgres_thread_loses_the_text_everywhere_and_runs_on(
    persistence: Persistence, thread_id: str
) -> None:
    needle = unique_needle()
    model = echo_model()
    graph = graph_on(persistence.checkpointer, persistence.store, model)
    per_turn = run_turns(graph, thread_id, needle)
    ids = [m.id for m in graph.get_state(config_of(thread_id)).values["messages"]]
    checkpoints = len(history(graph, thread_id))
    assert {"checkpoint_blobs", "checkpoint_writes"} <= set(rows_holding(persistence.uri, needle))

    result = rewrite_thread(persistence.checkpointer, thread_id, transform_for(needle))

    assert result.head == {"messages": 4}
    assert result.older > 0
    assert result.older_checkpoints == checkpoints - 1
    assert result.rewritten
    assert rows_holding(persistence.uri, needle) == {}
    state = graph.get_state(config_of(thread_id))
    messages = state.values["messages"]
    assert [m.id for m in messages] == ids
    assert content_text(messages[0]) == f"My {REDACTION_MARKER} is in the drawer."
    assert content_text(messages[1]) == f"Noted: My {REDACTION_MARKER} is in the drawer."
    assert state.metadata is not None
    assert state.metadata["source"] == "update"
    assert dict(state.metadata)["ctxgraph_redaction"] is True
    assert state.next == ()
    assert len(history(graph, thread_id)) == 1
    assert_next_turn_is_one_normal_turn(graph, model, thread_id, needle, per_turn)


def test_dry_run_and_a_missing_text_change_nothing(
    persistence: Persistence, thread_id: str
) -> None:
    needle = unique_needle()
    graph = graph_on(persistence.checkpointer, persistence.store, echo_model())
    run_turns(graph, thread_id, needle)
    checkpoints = len(history(graph, thread_id))
    holding = rows_holding(persistence.uri, needle)

    dry = rewrite_thread(persistence.checkpointer, thread_id, transform_for(needle), dry_run=True)
    absent = rewrite_thread(persistence.checkpointer, thread_id, transform_for(unique_needle()))

    assert dry.head == {"messages": 4} and dry.older > 0 and not dry.rewritten
    assert dry.older_checkpoints == checkpoints - 1
    assert absent == CheckpointRewrite(
        head={}, older=0, older_checkpoints=checkpoints - 1, rewritten=False
    )
    assert rows_holding(persistence.uri, needle) == holding
    assert len(history(graph, thread_id)) == checkpoints


def test_a_head_with_pending_writes_is_refused(persistence: Persistence, thread_id: str) -> None:
    needle = unique_needle()
    graph = graph_on(persistence.checkpointer, persistence.store, echo_model())
    run_turns(graph, thread_id, needle)
    head = persistence.checkpointer.get_tuple(config_of(thread_id))
    assert head is not None
    # A run in progress: a task has saved its writes against the head.
    persistence.checkpointer.put_writes(
        head.config, [("messages", [HumanMessage(needle, id="in-flight")])], task_id="t1"
    )
    holding = rows_holding(persistence.uri, needle)

    for dry_run in (True, False):
        with pytest.raises(ThreadBusyError, match=f"thread {thread_id} is busy") as raised:
            rewrite_thread(
                persistence.checkpointer, thread_id, transform_for(needle), dry_run=dry_run
            )
        assert isinstance(raised.value, PendingWritesError)
        assert raised.value.pending == 1

    assert rows_holding(persistence.uri, needle) == holding


class CrashBeforePrune(PostgresSaver):
    """A saver whose process dies right after the new head is written."""

    def prune(self, thread_ids: Any, *, strategy: str = "keep_latest") -> None:
        raise SystemExit("killed")


def test_a_crash_between_head_and_prune_loses_nothing_and_a_rerun_finishes(
    persistence: Persistence, thread_id: str
) -> None:
    needle = unique_needle()
    model = echo_model()
    graph = graph_on(persistence.checkpointer, persistence.store, model)
    per_turn = run_turns(graph, thread_id, needle)
    checkpoints = len(history(graph, thread_id))

    with pytest.raises(SystemExit):
        rewrite_thread(
            CrashBeforePrune(persistence.checkpointer.conn), thread_id, transform_for(needle)
        )

    messages = graph.get_state(config_of(thread_id)).values["messages"]
    assert len(messages) == 6
    assert needle not in " ".join(content_text(m) for m in messages)
    assert len(history(graph, thread_id)) == checkpoints + 1

    rerun = rewrite_thread(persistence.checkpointer, thread_id, transform_for(needle))

    assert rerun.head == {} and rerun.older > 0 and rerun.rewritten
    assert rows_holding(persistence.uri, needle) == {}
    assert len(history(graph, thread_id)) == 1
    assert_next_turn_is_one_normal_turn(graph, model, thread_id, needle, per_turn)


def saved_bytes_holding(saver: InMemorySaver, needle: str) -> list[bytes]:
    """The serialized blobs, writes, checkpoints and metadata of ``saver`` holding ``needle``."""
    raw = [blob for _type, blob in saver.blobs.values()]
    raw += [v for outer in saver.writes.values() for (_t, _c, (_k, v), _p) in outer.values()]
    for namespaces in saver.storage.values():
        for rows in namespaces.values():
            raw += [part[1] for row in rows.values() for part in row[:2]]
    return [b for b in raw if needle.encode() in b]


def test_in_memory_saver_is_rewritten_by_delete_and_put(thread_id: str) -> None:
    needle = unique_needle()
    model = echo_model()
    saver = InMemorySaver()
    graph = graph_on(saver, InMemoryStore(), model)
    per_turn = run_turns(graph, thread_id, needle)
    ids = [m.id for m in graph.get_state(config_of(thread_id)).values["messages"]]

    assert saved_bytes_holding(saver, needle)

    result = rewrite_thread(saver, thread_id, transform_for(needle))

    assert result.head == {"messages": 4} and result.older > 0 and result.rewritten
    assert not saved_bytes_holding(saver, needle)
    assert [m.id for m in graph.get_state(config_of(thread_id)).values["messages"]] == ids
    assert len(history(graph, thread_id)) == 1
    assert_next_turn_is_one_normal_turn(graph, model, thread_id, needle, per_turn)


async def test_async_postgres_saver_rewrites_the_thread(database_uri: str, thread_id: str) -> None:
    needle = unique_needle()
    model = echo_model()
    config = config_of(thread_id)
    async with open_async_persistence(database_uri) as persistence:
        graph = graph_on(persistence.checkpointer, persistence.store, model)
        for text in turns(needle):
            await graph.ainvoke({"messages": [("user", text)]}, config, context=CONTEXT)

        result = await arewrite_thread(persistence.checkpointer, thread_id, transform_for(needle))

        assert result.head == {"messages": 4} and result.rewritten
        assert rows_holding(persistence.uri, needle) == {}
        assert len([s async for s in graph.aget_state_history(config)]) == 1
        await graph.ainvoke({"messages": [("user", "And now?")]}, config, context=CONTEXT)
        messages = (await graph.aget_state(config)).values["messages"]
    assert model.calls == 4
    assert needle not in " ".join(content_text(m) for m in model.requests[-1])
    assert [content_text(m) for m in messages[-2:]] == ["And now?", "Noted: And now?"]


def test_a_ctxgraph_subgraph_namespace_is_rewritten_too(
    persistence: Persistence, thread_id: str
) -> None:
    """``prune`` keeps a ``checkpointer=True`` subgraph's head, so that head is redacted."""
    needle = unique_needle()
    model = echo_model()
    builder = StateGraph(MessagesState, context_schema=Context)
    builder.add_node("assistant", as_subgraph(models=Models(main=model), settings=SETTINGS))
    builder.add_edge(START, "assistant")
    builder.add_edge("assistant", END)
    parent = builder.compile(checkpointer=persistence.checkpointer, store=persistence.store)
    child: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "assistant"}}
    for text in turns(needle):
        parent.invoke({"messages": [HumanMessage(text)]}, config_of(thread_id), context=CONTEXT)

    result = rewrite_thread(persistence.checkpointer, thread_id, transform_for(needle))

    assert result.head == {"messages": 4} and result.older >= 4 and result.rewritten
    assert rows_holding(persistence.uri, needle) == {}
    parent.invoke({"messages": [HumanMessage("And now?")]}, config_of(thread_id), context=CONTEXT)
    assert model.calls == 4
    assert needle not in " ".join(content_text(m) for m in model.requests[-1])
    window = parent.get_state(child).values["messages"]
    assert [content_text(m) for m in window[-2:]] == ["And now?", "Noted: And now?"]
    assert len(window) == 8
