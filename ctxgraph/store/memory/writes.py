"""What a direct write of long-term memory stores: the values and plans, without any I/O.

The repository's sync and async methods share these and differ only in how they call the
Store (as ``nodes/memory/node.py`` does): a plan says which record it reads, and, given
what the Store returned, which value it writes and which ``Fact`` the caller gets.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, get_args

from langgraph.store.base import Item, PutOp

from ctxgraph.store.memory.facts import (
    Fact,
    FactScope,
    Problem,
    Provenance,
    fact_from_value,
    parse_fact,
    parse_profile,
    report_problem,
)
from ctxgraph.store.memory.rules import (
    ProfileUpdate,
    Section,
    normalize_text,
    slug_key,
    static_rejection,
)
from ctxgraph.store.search.hybrid import FACT_INDEX_FIELDS
from ctxgraph.store.text_codec import decoded, encoded

__all__ = [
    "HISTORY_LIMIT",
    "PROFILE_KEY",
    "PROFILE_SECTIONS",
    "SECTION_LIMIT",
    "FactWrite",
    "default_key",
    "merge_section",
    "merged_value",
    "profile_problem",
    "profile_sections",
    "profile_value",
    "utc",
]

HISTORY_LIMIT = 5
"""Previous contents kept per fact key."""

SECTION_LIMIT = 600
"""Characters kept per merged profile section; the oldest sentences are dropped first."""

PROFILE_KEY = "profile"
PROFILE_SECTIONS: tuple[str, ...] = get_args(Section)
_SENTENCE = re.compile(r"[^.!?。！？\n]+(?:[.!?。！？]+|\n|$)")


def utc(moment: datetime | None) -> datetime:
    """``moment`` in UTC (a naive one is taken as UTC); the current time for None."""
    if moment is None:
        return datetime.now(UTC)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _same(a: str, b: str) -> bool:
    """Whether two contents say the same, ignoring case and whitespace."""
    return normalize_text(a).casefold() == normalize_text(b).casefold()


def default_key(content: str) -> str:
    """The key of a fact stored without one: a slug of the content and a digest of it."""
    slug = slug_key(content)[:40].strip("_")
    digest = hashlib.sha256(normalize_text(content).casefold().encode()).hexdigest()[:10]
    return f"{slug}_{digest}" if slug else f"fact_{digest}"


def merged_value(
    stored: Mapping[str, Any] | None,
    *,
    key: str,
    content: str,
    category: str,
    confidence: float,
    now: datetime,
    source_thread: str | None,
    evidence: str | None,
    confirmed: bool,
    provenance: Provenance = "api",
) -> dict[str, Any]:
    """The value to store under ``key`` after seeing ``content`` again (or for the first time).

    ``stored`` must be a well-formed fact value (``parse_fact``). Same content: confidence
    and created_at are kept; only a confirmation raises the confidence and moves
    confirmed_at; extraction (the acceptance gate) seeing it makes it ``"extraction"``
    with its evidence, any other writer keeps the stored provenance. New content:
    replaces the old one, which goes to history, and takes the new confidence and
    ``provenance``.
    """
    stamp = now.isoformat()
    if stored is not None and _same(str(stored["content"]), content):
        value = dict(stored)
        value["last_seen_at"] = stamp
        value["is_correction"] = bool(stored.get("is_correction")) or category == "correction"
        if provenance == "extraction":
            value.update(provenance="extraction", source_thread=source_thread, evidence=evidence)
        if confirmed:
            value["confidence"] = max(float(stored["confidence"]), confidence)
            value["confirmed_at"] = stamp
        return value
    history: list[dict[str, str]] = []
    if stored is not None:
        history = [*stored.get("history", []), {"content": stored["content"], "replaced_at": stamp}]
    return {
        "key": key,
        "content": content,
        "category": category,
        "confidence": confidence,
        "created_at": stamp,
        "confirmed_at": stamp,
        "last_seen_at": stamp,
        "source_thread": source_thread,
        "evidence": evidence,
        "history": history[-HISTORY_LIMIT:],
        "is_correction": category == "correction",
        "provenance": provenance,
    }


def _sentences(text: str) -> list[str]:
    return [s for s in (normalize_text(m) for m in _SENTENCE.findall(text)) if s]


def merge_section(existing: str, addition: str, *, limit: int = SECTION_LIMIT) -> str:
    """Append the new sentences of ``addition`` to ``existing``, dropping the oldest past limit."""
    sentences: list[str] = []
    seen: set[str] = set()
    for sentence in [*_sentences(existing), *_sentences(addition)]:
        marker = sentence.casefold()
        if marker not in seen:
            seen.add(marker)
            sentences.append(sentence)
    while len(sentences) > 1 and len(" ".join(sentences)) > limit:
        sentences.pop(0)
    return " ".join(sentences)[:limit]


def profile_value(stored: Item | None, update: ProfileUpdate, now: datetime) -> dict[str, Any]:
    """The profile value to store after ``update``; ValueError for an update never stored.

    A malformed stored profile (reported once) is replaced, as if there were none.
    """
    reason = static_rejection(update)
    if reason is not None:
        raise ValueError(f"refusing to store profile update: {reason}")
    sections = profile_sections(stored)
    if update.section == "top_of_mind":
        sections["top_of_mind"] = normalize_text(update.content)[:SECTION_LIMIT]
    else:
        sections[update.section] = merge_section(sections[update.section], update.content)
    return {"sections": sections, "updated_at": now.isoformat()}


def profile_sections(item: Item | None) -> dict[str, str]:
    """Every known profile section of a stored profile (empty strings when unknown).

    A malformed profile (``parse_profile``) is reported once and reads as empty.
    """
    sections = {name: "" for name in PROFILE_SECTIONS}
    if item is not None:
        parsed = parse_profile(tuple(item.namespace), item.key, item.value)
        if isinstance(parsed, Problem):
            report_problem(parsed)
        else:
            sections.update(parsed)
    return sections


def profile_problem(item: Item | None) -> Problem | None:
    """What is wrong with a stored profile, None when it is well-formed or absent."""
    if item is None:
        return None
    parsed = parse_profile(tuple(item.namespace), item.key, item.value)
    return parsed if isinstance(parsed, Problem) else None


@dataclass(frozen=True)
class FactWrite:
    """One fact written under ``key`` of ``namespace``: read what is there, write the merge.

    ``merge`` turns the stored value (None when there is none) into the value to store.
    """

    namespace: tuple[str, ...]
    key: str
    scope: FactScope
    merge: Callable[[Mapping[str, Any] | None], dict[str, Any]]
    index: ClassVar[list[str]] = FACT_INDEX_FIELDS
    """The fields the Store indexes (``put(..., index=)``)."""

    def value(self, stored: Item | None) -> dict[str, Any]:
        """The value to write, as the Store keeps it, given what the read of ``key`` returned.

        A malformed stored value (reported once) is replaced, as if there were none.
        """
        previous = None
        if stored is not None:
            parsed = parse_fact(self.namespace, self.key, stored.value, self.scope)
            if isinstance(parsed, Problem):
                report_problem(parsed)
            else:
                previous = decoded(stored.value)
        return encoded(self.merge(previous))

    def put_op(self, stored: Item | None) -> PutOp:
        """The write as a batch operation."""
        return PutOp(self.namespace, self.key, self.value(stored), index=self.index)

    def fact(self, value: Mapping[str, Any]) -> Fact:
        """The fact as stored with ``value``, as a read-back would give it."""
        return fact_from_value(self.key, value, self.scope)
