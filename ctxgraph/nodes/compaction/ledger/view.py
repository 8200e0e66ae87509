"""The ledger as the model reads it, in full or within a token budget, and checked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any, cast

from ctxgraph.nodes.compaction.ledger.block import Candidate, Shown
from ctxgraph.nodes.compaction.ledger.fields import Ledger
from ctxgraph.nodes.compaction.ledger.record import BLOCKS, read_ledger
from ctxgraph.nodes.compaction.ledger.said import line_cost
from ctxgraph.state.tokens import count_text

COUNT_LINES_ROOM = 48
"""Tokens a budgeted rendering sets aside for its headings and "not listed" count lines."""


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
    lines: list[str] = []
    for block in BLOCKS:
        lines.extend(block.render(view, lines, unlisted))
    return "\n".join(lines)


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
    found = [candidate for block in BLOCKS for candidate in block.candidates(full)]
    candidates = sorted(found, key=itemgetter(0))  # by priority, each block's order kept
    floor = next((i for i, c in enumerate(candidates) if not c.pinned), len(candidates))
    shown = _fitting(full, candidates, max_tokens, floor)
    text = _render_view(full, shown)
    while len(shown) > floor and count_text(text) > max_tokens:
        shown.pop()
        text = _render_view(full, shown)
    return text


def _fitting(
    full: Ledger, candidates: Sequence[Candidate], max_tokens: int, floor: int
) -> list[Shown]:
    """The candidates taken while their lines fit, after room for headings and counts.

    A group of lines stops at its first misfit, so what is listed is always the newest;
    the first ``floor`` candidates are taken whatever their size.
    """
    bare = cast(Ledger, dict(full))
    unlisted: dict[str, int] = {}
    for block in BLOCKS:
        block.emptied(full, bare, unlisted)
    used = count_text(_render(bare, unlisted)) + COUNT_LINES_ROOM
    shown: list[Shown] = []
    stopped: set[str] = set()
    for candidate in candidates:
        if candidate.group in stopped:
            continue
        cost = line_cost(candidate.line)
        if len(shown) >= floor and used + cost > max_tokens:
            stopped.add(candidate.group)
            continue
        shown.append(candidate.item)
        used += cost
    return shown


def _render_view(full: Ledger, shown: Sequence[Shown]) -> str:
    """``full`` rendered with only the ``shown`` items listed and the rest counted."""
    picked = set(shown)
    view = cast(Ledger, dict(full))
    unlisted: dict[str, int] = {}
    for block in BLOCKS:
        block.view(full, picked, view, unlisted)
    return _render(view, unlisted)


def find_contradictions(summary_text: str, ledger: Mapping[str, Any]) -> list[str]:
    """Sentences of a summary that contradict the record (each block checks its own part).

    A call is named by its id, or by its tool name when all its calls, listed or folded
    into counts, share one status. A success word for a call that is not ``succeeded``, or
    a failure word (and no success word) for one that is, is reported once per sentence
    and call.
    """
    view = read_ledger(ledger)
    return [problem for block in BLOCKS for problem in block.check(summary_text, view)]
