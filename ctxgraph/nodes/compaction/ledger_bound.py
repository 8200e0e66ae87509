"""Keeps a ledger within its bounds: the oldest entries fold into counts, the newest stay."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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
from ctxgraph.nodes.compaction.ledger_render import line_cost, render_constraint

MAX_ARTIFACTS = 50
"""Artifact refs the ledger lists (the newest); older ones are counted in ``folded_artifacts``."""


def _fold_rank(entry: ToolCallEntry) -> int:
    """The order calls fold in: 0 folds first, 3 last.

    Read-only successes, then read-only non-successes, side-effect successes and
    side-effect non-successes (a side effect of unknown outcome goes last).
    """
    return (2 if entry.get("side_effect", True) else 0) + (entry["status"] != "succeeded")


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
      said last always stays, verbatim. The user's decisions are kept by the same rule
      within the same number of tokens, a budget of their own (``folded_decisions``
      counts those folded), so they never push a constraint out.
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
            fold_call(bounded, calls[index])
        bounded["tool_calls"] = [e for index, e in enumerate(calls) if index not in folded]
    identifiers = bounded["identifiers"]
    bounded["identifiers"] = identifiers[max(0, len(identifiers) - max_identifiers) :]
    if max_constraint_tokens is not None:
        constraints = bounded["constraints"]
        kept = _newest_within(constraints, max_constraint_tokens)
        bounded["constraints"] = constraints[len(constraints) - kept :]
        bounded["folded_constraints"] += len(constraints) - kept
        decisions = ledger_decisions(bounded)
        kept = _newest_within(decisions, max_constraint_tokens)
        dropped = len(decisions) - kept
        set_decisions(bounded, decisions[dropped:], bounded.get("folded_decisions", 0) + dropped)
    artifacts = listed_artifacts(bounded)
    dropped = max(0, len(artifacts) - max_artifacts)
    set_artifacts(bounded, artifacts[dropped:], bounded.get("folded_artifacts", 0) + dropped)
    return bounded


def _newest_within(constraints: Sequence[ConstraintEntry], max_tokens: int) -> int:
    """How many of the newest constraints fit ``max_tokens`` (at least one, if any)."""
    used = kept = 0
    for entry in reversed(constraints):
        used += line_cost(render_constraint(entry))
        if kept and used > max_tokens:
            break
        kept += 1
    return kept
