"""The ``tools`` node: runs tool calls through a chain of wrappers; built-in tools live here."""

from ctxgraph.nodes.tools.history import read_history_tool
from ctxgraph.nodes.tools.node import tools_node
from ctxgraph.nodes.tools.wrappers import ToolWrapper, ToolWrapperChain

__all__ = ["ToolWrapper", "ToolWrapperChain", "read_history_tool", "tools_node"]
