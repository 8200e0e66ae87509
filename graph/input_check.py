"""Rejects malformed input inside the graph's first task, so a bad call writes nothing.

LangGraph saves a task's writes before reducers apply them, and a task that fails after
writing saves its writes along with the error; either way a bad ``messages`` value would
stay in the checkpoint and break every later read of the thread. A task that raises
before it writes saves nothing. So the check runs as the ``bound`` runnable of the
``__start__`` node: a compiled graph's ``nodes`` map node names to Pregel nodes, whose
``bound`` runs before the ``writers`` that copy the input into state, and whose
``channels``, when a list, are read into a dict passed to ``bound``. Reading ``messages``
there gives the check the thread's current messages.

This needs no private name of LangGraph, but it does rely on how ``StateGraph.compile``
lays out ``__start__`` (reads the ``__start__`` channel, runs an identity ``bound``, then
writes). ``attach_input_check`` verifies that layout and raises ``InputCheckLayoutError``
naming this module when a LangGraph upgrade changes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableLambda
from langgraph.graph import START
from langgraph.graph.state import CompiledStateGraph

from ctxgraph.state.messages import check_input

MESSAGES = "messages"
"""The state channel the check reads (the thread's current messages) and validates."""


class InputCheckLayoutError(RuntimeError):
    """The compiled graph's ``__start__`` node no longer has the layout the check needs."""


def _check(value: Mapping[str, Any]) -> Any:
    """Validate the input against the current messages; pass the input on unchanged."""
    update = value[START]
    current = value.get(MESSAGES)
    check_input(list(current) if current else [], update)
    return update


async def _acheck(value: Mapping[str, Any]) -> Any:
    """Async :func:`_check` (the check does no I/O)."""
    return _check(value)


def attach_input_check(compiled: CompiledStateGraph[Any, Any, Any, Any]) -> None:
    """Make the ``__start__`` task validate the input before it is written to state.

    Raises ``InputCheckLayoutError`` when the graph's ``__start__`` node is not laid out
    as this module expects (see the module docstring).
    """
    start = compiled.nodes.get(START)
    if (
        start is None
        or start.channels != START
        or start.triggers != [START]
        or start.mapper is not None
        or not start.writers
        or MESSAGES not in compiled.channels
    ):
        raise InputCheckLayoutError(
            "ctxgraph.graph.input_check: the compiled graph's __start__ node no longer reads "
            "only the __start__ channel and writes the input to state; LangGraph changed how "
            "StateGraph compiles START, so malformed input could be written to the thread. "
            "Update ctxgraph/graph/input_check.py for this LangGraph version."
        )
    compiled.nodes[START] = start.copy(
        {
            "bound": RunnableLambda(_check, afunc=_acheck, name="check_input"),
            "channels": [START, MESSAGES],
        }
    )
