"""Builds the ``tools`` node: runs the model's tool calls and returns failures to the model."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode

from ctxgraph.nodes.tools.wrappers import ToolWrapper, ToolWrapperChain


def tools_node(tools: Sequence[BaseTool], wrappers: Sequence[ToolWrapper] = ()) -> ToolNode:
    """A tool executor whose errors come back as ``ToolMessage(status="error")``.

    ``wrappers`` run around each tool call, the first outermost; an exception a wrapper
    raises comes back to the model as an error result too.
    """
    if not wrappers:
        return ToolNode(list(tools), name="tools", handle_tool_errors=True)
    chain = ToolWrapperChain(tuple(wrappers))
    return ToolNode(
        list(tools),
        name="tools",
        handle_tool_errors=True,
        wrap_tool_call=chain.wrap_tool_call,
        awrap_tool_call=chain.awrap_tool_call,
    )
