"""NUL and lone surrogates: refused at the door, made storable (U+FFFD) when produced inside."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph, wait_for_memory
from ctxgraph.graph.demo import demo_reply
from ctxgraph.nodes.subagents.result import Outcome, Refs, result_message, transcript_text
from ctxgraph.state import Context, MalformedMessagesError, Models, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.state.messages import check_storable, safe_text, sanitized_message
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.artifacts import ArtifactStore
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.archive import ThreadArchive
from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import run_ctxgraph

USER_ERROR = 2
HOW_TO = "nothing was written; remove it, or replace it (e.g. with U+FFFD)"


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _demo_graph(persistence: Persistence, **settings: Any) -> Any:
    return build_graph(
        models=demo_models(),
        tools=demo_tools(),
        settings=Settings(**settings),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )


# --- at the door -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "named"),
    [("I prefer tea\0 with milk.", "U+0000 (NUL)"), ("tea \ud800", "U+D800 (a lone surrogate)")],
)
def test_unstorable_user_text_is_refused_before_anything_is_saved(
    persistence: Persistence, thread_id: str, text: str, named: str
) -> None:
    graph = _demo_graph(persistence)
    config, ctx = _config(thread_id), Context(user_id="u1")
    position = text.index(text[-1] if named.endswith("surrogate)") else "\0") + 1

    with pytest.raises(MalformedMessagesError) as refused:
        graph.invoke({"messages": [("user", text)]}, config, context=ctx)
    line = str(refused.value)
    assert line == f"message 1 holds {named} at character {position}, which the thread's " + (
        f"storage cannot hold; {HOW_TO}"
    )
    assert "\n" not in line
    # Not even LangGraph's input checkpoint was saved.
    assert persistence.checkpointer.get_tuple(config) is None

    # On a thread that has turns, the refusal adds no checkpoint and no message.
    graph.invoke({"messages": [("user", "What is 2 * 4?")]}, config, context=ctx)
    before = list(persistence.checkpointer.list(config))
    messages = graph.get_state(config).values["messages"]
    with pytest.raises(MalformedMessagesError, match=r"^message 1 holds U\+"):
        graph.invoke({"messages": [("user", text)]}, config, context=ctx)
    assert len(list(persistence.checkpointer.list(config))) == len(before)
    assert graph.get_state(config).values["messages"] == messages


def test_blocks_and_tool_calls_of_input_messages_are_checked_too() -> None:
    graph = build_graph(models=demo_models(), checkpointer=InMemorySaver(), store=InMemoryStore())
    config, ctx = _config("t-blocks"), Context(user_id="u1")
    blocks = HumanMessage(content=[{"type": "text", "text": "ok"}, {"type": "text", "text": "a\0"}])
    with pytest.raises(MalformedMessagesError) as refused:
        graph.invoke({"messages": [blocks]}, config, context=ctx)
    assert str(refused.value).startswith(
        "message 1 (human) content[1]['text'] holds U+0000 (NUL) at character 2"
    )
    call = AIMessage("", tool_calls=[{"name": "calculator", "args": {"x": "1\udfff"}, "id": "c1"}])
    result = ToolMessage("1", tool_call_id="c1")
    with pytest.raises(MalformedMessagesError) as refused:
        graph.invoke({"messages": [("user", "hi"), call, result]}, config, context=ctx)
    assert str(refused.value).startswith(
        "message 2 (ai) tool_calls[0]['args']['x'] holds U+DFFF (a lone surrogate) at character 2"
    )
    # The async path refuses alike; nothing was saved by either.
    with pytest.raises(MalformedMessagesError, match="U\\+0000"):
        asyncio.run(graph.ainvoke({"messages": [("user", "\0")]}, config, context=ctx))
    assert graph.get_state(config).values == {}


def test_run_refuses_a_nul_from_standard_input_in_one_line(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    result = run_ctxgraph(
        python, subprocess_env, "run", "--user", "u1", "--thread", thread_id, "-",
        stdin="I prefer tea\0 with milk.",
    )  # fmt: skip
    assert result.returncode == USER_ERROR
    assert result.stdout == ""
    assert result.stderr == (
        "ctxgraph: message 1 holds U+0000 (NUL) at character 13, which the thread's storage "
        f"cannot hold; {HOW_TO}\n"
    )
    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)
    assert shown.returncode == USER_ERROR
    assert f"no thread '{thread_id}' has been saved" in shown.stderr

    chat = run_ctxgraph(
        python, subprocess_env, "chat", "--user", "u1", "--thread", thread_id,
        stdin="tea\0\nhi\n",
    )  # fmt: skip
    assert chat.returncode == 0, chat.stderr
    assert chat.stderr == (
        "ctxgraph: the message holds U+0000 (NUL) at character 4, which the thread's storage "
        f"cannot hold; {HOW_TO}\n"
    )
    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)
    assert f"thread {thread_id}: 2 messages\n[1] user: hi\n" in shown.stdout


# --- inside: tool results and model answers ------------------------------------------------


BIG_NOTES = "notes\0 start \ud800\n" + "\n".join(f"line {i} of the notes" for i in range(400))


@tool
def fetch_notes() -> str:
    """Fetch the user's notes."""
    return BIG_NOTES


@tool
def short_lookup() -> str:
    """Look a short value up."""
    return "value\0 42"


def test_tool_results_and_answers_are_stored_with_replacement_characters(
    persistence: Persistence,
    python: str,
    subprocess_env: dict[str, str],
    thread_id: str,
) -> None:
    script: list[Any] = [
        AIMessage(
            "",
            tool_calls=[
                {"name": "fetch_notes", "args": {}, "id": "call_notes"},
                {"name": "short_lookup", "args": {}, "id": "call_short"},
            ],
        ),
        AIMessage("Notes\0 fetched \ud800."),
        AIMessage("Noted\0, tea with milk."),
    ]
    demo = demo_models()
    main = ScriptedChatModel(script=script, responder=demo_reply)
    graph = build_graph(
        models=Models(main=main, summary=demo.summary, memory=demo.memory),
        tools=[fetch_notes, short_lookup],
        settings=Settings(trigger_messages=6, keep_messages=2, offload_tokens=200),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )
    config, ctx = _config(thread_id), Context(user_id="u-tea")
    graph.invoke({"messages": [("user", "Fetch my notes please.")]}, config, context=ctx)
    graph.invoke({"messages": [("user", "I prefer tea with milk.")]}, config, context=ctx)
    for n in range(4):
        graph.invoke({"messages": [("user", f"Next question {n}?")]}, config, context=ctx)

    # A compaction committed; everything it archived, and the window, is clean.
    state = graph.get_state(config).values
    assert int((state.get("compaction") or {}).get("version", 0)) >= 1
    archived = [
        m for r in ThreadArchive(persistence.store, thread_id).records() for m in r["messages"]
    ]
    every = json.dumps([*archived, *[m.model_dump() for m in state["messages"]]])
    assert "\\u0000" not in every and "\\ud800" not in every
    assert "Notes\ufffd fetched \ufffd." in json.dumps(archived, ensure_ascii=False)
    assert "value\ufffd 42" in json.dumps(archived, ensure_ascii=False)

    # The offloaded result is stored sanitized, and reads back as such.
    artifacts = ArtifactStore(persistence.store, thread_id)
    text = artifacts.read_text(ArtifactStore.ref_for("tool_result", "call_notes"))
    assert text == safe_text(BIG_NOTES) and text.startswith("notes\ufffd start \ufffd\n")

    # Memory extraction ran every turn and stored the fact said beside an unsafe answer.
    assert wait_for_memory(30) == 0  # extracted in the background (the default)
    facts = [f.content for f in MemoryRepository(persistence.store).list_facts(ctx)]
    assert "I prefer tea with milk." in facts

    verified = run_ctxgraph(python, subprocess_env, "threads", "verify", thread_id)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "intact" in verified.stdout


# --- the helpers ---------------------------------------------------------------------------


def test_sanitized_message_covers_every_field_and_keeps_clean_messages() -> None:
    clean = AIMessage("fine", tool_calls=[{"name": "t", "args": {"a": "b"}, "id": "c"}])
    assert sanitized_message(clean) is clean
    dirty = AIMessage(
        content=[{"type": "text", "text": "a\0b"}],
        tool_calls=[{"name": "t\0", "args": {"k\ud800": ["x\0"]}, "id": "c"}],
        additional_kwargs={"raw": "\udc80"},
    )
    safe = sanitized_message(dirty)
    check_storable([safe])
    assert safe.content == [{"type": "text", "text": "a\ufffdb"}]
    assert safe.tool_calls[0]["name"] == "t\ufffd"
    assert safe.tool_calls[0]["args"] == {"k\ufffd": ["x\ufffd"]}
    assert safe.additional_kwargs == {"raw": "\ufffd"}
    assert dirty.content == [{"type": "text", "text": "a\0b"}]  # the original is untouched


def test_a_subagent_result_and_transcript_are_storable() -> None:
    messages = [HumanMessage("go"), AIMessage("done\0 \ud800")]
    outcome = Outcome("failed", "error", messages, error="boom\0")
    message = result_message("call_task", "general", outcome, Refs(), 500, None)
    check_storable([message, HumanMessage(transcript_text(messages))])
    assert "done\ufffd \ufffd" in str(message.content)
    assert "boom\ufffd" in str(message.content)
