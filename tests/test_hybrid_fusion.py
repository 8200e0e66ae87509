"""Hybrid fusion scores every candidate of the union on both BM25 and vector similarity.

A deterministic embedding maps each text to a fixed unit vector whose first component is
its cosine similarity to the query, so every expected number is known. Candidates are
gathered with a limit of two per list (``LIMIT``): the BM25 list finds ``lex1`` and
``lex2``, the vector list ``vec1`` and ``vec2``; ``lex1`` is quite similar to the query
(0.6) but outside the vector top two, ``vec1`` matches one query term but is outside the
BM25 top two.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import BaseStore, Op, Result
from langgraph.store.memory import InMemoryStore

from ctxgraph.state import Context
from ctxgraph.store.memory.facts import Fact
from ctxgraph.store.memory.ranking import rank
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.namespaces import user_facts
from ctxgraph.store.persistence.connection import open_async_persistence, open_persistence
from ctxgraph.store.search.bm25 import Bm25Index
from ctxgraph.store.search.hybrid import (
    SEMANTIC_WEIGHT,
    Neighbours,
    QuerySimilarity,
    clear_embedding_cache,
    fuse,
    semantic_enabled,
    semantic_hits,
    store_metric,
)
from ctxgraph.store.search.index import fact_index_cache
from ctxgraph.store.search.scoring import CONFIDENCE_WEIGHT, tokenize

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
CREATED = NOW - timedelta(days=1)  # within the decay grace: the relevance is not decayed
CONFIDENCE = 0.9
QUERY = "alpha beta"
LIMIT = 2
"""Candidates per list and namespace (``MemoryRepository._sources``'s ``limit``)."""
DIMS = 4  # the session database's vector column has 4 dimensions (see test_hybrid_search)

FACTS: dict[str, tuple[str, float]] = {
    "lex1": ("Alpha beta alpha notes.", 0.6),
    "lex2": ("Alpha and beta.", 0.1),
    "vec1": ("Beta gamma delta epsilon.", 0.95),
    "vec2": ("Omega.", 0.9),
    **{f"filler{i}": (f"Zeta filler number {i}.", 0.0) for i in range(6)},
}
"""Key -> (content, cosine similarity to ``QUERY``)."""


def unit(similarity: float, axis: int) -> list[float]:
    """A unit vector whose cosine with the query's ``(1, 0, 0, 0)`` is ``similarity``."""
    vector = [similarity, 0.0, 0.0, 0.0]
    vector[axis] = math.sqrt(1 - similarity**2)
    return vector


class TableEmbeddings(Embeddings):
    """Fixed vectors per text; counts what it is asked to embed and can be made to fail."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.documents: list[str] = []
        self.queries: list[str] = []
        self.fail_documents = False

    def _vector(self, text: str) -> list[float]:
        return list(self.table.get(text, unit(0.0, 3)))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += texts
        if self.fail_documents:
            raise ConnectionError("the embedding endpoint is unreachable")
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self._vector(text)


def table(facts: dict[str, tuple[str, float]]) -> dict[str, list[float]]:
    vectors = {QUERY: [1.0, 0.0, 0.0, 0.0]}
    for number, (content, similarity) in enumerate(facts.values()):
        vectors[content] = unit(similarity, 1 + number % 3)
    return vectors


def index_config(embeddings: Embeddings) -> Any:
    return {"dims": DIMS, "embed": embeddings, "fields": ["content"]}


def seed(repo: MemoryRepository, ctx: Context, facts: dict[str, tuple[str, float]]) -> None:
    for key, (content, _) in facts.items():
        repo.add_fact(ctx, content, key=key, confidence=CONFIDENCE, created_at=CREATED)


def bm25(facts: dict[str, tuple[str, float]], query: str = QUERY) -> dict[str, float]:
    """Every fact's BM25 relevance for ``query``, from an independent full-index query."""
    index = Bm25Index({key: tokenize(content) for key, (content, _) in facts.items()})
    scores = index.scores(tokenize(query))
    return {key: scores.get(key, 0.0) for key in facts}


def fused(facts: dict[str, tuple[str, float]], keys: Iterable[str]) -> dict[str, float]:
    """The documented relevance R of ``keys``, from their real BM25 and real similarity."""
    relevance = bm25(facts)
    best = max(relevance[key] for key in keys)
    return {
        key: (1 - SEMANTIC_WEIGHT) * relevance[key] / best
        + SEMANTIC_WEIGHT * max(0.0, facts[key][1])
        for key in keys
    }


def scores(facts: Sequence[Fact]) -> dict[str, float]:
    return {fact.key: fact.score for fact in facts}


def everything(repo: MemoryRepository, ctx: Context) -> list[Fact]:
    """Every candidate gathered with ``LIMIT`` per list, ranked (none cut off)."""
    sources, _ = repo._sources(ctx, QUERY, LIMIT)
    return rank(sources, 100, NOW, "created")


def approx(expected: dict[str, float]) -> Any:
    return pytest.approx(expected, rel=1e-5, abs=1e-6)


@contextmanager
def sync_store(kind: str, database_uri: str, embeddings: Embeddings) -> Iterator[BaseStore]:
    if kind == "memory":
        yield InMemoryStore(index=index_config(embeddings))
        return
    with open_persistence(database_uri, index=index_config(embeddings)) as persistence:
        yield persistence.store


@asynccontextmanager
async def async_store(kind: str, database_uri: str, embeddings: Embeddings) -> AsyncIterator[Any]:
    if kind == "memory":
        yield InMemoryStore(index=index_config(embeddings))
        return
    async with open_async_persistence(database_uri, index=index_config(embeddings)) as opened:
        yield opened.store


@pytest.fixture(params=["memory", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def fresh_embedding_cache() -> None:
    clear_embedding_cache()


def context() -> Context:
    return Context(user_id=f"fusion-{uuid.uuid4().hex[:10]}")


# -- the index's exact BM25 for given ids ---------------------------------------------------


def test_scores_for_equals_the_full_query_exactly() -> None:
    documents = {
        f"d{i}": tokenize(" ".join(["alpha"] * (i % 3) + ["beta"] * (i % 5) + ["pad"] * i))
        for i in range(40)
    }
    index = Bm25Index(documents)
    index.remove("d7")
    query = tokenize("alpha beta beta")
    full = index.scores(query)
    asked = index.scores_for(query, [*documents, "unknown"])
    assert set(asked) == set(documents) - {"d7"}
    assert asked == {key: full.get(key, 0.0) for key in asked}  # equal floats, not approx
    assert index.scores_for(query, []) == {}


# -- 1 and 3: real BM25 and real similarity for every candidate ----------------------------


def test_each_candidate_is_fused_from_its_real_bm25_and_real_similarity(
    kind: str, database_uri: str
) -> None:
    embeddings = TableEmbeddings(table(FACTS))
    ctx = context()
    with sync_store(kind, database_uri, embeddings) as store:
        repo = MemoryRepository(store)
        seed(repo, ctx, FACTS)
        sources, _ = repo._sources(ctx, QUERY, LIMIT)
        semantic = sources[0].semantic
        assert semantic is not None and semantic.exact
        assert {item.key for item in semantic.items} == {"vec1", "vec2"}
        assert {key for key, _, _ in sources[0].hits} == {"lex1", "lex2"}
        relevance = bm25(FACTS)
        # The vector-only candidates get their exact BM25 from the index (vec2: no term).
        assert semantic.bm25 == approx({"vec1": -relevance["vec1"], "vec2": 0.0})
        assert relevance["vec1"] > 0
        # The lexical-only candidates get their similarity measured like the Store does.
        assert semantic.similarity == approx({"lex1": 0.6, "lex2": 0.1})

        expected = fused(FACTS, ["lex1", "lex2", "vec1", "vec2"])
        found = everything(repo, ctx)
        assert scores(found) == approx(
            {key: value + CONFIDENCE_WEIGHT * CONFIDENCE for key, value in expected.items()}
        )
        # lex1 (similarity 0.6, outside the vector top two) is not scored as if it were 0:
        # with similarity 0 it would rank below lex2, the better BM25 match.
        assert [fact.key for fact in found] == ["lex1", "vec1", "lex2", "vec2"]
        as_if_zero = (1 - SEMANTIC_WEIGHT) * relevance["lex1"] / relevance["lex2"]
        assert as_if_zero < expected["lex2"] < expected["lex1"]
        assert [fact.key for fact in repo.search(ctx, QUERY, top_k=1, now=NOW)] == ["lex1"]


def test_a_similarity_we_measure_equals_the_stores_own_score(kind: str, database_uri: str) -> None:
    embeddings = TableEmbeddings(table(FACTS))
    ctx = context()
    namespace = user_facts(ctx.user_id, ctx.agent_name)
    with sync_store(kind, database_uri, embeddings) as store:
        seed(MemoryRepository(store), ctx, FACTS)
        metric = store_metric(store)
        assert metric is not None and metric.embeddings is embeddings
        assert metric.query_as_document is (kind == "postgres")  # as each Store embeds it
        listed = store.search(namespace, query=QUERY, limit=len(FACTS))
        from_store = {item.key: float(item.score or 0.0) for item in listed}
        assert len(from_store) == len(FACTS)
        hits = [(key, -1.0, {"content": content}) for key, (content, _) in FACTS.items()]
        ours = QuerySimilarity(store, QUERY).complete(Neighbours([], None), hits, {})
        assert ours.exact
        assert ours.similarity == approx(from_store)
        assert ours.similarity == approx({key: sim for key, (_, sim) in FACTS.items()})


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, 2 / math.sqrt(5)),  # pgvector's default: 1 - cosine distance
        ({"distance_type": "cosine"}, 2 / math.sqrt(5)),
        ({"distance_type": "inner_product"}, 2.0),  # minus the <#> distance
        ({"distance_type": "l2"}, -math.sqrt(2)),  # minus the <-> distance
        ({"ann_index_config": {"vector_type": "halfvec"}}, 2 / math.sqrt(5)),
        ({"ann_index_config": {"vector_type": "bit"}, "distance_type": "hamming"}, None),
    ],
)
def test_postgres_scores_are_reproduced_for_each_distance_type(
    config: dict[str, Any], expected: float | None
) -> None:
    from langgraph.store.postgres import PostgresStore

    embeddings = TableEmbeddings({QUERY: [1.0, 0.0, 0.0, 0.0], "Fact.": [2.0, 1.0, 0.0, 0.0]})
    store = PostgresStore(conn=None, index={**index_config(embeddings), **config})  # type: ignore[arg-type]
    hits = [("fact", -1.0, {"content": "Fact."})]
    found = QuerySimilarity(store, QUERY).complete(Neighbours([], 0.25), hits, {})
    if expected is None:  # not reproducible: the bound
        assert store_metric(store) is None
        assert (found.exact, found.similarity) == (False, {"fact": 0.25})
        return
    assert found.exact
    assert found.similarity["fact"] == pytest.approx(expected, rel=1e-3)
    assert embeddings.queries == []  # PostgresStore embeds queries as documents


# -- 2: a fact strong on both beats a fact found by only one list ------------------------

BOTH: dict[str, tuple[str, float]] = {
    "both": ("Alpha and beta.", 0.8),
    "lexical": ("Alpha beta alpha notes.", 0.3),
    "vector": ("Omega.", 0.85),
    **{f"filler{i}": (f"Zeta filler number {i}.", 0.0) for i in range(6)},
}


def test_a_fact_strong_on_both_signals_beats_one_found_by_a_single_list() -> None:
    store = InMemoryStore(index=index_config(TableEmbeddings(table(BOTH))))
    repo = MemoryRepository(store)
    ctx = context()
    seed(repo, ctx, BOTH)
    sources, _ = repo._sources(ctx, QUERY, LIMIT)
    semantic = sources[0].semantic
    assert semantic is not None
    assert {item.key for item in semantic.items} == {"vector", "both"}
    assert {key for key, _, _ in sources[0].hits} == {"both", "lexical"}
    found = everything(repo, ctx)
    assert [fact.key for fact in found] == ["both", "lexical", "vector"]
    expected = fused(BOTH, ["both", "lexical", "vector"])
    assert scores(found) == approx(
        {key: value + CONFIDENCE_WEIGHT * CONFIDENCE for key, value in expected.items()}
    )
    assert [fact.key for fact in repo.search(ctx, QUERY, top_k=1, now=NOW)] == ["both"]


# -- 4: the async path agrees with the sync path -----------------------------------------


async def test_the_async_path_gives_the_same_scores(kind: str, database_uri: str) -> None:
    embeddings = TableEmbeddings(table(FACTS))
    ctx = context()
    async with async_store(kind, database_uri, embeddings) as store:
        repo = MemoryRepository(store)
        for key, (content, _) in FACTS.items():
            await repo.aadd_fact(ctx, content, key=key, confidence=CONFIDENCE, created_at=CREATED)
        sources, _ = await repo._asources(ctx, QUERY, 2)
        semantic = sources[0].semantic
        assert semantic is not None and semantic.exact
        assert semantic.similarity == approx({"lex1": 0.6, "lex2": 0.1})
        found = rank(sources, 100, NOW, "created")
        expected = fused(FACTS, ["lex1", "lex2", "vec1", "vec2"])
        assert scores(found) == approx(
            {key: value + CONFIDENCE_WEIGHT * CONFIDENCE for key, value in expected.items()}
        )
        first = await repo.asearch(ctx, QUERY, top_k=2, now=NOW)
    with sync_store(kind, database_uri, TableEmbeddings(table(FACTS))) as store:
        same = MemoryRepository(store)
        if kind == "memory":
            seed(same, ctx, FACTS)
        assert scores(same.search(ctx, QUERY, top_k=2, now=NOW)) == approx(scores(first))


# -- embedding calls: the query once per search, a fact once per process -----------------


def test_the_query_is_embedded_once_and_each_fact_once_per_process() -> None:
    embeddings = TableEmbeddings(table(FACTS))
    store = InMemoryStore(index=index_config(embeddings))
    repo = MemoryRepository(store)
    ctx = Context(user_id=f"fusion-{uuid.uuid4().hex[:10]}", project_id="fusion-project")
    seed(repo, ctx, FACTS)
    repo.add_fact(ctx, "Alpha project.", key="project", scope="project", created_at=CREATED)
    embeddings.documents.clear()
    embeddings.queries.clear()

    repo._sources(ctx, QUERY, LIMIT)
    # The Store embeds the query for each of its two searches; we embed it once more, for
    # both namespaces, and only the two BM25 matches the vector list missed.
    assert embeddings.queries == [QUERY] * 3
    assert sorted(embeddings.documents) == sorted([FACTS["lex1"][0], FACTS["lex2"][0]])

    embeddings.documents.clear()
    embeddings.queries.clear()
    repo._sources(ctx, QUERY, LIMIT)
    assert embeddings.queries == [QUERY] * 2  # the Store's own; ours is cached
    assert embeddings.documents == []


# -- 5: the bound when similarity cannot be measured --------------------------------------


class WrappedStore(BaseStore):
    """Like a LangGraph server's store: it searches by meaning but hides its embedder."""

    def __init__(self, inner: BaseStore) -> None:
        self._inner = inner

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._inner.batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._inner.abatch(ops)


def test_without_the_embedder_a_missed_match_gets_the_lowest_listed_similarity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANGGRAPH_STORE", '{"index": {"dims": 4, "embed": "fake:x"}}')
    inner = InMemoryStore(index=index_config(TableEmbeddings(table(FACTS))))
    store = WrappedStore(inner)
    assert semantic_enabled(store) and store_metric(store) is None
    repo = MemoryRepository(store)
    ctx = context()
    seed(repo, ctx, FACTS)
    sources, _ = repo._sources(ctx, QUERY, LIMIT)
    semantic = sources[0].semantic
    assert semantic is not None and not semantic.exact
    # Neither can be more similar than vec2 (0.9), the last of the full vector list.
    assert semantic.similarity == approx({"lex1": 0.9, "lex2": 0.9})
    found = {fact.key: fact.score for fact in everything(repo, ctx)}
    relevance = bm25(FACTS)
    bound = (1 - SEMANTIC_WEIGHT) * relevance["lex1"] / relevance["lex2"] + SEMANTIC_WEIGHT * 0.9
    assert found["lex1"] == pytest.approx(bound + CONFIDENCE_WEIGHT * CONFIDENCE)

    # A list shorter than asked for held every embedded fact: one missing from it (stored
    # without an embedding) has no similarity at all.
    namespace = user_facts(ctx.user_id, ctx.agent_name)
    value = dict(inner.get(namespace, "lex1").value)  # type: ignore[union-attr]
    inner.put(namespace, "unembedded", {**value, "key": "unembedded"}, index=False)
    sources, _ = repo._sources(ctx, QUERY, 20)
    semantic = sources[0].semantic
    assert semantic is not None and not semantic.exact
    assert semantic.similarity == {"unembedded": 0.0}


async def test_an_unreachable_embedder_falls_back_to_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    embeddings = TableEmbeddings(table(FACTS))
    repo = MemoryRepository(InMemoryStore(index=index_config(embeddings)))
    ctx = context()
    seed(repo, ctx, FACTS)
    embeddings.fail_documents = True  # the Store still embeds queries (embed_query)
    with caplog.at_level(logging.WARNING, logger="ctxgraph.store.search.hybrid"):
        for sources in (
            repo._sources(ctx, QUERY, LIMIT)[0],
            (await repo._asources(ctx, QUERY, 2))[0],
        ):
            semantic = sources[0].semantic
            assert semantic is not None and not semantic.exact
            assert semantic.similarity == approx({"lex1": 0.9, "lex2": 0.9})
    assert "could not embed candidates" in caplog.text


def test_a_neighbour_deleted_before_the_index_refresh_is_dropped() -> None:
    store = InMemoryStore(index=index_config(TableEmbeddings(table(FACTS))))
    repo = MemoryRepository(store)
    ctx = context()
    seed(repo, ctx, FACTS)
    namespace = user_facts(ctx.user_id, ctx.agent_name)
    near = semantic_hits(store, namespace, QUERY, LIMIT)
    assert [item.key for item in near.items] == ["vec1", "vec2"]
    store.delete(namespace, "vec2")  # between the vector search and the index lookup
    keys = [item.key for item in near.items]
    found = fact_index_cache.lookup(store, namespace, tokenize(QUERY), LIMIT, extra_keys=keys)
    assert set(found.extra) == {"vec1"}
    semantic = QuerySimilarity(store, QUERY).complete(near, found.hits, found.extra)
    assert [item.key for item in semantic.items] == ["vec1"]
    fused = fuse([(key, raw) for key, raw, _ in found.hits], semantic)
    assert set(fused) == {"lex1", "lex2", "vec1"}
