"""Renders the ledger as text for the model, in full or within a token budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ctxgraph.nodes.compaction.identifiers import shown_verbatim
from ctxgraph.nodes.compaction.ledger_record import (
    ConstraintEntry,
    Ledger,
    ToolCallEntry,
    fold_call,
    ledger_decisions,
    listed_artifacts,
    read_ledger,
    set_artifacts,
    set_decisions,
)
from ctxgraph.nodes.offload.refs import ArtifactMention
from ctxgraph.state.tokens import count_text


def line_cost(line: str) -> int:
    """Tokens one rendered line adds, its newline included."""
    return count_text(line) + 1


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

    Read-only successes take one line per tool (``render_group``); every other call, each
    constraint, each decision (``USER DECISIONS``) and each artifact a line of its own;
    ``IDENTIFIERS`` lists those no line shows verbatim. ``unlisted`` counts, per tool,
    successful calls left out of this rendering. Any stored shape of the ledger is
    accepted (see ``read_ledger``).
    """
    return _render(read_ledger(ledger), unlisted)


def _render(view: Ledger, unlisted: Mapping[str, int] | None = None) -> str:
    lines = [
        *_call_lines(view, unlisted),
        *_constraint_lines(view),
        *_decision_lines(view),
        *_artifact_lines(view),
    ]
    shown = "\n".join(lines)
    identifiers = [item for item in view["identifiers"] if not shown_verbatim(item, shown)]
    if identifiers:
        lines.append("IDENTIFIERS: " + ", ".join(identifiers))
    return "\n".join(lines)


def _call_lines(view: Ledger, unlisted: Mapping[str, int] | None) -> list[str]:
    """The TOOL CALLS block: listed calls and tool lines, then the folded and unlisted counts."""
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


def _decision_lines(view: Ledger) -> list[str]:
    """The USER DECISIONS block: listed decisions, then how many are archived."""
    decisions, folded = ledger_decisions(view), view.get("folded_decisions", 0)
    if not (decisions or folded):
        return []
    lines = ["USER DECISIONS (verbatim, about the items they name):"]
    lines.extend(render_constraint(entry) for entry in decisions)
    if folded:
        lines.append(f"{_older(folded, 'decision')} in the archive (read_history)")
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


_Shown = tuple[Literal["constraint", "decision", "call", "group", "artifact", "identifier"], int]
"""An item a budgeted rendering lists: its kind and its index in the ledger."""


COUNT_LINES_ROOM = 48
"""Tokens a budgeted rendering sets aside for its headings and "not listed" count lines."""


def render_ledger_within(ledger: Mapping[str, Any], max_tokens: int) -> str:
    """Render the ledger within ``max_tokens``, dropping the least critical lines first.

    Lines are chosen newest first, in this order of priority: constraints (the one said
    last always), non-success calls (side effects first), decisions, artifact refs,
    side-effect successes, the one line of each tool's read-only successes (the tool
    used last first), then identifiers. What is left out is counted: constraints,
    decisions, non-success calls and artifacts as being in the archive, successes per
    tool. Only a single
    constraint longer than the whole budget can exceed it. The full ledger stays in the
    state.
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
    decisions = ledger_decisions(full)
    newest = list(reversed(range(len(calls))))
    artifacts = listed_artifacts(full)
    for succeeded in (False, True):
        if succeeded:
            candidates.extend(
                (("decision", index), render_constraint(decisions[index]))
                for index in reversed(range(len(decisions)))
            )
            candidates.extend(
                (("artifact", index), _render_artifact(artifacts[index]))
                for index in reversed(range(len(artifacts)))
            )
        for side_effect in (True, False):
            candidates.extend(
                (("call", index), _render_call(calls[index]))
                for index in newest
                if (calls[index]["status"] == "succeeded") == succeeded
                and _side_effect(calls[index]) == side_effect
                and not is_folded(calls[index])  # read-only successes: one line per tool
            )
    groups = _groups(calls)
    for index, name in enumerate(_group_names(full)):
        entries = [calls[i] for i in groups.get(name, [])]
        line = render_group(name, entries, full["aggregated"].get(name, 0))
        candidates.append((("group", index), line))
    candidates.extend(
        (("identifier", index), full["identifiers"][index])
        for index in reversed(range(len(full["identifiers"])))
    )
    return candidates


def _group_names(full: Ledger) -> list[str]:
    """Tools with read-only successes, the one called last first; count-only tools last."""
    groups = _groups(full["tool_calls"])
    named = sorted(groups, key=lambda name: groups[name][-1], reverse=True)
    return named + [n for n, count in full["aggregated"].items() if count > 0 and n not in groups]


def _fitting(
    full: Ledger, candidates: Sequence[tuple[_Shown, str]], max_tokens: int, floor: int
) -> list[_Shown]:
    """The candidates taken while their lines fit, after room for headings and counts.

    A kind of line stops at its first misfit, so what is listed is always the newest;
    the first ``floor`` candidates are taken whatever their size.
    """
    calls = full["tool_calls"]
    bare: Ledger = {
        **full,
        "tool_calls": [],
        "aggregated": {},
        "constraints": [],
        "identifiers": [],
    }
    set_artifacts(bare, [], full.get("folded_artifacts", 0) + len(listed_artifacts(full)))
    set_decisions(bare, [], full.get("folded_decisions", 0) + len(ledger_decisions(full)))
    used = count_text(_render(bare, full["aggregated"])) + COUNT_LINES_ROOM
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
    names = _group_names(full)
    tools = {name for index, name in enumerate(names) if ("group", index) in picked}
    view: Ledger = {
        **full,
        "tool_calls": [],
        "aggregated": {n: count for n, count in full["aggregated"].items() if n in tools},
        "folded_calls": {name: dict(counts) for name, counts in full["folded_calls"].items()},
    }
    unlisted = {n: count for n, count in full["aggregated"].items() if n not in tools and count}
    for index, entry in enumerate(full["tool_calls"]):
        if ("call", index) in picked or (is_folded(entry) and entry["name"] in tools):
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
    decisions = ledger_decisions(full)
    shown_decisions = [e for i, e in enumerate(decisions) if ("decision", i) in picked]
    folded = full.get("folded_decisions", 0) + len(decisions) - len(shown_decisions)
    set_decisions(view, shown_decisions, folded)
    return _render(view, unlisted)
