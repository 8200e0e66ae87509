"""Rejects malformed input inside the graph's first task, so a bad call writes nothing.

LangGraph saves a task's writes before reducers apply them; a reducer that raised on bad
input would leave those writes behind and break every later read of the thread. A task
that raises saves no writes, so the check runs as the body of the ``__start__`` task.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONF, CONFIG_KEY_READ
from langgraph._internal._runnable import RunnableCallable
from langgraph.graph import START
from langgraph.graph.state import CompiledStateGraph

from ctxgraph.state.messages import check_input


def _current_messages(config: RunnableConfig) -> list[Any]:
    read = config.get(CONF, {}).get(CONFIG_KEY_READ)
    if read is None:
        return []
    value = read("messages", False)
    return list(value) if value else []


def _check(update: Any, config: RunnableConfig) -> Any:
    check_input(_current_messages(config), update)
    return update


def attach_input_check(compiled: CompiledStateGraph[Any, Any, Any, Any]) -> None:
    """Make the ``__start__`` task validate the input before it is written to state."""
    start = compiled.nodes[START]
    compiled.nodes[START] = start.copy({"bound": RunnableCallable(_check, name="check_input")})
