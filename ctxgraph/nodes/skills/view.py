"""The skill parts of one request: the listing, the active-skill context and the policy."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from ctxgraph.nodes.skills.active import (
    bodies_to_reattach,
    loads_in_window,
    render_reattached,
    render_reminders,
    render_slash,
)
from ctxgraph.nodes.skills.listing import render_listing
from ctxgraph.nodes.skills.policy import (
    ALWAYS_ALLOWED,
    UNRESTRICTED,
    ToolPolicy,
    slash_skill,
    tool_policy,
)
from ctxgraph.nodes.skills.slash import SKILLS_ORIGIN
from ctxgraph.nodes.skills.sources import SkillSources, has_sources
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.messages import HIDE_FROM_UI_KEY, ORIGIN_KEY
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import count_text
from ctxgraph.store.skills import Skill, SkillSnapshot

SKILLS_MESSAGE_ID = "ctxgraph-skills"

WindowOf = Callable[[Settings], int | None]
"""The main model's input window under a run's settings (None when unknown)."""


@dataclass(frozen=True)
class SkillParts:
    """What skills add to a request."""

    listing: str
    """Appended to the system prompt; "" without skills."""
    context: HumanMessage | None
    """Reminders of the active skills, re-attached bodies and the run's slash skill."""
    policy: ToolPolicy


NO_SKILLS = SkillParts("", None, UNRESTRICTED)


def skills_message(text: str) -> HumanMessage:
    """The active-skill context as a data message: marked, hidden from UIs, never stored."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return HumanMessage(
        content=text,
        id=f"{SKILLS_MESSAGE_ID}-{digest}",
        additional_kwargs={ORIGIN_KEY: SKILLS_ORIGIN, HIDE_FROM_UI_KEY: True},
    )


def _entry_key(entry: Mapping[str, Any]) -> Hashable:
    allowed = entry.get("allowed_tools")
    return (
        entry.get("name"),
        entry.get("path"),
        entry.get("sha256"),
        entry.get("source"),
        entry.get("tool_call_id"),
        None if allowed is None else tuple(allowed),
    )


class SkillRequests:
    """Computes (and caches) the skill parts of the requests of one graph."""

    def __init__(
        self,
        sources: SkillSources,
        tool_names: Sequence[str],
        window_of: WindowOf,
        count: Callable[[str], int] = count_text,
        exempt: frozenset[str] = ALWAYS_ALLOWED,
    ) -> None:
        """``count`` sizes the listing and re-attached skills (the graph's token counter).

        ``exempt`` are the tools every skill policy allows.
        """
        self._count = count
        self._exempt = exempt
        self._sources = sources
        self._tool_names = tuple(tool_names)
        self._window_of = window_of
        self._listing_cache: tuple[Hashable, str] | None = None
        self._parts_cache: tuple[Hashable, SkillParts] | None = None

    @property
    def sources(self) -> SkillSources:
        """The skill sources the parts are read from."""
        return self._sources

    def parts(self, state: AgentState, settings: Settings) -> SkillParts:
        """The skill parts of the request for ``state`` under ``settings``."""
        entries = state.get("skill_context") or []
        if not entries and not has_sources(settings):
            return NO_SKILLS
        snapshot = self._sources.current(settings)
        window: Sequence[BaseMessage] = state.get("messages") or []
        slash = slash_skill(window, snapshot)
        present = loads_in_window(window) if entries else set()
        size = self._window_of(settings)
        list_budget = settings.skills_list_tokens(size)
        reinject_budget = settings.skills_reinject_tokens(size)
        key = (
            snapshot.digest,
            tuple(_entry_key(entry) for entry in entries),
            frozenset(str(e.get("tool_call_id")) for e in entries) & present,
            None if slash is None else (slash.path, slash.sha256),
            list_budget,
            reinject_budget,
        )
        if self._parts_cache is not None and self._parts_cache[0] == key:
            return self._parts_cache[1]
        policy = tool_policy(entries, slash, snapshot, self._exempt)
        parts = SkillParts(
            self._listing(snapshot, list_budget),
            self._context(entries, window, snapshot, slash, policy, reinject_budget),
            policy,
        )
        self._parts_cache = (key, parts)
        return parts

    def _context(
        self,
        entries: Sequence[Mapping[str, Any]],
        window: Sequence[BaseMessage],
        snapshot: SkillSnapshot,
        slash: Skill | None,
        policy: ToolPolicy,
        budget: int,
    ) -> HumanMessage | None:
        """The active-skill context: reminders, re-attached bodies, the run's slash skill."""
        blocks: list[str] = []
        if entries or slash is not None:
            blocks.append(render_reminders(entries, snapshot, policy, self._tool_names))
        reattach = bodies_to_reattach(entries, window, snapshot, slash)
        blocks.extend(render_reattached(reattach, budget, self._count))
        if slash is not None:
            blocks.append(render_slash(slash))
        return skills_message("\n\n".join(blocks)) if blocks else None

    def _listing(self, snapshot: SkillSnapshot, budget: int) -> str:
        """The listing of ``snapshot``, rendered once per digest and budget."""
        key = (snapshot.digest, budget)
        if self._listing_cache is None or self._listing_cache[0] != key:
            self._listing_cache = (key, render_listing(snapshot.skills, budget, self._count))
        return self._listing_cache[1]
