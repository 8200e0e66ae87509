"""How the memory repository searches: candidates per namespace, then the ranker's order.

Lexical (BM25) candidates, joined by semantic neighbours when the Store has a vector
index (``store.search.hybrid``), are gathered as a plan (a flow, ``state.sans_io``) that
``MemoryRepository`` runs with ``run`` or ``arun``; the ranker orders them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from langgraph.store.base import BaseStore

from ctxgraph.state.context import Context
from ctxgraph.state.sans_io import Flow, io
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.facts import Fact
from ctxgraph.store.memory.ranking import (
    LeadingFact,
    Ranker,
    Source,
    age_from_of,
    check_search,
    leading_facts,
)
from ctxgraph.store.memory.scopes import search_scopes
from ctxgraph.store.search.hybrid import (
    EmbeddingError,
    QuerySimilarity,
    lexical_fallback,
    reindex,
    semantic_enabled,
)
from ctxgraph.store.search.index import fact_index_cache
from ctxgraph.store.search.scoring import AgeFrom, tokenize

__all__ = ["CANDIDATES", "MemorySearch", "candidate_pool"]

CANDIDATES = 64
"""Facts of each kind (corrections, matches, most confident) offered to the memory view."""

Gathered = tuple[list[Source], list[LeadingFact]]
"""The candidates of each namespace and the leading facts (see ``MemorySearch.sources``)."""


def candidate_pool(top_k: int) -> int:
    """Candidates per namespace reranked for a search of ``top_k`` results.

    At least twice ``CANDIDATES``, so ``search`` (any ``top_k`` up to ``CANDIDATES``) and
    ``memory_candidates`` rerank the same facts and agree on order.
    """
    return max(2 * top_k, 2 * CANDIDATES)


@dataclass(frozen=True)
class MemorySearch:
    """Searches the facts of a context in ``store`` and hands the candidates to ``ranker``."""

    store: BaseStore
    ranker: Ranker
    """Orders the candidates (``ranking.Ranker``)."""
    settings: Settings | None
    """The graph's settings, under a context's ``Context.settings`` (ages facts)."""

    def search(
        self,
        context: Context,
        query: str,
        top_k: int,
        now: datetime | None,
        age_from: AgeFrom | None,
    ) -> Flow[list[Fact]]:
        """The best ``top_k`` facts for ``query`` (``MemoryRepository.search``)."""
        check_search(query, top_k)
        sources, _ = yield from self.sources(context, query, candidate_pool(top_k))
        return self.ranked(context, query, sources, top_k, now, age_from)

    def memory_candidates(
        self,
        context: Context,
        query: str | None,
        limit: int,
        now: datetime | None,
        age_from: AgeFrom | None,
    ) -> Flow[list[Fact]]:
        """The facts the memory view offers (``MemoryRepository.memory_candidates``)."""
        text = query or ""
        sources, first = yield from self.sources(
            context, text, candidate_pool(limit), leading=limit
        )
        return leading_facts(self.ranked(context, text, sources, limit, now, age_from), first)

    def ranked(
        self,
        context: Context,
        query: str,
        sources: Sequence[Source],
        top_k: int,
        now: datetime | None,
        age_from: AgeFrom | None,
    ) -> list[Fact]:
        """The ranker's best ``top_k`` of ``sources`` (the one place the ranker is called).

        Raises:
            TypeError: The ranker did not return a list of ``Fact`` records.

        """
        moment = age_from_of(context, age_from, self.settings)
        ranked = self.ranker(sources, top_k, now, moment, query=query)
        if not isinstance(ranked, list) or not all(isinstance(f, Fact) for f in ranked):
            raise TypeError(
                f"the memory ranker {self.ranker!r} must return a list of Fact records, "
                f"got {ranked!r:.200}"
            )
        return ranked[:top_k]

    def reindex(self, context: Context) -> int:
        """Embed the facts of the context that have no vector; how many were."""
        embedded = 0
        for namespace, _ in search_scopes(context):
            values = dict(fact_index_cache.values(self.store, namespace))
            embedded += reindex(self.store, namespace, values)
        return embedded

    def sources(self, context: Context, query: str, limit: int, leading: int = 0) -> Flow[Gathered]:
        """Candidates per namespace, each namespace refreshed once.

        ``limit`` BM25 (and semantic) candidates for ``query`` and, with ``leading``, that
        many of the most confident corrections and facts. In hybrid mode the query is
        embedded once and the nearest stored vectors are asked for first, so the index
        refresh that follows covers them and gives their exact BM25; the BM25 hits they
        miss are scored against the same query vector. When the embedder fails, this
        search is lexical (one warning).
        """
        terms = tokenize(query)
        similarity = None
        if semantic_enabled(self.store) and bool(query.strip()):
            similarity = QuerySimilarity(self.store, query)
        if similarity is not None:
            try:
                spaces = [namespace for namespace, _ in search_scopes(context)]
                yield from io(similarity.embed, similarity.aembed, spaces)
                return (yield from self._gathered(context, terms, similarity, limit, leading))
            except EmbeddingError as error:
                lexical_fallback(error)
        return (yield from self._gathered(context, terms, None, limit, leading))

    def _gathered(
        self,
        context: Context,
        terms: Sequence[str],
        similarity: QuerySimilarity | None,
        limit: int,
        leading: int,
    ) -> Flow[Gathered]:
        sources: list[Source] = []
        first: list[LeadingFact] = []
        for namespace, scope in search_scopes(context):
            near = None
            if similarity is not None:
                near = yield from io(
                    similarity.neighbours, similarity.aneighbours, namespace, limit
                )
            found = yield from io(
                fact_index_cache.lookup,
                fact_index_cache.alookup,
                self.store,
                namespace,
                terms,
                limit,
                leading=leading,
                extra_keys=[] if near is None else [key for key, _ in near.scores],
            )
            semantic = None
            if similarity is not None and near is not None:
                semantic = yield from io(
                    similarity.complete, similarity.acomplete, namespace, near, found
                )
            sources.append(Source(scope, found.hits, semantic))
            first += [(scope, key, value) for key, value in found.leading]
        return sources, first
