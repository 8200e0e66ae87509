"""The compaction ledger: tool-call states, user constraints and identifiers derived by code."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal, NotRequired, TypedDict

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
from ctxgraph.nodes.offload.inputs import shown_words
from ctxgraph.nodes.offload.refs import ArtifactMention, messages_artifacts
from ctxgraph.state.messages import content_text, is_real_user_message
from ctxgraph.state.tokens import count_text

ToolCallStatus = Literal["planned", "succeeded", "failed", "cancelled", "unknown"]

FINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
"""States a later ``planned``/``unknown`` record of the same call never overrides."""

UNKNOWN_TOOL = "unknown_tool"
"""Name used for a tool result whose call is not in the folded slice and that names no tool."""

MAX_ARTIFACTS = 50
"""Artifact refs the ledger lists (the newest); older ones are counted in ``folded_artifacts``."""

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


class ConstraintEntry(TypedDict):
    """One user constraint: its latest wording, how often it was said, and when last.

    ``last_turn`` numbers the real user messages folded into the record, from 1; 0 marks a
    constraint carried over from a record that did not number turns yet.
    """

    text: str
    count: int
    last_turn: int


class Ledger(TypedDict):
    """Facts that must survive compaction, merged across compactions.

    ``aggregated`` counts folded read-only successes per tool; ``folded_calls`` counts the
    other folded calls per tool and status. ``constraints`` are ordered by the turn they
    were last said, oldest first, and ``folded_constraints`` counts those dropped from the
    record (the messages that said them are in the archive). ``user_turns`` is the number
    of real user messages folded so far, which numbers the turns. ``artifacts`` lists the
    offloaded content the folded messages refer to, oldest first, and ``folded_artifacts``
    counts those dropped from the list; both are left out while there are none, so a
    ledger without artifacts keeps its earlier shape.
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


def _set_artifacts(ledger: Ledger, entries: list[ArtifactMention], folded: int) -> None:
    """Set the artifact keys, or leave them out when there is nothing to record."""
    ledger.pop("artifacts", None)
    ledger.pop("folded_artifacts", None)
    if entries:
        ledger["artifacts"] = entries
    if folded:
        ledger["folded_artifacts"] = folded


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
    ledger["tool_calls"] = [_copy(entry) for entry in raw.get("tool_calls") or []]
    ledger["aggregated"] = dict(raw.get("aggregated") or {})
    ledger["folded_calls"] = {
        name: dict(counts) for name, counts in (raw.get("folded_calls") or {}).items()
    }
    entries = (_constraint(value) for value in raw.get("constraints") or [])
    ledger["constraints"] = _merge_constraints([e for e in entries if e is not None])
    ledger["folded_constraints"] = _int(raw.get("folded_constraints"))
    ledger["identifiers"] = list(raw.get("identifiers") or [])
    ledger["user_turns"] = _int(raw.get("user_turns"))
    _set_artifacts(ledger, ledger_artifacts(raw), _int(raw.get("folded_artifacts")))
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


def _merge_constraints(entries: Iterable[ConstraintEntry]) -> list[ConstraintEntry]:
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
    are the marked sentences of real user messages, merged by ``constraint_key`` with a
    count and the last turn that said them (the slice's real user messages are turns 1,
    2, ...; ``merge_ledgers`` moves them past the earlier record's). Identifiers come from
    message text, tool arguments and the results of side-effect calls; a read-only result
    can be read again (and is archived), so its contents are not copied into the ledger.
    Artifacts are the offloaded contents the messages refer to (``message_artifacts``).
    """
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    calls: dict[str, ToolCallEntry] = {}
    constraints: list[ConstraintEntry] = []
    identifiers: list[str] = []
    turn = 0
    for message in messages:
        texts = [] if _read_only_result(message, calls) else [_own_text(message)]
        if isinstance(message, AIMessage):
            pending = message is messages[-1]
            for call in message.tool_calls:
                result = results.get(call["id"] or "")
                _upsert(calls, _call_entry(call, result, pending, read_only_tools))
                texts.extend(scalar_strings(call["args"]))
        elif isinstance(message, ToolMessage) and message.tool_call_id not in calls:
            _upsert(calls, _result_entry(results[message.tool_call_id], read_only_tools))
        if is_real_user_message(message):
            turn += 1
            constraints.extend(
                {"text": sentence, "count": 1, "last_turn": turn}
                for sentence in split_sentences(texts[0])
                if is_constraint(sentence)
            )
        for text in texts:
            identifiers.extend(extract_identifiers(text))
    artifacts = messages_artifacts(messages)
    refs = {entry["ref"] for entry in artifacts}  # listed as artifacts, not as identifiers
    derived: Ledger = {
        **empty_ledger(),
        "tool_calls": list(calls.values()),
        "constraints": _merge_constraints(constraints),
        "identifiers": [item for item in _union(identifiers) if item not in refs],
        "user_turns": turn,
    }
    _set_artifacts(derived, artifacts, 0)
    return derived


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


def _add_counts(first: Mapping[str, int], second: Mapping[str, int]) -> dict[str, int]:
    total = dict(first)
    for name, count in second.items():
        total[name] = total.get(name, 0) + count
    return total


def merge_ledgers(previous: Mapping[str, Any], new: Mapping[str, Any]) -> Ledger:
    """``previous`` updated with ``new``: calls by id, counts added, lists unioned in order.

    ``new`` numbers its turns from 1, as ``derive_ledger`` does; they are moved past the
    ``user_turns`` of ``previous``. Constraints said in both are merged into one entry,
    artifacts by ref. Either ledger may be in an older stored shape (see ``read_ledger``).
    """
    old, fresh = read_ledger(previous), read_ledger(new)
    calls: dict[str, ToolCallEntry] = {}
    for entry in [*old["tool_calls"], *fresh["tool_calls"]]:
        _upsert(calls, entry)
    shift = old["user_turns"]
    moved: list[ConstraintEntry] = [
        {**entry, "last_turn": entry["last_turn"] + shift if entry["last_turn"] else 0}
        for entry in fresh["constraints"]
    ]
    folded_calls = {
        name: _add_counts(old["folded_calls"].get(name, {}), fresh["folded_calls"].get(name, {}))
        for name in [*old["folded_calls"], *fresh["folded_calls"]]
    }
    merged: Ledger = {
        "tool_calls": list(calls.values()),
        "aggregated": _add_counts(old["aggregated"], fresh["aggregated"]),
        "folded_calls": folded_calls,
        "constraints": _merge_constraints([*old["constraints"], *moved]),
        "folded_constraints": old["folded_constraints"] + fresh["folded_constraints"],
        "identifiers": _union(old["identifiers"], fresh["identifiers"]),
        "user_turns": old["user_turns"] + fresh["user_turns"],
    }
    artifacts = ledger_artifacts({"artifacts": [*_listed(old), *_listed(fresh)]})
    folded = old.get("folded_artifacts", 0) + fresh.get("folded_artifacts", 0)
    _set_artifacts(merged, artifacts, folded)
    return merged


def _listed(ledger: Ledger) -> list[ArtifactMention]:
    return ledger.get("artifacts") or []


def _fold_rank(entry: ToolCallEntry) -> int:
    """The order calls fold in: 0 folds first, 3 last.

    Read-only successes, then read-only non-successes, side-effect successes and
    side-effect non-successes (a side effect of unknown outcome goes last).
    """
    return (2 if entry["side_effect"] else 0) + (entry["status"] != "succeeded")


def bound_ledger(
    ledger: Mapping[str, Any],
    *,
    max_tool_calls: int,
    max_identifiers: int,
    max_constraint_tokens: int | None = None,
    max_artifacts: int = MAX_ARTIFACTS,
) -> Ledger:
    """Keep the ledger within its bounds, whatever the length of the thread.

    - At most ``max_tool_calls`` calls stay listed. Above it, calls are folded by
      ``_fold_rank``, oldest first within a rank: read-only successes into ``aggregated``
      (per tool), every other call into ``folded_calls`` (per tool and status). So the
      newest side effects and non-success states are the last to go.
    - Only the ``max_identifiers`` most recent identifiers are kept.
    - With ``max_constraint_tokens``, the constraints said most recently are kept while
      their rendered lines fit it, and the older ones are folded (counted in
      ``folded_constraints``; the messages that said them are in the archive). The one
      said last always stays, verbatim.
    - Only the ``max_artifacts`` newest artifact refs stay listed; the older ones are
      counted in ``folded_artifacts`` (their refs are in the archived messages).
    """
    if (
        max_tool_calls < 0
        or max_identifiers < 0
        or (max_constraint_tokens or 0) < 0
        or max_artifacts < 0
    ):
        raise ValueError("ledger bounds must not be negative")
    bounded = read_ledger(ledger)
    calls = bounded["tool_calls"]
    excess = len(calls) - max_tool_calls
    if excess > 0:
        ranked = sorted(range(len(calls)), key=lambda index: (_fold_rank(calls[index]), index))
        folded = set(ranked[:excess])
        for index in sorted(folded):
            _fold_call(bounded, calls[index])
        bounded["tool_calls"] = [e for index, e in enumerate(calls) if index not in folded]
    identifiers = bounded["identifiers"]
    bounded["identifiers"] = identifiers[max(0, len(identifiers) - max_identifiers) :]
    if max_constraint_tokens is not None:
        constraints = bounded["constraints"]
        kept = _newest_within(constraints, max_constraint_tokens)
        bounded["constraints"] = constraints[len(constraints) - kept :]
        bounded["folded_constraints"] += len(constraints) - kept
    artifacts = _listed(bounded)
    dropped = max(0, len(artifacts) - max_artifacts)
    _set_artifacts(bounded, artifacts[dropped:], bounded.get("folded_artifacts", 0) + dropped)
    return bounded


def _fold_call(ledger: Ledger, entry: ToolCallEntry) -> None:
    name = entry["name"]
    if entry["status"] == "succeeded" and not entry["side_effect"]:
        ledger["aggregated"][name] = ledger["aggregated"].get(name, 0) + 1
        return
    counts = ledger["folded_calls"].setdefault(name, {})
    counts[entry["status"]] = counts.get(entry["status"], 0) + 1


def _line_cost(line: str) -> int:
    return count_text(line) + 1


def _newest_within(constraints: Sequence[ConstraintEntry], max_tokens: int) -> int:
    """How many of the newest constraints fit ``max_tokens`` (at least one, if any)."""
    used = kept = 0
    for entry in reversed(constraints):
        used += _line_cost(_render_constraint(entry))
        if kept and used > max_tokens:
            break
        kept += 1
    return kept


def _render_call(entry: ToolCallEntry) -> str:
    args = ", ".join(f"{key}={value}" for key, value in entry["args"].items())
    line = f"- [{entry['status']}] {entry['name']}({args}) id={entry['id']}"
    key = entry["idempotency_key"]
    if key is not None and key not in entry["args"].values():
        line += f" idempotency_key={key}"
    if entry["error"]:
        line += f" — error: {entry['error']}"
    return line


def _render_constraint(entry: ConstraintEntry) -> str:
    """The constraint verbatim; a repeated one also says how often and when it was last."""
    count, turn = entry["count"], entry["last_turn"]
    if count == 1:
        return f"- {entry['text']}"
    said = f"said {count}×, last in turn {turn}" if turn else f"said {count}×"
    return f"- {entry['text']} [{said}]"


def _artifact_what(entry: ArtifactMention) -> str:
    """What an artifact holds: ``result of read_file``, ``arguments of write_file``, ..."""
    kind, tool = entry["kind"], entry["tool"]
    if kind == "tool_result":
        return f"result of {tool}" if tool else "tool result"
    if kind == "tool_args":
        return f"arguments of {tool}" if tool else "tool arguments"
    return "user input" if kind == "user_input" else kind


def _render_artifact(entry: ArtifactMention) -> str:
    """One artifact: its ref, what it holds and its size."""
    size = f", {entry['tokens']:,} tokens" if entry["tokens"] else ""
    return f"- {entry['ref']}: {_artifact_what(entry)}{size}"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} ×{n}" for name, n in counts.items())


def render_ledger(ledger: Mapping[str, Any], *, unlisted: Mapping[str, int] | None = None) -> str:
    """The ledger as a compact text block for the model; empty for an empty ledger.

    ``unlisted`` counts, per tool, successful calls left out of this rendering. Any stored
    shape of the ledger is accepted (see ``read_ledger``).
    """
    return _render(read_ledger(ledger), unlisted)


def _render(view: Ledger, unlisted: Mapping[str, int] | None = None) -> str:
    lines: list[str] = []
    if view["tool_calls"] or view["aggregated"] or view["folded_calls"] or unlisted:
        lines.append("TOOL CALLS (recorded by code, authoritative):")
        lines.extend(_render_call(entry) for entry in view["tool_calls"])
        if view["aggregated"]:
            lines.append(f"Read-only successes folded: {_counts(view['aggregated'])}")
        if view["folded_calls"]:
            folded = {
                f"{name} {status}": n
                for name, counts in view["folded_calls"].items()
                for status, n in counts.items()
            }
            lines.append(f"Older calls in the archive (read_history): {_counts(folded)}")
        if unlisted:
            lines.append(f"Older successes not listed here (all succeeded): {_counts(unlisted)}")
    if view["constraints"] or view["folded_constraints"]:
        lines.append("USER CONSTRAINTS (verbatim):")
        lines.extend(_render_constraint(entry) for entry in view["constraints"])
        folded_constraints = view["folded_constraints"]
        if folded_constraints:
            lines.append(
                f"{folded_constraints} older constraint"
                + (" is" if folded_constraints == 1 else "s are")
                + " in the archive (read_history)"
            )
    artifacts, folded_artifacts = _listed(view), view.get("folded_artifacts", 0)
    if artifacts or folded_artifacts:
        lines.append(
            "OFFLOADED CONTENT (artifacts, newest first; read one back with "
            'read_artifact(ref="...") or grep_artifact(ref="...", pattern="...")):'
        )
        lines.extend(_render_artifact(entry) for entry in reversed(artifacts))
        if folded_artifacts:
            lines.append(
                f"{folded_artifacts} older artifact"
                + (" is" if folded_artifacts == 1 else "s are")
                + " not listed (their refs are in the archived messages: read_history)"
            )
    if view["identifiers"]:
        lines.append("IDENTIFIERS: " + ", ".join(view["identifiers"]))
    return "\n".join(lines)


_Shown = tuple[Literal["constraint", "call", "artifact", "identifier"], int]
"""An item a budgeted rendering lists: its kind and its index in the ledger."""

COUNT_LINES_ROOM = 48
"""Tokens a budgeted rendering sets aside for its headings and "not listed" count lines."""


def render_ledger_within(ledger: Mapping[str, Any], max_tokens: int) -> str:
    """Render the ledger within ``max_tokens``, dropping the least critical lines first.

    Lines are chosen newest first, in this order of priority: constraints (the one said
    last always), non-success calls (side effects first), artifact refs, successes (side
    effects first), then identifiers. What is left out is counted: constraints,
    non-success calls and artifacts as being in the archive, successes per tool. Only a
    single constraint longer than the whole budget can exceed it. The full ledger stays
    in the state.
    """
    full = read_ledger(ledger)
    calls = full["tool_calls"]
    candidates: list[tuple[_Shown, str]] = [
        (("constraint", index), _render_constraint(full["constraints"][index]))
        for index in reversed(range(len(full["constraints"])))
    ]
    newest = list(reversed(range(len(calls))))
    artifacts = _listed(full)
    for succeeded in (False, True):
        if succeeded:
            candidates.extend(
                (("artifact", index), _render_artifact(artifacts[index]))
                for index in reversed(range(len(artifacts)))
            )
        for side_effect in (True, False):
            candidates.extend(
                (("call", index), _render_call(calls[index]))
                for index in newest
                if (calls[index]["status"] == "succeeded") == succeeded
                and calls[index]["side_effect"] == side_effect
            )
    candidates.extend(
        (("identifier", index), full["identifiers"][index])
        for index in reversed(range(len(full["identifiers"])))
    )
    # Room for the headings and the count lines, then take lines while they fit; a kind
    # of line stops at its first misfit, so what is listed is always the newest.
    bare: Ledger = {**full, "tool_calls": [], "constraints": [], "identifiers": []}
    _set_artifacts(bare, [], full.get("folded_artifacts", 0) + len(artifacts))
    used = count_text(_render(bare)) + COUNT_LINES_ROOM
    floor = 1 if full["constraints"] else 0  # the constraint said last is always listed
    shown: list[_Shown] = []
    stopped: set[tuple[str, bool]] = set()
    for item, line in candidates:
        group = (item[0], item[0] == "call" and calls[item[1]]["status"] == "succeeded")
        if group in stopped:
            continue
        cost = _line_cost(line)
        if len(shown) >= floor and used + cost > max_tokens:
            stopped.add(group)
            continue
        shown.append(item)
        used += cost
    text = _render_view(full, shown)
    while len(shown) > floor and count_text(text) > max_tokens:
        shown.pop()
        text = _render_view(full, shown)
    return text


def _render_view(full: Ledger, shown: Sequence[_Shown]) -> str:
    """``full`` rendered with only the ``shown`` items listed and the rest counted."""
    picked = set(shown)
    view: Ledger = {
        **full,
        "tool_calls": [],
        "aggregated": dict(full["aggregated"]),
        "folded_calls": {name: dict(counts) for name, counts in full["folded_calls"].items()},
    }
    unlisted: dict[str, int] = {}
    for index, entry in enumerate(full["tool_calls"]):
        if ("call", index) in picked:
            view["tool_calls"].append(entry)
        elif entry["status"] == "succeeded":
            unlisted[entry["name"]] = unlisted.get(entry["name"], 0) + 1
        else:
            _fold_call(view, entry)
    constraints = full["constraints"]
    view["constraints"] = [e for i, e in enumerate(constraints) if ("constraint", i) in picked]
    view["folded_constraints"] += len(constraints) - len(view["constraints"])
    view["identifiers"] = [
        e for i, e in enumerate(full["identifiers"]) if ("identifier", i) in picked
    ]
    artifacts = _listed(full)
    shown_artifacts = [e for i, e in enumerate(artifacts) if ("artifact", i) in picked]
    folded = full.get("folded_artifacts", 0) + len(artifacts) - len(shown_artifacts)
    _set_artifacts(view, shown_artifacts, folded)
    return _render(view, unlisted)


_Target = tuple[re.Pattern[str], str, tuple[str, ...], str | None]
"""How a call is named (its id, or its tool name), the tool, the listed call ids meant,
and their one status.

A status of ``None`` marks a tool name whose calls disagree on status: named, but not
checkable.
"""
_Mention = tuple[int, int, _Target]


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
                    f"the summary says {name} ({calls}) {said}, but the ledger "
                    f'records it as {status}: "{sentence}"'
                )
    return problems
