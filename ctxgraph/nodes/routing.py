"""Conditional edges of the graph, as plain functions returning ``Literal`` targets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from ctxgraph.nodes.invalid_calls import has_invalid_calls
from ctxgraph.state.context import Context
from ctxgraph.state.graph_state import AgentState

NextStep = Callable[[AgentState, Runtime[Context]], Literal["compact", "model"]]
"""The router that picks the step before the next model call (the compaction check)."""


def route_after_model(state: AgentState) -> Literal["tools", "invalid_calls", "finish"]:
    """Tool calls go to the tools node, unreadable calls to ``invalid_calls``; else finish.

    An answer with both runs its readable calls first; ``AfterTools`` then sends it on to
    ``invalid_calls``.
    """
    messages = state.get("messages") or []
    if not messages:
        raise ValueError("route_after_model got a state with no messages")
    last = messages[-1]
    if not isinstance(last, AIMessage):
        raise ValueError(
            f"route_after_model expects the model's AIMessage last, got {type(last).__name__}"
        )
    if last.tool_calls:
        return "tools"
    if last.invalid_tool_calls:
        return "invalid_calls"
    return "finish"


class AfterTools:
    """Router after the tools node: unanswered invalid calls first, then ``next_step``."""

    def __init__(self, next_step: NextStep) -> None:
        self._next_step = next_step

    def __call__(
        self, state: AgentState, runtime: Runtime[Context]
    ) -> Literal["invalid_calls", "compact", "model"]:
        """``invalid_calls`` while the answer has unanswered invalid calls, else ``next_step``."""
        if has_invalid_calls(state.get("messages") or []):
            return "invalid_calls"
        return self._next_step(state, runtime)
