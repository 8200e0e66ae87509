"""Finds sentences of a summary that contradict the call outcomes the ledger records."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctxgraph.nodes.compaction.identifiers import (
    claims_by_mention,
    has_outcome_words,
    split_sentences,
    token_pattern,
)
from ctxgraph.nodes.compaction.ledger_record import Ledger, read_ledger

_Target = tuple[re.Pattern[str], str, tuple[str, ...], str | None]
"""How a call is named (its id, or its tool name), the tool, the listed call ids meant,
and their one status.

A status of ``None`` marks a tool name whose calls disagree on status: named, but not
checkable.
"""


_Mention = tuple[int, int, _Target]

CONTRADICTION_MARK = "but the ledger records it as"
"""The words every contradiction problem holds (how a rejection's reason is told)."""


def _targets(ledger: Ledger) -> tuple[list[_Target], list[_Target]]:
    """Calls a summary may name: by id, and by tool name with the statuses it has had.

    Folded calls count towards a name's statuses, so folding never makes a name with
    mixed outcomes look uniform.
    """
    by_id: list[_Target] = [
        (token_pattern(e["id"]), e["name"], (e["id"],), e["status"]) for e in ledger["tool_calls"]
    ]
    ids: dict[str, list[str]] = {}
    statuses: dict[str, set[str]] = {}
    for entry in ledger["tool_calls"]:
        ids.setdefault(entry["name"], []).append(entry["id"])
        statuses.setdefault(entry["name"], set()).add(entry["status"])
    for name, count in ledger["aggregated"].items():
        if count > 0:
            statuses.setdefault(name, set()).add("succeeded")
    for name, counts in ledger["folded_calls"].items():
        statuses.setdefault(name, set()).update(s for s, n in counts.items() if n > 0)
    by_name: list[_Target] = []
    for name, seen in statuses.items():
        status = next(iter(seen)) if len(seen) == 1 else None
        by_name.append((token_pattern(name), name, tuple(ids.get(name, ())), status))
    return by_id, by_name


def _mentions(
    sentence: str, by_id: list[_Target], by_name: list[_Target]
) -> tuple[str, list[_Mention]]:
    """Calls named in ``sentence``, in order, and the sentence with redundant names blanked.

    A tool name next to one of its call ids ("charge_card (call_2)") is blanked so that the
    id alone stands for the call.
    """
    mentions = [(m.start(), m.end(), t) for t in by_id for m in t[0].finditer(sentence)]
    named = {mention[2][1] for mention in mentions}
    for target in by_name:
        pattern, name = target[0], target[1]
        if name in named:
            sentence = pattern.sub(lambda m: " " * len(m.group(0)), sentence)
        else:
            mentions.extend((m.start(), m.end(), target) for m in pattern.finditer(sentence))
    ordered: list[_Mention] = []
    for mention in sorted(mentions, key=lambda mention: (mention[0], -mention[1])):
        if not ordered or mention[0] >= ordered[-1][1]:
            ordered.append(mention)
    return sentence, ordered


def find_contradictions(summary_text: str, ledger: Mapping[str, Any]) -> list[str]:
    """Sentences of a summary that assert a call outcome the ledger disagrees with.

    A call is named by its id, or by its tool name when all its calls, listed or folded
    into counts, share one status. A success word for a call that is not ``succeeded``, or
    a failure word (and no success word) for one that is, is reported once per sentence
    and call.
    """
    by_id, by_name = _targets(read_ledger(ledger))
    problems: list[str] = []
    for sentence in split_sentences(summary_text):
        if not has_outcome_words(sentence):
            continue  # no claim of any outcome, so nothing to contradict
        analysed, mentions = _mentions(sentence, by_id, by_name)
        reported: set[tuple[str, str]] = set()
        for (_, _, (_, name, ids, status)), (success, failure) in zip(
            mentions, claims_by_mention(analysed, [(m[0], m[1]) for m in mentions]), strict=True
        ):
            if status is None:
                continue  # mixed outcomes: nothing to check the claim against
            if success and status != "succeeded":
                said = "succeeded"
            elif failure and not success and status == "succeeded":
                said = "failed"
            else:
                continue
            calls = f"call {', '.join(ids)}" if ids else "folded calls"
            if (name, calls) not in reported:
                reported.add((name, calls))
                problems.append(
                    f"the summary says {name} ({calls}) {said}, {CONTRADICTION_MARK} "
                    f'{status}: "{sentence}"'
                )
    return problems
