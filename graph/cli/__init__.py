"""The ``ctxgraph`` command-line interface."""

from graph.cli.main import main

__all__ = ["main"]
