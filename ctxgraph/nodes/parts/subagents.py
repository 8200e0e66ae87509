"""The subagents part: the ``task`` tool, the delegation record per turn, its updates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool
from langgraph.store.base import BaseStore

from ctxgraph.nodes.part import BeforeModel, Part, PartSetup, Placement, TurnMessage
from ctxgraph.nodes.request import latest_user_index
from ctxgraph.nodes.subagents.record import model_update, with_abandoned
from ctxgraph.nodes.subagents.render import delegations_message
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.settings import Settings
from ctxgraph.state.subagents import SubagentSpec


class SubagentsPart(Part):
    """Delegation as a part.

    ``subagents`` are ``SubagentSpec`` instances, or True for the general-purpose subagent
    alone; the graph builds the ``task`` tool and the ``subagent`` node from them. Every
    graph shows a thread's delegation record before the latest real user message. Given
    the ``task`` tool (a graph with subagents), the part binds it, marks delegations an
    earlier run left running as cancelled before each model call, and enters the
    answer's ``task`` calls in the record as running.
    """

    rank = 40

    def __init__(
        self, subagents: Sequence[SubagentSpec] | bool = (), *, task: BaseTool | None = None
    ) -> None:
        self.subagents = subagents
        self.task = task
        # The delegation record's message, rebuilt when the record changes.
        self._cache: tuple[str, HumanMessage | None] | None = None

    def tools(self, setup: PartSetup) -> Sequence[BaseTool]:
        """The ``task`` tool, when the graph delegates."""
        return [] if self.task is None else [self.task]

    def prepared(self, setup: PartSetup) -> SubagentsPart:
        """A part of its own for one graph (it caches the record's message)."""
        return SubagentsPart(self.subagents, task=self.task)

    def per_turn(self, state: AgentState, window: Sequence[BaseMessage]) -> Sequence[TurnMessage]:
        """The delegation record, before the latest real user message."""
        record = state.get("delegations")
        if not record:
            return ()
        key = repr(record)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, delegations_message(record))
        message = self._cache[1]
        return [] if message is None else [TurnMessage(latest_user_index(window), message)]

    def before_model(
        self, state: AgentState, settings: Settings, store: BaseStore | None
    ) -> BeforeModel:
        """Marks the delegations an earlier run left running as cancelled."""
        if self.task is None:
            return BeforeModel()
        marked_state, marked = with_abandoned(state)
        return BeforeModel(state=marked_state if marked else None, carry=marked)

    def after_reply(
        self, answer: AIMessage, placement: Placement | None, carry: Any
    ) -> Mapping[str, Any]:
        """The ``delegations`` update: the marked entries and the answer's new tasks."""
        if self.task is None:
            return {}
        return model_update(answer, list(carry or ()))
