"""The ledger's shape, and how a stored ledger of any version reads back."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Literal, NotRequired, TypedDict

from ctxgraph.nodes.offload.refs import ArtifactMention

ToolCallStatus = Literal["planned", "succeeded", "failed", "cancelled", "unknown"]


class ToolCallEntry(TypedDict):
    """One tool call as code saw it: what was asked and how it ended.

    ``turn`` is the number of real user messages folded into the record up to the call
    (the turns ``ConstraintEntry.last_turn`` counts); it is left out when not known
    (calls recorded before turns were kept, or made before any folded user message).
    """

    id: str
    name: str
    args: dict[str, str]
    status: ToolCallStatus
    error: str | None
    idempotency_key: str | None
    side_effect: bool
    turn: NotRequired[int]
    recovered: NotRequired[bool]
    """True for a call the model wrote as text and ctxgraph made real (left out otherwise)."""


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


class Ledger(TypedDict):
    """Facts that must survive compaction, merged across compactions.

    ``aggregated`` counts folded read-only successes per tool; ``folded_calls`` counts the
    other folded calls per tool and status. ``constraints`` are ordered by the turn they
    were last said, oldest first, and ``folded_constraints`` counts those dropped from the
    record (the messages that said them are in the archive). ``user_turns`` is the number
    of real user messages folded so far, which numbers the turns. ``artifacts`` lists the
    offloaded content the folded messages refer to, oldest first, and ``folded_artifacts``
    counts those dropped from the list; both are left out while there are none, so a
    ledger without artifacts keeps its earlier shape. ``decisions`` are the user's
    decisions about named items (see ``ledger_sentences``), kept like ``constraints``, and
    ``folded_decisions`` counts those dropped; they too are left out while there are none.
    """

    tool_calls: list[ToolCallEntry]
    aggregated: dict[str, int]
    folded_calls: dict[str, dict[str, int]]
    constraints: list[ConstraintEntry]
    folded_constraints: int
    identifiers: list[str]
    user_turns: int
    artifacts: NotRequired[list[ArtifactMention]]
    folded_artifacts: NotRequired[int]
    decisions: NotRequired[list[DecisionEntry]]
    folded_decisions: NotRequired[int]


def empty_ledger() -> Ledger:
    """A ledger with nothing in it."""
    return {
        "tool_calls": [],
        "aggregated": {},
        "folded_calls": {},
        "constraints": [],
        "folded_constraints": 0,
        "identifiers": [],
        "user_turns": 0,
    }


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _artifact(value: object) -> ArtifactMention | None:
    """A stored artifact entry, or None when it names no ref."""
    if not isinstance(value, Mapping) or not isinstance(value.get("ref"), str):
        return None
    kind, tool = value.get("kind"), value.get("tool")
    return {
        "ref": value["ref"],
        "kind": kind if isinstance(kind, str) else "artifact",
        "tool": tool if isinstance(tool, str) else None,
        "tokens": _int(value.get("tokens")),
    }


def ledger_artifacts(ledger: Mapping[str, Any]) -> list[ArtifactMention]:
    """The artifact entries of a ledger (any stored shape), oldest first, one per ref."""
    entries = (_artifact(value) for value in ledger.get("artifacts") or ())
    merged: dict[str, ArtifactMention] = {}
    for entry in entries:
        if entry is not None:
            merged.setdefault(entry["ref"], entry)
    return list(merged.values())


def set_artifacts(ledger: Ledger, entries: list[ArtifactMention], folded: int) -> None:
    """Set the artifact keys, or leave them out when there is nothing to record."""
    ledger.pop("artifacts", None)
    ledger.pop("folded_artifacts", None)
    if entries:
        ledger["artifacts"] = entries
    if folded:
        ledger["folded_artifacts"] = folded


def listed_artifacts(ledger: Ledger) -> list[ArtifactMention]:
    """The artifacts a ledger in the current shape lists (empty when it has none)."""
    return ledger.get("artifacts") or []


def ledger_decisions(ledger: Mapping[str, Any]) -> list[DecisionEntry]:
    """The decisions a ledger lists (empty when it has none)."""
    entries = (_constraint(value) for value in ledger.get("decisions") or ())
    return [entry for entry in entries if entry is not None]


def set_decisions(ledger: Ledger, entries: list[DecisionEntry], folded: int) -> None:
    """Set the decision keys, or leave them out when there is nothing to record."""
    ledger.pop("decisions", None)
    ledger.pop("folded_decisions", None)
    if entries:
        ledger["decisions"] = entries
    if folded:
        ledger["folded_decisions"] = folded


def _constraint(value: object) -> ConstraintEntry | None:
    """A stored constraint in either shape: a plain string (older records) or an entry."""
    if isinstance(value, str):
        return {"text": value, "count": 1, "last_turn": 0}
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        count = max(1, _int(value.get("count")))
        return {"text": value["text"], "count": count, "last_turn": _int(value.get("last_turn"))}
    return None


def read_ledger(raw: Mapping[str, Any] | None) -> Ledger:
    """A ledger as stored in a summary, in the current shape, whatever version wrote it.

    Records written before constraints were counted hold them as plain strings; those
    become entries said once, at turn 0 (before turns were numbered). Missing keys read
    as empty. The input is not changed.
    """
    ledger = empty_ledger()
    if not raw:
        return ledger
    ledger["tool_calls"] = [copy_entry(entry) for entry in raw.get("tool_calls") or []]
    ledger["aggregated"] = dict(raw.get("aggregated") or {})
    ledger["folded_calls"] = {
        name: dict(counts) for name, counts in (raw.get("folded_calls") or {}).items()
    }
    entries = (_constraint(value) for value in raw.get("constraints") or [])
    ledger["constraints"] = merge_constraints([e for e in entries if e is not None])
    ledger["folded_constraints"] = _int(raw.get("folded_constraints"))
    ledger["identifiers"] = list(raw.get("identifiers") or [])
    ledger["user_turns"] = _int(raw.get("user_turns"))
    set_artifacts(ledger, ledger_artifacts(raw), _int(raw.get("folded_artifacts")))
    decisions = merge_constraints(ledger_decisions(raw))
    set_decisions(ledger, decisions, _int(raw.get("folded_decisions")))
    return ledger


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


def copy_entry(entry: ToolCallEntry) -> ToolCallEntry:
    """A copy of ``entry`` that shares nothing mutable with it."""
    return {**entry, "args": dict(entry["args"])}


def fold_call(ledger: Ledger, entry: ToolCallEntry) -> None:
    """Count ``entry`` in ``ledger``: read-only successes per tool, others per tool and status."""
    name = entry["name"]
    if entry["status"] == "succeeded" and entry.get("side_effect", True) is False:
        ledger["aggregated"][name] = ledger["aggregated"].get(name, 0) + 1
        return
    counts = ledger["folded_calls"].setdefault(name, {})
    counts[entry["status"]] = counts.get(entry["status"], 0) + 1
