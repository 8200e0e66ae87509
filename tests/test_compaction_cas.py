"""Compare-and-set commit: a compaction whose thread moved on meanwhile writes nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import Graph, build_graph
from ctxgraph.nodes.compaction.commit import (
    Head,
    checkpoint_head,
    graph_namespace,
    moved,
)
from ctxgraph.nodes.compaction.node import CompactNode
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.store.persistence.archive import ThreadArchive, verify_thread
from tests.support.requests import request_builder
from tests.support.scripted import demo_summarizer

CTX = Context(user_id="u1")
SETTINGS = Settings(trigger_messages=8, keep_messages=2, memory_extraction="off")
LOOKUPS_PER_TURN = 5
FILLER = "The parcel was scanned at the dock and the carrier confirmed the window. " * 3


@tool
def lookup(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: in transit. {FILLER}"


def agent(request: list[BaseMessage]) -> AIMessage:
    """Each turn calls ``lookup`` LOOKUPS_PER_TURN times, one call per step, then answers.

    The number of calls made so far is read from the last tool result's call id, which
    survives compaction (the last exchange is always kept).
    """
    user = [m for m in request if isinstance(m, HumanMessage)][-1]
    results = [m for m in request[request.index(user) :] if isinstance(m, ToolMessage)]
    done = int(results[-1].tool_call_id.split("-")[0][1:]) + 1 if results else 0
    if done < LOOKUPS_PER_TURN:
        call_id = f"c{done}-{str(user.id)[:8]}"
        return AIMessage(
            "", tool_calls=[{"name": "lookup", "args": {"order_id": f"X-{done}"}, "id": call_id}]
        )
    return AIMessage("All looked up.")


@dataclass
class FakeHead:
    """A thread head that reports a fixed saved state, and records who asked."""

    head: Head | None
    asked: list[tuple[str, str]] = field(default_factory=list)

    def read(self, thread_id: str, checkpoint_ns: str) -> Head | None:
        self.asked.append((thread_id, checkpoint_ns))
        return self.head

    async def aread(self, thread_id: str, checkpoint_ns: str) -> Head | None:
        return self.read(thread_id, checkpoint_ns)


def wire_head(monkeypatch: pytest.MonkeyPatch, head: Any) -> None:
    """Give every CompactNode built from now on ``head`` in place of the checkpoint reader."""
    original = CompactNode.__init__

    def init(self: CompactNode, *args: Any, **kwargs: Any) -> None:
        kwargs["head"] = head
        original(self, *args, **kwargs)

    monkeypatch.setattr(CompactNode, "__init__", init)


@dataclass
class Thread:
    graph: Graph
    saver: InMemorySaver
    store: InMemoryStore
    thread_id: str = "t-cas"

    @property
    def config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_id}}

    def turn(self, text: str, **kwargs: Any) -> None:
        self.graph.invoke({"messages": [HumanMessage(text)]}, self.config, context=CTX, **kwargs)

    async def aturn(self, text: str) -> None:
        await self.graph.ainvoke({"messages": [HumanMessage(text)]}, self.config, context=CTX)

    def state(self) -> dict[str, Any]:
        return dict(self.graph.get_state(self.config).values)

    def versions(self) -> list[int]:
        return [v for v, _ in ThreadArchive(self.store, self.thread_id).versioned()]


def new_thread() -> Thread:
    saver, store = InMemorySaver(), InMemoryStore()
    graph = build_graph(
        checkpointer=saver,
        store=store,
        models=Models(main=ScriptedChatModel(responder=agent), summary=demo_summarizer()),
        tools=[lookup],
        settings=SETTINGS,
    )
    return Thread(graph, saver, store)


class Discards:
    """The discard lines logged on ``ctxgraph.compaction`` so far."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    def lines(self) -> list[str]:
        return [
            r.getMessage()
            for r in self._caplog.records
            if r.name == "ctxgraph.compaction" and "discarded" in r.getMessage()
        ]


@pytest.fixture
def discards(caplog: pytest.LogCaptureFixture) -> Iterator[Discards]:
    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        yield Discards(caplog)


# --- the comparison ------------------------------------------------------------------------


def test_moved_compares_the_mark_and_the_folded_ids() -> None:
    window = ["m1", "m2", "m3", "m4"]
    folded = ["m1", "m2"]

    assert moved(None, 0, folded, window) is None
    assert moved(Head(2, tuple(window)), 2, folded, window) is None
    reason = moved(Head(3, ("m3", "m4")), 2, folded, window)
    assert reason == "another run committed compaction v3 meanwhile"
    # A head behind this run's state is this run's own progress not saved yet.
    assert moved(Head(1, ("m0",)), 2, folded, window) is None
    assert moved(Head(2, ("m1",)), 2, folded, window) is None
    # Same mark, but a folded message left the window: someone else rewrote it.
    gone = moved(Head(2, ("m2", "m3", "m9")), 2, folded, window)
    assert gone == "1 of the 2 folded messages are no longer in the thread's window"


def test_graph_namespace_is_one_level_above_the_nodes_task() -> None:
    assert graph_namespace({"configurable": {"checkpoint_ns": "compact:abc"}}) == ""
    assert graph_namespace({"configurable": {"checkpoint_ns": "outer:1|compact:2"}}) == "outer:1"
    assert graph_namespace({}) == ""


def test_checkpoint_head_reads_the_latest_mark_and_window() -> None:
    thread = new_thread()
    assert checkpoint_head(None) is None
    head = checkpoint_head(thread.saver)
    assert head is not None and head.read(thread.thread_id, "") is None
    thread.turn("first")
    thread.turn("second")

    state = thread.state()
    saved = head.read(thread.thread_id, "")
    assert saved == Head(state["compaction"]["version"], tuple(m.id for m in state["messages"]))
    assert saved.mark_version >= 1


# --- a moved head discards the compaction ---------------------------------------------------


def test_a_head_ahead_of_the_run_discards_the_compaction(
    monkeypatch: pytest.MonkeyPatch, discards: Discards
) -> None:
    fake = FakeHead(Head(mark_version=5, window_ids=()))
    wire_head(monkeypatch, fake)
    thread = new_thread()

    thread.turn("first")

    state = thread.state()
    assert fake.asked and set(fake.asked) == {(thread.thread_id, "")}
    assert state.get("summary") is None and state.get("compaction") is None
    assert thread.versions() == []  # nothing was written, not even a prepared version
    assert len(state["messages"]) == 2 + 2 * LOOKUPS_PER_TURN  # every message is still there
    # One line per attempt: each step over the trigger tries again, and is discarded again.
    assert discards.lines() and set(discards.lines()) == {
        f"compaction of thread {thread.thread_id} discarded, nothing written: the thread "
        "moved on while it ran (another run committed compaction v5 meanwhile; its committed "
        "mark is v5, this compaction started from v0 and would have committed v1)"
    }


def test_folded_messages_gone_from_the_head_discard_the_compaction(
    monkeypatch: pytest.MonkeyPatch, discards: Discards
) -> None:
    wire_head(monkeypatch, FakeHead(Head(mark_version=0, window_ids=("rewritten",))))
    thread = new_thread()

    thread.turn("first")

    assert thread.state().get("compaction") is None
    assert thread.versions() == []
    line = discards.lines()[0]
    assert "folded messages are no longer in the thread's window" in line
    assert "started from v0 and would have committed v1" in line


async def test_async_compaction_checks_the_head_too(
    monkeypatch: pytest.MonkeyPatch, discards: Discards
) -> None:
    fake = FakeHead(Head(mark_version=2, window_ids=()))
    wire_head(monkeypatch, fake)
    thread = new_thread()

    await thread.aturn("first")

    assert fake.asked
    assert (await thread.graph.aget_state(thread.config)).values.get("compaction") is None
    assert thread.versions() == []
    line = discards.lines()[0]
    assert "its committed mark is v2" in line


def test_a_stale_run_cannot_overwrite_what_another_run_committed(
    monkeypatch: pytest.MonkeyPatch, discards: Discards
) -> None:
    thread = new_thread()
    wire_head(monkeypatch, checkpoint_head(thread.saver))
    thread.turn("first")
    # A second run started from this state and reached the message trigger, then another
    # run compacted the thread.
    stale = thread.state()
    stale["messages"] = [
        *stale["messages"],
        HumanMessage("from the stale run", id="stale"),
        AIMessage("Noted.", id="stale-answer"),
        HumanMessage("and once more", id="stale-again"),
    ]
    version = stale.get("compaction", {}) or {}
    thread.turn("second")
    committed = thread.state()["compaction"]
    assert committed["version"] > version.get("version", 0)
    archived = ThreadArchive(thread.store, thread.thread_id).records()
    counter = TokenCounter()
    node = CompactNode(
        Models(main=ScriptedChatModel(responder=agent), summary=demo_summarizer()),
        request_builder([lookup], counter),
        SETTINGS,
        counter,
        head=checkpoint_head(thread.saver),
    )

    update = node.invoke(stale, Runtime(context=CTX, store=thread.store), thread.config)

    # Nothing of the stale run's compaction is written; only the summary call it paid for
    # is counted (``model_usage`` adds up, it overwrites nothing).
    assert set(update) == {"model_usage"}
    assert update["model_usage"]["summary"]["calls"] == 1
    assert ThreadArchive(thread.store, thread.thread_id).records() == archived
    assert verify_thread(thread.store, thread.thread_id, committed).ok
    [line] = discards.lines()
    assert f"its committed mark is v{committed['version']}" in line


# --- a single writer never discards, whatever the durability ---------------------------------


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_one_writer_never_sees_a_moved_head(
    monkeypatch: pytest.MonkeyPatch, discards: Discards, durability: str
) -> None:
    plain = new_thread()
    for n in range(4):
        plain.turn(f"turn {n}", durability=durability)
    expected = plain.state()["compaction"]["version"]
    assert expected >= 4  # several compactions, some of them within one run

    saver = InMemorySaver()
    wire_head(monkeypatch, checkpoint_head(saver))
    store = InMemoryStore()
    graph = build_graph(
        checkpointer=saver,
        store=store,
        models=Models(main=ScriptedChatModel(responder=agent), summary=demo_summarizer()),
        tools=[lookup],
        settings=SETTINGS,
    )
    checked = Thread(graph, saver, store)
    for n in range(4):
        checked.turn(f"turn {n}", durability=durability)

    assert discards.lines() == []
    mark = checked.state()["compaction"]
    assert mark["version"] == expected
    assert verify_thread(store, checked.thread_id, mark).ok
