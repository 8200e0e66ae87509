"""Which remembered facts the auto-mode memory view carries for the current turn.

``MemoryRepository.memory_candidates`` offers the matches of the turn's query (best first,
each with the ranker's ``score``), then the most confident corrections and facts whatever
the query. ``select_view_facts`` keeps, in that order:

- every correction (category ``correction`` or ``is_correction``): the view always shows
  them, from their own pool (``correction_budget``);
- every preference (category ``preference``): a standing instruction about how to answer,
  not about a topic, so it applies to any turn;
- any other fact whose score reaches the floor ``min_score``.

Facts besides corrections are capped at ``max_facts``, taken in candidate order, so the
matches come before the standing preferences that do not match. The renderer then packs
what is kept into ``memory_budget``. ``min_score=0`` and ``max_facts=0`` keep every
candidate (the view fills its budget).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TypeVar

from ctxgraph.store.memory.facts import Fact

__all__ = [
    "CORRECTION",
    "NO_CAP",
    "STANDING",
    "is_correction",
    "select_view_facts",
    "view_clock",
]

CORRECTION = "correction"
STANDING = frozenset({"preference"})
"""Categories shown regardless of the query (besides corrections); they count in the cap."""
NO_CAP = 0
"""``max_facts`` value that sets no cap on the count."""

F = TypeVar("F", bound=Fact)


def is_correction(fact: Fact) -> bool:
    """Whether ``fact`` is a correction (its category, or its ``is_correction`` flag)."""
    return fact.category == CORRECTION or fact.is_correction


def _floor(facts: Sequence[Fact], min_score: float) -> float | None:
    """The least score a fact needs: ``min_score`` times the best score; None: no floor."""
    if min_score <= 0:
        return None
    best = max((fact.score for fact in facts), default=0.0)
    # No fact with a positive score: nothing matched the query, only standing facts show.
    return min_score * best if best > 0 else float("inf")


def _relevant(fact: Fact, floor: float | None) -> bool:
    """Whether ``fact`` may enter the view for this turn, before the cap."""
    if floor is None or fact.category in STANDING:
        return True
    # Only a match of the query carries a score; the facts offered whatever the query have
    # 0, so confidence alone never lets one in.
    return fact.score > 0 and fact.score >= floor


def select_view_facts(facts: Sequence[F], *, min_score: float, max_facts: int) -> list[F]:
    """The facts of ``facts`` the view may show, in their order (see the module doc).

    Args:
        facts: ``memory_candidates``: matches best first, then the facts offered whatever
            the query.
        min_score: The floor, as a share of the best match's ``score`` (the ranker's, as
            ``memory_search`` shows it): a fact other than a correction or a preference is
            kept if its score is at least ``min_score`` times the best one. 0 keeps every
            fact; 1 only the best matches.
        max_facts: Most facts besides corrections; ``NO_CAP`` (0) sets no cap.

    Raises:
        ValueError: ``min_score`` is not a number from 0 to 1, or ``max_facts`` is not a
            whole number of at least 0.

    """
    if isinstance(min_score, bool) or not isinstance(min_score, int | float):
        raise ValueError(f"min_score must be a number from 0 to 1, got {min_score!r}")
    if not 0 <= min_score <= 1:
        raise ValueError(f"min_score must be a number from 0 to 1, got {min_score!r}")
    if isinstance(max_facts, bool) or not isinstance(max_facts, int) or max_facts < 0:
        raise ValueError(f"max_facts must be a whole number of at least 0, got {max_facts!r}")
    floor = _floor([f for f in facts if not is_correction(f)], min_score)
    chosen: list[F] = []
    others = 0
    for fact in facts:
        if is_correction(fact):
            chosen.append(fact)
        elif _relevant(fact, floor) and (max_facts == NO_CAP or others < max_facts):
            chosen.append(fact)
            others += 1
    return chosen


def view_clock(moment: datetime | None = None) -> datetime:
    """The start of the UTC day of ``moment`` (default: now): the moment the view ages facts.

    Ages, and so the time decay and the ranking, then change only at midnight UTC, so two
    turns of one day with the same query and the same facts get byte-identical views.
    """
    current = moment if moment is not None else datetime.now(UTC)
    if current.tzinfo is None:
        current = current.replace(tzinfo=UTC)
    return current.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
