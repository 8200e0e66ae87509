"""Build the ctxgraph graph: ``build_graph`` compiles it, ``create_builder`` does not.

``as_subgraph`` gives ctxgraph as a node for a parent graph; ``wait_for_memory`` (and
``await_memory``) waits for this process's background memory extractions. The names load
on first use, so the command line can import ``ctxgraph.graph.cli`` without the whole
graph stack.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ctxgraph.graph.builder import Builder, Graph, build_graph, compile_graph, create_builder
    from ctxgraph.graph.subgraph import SubgraphSetupError, as_subgraph
    from ctxgraph.nodes.memory.runner import await_memory, wait_for_memory

_MODULES = {
    "Builder": "ctxgraph.graph.builder",
    "Graph": "ctxgraph.graph.builder",
    "build_graph": "ctxgraph.graph.builder",
    "compile_graph": "ctxgraph.graph.builder",
    "create_builder": "ctxgraph.graph.builder",
    "SubgraphSetupError": "ctxgraph.graph.subgraph",
    "as_subgraph": "ctxgraph.graph.subgraph",
    "await_memory": "ctxgraph.nodes.memory.runner",
    "wait_for_memory": "ctxgraph.nodes.memory.runner",
}
"""The module each lazily loaded name lives in."""

__all__ = [
    "Builder",
    "Graph",
    "SubgraphSetupError",
    "as_subgraph",
    "await_memory",
    "build_graph",
    "compile_graph",
    "create_builder",
    "wait_for_memory",
]


def __getattr__(name: str) -> "Any":
    """Import a public name the first time it is asked for."""
    if name not in _MODULES:
        raise AttributeError(f"module 'ctxgraph.graph' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(_MODULES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
