"""The identifiers block: exact ids, paths, amounts and dates no other line shows verbatim."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from ctxgraph.nodes.compaction.identifiers import extract_identifiers, shown_verbatim
from ctxgraph.nodes.compaction.ledger.block import IDENTIFIER, Block, Candidate, union

if TYPE_CHECKING:
    from ctxgraph.nodes.compaction.ledger.block import Bounds, Shown, Walk
    from ctxgraph.nodes.compaction.ledger.record import Ledger


class IdentifierFields(TypedDict):
    """The block's key of the record: the identifiers, oldest first, once each."""

    identifiers: list[str]


class IdentifierBlock(Block):
    """IDENTIFIERS: one line listing those the lines of the other blocks do not show.

    It renders last, as it reads the lines of the blocks before it.
    """

    def read(self, raw: Mapping[str, Any], into: Ledger) -> None:
        """The stored list, copied."""
        into["identifiers"] = list(raw.get("identifiers") or [])

    def derive(self, walk: Walk, into: Ledger) -> None:
        """Identifiers of the walk's texts; an artifact's ref is listed as an artifact.

        The texts are the messages' own and their calls' arguments; a read-only result
        can be read again (and is archived), so its contents are not among them.
        """
        found = [
            item for texts in walk.texts for text in texts for item in extract_identifiers(text)
        ]
        refs = {entry["ref"] for entry in walk.artifacts}
        into["identifiers"] = [item for item in union(found) if item not in refs]

    def merge(self, old: Ledger, new: Ledger, shift: int, into: Ledger) -> None:
        """Both lists, in order, once each."""
        into["identifiers"] = union(old["identifiers"], new["identifiers"])

    def bound(self, ledger: Ledger, bounds: Bounds) -> None:
        """Only the ``max_identifiers`` most recent are kept."""
        identifiers = ledger["identifiers"]
        ledger["identifiers"] = identifiers[max(0, len(identifiers) - bounds.max_identifiers) :]

    def render(
        self, view: Ledger, above: Sequence[str], unlisted: Mapping[str, int] | None
    ) -> list[str]:
        """One line of the identifiers that no line ``above`` shows verbatim."""
        shown = "\n".join(above)
        identifiers = [item for item in view["identifiers"] if not shown_verbatim(item, shown)]
        return ["IDENTIFIERS: " + ", ".join(identifiers)] if identifiers else []

    def candidates(self, full: Ledger) -> list[Candidate]:
        """Each identifier, newest first."""
        identifiers = full["identifiers"]
        return [
            Candidate(IDENTIFIER, "identifier", ("identifier", index), identifiers[index])
            for index in reversed(range(len(identifiers)))
        ]

    def emptied(self, full: Ledger, bare: Ledger, unlisted: dict[str, int]) -> None:
        """None listed."""
        bare["identifiers"] = []

    def view(
        self, full: Ledger, picked: set[Shown], view: Ledger, unlisted: dict[str, int]
    ) -> None:
        """The picked identifiers."""
        identifiers = full["identifiers"]
        view["identifiers"] = [e for i, e in enumerate(identifiers) if ("identifier", i) in picked]


IDENTIFIERS = IdentifierBlock()
