"""Builds the graph the way the CLI and ``langgraph.json`` configure it: from the environment."""

from __future__ import annotations

from collections.abc import Mapping

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from graph.builder import Graph, build_graph
from graph.demo import demo_tools
from state.models import SCRIPTED_MODEL_NAME, Models
from state.settings import Settings


def graph_from_env(
    environ: Mapping[str, str],
    *,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    store: BaseStore | None = None,
) -> Graph:
    """Compile the graph with models and settings read from ``environ``.

    ``CTXGRAPH_MODEL=scripted`` selects the offline demo model, which comes with the one
    tool it knows how to call.
    """
    scripted = environ.get("CTXGRAPH_MODEL", "").strip() == SCRIPTED_MODEL_NAME
    return build_graph(
        checkpointer=checkpointer,
        store=store,
        models=Models.from_env(environ),
        tools=demo_tools() if scripted else (),
        settings=Settings.from_env(environ),
    )
