"""Identities are checked first: thread ids, user ids and a thread's owner, before writes."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.graph.builder import Graph
from ctxgraph.graph.cli.threads import check_owner
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.context import ContextError, validate_thread_id
from ctxgraph.state.messages import MalformedMessagesError
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.namespaces import thread_meta
from ctxgraph.store.ownership import OWNER_KEY, ThreadOwnerError, thread_owner
from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import run_ctxgraph

BAD_IDS = [
    "a b",
    "../x",
    "a/b",
    "a.b",
    "x" * 300,
    "x" * 129,
    "",
    "alice\n",
    " alice",
    "alice ",
    "al\tice",
    "al\x00ice",
    "al\x1bice",
    "ålice",
]
"""Ids every identity check refuses: separators, whitespace, control characters, length."""

GOOD_IDS = ["t", "x" * 128, "T-1_a@b:c+d", "3f2a9c1e-6d0b-4a57-9d1e-0c6b9a8f7e21"]


def config(thread: str) -> dict[str, dict[str, str]]:
    return {"configurable": {"thread_id": thread}}


def turn(text: str) -> dict[str, list[tuple[str, str]]]:
    return {"messages": [("user", text)]}


def make_graph(
    checkpointer: BaseCheckpointSaver[str], store: BaseStore, replies: int = 4
) -> tuple[Graph, ScriptedChatModel]:
    model = ScriptedChatModel(script=[f"answer {n}" for n in range(replies)])
    graph = build_graph(
        models=Models(main=model),
        checkpointer=checkpointer,
        store=store,
        settings=Settings(memory_extraction="off"),  # one model call per turn
    )
    return graph, model


def checkpoints(checkpointer: BaseCheckpointSaver[str], thread: str) -> int:
    return len(list(checkpointer.list(config(thread))))


# --- the rules ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", GOOD_IDS)
def test_valid_thread_ids_pass(value: str) -> None:
    assert validate_thread_id(value) == value


@pytest.mark.parametrize("value", [*BAD_IDS, None, 7])
def test_invalid_thread_ids_are_refused_naming_the_rule(value: object) -> None:
    with pytest.raises(ContextError, match=r"thread id must be 1-128 characters") as raised:
        validate_thread_id(value)
    assert repr(value) in str(raised.value)


@pytest.mark.parametrize("field", ["user_id", "agent_name", "project_id"])
@pytest.mark.parametrize("value", ["alice\n", "alice ", " alice", "ali\x00ce"])
def test_identity_labels_with_whitespace_or_control_characters_are_refused(
    field: str, value: str
) -> None:
    identity = {"user_id": "alice", field: value}
    with pytest.raises(ContextError, match=rf"Context\.{field} must be"):
        Context(**identity)


def test_a_missing_user_id_names_the_sdk_call_and_the_studio_field() -> None:
    for missing in ({}, {"user_id": ""}):
        with pytest.raises(ContextError) as raised:
            Context(**missing)
        message = str(raised.value)
        assert message.startswith("Context.user_id is required: ")
        assert (
            'client.runs.create(thread_id, "ctxgraph", input=..., '
            'context={"user_id": "alice"})' in message
        )
        assert "Studio's assistant configuration (Manage Assistants" in message
        assert "\n" not in message


# --- the graph: checked in the first task, before any write ---------------------------------


@pytest.mark.parametrize("thread", ["a b", "../x", "x" * 300, "", "alice\n"])
def test_an_invalid_thread_id_is_refused_before_the_model_and_writes(thread: str) -> None:
    saver, store = InMemorySaver(), InMemoryStore()
    graph, model = make_graph(saver, store)
    with pytest.raises(ContextError, match=r"thread_id must be 1-128 characters"):
        graph.invoke(turn("hi"), config(thread), context=Context(user_id="alice"))
    assert model.calls == 0
    assert checkpoints(saver, thread) == 0
    assert list(saver.list(None)) == []
    assert store.list_namespaces() == []


def test_a_run_without_context_writes_nothing() -> None:
    saver, store = InMemorySaver(), InMemoryStore()
    graph, model = make_graph(saver, store)
    with pytest.raises(ContextError, match=r"Context\(user_id=\.\.\.\)"):
        graph.invoke(turn("hi"), config("t1"))
    assert model.calls == 0
    assert checkpoints(saver, "t1") == 0
    assert store.list_namespaces() == []


def test_the_first_run_records_its_user_as_the_owner() -> None:
    saver, store = InMemorySaver(), InMemoryStore()
    graph, _ = make_graph(saver, store)
    assert thread_owner(store, "t1") is None
    graph.invoke(turn("hi"), config("t1"), context=Context(user_id="alice"))
    assert thread_owner(store, "t1") == "alice"
    item = store.get(thread_meta("t1"), OWNER_KEY)
    assert item is not None and item.value == {"user_id": "alice"}


def test_another_user_is_refused_before_the_model_and_nothing_is_written() -> None:
    saver, store = InMemorySaver(), InMemoryStore()
    graph, model = make_graph(saver, store)
    graph.invoke(turn("hi"), config("t1"), context=Context(user_id="alice"))
    calls, saved = model.calls, checkpoints(saver, "t1")
    before = graph.get_state(config("t1")).values["messages"]

    with pytest.raises(ThreadOwnerError, match=r"thread 't1' belongs to another user, not 'bob'"):
        graph.invoke(turn("show me"), config("t1"), context=Context(user_id="bob"))

    assert model.calls == calls
    assert checkpoints(saver, "t1") == saved
    assert graph.get_state(config("t1")).values["messages"] == before
    assert thread_owner(store, "t1") == "alice"
    # The owner carries on; a similar-looking id is another identity and is refused earlier.
    graph.invoke(turn("again"), config("t1"), context=Context(user_id="alice"))
    assert model.calls == calls + 1
    with pytest.raises(ContextError, match=r"Context\.user_id must be"):
        graph.invoke(turn("x"), config("t1"), context=Context(user_id="alice\n"))


def test_another_user_is_refused_on_the_async_path() -> None:
    saver, store = InMemorySaver(), InMemoryStore()
    graph, model = make_graph(saver, store)

    async def scenario() -> None:
        await graph.ainvoke(turn("hi"), config("t1"), context=Context(user_id="alice"))
        saved = checkpoints(saver, "t1")
        with pytest.raises(ThreadOwnerError):
            await graph.ainvoke(turn("show me"), config("t1"), context=Context(user_id="bob"))
        assert checkpoints(saver, "t1") == saved
        with pytest.raises(ContextError, match="thread_id must be"):
            await graph.ainvoke(turn("hi"), config("../x"), context=Context(user_id="alice"))

    asyncio.run(scenario())
    assert model.calls == 1
    assert thread_owner(store, "t1") == "alice"


def test_a_refused_malformed_input_does_not_claim_the_thread() -> None:
    saver, store = InMemorySaver(), InMemoryStore()
    graph, model = make_graph(saver, store)
    orphan = [{"role": "tool", "content": "42", "tool_call_id": "call_missing"}]
    with pytest.raises(MalformedMessagesError):
        graph.invoke({"messages": orphan}, config("t1"), context=Context(user_id="bob"))
    assert thread_owner(store, "t1") is None
    graph.invoke(turn("hi"), config("t1"), context=Context(user_id="alice"))
    assert thread_owner(store, "t1") == "alice" and model.calls == 1


# --- Postgres, and the command line's check -------------------------------------------------


def test_owner_is_kept_and_checked_on_postgres(persistence: Persistence, thread_id: str) -> None:
    graph, model = make_graph(persistence.checkpointer, persistence.store)
    graph.invoke(turn("hi"), config(thread_id), context=Context(user_id="alice"))
    calls, saved = model.calls, checkpoints(persistence.checkpointer, thread_id)
    with pytest.raises(ThreadOwnerError):
        graph.invoke(turn("show me"), config(thread_id), context=Context(user_id="bob"))
    assert model.calls == calls
    assert checkpoints(persistence.checkpointer, thread_id) == saved

    assert check_owner(persistence, thread_id, "alice") == thread_id
    assert check_owner(persistence, thread_id, None) == thread_id  # operator: no --user
    with pytest.raises(ThreadOwnerError, match="belongs to another user, not 'bob'"):
        check_owner(persistence, thread_id, "bob")
    with pytest.raises(ContextError, match=r"--user must be"):
        check_owner(persistence, thread_id, "alice\n")


@pytest.mark.parametrize("thread", ["../x", "a b", "", "x" * 300])
def test_the_command_line_check_refuses_invalid_thread_ids(
    persistence: Persistence, thread: str
) -> None:
    with pytest.raises(ContextError, match="thread id must be"):
        check_owner(persistence, thread, None)


def test_a_user_id_with_a_trailing_newline_is_a_one_line_error(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    result = run_ctxgraph(
        python, subprocess_env, "run", "--user", "alice\n", "--thread", thread_id, "hi"
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("ctxgraph: Context.user_id must be")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
