"""Allows ``python -m ctxgraph.graph.cli``."""

from ctxgraph.graph.cli.main import entry

entry()
