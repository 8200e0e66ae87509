"""The user-decisions block: what the user settled about a named item, kept verbatim.

Decisions get a block of their own, not a place among the constraints (see
``sentences``): a constraint binds every later action, a decision one item, and the
decisions' budget must not eat into the constraints'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ctxgraph.nodes.compaction.ledger.block import DECISION, Walk, store_listed, stored_int
from ctxgraph.nodes.compaction.ledger.fields import DecisionEntry, Ledger, ToolCallEntry
from ctxgraph.nodes.compaction.ledger.said import SaidBlock, read_entries
from ctxgraph.state.identifiers import extract_identifiers


def ledger_decisions(ledger: Mapping[str, Any]) -> list[DecisionEntry]:
    """The decisions a ledger lists (empty when it has none)."""
    return read_entries(ledger.get("decisions"))


class DecisionBlock(SaidBlock):
    """USER DECISIONS: an action on a named item ("Ship B456 to my office")."""

    kind = "decision"
    noun = "decision"
    heading = "USER DECISIONS (verbatim, about the items they name):"
    priority = DECISION

    def stored(self, raw: Mapping[str, Any]) -> list[DecisionEntry]:
        """The decisions of a stored record."""
        return ledger_decisions(raw)

    def entries(self, ledger: Ledger) -> list[DecisionEntry]:
        """The listed decisions (empty when there are none)."""
        return ledger.get("decisions") or []

    def folded(self, ledger: Mapping[str, Any]) -> int:
        """How many decisions were folded into the count."""
        return stored_int(ledger.get("folded_decisions"))

    def store(self, ledger: Ledger, entries: list[DecisionEntry], folded: int) -> None:
        """Set the keys, or leave them out when there is nothing to record."""
        store_listed(ledger, ("decisions", "folded_decisions"), entries, folded)

    def said(self, walk: Walk, into: Ledger) -> list[DecisionEntry]:
        """The slice's decisions, but those a side-effect call of their turn carried out.

        Such a decision ("Refund A-1030" and a ``refund_order(order_id=A-1030)`` call) is
        recorded by the call's line alone. The tool-calls block derives first.
        """
        said = super().said(walk, into)
        return [entry for entry in said if not _carried_out(entry, into["tool_calls"])]


def _carried_out(decision: DecisionEntry, calls: Iterable[ToolCallEntry]) -> bool:
    """Whether a side-effect call made in the decision's turn names all it names."""
    named = set(extract_identifiers(decision["text"]))
    if not named:
        return False
    for entry in calls:
        if entry["side_effect"] and entry.get("turn") == decision["last_turn"]:
            shown = {i for value in entry["args"].values() for i in extract_identifiers(value)}
            if named <= shown:
                return True
    return False


DECISIONS = DecisionBlock()
