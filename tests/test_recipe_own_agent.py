"""The recipe in ``examples/own_agent``: your own model and tools, served and embedded.

One test serves the recipe's ``langgraph.json`` with a real ``langgraph dev`` process,
whose ``ChatOpenAI`` talks to a local scripted OpenAI-compatible server that calls the
recipe's own tool; the other runs the recipe's parent graph, with ctxgraph as a node,
offline with a scripted model.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph_sdk import get_sync_client

from ctxgraph import Context, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from tests.support.modules import import_file
from tests.support.openai_server import OpenAIServer, Reply, ToolCall
from tests.test_langgraph_dev import RUN_TIMEOUT, dev_server, message_text, server_env

RECIPE = Path(__file__).resolve().parent.parent / "examples" / "own_agent"
QUESTION = "Where is my order A-17?"
STATUS = "order A-17: shipped on 2024-05-02 via DHL, tracking 00340434161234567890"
ANSWER = "Order A-17 shipped on 2024-05-02 via DHL."
NO_MEMORY = Settings(memory_extraction="off")


def load_recipe(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Import ``my_agent.py`` as a user would; its module-level graphs need a key only."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused-offline")
    return import_file(RECIPE / "my_agent.py", "own_agent_recipe")


def tool_then_answer() -> list[Any]:
    call = {"name": "lookup_order", "args": {"order_id": "A-17"}, "id": "call_1"}
    return [AIMessage(content="", tool_calls=[call]), ANSWER]


def test_recipe_graph_runs_its_tool_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = load_recipe(monkeypatch)
    model = ScriptedChatModel(script=tool_then_answer())
    graph = recipe.make_graph(model, checkpointer=InMemorySaver(), store=InMemoryStore())
    result = graph.invoke(
        {"messages": [("user", QUESTION)]},
        {"configurable": {"thread_id": "recipe-1"}},
        context=Context(user_id="alice", settings=NO_MEMORY),
    )
    assert [m.type for m in result["messages"]] == ["human", "ai", "tool", "ai"]
    assert result["messages"][2].content == STATUS
    tool_names = {t["function"]["name"] for t in model.tool_requests[0]}
    assert "lookup_order" in tool_names


def test_recipe_as_a_subgraph_of_your_own_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = load_recipe(monkeypatch)
    model = ScriptedChatModel(script=[*tool_then_answer(), "Order B-42 is still packed."])
    app = recipe.make_app_builder(model).compile(
        checkpointer=InMemorySaver(), store=InMemoryStore()
    )
    config: Any = {"configurable": {"thread_id": "parent-1"}}
    context = Context(user_id="alice", settings=NO_MEMORY)
    first = app.invoke({"messages": [("user", QUESTION)]}, config, context=context)
    assert [m.type for m in first["messages"]] == ["human", "ai", "tool", "ai"]
    tool_message = first["messages"][2]
    assert isinstance(tool_message, ToolMessage) and tool_message.content == STATUS
    second = app.invoke({"messages": [("user", "And B-42?")]}, config, context=context)
    assert second["messages"][-1].content == "Order B-42 is still packed."
    # ctxgraph's own state lives under the node's checkpoint namespace of the parent thread.
    child = app.get_state({"configurable": {"thread_id": "parent-1", "checkpoint_ns": "assistant"}})
    kinds = [m.type for m in child.values["messages"]]
    assert kinds == ["human", "ai", "tool", "ai", "human", "ai"]


@contextlib.contextmanager
def recipe_dev_server(folder: Path, openai_url: str) -> Iterator[str]:
    """``langgraph dev`` in a copy of the recipe folder, its model on ``openai_url``."""
    env = server_env()
    for name in ("CTXGRAPH_MODEL", "CTXGRAPH_SKILLS_DIRS", "CTXGRAPH_SUBAGENTS_DIR"):
        env.pop(name, None)
    env.update(
        {"OPENAI_BASE_URL": openai_url, "OPENAI_API_KEY": "test-key", "MY_AGENT_MODEL": "gpt-test"}
    )
    log = folder.parent / "langgraph-dev.log"
    with dev_server(folder, env, log, "--config", "langgraph.json") as url:
        yield url


@pytest.mark.server
def test_recipe_served_by_langgraph_dev(tmp_path: Path) -> None:
    folder = tmp_path / "own_agent"
    shutil.copytree(RECIPE, folder, ignore=shutil.ignore_patterns("__pycache__", ".langgraph_api"))
    call = ToolCall("lookup_order", {"order_id": "A-17"}, "call_1")
    context = {"user_id": "alice", "settings": {"memory_extraction": "off"}}
    with (
        OpenAIServer(Reply(tool_calls=(call,)), ANSWER) as openai,
        recipe_dev_server(folder, openai.base_url) as url,
        get_sync_client(url=url, api_key=None, timeout=RUN_TIMEOUT) as client,
    ):
        graphs = sorted(a["graph_id"] for a in client.assistants.search())
        assert graphs == ["my_agent", "my_app"]
        for graph_id in graphs:
            thread_id = client.threads.create()["thread_id"]
            result = client.runs.wait(
                thread_id,
                graph_id,
                input={"messages": [{"role": "user", "content": QUESTION}]},
                context=context,
            )
            assert isinstance(result, dict), result
            messages = result["messages"]
            assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai"], messages
            assert message_text(messages[2]) == STATUS  # the recipe's tool ran in the server
            assert message_text(messages[3]) == ANSWER
            # The tool's result went back to the model in its second request.
            followup = openai.requests[-1]["messages"]
            assert followup[-1]["role"] == "tool" and followup[-1]["content"] == STATUS
            tools = {t["function"]["name"] for t in openai.requests[-2]["tools"]}
            assert "lookup_order" in tools
            openai.script(Reply(tool_calls=(call,)), ANSWER)
