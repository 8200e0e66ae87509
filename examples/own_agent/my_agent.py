"""Your own chat model and tools in a ctxgraph agent, served by ``langgraph dev``.

``langgraph.json`` next to this file serves two graphs:

- ``my_agent`` (``graph``): ctxgraph itself, with the model and the tool defined here;
- ``my_app`` (``app``): a graph of your own, with ctxgraph as one of its nodes.

Both read the chat model from the environment when the server imports this file
(``MY_AGENT_MODEL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``). The functions
``make_graph`` and ``make_app_builder`` take the model as an argument, so a test or
a script can pass any LangChain chat model instead.
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph

from ctxgraph import Context, Models, Settings, as_subgraph, build_graph

ORDERS = {
    "A-17": "shipped on 2024-05-02 via DHL, tracking 00340434161234567890",
    "B-42": "packed, waiting for the carrier",
}
"""The data behind the example tool; a real tool would call your own service."""


@tool
def lookup_order(order_id: str) -> str:
    """Look up the shipping status of an order by its id, for example A-17."""
    status = ORDERS.get(order_id.strip().upper())
    if status is None:
        return f"order {order_id}: not found; known orders are {', '.join(sorted(ORDERS))}"
    return f"order {order_id}: {status}"


TOOLS: list[BaseTool] = [lookup_order]
"""The tools the agent may call, next to ctxgraph's built-in ones."""

SETTINGS = Settings(
    system_prompt="You answer questions about customer orders. Use lookup_order for any "
    "order id the user mentions, and quote the status it returns.",
)
"""Build-time settings; a run's ``Context(settings=...)`` can override single fields."""


def model_from_env() -> BaseChatModel:
    """The chat model named by ``MY_AGENT_MODEL`` (default ``gpt-4o-mini``).

    ``ChatOpenAI`` reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` itself, so any
    OpenAI-compatible endpoint works. Replace this function to use another provider.
    """
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=os.environ.get("MY_AGENT_MODEL", "gpt-4o-mini"), temperature=0)


def make_graph(model: BaseChatModel, **persistence: Any) -> Any:
    """Build ctxgraph with ``model`` in every role and this module's tools.

    Args:
        model: Any LangChain chat model that supports tool calling.
        **persistence: ``checkpointer=`` and ``store=`` for a graph run outside a
            LangGraph server; leave them out under ``langgraph dev`` or a deployment,
            which supply both.

    Returns:
        The compiled ctxgraph graph.

    """
    return build_graph(models=Models(main=model), tools=TOOLS, settings=SETTINGS, **persistence)


def greet(state: MessagesState) -> dict[str, Any]:
    """A node of your own that runs before the agent; here it changes nothing."""
    return {}


def make_app_builder(model: BaseChatModel) -> StateGraph[Any, Any, Any, Any]:
    """Your own graph, ``greet -> assistant``, with ctxgraph as the ``assistant`` node.

    Args:
        model: The chat model ctxgraph uses inside the node.

    Returns:
        The uncompiled builder; compile it with a checkpointer and a Store (a LangGraph
        server supplies both when it serves the compiled graph).

    """
    builder = StateGraph(MessagesState, context_schema=Context)
    builder.add_node("greet", greet)
    builder.add_node(
        "assistant", as_subgraph(models=Models(main=model), tools=TOOLS, settings=SETTINGS)
    )
    builder.add_edge(START, "greet")
    builder.add_edge("greet", "assistant")
    builder.add_edge("assistant", END)
    return builder


_model = model_from_env()
graph = make_graph(_model)
"""``my_agent`` in langgraph.json."""
app = make_app_builder(_model).compile()
"""``my_app`` in langgraph.json."""
