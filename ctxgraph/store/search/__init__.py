"""Fact search: the tokenizer, BM25, per-namespace indexes and hybrid fusion."""

from ctxgraph.store.search.scoring import (
    CONFIDENCE_WEIGHT,
    DECAY_GRACE_DAYS,
    DECAY_RATE,
    AgeFrom,
    Bm25Index,
    age_days,
    final_score,
    relevance_scores,
    time_factor,
    tokenize,
)

__all__ = [
    "CONFIDENCE_WEIGHT",
    "DECAY_GRACE_DAYS",
    "DECAY_RATE",
    "AgeFrom",
    "Bm25Index",
    "age_days",
    "final_score",
    "relevance_scores",
    "time_factor",
    "tokenize",
]
