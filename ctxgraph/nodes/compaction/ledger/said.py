"""What the user said, kept verbatim: the entries the constraint and decision blocks share.

An entry is a sentence's (or a constraint clause's) latest wording, how often it was said,
and in which turns first and last. Two wordings of one entry share a key (each block says
which: ``constraint_key`` folds ids and plain numbers, ``wording_key`` only fillers and
punctuation); entries merge by key, render as one line each, and are bounded newest
first within a token budget. The constraint and decision blocks are one ``SaidBlock``
each, with their own keys, heading and place in a budgeted rendering.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxgraph.nodes.compaction.ledger.block import Block, Candidate, older, stored_int
from ctxgraph.nodes.compaction.ledger.clauses import constraint_key, wording_key
from ctxgraph.nodes.compaction.ledger.fields import ConstraintEntry, Ledger
from ctxgraph.nodes.compaction.ledger.sentences import SentenceKind, sentence_kind
from ctxgraph.state.identifiers import split_sentences
from ctxgraph.state.tokens import count_text

if TYPE_CHECKING:
    from ctxgraph.nodes.compaction.ledger.block import Bounds, Shown, Walk


def line_cost(line: str) -> int:
    """Tokens one rendered line adds, its newline included."""
    return count_text(line) + 1


def read_entry(value: object) -> ConstraintEntry | None:
    """A stored entry in any shape: a plain string (older records) or an entry.

    An entry stored without ``first_turn`` said once was first said in its last turn;
    said more often, its first turn is not known (0).
    """
    if isinstance(value, str):
        return {"text": value, "count": 1, "last_turn": 0, "first_turn": 0}
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        count = max(1, stored_int(value.get("count")))
        last = stored_int(value.get("last_turn"))
        first = stored_int(value.get("first_turn")) or (last if count == 1 else 0)
        return {"text": value["text"], "count": count, "last_turn": last, "first_turn": first}
    return None


def read_entries(values: Any) -> list[ConstraintEntry]:
    """The readable entries of a stored list (``None`` reads as none)."""
    entries = (read_entry(value) for value in values or ())
    return [entry for entry in entries if entry is not None]


def merge_constraints(
    entries: Iterable[ConstraintEntry], key: Callable[[str], str] = constraint_key
) -> list[ConstraintEntry]:
    """Entries merged by ``key``: counts added, the latest wording, first and last turn kept.

    ``entries`` come in the order they were said; the result is ordered by the turn each
    constraint was last said, oldest first (a repeat moves its constraint to the end). The
    first turn stays unknown (0) once either side does not know it.
    """
    merged: dict[str, ConstraintEntry] = {}
    for entry in entries:
        found = key(entry["text"])
        old = merged.pop(found, None)
        if old is None:
            merged[found] = {**entry}
            continue
        latest = entry if entry["last_turn"] >= old["last_turn"] else old  # never an older
        firsts = (old["first_turn"], entry["first_turn"])  # wording arriving late
        merged[found] = {
            **latest,
            "count": old["count"] + entry["count"],
            "first_turn": min(firsts) if all(firsts) else 0,
        }
    return sorted(merged.values(), key=lambda entry: entry["last_turn"])


def shifted(entries: Sequence[ConstraintEntry], shift: int) -> list[ConstraintEntry]:
    """``entries`` with their turns moved by ``shift`` (turn 0, not known, stays 0)."""
    return [
        {
            **entry,
            "last_turn": entry["last_turn"] + shift if entry["last_turn"] else 0,
            "first_turn": entry["first_turn"] + shift if entry["first_turn"] else 0,
        }
        for entry in entries
    ]


def render_constraint(entry: ConstraintEntry) -> str:
    """The constraint verbatim; a repeated one also says how often and in which turns.

    ``- 不要改收货地址。 (said 138 times, turns 1–138)``; ``last in turn 9`` when the first
    turn is not known, nothing more when neither is.
    """
    count, first, last = entry["count"], entry["first_turn"], entry["last_turn"]
    if count == 1:
        return f"- {entry['text']}"
    said = f"said {count} times"
    if first and last:
        said += f", turn {last}" if first == last else f", turns {first}–{last}"
    elif last:
        said += f", last in turn {last}"
    return f"- {entry['text']} ({said})"


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

    def key(self, text: str) -> str:
        """What two wordings of one entry share (see ``wording_key``)."""
        return wording_key(text)

    def texts(self, sentence: str) -> list[str]:
        """The entries a sentence of this block's kind states: the sentence itself."""
        return [sentence]

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
        self.store(into, merge_constraints(self.stored(raw), self.key), self.folded(raw))

    def said(self, walk: Walk, into: Ledger) -> list[ConstraintEntry]:
        """What the sentences of the slice's real user messages of this kind state."""
        return [
            {"text": text, "count": 1, "last_turn": turn, "first_turn": turn}
            for turn, sentence in _user_sentences(walk)
            if sentence_kind(sentence) == self.kind
            for text in self.texts(sentence)
        ]

    def derive(self, walk: Walk, into: Ledger) -> None:
        """The marked sentences of real user messages, merged with a count and last turn."""
        self.store(into, merge_constraints(self.said(walk, into), self.key), 0)

    def merge(self, old: Ledger, new: Ledger, shift: int, into: Ledger) -> None:
        """Entries said in both merged into one; ``new``'s turns moved by ``shift``."""
        moved = shifted(self.entries(new), shift)
        entries = merge_constraints([*self.entries(old), *moved], self.key)
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
