"""The async path of ``create_agent`` with ctxgraph's middleware works as the sync one.

The same scripted session, run with ``invoke`` on the sync Postgres savers and with
``ainvoke`` on the async ones, sends the model the same requests and leaves the same
window, mark, archive and memory. Streamed with ``stream_mode="messages"``, a run shows
the agent's own answers only: no chunk of a summary or a memory-extraction call, even
when the agent's model writes those too.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk, BaseMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.nodes.compaction.summarizer import SUMMARY_TAGS
from ctxgraph.nodes.memory.extract import MEMORY_TAGS
from ctxgraph.state import Context, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.archive import averify_thread, verify_thread
from ctxgraph.store.persistence.connection import Persistence, open_async_persistence
from tests.support.agents import (
    archived,
    config,
    every_role,
    message_key,
    session_agent,
    session_keys,
    user_turn,
)
from tests.support.scripted import is_summary_request

SETTINGS = Settings(trigger_messages=12, keep_messages=4, memory_extraction="inline")
TURNS = 12
FACT = "I usually ship to Berlin."


def turn(n: int) -> dict[str, Any]:
    return user_turn(n, f"Where is order A-{n}? {FACT}" if n == 1 else None)


def shown(requests: Sequence[Sequence[BaseMessage]]) -> list[list[tuple[str, str]]]:
    """The requests as (type, text) pairs: what the model read, without generated ids."""
    return [[(m.type, m.text) for m in request] for request in requests]


async def test_ainvoke_sends_the_same_requests_and_keeps_the_same_record(
    persistence: Persistence, database_uri: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    sync_model = ScriptedChatModel(responder=every_role)
    sync_agent = session_agent(sync_model, SETTINGS, persistence.checkpointer, persistence.store)
    sync_user, sync_thread = Context(user_id=f"sync-{tag}"), f"t-sync-{tag}"
    for n in range(1, TURNS + 1):
        sync_agent.invoke(turn(n), config(sync_thread), context=sync_user)
    sync_state = sync_agent.get_state(config(sync_thread)).values

    async_model = ScriptedChatModel(responder=every_role)
    async_user, async_thread = Context(user_id=f"async-{tag}"), f"t-async-{tag}"
    async with open_async_persistence(database_uri) as apersistence:
        agent = session_agent(async_model, SETTINGS, apersistence.checkpointer, apersistence.store)
        for n in range(1, TURNS + 1):
            await agent.ainvoke(turn(n), config(async_thread), context=async_user)
        state = (await agent.aget_state(config(async_thread))).values
        report = await averify_thread(apersistence.store, async_thread, state["compaction"])
        assert report.ok, report

    assert shown(async_model.requests) == shown(sync_model.requests)
    assert sum(map(is_summary_request, async_model.requests)) >= 3
    mark = state["compaction"]
    assert mark["version"] == sync_state["compaction"]["version"]
    assert mark["cursor"] == sync_state["compaction"]["cursor"]
    assert [message_key(m) for m in state["messages"]] == [
        message_key(m) for m in sync_state["messages"]
    ]
    store = persistence.store
    folded = archived(store, async_thread)
    assert [message_key(m) for m in folded + list(state["messages"])] == session_keys(
        range(1, TURNS + 1)
    )
    assert [m.text for m in folded] == [m.text for m in archived(store, sync_thread)]
    assert verify_thread(store, sync_thread, sync_state["compaction"]).ok
    memory = MemoryRepository(store)
    assert [f.content for f in memory.list_facts(async_user)] == [FACT]
    assert [f.content for f in memory.list_facts(sync_user)] == [FACT]


@pytest.mark.parametrize("mode", ["async", "sync"])
async def test_streamed_messages_hold_no_summary_or_extraction_chunk(mode: str) -> None:
    model = ScriptedChatModel(responder=every_role)  # it writes summaries and memory too
    agent = session_agent(model, SETTINGS, InMemorySaver(), InMemoryStore())
    ctx = Context(user_id="u-stream")
    streamed: list[tuple[BaseMessage, dict[str, Any]]] = []
    for n in range(1, TURNS + 1):
        args = (turn(n), config("t-stream"))
        if mode == "async":
            async for chunk, meta in agent.astream(*args, context=ctx, stream_mode="messages"):
                streamed.append((chunk, meta))
        else:
            for chunk, meta in agent.stream(*args, context=ctx, stream_mode="messages"):
                streamed.append((chunk, meta))

    summaries = sum(map(is_summary_request, model.requests))
    extractions = len(model.requests) - summaries - 2 * TURNS
    assert summaries >= 3 and extractions >= 1  # both kinds of call ran in the stream
    answers: dict[str, str] = {}
    for chunk, meta in streamed:
        assert not set(SUMMARY_TAGS + MEMORY_TAGS) & set(meta.get("tags") or []), meta
        if isinstance(chunk, AIMessageChunk):
            assert meta["langgraph_node"] == "model", meta
            assert all(call["name"] == "lookup" for call in chunk.tool_call_chunks), chunk
            answers[str(chunk.id)] = answers.get(str(chunk.id), "") + chunk.text
        elif isinstance(chunk, ToolMessage):
            assert meta["langgraph_node"] == "tools" and chunk.name == "lookup", chunk
        else:  # a compaction's removal of the folded messages, as the graph streams it
            assert isinstance(chunk, RemoveMessage) and chunk.text == "", chunk
            assert meta["langgraph_node"] == "CompactionMiddleware.before_model", meta
    replies = {f"Order A-{n} has shipped." for n in range(1, TURNS + 1)}
    assert {text for text in answers.values() if text} == replies
