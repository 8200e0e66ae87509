"""Renders the ledger as text for the model, in full or within a token budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ctxgraph.nodes.compaction.ledger_record import (
    ConstraintEntry,
    Ledger,
    ToolCallEntry,
    fold_call,
    listed_artifacts,
    read_ledger,
    set_artifacts,
)
from ctxgraph.nodes.offload.refs import ArtifactMention
from ctxgraph.state.tokens import count_text


def line_cost(line: str) -> int:
    """Tokens one rendered line adds, its newline included."""
    return count_text(line) + 1


def _render_call(entry: ToolCallEntry) -> str:
    args = ", ".join(f"{key}={value}" for key, value in entry["args"].items())
    line = f"- [{entry['status']}] {entry['name']}({args}) id={entry['id']}"
    key = entry["idempotency_key"]
    if key is not None and key not in entry["args"].values():
        line += f" idempotency_key={key}"
    if entry["error"]:
        line += f" — error: {entry['error']}"
    return line


def render_constraint(entry: ConstraintEntry) -> str:
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
    lines = [*_call_lines(view, unlisted), *_constraint_lines(view), *_artifact_lines(view)]
    if view["identifiers"]:
        lines.append("IDENTIFIERS: " + ", ".join(view["identifiers"]))
    return "\n".join(lines)


def _call_lines(view: Ledger, unlisted: Mapping[str, int] | None) -> list[str]:
    """The TOOL CALLS block: listed calls, then the folded and unlisted counts."""
    if not (view["tool_calls"] or view["aggregated"] or view["folded_calls"] or unlisted):
        return []
    lines = ["TOOL CALLS (recorded by code, authoritative):"]
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
    return lines


def _constraint_lines(view: Ledger) -> list[str]:
    """The USER CONSTRAINTS block: listed constraints, then how many are archived."""
    folded = view["folded_constraints"]
    if not (view["constraints"] or folded):
        return []
    lines = ["USER CONSTRAINTS (verbatim):"]
    lines.extend(render_constraint(entry) for entry in view["constraints"])
    if folded:
        lines.append(f"{_older(folded, 'constraint')} in the archive (read_history)")
    return lines


def _artifact_lines(view: Ledger) -> list[str]:
    """The OFFLOADED CONTENT block: listed artifacts, newest first, then how many are not."""
    artifacts, folded = listed_artifacts(view), view.get("folded_artifacts", 0)
    if not (artifacts or folded):
        return []
    lines = [
        "OFFLOADED CONTENT (artifacts, newest first; read one back with "
        'read_artifact(ref="...") or grep_artifact(ref="...", pattern="...")):'
    ]
    lines.extend(_render_artifact(entry) for entry in reversed(artifacts))
    if folded:
        lines.append(
            f"{_older(folded, 'artifact')} not listed "
            "(their refs are in the archived messages: read_history)"
        )
    return lines


def _older(count: int, noun: str) -> str:
    """``1 older constraint is`` or ``3 older constraints are``."""
    return f"{count} older {noun}" + (" is" if count == 1 else "s are")


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
    floor = 1 if full["constraints"] else 0  # the constraint said last is always listed
    shown = _fitting(full, _candidates(full), max_tokens, floor)
    text = _render_view(full, shown)
    while len(shown) > floor and count_text(text) > max_tokens:
        shown.pop()
        text = _render_view(full, shown)
    return text


def _candidates(full: Ledger) -> list[tuple[_Shown, str]]:
    """Every listable item with its line, in the order of priority, newest first."""
    calls = full["tool_calls"]
    candidates: list[tuple[_Shown, str]] = [
        (("constraint", index), render_constraint(full["constraints"][index]))
        for index in reversed(range(len(full["constraints"])))
    ]
    newest = list(reversed(range(len(calls))))
    artifacts = listed_artifacts(full)
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
    return candidates


def _fitting(
    full: Ledger, candidates: Sequence[tuple[_Shown, str]], max_tokens: int, floor: int
) -> list[_Shown]:
    """The candidates taken while their lines fit, after room for headings and counts.

    A kind of line stops at its first misfit, so what is listed is always the newest;
    the first ``floor`` candidates are taken whatever their size.
    """
    calls = full["tool_calls"]
    bare: Ledger = {**full, "tool_calls": [], "constraints": [], "identifiers": []}
    set_artifacts(bare, [], full.get("folded_artifacts", 0) + len(listed_artifacts(full)))
    used = count_text(_render(bare)) + COUNT_LINES_ROOM
    shown: list[_Shown] = []
    stopped: set[tuple[str, bool]] = set()
    for item, line in candidates:
        group = (item[0], item[0] == "call" and calls[item[1]]["status"] == "succeeded")
        if group in stopped:
            continue
        cost = line_cost(line)
        if len(shown) >= floor and used + cost > max_tokens:
            stopped.add(group)
            continue
        shown.append(item)
        used += cost
    return shown


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
            fold_call(view, entry)
    constraints = full["constraints"]
    view["constraints"] = [e for i, e in enumerate(constraints) if ("constraint", i) in picked]
    view["folded_constraints"] += len(constraints) - len(view["constraints"])
    view["identifiers"] = [
        e for i, e in enumerate(full["identifiers"]) if ("identifier", i) in picked
    ]
    artifacts = listed_artifacts(full)
    shown_artifacts = [e for i, e in enumerate(artifacts) if ("artifact", i) in picked]
    folded = full.get("folded_artifacts", 0) + len(artifacts) - len(shown_artifacts)
    set_artifacts(view, shown_artifacts, folded)
    return _render(view, unlisted)
