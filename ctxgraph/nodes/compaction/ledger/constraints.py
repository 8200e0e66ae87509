"""The user-constraints block: clauses with an explicit marker, kept verbatim for the session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxgraph.nodes.compaction.ledger.block import PINNED, Candidate, stored_int
from ctxgraph.nodes.compaction.ledger.clauses import constraint_clauses, constraint_key
from ctxgraph.nodes.compaction.ledger.fields import ConstraintEntry, Ledger
from ctxgraph.nodes.compaction.ledger.said import SaidBlock, read_entries


class ConstraintBlock(SaidBlock):
    """USER CONSTRAINTS: never, always, only, 不要, 必须, ... (see ``sentences``).

    An entry is the clause that carries the marker, and repeats that differ only in
    fillers, identifiers and plain numbers are one entry (see ``clauses``). In a budgeted
    rendering they come first, and the one said last is always listed.
    """

    kind = "constraint"
    noun = "constraint"
    heading = "USER CONSTRAINTS (verbatim):"
    priority = PINNED

    def key(self, text: str) -> str:
        """Repeats fold across ids and plain numbers, not values (``constraint_key``)."""
        return constraint_key(text)

    def texts(self, sentence: str) -> list[str]:
        """Each marked clause of the sentence, with what it needs (``constraint_clauses``)."""
        return constraint_clauses(sentence)

    def stored(self, raw: Mapping[str, Any]) -> list[ConstraintEntry]:
        """The constraints of a stored record: plain strings (older records) or entries."""
        return read_entries(raw.get("constraints"))

    def entries(self, ledger: Ledger) -> list[ConstraintEntry]:
        """The listed constraints."""
        return ledger["constraints"]

    def folded(self, ledger: Mapping[str, Any]) -> int:
        """How many constraints were folded into the count."""
        return stored_int(ledger.get("folded_constraints"))

    def store(self, ledger: Ledger, entries: list[ConstraintEntry], folded: int) -> None:
        """Set both keys (they are always present)."""
        ledger["constraints"] = entries
        ledger["folded_constraints"] = folded

    def candidates(self, full: Ledger) -> list[Candidate]:
        """Each constraint's line, newest first; the newest is pinned."""
        found = super().candidates(full)
        if found:
            newest = found[0]
            found[0] = Candidate(newest.priority, newest.group, newest.item, newest.line, True)
        return found

    def emptied(self, full: Ledger, bare: Ledger, unlisted: dict[str, int]) -> None:
        """No constraint listed; the folded count as it is."""
        self.store(bare, [], self.folded(full))


CONSTRAINTS = ConstraintBlock()
