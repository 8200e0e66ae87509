"""The ``tools`` node: runs the model's tool calls and returns failures to the model."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode


def tools_node(tools: Sequence[BaseTool]) -> ToolNode:
    """A tool executor whose errors come back as ``ToolMessage(status="error")``."""
    return ToolNode(list(tools), name="tools", handle_tool_errors=True)
