"""Turns BM25 (and semantic) candidates of fact namespaces into ranked ``Fact`` records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.facts import Fact, FactScope, fact_from_value
from ctxgraph.store.search.hybrid import Semantic, fuse
from ctxgraph.store.search.index import Hit
from ctxgraph.store.search.scoring import AgeFrom, days_between, score_at_age, utc_micros

__all__ = ["LeadingFact", "Source", "age_from_of", "check_search", "leading_facts", "rank"]

LeadingFact = tuple[FactScope, str, Mapping[str, Any]]
"""A fact offered regardless of the query: its scope, key and stored value."""


@dataclass(frozen=True)
class Source:
    """One namespace's candidates: BM25 hits and, in hybrid mode, semantic neighbours.

    ``semantic`` also carries the BM25 of the neighbours and the similarity of the hits
    that the other list missed, so every candidate is fused on both signals.
    """

    scope: FactScope
    hits: list[Hit]
    semantic: Semantic | None = None


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
    current = utc_micros(now if now is not None else datetime.now(UTC))
    moment_key = "confirmed_at" if age_from == "confirmed" else "created_at"
    scored: list[tuple[float, int, str, FactScope, Mapping[str, Any]]] = []
    for source in sources:
        values: dict[str, Mapping[str, Any]] = {key: value for key, _, value in source.hits}
        lexical = [(key, raw) for key, raw, _ in source.hits]
        if source.semantic is None:
            raw_scores = dict(lexical)
        else:
            raw_scores = fuse(lexical, source.semantic)
            near = {item.key: item.value for item in source.semantic.items}
            values.update({key: near[key] for key in raw_scores if key not in values})
        for key, raw in raw_scores.items():
            # final_score from the stored value (times parsed once per process); only the
            # winners become Fact records.
            value = values[key]
            created = utc_micros(value["created_at"])
            moment = created if moment_key == "created_at" else utc_micros(value[moment_key])
            days = days_between(moment, current)
            score = score_at_age(raw, float(value.get("confidence", 0.0)), days)
            scored.append((score, created, key, source.scope, value))
    scored.sort(key=lambda entry: (-entry[0], -entry[1], entry[2]))
    return [
        replace(fact_from_value(key, value, scope), score=score)
        for score, _, key, scope, value in scored[:top_k]
    ]


def leading_facts(matches: Sequence[Fact], leading: Sequence[LeadingFact]) -> list[Fact]:
    """``matches`` followed by the ``leading`` facts not among them, without duplicates."""
    chosen: dict[tuple[str, str], Fact] = {(f.scope, f.id): f for f in matches}
    for scope, key, value in leading:
        if (scope, key) not in chosen:
            chosen[(scope, key)] = fact_from_value(key, value, scope)
    return list(chosen.values())
