"""The compaction ledger: tool-call states, user constraints and identifiers derived by code.

Each concern has its own module: the record's shape and how stored ledgers read back
(``ledger_record``), derivation and merging (``ledger_derive``), bounds
(``ledger_bound``), rendering (``ledger_render``) and the contradiction check
(``ledger_check``). This module gathers their public names.
"""

from __future__ import annotations

from ctxgraph.nodes.compaction.ledger_bound import MAX_ARTIFACTS, bound_ledger
from ctxgraph.nodes.compaction.ledger_check import find_contradictions
from ctxgraph.nodes.compaction.ledger_derive import (
    FINAL_STATUSES,
    MAX_ARG_CHARS,
    MAX_ARGS,
    MAX_ERROR_CHARS,
    READ_ONLY_PREFIXES,
    UNKNOWN_TOOL,
    derive_ledger,
    is_read_only,
    merge_ledgers,
)
from ctxgraph.nodes.compaction.ledger_record import (
    ConstraintEntry,
    Ledger,
    ToolCallEntry,
    ToolCallStatus,
    constraint_key,
    empty_ledger,
    ledger_artifacts,
    read_ledger,
)
from ctxgraph.nodes.compaction.ledger_render import (
    COUNT_LINES_ROOM,
    is_folded,
    render_group,
    render_ledger,
    render_ledger_within,
)

__all__ = [
    "COUNT_LINES_ROOM",
    "FINAL_STATUSES",
    "MAX_ARGS",
    "MAX_ARG_CHARS",
    "MAX_ARTIFACTS",
    "MAX_ERROR_CHARS",
    "READ_ONLY_PREFIXES",
    "UNKNOWN_TOOL",
    "ConstraintEntry",
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
    "merge_ledgers",
    "read_ledger",
    "render_group",
    "render_ledger",
    "render_ledger_within",
]
