"""Conditional edges of the graph, as plain functions returning ``Literal`` targets."""

from __future__ import annotations

from typing import Literal

from langchain_core.messages import AIMessage

from ctxgraph.state.graph_state import AgentState


def route_after_model(state: AgentState) -> Literal["tools", "finish"]:
    """Tool calls go to the tools node; a final answer finishes the run."""
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
    return "finish"
