"""Long-term memory: filtering, extraction and loading."""

from ctxgraph.nodes.memory.filter import filter_for_memory
from ctxgraph.nodes.memory.render import MemoryBudgetError, render_memory

__all__ = ["MemoryBudgetError", "filter_for_memory", "render_memory"]
