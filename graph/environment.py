"""Builds the graph the way the CLI and ``langgraph.json`` configure it: from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from ctxgraph.graph.builder import Graph, build_graph
from ctxgraph.graph.demo import demo_tools
from ctxgraph.state.models import SCRIPTED_MODEL_NAME, Models
from ctxgraph.state.settings import Settings


@dataclass(frozen=True)
class EnvironmentConfig:
    """Models, tools and settings as the environment configures them."""

    models: Models
    tools: tuple[BaseTool, ...]
    settings: Settings

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> EnvironmentConfig:
        """Read and validate the configuration; fails before anything is started.

        ``CTXGRAPH_MODEL=scripted`` selects the offline demo model, which comes with the
        one tool it knows how to call.
        """
        scripted = environ.get("CTXGRAPH_MODEL", "").strip() == SCRIPTED_MODEL_NAME
        return cls(
            models=Models.from_env(environ),
            tools=demo_tools() if scripted else (),
            settings=Settings.from_env(environ),
        )

    def build(
        self,
        *,
        checkpointer: BaseCheckpointSaver[str] | None = None,
        store: BaseStore | None = None,
    ) -> Graph:
        """Compile the graph with this configuration and the given persistence."""
        return build_graph(
            checkpointer=checkpointer,
            store=store,
            models=self.models,
            tools=self.tools,
            settings=self.settings,
        )
