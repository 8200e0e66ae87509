"""The ``memory_worker`` graph ``langgraph.json`` serves: the one root's memory worker.

It processes the items ``memory_extraction="deferred"`` leaves, and those a background
extraction left queued when its process stopped, with the root's extraction prompt,
ranker and token counter (see ``memory_worker_graph``).
"""

from __future__ import annotations

from ctxgraph.graph.memory_worker_graph import (
    WorkerGraph,
    WorkerInput,
    WorkerOutput,
    WorkerState,
    WorkerStoreError,
    build_worker_graph,
)
from ctxgraph.graph.served import ROOT

__all__ = [
    "WorkerGraph",
    "WorkerInput",
    "WorkerOutput",
    "WorkerState",
    "WorkerStoreError",
    "build_worker_graph",
    "graph",
]

graph = ROOT.memory_worker()
"""The worker graph ``langgraph.json`` serves as ``memory_worker``; the server injects the Store."""
