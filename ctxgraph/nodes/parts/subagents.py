"""The subagents part: ``task`` and its node, the delegation record per turn, its updates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool
from langgraph.store.base import BaseStore

from ctxgraph.nodes.part import BeforeModel, Part, PartSetup, Placement, TurnMessage
from ctxgraph.nodes.request import latest_user_index
from ctxgraph.nodes.subagents.delegation import Delegation, build_delegation, delegated_specs
from ctxgraph.nodes.subagents.record import model_update, with_abandoned
from ctxgraph.nodes.subagents.render import delegations_message
from ctxgraph.nodes.subagents.tool import TASK_TOOL, task_tool
from ctxgraph.state.graph_state import AgentState, DelegationState
from ctxgraph.state.settings import Settings
from ctxgraph.state.subagents import SubagentSpec


class SubagentsPart(Part):
    """Delegation as a part.

    ``subagents`` are ``SubagentSpec`` instances, or True for the general-purpose subagent
    alone. With subagents the part makes the ``task`` tool, and, prepared for a graph, the
    child graphs, the router after the model and the ``subagent`` node
    (``self.delegation``); before each model call it marks delegations an earlier run
    left running as cancelled, and it enters the answer's ``task`` calls in the record
    as running. Every graph shows a thread's delegation record before the latest real
    user message.
    """

    rank = 40
    state = DelegationState

    def __init__(
        self,
        subagents: Sequence[SubagentSpec] | bool = (),
        *,
        delegation: Delegation | None = None,
    ) -> None:
        """``delegation`` is set when the part is prepared for a graph with subagents."""
        self.subagents = subagents
        self.delegation = delegation
        # The delegation record's message, rebuilt when the record changes.
        self._cache: tuple[str, HumanMessage | None] | None = None

    def tools(self, setup: PartSetup) -> Sequence[BaseTool]:
        """The ``task`` tool, when the graph delegates."""
        specs = delegated_specs(self.subagents, setup.tools, setup.settings)
        return [] if specs is None else [task_tool(specs)]

    def prepared(self, setup: PartSetup) -> SubagentsPart:
        """A part of its own for one graph, with the graph's delegation."""
        task = next((t for t in setup.tools if t.name == TASK_TOOL), None)
        if task is None:
            return SubagentsPart(self.subagents)
        delegation = build_delegation(
            self.subagents, setup.main, setup.caller_tools, setup.settings, task
        )
        return SubagentsPart(self.subagents, delegation=delegation)

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
        if self.delegation is None:
            return BeforeModel()
        marked_state, marked = with_abandoned(state)
        return BeforeModel(state=marked_state if marked else None, carry=marked)

    def after_reply(
        self, answer: AIMessage, placement: Placement | None, carry: Any
    ) -> Mapping[str, Any]:
        """The ``delegations`` update: the marked entries and the answer's new tasks."""
        if self.delegation is None:
            return {}
        return model_update(answer, list(carry or ()))
