"""The tool-calls block: each call's id, name, key arguments and status, recorded by code.

Read-only successes are rendered one line per tool and are the first to fold into counts
(``aggregated`` per tool, ``folded_calls`` per tool and status for the others). A
summary that says a call ended otherwise than recorded is contradicted.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.messages.tool import ToolCall

from ctxgraph.nodes.compaction.ledger.block import (
    DONE_SIDE_EFFECT,
    OPEN_READ,
    OPEN_SIDE_EFFECT,
    TOOL_LINE,
    Block,
    Bounds,
    Candidate,
    Shown,
    Walk,
)
from ctxgraph.nodes.compaction.ledger.fields import Ledger, ToolCallEntry, ToolCallStatus
from ctxgraph.nodes.compaction.ledger.read_only import is_read_only
from ctxgraph.state.identifiers import (
    claims_by_mention,
    error_outcome,
    has_outcome_words,
    scalar_strings,
    split_sentences,
    token_pattern,
)
from ctxgraph.state.messages import content_text, is_recovered_call_id

FINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
"""States a later ``planned``/``unknown`` record of the same call never overrides."""


UNKNOWN_TOOL = "unknown_tool"
"""Name used for a tool result whose call is not in the folded slice and that names no tool."""


MAX_ARGS = 6
MAX_ARG_CHARS = 80
MAX_ERROR_CHARS = 120


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


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: object) -> str:
    if isinstance(value, str):
        return " ".join(value.split())
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _idempotency_key(args: dict[str, Any]) -> str | None:
    for key, value in args.items():
        lowered = str(key).lower()
        if ("idempotency" in lowered or lowered == "request_id") and value not in (None, ""):
            return _compact(value)
    return None


def _outcome(result: ToolMessage | None, pending: bool) -> tuple[ToolCallStatus, str | None]:
    """Status and error line of a call from its tool result (or from having none)."""
    if result is None:
        return ("planned" if pending else "unknown"), None
    if result.status != "error":
        return "succeeded", None
    text = content_text(result)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    error = _cut(lines[0], MAX_ERROR_CHARS) if lines else None
    return error_outcome(text), error


def _entry(
    call_id: str,
    name: str,
    args: dict[str, Any],
    outcome: tuple[ToolCallStatus, str | None],
    side_effect: bool,
) -> ToolCallEntry:
    key_args = list(args.items())[:MAX_ARGS]
    return {
        "id": call_id,
        "name": name,
        "args": {str(k): _cut(_compact(v), MAX_ARG_CHARS) for k, v in key_args},
        "status": outcome[0],
        "error": outcome[1],
        "idempotency_key": _idempotency_key(args),
        "side_effect": side_effect,
    }


def _call_entry(
    call: ToolCall, result: ToolMessage | None, pending: bool, read_only_tools: frozenset[str]
) -> ToolCallEntry:
    args, name = call["args"] or {}, call["name"]
    call_id = call["id"]
    if not call_id:  # cannot be answered; a stable id keeps re-derivation idempotent
        call_id = "anon-" + hashlib.sha1(f"{name}:{_compact(args)}".encode()).hexdigest()[:12]
    side_effect = not is_read_only(name, read_only_tools)
    entry = _entry(call_id, name, args, _outcome(result, pending), side_effect)
    if is_recovered_call_id(call_id):  # the model wrote it as text (nodes.text_tool_calls)
        entry["recovered"] = True
    return entry


def _result_entry(result: ToolMessage, read_only_tools: frozenset[str]) -> ToolCallEntry:
    """An entry for a tool result whose call was folded earlier (or never seen)."""
    name = result.name or UNKNOWN_TOOL
    side_effect = name == UNKNOWN_TOOL or not is_read_only(name, read_only_tools)
    return _entry(result.tool_call_id, name, {}, _outcome(result, False), side_effect)


def _at_turn(entry: ToolCallEntry, turn: int) -> ToolCallEntry:
    """``entry`` with its turn; turn 0 (not known) is left out."""
    if turn > 0:
        entry["turn"] = turn
    else:
        entry.pop("turn", None)
    return entry


def _upsert(calls: dict[str, ToolCallEntry], entry: ToolCallEntry) -> None:
    """Record ``entry`` under its id; a final state is never replaced by a non-final one."""
    old = calls.get(entry["id"])
    if old is None:
        calls[entry["id"]] = copy_entry(entry)
        return
    keep_old = old["status"] in FINAL_STATUSES and entry["status"] not in FINAL_STATUSES
    winner, other = (old, entry) if keep_old else (entry, old)
    merged = copy_entry(winner)
    if merged["name"] == UNKNOWN_TOOL and other["name"] != UNKNOWN_TOOL:
        merged["name"], merged["side_effect"] = other["name"], other["side_effect"]
    if not merged["args"]:
        merged["args"] = dict(other["args"])
    if merged["idempotency_key"] is None:
        merged["idempotency_key"] = other["idempotency_key"]
    turn = old.get("turn") or entry.get("turn")  # the turn the call was made in, if known
    _at_turn(merged, turn or 0)
    calls[entry["id"]] = merged


def _add_counts(first: Mapping[str, int], second: Mapping[str, int]) -> dict[str, int]:
    total = dict(first)
    for name, count in second.items():
        total[name] = total.get(name, 0) + count
    return total


def _fold_rank(entry: ToolCallEntry) -> int:
    """The order calls fold in: 0 folds first, 3 last.

    Read-only successes, then read-only non-successes, side-effect successes and
    side-effect non-successes (a side effect of unknown outcome goes last).
    """
    return (2 if entry.get("side_effect", True) else 0) + (entry["status"] != "succeeded")


def _derive_calls(walk: Walk) -> dict[str, ToolCallEntry]:
    """The walk's calls by id; each message's texts get its calls' arguments."""
    messages = walk.messages
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    calls: dict[str, ToolCallEntry] = {}
    for index, message in enumerate(messages):
        if isinstance(message, AIMessage):
            pending = message is messages[-1]
            for call in message.tool_calls:
                result = results.get(call["id"] or "")
                made = _call_entry(call, result, pending, walk.read_only_tools)
                _upsert(calls, _at_turn(made, walk.turns[index]))
                walk.texts[index].extend(scalar_strings(call["args"]))
        elif isinstance(message, ToolMessage):
            _record_result(walk, index, results[message.tool_call_id], calls)
    return calls


def _record_result(
    walk: Walk, index: int, result: ToolMessage, calls: dict[str, ToolCallEntry]
) -> None:
    """A result whose call is not in ``calls`` gets an entry; a read-only one loses its text.

    A read-only result can be read again (and is archived).
    """
    entry = calls.get(result.tool_call_id)
    if entry is None:
        _upsert(calls, _at_turn(_result_entry(result, walk.read_only_tools), walk.turns[index]))
    elif not entry["side_effect"]:
        walk.texts[index] = []


class CallBlock(Block):
    """TOOL CALLS: a line per call, one per tool for read-only successes, then counts."""

    def read(self, raw: Mapping[str, Any], into: Ledger) -> None:
        """The stored calls and counts, copied."""
        into["tool_calls"] = [copy_entry(entry) for entry in raw.get("tool_calls") or []]
        into["aggregated"] = dict(raw.get("aggregated") or {})
        into["folded_calls"] = {
            name: dict(counts) for name, counts in (raw.get("folded_calls") or {}).items()
        }

    def derive(self, walk: Walk, into: Ledger) -> None:
        """Every call, its status from its tool result, and the turn it was made in.

        A call with no result is ``planned`` when its message ends the slice, else
        ``unknown``; a result whose call is not in the slice gets an entry of its own.
        """
        into["tool_calls"] = list(_derive_calls(walk).values())
        into["aggregated"] = {}
        into["folded_calls"] = {}

    def merge(self, old: Ledger, new: Ledger, shift: int, into: Ledger) -> None:
        """Calls by id (``new``'s turns moved by ``shift``), counts added."""
        calls: dict[str, ToolCallEntry] = {}
        for entry in old["tool_calls"]:
            _upsert(calls, entry)
        for entry in new["tool_calls"]:
            _upsert(calls, _at_turn(copy_entry(entry), entry.get("turn", 0) + shift))
        into["tool_calls"] = list(calls.values())
        into["aggregated"] = _add_counts(old["aggregated"], new["aggregated"])
        into["folded_calls"] = {
            name: _add_counts(old["folded_calls"].get(name, {}), new["folded_calls"].get(name, {}))
            for name in [*old["folded_calls"], *new["folded_calls"]]
        }

    def bound(self, ledger: Ledger, bounds: Bounds) -> None:
        """At most ``max_tool_calls`` listed: the others fold by ``_fold_rank``, oldest first."""
        calls = ledger["tool_calls"]
        excess = len(calls) - bounds.max_tool_calls
        if excess <= 0:
            return
        ranked = sorted(range(len(calls)), key=lambda index: (_fold_rank(calls[index]), index))
        folded = set(ranked[:excess])
        for index in sorted(folded):
            fold_call(ledger, calls[index])
        ledger["tool_calls"] = [e for index, e in enumerate(calls) if index not in folded]

    def render(
        self, view: Ledger, above: Sequence[str], unlisted: Mapping[str, int] | None
    ) -> list[str]:
        """Listed calls and tool lines, then the folded and unlisted counts."""
        if not (view["tool_calls"] or view["aggregated"] or view["folded_calls"] or unlisted):
            return []
        lines = ["TOOL CALLS (recorded by code, authoritative):", *_listed_lines(view)]
        if view["folded_calls"]:
            folded = {
                f"{name} {status}": n
                for name, counts in view["folded_calls"].items()
                for status, n in counts.items()
            }
            lines.append(f"Older calls in the archive (read_history): {_counts(folded)}")
        if unlisted:
            lines.append(f"Older successes not listed here (all succeeded): {_counts(unlisted)}")
        return lines

    def candidates(self, full: Ledger) -> list[Candidate]:
        """Each call's line but read-only successes, newest first; then each tool's line."""
        calls = full["tool_calls"]
        found: list[Candidate] = []
        for index in reversed(range(len(calls))):
            entry = calls[index]
            if is_folded(entry):
                continue  # read-only successes: one line per tool
            succeeded = entry["status"] == "succeeded"
            side_effect = _side_effect(entry)
            priority = _PRIORITY[succeeded, side_effect]
            group = "call:succeeded" if succeeded else "call"
            found.append(Candidate(priority, group, ("call", index), _render_call(entry)))
        groups = _groups(calls)
        for index, name in enumerate(_group_names(full)):
            entries = [calls[i] for i in groups.get(name, [])]
            line = render_group(name, entries, full["aggregated"].get(name, 0))
            found.append(Candidate(TOOL_LINE, "group", ("group", index), line))
        return found

    def emptied(self, full: Ledger, bare: Ledger, unlisted: dict[str, int]) -> None:
        """No call and no tool line listed; every read-only success counted as unlisted."""
        bare["tool_calls"] = []
        bare["aggregated"] = {}
        unlisted.update(full["aggregated"])

    def view(
        self, full: Ledger, picked: set[Shown], view: Ledger, unlisted: dict[str, int]
    ) -> None:
        """The picked calls and tool lines; other successes unlisted, the rest folded."""
        names = _group_names(full)
        tools = {name for index, name in enumerate(names) if ("group", index) in picked}
        view["tool_calls"] = []
        view["aggregated"] = {n: c for n, c in full["aggregated"].items() if n in tools}
        view["folded_calls"] = {name: dict(c) for name, c in full["folded_calls"].items()}
        unlisted.update((n, c) for n, c in full["aggregated"].items() if n not in tools and c)
        _list_picked(full["tool_calls"], picked, tools, view, unlisted)

    def check(self, text: str, ledger: Ledger) -> list[str]:
        """Sentences that assert a call outcome the record disagrees with.

        A call is named by its id, or by its tool name when all its calls, listed or
        folded into counts, share one status. A success word for a call that is not
        ``succeeded``, or a failure word (and no success word) for one that is, is
        reported once per sentence and call.
        """
        by_id, by_name = _targets(ledger)
        problems: list[str] = []
        for sentence in split_sentences(text):
            if has_outcome_words(sentence):  # else no claim of any outcome to contradict
                problems.extend(_sentence_problems(sentence, by_id, by_name))
        return problems


def _list_picked(
    calls: Sequence[ToolCallEntry],
    picked: set[Shown],
    tools: set[str],
    view: Ledger,
    unlisted: dict[str, int],
) -> None:
    """List the picked calls and the calls of the picked tool lines; count the others."""
    for index, entry in enumerate(calls):
        if ("call", index) in picked or (is_folded(entry) and entry["name"] in tools):
            view["tool_calls"].append(entry)
        elif entry["status"] == "succeeded":
            unlisted[entry["name"]] = unlisted.get(entry["name"], 0) + 1
        else:
            fold_call(view, entry)


_PRIORITY = {
    (False, True): OPEN_SIDE_EFFECT,
    (False, False): OPEN_READ,
    (True, True): DONE_SIDE_EFFECT,
}
"""A listed call's priority by (succeeded, side effect)."""


def _render_call(entry: ToolCallEntry) -> str:
    args = ", ".join(f"{key}={value}" for key, value in entry["args"].items())
    line = f"- [{entry['status']}] {entry['name']}({args}) id={entry['id']}"
    line += " (from text)" if entry.get("recovered") else ""
    key = entry["idempotency_key"]
    if key is not None and key not in entry["args"].values():
        line += f" idempotency_key={key}"
    if entry["error"]:
        line += f" — error: {entry['error']}"
    return line


def _side_effect(entry: ToolCallEntry) -> bool:
    """Whether ``entry`` may have changed something; a call of unrecorded kind may have."""
    return entry.get("side_effect", True) is not False


def is_folded(entry: ToolCallEntry) -> bool:
    """Whether ``entry`` is rendered in its tool's one line: a read-only call that succeeded.

    A call whose kind is not recorded counts as a side effect and keeps a line of its own.
    """
    return entry["status"] == "succeeded" and not _side_effect(entry)


def _turns(entries: Sequence[ToolCallEntry], count: int) -> str:
    """``turns 3–17`` when every call's turn is known, else ``last in turn 17`` or nothing."""
    known = [entry.get("turn", 0) for entry in entries if entry.get("turn", 0) > 0]
    if not known:
        return ""
    first, last = min(known), max(known)
    if len(known) < count:
        return f", last in turn {last}"
    return f", turn {last}" if first == last else f", turns {first}–{last}"


def render_group(name: str, entries: Sequence[ToolCallEntry], older: int = 0) -> str:
    """One line for a tool's read-only successes: how many, when, and the latest arguments.

    ``entries`` are the tool's listed read-only successes, oldest first; ``older`` counts
    those already folded into the ledger's ``aggregated`` counts (no turn or arguments
    kept). A single listed call keeps its ordinary line.
    """
    count = len(entries) + older
    if count == 1 and entries:
        return _render_call(entries[0])
    line = f"- [succeeded] {name} ×{count} (read-only){_turns(entries, count)}"
    if entries and entries[-1]["args"]:
        line += ", latest: " + ", ".join(f"{k}={v}" for k, v in entries[-1]["args"].items())
    return line


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} ×{n}" for name, n in counts.items())


def _groups(calls: Sequence[ToolCallEntry]) -> dict[str, list[int]]:
    """The indexes of each tool's read-only successes in ``calls``, oldest first."""
    groups: dict[str, list[int]] = {}
    for index, entry in enumerate(calls):
        if is_folded(entry):
            groups.setdefault(entry["name"], []).append(index)
    return groups


def _listed_lines(view: Ledger) -> list[str]:
    """A line per call, except read-only successes: one line per tool, where its latest was.

    Tools whose read-only successes are all folded into counts come first (they are older).
    """
    calls = view["tool_calls"]
    groups = _groups(calls)
    aggregated = view["aggregated"]
    lines = [
        render_group(name, [], count)
        for name, count in aggregated.items()
        if count > 0 and name not in groups
    ]
    latest = {indexes[-1]: name for name, indexes in groups.items()}
    for index, entry in enumerate(calls):
        if not is_folded(entry):
            lines.append(_render_call(entry))
        elif index in latest:
            name = latest[index]
            entries = [calls[i] for i in groups[name]]
            lines.append(render_group(name, entries, aggregated.get(name, 0)))
    return lines


def _group_names(full: Ledger) -> list[str]:
    """Tools with read-only successes, the one called last first; count-only tools last."""
    groups = _groups(full["tool_calls"])
    named = sorted(groups, key=lambda name: groups[name][-1], reverse=True)
    return named + [n for n, count in full["aggregated"].items() if count > 0 and n not in groups]


_Target = tuple[re.Pattern[str], str, tuple[str, ...], str | None]
"""How a call is named (its id, or its tool name), the tool, the listed call ids meant,
and their one status (None: the tool's calls disagree, so it is named but not checkable).
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


def _contradicted(claim: tuple[bool, bool], status: str | None) -> str | None:
    """What a (success, failure) claim says that ``status`` contradicts, if anything.

    A status of None (mixed outcomes) leaves nothing to check the claim against.
    """
    success, failure = claim
    if status is None:
        return None
    if success and status != "succeeded":
        return "succeeded"
    if failure and not success and status == "succeeded":
        return "failed"
    return None


def _sentence_problems(sentence: str, by_id: list[_Target], by_name: list[_Target]) -> list[str]:
    """The contradictions of one sentence, once per call it names."""
    analysed, mentions = _mentions(sentence, by_id, by_name)
    claims = claims_by_mention(analysed, [(m[0], m[1]) for m in mentions])
    problems: list[str] = []
    reported: set[tuple[str, str]] = set()
    for (_, _, (_, name, ids, status)), claim in zip(mentions, claims, strict=True):
        said = _contradicted(claim, status)
        if said is None:
            continue
        calls = f"call {', '.join(ids)}" if ids else "folded calls"
        if (name, calls) not in reported:
            reported.add((name, calls))
            problems.append(
                f"the summary says {name} ({calls}) {said}, {CONTRADICTION_MARK} "
                f'{status}: "{sentence}"'
            )
    return problems


CALLS = CallBlock()
