"""Build the ctxgraph graph: ``build_graph`` compiles it, ``create_builder`` does not."""

from ctxgraph.graph.builder import Builder, Graph, build_graph, compile_graph, create_builder

__all__ = ["Builder", "Graph", "build_graph", "compile_graph", "create_builder"]
