"""Long-term memory in the Store: facts per user and agent, project facts and the profile."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, Literal

from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from ctxgraph.state.context import Context, ContextError
from ctxgraph.state.messages import safe_text, unstorable_position, unstorable_problem
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.facts import Fact, FactScope, Problem, Provenance, fact_from_value
from ctxgraph.store.memory.ranking import (
    LeadingFact,
    Ranker,
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
    accept_candidate,
    accept_profile_update,
    normalize_text,
    slug_key,
    static_rejection,
)
from ctxgraph.store.memory.writes import (
    HISTORY_LIMIT,
    PROFILE_KEY,
    PROFILE_SECTIONS,
    SECTION_LIMIT,
    FactWrite,
    default_key,
    merge_section,
    merged_value,
    profile_problem,
    profile_sections,
    profile_value,
    utc,
)
from ctxgraph.store.namespaces import project_facts, user_facts, user_profile
from ctxgraph.store.search.hybrid import (
    EmbeddingError,
    QuerySimilarity,
    lexical_fallback,
    reindex,
    semantic_enabled,
)
from ctxgraph.store.search.index import fact_index_cache
from ctxgraph.store.search.scoring import AgeFrom, tokenize
from ctxgraph.store.search.vectors import aput_facts, put_facts

__all__ = [
    "HISTORY_LIMIT",
    "PROFILE_SECTIONS",
    "SECTION_LIMIT",
    "Decision",
    "Fact",
    "FactCandidate",
    "MemoryRepository",
    "MemoryUpdate",
    "Problem",
    "ProfileUpdate",
    "Provenance",
    "Ranker",
    "RepositoryFactory",
    "accept_candidate",
    "accept_profile_update",
    "merge_section",
]

BATCH = 500
"""Store operations per batch in bulk imports."""

DIRECT_PROVENANCES: tuple[Provenance, ...] = ("api", "cli", "import")
"""Provenances a write around the acceptance gate (``add_fact``, ``add_facts``) may give."""

CANDIDATES = 64
"""Facts of each kind (corrections, matches, most confident) offered to the memory view."""


def candidate_pool(top_k: int) -> int:
    """Candidates per namespace reranked for a search of ``top_k`` results.

    At least twice ``CANDIDATES``, so ``search`` (any ``top_k`` up to ``CANDIDATES``) and
    ``memory_candidates`` rerank the same facts and agree on order.
    """
    return max(2 * top_k, 2 * CANDIDATES)


@dataclass(frozen=True)
class RepositoryFactory:
    """Builds the ``MemoryRepository`` of a run's Store with the graph's ranker and settings.

    The memory view, the ``memory_search`` tool and the deferred-extraction worker each get
    their repository from the one factory the graph was built with, so a ``Ranker`` passed
    to ``build_graph`` orders the view and the tool alike.
    """

    ranker: Ranker | None = None
    """The graph's ranker; None is ``ranking.rank``."""
    settings: Settings | None = None
    """The graph's build-time settings, under the run's ``Context.settings``."""

    def __call__(self, store: BaseStore) -> MemoryRepository:
        """The repository of ``store``."""
        return MemoryRepository(store, ranker=self.ranker, settings=self.settings)


class MemoryRepository:
    """Reads and writes long-term memory in any LangGraph ``BaseStore``.

    Facts live per user and agent (``scope="user"``) and per project (``"project"``); the
    profile lives per user. Every method takes the ``Context`` that says whose memory it
    is; each ``a``-prefixed method is the async twin of the one without the prefix, with
    the same arguments, result and errors.

    Args:
        store: Any LangGraph Store (``InMemoryStore``, ``PostgresStore``, ...).
        ranker: Orders search results and the memory view's matches (``Ranker``); None
            keeps the default ``final_score`` ranking (``ranking.rank``).
        settings: The graph's settings: ``memory_age_from`` of these, under a context's
            ``Context.settings``, ages facts when a search is given no ``age_from``.
            None is ``Settings()``.

    """

    def __init__(
        self,
        store: BaseStore,
        *,
        ranker: Ranker | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.store = store
        self.ranker: Ranker = rank if ranker is None else ranker
        self.settings = settings

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
        provenance: Provenance = "api",
    ) -> Fact:
        """Store ``content`` as a fact, bypassing extraction and its acceptance rules.

        A fact already stored under ``key`` with the same content keeps its confidence and
        ``created_at``; other content replaces it and moves the old content to its history.

        Args:
            context: Whose memory: the user and agent (and, for ``scope="project"``, the
                project).
            content: The fact's text (whitespace is normalized).
            key: The single-valued attribute the fact sets; None derives one from the
                content.
            category: ``preference``, ``context``, ``goal`` or ``correction``.
            confidence: Between 0 and 1.
            created_at: When it was learnt; None is now.
            scope: ``"user"`` (this user and agent) or ``"project"`` (the context's
                project).
            source_thread: The thread it came from, if any.
            evidence: The text that supports it, if any.
            provenance: Who writes it: ``"api"`` (application code, the default), ``"cli"``
                or ``"import"``. Never ``"extraction"``: only :meth:`remember` (the
                acceptance gate) writes that, and the memory view marks every other
                fact as unverified.

        Returns:
            The fact as stored.

        Raises:
            ValueError: Empty content, a confidence outside 0..1, a key that is not
                1-80 snake_case characters or a provenance other than ``"api"``,
                ``"cli"`` or ``"import"``.
            ContextError: ``scope="project"`` with a context without a ``project_id``.

        """
        moment = utc(created_at)
        plan = self._fact_write(
            context,
            content,
            key,
            category,
            confidence,
            moment,
            scope,
            source_thread,
            evidence,
            provenance,
        )
        value = plan.value(self.store.get(plan.namespace, plan.key))
        put_facts(self.store, [PutOp(plan.namespace, plan.key, value, index=plan.index)])
        return plan.fact(value)

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
        provenance: Provenance = "api",
    ) -> Fact:
        """Async :meth:`add_fact`."""
        moment = utc(created_at)
        plan = self._fact_write(
            context,
            content,
            key,
            category,
            confidence,
            moment,
            scope,
            source_thread,
            evidence,
            provenance,
        )
        value = plan.value(await self.store.aget(plan.namespace, plan.key))
        await aput_facts(self.store, [PutOp(plan.namespace, plan.key, value, index=plan.index)])
        return plan.fact(value)

    def add_facts(
        self,
        context: Context,
        contents: Sequence[str],
        *,
        category: Category = "context",
        confidence: float = 0.9,
        created_at: datetime | None = None,
        scope: Literal["user", "project"] = "user",
        provenance: Provenance = "import",
    ) -> int:
        """Store many facts at once (an import), each keyed by its content.

        Same rules as :meth:`add_fact`, in batches of ``BATCH`` Store operations.

        Args:
            context: Whose memory, as in :meth:`add_fact`.
            contents: The facts' texts.
            category: The category of every fact.
            confidence: The confidence of every fact.
            created_at: When they were learnt; None is now.
            scope: ``"user"`` or ``"project"``.
            provenance: Who writes them, as in :meth:`add_fact` (default ``"import"``).

        Returns:
            How many facts were stored.

        Raises:
            ValueError: As :meth:`add_fact`, before anything is stored.
            ContextError: As :meth:`add_fact`.

        """
        moment = utc(created_at)
        plans = [
            self._fact_write(
                context, text, None, category, confidence, moment, scope, provenance=provenance
            )
            for text in contents
        ]
        for start in range(0, len(plans), BATCH):
            chunk = plans[start : start + BATCH]
            stored = self.store.batch([GetOp(plan.namespace, plan.key) for plan in chunk])
            put_facts(
                self.store,
                [
                    plan.put_op(old if isinstance(old, Item) else None)
                    for plan, old in zip(chunk, stored, strict=True)
                ],
            )
        return len(plans)

    def _fact_write(
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
        """The plan of a direct write, its arguments checked (no I/O)."""
        if provenance not in DIRECT_PROVENANCES:
            raise ValueError(
                f"a direct write has provenance 'api', 'cli' or 'import', got {provenance!r} "
                "(only MemoryRepository.remember writes 'extraction')"
            )
        text = normalize_text(content)
        if not text:
            raise ValueError("a fact needs non-empty content")
        for label, value in (("content", text), ("evidence", evidence or "")):
            position = unstorable_position(value)
            if position is not None:
                raise ValueError(unstorable_problem(f"the fact's {label}", value, position))
        if not 0.0 <= confidence <= 1.0:
            raise ValueError(f"confidence must be within 0..1, got {confidence}")
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
        return FactWrite(self._namespace(context, scope), resolved, scope, merge)

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
        """Store an extracted candidate the acceptance rules accepted, in its scope.

        Args:
            context: Whose memory.
            candidate: The memory model's candidate.
            decision: ``accept_candidate``'s decision on it.
            thread_id: The thread it was extracted from.
            now: When it was seen; None is now.
            confirmed: The user explicitly confirmed the fact: the only way to raise the
                confidence of a fact already stored with the same content.

        Returns:
            The fact as stored, or None when ``decision`` rejected the candidate.

        Raises:
            ValueError: The candidate can never be stored (transactional or temporary) or
                the decision's target is not the candidate's scope.
            ContextError: A project candidate with a context without a ``project_id``.

        """
        plan = self._remember_write(context, candidate, decision, thread_id, now, confirmed)
        if plan is None:
            return None
        value = plan.value(self.store.get(plan.namespace, plan.key))
        put_facts(self.store, [PutOp(plan.namespace, plan.key, value, index=plan.index)])
        return plan.fact(value)

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
        plan = self._remember_write(context, candidate, decision, thread_id, now, confirmed)
        if plan is None:
            return None
        value = plan.value(await self.store.aget(plan.namespace, plan.key))
        await aput_facts(self.store, [PutOp(plan.namespace, plan.key, value, index=plan.index)])
        return plan.fact(value)

    def _remember_write(
        self,
        context: Context,
        candidate: FactCandidate,
        decision: Decision,
        thread_id: str,
        now: datetime | None,
        confirmed: bool,
    ) -> FactWrite | None:
        """The plan of storing an accepted candidate; None when the decision rejected it."""
        scope = self._checked(candidate, decision)
        if scope is None:
            return None
        merge = partial(
            merged_value,
            key=candidate.key,
            content=safe_text(normalize_text(candidate.content)),
            category=candidate.category,
            confidence=candidate.confidence,
            now=utc(now),
            source_thread=thread_id,
            evidence=safe_text(candidate.evidence_text),
            confirmed=confirmed,
            provenance="extraction",
        )
        fact_scope: FactScope = "project" if scope == "project" else "user"
        return FactWrite(self._namespace(context, scope), candidate.key, fact_scope, merge)

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
        """The facts this agent keeps about this user.

        Args:
            context: Whose memory (user and agent).

        Returns:
            The facts, oldest first.

        """
        return self._listed(context, "user")

    async def alist_user_facts(self, context: Context) -> list[Fact]:
        """Async :meth:`list_user_facts`."""
        return await self._alisted(context, "user")

    def list_project_facts(self, context: Context) -> list[Fact]:
        """The facts of the context's project.

        Args:
            context: Whose memory; its ``project_id`` names the project.

        Returns:
            The facts, oldest first; empty without a project.

        """
        if context.project_id is None:
            return []
        return self._listed(context, "project")

    async def alist_project_facts(self, context: Context) -> list[Fact]:
        """Async :meth:`list_project_facts`."""
        if context.project_id is None:
            return []
        return await self._alisted(context, "project")

    def list_facts(self, context: Context) -> list[Fact]:
        """User facts for this agent, then the project's facts when the context has a project.

        Args:
            context: Whose memory.

        Returns:
            :meth:`list_user_facts` followed by :meth:`list_project_facts`.

        """
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
        put the same fact first. The repository's ranker orders the candidates: by default
        ``store.search.final_score`` (relevance decayed by age, plus confidence). The index
        is refreshed from the Store first, so a fact written by any process sharing the
        Store is found.

        Args:
            context: Whose memory: this user and agent, and the context's project.
            query: What to look for.
            top_k: How many facts to return at most (at least 1).
            now: The moment ages are measured at; None is now.
            age_from: ``"created"`` or ``"confirmed"``: which moment ages a fact; None
                takes ``memory_age_from`` of the repository's settings under the
                context's ``Context.settings``.

        Returns:
            The best facts, each with its ``score``.

        Raises:
            ValueError: ``query`` is not a string or ``top_k`` is not a whole number of
                at least 1.
            SettingsError: The context's settings cannot apply to the repository's.

        """
        check_search(query, top_k)
        sources, _ = self._sources(context, query, candidate_pool(top_k))
        return self._ranked(context, query, sources, top_k, now, age_from)

    def _ranked(
        self,
        context: Context,
        query: str,
        sources: Sequence[Source],
        top_k: int,
        now: datetime | None,
        age_from: AgeFrom | None,
    ) -> list[Fact]:
        """The ranker's best ``top_k`` of ``sources`` (the one place the ranker is called)."""
        moment = age_from_of(context, age_from, self.settings)
        ranked = self.ranker(sources, top_k, now, moment, query=query)
        if not isinstance(ranked, list) or not all(isinstance(f, Fact) for f in ranked):
            raise TypeError(
                f"the memory ranker {self.ranker!r} must return a list of Fact records, "
                f"got {ranked!r:.200}"
            )
        return ranked[:top_k]

    def reindex(self, context: Context) -> int:
        """Embed the facts of this user and agent (and project) that have no vector.

        A fact whose vector could not be made when it was written (the embedding endpoint
        was down) is stored without one; a search embeds those it meets, this embeds them
        all. Nothing happens without a vector index.

        Args:
            context: Whose memory: this user and agent, and the context's project.

        Returns:
            How many facts were embedded.

        """
        embedded = 0
        for namespace, _ in self._search_scopes(context):
            values = dict(fact_index_cache.values(self.store, namespace))
            embedded += reindex(self.store, namespace, values)
        return embedded

    def _similarity(self, query: str) -> QuerySimilarity | None:
        """The semantic side of a search for ``query``; None in lexical mode."""
        if semantic_enabled(self.store) and bool(query.strip()):
            return QuerySimilarity(self.store, query)
        return None

    def _sources(
        self, context: Context, query: str, limit: int, leading: int = 0
    ) -> tuple[list[Source], list[LeadingFact]]:
        """Candidates per namespace, each namespace refreshed once.

        ``limit`` BM25 (and semantic) candidates for ``query`` and, with ``leading``, that
        many of the most confident corrections and facts. In hybrid mode the query is
        embedded once and the nearest stored vectors are asked for first, so the index
        refresh that follows covers them and gives their exact BM25; the BM25 hits they
        miss are scored against the same query vector. When the embedder fails, this
        search is lexical (one warning).
        """
        terms = tokenize(query)
        similarity = self._similarity(query)
        if similarity is not None:
            try:
                similarity.embed([space for space, _ in self._search_scopes(context)])
                return self._gathered(context, terms, similarity, limit, leading)
            except EmbeddingError as error:
                lexical_fallback(error)
        return self._gathered(context, terms, None, limit, leading)

    def _gathered(
        self,
        context: Context,
        terms: Sequence[str],
        similarity: QuerySimilarity | None,
        limit: int,
        leading: int,
    ) -> tuple[list[Source], list[LeadingFact]]:
        sources: list[Source] = []
        first: list[LeadingFact] = []
        for namespace, scope in self._search_scopes(context):
            near = None if similarity is None else similarity.neighbours(namespace, limit)
            found = fact_index_cache.lookup(
                self.store,
                namespace,
                terms,
                limit,
                leading=leading,
                extra_keys=[] if near is None else [key for key, _ in near.scores],
            )
            semantic = None
            if similarity is not None and near is not None:
                semantic = similarity.complete(namespace, near, found)
            sources.append(Source(scope, found.hits, semantic))
            first += [(scope, key, value) for key, value in found.leading]
        return sources, first

    async def _asources(
        self, context: Context, query: str, limit: int, leading: int = 0
    ) -> tuple[list[Source], list[LeadingFact]]:
        """Async :meth:`_sources`."""
        terms = tokenize(query)
        similarity = self._similarity(query)
        if similarity is not None:
            try:
                await similarity.aembed(
                    [namespace for namespace, _ in self._search_scopes(context)]
                )
                return await self._agathered(context, terms, similarity, limit, leading)
            except EmbeddingError as error:
                lexical_fallback(error)
        return await self._agathered(context, terms, None, limit, leading)

    async def _agathered(
        self,
        context: Context,
        terms: Sequence[str],
        similarity: QuerySimilarity | None,
        limit: int,
        leading: int,
    ) -> tuple[list[Source], list[LeadingFact]]:
        sources: list[Source] = []
        first: list[LeadingFact] = []
        for namespace, scope in self._search_scopes(context):
            near = None if similarity is None else await similarity.aneighbours(namespace, limit)
            found = await fact_index_cache.alookup(
                self.store,
                namespace,
                terms,
                limit,
                leading=leading,
                extra_keys=[] if near is None else [key for key, _ in near.scores],
            )
            semantic = None
            if similarity is not None and near is not None:
                semantic = await similarity.acomplete(namespace, near, found)
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
        return self._ranked(context, query, sources, top_k, now, age_from)

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
        ranks them (same candidates, same ranker), so the view and ``memory_search`` agree
        on which fact comes first. Then the most confident corrections and the most
        confident facts not already matched, up to ``limit`` of each. Read through the
        same fresh index as :meth:`search`, so a fact stored by any process is seen at
        once.

        Args:
            context: Whose memory.
            query: The turn's user text; None or empty offers no matches.
            limit: Most matches, and most corrections and facts besides them.
            now: As in :meth:`search`.
            age_from: As in :meth:`search`.

        Returns:
            The matches, best first, then the other facts offered.

        Raises:
            SettingsError: As :meth:`search`.

        """
        text = query or ""
        sources, first = self._sources(context, text, candidate_pool(limit), leading=limit)
        return leading_facts(self._ranked(context, text, sources, limit, now, age_from), first)

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
        text = query or ""
        sources, first = await self._asources(context, text, candidate_pool(limit), leading=limit)
        return leading_facts(self._ranked(context, text, sources, limit, now, age_from), first)

    def forget(self, context: Context, key: str) -> bool:
        """Delete the fact ``key`` from the user's facts, else from the project's.

        Args:
            context: Whose memory.
            key: The fact's key (its ``id``).

        Returns:
            True if a fact was deleted, False if neither namespace has ``key``.

        """
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
        """The user's profile (one per user, shared by agents and projects).

        Args:
            context: Whose profile (its ``user_id``).

        Returns:
            Every profile section by name; empty strings when nothing is known.

        """
        return profile_sections(self.store.get(user_profile(context.user_id), PROFILE_KEY))

    async def aget_profile(self, context: Context) -> dict[str, str]:
        """Async :meth:`get_profile`."""
        return profile_sections(await self.store.aget(user_profile(context.user_id), PROFILE_KEY))

    def update_profile(
        self, context: Context, update: ProfileUpdate, *, now: datetime | None = None
    ) -> dict[str, str]:
        """Merge ``update`` into its profile section; ``top_of_mind`` is replaced instead.

        Args:
            context: Whose profile.
            update: The section and its new content.
            now: When it was learnt; None is now.

        Returns:
            The whole profile after the update, as :meth:`get_profile` gives it.

        Raises:
            ValueError: An update the gate can never accept (transactional, temporary, or
                not about the user).

        """
        namespace = user_profile(context.user_id)
        stored = self.store.get(namespace, PROFILE_KEY)
        value = profile_value(stored, update, utc(now))
        self.store.put(namespace, PROFILE_KEY, value, index=False)
        return dict(value["sections"])

    async def aupdate_profile(
        self, context: Context, update: ProfileUpdate, *, now: datetime | None = None
    ) -> dict[str, str]:
        """Async :meth:`update_profile`."""
        namespace = user_profile(context.user_id)
        stored = await self.store.aget(namespace, PROFILE_KEY)
        value = profile_value(stored, update, utc(now))
        await self.store.aput(namespace, PROFILE_KEY, value, index=False)
        return dict(value["sections"])

    # -- problems -----------------------------------------------------------------------

    def _problem_spaces(self, context: Context) -> list[tuple[str, ...]]:
        return [namespace for namespace, _ in self._search_scopes(context)]

    def problems(self, context: Context) -> list[Problem]:
        """The stored items of this user, agent (and project) that every reader skips.

        Args:
            context: Whose memory: the user's facts for the agent, the project's facts
                and the user's profile.

        Returns:
            Each malformed fact (by namespace, then key), then a malformed profile.

        """
        found = [
            Problem(namespace, key, problem)
            for namespace in self._problem_spaces(context)
            for key, problem in fact_index_cache.problems(self.store, namespace)
        ]
        profile = profile_problem(self.store.get(user_profile(context.user_id), PROFILE_KEY))
        return found if profile is None else [*found, profile]

    async def aproblems(self, context: Context) -> list[Problem]:
        """Async :meth:`problems`."""
        found = [
            Problem(namespace, key, problem)
            for namespace in self._problem_spaces(context)
            for key, problem in await fact_index_cache.aproblems(self.store, namespace)
        ]
        stored = await self.store.aget(user_profile(context.user_id), PROFILE_KEY)
        profile = profile_problem(stored)
        return found if profile is None else [*found, profile]

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
        """Everything remembered for this user, agent and project.

        Args:
            context: Whose memory.

        Returns:
            A JSON-serialisable mapping: ``user_id``, ``agent_name``, ``project_id``,
            ``profile``, ``facts`` and ``project_facts`` (each fact as ``Fact.to_dict``).

        """
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
        """The Store read of the user's profile, to batch with other reads.

        Args:
            context: Whose profile.

        Returns:
            The read; :meth:`profile_of` turns its result into the profile.

        """
        config = self.store.ttl_config
        refresh = config.get("refresh_on_read", True) if config is not None else True
        return GetOp(user_profile(context.user_id), PROFILE_KEY, refresh)

    @staticmethod
    def profile_of(item: Item | None) -> dict[str, str]:
        """The profile in what :meth:`profile_op` read.

        Args:
            item: The read's result (None when the user has no profile).

        Returns:
            The profile, as :meth:`get_profile` gives it.

        """
        return profile_sections(item)
