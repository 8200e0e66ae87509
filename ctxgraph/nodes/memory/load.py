"""The ``load_memory`` node: once per turn, render the memory view the requests carry."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime

from ctxgraph.nodes.memory.extract import handover
from ctxgraph.nodes.memory.notes import PROFILE_KEY
from ctxgraph.nodes.memory.reader import MemoryReader
from ctxgraph.nodes.memory.render import assemble_view, fact_line, view_lines
from ctxgraph.nodes.memory.selection import select_view_facts, view_clock
from ctxgraph.state.context import Context, require_context
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.memory_notes import MemorySelection, SelectedFact
from ctxgraph.state.messages import content_text, is_real_user_message
from ctxgraph.state.sans_io import Flow, arun, io, run
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.facts import Fact
from ctxgraph.store.memory.repository import MemoryRepository

logger = logging.getLogger("ctxgraph.memory")

MEMORY_VIEW_KEY = "memory_view"
"""State key of the rendered view; it never enters ``messages``."""
MEMORY_SELECTION_KEY = "memory_selection"
"""State key of the turn's selection the memory notes are made of (auto mode only)."""


def latest_user_text(messages: Sequence[BaseMessage]) -> str:
    """Text of the latest real user message (injected data messages are skipped)."""
    for message in reversed(messages):
        if is_real_user_message(message):
            return content_text(message)
    return ""


class MemoryLoader(MemoryReader):
    """Reads the profile and facts of the run's user, agent and project, and renders them.

    ``repositories`` gives the repository of the run's Store (with the graph's ranker,
    which orders the view's matches); ``counter`` measures the view against
    ``memory_budget`` (the graph's ``TokenCounter``; None counts with tiktoken). In auto
    mode the view carries the facts ``select_view_facts`` keeps for the turn's query
    (``memory_view_min_score``, ``memory_view_max_facts``), ranked with ages taken at the
    start of the UTC day (``view_clock``), so the view's text does not change within a day
    unless the facts or the query do. In auto mode the same choice is kept entry by entry
    (``memory_selection``: the profile block, then each fact's line under its scope and
    key), which the memory part turns into notes. Extraction is handed every candidate read.
    """

    def _job(
        self, state: AgentState, runtime: Runtime[Context]
    ) -> tuple[Context, Settings, MemoryRepository, str] | None:
        """Who, how and with which query to load; None when nothing is to be loaded."""
        context = require_context(runtime.context)
        settings = self._settings_for(context)
        if settings.memory_mode == "off":
            return None
        if runtime.store is None:
            # Like extraction, loading needs a Store; a graph compiled without one still runs.
            logger.debug("memory loading skipped: the graph has no store")
            return None
        query = latest_user_text(state.get("messages") or [])
        return context, settings, self._repositories(runtime.store), query

    def _render(
        self, profile: dict[str, str], facts: list[Fact], settings: Settings
    ) -> dict[str, Any]:
        """The view and selection of ``profile`` and the candidates ``facts`` for this turn."""
        chosen = select_view_facts(
            facts,
            min_score=settings.memory_view_min_score,
            max_facts=settings.memory_view_max_facts,
        )
        profile_lines, lines = view_lines(profile, chosen, settings, self._counter)
        view = assemble_view(profile_lines, lines)
        if settings.memory_mode != "auto":
            return {MEMORY_VIEW_KEY: view, MEMORY_SELECTION_KEY: None}
        chosen_entries = selection(profile_lines, lines, chosen)
        return {MEMORY_VIEW_KEY: view, MEMORY_SELECTION_KEY: chosen_entries}

    def _load(self, state: AgentState, runtime: Runtime[Context]) -> Flow[dict[str, Any]]:
        """:meth:`load` as a flow: the repository's reads are its I/O."""
        job = self._job(state, runtime)
        if job is None:
            return {MEMORY_VIEW_KEY: "", MEMORY_SELECTION_KEY: None}
        context, settings, repository, query = job
        auto = settings.memory_mode == "auto"
        facts: list[Fact] = []
        if auto:
            facts = yield from io(
                repository.memory_candidates,
                repository.amemory_candidates,
                context,
                query,
                now=view_clock(),
                age_from=settings.memory_age_from,
            )
        profile = yield from io(repository.get_profile, repository.aget_profile, context)
        # Extraction reuses what was read here (the run's untracked memory_turn channel).
        view = self._render(profile, facts, settings)
        return {**view, **handover(profile, facts if auto else None)}

    def load(self, state: AgentState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Render this turn's memory view into state."""
        return run(self._load(state, runtime))

    async def aload(self, state: AgentState, runtime: Runtime[Context]) -> dict[str, Any]:
        """Async :meth:`load`."""
        return await arun(self._load(state, runtime))


def selection(profile_lines: list[str], lines: list[str], facts: list[Fact]) -> MemorySelection:
    """The selection of a view: its profile block, then each shown line under its fact's key.

    A fact's key is ``scope:key`` (a user's and a project's fact may share a key).
    """
    keys = {fact_line(fact): f"{fact.scope}:{fact.key}" for fact in facts}
    entries: list[SelectedFact] = []
    if profile_lines:
        entries.append({"key": PROFILE_KEY, "text": "\n".join(profile_lines)})
    entries.extend({"key": keys.get(line, line), "text": line} for line in lines)
    return {"entries": entries}
