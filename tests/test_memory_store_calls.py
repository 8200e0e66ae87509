"""Store operations per turn with long-term memory on: each record is read at most once.

A counting ``InMemoryStore`` records every operation the graph sends, by type, namespace
and key. Per turn the profile and the thread's processed-ids record are each read at most
once (``load_memory`` hands the profile to extraction, a flush hands the processed ids to
the end of the turn), the facts are listed at most once, and the processed ids are
written once. Sync and async turns send the same operations.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import GetOp, Op, PutOp, Result, SearchOp
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.graph.demo import demo_reply
from ctxgraph.nodes.memory.extract import EXTRACTION_FACTS, known_facts
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_memory, demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.progress import PROCESSED_KEY
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.searcher import CANDIDATES
from ctxgraph.store.namespaces import memory_queue, thread_memory, user_facts, user_profile

Seen = tuple[str, tuple[str, ...], str | None]
"""One Store operation: its type (get, put, search, list), namespace and key."""

_EXISTING_FACTS = re.compile(r"<existing_facts>\n(.*?)\n</existing_facts>", re.DOTALL)


class CountingStore(InMemoryStore):
    """An ``InMemoryStore`` that records every operation and every batch it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Seen] = []
        self.batches: list[list[Seen]] = []

    def _note(self, ops: Sequence[Op]) -> None:
        batch: list[Seen] = []
        for op in ops:
            if isinstance(op, GetOp):
                batch.append(("get", op.namespace, op.key))
            elif isinstance(op, PutOp):
                batch.append(("put", op.namespace, op.key))
            elif isinstance(op, SearchOp):
                batch.append(("search", op.namespace_prefix, None))
            else:
                batch.append(("list", (), None))
        self.seen += batch
        self.batches.append(batch)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        listed = list(ops)
        self._note(listed)
        return super().batch(listed)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        listed = list(ops)
        self._note(listed)
        return await super().abatch(listed)

    def reset(self) -> None:
        self.seen, self.batches = [], []


CONTEXT = Context(user_id="calls-user", agent_name="coder")
PROFILE = user_profile(CONTEXT.user_id)
FACTS = user_facts(CONTEXT.user_id, CONTEXT.agent_name)


def empty_update(messages: list[BaseMessage]) -> AIMessage:
    args = {"facts": [], "profile_updates": []}
    return AIMessage(content="", tool_calls=[{"name": "MemoryUpdate", "args": args, "id": "m"}])


class Turns:
    """A graph on a counting store, sending numbered user turns to one thread."""

    def __init__(self, settings: Settings, memory: Any = empty_update) -> None:
        self.store = CountingStore()
        self.memory = ScriptedChatModel(responder=memory)
        self.graph = build_graph(
            models=Models(main=ScriptedChatModel(responder=demo_reply), memory=self.memory),
            tools=demo_tools(),
            settings=settings,
            checkpointer=InMemorySaver(),
            store=self.store,
        )
        self.thread_id = f"calls-{uuid.uuid4().hex[:8]}"
        self.processed = thread_memory(self.thread_id)

    @property
    def config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_id}}

    def send(self, text: str) -> list[Seen]:
        self.store.reset()
        self.graph.invoke({"messages": [HumanMessage(text)]}, self.config, context=CONTEXT)
        return list(self.store.seen)

    async def asend(self, text: str) -> list[Seen]:
        self.store.reset()
        await self.graph.ainvoke({"messages": [HumanMessage(text)]}, self.config, context=CONTEXT)
        return list(self.store.seen)

    def counts(self, seen: list[Seen]) -> Counter[str]:
        """The memory-related operations of one turn, by name."""
        names: Counter[str] = Counter()
        for kind, namespace, key in seen:
            if namespace == PROFILE:
                names[f"profile {kind}"] += 1
            elif namespace == FACTS:
                names[f"facts {kind}"] += 1
            elif namespace == self.processed and key == PROCESSED_KEY:
                names[f"processed {kind}"] += 1
            elif namespace == memory_queue():
                names[f"queue {kind}"] += 1
        return names

    def compactions(self) -> int:
        state = self.graph.get_state(self.config).values
        return int((state.get("compaction") or {}).get("version", 0))


def text_of(turn: int) -> str:
    """Long enough that a few turns reach the small message trigger and compact."""
    return f"Note {turn}: keep the quarterly report, the budget sheet and the plan in mind."


COMPACTING = Settings(trigger_messages=10, keep_messages=4, memory_extraction="inline")


def _assert_at_most_once_per_turn(counts: Counter[str]) -> None:
    assert counts["profile get"] <= 1, counts
    assert counts["processed get"] <= 1, counts
    assert counts["facts search"] <= 1, counts
    assert counts["processed put"] == 1, counts  # every turn here adds rows
    assert counts["profile put"] == 0 and counts["facts put"] == 0, counts


def test_each_record_is_read_at_most_once_per_turn_and_written_once() -> None:
    turns = Turns(COMPACTING)
    flushed = 0
    for turn in range(24):
        before = turns.compactions()
        counts = turns.counts(turns.send(text_of(turn)))
        _assert_at_most_once_per_turn(counts)
        # load_memory reads the profile and lists the facts; extraction reuses both.
        assert counts["profile get"] == 1 and counts["facts search"] == 1, counts
        if turns.compactions() > before:
            flushed += 1  # flush and end of turn ran in this turn, one read between them
    assert flushed >= 3
    assert turns.memory.calls == 24


async def test_async_turns_send_the_same_operations_as_sync_ones() -> None:
    sync, async_ = Turns(COMPACTING), Turns(COMPACTING)
    for turn in range(16):
        mine = sync.counts(sync.send(text_of(turn)))
        theirs = async_.counts(await async_.asend(text_of(turn)))
        assert mine == theirs, turn
        _assert_at_most_once_per_turn(theirs)
    assert sync.compactions() == async_.compactions() >= 2


def test_without_load_memory_extraction_reads_profile_and_processed_in_one_batch() -> None:
    turns = Turns(
        Settings(
            trigger_messages=10, keep_messages=4, memory_mode="off", memory_extraction="inline"
        )
    )
    together = 0
    for turn in range(12):
        counts = turns.counts(turns.send(text_of(turn)))
        _assert_at_most_once_per_turn(counts)
        assert counts["profile get"] == 1, counts
        reads = [b for b in turns.store.batches if any(s[1] == PROFILE for s in b)]
        assert len(reads) == 1
        read = {(s[1], s[2]) for s in reads[0]}
        if (turns.processed, PROCESSED_KEY) in read:
            together += 1
            assert len(read) == 2
        else:
            # A flush read the processed ids first and handed them to the end of the turn.
            flush = [b for b in turns.store.batches if ("get", turns.processed, PROCESSED_KEY) in b]
            assert flush == [[("get", turns.processed, PROCESSED_KEY)]]
    assert 0 < together < 12


def test_deferred_extraction_reads_in_one_batch_and_writes_in_one_batch() -> None:
    turns = Turns(Settings(trigger_messages=10, keep_messages=4, memory_extraction="deferred"))
    for turn in range(12):
        counts = turns.counts(turns.send(text_of(turn)))
        assert counts["processed get"] <= 1 and counts["queue get"] == 1, counts
        assert counts["processed put"] == 1 and counts["queue put"] == 1, counts
        reading, writing = [
            b for b in turns.store.batches if any(s[1] == memory_queue() for s in b)
        ]
        assert {s[0] for s in reading} == {"get"}
        assert sorted((s[0], s[2]) for s in writing) == sorted(
            [("put", PROCESSED_KEY), ("put", turns.thread_id)]
        )
    assert turns.memory.calls == 0


def test_a_stored_fact_adds_only_its_own_writes() -> None:
    turns = Turns(COMPACTING, memory=lambda m: demo_memory(str(m[-1].content)))
    turns.send(text_of(0))
    counts = turns.counts(turns.send("I prefer short answers with examples."))
    assert counts["profile get"] == 1 and counts["processed get"] == 1, counts
    assert counts["facts put"] == 1 and counts["processed put"] == 1, counts
    assert [f.key for f in MemoryRepository(turns.store).list_facts(CONTEXT)] == [
        "prefer_short_answers"
    ]


def _store_facts(store: InMemoryStore, count: int) -> None:
    repository = MemoryRepository(store)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    for index in range(count):
        topic = "tea" if index % 2 else "deploy"
        repository.add_fact(
            CONTEXT,
            f"Fact {index} about {topic} number {index}.",
            key=f"fact_{index:03d}",
            confidence=0.5 + (index % 5) / 10,
            created_at=start + timedelta(minutes=(index * 37) % count),
        )


def _prompt_facts(model: ScriptedChatModel) -> list[dict[str, str]]:
    match = _EXISTING_FACTS.search(str(model.requests[-1][-1].content))
    assert match is not None
    return list(json.loads(match.group(1)))


@pytest.mark.parametrize(
    ("count", "listings"),
    [(EXTRACTION_FACTS - 6, 1), (CANDIDATES - 24, 2), (CANDIDATES + 6, 2)],
    ids=["few-facts-handed-on", "facts-handed-on", "too-many-to-hand-on"],
)
def test_the_extraction_prompt_lists_the_related_facts(count: int, listings: int) -> None:
    turns = Turns(Settings(memory_extraction="inline"))
    _store_facts(turns.store, count)
    text = "I like tea, tell me about it."
    counts = turns.counts(turns.send(text))
    # load_memory hands every fact on; at most EXTRACTION_FACTS are listed as they are,
    # more are ranked again for the new user text (one more listing).
    assert counts["facts search"] == listings, counts
    repository = MemoryRepository(turns.store)
    if count <= EXTRACTION_FACTS:
        expected = known_facts(repository.list_facts(CONTEXT))
        assert len(expected) == count
    else:
        related = repository.memory_candidates(CONTEXT, text, limit=EXTRACTION_FACTS)
        expected = known_facts(related[:EXTRACTION_FACTS])
        assert len(expected) == EXTRACTION_FACTS
        assert all("tea" in fact["content"] for fact in expected)
    assert _prompt_facts(turns.memory) == expected
