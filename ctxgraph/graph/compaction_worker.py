"""The ``compaction_worker`` graph ``langgraph.json`` serves: the one root's compaction worker.

The ``ctxgraph`` graph, served by the same server, queues a thread-less run of it per
background compaction job (see ``compaction_worker_graph``); it counts with the root's
token counter.
"""

from __future__ import annotations

from ctxgraph.graph.compaction_worker_graph import (
    CompactionWorkerError,
    CompactionWorkerGraph,
    CompactionWorkerInput,
    CompactionWorkerOutput,
    CompactionWorkerState,
    build_compaction_worker,
)
from ctxgraph.graph.served import ROOT

__all__ = [
    "CompactionWorkerError",
    "CompactionWorkerGraph",
    "CompactionWorkerInput",
    "CompactionWorkerOutput",
    "CompactionWorkerState",
    "build_compaction_worker",
    "graph",
]

graph = ROOT.compaction_worker()
"""The graph ``langgraph.json`` serves as ``compaction_worker``; the server injects the Store."""
