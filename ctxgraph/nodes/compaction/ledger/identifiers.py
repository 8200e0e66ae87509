"""The identifiers block: exact ids, paths, amounts and dates no other line shows verbatim.

Identifiers help where something happened to them: side effects, failed, unknown and
planned calls, constraints, decisions. An identifier that only read-only lookups touched
(an order looked up and nothing more) is kept in an index instead: the latest few are
listed, the others counted in one line, and ``read_history`` with the id finds the
archived turns that mention it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctxgraph.nodes.compaction.ledger.block import (
    ARCHIVE_INDEX,
    IDENTIFIER,
    Block,
    Bounds,
    Candidate,
    Shown,
    Walk,
    store_listed,
    store_newest,
    stored_int,
    union,
)
from ctxgraph.nodes.compaction.ledger.calls import is_folded
from ctxgraph.nodes.compaction.ledger.fields import Ledger, ToolCallEntry
from ctxgraph.state.identifiers import extract_identifiers, shown_verbatim

LATEST_LOOKED_UP = 3
"""How many of the identifiers only lookups touched are listed (the latest)."""

_LOOKED_UP_KEYS = ("looked_up", "folded_looked_up")
_COUNT: Shown = ("archived", 0)
"""The count line of a budgeted rendering, as an item it may list."""


def _looked_up(ledger: Mapping[str, Any]) -> list[str]:
    return [item for item in ledger.get("looked_up") or () if isinstance(item, str)]


def _folded(ledger: Mapping[str, Any]) -> int:
    return stored_int(ledger.get("folded_looked_up"))


def _store(ledger: Ledger, looked_up: list[str], folded: int) -> None:
    store_listed(ledger, _LOOKED_UP_KEYS, looked_up, folded)


def _args_identifiers(entries: Iterable[ToolCallEntry]) -> set[str]:
    """The identifiers of the calls' arguments, idempotency keys and errors."""
    texts = [
        text
        for entry in entries
        for text in (*entry["args"].values(), entry["idempotency_key"], entry["error"])
        if text
    ]
    return {item for text in texts for item in extract_identifiers(text)}


def _acted_on(ledger: Ledger) -> set[str]:
    """Identifiers something happened to: other calls than lookups, constraints, decisions."""
    said = [*ledger["constraints"], *(ledger.get("decisions") or [])]
    acted = _args_identifiers(e for e in ledger["tool_calls"] if not is_folded(e))
    return acted | {item for entry in said for item in extract_identifiers(entry["text"])}


def archived_line(count: int) -> str:
    """The line that says how many looked-up identifiers only the archive holds."""
    return f"Older looked-up identifiers in the archive (read_history query=<id>): {count}"


class IdentifierBlock(Block):
    """IDENTIFIERS: one line listing those the lines of the other blocks do not show.

    It renders last, as it reads the lines of the blocks before it.
    """

    def read(self, raw: Mapping[str, Any], into: Ledger) -> None:
        """The stored lists, copied (records without the index read as having none)."""
        into["identifiers"] = list(raw.get("identifiers") or [])
        _store(into, _looked_up(raw), _folded(raw))

    def derive(self, walk: Walk, into: Ledger) -> None:
        """Identifiers of the walk's texts; an artifact's ref is listed as an artifact.

        The texts are the messages' own and their calls' arguments; a read-only result
        can be read again (and is archived), so its contents are not among them. An
        identifier among a read-only success's arguments that nothing else acted on goes
        to ``looked_up``.
        """
        found = [
            item for texts in walk.texts for text in texts for item in extract_identifiers(text)
        ]
        refs = {entry["ref"] for entry in walk.artifacts}
        lookups = _args_identifiers(e for e in into["tool_calls"] if is_folded(e))
        only_looked_up = lookups - _acted_on(into)
        found = [item for item in union(found) if item not in refs]
        into["identifiers"] = [item for item in found if item not in only_looked_up]
        _store(into, [item for item in found if item in only_looked_up], 0)

    def merge(self, old: Ledger, new: Ledger, shift: int, into: Ledger) -> None:
        """Both lists, in order, once each; a listed identifier leaves the index."""
        listed = union(old["identifiers"], new["identifiers"])
        fresh = _looked_up(new)
        index = [item for item in _looked_up(old) if item not in fresh] + fresh
        into["identifiers"] = listed
        kept = set(listed)
        _store(into, [item for item in index if item not in kept], _folded(old) + _folded(new))

    def bound(self, ledger: Ledger, bounds: Bounds) -> None:
        """Only the ``max_identifiers`` most recent are kept, in the list and in the index."""
        identifiers = ledger["identifiers"]
        ledger["identifiers"] = identifiers[max(0, len(identifiers) - bounds.max_identifiers) :]
        index, folded = _looked_up(ledger), _folded(ledger)
        store_newest(ledger, _LOOKED_UP_KEYS, index, folded, bounds.max_identifiers)

    def render(
        self, view: Ledger, above: Sequence[str], unlisted: Mapping[str, int] | None
    ) -> list[str]:
        """A line of those no line ``above`` shows verbatim, and how many the archive holds.

        Of the identifiers only lookups touched, the ``LATEST_LOOKED_UP`` latest are listed.
        """
        shown = "\n".join(above)
        index = _looked_up(view)
        latest = index[-LATEST_LOOKED_UP:] if index else []
        listed = [*view["identifiers"], *latest]
        identifiers = [item for item in listed if not shown_verbatim(item, shown)]
        lines = ["IDENTIFIERS: " + ", ".join(identifiers)] if identifiers else []
        archived = _folded(view) + len(index) - len(latest)
        return [*lines, archived_line(archived)] if archived else lines

    def candidates(self, full: Ledger) -> list[Candidate]:
        """Each identifier, newest first; then the latest looked-up ones."""
        identifiers, index = full["identifiers"], _looked_up(full)
        found = [
            Candidate(IDENTIFIER, "identifier", ("identifier", at), identifiers[at])
            for at in reversed(range(len(identifiers)))
        ]
        latest = range(max(0, len(index) - LATEST_LOOKED_UP), len(index))
        found.extend(
            Candidate(IDENTIFIER, "looked up", ("looked up", at), index[at])
            for at in reversed(latest)
        )
        archived = _folded(full) + len(index)
        if archived:  # its own line, the first to go: it never displaces a listed fact
            found.append(Candidate(ARCHIVE_INDEX, "archived", _COUNT, archived_line(archived)))
        return found

    def emptied(self, full: Ledger, bare: Ledger, unlisted: dict[str, int]) -> None:
        """None listed, nor the count of those in the archive (a candidate of its own)."""
        bare["identifiers"] = []
        _store(bare, [], 0)

    def view(
        self, full: Ledger, picked: set[Shown], view: Ledger, unlisted: dict[str, int]
    ) -> None:
        """The picked identifiers; the looked-up ones not picked counted as archived.

        The count's line is shown only when picked (a tight budget leaves it out first).
        """
        identifiers, index = full["identifiers"], _looked_up(full)
        view["identifiers"] = [e for i, e in enumerate(identifiers) if ("identifier", i) in picked]
        shown = [e for i, e in enumerate(index) if ("looked up", i) in picked]
        archived = _folded(full) + len(index) - len(shown) if _COUNT in picked else 0
        _store(view, shown, archived)


IDENTIFIERS = IdentifierBlock()
