"""The ``forget`` graph ``langgraph.json`` serves: the one root's forget graph.

It forgets a fact or a text everywhere a user's data holds it (see ``forgetting``).
"""

from __future__ import annotations

from ctxgraph.graph.forgetting import (
    FORGET_GRAPH,
    ForgetGraph,
    ForgetInput,
    ForgetOutput,
    ForgetStoreError,
    build_forget_graph,
)
from ctxgraph.graph.served import ROOT

__all__ = [
    "FORGET_GRAPH",
    "ForgetGraph",
    "ForgetInput",
    "ForgetOutput",
    "ForgetStoreError",
    "build_forget_graph",
    "graph",
]

graph: ForgetGraph = ROOT.forget()
"""The graph ``langgraph.json`` serves as ``forget``; the server injects the Store."""
