"""The compaction part: ``read_history``, the summary in the stable part, the repaired window."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool

from ctxgraph.nodes.compaction.partition import repair_tool_pairs
from ctxgraph.nodes.compaction.render import render_summary
from ctxgraph.nodes.part import Part, PartSetup
from ctxgraph.nodes.tools.history import read_history_tool
from ctxgraph.state.compaction_state import CompactionMark, SummaryRecord
from ctxgraph.state.graph_state import AgentState, CompactionState
from ctxgraph.state.messages import HIDE_FROM_UI_KEY, ORIGIN_KEY
from ctxgraph.state.settings import Settings

SUMMARY_MESSAGE_ID = "ctxgraph-summary"


def summary_message(summary: Mapping[str, Any], version: int, ledger_tokens: int) -> HumanMessage:
    """The summary as a data message: marked by origin, hidden from UIs, never stored."""
    return HumanMessage(
        content=render_summary(summary, version, ledger_tokens),
        id=f"{SUMMARY_MESSAGE_ID}-v{version}",
        additional_kwargs={ORIGIN_KEY: "summary", HIDE_FROM_UI_KEY: True},
    )


class CompactionPart(Part):
    """Compaction as a part: the summary leads the stable part, ``read_history`` reads back.

    ``summary_prompt`` replaces ``SUMMARY_PROMPT`` in every summary call (the ``compact``
    node and the compaction worker take it from here). The window is sent with its tool
    pairs repaired (``repair_tool_pairs``).
    """

    rank = 10
    state = CompactionState

    def __init__(self, summary_prompt: str | None = None) -> None:
        self.summary_prompt = summary_prompt
        # The rendered summary of the latest mark, reused by every request until it changes.
        self._cache: tuple[tuple[str, int], HumanMessage] | None = None

    def tools(self, setup: PartSetup) -> Sequence[BaseTool]:
        """``read_history``, bound once the thread has an archive."""
        return [read_history_tool()]

    def prepared(self, setup: PartSetup) -> CompactionPart:
        """A part of its own for one graph (it caches the rendered summary)."""
        return CompactionPart(self.summary_prompt)

    def window(self, messages: Sequence[AnyMessage]) -> Sequence[AnyMessage]:
        """``messages`` with orphan results dropped and unanswered calls answered."""
        return repair_tool_pairs(messages)[0]

    def stable(self, state: AgentState, settings: Settings) -> Sequence[BaseMessage]:
        """The summary data message, when the thread has a summary."""
        summary = state.get("summary")
        if not summary:
            return ()
        return [self.summary_message(summary, state.get("compaction") or {}, settings)]

    def summary_message(
        self, summary: SummaryRecord, mark: CompactionMark, settings: Settings
    ) -> HumanMessage:
        """The summary message of ``summary`` under ``mark``, rendered once per checksum."""
        checksum = mark.get("checksum")
        key = (str(checksum), settings.ledger_budget)
        if checksum and self._cache and self._cache[0] == key:
            return self._cache[1]
        message = summary_message(summary, int(mark.get("version", 0)), settings.ledger_budget)
        if checksum:
            self._cache = (key, message)
        return message
