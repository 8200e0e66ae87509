"""Freshness checks read through the Store's own connection or pool, sync and async."""

from __future__ import annotations

import uuid

from langgraph.store.postgres import AsyncPostgresStore, PostgresStore

from ctxgraph.store.persistence.connection import Persistence
from ctxgraph.store.search.index import fact_index_cache


def _fact(content: str) -> dict[str, str]:
    """A well-formed fact value (a value without ``created_at`` is skipped as malformed)."""
    return {"content": content, "created_at": "2026-01-01T00:00:00+00:00"}


def _namespace() -> tuple[str, ...]:
    return ("memory", f"u-{uuid.uuid4().hex[:12]}", "facts")


def test_pooled_store_sees_writes_made_elsewhere(persistence: Persistence) -> None:
    namespace = _namespace()
    with PostgresStore.from_conn_string(persistence.uri, pool_config={"max_size": 2}) as pooled:
        pooled.put(namespace, "a", _fact("likes tea"))
        assert [k for k, _ in fact_index_cache.values(pooled, namespace)] == ["a"]
        persistence.store.put(namespace, "b", _fact("likes coffee"))
        persistence.store.delete(namespace, "a")
        assert [k for k, _ in fact_index_cache.values(pooled, namespace)] == ["b"]
        assert fact_index_cache.lookup(pooled, namespace, ["coffee"], 5).hits[0][0] == "b"


async def test_async_stores_see_writes_made_elsewhere(persistence: Persistence) -> None:
    namespace = _namespace()
    async with (
        AsyncPostgresStore.from_conn_string(persistence.uri) as single,
        AsyncPostgresStore.from_conn_string(persistence.uri, pool_config={"max_size": 2}) as pooled,
    ):
        await single.aput(namespace, "a", _fact("likes tea"))
        for store in (single, pooled):
            assert [k for k, _ in await fact_index_cache.avalues(store, namespace)] == ["a"]
        persistence.store.put(namespace, "b", _fact("likes coffee"))
        await pooled.adelete(namespace, "a")
        for store in (single, pooled):
            assert [k for k, _ in await fact_index_cache.avalues(store, namespace)] == ["b"]
            found = await fact_index_cache.alookup(store, namespace, ["coffee"], 5)
            assert [key for key, _, _ in found.hits] == ["b"]
