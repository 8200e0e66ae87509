"""Turns BM25 (and semantic) candidates of fact namespaces into ranked ``Fact`` records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from langgraph.store.base import SearchItem

from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.facts import Fact, FactScope, fact_from_value
from ctxgraph.store.search.hybrid import fuse
from ctxgraph.store.search.index import Hit
from ctxgraph.store.search.scoring import AgeFrom, final_score

__all__ = ["LeadingFact", "Source", "age_from_of", "check_search", "leading_facts", "rank"]

LeadingFact = tuple[FactScope, str, Mapping[str, Any]]
"""A fact offered regardless of the query: its scope, key and stored value."""


@dataclass(frozen=True)
class Source:
    """One namespace's candidates: BM25 hits and, in hybrid mode, semantic neighbours."""

    scope: FactScope
    hits: list[Hit]
    semantic: list[SearchItem] | None = None


def check_search(query: object, top_k: object) -> None:
    """Raise ValueError naming a query that is not a string or a top_k below 1."""
    if not isinstance(query, str):
        raise ValueError(f"a memory search query must be a string, got {query!r}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(f"top_k must be a whole number of at least 1, got {top_k!r}")


def age_from_of(context: Context, explicit: AgeFrom | None) -> AgeFrom:
    """``explicit``, else the context's ``Settings.memory_age_from``, else the default."""
    if explicit is not None:
        return explicit
    return (context.settings or Settings()).memory_age_from


def rank(
    sources: Sequence[Source], top_k: int, now: datetime | None, age_from: AgeFrom
) -> list[Fact]:
    """Every candidate scored by ``final_score``; the best ``top_k``, each with its score.

    Ties go to the newer fact, then to the smaller id.
    """
    scored: list[Fact] = []
    for source in sources:
        values: dict[str, Mapping[str, Any]] = {key: value for key, _, value in source.hits}
        lexical = [(key, raw) for key, raw, _ in source.hits]
        if source.semantic is None:
            raw_scores = dict(lexical)
        else:
            near = [item for item in source.semantic if (item.score or 0.0) > 0]
            values.update({item.key: item.value for item in near if item.key not in values})
            raw_scores = fuse(lexical, near)
        for key, raw in raw_scores.items():
            fact = fact_from_value(key, values[key], source.scope)
            moment = fact.confirmed_at if age_from == "confirmed" else fact.created_at
            scored.append(replace(fact, score=final_score(raw, fact.confidence, moment, now)))
    scored.sort(key=lambda fact: (-fact.score, -fact.created_at.timestamp(), fact.id))
    return scored[:top_k]


def leading_facts(matches: Sequence[Fact], leading: Sequence[LeadingFact]) -> list[Fact]:
    """``matches`` followed by the ``leading`` facts not among them, without duplicates."""
    chosen: dict[tuple[str, str], Fact] = {(f.scope, f.id): f for f in matches}
    for scope, key, value in leading:
        if (scope, key) not in chosen:
            chosen[(scope, key)] = fact_from_value(key, value, scope)
    return list(chosen.values())
