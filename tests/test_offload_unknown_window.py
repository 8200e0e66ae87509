"""Large user inputs when the main model's input window is unknown: offloaded, or refused."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.graph.environment import EnvironmentConfig
from ctxgraph.nodes.offload.inputs import (
    InputNotOffloadedError,
    input_threshold,
    refusal_limit,
)
from ctxgraph.nodes.offload.refs import OFFLOAD_FAILED_KEY, OFFLOAD_KEY
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.messages import content_text
from ctxgraph.state.models import input_window
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.artifacts import ArtifactStore
from tests.support.scripted import demo_summarizer

CTX = Context(user_id="u1")
QUIET: dict[str, Any] = {"memory_extraction": "off", "memory_mode": "off"}
THRESHOLD = 9_000
"""Half of the default trigger_tokens (18,000): the threshold with the window unknown."""
MIDDLE = "MIDDLE-SENTINEL-7319: only the artifact keeps this line"


def paste(tokens: int) -> str:
    """Numbered lines, a sentinel in the middle, just under ``tokens`` tokens in all."""
    rows = [f"{i:05d}\tthe quick brown fox ✓ 漢字 jumps over the lazy dog" for i in range(5_000)]
    per_row = count_text("\n".join(rows[:200]) + "\n") / 200
    count = int(tokens / per_row)
    while count_text("\n".join(rows[:count]) + "\n") > tokens:
        count -= 5
    rows = rows[:count]
    rows[count // 2] = MIDDLE
    return "\n".join(rows) + "\n"


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def persisted(main: ScriptedChatModel, **settings: Any) -> tuple[Any, InMemoryStore]:
    store = InMemoryStore()
    graph = build_graph(
        models=Models(main=main, summary=demo_summarizer()),
        settings=Settings(**QUIET, **settings),
        checkpointer=InMemorySaver(),
        store=store,
    )
    return graph, store


def shown(request: list[BaseMessage], message_id: str) -> BaseMessage:
    [found] = [m for m in request if m.id == message_id]
    return found


def test_the_scripted_model_has_no_known_window() -> None:
    main = Models.from_env({"CTXGRAPH_MODEL": "scripted"}).main
    assert input_window(main, None) is None
    assert input_threshold(Settings(), None) == THRESHOLD


def test_a_30k_message_is_offloaded_and_read_back_exactly(thread_id: str) -> None:
    text = paste(30_000)
    assert 29_000 < count_text(text) <= 30_000
    ref = ArtifactStore.ref_for("user_input", "big-1")
    read = {"name": "read_artifact", "args": {"ref": ref, "offset": 0, "limit": 200}}
    main = ScriptedChatModel(script=[AIMessage("", tool_calls=[{**read, "id": "read-1"}]), "ok"])
    graph, store = persisted(main)

    result = graph.invoke(
        {"messages": [HumanMessage(text, id="big-1")]}, config(thread_id), context=CTX
    )

    assert result["messages"][-1].content == "ok"
    first = main.requests[0]
    stub = content_text(shown(first, "big-1"))
    assert stub.startswith("[user input offloaded]")
    assert f'read_artifact(ref="{ref}"' in stub
    assert shown(first, "big-1").additional_kwargs[OFFLOAD_KEY]["ref"] == ref
    assert all(MIDDLE not in content_text(m) for request in main.requests for m in request)
    assert TokenCounter().count_messages(first) < Settings().trigger_tokens

    # The model's read_artifact call gets the original lines back.
    page = main.requests[1][-1]
    assert isinstance(page, ToolMessage) and page.name == "read_artifact"
    assert page.status != "error", page.content
    lines = text.split("\n")
    rows = [row.split("\t", 1) for row in content_text(page).split("\n") if "\t" in row]
    numbered = {int(number): rest for number, rest in rows if number.isdigit()}
    assert len(numbered) > 50
    assert numbered == {offset: lines[offset] for offset in numbered}

    # The artifact holds the message byte for byte.
    artifacts = ArtifactStore(store, thread_id)
    assert artifacts.read_text(ref) == text
    assert MIDDLE in artifacts.read_text(ref)


def test_the_command_line_configuration_offloads_a_30k_message(thread_id: str) -> None:
    configured = EnvironmentConfig.read({"CTXGRAPH_MODEL": "scripted"})
    store = InMemoryStore()
    graph: Any = configured.build(checkpointer=InMemorySaver(), store=store)
    text = paste(30_000)

    result = graph.invoke(
        {"messages": [HumanMessage(text, id="cli-1")]}, config(thread_id), context=CTX
    )

    saved = shown(result["messages"], "cli-1")
    assert content_text(saved).startswith("[user input offloaded]")
    ref = saved.additional_kwargs[OFFLOAD_KEY]["ref"]
    assert ArtifactStore(store, thread_id).read_text(ref) == text
    assert isinstance(result["messages"][-1], AIMessage)
    # The check a caller makes before the run lets it through: the graph offloads it.
    window = input_window(configured.models.main, configured.settings.context_window)
    assert refusal_limit(configured.settings, window, can_offload=True) is None


def test_a_message_just_below_the_threshold_stays_inline_and_fits(thread_id: str) -> None:
    text = paste(THRESHOLD - 50)
    assert THRESHOLD - 300 < count_text(text) <= THRESHOLD
    main = ScriptedChatModel(script=["ok"])
    graph, store = persisted(main)

    graph.invoke({"messages": [HumanMessage(text, id="near-1")]}, config(thread_id), context=CTX)

    [request] = main.requests
    assert shown(request, "near-1").content == text
    assert TokenCounter().count_messages(request) < Settings().trigger_tokens
    assert ArtifactStore(store, thread_id).list() == []


def test_a_message_just_above_the_threshold_is_offloaded(thread_id: str) -> None:
    text = paste(THRESHOLD + 300)
    assert count_text(text) > THRESHOLD
    main = ScriptedChatModel(script=["ok"])
    graph, store = persisted(main)

    graph.invoke({"messages": [HumanMessage(text, id="over-1")]}, config(thread_id), context=CTX)

    message = shown(main.requests[0], "over-1")
    assert content_text(message).startswith("[user input offloaded]")
    ref = message.additional_kwargs[OFFLOAD_KEY]["ref"]
    assert ArtifactStore(store, thread_id).read_text(ref) == text


def test_without_a_store_the_message_is_refused_naming_the_window_setting() -> None:
    graph = build_graph(models=Models(main=ScriptedChatModel(script=["ok"])))
    with pytest.raises(InputNotOffloadedError) as caught:
        graph.invoke({"messages": [HumanMessage(paste(30_000), id="nostore-1")]}, context=CTX)
    message = str(caught.value)
    assert "CTXGRAPH_CONTEXT_WINDOW" in message and "Settings.context_window" in message
    assert "over the 9,000 tokens" in message
    assert "no LangGraph Store" in message and "build_graph(store=...)" in message


async def test_the_async_run_without_a_store_is_refused_alike() -> None:
    graph = build_graph(models=Models(main=ScriptedChatModel(script=["ok"])))
    with pytest.raises(InputNotOffloadedError, match="CTXGRAPH_CONTEXT_WINDOW"):
        await graph.ainvoke(
            {"messages": [HumanMessage(paste(12_000), id="nostore-a")]}, context=CTX
        )


def test_a_known_window_keeps_the_half_window_threshold(thread_id: str) -> None:
    text = paste(30_000)
    main = ScriptedChatModel(script=["ok"])
    graph, store = persisted(main, context_window=128_000)
    graph.invoke({"messages": [HumanMessage(text, id="known-1")]}, config(thread_id), context=CTX)
    assert shown(main.requests[0], "known-1").content == text  # under 50,000
    assert ArtifactStore(store, thread_id).list() == []

    # Without a store a known window still cuts the message to its head and tail.
    cut = ScriptedChatModel(script=["ok"])
    bare = build_graph(models=Models(main=cut), settings=Settings(context_window=32_000, **QUIET))
    bare.invoke({"messages": [HumanMessage(text, id="known-2")]}, context=CTX)
    notice = shown(cut.requests[0], "known-2")
    assert content_text(notice).startswith("[user input NOT saved]")
    assert OFFLOAD_FAILED_KEY in notice.additional_kwargs


def test_the_refusal_limit_names_the_window_setting_when_it_cannot_offload() -> None:
    settings = Settings()
    assert refusal_limit(settings, 64_000, can_offload=True) == (
        64_000,
        "the model's input window",
    )
    assert refusal_limit(settings, None, can_offload=True) is None
    tokens, text = refusal_limit(settings, None, can_offload=False) or (0, "")
    assert tokens == THRESHOLD
    assert "CTXGRAPH_CONTEXT_WINDOW (Settings.context_window)" in text
    off = Settings(offload_input_tokens=0)
    tokens, text = refusal_limit(off, None, can_offload=True) or (0, "")
    assert tokens == 18_000
    assert "offload_input_tokens=0" in text and "CTXGRAPH_CONTEXT_WINDOW" in text
