"""Hybrid fusion scores every candidate of the union on both BM25 and vector similarity.

Both signals are put on one scale per query before they are fused: BM25 divided by the
best BM25 among the candidates of every namespace, similarity min-max scaled over them;
the fused relevance is in BM25 units (times that best BM25). A deterministic embedding
maps each text to a fixed unit vector whose first component is its cosine similarity to
the query, so every expected number is known. Candidates are
gathered with a limit of two per list (``LIMIT``): the BM25 list finds ``lex1`` and
``lex2``, the vector list ``vec1`` and ``vec2``; ``lex1`` is quite similar to the query
(0.6) but outside the vector top two, ``vec1`` matches one query term but is outside the
BM25 top two.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
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
    QuerySimilarity,
    clear_embedding_cache,
    fuse,
    semantic_enabled,
    store_metric,
)
from ctxgraph.store.search.index import fact_index_cache
from ctxgraph.store.search.scoring import CONFIDENCE_WEIGHT, tokenize
from ctxgraph.store.search.vectors import scored

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


def fused(relevance: Mapping[str, float], similarity: Mapping[str, float]) -> dict[str, float]:
    """The documented relevance R of each candidate (keys of ``similarity``)."""
    best = max(relevance[key] for key in similarity)
    low, high = min(similarity.values()), max(similarity.values())
    return {
        key: best
        * (
            (1 - SEMANTIC_WEIGHT) * relevance[key] / best
            + SEMANTIC_WEIGHT * (similarity[key] - low) / (high - low)
        )
        for key in similarity
    }


def fused_facts(facts: dict[str, tuple[str, float]], keys: Iterable[str]) -> dict[str, float]:
    """``fused`` from the facts' real BM25 and real similarity."""
    return fused(bm25(facts), {key: facts[key][1] for key in keys})


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
    """Each test starts without cached embeddings."""
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


# -- real BM25 and real similarity for every candidate, on one scale ----------------------


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
        assert [key for key, _ in semantic.near] == ["vec1", "vec2"]
        assert {key for key, _, _ in sources[0].hits} == {"lex1", "lex2"}
        relevance = bm25(FACTS)
        # The vector-only candidates get their exact BM25 from the index (vec2: no term).
        assert semantic.bm25 == approx({"vec1": -relevance["vec1"], "vec2": 0.0})
        assert relevance["vec1"] > 0
        # The lexical-only candidates get their similarity from their stored vectors.
        assert semantic.similarity == approx({"lex1": 0.6, "lex2": 0.1})

        expected = fused_facts(FACTS, ["lex1", "lex2", "vec1", "vec2"])
        found = everything(repo, ctx)
        assert scores(found) == approx(
            {key: value + CONFIDENCE_WEIGHT * CONFIDENCE for key, value in expected.items()}
        )
        assert [fact.key for fact in found] == sorted(expected, key=lambda k: -expected[k])
        assert [fact.key for fact in repo.search(ctx, QUERY, top_k=1, now=NOW)] == ["lex1"]
        # In BM25 units: the best candidate scores at most the best BM25, as in lexical mode.
        assert max(expected.values()) <= max(relevance.values()) + 1e-9


def test_fusion_over_scopes_puts_user_and_project_on_one_scale() -> None:
    # Same similarity everywhere but for the two matches; the project's match is weak.
    facts = {
        "strong": ("Alpha beta alpha beta notes.", 0.9),
        "weak": ("Alpha and many other words in a long note.", 0.9),
        **{f"filler{i}": (f"Zeta filler number {i}.", 0.5) for i in range(4)},
    }
    store = InMemoryStore(index=index_config(TableEmbeddings(table(facts))))
    repo = MemoryRepository(store)
    ctx = Context(user_id=f"fusion-{uuid.uuid4().hex[:10]}", project_id="fusion-scopes")
    for key, (content, _) in facts.items():
        scope = "project" if key == "weak" else "user"
        repo.add_fact(ctx, content, key=key, scope=scope, created_at=CREATED)
    found = {
        fact.key: fact.score for fact in rank(repo._sources(ctx, QUERY, 4)[0], 9, NOW, "created")
    }
    # Each namespace normalised alone would give both matches BM25 1.0: a tie.
    user_index = Bm25Index({k: tokenize(c) for k, (c, _) in facts.items() if k != "weak"})
    project_index = Bm25Index({"weak": tokenize(facts["weak"][0])})
    strong = user_index.scores(tokenize(QUERY))["strong"]
    weak = project_index.scores(tokenize(QUERY))["weak"]
    assert weak < strong
    best = strong
    assert found["strong"] - found["weak"] == pytest.approx(
        best * (1 - SEMANTIC_WEIGHT) * (strong - weak) / best
    )


def test_fuse_normalises_both_signals_over_every_source() -> None:
    from ctxgraph.store.search.hybrid import Semantic

    user = Semantic(
        [("b", 0.8), ("c", 0.6), ("d", -0.3)], bm25={"c": -1.0, "d": 0.0}, similarity={"a": 0.4}
    )
    project = Semantic([("p", 0.5)], bm25={"p": -2.0})
    first, second = fuse([([("a", -4.0), ("b", -2.0)], user), ([], project)])
    expected = fused(
        {"a": 4.0, "b": 2.0, "c": 1.0, "d": 0.0, "p": 2.0},
        {"a": 0.4, "b": 0.8, "c": 0.6, "d": -0.3, "p": 0.5},
    )
    assert first == approx({key: -expected[key] for key in "abcd"})
    assert second == approx({"p": -expected["p"]})
    # Nothing matched lexically: the similarity alone, in units of 1.
    [only] = fuse(
        [([], Semantic([("c", 1.0), ("e", 0.2)], bm25={"c": 0.0, "e": 0.0}))], weight=0.25
    )
    assert only == approx({"c": -0.25, "e": 0.0})
    with pytest.raises(ValueError, match="semantic weight"):
        fuse([], weight=1.5)
    with pytest.raises(ValueError, match="no similarity for the lexical candidate 'a'"):
        fuse([([("a", -1.0)], Semantic([]))])
    with pytest.raises(ValueError, match="no BM25 score for the semantic candidate 'c'"):
        fuse([([], Semantic([("c", 0.5)]))])


# -- age reorders, never buries, in hybrid mode too -----------------------------------------

NARROW: dict[str, tuple[str, float]] = {
    "old_match": ("Alpha beta alpha beta trip notes.", 0.92),
    "new_unrelated": ("Omega shopping list.", 0.84),
    "new_twin": ("Alpha beta plans.", 0.80),
    "old_twin": ("Alpha beta ideas.", 0.80),
    **{f"old{i}": (f"Zeta filler number {i}.", 0.72 + 0.02 * i) for i in range(6)},
}
"""Cosines in 0.72-0.92, as a real model's sit in a narrow band."""


def test_age_reorders_near_ties_and_never_buries_a_clear_match() -> None:
    store = InMemoryStore(index=index_config(TableEmbeddings(table(NARROW))))
    repo = MemoryRepository(store)
    ctx = context()
    for key, (content, _) in NARROW.items():
        age = timedelta(days=1) if key.startswith("new") else timedelta(days=400)
        repo.add_fact(ctx, content, key=key, confidence=CONFIDENCE, created_at=NOW - age)
    ranked = [fact.key for fact in repo.search(ctx, QUERY, top_k=10, now=NOW)]
    # The year-old clear match stays first (with the lexical floor of 0.5 the new twin
    # would pass it); the new fact that matches no query term stays below the facts that
    # do, however recent it is.
    assert ranked[0] == "old_match"
    assert ranked.index("new_unrelated") > max(ranked.index(k) for k in ("new_twin", "old_twin"))
    # Two facts alike in both signals: the newer one first.
    assert ranked.index("new_twin") < ranked.index("old_twin")


# -- the async path agrees with the sync path -----------------------------------------------


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
        expected = fused_facts(FACTS, ["lex1", "lex2", "vec1", "vec2"])
        assert scores(found) == approx(
            {key: value + CONFIDENCE_WEIGHT * CONFIDENCE for key, value in expected.items()}
        )
        first = await repo.asearch(ctx, QUERY, top_k=2, now=NOW)
    with sync_store(kind, database_uri, TableEmbeddings(table(FACTS))) as store:
        same = MemoryRepository(store)
        if kind == "memory":
            seed(same, ctx, FACTS)
        assert scores(same.search(ctx, QUERY, top_k=2, now=NOW)) == approx(scores(first))


# -- the Store's own scores -------------------------------------------------------------------


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "l2"])
def test_postgres_scores_in_sql_equal_the_stores_own(distance: str, database_uri: str) -> None:
    embeddings = TableEmbeddings(table(FACTS))
    ctx = context()
    namespace = user_facts(ctx.user_id, ctx.agent_name)
    config = {**index_config(embeddings), "distance_type": distance}
    with open_persistence(database_uri, index=config) as persistence:
        store = persistence.store
        seed(MemoryRepository(store), ctx, FACTS)
        metric = store_metric(store)
        assert metric is not None and metric.sql is not None
        listed = store.search(namespace, query=QUERY, limit=len(FACTS))
        from_store = {item.key: float(item.score or 0.0) for item in listed}
        similarity = QuerySimilarity(store, QUERY)
        similarity.embed([namespace])
        assert similarity.vector is not None
        ours = scored(store, namespace, similarity.vector, list(FACTS), metric.sql)
        assert ours == approx(from_store)


def test_a_store_whose_vectors_we_cannot_score_has_no_metric() -> None:
    from langgraph.store.postgres import PostgresStore

    config = {**index_config(TableEmbeddings({})), "distance_type": "hamming"}
    config["ann_index_config"] = {"vector_type": "bit"}
    store = PostgresStore(conn=None, index=config)  # type: ignore[arg-type]
    assert store_metric(store) is None


# -- the bound when the Store hides its embedder -------------------------------------------


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
    similarity = {"lex1": 0.9, "lex2": 0.9, "vec1": 0.95, "vec2": 0.9}
    expected = fused(relevance, similarity)
    assert found["lex1"] == pytest.approx(expected["lex1"] + CONFIDENCE_WEIGHT * CONFIDENCE)

    # A list shorter than asked for held every embedded fact: one missing from it (stored
    # without an embedding) has no similarity at all.
    namespace = user_facts(ctx.user_id, ctx.agent_name)
    value = dict(inner.get(namespace, "lex1").value)  # type: ignore[union-attr]
    inner.put(namespace, "unembedded", {**value, "key": "unembedded"}, index=False)
    sources, _ = repo._sources(ctx, QUERY, 20)
    semantic = sources[0].semantic
    assert semantic is not None and not semantic.exact
    assert semantic.similarity == {"unembedded": 0.0}


def test_a_neighbour_deleted_before_the_index_refresh_is_dropped() -> None:
    store = InMemoryStore(index=index_config(TableEmbeddings(table(FACTS))))
    repo = MemoryRepository(store)
    ctx = context()
    seed(repo, ctx, FACTS)
    namespace = user_facts(ctx.user_id, ctx.agent_name)
    similarity = QuerySimilarity(store, QUERY)
    similarity.embed([namespace])
    near = similarity.neighbours(namespace, LIMIT)
    assert [key for key, _ in near.scores] == ["vec1", "vec2"]
    store.delete(namespace, "vec2")  # between the vector search and the index lookup
    keys = [key for key, _ in near.scores]
    found = fact_index_cache.lookup(store, namespace, tokenize(QUERY), LIMIT, extra_keys=keys)
    assert set(found.extra) == {"vec1"}
    semantic = similarity.complete(namespace, near, found)
    assert [key for key, _ in semantic.near] == ["vec1"]
    [result] = fuse([([(key, raw) for key, raw, _ in found.hits], semantic)])
    assert set(result) == {"lex1", "lex2", "vec1"}
