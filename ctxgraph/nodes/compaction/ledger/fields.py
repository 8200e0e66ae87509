"""The ledger record's type: each block's keys (its ``*Fields``) and the entries they hold.

The blocks and the record that composes them (``record``) all import it, so no block
imports the record back.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from ctxgraph.nodes.offload.refs import ArtifactMention

ToolCallStatus = Literal["planned", "succeeded", "failed", "cancelled", "unknown"]


class ToolCallEntry(TypedDict):
    """One tool call as code saw it: what was asked and how it ended.

    ``turn`` is the number of real user messages folded into the record up to the call
    (the turns ``ConstraintEntry.last_turn`` counts); it is left out when not known
    (calls recorded before turns were kept, or made before any folded user message).
    """

    id: str
    name: str
    args: dict[str, str]
    status: ToolCallStatus
    error: str | None
    idempotency_key: str | None
    side_effect: bool
    turn: NotRequired[int]
    recovered: NotRequired[bool]
    """True for a call the model wrote as text and ctxgraph made real (left out otherwise)."""


class CallFields(TypedDict):
    """The tool-calls block's keys of the record.

    ``aggregated`` counts folded read-only successes per tool; ``folded_calls`` counts
    the other folded calls per tool and status.
    """

    tool_calls: list[ToolCallEntry]
    aggregated: dict[str, int]
    folded_calls: dict[str, dict[str, int]]


class ConstraintEntry(TypedDict):
    """One user constraint: its latest wording, how often it was said, and when.

    ``first_turn`` and ``last_turn`` number the real user messages folded into the record,
    from 1; 0 marks a turn not known (a record that did not number turns yet, or, for
    ``first_turn``, one that kept only the last).
    """

    text: str
    count: int
    last_turn: int
    first_turn: int


DecisionEntry = ConstraintEntry
"""A user decision is kept as a constraint is: its latest wording, how often, when last."""


class ConstraintFields(TypedDict):
    """The constraints block's keys of the record.

    ``constraints`` are ordered by the turn they were last said, oldest first, and
    ``folded_constraints`` counts those dropped from the record (the messages that said
    them are in the archive).
    """

    constraints: list[ConstraintEntry]
    folded_constraints: int


class DecisionFields(TypedDict):
    """The decisions block's keys of the record, left out while there are none.

    ``decisions`` are kept like constraints; ``folded_decisions`` counts those dropped.
    """

    decisions: NotRequired[list[DecisionEntry]]
    folded_decisions: NotRequired[int]


class ArtifactFields(TypedDict):
    """The artifacts block's keys of the record, left out while there are none.

    ``artifacts`` lists the offloaded content the folded messages refer to, oldest first,
    and ``folded_artifacts`` counts those dropped from the list.
    """

    artifacts: NotRequired[list[ArtifactMention]]
    folded_artifacts: NotRequired[int]


class IdentifierFields(TypedDict):
    """The identifiers block's keys of the record.

    ``identifiers`` are listed, oldest first, once each; ``looked_up`` those only read-only
    lookups touched, the one touched last at the end, and ``folded_looked_up`` counts
    those dropped from it (both left out while empty).
    """

    identifiers: list[str]
    looked_up: NotRequired[list[str]]
    folded_looked_up: NotRequired[int]


class Ledger(CallFields, ConstraintFields, DecisionFields, ArtifactFields, IdentifierFields):
    """Facts that must survive compaction, merged across compactions.

    Each block owns its keys (its ``*Fields`` above); ``user_turns`` is the number
    of real user messages folded so far, which numbers the turns. The optional keys are
    left out while they hold nothing, so a ledger without them keeps its earlier shape.
    """

    user_turns: int
