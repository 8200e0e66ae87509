"""The protocol every ledger block follows, and what the ledger hands its blocks.

A block is one noun of the ledger (tool calls, constraints, decisions, artifacts,
identifiers). It owns its keys of the record and everything done with them: how a stored
record of any version reads back, how folded messages derive it, how two records merge,
how it is kept within its bounds, how it renders (in full or within a token budget) and
what of a summary it contradicts. The ledger (``record``) composes the blocks in a fixed
order; each method has a no-op default, so a block implements only what it has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple, Protocol, cast

from langchain_core.messages import BaseMessage

from ctxgraph.nodes.compaction.ledger.fields import Ledger
from ctxgraph.nodes.offload.inputs import shown_words
from ctxgraph.nodes.offload.refs import ArtifactMention, messages_artifacts
from ctxgraph.state.messages import content_text, is_real_user_message

Shown = tuple[str, int]
"""An item a budgeted rendering lists: its kind and its index in the block."""

# The order of priority of a budgeted rendering's lines (lower first; see ``Candidate``).
PINNED = 0
"""The constraints, newest first (the one said last is always listed)."""
OPEN_SIDE_EFFECT = 1
"""Side-effect calls that did not succeed."""
OPEN_READ = 2
"""Read-only calls that did not succeed."""
DECISION = 3
"""The user's decisions."""
ARTIFACT = 4
"""Artifact refs."""
DONE_SIDE_EFFECT = 5
"""Side-effect calls that succeeded."""
TOOL_LINE = 6
"""The one line of each tool's read-only successes."""
IDENTIFIER = 7
"""Identifiers no other line shows."""
ARCHIVE_INDEX = 8
"""The count of looked-up identifiers only the archive holds (the first line to go)."""


class Candidate(NamedTuple):
    """A line a budgeted rendering may list, and where it stands in the order of priority.

    A tuple, as a rendering makes one for every listed item of the record.
    """

    priority: int
    """Lines of a lower priority are taken first (``PINNED``, ..., ``ARCHIVE_INDEX``)."""
    group: str
    """Lines of one group stop at the group's first line that does not fit."""
    item: Shown
    line: str
    pinned: bool = False
    """Listed whatever its size (it must come first)."""


@dataclass(frozen=True)
class Bounds:
    """The bounds of a ledger (see ``bound_ledger``)."""

    max_tool_calls: int
    max_identifiers: int
    max_constraint_tokens: int | None
    max_artifacts: int


class Walk:
    """One pass over a slice of folded messages, shared by the blocks that derive from it.

    ``turns[i]`` is the number of real user messages in the slice up to message ``i``;
    ``texts[i]`` the texts identifiers are read from (the message's own text first: the
    tool-calls block takes away a read-only result's and adds the call arguments).
    """

    def __init__(self, messages: Sequence[BaseMessage], read_only_tools: frozenset[str]) -> None:
        """Walk ``messages``; tools named in ``read_only_tools`` change nothing."""
        self.messages = messages
        self.read_only_tools = read_only_tools
        self.turns: list[int] = []
        self.own: list[str] = []
        turn = 0
        for message in messages:
            turn += is_real_user_message(message)
            self.turns.append(turn)
            self.own.append(own_text(message))
        self.texts: list[list[str]] = [[text] for text in self.own]

    @property
    def user_turns(self) -> int:
        """The number of real user messages in the slice."""
        return self.turns[-1] if self.turns else 0

    def user_texts(self) -> Iterable[tuple[int, str]]:
        """Each real user message's own text, with its turn (1, 2, ...)."""
        for index, message in enumerate(self.messages):
            if is_real_user_message(message):
                yield self.turns[index], self.own[index]

    @cached_property
    def artifacts(self) -> list[ArtifactMention]:
        """The offloaded contents the messages refer to (``messages_artifacts``)."""
        return messages_artifacts(self.messages)


def own_text(message: BaseMessage) -> str:
    """The message's text; of an offloaded user input, the user's words it still shows."""
    shown = shown_words(message)
    return content_text(message) if shown is None else shown


def stored_int(value: object) -> int:
    """A stored count: the int it is, or 0 for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def union(*lists: Sequence[str]) -> list[str]:
    """The items of ``lists`` in order, once each."""
    return list(dict.fromkeys(item for items in lists for item in items))


def store_listed(ledger: Ledger, keys: tuple[str, str], entries: list[Any], folded: int) -> None:
    """Set a block's list and folded count (``keys``), each left out while it is empty."""
    record = cast(dict[str, Any], ledger)
    for key, value in zip(keys, (entries, folded), strict=True):
        record.pop(key, None)
        if value:
            record[key] = value


def store_newest(
    ledger: Ledger, keys: tuple[str, str], entries: list[Any], folded: int, limit: int
) -> None:
    """``store_listed`` of the ``limit`` newest ``entries``, the older ones added to ``folded``."""
    dropped = max(0, len(entries) - limit)
    store_listed(ledger, keys, entries[dropped:], folded + dropped)


def older(count: int, noun: str) -> str:
    """``1 older constraint is`` or ``3 older constraints are``."""
    return f"{count} older {noun}" + (" is" if count == 1 else "s are")


class Block(Protocol):
    """One noun of the ledger: its keys, and every step done with them (no-op defaults)."""

    def read(self, raw: Mapping[str, Any], into: Ledger) -> None:
        """Set the block's keys of ``into`` from a stored record of any version."""

    def derive(self, walk: Walk, into: Ledger) -> None:
        """Set the block's keys of ``into`` from a slice of folded messages."""

    def merge(self, old: Ledger, new: Ledger, shift: int, into: Ledger) -> None:
        """Set the block's keys of ``into``: ``old`` updated with ``new``.

        ``new`` numbers its turns from 1; ``shift`` (the turns of ``old``) moves them past
        the turns of ``old``.
        """

    def bound(self, ledger: Ledger, bounds: Bounds) -> None:
        """Keep the block's keys of ``ledger`` within ``bounds``: the oldest fold into counts."""

    def render(
        self, view: Ledger, above: Sequence[str], unlisted: Mapping[str, int] | None
    ) -> list[str]:
        """The block's lines; ``above`` are the lines of the blocks rendered before."""
        return []

    def candidates(self, full: Ledger) -> list[Candidate]:
        """Every line of the block a budgeted rendering may list."""
        return []

    def emptied(self, full: Ledger, bare: Ledger, unlisted: dict[str, int]) -> None:
        """Set the block's keys of ``bare`` as a rendering that lists none of its items has."""

    def view(
        self, full: Ledger, picked: set[Shown], view: Ledger, unlisted: dict[str, int]
    ) -> None:
        """Set the block's keys of ``view``: only the ``picked`` items listed, the rest counted."""

    def check(self, text: str, ledger: Ledger) -> list[str]:
        """What a summary's ``text`` says that the block's record contradicts."""
        return []
