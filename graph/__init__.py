"""Build the ctxgraph graph: ``build_graph`` compiles it, ``create_builder`` does not.

The names load on first use, so the command line can import ``ctxgraph.graph.cli``
without the whole graph stack.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ctxgraph.graph.builder import Builder, Graph, build_graph, compile_graph, create_builder

__all__ = ["Builder", "Graph", "build_graph", "compile_graph", "create_builder"]


def __getattr__(name: str) -> "Any":
    """Import a builder name the first time it is asked for."""
    if name not in __all__:
        raise AttributeError(f"module 'ctxgraph.graph' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module("ctxgraph.graph.builder"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
