"""The ``read_history`` tool under its earlier import path; it lives in ``nodes.tools.history``."""

from ctxgraph.nodes.tools.history import read_history_tool

__all__ = ["read_history_tool"]
