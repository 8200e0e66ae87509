"""ctxgraph: verified compaction and governed long-term memory for LangGraph agents.

The public names below load on first use, so ``import ctxgraph`` (and the command line)
stays fast; ``from ctxgraph import build_graph`` works as usual.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ctxgraph.graph.builder import build_graph, create_builder
    from ctxgraph.graph.subgraph import as_subgraph
    from ctxgraph.state.context import Context
    from ctxgraph.state.models import Models
    from ctxgraph.state.settings import Settings
    from ctxgraph.state.subagents import SubagentSpec
    from ctxgraph.store.memory.repository import MemoryRepository

__version__ = "0.2.0"

_EXPORTS = {
    "build_graph": "ctxgraph.graph.builder",
    "create_builder": "ctxgraph.graph.builder",
    "as_subgraph": "ctxgraph.graph.subgraph",
    "Context": "ctxgraph.state.context",
    "Models": "ctxgraph.state.models",
    "Settings": "ctxgraph.state.settings",
    "SubagentSpec": "ctxgraph.state.subagents",
    "MemoryRepository": "ctxgraph.store.memory.repository",
}

__all__ = [
    "Context",
    "MemoryRepository",
    "Models",
    "Settings",
    "SubagentSpec",
    "__version__",
    "as_subgraph",
    "build_graph",
    "create_builder",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is asked for."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxgraph' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
