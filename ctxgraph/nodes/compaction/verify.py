"""Checks a candidate summary before it may replace the old one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from ctxgraph.nodes.compaction.faithfulness import faithfulness_problems
from ctxgraph.nodes.compaction.ledger import derive_ledger, find_contradictions, merge_ledgers
from ctxgraph.nodes.compaction.sections import SECTIONS, render_sections
from ctxgraph.nodes.compaction.triggers import fired_triggers, pressing_kinds
from ctxgraph.nodes.request_size import RequestSize
from ctxgraph.state.settings import Settings
from ctxgraph.state.summary import SUMMARY_SCHEMA_VERSION
from ctxgraph.state.tokens import count_text


def summary_problems(
    summary: Mapping[str, Any],
    settings: Settings,
    *,
    previous: Mapping[str, Any] | None = None,
    folded: Sequence[BaseMessage] = (),
    shown: Sequence[BaseMessage] = (),
) -> list[str]:
    """Schema, size, ledger-consistency and faithfulness problems of a summary record.

    Args:
        summary: The candidate record: schema version, sections and ledger (``degraded``
            set for a model-free one).
        settings: Supplies ``summary_max_tokens``.
        previous: The record it replaces, for the stale check.
        folded: The messages it folds, for the stale check (none: no stale check).
        shown: Messages the summary request showed besides the folded ones (the kept
            messages of a shared-prefix request): a success they hold is evidence for the
            invented-success check, though the record's ledger does not hold it.

    Returns:
        The problems; empty means acceptable. Faithfulness problems start with their
        name (see ``faithfulness``).

    """
    problems: list[str] = []
    if summary.get("schema_version") != SUMMARY_SCHEMA_VERSION:
        problems.append(
            f"schema_version is {summary.get('schema_version')!r}, "
            f"expected {SUMMARY_SCHEMA_VERSION}"
        )
    for key, title in SECTIONS:
        value = summary.get(key)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"section {title} is missing or empty")
    if problems:
        return problems
    text = render_sections(summary)
    size = count_text(text)
    if size > settings.summary_max_tokens:
        problems.append(f"summary is {size} tokens, over {settings.summary_max_tokens}")
    ledger = summary.get("ledger")
    if not isinstance(ledger, dict):
        problems.append("the ledger is missing")
    else:
        problems.extend(find_contradictions(text, ledger))
        evidence: Mapping[str, Any] = ledger
        if shown:
            read_only = frozenset(settings.read_only_tools)
            evidence = merge_ledgers(ledger, derive_ledger(shown, read_only_tools=read_only))
        problems.extend(
            faithfulness_problems(summary, previous=previous, folded=folded, ledger=evidence)
        )
    return problems


def size_problems(
    before: RequestSize, after: RequestSize, settings: Settings, window: int | None
) -> list[str]:
    """The compacted request must bring down what pressed and fire no trigger.

    What pressed is ``pressing_kinds(before, ...)``: after a token (or fraction) trigger
    the request must have fewer tokens; after the message trigger, fewer messages, even
    when the record is larger in tokens than the short messages it folds.
    """
    problems: list[str] = []
    pressing = pressing_kinds(before, settings, window)
    if "tokens" in pressing and after.tokens >= before.tokens:
        problems.append(f"the request would not shrink ({before.tokens} -> {after.tokens} tokens)")
    if "messages" in pressing and after.messages >= before.messages:
        problems.append(
            f"the window would not shrink ({before.messages} -> {after.messages} messages)"
        )
    still = fired_triggers(after, settings, window)
    if still:
        problems.append("the compacted request still fires " + "; ".join(still))
    return problems
