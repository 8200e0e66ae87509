"""``PairedNode``: one graph node, a sync body for ``invoke`` and an async one for ``ainvoke``."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langgraph.runtime import get_runtime

from ctxgraph.state.context import Context

_Handler = Callable[..., Any]
"""A node body: ``(state, runtime)``, or ``(state, runtime, config)``."""
_AsyncHandler = Callable[..., Awaitable[Any]]
"""The async twin of ``_Handler``."""


class PairedNode(Runnable[Any, Any]):
    """A graph node whose ``invoke`` runs ``sync`` and whose ``ainvoke`` runs ``async_``.

    Both bodies get the state and, as LangGraph gives plain function nodes, the run's
    ``runtime`` and (when they declare a ``config`` parameter) its ``config``. Like a
    plain function node, it opens no callback run of its own: LangGraph's task run for
    the node already covers it, and a second run per node costs a noticeable share of
    each step.
    """

    def __init__(self, sync: _Handler, async_: _AsyncHandler, *, name: str) -> None:
        self.name = name
        self._sync = sync
        self._async = async_
        self._sync_config = "config" in inspect.signature(sync).parameters
        self._async_config = "config" in inspect.signature(async_).parameters

    def invoke(self, input: Any, config: RunnableConfig | None = None, **_: Any) -> Any:
        """Run the sync body."""
        extra = {"config": ensure_config(config)} if self._sync_config else {}
        return self._sync(input, runtime=get_runtime(Context), **extra)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **_: Any) -> Any:
        """Run the async body."""
        extra = {"config": ensure_config(config)} if self._async_config else {}
        return await self._async(input, runtime=get_runtime(Context), **extra)


def paired_node(sync: _Handler, async_: _AsyncHandler, *, name: str) -> PairedNode:
    """The node running ``sync`` in sync runs and ``async_`` in async runs."""
    return PairedNode(sync, async_, name=name)
