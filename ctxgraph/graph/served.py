"""The one root ``langgraph.json``'s four graphs come from, configured by the environment.

``agent.py``, ``memory_worker.py``, ``compaction_worker.py`` and ``forget_graph.py`` each
serve one graph of ``ROOT``; nothing is read from the environment until a graph is built
(the workers read the models when a run starts).
"""

from __future__ import annotations

import os

from ctxgraph.graph.root import CtxGraph

ROOT = CtxGraph.from_env(os.environ)
"""The root of the served graphs."""
