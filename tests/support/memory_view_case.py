"""Sixty remembered facts and an order-lookup question, of which three facts are about it.

The other facts are about the user's life and work, long enough (about 40 tokens a line)
that a view filling its 2,000-token budget carries about fifty of them. One of them
shares a word with the question ("orders") without being about it; one is a correction
and one a preference, both shown whatever the question.
"""

from __future__ import annotations

from datetime import datetime

from ctxgraph.state.context import Context
from ctxgraph.store.memory.repository import MemoryRepository

QUESTION = "Can you look up order 7731 from Acme GmbH and tell me when it ships?"

RELEVANT = (
    "Acme GmbH is a wholesale customer whose orders ship from the Rotterdam warehouse on "
    "Tuesdays and Thursdays only.",
    "Order 7731 was placed by the Berlin office of Acme GmbH and is billed net 30 under the "
    "2024 wholesale contract.",
    "When asked when an order ships, give the carrier's pickup date, not the promised "
    "delivery date.",
)
"""The three facts about the question, best match first."""

WEAK_MATCH = "Orders coffee beans from a small roaster in Lisbon every month and grinds them fresh."
"""Shares "orders" with the question and is not about it."""

CORRECTION = "The finance standup moved to 9:30 on weekdays, not 10:00 as noted before."
PREFERENCE = "Prefers answers that give the figures first and the explanation after them."

_HOBBIES = (
    "restores vintage racing bicycles", "grows chili peppers on the balcony",
    "sings bass in a community choir", "builds wooden model sailboats",
    "runs half marathons in autumn", "bakes sourdough bread on weekends",
    "collects first editions of Nordic crime novels", "plays chess at a club downtown",
    "paints watercolour landscapes", "keeps bees at a friend's allotment",
    "practises judo twice a week", "repairs old film cameras",
    "learns Portuguese with a tutor", "hikes the Alps every summer",
    "brews kombucha in the kitchen", "photographs birds at the lake",
    "volunteers at the animal shelter", "restores antique clocks",
)  # fmt: skip
_DETAILS = (
    "and talks about it with friends from the neighbourhood",
    "and writes short notes about each session in a paper journal",
    "and plans to spend more evenings on it during the winter months",
)


def unrelated() -> list[str]:
    """Fifty-four facts that share no word with ``QUESTION``."""
    facts = []
    for detail in _DETAILS:
        for hobby in _HOBBIES:
            facts.append(
                f"In the little free time between quarterly reviews the person {hobby} {detail}."
            )
    return facts


def all_facts() -> list[str]:
    """Every content of the case except the correction and the preference (58)."""
    return [*RELEVANT, WEAK_MATCH, *unrelated()]


def seed(
    repository: MemoryRepository, context: Context, created_at: datetime | None = None
) -> None:
    """Store the sixty facts for ``context``."""
    for index, content in enumerate(all_facts()):
        repository.add_fact(
            context, content, key=f"fact_{index:02d}", confidence=0.9, created_at=created_at
        )
    repository.add_fact(
        context, CORRECTION, key="standup_time", category="correction", created_at=created_at
    )
    repository.add_fact(
        context,
        PREFERENCE,
        key="answer_order",
        category="preference",
        confidence=0.85,
        created_at=created_at,
    )
