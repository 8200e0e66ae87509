"""What the memory repository writes: direct and extracted facts, forgetting and the profile.

Each write is checked and planned before any I/O (``writes.FactWrite``), then returned as a
plan (a flow, ``state.sans_io``) that ``MemoryRepository`` runs with ``run`` or ``arun``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Literal

from langgraph.store.base import BaseStore, PutOp

from ctxgraph.state.context import Context
from ctxgraph.state.sans_io import Flow, io
from ctxgraph.store.memory.facts import Fact, FactScope, Provenance
from ctxgraph.store.memory.rules import (
    Category,
    Decision,
    FactCandidate,
    ProfileUpdate,
    normalize_text,
    slug_key,
    static_rejection,
)
from ctxgraph.store.memory.scopes import fact_namespace, search_scopes
from ctxgraph.store.memory.writes import (
    PROFILE_KEY,
    FactWrite,
    default_key,
    merged_value,
    profile_value,
    utc,
)
from ctxgraph.store.namespaces import user_profile
from ctxgraph.store.search.vectors import aput_facts, put_facts
from ctxgraph.store.text_codec import encoded

__all__ = ["DIRECT_PROVENANCES", "MemoryWriter", "accepted_scope"]

DIRECT_PROVENANCES: tuple[Provenance, ...] = ("api", "cli", "import")
"""Provenances a write around the acceptance gate (``add_fact``, ``add_facts``) may give."""


def accepted_scope(candidate: FactCandidate, decision: Decision) -> str | None:
    """The target scope of an accepted decision, None when not accepted.

    Raises:
        ValueError: The candidate can never be stored or the target is not its scope.

    """
    if not decision.accepted:
        return None
    reason = static_rejection(candidate)
    if reason is not None:
        raise ValueError(f"refusing to remember {candidate.key!r}: {reason}")
    if decision.target is None or decision.target != candidate.scope:
        raise ValueError(
            f"decision target {decision.target!r} does not match scope {candidate.scope!r}"
        )
    return decision.target


def _checked_text(text: str, confidence: float) -> None:
    """Raise ValueError for a direct write's content or confidence never stored."""
    if not text:
        raise ValueError("a fact needs non-empty content")
    if not 0.0 <= confidence <= 1.0:
        raise ValueError(f"confidence must be within 0..1, got {confidence}")


@dataclass(frozen=True)
class MemoryWriter:
    """The writes of long-term memory in ``store``: plans of Store calls."""

    store: BaseStore

    def fact_write(
        self,
        context: Context,
        content: str,
        key: str | None,
        category: Category,
        confidence: float,
        now: datetime,
        scope: Literal["user", "project"],
        source_thread: str | None = None,
        evidence: str | None = None,
        provenance: Provenance = "api",
    ) -> FactWrite:
        """The plan of a direct write, its arguments checked (no I/O).

        Raises:
            ValueError: As ``MemoryRepository.add_fact``.
            ContextError: As ``MemoryRepository.add_fact``.

        """
        if provenance not in DIRECT_PROVENANCES:
            raise ValueError(
                f"a direct write has provenance 'api', 'cli' or 'import', got {provenance!r} "
                "(only MemoryRepository.remember writes 'extraction')"
            )
        text = normalize_text(content)
        _checked_text(text, confidence)
        resolved = default_key(text) if key is None else slug_key(key)
        if not resolved or len(resolved) > 80:
            raise ValueError(f"a fact key must be 1-80 snake_case characters, got {key!r}")
        merge = partial(
            merged_value,
            key=resolved,
            content=text,
            category=category,
            confidence=confidence,
            now=now,
            source_thread=source_thread,
            evidence=evidence,
            confirmed=False,
            provenance=provenance,
        )
        return FactWrite(fact_namespace(context, scope), resolved, scope, merge)

    def remember_write(
        self,
        context: Context,
        candidate: FactCandidate,
        decision: Decision,
        thread_id: str,
        now: datetime | None,
        confirmed: bool,
    ) -> FactWrite | None:
        """The plan of storing an accepted candidate; None when the decision rejected it."""
        scope = accepted_scope(candidate, decision)
        if scope is None:
            return None
        merge = partial(
            merged_value,
            key=candidate.key,
            content=normalize_text(candidate.content),
            category=candidate.category,
            confidence=candidate.confidence,
            now=utc(now),
            source_thread=thread_id,
            evidence=candidate.evidence_text,
            confirmed=confirmed,
            provenance="extraction",
        )
        fact_scope: FactScope = "project" if scope == "project" else "user"
        return FactWrite(fact_namespace(context, scope), candidate.key, fact_scope, merge)

    def written(self, write: FactWrite) -> Flow[Fact]:
        """Read what ``write`` replaces and store the merge; the fact as stored."""
        stored = yield from io(self.store.get, self.store.aget, write.namespace, write.key)
        value = write.value(stored)
        ops = [PutOp(write.namespace, write.key, value, index=write.index)]
        yield from io(put_facts, aput_facts, self.store, ops)
        return write.fact(value)

    def forget(self, context: Context, key: str) -> Flow[bool]:
        """Delete ``key`` from the user's facts, else the project's; whether one was."""
        for namespace, _ in search_scopes(context):
            if (yield from io(self.store.get, self.store.aget, namespace, key)) is not None:
                yield from io(self.store.delete, self.store.adelete, namespace, key)
                return True
        return False

    def update_profile(
        self, context: Context, update: ProfileUpdate, now: datetime | None
    ) -> Flow[dict[str, str]]:
        """Merge ``update`` into the profile; the whole profile after it."""
        namespace = user_profile(context.user_id)
        stored = yield from io(self.store.get, self.store.aget, namespace, PROFILE_KEY)
        value = profile_value(stored, update, utc(now))
        kept = encoded(value)  # as the Store keeps it (store.text_codec)
        yield from io(self.store.put, self.store.aput, namespace, PROFILE_KEY, kept, index=False)
        return dict(value["sections"])
