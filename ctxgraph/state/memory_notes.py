"""The memory notes of a window (``state["memory_notes"]``) and the turn's selection."""

from __future__ import annotations

from typing_extensions import TypedDict


class SelectedFact(TypedDict):
    """One entry of a turn's memory selection: a fact (or the profile block) and its text."""

    key: str
    """``user:<key>`` or ``project:<key>`` of a fact; ``profile`` for the profile block."""
    text: str
    """The entry as a note shows it: the fact's line, or the profile block's lines."""


class MemorySelection(TypedDict):
    """``state["memory_selection"]``: what ``load_memory`` chose for the turn, in order.

    The profile block first (if any), then the facts the view's budgets kept, corrections
    before the rest. Written in auto mode only; None otherwise.
    """

    entries: list[SelectedFact]


class ShownFact(TypedDict):
    """A fact a note showed: its key and the digest of the text it showed."""

    key: str
    digest: str


class MemoryNote(TypedDict):
    """One note: a marked data message repeated byte-identically at its place."""

    before: str | None
    """Id of the window message the note precedes; None: right after the record."""
    text: str
    digest: str
    """The first 16 hex digits of the SHA-256 of ``text`` (the message id carries it)."""
    facts: list[ShownFact]


class MemoryNotes(TypedDict):
    """``state["memory_notes"]``: the notes shown since the record ``record`` was made.

    A fact is shown once per window: a turn adds a note only for the facts of its
    selection no note shows with the same text. A new record (a compaction) drops the
    notes whose message was folded and shows the still-selected facts once after it.
    """

    record: str
    """The compaction mark the notes belong to (``version:checksum``; "" before any)."""
    notes: list[MemoryNote]
