"""Memory notes: a fact is shown once per window, in a note that stays where it was put.

``plan_notes`` is a pure function of the stored notes, the turn's selection, the record
and the window, so every request of a state carries the same notes (the request builder
stays a pure function of state). Each request then extends the previous one until a
compaction: earlier notes are repeated byte-identically before the same message, and a
turn adds one note, right before its user message, for the selected facts no note shows
with the same text. A new record drops the notes whose message was folded, and the
still-selected facts no kept note shows are shown once right after the record.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage, HumanMessage

from ctxgraph.nodes.memory.render import assemble_view
from ctxgraph.nodes.request import latest_user_index, view_digest
from ctxgraph.state.compaction_state import CompactionMark
from ctxgraph.state.memory_notes import (
    MemoryNote,
    MemoryNotes,
    MemorySelection,
    SelectedFact,
)
from ctxgraph.state.messages import HIDE_FROM_UI_KEY, ORIGIN_KEY

__all__ = [
    "NOTE_ID",
    "PROFILE_KEY",
    "note_index",
    "note_message",
    "plan_notes",
    "record_of",
]

NOTE_ID = "ctxgraph-memory-note"
PROFILE_KEY = "profile"
"""Selection key of the profile block: shown in the first note, again when it changes."""


def record_of(mark: CompactionMark | None) -> str:
    """The record the notes of a window belong to: ``version:checksum`` of the mark."""
    if not mark:
        return ""
    return f"{mark.get('version', 0)}:{mark.get('checksum', '')}"


def note_text(entries: Sequence[SelectedFact]) -> str:
    """A note's text: the memory header, the profile block if shown, then fact lines."""
    profile = [line for e in entries if e["key"] == PROFILE_KEY for line in e["text"].split("\n")]
    facts = [e["text"] for e in entries if e["key"] != PROFILE_KEY]
    return assemble_view(profile, facts)


def new_note(entries: Sequence[SelectedFact], before: str | None) -> MemoryNote:
    """The note that shows ``entries`` before the window message ``before``."""
    text = note_text(entries)
    return {
        "before": before,
        "text": text,
        "digest": view_digest(text),
        "facts": [{"key": e["key"], "digest": view_digest(e["text"])} for e in entries],
    }


def plan_notes(
    stored: MemoryNotes | None,
    selection: MemorySelection,
    record: str,
    window: Sequence[BaseMessage],
) -> MemoryNotes:
    """The notes a request for this state carries, as the next state keeps them.

    Args:
        stored: ``state["memory_notes"]``; None (a thread or checkpoint without notes)
            counts as no note under the current record.
        selection: The turn's ``state["memory_selection"]``.
        record: ``record_of`` the state's compaction mark.
        window: The working messages as sent (after the leading system messages).

    Returns:
        The stored notes still anchored in ``window`` (all of them under an unchanged
        record), plus at most one note for the selected entries no kept note shows with
        the same text: right after the record when the record changed, else before the
        latest real user message.

    """
    present = {message.id for message in window}
    same = stored is None or stored["record"] == record
    kept = [
        note
        for note in (stored["notes"] if stored else [])
        if (note["before"] in present) or (same and note["before"] is None)
    ]
    shown = {(fact["key"], fact["digest"]) for note in kept for fact in note["facts"]}
    fresh = [e for e in selection["entries"] if (e["key"], view_digest(e["text"])) not in shown]
    if fresh:
        before = None
        if same and window:
            before = window[latest_user_index(window)].id
        kept.append(new_note(fresh, before))
    return {"record": record, "notes": kept}


def note_index(note: MemoryNote, window: Sequence[BaseMessage]) -> int:
    """Index of the window message ``note`` precedes (0, right after the record, for None)."""
    if note["before"] is not None:
        for index, message in enumerate(window):
            if message.id == note["before"]:
                return index
    return 0


def note_message(note: MemoryNote) -> HumanMessage:
    """A note as a data message: marked by origin, hidden from UIs, never stored.

    The id carries the digest of the text (a redacted note gets a new one), so token
    counts cached per id stay right.
    """
    return HumanMessage(
        content=note["text"],
        id=f"{NOTE_ID}-{view_digest(note['text'])}",
        additional_kwargs={ORIGIN_KEY: "memory", HIDE_FROM_UI_KEY: True},
    )
