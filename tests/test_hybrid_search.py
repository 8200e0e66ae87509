"""Hybrid memory search: the Store's vector index fused with BM25 when one is configured."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any, cast

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.memory import InMemoryStore

from ctxgraph.state import Context
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.connection import open_persistence
from ctxgraph.store.persistence.vector_index import EmbeddingConfigError, embedding_index
from ctxgraph.store.search.hybrid import semantic_enabled

CONCEPTS = {
    "coffee": ("coffee", "espresso", "latte", "咖啡", "拿铁"),
    "music": ("violin", "piano", "concert", "小提琴"),
    "travel": ("train", "flight", "airport", "火车"),
}


class ConceptEmbeddings(Embeddings):
    """A deterministic embedding: one dimension per concept, plus a small constant one."""

    def _embed(self, text: str) -> list[float]:
        lowered = text.lower()
        vector = [float(sum(w in lowered for w in words)) for words in CONCEPTS.values()]
        vector.append(0.1)
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


def index_config() -> Any:
    return {"dims": len(CONCEPTS) + 1, "embed": ConceptEmbeddings(), "fields": ["content"]}


def seed(repo: MemoryRepository, ctx: Context) -> None:
    repo.add_fact(ctx, "The user drinks a latte every morning.", key="morning_drink")
    repo.add_fact(ctx, "The user plays the violin on weekends.", key="hobby")
    repo.add_fact(ctx, "The user prefers espresso tastings to wine.", key="tastings")


def test_without_a_vector_index_search_stays_lexical() -> None:
    store = InMemoryStore()
    repo = MemoryRepository(store)
    ctx = Context(user_id="lexical")
    seed(repo, ctx)
    assert not semantic_enabled(store)
    assert [f.key for f in repo.search(ctx, "coffee")] == []
    assert [f.key for f in repo.search(ctx, "espresso")] == ["tastings"]


def test_hybrid_finds_a_fact_by_meaning_and_keeps_lexical_matches_first() -> None:
    store = InMemoryStore(index=index_config())
    repo = MemoryRepository(store)
    ctx = Context(user_id="hybrid")
    seed(repo, ctx)
    repo.add_fact(Context(user_id="someone-else"), "Drinks coffee all day.", key="other")
    assert semantic_enabled(store)
    # "coffee" occurs in no fact of this user: only the vector index can find them.
    found = [f.key for f in repo.search(ctx, "coffee")]
    assert set(found[:2]) == {"morning_drink", "tastings"}
    assert found[2:] == ["hobby"]  # barely similar: ranked last
    # A word both indexes match wins over a fact found by meaning alone.
    assert [f.key for f in repo.search(ctx, "espresso")][:2] == ["tastings", "morning_drink"]


def test_hybrid_on_postgres_with_pgvector(database_uri: str) -> None:
    user = f"hybrid-{uuid.uuid4().hex[:8]}"
    ctx = Context(user_id=user)
    with open_persistence(database_uri, index=index_config()) as persistence:
        repo = MemoryRepository(persistence.store)
        seed(repo, ctx)
        found = [f.key for f in repo.search(ctx, "咖啡 coffee")]
        assert set(found[:2]) == {"morning_drink", "tastings"}
        assert found[2:] == ["hobby"]
        # A fact written through another connection is found at once, by meaning too.
        with open_persistence(database_uri, index=index_config()) as other:
            MemoryRepository(other.store).add_fact(ctx, "Takes the train to work.", key="commute")
        assert [f.key for f in repo.search(ctx, "airport", top_k=1)] == ["commute"]


def test_embedding_index_from_the_environment() -> None:
    assert embedding_index({}) is None
    config = embedding_index(
        {"CTXGRAPH_EMBEDDING_MODEL": "text-embedding-3-small", "OPENAI_API_KEY": "sk-test"}
    )
    assert config is not None
    assert config["dims"] == 1536
    assert config["fields"] == ["content"]
    embed: Any = config["embed"]
    assert embed.model == "text-embedding-3-small"
    assert embed.check_embedding_ctx_length is False  # no tokenizer download, ever
    assert embed.openai_api_base == "https://api.openai.com/v1"
    local = embedding_index(
        {"CTXGRAPH_EMBEDDING_MODEL": "bge-m3", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    )
    assert local is not None
    assert cast(Any, local["embed"]).openai_api_base == "http://127.0.0.1:9/v1"
    with pytest.raises(EmbeddingConfigError, match="CTXGRAPH_EMBEDDING_DIMS"):
        embedding_index(
            {
                "CTXGRAPH_EMBEDDING_MODEL": "m",
                "CTXGRAPH_EMBEDDING_DIMS": "many",
                "OPENAI_API_KEY": "k",
            }
        )
    with pytest.raises(EmbeddingConfigError, match="OPENAI_API_KEY"):
        embedding_index({"CTXGRAPH_EMBEDDING_MODEL": "m"})


def test_a_server_store_counts_as_indexed_when_its_published_config_has_an_index() -> None:
    plain = InMemoryStore()  # stands in for a server's wrapper, which hides its index config
    published = json.dumps({"index": {"dims": 8, "embed": "openai:text-embedding-3-small"}})
    assert semantic_enabled(plain, {"LANGGRAPH_STORE": published})
    assert not semantic_enabled(plain, {"LANGGRAPH_STORE": json.dumps({"ttl": {}})})
    assert not semantic_enabled(plain, {"LANGGRAPH_STORE": "not json"})
    assert not semantic_enabled(plain, {})
    assert semantic_enabled(InMemoryStore(index=index_config()), {})
