"""The ``ctxgraph`` command-line interface."""

from ctxgraph.graph.cli.main import main

__all__ = ["main"]
