"""Optional hybrid retrieval: the Store's vector index fused with BM25, when configured.

A Store built with an ``index`` config (an embedding model; pgvector in Postgres) embeds
each fact's ``content``. Search then asks it for semantic neighbours as well, and every
candidate of the union of the two lists is scored on both signals before the usual
age/confidence rerank:
``R = (1 - w) * R_bm25 / max(R_bm25) + w * max(0, similarity)``, the max taken over the
union.

- A neighbour the BM25 list missed gets its exact BM25 from the in-process index
  (``FactIndexCache.lookup(..., extra_keys=...)``): 0 only when no query term occurs in it.
- A BM25 match the vector list missed gets its exact similarity when the Store exposes its
  embedder and a metric we can reproduce: ``InMemoryStore`` scores the cosine of
  ``embed_query(query)`` and the fact's ``embed_documents`` vector; ``PostgresStore``
  scores pgvector's ``distance_type`` (``cosine``, the default: 1 - cosine distance;
  ``inner_product``: the dot product; ``l2``: minus the distance) with the query embedded
  by ``embed_documents``, in single (``vector``) or half (``halfvec``) precision. Facts
  embedded here are cached per process (:data:`EMBEDDING_CACHE_SIZE` texts, LRU).
- Otherwise (a LangGraph server's store wrapper that hides its embedder, another Store
  class, another vector type, an embedder that fails) it gets an upper bound, never 0:
  the lowest similarity of the Store's list when that list was full, since a fact outside
  the top ``limit`` cannot be more similar than the last one in it (approximately so under
  an approximate ANN index). When the list was not full, every embedded fact was in it, so
  a fact missing from it has no embedding and its similarity is 0.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.embeddings import Embeddings
from langgraph.store.base import BaseStore, SearchItem, get_text_at_path, tokenize_path
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore

from ctxgraph.store.persistence.vector_index import FACT_INDEX_FIELDS
from ctxgraph.store.search.index import Hit

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "EMBEDDING_CACHE_SIZE",
    "FACT_INDEX_FIELDS",
    "SEMANTIC_WEIGHT",
    "Neighbours",
    "QuerySimilarity",
    "Semantic",
    "StoreMetric",
    "asemantic_hits",
    "clear_embedding_cache",
    "fuse",
    "semantic_enabled",
    "semantic_hits",
    "store_metric",
]

logger = logging.getLogger(__name__)

SEMANTIC_WEIGHT = 0.5
"""Share of the fused relevance that comes from semantic similarity."""

EMBEDDING_CACHE_SIZE = 4096
"""Texts whose embedding this process keeps (least recently used dropped first)."""

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


# -- the Store's neighbours ------------------------------------------------------------


@dataclass(frozen=True)
class Neighbours:
    """The Store's nearest facts of one namespace for a query."""

    items: list[SearchItem]
    """The nearest facts of exactly the namespace, best first."""
    floor: float | None
    """The lowest similarity of the Store's list when it held ``limit`` scored facts (no
    fact missing from it is more similar), else None (every embedded fact was in it)."""


def _neighbours(found: Sequence[SearchItem], namespace: tuple[str, ...], limit: int) -> Neighbours:
    # The list ranks the whole namespace prefix, so the bound comes from all of it.
    scores = [float(item.score) for item in found if item.score is not None]
    floor = min(scores) if scores and len(scores) >= limit else None
    return Neighbours([item for item in found if item.namespace == namespace], floor)


def semantic_hits(
    store: BaseStore, namespace: tuple[str, ...], query: str, limit: int
) -> Neighbours:
    """The ``limit`` nearest facts of exactly ``namespace`` by embedding similarity."""
    return _neighbours(store.search(namespace, query=query, limit=limit), namespace, limit)


async def asemantic_hits(
    store: BaseStore, namespace: tuple[str, ...], query: str, limit: int
) -> Neighbours:
    """Async :func:`semantic_hits`."""
    found = await store.asearch(namespace, query=query, limit=limit)
    return _neighbours(found, namespace, limit)


# -- the Store's metric ----------------------------------------------------------------

Distance = Literal["cosine", "inner_product", "l2"]
Precision = Literal["double", "single", "half"]


@dataclass(frozen=True)
class StoreMetric:
    """How a Store scores a fact against a query, reproduced outside it."""

    embeddings: Embeddings
    distance: Distance
    """``cosine``: cosine similarity; ``inner_product``: dot product; ``l2``: minus the
    Euclidean distance (pgvector's scores, and ``InMemoryStore``'s cosine)."""
    query_as_document: bool
    """Whether the Store embeds the query with ``embed_documents`` (Postgres) rather than
    ``embed_query`` (``InMemoryStore``)."""
    precision: Precision
    """Precision the Store keeps vectors in (pgvector ``vector``: single; ``halfvec``: half)."""


def store_metric(store: BaseStore) -> StoreMetric | None:
    """The embedder and metric of ``store``'s vector index, None when we cannot reproduce them.

    LangGraph's ``InMemoryStore`` and (async) ``PostgresStore`` keep the ``index`` config
    as ``index_config`` (the embedder under ``"embed"``) and the embedder, wrapped as
    LangChain ``Embeddings``, as ``embeddings``.
    """
    config = getattr(store, "index_config", None)
    if not isinstance(config, Mapping):
        return None
    embeddings = getattr(store, "embeddings", None)
    if not isinstance(embeddings, Embeddings):
        embeddings = config.get("embed")
    if not isinstance(embeddings, Embeddings):
        return None
    if isinstance(store, InMemoryStore):
        return StoreMetric(embeddings, "cosine", query_as_document=False, precision="double")
    if isinstance(store, PostgresStore | AsyncPostgresStore):
        distances: dict[object, Distance] = {
            "cosine": "cosine",
            "inner_product": "inner_product",
            "l2": "l2",
        }
        precisions: dict[object, Precision] = {"vector": "single", "halfvec": "half"}
        ann = config.get("ann_index_config") or {}
        distance = distances.get(config.get("distance_type", "cosine"))
        precision = precisions.get(ann.get("vector_type", "vector"))
        if distance is None or precision is None:
            return None  # e.g. bit vectors with hamming distance
        return StoreMetric(embeddings, distance, query_as_document=True, precision=precision)
    return None


def _similarities(
    metric: StoreMetric, query: Sequence[float], vectors: Sequence[Sequence[float]]
) -> list[float]:
    """The Store's score of each of ``vectors`` against ``query``."""
    import numpy as np

    dtype = {"double": np.float64, "single": np.float32, "half": np.float16}[metric.precision]
    # Rounded to the Store's precision, then computed in (at least) single precision.
    work = np.float64 if metric.precision == "double" else np.float32
    q: npt.NDArray[np.floating[Any]] = np.asarray(query, dtype=dtype).astype(work)
    m: npt.NDArray[np.floating[Any]] = np.asarray(vectors, dtype=dtype).astype(work)
    if metric.distance == "inner_product":
        return [float(v) for v in m @ q]
    if metric.distance == "l2":
        return [-float(v) for v in np.linalg.norm(m - q, axis=1)]
    norms = np.linalg.norm(m, axis=1) * np.linalg.norm(q)
    dots = m @ q
    # Zero vectors: InMemoryStore scores 0 (pgvector would give NaN, i.e. no similarity).
    cosine = np.divide(dots, norms, out=np.zeros_like(dots), where=norms != 0)
    return [float(v) for v in np.clip(cosine, -1.0, 1.0)]


# -- a process-wide embedding cache ----------------------------------------------------

CacheKey = tuple[int, str, str]
"""id of the embedder, ``"query"`` or ``"document"``, text."""

_cache: OrderedDict[CacheKey, tuple[Embeddings, list[float]]] = OrderedDict()
_cache_lock = threading.Lock()


def _cached(embeddings: Embeddings, kind: str, texts: Sequence[str]) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    with _cache_lock:
        for text in texts:
            entry = _cache.get((id(embeddings), kind, text))
            # The entry holds the embedder, so its id cannot be reused while it is cached.
            if entry is not None and entry[0] is embeddings:
                _cache.move_to_end((id(embeddings), kind, text))
                found[text] = entry[1]
    return found


def _remember(
    embeddings: Embeddings, kind: str, texts: Sequence[str], vectors: Sequence[Sequence[float]]
) -> dict[str, list[float]]:
    if len(vectors) != len(texts):
        raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
    made = {text: list(vector) for text, vector in zip(texts, vectors, strict=True)}
    with _cache_lock:
        for text, vector in made.items():
            _cache[(id(embeddings), kind, text)] = (embeddings, vector)
            _cache.move_to_end((id(embeddings), kind, text))
        while len(_cache) > EMBEDDING_CACHE_SIZE:
            _cache.popitem(last=False)
    return made


def clear_embedding_cache() -> None:
    """Forget every cached embedding."""
    with _cache_lock:
        _cache.clear()


# -- both signals for every candidate --------------------------------------------------


@dataclass(frozen=True)
class Semantic:
    """The vector side of one namespace's candidates, completed for the union."""

    items: list[SearchItem]
    """The Store's nearest facts of the namespace, best first."""
    bm25: Mapping[str, float] = field(default_factory=dict)
    """Raw BM25 (FTS5 sign; 0.0 when no query term occurs) of neighbours, from the index."""
    similarity: Mapping[str, float] = field(default_factory=dict)
    """Similarity of the BM25 matches the Store's list did not score."""
    exact: bool = True
    """Whether ``similarity`` was measured (else it is the upper bound described above)."""


def _texts(value: Mapping[str, Any]) -> list[str]:
    """The texts the Store embedded for a fact (stored with ``index=FACT_INDEX_FIELDS``)."""
    return [
        text for path in FACT_INDEX_FIELDS for text in get_text_at_path(value, tokenize_path(path))
    ]


def _indexed(near: Neighbours, bm25: Mapping[str, float]) -> Neighbours:
    """``near`` without the facts the index lookup (made after it) no longer holds.

    The lookup scores every neighbour it indexes, so a neighbour without a BM25 score was
    deleted between the Store's vector search and the index refresh.
    """
    if all(item.key in bm25 for item in near.items):
        return near
    return Neighbours([item for item in near.items if item.key in bm25], near.floor)


class QuerySimilarity:
    """One search's similarities: the query is embedded once, for every namespace."""

    def __init__(self, store: BaseStore, query: str) -> None:
        self.query = query
        self.metric = store_metric(store)
        self._query_vector: list[float] | None = None

    def _missing(self, near: Neighbours, hits: Sequence[Hit]) -> dict[str, list[str]]:
        scored = {item.key for item in near.items if item.score is not None}
        return {key: _texts(value) for key, _, value in hits if key not in scored}

    def _bounded(self, near: Neighbours, missing: Mapping[str, object]) -> dict[str, float]:
        bound = near.floor if near.floor is not None else 0.0
        return dict.fromkeys(missing, bound)

    def _measured(
        self, missing: Mapping[str, list[str]], vectors: Mapping[str, list[float]]
    ) -> dict[str, float]:
        assert self.metric is not None and self._query_vector is not None
        pairs = [(key, text) for key, texts in missing.items() for text in texts]
        scores = _similarities(self.metric, self._query_vector, [vectors[t] for _, t in pairs])
        measured = dict.fromkeys(missing, 0.0)  # no text, no embedding: no similarity
        best: dict[str, float] = {}
        for (key, _), score in zip(pairs, scores, strict=True):
            best[key] = max(best.get(key, score), score)  # max over a fact's texts, as stored
        measured.update(best)
        return measured

    def _plan(self, missing: Mapping[str, list[str]]) -> tuple[list[str], dict[str, list[float]]]:
        """Texts still to embed, and the cached vectors of the others."""
        assert self.metric is not None
        texts = list(dict.fromkeys(t for group in missing.values() for t in group))
        if self._query_vector is None:
            kind = "document" if self.metric.query_as_document else "query"
            known = _cached(self.metric.embeddings, kind, [self.query])
            self._query_vector = known.get(self.query)
        vectors = _cached(self.metric.embeddings, "document", texts)
        return [t for t in texts if t not in vectors], vectors

    def _failed(self, error: Exception) -> None:
        logger.warning(
            "hybrid search: could not embed candidates (%s); bounding their similarity", error
        )

    def complete(
        self, near: Neighbours, hits: Sequence[Hit], bm25: Mapping[str, float]
    ) -> Semantic:
        """Both signals for every candidate of ``near`` and ``hits``.

        ``bm25`` holds the neighbours' raw BM25 (from the same index lookup as ``hits``);
        each BM25 hit the Store's list did not score gets its similarity.
        """
        near = _indexed(near, bm25)
        missing = self._missing(near, hits)
        if not missing:
            return Semantic(near.items, bm25, {}, True)
        if self.metric is not None:
            try:
                todo, vectors = self._plan(missing)
                if self._query_vector is None:
                    self._query_vector = self._embed_query_sync()
                if todo:
                    embedded = self.metric.embeddings.embed_documents(todo)
                    vectors.update(_remember(self.metric.embeddings, "document", todo, embedded))
                return Semantic(near.items, bm25, self._measured(missing, vectors), True)
            except Exception as error:  # any embedder failure: bound instead
                self._failed(error)
        return Semantic(near.items, bm25, self._bounded(near, missing), False)

    async def acomplete(
        self, near: Neighbours, hits: Sequence[Hit], bm25: Mapping[str, float]
    ) -> Semantic:
        """Async :meth:`complete`."""
        near = _indexed(near, bm25)
        missing = self._missing(near, hits)
        if not missing:
            return Semantic(near.items, bm25, {}, True)
        if self.metric is not None:
            try:
                todo, vectors = self._plan(missing)
                if self._query_vector is None:
                    self._query_vector = await self._aembed_query()
                if todo:
                    embedded = await self.metric.embeddings.aembed_documents(todo)
                    vectors.update(_remember(self.metric.embeddings, "document", todo, embedded))
                return Semantic(near.items, bm25, self._measured(missing, vectors), True)
            except Exception as error:  # any embedder failure: bound instead
                self._failed(error)
        return Semantic(near.items, bm25, self._bounded(near, missing), False)

    def _embed_query_sync(self) -> list[float]:
        assert self.metric is not None
        embeddings = self.metric.embeddings
        if self.metric.query_as_document:
            vector = embeddings.embed_documents([self.query])
            return _remember(embeddings, "document", [self.query], vector)[self.query]
        one = [embeddings.embed_query(self.query)]
        return _remember(embeddings, "query", [self.query], one)[self.query]

    async def _aembed_query(self) -> list[float]:
        assert self.metric is not None
        embeddings = self.metric.embeddings
        if self.metric.query_as_document:
            vector = await embeddings.aembed_documents([self.query])
            return _remember(embeddings, "document", [self.query], vector)[self.query]
        one = [await embeddings.aembed_query(self.query)]
        return _remember(embeddings, "query", [self.query], one)[self.query]


# -- fusion ----------------------------------------------------------------------------


def fuse(
    lexical: Sequence[tuple[str, float]],
    semantic: Semantic,
    *,
    weight: float = SEMANTIC_WEIGHT,
) -> dict[str, float]:
    """Key -> fused raw score (negative, FTS5 sign) over the union of both candidate lists.

    ``lexical`` holds ``(key, raw_bm25)`` pairs as ``Bm25Index.search`` returns them. The
    candidates are those pairs and the neighbours of positive similarity; each is scored
    with its own BM25 (``semantic.bm25`` for a neighbour not in ``lexical``) and its own
    similarity (``semantic.similarity`` for a BM25 match the Store did not score). A
    candidate lacking either signal is a ValueError: neither is ever taken as 0.
    """
    if not 0 <= weight <= 1:
        raise ValueError(f"the semantic weight must be within 0..1, got {weight!r}")
    bm25 = {key: -raw for key, raw in lexical}
    similarity = {item.key: float(item.score) for item in semantic.items if item.score is not None}
    for key, score in similarity.items():
        if score > 0 and key not in bm25:
            if key not in semantic.bm25:
                raise ValueError(f"no BM25 score for the semantic candidate {key!r}")
            bm25[key] = -semantic.bm25[key]
    for key in bm25:
        if key not in similarity:
            if key not in semantic.similarity:
                raise ValueError(f"no similarity for the lexical candidate {key!r}")
            similarity[key] = semantic.similarity[key]
    best = max(bm25.values(), default=0.0)
    return {
        key: -(
            (1 - weight) * (relevance / best if best > 0 else 0.0)
            + weight * max(0.0, similarity[key])
        )
        for key, relevance in bm25.items()
    }
