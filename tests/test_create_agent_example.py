"""The example in ``examples/create_agent``: ``create_agent`` with ctxgraph's middleware.

One test runs the example's agent in this process with the offline demo model; the other
serves the example's ``langgraph.json`` with a real ``langgraph dev`` process and drives it
through the LangGraph SDK: the answer, ctxgraph's keys in the thread state (a compaction
included), the middleware hooks in the served graph, and the fact memory stored.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph_sdk import get_sync_client

from ctxgraph import Context, Settings, demo_models
from tests.support.modules import import_file
from tests.test_langgraph_dev import RUN_TIMEOUT, dev_server, message_text, server_env
from tests.test_memory_background_server import facts

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "create_agent"
GRAPH_ID = "agent"
CALCULATION = "What is 17 * 23?"
STATEMENT = "I prefer short answers."
COMPACTING = {"trigger_messages": 6, "keep_messages": 2}
"""A run's settings under which a few turns compact."""
CTXGRAPH_KEYS = {"summary", "compaction", "memory_view", "memory_selection", "model_usage"}
SETTLE = 30.0
"""Seconds the served test waits for the background extraction (it takes milliseconds)."""


def load_example(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Import ``agent.py`` as the server does, with the offline demo model."""
    monkeypatch.setenv("CTXGRAPH_MODEL", "scripted")
    return import_file(EXAMPLE / "agent.py", "create_agent_example")


def test_the_example_agent_runs_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    example = load_example(monkeypatch)
    agent = example.make_agent(
        demo_models(),
        Settings(memory_extraction="inline", **COMPACTING),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    config: Any = {"configurable": {"thread_id": "example-1"}}
    context = Context(user_id="alice")
    result = agent.invoke({"messages": [("user", CALCULATION)]}, config, context=context)
    assert [m.type for m in result["messages"]] == ["human", "ai", "tool", "ai"]
    assert result["messages"][-1].content == "The calculator says 391."
    for text in (STATEMENT, "Note the dock.", "Note the crane."):
        agent.invoke({"messages": [("user", text)]}, config, context=context)
    values = agent.get_state(config).values
    assert set(values) >= CTXGRAPH_KEYS
    assert values["compaction"]["version"] >= 1
    assert "prefer short answers" in values["memory_view"].lower() or values["memory_selection"]


@pytest.mark.server
def test_the_example_served_by_langgraph_dev(tmp_path: Path) -> None:
    folder = tmp_path / "create_agent"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__", ".langgraph_api"))
    user = f"u-{uuid.uuid4().hex[:8]}"
    context = {"user_id": user, "settings": COMPACTING}
    log = tmp_path / "langgraph-dev.log"
    with (
        dev_server(folder, server_env(), log, "--config", "langgraph.json") as url,
        get_sync_client(url=url, api_key=None, timeout=RUN_TIMEOUT) as client,
    ):
        assert [a["graph_id"] for a in client.assistants.search()] == [GRAPH_ID]
        # Studio draws the middleware hooks as the agent's nodes.
        nodes = {node["id"] for node in client.assistants.get_graph(GRAPH_ID)["nodes"]}
        assert {"model", "tools", "CompactionMiddleware.before_model"} <= nodes
        assert "MemoryMiddleware.after_agent" in nodes

        thread_id = client.threads.create()["thread_id"]
        first = client.runs.wait(
            thread_id,
            GRAPH_ID,
            input={"messages": [{"role": "user", "content": CALCULATION}]},
            context=context,
        )
        assert isinstance(first, dict), first
        assert [m["type"] for m in first["messages"]] == ["human", "ai", "tool", "ai"]
        call, result, answer = first["messages"][1:]
        assert [c["name"] for c in call["tool_calls"]] == ["calculator"]
        assert message_text(result) == "391"
        assert message_text(answer) == "The calculator says 391."

        for text in (STATEMENT, "Note the dock.", "Note the crane."):
            done = client.runs.wait(
                thread_id,
                GRAPH_ID,
                input={"messages": [{"role": "user", "content": text}]},
                context=context,
            )
            assert isinstance(done, dict) and done["messages"][-1]["type"] == "ai", done

        state = client.threads.get_state(thread_id)
        assert state["next"] == []
        values = state["values"]
        assert set(values) >= CTXGRAPH_KEYS, sorted(values)
        assert values["compaction"]["version"] >= 1
        assert values["summary"]["session_intent"] == CALCULATION
        assert values["model_usage"]["main"]["calls"] >= 5
        assert values["model_usage"]["summary"]["calls"] >= 1
        runs = client.runs.list(thread_id)
        assert sorted(run["status"] for run in runs) == ["success"] * 4

        deadline = time.monotonic() + SETTLE
        while not facts(client, user) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert facts(client, user) == [STATEMENT]
