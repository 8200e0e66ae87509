"""A refresh after one write re-indexes that fact alone and never re-sorts every fact.

The index keeps its confidence orders sorted and updates them in place after a few
changes; only a large burst of changes re-sorts them. These tests warm an index of 2,000
facts, write one fact, and watch the next lookup (with and without the leading facts): one
``Bm25Index.add``, one rank computed, no ``_Order.rebuild``, no ``sorted`` over more than a
handful of items and no in-place ``list.sort`` of an order.
"""

from __future__ import annotations

import builtins
import random
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.state.context import Context
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.namespaces import user_facts
from ctxgraph.store.persistence.connection import Persistence
from ctxgraph.store.search import index as search_index
from ctxgraph.store.search.bm25 import Bm25Index
from ctxgraph.store.search.index import fact_index_cache
from ctxgraph.store.search.scoring import tokenize

FACTS = 2_000
LEADING = 64
SMALL = 16
"""No ``sorted`` call of a refresh after one write may take more items than this."""


class CountingList(list[Any]):
    """A confidence order's list that records every in-place sort."""

    sorts = 0

    def sort(self, *args: Any, **kwargs: Any) -> None:
        CountingList.sorts += 1
        super().sort(*args, **kwargs)


@dataclass
class Watch:
    """What the index did during one refresh."""

    added: list[str] = field(default_factory=list)
    ranked: list[str] = field(default_factory=list)
    rebuilds: int = 0
    sorted_sizes: list[int] = field(default_factory=list)

    def clear(self) -> None:
        self.added.clear()
        self.ranked.clear()
        self.rebuilds = 0
        self.sorted_sizes.clear()
        CountingList.sorts = 0


@pytest.fixture(params=["memory", "postgres"])
def any_store(request: pytest.FixtureRequest) -> BaseStore:
    """An InMemoryStore, or the Postgres Store on the session database (embedded)."""
    if request.param == "memory":
        return InMemoryStore()
    persistence: Persistence = request.getfixturevalue("persistence")
    return persistence.store


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Watch]:
    seen = Watch()
    add, rank, rebuild = Bm25Index.add, search_index._rank, search_index._Order.rebuild

    def counted_add(self: Bm25Index, doc_id: str, tokens: Any) -> None:
        seen.added.append(doc_id)
        add(self, doc_id, tokens)

    def counted_rank(key: str, value: Any) -> Any:
        seen.ranked.append(key)
        return rank(key, value)

    def counted_rebuild(self: Any, ranks: Any) -> None:
        seen.rebuilds += 1
        rebuild(self, ranks)

    def counted_sorted(iterable: Iterable[Any], /, **kwargs: Any) -> list[Any]:
        items = list(iterable)
        seen.sorted_sizes.append(len(items))
        return builtins.sorted(items, **kwargs)

    monkeypatch.setattr(Bm25Index, "add", counted_add)
    monkeypatch.setattr(search_index, "_rank", counted_rank)
    monkeypatch.setattr(search_index._Order, "rebuild", counted_rebuild)
    # Module globals shadow builtins: every ``sorted`` call in index.py comes here.
    monkeypatch.setattr(search_index, "sorted", counted_sorted, raising=False)
    yield seen


def warm(store: BaseStore) -> tuple[MemoryRepository, Context, tuple[str, ...]]:
    repo = MemoryRepository(store)
    context = Context(user_id=f"refresh-{uuid.uuid4().hex[:10]}")
    repo.add_facts(context, [f"Fact number {i} about topic t{i % 50}" for i in range(FACTS)])
    namespace = user_facts(context.user_id, context.agent_name)
    assert len(fact_index_cache.values(store, namespace)) == FACTS
    fact_index_cache.lookup(store, namespace, tokenize("topic t7"), 10, leading=LEADING)
    return repo, context, namespace


def watch_orders(store: BaseStore, namespace: tuple[str, ...]) -> None:
    """Make both confidence orders record any in-place sort of their items."""
    space = fact_index_cache._space(store, namespace)
    with space.lock:
        for order in (space.ranked, space.corrections):
            order._items = CountingList(order._items)


def assert_one_fact_refreshed(watch: Watch, key: str) -> None:
    assert watch.added == [key]  # re-indexed alone
    assert watch.ranked == [key]  # ranked alone: the others keep their place
    assert watch.rebuilds == 0
    assert max(watch.sorted_sizes, default=0) <= SMALL, watch.sorted_sizes
    assert CountingList.sorts == 0


@pytest.mark.parametrize("leading", [0, LEADING])
def test_a_refresh_after_one_write_reindexes_that_fact_without_a_full_sort(
    any_store: BaseStore, watch: Watch, leading: int
) -> None:
    repo, context, namespace = warm(any_store)
    watch_orders(any_store, namespace)

    watch.clear()
    repo.add_fact(context, "Prefers tabs over spaces", key="tabs", confidence=0.99)
    found = fact_index_cache.lookup(any_store, namespace, tokenize("tabs"), 5, leading=leading)
    assert [key for key, _, _ in found.hits] == ["tabs"]
    assert [key for key, _ in found.leading][:1] == (["tabs"] if leading else [])
    assert_one_fact_refreshed(watch, "tabs")

    # An update of a stored fact (a new confidence moves it within the orders) too.
    watch.clear()
    repo.add_fact(
        context, "Was wrong: prefers spaces", key="tabs", category="correction", confidence=0.98
    )
    found = fact_index_cache.lookup(any_store, namespace, tokenize("spaces"), 5, leading=leading)
    assert [key for key, _, _ in found.hits] == ["tabs"]
    assert_one_fact_refreshed(watch, "tabs")

    # Nothing written: nothing re-indexed, nothing sorted.
    watch.clear()
    fact_index_cache.lookup(any_store, namespace, tokenize("topic"), 5, leading=leading)
    assert (watch.added, watch.ranked, watch.rebuilds, CountingList.sorts) == ([], [], 0, 0)
    assert max(watch.sorted_sizes, default=0) <= SMALL


def test_the_watch_catches_a_full_sort(monkeypatch: pytest.MonkeyPatch, watch: Watch) -> None:
    # The same refresh, made to re-sort every fact (as a naive index would): caught.
    store = InMemoryStore()
    repo, context, namespace = warm(store)
    monkeypatch.setattr(search_index, "_REBUILD_ORDER", 0)
    watch.clear()
    repo.add_fact(context, "Prefers tabs over spaces", key="tabs")
    fact_index_cache.lookup(store, namespace, tokenize("tabs"), 5, leading=LEADING)
    assert watch.added == ["tabs"]
    assert watch.rebuilds == 2
    assert max(watch.sorted_sizes) > FACTS


def test_patched_term_arrays_score_like_a_fresh_index() -> None:
    # Queries cache per-term arrays and document lengths; single changes patch them, a
    # burst drops them. Either way every score equals that of an index built from scratch.
    rng = random.Random(3)
    words = [f"w{i}" for i in range(12)]
    docs: dict[str, list[str]] = {}
    index = Bm25Index()
    for step in range(400):
        if docs and rng.random() < 0.3:
            victim = rng.choice(sorted(docs))
            del docs[victim]
            index.remove(victim)
        elif rng.random() < 0.05:
            burst = {f"b{step}-{i}": rng.choices(words, k=rng.randint(1, 6)) for i in range(40)}
            docs.update(burst)
            index.update(burst, [])
        else:
            key = f"d{rng.randint(0, 60)}"
            docs[key] = rng.choices(words, k=rng.randint(1, 8))
            index.add(key, docs[key])
        query = rng.choices(words, k=rng.randint(1, 3))
        assert index.scores(query) == Bm25Index(docs).scores(query), step
