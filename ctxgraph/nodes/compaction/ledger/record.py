"""The ledger record: its blocks composed in a fixed order to read, derive, merge and bound it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import BaseMessage

from ctxgraph.nodes.compaction.ledger.artifacts import ARTIFACTS, MAX_ARTIFACTS
from ctxgraph.nodes.compaction.ledger.block import Block, Bounds, Walk, stored_int
from ctxgraph.nodes.compaction.ledger.calls import CALLS
from ctxgraph.nodes.compaction.ledger.constraints import CONSTRAINTS
from ctxgraph.nodes.compaction.ledger.decisions import DECISIONS
from ctxgraph.nodes.compaction.ledger.fields import Ledger
from ctxgraph.nodes.compaction.ledger.identifiers import IDENTIFIERS

BLOCKS: tuple[Block, ...] = (CALLS, CONSTRAINTS, DECISIONS, ARTIFACTS, IDENTIFIERS)
"""The blocks in the order they derive and render (decisions need the calls; identifiers
list what the lines before them do not show)."""


def _ledger(blocks_set: Mapping[str, Any], user_turns: int) -> Ledger:
    """The record the blocks filled, with its turns."""
    ledger = cast(Ledger, blocks_set)
    ledger["user_turns"] = user_turns
    return ledger


def empty_ledger() -> Ledger:
    """A ledger with nothing in it."""
    return read_ledger(None)


def read_ledger(raw: Mapping[str, Any] | None) -> Ledger:
    """A ledger as stored in a summary, in the current shape, whatever version wrote it.

    Records written before constraints were counted hold them as plain strings; those
    become entries said once, at turn 0 (before turns were numbered). Missing keys read
    as empty. The input is not changed.
    """
    raw = raw or {}
    ledger = cast(Ledger, {})
    for block in BLOCKS:
        block.read(raw, ledger)
    return _ledger(ledger, stored_int(raw.get("user_turns")))


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
    ``sentences``); a decision that a side-effect call of the same turn carried out
    (every identifier it names is among that call's arguments: "Refund A-1030" and a
    ``refund_order(order_id=A-1030)`` call) is recorded by the call's line alone.
    Identifiers come from message text, tool arguments and the results of
    side-effect calls; a read-only result can be read again (and is archived), so its
    contents are not copied into the ledger.
    Artifacts are the offloaded contents the messages refer to (``message_artifacts``).
    """
    walk = Walk(messages, read_only_tools)
    ledger = cast(Ledger, {})
    for block in BLOCKS:
        block.derive(walk, ledger)
    return _ledger(ledger, walk.user_turns)


def merge_ledgers(previous: Mapping[str, Any], new: Mapping[str, Any]) -> Ledger:
    """``previous`` updated with ``new``: calls by id, counts added, lists unioned in order.

    ``new`` numbers its turns from 1, as ``derive_ledger`` does; its constraints' and calls'
    turns are moved past the ``user_turns`` of ``previous`` (a call made before the new
    slice's first user message belongs to the previous record's last turn). Constraints
    said in both are merged into one entry, decisions too, artifacts by ref. Either ledger
    may be in an older stored shape (see ``read_ledger``).
    """
    old, fresh = read_ledger(previous), read_ledger(new)
    merged = cast(Ledger, {})
    for block in BLOCKS:
        block.merge(old, fresh, old["user_turns"], merged)
    return _ledger(merged, old["user_turns"] + fresh["user_turns"])


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
    bounds = Bounds(max_tool_calls, max_identifiers, max_constraint_tokens, max_artifacts)
    if min(max_tool_calls, max_identifiers, max_constraint_tokens or 0, max_artifacts) < 0:
        raise ValueError("ledger bounds must not be negative")
    bounded = read_ledger(ledger)
    for block in BLOCKS:
        block.bound(bounded, bounds)
    return bounded
