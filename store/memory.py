"""Long-term memory in the Store: facts per user and agent, project facts and the profile."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, cast, get_args

from langgraph.store.base import BaseStore, GetOp, Item, PutOp, SearchItem

from state.context import Context, ContextError
from state.settings import Settings
from store.hybrid import FACT_INDEX_FIELDS, asemantic_hits, fuse, semantic_enabled, semantic_hits
from store.memory_rules import (
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
from store.namespaces import project_facts, user_facts, user_profile
from store.search import AgeFrom, final_score, tokenize
from store.search_index import NamespaceIndex, fact_index_cache

__all__ = [
    "HISTORY_LIMIT",
    "PAGE_SIZE",
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

PAGE_SIZE = 100
"""Items fetched per Store search while listing facts."""

BATCH = 500
"""Store operations per batch in bulk imports."""

CANDIDATES = 64
"""Facts of each kind (corrections, matches, most confident) offered to the memory view."""

HISTORY_LIMIT = 5
"""Previous contents kept per fact key."""

SECTION_LIMIT = 600
"""Characters kept per merged profile section; the oldest sentences are dropped first."""

FactScope = Literal["user", "project"]
"""Where a fact lives: the user's facts for one agent, or a project's facts."""

PROFILE_KEY = "profile"
PROFILE_SECTIONS: tuple[str, ...] = get_args(Section)
_SENTENCE = re.compile(r"[^.!?。！？\n]+(?:[.!?。！？]+|\n|$)")


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
    scope: Literal["user", "project"]
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


def _fact(item: Item, scope: Literal["user", "project"]) -> Fact:
    return _fact_from_value(item.key, item.value, scope)


def _fact_from_value(key: str, value: Mapping[str, Any], scope: Literal["user", "project"]) -> Fact:
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


def _own(page: list[SearchItem], namespace: tuple[str, ...]) -> list[SearchItem]:
    return [item for item in page if item.namespace == namespace]


class MemoryRepository:
    """Reads and writes long-term memory in any LangGraph ``BaseStore``."""

    def __init__(self, store: BaseStore, *, page_size: int = PAGE_SIZE) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self.store = store
        self._page_size = page_size

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
        stored = self.store.get(namespace, key)
        value = _merge(
            None if stored is None else stored.value,
            key=key,
            content=content,
            category=category,
            confidence=confidence,
            now=_utc(created_at),
            source_thread=source_thread,
            evidence=evidence,
            confirmed=False,
        )
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
        for start in range(0, len(prepared), BATCH):
            chunk = prepared[start : start + BATCH]
            stored = self.store.batch([GetOp(ns, key) for ns, key, _ in chunk])
            self.store.batch(
                [
                    PutOp(
                        ns,
                        key,
                        _merge(
                            old.value if isinstance(old, Item) else None,
                            key=key,
                            content=text,
                            category=category,
                            confidence=confidence,
                            now=_utc(created_at),
                            source_thread=None,
                            evidence=None,
                            confirmed=False,
                        ),
                        index=FACT_INDEX_FIELDS,
                    )
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
        stored = await self.store.aget(namespace, key)
        value = _merge(
            None if stored is None else stored.value,
            key=key,
            content=content,
            category=category,
            confidence=confidence,
            now=_utc(created_at),
            source_thread=source_thread,
            evidence=evidence,
            confirmed=False,
        )
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

    def _search_all(self, namespace: tuple[str, ...]) -> list[SearchItem]:
        found: list[SearchItem] = []
        offset = 0
        while True:
            page = self.store.search(namespace, limit=self._page_size, offset=offset)
            found.extend(_own(page, namespace))
            if len(page) < self._page_size:
                return found
            offset += len(page)

    async def _asearch_all(self, namespace: tuple[str, ...]) -> list[SearchItem]:
        found: list[SearchItem] = []
        offset = 0
        while True:
            page = await self.store.asearch(namespace, limit=self._page_size, offset=offset)
            found.extend(_own(page, namespace))
            if len(page) < self._page_size:
                return found
            offset += len(page)

    @staticmethod
    def _facts(items: list[SearchItem], scope: Literal["user", "project"]) -> list[Fact]:
        facts = [_fact(item, scope) for item in items]
        return sorted(facts, key=lambda fact: (fact.created_at, fact.id))

    def list_user_facts(self, context: Context) -> list[Fact]:
        """The facts this agent keeps about this user, oldest first."""
        return self._facts(self._search_all(self._namespace(context, "user")), "user")

    async def alist_user_facts(self, context: Context) -> list[Fact]:
        """Async :meth:`list_user_facts`."""
        return self._facts(await self._asearch_all(self._namespace(context, "user")), "user")

    def list_project_facts(self, context: Context) -> list[Fact]:
        """The facts of the context's project, oldest first; empty without a project."""
        if context.project_id is None:
            return []
        return self._facts(self._search_all(self._namespace(context, "project")), "project")

    async def alist_project_facts(self, context: Context) -> list[Fact]:
        """Async :meth:`list_project_facts`."""
        if context.project_id is None:
            return []
        items = await self._asearch_all(self._namespace(context, "project"))
        return self._facts(items, "project")

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

        BM25 picks about ``2 * top_k`` candidates per namespace; when the Store has a vector
        index, as many semantic neighbours join them (``store.hybrid``). Candidates are
        reranked by ``store.search.final_score`` (relevance decayed by age, plus
        confidence); each result carries its ``score``. ``age_from`` overrides
        ``Settings.memory_age_from`` (from the context's settings, else the default).
        """
        _check_search(query, top_k)
        hybrid = semantic_enabled(self.store)
        candidates = [
            _Candidates(
                fact_index_cache.get(self.store, namespace),
                scope,
                semantic_hits(self.store, namespace, query, 2 * top_k) if hybrid else None,
            )
            for namespace, scope in self._search_scopes(context)
        ]
        return _ranked(candidates, query, top_k, now, _age_from(context, age_from))

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
        _check_search(query, top_k)
        hybrid = semantic_enabled(self.store)
        candidates = [
            _Candidates(
                await fact_index_cache.aget(self.store, namespace),
                scope,
                await asemantic_hits(self.store, namespace, query, 2 * top_k) if hybrid else None,
            )
            for namespace, scope in self._search_scopes(context)
        ]
        return _ranked(candidates, query, top_k, now, _age_from(context, age_from))

    def memory_candidates(
        self, context: Context, query: str | None, *, limit: int = CANDIDATES
    ) -> list[Fact]:
        """Facts worth offering to the memory view: corrections, matches and confident ones.

        Up to ``limit`` of each: the most confident corrections, the best search matches for
        ``query`` and the most confident facts, without duplicates. Read through the same
        fresh index as :meth:`search`, so a fact stored by any process is seen at once.
        """
        indexes = [
            (fact_index_cache.get(self.store, namespace), scope)
            for namespace, scope in self._search_scopes(context)
        ]
        matches = self.search(context, query, top_k=limit) if query and query.strip() else []
        return _candidates(indexes, matches, limit)

    async def amemory_candidates(
        self, context: Context, query: str | None, *, limit: int = CANDIDATES
    ) -> list[Fact]:
        """Async :meth:`memory_candidates`."""
        indexes = [
            (await fact_index_cache.aget(self.store, namespace), scope)
            for namespace, scope in self._search_scopes(context)
        ]
        matches = await self.asearch(context, query, top_k=limit) if query and query.strip() else []
        return _candidates(indexes, matches, limit)

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


def _candidates(
    indexes: list[tuple[NamespaceIndex, FactScope]], matches: list[Fact], limit: int
) -> list[Fact]:
    chosen: dict[tuple[str, str], Fact] = {(f.scope, f.id): f for f in matches}
    for snapshot, scope in indexes:
        for keys in (snapshot.corrections[:limit], snapshot.by_confidence[:limit]):
            for key in keys:
                if (scope, key) not in chosen:
                    chosen[(scope, key)] = _fact_from_value(key, snapshot.docs[key].value, scope)
    return list(chosen.values())


def _age_from(context: Context, explicit: AgeFrom | None) -> AgeFrom:
    if explicit is not None:
        return explicit
    return (context.settings or Settings()).memory_age_from


def _check_search(query: object, top_k: object) -> None:
    if not isinstance(query, str):
        raise ValueError(f"a memory search query must be a string, got {query!r}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(f"top_k must be a whole number of at least 1, got {top_k!r}")


@dataclass(frozen=True)
class _Candidates:
    """One namespace's sources: its BM25 snapshot and, in hybrid mode, semantic hits."""

    snapshot: NamespaceIndex
    scope: FactScope
    semantic: list[SearchItem] | None


def _ranked(
    sources: list[_Candidates],
    query: str,
    top_k: int,
    now: datetime | None,
    age_from: AgeFrom,
) -> list[Fact]:
    """BM25 (and semantic) candidates, about 2 * top_k per namespace, reranked."""
    terms = tokenize(query)
    scored: list[Fact] = []
    for source in sources:
        lexical = source.snapshot.index.search(terms, 2 * top_k) if terms else []
        if source.semantic is None:
            raw_scores = dict(lexical)
            unseen: dict[str, Mapping[str, Any]] = {}
        else:
            matches = [item for item in source.semantic if (item.score or 0.0) > 0]
            raw_scores = fuse(lexical, matches)
            unseen = {item.key: item.value for item in matches}
        for key, raw in raw_scores.items():
            doc = source.snapshot.docs.get(key)
            value = doc.value if doc is not None else unseen[key]
            fact = _fact_from_value(key, value, source.scope)
            moment = fact.confirmed_at if age_from == "confirmed" else fact.created_at
            scored.append(replace(fact, score=final_score(raw, fact.confidence, moment, now)))
    scored.sort(key=lambda fact: (-fact.score, -fact.created_at.timestamp(), fact.id))
    return scored[:top_k]
