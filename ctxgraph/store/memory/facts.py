"""A remembered fact as read back from the Store, and how a stored value becomes one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = ["Fact", "FactScope", "fact_from_value"]

FactScope = Literal["user", "project"]
"""Where a fact lives: the user's facts for one agent, or a project's facts."""


@dataclass(frozen=True)
class Fact:
    """One remembered fact, as read back from the Store."""

    id: str
    key: str
    content: str
    category: str
    confidence: float
    created_at: datetime
    confirmed_at: datetime
    last_seen_at: datetime
    source_thread: str | None
    evidence: str | None
    scope: FactScope
    history: list[dict[str, str]] = field(default_factory=list)
    is_correction: bool = False
    score: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view, timestamps as ISO strings."""
        return {
            "id": self.id,
            "key": self.key,
            "content": self.content,
            "category": self.category,
            "confidence": self.confidence,
            "created_at": self.created_at.isoformat(),
            "confirmed_at": self.confirmed_at.isoformat(),
            "last_seen_at": self.last_seen_at.isoformat(),
            "source_thread": self.source_thread,
            "evidence": self.evidence,
            "scope": self.scope,
            "history": [dict(entry) for entry in self.history],
            "is_correction": self.is_correction,
        }


def fact_from_value(key: str, value: Mapping[str, Any], scope: FactScope) -> Fact:
    """The ``Fact`` stored under ``key`` with ``value`` in a namespace of ``scope``."""
    return Fact(
        id=key,
        key=str(value.get("key", key)),
        content=str(value["content"]),
        category=str(value.get("category", "context")),
        confidence=float(value.get("confidence", 0.0)),
        created_at=datetime.fromisoformat(value["created_at"]),
        confirmed_at=datetime.fromisoformat(value["confirmed_at"]),
        last_seen_at=datetime.fromisoformat(value.get("last_seen_at", value["created_at"])),
        source_thread=value.get("source_thread"),
        evidence=value.get("evidence"),
        scope=scope,
        history=[dict(entry) for entry in value.get("history", [])],
        is_correction=bool(value.get("is_correction", False)),
    )
