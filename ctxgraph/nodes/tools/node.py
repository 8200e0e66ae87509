"""Builds the ``tools`` node: runs the model's tool calls and returns failures to the model."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode

from ctxgraph.nodes.tools.safe_results import SafeResults
from ctxgraph.nodes.tools.wrappers import ToolWrapper, ToolWrapperChain


def tools_node(tools: Sequence[BaseTool], wrappers: Sequence[ToolWrapper] = ()) -> ToolNode:
    """A tool executor whose errors come back as ``ToolMessage(status="error")``.

    ``wrappers`` run around each tool call, the first outermost; an exception a wrapper
    raises comes back to the model as an error result too. Every result is made storable
    (``SafeResults``: NUL and lone surrogates become U+FFFD) next to the tool, before any
    wrapper sees it, and again after the outermost wrapper.
    """
    safe = SafeResults()
    chain = ToolWrapperChain((safe, *wrappers, safe) if wrappers else (safe,))
    return ToolNode(
        list(tools),
        name="tools",
        handle_tool_errors=True,
        wrap_tool_call=chain.wrap_tool_call,
        awrap_tool_call=chain.awrap_tool_call,
    )
