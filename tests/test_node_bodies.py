"""Nodes run their sync body under ``invoke`` and their async body under ``ainvoke``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.node import CompactNode
from ctxgraph.nodes.memory.load import MemoryLoader
from ctxgraph.nodes.memory.node import MemoryNodes
from ctxgraph.nodes.model import ModelNode
from ctxgraph.state import Context, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_tools

BODIES: list[tuple[type[Any], str, str, str]] = [
    (MemoryLoader, "load_memory", "load", "aload"),
    (MemoryNodes, "flush", "flush", "aflush"),
    (CompactNode, "compact", "invoke", "ainvoke"),
    (ModelNode, "model", "invoke", "ainvoke"),
    (MemoryNodes, "extract_memory", "extract_turn", "aextract_turn"),
]

Call = tuple[str, str, str, bool]
"""(node, "sync" or "async", the runtime's user id, whether a config was passed)."""


def _recording(
    calls: list[Call], node: str, kind: str, original: Callable[..., Any]
) -> Callable[..., Any]:
    def note(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        runtime = kwargs["runtime"] if "runtime" in kwargs else args[1]
        assert isinstance(runtime, Runtime)
        config = kwargs.get("config", args[2] if len(args) > 2 else None)
        calls.append((node, kind, runtime.context.user_id, isinstance(config, dict)))

    if kind == "async":

        @functools.wraps(original)
        async def arecord(self: Any, *args: Any, **kwargs: Any) -> Any:
            note((self, *args), kwargs)
            return await original(self, *args, **kwargs)

        return arecord

    @functools.wraps(original)
    def record(self: Any, *args: Any, **kwargs: Any) -> Any:
        note((self, *args), kwargs)
        return original(self, *args, **kwargs)

    return record


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Call]]:
    """Every node body call, recorded; the bodies still run."""
    recorded: list[Call] = []
    for cls, node, sync, async_ in BODIES:
        monkeypatch.setattr(cls, sync, _recording(recorded, node, "sync", getattr(cls, sync)))
        monkeypatch.setattr(cls, async_, _recording(recorded, node, "async", getattr(cls, async_)))
    yield recorded


def _graph() -> Any:
    # Compaction on every turn, so the compact node runs too.
    settings = Settings(trigger_messages=3, keep_messages=1)
    return build_graph(
        models=demo_models(),
        tools=demo_tools(),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        settings=settings,
    )


def _config() -> RunnableConfig:
    return {"configurable": {"thread_id": "bodies"}}


TURNS = ["What is 2 * 4?", "And what is 3 * 5?"]


def _expected(kind: str) -> set[Call]:
    takes_config = {"flush", "compact", "extract_memory"}
    return {(node, kind, "u1", node in takes_config) for _, node, _, _ in BODIES}


def test_invoke_runs_every_sync_body(calls: list[Call]) -> None:
    graph = _graph()
    for text in TURNS:
        graph.invoke({"messages": [("user", text)]}, _config(), context=Context(user_id="u1"))
    assert set(calls) == _expected("sync")


async def test_ainvoke_runs_every_async_body(calls: list[Call]) -> None:
    graph = _graph()
    for text in TURNS:
        await graph.ainvoke(
            {"messages": [("user", text)]}, _config(), context=Context(user_id="u1")
        )
    assert set(calls) == _expected("async")
