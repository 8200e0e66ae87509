"""Schemas of the graph's checkpointed state, its input and its output."""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from langchain_core.messages import AnyMessage
from langgraph.channels import UntrackedValue
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from ctxgraph.state.calibration import TokenCalibration
from ctxgraph.state.compaction_state import (
    CompactionJob,
    CompactionMark,
    CompactionRetry,
    SummaryRecord,
)
from ctxgraph.state.delegations import DelegationRecord, merge_delegations
from ctxgraph.state.memory_notes import MemoryNotes, MemorySelection
from ctxgraph.state.placement import MemoryPlacement
from ctxgraph.state.skill_context import SkillContextEntry, merge_skill_context
from ctxgraph.state.tool_unlocks import merge_unlocked
from ctxgraph.state.usage import UsageTotals, add_usage


def add_refusals(
    current: CompactionRetry | None, update: CompactionRetry | None
) -> CompactionRetry | None:
    """Reducer of ``compaction_retry``: ``attempts`` add up, the latest reason wins.

    A refused compaction writes ``{"attempts": 1, "reason": ...}``; a committed one writes
    None, which clears the count.
    """
    if update is None:
        return None
    attempts = int((current or {}).get("attempts", 0)) + int(update.get("attempts", 0))
    merged: CompactionRetry = {**update, "attempts": attempts}
    return merged


class InputState(TypedDict):
    """What a caller sends: new messages for the working window."""

    messages: Annotated[list[AnyMessage], add_messages]


class OutputState(TypedDict):
    """What a caller (or a parent graph) receives back."""

    messages: Annotated[list[AnyMessage], add_messages]
    summary: NotRequired[SummaryRecord | None]


class CoreState(TypedDict):
    """What every host keeps beside the features' state: usage, calibration, unlocked tools."""

    token_calibration: NotRequired[TokenCalibration | None]
    """Reported input tokens per locally counted token of the main model's requests
    (``ctxgraph.state.calibration``): every request size the triggers, budgets and the
    window check compare is the local count times this factor. Absent with a caller's
    ``token_counter``, or before the main model's first answer that reports usage.
    """
    model_usage: NotRequired[Annotated[UsageTotals, add_usage]]
    """Tokens the thread's model calls cost, totalled per role (``ctxgraph.state.usage``):
    the main model's answers and every summary, memory and background call ctxgraph makes
    on its own. Each update adds to the totals; ``ctxgraph threads show T --usage`` prints
    them.
    """
    tools_unlocked: NotRequired[Annotated[list[str], merge_unlocked]]
    """Built-in tools the thread has unlocked (``read_artifact`` and ``grep_artifact`` once
    it had an artifact, ``read_history`` once it had an archive), sorted. A union: a name
    stays once added, so a compaction that folds the stub does not unbind the tool.
    """


class CompactionState(TypedDict):
    """The compaction part's state: the verified record, the mark, the retry and job."""

    summary: NotRequired[SummaryRecord | None]
    """The current verified summary: four sections plus the code-derived ledger."""
    compaction: NotRequired[CompactionMark | None]
    """The compaction mark: version, cursor, checksum and chain hash of the archive."""
    compaction_retry: NotRequired[Annotated[CompactionRetry | None, add_refusals]]
    """After refused compactions: how many in a row (``attempts``) and the last ``reason``.

    Each further attempt keeps fewer messages; a committed compaction clears it.
    """
    compaction_job: NotRequired[CompactionJob | None]
    """Background mode: the job known for the thread's current compaction version
    (``base_version``, ``state`` running/busy/ready, ``since``); cleared by a compaction."""


class MemoryState(TypedDict):
    """The memory part's state: the turn's view, selection, notes and Store reads."""

    memory_view: NotRequired[str]
    """This turn's rendered long-term memory; added to each request, never to ``messages``."""
    memory_placement: NotRequired[MemoryPlacement | None]
    """Where the last main-model request placed the memory view (before which window
    message, for which view); later requests keep it there while the view is unchanged.
    Used only without ``memory_selection`` (tool mode, checkpoints from before notes)."""
    memory_selection: NotRequired[MemorySelection | None]
    """The facts (and profile block) ``load_memory`` chose for this turn, in auto mode;
    the memory part shows those no note of the window shows yet. None in other modes."""
    memory_notes: NotRequired[MemoryNotes | None]
    """The memory notes of the window (``ctxgraph.nodes.memory.notes``): each note's text,
    the window message it precedes and the facts it shows; never in ``messages``."""
    memory_turn: NotRequired[Annotated[dict[str, Any] | None, UntrackedValue(dict, guard=False)]]
    """What this run's memory nodes already read from the Store (the profile, the facts and
    the processed message ids), handed from node to node so each is read once per turn.

    An ``UntrackedValue``: never checkpointed, so every run (and a run resumed after an
    interrupt) starts without it and reads the Store again.
    """


class SkillState(TypedDict):
    """The skills part's state: the active skills."""

    skill_context: NotRequired[Annotated[list[SkillContextEntry], merge_skill_context]]
    """The active skills: de-duplicated by path, most recent last, at most
    ``Settings.max_active_skills``. Kept apart from ``messages``, so compaction never folds it.
    """


class DelegationState(TypedDict):
    """The subagents part's state: the delegation record."""

    delegations: NotRequired[Annotated[DelegationRecord, merge_delegations]]
    """One entry per ``task`` call (type, brief, status, refs), at most 50 with older
    finished ones folded into counts. Kept apart from ``messages``, so compaction never
    folds it; every request renders it.
    """


class AgentState(InputState, CoreState, CompactionState, MemoryState, SkillState, DelegationState):
    """The checkpointed thread state: the window, the core keys, every built-in part's state.

    ``messages`` is the working window only; each part's keys are its ``Part.state``.
    """
