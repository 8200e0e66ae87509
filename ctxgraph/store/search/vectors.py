"""The vectors a Store keeps for facts: scored in place, written back when missing.

A search embeds its query once and scores that vector against the vectors the Store
already holds, so no fact is embedded again to be ranked:

- ``PostgresStore`` / ``AsyncPostgresStore``: in SQL, with pgvector's operator for the
  index's ``distance_type`` (cosine: ``1 - <=>``; inner product: ``-<#>``; l2: ``-<->``),
  the same scores the Store's own search gives.
- ``InMemoryStore``: the cosine of the vectors it keeps per item and field. LangGraph
  offers no public reader for them; the attribute is the one its docstring names.

A vector is *fresh* when it was written no earlier than the fact's value (Postgres
compares ``store_vectors.updated_at`` with ``store.updated_at``; the in-memory store
drops a fact's vector when the fact is written without one). A fact without a fresh
vector, e.g. one stored while the embedding endpoint was down (:func:`put_facts`), is
embedded on the next search that meets it and its vector written back (:func:`save`),
or by ``ctxgraph memory reindex``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from langgraph.store.base import BaseStore, Op, PutOp, Result, SearchOp
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore

from ctxgraph.store.persistence.store_cursor import (
    acommitted_cursor,
    astore_cursor,
    committed_cursor,
    store_cursor,
)
from ctxgraph.store.persistence.vector_index import FACT_INDEX_FIELDS

__all__ = [
    "ALL",
    "VECTOR_FIELD",
    "VectorSql",
    "amemory_scores",
    "anearest",
    "aput_facts",
    "areembed",
    "asave",
    "ascored",
    "memory_scores",
    "nearest",
    "put_facts",
    "reembed",
    "save",
    "scored",
    "unembedded",
    "vector_sql",
]

logger = logging.getLogger(__name__)

VECTOR_FIELD = FACT_INDEX_FIELDS[0]
"""The one field of a fact the Store embeds (``content``)."""

Distance = Literal["cosine", "inner_product", "l2"]


@dataclass(frozen=True)
class VectorSql:
    """How a Postgres Store scores a vector: the score expression and its vector type."""

    score: str
    """SQL of the similarity of ``sv.embedding`` to the query parameter (higher is better)."""
    order: str
    """SQL of the distance the nearest facts are ordered by (lower is better)."""
    cast: str
    """``vector`` or ``halfvec``."""


def vector_sql(distance: Distance, cast: str) -> VectorSql:
    """The SQL of pgvector's score for ``distance`` with vectors of type ``cast``."""
    operator = {"cosine": "<=>", "inner_product": "<#>", "l2": "<->"}[distance]
    order = f"(sv.embedding {operator} %(query)s::{cast})"
    score = f"1 - {order}" if distance == "cosine" else f"-{order}"
    return VectorSql(score, order, cast)


_FRESH = (
    "FROM store s JOIN store_vectors sv ON sv.prefix = s.prefix AND sv.key = s.key "
    "WHERE s.prefix = %(prefix)s AND sv.field_name = %(field)s "
    "AND sv.updated_at >= s.updated_at AND (s.expires_at IS NULL OR s.expires_at > now())"
)


Statement = tuple[str, dict[str, Any]]


def _nearest_query(
    sql: VectorSql, namespace: tuple[str, ...], query: Sequence[float], limit: int
) -> Statement:
    ordered = f"ORDER BY {sql.order}, s.key LIMIT %(limit)s"
    text = f"SELECT s.key, {sql.score} AS score {_FRESH} {ordered}"
    return text, _params(namespace, query=list(query), limit=limit)


def _scored_query(
    sql: VectorSql, namespace: tuple[str, ...], query: Sequence[float], keys: Sequence[str]
) -> Statement:
    text = f"SELECT s.key, {sql.score} AS score {_FRESH} AND s.key = ANY(%(keys)s)"
    return text, _params(namespace, query=list(query), keys=keys)


def _save_query(cast: str) -> str:
    return (
        "INSERT INTO store_vectors (prefix, key, field_name, embedding, created_at, updated_at) "
        f"SELECT s.prefix, s.key, %(field)s, %(vector)s::{cast}, now(), "
        "greatest(clock_timestamp(), s.updated_at) FROM store s "
        "WHERE s.prefix = %(prefix)s AND s.key = %(key)s AND s.value->>'content' = %(text)s "
        "ON CONFLICT (prefix, key, field_name) DO UPDATE "
        "SET embedding = EXCLUDED.embedding, updated_at = EXCLUDED.updated_at"
    )


def _params(namespace: tuple[str, ...], **more: Any) -> dict[str, Any]:
    return {"prefix": ".".join(namespace), "field": VECTOR_FIELD, **more}


ALL = 1_000_000_000
"""A search limit that no namespace reaches: every fact is scored."""


def memory_scores(
    store: InMemoryStore, namespaces: Sequence[tuple[str, ...]], query: str
) -> dict[tuple[str, ...], dict[str, float | None]]:
    """Every fact's similarity to ``query`` per namespace (None: the fact has no vector).

    One batch of searches with the same text: the in-memory store embeds it once.
    """
    ops = [SearchOp(namespace, None, ALL, 0, query) for namespace in namespaces]
    return _by_namespace(namespaces, store.batch(ops))


async def amemory_scores(
    store: InMemoryStore, namespaces: Sequence[tuple[str, ...]], query: str
) -> dict[tuple[str, ...], dict[str, float | None]]:
    """Async :func:`memory_scores`."""
    ops = [SearchOp(namespace, None, ALL, 0, query) for namespace in namespaces]
    return _by_namespace(namespaces, await store.abatch(ops))


def _by_namespace(
    namespaces: Sequence[tuple[str, ...]], results: Sequence[Any]
) -> dict[tuple[str, ...], dict[str, float | None]]:
    return {
        namespace: {
            item.key: None if item.score is None else float(item.score)
            for item in found
            if tuple(item.namespace) == namespace
        }
        for namespace, found in zip(namespaces, results, strict=True)
    }


def reembed(store: BaseStore, namespace: tuple[str, ...], values: Mapping[str, Any]) -> None:
    """Write ``values`` (key -> stored value) again with their vector: the Store embeds them."""
    ops = [PutOp(namespace, key, value, index=FACT_INDEX_FIELDS) for key, value in values.items()]
    if ops:
        store.batch(ops)


async def areembed(store: BaseStore, namespace: tuple[str, ...], values: Mapping[str, Any]) -> None:
    """Async :func:`reembed`."""
    ops = [PutOp(namespace, key, value, index=FACT_INDEX_FIELDS) for key, value in values.items()]
    if ops:
        await store.abatch(ops)


def nearest(
    store: BaseStore,
    namespace: tuple[str, ...],
    query: Sequence[float],
    limit: int,
    sql: VectorSql | None,
) -> list[tuple[str, float]]:
    """The ``limit`` facts of ``namespace`` whose fresh vectors are nearest ``query``."""
    if isinstance(store, PostgresStore) and sql is not None:
        with store_cursor(store) as cursor:
            cursor.execute(*_nearest_query(sql, namespace, query, limit))
            return [(row["key"], float(row["score"])) for row in cursor.fetchall()]
    raise TypeError(f"no stored vectors to read in {type(store).__name__}")


async def anearest(
    store: BaseStore,
    namespace: tuple[str, ...],
    query: Sequence[float],
    limit: int,
    sql: VectorSql | None,
) -> list[tuple[str, float]]:
    """Async :func:`nearest`."""
    if isinstance(store, AsyncPostgresStore) and sql is not None:
        async with astore_cursor(store) as cursor:
            await cursor.execute(*_nearest_query(sql, namespace, query, limit))
            return [(row["key"], float(row["score"])) for row in await cursor.fetchall()]
    return nearest(store, namespace, query, limit, sql)


def scored(
    store: BaseStore,
    namespace: tuple[str, ...],
    query: Sequence[float],
    keys: Sequence[str],
    sql: VectorSql | None,
) -> dict[str, float]:
    """The similarity to ``query`` of each of ``keys`` that has a fresh vector."""
    if not keys:
        return {}
    if isinstance(store, PostgresStore) and sql is not None:
        with store_cursor(store) as cursor:
            cursor.execute(*_scored_query(sql, namespace, query, keys))
            return {row["key"]: float(row["score"]) for row in cursor.fetchall()}
    raise TypeError(f"no stored vectors to read in {type(store).__name__}")


async def ascored(
    store: BaseStore,
    namespace: tuple[str, ...],
    query: Sequence[float],
    keys: Sequence[str],
    sql: VectorSql | None,
) -> dict[str, float]:
    """Async :func:`scored`."""
    if keys and isinstance(store, AsyncPostgresStore) and sql is not None:
        async with astore_cursor(store) as cursor:
            await cursor.execute(*_scored_query(sql, namespace, query, keys))
            return {row["key"]: float(row["score"]) for row in await cursor.fetchall()}
    return scored(store, namespace, query, keys, sql)


def unembedded(store: BaseStore, namespace: tuple[str, ...], keys: Sequence[str]) -> list[str]:
    """Those of ``keys`` without a fresh vector, in their order."""
    if not keys:
        return []
    if isinstance(store, PostgresStore):
        with store_cursor(store) as cursor:
            cursor.execute(
                f"SELECT s.key {_FRESH} AND s.key = ANY(%(keys)s)", _params(namespace, keys=keys)
            )
            fresh = {row["key"] for row in cursor.fetchall()}
    elif isinstance(store, InMemoryStore):
        scores = memory_scores(store, [namespace], " ")[namespace]
        fresh = {key for key, score in scores.items() if score is not None}
    else:
        raise TypeError(f"no stored vectors to read in {type(store).__name__}")
    return [key for key in keys if key not in fresh]


Made = Mapping[str, tuple[str, Sequence[float]]]
"""Key -> (the content embedded, its vector)."""


def save(store: BaseStore, namespace: tuple[str, ...], made: Made, cast: str = "vector") -> None:
    """Write back vectors made for facts that had none, where the fact still says the same.

    Postgres only (in SQL, so a fact written meanwhile keeps its own vector); the in-memory
    store embeds what it stores itself (:func:`reembed`).
    """
    if not made:
        return
    if isinstance(store, PostgresStore):
        with committed_cursor(store) as cursor:
            cursor.executemany(
                _save_query(cast),
                [
                    _params(namespace, key=key, text=text, vector=list(vector))
                    for key, (text, vector) in made.items()
                ],
            )


async def asave(
    store: BaseStore, namespace: tuple[str, ...], made: Made, cast: str = "vector"
) -> None:
    """Async :func:`save`."""
    if made and isinstance(store, AsyncPostgresStore):
        async with acommitted_cursor(store) as cursor:
            await cursor.executemany(
                _save_query(cast),
                [
                    _params(namespace, key=key, text=text, vector=list(vector))
                    for key, (text, vector) in made.items()
                ],
            )
        return
    save(store, namespace, made, cast)


# -- writes that survive an embedding failure -------------------------------------------


def _indexed(ops: Sequence[Op]) -> list[PutOp]:
    return [op for op in ops if isinstance(op, PutOp) and op.value is not None and op.index]


def _unindexed(store: BaseStore, ops: Sequence[Op], error: Exception) -> list[Op] | None:
    """``ops`` with every indexed put unindexed, when ``error`` is the embedder's; else None."""
    indexed = _indexed(ops)
    if not indexed or not getattr(store, "index_config", None):
        return None
    if isinstance(error, psycopg.Error):
        return None  # the database's, not the embedder's
    logger.warning(
        "memory: could not embed %d fact(s) (%s: %s); stored without a vector, embedded again "
        "by the next search that finds them or by `ctxgraph memory reindex`",
        len(indexed),
        type(error).__name__,
        str(error).strip().splitlines()[0] if str(error).strip() else "no message",
    )
    chosen = {id(op) for op in indexed}
    return [_without_vector(op) if id(op) in chosen else op for op in ops]


def _without_vector(op: Op) -> Op:
    assert isinstance(op, PutOp)
    return PutOp(op.namespace, op.key, op.value, index=False, ttl=op.ttl)


def _stale(store: BaseStore, ops: Sequence[Op]) -> list[Op]:
    """Deletes of the facts about to be written unindexed, for the in-memory store.

    It would keep an old vector under a fact written without one; a delete drops it.
    Postgres tells a stale vector by its time, so nothing is deleted there.
    """
    if not isinstance(store, InMemoryStore):
        return []
    return [PutOp(op.namespace, op.key, None) for op in _indexed(ops)]


def put_facts(store: BaseStore, ops: Sequence[Op]) -> list[Result]:
    """``store.batch(ops)``; when the embedder fails, the same writes without vectors.

    A fact is never lost because its vector could not be made: it is stored unindexed
    (one warning) and embedded later.
    """
    try:
        return store.batch(ops)
    except Exception as error:
        fallback = _unindexed(store, ops, error)
        if fallback is None:
            raise
        if stale := _stale(store, ops):
            store.batch(stale)
        return store.batch(fallback)


async def aput_facts(store: BaseStore, ops: Sequence[Op]) -> list[Result]:
    """Async :func:`put_facts`."""
    try:
        return await store.abatch(ops)
    except Exception as error:
        fallback = _unindexed(store, ops, error)
        if fallback is None:
            raise
        if stale := _stale(store, ops):
            await store.abatch(stale)
        return await store.abatch(fallback)
