"""Long-term memory: filtering, extraction and loading."""

from nodes.memory.render import MemoryBudgetError, render_memory

__all__ = ["MemoryBudgetError", "render_memory"]
