"""The state each ctxgraph middleware adds to a ``create_agent`` agent.

The keys and reducers are those of ctxgraph's own graph (``ctxgraph.state.graph_state``),
so a thread run by ``create_agent`` holds what a ctxgraph thread holds, and the tools that
read ctxgraph threads (``ctxgraph threads show/verify``, ``ctxgraph forget``) read it too.
A key two middleware share has the same type and reducer in both.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentState
from langgraph.channels import UntrackedValue

from ctxgraph.state.calibration import TokenCalibration
from ctxgraph.state.compaction_state import (
    CompactionJob,
    CompactionMark,
    CompactionRetry,
    SummaryRecord,
)
from ctxgraph.state.graph_state import add_refusals
from ctxgraph.state.memory_notes import MemoryNotes, MemorySelection
from ctxgraph.state.placement import MemoryPlacement
from ctxgraph.state.skill_context import SkillContextEntry, merge_skill_context
from ctxgraph.state.tool_unlocks import merge_unlocked
from ctxgraph.state.usage import UsageTotals, add_usage


class CtxgraphState(AgentState[Any]):
    """What every ctxgraph middleware keeps: model usage, token calibration, unlocked tools."""

    model_usage: NotRequired[Annotated[UsageTotals, add_usage]]
    token_calibration: NotRequired[TokenCalibration | None]
    tools_unlocked: NotRequired[Annotated[list[str], merge_unlocked]]


class CompactionState(CtxgraphState):
    """The verified record, the compaction mark and the compaction's retry and job state."""

    summary: NotRequired[SummaryRecord | None]
    compaction: NotRequired[CompactionMark | None]
    compaction_retry: NotRequired[Annotated[CompactionRetry | None, add_refusals]]
    compaction_job: NotRequired[CompactionJob | None]


class MemoryState(CtxgraphState):
    """The turn's memory view, its selection and the window's notes."""

    memory_view: NotRequired[str]
    memory_placement: NotRequired[MemoryPlacement | None]
    memory_selection: NotRequired[MemorySelection | None]
    memory_notes: NotRequired[MemoryNotes | None]
    memory_turn: NotRequired[Annotated[dict[str, Any] | None, UntrackedValue(dict, guard=False)]]


class SkillsState(CtxgraphState):
    """The active skills, kept apart from the messages so compaction never folds them."""

    skill_context: NotRequired[Annotated[list[SkillContextEntry], merge_skill_context]]
