"""Optional hybrid retrieval: the Store's vectors fused with BM25, when configured.

A Store built with an ``index`` config (an embedding model; pgvector in Postgres) embeds
each fact's ``content`` when it is written. A search embeds its query once
(:class:`QuerySimilarity`), asks the Store's vectors for the nearest facts of each
namespace and scores every BM25 match against the same query vector, in SQL on Postgres
(``store.search.vectors``): no fact that already has a vector is embedded again. A fact
without one (stored while the endpoint was down) is embedded then, its vector written
back, and kept in a small per-process cache (:data:`EMBEDDING_CACHE_SIZE` texts, LRU).

:func:`fuse` puts both signals on one scale per query, over the candidates of every
namespace searched (user and project alike):
``R = B * ((1 - w) * bm25 / B + w * (s - s_min) / (s_max - s_min))``, where ``B`` is the
best BM25 among the candidates and ``s`` the similarity. An embedding model's cosines sit
in a narrow band (say 0.85-0.91 for every fact), so raw they would add the same amount to
every candidate; min-max spreads them over 0..1. ``R`` stays in BM25 units, so the
confidence term weighs as much against it as in lexical mode, and the age factor acts on
it within :data:`~ctxgraph.store.search.scoring.FUSED_TIME_FACTOR_FLOOR`.

When the Store hides its embedder (a LangGraph server's store wrapper, another Store
class, another vector type), its own ``search(query=...)`` gives the neighbours, and a
BM25 match it did not list gets an upper bound, never 0: the lowest similarity of the
Store's list when that list was full (no fact outside it is more similar), else 0 (every
embedded fact was in it).

Any embedding failure during a search raises :class:`EmbeddingError`; the
repository then ranks that search lexically, with one warning.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from langchain_core.embeddings import Embeddings
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore

from ctxgraph.store.persistence.vector_index import FACT_INDEX_FIELDS
from ctxgraph.store.search.fusion import SEMANTIC_WEIGHT, Semantic, fuse
from ctxgraph.store.search.index import Hit
from ctxgraph.store.search.vectors import (
    VECTOR_FIELD,
    VectorSql,
    amemory_scores,
    anearest,
    areembed,
    asave,
    ascored,
    memory_scores,
    nearest,
    reembed,
    save,
    scored,
    unembedded,
    vector_sql,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "EMBEDDING_CACHE_SIZE",
    "FACT_INDEX_FIELDS",
    "SEMANTIC_WEIGHT",
    "EmbeddingError",
    "Neighbours",
    "QuerySimilarity",
    "Semantic",
    "StoreMetric",
    "clear_embedding_cache",
    "fuse",
    "lexical_fallback",
    "reindex",
    "semantic_enabled",
    "store_metric",
]

logger = logging.getLogger(__name__)

EMBEDDING_CACHE_SIZE = 4096
"""Texts without a stored vector whose embedding this process keeps (LRU)."""

SERVER_STORE_ENV = "LANGGRAPH_STORE"
"""Where a LangGraph server publishes ``langgraph.json``'s ``store`` config (as JSON)."""


class EmbeddingError(Exception):
    """The embedder failed during a search; the search falls back to lexical ranking."""


def lexical_fallback(error: EmbeddingError) -> None:
    """Log the one line that says a search was ranked lexically, and why."""
    logger.warning("hybrid search: %s; ranking this search lexically", error)


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
    precision: Precision
    """Precision the Store keeps vectors in (pgvector ``vector``: single; ``halfvec``: half)."""
    sql: VectorSql | None = None
    """How Postgres scores its stored vectors (None for ``InMemoryStore``)."""


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
        return StoreMetric(embeddings, "cosine", precision="double")
    if isinstance(store, PostgresStore | AsyncPostgresStore):
        distances: dict[object, Distance] = {
            "cosine": "cosine",
            "inner_product": "inner_product",
            "l2": "l2",
        }
        precisions: dict[object, Precision] = {"vector": "single", "halfvec": "half"}
        ann = config.get("ann_index_config") or {}
        distance = distances.get(config.get("distance_type", "cosine"))
        vector_type = ann.get("vector_type", "vector")
        precision = precisions.get(vector_type)
        if distance is None or precision is None:
            return None  # e.g. bit vectors with hamming distance
        return StoreMetric(embeddings, distance, precision, vector_sql(distance, vector_type))
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
class Neighbours:
    """The nearest facts of one namespace for a query, best first."""

    scores: list[tuple[str, float]]
    """Key and similarity of each neighbour."""
    floor: float | None = None
    """When the Store's own search listed them and its list was full: its lowest
    similarity (no fact missing from it is more similar); else None."""


def _indexed(near: Neighbours, bm25: Mapping[str, float]) -> Neighbours:
    """``near`` without the facts the index lookup (made after it) no longer holds.

    The lookup scores every neighbour it indexes, so a neighbour without a BM25 score was
    deleted between the vector search and the index refresh.
    """
    return Neighbours([(key, s) for key, s in near.scores if key in bm25], near.floor)


def _problem(error: Exception) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else 'no message'}"


class QuerySimilarity:
    """One search's semantic side: the query embedded once, for every namespace.

    :meth:`embed` (or :meth:`aembed`) first, with every namespace the search reads; then
    per namespace :meth:`neighbours` and, after the index lookup, :meth:`complete`.
    Embedder failures raise :class:`EmbeddingError`.
    """

    def __init__(self, store: BaseStore, query: str) -> None:
        self.store = store
        self.query = query
        self.metric = store_metric(store)
        self.vector: list[float] | None = None
        """The query's vector (Postgres), once embedded."""
        self.memory: dict[tuple[str, ...], dict[str, float | None]] | None = None
        """``InMemoryStore``: every fact's similarity per namespace (None: no vector)."""

    def embed(self, namespaces: Sequence[tuple[str, ...]]) -> None:
        """Embed the query (with the embedder's query instruction), once."""
        if self.metric is None or self.vector is not None or self.memory is not None:
            return
        try:
            if isinstance(self.store, InMemoryStore):
                self.memory = memory_scores(self.store, namespaces, self.query)
            else:
                self.vector = list(self.metric.embeddings.embed_query(self.query))
        except Exception as error:
            raise EmbeddingError(f"could not embed the query ({_problem(error)})") from error

    async def aembed(self, namespaces: Sequence[tuple[str, ...]]) -> None:
        """Async :meth:`embed`."""
        if self.metric is None or self.vector is not None or self.memory is not None:
            return
        try:
            if isinstance(self.store, InMemoryStore):
                self.memory = await amemory_scores(self.store, namespaces, self.query)
            else:
                self.vector = list(await self.metric.embeddings.aembed_query(self.query))
        except Exception as error:
            raise EmbeddingError(f"could not embed the query ({_problem(error)})") from error

    def _sql(self) -> VectorSql | None:
        return None if self.metric is None else self.metric.sql

    def _from_memory(self, namespace: tuple[str, ...], limit: int) -> Neighbours | None:
        if self.memory is None:
            return None
        scores = [(k, s) for k, s in self.memory.get(namespace, {}).items() if s is not None]
        return Neighbours(sorted(scores, key=lambda pair: (-pair[1], pair[0]))[:limit])

    def neighbours(self, namespace: tuple[str, ...], limit: int) -> Neighbours:
        """The ``limit`` facts of exactly ``namespace`` nearest the query."""
        if (listed := self._from_memory(namespace, limit)) is not None:
            return listed
        if self.vector is None:
            found = self.store.search(namespace, query=self.query, limit=limit)
            return self._listed(namespace, limit, found)
        return Neighbours(nearest(self.store, namespace, self.vector, limit, self._sql()))

    async def aneighbours(self, namespace: tuple[str, ...], limit: int) -> Neighbours:
        """Async :meth:`neighbours`."""
        if (listed := self._from_memory(namespace, limit)) is not None:
            return listed
        if self.vector is None:
            found = await self.store.asearch(namespace, query=self.query, limit=limit)
            return self._listed(namespace, limit, found)
        return Neighbours(await anearest(self.store, namespace, self.vector, limit, self._sql()))

    @staticmethod
    def _listed(namespace: tuple[str, ...], limit: int, found: Sequence[Any]) -> Neighbours:
        # The list ranks the whole namespace prefix, so the bound comes from all of it.
        scores = [float(item.score) for item in found if item.score is not None]
        floor = min(scores) if scores and len(scores) >= limit else None
        own = [
            (item.key, float(item.score))
            for item in found
            if item.namespace == namespace and item.score is not None
        ]
        return Neighbours(own, floor)

    def _missing(self, near: Neighbours, hits: Sequence[Hit]) -> list[str]:
        listed = {key for key, _ in near.scores}
        return [key for key, _, _ in hits if key not in listed]

    def _bounded(self, near: Neighbours, missing: Sequence[str]) -> dict[str, float]:
        return dict.fromkeys(missing, near.floor if near.floor is not None else 0.0)

    def _texts(self, hits: Sequence[Hit], keys: Sequence[str]) -> dict[str, str]:
        wanted = set(keys)
        return {key: str(value.get(VECTOR_FIELD, "")) for key, _, value in hits if key in wanted}

    def _embedded(
        self, texts: Mapping[str, str], vectors: Mapping[str, list[float]]
    ) -> dict[str, float]:
        assert self.metric is not None and self.vector is not None
        keys = [key for key, text in texts.items() if text in vectors]
        found = _similarities(self.metric, self.vector, [vectors[texts[k]] for k in keys])
        similarity = dict.fromkeys(texts, 0.0)  # no text, no embedding: no similarity
        similarity.update(zip(keys, found, strict=True))
        return similarity

    def _semantic(
        self, near: Neighbours, lookup: Any, similarity: Mapping[str, float], exact: bool
    ) -> Semantic:
        return Semantic(near.scores, lookup.extra, similarity, lookup.extra_values, exact)

    def _in_memory(
        self, namespace: tuple[str, ...], near: Neighbours, lookup: Any, missing: Sequence[str]
    ) -> tuple[Semantic, dict[str, Any]]:
        """The in-memory store's side, and the facts it holds no vector for (to re-embed).

        Those get the namespace's lowest similarity this time (not measured: ``exact`` is
        False); once re-embedded, the next search scores them.
        """
        assert self.memory is not None
        scores = self.memory.get(namespace, {})
        found = {key: s for key in missing if (s := scores.get(key)) is not None}
        values = {
            key: value for key, _, value in lookup.hits if key in missing and key not in found
        }
        if values:
            low = min((s for s in scores.values() if s is not None), default=0.0)
            found.update(dict.fromkeys(values, low))
        return self._semantic(near, lookup, found, not values), values

    def complete(self, namespace: tuple[str, ...], near: Neighbours, lookup: Any) -> Semantic:
        """Both signals for every candidate of ``near`` and of the index ``lookup``.

        ``lookup`` (a ``store.search.index.Lookup`` made with the neighbours as its
        ``extra_keys``) gives their BM25 and values; each BM25 hit that is not a neighbour
        gets its similarity from its stored vector, or, without one, from a vector made
        now and written back.
        """
        near = _indexed(near, lookup.extra)
        missing = self._missing(near, lookup.hits)
        if self.memory is not None:
            semantic, values = self._in_memory(namespace, near, lookup, missing)
            _embedding(reembed, self.store, namespace, values)
            return semantic
        if self.metric is None or self.vector is None:
            return self._semantic(near, lookup, self._bounded(near, missing), False)
        found = scored(self.store, namespace, self.vector, missing, self._sql())
        texts = self._texts(lookup.hits, [key for key in missing if key not in found])
        if texts:
            todo, vectors = self._plan(texts)
            if todo:
                made = _embedding(self.metric.embeddings.embed_documents, todo)
                vectors.update(_remember(self.metric.embeddings, "document", todo, made))
            save(self.store, namespace, self._made(texts, vectors), self._cast())
            found.update(self._embedded(texts, vectors))
        return self._semantic(near, lookup, found, True)

    async def acomplete(
        self, namespace: tuple[str, ...], near: Neighbours, lookup: Any
    ) -> Semantic:
        """Async :meth:`complete`."""
        near = _indexed(near, lookup.extra)
        missing = self._missing(near, lookup.hits)
        if self.memory is not None:
            semantic, values = self._in_memory(namespace, near, lookup, missing)
            await _aembedding(areembed(self.store, namespace, values))
            return semantic
        if self.metric is None or self.vector is None:
            return self._semantic(near, lookup, self._bounded(near, missing), False)
        found = await ascored(self.store, namespace, self.vector, missing, self._sql())
        texts = self._texts(lookup.hits, [key for key in missing if key not in found])
        if texts:
            todo, vectors = self._plan(texts)
            if todo:
                made = await _aembedding(self.metric.embeddings.aembed_documents(todo))
                vectors.update(_remember(self.metric.embeddings, "document", todo, made))
            await asave(self.store, namespace, self._made(texts, vectors), self._cast())
            found.update(self._embedded(texts, vectors))
        return self._semantic(near, lookup, found, True)

    def _plan(self, texts: Mapping[str, str]) -> tuple[list[str], dict[str, list[float]]]:
        """Texts still to embed, and the cached vectors of the others."""
        assert self.metric is not None
        unique = list(dict.fromkeys(t for t in texts.values() if t))
        vectors = _cached(self.metric.embeddings, "document", unique)
        return [t for t in unique if t not in vectors], vectors

    def _cast(self) -> str:
        sql = self._sql()
        return "vector" if sql is None else sql.cast

    @staticmethod
    def _made(
        texts: Mapping[str, str], vectors: Mapping[str, list[float]]
    ) -> dict[str, tuple[str, list[float]]]:
        return {key: (text, vectors[text]) for key, text in texts.items() if text in vectors}


_T = TypeVar("_T")


def _embedding(call: Callable[..., _T], *args: Any) -> _T:
    """``call(*args)``, an embedder failure raised as :class:`EmbeddingError`."""
    try:
        return call(*args)
    except Exception as error:
        raise EmbeddingError(
            f"could not embed facts without a vector ({_problem(error)})"
        ) from error


async def _aembedding(pending: Awaitable[_T]) -> _T:
    """Async :func:`_embedding`."""
    try:
        return await pending
    except Exception as error:
        raise EmbeddingError(
            f"could not embed facts without a vector ({_problem(error)})"
        ) from error


REINDEX_BATCH = 64
"""Facts embedded per call by :func:`reindex`."""


def reindex(
    store: BaseStore, namespace: tuple[str, ...], values: Mapping[str, Mapping[str, Any]]
) -> int:
    """Embed and store a vector for each fact of ``values`` (key -> stored value) lacking one.

    Returns how many were embedded; 0 when the Store has no vector index we can write to.
    Embedder errors propagate (nothing is half-written: each batch is saved whole).
    """
    metric = store_metric(store)
    if metric is None:
        return 0
    contents = {key: str(value.get(VECTOR_FIELD, "")) for key, value in values.items()}
    keys = unembedded(store, namespace, [key for key, text in contents.items() if text])
    if isinstance(store, InMemoryStore):  # it embeds what it stores
        for start in range(0, len(keys), REINDEX_BATCH):
            chunk = keys[start : start + REINDEX_BATCH]
            reembed(store, namespace, {key: values[key] for key in chunk})
        return len(keys)
    cast = "vector" if metric.sql is None else metric.sql.cast
    for start in range(0, len(keys), REINDEX_BATCH):
        chunk = keys[start : start + REINDEX_BATCH]
        vectors = metric.embeddings.embed_documents([contents[key] for key in chunk])
        if len(vectors) != len(chunk):
            raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(chunk)} texts")
        made = {key: (contents[key], v) for key, v in zip(chunk, vectors, strict=True)}
        save(store, namespace, made, cast)
    return len(keys)
