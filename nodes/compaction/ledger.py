"""The compaction ledger: tool-call states, user constraints and identifiers derived by code."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages.tool import ToolCall

from ctxgraph.nodes.compaction.identifiers import (
    claims_by_mention,
    error_outcome,
    extract_identifiers,
    has_outcome_words,
    is_constraint,
    scalar_strings,
    split_sentences,
    token_pattern,
)
from ctxgraph.state.messages import content_text, is_real_user_message
from ctxgraph.state.tokens import count_text

ToolCallStatus = Literal["planned", "succeeded", "failed", "cancelled", "unknown"]

FINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
"""States a later ``planned``/``unknown`` record of the same call never overrides."""

UNKNOWN_TOOL = "unknown_tool"
"""Name used for a tool result whose call is not in the folded slice and that names no tool."""

MAX_ARGS = 6
MAX_ARG_CHARS = 80
MAX_ERROR_CHARS = 120

READ_ONLY_PREFIXES = (
    "get", "list", "read", "search", "lookup", "look_up", "fetch", "query", "find", "view",
    "show", "describe", "count", "check", "inspect", "calculator",
)  # fmt: skip


class ToolCallEntry(TypedDict):
    """One tool call as code saw it: what was asked and how it ended."""

    id: str
    name: str
    args: dict[str, str]
    status: ToolCallStatus
    error: str | None
    idempotency_key: str | None
    side_effect: bool


class Ledger(TypedDict):
    """Facts that must survive compaction, merged across compactions."""

    tool_calls: list[ToolCallEntry]
    aggregated: dict[str, int]
    constraints: list[str]
    identifiers: list[str]


def empty_ledger() -> Ledger:
    """A ledger with nothing in it."""
    return {"tool_calls": [], "aggregated": {}, "constraints": [], "identifiers": []}


def is_read_only(name: str, read_only_tools: frozenset[str] = frozenset()) -> bool:
    """True for tools named in ``read_only_tools`` or whose name starts with a read verb.

    The verb must be a whole word (``get_order``, ``getOrder``, ``search``), so that
    ``checkout`` or ``showcase_item`` count as side effects.
    """
    if name in read_only_tools:
        return True
    for prefix in READ_ONLY_PREFIXES:
        at = len(prefix)
        if name.lower().startswith(prefix) and (
            at == len(name)
            or not name[at].isalpha()
            or (name[at].isupper() and name[at - 1].islower())
        ):
            return True
    return False


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
    return _entry(call_id, name, args, _outcome(result, pending), side_effect)


def _result_entry(result: ToolMessage, read_only_tools: frozenset[str]) -> ToolCallEntry:
    """An entry for a tool result whose call was folded earlier (or never seen)."""
    name = result.name or UNKNOWN_TOOL
    side_effect = name == UNKNOWN_TOOL or not is_read_only(name, read_only_tools)
    return _entry(result.tool_call_id, name, {}, _outcome(result, False), side_effect)


def derive_ledger(
    messages: Sequence[BaseMessage], *, read_only_tools: frozenset[str] = frozenset()
) -> Ledger:
    """The ledger of a slice of folded messages.

    Every tool call becomes an entry whose status comes from its tool result; a call with
    no result is ``planned`` when its message ends the slice, else ``unknown``. Constraints
    are the marked sentences of real user messages. Identifiers come from message text,
    tool arguments and the results of side-effect calls; a read-only result can be read
    again (and is archived), so its contents are not copied into the ledger.
    """
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    calls: dict[str, ToolCallEntry] = {}
    constraints: list[str] = []
    identifiers: list[str] = []
    for message in messages:
        texts = [] if _read_only_result(message, calls) else [content_text(message)]
        if isinstance(message, AIMessage):
            pending = message is messages[-1]
            for call in message.tool_calls:
                result = results.get(call["id"] or "")
                _upsert(calls, _call_entry(call, result, pending, read_only_tools))
                texts.extend(scalar_strings(call["args"]))
        elif isinstance(message, ToolMessage) and message.tool_call_id not in calls:
            _upsert(calls, _result_entry(results[message.tool_call_id], read_only_tools))
        if is_real_user_message(message):
            constraints.extend(s for s in split_sentences(texts[0]) if is_constraint(s))
        for text in texts:
            identifiers.extend(extract_identifiers(text))
    return {
        "tool_calls": list(calls.values()),
        "aggregated": {},
        "constraints": _union(constraints),
        "identifiers": _union(identifiers),
    }


def _read_only_result(message: BaseMessage, calls: dict[str, ToolCallEntry]) -> bool:
    if not isinstance(message, ToolMessage):
        return False
    entry = calls.get(message.tool_call_id)
    return entry is not None and not entry["side_effect"]


def _union(*lists: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(item for items in lists for item in items))


def _copy(entry: ToolCallEntry) -> ToolCallEntry:
    return {**entry, "args": dict(entry["args"])}


def _upsert(calls: dict[str, ToolCallEntry], entry: ToolCallEntry) -> None:
    """Record ``entry`` under its id; a final state is never replaced by a non-final one."""
    old = calls.get(entry["id"])
    if old is None:
        calls[entry["id"]] = _copy(entry)
        return
    keep_old = old["status"] in FINAL_STATUSES and entry["status"] not in FINAL_STATUSES
    winner, other = (old, entry) if keep_old else (entry, old)
    merged = _copy(winner)
    if merged["name"] == UNKNOWN_TOOL and other["name"] != UNKNOWN_TOOL:
        merged["name"], merged["side_effect"] = other["name"], other["side_effect"]
    if not merged["args"]:
        merged["args"] = dict(other["args"])
    if merged["idempotency_key"] is None:
        merged["idempotency_key"] = other["idempotency_key"]
    calls[entry["id"]] = merged


def merge_ledgers(previous: Ledger, new: Ledger) -> Ledger:
    """``previous`` updated with ``new``: calls by id, counts added, lists unioned in order."""
    calls: dict[str, ToolCallEntry] = {}
    for entry in [*previous["tool_calls"], *new["tool_calls"]]:
        _upsert(calls, entry)
    aggregated = dict(previous["aggregated"])
    for name, count in new["aggregated"].items():
        aggregated[name] = aggregated.get(name, 0) + count
    return {
        "tool_calls": list(calls.values()),
        "aggregated": aggregated,
        "constraints": _union(previous["constraints"], new["constraints"]),
        "identifiers": _union(previous["identifiers"], new["identifiers"]),
    }


def bound_ledger(ledger: Ledger, *, max_tool_calls: int, max_identifiers: int) -> Ledger:
    """Keep the ledger small without losing what matters.

    Above ``max_tool_calls`` entries, the oldest read-only successes are folded into
    per-tool counts; side effects and non-success states are never folded, so the result
    may stay above the bound. Only the ``max_identifiers`` most recent identifiers are
    kept. Constraints are never dropped.
    """
    if max_tool_calls < 0 or max_identifiers < 0:
        raise ValueError("ledger bounds must not be negative")
    aggregated = dict(ledger["aggregated"])
    excess = len(ledger["tool_calls"]) - max_tool_calls
    calls: list[ToolCallEntry] = []
    for entry in ledger["tool_calls"]:
        if excess > 0 and entry["status"] == "succeeded" and not entry["side_effect"]:
            aggregated[entry["name"]] = aggregated.get(entry["name"], 0) + 1
            excess -= 1
        else:
            calls.append(_copy(entry))
    identifiers = ledger["identifiers"]
    return {
        "tool_calls": calls,
        "aggregated": aggregated,
        "constraints": list(ledger["constraints"]),
        "identifiers": list(identifiers[max(0, len(identifiers) - max_identifiers) :]),
    }


def _render_call(entry: ToolCallEntry) -> str:
    args = ", ".join(f"{key}={value}" for key, value in entry["args"].items())
    line = f"- [{entry['status']}] {entry['name']}({args}) id={entry['id']}"
    key = entry["idempotency_key"]
    if key is not None and key not in entry["args"].values():
        line += f" idempotency_key={key}"
    if entry["error"]:
        line += f" — error: {entry['error']}"
    return line


def render_ledger(ledger: Ledger, *, unlisted: Mapping[str, int] | None = None) -> str:
    """The ledger as a compact text block for the model; empty for an empty ledger.

    ``unlisted`` counts, per tool, successful calls left out of this rendering.
    """
    lines: list[str] = []
    if ledger["tool_calls"] or ledger["aggregated"] or unlisted:
        lines.append("TOOL CALLS (recorded by code, authoritative):")
        lines.extend(_render_call(entry) for entry in ledger["tool_calls"])
        if ledger["aggregated"]:
            counts = ", ".join(f"{name} ×{n}" for name, n in ledger["aggregated"].items())
            lines.append(f"Read-only successes folded: {counts}")
        if unlisted:
            counts = ", ".join(f"{name} ×{n}" for name, n in unlisted.items())
            lines.append(f"Older successes not listed here (all succeeded): {counts}")
    if ledger["constraints"]:
        lines.append("USER CONSTRAINTS (verbatim):")
        lines.extend(f"- {constraint}" for constraint in ledger["constraints"])
    if ledger["identifiers"]:
        lines.append("IDENTIFIERS: " + ", ".join(ledger["identifiers"]))
    return "\n".join(lines)


def render_ledger_within(ledger: Ledger, max_tokens: int) -> str:
    """Render the ledger within about ``max_tokens``, dropping the least critical lines first.

    Non-success states and constraints are always shown. Successes are listed newest
    first while they fit (side effects before read-only calls), then identifiers, newest
    first; successes left out are counted per tool. The full ledger stays in the state.
    """
    calls = ledger["tool_calls"]
    shown = {id(e) for e in calls if e["status"] != "succeeded"}
    fixed: Ledger = {
        **ledger,
        "tool_calls": [e for e in calls if id(e) in shown],
        "identifiers": [],
    }
    used = count_text(render_ledger(fixed)) + 32  # room for the "not listed" line
    successes = [e for e in reversed(calls) if e["status"] == "succeeded"]
    successes.sort(key=lambda e: not e["side_effect"])  # stable: side effects first
    for entry in successes:
        cost = count_text(_render_call(entry)) + 1
        if used + cost > max_tokens:
            break
        shown.add(id(entry))
        used += cost
    identifiers: list[str] = []
    for identifier in reversed(ledger["identifiers"]):
        cost = count_text(identifier) + 1
        if used + cost > max_tokens:
            break
        identifiers.insert(0, identifier)
        used += cost
    unlisted: dict[str, int] = {}
    for entry in calls:
        if id(entry) not in shown:
            unlisted[entry["name"]] = unlisted.get(entry["name"], 0) + 1
    view: Ledger = {
        **ledger,
        "tool_calls": [e for e in calls if id(e) in shown],
        "identifiers": identifiers,
    }
    return render_ledger(view, unlisted=unlisted)


_Target = tuple[re.Pattern[str], str, list[ToolCallEntry] | None]
"""How a call is named (its id, or its tool name), the tool, and the entries meant.

``None`` marks a tool name whose entries disagree on status: named, but not checkable.
"""
_Mention = tuple[int, int, _Target]


def _targets(ledger: Ledger) -> tuple[list[_Target], list[_Target]]:
    by_id: list[_Target] = [(token_pattern(e["id"]), e["name"], [e]) for e in ledger["tool_calls"]]
    groups: dict[str, list[ToolCallEntry]] = {}
    for entry in ledger["tool_calls"]:
        groups.setdefault(entry["name"], []).append(entry)
    by_name: list[_Target] = []
    for name, entries in groups.items():
        statuses = {entry["status"] for entry in entries}
        if ledger["aggregated"].get(name, 0) > 0:
            statuses.add("succeeded")
        by_name.append((token_pattern(name), name, entries if len(statuses) == 1 else None))
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
    for pattern, name, targets in by_name:
        if name in named:
            sentence = pattern.sub(lambda m: " " * len(m.group(0)), sentence)
        else:
            mentions.extend(
                (m.start(), m.end(), (pattern, name, targets)) for m in pattern.finditer(sentence)
            )
    ordered: list[_Mention] = []
    for mention in sorted(mentions, key=lambda mention: (mention[0], -mention[1])):
        if not ordered or mention[0] >= ordered[-1][1]:
            ordered.append(mention)
    return sentence, ordered


def find_contradictions(summary_text: str, ledger: Ledger) -> list[str]:
    """Sentences of a summary that assert a call outcome the ledger disagrees with.

    A call is named by its id, or by its tool name when all its entries share one status.
    A success word for a call that is not ``succeeded``, or a failure word (and no success
    word) for one that is, is reported once per sentence and call.
    """
    by_id, by_name = _targets(ledger)
    problems: list[str] = []
    for sentence in split_sentences(summary_text):
        if not has_outcome_words(sentence):
            continue  # no claim of any outcome, so nothing to contradict
        analysed, mentions = _mentions(sentence, by_id, by_name)
        reported: set[str] = set()
        for (_, _, (_, name, entries)), (success, failure) in zip(
            mentions, claims_by_mention(analysed, [(m[0], m[1]) for m in mentions]), strict=True
        ):
            status = entries[0]["status"] if entries else "ambiguous"
            if success and status not in {"succeeded", "ambiguous"}:
                said = "succeeded"
            elif failure and not success and status == "succeeded":
                said = "failed"
            else:
                continue
            ids = ", ".join(entry["id"] for entry in entries or [])
            if ids not in reported:
                reported.add(ids)
                problems.append(
                    f"the summary says {name} (call {ids}) {said}, but the ledger "
                    f'records it as {status}: "{sentence}"'
                )
    return problems
