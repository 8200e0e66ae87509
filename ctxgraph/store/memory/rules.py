"""What the memory extractor may propose, and the gate that decides what is remembered where."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ctxgraph.store.memory.cues import asks_for_action, states_durable_fact

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
    candidate: FactCandidate | ProfileUpdate | None = field(default=None, compare=False)
    """The candidate as accepted, the one to store: its evidence cited from the user
    message that holds the quote, and a ``transactional`` label the quote's words
    contradict made ``descriptive`` (see :func:`admitted`). None when rejected; not
    compared, so two decisions are equal when their verdicts are."""


TRANSACTIONAL = "transactional: an authorization or instruction is never remembered"
"""The reason a transactional candidate is rejected."""

UNCITED = "(uncited)"
"""The evidence id of a candidate whose model cited no message (the line format's facts):
the gate cites the one user message that holds its quote, if exactly one does."""

Gated = TypeVar("Gated", bound=_Gated)

_SPEAKER = re.compile(r"^\s*(?:\[[^\]\n]{1,120}\]\s*)?(?:(?:user|human|u\d+)\s*[:：]\s*)?", re.I)
"""A speaker label a model copies from the transcript: ``[id] user:``, ``user:``, ``u1:``."""


def static_rejection(candidate: FactCandidate | ProfileUpdate) -> str | None:
    """The reason a candidate can never be remembered, whatever its evidence, or None."""
    if candidate.authority == "transactional":
        return TRANSACTIONAL
    return _label_rejection(candidate)


def _label_rejection(candidate: FactCandidate | ProfileUpdate) -> str | None:
    """:func:`static_rejection` without the authority, which the words may overrule."""
    if candidate.durability == "temporary":
        return "temporary: it applies only to the current conversation"
    if candidate.scope == "thread":
        return "thread scope: it belongs to this conversation only"
    if isinstance(candidate, ProfileUpdate) and candidate.scope != "user":
        return "a profile update must be about the user (scope 'user')"
    return None


def unlabelled(quote: str) -> str:
    """``quote`` without a leading speaker label (``user:``, ``u1:``, ``[id] user:``)."""
    return _SPEAKER.sub("", quote, count=1).strip()


def _contains(haystack: str, needle: str) -> bool:
    text, excerpt = normalize_text(haystack), normalize_text(needle)
    return bool(excerpt) and (excerpt in text or excerpt.casefold() in text.casefold())


def _texts(rows: Sequence[Mapping[str, object]], role: str) -> list[tuple[str, str]]:
    """``(id, content)`` of the rows of ``role`` whose content is text."""
    return [
        (str(row.get("id")), content)
        for row in rows
        if row.get("role") == role and isinstance(content := row.get("content"), str)
    ]


def cite(candidate: Gated, rows: Sequence[Mapping[str, object]]) -> Gated | str:
    """``candidate`` citing the user message that holds its quote, or why none does.

    The quote is read as written, then without a speaker label the model copied from the
    transcript (``user:``, ``u1:``, ``[id] user:``). The cited message wins when it holds
    the quote; otherwise (a wrong or missing id) the one user message of ``rows`` that
    holds it is cited instead. A quote no user message holds is refused, however an
    assistant message or the model's translation reads.

    Args:
        candidate: A fact or profile candidate.
        rows: The filtered rows of this extraction (``id``, ``role``, ``content``).

    Returns:
        The candidate with its evidence id and quote as found (itself when they were
        right), or the reason the evidence does not hold.

    """
    users = _texts(rows, "user")
    quotes = [candidate.evidence_text]
    bare = unlabelled(candidate.evidence_text)
    if bare and bare != candidate.evidence_text:
        quotes.append(bare)
    for quote in quotes:
        if any(i == candidate.evidence_message_id and _contains(t, quote) for i, t in users):
            return candidate if quote == candidate.evidence_text else _cited(candidate, None, quote)
    for quote in quotes:
        holders = [i for i, text in users if _contains(text, quote)]
        if len(holders) == 1:
            return _cited(candidate, holders[0], quote)
        if holders:
            return (
                f"evidence ambiguous: {quote!r} is in {len(holders)} user messages and the "
                f"cited {candidate.evidence_message_id!r} is none of them"
            )
    if any(_contains(text, quote) for _, text in _texts(rows, "assistant") for quote in quotes):
        return "evidence appears only in an assistant message"
    return (
        f"evidence not found: {candidate.evidence_text!r} is not in user message "
        f"{candidate.evidence_message_id!r} nor in any other"
    )


def _cited(candidate: Gated, message_id: str | None, quote: str) -> Gated:
    update: dict[str, str] = {"evidence_text": quote}
    if message_id is not None:
        update["evidence_message_id"] = message_id
    return candidate.model_copy(update=update)


def _authority(
    candidate: FactCandidate | ProfileUpdate, rows: Sequence[Mapping[str, object]]
) -> tuple[FactCandidate | ProfileUpdate | None, str]:
    """The candidate with the authority its words give it (None: never remembered), and a note.

    A small model labels durable statements ``transactional`` ("I'm a Python backend
    developer") and requests ``descriptive``. The deterministic cues of
    ``ctxgraph.store.memory.cues`` decide where the words are plain: a ``transactional``
    label is lifted when the quote states a durable fact and neither the cited message
    nor the fact's content asks for (or grants) an action; a ``descriptive`` label is
    refused when the quote asks for an action and states no durable fact. ``rows`` must
    hold the cited message (``cite`` has checked it).
    """
    quote = candidate.evidence_text
    message = next(
        (text for i, text in _texts(rows, "user") if i == candidate.evidence_message_id), quote
    )
    if candidate.authority == "transactional":
        if (
            states_durable_fact(quote)
            and not asks_for_action(message)
            and not asks_for_action(candidate.content)
        ):
            note = " (labelled transactional; its quote states a durable fact, asks no action)"
            return candidate.model_copy(update={"authority": "descriptive"}), note
        return None, TRANSACTIONAL
    if asks_for_action(quote) and not states_durable_fact(quote):
        return None, "transactional by its words: the quote asks for an action, never remembered"
    return candidate, ""


def accept_candidate(
    candidate: FactCandidate | ProfileUpdate,
    rows: Sequence[Mapping[str, object]],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    project_id: str | None = None,
) -> Decision:
    """Decide whether ``candidate`` is remembered, and whether for the user or the project.

    Only durable, descriptive candidates about the user or the project, confident enough
    and quoted from a user message, are accepted. The quote may carry a speaker label or
    cite the wrong message when exactly one user message holds it (:func:`cite`); the
    authority follows the quote's words where the deterministic cues are plain
    (``_authority``). ``Decision.candidate`` is the candidate to store.

    Args:
        candidate: A fact or profile candidate of the memory model.
        rows: The filtered conversation, dicts with ``id``, ``role`` ("user" or
            "assistant") and ``content``.
        threshold: The lowest confidence accepted.
        project_id: The context's project; a project fact without one is refused.

    Returns:
        The decision, with the reason (why it was refused, or what was accepted).

    """
    reason = _label_rejection(candidate)
    if reason is None and candidate.scope == "project" and project_id is None:
        reason = "project scope but no project in the context"
    if reason is None and candidate.confidence < threshold:
        reason = f"low confidence: {candidate.confidence:.2f} is below {threshold:.2f}"
    lifts = states_durable_fact(unlabelled(candidate.evidence_text))
    if reason is None and candidate.authority == "transactional" and not lifts:
        reason = TRANSACTIONAL
    if reason is not None:
        return Decision(accepted=False, target=None, reason=reason)
    cited = cite(candidate, rows)
    if isinstance(cited, str):
        return Decision(accepted=False, target=None, reason=cited)
    admitted, note = _authority(cited, rows)
    if admitted is None:
        return Decision(accepted=False, target=None, reason=note)
    if admitted.scope == "project":
        return Decision(True, "project", f"durable project fact{note}", admitted)
    return Decision(True, "user", f"durable user fact{note}", admitted)


def accept_profile_update(
    update: ProfileUpdate,
    rows: Sequence[Mapping[str, object]],
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> Decision:
    """The gate of :func:`accept_candidate` applied to a profile update (user scope only)."""
    return accept_candidate(update, rows, threshold=threshold)
