"""Under ``langgraph dev``, a run does not wait for the previous run's memory extraction.

The served graph's memory model blocks until the test creates a ``release`` file, and
notes each call in a ``started`` file; so "the second run did not wait" is shown by the
second run returning while the first extraction is still blocked.
"""

from __future__ import annotations

import json
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_sync_client

from ctxgraph.store.namespaces import memory_queue, user_facts
from tests.test_langgraph_dev import RUN_TIMEOUT, dev_server, server_env

FIRST = "I mainly do Python backend work."
SECOND = "I prefer short answers."
SETTLE = 60.0
"""Seconds the test waits for the released extractions to be stored (they take milliseconds)."""

GRAPH_MODULE = textwrap.dedent(
    """
    import time
    from pathlib import Path

    from ctxgraph.graph import build_graph
    from ctxgraph.state.demo_replies import demo_memory, demo_tools
    from ctxgraph.graph.demo import demo_reply
    from ctxgraph.state import Models
    from ctxgraph.state.scripted_model import ScriptedChatModel

    HERE = Path(__file__).resolve().parent


    def blocked(messages):
        with (HERE / "started").open("a") as started:
            started.write("call\\n")
        deadline = time.monotonic() + 60
        while not (HERE / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return demo_memory(str(messages[-1].content))


    graph = build_graph(
        models=Models(
            main=ScriptedChatModel(responder=demo_reply),
            memory=ScriptedChatModel(responder=blocked),
        ),
        tools=demo_tools(),
    )
    """
)


def served_folder(folder: Path) -> Path:
    folder.mkdir()
    (folder / "slow_memory.py").write_text(GRAPH_MODULE, encoding="utf-8")
    config = {"dependencies": ["."], "graphs": {"ctxgraph": "./slow_memory.py:graph"}}
    (folder / "langgraph.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def calls(folder: Path) -> int:
    started = folder / "started"
    return len(started.read_text().splitlines()) if started.exists() else 0


def facts(client: Any, user: str) -> list[str]:
    items = client.store.search_items(list(user_facts(user, "default")), limit=20)["items"]
    return sorted(str(item["value"]["content"]) for item in items)


def queued(client: Any, thread_id: str) -> bool:
    items = client.store.search_items(list(memory_queue()), limit=100)["items"]
    return any(item["key"] == thread_id for item in items)


@pytest.mark.server
def test_a_run_under_langgraph_dev_does_not_wait_for_memory(tmp_path: Path) -> None:
    folder = served_folder(tmp_path / "served")
    user = f"u-{uuid.uuid4().hex[:8]}"
    context = {"user_id": user}
    log = tmp_path / "langgraph-dev.log"
    with (
        dev_server(folder, server_env(), log, "--config", "langgraph.json") as url,
        get_sync_client(url=url, api_key=None, timeout=RUN_TIMEOUT) as client,
    ):
        thread_id = str(client.threads.create()["thread_id"])
        for text in (FIRST, SECOND):
            result = client.runs.wait(
                thread_id,
                "ctxgraph",
                input={"messages": [{"role": "user", "content": text}]},
                context=context,
            )
            assert isinstance(result, dict) and result["messages"][-1]["type"] == "ai", result

        # Both runs ended while the first extraction is still blocked.
        assert not (folder / "release").exists()
        assert calls(folder) == 1
        assert facts(client, user) == []
        assert queued(client, thread_id)

        (folder / "release").touch()
        deadline = time.monotonic() + SETTLE
        while (facts(client, user) != [FIRST, SECOND] or queued(client, thread_id)) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert facts(client, user) == [FIRST, SECOND]
        assert not queued(client, thread_id)
        assert calls(folder) == 2  # the second extraction ran after the first, not with it
