"""ctxgraph's command line on a thread run by ``create_agent`` with ctxgraph's middleware.

The agent runs on the embedded Postgres (``PostgresSaver`` + ``PostgresStore``), compacts,
offloads a large tool result and extracts a fact; then ``threads show/verify/artifact``,
``memory list/search/export`` and ``forget`` read and change its thread as they do a
thread of ctxgraph's own graph, and the run reports what its model calls cost
(``model_usage``, the ``compaction.summarized`` and ``memory.extracted`` events).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import wait_for_memory
from ctxgraph.graph.cli.main import main
from ctxgraph.graph.cli.threads import load_thread
from ctxgraph.middleware import ctxgraph_middleware
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.archive import record_messages
from ctxgraph.store.persistence.connection import (
    Persistence,
    open_async_persistence,
    open_persistence,
)
from ctxgraph.store.redaction import REDACTION_MARKER
from tests.support.scripted import demo_summarizer, main_requests
from tests.support.table_scan import rows_holding
from tests.test_cli_usage import table
from tests.test_forget import NUMBER, STATEMENT, USER, memory_reply

ORDERS = ["A-21", "A-22", "A-23", "A-24", "A-25"]
TURNS = [STATEMENT, *(f"Where is order {order}?" for order in ORDERS)]
SETTINGS = Settings(trigger_messages=8, keep_messages=2, offload_tokens=300)
"""Compacts every turn or two; the lookup's result (about 400 tokens) is offloaded."""


@tool
def lookup(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: shipped; the desk answers on {NUMBER}. " + "details " * 400


def agent_reply(messages: list[BaseMessage]) -> AIMessage:
    """Look an order up when asked about one, then answer; anything else is noted."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage("Found it.")
    asked = re.search(r"order (A-\d+)", str(last.content))
    if asked is None:
        return AIMessage("Noted.")
    call = {"name": "lookup", "args": {"order_id": asked[1]}, "id": f"call-{asked[1]}"}
    return AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])


def make_agent(persistence: Any, settings: Settings = SETTINGS) -> tuple[Any, ScriptedChatModel]:
    """``create_agent`` with ctxgraph's middleware on ``persistence``; and its model."""
    model = ScriptedChatModel(responder=agent_reply)
    models = Models(
        main=model,
        summary=demo_summarizer(),
        memory=ScriptedChatModel(responder=memory_reply),
    )
    agent = create_agent(
        model,
        [lookup],
        middleware=ctxgraph_middleware(models=models, settings=settings),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        context_schema=Context,
    )
    return agent, model


def config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def run_session(persistence: Persistence, thread_id: str) -> tuple[Any, ScriptedChatModel]:
    """The statement, then one order question a turn; memory extracted in the background."""
    agent, model = make_agent(persistence)
    for number, text in enumerate(TURNS, start=1):
        message = HumanMessage(text, id=f"zed-{number}")
        agent.invoke({"messages": [message]}, config(thread_id), context=Context(user_id=USER))
    assert wait_for_memory(30) == 0
    return agent, model


def command(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.fixture
def fresh(new_database: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Persistence]:
    """A database of this test's own (the command line's too), so a table scan sees only it."""
    monkeypatch.setenv("DATABASE_URI", new_database)
    with open_persistence(new_database) as opened:
        yield opened


@pytest.fixture
def cli_database(persistence: Persistence, monkeypatch: pytest.MonkeyPatch) -> Persistence:
    """The session database, which the command line opens too."""
    monkeypatch.setenv("DATABASE_URI", persistence.uri)
    return persistence


def test_threads_show_and_verify_read_the_agent_s_thread_with_its_usage(
    cli_database: Persistence, thread_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    agent, _ = run_session(cli_database, thread_id)
    values = agent.get_state(config(thread_id)).values
    version = values["compaction"]["version"]
    assert version >= 2  # the thread compacted more than once

    status, shown, _ = command(
        ["threads", "show", thread_id, "--user", USER, "--summary", "--usage"], capsys
    )

    assert status == 0
    thread = load_thread(cli_database, thread_id)
    everything = [m for record in thread.archive for m in record_messages(record)]
    everything += thread.window
    archived = len(everything) - len(values["messages"])
    assert shown.splitlines()[0] == (
        f"thread {thread_id}: {len(everything)} messages ({archived} archived in "
        f"{version} compactions, {len(values['messages'])} in the window)"
    )
    positions = [shown.index(f"user: {text}") for text in TURNS]
    assert positions == sorted(positions)  # every user message, in order
    assert f"current summary (v{version}):" in shown
    assert "lookup" in shown and "[offloaded: artifact art-" in shown
    # The usage table is the thread's model_usage: every main call, summary and extraction.
    rows = table(shown)
    usage = values["model_usage"]
    answers = sum(1 for m in everything if isinstance(m, AIMessage))
    assert rows["main"][0] == usage["main"]["calls"] == answers
    assert rows["summary"][0] == usage["summary"]["calls"] >= version
    assert rows["memory"][0] == usage["memory"]["calls"] >= 1
    for role in ("main", "summary", "memory"):
        assert rows[role][1] == usage[role]["input_tokens"] > 0

    status, verified, _ = command(["threads", "verify", thread_id, "--user", USER], capsys)
    assert (status, verified) == (
        0,
        f"thread {thread_id}: intact ({version} compaction versions verified against the "
        "thread state)\n",
    )

    stub = next(m for m in everything if "offload" in m.additional_kwargs)
    ref = stub.additional_kwargs["offload"]["ref"]
    status, text, _ = command(["threads", "artifact", thread_id, ref, "--user", USER], capsys)
    assert status == 0 and text.startswith("order A-") and text.count("details") == 400

    status, _, refused = command(["threads", "show", thread_id, "--user", "mallory"], capsys)
    assert status == 2 and "belongs to another user" in refused


def test_memory_list_search_and_export_show_what_the_agent_extracted(
    cli_database: Persistence, thread_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    user = f"zed-{thread_id}"
    agent, _ = make_agent(cli_database)
    message = HumanMessage(STATEMENT, id="zed-1")
    agent.invoke({"messages": [message]}, config(thread_id), context=Context(user_id=user))
    assert wait_for_memory(30) == 0

    status, listed, _ = command(["memory", "list", "--user", user], capsys)
    assert status == 0 and f"name_is_zed: The user's name is Zed; takes calls on {NUMBER}" in listed

    status, found, _ = command(["memory", "search", "Zed calls", "--user", user], capsys)
    assert status == 0 and "name_is_zed" in found

    status, exported, _ = command(["memory", "export", "--user", user], capsys)
    bundle = json.loads(exported)
    assert status == 0 and bundle["user_id"] == user
    [fact] = bundle["facts"]
    assert fact["key"] == "name_is_zed"
    assert fact["value"]["source_thread"] == thread_id
    assert fact["value"]["evidence"] == STATEMENT


def test_forget_reaches_every_copy_on_the_agent_s_thread(
    fresh: Persistence, thread_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    agent, model = run_session(fresh, thread_id)
    before = rows_holding(fresh.uri, NUMBER)
    assert {"store", "checkpoint_blobs"} <= set(before), before

    status, done, _ = command(["forget", "--user", USER, "--fact", "name_is_zed"], capsys)

    assert status == 0 and "receipt" in done and NUMBER not in done
    places = done.splitlines()
    assert any(line.startswith("  archive record") for line in places)
    assert any(line.startswith("  artifact") for line in places)
    assert any(line.startswith("  older checkpoints") for line in places)
    assert rows_holding(fresh.uri, NUMBER) == {}
    status, verified, _ = command(["threads", "verify", thread_id, "--user", USER], capsys)
    assert status == 0 and "intact" in verified and "1 redaction" in verified
    status, shown, _ = command(["threads", "show", thread_id, "--user", USER], capsys)
    assert status == 0 and REDACTION_MARKER in shown and NUMBER not in shown
    # The agent runs on; its next request holds the marker, not the number.
    seen = len(main_requests(model))
    thanks = HumanMessage("Thanks, that is all.", id="zed-9")
    agent.invoke({"messages": [thanks]}, config(thread_id), context=Context(user_id=USER))
    requests = main_requests(model)[seen:]
    assert requests
    assert all(NUMBER not in str(m.content) for request in requests for m in request)
    assert any(REDACTION_MARKER in str(m.content) for request in requests for m in request)
    assert rows_holding(fresh.uri, NUMBER) == {}


async def test_an_async_agent_streams_usage_events_that_add_up_to_model_usage(
    cli_database: Persistence, thread_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    events: list[dict[str, Any]] = []
    settings = Settings(
        trigger_messages=8, keep_messages=2, offload_tokens=300, memory_extraction="inline"
    )
    run_config = {"configurable": {"thread_id": thread_id, "user_id": USER}}
    async with open_async_persistence(cli_database.uri) as persistence:
        agent, _ = make_agent(persistence, settings)
        for number, text in enumerate(TURNS, start=1):
            message = HumanMessage(text, id=f"zed-{number}")
            # The identity from ``configurable``: no context at all.
            async for chunk in agent.astream(
                {"messages": [message]}, run_config, stream_mode="custom"
            ):
                events.append(chunk)
        values = (await agent.aget_state(run_config)).values

    usage = values["model_usage"]
    summarized = [e for e in events if e["event"] == "compaction.summarized"]
    extracted = [e for e in events if e["event"] == "memory.extracted"]
    assert len(summarized) == values["compaction"]["version"] >= 2
    assert extracted and extracted[0]["facts"] == 1
    for role, reported in (("summary", summarized), ("memory", extracted)):
        assert sum(e["model_calls"] for e in reported) == usage[role]["calls"]
        assert sum(e["input_tokens"] for e in reported) == usage[role]["input_tokens"]
        assert sum(e["output_tokens"] for e in reported) == usage[role]["output_tokens"]
        assert all(e["thread_id"] == thread_id for e in reported)
    # The command line reads the same numbers back, and the thread as the user's.
    status, shown, _ = command(["threads", "show", thread_id, "--user", USER, "--usage"], capsys)
    assert status == 0
    rows = table(shown)
    assert rows["summary"][:2] == [usage["summary"]["calls"], usage["summary"]["input_tokens"]]
    assert rows["memory"][:2] == [usage["memory"]["calls"], usage["memory"]["input_tokens"]]
    status, verified, _ = command(["threads", "verify", thread_id, "--user", USER], capsys)
    assert status == 0 and "intact" in verified


@dataclass
class ShopContext:
    """An agent's own context: a user and the shop they work in."""

    user_id: str
    shop: str


@tool
def shop_name(runtime: ToolRuntime[ShopContext]) -> str:
    """The name of the user's shop."""
    return f"shop {runtime.context.shop}"


def test_tools_see_their_context_when_the_identity_is_the_agent_s_own(thread_id: str) -> None:
    # The run's context is the agent's own class: ctxgraph's tools and wrappers see its
    # user as a ``Context``, the agent's own tool sees the agent's context.
    store = InMemoryStore()
    MemoryRepository(store).add_fact(Context(user_id="ann"), "Ships from Lisbon", key="city")
    calls = [
        {"name": "memory_search", "args": {"query": "Lisbon"}, "id": "m1", "type": "tool_call"},
        {"name": "shop_name", "args": {}, "id": "s1", "type": "tool_call"},
    ]
    model = ScriptedChatModel(script=[AIMessage(content="", tool_calls=calls), "Done."])
    agent = create_agent(
        model,
        [shop_name],
        middleware=ctxgraph_middleware(settings=Settings(memory_mode="tool")),
        checkpointer=InMemorySaver(),
        store=store,
        context_schema=ShopContext,
    )
    result = agent.invoke(
        {"messages": [HumanMessage("Where do we ship from?")]},
        config(thread_id),
        context=ShopContext(user_id="ann", shop="north"),
    )
    results = {m.name: m for m in result["messages"] if isinstance(m, ToolMessage)}
    assert results["shop_name"].content == "shop north"
    assert results["memory_search"].status == "success", results["memory_search"].content
    assert "Ships from Lisbon" in str(results["memory_search"].content)
