"""Processed-message tracking: bounded per thread, and no row skipped or extracted twice.

The thread's record holds only the latest ``RECENT_IDS`` row ids, so its size (and the
per-turn write) stays bounded however long the thread runs. These tests drive the graph
for a thousand and more processed rows, through compactions (flush), process restarts,
rewinds, a record written by an earlier version, failures and deferred extraction, and
check that the memory model saw every row exactly once.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import await_memory, build_graph, wait_for_memory
from ctxgraph.graph.demo import demo_reply
from ctxgraph.nodes.memory.extract import MemoryExtractor
from ctxgraph.nodes.memory.filter import filter_for_memory
from ctxgraph.nodes.memory.worker import process_pending
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory import progress as progress_module
from ctxgraph.store.memory.progress import (
    PROCESSED_KEY,
    RECENT_IDS,
    ProcessedMessages,
    Progress,
)
from ctxgraph.store.namespaces import thread_memory

SIZE_BOUND = 8 * 1024
"""Bytes the stored record may take as JSON: RECENT_IDS uuid4 ids and the key."""

_NEW_ROWS = re.compile(r"<new_conversation>\n(.*?)\n</new_conversation>", re.DOTALL)
_ROW_ID = re.compile(r"^\[([^\]]+)\] (?:user|assistant): ", re.MULTILINE)


def empty_update() -> AIMessage:
    args = {"facts": [], "profile_updates": []}
    return AIMessage(content="", tool_calls=[{"name": "MemoryUpdate", "args": args, "id": "m"}])


@dataclass
class RecordingMemory:
    """A memory model that finds nothing and records the row ids of every call."""

    fail_calls: set[int] = field(default_factory=set)
    seen: list[list[str]] = field(default_factory=list)
    calls: int = 0

    def __call__(self, messages: list[BaseMessage]) -> AIMessage:
        self.calls += 1
        if self.calls in self.fail_calls:
            raise RuntimeError("memory endpoint is down")
        block = _NEW_ROWS.search(str(messages[-1].content))
        assert block is not None
        self.seen.append(_ROW_ID.findall(block.group(1)))
        return empty_update()

    def counts(self) -> Counter[str]:
        return Counter(row_id for call in self.seen for row_id in call)


def text_of(turn: int) -> str:
    """A varied user message: plain notes, arithmetic (a tool call), acknowledgements."""
    if turn % 7 == 3:
        return "ok thanks"  # an acknowledgement: neither it nor its answer is a row
    if turn % 5 == 1:
        return f"What is {turn} * 3?"
    return f"Note {turn}: please keep the quarterly report for team {turn % 11} in mind."


@dataclass
class Thread:
    """One thread driven turn by turn; remembers which rows it should have produced."""

    saver: InMemorySaver
    store: InMemoryStore
    memory: RecordingMemory
    settings: Settings
    thread_id: str = field(default_factory=lambda: f"t-{uuid.uuid4().hex[:10]}")
    expected: list[str] = field(default_factory=list)
    acknowledged: set[str] = field(default_factory=set)
    """Answers to acknowledgements: no row, unless their user message is folded first."""
    graph: Any = None

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """A new graph (new nodes, new ProcessedMessages) on the same saver and store."""
        models = Models(
            main=ScriptedChatModel(responder=demo_reply),
            memory=ScriptedChatModel(responder=self.memory),
        )
        self.graph = build_graph(
            models=models,
            tools=demo_tools(),
            settings=self.settings,
            checkpointer=self.saver,
            store=self.store,
        )

    @property
    def config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_id}}

    def send(self, turn: int) -> None:
        message = HumanMessage(text_of(turn), id=f"u-{turn}-{uuid.uuid4().hex[:6]}")
        result = self.graph.invoke({"messages": [message]}, self.config, context=CONTEXT)
        self.expect(message, result["messages"][-1])

    async def asend(self, turn: int) -> None:
        message = HumanMessage(text_of(turn), id=f"u-{turn}-{uuid.uuid4().hex[:6]}")
        result = await self.graph.ainvoke({"messages": [message]}, self.config, context=CONTEXT)
        self.expect(message, result["messages"][-1])

    def expect(self, message: HumanMessage, answer: BaseMessage) -> None:
        assert isinstance(answer, AIMessage) and not answer.tool_calls
        rows = [row["id"] for row in filter_for_memory([message, answer])]
        self.expected += rows
        if not rows and answer.id:
            self.acknowledged.add(answer.id)

    def window(self) -> list[BaseMessage]:
        return list(self.graph.get_state(self.config).values["messages"])

    def record(self) -> dict[str, Any]:
        item = self.store.get(thread_memory(self.thread_id), PROCESSED_KEY)
        assert item is not None
        return dict(item.value)

    def assert_each_row_once(self) -> None:
        assert wait_for_memory(30) == 0  # background extractions of the last turns
        counts = self.memory.counts()
        assert [row for row, n in counts.items() if n > 1] == []  # none extracted twice
        assert sorted(set(self.expected) - set(counts)) == []  # none skipped
        # A window that starts with the answer to a folded acknowledgement makes that
        # answer a row (filter_for_memory sees no user message before it); once only.
        assert set(counts) - set(self.expected) <= self.acknowledged


CONTEXT = Context(user_id="progress-user")
# The gate is off: every row here must reach the memory model once (the gate has its own
# tests, tests/test_memory_gate.py), and "What is N * 3?" turns would be gated.
COMPACTING = Settings(trigger_messages=12, keep_messages=4, extraction_gate=False)


def new_thread(settings: Settings = COMPACTING, memory: RecordingMemory | None = None) -> Thread:
    return Thread(InMemorySaver(), InMemoryStore(), memory or RecordingMemory(), settings)


# --------------------------------------------------------------------------- unit


def _rows(*ids: str) -> list[dict[str, str]]:
    return [{"id": i, "role": "user", "content": i} for i in ids]


def test_unread_uses_membership_and_the_horizon() -> None:
    progress = Progress(("c", "d"))
    rows = _rows("a", "b", "c", "d", "e")
    # a and b lie before the horizon (c): read long ago; e is new.
    assert [r["id"] for r in progress.unread(rows)] == ["e"]
    # Flush: only the folded ids are candidates, the horizon is still found in the window.
    assert progress.unread(rows, among={"a", "b", "c"}) == []
    assert [r["id"] for r in progress.unread(rows, among={"e"})] == ["e"]
    # The horizon folded away: membership alone decides.
    assert [r["id"] for r in progress.unread(_rows("d", "e", "f"))] == ["e", "f"]
    assert [r["id"] for r in Progress().unread(rows)] == ["a", "b", "c", "d", "e"]


def test_the_record_is_bounded_and_reads_the_earlier_form() -> None:
    legacy = {"ids": [f"id-{i}" for i in range(5_000)]}
    progress = Progress.from_value(legacy)
    assert len(progress.ids) == 5_000  # read whole, so the first decision is the old one
    marked = progress.marked(["new-1", "id-4999", "new-2"])
    assert marked.ids[-3:] == ("id-4999", "new-1", "new-2")  # a known id keeps its place
    assert len(marked.ids) == RECENT_IDS
    assert marked.to_value() == {"ids": list(marked.ids)}
    assert Progress.from_value(None) == Progress() == Progress.from_value({})


def test_add_writes_only_what_is_new() -> None:
    store = InMemoryStore()
    processed = ProcessedMessages(store, "t-add")
    assert processed.get() == []
    processed.add(["a", "b"])
    assert processed.get() == ["a", "b"]
    written = store.get(thread_memory("t-add"), PROCESSED_KEY)
    assert written is not None
    processed.add(["b", "a"])  # already remembered: nothing is written
    again = store.get(thread_memory("t-add"), PROCESSED_KEY)
    assert again is not None and again.updated_at == written.updated_at
    processed.add(["c"], known=processed.read())
    assert processed.get() == ["a", "b", "c"]


# --------------------------------------------------------------------------- the graph


def test_the_thousandth_turn_keeps_the_record_bounded_and_reads_each_row_once() -> None:
    thread = new_thread()
    sizes: list[int] = []
    for turn in range(600):
        thread.send(turn)
        if turn == 299:
            thread.restart()  # a new process: new nodes, new ProcessedMessages objects
        if turn % 100 == 99:
            sizes.append(len(json.dumps(thread.record())))
    assert len(thread.expected) > 1_000
    thread.assert_each_row_once()
    state = thread.graph.get_state(thread.config).values
    assert state["compaction"]["version"] > 50  # many flushes and compactions
    assert max(sizes) < SIZE_BOUND
    assert sizes[-1] == sizes[-2] or abs(sizes[-1] - sizes[-2]) < 64  # no growth
    record = thread.record()
    assert len(record["ids"]) == RECENT_IDS
    # The horizon (the oldest remembered id) was folded away long ago.
    assert record["ids"][0] not in {m.id for m in thread.window()}
    # A new object, as after a restart, reads the same progress.
    assert ProcessedMessages(thread.store, thread.thread_id).get() == record["ids"]


async def test_async_turns_read_the_same_rows_as_sync_ones() -> None:
    sync, async_ = new_thread(), new_thread()
    for turn in range(60):
        sync.send(turn)
        await async_.asend(turn)
    assert await await_memory(30) == 0  # the async turns' extractions run on this loop
    sync.assert_each_row_once()
    async_.assert_each_row_once()
    # The same calls with the same number of rows (the ids differ between the threads).
    assert [len(call) for call in sync.memory.seen] == [len(c) for c in async_.memory.seen]


def test_a_window_longer_than_the_record_relies_on_the_horizon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress_module, "RECENT_IDS", 6)
    settings = Settings(trigger_messages=400, trigger_tokens=200_000, extraction_gate=False)
    thread = new_thread(settings)
    for turn in range(40):
        thread.send(turn)
    assert len(thread.record()["ids"]) == 6
    window_ids = {m.id for m in thread.window()}
    assert thread.record()["ids"][0] in window_ids  # the horizon is inside the window
    thread.assert_each_row_once()


def test_an_earlier_versions_record_is_read_then_rewritten_bounded() -> None:
    thread = new_thread()
    for turn in range(30):
        thread.send(turn)
    assert wait_for_memory(30) == 0  # no extraction writes the record under the test's feet
    done = thread.memory.counts()
    # The unbounded form an earlier version wrote: oldest first, up to 5,000 ids.
    legacy = [*(f"old-{i}" for i in range(4_000)), *done]
    ns = thread_memory(thread.thread_id)
    thread.store.put(ns, PROCESSED_KEY, {"ids": legacy}, index=False)
    for turn in range(30, 60):
        thread.send(turn)
    thread.assert_each_row_once()
    assert len(thread.record()["ids"]) == RECENT_IDS


def test_rewinding_to_an_earlier_checkpoint_reads_no_row_again() -> None:
    thread = new_thread()
    for turn in range(40):
        thread.send(turn)
    history = list(thread.graph.get_state_history(thread.config))
    # A checkpoint some turns back, at the end of a turn (nothing left to run).
    earlier = next(s for s in history[25:] if not s.next and s.values.get("messages"))
    fork = thread.graph.update_state(earlier.config, {"messages": []})
    branch = {"configurable": {**fork["configurable"]}}
    message = HumanMessage("Note 999: the branch starts here.", id="u-branch")
    result = thread.graph.invoke({"messages": [message]}, branch, context=CONTEXT)
    thread.expect(message, result["messages"][-1])
    thread.assert_each_row_once()


def test_a_failed_extraction_is_retried_with_the_next_turn() -> None:
    thread = new_thread(memory=RecordingMemory(fail_calls={5, 6, 20}))
    for turn in range(40):
        thread.send(turn)
    thread.assert_each_row_once()


def test_deferred_rows_are_queued_once_and_the_worker_marks_nothing_new() -> None:
    memory = RecordingMemory()
    thread = new_thread(
        Settings(
            trigger_messages=12,
            keep_messages=4,
            memory_extraction="deferred",
            extraction_gate=False,
        )
    )
    for turn in range(50):
        thread.send(turn)
        if turn % 10 == 9:
            before = thread.store.get(thread_memory(thread.thread_id), PROCESSED_KEY)
            extractor = MemoryExtractor(ScriptedChatModel(responder=memory))
            process_pending(thread.store, extractor, threshold=0.7, quiet_seconds=0)
            after = thread.store.get(thread_memory(thread.thread_id), PROCESSED_KEY)
            assert before is not None and after is not None
            assert after.updated_at == before.updated_at  # the node marked them already
    thread.memory = memory
    assert thread.memory.calls > 0
    thread.assert_each_row_once()


def _chunks(ids: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def test_the_record_stays_under_the_bound_for_long_ids() -> None:
    store = InMemoryStore()
    processed = ProcessedMessages(store, "t-long")
    ids = [f"lc_run--{uuid.uuid4()}-{i}" for i in range(3_000)]
    for chunk in _chunks(ids, 3):
        processed.add(chunk)
    item = store.get(thread_memory("t-long"), PROCESSED_KEY)
    assert item is not None
    assert item.value["ids"] == ids[-RECENT_IDS:]
    assert len(json.dumps(item.value)) < 2 * SIZE_BOUND
