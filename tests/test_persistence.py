"""Threads persist in Postgres across processes; database problems get clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from ctxgraph.graph import build_graph
from ctxgraph.state import Context
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.store.persistence.connection import (
    DatabaseError,
    open_async_persistence,
    open_persistence,
)
from ctxgraph.store.persistence.embedded import EmbeddedPostgresError, database_uri, embedded_uri
from tests.support.cli import REPO_ROOT, run_ctxgraph


def test_turns_in_separate_processes_share_one_thread(
    python: str, subprocess_env: dict[str, str], database_uri: str, thread_id: str
) -> None:
    first = run_ctxgraph(
        python, subprocess_env, "run", "--user", "u1", "--thread", thread_id, "What is 6 * 7?"
    )
    assert first.returncode == 0, first.stderr
    assert "The calculator says 42." in first.stdout

    second = run_ctxgraph(
        python,
        subprocess_env,
        "run",
        "--user",
        "u1",
        "--thread",
        thread_id,
        "What did I say before?",
    )
    assert second.returncode == 0, second.stderr
    assert f"Resuming thread {thread_id} (4 messages)" in second.stdout
    assert 'Earlier in this thread you said: "What is 6 * 7?".' in second.stdout

    # A third process (this one) reads exactly what the two children committed.
    with open_persistence(database_uri) as persistence:
        graph = build_graph(
            models=demo_models(),
            tools=demo_tools(),
            checkpointer=persistence.checkpointer,
            store=persistence.store,
        )
        messages = graph.get_state({"configurable": {"thread_id": thread_id}}).values["messages"]
    assert [type(m) for m in messages] == [
        HumanMessage,
        AIMessage,
        ToolMessage,
        AIMessage,
        HumanMessage,
        AIMessage,
    ]
    assert messages[2].content == "42"
    assert messages[1].tool_calls[0]["args"] == {"expression": "6 * 7"}


async def test_async_persistence_round_trip(database_uri: str, thread_id: str) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    async with open_async_persistence(database_uri) as persistence:
        graph = build_graph(
            models=demo_models(),
            tools=demo_tools(),
            checkpointer=persistence.checkpointer,
            store=persistence.store,
        )
        await graph.ainvoke({"messages": [("user", "hello")]}, config, context=Context(user_id="u"))
    async with open_async_persistence(database_uri) as persistence:
        graph = build_graph(
            models=demo_models(),
            tools=demo_tools(),
            checkpointer=persistence.checkpointer,
            store=persistence.store,
        )
        state = await graph.aget_state(config)
    assert [m.content for m in state.values["messages"]] == ["hello", "Noted: hello"]


def test_database_uri_wins_over_embedded(tmp_path: Path) -> None:
    uri = "postgresql://someone@db.example:5432/ctxgraph"
    assert database_uri({"DATABASE_URI": uri, "CTXGRAPH_HOME": str(tmp_path)}) == uri
    assert not (tmp_path / "pgdata").exists()


def test_embedded_postgres_failure_says_what_to_set(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the data folder should be")
    with pytest.raises(EmbeddedPostgresError) as raised:
        embedded_uri(blocker)
    message = str(raised.value)
    assert "could not start the embedded Postgres" in message
    assert "set DATABASE_URI" in message
    assert "CTXGRAPH_HOME" in message


def test_unreachable_database_is_named_without_its_password() -> None:
    with (
        pytest.raises(
            DatabaseError, match=r"cannot use the database at postgresql://…@127\.0\.0\.1:9/x"
        ),
        open_persistence("postgresql://user:secret@127.0.0.1:9/x"),
    ):
        pass


def test_embedded_server_is_shared_by_processes(ctxgraph_home: Path, python: str) -> None:
    """Two processes on one data folder reach the same server and see each other's writes."""
    home = ctxgraph_home
    env = {"CTXGRAPH_HOME": str(home), "CTXGRAPH_MODEL": "scripted", "PATH": "/usr/bin:/bin"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    first = run_ctxgraph(python, env, "run", "--user", "u", "--thread", "shared", "remember Kyoto")
    assert first.returncode == 0, first.stderr
    shown = run_ctxgraph(python, env, "threads", "show", "shared")
    assert shown.returncode == 0, shown.stderr
    assert "[1] user: remember Kyoto" in shown.stdout
    assert (home / "pgdata" / "PG_VERSION").exists()
