"""One embedding per text: the query once per search, stored facts never again; prefixes.

A search embeds its query exactly once (shared by the vector search and the scoring of the
BM25 matches) and reads every stored fact's vector from the Store (pgvector in SQL on
Postgres). Only a fact stored without a vector is embedded, once: its vector is written
back. ``InstructedEmbeddings`` gives queries and documents their own prefix on both
Stores, the Postgres query path included.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.state import Context
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.namespaces import user_facts
from ctxgraph.store.persistence.connection import open_async_persistence
from ctxgraph.store.persistence.vector_index import InstructedEmbeddings, embedding_index
from ctxgraph.store.search.hybrid import clear_embedding_cache
from tests.test_hybrid_fusion import index_config, sync_store

QUERY = "alpha beta"
FACTS = {
    "a": "Alpha beta notes.",
    "b": "Beta gamma ideas.",
    "c": "Alpha plans for the week.",
    "d": "Omega shopping list.",
}


class Recorder(Embeddings):
    """Deterministic 4-dimensional vectors; records every text and call it is asked for."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.documents: list[str] = []

    @staticmethod
    def vector(text: str) -> list[float]:
        return [1.0, len(text) % 7 / 7, text.count("a") / 10, text.count("e") / 10]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += texts
        return [self.vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self.vector(text)

    def clear(self) -> None:
        self.queries.clear()
        self.documents.clear()


BOTH_STORES = pytest.mark.parametrize("kind", ["memory", "postgres"])


@pytest.fixture(autouse=True)
def no_cached_embeddings() -> None:
    """Each test starts without cached embeddings."""
    clear_embedding_cache()


def seeded(store: BaseStore, project: bool = True) -> tuple[MemoryRepository, Context]:
    ctx = Context(
        user_id=f"calls-{uuid.uuid4().hex[:10]}",
        project_id=f"calls-{uuid.uuid4().hex[:6]}" if project else None,
    )
    repo = MemoryRepository(store)
    for key, content in FACTS.items():
        repo.add_fact(ctx, content, key=key)
    if project:
        repo.add_fact(ctx, "Alpha project notes.", key="p", scope="project")
    return repo, ctx


@BOTH_STORES
def test_a_search_embeds_the_query_once_and_no_stored_fact(kind: str, database_uri: str) -> None:
    embeddings = Recorder()
    with sync_store(kind, database_uri, embeddings) as store:
        repo, ctx = seeded(store)
        assert len(embeddings.documents) == len(FACTS) + 1  # each fact once, when written
        for _ in range(3):
            embeddings.clear()
            assert repo.search(ctx, QUERY, top_k=2)
            # One query embedding for both namespaces and both lists; every fact's vector
            # is read from the Store.
            assert (embeddings.queries, embeddings.documents) == ([QUERY], [])
        embeddings.clear()
        repo.memory_candidates(ctx, QUERY, limit=2)
        assert (embeddings.queries, embeddings.documents) == ([QUERY], [])


@BOTH_STORES
async def test_an_async_search_embeds_the_query_once(kind: str, database_uri: str) -> None:
    embeddings = Recorder()
    ctx = Context(user_id=f"calls-{uuid.uuid4().hex[:10]}")
    if kind == "memory":
        store: Any = InMemoryStore(index=index_config(embeddings))
        await run_async(store, ctx, embeddings)
        return
    async with open_async_persistence(database_uri, index=index_config(embeddings)) as opened_:
        await run_async(opened_.store, ctx, embeddings)


async def run_async(store: BaseStore, ctx: Context, embeddings: Recorder) -> None:
    repo = MemoryRepository(store)
    for key, content in FACTS.items():
        await repo.aadd_fact(ctx, content, key=key)
    embeddings.clear()
    assert await repo.asearch(ctx, QUERY, top_k=2)
    assert (embeddings.queries, embeddings.documents) == ([QUERY], [])


@BOTH_STORES
def test_a_fact_without_a_vector_is_embedded_once_and_written_back(
    kind: str, database_uri: str
) -> None:
    embeddings = Recorder()
    with sync_store(kind, database_uri, embeddings) as store:
        repo, ctx = seeded(store, project=False)
        namespace = user_facts(ctx.user_id, ctx.agent_name)
        # Rewritten without a vector (as when the endpoint was down): on Postgres its old
        # vector is stale (older than the value); the in-memory store loses it on delete.
        item = store.get(namespace, "c")
        assert item is not None
        if kind == "memory":
            store.delete(namespace, "c")
        store.put(namespace, "c", {**item.value, "content": "Alpha plans, revised."}, index=False)
        embeddings.clear()
        found = repo.search(ctx, QUERY, top_k=4)
        assert "c" in [fact.key for fact in found]
        assert (embeddings.queries, embeddings.documents) == ([QUERY], ["Alpha plans, revised."])
        clear_embedding_cache()  # the vector is in the Store now, not only in the cache
        embeddings.clear()
        assert [fact.key for fact in repo.search(ctx, QUERY, top_k=4)] == [f.key for f in found]
        assert (embeddings.queries, embeddings.documents) == ([QUERY], [])


# -- prefixes ---------------------------------------------------------------------------


@BOTH_STORES
def test_prefixes_reach_the_model_on_both_stores(kind: str, database_uri: str) -> None:
    inner = Recorder()
    embeddings = InstructedEmbeddings(inner, query_prefix="query: ", document_prefix="passage: ")
    with sync_store(kind, database_uri, embeddings) as store:
        repo, ctx = seeded(store, project=False)
        assert inner.documents == [f"passage: {text}" for text in FACTS.values()]
        inner.clear()
        repo.search(ctx, QUERY)
        # The query is embedded as a query on Postgres too, never as a document.
        assert (inner.queries, inner.documents) == ([f"query: {QUERY}"], [])


def test_prefixes_from_the_environment_and_from_code() -> None:
    base = {"CTXGRAPH_EMBEDDING_MODEL": "m", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    plain = embedding_index(base)
    assert plain is not None and not isinstance(plain["embed"], InstructedEmbeddings)
    environ = {
        **base,
        "CTXGRAPH_EMBEDDING_QUERY_PREFIX": "query: ",
        "CTXGRAPH_EMBEDDING_DOCUMENT_PREFIX": "passage: ",
    }
    configured = embedding_index(environ)
    assert configured is not None
    embed = cast(InstructedEmbeddings, configured["embed"])
    assert (embed.query_prefix, embed.document_prefix) == ("query: ", "passage: ")  # verbatim
    coded = embedding_index(base, query_prefix="Represent this query: ", document_prefix="")
    assert coded is not None
    embed = cast(InstructedEmbeddings, coded["embed"])
    assert (embed.query_prefix, embed.document_prefix) == ("Represent this query: ", "")
    overridden = embedding_index(environ, query_prefix="", document_prefix="")
    assert overridden is not None and not isinstance(overridden["embed"], InstructedEmbeddings)


async def test_instructed_embeddings_async() -> None:
    inner = Recorder()
    embeddings = InstructedEmbeddings(inner, query_prefix="q: ", document_prefix="d: ")
    assert await embeddings.aembed_query("x") == Recorder.vector("q: x")
    assert await embeddings.aembed_documents(["y"]) == [Recorder.vector("d: y")]
    assert (inner.queries, inner.documents) == (["q: x"], ["d: y"])
