"""The memory part: ``memory_search``, the memory view per turn, the extraction seams."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool

from ctxgraph.nodes.memory.search_tool import memory_search_tool
from ctxgraph.nodes.part import Part, PartSetup, TurnMessage
from ctxgraph.nodes.request import latest_user_index, view_digest
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.messages import HIDE_FROM_UI_KEY, ORIGIN_KEY
from ctxgraph.state.placement import MemoryPlacement
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.ranking import Ranker
from ctxgraph.store.memory.repository import RepositoryFactory

MEMORY_MESSAGE_ID = "ctxgraph-memory"


def memory_message(view: str) -> HumanMessage:
    """The memory view as a data message: marked by origin, hidden from UIs, never stored.

    The id carries a digest of the text, so token counts cached per id stay right.
    """
    return HumanMessage(
        content=view,
        id=f"{MEMORY_MESSAGE_ID}-{view_digest(view)}",
        additional_kwargs={ORIGIN_KEY: "memory", HIDE_FROM_UI_KEY: True},
    )


def anchor_index(window: Sequence[BaseMessage], view: str, placed: MemoryPlacement | None) -> int:
    """Where in ``window`` the memory view goes: the index of the message it precedes.

    The previous request's spot while the view is byte-identical and that message is still
    in the window; otherwise before the latest real user message; without one, at 0 (the
    end of the stable part).
    """
    if placed and placed.get("digest") == view_digest(view) and placed.get("before"):
        for index, message in enumerate(window):
            if message.id == placed["before"]:
                return index
    return latest_user_index(window)


class MemoryPart(Part):
    """Long-term memory as a part: ``memory_search``, and the view placed in each request.

    ``extraction_prompt`` replaces ``EXTRACTION_PROMPT`` of memory extraction and
    ``ranker`` orders search results and the view's matches, in the graph and in the
    memory worker alike. The view goes before the latest real user message and stays
    where the previous request put it while its text is unchanged
    (``state["memory_placement"]``).
    """

    rank = 20

    def __init__(
        self,
        extraction_prompt: str | None = None,
        ranker: Ranker | None = None,
        *,
        repositories: tuple[Settings, RepositoryFactory] | None = None,
    ) -> None:
        """``repositories`` are those made for a graph's settings, shared when prepared."""
        self.extraction_prompt = extraction_prompt
        self.ranker = ranker
        self._repositories = repositories
        # The memory message of the latest view; a turn's requests all carry the same one.
        self._cache: tuple[str, HumanMessage] | None = None

    def repositories(self, settings: Settings) -> RepositoryFactory:
        """The memory repositories of the view and ``memory_search``, with the ranker."""
        if self._repositories is None or self._repositories[0] is not settings:
            self._repositories = (
                settings,
                RepositoryFactory(ranker=self.ranker, settings=settings),
            )
        return self._repositories[1]

    def prepared(self, setup: PartSetup) -> MemoryPart:
        """A part of its own for one graph (it caches the view's message)."""
        return MemoryPart(self.extraction_prompt, self.ranker, repositories=self._repositories)

    def tools(self, setup: PartSetup) -> Sequence[BaseTool]:
        """``memory_search`` unless memory is off; the run's memory mode binds it."""
        if setup.settings.memory_mode == "off":
            return ()
        repositories = self.repositories(setup.settings)
        return [
            memory_search_tool(setup.settings, repositories=repositories, counter=setup.counter)
        ]

    def _view(self, state: AgentState, window: Sequence[BaseMessage]) -> tuple[str, int] | None:
        view = state.get("memory_view")
        if not view:
            return None
        return view, anchor_index(window, view, state.get("memory_placement"))

    def per_turn(self, state: AgentState, window: Sequence[BaseMessage]) -> Sequence[TurnMessage]:
        """The memory view, where ``anchor_index`` puts it."""
        placed = self._view(state, window)
        if placed is None:
            return ()
        view, at = placed
        if self._cache is None or self._cache[0] != view:
            self._cache = (view, memory_message(view))
        return [TurnMessage(at, self._cache[1])]

    def placement(self, state: AgentState, window: Sequence[BaseMessage]) -> MemoryPlacement | None:
        """The message the view precedes and the view's digest (None without a view)."""
        placed = self._view(state, window)
        if placed is None:
            return None
        view, at = placed
        before = window[at].id if at < len(window) else None
        return {"before": before, "digest": view_digest(view)}

    def after_reply(
        self, answer: AIMessage, placement: MemoryPlacement | None, carry: Any
    ) -> Mapping[str, Any]:
        """Where the request placed the view, kept in ``memory_placement``."""
        return {} if placement is None else {"memory_placement": placement}
