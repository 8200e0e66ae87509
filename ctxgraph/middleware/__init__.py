"""ctxgraph inside ``create_agent``: the parts as LangChain middleware.

``create_agent(model, tools, middleware=ctxgraph_middleware())`` gives an existing agent
ctxgraph's verified compaction, governed memory, offloading and (with skill sources)
enforced skills, with the same parts and nodes the explicit graph runs.
"""

from ctxgraph.middleware.agent_middleware import (
    CompactionMiddleware,
    CtxgraphMiddleware,
    MemoryMiddleware,
    OffloadMiddleware,
    SkillsMiddleware,
    ctxgraph_middleware,
)
from ctxgraph.middleware.checks import checked_agent
from ctxgraph.middleware.host import MiddlewareHost
from ctxgraph.middleware.identity import run_context

__all__ = [
    "CompactionMiddleware",
    "CtxgraphMiddleware",
    "MemoryMiddleware",
    "MiddlewareHost",
    "OffloadMiddleware",
    "SkillsMiddleware",
    "checked_agent",
    "ctxgraph_middleware",
    "run_context",
]
