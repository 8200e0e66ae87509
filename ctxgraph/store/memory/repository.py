"""Long-term memory in the Store: facts per user and agent, project facts and the profile.

``MemoryRepository`` is a facade over four pieces, each in its own module: ``reads``
(facts, profile, problems), ``writer`` (direct and extracted facts, forgetting, the
profile), ``searcher`` (candidates and the ranker) and ``exchange`` (export and bulk
import). The pieces return sans-I/O plans (``calls``); each sync method runs its plan with
``run`` and its ``a``-prefixed twin with ``arun``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from langgraph.store.base import BaseStore, GetOp, Item

from ctxgraph.state.context import Context
from ctxgraph.state.sans_io import arun, run
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.exchange import MemoryExchange
from ctxgraph.store.memory.facts import Fact, Problem, Provenance
from ctxgraph.store.memory.ranking import Ranker, rank
from ctxgraph.store.memory.reads import MemoryReads
from ctxgraph.store.memory.rules import (
    Category,
    Decision,
    FactCandidate,
    ProfileUpdate,
)
from ctxgraph.store.memory.searcher import CANDIDATES, Gathered, MemorySearch
from ctxgraph.store.memory.writer import MemoryWriter
from ctxgraph.store.memory.writes import (
    utc,
)
from ctxgraph.store.search.scoring import AgeFrom

__all__ = ["MemoryRepository", "RepositoryFactory"]


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
        self._reads = MemoryReads(store)
        self._writer = MemoryWriter(store)
        self._search = MemorySearch(store, rank if ranker is None else ranker, settings)
        self._exchange = MemoryExchange(self._reads, self._writer)
        self._fact_write = self._writer.fact_write

    @property
    def ranker(self) -> Ranker:
        """The ranker that orders search results and the memory view's matches."""
        return self._search.ranker

    @property
    def settings(self) -> Settings | None:
        """The graph's settings the repository was built with (None is ``Settings()``)."""
        return self._search.settings

    def _sources(self, context: Context, query: str, limit: int, leading: int = 0) -> Gathered:
        """The candidates of a search (``MemorySearch.sources``), run with the sync API."""
        return run(self._search.sources(context, query, limit, leading))

    async def _asources(
        self, context: Context, query: str, limit: int, leading: int = 0
    ) -> Gathered:
        """Async :meth:`_sources`."""
        return await arun(self._search.sources(context, query, limit, leading))

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
        write = self._writer.fact_write(
            context,
            content,
            key,
            category,
            confidence,
            utc(created_at),
            scope,
            source_thread,
            evidence,
            provenance,
        )
        return run(self._writer.written(write))

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
        write = self._writer.fact_write(
            context,
            content,
            key,
            category,
            confidence,
            utc(created_at),
            scope,
            source_thread,
            evidence,
            provenance,
        )
        return await arun(self._writer.written(write))

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
        return self._exchange.add_facts(
            context, contents, category, confidence, created_at, scope, provenance
        )

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
        write = self._writer.remember_write(context, candidate, decision, thread_id, now, confirmed)
        return None if write is None else run(self._writer.written(write))

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
        write = self._writer.remember_write(context, candidate, decision, thread_id, now, confirmed)
        return None if write is None else await arun(self._writer.written(write))

    def list_user_facts(self, context: Context) -> list[Fact]:
        """The facts this agent keeps about this user.

        Args:
            context: Whose memory (user and agent).

        Returns:
            The facts, oldest first.

        """
        return run(self._reads.facts(context, "user"))

    async def alist_user_facts(self, context: Context) -> list[Fact]:
        """Async :meth:`list_user_facts`."""
        return await arun(self._reads.facts(context, "user"))

    def list_project_facts(self, context: Context) -> list[Fact]:
        """The facts of the context's project.

        Args:
            context: Whose memory; its ``project_id`` names the project.

        Returns:
            The facts, oldest first; empty without a project.

        """
        return run(self._reads.facts(context, "project"))

    async def alist_project_facts(self, context: Context) -> list[Fact]:
        """Async :meth:`list_project_facts`."""
        return await arun(self._reads.facts(context, "project"))

    def list_facts(self, context: Context) -> list[Fact]:
        """User facts for this agent, then the project's facts when the context has a project.

        Args:
            context: Whose memory.

        Returns:
            :meth:`list_user_facts` followed by :meth:`list_project_facts`.

        """
        return run(self._reads.facts(context, "user", "project"))

    async def alist_facts(self, context: Context) -> list[Fact]:
        """Async :meth:`list_facts`."""
        return await arun(self._reads.facts(context, "user", "project"))

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
        return run(self._search.search(context, query, top_k, now, age_from))

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
        return self._search.reindex(context)

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
        return await arun(self._search.search(context, query, top_k, now, age_from))

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
        return run(self._search.memory_candidates(context, query, limit, now, age_from))

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
        return await arun(self._search.memory_candidates(context, query, limit, now, age_from))

    def forget(self, context: Context, key: str) -> bool:
        """Delete the fact ``key`` from the user's facts, else from the project's.

        Args:
            context: Whose memory.
            key: The fact's key (its ``id``).

        Returns:
            True if a fact was deleted, False if neither namespace has ``key``.

        """
        return run(self._writer.forget(context, key))

    async def aforget(self, context: Context, key: str) -> bool:
        """Async :meth:`forget`."""
        return await arun(self._writer.forget(context, key))

    def get_profile(self, context: Context) -> dict[str, str]:
        """The user's profile (one per user, shared by agents and projects).

        Args:
            context: Whose profile (its ``user_id``).

        Returns:
            Every profile section by name; empty strings when nothing is known.

        """
        return run(self._reads.profile(context))

    async def aget_profile(self, context: Context) -> dict[str, str]:
        """Async :meth:`get_profile`."""
        return await arun(self._reads.profile(context))

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
        return run(self._writer.update_profile(context, update, now))

    async def aupdate_profile(
        self, context: Context, update: ProfileUpdate, *, now: datetime | None = None
    ) -> dict[str, str]:
        """Async :meth:`update_profile`."""
        return await arun(self._writer.update_profile(context, update, now))

    def problems(self, context: Context) -> list[Problem]:
        """The stored items of this user, agent (and project) that every reader skips.

        Args:
            context: Whose memory: the user's facts for the agent, the project's facts
                and the user's profile.

        Returns:
            Each malformed fact (by namespace, then key), then a malformed profile.

        """
        return run(self._reads.problems(context))

    async def aproblems(self, context: Context) -> list[Problem]:
        """Async :meth:`problems`."""
        return await arun(self._reads.problems(context))

    def export(self, context: Context) -> dict[str, Any]:
        """Everything remembered for this user, agent and project.

        Args:
            context: Whose memory.

        Returns:
            A JSON-serialisable mapping: ``user_id``, ``agent_name``, ``project_id``,
            ``profile``, ``facts`` and ``project_facts`` (each fact as ``Fact.to_dict``).

        """
        return run(self._exchange.export(context))

    async def aexport(self, context: Context) -> dict[str, Any]:
        """Async :meth:`export`."""
        return await arun(self._exchange.export(context))

    def profile_op(self, context: Context) -> GetOp:
        """The Store read of the user's profile, to batch with other reads.

        Args:
            context: Whose profile.

        Returns:
            The read; :meth:`profile_of` turns its result into the profile.

        """
        return self._reads.profile_op(context)

    @staticmethod
    def profile_of(item: Item | None) -> dict[str, str]:
        """The profile in what :meth:`profile_op` read.

        Args:
            item: The read's result (None when the user has no profile).

        Returns:
            The profile, as :meth:`get_profile` gives it.

        """
        return MemoryReads.profile_of(item)
