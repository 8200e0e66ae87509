"""Turns BM25 (and semantic) candidates of fact namespaces into ranked ``Fact`` records.

``Ranker`` is the one seam every ranked read of long-term memory goes through: the memory
view, the ``memory_search`` tool, ``ctxgraph memory search`` and ``MemoryRepository.search``
all order their candidates with the repository's ranker, ``rank`` unless one is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.facts import Fact, FactScope, fact_from_value
from ctxgraph.store.search.hybrid import Semantic, fuse
from ctxgraph.store.search.index import Hit
from ctxgraph.store.search.scoring import AgeFrom, days_between, score_at_age, utc_micros

__all__ = [
    "LeadingFact",
    "Ranker",
    "Source",
    "age_from_of",
    "check_search",
    "leading_facts",
    "rank",
    "scored_candidates",
]

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


def age_from_of(
    context: Context, explicit: AgeFrom | None, settings: Settings | None = None
) -> AgeFrom:
    """``explicit``, else ``memory_age_from`` of the run's effective settings.

    The effective settings are ``settings`` (the graph's, default ``Settings()``) with the
    fields the context's ``Context.settings`` set on top, as every node sees them.
    """
    if explicit is not None:
        return explicit
    base = settings if settings is not None else Settings()
    override = context.settings
    return (base if override is None else override.merged_onto(base)).memory_age_from


@runtime_checkable
class Ranker(Protocol):
    """Orders the candidates of a memory search: the best ``top_k`` facts, best first.

    ``sources`` holds each namespace's candidates (BM25 hits and, in hybrid mode, semantic
    neighbours); ``scored_candidates`` turns them into ``Fact`` records scored as ``rank``
    scores them. ``now`` is the moment ages are measured at (None: the current time),
    ``age_from`` which stored moment ages a fact, ``query`` the search text. Each returned
    fact's ``score`` is shown by ``memory_search`` and ``ctxgraph memory search``. ``rank``
    (today's ``final_score`` order) is the default; a plain function of this signature is a
    ranker.
    """

    def __call__(
        self,
        sources: Sequence[Source],
        top_k: int,
        now: datetime | None,
        age_from: AgeFrom,
        *,
        query: str,
    ) -> list[Fact]:
        """The best ``top_k`` candidates, best first."""
        ...


_Scored = tuple[float, int, str, FactScope, Mapping[str, Any]]


def _scored(sources: Sequence[Source], now: datetime | None, age_from: AgeFrom) -> list[_Scored]:
    """Every candidate with its ``final_score``, best first.

    In hybrid mode the candidates of every source are fused on one scale
    (``store.search.hybrid.fuse``) and aged by ``fused_time_factor``. Ties go to the newer
    fact, then to the smaller id.
    """
    current = utc_micros(now if now is not None else datetime.now(UTC))
    moment_key = "confirmed_at" if age_from == "confirmed" else "created_at"
    hybrid = [source for source in sources if source.semantic is not None]
    fused = iter(
        fuse([([(k, raw) for k, raw, _ in s.hits], s.semantic) for s in hybrid if s.semantic])
    )
    scored: list[_Scored] = []
    for source in sources:
        values: dict[str, Mapping[str, Any]] = {key: value for key, _, value in source.hits}
        if source.semantic is None:
            raw_scores = {key: raw for key, raw, _ in source.hits}
        else:
            raw_scores = next(fused)
            for key, value in source.semantic.values.items():
                values.setdefault(key, value)
        for key, raw in raw_scores.items():
            if key not in values:
                continue
            # final_score from the stored value (times parsed once per process); only the
            # winners become Fact records.
            value = values[key]
            created = utc_micros(value["created_at"])
            moment = created if moment_key == "created_at" else utc_micros(value[moment_key])
            days = days_between(moment, current)
            confidence = float(value.get("confidence", 0.0))
            score = score_at_age(raw, confidence, days, fused=source.semantic is not None)
            scored.append((score, created, key, source.scope, value))
    scored.sort(key=lambda entry: (-entry[0], -entry[1], entry[2]))
    return scored


def _facts(scored: Sequence[_Scored]) -> list[Fact]:
    return [
        replace(fact_from_value(key, value, scope), score=score)
        for score, _, key, scope, value in scored
    ]


def scored_candidates(
    sources: Sequence[Source], now: datetime | None, age_from: AgeFrom
) -> list[Fact]:
    """Every candidate of ``sources`` as a ``Fact`` with its ``final_score``, best first.

    The order ``rank`` keeps the first ``top_k`` of; a ``Ranker`` may reorder or rescore it.
    """
    return _facts(_scored(sources, now, age_from))


def rank(
    sources: Sequence[Source],
    top_k: int,
    now: datetime | None,
    age_from: AgeFrom,
    *,
    query: str = "",
) -> list[Fact]:
    """Every candidate scored by ``final_score``; the best ``top_k``, each with its score.

    Ties go to the newer fact, then to the smaller id. The default ``Ranker``; ``query``
    is not needed, the candidates were chosen for it.
    """
    return _facts(_scored(sources, now, age_from)[:top_k])


def leading_facts(matches: Sequence[Fact], leading: Sequence[LeadingFact]) -> list[Fact]:
    """``matches`` followed by the ``leading`` facts not among them, without duplicates."""
    chosen: dict[tuple[str, str], Fact] = {(f.scope, f.id): f for f in matches}
    for scope, key, value in leading:
        if (scope, key) not in chosen:
            chosen[(scope, key)] = fact_from_value(key, value, scope)
    return list(chosen.values())
