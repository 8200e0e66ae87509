"""The compaction ledger: tool calls, user constraints and decisions, artifacts, identifiers.

The ledger is made of blocks, one module per noun: ``calls`` (tool-call states),
``constraints`` and ``decisions`` (what the user said, kept verbatim; their entries are
``said``; ``clauses`` cuts a constraint to its clause and keys its repeats), ``artifacts``
and ``identifiers``; ``sentences`` and ``read_only`` say what a user’s
sentence and a tool are to the ledger. Each block derives, merges, bounds, renders
and checks its own keys behind the ``block.Block`` protocol; ``record`` composes them in
a fixed order, ``fields`` holds the record's type, and ``view`` renders and checks it.
This package gathers their public names.
"""

from __future__ import annotations

from ctxgraph.nodes.compaction.ledger.artifacts import MAX_ARTIFACTS, ledger_artifacts
from ctxgraph.nodes.compaction.ledger.calls import (
    CONTRADICTION_MARK,
    FINAL_STATUSES,
    MAX_ARG_CHARS,
    MAX_ARGS,
    MAX_ERROR_CHARS,
    UNKNOWN_TOOL,
    is_folded,
    render_group,
)
from ctxgraph.nodes.compaction.ledger.clauses import constraint_key
from ctxgraph.nodes.compaction.ledger.decisions import ledger_decisions
from ctxgraph.nodes.compaction.ledger.fields import (
    ConstraintEntry,
    DecisionEntry,
    Ledger,
    ToolCallEntry,
    ToolCallStatus,
)
from ctxgraph.nodes.compaction.ledger.read_only import READ_ONLY_PREFIXES, is_read_only
from ctxgraph.nodes.compaction.ledger.record import (
    bound_ledger,
    derive_ledger,
    empty_ledger,
    merge_ledgers,
    read_ledger,
)
from ctxgraph.nodes.compaction.ledger.view import (
    COUNT_LINES_ROOM,
    find_contradictions,
    render_ledger,
    render_ledger_within,
)

__all__ = [
    "CONTRADICTION_MARK",
    "COUNT_LINES_ROOM",
    "FINAL_STATUSES",
    "MAX_ARGS",
    "MAX_ARG_CHARS",
    "MAX_ARTIFACTS",
    "MAX_ERROR_CHARS",
    "READ_ONLY_PREFIXES",
    "UNKNOWN_TOOL",
    "ConstraintEntry",
    "DecisionEntry",
    "Ledger",
    "ToolCallEntry",
    "ToolCallStatus",
    "bound_ledger",
    "constraint_key",
    "derive_ledger",
    "empty_ledger",
    "find_contradictions",
    "is_folded",
    "is_read_only",
    "ledger_artifacts",
    "ledger_decisions",
    "merge_ledgers",
    "read_ledger",
    "render_group",
    "render_ledger",
    "render_ledger_within",
]
