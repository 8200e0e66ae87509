"""Long-term memory in the Store: facts per user and agent, project facts and the profile."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, cast, get_args

from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from ctxgraph.state.context import Context, ContextError
from ctxgraph.store.memory.facts import Fact, FactScope, fact_from_value
from ctxgraph.store.memory.ranking import (
    LeadingFact,
    Source,
    age_from_of,
    check_search,
    leading_facts,
    rank,
)
from ctxgraph.store.memory.rules import (
    Category,
    Decision,
    FactCandidate,
    MemoryUpdate,
    ProfileUpdate,
    Section,
    accept_candidate,
    accept_profile_update,
    normalize_text,
    slug_key,
    static_rejection,
)
from ctxgraph.store.namespaces import project_facts, user_facts, user_profile
from ctxgraph.store.search.hybrid import (
    FACT_INDEX_FIELDS,
    QuerySimilarity,
    asemantic_hits,
    semantic_enabled,
    semantic_hits,
)
from ctxgraph.store.search.index import fact_index_cache
from ctxgraph.store.search.scoring import AgeFrom, tokenize

__all__ = [
    "HISTORY_LIMIT",
    "PROFILE_SECTIONS",
    "SECTION_LIMIT",
    "Decision",
    "Fact",
    "FactCandidate",
    "MemoryRepository",
    "MemoryUpdate",
    "ProfileUpdate",
    "accept_candidate",
    "accept_profile_update",
]

BATCH = 500
"""Store operations per batch in bulk imports."""

CANDIDATES = 64
"""Facts of each kind (corrections, matches, most confident) offered to the memory view."""


def candidate_pool(top_k: int) -> int:
    """Candidates per namespace reranked for a search of ``top_k`` results.

    At least twice ``CANDIDATES``, so ``search`` (any ``top_k`` up to ``CANDIDATES``) and
    ``memory_candidates`` rerank the same facts and agree on order.
    """
    return max(2 * top_k, 2 * CANDIDATES)


HISTORY_LIMIT = 5
"""Previous contents kept per fact key."""

SECTION_LIMIT = 600
"""Characters kept per merged profile section; the oldest sentences are dropped first."""

PROFILE_KEY = "profile"
PROFILE_SECTIONS: tuple[str, ...] = get_args(Section)
_SENTENCE = re.compile(r"[^.!?。！？\n]+(?:[.!?。！？]+|\n|$)")


def _utc(moment: datetime | None) -> datetime:
    if moment is None:
        return datetime.now(UTC)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _same(a: str, b: str) -> bool:
    return normalize_text(a).casefold() == normalize_text(b).casefold()


def _default_key(content: str) -> str:
    slug = slug_key(content)[:40].strip("_")
    digest = hashlib.sha256(normalize_text(content).casefold().encode()).hexdigest()[:10]
    return f"{slug}_{digest}" if slug else f"fact_{digest}"


def _merge(
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
) -> dict[str, Any]:
    """The value to store under ``key`` after seeing ``content`` again (or for the first time).

    Same content: confidence and created_at are kept; only a confirmation raises the
    confidence and moves confirmed_at. New content: replaces the old one, which goes to
    history, and takes the new confidence.
    """
    stamp = now.isoformat()
    if stored is not None and _same(str(stored["content"]), content):
        value = dict(stored)
        value["last_seen_at"] = stamp
        value["is_correction"] = bool(stored.get("is_correction")) or category == "correction"
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
    }


@dataclass(frozen=True)
class _Addition:
    """A fact being added directly (not extracted): everything but its key and content."""

    category: str
    confidence: float
    now: datetime
    source_thread: str | None = None
    evidence: str | None = None

    def value(self, stored: object, key: str, content: str) -> dict[str, Any]:
        """The value to store under ``key``, given what is stored there (an Item or None)."""
        return _merge(
            stored.value if isinstance(stored, Item) else None,
            key=key,
            content=content,
            category=self.category,
            confidence=self.confidence,
            now=self.now,
            source_thread=self.source_thread,
            evidence=self.evidence,
            confirmed=False,
        )


def _fact(item: Item, scope: Literal["user", "project"]) -> Fact:
    return fact_from_value(item.key, item.value, scope)


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


def _profile_value(
    stored: Mapping[str, Any] | None, update: ProfileUpdate, now: datetime
) -> dict[str, Any]:
    reason = static_rejection(update)
    if reason is not None:
        raise ValueError(f"refusing to store profile update: {reason}")
    sections = {name: "" for name in PROFILE_SECTIONS}
    if stored is not None:
        sections.update({k: str(v) for k, v in stored.get("sections", {}).items()})
    if update.section == "top_of_mind":
        sections["top_of_mind"] = normalize_text(update.content)[:SECTION_LIMIT]
    else:
        sections[update.section] = merge_section(sections[update.section], update.content)
    return {"sections": sections, "updated_at": now.isoformat()}


def _sections(item: Item | None) -> dict[str, str]:
    sections = {name: "" for name in PROFILE_SECTIONS}
    if item is not None:
        sections.update({k: str(v) for k, v in item.value.get("sections", {}).items()})
    return sections


class MemoryRepository:
    """Reads and writes long-term memory in any LangGraph ``BaseStore``."""

    def __init__(self, store: BaseStore) -> None:
        self.store = store

    # -- namespaces ---------------------------------------------------------------------

    @staticmethod
    def _namespace(context: Context, scope: str) -> tuple[str, ...]:
        if scope == "project":
            if context.project_id is None:
                raise ContextError("a project fact needs a context with a project_id")
            return project_facts(context.project_id)
        if scope == "user":
            return user_facts(context.user_id, context.agent_name)
        raise ValueError(f"facts are stored for scope 'user' or 'project', got {scope!r}")

    @staticmethod
    def _checked(candidate: FactCandidate, decision: Decision) -> str | None:
        """The target scope of an accepted decision, None when not accepted."""
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

    # -- facts --------------------------------------------------------------------------

    def add_fact(
        self,
        context: Context,
        content: str,
        *,
        key: str | None = None,
        category: Category = "context",
        confidence: float = 0.9,
        created_at: datetime | None = None,
        scope: Literal["user", "project"] = "user",
        source_thread: str | None = None,
        evidence: str | None = None,
    ) -> Fact:
        """Store ``content`` under ``key`` (default: derived from the content) and return it."""
        namespace, key, content = self._prepare_add(context, content, key, confidence, scope)
        added = _Addition(category, confidence, _utc(created_at), source_thread, evidence)
        value = added.value(self.store.get(namespace, key), key, content)
        self.store.put(namespace, key, value, index=FACT_INDEX_FIELDS)
        return self._read_back(namespace, key, value, scope)

    def add_facts(
        self,
        context: Context,
        contents: Sequence[str],
        *,
        category: Category = "context",
        confidence: float = 0.9,
        created_at: datetime | None = None,
        scope: Literal["user", "project"] = "user",
    ) -> int:
        """Store many facts at once (an import), keys derived from content; returns the count.

        Same rules as :meth:`add_fact`, in batches of ``BATCH`` Store operations.
        """
        prepared = [self._prepare_add(context, c, None, confidence, scope) for c in contents]
        added = _Addition(category, confidence, _utc(created_at))
        for start in range(0, len(prepared), BATCH):
            chunk = prepared[start : start + BATCH]
            stored = self.store.batch([GetOp(ns, key) for ns, key, _ in chunk])
            self.store.batch(
                [
                    PutOp(ns, key, added.value(old, key, text), index=FACT_INDEX_FIELDS)
                    for (ns, key, text), old in zip(chunk, stored, strict=True)
                ]
            )
        return len(prepared)

    async def aadd_fact(
        self,
        context: Context,
        content: str,
        *,
        key: str | None = None,
        category: Category = "context",
        confidence: float = 0.9,
        created_at: datetime | None = None,
        scope: Literal["user", "project"] = "user",
        source_thread: str | None = None,
        evidence: str | None = None,
    ) -> Fact:
        """Async :meth:`add_fact`."""
        namespace, key, content = self._prepare_add(context, content, key, confidence, scope)
        added = _Addition(category, confidence, _utc(created_at), source_thread, evidence)
        value = added.value(await self.store.aget(namespace, key), key, content)
        await self.store.aput(namespace, key, value, index=FACT_INDEX_FIELDS)
        return self._read_back(namespace, key, value, scope)

    def _prepare_add(
        self, context: Context, content: str, key: str | None, confidence: float, scope: str
    ) -> tuple[tuple[str, ...], str, str]:
        text = normalize_text(content)
        if not text:
            raise ValueError("a fact needs non-empty content")
        if not 0.0 <= confidence <= 1.0:
            raise ValueError(f"confidence must be within 0..1, got {confidence}")
        resolved = _default_key(text) if key is None else slug_key(key)
        if not resolved or len(resolved) > 80:
            raise ValueError(f"a fact key must be 1-80 snake_case characters, got {key!r}")
        return self._namespace(context, scope), resolved, text

    @staticmethod
    def _read_back(namespace: tuple[str, ...], key: str, value: dict[str, Any], scope: str) -> Fact:
        now = datetime.now(UTC)
        item = Item(value=value, key=key, namespace=namespace, created_at=now, updated_at=now)
        return _fact(item, cast(Literal["user", "project"], scope))

    def remember(
        self,
        context: Context,
        candidate: FactCandidate,
        decision: Decision,
        *,
        thread_id: str,
        now: datetime | None = None,
        confirmed: bool = False,
    ) -> Fact | None:
        """Store an accepted candidate in its drawer; None when the decision rejected it.

        ``confirmed=True`` (the user explicitly confirmed the fact) is the only way to raise
        the confidence of a fact already stored with the same content.
        """
        scope = self._checked(candidate, decision)
        if scope is None:
            return None
        namespace = self._namespace(context, scope)
        stored = self.store.get(namespace, candidate.key)
        value = self._remembered(stored, candidate, thread_id, now, confirmed)
        self.store.put(namespace, candidate.key, value, index=FACT_INDEX_FIELDS)
        return self._read_back(namespace, candidate.key, value, scope)

    async def aremember(
        self,
        context: Context,
        candidate: FactCandidate,
        decision: Decision,
        *,
        thread_id: str,
        now: datetime | None = None,
        confirmed: bool = False,
    ) -> Fact | None:
        """Async :meth:`remember`."""
        scope = self._checked(candidate, decision)
        if scope is None:
            return None
        namespace = self._namespace(context, scope)
        stored = await self.store.aget(namespace, candidate.key)
        value = self._remembered(stored, candidate, thread_id, now, confirmed)
        await self.store.aput(namespace, candidate.key, value, index=FACT_INDEX_FIELDS)
        return self._read_back(namespace, candidate.key, value, scope)

    @staticmethod
    def _remembered(
        stored: Item | None,
        candidate: FactCandidate,
        thread_id: str,
        now: datetime | None,
        confirmed: bool,
    ) -> dict[str, Any]:
        return _merge(
            None if stored is None else stored.value,
            key=candidate.key,
            content=normalize_text(candidate.content),
            category=candidate.category,
            confidence=candidate.confidence,
            now=_utc(now),
            source_thread=thread_id,
            evidence=candidate.evidence_text,
            confirmed=confirmed,
        )

    @staticmethod
    def _facts(rows: list[tuple[str, Mapping[str, Any]]], scope: FactScope) -> list[Fact]:
        facts = [fact_from_value(key, value, scope) for key, value in rows]
        return sorted(facts, key=lambda fact: (fact.created_at, fact.id))

    def _listed(self, context: Context, scope: FactScope) -> list[Fact]:
        namespace = self._namespace(context, scope)
        return self._facts(fact_index_cache.values(self.store, namespace), scope)

    async def _alisted(self, context: Context, scope: FactScope) -> list[Fact]:
        namespace = self._namespace(context, scope)
        return self._facts(await fact_index_cache.avalues(self.store, namespace), scope)

    def list_user_facts(self, context: Context) -> list[Fact]:
        """The facts this agent keeps about this user, oldest first."""
        return self._listed(context, "user")

    async def alist_user_facts(self, context: Context) -> list[Fact]:
        """Async :meth:`list_user_facts`."""
        return await self._alisted(context, "user")

    def list_project_facts(self, context: Context) -> list[Fact]:
        """The facts of the context's project, oldest first; empty without a project."""
        if context.project_id is None:
            return []
        return self._listed(context, "project")

    async def alist_project_facts(self, context: Context) -> list[Fact]:
        """Async :meth:`list_project_facts`."""
        if context.project_id is None:
            return []
        return await self._alisted(context, "project")

    def list_facts(self, context: Context) -> list[Fact]:
        """User facts for this agent, then the project's facts when the context has a project."""
        return [*self.list_user_facts(context), *self.list_project_facts(context)]

    async def alist_facts(self, context: Context) -> list[Fact]:
        """Async :meth:`list_facts`."""
        return [*await self.alist_user_facts(context), *await self.alist_project_facts(context)]

    # -- search -----------------------------------------------------------------------------

    def _search_scopes(self, context: Context) -> list[tuple[tuple[str, ...], FactScope]]:
        scopes: list[tuple[tuple[str, ...], FactScope]] = [
            (self._namespace(context, "user"), "user")
        ]
        if context.project_id is not None:
            scopes.append((self._namespace(context, "project"), "project"))
        return scopes

    def search(
        self,
        context: Context,
        query: str,
        top_k: int = 5,
        now: datetime | None = None,
        *,
        age_from: AgeFrom | None = None,
    ) -> list[Fact]:
        """Facts of this user and agent (and project) ranked for ``query``, best first.

        BM25 picks ``candidate_pool(top_k)`` candidates per namespace (facts tied with the
        last one included); when the Store has a vector index, as many semantic neighbours
        join them (``store.hybrid``). The pool is the one the memory view ranks, so both
        put the same fact first. Candidates are reranked by ``store.search.final_score``
        (relevance decayed by age, plus confidence); each result carries its ``score``.
        ``age_from`` overrides ``Settings.memory_age_from`` (from the context's settings,
        else the default). The index is refreshed from the Store first, so a fact written
        by any process sharing the Store is found.
        """
        check_search(query, top_k)
        sources, _ = self._sources(context, query, candidate_pool(top_k))
        return rank(sources, top_k, now, age_from_of(context, age_from))

    def _sources(
        self, context: Context, query: str, limit: int, leading: int = 0
    ) -> tuple[list[Source], list[LeadingFact]]:
        """Candidates per namespace, each namespace refreshed once.

        ``limit`` BM25 (and semantic) candidates for ``query`` and, with ``leading``, that
        many of the most confident corrections and facts. In hybrid mode the Store's
        neighbours are asked for first, so the index refresh that follows covers them and
        gives their exact BM25; the BM25 hits they miss get their similarity (the query
        embedded once for every namespace).
        """
        terms = tokenize(query)
        hybrid = semantic_enabled(self.store) and bool(query.strip())
        similarity = QuerySimilarity(self.store, query) if hybrid else None
        sources: list[Source] = []
        first: list[LeadingFact] = []
        for namespace, scope in self._search_scopes(context):
            if similarity is None:
                found = fact_index_cache.lookup(
                    self.store, namespace, terms, limit, leading=leading
                )
                sources.append(Source(scope, found.hits))
            else:
                near = semantic_hits(self.store, namespace, query, limit)
                found = fact_index_cache.lookup(
                    self.store,
                    namespace,
                    terms,
                    limit,
                    leading=leading,
                    extra_keys=[item.key for item in near.items],
                )
                semantic = similarity.complete(near, found.hits, found.extra)
                sources.append(Source(scope, found.hits, semantic))
            first += [(scope, key, value) for key, value in found.leading]
        return sources, first

    async def _asources(
        self, context: Context, query: str, limit: int, leading: int = 0
    ) -> tuple[list[Source], list[LeadingFact]]:
        """Async :meth:`_sources`."""
        terms = tokenize(query)
        hybrid = semantic_enabled(self.store) and bool(query.strip())
        similarity = QuerySimilarity(self.store, query) if hybrid else None
        sources: list[Source] = []
        first: list[LeadingFact] = []
        for namespace, scope in self._search_scopes(context):
            if similarity is None:
                found = await fact_index_cache.alookup(
                    self.store, namespace, terms, limit, leading=leading
                )
                sources.append(Source(scope, found.hits))
            else:
                near = await asemantic_hits(self.store, namespace, query, limit)
                found = await fact_index_cache.alookup(
                    self.store,
                    namespace,
                    terms,
                    limit,
                    leading=leading,
                    extra_keys=[item.key for item in near.items],
                )
                semantic = await similarity.acomplete(near, found.hits, found.extra)
                sources.append(Source(scope, found.hits, semantic))
            first += [(scope, key, value) for key, value in found.leading]
        return sources, first

    async def asearch(
        self,
        context: Context,
        query: str,
        top_k: int = 5,
        now: datetime | None = None,
        *,
        age_from: AgeFrom | None = None,
    ) -> list[Fact]:
        """Async :meth:`search`."""
        check_search(query, top_k)
        sources, _ = await self._asources(context, query, candidate_pool(top_k))
        return rank(sources, top_k, now, age_from_of(context, age_from))

    def memory_candidates(
        self,
        context: Context,
        query: str | None,
        *,
        limit: int = CANDIDATES,
        now: datetime | None = None,
        age_from: AgeFrom | None = None,
    ) -> list[Fact]:
        """Facts worth offering to the memory view, in the order the view should use.

        First the best search matches for ``query``, ranked exactly as :meth:`search`
        ranks them (same candidates, same ``final_score``), so the view and
        ``memory_search`` agree on which fact comes first. Then the most confident
        corrections and the most confident facts not already matched, up to ``limit``
        of each. Read through the same fresh index as :meth:`search`, so a fact stored by
        any process is seen at once. ``age_from`` as in :meth:`search`.
        """
        sources, first = self._sources(context, query or "", candidate_pool(limit), leading=limit)
        return leading_facts(rank(sources, limit, now, age_from_of(context, age_from)), first)

    async def amemory_candidates(
        self,
        context: Context,
        query: str | None,
        *,
        limit: int = CANDIDATES,
        now: datetime | None = None,
        age_from: AgeFrom | None = None,
    ) -> list[Fact]:
        """Async :meth:`memory_candidates`."""
        sources, first = await self._asources(
            context, query or "", candidate_pool(limit), leading=limit
        )
        return leading_facts(rank(sources, limit, now, age_from_of(context, age_from)), first)

    def forget(self, context: Context, key: str) -> bool:
        """Delete ``key`` from the user's facts, else from the project's; True if deleted."""
        for scope in ("user", "project"):
            if scope == "project" and context.project_id is None:
                continue
            namespace = self._namespace(context, scope)
            if self.store.get(namespace, key) is not None:
                self.store.delete(namespace, key)
                return True
        return False

    async def aforget(self, context: Context, key: str) -> bool:
        """Async :meth:`forget`."""
        for scope in ("user", "project"):
            if scope == "project" and context.project_id is None:
                continue
            namespace = self._namespace(context, scope)
            if await self.store.aget(namespace, key) is not None:
                await self.store.adelete(namespace, key)
                return True
        return False

    # -- profile ------------------------------------------------------------------------

    def get_profile(self, context: Context) -> dict[str, str]:
        """The user's profile sections (empty strings when nothing is known)."""
        return _sections(self.store.get(user_profile(context.user_id), PROFILE_KEY))

    async def aget_profile(self, context: Context) -> dict[str, str]:
        """Async :meth:`get_profile`."""
        return _sections(await self.store.aget(user_profile(context.user_id), PROFILE_KEY))

    def update_profile(
        self, context: Context, update: ProfileUpdate, *, now: datetime | None = None
    ) -> dict[str, str]:
        """Merge ``update`` into its section (``top_of_mind`` is replaced); return the profile.

        Raises ValueError for an update the gate can never accept (transactional,
        temporary, or not about the user).
        """
        namespace = user_profile(context.user_id)
        stored = self.store.get(namespace, PROFILE_KEY)
        value = _profile_value(None if stored is None else stored.value, update, _utc(now))
        self.store.put(namespace, PROFILE_KEY, value, index=False)
        return dict(value["sections"])

    async def aupdate_profile(
        self, context: Context, update: ProfileUpdate, *, now: datetime | None = None
    ) -> dict[str, str]:
        """Async :meth:`update_profile`."""
        namespace = user_profile(context.user_id)
        stored = await self.store.aget(namespace, PROFILE_KEY)
        value = _profile_value(None if stored is None else stored.value, update, _utc(now))
        await self.store.aput(namespace, PROFILE_KEY, value, index=False)
        return dict(value["sections"])

    # -- export -------------------------------------------------------------------------

    @staticmethod
    def _export(
        context: Context, profile: dict[str, str], facts: list[Fact], shared: list[Fact]
    ) -> dict[str, Any]:
        return {
            "user_id": context.user_id,
            "agent_name": context.agent_name,
            "project_id": context.project_id,
            "profile": profile,
            "facts": [fact.to_dict() for fact in facts],
            "project_facts": [fact.to_dict() for fact in shared],
        }

    def export(self, context: Context) -> dict[str, Any]:
        """Everything remembered for this user, agent and project, JSON-serialisable."""
        return self._export(
            context,
            self.get_profile(context),
            self.list_user_facts(context),
            self.list_project_facts(context),
        )

    async def aexport(self, context: Context) -> dict[str, Any]:
        """Async :meth:`export`."""
        return self._export(
            context,
            await self.aget_profile(context),
            await self.alist_user_facts(context),
            await self.alist_project_facts(context),
        )

    # -- batched reads ------------------------------------------------------------------

    def profile_op(self, context: Context) -> GetOp:
        """The Store read of the user's profile, to batch with other reads."""
        config = self.store.ttl_config
        refresh = config.get("refresh_on_read", True) if config is not None else True
        return GetOp(user_profile(context.user_id), PROFILE_KEY, refresh)

    @staticmethod
    def profile_of(item: Item | None) -> dict[str, str]:
        """The profile sections in what :meth:`profile_op` read (as :meth:`get_profile`)."""
        return _sections(item)
