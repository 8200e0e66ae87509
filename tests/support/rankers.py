"""Rankers the ranker tests plug in, importable by ``ctxgraph memory search --ranker``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ctxgraph.store.memory.facts import Fact
from ctxgraph.store.memory.ranking import Source, scored_candidates
from ctxgraph.store.search.scoring import AgeFrom

NOT_A_RANKER = 42
"""An attribute ``--ranker`` refuses: it is not callable."""


def by_content(
    sources: Sequence[Source],
    top_k: int,
    now: datetime | None,
    age_from: AgeFrom,
    *,
    query: str,
) -> list[Fact]:
    """Every candidate ordered by its text, whatever its score (not today's order)."""
    return sorted(scored_candidates(sources, now, age_from), key=lambda f: f.content)[:top_k]


def reverse(
    sources: Sequence[Source],
    top_k: int,
    now: datetime | None,
    age_from: AgeFrom,
    *,
    query: str,
) -> list[Fact]:
    """Today's order of every candidate, reversed: the weakest match first."""
    return list(reversed(scored_candidates(sources, now, age_from)))[:top_k]


class Sorter:
    """A ranker object: the best ``top_k`` by a field of the fact, descending."""

    def __init__(self, field: str) -> None:
        self.field = field
        self.queries: list[str] = []

    def __call__(
        self,
        sources: Sequence[Source],
        top_k: int,
        now: datetime | None,
        age_from: AgeFrom,
        *,
        query: str,
    ) -> list[Fact]:
        self.queries.append(query)
        facts = scored_candidates(sources, now, age_from)
        return sorted(facts, key=lambda f: getattr(f, self.field), reverse=True)[:top_k]


by_confidence = Sorter("confidence")
