"""Fusion of lexical and semantic relevance on one scale, over every searched namespace."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SEMANTIC_WEIGHT", "Semantic", "fuse"]

SEMANTIC_WEIGHT = 0.5
"""Share of the fused relevance that comes from (normalised) semantic similarity."""


@dataclass(frozen=True)
class Semantic:
    """The vector side of one namespace's candidates, completed for the union."""

    near: list[tuple[str, float]]
    """The nearest facts of the namespace and their similarity, best first."""
    bm25: Mapping[str, float] = field(default_factory=dict)
    """Raw BM25 (FTS5 sign; 0.0 when no query term occurs) of neighbours, from the index."""
    similarity: Mapping[str, float] = field(default_factory=dict)
    """Similarity of the BM25 matches that are not neighbours."""
    values: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Stored values of the neighbours, as the index holds them."""
    exact: bool = True
    """Whether ``similarity`` was measured (else an upper bound, see ``store.search.hybrid``)."""


def _union(
    lexical: Sequence[tuple[str, float]], semantic: Semantic
) -> tuple[dict[str, float], dict[str, float]]:
    """Relevance (positive BM25) and similarity of every candidate of one namespace."""
    relevance = {key: -raw for key, raw in lexical}
    similarity = dict(semantic.near)
    for key in similarity:
        if key not in relevance:
            if key not in semantic.bm25:
                raise ValueError(f"no BM25 score for the semantic candidate {key!r}")
            relevance[key] = -semantic.bm25[key]
    for key in relevance:
        if key not in similarity:
            if key not in semantic.similarity:
                raise ValueError(f"no similarity for the lexical candidate {key!r}")
            similarity[key] = semantic.similarity[key]
    return relevance, similarity


def fuse(
    sources: Sequence[tuple[Sequence[tuple[str, float]], Semantic]],
    *,
    weight: float = SEMANTIC_WEIGHT,
) -> list[dict[str, float]]:
    """Per source, key -> fused raw score (negative, FTS5 sign) of each candidate.

    ``sources`` holds one ``(lexical, semantic)`` pair per namespace searched: ``lexical``
    the ``(key, raw_bm25)`` pairs ``Bm25Index.search`` returned, ``semantic`` the
    neighbours and the missing signal of each candidate. Both signals are normalised over
    the candidates of *every* namespace, so a weak project match never ties a strong user
    match: BM25 divided by the best BM25, similarity min-max scaled to 0..1. The fused
    relevance is scaled back to BM25 units (times the best BM25; 1 when nothing matched
    lexically). A candidate lacking either signal is a ValueError: neither is taken as 0.
    """
    if not 0 <= weight <= 1:
        raise ValueError(f"the semantic weight must be within 0..1, got {weight!r}")
    unions = [_union(lexical, semantic) for lexical, semantic in sources]
    best = max((r for relevance, _ in unions for r in relevance.values()), default=0.0)
    every = [s for _, similarity in unions for s in similarity.values()]
    low, high = (min(every), max(every)) if every else (0.0, 0.0)
    spread = high - low
    scale = best if best > 0 else 1.0
    fused: list[dict[str, float]] = []
    for relevance, similarity in unions:
        fused.append(
            {
                key: -scale
                * (
                    (1 - weight) * (value / best if best > 0 else 0.0)
                    + weight * ((similarity[key] - low) / spread if spread > 0 else 0.0)
                )
                for key, value in relevance.items()
            }
        )
    return fused
