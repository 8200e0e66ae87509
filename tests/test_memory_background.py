"""Background memory extraction (the default): no turn waits for the memory model.

The memory model here blocks on a ``threading.Event`` until the test releases it, so
"the next turn did not wait" is shown by the next turn returning while the previous
extraction is still blocked, not by timing.
"""

from __future__ import annotations

import asyncio
import io
import logging
import signal
import subprocess
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import GetOp
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import await_memory, build_graph, wait_for_memory
from ctxgraph.graph.cli.chat import settle_memory_extractions
from ctxgraph.graph.demo import demo_reply
from ctxgraph.nodes.memory.runner import pending_memory
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_memory, demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.progress import UNCLAIMED_USAGE
from ctxgraph.store.memory.queue import MemoryQueue
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.namespaces import memory_queue, thread_memory
from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import REPO_ROOT, run_ctxgraph

FIRST = "I mainly do Python backend work."
SECOND = "I prefer short answers."
HOLD = 30.0
"""Seconds a blocked memory model waits for its release before it gives up (a safety net)."""


class BlockedMemory:
    """A memory model that extracts as the demo does, once the test releases it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.model = ScriptedChatModel(responder=self._answer)

    def _answer(self, messages: list[BaseMessage]) -> AIMessage:
        self.started.set()
        if not self.release.wait(HOLD):
            raise TimeoutError("the test never released the memory model")
        return demo_memory(str(messages[-1].content))

    def prompt(self, call: int) -> str:
        """The conversation the memory model was shown in its ``call``-th call."""
        return str(self.model.requests[call][-1].content)


@pytest.fixture
def memory() -> Iterator[BlockedMemory]:
    blocked = BlockedMemory()
    yield blocked
    blocked.release.set()  # never leave an extraction blocked after the test
    wait_for_memory(HOLD)


def graph_on(store: Any, memory: BlockedMemory, settings: Settings | None = None) -> Any:
    return build_graph(
        models=Models(main=ScriptedChatModel(responder=demo_reply), memory=memory.model),
        tools=demo_tools(),
        settings=settings,
        checkpointer=InMemorySaver(),
        store=store,
    )


def turn(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def contents(store: Any, context: Context) -> list[str]:
    return sorted(fact.content for fact in MemoryRepository(store).list_facts(context))


def extracted_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "memory.extracted" in r.getMessage()]


def test_background_is_the_default() -> None:
    assert Settings().memory_extraction == "background"
    assert Settings.from_env({}).memory_extraction == "background"


def test_the_next_turn_does_not_wait_for_the_previous_extraction(
    memory: BlockedMemory, caplog: pytest.LogCaptureFixture
) -> None:
    store = InMemoryStore()
    graph = graph_on(store, memory)
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")

    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        first = graph.invoke(turn(FIRST), config("t-bg"), context=context)
        assert memory.started.wait(HOLD), "the first turn's extraction never started"
        second = graph.invoke(turn(SECOND), config("t-bg"), context=context)

        # Both turns were answered while the first extraction is still blocked.
        assert not memory.release.is_set()
        assert isinstance(first["messages"][-1], AIMessage)
        assert isinstance(second["messages"][-1], AIMessage)
        assert memory.model.calls == 1
        assert pending_memory() == 1
        assert contents(store, context) == []
        # The second turn's rows were merged into the thread's queued item.
        (queued,) = MemoryQueue(store).due(quiet_seconds=0)
        assert [row["content"] for row in queued.rows if row["role"] == "user"] == [
            FIRST,
            SECOND,
        ]

        memory.release.set()
        assert wait_for_memory(HOLD) == 0

    assert contents(store, context) == [FIRST, SECOND]
    assert store.get(memory_queue(), "t-bg") is None
    # One extraction at a time per thread: the second ran after the first, over the rows
    # queued meanwhile only (the first's rows were taken out of the item).
    assert memory.model.calls == 2
    assert f"user: {FIRST}" in memory.prompt(0)
    assert f"user: {SECOND}" not in memory.prompt(0)
    assert f"user: {SECOND}" in memory.prompt(1)
    assert f"user: {FIRST}" not in memory.prompt(1)
    lines = extracted_lines(caplog)
    assert len(lines) == 2
    assert all("thread=t-bg at=background" in line and "facts=1" in line for line in lines)


def test_the_async_path_does_not_wait_either(
    memory: BlockedMemory, caplog: pytest.LogCaptureFixture
) -> None:
    store = InMemoryStore()
    graph = graph_on(store, memory)
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")

    async def conversation() -> tuple[int, int, int]:
        await graph.ainvoke(turn(FIRST), config("t-async"), context=context)
        await asyncio.to_thread(memory.started.wait, HOLD)
        await graph.ainvoke(turn(SECOND), config("t-async"), context=context)
        calls_before_release = memory.model.calls
        running = pending_memory()
        memory.release.set()
        return calls_before_release, running, await await_memory(HOLD)

    with caplog.at_level(logging.INFO, logger="ctxgraph.memory"):
        calls_before_release, running, left = asyncio.run(conversation())

    assert (calls_before_release, running, left) == (1, 1, 0)
    assert contents(store, context) == [FIRST, SECOND]
    assert store.get(memory_queue(), "t-async") is None
    assert memory.model.calls == 2
    assert ["at=background" in line for line in extracted_lines(caplog)] == [True, True]


def usage_items(store: Any, thread: str) -> list[Any]:
    """What background extractions left for the thread to count (``UnclaimedUsage``)."""
    return store.search(thread_memory(thread), filter={"kind": UNCLAIMED_USAGE})


def test_the_next_turn_counts_what_the_background_extraction_cost(
    memory: BlockedMemory,
) -> None:
    store = InMemoryStore()
    graph = graph_on(store, memory)
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    memory.release.set()

    def usage() -> dict[str, Any]:
        return graph.get_state(config("t-cost")).values.get("model_usage") or {}

    graph.invoke(turn(FIRST), config("t-cost"), context=context)
    assert wait_for_memory(HOLD) == 0
    assert "memory" not in usage()  # it ran after the turn
    [left] = usage_items(store, "t-cost")
    assert [call["role"] for call in left.value["calls"]] == ["memory"]

    graph.invoke(turn("What is 2 + 2?"), config("t-cost"), context=context)
    counted = usage()["memory"]
    assert counted["calls"] == 1 == memory.model.calls
    assert counted["input_tokens"] == left.value["calls"][0]["input_tokens"] > 0
    assert usage_items(store, "t-cost") == []
    # Counted once: a later turn adds nothing for it.
    graph.invoke(turn("And 3 + 3?"), config("t-cost"), context=context)
    assert usage()["memory"] == counted


def test_the_async_path_counts_it_too(memory: BlockedMemory) -> None:
    store = InMemoryStore()
    graph = graph_on(store, memory)
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    memory.release.set()

    async def conversation() -> dict[str, Any]:
        await graph.ainvoke(turn(FIRST), config("t-acost"), context=context)
        assert await await_memory(HOLD) == 0
        await graph.ainvoke(turn("What is 2 + 2?"), config("t-acost"), context=context)
        return dict((await graph.aget_state(config("t-acost"))).values)

    values = asyncio.run(conversation())
    assert values["model_usage"]["memory"]["calls"] == 1
    assert usage_items(store, "t-acost") == []


def test_a_streamed_run_carries_no_background_event(memory: BlockedMemory) -> None:
    """The extraction is no part of the run: its event is logged, never streamed into it."""
    store = InMemoryStore()
    graph = graph_on(store, memory)
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    memory.release.set()

    events = list(graph.stream(turn(FIRST), config("t-s"), context=context, stream_mode="custom"))
    assert wait_for_memory(HOLD) == 0

    assert not [e for e in events if str(e.get("event", "")).startswith("memory.")]
    assert contents(store, context) == [FIRST]


def test_inline_still_extracts_inside_the_run(memory: BlockedMemory) -> None:
    store = InMemoryStore()
    graph = graph_on(store, memory, Settings(memory_extraction="inline"))
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    memory.release.set()

    graph.invoke(turn(FIRST), config("t-inline"), context=context)

    assert pending_memory() == 0
    assert contents(store, context) == [FIRST]
    assert store.get(memory_queue(), "t-inline") is None


def test_a_failed_background_extraction_stays_queued_and_the_next_turn_retries_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryStore()
    model = ScriptedChatModel(
        script=[RuntimeError("provider is down")],
        responder=lambda messages: demo_memory(str(messages[-1].content)),
    )
    graph = build_graph(
        models=Models(main=ScriptedChatModel(responder=demo_reply), memory=model),
        tools=demo_tools(),
        checkpointer=InMemorySaver(),
        store=store,
    )
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")

    with caplog.at_level(logging.WARNING, logger="ctxgraph.memory"):
        graph.invoke(turn(FIRST), config("t-retry"), context=context)
        assert wait_for_memory(HOLD) == 0
    assert "provider is down" in caplog.text
    assert contents(store, context) == []
    assert store.get(memory_queue(), "t-retry") is not None

    graph.invoke(turn(SECOND), config("t-retry"), context=context)
    assert wait_for_memory(HOLD) == 0
    assert contents(store, context) == [FIRST, SECOND]
    assert store.get(memory_queue(), "t-retry") is None


def test_the_command_line_waits_at_exit_and_says_so(memory: BlockedMemory) -> None:
    store = InMemoryStore()
    graph = graph_on(store, memory)
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    graph.invoke(turn(FIRST), config("t-exit"), context=context)
    assert memory.started.wait(HOLD)

    class ReleaseOnNote(io.StringIO):
        """Stderr that lets the model answer once the waiting note is written."""

        def write(self, text: str) -> int:
            if text.startswith("note: waiting"):
                memory.release.set()
            return super().write(text)

    err = ReleaseOnNote()
    assert settle_memory_extractions(Settings(memory_wait_s=HOLD), err) == 0

    assert err.getvalue() == (
        f"note: waiting up to {HOLD:g} s for 1 memory extraction to finish "
        "(Ctrl-C leaves it queued)\n"
    )
    assert contents(store, context) == [FIRST]
    assert store.get(memory_queue(), "t-exit") is None


def test_without_time_to_wait_the_command_line_leaves_it_queued(memory: BlockedMemory) -> None:
    store = InMemoryStore()
    graph = graph_on(store, memory)
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    graph.invoke(turn(FIRST), config("t-quit"), context=context)
    assert memory.started.wait(HOLD)

    err = io.StringIO()
    assert settle_memory_extractions(Settings(memory_wait_s=0), err) == 1

    assert err.getvalue() == (
        "note: 1 memory extraction left queued; the next chat or run "
        "(or ctxgraph memory process) finishes it\n"
    )
    assert store.get(memory_queue(), "t-quit") is not None


def test_nothing_running_prints_nothing() -> None:
    err = io.StringIO()
    assert settle_memory_extractions(Settings(), err) == 0
    assert err.getvalue() == ""


CRASHING_CHILD = textwrap.dedent(
    """
    import os, sys, threading
    from langchain_core.messages import HumanMessage
    from ctxgraph.graph import build_graph
    from ctxgraph.graph.demo import demo_reply
    from ctxgraph.state.demo_replies import demo_tools
    from ctxgraph.state import Context, Models
    from ctxgraph.state.scripted_model import ScriptedChatModel
    from ctxgraph.store.persistence.connection import open_persistence

    thread_id, user_id, sentence = sys.argv[1:4]
    never = threading.Event()
    printing = threading.Lock()

    def say(line):
        # The two threads print one whole line each: never interleaved.
        with printing:
            sys.stdout.write(line + "\\n")
            sys.stdout.flush()

    def blocked(messages):
        say("extracting")
        never.wait()

    models = Models(
        main=ScriptedChatModel(responder=demo_reply),
        memory=ScriptedChatModel(responder=blocked),
    )
    with open_persistence(os.environ["DATABASE_URI"]) as persistence:
        graph = build_graph(
            models=models,
            tools=demo_tools(),
            checkpointer=persistence.checkpointer,
            store=persistence.store,
        )
        graph.invoke(
            {"messages": [HumanMessage(sentence)]},
            {"configurable": {"thread_id": thread_id}},
            context=Context(user_id=user_id),
        )
        say("answered")
        never.wait()
    """
)


def test_a_process_that_dies_mid_extraction_leaves_it_for_memory_process(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    user = f"u-{uuid.uuid4().hex[:10]}"
    child = subprocess.Popen(
        [python, "-c", CRASHING_CHILD, thread_id, user, FIRST],
        env=subprocess_env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        lines = {child.stdout.readline().strip(), child.stdout.readline().strip()}
        assert lines == {"extracting", "answered"}, child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

        store = persistence.store
        assert store.get(memory_queue(), thread_id) is not None, "the queued item was lost"
        assert MemoryRepository(store).list_facts(Context(user_id=user)) == []

        result = run_ctxgraph(python, subprocess_env, "memory", "process")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"thread {thread_id}" in result.stdout
        facts = MemoryRepository(store).list_facts(Context(user_id=user))
        assert [fact.content for fact in facts] == [FIRST]
        assert store.get(memory_queue(), thread_id) is None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        persistence.store.delete(memory_queue(), thread_id)  # never leave work for other tests


def test_ctxgraph_run_stores_the_facts_of_its_last_turn(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    user = f"u-{uuid.uuid4().hex[:10]}"
    result = run_ctxgraph(
        python, subprocess_env, "run", "--user", user, "--thread", thread_id, SECOND
    )
    assert result.returncode == 0, result.stderr
    facts = MemoryRepository(persistence.store).list_facts(Context(user_id=user))
    assert [fact.content for fact in facts] == [SECOND]
    assert persistence.store.get(memory_queue(), thread_id) is None


class SlowQueueReads(InMemoryStore):
    """Holds the background extraction between its read of the queue and its write back."""

    def __init__(self) -> None:
        super().__init__()
        self.worker_read = threading.Event()
        self._reads = 0

    def batch(self, ops: Any) -> list[Any]:
        ops = list(ops)
        results = super().batch(ops)
        reads_queue = any(isinstance(op, GetOp) and op.namespace == memory_queue() for op in ops)
        if threading.current_thread().name.startswith("ctxgraph-memory-") and reads_queue:
            self._reads += 1
            if self._reads == 2:  # the read after the model call, before the write back
                self.worker_read.set()
                time.sleep(0.5)  # a turn queueing rows now is written over without the lock
        return results


def test_rows_queued_while_an_extraction_writes_back_are_extracted_too(
    memory: BlockedMemory,
) -> None:
    store = SlowQueueReads()
    graph = graph_on(store, memory)
    context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}")
    memory.release.set()

    graph.invoke(turn(FIRST), config("t-race"), context=context)
    assert store.worker_read.wait(HOLD)  # the extraction has read the item, not written it
    graph.invoke(turn(SECOND), config("t-race"), context=context)
    assert wait_for_memory(HOLD) == 0

    assert contents(store, context) == [FIRST, SECOND]
    assert store.get(memory_queue(), "t-race") is None
