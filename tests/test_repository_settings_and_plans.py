"""``MemoryRepository(store, ranker=, settings=)``: effective settings and shared write plans.

A search without ``age_from`` ages facts by ``memory_age_from`` of the effective settings:
the repository's (the graph's) settings under the context's ``Context.settings``, as every
node sees them. ``add_fact`` and ``aadd_fact`` share one sans-I/O plan and send the Store
the same operations.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import pytest
from langgraph.store.base import GetOp, Op, PutOp, Result
from langgraph.store.memory import InMemoryStore

from ctxgraph.state import Context, Settings
from ctxgraph.store.memory.ranking import age_from_of
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import Decision, FactCandidate
from ctxgraph.store.memory.writes import FactWrite

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
ACCEPTED = Decision(accepted=True, target="user", reason="test")


def before(days: float) -> datetime:
    return NOW - timedelta(days=days)


def seed(repo: MemoryRepository, context: Context) -> None:
    """'tea' stored 90 days ago and re-confirmed 2 days ago; 'coffee' 40 days old."""
    tea = FactCandidate(
        key="drink_tea",
        content="Prefers tea",
        category="preference",
        scope="user",
        durability="durable",
        authority="descriptive",
        confidence=0.9,
        evidence_message_id="m1",
        evidence_text="Prefers tea",
    )
    repo.remember(context, tea, ACCEPTED, thread_id="t1", now=before(90))
    repo.remember(context, tea, ACCEPTED, thread_id="t2", now=before(2), confirmed=True)
    repo.add_fact(context, "Prefers coffee", key="drink_coffee", created_at=before(40))


CONFIRMED = ["drink_tea", "drink_coffee"]
CREATED = ["drink_coffee", "drink_tea"]


@pytest.mark.parametrize(
    ("graph", "run", "order"),
    [
        (None, None, CREATED),
        (Settings(memory_age_from="confirmed"), None, CONFIRMED),
        # The run's settings that do not set memory_age_from keep the graph's.
        (Settings(memory_age_from="confirmed"), Settings(system_prompt="Be brief."), CONFIRMED),
        # The run's settings that set it win.
        (Settings(memory_age_from="confirmed"), Settings(memory_age_from="created"), CREATED),
        (None, Settings(memory_age_from="confirmed"), CONFIRMED),
    ],
    ids=["default", "graph", "run-without-it", "run-overrides", "run-only"],
)
async def test_search_ages_by_the_effective_settings(
    graph: Settings | None, run: Settings | None, order: list[str]
) -> None:
    store = InMemoryStore()
    context = Context(user_id="u1", settings=run)
    seed(MemoryRepository(store), context)
    repo = MemoryRepository(store, settings=graph)
    assert [f.id for f in repo.search(context, "prefers", now=NOW)] == order
    assert [f.id for f in await repo.asearch(context, "prefers", now=NOW)] == order
    offered = repo.memory_candidates(context, "prefers", now=NOW)
    assert [f.id for f in offered] == order
    # An explicit age_from still wins over both.
    explicit = "created" if order == CONFIRMED else "confirmed"
    flipped = [f.id for f in repo.search(context, "prefers", now=NOW, age_from=explicit)]
    assert flipped == list(reversed(order))
    base = graph if graph is not None else Settings()
    assert (
        age_from_of(context, None, graph)
        == (run.merged_onto(base) if run is not None else base).memory_age_from
    )


class RecordingStore(InMemoryStore):
    """Records the operations of every batch, sync or async alike."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple[str, ...], str]] = []

    def _note(self, ops: Iterable[Op]) -> None:
        for op in ops:
            if isinstance(op, GetOp):
                self.ops.append(("get", op.namespace, op.key))
            elif isinstance(op, PutOp):
                self.ops.append(("put", op.namespace, op.key))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self._note(ops)
        return super().batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self._note(ops)
        return await super().abatch(ops)


def add_twice(repo: MemoryRepository, context: Context) -> list[object]:
    first = repo.add_fact(context, "Prefers tea", key="drink", created_at=before(3))
    second = repo.add_fact(context, "Prefers coffee", key="drink", created_at=before(1))
    return [first, second]


async def aadd_twice(repo: MemoryRepository, context: Context) -> list[object]:
    first = await repo.aadd_fact(context, "Prefers tea", key="drink", created_at=before(3))
    second = await repo.aadd_fact(context, "Prefers coffee", key="drink", created_at=before(1))
    return [first, second]


async def test_add_fact_and_aadd_fact_send_the_same_operations_and_agree() -> None:
    context = Context(user_id="u1", project_id="p1")
    sync_store, async_store = RecordingStore(), RecordingStore()
    sync_facts = add_twice(MemoryRepository(sync_store), context)
    async_facts = await aadd_twice(MemoryRepository(async_store), context)
    assert sync_facts == async_facts
    assert sync_store.ops == async_store.ops
    assert [op for op, _, _ in sync_store.ops] == ["get", "put", "get", "put"]
    stored = MemoryRepository(async_store).list_user_facts(context)
    assert [(f.content, f.history[0]["content"]) for f in stored] == [
        ("Prefers coffee", "Prefers tea")
    ]


def test_a_write_plan_does_no_io_and_gives_the_fact_its_value_makes() -> None:
    repo = MemoryRepository(InMemoryStore())
    context = Context(user_id="u1")
    plan = repo._fact_write(context, " Prefers  tea ", None, "preference", 0.8, NOW, "user")
    assert isinstance(plan, FactWrite)
    value = plan.value(None)
    assert value["content"] == "Prefers tea" and value["created_at"] == NOW.isoformat()
    fact = plan.fact(value)
    assert (fact.id, fact.content, fact.scope, fact.confidence) == (
        plan.key,
        "Prefers tea",
        "user",
        0.8,
    )
    assert repo.list_facts(context) == []  # nothing was written


def test_an_import_stamps_every_fact_with_one_moment() -> None:
    repo = MemoryRepository(InMemoryStore())
    context = Context(user_id="u1")
    assert repo.add_facts(context, [f"Fact number {n}" for n in range(5)]) == 5
    moments = {fact.created_at for fact in repo.list_facts(context)}
    assert len(moments) == 1


def test_the_write_errors_are_unchanged() -> None:
    repo = MemoryRepository(InMemoryStore())
    context = Context(user_id="u1")
    with pytest.raises(ValueError, match="non-empty content"):
        repo.add_fact(context, "   ")
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        repo.add_fact(context, "x", confidence=1.5)
    with pytest.raises(ValueError, match="1-80 snake_case"):
        repo.add_fact(context, "x", key="!!!")
