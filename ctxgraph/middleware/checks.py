"""ctxgraph's input checks on a compiled ``create_agent`` agent, before anything is saved.

``create_agent`` saves a run's input before the first middleware hook runs, so a run the
middleware refuses (another user's thread) has already written its input, and a
malformed history (a tool result without its call, text no store can hold) is in the
thread before anything looks at it. ``checked_agent`` gives the agent the checks
ctxgraph's own graph runs first (``ctxgraph.graph.input_check``): a bad thread id, a
missing or foreign user, malformed messages and unstorable text are refused before
LangGraph saves anything.
"""

from __future__ import annotations

from typing import Any, TypeVar

from langgraph.graph.state import CompiledStateGraph

from ctxgraph.graph.input_check import attach_input_check

Agent = TypeVar("Agent", bound=CompiledStateGraph[Any, Any, Any, Any])


def checked_agent(agent: Agent) -> Agent:
    """``agent`` (from ``create_agent``) with ctxgraph's input checks, changed in place.

    The checks read the user from ``context=Context(user_id=...)`` only: build the agent
    with ``context_schema=Context``; an identity in another context or in
    ``configurable`` is refused by them.

    Raises:
        InputCheckLayoutError: The compiled graph is not laid out as the checks expect
            (a LangGraph upgrade changed how ``StateGraph`` compiles ``START``).

    """
    attach_input_check(agent)
    return agent
