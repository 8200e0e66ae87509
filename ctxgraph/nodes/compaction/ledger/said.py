"""What the user said, kept verbatim: the entries the constraint and decision blocks share.

An entry is a sentence's latest wording, how often it was said and in which turn last.
Two wordings of one sentence share a key (``constraint_key``); entries merge by key,
render as one line each, and are bounded newest first within a token budget. The
constraint and decision blocks are one ``SaidBlock`` each, with their own keys, heading
and place in a budgeted rendering.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypedDict

from ctxgraph.nodes.compaction.identifiers import split_sentences
from ctxgraph.nodes.compaction.ledger.block import Block, Candidate, older, stored_int
from ctxgraph.nodes.compaction.ledger.sentences import SentenceKind, sentence_kind
from ctxgraph.state.tokens import count_text

if TYPE_CHECKING:
    from ctxgraph.nodes.compaction.ledger.block import Bounds, Shown, Walk
    from ctxgraph.nodes.compaction.ledger.record import Ledger


class ConstraintEntry(TypedDict):
    """One user constraint: its latest wording, how often it was said, and when last.

    ``last_turn`` numbers the real user messages folded into the record, from 1; 0 marks a
    constraint carried over from a record that did not number turns yet.
    """

    text: str
    count: int
    last_turn: int


DecisionEntry = ConstraintEntry
"""A user decision is kept as a constraint is: its latest wording, how often, when last."""


def line_cost(line: str) -> int:
    """Tokens one rendered line adds, its newline included."""
    return count_text(line) + 1


def read_entry(value: object) -> ConstraintEntry | None:
    """A stored entry in either shape: a plain string (older records) or an entry."""
    if isinstance(value, str):
        return {"text": value, "count": 1, "last_turn": 0}
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        count = max(1, stored_int(value.get("count")))
        return {
            "text": value["text"],
            "count": count,
            "last_turn": stored_int(value.get("last_turn")),
        }
    return None


def read_entries(values: Any) -> list[ConstraintEntry]:
    """The readable entries of a stored list (``None`` reads as none)."""
    entries = (read_entry(value) for value in values or ())
    return [entry for entry in entries if entry is not None]


_FILLER = re.compile(
    r"^(?:(?:please|remember(?:\s+to)?|reminder|again|also|and|just|still|note|as\s+i\s+said"
    r"|记得|还是|请|再次|再说一次|提醒一下|注意|另外|还有|也)(?![a-z])[\s\W_]*)+"
)
"""Reminder and politeness words a repeated constraint may start with."""


@lru_cache(maxsize=4_096)
def constraint_key(text: str) -> str:
    """What two wordings of one constraint share; equal keys mean the same constraint.

    The key is the NFKC-normalized, case-folded text without leading reminder or
    politeness words ("please", "remember", 请, 记得, 还是, 也, ...), punctuation and
    white space. So "不要改收货地址。", "不要改 收货地址" and "记得不要改收货地址！" are one
    constraint, while wordings that differ in any other letter, digit or symbol (an
    amount, an id, a currency sign) are not. Memoized: records read the same texts again.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    folded = _FILLER.sub("", _LEADING.sub("", folded))
    key = "".join(c for c in folded if not c.isspace() and not _is_punctuation(c))
    return key or folded.strip()


_LEADING = re.compile(r"^[\W_]+")
"""Anything before a constraint's first letter or digit."""


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def merge_constraints(entries: Iterable[ConstraintEntry]) -> list[ConstraintEntry]:
    """Entries merged by ``constraint_key``: counts added, the latest wording and turn kept.

    ``entries`` come in the order they were said; the result is ordered by the turn each
    constraint was last said, oldest first (a repeat moves its constraint to the end).
    """
    merged: dict[str, ConstraintEntry] = {}
    for entry in entries:
        key = constraint_key(entry["text"])
        old = merged.pop(key, None)
        if old is None:
            merged[key] = {**entry}
        elif entry["last_turn"] >= old["last_turn"]:
            merged[key] = {**entry, "count": old["count"] + entry["count"]}
        else:  # an older wording arriving late never replaces the latest one
            merged[key] = {**old, "count": old["count"] + entry["count"]}
    return sorted(merged.values(), key=lambda entry: entry["last_turn"])


def shifted(entries: Sequence[ConstraintEntry], shift: int) -> list[ConstraintEntry]:
    """``entries`` with their turns moved by ``shift`` (turn 0, not known, stays 0)."""
    return [
        {**entry, "last_turn": entry["last_turn"] + shift if entry["last_turn"] else 0}
        for entry in entries
    ]


def render_constraint(entry: ConstraintEntry) -> str:
    """The constraint verbatim; a repeated one also says how often and when it was last."""
    count, turn = entry["count"], entry["last_turn"]
    if count == 1:
        return f"- {entry['text']}"
    said = f"said {count}×, last in turn {turn}" if turn else f"said {count}×"
    return f"- {entry['text']} [{said}]"


def newest_within(entries: Sequence[ConstraintEntry], max_tokens: int) -> int:
    """How many of the newest entries fit ``max_tokens`` (at least one, if any)."""
    used = kept = 0
    for entry in reversed(entries):
        used += line_cost(render_constraint(entry))
        if kept and used > max_tokens:
            break
        kept += 1
    return kept


class SaidBlock(Block):
    """A block of user sentences of one kind: listed entries, and a count of folded ones.

    Subclasses say where the entries are stored (``stored``, ``entries``, ``folded``,
    ``store``), what they are called and where they stand in a budgeted rendering.
    """

    kind: SentenceKind
    noun: str
    heading: str
    priority: int

    def stored(self, raw: Mapping[str, Any]) -> list[ConstraintEntry]:
        """The readable entries of a stored record of any version."""
        raise NotImplementedError

    def entries(self, ledger: Ledger) -> list[ConstraintEntry]:
        """The listed entries of ``ledger`` (in the current shape)."""
        raise NotImplementedError

    def folded(self, ledger: Mapping[str, Any]) -> int:
        """How many entries ``ledger`` folded into its count."""
        raise NotImplementedError

    def store(self, ledger: Ledger, entries: list[ConstraintEntry], folded: int) -> None:
        """Set the block's keys of ``ledger``."""
        raise NotImplementedError

    def read(self, raw: Mapping[str, Any], into: Ledger) -> None:
        """Entries of either stored shape, merged by key; the folded count."""
        self.store(into, merge_constraints(self.stored(raw)), self.folded(raw))

    def said(self, walk: Walk, into: Ledger) -> list[ConstraintEntry]:
        """The sentences of the slice's real user messages of this block's kind."""
        return [
            {"text": sentence, "count": 1, "last_turn": turn}
            for turn, sentence in _user_sentences(walk)
            if sentence_kind(sentence) == self.kind
        ]

    def derive(self, walk: Walk, into: Ledger) -> None:
        """The marked sentences of real user messages, merged with a count and last turn."""
        self.store(into, merge_constraints(self.said(walk, into)), 0)

    def merge(self, old: Ledger, new: Ledger, shift: int, into: Ledger) -> None:
        """Entries said in both merged into one; ``new``'s turns moved by ``shift``."""
        moved = shifted(self.entries(new), shift)
        entries = merge_constraints([*self.entries(old), *moved])
        self.store(into, entries, self.folded(old) + self.folded(new))

    def bound(self, ledger: Ledger, bounds: Bounds) -> None:
        """With a constraint budget, the newest kept while their lines fit it."""
        if bounds.max_constraint_tokens is None:
            return
        entries = self.entries(ledger)
        dropped = len(entries) - newest_within(entries, bounds.max_constraint_tokens)
        self.store(ledger, entries[dropped:], self.folded(ledger) + dropped)

    def render(
        self, view: Ledger, above: Sequence[str], unlisted: Mapping[str, int] | None
    ) -> list[str]:
        """The heading, each entry's line, then how many are archived."""
        entries, folded = self.entries(view), self.folded(view)
        if not (entries or folded):
            return []
        lines = [self.heading]
        lines.extend(render_constraint(entry) for entry in entries)
        if folded:
            lines.append(f"{older(folded, self.noun)} in the archive (read_history)")
        return lines

    def candidates(self, full: Ledger) -> list[Candidate]:
        """Each entry's line, newest first."""
        entries = self.entries(full)
        return [
            Candidate(self.priority, self.noun, (self.noun, index), render_constraint(entry))
            for index, entry in reversed(list(enumerate(entries)))
        ]

    def emptied(self, full: Ledger, bare: Ledger, unlisted: dict[str, int]) -> None:
        """No entry listed, each counted as archived."""
        self.store(bare, [], self.folded(full) + len(self.entries(full)))

    def view(
        self, full: Ledger, picked: set[Shown], view: Ledger, unlisted: dict[str, int]
    ) -> None:
        """The picked entries listed, the others counted as archived."""
        entries = self.entries(full)
        shown = [e for i, e in enumerate(entries) if (self.noun, i) in picked]
        self.store(view, shown, self.folded(full) + len(entries) - len(shown))


def _user_sentences(walk: Walk) -> Iterable[tuple[int, str]]:
    """Each sentence of the slice's real user messages, with its turn."""
    for turn, text in walk.user_texts():
        for sentence in split_sentences(text):
            yield turn, sentence
