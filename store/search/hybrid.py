"""Optional hybrid retrieval: the Store's vector index fused with BM25, when configured.

A Store built with an ``index`` config (an embedding model; pgvector in Postgres) embeds
each fact's ``content``. Search then asks it for semantic neighbours as well and fuses the
two candidate lists into one relevance before the usual age/confidence rerank:
``R = (1 - w) * R_bm25 / max(R_bm25) + w * max(0, similarity)``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from functools import lru_cache

from langgraph.store.base import BaseStore, SearchItem

from ctxgraph.store.persistence.vector_index import FACT_INDEX_FIELDS

__all__ = [
    "FACT_INDEX_FIELDS",
    "SEMANTIC_WEIGHT",
    "asemantic_hits",
    "fuse",
    "semantic_enabled",
    "semantic_hits",
]

SEMANTIC_WEIGHT = 0.5
"""Share of the fused relevance that comes from semantic similarity."""


SERVER_STORE_ENV = "LANGGRAPH_STORE"
"""Where a LangGraph server publishes ``langgraph.json``'s ``store`` config (as JSON)."""


def semantic_enabled(store: BaseStore, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``store`` has an embedding index (LangGraph's ``index`` config).

    A LangGraph server hands graphs a wrapper around its store that does not expose the
    index config; there the server's published store config (``LANGGRAPH_STORE``) says
    whether ``langgraph.json`` gave the store an ``index``.
    """
    if getattr(store, "index_config", None):
        return True
    raw = (os.environ if environ is None else environ).get(SERVER_STORE_ENV, "")
    return _has_index(raw)


@lru_cache(maxsize=8)
def _has_index(raw: str) -> bool:
    if not raw.strip():
        return False
    try:
        config = json.loads(raw)
    except ValueError:
        return False
    return isinstance(config, dict) and bool(config.get("index"))


def semantic_hits(
    store: BaseStore, namespace: tuple[str, ...], query: str, limit: int
) -> list[SearchItem]:
    """The ``limit`` nearest facts of exactly ``namespace`` by embedding similarity."""
    found = store.search(namespace, query=query, limit=limit)
    return [item for item in found if item.namespace == namespace]


async def asemantic_hits(
    store: BaseStore, namespace: tuple[str, ...], query: str, limit: int
) -> list[SearchItem]:
    """Async :func:`semantic_hits`."""
    found = await store.asearch(namespace, query=query, limit=limit)
    return [item for item in found if item.namespace == namespace]


def fuse(
    lexical: Sequence[tuple[str, float]],
    semantic: Sequence[SearchItem],
    *,
    weight: float = SEMANTIC_WEIGHT,
) -> dict[str, float]:
    """Key -> fused raw score (negative, FTS5 sign) over the union of both candidate lists.

    ``lexical`` holds ``(key, raw_bm25)`` pairs as ``Bm25Index.search`` returns them.
    """
    if not 0 <= weight <= 1:
        raise ValueError(f"the semantic weight must be within 0..1, got {weight!r}")
    best = max((-raw for _, raw in lexical), default=0.0)
    relevance: dict[str, float] = {}
    for key, raw in lexical:
        relevance[key] = (1 - weight) * (-raw / best if best > 0 else 0.0)
    for item in semantic:
        similarity = max(0.0, float(item.score or 0.0))
        relevance[item.key] = relevance.get(item.key, 0.0) + weight * similarity
    return {key: -value for key, value in relevance.items()}
