"""A LangChain ``create_agent`` agent with ctxgraph's middleware, served by ``langgraph dev``.

``langgraph.json`` next to this file serves ``graph`` as ``agent``. The agent is LangChain's
own loop (``create_agent``); ``ctxgraph_middleware`` gives it ctxgraph's verified
compaction, long-term memory and offloading (and skills, when ``CTXGRAPH_SKILLS_DIRS``
names skill folders), and its thread state holds ctxgraph's keys (``summary``,
``compaction``, ``memory_view``, ``model_usage``, ...). ``checked_agent`` refuses bad input
(a foreign user, malformed messages, a NUL) before anything is saved; without it the
thread still works, as ctxgraph stores any text it writes losslessly.

The models come from the environment as ctxgraph's own server reads them:
``CTXGRAPH_MODEL=scripted`` runs offline with the demo model (it calls the calculator for
arithmetic), any other name is a chat model (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``);
the ``CTXGRAPH_*`` settings variables set the triggers and budgets. ``make_agent`` takes
the models and settings as arguments, so a test or a script can pass its own.
"""

from __future__ import annotations

import os
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import BaseTool, tool

from ctxgraph import Context, Models, Settings, demo_tools
from ctxgraph.middleware import checked_agent, ctxgraph_middleware

ORDERS = {
    "A-17": "shipped on 2024-05-02 via DHL, tracking 00340434161234567890",
    "B-42": "packed, waiting for the carrier",
}
"""The data behind the example's own tool; a real tool would call your own service."""


@tool
def lookup_order(order_id: str) -> str:
    """Look up the shipping status of an order by its id, for example A-17."""
    status = ORDERS.get(order_id.strip().upper())
    if status is None:
        return f"order {order_id}: not found; known orders are {', '.join(sorted(ORDERS))}"
    return f"order {order_id}: {status}"


TOOLS: list[BaseTool] = [*demo_tools(), lookup_order]
"""The agent's own tools: the demo's calculator and the order lookup."""

SYSTEM_PROMPT = (
    "You answer questions about customer orders. Use lookup_order for any order id the "
    "user mentions, and the calculator for arithmetic."
)


def make_agent(models: Models, settings: Settings, **persistence: Any) -> Any:
    """``create_agent`` with ``models.main``, this module's tools and ctxgraph's middleware.

    Wrapped in ``checked_agent``, so bad input is refused before anything is saved.

    Args:
        models: The agent's model (``main``) and ctxgraph's summary and memory roles.
        settings: ctxgraph's settings; a run's ``Context(settings=...)`` overrides the
            fields it sets.
        **persistence: ``checkpointer=`` and ``store=`` for an agent run outside a
            LangGraph server; leave them out under ``langgraph dev`` or a deployment,
            which supply both.

    Returns:
        The compiled agent; run it with ``context=Context(user_id=...)``.

    """
    agent = create_agent(
        models.main,
        TOOLS,
        system_prompt=SYSTEM_PROMPT,
        middleware=ctxgraph_middleware(models=models, settings=settings),
        context_schema=Context,
        **persistence,
    )
    return checked_agent(agent)


graph = make_agent(Models.from_env(os.environ), Settings.from_env(os.environ))
"""``agent`` in langgraph.json."""
