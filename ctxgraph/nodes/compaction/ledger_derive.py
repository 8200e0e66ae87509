"""Derives the ledger of folded messages, and merges it into the previous one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages.tool import ToolCall

from ctxgraph.nodes.compaction.identifiers import (
    error_outcome,
    extract_identifiers,
    scalar_strings,
    split_sentences,
)
from ctxgraph.nodes.compaction.ledger_record import (
    ConstraintEntry,
    DecisionEntry,
    Ledger,
    ToolCallEntry,
    ToolCallStatus,
    copy_entry,
    empty_ledger,
    ledger_artifacts,
    ledger_decisions,
    listed_artifacts,
    merge_constraints,
    read_ledger,
    set_artifacts,
    set_decisions,
)
from ctxgraph.nodes.compaction.ledger_sentences import sentence_kind
from ctxgraph.nodes.offload.inputs import shown_words
from ctxgraph.nodes.offload.refs import messages_artifacts
from ctxgraph.state.messages import content_text, is_real_user_message, is_recovered_call_id

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
    entry = _entry(call_id, name, args, _outcome(result, pending), side_effect)
    if is_recovered_call_id(call_id):  # the model wrote it as text (nodes.text_tool_calls)
        entry["recovered"] = True
    return entry


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
    no result is ``planned`` when its message ends the slice, else ``unknown``. Each entry
    carries the turn it was made in (the slice's real user messages so far; left out before
    the first). Constraints are the marked sentences of real user messages, merged by
    ``constraint_key`` with a count and the last turn that said them (the slice's real
    user messages are turns 1, 2, ...; ``merge_ledgers`` moves them past the earlier
    record's). Decisions (an action on a named item, "Ship B456 to my office") are kept
    the same way in their own list; questions and retractions are neither (see
    ``ledger_sentences``); a decision that a side-effect call of the same turn carried out
    (every identifier it names is among that call's arguments: "Refund A-1030" and a
    ``refund_order(order_id=A-1030)`` call) is recorded by the call's line alone.
    Identifiers come from message text, tool arguments and the results of
    side-effect calls; a read-only result can be read again (and is archived), so its
    contents are not copied into the ledger.
    Artifacts are the offloaded contents the messages refer to (``message_artifacts``).
    """
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    calls: dict[str, ToolCallEntry] = {}
    constraints: list[ConstraintEntry] = []
    decisions: list[DecisionEntry] = []
    identifiers: list[str] = []
    turn = 0
    for message in messages:
        texts = [] if _read_only_result(message, calls) else [_own_text(message)]
        pending = message is messages[-1]
        texts.extend(_record_calls(message, (pending, turn), results, calls, read_only_tools))
        if is_real_user_message(message):
            turn += 1
            for sentence in split_sentences(texts[0]):
                kind = sentence_kind(sentence)
                if kind is not None:
                    kept = constraints if kind == "constraint" else decisions
                    kept.append({"text": sentence, "count": 1, "last_turn": turn})
        for text in texts:
            identifiers.extend(extract_identifiers(text))
    artifacts = messages_artifacts(messages)
    refs = {entry["ref"] for entry in artifacts}  # listed as artifacts, not as identifiers
    derived: Ledger = {
        **empty_ledger(),
        "tool_calls": list(calls.values()),
        "constraints": merge_constraints(constraints),
        "identifiers": [item for item in _union(identifiers) if item not in refs],
        "user_turns": turn,
    }
    set_artifacts(derived, artifacts, 0)
    still_open = [entry for entry in decisions if not _carried_out(entry, calls.values())]
    set_decisions(derived, merge_constraints(still_open), 0)
    return derived


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


def _record_calls(
    message: BaseMessage,
    where: tuple[bool, int],
    results: Mapping[str, ToolMessage],
    calls: dict[str, ToolCallEntry],
    read_only_tools: frozenset[str],
) -> list[str]:
    """Record the calls ``message`` makes or answers in ``calls``; returns their arguments.

    ``where`` says whether ``message`` ends the slice (its unanswered calls are planned)
    and the turn it belongs to (0: before the slice's first real user message).
    """
    pending, turn = where
    if isinstance(message, AIMessage):
        texts: list[str] = []
        for call in message.tool_calls:
            result = results.get(call["id"] or "")
            _upsert(calls, _at_turn(_call_entry(call, result, pending, read_only_tools), turn))
            texts.extend(scalar_strings(call["args"]))
        return texts
    if isinstance(message, ToolMessage) and message.tool_call_id not in calls:
        entry = _result_entry(results[message.tool_call_id], read_only_tools)
        _upsert(calls, _at_turn(entry, turn))
    return []


def _at_turn(entry: ToolCallEntry, turn: int) -> ToolCallEntry:
    """``entry`` with its turn; turn 0 (not known) is left out."""
    if turn > 0:
        entry["turn"] = turn
    else:
        entry.pop("turn", None)
    return entry


def _own_text(message: BaseMessage) -> str:
    """The message's text; of an offloaded user input, the user's words it still shows."""
    shown = shown_words(message)
    return content_text(message) if shown is None else shown


def _read_only_result(message: BaseMessage, calls: dict[str, ToolCallEntry]) -> bool:
    if not isinstance(message, ToolMessage):
        return False
    entry = calls.get(message.tool_call_id)
    return entry is not None and not entry["side_effect"]


def _union(*lists: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(item for items in lists for item in items))


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


def _shifted(entries: Sequence[ConstraintEntry], shift: int) -> list[ConstraintEntry]:
    """``entries`` with their turns moved by ``shift`` (turn 0, not known, stays 0)."""
    return [
        {**entry, "last_turn": entry["last_turn"] + shift if entry["last_turn"] else 0}
        for entry in entries
    ]


def merge_ledgers(previous: Mapping[str, Any], new: Mapping[str, Any]) -> Ledger:
    """``previous`` updated with ``new``: calls by id, counts added, lists unioned in order.

    ``new`` numbers its turns from 1, as ``derive_ledger`` does; its constraints' and calls'
    turns are moved past the ``user_turns`` of ``previous`` (a call made before the new
    slice's first user message belongs to the previous record's last turn). Constraints
    said in both are merged into one entry, decisions too, artifacts by ref. Either ledger
    may be in an older stored shape (see ``read_ledger``).
    """
    old, fresh = read_ledger(previous), read_ledger(new)
    shift = old["user_turns"]
    calls: dict[str, ToolCallEntry] = {}
    for entry in old["tool_calls"]:
        _upsert(calls, entry)
    for entry in fresh["tool_calls"]:
        _upsert(calls, _at_turn(copy_entry(entry), entry.get("turn", 0) + shift))
    moved = _shifted(fresh["constraints"], shift)
    moved_decisions = _shifted(ledger_decisions(fresh), shift)
    folded_calls = {
        name: _add_counts(old["folded_calls"].get(name, {}), fresh["folded_calls"].get(name, {}))
        for name in [*old["folded_calls"], *fresh["folded_calls"]]
    }
    merged: Ledger = {
        "tool_calls": list(calls.values()),
        "aggregated": _add_counts(old["aggregated"], fresh["aggregated"]),
        "folded_calls": folded_calls,
        "constraints": merge_constraints([*old["constraints"], *moved]),
        "folded_constraints": old["folded_constraints"] + fresh["folded_constraints"],
        "identifiers": _union(old["identifiers"], fresh["identifiers"]),
        "user_turns": old["user_turns"] + fresh["user_turns"],
    }
    artifacts = ledger_artifacts({"artifacts": [*listed_artifacts(old), *listed_artifacts(fresh)]})
    folded = old.get("folded_artifacts", 0) + fresh.get("folded_artifacts", 0)
    set_artifacts(merged, artifacts, folded)
    decisions = merge_constraints([*ledger_decisions(old), *moved_decisions])
    folded = old.get("folded_decisions", 0) + fresh.get("folded_decisions", 0)
    set_decisions(merged, decisions, folded)
    return merged
