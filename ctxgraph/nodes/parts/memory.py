"""The memory part: ``memory_search``, the memory notes (or view) per turn, the extraction seams."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool

from ctxgraph.nodes.memory.extract import check_extraction_prompt
from ctxgraph.nodes.memory.notes import note_index, note_message, plan_notes, record_of
from ctxgraph.nodes.memory.search_tool import memory_search_tool
from ctxgraph.nodes.part import Part, PartSetup, Placement, TurnMessage
from ctxgraph.nodes.request import latest_user_index, view_digest
from ctxgraph.state.graph_state import AgentState, MemoryState
from ctxgraph.state.memory_notes import MemoryNote, MemoryNotes
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
    """Long-term memory as a part: ``memory_search``, and the notes placed in each request.

    ``extraction_prompt`` replaces ``EXTRACTION_PROMPT`` of memory extraction and
    ``ranker`` orders search results and the view's matches, in the graph and in the
    memory worker alike. With a turn's selection (``state["memory_selection"]``, auto
    mode) the request carries the window's notes (``plan_notes``), kept in
    ``state["memory_notes"]``: each fact shown once per window, each note repeated at its
    place. Without one (tool mode, a checkpoint from before notes) the view goes before
    the latest real user message and stays where the previous request put it while its
    text is unchanged (``state["memory_placement"]``).
    """

    rank = 20
    state = MemoryState

    def __init__(self, extraction_prompt: str | None = None, ranker: Ranker | None = None) -> None:
        """Check and keep the seams.

        Raises:
            PromptTemplateError: ``extraction_prompt`` cannot be filled.
            TypeError: ``ranker`` is not a ``Ranker``.

        """
        if ranker is not None and not isinstance(ranker, Ranker):
            raise TypeError(
                "ranker must be a callable (sources, top_k, now, age_from, *, query) -> "
                f"list[Fact] (see ctxgraph.store.memory.ranking.Ranker), got {ranker!r}"
            )
        self.extraction_prompt = (
            None if extraction_prompt is None else check_extraction_prompt(extraction_prompt)
        )
        self.ranker = ranker
        self._repositories: tuple[Settings, RepositoryFactory] | None = None
        # The memory message of the latest view; a turn's requests all carry the same one.
        self._cache: tuple[str, HumanMessage] | None = None
        # The message of each note by text, so a note is one object from request to request.
        self._notes: dict[str, HumanMessage] = {}
        # The last plan and what it was planned from: ``per_turn`` and ``placement`` of one
        # request are asked with the same objects, and the plan is made once for both.
        self._plan: tuple[tuple[object, ...], MemoryNotes] | None = None

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
        return MemoryPart(self.extraction_prompt, self.ranker)

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

    def _planned(self, state: AgentState, window: Sequence[BaseMessage]) -> MemoryNotes | None:
        """The notes of a request for ``state``; None without a selection (view mode)."""
        selection = state.get("memory_selection")
        if selection is None:
            return None
        record = record_of(state.get("compaction"))
        stored = state.get("memory_notes")
        inputs = (selection, stored, window)
        last = self._plan
        if last is not None and last[1]["record"] == record and _same(last[0], inputs):
            return last[1]
        notes = plan_notes(stored, selection, record, window)
        self._plan = (inputs, notes)
        return notes

    def _note_message(self, note: MemoryNote) -> HumanMessage:
        message = self._notes.get(note["text"])
        if message is None:
            message = self._notes[note["text"]] = note_message(note)
        return message

    def per_turn(self, state: AgentState, window: Sequence[BaseMessage]) -> Sequence[TurnMessage]:
        """The window's notes at their places, or the view where ``anchor_index`` puts it."""
        notes = self._planned(state, window)
        if notes is not None:
            texts = {note["text"] for note in notes["notes"]}
            self._notes = {t: m for t, m in self._notes.items() if t in texts}
            return [
                TurnMessage(note_index(note, window), self._note_message(note))
                for note in notes["notes"]
            ]
        placed = self._view(state, window)
        if placed is None:
            return ()
        view, at = placed
        if self._cache is None or self._cache[0] != view:
            self._cache = (view, memory_message(view))
        return [TurnMessage(at, self._cache[1])]

    def placement(self, state: AgentState, window: Sequence[BaseMessage]) -> Placement | None:
        """The notes as the next state keeps them, or where the view went and its digest."""
        notes = self._planned(state, window)
        if notes is not None:
            return notes
        placed = self._view(state, window)
        if placed is None:
            return None
        view, at = placed
        before = window[at].id if at < len(window) else None
        view_placement: MemoryPlacement = {"before": before, "digest": view_digest(view)}
        return view_placement

    def request_key(self, state: AgentState, settings: Settings) -> Hashable:
        """The selection, the stored notes and the record the notes depend on."""
        return (
            repr(state.get("memory_selection")),
            repr(state.get("memory_notes")),
            record_of(state.get("compaction")),
        )

    def after_reply(
        self, answer: AIMessage, placement: Placement | None, carry: Any
    ) -> Mapping[str, Any]:
        """The request's notes in ``memory_notes``, or the view's spot in ``memory_placement``."""
        if placement is None:
            return {}
        key = "memory_notes" if "notes" in placement else "memory_placement"
        return {key: dict(placement)}


def _same(old: tuple[object, ...], new: tuple[object, ...]) -> bool:
    """Whether two tuples hold the very same objects, one by one."""
    return all(a is b for a, b in zip(old, new, strict=True))
