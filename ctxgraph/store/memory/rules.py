"""What the memory extractor may propose, and the gate that decides what is remembered where."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Scope = Literal["user", "thread", "project"]
Durability = Literal["durable", "temporary"]
Authority = Literal["descriptive", "transactional"]
Category = Literal["preference", "context", "goal", "correction"]
Section = Literal["work_context", "personal_context", "top_of_mind", "cognitive_style"]

DEFAULT_THRESHOLD = 0.7
"""Lowest extractor confidence a candidate needs to be remembered."""

_KEY_PATTERN = r"^[a-z0-9]+(_[a-z0-9]+)*$"
_NOT_KEY = re.compile(r"[^a-z0-9]+")


def normalize_text(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends."""
    return " ".join(text.split())


def slug_key(text: str) -> str:
    """Turn free text into a snake_case key (``"Preferred Language"`` -> ``preferred_language``)."""
    return _NOT_KEY.sub("_", text.strip().lower()).strip("_")


class _Gated(BaseModel):
    """Fields the acceptance gate reads, shared by facts and profile updates."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    scope: Scope = Field(
        description=(
            "Whom this belongs to: 'user' (about the person, true in any project), "
            "'project' (about the current repository or project), or 'thread' (only this "
            "conversation)."
        )
    )
    durability: Durability = Field(
        description=(
            "'durable' if it stays true beyond this conversation, 'temporary' if it applies "
            "only now or to this task."
        )
    )
    authority: Authority = Field(
        description=(
            "'descriptive' for a statement of fact or preference; 'transactional' for a "
            "permission, approval or instruction to act (e.g. 'you may push', 'go ahead and "
            "delete'), which is never remembered."
        )
    )
    confidence: float = Field(
        ge=0.0, le=1.0, description="How sure you are that this is right and worth keeping, 0..1."
    )
    evidence_message_id: str = Field(
        min_length=1, description="Id of the user message that states it."
    )
    evidence_text: str = Field(
        min_length=1,
        max_length=500,
        description="A verbatim excerpt of that user message supporting it.",
    )


class FactCandidate(_Gated):
    """One fact about the user or the project the extractor proposes to remember."""

    key: str = Field(
        min_length=1,
        max_length=80,
        pattern=_KEY_PATTERN,
        description=(
            "Short snake_case name of the single-valued attribute, e.g. 'preferred_language'; "
            "a new value under the same key replaces the old one."
        ),
    )
    content: str = Field(
        min_length=1, max_length=500, description="The fact itself, as one short sentence."
    )
    category: Category = Field(
        description=(
            "'preference', 'context' (background facts), 'goal', or 'correction' (the user "
            "corrects something previously assumed or remembered)."
        )
    )

    @field_validator("key", mode="before")
    @classmethod
    def _snake_case(cls, value: object) -> object:
        return slug_key(value) if isinstance(value, str) else value


class ProfileUpdate(_Gated):
    """New text for one section of the user's profile."""

    section: Section = Field(
        description=(
            "'work_context' (role, stack, work), 'personal_context' (background), "
            "'top_of_mind' (what they are focused on right now; replaces the previous one), "
            "or 'cognitive_style' (how they like to think and be answered)."
        )
    )
    content: str = Field(
        min_length=1, max_length=500, description="The text to add to that section."
    )


class MemoryUpdate(BaseModel):
    """Everything worth remembering from the new messages of a conversation."""

    model_config = ConfigDict(extra="forbid")

    facts: list[FactCandidate] = Field(
        default_factory=list,
        max_length=20,
        description="Facts to remember; empty when nothing durable was said.",
    )
    profile_updates: list[ProfileUpdate] = Field(
        default_factory=list,
        max_length=20,
        description="Profile sections to update; empty when nothing changes.",
    )


@dataclass(frozen=True)
class Decision:
    """Whether a candidate is remembered, in which drawer, and why."""

    accepted: bool
    target: Literal["user", "project"] | None
    reason: str


def static_rejection(candidate: FactCandidate | ProfileUpdate) -> str | None:
    """The reason a candidate can never be remembered, whatever its evidence, or None."""
    if candidate.authority == "transactional":
        return "transactional: an authorization or instruction is never remembered"
    if candidate.durability == "temporary":
        return "temporary: it applies only to the current conversation"
    if candidate.scope == "thread":
        return "thread scope: it belongs to this conversation only"
    if isinstance(candidate, ProfileUpdate) and candidate.scope != "user":
        return "a profile update must be about the user (scope 'user')"
    return None


def _contains(haystack: str, needle: str) -> bool:
    text, excerpt = normalize_text(haystack), normalize_text(needle)
    return bool(excerpt) and (excerpt in text or excerpt.casefold() in text.casefold())


def evidence_rejection(
    candidate: FactCandidate | ProfileUpdate, rows: Sequence[Mapping[str, object]]
) -> str | None:
    """Why the evidence does not support the candidate, or None when a user row states it."""
    for row in rows:
        if row.get("id") == candidate.evidence_message_id and row.get("role") == "user":
            content = row.get("content")
            if isinstance(content, str) and _contains(content, candidate.evidence_text):
                return None
    for row in rows:
        content = row.get("content")
        if (
            row.get("role") == "assistant"
            and isinstance(content, str)
            and _contains(content, candidate.evidence_text)
        ):
            return "evidence appears only in an assistant message"
    return (
        f"evidence not found: {candidate.evidence_text!r} is not in user message "
        f"{candidate.evidence_message_id!r}"
    )


def accept_candidate(
    candidate: FactCandidate | ProfileUpdate,
    rows: Sequence[Mapping[str, object]],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    project_id: str | None = None,
) -> Decision:
    """Decide whether ``candidate`` is remembered, and whether for the user or the project.

    ``rows`` is the filtered conversation, dicts with ``id``, ``role`` ("user" or
    "assistant") and ``content``. Only durable, descriptive candidates about the user or the
    project, confident enough and quoted from a user message, are accepted.
    """
    reason = static_rejection(candidate)
    if reason is not None:
        return Decision(accepted=False, target=None, reason=reason)
    if candidate.confidence < threshold:
        return Decision(
            accepted=False,
            target=None,
            reason=f"low confidence: {candidate.confidence:.2f} is below {threshold:.2f}",
        )
    reason = evidence_rejection(candidate, rows)
    if reason is not None:
        return Decision(accepted=False, target=None, reason=reason)
    if candidate.scope == "project":
        if project_id is None:
            return Decision(
                accepted=False, target=None, reason="project scope but no project in the context"
            )
        return Decision(accepted=True, target="project", reason="durable project fact")
    return Decision(accepted=True, target="user", reason="durable user fact")


def accept_profile_update(
    update: ProfileUpdate,
    rows: Sequence[Mapping[str, object]],
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> Decision:
    """The gate of :func:`accept_candidate` applied to a profile update (user scope only)."""
    return accept_candidate(update, rows, threshold=threshold)
