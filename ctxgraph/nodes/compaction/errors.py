"""Compaction's error, and the run inputs (Store, thread id) whose absence raises it."""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore


class CompactionError(RuntimeError):
    """Compaction cannot proceed and the request does not fit; the message says what is big."""


def require_store(store: BaseStore | None) -> BaseStore:
    """The run's Store; without one, say where the Store comes from in each setup."""
    if store is None:
        raise CompactionError(
            "compaction archives folded messages in a LangGraph Store, and this run has "
            "none: pass store= to build_graph; inside a parent graph, add ctxgraph with "
            "ctxgraph.graph.as_subgraph(...) and compile the parent with store= (a "
            "LangGraph server provides one)"
        )
    return store


def thread_id_of(config: RunnableConfig) -> str:
    """The run's thread id; inside a parent graph it is the parent's thread id."""
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        raise CompactionError(
            "compaction needs a thread: pass config={'configurable': {'thread_id': ...}} "
            f"(to the parent graph when ctxgraph runs inside one), got {thread_id!r}"
        )
    return thread_id
